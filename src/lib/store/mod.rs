//! Where L2 checkpoints live: one small trait, [`Store`], and its two
//! backends: [`DirStore`], a local or mounted directory (the embedded
//! default), and `S3Store`, an S3-compatible object store through the
//! `object_store` crate (cargo feature `s3`, on by default).
//!
//! The chain code only ever sees a `Store`. The trait is shaped by what the
//! chain needs and what an object store can do: whole immutable objects put
//! atomically, listed, read, deleted; never modified in place. Objects are
//! read through [`Store::open_local`], which returns a local path to map:
//! the directory backend returns the file itself (restore reads straight from
//! the page cache); the S3 backend fetches the object into a per-run cache
//! directory first, with several ranged GETs in flight.
//!
//! Objects are written whole from a local file ([`Store::put_file`]) or
//! from a stream of pieces while their file is being written
//! ([`Store::put_stream`], fed by a [`durable::Mirror`]): a push uploads its
//! RPS and Pointer File beside the Deduplication Unit instead of after it.
//! Either way the object is published only complete, and `put_file` is
//! `put_stream` over the file's bytes, so both backends have one write
//! path.
//!
//! # The L2 location
//!
//! [`open_l2`] takes the location as given on the command line or in the
//! configuration: a plain path or a `file:///` URL is a directory, used as
//! the job's L2 directory itself (the objects are its files);
//! `s3://bucket/prefix` is a bucket, where the job's objects live under
//! `prefix/<job>/<rank>/` (job and rank from [`StoreSettings`]), so that
//! every rank of every job pushing to one bucket has its own namespace.
//! An MPI job's collective push names the job's location instead
//! ([`JobRoot`]): every rank's chain and the job manifests below it.
//!
//! # Why the directory backend is not `object_store`'s `LocalFileSystem`
//!
//! `DirStore` publishes every object with the write-fsync-rename-fsync
//! discipline of [`crate::durable`] (a crash leaves the old object or the
//! whole new one, durable once the call returns), takes part in the crash
//! tests' failpoints, and lets readers map the file in place.
//! `LocalFileSystem` renames but does not fsync the file or its directory,
//! so a power loss could leave a manifest that names data files whose
//! blocks never reached the disk. Keeping `DirStore` keeps those
//! guarantees; `object_store` is used where it is needed, for S3.

mod job_root;
#[cfg(feature = "s3")]
mod s3;
pub mod settings;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub use job_root::{JOB_DIR, JobRoot};
#[cfg(feature = "s3")]
pub use s3::S3Store;

use crate::durable::{self, AtomicFile, Piece};
use crate::error::{Error, IoContext, Result};
use crate::format::chunked::{ChunkedFile, Kind};
use crate::format::manifest::{MAX_MANIFEST_BYTES as MAX_SMALL_OBJECT, generation_of};
use settings::StoreSettings;

/// Metadata of a stored object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Object name (a plain file name).
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Last modification, if the backend knows it.
    pub modified: Option<std::time::SystemTime>,
}

/// Receives the progress of uploads (the CLI draws a bar with it).
pub trait Progress: Send + Sync {
    /// An upload of `bytes` bytes to `name` starts.
    fn start(&self, name: &str, bytes: u64) {
        let _ = (name, bytes);
    }
    /// `bytes` more bytes were sent.
    fn advance(&self, bytes: u64) {
        let _ = bytes;
    }
}

/// No progress reporting.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}

/// What a remote store moved so far (this process).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// Bytes fetched from the store (object bodies and ranges).
    pub bytes_fetched: u64,
    /// Bytes uploaded.
    pub bytes_uploaded: u64,
    /// Requests sent (not counting retries).
    pub requests: u64,
}

/// What a [`Store::put_stream`] received: its length, and the CRC of the
/// bytes after the placeholder head.
pub(crate) struct Received {
    head_len: u64,
    len: u64,
    rest: crc32fast::Hasher,
}

impl Received {
    pub(crate) fn new(head_len: u64) -> Received {
        Received {
            head_len,
            len: 0,
            rest: crc32fast::Hasher::new(),
        }
    }

    /// Bytes received so far (the S3 backend's multipart upload).
    #[cfg(feature = "s3")]
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The placeholder head's length.
    #[cfg(feature = "s3")]
    pub(crate) fn head_len(&self) -> u64 {
        self.head_len
    }

