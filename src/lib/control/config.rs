//! Configuration: flags, `REX_*` environment variables and TOML files.
//!
//! Precedence, highest first: command-line flags, `REX_*` environment
//! variables (and, for the S3 keys, the usual `AWS_*` ones after them),
//! `./rex.toml`, the user's `$XDG_CONFIG_HOME/rex/rex.toml`,
//! `/etc/rex/rex.toml`. `--config FILE` (or `REX_CONFIG`) names one file
//! that replaces the default files. Every key is optional; unknown keys are
//! errors (a typo must not silently fall back to a default). Documented in
//! `rex.toml(5)`.
//!
//! Every setting has one name: the key `keep_chains_l2`, the flag
//! `--keep-chains-l2`, the variable `REX_KEEP_CHAINS_L2`. [`ConfigLayer`]
//! is both the TOML schema and the clap definition of the flags (clap's
//! `env` reads the variables), so every command of the CLI reads the same
//! settings the same way, and librex reads them through the same
//! definitions ([`ConfigLayer::from_env`]).
//!
//! [`Config`] is what `flush`, `plan`, `push-l2` and librex need (a whole
//! job); the commands that only read L2 resolve the [`StoreSettings`]: the
//! job and rank that name the job's prefix in a bucket, the S3 endpoint,
//! credentials and tuning, and the local cache directory. No job name is a
//! valid state for a directory L2, never for a bucket: two jobs must not
//! share a prefix by default.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::control::controller::IntervalTable;
use crate::error::{Error, Result};
use crate::format::chunked::{Encoding, WriteFormat};
use crate::l2::dedup::HashChoice;
use crate::store::settings::{MIN_S3_PART_SIZE, S3Settings, Secret, StoreSettings};

