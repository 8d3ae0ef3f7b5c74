//! The stage service itself: its [`Daemon`] and [`DaemonConfig`], the socket it listens on,
//! and the connections it admits within the [`Limits`] that keep it up, one thread each,
//! reading request lines and writing replies. What a request does is `requests`'s; the
//! state directory is `state`'s; the runners are `runners`'s.

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::codec::{Request, decode_line, encode_line, read_request, refusal};
use super::denials::Denials;
use super::metrics::{Refusal, StageMetrics};
use super::peer::{Peer, peer_of};
use crate::dataspace::{Dataspace, Dataspaces};
use crate::error::{Error, ErrorClass, Result};
use crate::launch::{Runner, RunnerArgv};

/// What keeps the service up whatever its users do (design §13.5): every connection costs a
/// thread, a descriptor and its line buffer, so all three are bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once, every user's.
    pub connections: usize,
    /// Connections one uid may hold open at once (root's are not counted against it).
    pub per_user: usize,
    /// Longest request line the service reads; a longer one is refused and its connection
    /// closed.
    pub request_line: usize,
    /// Time a request line may take to arrive whole, counted from when the service starts
    /// waiting for it: an idle or trickling connection is closed after it.
    pub request_deadline: Duration,
    /// A denied request is logged the first time per (uid, cause); later ones of the same
    /// pair are counted and logged as one summary line at most this often.
    pub denied_log_every: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 256,
            per_user: 32,
            request_line: 64 << 10,
            request_deadline: Duration::from_secs(60),
            denied_log_every: Duration::from_secs(60),
        }
    }
}

/// How the daemon is set up.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Where to listen.
    pub socket: PathBuf,
    /// State directory (design §13.5).
    pub state: PathBuf,
    /// The configuration's dataspaces (registered ones are added).
    pub spaces: Dataspaces,
    /// The executable started as each task's runner, called as the [`RunnerArgv`] given to
    /// [`Daemon::open_with`] says (the CLI's: `haar stage run ID …`).
    pub runner: PathBuf,
    /// The admin token, if non-root admins are allowed.
    pub admin_token: Option<String>,
    /// Connection limits.
    pub limits: Limits,
}

/// A running stage service.
#[derive(Debug)]
pub struct Daemon {
    pub(super) cfg: DaemonConfig,
    /// `cfg.runner` and how it is called.
    pub(super) runner: Runner,
    pub(super) registered: Mutex<BTreeMap<String, Dataspace>>,
    /// `(uid, task)` of the runners this daemon started and has not yet reaped: a task asked
    /// for again (a retried Slurm stage-in) must not get a second runner.
    pub(super) live: Arc<Mutex<std::collections::HashSet<(u32, String)>>>,
    /// Connections open now: in all, and per uid.
    open: Mutex<Open>,
    /// What it counts (`--metrics`).
    pub(super) metrics: Arc<StageMetrics>,
    /// The number of the next connection (the `conn` field of its log span).
    next_conn: AtomicU64,
    /// The denied requests logged, and those counted for a summary.
    pub(super) denials: Mutex<Denials>,
}

/// The connections a daemon has open, and whose refusals were logged since their last
/// admission (a user over the limit is logged once, not once per connection).
#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_uid: BTreeMap<u32, usize>,
    refusal_logged: std::collections::BTreeSet<u32>,
}

impl Daemon {
    /// [`Daemon::open_with`] a runner that takes no arguments (a stand-in runner that finds
    /// its task by other means, as in tests).
    pub fn open(cfg: DaemonConfig) -> Result<Arc<Daemon>> {
        Daemon::open_with(cfg, |_| Vec::new())
    }

