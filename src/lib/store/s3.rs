//! The S3 backend: a job's L2 objects in a bucket of an S3-compatible
//! object store (AWS S3, Ceph RGW, MinIO, ...), through `object_store`.
//!
//! # Layout
//!
//! The objects of one rank of one job live under `prefix/<job>/<rank>/`,
//! with the names of the directory backend (`g00000001.rps`, ...), so many
//! nodes of a job push to one bucket without ever touching each other's
//! keys. The job lock (a `flock` in the node's L1 directory) serialises
//! the writers of one rank.
//!
//! # Writes
//!
//! * Manifests (small) go up with one PUT that must *create* the object
//!   (`If-None-Match: *`): an existing manifest is never overwritten. If it
//!   exists with the same bytes (a retried request, or recovery re-publishing
//!   a generation), the put succeeds; with other bytes it fails
//!   ([`RemoteKind::Conflict`]). Recovery deletes an *invalid* manifest
//!   before publishing a valid copy of that generation.
//! * Data files go up before any manifest names them: small ones with one
//!   PUT, larger ones as multipart uploads of `s3_part_size` parts with at
//!   most `s3_parts_in_flight` parts in flight. A leftover object of the
//!   same name (an interrupted push of an uncommitted generation) is
//!   replaced whole; objects of committed generations are never written.
//!   After each upload a HEAD checks the size that arrived; the payload's
//!   SHA-256 is part of every request's signature, so the server rejects
//!   bytes that changed on the way.
//! * A push streams the RPS and the Pointer File while it writes them
//!   ([`Store::put_stream`]): parts go up as they fill, except the first,
//!   whose first bytes are the header the writer completes last; it goes up
//!   at the end (parts may be sent in any order, all of one size but the
//!   last). A streamed upload holds at most `s3_parts_in_flight` + 2 parts
//!   in memory.
//! * A multipart upload whose parts were uploaded but which could not be
//!   completed is aborted, so no invisible parts are left billing the user.
//!   Because a crash (of rexctl or of the server) can prevent that, every
//!   multipart upload first records its upload id in a small *intent*
//!   object, `prefix/<job>/<rank>/.uploads/<name>`, deleted once the upload
//!   is completed or aborted; the next push's recovery (and `rexctl gc`)
//!   aborts the uploads such intents name. An upload still running writes
//!   its intent again every [`INTENT_REFRESH_S`](super::settings::INTENT_REFRESH_S)
//!   seconds, so that `gc`, which aborts only the uploads whose intent is
//!   older than its grace, never takes a slow one for abandoned.
//! * Every request is retried with exponential backoff on transient errors
//!   (5xx, timeouts, connection resets), `s3_max_retries` times.
//!
//! # Reads
//!
//! Readers map local files, so [`Store::open_local`] materializes an object
//! in a cache directory: a fresh directory under `cache_dir` (default: the
//! system's temporary directory), removed when the store is dropped. The
//! object is fetched with ranged GETs of [`RANGE_SIZE`] bytes,
//! `s3_get_concurrency` of them in flight (a bound shared by every fetch
//! and stream of the store, as a restore streams the whole lineage at
//! once), into a temporary file renamed
//! into place when complete. A cache file is never modified once renamed
//! (a re-fetch writes a new file and renames it over the old name), so
//! mappings stay valid. Listing the store also fetches every manifest it
//! finds, concurrently, so that indexing a chain costs one round trip per
//! listing rather than one per generation.
//!
//! RPS and Pointer Files ([`Store::open_chunked`]) are materialized as
//! sparse files of the object's length whose header and chunk table are
//! fetched at once, and whose chunks arrive in one of two ways
//! ([`ChunkedFile::open_lazy`]; each chunk's CRC is checked before any byte
//! of it is used, either way):
//!
//! * streamed (the default: a full restore, `verify`): a task of the
//!   store's runtime fetches the chunks' bytes in order, in pieces of
//!   [`RANGE_SIZE`], `s3_get_concurrency` in flight, and a reader that
//!   needs a chunk waits only until the bytes up to its end have landed
//!   (`StreamFill`). A restore decodes and writes the first pages while the
//!   rest of the lineage is still on its way: its time is about the
//!   fetch's, not the fetch's plus the decode's. If the fetch fails, every
//!   reader waiting for a piece gets its error.
//! * on demand ([`Store::read_on_demand`], a `--pages` restore): each chunk
//!   is fetched with one ranged GET the first time a reader needs it.
//!   Restoring a few pages fetches the manifests, the P-Tables, and the few
//!   chunks those pages point into.
//!
//! # Errors
//!
//! Every failure is an [`Error::Remote`] naming the endpoint, the bucket and
//! the key. Rejected credentials, denied access and a missing bucket are
//! configuration errors (exit code 5); a missing object a manifest names is
//! a data error (exit code 3); an unreachable store is an I/O failure (exit
//! code 1). Errors about a cached file name the object's `s3://` URL
//! instead (see [`Store::public_error`]).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as Key;
use object_store::{
    BackoffConfig, ClientConfigKey, GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig,
};
use tokio::task::JoinSet;

use super::settings::{S3Settings, StoreSettings};
use super::{ObjectInfo, Progress, Received, Store, StoreStats, check_name};
use crate::durable::Piece;
use crate::error::{Error, IoContext, RemoteKind, Result};
use crate::format::chunked::{ChunkFill, ChunkedFile, HEADER_LEN, Kind, table_offset};
use crate::format::manifest::parse_manifest_name;

/// Bytes per ranged GET when an object is fetched whole: large enough that
/// a request's latency is small beside its transfer, small enough that
/// several are in flight for any object worth splitting.
pub const RANGE_SIZE: u64 = 8 << 20;

/// The sub-prefix of upload intents.
const UPLOADS: &str = ".uploads";

/// A job's L2 objects in an S3 bucket. See the module doc.
pub struct S3Store {
    s3: Arc<AmazonS3>,
    endpoint: String,
    bucket: String,
    /// `prefix/<job>/<rank>`.
    base: Key,
    part_size: u64,
    parts_in_flight: usize,
    get_concurrency: usize,
    /// See [`S3Settings::intent_refresh_s`](super::settings::S3Settings::intent_refresh_s).
    intent_refresh: std::time::Duration,
    /// `get_concurrency` permits, one per ranged GET in flight, shared by
    /// every fetch and stream of the store: a restore streams each file of
    /// the lineage at once, and the setting bounds them all together.
    get_slots: Arc<tokio::sync::Semaphore>,
    state: Mutex<State>,
    fetched: Arc<AtomicU64>,
    uploaded: AtomicU64,
    requests: Arc<AtomicU64>,
    /// Fetch RPS and Pointer Files on demand ([`Store::read_on_demand`]).
    on_demand: AtomicBool,
    /// [`Store::writing_generation`] (`u64::MAX`: none).
    fresh: AtomicU64,
    /// Cache files for readers; removed on drop (after the runtime).
    cache: crate::durable::ScratchDir,
    /// Declared last but one: dropped after every in-flight request.
    rt: tokio::runtime::Runtime,
}

/// What the store remembers between calls.
#[derive(Default)]
struct State {
    /// Sizes from the last listing.
    sizes: HashMap<String, u64>,
    /// Objects materialized in the cache.
    local: HashMap<String, PathBuf>,
    /// Manifest bytes fetched by the last listing, with the listing's
    /// identity of the object (size, modification time, ETag).
    manifests: HashMap<String, (String, Vec<u8>)>,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("base", &self.base.as_ref())
            .finish()
    }
}