/// One layer of configuration: every key optional.
///
/// One name per setting: the `rex.toml` key `max_age`, the flag
/// `--max-age` and the variable `REX_MAX_AGE` are the same setting. The
/// struct is at once the TOML schema (serde) and the command line's
/// settings (clap, which also reads the `REX_*` variables), so the three
/// can never drift apart. Secrets and the librex-only keys have no flag (a
/// secret on a command line is visible in `ps`); [`ConfigLayer::from_env`]
/// reads their variables. Keys renamed for this rule keep their old TOML
/// name as an alias (`mtbf_s`, `max_age_s`, `read_rate_mbps`,
/// `s3_*timeout_s`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
#[command(next_help_heading = "Settings (flag, REX_* variable or rex.toml key, see rex.toml(5))")]
pub struct ConfigLayer {
    /// The job's L1 directory.
    #[arg(long, env = "REX_L1", value_name = "DIR")]
    #[serde(serialize_with = "crate::format::json_path::opt_path")]
    pub l1: Option<PathBuf>,
    /// The L2 location: a directory, file:///DIR or s3://BUCKET/PREFIX.
    #[arg(long, env = "REX_L2", value_name = "URL")]
    #[serde(serialize_with = "crate::format::json_path::opt_path")]
    pub l2: Option<PathBuf>,
    /// The job's name, the first level of its prefix in a bucket (default:
    /// the scheduler's job id: SLURM_JOB_ID, PBS_JOBID, LSB_JOBID,
    /// FLUX_JOB_ID).
    #[arg(long, env = "REX_JOB", value_name = "NAME")]
    pub job: Option<String>,
    /// The rank within the job, the second level of the prefix (default:
    /// the launcher's rank: SLURM_PROCID, PMIX_RANK, PMI_RANK,
    /// OMPI_COMM_WORLD_RANK, FLUX_TASK_RANK; else 0).
    #[arg(long, env = "REX_RANK", value_name = "RANK")]
    pub rank: Option<String>,
    /// Pattern size for new chains, bytes (default 32; at most a page).
    #[arg(
        long,
        env = "REX_PATTERN_SIZE",
        value_name = "BYTES",
        hide_short_help = true
    )]
    pub pattern_size: Option<u32>,
    /// Mean time between failures, seconds (default 10000).
    #[arg(long, env = "REX_MTBF", value_name = "SECS", hide_short_help = true)]
    #[serde(alias = "mtbf_s")]
    pub mtbf: Option<f64>,
    /// Replaces the paper's Table 1 (rex.toml only).
    #[arg(skip)]
    pub interval_table: Option<IntervalTable>,
    /// An L2 checkpoint is due when the oldest pending L1 checkpoint is older
    /// than this, seconds.
    #[arg(long, env = "REX_MAX_AGE", value_name = "SECS", hide_short_help = true)]
    #[serde(alias = "max_age_s")]
    pub max_age: Option<f64>,
    /// An L2 checkpoint is due when pending L1 data exceeds this, bytes.
    #[arg(
        long,
        env = "REX_MAX_PENDING_BYTES",
        value_name = "BYTES",
        hide_short_help = true
    )]
    pub max_pending_bytes: Option<u64>,
    /// Chains kept in L2 (default 2).
    #[arg(
        long,
        env = "REX_KEEP_CHAINS_L2",
        value_name = "N",
        alias = "keep-chains",
        hide_short_help = true
    )]
    pub keep_chains_l2: Option<usize>,
    /// Chains kept in L1 (default 1).
    #[arg(
        long,
        env = "REX_KEEP_CHAINS_L1",
        value_name = "N",
        hide_short_help = true
    )]
    pub keep_chains_l1: Option<usize>,
    /// A complete coalescence is taken when the chain would grow past this
    /// many generations (default 64).
    #[arg(
        long,
        env = "REX_MAX_CHAIN_LENGTH",
        value_name = "N",
        hide_short_help = true
    )]
    pub max_chain_length: Option<u64>,
    /// A complete coalescence is taken when the chain's generations predict
    /// it at most this share larger, in L2 bytes, than the ΔRPS of the
    /// same batch (0..=1, default 0: about the same bytes).
    #[arg(
        long,
        env = "REX_FULL_BYTES_MARGIN",
        value_name = "SHARE",
        hide_short_help = true
    )]
    pub full_bytes_margin: Option<f64>,
    /// MPI jobs: the most page hashes the ranks agree on per collective
    /// push (the table `T` of shared pages; a power of two in 1024..=2^20,
    /// default 65536).
    #[arg(
        long,
        env = "REX_COLLECTIVE_TABLE",
        value_name = "N",
        hide_short_help = true
    )]
    pub collective_table: Option<usize>,
    /// MPI jobs: copies of each L1 checkpoint, K (1: the rank's own only;
    /// K > 1: K - 1 partners also hold it, minus the pages they already
    /// have). Default 1; for `rexctl replicate`, whose work is the
    /// copies, 2.
    #[arg(long, env = "REX_REPLICAS", value_name = "K", hide_short_help = true)]
    pub replicas: Option<u32>,
    /// DeD-Table hash functions (default crc32).
    #[arg(long, env = "REX_HASH", value_enum, hide_short_help = true)]
    pub hash: Option<HashChoice>,
    /// zstd level of the L2 entropy stage, -7..=22; 0 stores chunks raw
    /// (default 3).
    #[arg(
        long,
        env = "REX_ZSTD_LEVEL",
        value_name = "LEVEL",
        allow_negative_numbers = true,
        hide_short_help = true
    )]
    pub zstd_level: Option<i32>,
    /// Stronger zstd level used where it pays, -7..=22 (default 9): RPS
    /// chunks in groups of 32, when a sample of the group's first chunk is
    /// at least 2 % smaller at this level; Pointer File chunks always; at
    /// or below zstd_level, never.
    #[arg(
        long,
        env = "REX_ZSTD_LEVEL_MAX",
        value_name = "LEVEL",
        allow_negative_numbers = true,
        hide_short_help = true
    )]
    pub zstd_level_max: Option<i32>,
    /// Most memory a push's DeD-Table may take, bytes (default 2 GiB,
    /// about 19 bytes per indexed pattern: the table and each new
    /// pattern's source location). Past it, new patterns are still stored
    /// but no longer indexed, so later copies of them are stored again:
    /// a larger L2, never more memory than this.
    #[arg(
        long,
        env = "REX_DEDUP_MEMORY",
        value_name = "BYTES",
        hide_short_help = true
    )]
    pub dedup_memory: Option<u64>,
    /// Threads for the work spread over cores: compressing chunks in a
    /// push, decoding chunks and rebuilding pages in a restore, reading
    /// pages in capture (default: the cores; capture: up to 4).
    #[arg(long, env = "REX_THREADS", value_name = "N", hide_short_help = true)]
    pub threads: Option<usize>,
    /// L2 format version written: 3, or 4 for Pointer Files that refer to
    /// previous versions (smaller L2, slower restores), 2 for readers older
    /// than the coded P-Table index, 1 for readers older than the entropy
    /// stage (default 3).
    #[arg(
        long,
        env = "REX_L2_VERSION",
        value_name = "VERSION",
        hide_short_help = true
    )]
    pub l2_version: Option<u32>,
    /// L2 read rate for restore-cost estimates, MB/s (default: the measured
    /// upload rate of past pushes, else 200).
    #[arg(
        long,
        env = "REX_READ_RATE",
        value_name = "MBPS",
        hide_short_help = true
    )]
    #[serde(alias = "read_rate_mbps")]
    pub read_rate: Option<f64>,
    /// Where objects read from a bucket are cached while a command runs
    /// (default: the system's temporary directory); a fresh subdirectory is
    /// made per run and removed afterwards.
    #[arg(
        long,
        env = "REX_CACHE_DIR",
        value_name = "DIR",
        hide_short_help = true
    )]
    #[serde(serialize_with = "crate::format::json_path::opt_path")]
    pub cache_dir: Option<PathBuf>,
    /// S3 endpoint URL (default: AWS's, from the region; also
    /// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL).
    #[arg(
        long,
        env = "REX_S3_ENDPOINT",
        value_name = "URL",
        hide_short_help = true
    )]
    pub s3_endpoint: Option<String>,
    /// S3 region (default us-east-1; also AWS_REGION, AWS_DEFAULT_REGION).
    #[arg(
        long,
        env = "REX_S3_REGION",
        value_name = "REGION",
        hide_short_help = true
    )]
    pub s3_region: Option<String>,
    /// Allow a plain-HTTP S3 endpoint (default false; also AWS_ALLOW_HTTP).
    #[arg(long, env = "REX_S3_ALLOW_HTTP", value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new(), hide_short_help = true)]
    pub s3_allow_http: Option<bool>,
    /// S3 access key id (also AWS_ACCESS_KEY_ID).
    #[arg(
        long,
        env = "REX_S3_ACCESS_KEY_ID",
        value_name = "ID",
        hide_short_help = true
    )]
    pub s3_access_key_id: Option<String>,
    /// S3 secret access key: REX_S3_SECRET_ACCESS_KEY, AWS_SECRET_ACCESS_KEY
    /// or rex.toml; no flag.
    #[arg(skip)]
    pub s3_secret_access_key: Option<Secret>,
    /// S3 session token (temporary credentials): REX_S3_SESSION_TOKEN,
    /// AWS_SESSION_TOKEN or rex.toml; no flag.
    #[arg(skip)]
    pub s3_session_token: Option<Secret>,
    /// Retries of a failed S3 request (5xx, timeout, connection reset).
    #[arg(
        long,
        env = "REX_S3_MAX_RETRIES",
        value_name = "N",
        hide_short_help = true
    )]
    pub s3_max_retries: Option<usize>,
    /// Give up retrying an S3 request after this long, seconds.
    #[arg(
        long,
        env = "REX_S3_RETRY_TIMEOUT",
        value_name = "SECS",
        hide_short_help = true
    )]
    #[serde(alias = "s3_retry_timeout_s")]
    pub s3_retry_timeout: Option<f64>,
    /// Timeout of one S3 request, seconds.
    #[arg(
        long,
        env = "REX_S3_TIMEOUT",
        value_name = "SECS",
        hide_short_help = true
    )]
    #[serde(alias = "s3_timeout_s")]
    pub s3_timeout: Option<f64>,
    /// Timeout of connecting to the S3 endpoint, seconds.
    #[arg(
        long,
        env = "REX_S3_CONNECT_TIMEOUT",
        value_name = "SECS",
        hide_short_help = true
    )]
    #[serde(alias = "s3_connect_timeout_s")]
    pub s3_connect_timeout: Option<f64>,
    /// Part size of multipart uploads, bytes.
    #[arg(
        long,
        env = "REX_S3_PART_SIZE",
        value_name = "BYTES",
        hide_short_help = true
    )]
    pub s3_part_size: Option<u64>,
    /// Parts of one multipart upload in flight at once.
    #[arg(
        long,
        env = "REX_S3_PARTS_IN_FLIGHT",
        value_name = "N",
        hide_short_help = true
    )]
    pub s3_parts_in_flight: Option<usize>,
    /// Ranged GETs in flight at once, over all the objects a command
    /// reads (a restore streams every file of the lineage together).
    #[arg(
        long,
        env = "REX_S3_GET_CONCURRENCY",
        value_name = "N",
        hide_short_help = true
    )]
    pub s3_get_concurrency: Option<usize>,
    /// librex: whether the library pushes L2 checkpoints from its own
    /// background thread (default true); false leaves it to `rexctl flush`.
    /// REX_L2_THREAD or rex.toml.
    #[arg(skip)]
    pub l2_thread: Option<bool>,
    /// librex: the dirty-page tracker (default auto). REX_TRACKER or
    /// rex.toml.
    #[arg(skip)]
    pub tracker: Option<TrackerChoice>,
}

/// The dirty-page tracker of a job that checkpoints itself (librex).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrackerChoice {
    /// userfaultfd's kernel-resolved write protection (Linux 6.7) for the
    /// regions it can take, `mprotect` for the others (`job/auto.rs`).
    #[default]
    Auto,
    /// `mprotect` + SIGSEGV, as the REX paper's AIC.
    Mprotect,
    /// userfaultfd write-protect (Linux 5.13 and later), its faults
    /// resolved by the kernel itself where it can (Linux 6.7:
    /// `UFFD_FEATURE_WP_ASYNC`, every kind of memory but huge pages), else
    /// by a thread of the library (private anonymous memory only).
    Userfaultfd,
    /// userfaultfd write-protect with the library's fault thread even
    /// where the kernel could resolve the faults itself.
    #[serde(rename = "userfaultfd-thread")]
    UserfaultfdThread,
}

