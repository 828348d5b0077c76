//! The library's error type.
//!
//! Every error that concerns a file names the file, and every error that
//! concerns a byte of a file names the offset and the field, because the
//! person reading it is usually an operator looking at a broken checkpoint at
//! 3 a.m. with `xxd` in another window. The CLI maps each variant to a
//! documented exit code through [`Error::exit_code`].

use std::path::{Path, PathBuf};

/// Result alias for the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in rexctl's library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system call on a file failed.
    #[error("{path}: {op}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What rexctl was doing ("open", "read", "fsync", ...).
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A file's bytes do not follow its format: a checkpoint that must not be
    /// trusted. `offset` is the byte offset of the offending field.
    #[error("{path}: offset {offset}: {field}: {reason}")]
    Corrupt {
        /// The file concerned.
        path: PathBuf,
        /// Byte offset of the offending field within the file.
        offset: u64,
        /// The field's name as the format specification spells it.
        field: &'static str,
        /// What was wrong with it.
        reason: String,
    },

    /// The files are each well formed but do not form a valid checkpoint
    /// chain (a missing sequence number, mixed page sizes, ...).
    #[error("{path}: {reason}")]
    Chain {
        /// The directory or file concerned.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },

    /// A request the library cannot satisfy as asked (bad argument values,
    /// conflicting options, an unsupported combination).
    #[error("{0}")]
    Invalid(String),

    /// A generation would need more than 2^32 pattern pointers; the caller
    /// must take a complete coalescence instead.
    #[error("pattern space full: {0}")]
    PatternSpaceFull(String),

    /// Another rexctl process holds the job's lock.
    #[error("{path}: busy: {holder}")]
    Busy {
        /// The lock file.
        path: PathBuf,
        /// Who holds it, as recorded in the lock file.
        holder: String,
    },

    /// A live process cannot be captured: it does not exist (any more), or
    /// rexctl may not read it. `reason` says what is needed.
    #[error("process {pid}: {reason}")]
    Process {
        /// The process id.
        pid: u32,
        /// What is wrong, and what would make it work.
        reason: String,
    },

    /// A request to a remote object store failed. The message names the
    /// endpoint, the bucket and the object key, so an operator can repeat
    /// the request by hand.
    #[error("{endpoint}: bucket {bucket}: {key}: {op}: {reason}")]
    Remote {
        /// The endpoint (`https://s3.eu-west-1.amazonaws.com`,
        /// `http://127.0.0.1:9000`).
        endpoint: String,
        /// The bucket.
        bucket: String,
        /// The object key (or the prefix, for a listing).
        key: String,
        /// What rexctl was doing ("list", "get", "put", "multipart upload", ...).
        op: &'static str,
        /// What kind of failure, which decides the exit code.
        kind: RemoteKind,
        /// What the store said.
        reason: String,
    },

    /// Another rank of an MPI job failed (see [`PeerFailure`]).
    #[error(transparent)]
    Peer(#[from] PeerFailure),
}

/// Another rank of an MPI job failed during a collective operation, so
/// this rank did not commit either (the next collective push rolls back
/// and tries again). Its exit code is that rank's: every rank of a failed
/// collective command exits alike, so `mpirun`'s status does not depend on
/// which rank ends first.
#[derive(Debug, thiserror::Error)]
#[error("rank {rank} failed ({stage}): {reason}")]
pub struct PeerFailure {
    /// The rank that failed (the lowest, when several did).
    pub rank: u32,
    /// What the ranks were doing.
    pub stage: &'static str,
    /// That rank's error.
    pub reason: String,
    /// The exit code of that rank's error ([`Error::exit_code`]).
    pub exit_code: i32,
}

/// A rank's own failure as the other ranks of its job learn it in a
/// collective step: its message, and the exit code its command exits with
/// (which theirs then exit with too, as [`PeerFailure`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The error with its causes ([`Error::report`]).
    pub reason: String,
    /// [`Error::exit_code`] of that error.
    pub exit_code: i32,
}

