//! The stage service's wire format (design §13.5): one request or reply per line,
//! `HAAR-STAGE/1 {json}\n`, the version first so that a peer speaking another one is told
//! which this side speaks. Pure but for the two line readers, which bound what they hold.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::dataspace::Dataspace;
use crate::error::ErrorClass;
use crate::task::TaskSpec;

/// The protocol version this code speaks.
pub(crate) const PROTOCOL_VERSION: u32 = 1;

const PREFIX: &str = "HAAR-STAGE/";

/// Longest reply line a client accepts.
pub(crate) const MAX_LINE: usize = 1 << 20;

/// One request (design §13.5); the `op` field names it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    /// Who am I to the daemon, and how is the node.
    Hello {
        /// Admin token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// Record a task and start its runner under the caller's uid.
    Submit {
        /// What to stage.
        spec: TaskSpec,
        /// Admin token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// The caller's tasks (one, or all); `user`: another user's (admin).
    Status {
        /// One task.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        task: Option<String>,
        /// Another user (name or uid): admin only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        /// Admin token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// Cancel one of the caller's tasks (`user`: another user's, admin).
    Cancel {
        /// The task.
        task: String,
        /// Another user (name or uid): admin only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        /// Admin token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// Admin: add a dataspace.
    Register {
        /// Its name.
        name: String,
        /// What it is.
        space: Dataspace,
        /// Admin token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// Admin: remove a registered dataspace.
    Unregister {
        /// Its name.
        name: String,
        /// Admin token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// Admin: refuse new tasks, let running ones finish.
    Drain {
        /// Admin token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// Admin: accept tasks again.
    Undrain {
        /// Admin token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// Admin: remove every persisted location a user owns.
    Purge {
        /// The user (name or uid).
        user: String,
        /// Admin token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
}

impl Request {
    /// The operation's name on the wire (the `op` label of the service's metrics).
    pub(crate) fn op(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Submit { .. } => "submit",
            Request::Status { .. } => "status",
            Request::Cancel { .. } => "cancel",
            Request::Register { .. } => "register",
            Request::Unregister { .. } => "unregister",
            Request::Drain { .. } => "drain",
            Request::Undrain { .. } => "undrain",
            Request::Purge { .. } => "purge",
        }
    }

    pub(crate) fn token(&self) -> Option<&str> {
        match self {
            Request::Hello { token }
            | Request::Submit { token, .. }
            | Request::Status { token, .. }
            | Request::Cancel { token, .. }
            | Request::Register { token, .. }
            | Request::Unregister { token, .. }
            | Request::Drain { token }
            | Request::Undrain { token }
            | Request::Purge { token, .. } => token.as_deref(),
        }
    }

    pub(crate) fn set_token(&mut self, t: Option<String>) {
        match self {
            Request::Hello { token }
            | Request::Submit { token, .. }
            | Request::Status { token, .. }
            | Request::Cancel { token, .. }
            | Request::Register { token, .. }
            | Request::Unregister { token, .. }
            | Request::Drain { token }
            | Request::Undrain { token }
            | Request::Purge { token, .. } => *token = t,
        }
    }
}

/// One line of the protocol: `HAAR-STAGE/1 {json}\n`.
pub(crate) fn encode_line(v: &Value) -> String {
    format!("{PREFIX}{PROTOCOL_VERSION} {v}\n")
}

/// Parses a line (with or without its newline) into its JSON object; the error says what is
/// wrong with it, naming the version spoken here when the peer's differs.
pub(crate) fn decode_line(line: &str) -> std::result::Result<Value, String> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let Some(rest) = line.strip_prefix(PREFIX) else {
        return Err(format!(
            "not a haar stage protocol line (expected {PREFIX}{PROTOCOL_VERSION} {{json}})"
        ));
    };
    let (version, body) = rest.split_once(' ').unwrap_or((rest, ""));
    if version != PROTOCOL_VERSION.to_string() {
        return Err(format!(
            "protocol version {version:?} is not spoken here: this side speaks {PROTOCOL_VERSION}"
        ));
    }
    let v: Value = serde_json::from_str(body).map_err(|e| format!("bad JSON: {e}"))?;
    if !v.is_object() {
        return Err("the JSON of a line must be an object".into());
    }
    Ok(v)
}

/// Reads one request line of at most `max` bytes, whole within `deadline`; `None` at the end of
/// the stream before any byte of it. Holds at most `max` bytes whatever the peer sends.
pub(crate) fn read_request(
    r: &mut BufReader<UnixStream>,
    max: usize,
    deadline: Duration,
) -> std::io::Result<Option<String>> {
    use std::io::ErrorKind;
    let until = std::time::Instant::now() + deadline;
    let mut buf = Vec::new();
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let late = || {
            std::io::Error::new(
                ErrorKind::TimedOut,
                format!(
                    "no whole request line within {} s: the connection is closed",
                    deadline.as_secs_f64()
                ),
            )
        };
        if left.is_zero() {
            return Err(late());
        }
        r.get_ref().set_read_timeout(Some(left))?;
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(late());
            }
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "the connection ended inside a request line",
                ))
            };
        }
        let (take, whole) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        if buf.len() + take > max + 1 {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                format!("a request line longer than {max} bytes"),
            ));
        }
        buf.extend_from_slice(&avail[..take]);
        r.consume(take);
        if whole {
            return String::from_utf8(buf).map(Some).map_err(|_| {
                std::io::Error::new(ErrorKind::InvalidData, "a request line not in UTF-8")
            });
        }
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes; `None` at end of stream.
pub(crate) fn read_line(r: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut buf = Vec::new();
    let n = r.take(MAX_LINE as u64 + 1).read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.len() > MAX_LINE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a line longer than {MAX_LINE} bytes"),
        ));
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "a line not in UTF-8"))
}

/// The reply refusing a request: its class and why.
pub(super) fn refusal(class: ErrorClass, message: &str) -> Value {
    json!({"ok": false, "class": class.name(), "error": message})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_round_trip_and_other_versions_are_refused_naming_ours() {
        let v = json!({"op": "hello"});
        let line = encode_line(&v);
        assert_eq!(line, "HAAR-STAGE/1 {\"op\":\"hello\"}\n");
        assert_eq!(decode_line(&line).unwrap(), v);
        let e = decode_line("HAAR-STAGE/2 {\"op\":\"hello\"}").unwrap_err();
        assert!(e.contains("\"2\"") && e.contains("speaks 1"), "{e}");
        assert!(decode_line("hello").unwrap_err().contains("HAAR-STAGE/1"));
        assert!(decode_line("HAAR-STAGE/1 [1]").is_err());
        assert!(decode_line("HAAR-STAGE/1 {").is_err());
    }

    #[test]
    fn requests_carry_their_op_and_refuse_unknown_fields() {
        let r: Request =
            serde_json::from_value(json!({"op": "purge", "user": "alice", "token": "t"})).unwrap();
        assert!(matches!(r, Request::Purge { ref user, .. } if user == "alice"));
        assert_eq!(r.token(), Some("t"));
        // The metrics' op label is the wire's.
        assert_eq!(serde_json::to_value(&r).unwrap()["op"], r.op());
        assert!(serde_json::from_value::<Request>(json!({"op": "drain", "as": 0})).is_err());
        assert!(serde_json::from_value::<Request>(json!({"op": "become_root"})).is_err());
    }
}
