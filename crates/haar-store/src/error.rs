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
        /// Why it was refused and what to do (the rule's own error where one refused it).
        #[source]
        reason: Reason,
    },
    /// A request that cannot be evaluated.
    #[error("request {request}: {reason}")]
    BadRequest {
        /// The request as given.
        request: String,
        /// Why and what to do (the rule's own error where one refused it).
        #[source]
        reason: Reason,
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
    /// A read found no store where the configuration points (reads never create one).
    #[error("no store at {path}: {detail}")]
    NoStore {
        /// The root or pool file that is missing.
        path: PathBuf,
        /// What is missing and what to check.
        detail: String,
    },
    /// A configuration that cannot be used.
    #[error("configuration: {0}")]
    Config(String),
    /// A connection to a server that failed (connect, handshake, a broken stream) or an I/O
    /// failure the server reported: the request did not complete there.
    #[error("{op} {server}: {source}")]
    Net {
        /// What haar was doing ("connection to", "flush to" …).
        op: &'static str,
        /// The server, `host:port`.
        server: String,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// A request a remote server refused or could not satisfy (bad key or request, refused
    /// access); connection and server-side I/O failures are [`Error::Net`].
    #[error("server {server}: {message}")]
    Remote {
        /// `host:port`.
        server: String,
        /// The server's message, with what to do.
        message: String,
        /// Whose fault, as the server classed it.
        class: Class,
    },
    /// Lanes of a `dist` front-end failed; each lane's own error is kept.
    #[error("{op} through dist: {summary} ({failures})")]
    Lanes {
        /// The operation ("archive", "flush", "list").
        op: &'static str,
        /// What it means for the caller's data and what to do.
        summary: String,
        /// Every failed lane with its error.
        #[source]
        failures: LaneFailures,
    },
}

/// Why a key or a request was refused: the typed error of the schema or request rule that
/// refused it (kept, as the error's source), or a message.
#[derive(Debug)]
#[non_exhaustive]
pub enum Reason {
    /// The schema refused the key (no rule matches, a value of the wrong type …).
    Schema(haar_core::schema::SchemaError),
    /// The request language refused the request (a bad range, an unknown date …).
    Request(haar_core::request::RequestError),
    /// Anything else, with what to do.
    Text(String),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Schema(e) => e.fmt(f),
            Reason::Request(e) => e.fmt(f),
            Reason::Text(t) => f.write_str(t),
        }
    }
}

impl std::error::Error for Reason {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Reason::Schema(e) => Some(e),
            Reason::Request(e) => Some(e),
            Reason::Text(_) => None,
        }
    }
}

impl From<String> for Reason {
    fn from(t: String) -> Self {
        Reason::Text(t)
    }
}

impl From<&str> for Reason {
    fn from(t: &str) -> Self {
        Reason::Text(t.to_string())
    }
}

impl From<haar_core::schema::SchemaError> for Reason {
    fn from(e: haar_core::schema::SchemaError) -> Self {
        Reason::Schema(e)
    }
}

impl From<haar_core::request::RequestError> for Reason {
    fn from(e: haar_core::request::RequestError) -> Self {
        Reason::Request(e)
    }
}

/// Whose fault an error is: decides the CLI's exit status, the code a server sends, and
/// whether `dist` tries another lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Class {
    /// The request, key, input or configuration: change it and try again.
    Input,
    /// The requested data is not there.
    Missing,
    /// Storage, a server or the network: an I/O failure, corruption, a full pool, a busy
    /// database. Another replica may serve.
    Storage,
}

/// The lanes of a `dist` operation that failed, each with its own error (the first is the
/// [`source`](std::error::Error::source)).
#[derive(Debug)]
pub struct LaneFailures(pub Vec<(String, Error)>);

impl std::fmt::Display for LaneFailures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (lane, e)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{lane}: {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LaneFailures {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .first()
            .map(|(_, e)| e as &(dyn std::error::Error + 'static))
    }
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

    /// Whose fault this is (see [`Class`]).
    pub fn class(&self) -> Class {
        match self {
            Error::BadKey { .. } | Error::BadRequest { .. } | Error::Config(_) => Class::Input,
            Error::Remote { class, .. } => *class,
            Error::NoStore { .. } => Class::Missing,
            Error::Io { .. }
            | Error::Net { .. }
            | Error::Lanes { .. }
            | Error::Corrupt { .. }
            | Error::Busy { .. }
            | Error::PoolFull { .. } => Class::Storage,
        }
    }

    /// A failed connection to (or a failure reported by) `server`.
    pub fn net(op: &'static str, server: impl Into<String>, source: io::Error) -> Error {
        Error::Net {
            op,
            server: server.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::{MemoryBackend, Store};

    #[test]
    fn a_refused_key_keeps_the_schema_error_as_its_source() {
        let mut s = Store::new(MemoryBackend::new());
        let e = s
            .archive(&haar_core::Key::parse("nonsense=1").unwrap(), b"x")
            .unwrap_err();
        assert_eq!(e.class(), Class::Input);
        let reason = e.source().expect("the reason is the source");
        let rule = reason.source().expect("the schema's own error is kept");
        assert!(rule.is::<haar_core::schema::SchemaError>(), "{rule:?}");
        // The message is unchanged: the key, then the rule's words.
        assert!(
            e.to_string()
                .starts_with("key nonsense=1: no schema rule matches"),
            "{e}"
        );
    }

    #[test]
    fn lane_failures_keep_every_lane_error() {
        let e = Error::Lanes {
            op: "flush",
            summary: "flush failed on 2 lane(s)".into(),
            failures: LaneFailures(vec![
                (
                    "a:1".into(),
                    Error::net("flush to", "a:1", io::Error::other("reset")),
                ),
                ("b:2".into(), Error::Config("x".into())),
            ]),
        };
        assert_eq!(e.class(), Class::Storage);
        let m = e.to_string();
        assert!(
            m.contains("a:1: flush to a:1: reset") && m.contains("b:2: configuration: x"),
            "{m}"
        );
        let first = e
            .source()
            .and_then(|f| f.source())
            .expect("first lane's error");
        assert_eq!(first.to_string(), "flush to a:1: reset");
    }
}