    /// Counts the next data piece.
    pub(crate) fn data(&mut self, b: &[u8]) {
        let skip = self.head_len.saturating_sub(self.len).min(b.len() as u64) as usize;
        self.rest.update(&b[skip..]);
        self.len += b.len() as u64;
    }

    /// Checks the final head and returns the CRC-32 of the whole object.
    pub(crate) fn end(&self, what: &Path, head: &[u8]) -> Result<u32> {
        if head.len() as u64 != self.head_len || self.len < self.head_len {
            return Err(Error::Invalid(format!(
                "{}: a streamed copy of {} bytes ended with a head of {} bytes, {} announced",
                what.display(),
                self.len,
                head.len(),
                self.head_len
            )));
        }
        let mut h = crc32fast::Hasher::new();
        h.update(head);
        h.combine(&self.rest);
        Ok(h.finalize())
    }
}

/// The error of a streamed copy whose pieces stopped before their end (its
/// writer failed or gave up: nothing was published).
pub(crate) fn stopped(what: &Path) -> Error {
    Error::io(
        what,
        "upload",
        std::io::Error::other("the bytes to store stopped before their end; nothing was published"),
    )
}

/// A place that holds a job's L2 objects.
pub trait Store: Send + Sync {
    /// A human description ("directory /scratch/l2", "s3://bucket/p/job/0").
    fn describe(&self) -> String;
    /// Lists the objects (temporaries excluded).
    fn list(&self) -> Result<Vec<ObjectInfo>>;
    /// Stores `bytes` as `name`, atomically and durably: a reader sees no
    /// object or the whole object. Meant for manifests: a remote store
    /// refuses to replace an existing object that holds other bytes
    /// ([`crate::error::RemoteKind::Conflict`]); an identical one is left
    /// as it is. [`Store::replace_bytes`] replaces on purpose.
    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()>;
    /// Stores `bytes` as `name` in place of whatever object holds that
    /// name, atomically and durably: a reader sees the old object or the
    /// new one, never none (helper-77: a repair that deleted an invalid
    /// manifest before writing its replacement, killed or read in between,
    /// left the generation without a manifest, and a restore from L2 alone
    /// gave the older generation with exit 0). Meant for a manifest that
    /// replaces an invalid one.
    fn replace_bytes(&self, name: &str, bytes: &[u8]) -> Result<()>;
    /// Copies the local file `src` to `name`, atomically and durably, and
    /// returns (bytes, CRC-32) of what was stored, reporting to `progress`.
    /// Meant for data files, which a push writes before any manifest names
    /// them: an object of that name left by an interrupted push is replaced
    /// whole.
    fn put_file(&self, name: &str, src: &Path, progress: &dyn Progress) -> Result<(u64, u32)> {
        let mut input = fs::File::open(src).ctx(src, "open")?;
        progress.start(name, input.metadata().map(|m| m.len()).unwrap_or(0));
        let mut failed = None;
        let mut ended = false;
        let mut pieces = std::iter::from_fn(|| {
            if ended {
                return None;
            }
            let mut buf = vec![0u8; durable::Mirror::PIECE];
            let mut n = 0;
            while n < buf.len() {
                match input.read(&mut buf[n..]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        failed = Some(Error::io(src, "read", e));
                        return None;
                    }
                }
            }
            if n == 0 {
                ended = true;
                return Some(Piece::End(Vec::new()));
            }
            buf.truncate(n);
            Some(Piece::Data(buf))
        });
        let r = self.put_stream(name, 0, &mut pieces, progress);
        match failed {
            Some(e) => Err(e),
            None => r,
        }
    }
    /// Stores the bytes `pieces` yields as `name`, with the discipline of
    /// [`put_file`](Self::put_file), while they are produced (a file being
    /// written, through a [`durable::Mirror`]): its first `head_len` bytes
    /// are placeholders that the final [`Piece::End`] replaces. Nothing is
    /// published if the pieces stop before their end. Returns (bytes,
    /// CRC-32) of the object as stored, header included. Data pieces are
    /// reported to `progress` as they are sent (starting is the caller's).
    fn put_stream(
        &self,
        name: &str,
        head_len: u64,
        pieces: &mut dyn Iterator<Item = Piece>,
        progress: &dyn Progress,
    ) -> Result<(u64, u32)>;
    /// Reads a whole (small) object.
    fn read(&self, name: &str) -> Result<Vec<u8>>;
    /// A local path holding the object's bytes, for memory mapping.
    fn open_local(&self, name: &str) -> Result<PathBuf>;
    /// Deletes an object; a missing one is not an error.
    fn delete(&self, name: &str) -> Result<()>;
    /// The local directory behind the store, if it is one (for removing
    /// crashed writers' temporaries under the job lock).
    fn local_root(&self) -> Option<PathBuf> {
        None
    }
    /// Aborts uploads that an interrupted writer left unfinished (S3
    /// multipart uploads, whose parts are invisible but billed), those
    /// started at least `older_than` ago (all when `None`, under the job
    /// lock). Returns one note per upload aborted.
    fn abort_stale_uploads(&self, older_than: Option<Duration>) -> Result<Vec<String>> {
        let _ = older_than;
        Ok(Vec::new())
    }
    /// Opens an RPS or Pointer File for reading when the store can do
    /// better than [`open_local`](Self::open_local) and a whole map: a
    /// remote store fetches the header and the chunk table now, and the
    /// chunks in order in the background while readers decode the ones
    /// already there, or, after [`read_on_demand`](Self::read_on_demand),
    /// each chunk when a reader first needs it. `None`: open
    /// [`open_local`](Self::open_local)'s file.
    fn open_chunked(&self, name: &str, kind: Kind) -> Result<Option<ChunkedFile>> {
        let _ = (name, kind);
        Ok(None)
    }
    /// Asks a remote store to fetch RPS and Pointer Files on demand (a
    /// `--pages` restore) rather than whole (the default).
    fn read_on_demand(&self, on: bool) {
        let _ = on;
    }
    /// The generation a push is about to write afresh (`None`: none). On a
    /// store without a writer lock (a bucket), an upload of one of its data
    /// files then makes sure, just before the object appears, that no
    /// manifest of that generation exists: another copy of the job that
    /// committed it meanwhile keeps its files (helper-45: a push slowed
    /// past another writer's commit replaced the committed data, and the
    /// newest generation failed to restore). Our own manifest ends it.
    fn writing_generation(&self, generation: Option<u64>) {
        let _ = generation;
    }
    /// What the store moved, for a remote store.
    fn stats(&self) -> Option<StoreStats> {
        None
    }
    /// Rewrites the local cache paths an error names into the objects'
    /// URLs (a remote store's readers map cache files).
    fn public_error(&self, e: Error) -> Error {
        e
    }
    /// As [`public_error`](Self::public_error), for a message.
    fn public_text(&self, text: &str) -> String {
        text.to_string()
    }
}

