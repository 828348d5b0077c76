//! Configuration: a TOML file, `REX_*` environment variables and flags.
//!
//! Precedence, highest first: command-line flags, `REX_*` environment
//! variables (and, for the S3 keys, the usual `AWS_*` ones), `./rex.toml`,
//! `/etc/rex/rex.toml`. `--config FILE` (or `REX_CONFIG`) names one file
//! that replaces the two default files. Every key is optional; unknown keys
//! are errors (a typo must not silently fall back to a default). Documented
//! in `rex.toml(5)`.
//!
//! [`Config`] is what `flush` and `plan` need (a whole job); the commands
//! that name their L2 location on the command line (`push-l2`, `restore`,
//! `verify`, `status`, `gc`) read only the [`StoreSettings`]: the job and
//! rank that name the job's prefix in a bucket, the S3 endpoint,
//! credentials and tuning, and the local cache directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::control::controller::IntervalTable;
use crate::error::{Error, Result};
use crate::l2::dedup::HashChoice;
use crate::store::settings::{MIN_S3_PART_SIZE, S3Settings, Secret, StoreSettings};

/// One layer of configuration: every key optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigLayer {
    /// The job's L1 directory.
    pub l1: Option<PathBuf>,
    /// The L2 location: a directory, a `file://` URL or `s3://bucket/prefix`.
    pub l2: Option<PathBuf>,
    /// Pattern size for new chains, bytes.
    pub pattern_size: Option<u32>,
    /// Mean time between failures, seconds.
    pub mtbf_s: Option<f64>,
    /// Replaces the paper's Table 1.
    pub interval_table: Option<IntervalTable>,
    /// An L2 checkpoint is due when the oldest pending L1 checkpoint is older
    /// than this, seconds.
    pub max_age_s: Option<f64>,
    /// An L2 checkpoint is due when pending L1 data exceeds this, bytes.
    pub max_pending_bytes: Option<u64>,
    /// Chains kept in L2.
    pub keep_chains_l2: Option<usize>,
    /// Chains kept in L1.
    pub keep_chains_l1: Option<usize>,
    /// A complete coalescence is taken when the chain would grow past this
    /// many generations.
    pub max_chain_length: Option<u64>,
    /// DeD-Table hash functions.
    pub hash: Option<HashChoice>,
    /// L2 read rate for restore-cost estimates, MB/s (default: the measured
    /// upload rate of past pushes, else 200).
    pub read_rate_mbps: Option<f64>,
    /// The job's name: the first level of its prefix in a bucket
    /// (default: `SLURM_JOB_ID`, else "job").
    pub job: Option<String>,
    /// The rank (process) within the job: the second level of the prefix
    /// (default: `SLURM_PROCID`, else "0").
    pub rank: Option<String>,
    /// Where objects read from a remote L2 are materialized for reading
    /// (default: the system's temporary directory); a fresh subdirectory is
    /// made per run and removed afterwards.
    pub cache_dir: Option<PathBuf>,
    /// S3 endpoint URL (default: AWS's, from the region).
    pub s3_endpoint: Option<String>,
    /// S3 region (default "us-east-1").
    pub s3_region: Option<String>,
    /// Allow plain-HTTP endpoints (default false).
    pub s3_allow_http: Option<bool>,
    /// S3 access key id.
    pub s3_access_key_id: Option<String>,
    /// S3 secret access key.
    pub s3_secret_access_key: Option<Secret>,
    /// S3 session token (temporary credentials).
    pub s3_session_token: Option<Secret>,
    /// Retries of a failed S3 request (5xx, timeout, connection reset).
    pub s3_max_retries: Option<usize>,
    /// Give up retrying a request after this long, seconds.
    pub s3_retry_timeout_s: Option<f64>,
    /// Timeout of one S3 request, seconds.
    pub s3_timeout_s: Option<f64>,
    /// Timeout of connecting to the endpoint, seconds.
    pub s3_connect_timeout_s: Option<f64>,
    /// Part size of multipart uploads, bytes.
    pub s3_part_size: Option<u64>,
    /// Parts of one multipart upload in flight at once.
    pub s3_parts_in_flight: Option<usize>,
    /// Ranged GETs in flight at once when reading an object.
    pub s3_get_concurrency: Option<usize>,
    /// librex: whether the library pushes L2 checkpoints from its own
    /// background thread (default true); false leaves it to `rexctl flush`.
    pub l2_thread: Option<bool>,
    /// librex: the dirty-page tracker (default mprotect).
    pub tracker: Option<TrackerChoice>,
}