/// Blocks the asynchronous signals in the calling thread (the runtime's
/// threads, which write to sockets): `SIGPIPE` among them. The binary
/// restores its default action, so that `rexctl status | head` ends
/// quietly; but a server that closes a connection while a request body is
/// written with `writev` (which, unlike `send`, cannot say `MSG_NOSIGNAL`)
/// would then kill the process instead of failing that request with
/// `EPIPE`, which is retried. A blocked `SIGPIPE` stays pending on the
/// thread and is never delivered. The others go to the program's threads
/// ([`crate::durable::block_async_signals`]).
fn block_sigpipe() {
    crate::durable::block_async_signals();
}

/// The whole text of an error and its sources (object_store puts the
/// server's answer in a source).
fn full_text(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    s
}

fn identity(size: u64, modified: SystemTime, e_tag: Option<&str>) -> String {
    let t = modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{size}/{}/{}", t.as_nanos(), e_tag.unwrap_or(""))
}

/// Refuses a plain-HTTP endpoint without `s3_allow_http`, as a setting
/// (exit 5), rather than leaving it to the S3 client, whose every request
/// then fails "after every retry" (exit 1; helper-99). Only when a bucket
/// is opened: an endpoint set for other tools does not concern a directory
/// L2 (helper-100).
fn check_endpoint(s: &S3Settings) -> Result<()> {
    match &s.endpoint {
        Some(e) if e.starts_with("http://") && s.allow_http != Some(true) => {
            Err(Error::Invalid(format!(
                "s3_endpoint {e:?} is plain HTTP, which is refused unless s3_allow_http is true (--s3-allow-http true, REX_S3_ALLOW_HTTP or AWS_ALLOW_HTTP)"
            )))
        }
        _ => Ok(()),
    }
}

