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
    /// Staging failed on one node of a job (per-node staging, [`crate::node`]).
    #[error("on node {node}: {message}")]
    OnNode {
        /// The node.
        node: String,
        /// What failed there.
        message: String,
        /// Its class, as that node saw it.
        class: ErrorClass,
    },
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

    /// The failure's class (task records and the stage service's refusals carry its
    /// [`name`](ErrorClass::name)).
    pub fn class(&self) -> ErrorClass {
        if self.is_missing() {
            return ErrorClass::Missing;
        }
        match self {
            Error::Config(_) | Error::Usage(_) => ErrorClass::Input,
            Error::Store(e) if e.class() == haar::Class::Input => ErrorClass::Input,
            Error::Denied(_) => ErrorClass::Denied,
            Error::OnNode { class, .. } => *class,
            _ => ErrorClass::Io,
        }
    }

    /// Whether the error means the source is missing (exit 2 in the CLI).
    pub fn is_missing(&self) -> bool {
        match self {
            Error::Missing(_) => true,
            Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Error::Store(e) => e.class() == haar::Class::Missing,
            Error::OnNode { class, .. } => *class == ErrorClass::Missing,
            _ => false,
        }
    }
}

/// What kind of failure an [`Error`] is: what a face tells its user to do next (the CLI's exit
/// status). Task records and the stage service's wire carry it by [`name`](ErrorClass::name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorClass {
    /// What was to be staged does not exist (`missing`).
    Missing,
    /// The caller's endpoint, option, task name or configuration is wrong (`input`).
    Input,
    /// Not allowed (`denied`).
    Denied,
    /// Anything else: I/O, checksums, the service, a cancelled task (`io`).
    Io,
}

impl ErrorClass {
    /// The class's name in task records and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Missing => "missing",
            ErrorClass::Input => "input",
            ErrorClass::Denied => "denied",
            ErrorClass::Io => "io",
        }
    }

    /// The class a name stands for; a name this code does not know is [`ErrorClass::Io`].
    pub fn of_name(name: &str) -> ErrorClass {
        match name {
            "missing" => ErrorClass::Missing,
            "input" => ErrorClass::Input,
            "denied" => ErrorClass::Denied,
            _ => ErrorClass::Io,
        }
    }

    /// The error a failure of this class, told as `message` by a record or the stage service,
    /// stands for here; `io` makes the error of the classes without a variant of their own.
    pub fn error(self, message: String, io: impl FnOnce(String) -> Error) -> Error {
        match self {
            ErrorClass::Missing => Error::Missing(message),
            ErrorClass::Input => Error::Usage(message),
            ErrorClass::Denied => Error::Denied(message),
            ErrorClass::Io => io(message),
        }
    }
}

/// By [`name`](ErrorClass::name): the records' and the wire's spelling.
impl serde::Serialize for ErrorClass {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// By [`of_name`](ErrorClass::of_name): a class a newer writer added reads as `io`, so that
/// its records stay readable.
impl<'de> serde::Deserialize<'de> for ErrorClass {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(ErrorClass::of_name(&name))
    }
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