impl ConfigLayer {
    /// Fills the keys `self` lacks from `lower`.
    pub fn or(self, lower: ConfigLayer) -> ConfigLayer {
        ConfigLayer {
            l1: self.l1.or(lower.l1),
            l2: self.l2.or(lower.l2),
            job: self.job.or(lower.job),
            rank: self.rank.or(lower.rank),
            pattern_size: self.pattern_size.or(lower.pattern_size),
            mtbf: self.mtbf.or(lower.mtbf),
            interval_table: self.interval_table.or(lower.interval_table),
            max_age: self.max_age.or(lower.max_age),
            max_pending_bytes: self.max_pending_bytes.or(lower.max_pending_bytes),
            keep_chains_l2: self.keep_chains_l2.or(lower.keep_chains_l2),
            keep_chains_l1: self.keep_chains_l1.or(lower.keep_chains_l1),
            max_chain_length: self.max_chain_length.or(lower.max_chain_length),
            full_bytes_margin: self.full_bytes_margin.or(lower.full_bytes_margin),
            collective_table: self.collective_table.or(lower.collective_table),
            replicas: self.replicas.or(lower.replicas),
            hash: self.hash.or(lower.hash),
            zstd_level: self.zstd_level.or(lower.zstd_level),
            zstd_level_max: self.zstd_level_max.or(lower.zstd_level_max),
            dedup_memory: self.dedup_memory.or(lower.dedup_memory),
            threads: self.threads.or(lower.threads),
            l2_version: self.l2_version.or(lower.l2_version),
            read_rate: self.read_rate.or(lower.read_rate),
            cache_dir: self.cache_dir.or(lower.cache_dir),
            s3_endpoint: self.s3_endpoint.or(lower.s3_endpoint),
            s3_region: self.s3_region.or(lower.s3_region),
            s3_allow_http: self.s3_allow_http.or(lower.s3_allow_http),
            s3_access_key_id: self.s3_access_key_id.or(lower.s3_access_key_id),
            s3_secret_access_key: self.s3_secret_access_key.or(lower.s3_secret_access_key),
            s3_session_token: self.s3_session_token.or(lower.s3_session_token),
            s3_max_retries: self.s3_max_retries.or(lower.s3_max_retries),
            s3_retry_timeout: self.s3_retry_timeout.or(lower.s3_retry_timeout),
            s3_timeout: self.s3_timeout.or(lower.s3_timeout),
            s3_connect_timeout: self.s3_connect_timeout.or(lower.s3_connect_timeout),
            s3_part_size: self.s3_part_size.or(lower.s3_part_size),
            s3_parts_in_flight: self.s3_parts_in_flight.or(lower.s3_parts_in_flight),
            s3_get_concurrency: self.s3_get_concurrency.or(lower.s3_get_concurrency),
            l2_thread: self.l2_thread.or(lower.l2_thread),
            tracker: self.tracker.or(lower.tracker),
        }
    }

