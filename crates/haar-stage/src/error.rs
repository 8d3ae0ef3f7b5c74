//! The crate's one error type: what went wrong, with the path, task or endpoint involved.

use std::path::{Path, PathBuf};

/// A staging error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is wrong (names the file).
    #[error("{0}")]
    Config(String),
    /// An endpoint, option or task name the caller gave is wrong.
    #[error("{0}")]
    Usage(String),
    /// What was to be staged does not exist.
    #[error("{0}")]
    Missing(String),
    /// A file-system operation failed on `path`.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done (`read`, `write`, `rename` …).
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Bytes differ from what was read at the source.
    #[error("checksum mismatch on {}: {detail}", path.display())]
    Checksum {
        /// The object whose bytes differ.
        path: PathBuf,
        /// What differed.
        detail: String,
    },
    /// A journal file is damaged (names it).
    #[error("journal {}: {detail}", path.display())]
    Journal {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The task was cancelled.
    #[error("task {0} was cancelled")]
    Cancelled(String),
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] haar::Error),
    /// Not allowed (persisted data of another user, an operation for root only).
    #[error("{0}")]
    Denied(String),
    /// The stage service failed, or answered what the client cannot read.
    #[error("{0}")]
    Service(String),
}

/// The result of a joined helper thread: a panic in it becomes an I/O error of `op` on
/// `path` naming the thread (`what`), never a crash of the task.
pub(crate) fn joined<T>(
    r: std::thread::Result<Result<T>>,
    op: &'static str,
    path: &Path,
    what: &str,
) -> Result<T> {
    r.unwrap_or_else(|_| {
        Err(Error::io(
            op,
            path,
            std::io::Error::other(format!("{what} panicked")),
        ))
    })
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(op: &'static str, path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// The failure's class as task records name it: `missing`, `input`, `denied` or `io`.
    pub fn class(&self) -> &'static str {
        if self.is_missing() {
            return "missing";
        }
        match self {
            Error::Config(_) | Error::Usage(_) => "input",
            Error::Store(e) if e.class() == haar_store::Class::Input => "input",
            Error::Denied(_) => "denied",
            _ => "io",
        }
    }

    /// Whether the error means the source is missing (exit 2 in the CLI).
    pub fn is_missing(&self) -> bool {
        match self {
            Error::Missing(_) => true,
            Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Error::Store(e) => e.class() == haar_store::Class::Missing,
            _ => false,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