/// Where an L2 location points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L2Location {
    /// A local or mounted directory (a plain path or a `file://` URL).
    Dir(PathBuf),
    /// An S3 bucket and a key prefix (without leading or trailing `/`).
    S3 {
        /// The bucket.
        bucket: String,
        /// The prefix under which `<job>/<rank>/` is made.
        prefix: String,
    },
}

impl L2Location {
    /// Parses a location: `s3://bucket[/prefix]`, `file:///path`, or a
    /// plain path.
    ///
    /// A plain path that looks like a URL with a typo (`s3:/bucket/x`,
    /// `s3:bucket`, `file:/x`) is refused rather than taken as a relative
    /// directory named `s3:`: a push there would delete the L1 checkpoints
    /// it "pushed". `./s3:/x` names such a directory on purpose.
    pub fn parse(location: &Path) -> Result<L2Location> {
        let Some(text) = location.to_str() else {
            return Ok(L2Location::Dir(location.to_path_buf()));
        };
        let bad = |why: String| Error::Invalid(format!("L2 location {text:?}: {why}"));
        let Some((scheme, _)) = text.split_once("://") else {
            if let Some(scheme) = url_like_scheme(text) {
                return Err(bad(format!(
                    "looks like a URL with a typo ({scheme}: without //): write s3://BUCKET/PREFIX for a bucket, file:///DIR or a path for a directory (./{text} for a directory of this very name)"
                )));
            }
            return Ok(L2Location::Dir(location.to_path_buf()));
        };
        let url = url::Url::parse(text).map_err(|e| bad(e.to_string()))?;
        match scheme {
            "file" => {
                // The URL parser drops a query and a fragment and resolves
                // dot segments as text: `file:///ckpt/run#B` was the
                // directory of `file:///ckpt/run#A`, and two jobs shared
                // one L2 (helper-102: a restore gave the other job's
                // image); `link/..` is not where the path goes through a
                // symbolic link.
                // What the parser would change before splitting: a
                // backslash is a slash to it, tabs and newlines are
                // removed, and spaces and control characters at the ends
                // trimmed (helper-104: `link\..\x` and `link/.\t./x` went
                // past the segment check below).
                if text.chars().any(|c| c == '\\' || c.is_control()) || text.trim() != text {
                    return Err(bad("a file:// URL takes no backslash, control character or space at either end: write a directory's own as %5C, %20 ..., or give the path itself".into()));
                }
                if url.query().is_some() || url.fragment().is_some() {
                    return Err(bad("a file:// URL takes no query or fragment: write '?' and '#' of a directory's name as %3F and %23, or give the path itself".into()));
                }
                let raw_path = text.split_once("://").map_or("", |(_, rest)| rest);
                if raw_path.split('/').any(|seg| {
                    let seg = seg.to_ascii_lowercase();
                    matches!(
                        seg.as_str(),
                        "." | ".." | "%2e" | "%2e%2e" | ".%2e" | "%2e."
                    )
                }) {
                    return Err(bad("a file:// URL names its directory without . or .. segments (URLs resolve them as text, not through symbolic links): give the path itself".into()));
                }
                let p = url
                    .to_file_path()
                    .map_err(|()| bad("a file:// URL needs an absolute path and no host".into()))?;
                // An encoded slash (`%2E%2E%2Fx`) decodes to a `..` the
                // segment check did not see.
                if p.to_str()
                    .is_some_and(|t| t.split('/').any(|c| c == "." || c == ".."))
                {
                    return Err(bad("a file:// URL names its directory without . or .. segments (URLs resolve them as text, not through symbolic links): give the path itself".into()));
                }
                // `file://` alone parses as the root directory (helper-49: a
                // push wrote its generation into / and deleted the L1
                // checkpoints): the URL form of an empty location.
                if p.parent().is_none() {
                    return Err(bad(
                        "names the root directory: write file:///DIR for a directory".into(),
                    ));
                }
                Ok(L2Location::Dir(p))
            }
            "s3" => {
                let bucket = url.host_str().unwrap_or_default().to_string();
                let ok = (3..=63).contains(&bucket.len())
                    && bucket.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-'
                    });
                if !ok {
                    return Err(bad(format!(
                        "{bucket:?} is not a bucket name (3 to 63 lowercase letters, digits, '.' or '-')"
                    )));
                }
                if url.query().is_some() || url.fragment().is_some() || url.port().is_some() {
                    return Err(bad("an s3:// URL takes no port, query or fragment; set the endpoint with s3_endpoint or AWS_ENDPOINT_URL".into()));
                }
                let prefix = url
                    .path()
                    .split('/')
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join("/");
                Ok(L2Location::S3 { bucket, prefix })
            }
            other => Err(bad(format!(
                "unsupported scheme {other:?}: use a directory, file:// or s3:// (in lowercase)"
            ))),
        }
    }
}

