//! The per-node stage service (`haar stage daemon`, design §13.5): a Unix-socket server that
//! runs users' tasks under their own uid, with admin operations (register and unregister
//! dataspaces, drain, purge a user's persisted data) that only root or the holder of the
//! admin token may perform; and the client the CLI uses to talk to it.
//!
//! Identity is the kernel's: the uid of the connecting process as `SO_PEERCRED` states it,
//! never a name in the request. Owns the daemon's state directory (per-user journals, the
//! registered dataspaces, the drain mark) and the wire format; how a task copies bytes is
//! [`Stager`](crate::Stager)'s, run in a separate runner process per task (started through
//! [`launch`](crate::launch)) so that a task outlives a daemon killed under it and is resumed
//! when the daemon starts again.
//!
//! One file per concern:
//! - `codec`: the wire format, `HAAR-STAGE/1 {json}` lines, and the [`Request`]s they carry;
//! - `peer`: who is at the other end of the socket, as the kernel says;
//! - `tokens`: the admin token, read from its file and compared in constant time;
//! - `server`: the [`Daemon`], its socket, and the connections it admits within [`Limits`];
//! - `requests`: what it answers to each [`Request`], and who may ask;
//! - `denials`: which denied requests are logged (the first per uid and cause, then counts);
//! - `state`: its state directory (per-user journals, registered dataspaces, drain mark);
//! - `runners`: the runner process of each task, under the task's user;
//! - `client`: the [`Client`] the CLI uses;
//! - `metrics`: what the service counts, shown by [`Daemon::serve_metrics`].

#![warn(unreachable_pub)]

mod client;
mod codec;
mod denials;
mod metrics;
mod peer;
mod requests;
mod runners;
mod server;
mod state;
mod tokens;

pub use client::Client;
pub use codec::Request;
pub use peer::Peer;
pub use server::{Daemon, DaemonConfig, Limits, bind};
pub use state::add_registered;
pub use tokens::{read_token_file, token_of};

/// Where the daemon listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/haar/stage.sock";
/// The daemon's state directory unless told otherwise.
pub const DEFAULT_STATE: &str = "/var/lib/haar/stage";
