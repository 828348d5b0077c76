//! Configuration flags shared by `flush` and `plan`; they take precedence
//! over `REX_*` variables and `rex.toml` (see `rex.toml(5)`).

use std::path::PathBuf;

use rexctl::config::{Config, ConfigLayer};

/// The job and controller settings a command line may override.
#[derive(clap::Args, Debug, Default)]
pub struct ConfigArgs {
    /// The job's L1 directory [env: REX_L1; rex.toml: l1].
    #[arg(long)]
    pub l1: Option<PathBuf>,
    /// The L2 directory [env: REX_L2; rex.toml: l2].
    #[arg(long)]
    pub l2: Option<PathBuf>,
    /// Configuration file, instead of ./rex.toml and /etc/rex/rex.toml
    /// [env: REX_CONFIG].
    #[arg(long)]
    pub config: Option<PathBuf>,
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
