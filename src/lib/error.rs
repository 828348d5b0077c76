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
    #[error("{path}: {op}: {source}")]
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
}

impl Error {
    /// The process exit code the CLI uses for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Io { .. } | Error::PatternSpaceFull(_) => exit::FAILURE,
            Error::Corrupt { .. } | Error::Chain { .. } => exit::DATA,
            Error::Invalid(_) => exit::CONFIG,
            Error::Busy { .. } => exit::BUSY,
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