/// The scheme of a plain path that reads as a URL: `scheme:` at the start,
/// followed by `/` or naming a scheme people type (`s3:bucket`). Paths
/// starting with `/` or `.` never do.
fn url_like_scheme(text: &str) -> Option<&str> {
    let (scheme, rest) = text.split_once(':')?;
    let mut chars = scheme.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
    if !well_formed {
        return None;
    }
    let known = [
        "s3", "file", "http", "https", "gs", "az", "abfs", "hdfs", "ftp", "sftp",
    ]
    .contains(&scheme.to_ascii_lowercase().as_str());
    (known || rest.starts_with('/')).then_some(scheme)
}

/// Whether a relative directory was named with an explicit `./` or `../`.
fn explicitly_relative(p: &Path) -> bool {
    matches!(
        p.components().next(),
        Some(std::path::Component::CurDir | std::path::Component::ParentDir)
    )
}

/// Opens the L2 store at `location` (see the module doc). With `create`, a
/// missing directory is created; a bucket must always exist already.
pub fn open_l2(location: &Path, settings: &StoreSettings, create: bool) -> Result<Box<dyn Store>> {
    Ok(match L2Location::parse(location)? {
        L2Location::Dir(p)
            if create && p.is_relative() && !explicitly_relative(&p) && !p.is_dir() =>
        {
            return Err(Error::Invalid(format!(
                "L2 location {:?}: no such directory, and a relative L2 directory is created only when named with ./ (./{}), so that a mistyped location never becomes a new directory here",
                p.display().to_string(),
                p.display()
            )));
        }
        L2Location::Dir(p) if create => Box::new(DirStore::create(p)?),
        L2Location::Dir(p) => Box::new(DirStore::open(p)?),
        L2Location::S3 { bucket, prefix } => open_s3(&bucket, &prefix, settings)?,
    })
}

