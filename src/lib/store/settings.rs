//! How to reach a job's L2 store: the job and rank that name its prefix,
//! the S3 endpoint, credentials and tuning, the local cache.
//!
//! These are plain values, defined here beside the stores they configure so
//! that the store layer depends on nothing above it. Resolving them from
//! `rex.toml`, `REX_*` variables and flags is the configuration's work
//! (`control::config`, which implements `StoreSettings::load`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How to reach a job's L2 store: the job and rank, the S3 settings, the
/// local cache. Resolved from the same layers as `control::config::Config`.
#[derive(Clone, Debug, Serialize)]
pub struct StoreSettings {
    /// The job's name (first level of its prefix in a bucket): from the
    /// configuration or the scheduler; `None` when neither names it, which a
    /// bucket refuses (two jobs must never share a prefix by default).
    pub job: Option<String>,
    /// The rank within the job (second level of the prefix).
    pub rank: String,
    /// Base directory of the per-run cache of a remote store (default: the
    /// system's temporary directory).
    #[serde(serialize_with = "crate::format::json_path::opt_path")]
    pub cache_dir: Option<PathBuf>,
    /// The S3 settings.
    pub s3: S3Settings,
}

/// S3 endpoint, credentials and tuning. Unset endpoint, region and
/// credentials fall back to what the `AWS_*` environment provides to
/// `object_store` (instance metadata, web identity, ...).
#[derive(Clone, Debug, Serialize)]
pub struct S3Settings {
    /// Endpoint URL.
    pub endpoint: Option<String>,
    /// Region.
    pub region: Option<String>,
    /// Allow plain HTTP.
    pub allow_http: Option<bool>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<Secret>,
    /// Session token.
    pub session_token: Option<Secret>,
    /// Retries of a failed request.
    pub max_retries: usize,
    /// Give up retrying a request after this long, seconds.
    pub retry_timeout_s: f64,
    /// Timeout of one request, seconds.
    pub timeout_s: f64,
    /// Connect timeout, seconds.
    pub connect_timeout_s: f64,
    /// Part size of multipart uploads, bytes.
    pub part_size: u64,
    /// Parts of one upload in flight.
    pub parts_in_flight: usize,
    /// Ranged GETs in flight.
    pub get_concurrency: usize,
    /// How often a multipart upload still running writes its intent
    /// object again, seconds, so that `rexctl gc` (and another push's
    /// recovery), which abort the uploads whose intent is older than their
    /// grace, never abort it (not in rex.toml: [`INTENT_REFRESH_S`]).
    pub intent_refresh_s: f64,
}

/// How often a running multipart upload refreshes its intent object: well
/// within `rexctl gc`'s default grace of an hour, and any grace a user
/// would give it.
pub const INTENT_REFRESH_S: f64 = 300.0;

/// How to give a job its name, for the errors that need one.
pub const HOW_TO_NAME_THE_JOB: &str = "give --job, REX_JOB or `job` in rex.toml, or run under a scheduler that sets SLURM_JOB_ID, PBS_JOBID, LSB_JOBID or FLUX_JOB_ID";

/// Default retries of a failed S3 request.
pub const DEFAULT_S3_MAX_RETRIES: usize = 10;
/// Default part size: 16 MiB.
pub const DEFAULT_S3_PART_SIZE: u64 = 16 << 20;
/// S3's smallest part (every part but the last).
pub const MIN_S3_PART_SIZE: u64 = 5 << 20;

impl Default for S3Settings {
    fn default() -> Self {
        S3Settings {
            endpoint: None,
            region: None,
            allow_http: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            max_retries: DEFAULT_S3_MAX_RETRIES,
            retry_timeout_s: 180.0,
            timeout_s: 60.0,
            connect_timeout_s: 5.0,
            part_size: DEFAULT_S3_PART_SIZE,
            parts_in_flight: 4,
            get_concurrency: 8,
            intent_refresh_s: INTENT_REFRESH_S,
        }
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            job: None,
            rank: "0".into(),
            cache_dir: None,
            s3: S3Settings::default(),
        }
    }
}

/// A secret setting: read like a string, never printed.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"(redacted)\"")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str("(redacted)")
    }
}