/// The dirty-page tracker of a job that checkpoints itself (librex).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrackerChoice {
    /// `mprotect` + SIGSEGV, as the REX paper's AIC.
    #[default]
    Mprotect,
    /// userfaultfd write-protect (Linux 5.7 and later, anonymous memory).
    Userfaultfd,
}

impl ConfigLayer {
    /// Fills the keys `self` lacks from `lower`.
    pub fn or(self, lower: ConfigLayer) -> ConfigLayer {
        ConfigLayer {
            l1: self.l1.or(lower.l1),
            l2: self.l2.or(lower.l2),
            pattern_size: self.pattern_size.or(lower.pattern_size),
            mtbf_s: self.mtbf_s.or(lower.mtbf_s),
            interval_table: self.interval_table.or(lower.interval_table),
            max_age_s: self.max_age_s.or(lower.max_age_s),
            max_pending_bytes: self.max_pending_bytes.or(lower.max_pending_bytes),
            keep_chains_l2: self.keep_chains_l2.or(lower.keep_chains_l2),
            keep_chains_l1: self.keep_chains_l1.or(lower.keep_chains_l1),
            max_chain_length: self.max_chain_length.or(lower.max_chain_length),
            hash: self.hash.or(lower.hash),
            read_rate_mbps: self.read_rate_mbps.or(lower.read_rate_mbps),
            job: self.job.or(lower.job),
            rank: self.rank.or(lower.rank),
            cache_dir: self.cache_dir.or(lower.cache_dir),
            s3_endpoint: self.s3_endpoint.or(lower.s3_endpoint),
            s3_region: self.s3_region.or(lower.s3_region),
            s3_allow_http: self.s3_allow_http.or(lower.s3_allow_http),
            s3_access_key_id: self.s3_access_key_id.or(lower.s3_access_key_id),
            s3_secret_access_key: self.s3_secret_access_key.or(lower.s3_secret_access_key),
            s3_session_token: self.s3_session_token.or(lower.s3_session_token),
            s3_max_retries: self.s3_max_retries.or(lower.s3_max_retries),
            s3_retry_timeout_s: self.s3_retry_timeout_s.or(lower.s3_retry_timeout_s),
            s3_timeout_s: self.s3_timeout_s.or(lower.s3_timeout_s),
            s3_connect_timeout_s: self.s3_connect_timeout_s.or(lower.s3_connect_timeout_s),
            s3_part_size: self.s3_part_size.or(lower.s3_part_size),
            s3_parts_in_flight: self.s3_parts_in_flight.or(lower.s3_parts_in_flight),
            s3_get_concurrency: self.s3_get_concurrency.or(lower.s3_get_concurrency),
            l2_thread: self.l2_thread.or(lower.l2_thread),
            tracker: self.tracker.or(lower.tracker),
        }
    }

    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<ConfigLayer> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::io(path, "read configuration", e))?;
        toml::from_str(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
    }

    /// Reads the `REX_*` variables, and the `AWS_*` variables of the S3
    /// keys, through `get` (the environment, or a map in tests).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<ConfigLayer> {
        fn parse<T: std::str::FromStr>(
            get: &impl Fn(&str) -> Option<String>,
            var: &str,
        ) -> Result<Option<T>> {
            match get(var) {
                None => Ok(None),
                Some(v) if v.is_empty() => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| Error::Invalid(format!("{var}={v:?} is not a valid value"))),
            }
        }
        let hash = match get("REX_HASH").as_deref() {
            None | Some("") => None,
            Some("crc32") => Some(HashChoice::Crc32),
            Some("xxh3") => Some(HashChoice::Xxh3),
            Some(v) => {
                return Err(Error::Invalid(format!(
                    "REX_HASH={v:?}: expected crc32 or xxh3"
                )));
            }
        };
        let tracker = match get("REX_TRACKER").as_deref() {
            None | Some("") => None,
            Some("mprotect") => Some(TrackerChoice::Mprotect),
            Some("userfaultfd") => Some(TrackerChoice::Userfaultfd),
            Some(v) => {
                return Err(Error::Invalid(format!(
                    "REX_TRACKER={v:?}: expected mprotect or userfaultfd"
                )));
            }
        };
        let text = |vars: &[&str]| vars.iter().find_map(|v| get(v).filter(|x| !x.is_empty()));
        let l2_thread = match text(&["REX_L2_THREAD"]) {
            None => None,
            Some(v) => Some(parse_bool(&v).ok_or_else(|| {
                Error::Invalid(format!("REX_L2_THREAD={v:?}: expected true or false"))
            })?),
        };
        let allow_http = match text(&["AWS_ALLOW_HTTP"]) {
            None => None,
            Some(v) => Some(parse_bool(&v).ok_or_else(|| {
                Error::Invalid(format!("AWS_ALLOW_HTTP={v:?}: expected true or false"))
            })?),
        };
        Ok(ConfigLayer {
            l1: get("REX_L1").filter(|v| !v.is_empty()).map(PathBuf::from),
            l2: get("REX_L2").filter(|v| !v.is_empty()).map(PathBuf::from),
            job: text(&["REX_JOB"]),
            rank: text(&["REX_RANK"]),
            cache_dir: text(&["REX_CACHE_DIR"]).map(PathBuf::from),
            s3_endpoint: text(&["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]),
            s3_region: text(&["AWS_REGION", "AWS_DEFAULT_REGION"]),
            s3_allow_http: allow_http,
            s3_access_key_id: text(&["AWS_ACCESS_KEY_ID"]),
            s3_secret_access_key: text(&["AWS_SECRET_ACCESS_KEY"]).map(Secret),
            s3_session_token: text(&["AWS_SESSION_TOKEN", "AWS_TOKEN"]).map(Secret),
            s3_max_retries: parse(&get, "REX_S3_MAX_RETRIES")?,
            s3_retry_timeout_s: parse(&get, "REX_S3_RETRY_TIMEOUT")?,
            s3_timeout_s: parse(&get, "REX_S3_TIMEOUT")?,
            s3_connect_timeout_s: parse(&get, "REX_S3_CONNECT_TIMEOUT")?,
            s3_part_size: parse(&get, "REX_S3_PART_SIZE")?,
            s3_parts_in_flight: parse(&get, "REX_S3_PARTS_IN_FLIGHT")?,
            s3_get_concurrency: parse(&get, "REX_S3_GET_CONCURRENCY")?,
            pattern_size: parse(&get, "REX_PATTERN_SIZE")?,
            mtbf_s: parse(&get, "REX_MTBF")?,
            interval_table: None,
            max_age_s: parse(&get, "REX_MAX_AGE")?,
            max_pending_bytes: parse(&get, "REX_MAX_PENDING_BYTES")?,
            keep_chains_l2: parse(&get, "REX_KEEP_CHAINS_L2")?,
            keep_chains_l1: parse(&get, "REX_KEEP_CHAINS_L1")?,
            max_chain_length: parse(&get, "REX_MAX_CHAIN_LENGTH")?,
            hash,
            read_rate_mbps: parse(&get, "REX_READ_RATE")?,
            l2_thread,
            tracker,
        })
    }
}

