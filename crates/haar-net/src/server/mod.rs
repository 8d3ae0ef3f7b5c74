//! `haar serve`: one server per node over a local store (design §7–§8).
//!
//! A thread per connection, blocking I/O: each connection owns its own store handle (a
//! `Store` over the shared backend), so a client's archives are private until its FLUSH, and
//! reads go straight to the shared backend. The server owns the flush-event log that WATCH
//! streams from; it never touches the store's files itself.
//!
//! Hostile peers (design §8, [`ServerLimits`]): connections are counted at accept and refused
//! over their bound; connections that have not logged in are counted per source address, and
//! a new one drops the oldest of its source (or, when all pre-login places are taken, the
//! oldest of the source holding the most), so a peer that reconnects without end cannot keep
//! other sources from logging in; the whole handshake has a deadline that a reaper thread
//! enforces by shutting the socket down; logged-in connections have idle and write timeouts;
//! frame buffers grow only as bytes arrive, and frames larger than [`SMALL_FRAME`] are
//! charged to their token's share of the server's buffer memory ([`ServerLimits::max_buffered`])
//! before their body is read; a read-only connection's writing requests are refused from their
//! header. Each kind of refusal is logged once per source or token, with its cause.
//!
//! One file per concern, each importing only those listed before it: `config` (what is
//! served, and the limits), `events` (the flush-event log WATCH streams from), `accept`
//! (the state shared by every connection, admission and the bounds of design §8), `session`
//! (a logged-in connection's requests), `handshake` (from accept to login, then the session),
//! `usage` (the store usage gauges of `/metrics`); this file binds and runs the server.
//!
//! Stopping ([`Stopper::stop`], which `haar serve` calls on SIGINT/SIGTERM): the listener is
//! shut down, so accept returns; connections logging in are ended at once and logged-in ones
//! see the end of their input after the request in progress is answered (their unflushed
//! archives are dropped, as a client that disconnects loses them); after [`STOP_GRACE`] the
//! rest are cut. Then the local backend gives back what this process reserved in it (a pmem
//! chunk's unused tail, design §5.3) and [`Server::run`] returns. Without this a server's
//! every stop leaked its chunk: 16 MiB per restart (docs/reliability.md).

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::metrics::Metrics;

use self::accept::{Shared, refuse_at_accept};
use self::handshake::connection;
use self::usage::usage_probe;

pub use self::config::{
    Extractor, SMALL_FRAME, ServerConfig, ServerLimits, Target, boot_id, local_offer,
};
pub use self::events::{EVENT_LOG_CAPACITY, HEARTBEAT};

mod accept;
mod config;
mod events;
mod extract;
mod handshake;
mod session;
mod usage;

/// How long a stopping server lets logged-in connections finish the request in progress
/// before it cuts them; then as long again for their threads to end.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// A bound server, ready to run.
pub struct Server {
    listener: Arc<TcpListener>,
    shared: Arc<Shared>,
}

/// Stops a running [`Server`] from any thread (a signal handler's thread, a test).
#[derive(Clone)]
pub struct Stopper {
    listener: Arc<TcpListener>,
    shared: Arc<Shared>,
}