    /// The daemon of `cfg`, whose state directory holds `registered`; each task's runner is
    /// `cfg.runner` called with `argv` ([`Daemon::open_with`] opens the directory first).
    pub(super) fn new(
        cfg: DaemonConfig,
        argv: RunnerArgv,
        registered: BTreeMap<String, Dataspace>,
    ) -> Arc<Daemon> {
        Arc::new(Daemon {
            runner: Runner {
                exe: cfg.runner.clone(),
                argv,
            },
            denials: Mutex::new(Denials::new(cfg.limits.denied_log_every)),
            cfg,
            registered: Mutex::new(registered),
            live: Arc::default(),
            open: Mutex::default(),
            metrics: Arc::default(),
            next_conn: AtomicU64::new(1),
        })
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.cfg.socket
    }

    /// Accepts connections for ever, one thread per connection, within [`Limits`]: a
    /// connection over them is told so and closed; an accept that fails (out of descriptors,
    /// say) is logged and retried after a pause that doubles up to a second, never the end of
    /// the service.
    pub fn serve(self: &Arc<Self>, listener: UnixListener) -> Result<()> {
        let mut pause = Duration::ZERO;
        for conn in listener.incoming() {
            let conn = match conn {
                Ok(c) => {
                    pause = Duration::ZERO;
                    c
                }
                Err(e) => {
                    let scarce = matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    );
                    if scarce {
                        if pause.is_zero() {
                            tracing::warn!(
                                socket = %self.cfg.socket.display(),
                                "accept failed ({e}): pausing new connections until resources free up"
                            );
                        }
                        pause =
                            (pause * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                        std::thread::sleep(pause);
                    } else {
                        tracing::warn!(socket = %self.cfg.socket.display(), "accept failed: {e}");
                    }
                    continue;
                }
            };
            let Ok(peer) = peer_of(&conn) else { continue };
            if let Err((why, first, cause)) = self.admit(peer) {
                self.metrics.refused(cause);
                if first {
                    tracing::warn!(
                        uid = peer.uid,
                        pid = peer.pid,
                        "connection refused (logged once until the uid is admitted again): {why}"
                    );
                }
                let _ = conn.set_nonblocking(true);
                let _ =
                    (&conn).write_all(encode_line(&refusal(ErrorClass::Denied, &why)).as_bytes());
                continue;
            }
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name(format!("stage-uid{}", peer.uid))
                .spawn(move || {
                    me.connection(conn, peer);
                    me.leave(peer);
                });
            if let Err(e) = spawned {
                tracing::warn!(uid = peer.uid, "no thread for a connection: {e}");
                self.leave(peer);
            }
        }
        Ok(())
    }

    /// Counts a new connection of `peer` in, or says which limit it is over (and whether
    /// this is the first refusal of `peer` since it was last admitted).
    fn admit(&self, peer: Peer) -> std::result::Result<(), (String, bool, Refusal)> {
        let l = self.cfg.limits;
        let mut open = self.open.lock().expect("lock");
        let why = if open.total >= l.connections {
            Some((
                Refusal::Busy,
                format!(
                    "the stage service on {} has {} connections open, its limit: try again later",
                    self.cfg.socket.display(),
                    l.connections
                ),
            ))
        } else if peer.uid != 0 && open.per_uid.get(&peer.uid).copied().unwrap_or(0) >= l.per_user {
            Some((
                Refusal::UserLimit,
                format!(
                    "uid {} has {} connections open to the stage service on {}, the limit per \
                 user: close some (each `haar stage` command needs one)",
                    peer.uid,
                    l.per_user,
                    self.cfg.socket.display()
                ),
            ))
        } else {
            None
        };
        if let Some((cause, why)) = why {
            let first = open.refusal_logged.insert(peer.uid);
            return Err((why, first, cause));
        }
        open.refusal_logged.remove(&peer.uid);
        *open.per_uid.entry(peer.uid).or_default() += 1;
        open.total += 1;
        self.metrics.accepted(open.total);
        Ok(())
    }

