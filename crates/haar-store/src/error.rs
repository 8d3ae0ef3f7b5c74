//! The public error type of the storage layer.
//!
//! Every variant names what it concerns (key, file, database, pool) and the message says what
//! to do next. Backend-private failures are converted into these at the module boundary.

use std::io;
use std::path::PathBuf;

/// Result alias for the storage layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A key or value that cannot be stored as given.
    #[error("key {key}: {reason}")]
    BadKey {
        /// The key as given.
        key: String,
        /// Why it was refused and what to do.
        reason: String,
    },
    /// A request that cannot be evaluated.
    #[error("request {request}: {reason}")]
    BadRequest {
        /// The request as given.
        request: String,
        /// Why and what to do.
        reason: String,
    },
    /// An operating-system I/O failure on a named file.
    #[error("{op} {path}: {source}")]
    Io {
        /// What haar was doing ("write", "open" …).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Bytes on storage that fail their checksum or do not decode.
    #[error("corrupt {what} in {path}: {detail}")]
    Corrupt {
        /// What structure (index segment, commit record, field …).
        what: &'static str,
        /// The file (or pool) holding it.
        path: PathBuf,
        /// Offset, expected/actual checksum, key if known.
        detail: String,
    },
    /// A database that another process holds in a way that forbids the operation.
    #[error("database {db} is busy: {detail}")]
    Busy {
        /// The database key.
        db: String,
        /// Who holds it and what to do.
        detail: String,
    },
    /// A persistent-memory pool that is full or cannot grow.
    #[error("pool {path} is full: {detail}")]
    PoolFull {
        /// The pool file.
        path: PathBuf,
        /// Sizes and what to do.
        detail: String,
    },
    /// A configuration that cannot be used.
    #[error("configuration: {0}")]
    Config(String),
    /// A request a remote server refused or could not satisfy (bad key or request, refused
    /// access); connection and server-side I/O failures are [`Error::Io`] naming the server.
    #[error("server {server}: {message}")]
    Remote {
        /// `host:port`.
        server: String,
        /// The server's message, with what to do.
        message: String,
        /// The exit code the server assigned (1 usage, 2 missing, 3 I/O).
        exit_code: i32,
    },
}

impl Error {
    /// Helper for I/O errors on a path.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// A field whose bytes do not have the CRC-32C they should: `expected` is what the index
    /// recorded or the sender computed, `actual` what the bytes have. `path` names where the
    /// bytes are (a file, a pool, a server, or "(received bytes)"); `found` says how the
    /// expected checksum is known ("index says", "the sender computed"), `consequence` what
    /// happened and what to do.
    pub fn checksum(
        path: impl Into<PathBuf>,
        key: impl std::fmt::Display,
        actual: u32,
        expected: u32,
        found: &str,
        consequence: &str,
    ) -> Error {
        Error::Corrupt {
            what: "field",
            path: path.into(),
            detail: format!(
                "{key} has crc {actual:#010x}, {found} {expected:#010x}; {consequence}"
            ),
        }
    }

    /// The CLI exit code for this error: 1 for bad usage or input, 3 for I/O and corruption.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::BadKey { .. } | Error::BadRequest { .. } | Error::Config(_) => 1,
            Error::Remote { exit_code, .. } => *exit_code,
            Error::Io { .. }
            | Error::Corrupt { .. }
            | Error::Busy { .. }
            | Error::PoolFull { .. } => 3,
        }
    }
}