impl Failure {
    /// A failure that is no [`Error`] of this rank's, with the exit code it
    /// stands for.
    pub fn new(exit_code: i32, reason: impl Into<String>) -> Failure {
        Failure {
            reason: reason.into(),
            exit_code,
        }
    }

    /// This rank's own failure as an error of its own: reported as the
    /// others report it, with its exit code, where the original error is
    /// not at hand any more.
    pub fn into_error(self, rank: u32, stage: &'static str) -> Error {
        Error::Peer(PeerFailure {
            rank,
            stage,
            reason: self.reason,
            exit_code: self.exit_code,
        })
    }
}

impl From<&Error> for Failure {
    fn from(e: &Error) -> Failure {
        Failure::new(e.exit_code(), e.report())
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::from(&e)
    }
}

/// What kind of remote storage failure an [`Error::Remote`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteKind {
    /// The configuration cannot work: credentials rejected, access denied,
    /// no such bucket, an invalid setting (exit code 5).
    Config,
    /// An object the chain needs is missing (exit code 3).
    NotFound,
    /// An object exists with other content than the one being written:
    /// objects are never overwritten (exit code 3).
    Conflict,
    /// The store could not be reached or failed after every retry (exit
    /// code 1; the next run tries again).
    Transport,
}

/// Exit codes, documented in `rexctl(1)`.
pub mod exit {
    /// Success (for `flush`: pushed, or nothing was due).
    pub const OK: i32 = 0;
    /// An unexpected failure (I/O error, internal error).
    pub const FAILURE: i32 = 1;
    /// Bad command line (clap's own code).
    pub const USAGE: i32 = 2;
    /// Bad data: a corrupt or inconsistent checkpoint file or chain.
    pub const DATA: i32 = 3;
    /// Another rexctl holds the job's lock.
    pub const BUSY: i32 = 4;
    /// Configuration error (invalid option values, unusable configuration).
    pub const CONFIG: i32 = 5;
    /// A restored or verified image differs from the expected one.
    pub const MISMATCH: i32 = 6;

    /// The class of an exit code, one word (the `class` of a JSON error
    /// object): `ok`, `failure`, `usage`, `data`, `busy`, `config`,
    /// `mismatch`.
    pub fn class(code: i32) -> &'static str {
        match code {
            OK => "ok",
            USAGE => "usage",
            DATA => "data",
            BUSY => "busy",
            CONFIG => "config",
            MISMATCH => "mismatch",
            _ => "failure",
        }
    }
}