impl S3Store {
    /// Opens `s3://bucket/prefix` for the job and rank of `settings`, and
    /// checks that the bucket answers (so that rejected credentials or a
    /// missing bucket show up at once, as a configuration error).
    pub fn open(bucket: &str, prefix: &str, settings: &StoreSettings) -> Result<S3Store> {
        // TLS through rustls with the ring provider (the build carries no
        // aws-lc). Installing the process default is idempotent: a second
        // store, or an embedding program that installed one, keeps it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let s = &settings.s3;
        check_endpoint(s)?;
        let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(v) = &s.endpoint {
            b = b.with_endpoint(v);
        }
        if let Some(v) = &s.region {
            b = b.with_region(v);
        }
        if let Some(v) = s.allow_http {
            b = b.with_allow_http(v);
        }
        if let Some(v) = &s.access_key_id {
            b = b.with_access_key_id(v);
        }
        if let Some(v) = &s.secret_access_key {
            b = b.with_secret_access_key(&v.0);
        }
        if let Some(v) = &s.session_token {
            b = b.with_token(&v.0);
        }
        b = b
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_secs(15),
                    base: 2.0,
                },
                max_retries: s.max_retries,
                retry_timeout: Duration::from_secs_f64(s.retry_timeout_s),
            })
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                format!("{}ms", (s.timeout_s * 1e3).ceil() as u64),
            )
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                format!("{}ms", (s.connect_timeout_s * 1e3).ceil() as u64),
            );
        let region = b
            .get_config_value(&AmazonS3ConfigKey::Region)
            .unwrap_or_else(|| "us-east-1".into());
        let endpoint = b
            .get_config_value(&AmazonS3ConfigKey::Endpoint)
            .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
        let config_error = |reason: String| Error::Remote {
            endpoint: endpoint.clone(),
            bucket: bucket.to_string(),
            key: prefix.to_string(),
            op: "configure",
            kind: RemoteKind::Config,
            reason,
        };
        let s3 = b.build().map_err(|e| config_error(full_text(&e)))?;
        let mut base = if prefix.is_empty() {
            Key::default()
        } else {
            Key::parse(prefix).map_err(|e| config_error(format!("prefix {prefix:?}: {e}")))?
        };
        // No shared default: two jobs under one prefix would share a chain.
        let job = settings.job.as_deref().ok_or_else(|| {
            config_error(format!(
                "no job name: the job's objects go under {}/JOB/RANK/; {}",
                if prefix.is_empty() {
                    "the bucket's root".to_string()
                } else {
                    prefix.to_string()
                },
                crate::store::settings::HOW_TO_NAME_THE_JOB
            ))
        })?;
        for part in [job, settings.rank.as_str()] {
            base = base.clone().join(part);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("rexctl-s3")
            .on_thread_start(block_sigpipe)
            .enable_all()
            .build()
            .map_err(|e| config_error(format!("start the I/O runtime: {e}")))?;
        let base_dir = settings
            .cache_dir
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&base_dir).ctx(&base_dir, "create cache directory")?;
        let cache = crate::durable::ScratchDir::new_in(&base_dir, "rexctl-l2-cache-")
            .ctx(&base_dir, "create cache directory")?;
        let store = S3Store {
            s3: Arc::new(s3),
            endpoint,
            bucket: bucket.to_string(),
            base,
            part_size: s.part_size,
            parts_in_flight: s.parts_in_flight,
            get_concurrency: s.get_concurrency,
            intent_refresh: std::time::Duration::from_secs_f64(s.intent_refresh_s.max(0.0)),
            get_slots: Arc::new(tokio::sync::Semaphore::new(s.get_concurrency.max(1))),
            state: Mutex::new(State::default()),
            fetched: Arc::new(AtomicU64::new(0)),
            uploaded: AtomicU64::new(0),
            requests: Arc::new(AtomicU64::new(0)),
            on_demand: AtomicBool::new(false),
            fresh: AtomicU64::new(u64::MAX),
            cache,
            rt,
        };
        store.probe()?;
        Ok(store)
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix of this job and rank (`prefix/<job>/<rank>`).
    pub fn base(&self) -> &str {
        self.base.as_ref()
    }

    /// The directory that holds this run's cache files.
    pub fn cache_dir(&self) -> &Path {
        self.cache.path()
    }

    fn key(&self, name: &str) -> Result<Key> {
        check_name(name)?;
        Ok(self.base.clone().join(name))
    }

    fn intent_key(&self, name: &str) -> Key {
        self.base.clone().join(UPLOADS).join(name)
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Builds an [`Error::Remote`] for a failed request on `key`.
    fn remote(&self, key: &Key, op: &'static str, e: &object_store::Error) -> Error {
        remote_error(&self.endpoint, &self.bucket, key, op, e)
    }

    fn probe(&self) -> Result<()> {
        self.count();
        let r = self
            .rt
            .block_on(self.s3.list_with_delimiter(Some(&self.base)));
        let listing = r.map_err(|e| {
            let mut err = self.remote(&self.base, "list", &e);
            // A listing never names a missing object: a 404 is the bucket.
            if let Error::Remote { kind, reason, .. } = &mut err
                && *kind == RemoteKind::NotFound
            {
                *kind = RemoteKind::Config;
                *reason =
                    format!("the bucket does not exist (rexctl never creates buckets): {reason}");
            }
            err
        })?;
        let mut st = self.state.lock().expect("state lock");
        for o in listing.objects {
            if let Some(n) = o.location.filename() {
                st.sizes.insert(n.to_string(), o.size);
            }
        }
        Ok(())
    }

    /// Forgets what the store remembers of `name` (after a put or a delete).
    fn forget(&self, name: &str) {
        let mut st = self.state.lock().expect("state lock");
        st.sizes.remove(name);
        st.manifests.remove(name);
        if let Some(p) = st.local.remove(name) {
            // Unlinking keeps the bytes of any live mapping.
            let _ = std::fs::remove_file(p);
        }
    }

    /// A whole small object (a manifest): one larger than a manifest may be
    /// is refused from its announced size, before its body is read.
    fn get_whole(&self, key: &Key) -> Result<Vec<u8>> {
        self.count();
        let max = crate::format::manifest::MAX_MANIFEST_BYTES;
        let r = self.rt.block_on(async {
            let g = self.s3.get(key).await?;
            if g.meta.size > max {
                return Ok(Err(g.meta.size));
            }
            g.bytes().await.map(Ok)
        });
        let b = match r.map_err(|e| self.remote(key, "get", &e))? {
            Ok(b) => b,
            Err(size) => {
                return Err(Error::corrupt(
                    format!("s3://{}/{}", self.bucket, key.as_ref()),
                    0,
                    "size",
                    format!("{size} bytes, more than the {max} a manifest may have"),
                ));
            }
        };
        self.fetched.fetch_add(b.len() as u64, Ordering::Relaxed);
        Ok(b.to_vec())
    }

    /// [`Store::put_bytes`]: a create-only put.
    /// A PUT of `bytes` at `key` whatever is there (atomic on S3).
    fn put_unconditional(&self, key: &Key, bytes: &[u8]) -> Result<()> {
        self.count();
        self.rt
            .block_on(self.s3.put(key, PutPayload::from(bytes.to_vec())))
            .map_err(|e| self.remote(key, "put", &e))?;
        self.uploaded
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn put_bytes_once(&self, name: &str, bytes: &[u8]) -> Result<()> {
        use object_store::Error as E;
        let key = self.key(name)?;
        self.forget(name);
        self.count();
        let opts = PutOptions::from(PutMode::Create);
        let r = self.rt.block_on(
            self.s3
                .put_opts(&key, PutPayload::from(bytes.to_vec()), opts),
        );
        match r {
            Ok(_) => {
                self.uploaded
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                Ok(())
            }
            // Exists already (a retried request, or recovery re-publishing):
            // fine if identical, never overwritten otherwise.
            Err(E::AlreadyExists { .. }) => self.same_or_conflict(name, &key, bytes),
            // Conditional puts disabled (`AWS_CONDITIONAL_PUT=disabled`, for
            // stores without `If-None-Match`): look first.
            Err(E::NotImplemented { .. }) => match self.head_size(&key) {
                Ok(_) => self.same_or_conflict(name, &key, bytes),
                Err(Error::Remote {
                    kind: RemoteKind::NotFound,
                    ..
                }) => self.put_unconditional(&key, bytes),
                Err(e) => Err(e),
            },
            Err(e) => Err(self.remote(&key, "put", &e)),
        }
    }

    /// The manifest whose existence forbids publishing the object `name`
    /// now: `name` is a data file of the generation written afresh
    /// ([`Store::writing_generation`]).
    fn guarding_manifest(&self, name: &str) -> Result<Option<Key>> {
        let g = self.fresh.load(Ordering::Relaxed);
        match crate::format::manifest::generation_of(name) {
            Some(n) if n == g && parse_manifest_name(name).is_none() => {
                Ok(Some(self.key(&crate::format::manifest::manifest_name(g))?))
            }
            _ => Ok(None),
        }
    }

    /// Fails with a conflict when the manifest `guard` exists: another
    /// writer committed the generation whose file `key` would replace.
    async fn not_committed(&self, guard: Option<&Key>, key: &Key) -> Result<()> {
        let Some(m) = guard else { return Ok(()) };
        self.count();
        match self.s3.head(m).await {
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.remote(m, "head", &e)),
            Ok(_) => Err(self.put_conflict(
                key,
                format!(
                    "{m} appeared while this push wrote the same generation: another copy of the job (another node) committed it; its files are not replaced"
                ),
            )),
        }
    }

    fn head_size(&self, key: &Key) -> Result<u64> {
        self.count();
        let m = self
            .rt
            .block_on(self.s3.head(key))
            .map_err(|e| self.remote(key, "head", &e))?;
        Ok(m.size)
    }

    /// Bytes `range` of `key`, in one request.
    fn get_range(&self, key: &Key, range: std::ops::Range<u64>) -> Result<Vec<u8>> {
        self.count();
        let want = range.end - range.start;
        let b = self
            .rt
            .block_on(self.s3.get_range(key, range.clone()))
            .map_err(|e| self.remote(key, "get", &e))?;
        if b.len() as u64 != want {
            return Err(short_answer(
                &self.endpoint,
                &self.bucket,
                key,
                format!(
                    "asked for bytes {}..{}, received {} bytes (did the object change while being read?)",
                    range.start,
                    range.end,
                    b.len()
                ),
            ));
        }
        self.fetched.fetch_add(want, Ordering::Relaxed);
        Ok(b.to_vec())
    }

    /// Uploads a stream as a multipart upload of `part_size` parts: `cur`
    /// holds its first bytes (more than a part), `got` counts what came, the
    /// rest comes from `pieces`. When the stream has a placeholder head, the
    /// first part is kept until the stream's end brings the head (parts may
    /// arrive in any order); the others go up as they fill, at most
    /// `parts_in_flight` at a time, which also bounds the memory held.
    /// Returns the CRC-32 of the object. Aborts the upload on failure, and
    /// when the pieces stop.
    fn put_multipart(
        &self,
        name: &str,
        key: &Key,
        mut cur: Vec<u8>,
        got: &mut Received,
        pieces: &mut dyn Iterator<Item = Piece>,
        progress: &dyn Progress,
    ) -> Result<u32> {
        let what = Path::new(name);
        let guard = self.guarding_manifest(name)?;
        let intent = self.intent_key(name);
        // An intent left for this name: abort that upload first.
        self.abort_intent(name, &intent)?;
        self.count();
        let id = self
            .rt
            .block_on(self.s3.create_multipart(key))
            .map_err(|e| self.remote(key, "start multipart upload", &e))?;
        self.count();
        self.rt
            .block_on(
                self.s3
                    .put(&intent, PutPayload::from(id.clone().into_bytes())),
            )
            .map_err(|e| self.remote(&intent, "record upload intent", &e))?;
        let part = self.part_size as usize;
        let hold_first = got.head_len() > 0;
        let sent = self.rt.block_on(async {
            let mut set: JoinSet<(usize, u64, object_store::Result<PartId>)> = JoinSet::new();
            let mut done: Vec<Option<PartId>> = Vec::new();
            let collect = |r: std::result::Result<
                (usize, u64, object_store::Result<PartId>),
                tokio::task::JoinError,
            >,
                           done: &mut Vec<Option<PartId>>|
             -> Result<()> {
                let (i, n, r) =
                    r.map_err(|e| Error::io(what, "upload part", std::io::Error::other(e)))?;
                done[i] = Some(r.map_err(|e| self.remote(key, "upload part", &e))?);
                self.uploaded.fetch_add(n, Ordering::Relaxed);
                progress.advance(n);
                Ok(())
            };
            let spawn =
                |set: &mut JoinSet<_>, done: &mut Vec<Option<PartId>>, i: usize, buf: Vec<u8>| {
                    if done.len() <= i {
                        done.resize(i + 1, None);
                    }
                    let n = buf.len() as u64;
                    let (s3, key, id) = (Arc::clone(&self.s3), key.clone(), id.clone());
                    self.count();
                    set.spawn(async move {
                        let r = s3.put_part(&key, &id, i, PutPayload::from(buf)).await;
                        (i, n, r)
                    });
                };
            let mut held: Option<Vec<u8>> = None;
            let mut next = 0usize;
            let mut refreshed = std::time::Instant::now();
            let crc = loop {
                while cur.len() >= part {
                    let rest = cur.split_off(part);
                    let full = std::mem::replace(&mut cur, rest);
                    if next == 0 && hold_first {
                        held = Some(full);
                    } else {
                        while set.len() >= self.parts_in_flight {
                            let r = set.join_next().await.expect("a part in flight");
                            collect(r, &mut done)?;
                        }
                        // Still running: the intent is written again, so
                        // that no `gc` takes the upload for an abandoned
                        // one (helper-90: every push longer than gc's
                        // grace was aborted).
                        if refreshed.elapsed() >= self.intent_refresh {
                            self.count();
                            self.s3
                                .put(&intent, PutPayload::from(id.clone().into_bytes()))
                                .await
                                .map_err(|e| self.remote(&intent, "refresh upload intent", &e))?;
                            refreshed = std::time::Instant::now();
                        }
                        spawn(&mut set, &mut done, next, full);
                    }
                    next += 1;
                }
                match pieces.next() {
                    Some(Piece::Data(b)) => {
                        got.data(&b);
                        cur.extend_from_slice(&b);
                    }
                    Some(Piece::End(head)) => {
                        let crc = got.end(what, &head)?;
                        if let Some(mut first) = held.take() {
                            first[..head.len()].copy_from_slice(&head);
                            spawn(&mut set, &mut done, 0, first);
                        }
                        if !cur.is_empty() {
                            spawn(&mut set, &mut done, next, std::mem::take(&mut cur));
                        }
                        break crc;
                    }
                    None => return Err(super::stopped(what)),
                }
            };
            while let Some(r) = set.join_next().await {
                collect(r, &mut done)?;
            }
            let done: Vec<PartId> = done
                .into_iter()
                .map(|p| p.expect("every part uploaded"))
                .collect();
            self.not_committed(guard.as_ref(), key).await?;
            self.count();
            self.s3
                .complete_multipart(key, &id, done)
                .await
                .map_err(|e| self.remote(key, "complete multipart upload", &e))?;
            Ok::<u32, Error>(crc)
        });
        match sent {
            Ok(crc) => {
                self.count();
                let _ = self.rt.block_on(self.s3.delete(&intent));
                Ok(crc)
            }
            Err(e) => {
                let e = match self.aborted_under_us(e, &intent, &id) {
                    // Nothing left to abort.
                    Ok(e) => return Err(e),
                    Err(e) => e,
                };
                // The parts in flight were cancelled with the task set.
                self.count();
                match self.rt.block_on(self.s3.abort_multipart(key, &id)) {
                    Ok(()) => {
                        self.count();
                        let _ = self.rt.block_on(self.s3.delete(&intent));
                        Err(e)
                    }
                    Err(a) => {
                        let why = full_text(&a);
                        Err(match e {
                            Error::Remote {
                                endpoint,
                                bucket,
                                key,
                                op,
                                kind,
                                reason,
                            } => Error::Remote {
                                endpoint,
                                bucket,
                                key,
                                op,
                                kind,
                                reason: format!(
                                    "{reason} (aborting the upload failed too: {why}; the next push or `rexctl gc` aborts it)"
                                ),
                            },
                            other => other,
                        })
                    }
                }
            }
        }
    }

    /// `e`, a multipart upload's failure, said as what it is when another
    /// process aborted the upload `id` (its intent object `intent` is gone
    /// or names another upload: `rexctl gc`, or another push's recovery,
    /// aborts the uploads whose intent is older than its grace, and a push
    /// of the same name replaces the intent): the server then refuses the
    /// parts (403 or 404, NoSuchUpload), which read as rejected credentials,
    /// exit 5 (helper-90). `Ok` with the error said so when it was, `Err`
    /// with `e` when not.
    fn aborted_under_us(
        &self,
        mut e: Error,
        intent: &Key,
        id: &str,
    ) -> std::result::Result<Error, Error> {
        use object_store::Error as E;
        let refused = matches!(
            &e,
            Error::Remote {
                op: "upload part" | "complete multipart upload",
                kind: RemoteKind::Config | RemoteKind::NotFound,
                reason,
                ..
            // A bucket deleted under the upload is said as such (exit 5).
            } if !reason.starts_with("the bucket does not exist")
        );
        let gone = refused && {
            self.count();
            match self
                .rt
                .block_on(async { self.s3.get(intent).await?.bytes().await })
            {
                Ok(b) => String::from_utf8_lossy(&b).trim() != id,
                Err(E::NotFound { .. }) => true,
                Err(_) => false,
            }
        };
        match &mut e {
            Error::Remote { kind, reason, .. } if gone => {
                *kind = RemoteKind::Transport;
                *reason = "the multipart upload was aborted by another process (`rexctl gc` with a grace shorter than this upload has run, or another push of this object or its recovery on this prefix); nothing was published: run the push again".to_string();
                Ok(e)
            }
            _ => Err(e),
        }
    }

    /// Aborts the upload an intent object names, if there is one, and
    /// deletes the intent. Returns whether there was one.
    fn abort_intent(&self, name: &str, intent: &Key) -> Result<bool> {
        use object_store::Error as E;
        self.count();
        let id = match self
            .rt
            .block_on(async { self.s3.get(intent).await?.bytes().await })
        {
            Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
            Err(E::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(self.remote(intent, "read upload intent", &e)),
        };
        let key = self.key(name)?;
        self.count();
        match self.rt.block_on(self.s3.abort_multipart(&key, &id)) {
            // Gone already (completed, or aborted by a lifecycle rule); some
            // servers answer 403 for an upload id they no longer know.
            Ok(()) | Err(E::NotFound { .. } | E::PermissionDenied { .. }) => {}
            Err(e) => return Err(self.remote(&key, "abort multipart upload", &e)),
        }
        self.count();
        match self.rt.block_on(self.s3.delete(intent)) {
            Ok(()) | Err(E::NotFound { .. }) => Ok(true),
            Err(e) => Err(self.remote(intent, "delete upload intent", &e)),
        }
    }

    /// Fetches `key` (`size` bytes) into `dst` with ranged GETs, several
    /// in flight, through a temporary file renamed into place.
    fn fetch(&self, key: &Key, size: u64, dst: &Path) -> Result<()> {
        let dir = dst.parent().expect("a cache file has a directory");
        std::fs::create_dir_all(dir).ctx(dir, "create cache directory")?;
        let tmp = dir.join(format!(
            ".{}.part-{}",
            dst.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            self.requests.load(Ordering::Relaxed)
        ));
        let file = Arc::new(File::create(&tmp).ctx(&tmp, "create cache file")?);
        file.set_len(size).ctx(&tmp, "size cache file")?;
        let ranges = range_pieces(0..size);
        let r = self.rt.block_on(async {
            let mut set: JoinSet<std::result::Result<u64, TaskError>> = JoinSet::new();
            let mut got = 0u64;
            let mut next = ranges.into_iter();
            loop {
                while set.len() < self.get_concurrency
                    && let Some((a, b)) = next.next()
                {
                    let (s3, k, f, t) = (
                        Arc::clone(&self.s3),
                        key.clone(),
                        Arc::clone(&file),
                        tmp.clone(),
                    );
                    let slots = Arc::clone(&self.get_slots);
                    self.count();
                    set.spawn(async move {
                        let _slot = slots.acquire_owned().await;
                        get_range_into(&s3, &k, a..b, &f, &t, |_| {}).await
                    });
                }
                let Some(r) = set.join_next().await else {
                    break;
                };
                got += match r {
                    Ok(Ok(n)) => n,
                    Ok(Err(TaskError::Remote(e))) => return Err(self.remote(key, "get", &e)),
                    Ok(Err(TaskError::Short(r))) => {
                        return Err(short_answer(&self.endpoint, &self.bucket, key, r));
                    }
                    Ok(Err(TaskError::Local(e))) => return Err(e),
                    Err(e) => return Err(Error::io(&tmp, "fetch", std::io::Error::other(e))),
                };
            }
            Ok::<u64, Error>(got)
        });
        match r {
            Ok(got) if got == size => {
                self.fetched.fetch_add(got, Ordering::Relaxed);
                std::fs::rename(&tmp, dst).ctx(dst, "rename cache file")?;
                Ok(())
            }
            Ok(got) => {
                let _ = std::fs::remove_file(&tmp);
                Err(short_answer(
                    &self.endpoint,
                    &self.bucket,
                    key,
                    format!("fetched {got} of its {size} bytes"),
                ))
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// The `s3://` URL of a cache path, if it is one.
    fn url_of(&self, p: &Path) -> Option<PathBuf> {
        let rel = p.strip_prefix(self.cache.path()).ok()?;
        let rel = match rel.strip_prefix("on-demand") {
            // `<key>.<n>`: drop the open's number.
            Ok(r) => r.with_extension(""),
            Err(_) => rel.to_path_buf(),
        };
        Some(PathBuf::from(format!(
            "s3://{}/{}",
            self.bucket,
            rel.display()
        )))
    }

    /// Fetches the manifests of a listing that the store does not hold yet,
    /// several at once.
    fn prefetch_manifests(&self, wanted: Vec<(String, String)>) {
        if wanted.is_empty() {
            return;
        }
        let mut set: JoinSet<(String, String, Option<Vec<u8>>)> = JoinSet::new();
        let got = self.rt.block_on(async {
            let mut out = Vec::new();
            let mut next = wanted.into_iter();
            loop {
                while set.len() < self.get_concurrency
                    && let Some((name, id)) = next.next()
                {
                    let (s3, k) = (Arc::clone(&self.s3), self.base.clone().join(name.as_str()));
                    self.count();
                    set.spawn(async move {
                        let b = async { s3.get(&k).await?.bytes().await }.await;
                        (name, id, b.ok().map(|b| b.to_vec()))
                    });
                }
                let Some(r) = set.join_next().await else {
                    break;
                };
                if let Ok(x) = r {
                    out.push(x);
                }
            }
            out
        });
        let mut st = self.state.lock().expect("state lock");
        for (name, id, bytes) in got {
            // A failed fetch is retried (and reported) by `read`.
            if let Some(b) = bytes {
                self.fetched.fetch_add(b.len() as u64, Ordering::Relaxed);
                st.manifests.insert(name, (id, b));
            }
        }
    }
}

/// Builds an [`Error::Remote`] for a failed request on `key`, classified
/// by what the store answered.
/// An answer whose body is not the bytes asked for (shorter, or the
/// fetch of an object ending before its size): the store's failure, not
/// the configuration's nor the data's, so a transport error (exit 1; the
/// next run asks again), naming the object as every remote error does.
fn short_answer(endpoint: &str, bucket: &str, key: &Key, reason: String) -> Error {
    Error::Remote {
        endpoint: endpoint.to_string(),
        bucket: bucket.to_string(),
        key: key.to_string(),
        op: "get",
        kind: RemoteKind::Transport,
        reason,
    }
}

fn remote_error(
    endpoint: &str,
    bucket: &str,
    key: &Key,
    op: &'static str,
    e: &object_store::Error,
) -> Error {
    use object_store::Error as E;
    let text = full_text(e);
    let has = |codes: &[&str]| codes.iter().any(|c| text.contains(c));
    let (kind, why) = if has(&["NoSuchBucket"]) {
        (
            RemoteKind::Config,
            format!(
                "the bucket does not exist (rexctl never creates buckets; create {} first)",
                bucket
            ),
        )
    } else if has(&[
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccessDenied",
        "InvalidToken",
        "ExpiredToken",
        "NotSignedUp",
        "AuthorizationHeaderMalformed",
        "403 Forbidden",
        "401 Unauthorized",
    ]) || matches!(e, E::PermissionDenied { .. } | E::Unauthenticated { .. })
    {
        (
            RemoteKind::Config,
            "the store rejected the credentials or denied access (check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION, or s3_access_key_id, s3_secret_access_key and s3_region in rex.toml)".to_string(),
        )
    } else if has(&["PermanentRedirect", "InvalidBucketName"])
        || matches!(
            e,
            E::NotSupported { .. }
                | E::NotImplemented { .. }
                | E::UnknownConfigurationKey { .. }
                | E::InvalidPath { .. }
        )
    {
        (
            RemoteKind::Config,
            "the store refused the request as configured".to_string(),
        )
    } else {
        match e {
            E::NotFound { .. } => (RemoteKind::NotFound, "no such object".to_string()),
            E::AlreadyExists { .. } | E::Precondition { .. } => (
                RemoteKind::Conflict,
                "the object already exists".to_string(),
            ),
            _ => (
                RemoteKind::Transport,
                "the request failed after every retry".to_string(),
            ),
        }
    };
    Error::Remote {
        endpoint: endpoint.to_string(),
        bucket: bucket.to_string(),
        key: key.to_string(),
        op,
        kind,
        reason: format!("{why}: {text}"),
    }
}

/// Fetches the chunks of an object opened on demand into its sparse cache
/// file, one ranged GET per chunk (see [`ChunkFill`]).
struct RangeFill {
    s3: Arc<AmazonS3>,
    rt: tokio::runtime::Handle,
    endpoint: String,
    bucket: String,
    key: Key,
    file: File,
    path: PathBuf,
    fetched: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    /// The store's GET permits ([`S3Store::get_slots`]).
    slots: Arc<tokio::sync::Semaphore>,
}

impl ChunkFill for RangeFill {
    fn fill(&self, offset: u64, len: u64) -> Result<()> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let b = self
            .rt
            .block_on(async {
                let _slot = self.slots.acquire().await;
                self.s3.get_range(&self.key, offset..offset + len).await
            })
            .map_err(|e| remote_error(&self.endpoint, &self.bucket, &self.key, "get", &e))?;
        if b.len() as u64 != len {
            return Err(short_answer(
                &self.endpoint,
                &self.bucket,
                &self.key,
                format!(
                    "asked for bytes {offset}..{}, received {} bytes (did the object change while being read?)",
                    offset + len,
                    b.len()
                ),
            ));
        }
        self.file
            .write_all_at(&b, offset)
            .ctx(&self.path, "write cache file")?;
        self.fetched.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }
}

/// GETs bytes `range` of `key` into `file` (at `path`, for messages) at
/// the same offsets, streamed into place with no copy of the range in
/// memory; `written(end)` says that bytes `range.start .. end` are in
/// place. Returns the bytes written.
async fn get_range_into(
    s3: &AmazonS3,
    key: &Key,
    range: std::ops::Range<u64>,
    file: &File,
    path: &Path,
    mut written: impl FnMut(u64),
) -> std::result::Result<u64, TaskError> {
    let (a, b) = (range.start, range.end);
    let opts = GetOptions::new().with_range(Some(a..b));
    let r = s3.get_opts(key, opts).await.map_err(TaskError::Remote)?;
    let mut body = r.into_stream();
    let mut at = a;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(TaskError::Remote)?;
        if at + chunk.len() as u64 > b {
            break;
        }
        file.write_all_at(&chunk, at)
            .ctx(path, "write cache file")
            .map_err(TaskError::Local)?;
        at += chunk.len() as u64;
        written(at);
    }
    if at != b {
        return Err(TaskError::Short(format!(
            "asked for bytes {a}..{b}, received {} bytes (did the object change while being read?)",
            at - a
        )));
    }
    Ok(b - a)
}

/// How many more bytes of a piece land before a streamed read wakes the
/// readers waiting for them (the size of a chunk as rexctl writes it).
const NOTIFY_STEP: u64 = crate::format::chunked::DEFAULT_CHUNK as u64;

/// The ranged GETs bytes `range` of an object are fetched in, in order:
/// [`RANGE_SIZE`] each, the last one shorter. A streamed read
/// ([`StreamFill`]) goes in the same pieces as a whole fetch: starting with
/// 1 MiB pieces that doubled each round made more requests for a server
/// and a client sharing the cores, and measured slower on a loopback and
/// on a shaped 400 Mbit/s link alike (docs/PERFORMANCE.md).
fn range_pieces(range: std::ops::Range<u64>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let end = at.saturating_add(RANGE_SIZE).min(range.end);
        out.push((at, end));
        at = end;
    }
    out
}

/// An RPS or Pointer File read whole from the bucket while it is decoded:
/// a task of the store's runtime fetches its chunks' bytes in order, in
/// pieces ([`range_pieces`]), `s3_get_concurrency` in flight, into the
/// object's sparse cache file, and a reader asking for a chunk
/// ([`ChunkFill::fill`]) waits only until the bytes up to the chunk's end
/// have landed (a piece's bytes land in order; the readers are woken each
/// time another [`NOTIFY_STEP`] of them has, and when the piece ends). A
/// full
/// restore thus decodes and writes the first pages while the rest of the
/// lineage is still arriving, where fetching every object before opening
/// it made the restore the sum of the two. Each byte is written once,
/// before any chunk that holds it is verified, so no byte a reader holds
/// changes. The task stops when the file is dropped.
struct StreamFill {
    stream: Arc<Stream>,
    task: tokio::task::AbortHandle,
    key: Key,
    path: PathBuf,
}

/// What the fetching task and the readers of a [`StreamFill`] share.
struct Stream {
    pieces: Vec<(u64, u64)>,
    state: Mutex<StreamState>,
    ready: std::sync::Condvar,
}

#[derive(Default)]
struct StreamState {
    /// How far each piece is in place (its bytes arrive in order): a
    /// reader waits only for the bytes up to the end of its chunk.
    upto: Vec<u64>,
    /// Why the task stopped early: every waiting and later reader gets it.
    failed: Option<Error>,
}

/// Held by the fetching task: however it ends (finished, failed, or
/// cancelled with the store's runtime), no reader is left waiting for a
/// piece that will never come.
struct StreamEnd(Arc<Stream>);

impl Drop for StreamEnd {
    fn drop(&mut self) {
        let mut st = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.failed.is_none() && !self.0.complete(&st, 0..self.0.pieces.len()) {
            st.failed = Some(Error::Invalid(
                "the object's fetch stopped before its end (the store was closed)".into(),
            ));
        }
        self.0.ready.notify_all();
    }
}

impl Stream {
    /// Piece `i` is in place up to byte `end`.
    fn advance(&self, i: usize, end: u64) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.upto[i] = st.upto[i].max(end);
        self.ready.notify_all();
    }

    /// Piece `i` is complete, or the fetch failed.
    fn finish_piece(&self, i: usize, r: Result<()>) {
        match r {
            Ok(()) => self.advance(i, self.pieces[i].1),
            Err(e) => {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                st.failed.get_or_insert(e);
                self.ready.notify_all();
            }
        }
    }

    /// Whether `pieces` are all complete.
    fn complete(&self, st: &StreamState, pieces: std::ops::Range<usize>) -> bool {
        pieces.into_iter().all(|i| st.upto[i] >= self.pieces[i].1)
    }
}