/// Opens the bucket's store (`settings.rank` names the part under the
/// job), or, in a build without the cargo feature `s3`, says so.
fn open_s3(bucket: &str, prefix: &str, settings: &StoreSettings) -> Result<Box<dyn Store>> {
    #[cfg(feature = "s3")]
    {
        Ok(Box::new(S3Store::open(bucket, prefix, settings)?))
    }
    #[cfg(not(feature = "s3"))]
    {
        let _ = settings;
        Err(Error::Invalid(format!(
            "L2 location s3://{bucket}/{prefix}: this build has no S3 backend (build with the cargo feature `s3`, a default one)"
        )))
    }
}

/// Opens the L2 store at `location` for reading: as [`open_l2`] without
/// `create`, but a directory that does not exist yet (no push has made it)
/// reads as empty instead of failing, and is not created (`status`,
/// `plan`).
pub fn open_l2_read(location: &Path, settings: &StoreSettings) -> Result<Box<dyn Store>> {
    Ok(match L2Location::parse(location)? {
        L2Location::Dir(p) if fs::symlink_metadata(&p).is_err() => {
            Box::new(DirStore::open_or_empty(p))
        }
        _ => open_l2(location, settings, false)?,
    })
}

/// A directory as a store: objects are files, put through [`AtomicFile`].
#[derive(Clone, Debug)]
pub struct DirStore {
    root: PathBuf,
    /// A missing root lists as empty (a reader's view of a directory that
    /// no push has made yet; see [`DirStore::open_or_empty`]).
    absent_is_empty: bool,
}

impl DirStore {
    /// A store rooted at `root`, created if missing.
    pub fn create(root: impl AsRef<Path>) -> Result<DirStore> {
        let root = root.as_ref().to_path_buf();
        // Something else by that name is a location that cannot be used
        // (exit 5), as `status` reports it, not an I/O failure.
        let unusable = match fs::metadata(&root) {
            Ok(m) => !m.is_dir(),
            // A dangling symbolic link (not a directory another process,
            // another rank say, made meanwhile).
            Err(_) => fs::symlink_metadata(&root).is_ok_and(|m| m.file_type().is_symlink()),
        };
        if unusable {
            return Err(Error::Invalid(format!(
                "{}: not a directory (or a symbolic link to none): an L2 directory cannot be made there",
                root.display()
            )));
        }
        fs::create_dir_all(&root).ctx(&root, "create directory")?;
        Ok(DirStore {
            root,
            absent_is_empty: false,
        })
    }

    /// A store rooted at `root`, which may not exist yet: it then lists as
    /// empty, and nothing is created. For reading commands, which never
    /// create anything.
    pub fn open_or_empty(root: impl AsRef<Path>) -> DirStore {
        DirStore {
            root: root.as_ref().to_path_buf(),
            absent_is_empty: true,
        }
    }