    fn leave(&self, peer: Peer) {
        let mut open = self.open.lock().expect("lock");
        open.total = open.total.saturating_sub(1);
        self.metrics.set_open(open.total);
        if let Some(n) = open.per_uid.get_mut(&peer.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.per_uid.remove(&peer.uid);
            }
        }
    }

    fn connection(&self, conn: UnixStream, peer: Peer) {
        // Every event of the connection carries who is at the other end. The span's level is
        // ERROR so that any filter that lets an event through keeps its fields on it.
        let span = tracing::error_span!(
            "stage_connection",
            uid = peer.uid,
            pid = peer.pid,
            conn = self.next_conn.fetch_add(1, Ordering::Relaxed)
        );
        let _in = span.enter();
        let Ok(mut w) = conn.try_clone() else { return };
        // A reply the peer does not read must not hold the thread for ever either.
        let _ = w.set_write_timeout(Some(self.cfg.limits.request_deadline));
        let mut r = BufReader::new(conn);
        loop {
            let line = match read_request(
                &mut r,
                self.cfg.limits.request_line,
                self.cfg.limits.request_deadline,
            ) {
                Ok(Some(l)) => l,
                Ok(None) => return,
                Err(e) => {
                    use std::io::ErrorKind;
                    let cause = match e.kind() {
                        ErrorKind::TimedOut => "deadline",
                        ErrorKind::InvalidData => "bad_line",
                        ErrorKind::UnexpectedEof => "eof",
                        _ => "io",
                    };
                    self.metrics.dropped(cause);
                    // A line too long or not text is someone's mistake or hostility: said; an
                    // idle or vanished peer is not news.
                    if cause == "bad_line" {
                        tracing::warn!(cause, "connection closed: {e}");
                    } else {
                        tracing::debug!(cause, "connection closed: {e}");
                    }
                    let _ = w.write_all(
                        encode_line(&refusal(ErrorClass::Input, &e.to_string())).as_bytes(),
                    );
                    return;
                }
            };
            let (reply, close) = match decode_line(&line) {
                Err(m) => {
                    self.metrics.request("invalid", ErrorClass::Input.name());
                    tracing::warn!(cause = %m, "request refused: not a protocol line");
                    (refusal(ErrorClass::Input, &m), true)
                }
                Ok(v) => match serde_json::from_value::<Request>(v) {
                    Err(e) => {
                        self.metrics.request("invalid", ErrorClass::Input.name());
                        tracing::debug!(cause = %e, "request refused: bad request");
                        (
                            refusal(ErrorClass::Input, &format!("bad request: {e}")),
                            false,
                        )
                    }
                    Ok(req) => (self.handle(peer, req), false),
                },
            };
            if w.write_all(encode_line(&reply).as_bytes()).is_err() || close {
                return;
            }
        }
    }

    /// Serves `GET /metrics` at `addr` (`HOST:PORT`; port 0 picks one) on a thread of its
    /// own, with haar-net's endpoint; returns the bound address. The task gauges are found
    /// at each scrape, from every user's journal.
    pub fn serve_metrics(self: &Arc<Self>, addr: &str) -> Result<std::net::SocketAddr> {
        haar::metrics::listen(addr, Arc::clone(self))
            .map_err(|e| Error::io("serve metrics on", Path::new(addr), e))
    }
}

impl haar::metrics::Exposition for Daemon {
    fn render(&self) -> String {
        self.count_tasks();
        haar::metrics::encode_registry(&self.metrics.registry)
    }
}

/// Binds the daemon's socket (mode 0666: identity comes from `SO_PEERCRED`), replacing a
/// stale one nobody answers on; refuses when another daemon answers there.
pub fn bind(socket: &Path) -> Result<UnixListener> {
    if let Some(parent) = socket.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(|e| Error::io("create", parent, e))?;
    }
    if socket.exists() {
        if UnixStream::connect(socket).is_ok() {
            return Err(Error::Usage(format!(
                "a stage service answers on {} already: stop it first",
                socket.display()
            )));
        }
        std::fs::remove_file(socket).map_err(|e| Error::io("remove stale socket", socket, e))?;
    }
    let l = UnixListener::bind(socket).map_err(|e| Error::io("bind", socket, e))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| Error::io("chmod", socket, e))?;
    Ok(l)
}