impl StreamFill {
    /// Starts fetching bytes `data` of `key` into `file`.
    fn start(
        store: &S3Store,
        key: &Key,
        data: std::ops::Range<u64>,
        file: File,
        path: &Path,
    ) -> StreamFill {
        let pieces = range_pieces(data);
        let stream = Arc::new(Stream {
            state: Mutex::new(StreamState {
                upto: pieces.iter().map(|&(a, _)| a).collect(),
                failed: None,
            }),
            pieces,
            ready: std::sync::Condvar::new(),
        });
        let (s3, k, st) = (Arc::clone(&store.s3), key.clone(), Arc::clone(&stream));
        let (file, path) = (Arc::new(file), path.to_path_buf());
        let task_path = path.clone();
        let (endpoint, bucket) = (store.endpoint.clone(), store.bucket.clone());
        let (fetched, requests) = (Arc::clone(&store.fetched), Arc::clone(&store.requests));
        let concurrency = store.get_concurrency.max(1);
        let slots = Arc::clone(&store.get_slots);
        let task = store.rt.spawn(async move {
            let _end = StreamEnd(Arc::clone(&st));
            let mut set: JoinSet<(usize, std::result::Result<u64, TaskError>)> = JoinSet::new();
            let mut next = st.pieces.clone().into_iter().enumerate();
            loop {
                while set.len() < concurrency
                    && let Some((i, (a, b))) = next.next()
                {
                    let (s3, k, f, p) = (
                        Arc::clone(&s3),
                        k.clone(),
                        Arc::clone(&file),
                        task_path.clone(),
                    );
                    let progress = Arc::clone(&st);
                    let slots = Arc::clone(&slots);
                    requests.fetch_add(1, Ordering::Relaxed);
                    set.spawn(async move {
                        let _slot = slots.acquire_owned().await;
                        // Readers are woken as each chunk's worth of bytes
                        // lands, not for every body part (a few KiB each).
                        let mut told = a;
                        let r = get_range_into(&s3, &k, a..b, &f, &p, |end| {
                            if end - told >= NOTIFY_STEP {
                                progress.advance(i, end);
                                told = end;
                            }
                        });
                        (i, r.await)
                    });
                }
                let Some(r) = set.join_next().await else {
                    break;
                };
                let (i, r) = match r {
                    Ok(x) => x,
                    Err(e) => {
                        let e = Error::io(&task_path, "fetch", std::io::Error::other(e));
                        st.finish_piece(0, Err(e));
                        return;
                    }
                };
                let r = match r {
                    Ok(n) => {
                        fetched.fetch_add(n, Ordering::Relaxed);
                        Ok(())
                    }
                    Err(TaskError::Remote(e)) => {
                        Err(remote_error(&endpoint, &bucket, &k, "get", &e))
                    }
                    Err(TaskError::Short(r)) => Err(short_answer(&endpoint, &bucket, &k, r)),
                    Err(TaskError::Local(e)) => Err(e),
                };
                let failed = r.is_err();
                st.finish_piece(i, r);
                if failed {
                    return;
                }
            }
        });
        StreamFill {
            stream,
            task: task.abort_handle(),
            key: key.clone(),
            path: path.clone(),
        }
    }
}