    /// Reads a TOML file. A file that cannot be read is a configuration
    /// error (exit code 5), like a file that does not parse.
    pub fn from_file(path: &Path) -> Result<ConfigLayer> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Invalid(format!("configuration file {}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
    }

    /// Reads the `REX_*` variables of the process (through the same clap
    /// definitions as the command line's flags; an empty variable counts as
    /// unset), then the variables of the keys that have no flag, then the
    /// `AWS_*` variables of the S3 keys. A value that does not parse is an
    /// error naming the variable.
    pub fn from_env() -> Result<ConfigLayer> {
        use clap::{Args, FromArgMatches};
        use std::ffi::OsString;
        let cmd = ConfigLayer::augment_args(clap::Command::new("rex").no_binary_name(true));
        let vars: Vec<(String, OsString)> = cmd
            .get_arguments()
            .filter_map(|a| Some((a.get_long()?.to_string(), a.get_env()?.to_os_string())))
            .collect();
        // The variables become flags, each checked alone so that an error
        // names it; clap reads no variable itself here.
        let plain = cmd.mut_args(|a| a.env(None::<&str>));
        let mut argv: Vec<OsString> = Vec::new();
        for (long, var) in vars {
            let Some(value) = std::env::var_os(&var).filter(|v| !v.is_empty()) else {
                continue;
            };
            // `--flag=value`, so that a value starting with '-' is a value.
            let mut arg = OsString::from(format!("--{long}="));
            arg.push(&value);
            if let Err(e) = plain.clone().try_get_matches_from([arg.clone()]) {
                let text = e.to_string();
                let first = text.lines().next().unwrap_or_default();
                return Err(Error::Invalid(format!(
                    "{}={:?}: {}",
                    var.to_string_lossy(),
                    value.to_string_lossy(),
                    first.trim_start_matches("error: ")
                )));
            }
            argv.push(arg);
        }
        let parsed = plain
            .try_get_matches_from(argv)
            .and_then(|m| ConfigLayer::from_arg_matches(&m))
            .map_err(|e| Error::Invalid(format!("REX_* variables: {e}")))?;
        Ok(parsed.or(ConfigLayer::env_without_flags(|k| std::env::var(k).ok())?))
    }

    /// The keys that have no flag (secrets, librex's), and the `AWS_*`
    /// variables of the S3 keys, read through `get` (the environment, or a
    /// map in tests). `REX_*` names come before `AWS_*` ones.
    pub fn env_without_flags(get: impl Fn(&str) -> Option<String>) -> Result<ConfigLayer> {
        let text = |vars: &[&str]| {
            vars.iter()
                .find_map(|v| get(v).filter(|x| !x.trim().is_empty()))
        };
        let boolean = |var: &str| -> Result<Option<bool>> {
            match text(&[var]) {
                None => Ok(None),
                Some(v) => parse_bool(&v)
                    .map(Some)
                    .ok_or_else(|| Error::Invalid(format!("{var}={v:?}: expected true or false"))),
            }
        };
        let tracker = match text(&["REX_TRACKER"]).as_deref() {
            None => None,
            Some("auto") => Some(TrackerChoice::Auto),
            Some("mprotect") => Some(TrackerChoice::Mprotect),
            Some("userfaultfd") => Some(TrackerChoice::Userfaultfd),
            Some("userfaultfd-thread") => Some(TrackerChoice::UserfaultfdThread),
            Some(v) => {
                return Err(Error::Invalid(format!(
                    "REX_TRACKER={v:?}: expected auto, mprotect, userfaultfd or userfaultfd-thread"
                )));
            }
        };
        Ok(ConfigLayer {
            s3_endpoint: text(&["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]),
            s3_region: text(&["AWS_REGION", "AWS_DEFAULT_REGION"]),
            s3_allow_http: boolean("AWS_ALLOW_HTTP")?,
            s3_access_key_id: text(&["AWS_ACCESS_KEY_ID"]),
            s3_secret_access_key: text(&["REX_S3_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"])
                .map(Secret),
            s3_session_token: text(&["REX_S3_SESSION_TOKEN", "AWS_SESSION_TOKEN", "AWS_TOKEN"])
                .map(Secret),
            l2_thread: boolean("REX_L2_THREAD")?,
            tracker,
            ..Default::default()
        })
    }
}

/// The resolved configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// The job's L1 directory.
    #[serde(serialize_with = "crate::format::json_path::path")]
    pub l1: PathBuf,
    /// The L2 location as given (a directory or a URL; see [`crate::store::open_l2`]).
    #[serde(serialize_with = "crate::format::json_path::path")]
    pub l2: PathBuf,
    /// Pattern size for new chains.
    pub pattern_size: u32,
    /// MTBF, seconds.
    pub mtbf_s: f64,
    /// The interval table.
    pub interval_table: IntervalTable,
    /// Maximum age of the oldest pending checkpoint, seconds.
    pub max_age_s: Option<f64>,
    /// Maximum pending bytes.
    pub max_pending_bytes: Option<u64>,
    /// Chains kept in L2.
    pub keep_chains_l2: usize,
    /// Chains kept in L1.
    pub keep_chains_l1: usize,
    /// Maximum chain length (generations).
    pub max_chain_length: u64,
    /// The bytes rule's margin ([`crate::control::flush`]).
    pub full_bytes_margin: f64,
    /// MPI jobs: the size of the table of shared page hashes.
    pub collective_table: usize,
    /// MPI jobs: copies of each L1 checkpoint (the rank's own included).
    pub replicas: u32,
    /// DeD-Table hash.
    pub hash: HashChoice,
    /// What a push writes (container version, zstd level, threads).
    pub write_format: WriteFormat,
    /// Most memory a push's DeD-Table may take, bytes.
    pub dedup_memory: u64,
    /// Threads for a push and a restore.
    pub threads: usize,
    /// Configured L2 read rate, MB/s.
    pub read_rate_mbps: Option<f64>,
    /// How to reach the L2 store.
    pub store: StoreSettings,
    /// librex: push L2 checkpoints from the library's background thread.
    pub l2_thread: bool,
    /// librex: the dirty-page tracker.
    pub tracker: TrackerChoice,
    /// The files that were read, highest precedence first.
    #[serde(serialize_with = "crate::format::json_path::paths")]
    pub sources: Vec<PathBuf>,
}

pub use crate::durable::default_threads;

/// Most threads a setting may ask for: more only fail to start (helper-46:
/// 100000 aborted the push).
pub const MAX_THREADS: usize = 1024;

/// Largest number of seconds a duration setting takes (about 31 years).
pub const MAX_SECONDS: f64 = 1e9;

/// `threads` checked: 1 ..= [`MAX_THREADS`].
pub fn check_threads(n: usize) -> Result<usize> {
    if (1..=MAX_THREADS).contains(&n) {
        Ok(n)
    } else {
        Err(Error::Invalid(format!(
            "threads {n} must be between 1 and {MAX_THREADS}"
        )))
    }
}

/// A count that must be at least 1 (a chain kept, ...): 0 is refused
/// (exit 5) rather than silently raised.
fn at_least_one(key: &str, n: usize) -> Result<usize> {
    if n == 0 {
        return Err(Error::Invalid(format!("{key} must be at least 1")));
    }
    Ok(n)
}
fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Whether `s` can name a job or a rank: one path segment of letters,
/// digits, `.`, `_`, `-`, `=` (not `.` or `..`).
fn valid_segment(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-=".contains(&b))
}

impl StoreSettings {
    /// Resolves the store settings from flags over the environment and the
    /// configuration files (as [`Config::load`], without needing `l1`).
    pub fn load(flags: ConfigLayer, config: Option<&Path>) -> Result<StoreSettings> {
        let loaded = ConfigLayer::load(flags, config)?;
        Self::resolve(&loaded.layer, |k| std::env::var(k).ok())
            .map_err(|e| loaded.origins.annotate(e))
    }

    /// Applies defaults (`SLURM_JOB_ID`, `SLURM_PROCID` through `env`) and
    /// checks values.
    pub fn resolve(l: &ConfigLayer, env: impl Fn(&str) -> Option<String>) -> Result<StoreSettings> {
        let from_env = |k: &str| {
            env(k)
                .filter(|v| !v.trim().is_empty())
                .map(|v| v.trim().to_string())
        };
        // A scheduler's id, made a path segment: Flux's F58 ids start
        // with 'ƒ'; anything else outside the segment alphabet becomes '_'.
        let scheduler = |vars: &[&str]| {
            vars.iter().find_map(|v| from_env(v)).map(|id| {
                id.replace('ƒ', "f")
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || "._-=".contains(c) {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect::<String>()
            })
        };
        let job = l
            .job
            .clone()
            .or_else(|| scheduler(&["SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID"]));
        let rank = l
            .rank
            .clone()
            .or_else(|| scheduler(&LAUNCHER_RANKS))
            .unwrap_or_else(|| "0".into());
        for (key, v) in [("job", job.as_deref()), ("rank", Some(rank.as_str()))] {
            if let Some(v) = v
                && !valid_segment(v)
            {
                return Err(Error::Invalid(format!(
                    "{key} {v:?} cannot name a prefix: use letters, digits, '.', '_', '-' or '='"
                )));
            }
        }
        let d = S3Settings::default();
        let seconds = |name: &str, v: Option<f64>, default: f64| -> Result<f64> {
            match v {
                None => Ok(default),
                // At most about 31 years: a larger one overflowed the
                // timers (helper-46: a panic).
                Some(v) if v.is_finite() && v > 0.0 && v <= MAX_SECONDS => Ok(v),
                Some(v) => Err(Error::Invalid(format!(
                    "{name} {v} must be a positive number of seconds, at most {MAX_SECONDS:e}"
                ))),
            }
        };
        let part_size = l.s3_part_size.unwrap_or(d.part_size);
        if !(MIN_S3_PART_SIZE..=5 << 30).contains(&part_size) {
            return Err(Error::Invalid(format!(
                "s3_part_size {part_size} must be between 5 MiB ({MIN_S3_PART_SIZE}) and 5 GiB (S3's part limits)"
            )));
        }
        let count = |name: &str, v: Option<usize>, default: usize, max: usize| -> Result<usize> {
            let v = v.unwrap_or(default);
            if (1..=max).contains(&v) {
                Ok(v)
            } else {
                Err(Error::Invalid(format!(
                    "{name} {v} must be between 1 and {max}"
                )))
            }
        };
        if let Some(e) = &l.s3_endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(Error::Invalid(format!(
                "s3_endpoint {e:?} must be an http:// or https:// URL"
            )));
        }
        Ok(StoreSettings {
            job,
            rank,
            cache_dir: l.cache_dir.clone(),
            s3: S3Settings {
                endpoint: l.s3_endpoint.clone(),
                region: l.s3_region.clone(),
                allow_http: l.s3_allow_http,
                access_key_id: l.s3_access_key_id.clone(),
                secret_access_key: l.s3_secret_access_key.clone(),
                session_token: l.s3_session_token.clone(),
                max_retries: match l.s3_max_retries.unwrap_or(d.max_retries) {
                    n @ 0..=100 => n,
                    n => {
                        return Err(Error::Invalid(format!("s3_max_retries {n} is above 100")));
                    }
                },
                retry_timeout_s: seconds(
                    "s3_retry_timeout",
                    l.s3_retry_timeout,
                    d.retry_timeout_s,
                )?,
                timeout_s: seconds("s3_timeout", l.s3_timeout, d.timeout_s)?,
                connect_timeout_s: seconds(
                    "s3_connect_timeout",
                    l.s3_connect_timeout,
                    d.connect_timeout_s,
                )?,
                part_size,
                parts_in_flight: count(
                    "s3_parts_in_flight",
                    l.s3_parts_in_flight,
                    d.parts_in_flight,
                    64,
                )?,
                get_concurrency: count(
                    "s3_get_concurrency",
                    l.s3_get_concurrency,
                    d.get_concurrency,
                    256,
                )?,
                intent_refresh_s: d.intent_refresh_s,
            },
        })
    }
}

/// The default configuration files, highest precedence first: `./rex.toml`,
/// the user's (`$XDG_CONFIG_HOME/rex/rex.toml`, else
/// `$HOME/.config/rex/rex.toml`), `/etc/rex/rex.toml`.
pub fn default_files(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("rex.toml")];
    let xdg = env("XDG_CONFIG_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        });
    if let Some(x) = xdg {
        files.push(x.join("rex").join("rex.toml"));
    }
    files.push(PathBuf::from("/etc/rex/rex.toml"));
    files
}

/// Default MTBF (paper §4): 10,000 s.
pub const DEFAULT_MTBF_S: f64 = 10_000.0;
/// Default maximum chain length (a push's, which the controller keeps too).
pub use crate::l2::push::DEFAULT_MAX_CHAIN_LENGTH;
/// Default margin of the bytes rule ([`crate::control::flush`]).
pub const DEFAULT_FULL_BYTES_MARGIN: f64 = 0.0;

impl Config {
    /// Resolves `flags` over the environment and the configuration files.
    /// `config` is an explicit file (`--config`), replacing the default ones.
    pub fn load(flags: ConfigLayer, config: Option<&Path>) -> Result<Config> {
        let loaded = ConfigLayer::load(flags, config)?;
        let origins = loaded.origins;
        Self::resolve(loaded.layer, loaded.sources).map_err(|e| origins.annotate(e))
    }
}

impl ConfigLayer {
    /// Merges `flags` over the environment and the configuration files
    /// (`config`, an explicit file, or `REX_CONFIG`, replaces the default
    /// ones); returns the merged layer and the files read, highest
    /// precedence first. The default files, each filling what the ones
    /// before it lack: `./rex.toml`, the user's
    /// `$XDG_CONFIG_HOME/rex/rex.toml` (`~/.config/rex/rex.toml`), and
    /// `/etc/rex/rex.toml`.
    pub fn load(flags: ConfigLayer, config: Option<&Path>) -> Result<Loaded> {
        let env = ConfigLayer::from_env()?;
        let (given, env_keys) = (flags.keys_set(), env.keys_set());
        let from_env = |k: &str| !given.iter().any(|g| g == k) && env_keys.iter().any(|e| e == k);
        Self::load_over(flags.or(env), config, &from_env)
    }

    /// As [`ConfigLayer::load`], for a layer that already holds the flags
    /// and the `REX_*` variables of the flags (what clap parsed for the
    /// command line): reads only the variables without a flag and the
    /// files, so a flag overrides a variable that would not parse.
    /// `from_env` tells which keys of `args` came from their `REX_*`
    /// variable rather than a flag (clap's value source), so that a value
    /// error can name where the value was set.
    pub fn load_over(
        args: ConfigLayer,
        config: Option<&Path>,
        from_env: &dyn Fn(&str) -> bool,
    ) -> Result<Loaded> {
        let flags = args;
        let env = ConfigLayer::env_without_flags(|k| std::env::var(k).ok())?;
        use clap::Args;
        let mut origins = Origins::default();
        let defs = ConfigLayer::augment_args(clap::Command::new("rex"));
        for key in flags.keys_set() {
            let arg = defs.get_arguments().find(|a| a.get_id() == key.as_str());
            let origin = match (from_env(&key), arg) {
                (true, Some(a)) if a.get_env().is_some() => format!(
                    "set by the variable {}",
                    a.get_env().unwrap_or_default().to_string_lossy()
                ),
                (true, _) => "set in the environment".to_string(),
                (false, Some(a)) if a.get_long().is_some() => {
                    format!("set by --{}", a.get_long().unwrap_or_default())
                }
                (false, _) => "set by the caller".to_string(),
            };
            origins.note(key, origin);
        }
        for key in env.keys_set() {
            origins.note(key, "set in the environment".to_string());
        }
        let explicit = config.map(Path::to_path_buf).or_else(|| {
            std::env::var("REX_CONFIG")
                .ok()
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        let mut sources = Vec::new();
        let mut files = ConfigLayer::default();
        let candidates = match explicit {
            Some(p) => vec![(p, true)],
            None => default_files(|k| std::env::var_os(k))
                .into_iter()
                .map(|p| (p, false))
                .collect(),
        };
        for (p, named) in candidates {
            if named || p.is_file() {
                let file = ConfigLayer::from_file(&p)?;
                for key in file.keys_set() {
                    origins.note(key, format!("set in {}", p.display()));
                }
                files = files.or(file);
                sources.push(p);
            }
        }
        Ok(Loaded {
            layer: flags.or(env).or(files),
            sources,
            origins,
        })
    }

    /// The keys this layer sets (its TOML names).
    pub fn keys_set(&self) -> Vec<String> {
        let mut keys: Vec<String> = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, _)| k)
                .collect(),
            _ => Vec::new(),
        };
        // JSON has no NaN nor infinity (they become null, like an unset
        // key), TOML has both: so that a value refused for being NaN still
        // says where it was set (helper-73).
        if let Ok(toml::Value::Table(t)) = toml::Value::try_from(self) {
            for (k, v) in t {
                if v.as_float().is_some_and(|f| !f.is_finite()) && !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        keys
    }
}

/// The merged settings of one command and where each came from.
#[derive(Debug)]
pub struct Loaded {
    /// The merged layer.
    pub layer: ConfigLayer,
    /// The configuration files read, highest precedence first.
    pub sources: Vec<PathBuf>,
    /// Where each key of `layer` was set.
    pub origins: Origins,
}

/// Where each setting of a merged [`ConfigLayer`] was set: a flag, a
/// variable, the environment, or a configuration file. A value that does
/// not pass [`Config::resolve`] or [`StoreSettings::resolve`] is then
/// reported with its origin ("zstd_level 99 is outside -7..=22 (set by
/// the variable REX_ZSTD_LEVEL)"), since the key alone does not say which
/// of the three places a user must fix.
#[derive(Clone, Debug, Default)]
pub struct Origins(std::collections::BTreeMap<String, String>);

impl Origins {
    /// Records `origin` for `key` unless a layer of higher precedence (noted
    /// first) already set it.
    fn note(&mut self, key: String, origin: String) {
        self.0.entry(key).or_insert(origin);
    }

    /// Where `key` was set, if it was.
    pub fn of(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Adds the origin of the setting a value error names: the value
    /// errors of [`Config::resolve`] and [`StoreSettings::resolve`] start
    /// with the key's name (`"zstd_level 99 is outside ..."`).
    pub fn annotate(&self, e: Error) -> Error {
        match e {
            Error::Invalid(m) => {
                let key = m
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or_default();
                match self.of(key) {
                    Some(origin) => Error::Invalid(format!("{m} ({origin})")),
                    None => Error::Invalid(m),
                }
            }
            e => e,
        }
    }
}

/// The job's L1 directory (`key` "l1") or L2 location ("l2") as set,
/// refused when missing or empty. An empty one is a mistake, not the
/// current directory: `status` showed an L2 "not made yet" and `flush -n`
/// a push that `push-l2` then refused (helper-46).
pub fn required_path(key: &str, v: Option<PathBuf>) -> Result<PathBuf> {
    let (what, flag) = match key {
        "l1" => ("L1 directory", "l1"),
        _ => ("L2 location", "l2"),
    };
    match v {
        None => Err(Error::Invalid(format!(
            "no {what}: give --{flag}, REX_{} or `{flag}` in rex.toml",
            flag.to_uppercase()
        ))),
        Some(p) if p.as_os_str().is_empty() => {
            Err(Error::Invalid(format!("{key} is empty: name the {what}")))
        }
        Some(p) => Ok(p),
    }
}

impl Config {
    /// Applies defaults and checks values.
    pub fn resolve(l: ConfigLayer, sources: Vec<PathBuf>) -> Result<Config> {
        let store = StoreSettings::resolve(&l, |k| std::env::var(k).ok())?;
        let l1 = required_path("l1", l.l1)?;
        let l2 = required_path("l2", l.l2)?;
        let pattern_size = l.pattern_size.unwrap_or(32);
        if !pattern_size.is_power_of_two() || !(16..=1 << 20).contains(&pattern_size) {
            return Err(Error::Invalid(format!(
                "pattern_size {pattern_size} is not a power of two from 16 to 1048576 (1 MiB)"
            )));
        }
        let mtbf_s = l.mtbf.unwrap_or(DEFAULT_MTBF_S);
        if !(mtbf_s.is_finite() && mtbf_s > 0.0) {
            return Err(Error::Invalid(format!(
                "mtbf {mtbf_s} must be a positive number of seconds"
            )));
        }
        let interval_table = l.interval_table.unwrap_or_default();
        interval_table.check()?;
        for (name, v) in [("max_age", l.max_age), ("read_rate", l.read_rate)] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(Error::Invalid(format!(
                    "{name} {v} must be a positive finite number"
                )));
            }
        }
        let max_chain_length = l.max_chain_length.unwrap_or(DEFAULT_MAX_CHAIN_LENGTH);
        if max_chain_length == 0 {
            return Err(Error::Invalid("max_chain_length must be at least 1".into()));
        }
        let full_bytes_margin = l.full_bytes_margin.unwrap_or(DEFAULT_FULL_BYTES_MARGIN);
        if !(0.0..=1.0).contains(&full_bytes_margin) {
            return Err(Error::Invalid(format!(
                "full_bytes_margin {full_bytes_margin} is not in 0..=1"
            )));
        }
        let collective_table = l.collective_table.unwrap_or(1 << 16);
        if !collective_table.is_power_of_two() || !(1 << 10..=1 << 20).contains(&collective_table) {
            return Err(Error::Invalid(format!(
                "collective_table {collective_table} is not a power of two in 1024..=1048576"
            )));
        }
        let replicas = l.replicas.unwrap_or(1);
        if !(1..=16).contains(&replicas) {
            return Err(Error::Invalid(format!(
                "replicas {replicas} is not in 1..=16"
            )));
        }
        let threads = match l.threads {
            Some(n) => check_threads(n)?,
            None => default_threads(),
        };
        let level = l
            .zstd_level
            .unwrap_or(crate::format::chunked::DEFAULT_LEVEL);
        let max_level = l
            .zstd_level_max
            .unwrap_or(crate::format::chunked::DEFAULT_LEVEL_MAX);
        for (key, v) in [("zstd_level", level), ("zstd_level_max", max_level)] {
            if !(-7..=22).contains(&v) {
                return Err(Error::Invalid(format!("{key} {v} is outside -7..=22")));
            }
        }
        let l2_version = l.l2_version.unwrap_or(crate::format::chunked::L2_VERSION);
        let Some(base) = WriteFormat::for_l2_version(l2_version) else {
            return Err(Error::Invalid(format!(
                "l2_version {l2_version}: this rexctl writes versions 1 to 4"
            )));
        };
        let write_format = WriteFormat {
            encoding: Encoding {
                level,
                max_level,
                threads,
            },
            ..base
        };
        Ok(Config {
            l1,
            l2,
            pattern_size,
            mtbf_s,
            interval_table,
            max_age_s: l.max_age,
            max_pending_bytes: l.max_pending_bytes,
            keep_chains_l2: at_least_one("keep_chains_l2", l.keep_chains_l2.unwrap_or(2))?,
            keep_chains_l1: at_least_one("keep_chains_l1", l.keep_chains_l1.unwrap_or(1))?,
            max_chain_length,
            full_bytes_margin,
            collective_table,
            replicas,
            hash: l.hash.unwrap_or_default(),
            write_format,
            dedup_memory: l
                .dedup_memory
                .unwrap_or(crate::l2::dedup::DEFAULT_DEDUP_MEMORY),
            threads,
            read_rate_mbps: l.read_rate,
            store,
            l2_thread: l.l2_thread.unwrap_or(true),
            tracker: l.tracker.unwrap_or_default(),
            sources,
        })
    }
}

/// The launchers' variables that give a process its rank, first found first.
const LAUNCHER_RANKS: [&str; 5] = [
    "SLURM_PROCID",
    "PMIX_RANK",
    "PMI_RANK",
    "OMPI_COMM_WORLD_RANK",
    "FLUX_TASK_RANK",
];

/// The rank `l` (`--rank`, REX_RANK, rex.toml) or a launcher's variable
/// (SLURM_PROCID, PMIX_RANK, PMI_RANK, OMPI_COMM_WORLD_RANK, FLUX_TASK_RANK,
/// read through `env`) names; `None` when nothing does (the rank is then 0
/// by default, which a restore does not hold against a chain: a lost
/// rank's chain is often restored from a login node).
pub fn named_rank(l: &ConfigLayer, env: impl Fn(&str) -> Option<String>) -> Option<String> {
    l.rank.clone().or_else(|| {
        LAUNCHER_RANKS
            .iter()
            .find_map(|v| env(v).filter(|v| !v.trim().is_empty()))
            .map(|v| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};
    use std::collections::HashMap;

    /// The layer clap makes of command-line flags (no environment is read
    /// for the flags given).
    fn flags(args: &[&str]) -> ConfigLayer {
        let cmd = ConfigLayer::augment_args(clap::Command::new("t").no_binary_name(true));
        ConfigLayer::from_arg_matches(&cmd.try_get_matches_from(args).unwrap()).unwrap()
    }

    #[test]
    fn flags_beat_env_beat_files() {
        // The old key names still read, as aliases.
        let file: ConfigLayer = toml::from_str(
            "l1 = \"/f/l1\"\nl2 = \"/f/l2\"\nmtbf_s = 5.0\npattern_size = 64\nmax_chain_length = 7\nmax_age = 9\n",
        )
        .unwrap();
        let env_map: HashMap<&str, &str> = [("AWS_REGION", "eu-1")].into();
        let env =
            ConfigLayer::env_without_flags(|k| env_map.get(k).map(|v| v.to_string())).unwrap();
        let c = Config::resolve(
            flags(&["--l2", "/flag/l2", "--mtbf", "6"]).or(env).or(file),
            vec![],
        )
        .unwrap();
        assert_eq!(c.l1, PathBuf::from("/f/l1"));
        assert_eq!(c.l2, PathBuf::from("/flag/l2"));
        assert_eq!(c.mtbf_s, 6.0);
        assert_eq!(c.max_age_s, Some(9.0));
        assert_eq!(c.pattern_size, 64);
        assert_eq!(c.max_chain_length, 7);
        assert_eq!(c.keep_chains_l2, 2);
        assert_eq!(c.store.s3.region.as_deref(), Some("eu-1"));
    }

    /// One name per setting: every flag is the key with '-' for '_', and
    /// its variable is REX_ and the key in capitals.
    #[test]
    fn one_name_per_setting() {
        let cmd = ConfigLayer::augment_args(clap::Command::new("t"));
        let mut n = 0;
        for a in cmd.get_arguments() {
            let key = a.get_id().as_str();
            assert_eq!(a.get_long(), Some(key.replace('_', "-").as_str()), "{key}");
            let env = a.get_env().and_then(|e| e.to_str()).unwrap_or_default();
            assert_eq!(env, format!("REX_{}", key.to_ascii_uppercase()), "{key}");
            // The key is a key of rex.toml.
            let one: std::result::Result<ConfigLayer, _> = toml::from_str(&format!("{key} = 1\n"));
            assert!(
                one.as_ref()
                    .err()
                    .is_none_or(|e| !e.to_string().contains("unknown field")),
                "{key}: {one:?}"
            );
            n += 1;
        }
        assert!(n >= 24, "{n} settings with a flag");
    }

    /// rex.toml and REX_TRACKER spell the trackers alike.
    #[test]
    fn trackers_are_named_alike_in_the_file_and_the_environment() {
        for (name, t) in [
            ("auto", TrackerChoice::Auto),
            ("mprotect", TrackerChoice::Mprotect),
            ("userfaultfd", TrackerChoice::Userfaultfd),
            ("userfaultfd-thread", TrackerChoice::UserfaultfdThread),
        ] {
            let file: ConfigLayer = toml::from_str(&format!("tracker = \"{name}\"\n")).unwrap();
            assert_eq!(file.tracker, Some(t), "{name}");
            let env =
                ConfigLayer::env_without_flags(|k| (k == "REX_TRACKER").then(|| name.to_string()))
                    .unwrap();
            assert_eq!(env.tracker, Some(t), "{name}");
        }
    }

    #[test]
    fn bad_values_are_configuration_errors() {
        assert!(
            toml::from_str::<ConfigLayer>("l1 = \"x\"\nmtbf_seconds = 3\n").is_err(),
            "unknown key"
        );
        let env =
            ConfigLayer::env_without_flags(|k| (k == "REX_TRACKER").then(|| "soon".to_string()));
        assert!(matches!(env, Err(Error::Invalid(m)) if m.contains("REX_TRACKER")));
        let l = ConfigLayer {
            l1: Some("a".into()),
            l2: Some("b".into()),
            pattern_size: Some(24),
            ..Default::default()
        };
        assert!(Config::resolve(l, vec![]).is_err());
        let table: ConfigLayer = toml::from_str(
            "l1 = \"a\"\nl2 = \"b\"\n[interval_table]\nic = [0.25, 1.0]\ncr = [1.0, 4.0]\nchi = [[8.0, 6.0], [5.0]]\n",
        )
        .unwrap();
        assert!(Config::resolve(table, vec![]).is_err());
        // A configuration file that is missing is a configuration error.
        let missing = ConfigLayer::from_file(Path::new("/nonexistent/rex.toml"));
        assert!(matches!(missing, Err(Error::Invalid(m)) if m.contains("/nonexistent/rex.toml")));
    }

    #[test]
    fn a_replacement_table_parses() {
        let l: ConfigLayer = toml::from_str(
            "l1 = \"a\"\nl2 = \"b\"\n[interval_table]\nic = [0.25, 1.0]\ncr = [1.0, 4.0]\nchi = [[8.0, 6.0], [5.0, 4.0]]\n",
        )
        .unwrap();
        let c = Config::resolve(l, vec![]).unwrap();
        assert_eq!(c.interval_table.chi(0.25, 4.0), 6.0);
    }

    #[test]
    fn user_configuration_file_follows_xdg() {
        let env = |m: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                m.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        assert_eq!(
            default_files(env(&[("XDG_CONFIG_HOME", "/x/cfg"), ("HOME", "/home/u")])),
            [
                PathBuf::from("rex.toml"),
                "/x/cfg/rex/rex.toml".into(),
                "/etc/rex/rex.toml".into()
            ]
        );
        // A relative XDG_CONFIG_HOME is ignored, as the spec says.
        assert_eq!(
            default_files(env(&[("XDG_CONFIG_HOME", "cfg"), ("HOME", "/home/u")]))[1],
            PathBuf::from("/home/u/.config/rex/rex.toml")
        );
        assert_eq!(default_files(env(&[])).len(), 2);
    }

    #[test]
    fn store_settings_layers_and_defaults() {
        let file: ConfigLayer = toml::from_str(
            "job = \"filejob\"\ns3_endpoint = \"http://file:9000\"\ns3_region = \"eu-1\"\ns3_access_key_id = \"AKFILE\"\ns3_secret_access_key = \"file-secret\"\ns3_allow_http = true\ns3_part_size = 8388608\n",
        )
        .unwrap();
        let env_map: HashMap<&str, &str> = [
            ("AWS_ENDPOINT_URL", "http://env:9000"),
            ("AWS_DEFAULT_REGION", "us-west-2"),
        ]
        .into();
        let env =
            ConfigLayer::env_without_flags(|k| env_map.get(k).map(|v| v.to_string())).unwrap();
        let cli = flags(&["--job", "flagjob", "--s3-max-retries", "3", "--rank", "7"]);
        let slurm = |k: &str| (k == "SLURM_JOB_ID").then(|| "4242".to_string());
        let st =
            StoreSettings::resolve(&cli.clone().or(env.clone()).or(file.clone()), slurm).unwrap();
        assert_eq!(
            (st.job.as_deref(), st.rank.as_str()),
            (Some("flagjob"), "7")
        );
        assert_eq!(
            st.s3.endpoint.as_deref(),
            Some("http://env:9000"),
            "AWS_* beat the file"
        );
        assert_eq!(st.s3.region.as_deref(), Some("us-west-2"));
        assert_eq!(
            st.s3.access_key_id.as_deref(),
            Some("AKFILE"),
            "the file fills what the environment lacks"
        );
        assert_eq!(st.s3.allow_http, Some(true));
        assert_eq!((st.s3.max_retries, st.s3.part_size), (3, 8 << 20));
        // Defaults: the scheduler's ids, else no job (refused by a bucket)
        // and rank 0.
        let st = StoreSettings::resolve(&ConfigLayer::default(), slurm).unwrap();
        assert_eq!((st.job.as_deref(), st.rank.as_str()), (Some("4242"), "0"));
        let flux = |k: &str| match k {
            "FLUX_JOB_ID" => Some("ƒ2kHkq9CjP".to_string()),
            "PMI_RANK" => Some("3".to_string()),
            _ => None,
        };
        let st = StoreSettings::resolve(&ConfigLayer::default(), flux).unwrap();
        assert_eq!(
            (st.job.as_deref(), st.rank.as_str()),
            (Some("f2kHkq9CjP"), "3")
        );
        let pbs = |k: &str| (k == "PBS_JOBID").then(|| "123.pbs-server".to_string());
        let st = StoreSettings::resolve(&ConfigLayer::default(), pbs).unwrap();
        assert_eq!(st.job.as_deref(), Some("123.pbs-server"));
        let st = StoreSettings::resolve(&ConfigLayer::default(), |_| None).unwrap();
        assert_eq!((st.job.as_deref(), st.rank.as_str()), (None, "0"));
        // Secrets never print.
        let shown = format!(
            "{:?} {}",
            file,
            serde_json::to_string(&StoreSettings::resolve(&file, |_| None).unwrap()).unwrap()
        );
        assert!(!shown.contains("file-secret"), "{shown}");
    }

    #[test]
    fn value_errors_name_where_the_value_was_set() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("site.toml");
        std::fs::write(&file, "zstd_level = 30\npattern_size = 33\nmtbf = 5.0\n").unwrap();
        let layer = flags(&[
            "--l1",
            "/l1",
            "--l2",
            "/l2",
            "--mtbf=-1",
            "--zstd-level",
            "40",
        ]);
        // --zstd-level came from the flag, --mtbf from its variable (as clap
        // reports it), pattern_size only from the file.
        let loaded = ConfigLayer::load_over(layer, Some(&file), &|k| k == "mtbf").unwrap();
        let o = &loaded.origins;
        assert_eq!(o.of("zstd_level"), Some("set by --zstd-level"));
        assert_eq!(o.of("mtbf"), Some("set by the variable REX_MTBF"));
        let in_file = format!("set in {}", file.display());
        assert_eq!(o.of("pattern_size"), Some(in_file.as_str()));
        assert_eq!((o.of("l1"), o.of("threads")), (Some("set by --l1"), None));
        let e = Config::resolve(loaded.layer.clone(), loaded.sources.clone()).unwrap_err();
        let shown = o.annotate(e).to_string();
        assert!(
            shown.starts_with("pattern_size 33 ") && shown.ends_with(&format!("({in_file})")),
            "{shown}"
        );
        let mut fixed = loaded.layer.clone();
        fixed.pattern_size = None;
        let e = o.annotate(Config::resolve(fixed.clone(), vec![]).unwrap_err());
        assert_eq!(
            e.to_string(),
            "mtbf -1 must be a positive number of seconds (set by the variable REX_MTBF)"
        );
        fixed.mtbf = None;
        let e = o.annotate(Config::resolve(fixed, vec![]).unwrap_err());
        assert!(e.to_string().ends_with("(set by --zstd-level)"), "{e}");
        // An error that names no set key is left as it is.
        let e = o.annotate(Error::Invalid("no L2 location".into()));
        assert_eq!(e.to_string(), "no L2 location");
        // Every value error of resolve starts with its key, which is what
        // `annotate` reads.
        for (toml_text, key) in [
            ("pattern_size = 24", "pattern_size"),
            ("mtbf = 0.0", "mtbf"),
            ("max_age = -2.0", "max_age"),
            ("read_rate = 0.0", "read_rate"),
            ("full_bytes_margin = 2.0", "full_bytes_margin"),
            ("max_chain_length = 0", "max_chain_length"),
            ("collective_table = 3", "collective_table"),
            ("replicas = 17", "replicas"),
            ("threads = 0", "threads"),
            ("zstd_level = 23", "zstd_level"),
            ("zstd_level_max = -8", "zstd_level_max"),
            ("l2_version = 9", "l2_version"),
            ("keep_chains_l2 = 0", "keep_chains_l2"),
            ("keep_chains_l1 = 0", "keep_chains_l1"),
            ("job = \"a b\"", "job"),
            ("s3_timeout = 0.0", "s3_timeout"),
            ("s3_parts_in_flight = 65", "s3_parts_in_flight"),
        ] {
            let mut l: ConfigLayer = toml::from_str(toml_text).unwrap();
            l.l1 = Some("/l1".into());
            l.l2 = Some("/l2".into());
            let e = Config::resolve(l, vec![]).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{key} ")), "{toml_text}: {e}");
        }
        // NaN and infinity say where they were set too (helper-73: JSON
        // has neither, and the key passed for unset).
        for (toml_text, key) in [
            ("mtbf = nan", "mtbf"),
            ("max_age = inf", "max_age"),
            ("read_rate = -nan", "read_rate"),
            ("full_bytes_margin = nan", "full_bytes_margin"),
        ] {
            let mut l: ConfigLayer = toml::from_str(toml_text).unwrap();
            assert_eq!(l.keys_set(), vec![key.to_string()], "{toml_text}");
            l.l1 = Some("/l1".into());
            l.l2 = Some("/l2".into());
            let mut origins = Origins::default();
            origins.note(key.into(), "set in rex.toml".into());
            let e = origins.annotate(Config::resolve(l, vec![]).unwrap_err());
            assert!(
                e.to_string().ends_with("(set in rex.toml)"),
                "{toml_text}: {e}"
            );
        }
    }

    #[test]
    fn bad_store_settings_are_configuration_errors() {
        for (toml_text, needle) in [
            ("job = \"a/b\"\n", "job"),
            ("rank = \"..\"\n", "rank"),
            ("s3_part_size = 1024\n", "s3_part_size"),
            ("s3_parts_in_flight = 0\n", "s3_parts_in_flight"),
            ("s3_endpoint = \"minio:9000\"\n", "s3_endpoint"),
            ("s3_timeout = -1\n", "s3_timeout"),
        ] {
            let l: ConfigLayer = toml::from_str(toml_text).unwrap();
            match StoreSettings::resolve(&l, |_| None) {
                Err(Error::Invalid(m)) => assert!(m.contains(needle), "{toml_text}: {m}"),
                other => panic!("{toml_text}: {other:?}"),
            }
        }
        let env = ConfigLayer::env_without_flags(|k| {
            (k == "AWS_ALLOW_HTTP").then(|| "perhaps".to_string())
        });
        assert!(matches!(env, Err(Error::Invalid(m)) if m.contains("AWS_ALLOW_HTTP")));
    }
}
