//! Configuration: a TOML file, `REX_*` environment variables and flags.
//!
//! Precedence, highest first: command-line flags, `REX_*` environment
//! variables, `./rex.toml`, `/etc/rex/rex.toml`. `--config FILE` (or
//! `REX_CONFIG`) names one file that replaces the two default files. Every
//! key is optional; unknown keys are errors (a typo must not silently fall
//! back to a default). Documented in `rex.toml(5)`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::controller::IntervalTable;
use crate::error::{Error, Result};
use crate::push::HashChoice;

/// One layer of configuration: every key optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigLayer {
    /// The job's L1 directory.
    pub l1: Option<PathBuf>,
    /// The L2 location (a directory).
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
        }
    }

    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<ConfigLayer> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, "read configuration", e))?;
        toml::from_str(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
    }

    /// Reads the `REX_*` variables through `get` (the environment, or a map
    /// in tests).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<ConfigLayer> {
        fn parse<T: std::str::FromStr>(get: &impl Fn(&str) -> Option<String>, var: &str) -> Result<Option<T>> {
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
            Some(v) => return Err(Error::Invalid(format!("REX_HASH={v:?}: expected crc32 or xxh3"))),
        };
        Ok(ConfigLayer {
            l1: get("REX_L1").filter(|v| !v.is_empty()).map(PathBuf::from),
            l2: get("REX_L2").filter(|v| !v.is_empty()).map(PathBuf::from),
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
        })
    }
}

/// The resolved configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// The job's L1 directory.
    pub l1: PathBuf,
    /// The L2 directory.
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
    /// The files that were read, highest precedence first.
    pub sources: Vec<PathBuf>,
}

/// Default MTBF (paper §4): 10,000 s.
pub const DEFAULT_MTBF_S: f64 = 10_000.0;
/// Default maximum chain length.
pub const DEFAULT_MAX_CHAIN_LENGTH: u64 = 64;

impl Config {
    /// Resolves `flags` over the environment and the configuration files.
    /// `config` is an explicit file (`--config`), replacing the default ones.
    pub fn load(flags: ConfigLayer, config: Option<&Path>) -> Result<Config> {
        let env = ConfigLayer::from_env(|k| std::env::var(k).ok())?;
        let explicit = config
            .map(Path::to_path_buf)
            .or_else(|| std::env::var("REX_CONFIG").ok().filter(|v| !v.is_empty()).map(PathBuf::from));
        let mut sources = Vec::new();
        let mut files = ConfigLayer::default();
        match explicit {
            Some(p) => {
                files = ConfigLayer::from_file(&p)?;
                sources.push(p);
            }
            None => {
                for p in [PathBuf::from("rex.toml"), PathBuf::from("/etc/rex/rex.toml")] {
                    if p.is_file() {
                        files = files.or(ConfigLayer::from_file(&p)?);
                        sources.push(p);
                    }
                }
            }
        }
        Self::resolve(flags.or(env).or(files), sources)
    }

    /// Applies defaults and checks values.
    pub fn resolve(l: ConfigLayer, sources: Vec<PathBuf>) -> Result<Config> {
        let l1 = l
            .l1
            .ok_or_else(|| Error::Invalid("no L1 directory: give --l1, REX_L1 or `l1` in rex.toml".into()))?;
        let l2 = l
            .l2
            .ok_or_else(|| Error::Invalid("no L2 location: give --l2, REX_L2 or `l2` in rex.toml".into()))?;
        let pattern_size = l.pattern_size.unwrap_or(32);
        if !pattern_size.is_power_of_two() || !(16..=1 << 20).contains(&pattern_size) {
            return Err(Error::Invalid(format!("pattern_size {pattern_size} is not a power of two of at least 16")));
        }
        let mtbf_s = l.mtbf_s.unwrap_or(DEFAULT_MTBF_S);
        if !(mtbf_s.is_finite() && mtbf_s > 0.0) {
            return Err(Error::Invalid(format!("mtbf_s {mtbf_s} must be a positive number of seconds")));
        }
        let interval_table = l.interval_table.unwrap_or_default();
        interval_table.check()?;
        for (name, v) in [("max_age_s", l.max_age_s), ("read_rate_mbps", l.read_rate_mbps)] {
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
        assert!(toml::from_str::<ConfigLayer>("l1 = \"x\"\nmtbf = 3\n").is_err(), "unknown key");
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
}