impl ChunkFill for StreamFill {
    fn fill(&self, offset: u64, len: u64) -> Result<()> {
        let s = &self.stream;
        // The pieces overlapping `offset .. offset + len`.
        let first = s.pieces.partition_point(|&(_, b)| b <= offset);
        let last = s.pieces.partition_point(|&(a, _)| a < offset + len);
        if first >= last || s.pieces[first].0 > offset || s.pieces[last - 1].1 < offset + len {
            return Err(Error::corrupt(
                &self.path,
                offset,
                "chunk table",
                format!(
                    "bytes {offset}..{} of {} lie outside the chunks being fetched",
                    offset + len,
                    self.key
                ),
            ));
        }
        let end = offset + len;
        let mut st = s.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // Every piece before the last complete, the last up to `end`.
            if s.complete(&st, first..last - 1) && st.upto[last - 1] >= end {
                return Ok(());
            }
            if let Some(e) = &st.failed {
                return Err(e.again());
            }
            st = s.ready.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for StreamFill {
    fn drop(&mut self) {
        // Nothing reads the file any more: stop fetching it.
        self.task.abort();
    }
}

/// How a task of a ranged read fails.
enum TaskError {
    Remote(object_store::Error),
    /// The answer's body was not the bytes asked for ([`short_answer`]).
    Short(String),
    Local(Error),
}

impl Store for S3Store {
    fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.base)
    }