impl Error {
    /// The process exit code the CLI uses for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Io { .. } | Error::PatternSpaceFull(_) => exit::FAILURE,
            Error::Corrupt { .. } | Error::Chain { .. } => exit::DATA,
            Error::Invalid(_) => exit::CONFIG,
            Error::Busy { .. } => exit::BUSY,
            Error::Process { .. } => exit::FAILURE,
            Error::Peer(p) => p.exit_code,
            Error::Remote { kind, .. } => match kind {
                RemoteKind::Config => exit::CONFIG,
                RemoteKind::NotFound | RemoteKind::Conflict => exit::DATA,
                RemoteKind::Transport => exit::FAILURE,
            },
        }
    }

    /// Whether the file or object asked for does not exist (as opposed to
    /// a failure to find out).
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Error::Remote { kind, .. } => *kind == RemoteKind::NotFound,
            _ => false,
        }
    }

    /// Whether this says what the data is (missing, damaged, of another
    /// chain), as opposed to a failure to reach it, which may pass.
    pub fn is_about_data(&self) -> bool {
        self.is_not_found() || self.exit_code() == exit::DATA
    }

    /// Whether a remote store failed to send or take an object (after
    /// every retry, or refusing access): says nothing of the object, which
    /// may be intact (helper-83). A local file that cannot be read is
    /// another matter: its bytes are not there to be had.
    pub fn is_remote_failure(&self) -> bool {
        matches!(
            self,
            Error::Remote {
                kind: RemoteKind::Transport | RemoteKind::Config,
                ..
            }
        )
    }

    /// The error with its causes, `outer: cause: ...`, for messages that are
    /// not printed through `anyhow` (which adds the causes itself).
    pub fn report(&self) -> String {
        let mut s = self.to_string();
        let mut src = std::error::Error::source(self);
        while let Some(e) = src {
            s.push_str(": ");
            s.push_str(&e.to_string());
            src = e.source();
        }
        s
    }

    /// A copy of this error, for one failure that several waiters report
    /// (the readers of a stream that stopped): the same variant, message and
    /// exit code; an I/O error's cause keeps its kind and message.
    pub fn again(&self) -> Error {
        match self {
            Error::Io { path, op, source } => Error::Io {
                path: path.clone(),
                op,
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corrupt {
                path,
                offset,
                field,
                reason,
            } => Error::corrupt(path, *offset, field, reason.clone()),
            Error::Chain { path, reason } => Error::chain(path, reason.clone()),
            Error::Invalid(s) => Error::Invalid(s.clone()),
            Error::PatternSpaceFull(s) => Error::PatternSpaceFull(s.clone()),
            Error::Busy { path, holder } => Error::Busy {
                path: path.clone(),
                holder: holder.clone(),
            },
            Error::Process { pid, reason } => Error::Process {
                pid: *pid,
                reason: reason.clone(),
            },
            Error::Remote {
                endpoint,
                bucket,
                key,
                op,
                kind,
                reason,
            } => Error::Remote {
                endpoint: endpoint.clone(),
                bucket: bucket.clone(),
                key: key.clone(),
                op,
                kind: *kind,
                reason: reason.clone(),
            },
            Error::Peer(p) => Error::Peer(PeerFailure {
                rank: p.rank,
                stage: p.stage,
                reason: p.reason.clone(),
                exit_code: p.exit_code,
            }),
        }
    }

    /// Builds an [`Error::Io`] for `path`.
    pub fn io(path: impl AsRef<Path>, op: &'static str, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            op,
            source,
        }
    }

    /// Builds an [`Error::Corrupt`].
    pub fn corrupt(
        path: impl AsRef<Path>,
        offset: u64,
        field: &'static str,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corrupt {
            path: path.as_ref().to_path_buf(),
            offset,
            field,
            reason: reason.into(),
        }
    }

    /// Rewrites every path this error names through `f` (which returns
    /// `None` to keep a path): lets a remote store name its objects by URL
    /// rather than by the local cache file a reader mapped.
    pub fn map_paths(self, f: &dyn Fn(&Path) -> Option<PathBuf>) -> Error {
        let map = |p: PathBuf| f(&p).unwrap_or(p);
        match self {
            Error::Io { path, op, source } => Error::Io {
                path: map(path),
                op,
                source,
            },
            Error::Corrupt {
                path,
                offset,
                field,
                reason,
            } => Error::Corrupt {
                path: map(path),
                offset,
                field,
                reason,
            },
            Error::Chain { path, reason } => Error::Chain {
                path: map(path),
                reason,
            },
            other => other,
        }
    }

    /// Builds an [`Error::Chain`].
    pub fn chain(path: impl AsRef<Path>, reason: impl Into<String>) -> Self {
        Error::Chain {
            path: path.as_ref().to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// Attaches a path and an operation to `std::io` results.
pub trait IoContext<T> {
    /// Converts an `io::Error` into [`Error::Io`] naming `path`.
    fn ctx(self, path: impl AsRef<Path>, op: &'static str) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, path: impl AsRef<Path>, op: &'static str) -> Result<T> {
        self.map_err(|e| Error::io(path, op, e))
    }
}