    /// A store rooted at an existing directory.
    pub fn open(root: impl AsRef<Path>) -> Result<DirStore> {
        let root = root.as_ref().to_path_buf();
        if !root.is_dir() {
            // A location that names no directory: the settings are wrong
            // (exit 5), not the data.
            return Err(Error::Invalid(format!(
                "L2 directory {}: {}",
                root.display(),
                if root.exists() {
                    "not a directory"
                } else {
                    "no such directory"
                }
            )));
        }
        Ok(DirStore {
            root,
            absent_is_empty: false,
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, name: &str) -> Result<PathBuf> {
        check_name(name)?;
        Ok(self.root.join(name))
    }
}

impl Store for DirStore {
    fn describe(&self) -> String {
        if self.absent_is_empty && fs::symlink_metadata(&self.root).is_err() {
            format!("directory {} (not made yet)", self.root.display())
        } else {
            format!("directory {}", self.root.display())
        }
    }

    fn list(&self) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        if self.absent_is_empty && fs::symlink_metadata(&self.root).is_err() {
            return Ok(out);
        }
        for e in fs::read_dir(&self.root).ctx(&self.root, "read directory")? {
            let e = e.ctx(&self.root, "read directory")?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            // Symlinks are followed (an administrator may link objects in
            // from elsewhere). An object name that does not end at a regular
            // file (a dangling or looping link, a directory) is listed all
            // the same, as an empty object: whoever needs it fails loudly
            // when it reads it (a manifest counts as invalid, so a newer one
            // is never silently passed over), and nothing else is blocked.
            let path = e.path();
            match fs::metadata(&path) {
                Ok(md) if md.is_file() => out.push(ObjectInfo {
                    name,
                    bytes: md.len(),
                    modified: md.modified().ok(),
                }),
                // A job manifest too (helper-60: a dangling link under a
                // job manifest's name passed the newest job generation over).
                _ if generation_of(&name).is_some()
                    || crate::format::job_manifest::parse_job_manifest_name(&name).is_some() =>
                {
                    out.push(ObjectInfo {
                        name,
                        bytes: 0,
                        modified: None,
                    })
                }
                _ => {}
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        durable::write_file(self.path(name)?, bytes)
    }

    fn replace_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        // A rename over the old file: atomic.
        durable::write_file(self.path(name)?, bytes)
    }

    fn put_stream(
        &self,
        name: &str,
        head_len: u64,
        pieces: &mut dyn Iterator<Item = Piece>,
        progress: &dyn Progress,
    ) -> Result<(u64, u32)> {
        let path = self.path(name)?;
        let mut out = AtomicFile::create(&path)?;
        let mut got = Received::new(head_len);
        for piece in pieces {
            match piece {
                Piece::Data(b) => {
                    got.data(&b);
                    out.write_all(&b)?;
                    progress.advance(b.len() as u64);
                }
                Piece::End(head) => {
                    let crc = got.end(&path, &head)?;
                    if !head.is_empty() {
                        out.seek_after_writing(std::io::SeekFrom::Start(0))?;
                        out.write_all(&head)?;
                    }
                    out.commit()?;
                    return Ok((got.len, crc));
                }
            }
        }
        // Dropping `out` removes the temporary file.
        Err(stopped(&path))
    }

    fn read(&self, name: &str) -> Result<Vec<u8>> {
        let p = self.path(name)?;
        // Opened without blocking, then checked to be a regular file: a
        // FIFO under an object's name would otherwise block the open, and
        // every command that lists the store, forever (helper-38). A name
        // that is not a regular file fails here, as a directory's read
        // does (FORMAT.md §3.1.1: a manifest like that is invalid).
        let mut open = fs::OpenOptions::new();
        open.read(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::custom_flags(&mut open, libc::O_NONBLOCK);
        let mut f = open.open(&p).ctx(&p, "open")?;
        let md = f.metadata().ctx(&p, "stat")?;
        if !md.is_file() {
            return Err(Error::io(
                &p,
                "open",
                std::io::Error::other("not a regular file"),
            ));
        }
        // Small objects only (manifests): never sized by a file that claims
        // to be huge (a sparse file costs its writer nothing).
        let len = md.len();
        if len > MAX_SMALL_OBJECT {
            return Err(Error::corrupt(
                &p,
                0,
                "size",
                format!("{len} bytes, more than the {MAX_SMALL_OBJECT} a manifest may have"),
            ));
        }
        let mut b = Vec::new();
        std::io::Read::take(&mut f, MAX_SMALL_OBJECT + 1)
            .read_to_end(&mut b)
            .ctx(&p, "read")?;
        Ok(b)
    }

    fn open_local(&self, name: &str) -> Result<PathBuf> {
        let p = self.path(name)?;
        // Only a name with nothing behind it is "no such object": a
        // directory, a FIFO or a symbolic link loop there is damage to the
        // store, reported as what it is (helper-40) and, like a damaged
        // object, as data (exit 3: a restore from L1 + L2 reads L1's copy).
        // Anything else (no permission) is a failure to reach it.
        match fs::metadata(&p) {
            Ok(m) if m.is_file() => Ok(p),
            Ok(m) => Err(Error::corrupt(
                &p,
                0,
                "object",
                format!("not a regular file but {}", file_kind(&m.file_type())),
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::io(
                &p,
                "open",
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such object"),
            )),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(Error::corrupt(
                &p,
                0,
                "object",
                "a symbolic link that leads nowhere (a loop)",
            )),
            Err(e) => Err(Error::io(&p, "open", e)),
        }
    }

    fn delete(&self, name: &str) -> Result<()> {
        durable::remove_file(&self.path(name)?)
    }

    fn local_root(&self) -> Option<PathBuf> {
        Some(self.root.clone())
    }
}

/// What a file type is, in words, for errors about an object's name.
pub(crate) fn file_kind(t: &fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "a device";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "something else"
    }
}

/// Object names are plain file names: not empty, no `/`, no leading `.`
/// (names with a leading dot are writers' temporaries).
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(Error::Invalid(format!(
            "{name:?} is not a plain object name"
        )));
    }
    Ok(())
}

/// Length of a local file and, when that is `expected`, its CRC-32 (see
/// [`file_crc`]). A file of another length is not read: it is wrong
/// whatever its bytes, and a sparse file may claim terabytes.
pub fn file_crc_if_len(path: &Path, expected: u64) -> Result<(u64, Option<u32>)> {
    let len = fs::metadata(path).ctx(path, "stat")?.len();
    if len != expected {
        return Ok((len, None));
    }
    let (len, crc) = file_crc(path)?;
    Ok((len, Some(crc)))
}

/// CRC-32 and length of a local file, read in 1 MiB blocks.
pub fn file_crc(path: &Path) -> Result<(u64, u32)> {
    let mut f = fs::File::open(path).ctx(path, "open")?;
    let mut buf = vec![0u8; 1 << 20];
    let mut h = crc32fast::Hasher::new();
    let mut n = 0;
    loop {
        let k = f.read(&mut buf).ctx(path, "read")?;
        if k == 0 {
            return Ok((n, h.finalize()));
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l2_locations_parse() {
        let p = |s: &str| L2Location::parse(Path::new(s));
        assert_eq!(
            p("/scratch/l2").unwrap(),
            L2Location::Dir("/scratch/l2".into())
        );
        assert_eq!(p("rel/l2").unwrap(), L2Location::Dir("rel/l2".into()));
        // On purpose: a directory whose name has a colon.
        assert_eq!(p("./s3:/x").unwrap(), L2Location::Dir("./s3:/x".into()));
        assert_eq!(p("ckpt:2").unwrap(), L2Location::Dir("ckpt:2".into()));
        assert_eq!(
            p("/data/s3:/x").unwrap(),
            L2Location::Dir("/data/s3:/x".into())
        );
        assert_eq!(
            p("file:///scratch/my%20l2").unwrap(),
            L2Location::Dir("/scratch/my l2".into())
        );
        assert_eq!(
            p("file:///ckpt/run%23B/..x").unwrap(),
            L2Location::Dir("/ckpt/run#B/..x".into())
        );
        assert_eq!(
            p("s3://ckpt-bucket/site//jobs/").unwrap(),
            L2Location::S3 {
                bucket: "ckpt-bucket".into(),
                prefix: "site/jobs".into()
            }
        );
        assert_eq!(
            p("s3://ckpt-bucket").unwrap(),
            L2Location::S3 {
                bucket: "ckpt-bucket".into(),
                prefix: String::new()
            }
        );
        for bad in [
            "s3://B/x",
            "s3://ab/x",
            "s3://bucket:9000/x",
            "s3://bucket/x?y=1",
            "gs://bucket/x",
            "file://host/x",
            // What the URL parser drops or resolves as text (helper-102:
            // `run#A` and `run#B` were one directory).
            "file:///ckpt/run#B",
            "file:///ckpt/run?job=B",
            "file:///ckpt/run#",
            "file:///ckpt/link/../l2",
            "file:///ckpt/./l2",
            "file:///ckpt/%2e%2e/l2",
            "file:///ckpt/l2/..",
            // What the parser changes before its dot-segment resolution
            // (helper-104).
            "file:///ckpt/link\\..\\l2",
            "file:///ckpt/link/.\t./l2",
            "file:///ckpt/link/.\n./l2",
            "file:///ckpt/link/.. ",
            "file:///ckpt/l2\r",
            "file:///ckpt/%2E%2E%2Fl2",
            // The root directory: `file://` alone is the URL of "".
            "file://",
            "file:///",
            // URLs with a typo, never a relative directory named "s3:".
            "s3:/bucket/x",
            "s3:bucket/x",
            "S3:/bucket",
            "file:/scratch/l2",
            "minio:/bucket",
        ] {
            assert!(
                matches!(p(bad), Err(Error::Invalid(_))),
                "{bad}: {:?}",
                p(bad)
            );
        }
    }
}