    fn list(&self) -> Result<Vec<ObjectInfo>> {
        self.count();
        let listing = self
            .rt
            .block_on(self.s3.list_with_delimiter(Some(&self.base)))
            .map_err(|e| self.remote(&self.base, "list", &e))?;
        let mut out = Vec::new();
        let mut wanted = Vec::new();
        {
            let mut st = self.state.lock().expect("state lock");
            st.sizes.clear();
            for o in listing.objects {
                let Some(name) = o.location.filename().map(str::to_string) else {
                    continue;
                };
                if name.starts_with('.')
                    || o.location.prefix_match(&self.base).map(|r| r.count()) != Some(1)
                {
                    continue;
                }
                let modified = SystemTime::from(o.last_modified);
                if parse_manifest_name(&name).is_some() {
                    let id = identity(o.size, modified, o.e_tag.as_deref());
                    if st.manifests.get(&name).map(|(i, _)| i) != Some(&id) {
                        wanted.push((name.clone(), id));
                    }
                }
                st.sizes.insert(name.clone(), o.size);
                out.push(ObjectInfo {
                    name,
                    bytes: o.size,
                    modified: Some(modified),
                });
            }
            let live: std::collections::HashSet<&String> = out.iter().map(|o| &o.name).collect();
            st.manifests.retain(|n, _| live.contains(n));
        }
        self.prefetch_manifests(wanted);
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let r = self.put_bytes_once(name, bytes);
        // Our own manifest of the generation written afresh: its files may
        // be uploaded again now (recovery of one gone missing).
        if r.is_ok() && parse_manifest_name(name) == Some(self.fresh.load(Ordering::Relaxed)) {
            self.fresh.store(u64::MAX, Ordering::Relaxed);
        }
        r
    }