/// The resolved configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// The job's L1 directory.
    pub l1: PathBuf,
    /// The L2 location as given (a directory or a URL; see [`crate::store::open_l2`]).
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
    /// DeD-Table hash.
    pub hash: HashChoice,
    /// Configured L2 read rate, MB/s.
    pub read_rate_mbps: Option<f64>,
    /// How to reach the L2 store.
    pub store: StoreSettings,
    /// librex: push L2 checkpoints from the library's background thread.
    pub l2_thread: bool,
    /// librex: the dirty-page tracker.
    pub tracker: TrackerChoice,
    /// The files that were read, highest precedence first.
    pub sources: Vec<PathBuf>,
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
        let (layer, _) = ConfigLayer::load(flags, config)?;
        Self::resolve(&layer, |k| std::env::var(k).ok())
    }

    /// Applies defaults (`SLURM_JOB_ID`, `SLURM_PROCID` through `env`) and
    /// checks values.
    pub fn resolve(l: &ConfigLayer, env: impl Fn(&str) -> Option<String>) -> Result<StoreSettings> {
        let from_env = |k: &str| {
            env(k)
                .filter(|v| !v.trim().is_empty())
                .map(|v| v.trim().to_string())
        };
        let job = l
            .job
            .clone()
            .or_else(|| from_env("SLURM_JOB_ID"))
            .unwrap_or_else(|| "job".into());
        let rank = l
            .rank
            .clone()
            .or_else(|| from_env("SLURM_PROCID"))
            .unwrap_or_else(|| "0".into());
        for (key, v) in [("job", &job), ("rank", &rank)] {
            if !valid_segment(v) {
                return Err(Error::Invalid(format!(
                    "{key} {v:?} cannot name a prefix: use letters, digits, '.', '_', '-' or '='"
                )));
            }
        }
        let d = S3Settings::default();
        let seconds = |name: &str, v: Option<f64>, default: f64| -> Result<f64> {
            match v {
                None => Ok(default),
                Some(v) if v.is_finite() && v > 0.0 => Ok(v),
                Some(v) => Err(Error::Invalid(format!(
                    "{name} {v} must be a positive number of seconds"
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
                max_retries: l.s3_max_retries.unwrap_or(d.max_retries).min(100),
                retry_timeout_s: seconds(
                    "s3_retry_timeout_s",
                    l.s3_retry_timeout_s,
                    d.retry_timeout_s,
                )?,
                timeout_s: seconds("s3_timeout_s", l.s3_timeout_s, d.timeout_s)?,
                connect_timeout_s: seconds(
                    "s3_connect_timeout_s",
                    l.s3_connect_timeout_s,
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
            },
        })
    }
}

/// Default MTBF (paper §4): 10,000 s.
pub const DEFAULT_MTBF_S: f64 = 10_000.0;
/// Default maximum chain length.
pub const DEFAULT_MAX_CHAIN_LENGTH: u64 = 64;

impl Config {
    /// Resolves `flags` over the environment and the configuration files.
    /// `config` is an explicit file (`--config`), replacing the default ones.
    pub fn load(flags: ConfigLayer, config: Option<&Path>) -> Result<Config> {
        let (layer, sources) = ConfigLayer::load(flags, config)?;
        Self::resolve(layer, sources)
    }
}

impl ConfigLayer {
    /// Merges `flags` over the environment and the configuration files
    /// (`config`, an explicit file, replaces the default ones); returns the
    /// merged layer and the files read, highest precedence first.
    pub fn load(flags: ConfigLayer, config: Option<&Path>) -> Result<(ConfigLayer, Vec<PathBuf>)> {
        let env = ConfigLayer::from_env(|k| std::env::var(k).ok())?;
        let explicit = config.map(Path::to_path_buf).or_else(|| {
            std::env::var("REX_CONFIG")
                .ok()
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        let mut sources = Vec::new();
        let mut files = ConfigLayer::default();
        match explicit {
            Some(p) => {
                files = ConfigLayer::from_file(&p)?;
                sources.push(p);
            }
            None => {
                for p in [
                    PathBuf::from("rex.toml"),
                    PathBuf::from("/etc/rex/rex.toml"),
                ] {
                    if p.is_file() {
                        files = files.or(ConfigLayer::from_file(&p)?);
                        sources.push(p);
                    }
                }
            }
        }
        Ok((flags.or(env).or(files), sources))
    }
}

impl Config {
    /// Applies defaults and checks values.
    pub fn resolve(l: ConfigLayer, sources: Vec<PathBuf>) -> Result<Config> {
        let store = StoreSettings::resolve(&l, |k| std::env::var(k).ok())?;
        let l1 = l.l1.ok_or_else(|| {
            Error::Invalid("no L1 directory: give --l1, REX_L1 or `l1` in rex.toml".into())
        })?;
        let l2 = l.l2.ok_or_else(|| {
            Error::Invalid("no L2 location: give --l2, REX_L2 or `l2` in rex.toml".into())
        })?;
        let pattern_size = l.pattern_size.unwrap_or(32);
        if !pattern_size.is_power_of_two() || !(16..=1 << 20).contains(&pattern_size) {
            return Err(Error::Invalid(format!(
                "pattern_size {pattern_size} is not a power of two of at least 16"
            )));
        }
        let mtbf_s = l.mtbf_s.unwrap_or(DEFAULT_MTBF_S);
        if !(mtbf_s.is_finite() && mtbf_s > 0.0) {
            return Err(Error::Invalid(format!(
                "mtbf_s {mtbf_s} must be a positive number of seconds"
            )));
        }
        let interval_table = l.interval_table.unwrap_or_default();
        interval_table.check()?;
        for (name, v) in [
            ("max_age_s", l.max_age_s),
            ("read_rate_mbps", l.read_rate_mbps),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(Error::Invalid(format!("{name} {v} must be positive")));
            }
        }
        let max_chain_length = l.max_chain_length.unwrap_or(DEFAULT_MAX_CHAIN_LENGTH);
        if max_chain_length == 0 {
            return Err(Error::Invalid("max_chain_length must be at least 1".into()));
        }
        Ok(Config {
            l1,
            l2,
            pattern_size,
            mtbf_s,
            interval_table,
            max_age_s: l.max_age_s,
            max_pending_bytes: l.max_pending_bytes,
            keep_chains_l2: l.keep_chains_l2.unwrap_or(2).max(1),
            keep_chains_l1: l.keep_chains_l1.unwrap_or(1).max(1),
            max_chain_length,
            hash: l.hash.unwrap_or_default(),
            read_rate_mbps: l.read_rate_mbps,
            store,
            l2_thread: l.l2_thread.unwrap_or(true),
            tracker: l.tracker.unwrap_or_default(),
            sources,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn flags_beat_env_beat_files() {
        let file: ConfigLayer = toml::from_str(
            "l1 = \"/f/l1\"\nl2 = \"/f/l2\"\nmtbf_s = 5.0\npattern_size = 64\nmax_chain_length = 7\n",
        )
        .unwrap();
        let env_map: HashMap<&str, &str> = [("REX_MTBF", "6"), ("REX_L2", "/e/l2")].into();
        let env = ConfigLayer::from_env(|k| env_map.get(k).map(|v| v.to_string())).unwrap();
        let flags = ConfigLayer {
            l2: Some("/flag/l2".into()),
            ..Default::default()
        };
        let c = Config::resolve(flags.or(env).or(file), vec![]).unwrap();
        assert_eq!(c.l1, PathBuf::from("/f/l1"));
        assert_eq!(c.l2, PathBuf::from("/flag/l2"));
        assert_eq!(c.mtbf_s, 6.0);
        assert_eq!(c.pattern_size, 64);
        assert_eq!(c.max_chain_length, 7);
        assert_eq!(c.keep_chains_l2, 2);
    }

    #[test]
    fn bad_values_are_configuration_errors() {
        assert!(
            toml::from_str::<ConfigLayer>("l1 = \"x\"\nmtbf = 3\n").is_err(),
            "unknown key"
        );
        let env = ConfigLayer::from_env(|k| (k == "REX_MTBF").then(|| "soon".to_string()));
        assert!(matches!(env, Err(Error::Invalid(m)) if m.contains("REX_MTBF")));
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
    fn store_settings_layers_and_defaults() {
        let file: ConfigLayer = toml::from_str(
            "job = \"filejob\"\ns3_endpoint = \"http://file:9000\"\ns3_region = \"eu-1\"\ns3_access_key_id = \"AKFILE\"\ns3_secret_access_key = \"file-secret\"\ns3_allow_http = true\ns3_part_size = 8388608\n",
        )
        .unwrap();
        let env_map: HashMap<&str, &str> = [
            ("AWS_ENDPOINT_URL", "http://env:9000"),
            ("AWS_DEFAULT_REGION", "us-west-2"),
            ("REX_S3_MAX_RETRIES", "3"),
            ("REX_RANK", "7"),
        ]
        .into();
        let env = ConfigLayer::from_env(|k| env_map.get(k).map(|v| v.to_string())).unwrap();
        let flags = ConfigLayer {
            job: Some("flagjob".into()),
            ..Default::default()
        };
        let slurm = |k: &str| (k == "SLURM_JOB_ID").then(|| "4242".to_string());
        let st =
            StoreSettings::resolve(&flags.clone().or(env.clone()).or(file.clone()), slurm).unwrap();
        assert_eq!((st.job.as_str(), st.rank.as_str()), ("flagjob", "7"));
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
        // Defaults: SLURM, then "job" / "0".
        let st = StoreSettings::resolve(&ConfigLayer::default(), slurm).unwrap();
        assert_eq!((st.job.as_str(), st.rank.as_str()), ("4242", "0"));
        let st = StoreSettings::resolve(&ConfigLayer::default(), |_| None).unwrap();
        assert_eq!((st.job.as_str(), st.rank.as_str()), ("job", "0"));
        // Secrets never print.
        let shown = format!(
            "{:?} {}",
            file,
            serde_json::to_string(&StoreSettings::resolve(&file, |_| None).unwrap()).unwrap()
        );
        assert!(!shown.contains("file-secret"), "{shown}");
    }

    #[test]
    fn bad_store_settings_are_configuration_errors() {
        for (toml_text, needle) in [
            ("job = \"a/b\"\n", "job"),
            ("rank = \"..\"\n", "rank"),
            ("s3_part_size = 1024\n", "s3_part_size"),
            ("s3_parts_in_flight = 0\n", "s3_parts_in_flight"),
            ("s3_endpoint = \"minio:9000\"\n", "s3_endpoint"),
            ("s3_timeout_s = -1\n", "s3_timeout_s"),
        ] {
            let l: ConfigLayer = toml::from_str(toml_text).unwrap();
            match StoreSettings::resolve(&l, |_| None) {
                Err(Error::Invalid(m)) => assert!(m.contains(needle), "{toml_text}: {m}"),
                other => panic!("{toml_text}: {other:?}"),
            }
        }
        let env = ConfigLayer::from_env(|k| (k == "AWS_ALLOW_HTTP").then(|| "perhaps".to_string()));
        assert!(matches!(env, Err(Error::Invalid(m)) if m.contains("AWS_ALLOW_HTTP")));
    }
}
