//! The client side: [`RemoteStore`] (the `remote` front-end, one server), WATCH streams, and
//! [`wait`], the "step complete" trigger over one or more servers.
//!
//! Owns connections and their failure handling; routing over several servers belongs to
//! `haar_store::dist`, which composes `RemoteStore`s as lanes. One module per concern:
//! `session` (connect, handshake, liveness), `retry` (when a failed request is sent again),
//! `down` (servers this process could not reach, skipped for a back-off),
//! `remote` (the `FieldStore` over one server, request/reply framing), `local` (same-host
//! reads, a wrapper that serves retrieves from the server's own store) and `watch` (WATCH
//! streams and `wait`).

mod down;
mod extract;
mod local;
mod remote;
mod retry;
mod session;
mod watch;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use haar_store::Error;

use crate::auth;
use crate::protocol::{ErrorMeta, WireError};

pub use down::{Backoff, connect_attempts, is_remembered_down};
pub use remote::RemoteStore;
pub use watch::{StepTarget, WaitOutcome, Watch, WatchAll, wait};

/// How a client reaches servers.
#[derive(Clone)]
pub struct ClientConfig {
    /// The shared secret (`HAAR_TOKEN` / `--token-file`).
    pub token: Option<String>,
    /// TLS 1.3 when set (the servers must have certificates this trusts).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Time allowed for TCP connect and for the handshake.
    pub connect_timeout: Duration,
    /// Serve retrieves from the server's own store when it is on this machine and offers it
    /// (design §8, same-host reads); `HAAR_LOCAL_READS=0` turns the default off.
    pub local_reads: bool,
    /// When to ask for frame tags on plain TCP (design §8): by default when the server's
    /// address is not a loopback address.
    pub frame_tags: crate::protocol::FrameTags,
    /// How long a request waits for the server's next byte (or for the server to take the
    /// next byte of a request) before the connection is given up as hung (design §8):
    /// [`ClientConfig::REPLY_TIMEOUT`] by default. Watches use their heartbeat instead.
    pub reply_timeout: Duration,
    /// How long a server this process could not reach is skipped before it is tried again
    /// (design §7.1): [`Backoff::DEFAULT`], 1 s doubling to 30 s. The
    /// memory is the process's, shared by every store and configuration in it.
    pub unreachable_backoff: Backoff,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            token: None,
            tls: None,
            connect_timeout: Duration::from_secs(5),
            local_reads: std::env::var_os("HAAR_LOCAL_READS").is_none_or(|v| v != "0"),
            frame_tags: crate::protocol::FrameTags::Auto,
            reply_timeout: ClientConfig::REPLY_TIMEOUT,
            unreachable_backoff: Backoff::DEFAULT,
        }
    }
}

impl ClientConfig {
    /// Default [`ClientConfig::reply_timeout`]: longer than any flush, wipe or read of a
    /// healthy server takes between two bytes, short enough that a hung one is reported.
    pub const REPLY_TIMEOUT: Duration = Duration::from_secs(300);

    /// Token from `$HAAR_TOKEN`, no TLS.
    pub fn from_env() -> std::result::Result<ClientConfig, String> {
        Ok(ClientConfig {
            token: auth::load_token(None)?,
            ..ClientConfig::default()
        })
    }
}

pub(crate) fn io_error(op: &'static str, addr: &str, e: impl std::fmt::Display) -> Error {
    Error::net(op, addr, io::Error::other(e.to_string()))
}

pub(crate) fn wire_error(addr: &str, e: WireError) -> Error {
    match e {
        WireError::Closed => io_error(
            "connection to",
            addr,
            "closed by the server (did it stop or restart? check its log)",
        ),
        WireError::Io(ref io)
            if matches!(
                io.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            io_error(
                "connection to",
                addr,
                format!(
                    "the server stopped answering ({e}) for longer than the reply timeout: it \
                     may be hung, stopped or overloaded; check its log and load"
                ),
            )
        }
        e => io_error("connection to", addr, e),
    }
}

/// A server's ERROR as a store error: server-side storage failures are `Net` (a dist
/// front-end fails over on them), everything else is `Remote` with the server's class.
pub(crate) fn remote_error(addr: &str, m: ErrorMeta) -> Error {
    match m.class() {
        haar_store::Class::Storage => io_error("server", addr, m.message),
        class => Error::Remote {
            server: addr.into(),
            message: m.message,
            class,
        },
    }
}