    fn replace_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        // An unconditional PUT replaces the object atomically: a reader
        // gets the old bytes or the new ones.
        let key = self.key(name)?;
        self.forget(name);
        self.put_unconditional(&key, bytes)
    }

    fn writing_generation(&self, generation: Option<u64>) {
        self.fresh
            .store(generation.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn put_stream(
        &self,
        name: &str,
        head_len: u64,
        pieces: &mut dyn Iterator<Item = Piece>,
        progress: &dyn Progress,
    ) -> Result<(u64, u32)> {
        let key = self.key(name)?;
        self.forget(name);
        let mut got = Received::new(head_len);
        // Up to a part and a piece: a stream that ends within one part goes
        // up with one PUT.
        let mut first = Vec::new();
        let end = loop {
            match pieces.next() {
                Some(Piece::Data(b)) => {
                    got.data(&b);
                    first.extend_from_slice(&b);
                    if first.len() as u64 > self.part_size {
                        break None;
                    }
                }
                Some(Piece::End(head)) => break Some(head),
                None => return Err(super::stopped(Path::new(name))),
            }
        };
        let crc = match end {
            Some(head) => {
                let crc = got.end(Path::new(name), &head)?;
                first[..head.len()].copy_from_slice(&head);
                let n = first.len() as u64;
                let guard = self.guarding_manifest(name)?;
                self.rt.block_on(self.not_committed(guard.as_ref(), &key))?;
                self.count();
                self.rt
                    .block_on(self.s3.put(&key, PutPayload::from(first)))
                    .map_err(|e| self.remote(&key, "put", &e))?;
                self.uploaded.fetch_add(n, Ordering::Relaxed);
                progress.advance(n);
                crc
            }
            None => self.put_multipart(name, &key, first, &mut got, pieces, progress)?,
        };
        let len = got.len();
        let arrived = self.head_size(&key)?;
        if arrived != len {
            return Err(Error::Remote {
                endpoint: self.endpoint.clone(),
                bucket: self.bucket.clone(),
                key: key.to_string(),
                op: "check upload",
                kind: RemoteKind::Conflict,
                reason: format!("{arrived} bytes arrived, {len} were sent"),
            });
        }
        self.state
            .lock()
            .expect("state lock")
            .sizes
            .insert(name.to_string(), len);
        Ok((len, crc))
    }

    fn read(&self, name: &str) -> Result<Vec<u8>> {
        let key = self.key(name)?;
        if let Some((_, b)) = self.state.lock().expect("state lock").manifests.get(name) {
            return Ok(b.clone());
        }
        self.get_whole(&key)
    }

    fn open_local(&self, name: &str) -> Result<PathBuf> {
        let key = self.key(name)?;
        let known = {
            let st = self.state.lock().expect("state lock");
            if let Some(p) = st.local.get(name) {
                return Ok(p.clone());
            }
            st.sizes.get(name).copied()
        };
        let size = match known {
            Some(s) => s,
            None => self.head_size(&key)?,
        };
        let dst = self.cache.path().join(key.as_ref());
        self.fetch(&key, size, &dst)?;
        self.state
            .lock()
            .expect("state lock")
            .local
            .insert(name.to_string(), dst.clone());
        Ok(dst)
    }

    fn delete(&self, name: &str) -> Result<()> {
        use object_store::Error as E;
        let key = self.key(name)?;
        self.forget(name);
        self.count();
        match self.rt.block_on(self.s3.delete(&key)) {
            Ok(()) | Err(E::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.remote(&key, "delete", &e)),
        }
    }

    fn abort_stale_uploads(&self, older_than: Option<Duration>) -> Result<Vec<String>> {
        let prefix = self.base.clone().join(UPLOADS);
        self.count();
        let listing = self
            .rt
            .block_on(self.s3.list_with_delimiter(Some(&prefix)))
            .map_err(|e| self.remote(&prefix, "list upload intents", &e))?;
        let now = SystemTime::now();
        let mut notes = Vec::new();
        for o in listing.objects {
            let Some(name) = o.location.filename().map(str::to_string) else {
                continue;
            };
            let age = now
                .duration_since(SystemTime::from(o.last_modified))
                .unwrap_or_default();
            if older_than.is_some_and(|g| age < g) {
                continue;
            }
            if self.abort_intent(&name, &o.location)? {
                notes.push(format!(
                    "aborted an unfinished multipart upload of {name} in {} (started {} s ago)",
                    self.describe(),
                    age.as_secs()
                ));
            }
        }
        Ok(notes)
    }

    fn read_on_demand(&self, on: bool) {
        self.on_demand.store(on, Ordering::Relaxed);
    }

    fn open_chunked(&self, name: &str, kind: Kind) -> Result<Option<ChunkedFile>> {
        let on_demand = self.on_demand.load(Ordering::Relaxed);
        let key = self.key(name)?;
        let known = {
            let st = self.state.lock().expect("state lock");
            if st.local.contains_key(name) {
                // Fetched whole already: map that.
                return Ok(None);
            }
            st.sizes.get(name).copied()
        };
        let size = match known {
            Some(s) => s,
            None => self.head_size(&key)?,
        };
        if size < HEADER_LEN + 4 {
            return Ok(None);
        }
        let header = self.get_range(&key, 0..HEADER_LEN)?;
        let Some(table_off) = table_offset(&header).filter(|&t| t < size) else {
            // Not a sound header: fetch it whole and let the reader say why.
            return Ok(None);
        };
        let table = self.get_range(&key, table_off..size)?;
        // A file of its own for each open: a sparse file being filled is
        // never shared with (or truncated under) another reader's map.
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        let dst = self
            .cache
            .path()
            .join("on-demand")
            .join(format!("{}.{n}", key.as_ref()));
        let dir = dst.parent().expect("a cache file has a directory");
        std::fs::create_dir_all(dir).ctx(dir, "create cache directory")?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&dst)
            .ctx(&dst, "create cache file")?;
        file.set_len(size).ctx(&dst, "size cache file")?;
        file.write_all_at(&header, 0)
            .ctx(&dst, "write cache file")?;
        file.write_all_at(&table, table_off)
            .ctx(&dst, "write cache file")?;
        let fill: Box<dyn ChunkFill> = if on_demand {
            Box::new(RangeFill {
                s3: Arc::clone(&self.s3),
                rt: self.rt.handle().clone(),
                endpoint: self.endpoint.clone(),
                bucket: self.bucket.clone(),
                key,
                file,
                path: dst.clone(),
                fetched: Arc::clone(&self.fetched),
                requests: Arc::clone(&self.requests),
                slots: Arc::clone(&self.get_slots),
            })
        } else {
            Box::new(StreamFill::start(
                self,
                &key,
                HEADER_LEN..table_off,
                file,
                &dst,
            ))
        };
        ChunkedFile::open_lazy(&dst, kind, fill).map(Some)
    }

    fn stats(&self) -> Option<StoreStats> {
        Some(StoreStats {
            bytes_fetched: self.fetched.load(Ordering::Relaxed),
            bytes_uploaded: self.uploaded.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
        })
    }

    fn public_error(&self, e: Error) -> Error {
        e.map_paths(&|p| self.url_of(p))
    }

    fn public_text(&self, text: &str) -> String {
        let root = format!("{}/", self.cache.path().display());
        let lazy = format!("{root}on-demand/");
        text.replace(&lazy, &format!("s3://{}/", self.bucket))
            .replace(&root, &format!("s3://{}/", self.bucket))
    }
}