impl Stopper {
    /// Stops the server: [`Server::run`] ends its connections, gives back what the store
    /// reserved, and returns. Calling it again does nothing.
    pub fn stop(&self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::info!(listener = %self.shared.name, "stopping: no new connections");
        // SAFETY: shutdown(2) of our own listening socket, open while `self` holds it; on
        // Linux it makes the accept in progress (and every later one) fail.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

impl Server {
    /// Binds `addr` (port 0 picks a free port; see [`Server::local_addr`]).
    pub fn bind(
        addr: impl ToSocketAddrs,
        target: Target,
        config: ServerConfig,
    ) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let name = listener.local_addr()?.to_string();
        let metrics = Arc::new(Metrics::default());
        if let Target::Local { backend, options } = &target {
            metrics.set_usage_probe(usage_probe(backend.clone(), options.clone()));
        }
        Ok(Server {
            listener: Arc::new(listener),
            shared: Arc::new(Shared::new(target, config, name, metrics)),
        })
    }

    /// What this server counts, for [`crate::metrics::serve_metrics`] (the store usage
    /// gauges of a local store found at each scrape).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A handle that stops [`Server::run`].
    pub fn stopper(&self) -> Stopper {
        Stopper {
            listener: self.listener.clone(),
            shared: self.shared.clone(),
        }
    }

    /// What is served (for the start-up line).
    pub fn describe(&self) -> String {
        self.shared.target.describe()
    }

    /// Accepts connections, one thread each, until [`Stopper::stop`]; then ends them and
    /// returns (module doc). Fails only if the deadline thread cannot be started; after that,
    /// running out of descriptors, memory or threads refuses connections (each logged) but
    /// never ends the server.
    pub fn run(self) -> io::Result<()> {
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("haar-deadlines".into())
            .spawn(move || shared.deadlines.reap())?;
        loop {
            let accepted = self.listener.accept();
            if self.shared.stopping.load(Ordering::SeqCst) {
                break; // a connection accepted as the server stopped is closed here
            }
            let (stream, peer) = match accepted {
                Ok(s) => s,
                Err(e) => {
                    let exhausted = matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    );
                    if exhausted {
                        // The connection stays in the backlog: wait for descriptors to be freed
                        // instead of spinning on the same error.
                        tracing::warn!(
                            listener = %self.shared.name,
                            error = %e,
                            "accept failed; retrying in 100 ms (raise `ulimit -n` or lower max_connections)"
                        );
                        std::thread::sleep(Duration::from_millis(100));
                    } else {
                        // A connection reset before it was accepted, and the like.
                        tracing::warn!(listener = %self.shared.name, error = %e, "accept failed");
                    }
                    continue;
                }
            };
            let slot = match self.shared.admit(&stream, peer) {
                Ok(slot) => slot,
                Err(reason) => {
                    refuse_at_accept(&self.shared, stream, peer, &reason);
                    continue;
                }
            };
            let shared = self.shared.clone();
            let dropped = slot.dropped.clone();
            let spawned = std::thread::Builder::new()
                .name("haar-conn".into())
                .spawn(move || {
                    // Every event of the connection carries its peer and, once logged in, its
                    // token's kind. The span's level is ERROR so that any filter that lets an
                    // event through keeps the span's fields on it.
                    let span = tracing::error_span!(
                        "connection",
                        %peer,
                        token = tracing::field::Empty
                    );
                    let _in = span.enter();
                    match connection(&shared, stream, slot) {
                        Ok(()) => tracing::debug!(%peer, "connection closed"),
                        // Logged (once per source) when it was dropped.
                        Err(e) if dropped.load(Ordering::SeqCst) => {
                            tracing::debug!(%peer, error = %e, "connection closed: dropped before login")
                        }
                        Err(e) => tracing::warn!(%peer, error = %e, "connection closed"),
                    }
                });
            if let Err(e) = spawned {
                // The closure (socket and slot) is dropped: the connection is closed and
                // uncounted.
                tracing::error!(
                    %peer,
                    error = %e,
                    "refused: cannot start a thread for the connection; lower max_connections"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.finish();
        Ok(())
    }

    /// Ends the connections of a stopping server and gives back what the store reserved.
    fn finish(&self) {
        let shared = &self.shared;
        let wait = |until: Instant| {
            while shared.open.load(Ordering::SeqCst) > 0 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            shared.open.load(Ordering::SeqCst)
        };
        let open = shared.end_connections(Shutdown::Read);
        // WATCH streams wait on the event log, not on their socket: wake them to end (under
        // its lock, so that none is between its check of the flag and its wait).
        {
            let _log = shared
                .events
                .inner
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            shared.events.cond.notify_all();
        }
        let mut left = wait(Instant::now() + STOP_GRACE);
        if left > 0 {
            tracing::warn!(
                listener = %shared.name,
                connections = left,
                "stopping: cutting connections still busy after {STOP_GRACE:?}"
            );
            shared.end_connections(Shutdown::Both);
            left = wait(Instant::now() + STOP_GRACE);
        }
        if let Target::Local { backend, .. } = &shared.target {
            if left > 0 {
                // A connection still inside the store could take a new chunk after this;
                // only that chunk's tail would be lost, as before this existed.
                tracing::warn!(
                    listener = %shared.name,
                    connections = left,
                    "stopping with connections still open"
                );
            }
            backend.release_unused();
        }
        tracing::info!(listener = %shared.name, connections = open, "stopped");
    }

    /// Runs on a background thread (tests, embedding); returns the bound address.
    pub fn spawn(self) -> io::Result<SocketAddr> {
        let addr = self.local_addr()?;
        std::thread::Builder::new()
            .name("haar-accept".into())
            .spawn(move || self.run())?;
        Ok(addr)
    }
}

/// Binds and serves forever.
pub fn serve(addr: impl ToSocketAddrs, target: Target, config: ServerConfig) -> io::Result<()> {
    Server::bind(addr, target, config)?.run()
}
