//! Configuration flags: [`ConfigArgs`], shared by `flush` and `plan`, and
//! [`StoreArgs`], shared by the commands that name their L2 location on the
//! command line. They take precedence over `REX_*` (and `AWS_*`) variables
//! and `rex.toml` (see `rex.toml(5)`).

use std::path::{Path, PathBuf};

use rexctl::control::config::{Config, ConfigLayer};
use rexctl::store::Store;
use rexctl::store::settings::StoreSettings;

/// The job and controller settings a command line may override.
#[derive(clap::Args, Debug, Default)]
pub struct ConfigArgs {
    /// The job's L1 directory [env: REX_L1; rex.toml: l1].
    #[arg(long)]
    pub l1: Option<PathBuf>,
    /// The L2 location: a directory, file:///DIR or s3://BUCKET/PREFIX
    /// [env: REX_L2; rex.toml: l2].
    #[arg(long, value_name = "URL")]
    pub l2: Option<PathBuf>,
    /// Configuration file, instead of ./rex.toml and /etc/rex/rex.toml
    /// [env: REX_CONFIG].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The job's name, the first level of its prefix in a bucket (default:
    /// SLURM_JOB_ID, else "job") [env: REX_JOB].
    #[arg(long)]
    pub job: Option<String>,
    /// The rank within the job, the second level of the prefix (default:
    /// SLURM_PROCID, else "0") [env: REX_RANK].
    #[arg(long)]
    pub rank: Option<String>,
    /// Pattern size for new chains, bytes [env: REX_PATTERN_SIZE].
    #[arg(long)]
    pub pattern_size: Option<u32>,
    /// Mean time between failures, seconds (default 10000) [env: REX_MTBF].
    #[arg(long)]
    pub mtbf: Option<f64>,
    /// Push when the oldest pending checkpoint is older than this, seconds
    /// [env: REX_MAX_AGE].
    #[arg(long)]
    pub max_age: Option<f64>,
    /// Push when pending L1 data exceeds this many bytes
    /// [env: REX_MAX_PENDING_BYTES].
    #[arg(long)]
    pub max_pending_bytes: Option<u64>,
    /// Take a complete coalescence when the chain reaches this many
    /// generations (default 64) [env: REX_MAX_CHAIN_LENGTH].
    #[arg(long)]
    pub max_chain_length: Option<u64>,
    /// Chains kept in L2 (default 2) [env: REX_KEEP_CHAINS_L2].
    #[arg(long)]
    pub keep_chains: Option<usize>,
}

impl ConfigArgs {
    /// Resolves the configuration with these flags on top.
    pub fn load(&self) -> rexctl::Result<Config> {
        let flags = ConfigLayer {
            l1: self.l1.clone(),
            l2: self.l2.clone(),
            job: self.job.clone(),
            rank: self.rank.clone(),
            pattern_size: self.pattern_size,
            mtbf_s: self.mtbf,
            max_age_s: self.max_age,
            max_pending_bytes: self.max_pending_bytes,
            max_chain_length: self.max_chain_length,
            keep_chains_l2: self.keep_chains,
            ..Default::default()
        };
        Config::load(flags, self.config.as_deref())
    }
}

/// How to reach an L2 store named on the command line: the job and rank of
/// its prefix in a bucket, the configuration file with the S3 settings, the
/// cache directory.
#[derive(clap::Args, Debug, Default)]
pub struct StoreArgs {
    /// The job's name, the first level of its prefix in a bucket (default:
    /// SLURM_JOB_ID, else "job") [env: REX_JOB; rex.toml: job].
    #[arg(long)]
    pub job: Option<String>,
    /// The rank within the job, the second level of the prefix (default:
    /// SLURM_PROCID, else "0") [env: REX_RANK; rex.toml: rank].
    #[arg(long)]
    pub rank: Option<String>,
    /// Configuration file with the S3 settings, instead of ./rex.toml and
    /// /etc/rex/rex.toml [env: REX_CONFIG].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where objects read from a bucket are cached while the command runs
    /// (default: the system's temporary directory) [env: REX_CACHE_DIR;
    /// rex.toml: cache_dir].
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

impl StoreArgs {
    /// The store settings with these flags on top.
    pub fn settings(&self) -> rexctl::Result<StoreSettings> {
        let flags = ConfigLayer {
            job: self.job.clone(),
            rank: self.rank.clone(),
            cache_dir: self.cache_dir.clone(),
            ..Default::default()
        };
        StoreSettings::load(flags, self.config.as_deref())
    }

    /// Opens the L2 store at `l2`; with `create`, a missing directory is
    /// created.
    pub fn open(&self, l2: &Path, create: bool) -> rexctl::Result<Box<dyn Store>> {
        rexctl::store::open_l2(l2, &self.settings()?, create)
    }
}