impl S3Store {
    fn same_or_conflict(&self, name: &str, key: &Key, bytes: &[u8]) -> Result<()> {
        let existing = self.get_whole(key)?;
        if existing == bytes {
            return Ok(());
        }
        Err(self.put_conflict(
            key,
            format!(
                "{name} exists with other content ({} bytes, {} to write): L2 objects are never overwritten",
                existing.len(),
                bytes.len()
            ),
        ))
    }

    /// A put of `key` refused: it would replace an object it must not.
    fn put_conflict(&self, key: &Key, reason: String) -> Error {
        Error::Remote {
            endpoint: self.endpoint.clone(),
            bucket: self.bucket.clone(),
            key: key.to_string(),
            op: "put",
            kind: RemoteKind::Conflict,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain-HTTP endpoint is refused as a setting (exit 5) when a bucket
    /// is opened, before any request, unless `s3_allow_http` is true.
    #[test]
    fn a_plain_http_endpoint_needs_allow_http() {
        let http = |allow: Option<bool>| S3Settings {
            endpoint: Some("http://s3.local:9000".into()),
            allow_http: allow,
            ..S3Settings::default()
        };
        for allow in [None, Some(false)] {
            let e = check_endpoint(&http(allow)).unwrap_err();
            assert_eq!(e.exit_code(), crate::error::exit::CONFIG, "{e}");
            assert!(e.to_string().contains("s3_allow_http"), "{e}");
        }
        check_endpoint(&http(Some(true))).unwrap();
        let https = S3Settings {
            endpoint: Some("https://s3.local".into()),
            ..S3Settings::default()
        };
        check_endpoint(&https).unwrap();
    }

    #[test]
    fn a_stream_goes_in_order_in_range_size_pieces() {
        let (start, end) = (64u64, 64 + (100u64 << 20) + 5);
        let p = range_pieces(start..end);
        assert_eq!(p.first().map(|x| x.0), Some(start));
        assert_eq!(p.last().map(|x| x.1), Some(end));
        assert!(p.windows(2).all(|w| w[0].1 == w[1].0), "{p:?}");
        assert_eq!(p.len() as u64, (end - start).div_ceil(RANGE_SIZE));
        assert!(p[..p.len() - 1].iter().all(|(a, b)| b - a == RANGE_SIZE));
        assert!(range_pieces(7..7).is_empty());
        assert_eq!(range_pieces(0..5), [(0, 5)]);
    }

    /// A reader waits for exactly the pieces its bytes lie in; when the
    /// fetch fails, every waiting and later reader gets its error (same
    /// exit code); a fetch that ends early for any other reason (the
    /// store's runtime gone) still wakes them with an error.
    #[test]
    fn readers_wait_for_their_pieces_and_share_the_fetchs_failure() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let stream = |pieces: Vec<(u64, u64)>| {
            Arc::new(Stream {
                state: Mutex::new(StreamState {
                    upto: pieces.iter().map(|&(a, _)| a).collect(),
                    failed: None,
                }),
                pieces,
                ready: std::sync::Condvar::new(),
            })
        };
        let fill = |st: &Arc<Stream>| StreamFill {
            stream: Arc::clone(st),
            task: rt.spawn(async {}).abort_handle(),
            key: Key::from("k"),
            path: PathBuf::from("cache/k"),
        };
        let st = stream(vec![(0, 10), (10, 20), (20, 30)]);
        let f = fill(&st);
        st.finish_piece(0, Ok(()));
        f.fill(2, 8).unwrap();
        std::thread::scope(|s| {
            let across = s.spawn(|| f.fill(5, 10));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!across.is_finished(), "returned before piece 1 arrived");
            // Part of piece 1 in place: enough for bytes 5..12, not 5..15.
            st.advance(1, 12);
            f.fill(5, 7).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            assert!(
                !across.is_finished(),
                "returned before bytes 12..15 arrived"
            );
            st.finish_piece(1, Ok(()));
            across.join().unwrap().unwrap();
            let last = s.spawn(|| f.fill(25, 5));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!last.is_finished(), "returned before piece 2 arrived");
            let e = Error::Remote {
                endpoint: "http://s3".into(),
                bucket: "b".into(),
                key: "k".into(),
                op: "get",
                kind: RemoteKind::Transport,
                reason: "connection reset".into(),
            };
            st.finish_piece(2, Err(e));
            let e = last.join().unwrap().unwrap_err();
            assert_eq!(e.exit_code(), crate::error::exit::FAILURE);
            assert!(e.to_string().contains("connection reset"), "{e}");
        });
        // Later readers of a missing piece get it too; pieces in place
        // still read.
        assert!(f.fill(20, 10).unwrap_err().to_string().contains("reset"));
        f.fill(0, 20).unwrap();
        let e = f.fill(25, 10).unwrap_err();
        assert!(e.to_string().contains("outside the chunks"), "{e}");

        let st = stream(vec![(0, 10)]);
        let f = fill(&st);
        std::thread::scope(|s| {
            let waiting = s.spawn(|| f.fill(0, 10));
            std::thread::sleep(Duration::from_millis(50));
            drop(StreamEnd(Arc::clone(&st)));
            let e = waiting.join().unwrap().unwrap_err();
            assert!(e.to_string().contains("stopped before its end"), "{e}");
        });
    }
}
