//! The stage service itself: its [`Daemon`], the state directory it owns (per-user journals,
//! registered dataspaces, the drain mark), the [`Limits`] that keep it up, and the runners it
//! starts under each caller's uid.

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::codec::{PROTOCOL_VERSION, Request, decode_line, encode_line, read_request};
use super::metrics::{Refusal, STATES, StageMetrics, state_label};
use super::peer::{Peer, peer_of};
use super::tokens::same_secret;
use crate::dataspace::{Dataspace, Dataspaces, valid_name};
use crate::error::{Error, ErrorClass, Result};
use crate::identity::{as_user, euid};
use crate::journal::{self, Journal};
use crate::launch::{self, Runner, RunnerArgv, RunnerCall};
use crate::task::{Stager, State, TaskRecord};

/// Magic word of the registered-dataspaces record.
pub(crate) const SPACES_MAGIC: &str = "haar-stage-spaces";

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
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections: 256,
            per_user: 32,
            request_line: 64 << 10,
            request_deadline: Duration::from_secs(60),
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

#[derive(Debug, Default, Serialize, Deserialize)]
struct Registered {
    spaces: BTreeMap<String, Dataspace>,
}

/// A running stage service.
#[derive(Debug)]
pub struct Daemon {
    cfg: DaemonConfig,
    /// `cfg.runner` and how it is called.
    runner: Runner,
    registered: Mutex<BTreeMap<String, Dataspace>>,
    /// `(uid, task)` of the runners this daemon started and has not yet reaped: a task asked
    /// for again (a retried Slurm stage-in) must not get a second runner.
    live: Arc<Mutex<std::collections::HashSet<(u32, String)>>>,
    /// Connections open now: in all, and per uid.
    open: Mutex<Open>,
    /// What it counts (`--metrics`).
    metrics: Arc<StageMetrics>,
    /// The number of the next connection (the `conn` field of its log span).
    next_conn: AtomicU64,
}

/// The connections a daemon has open, and whose refusals were logged since their last
/// admission (a user over the limit is logged once, not once per connection).
#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_uid: BTreeMap<u32, usize>,
    refusal_logged: std::collections::BTreeSet<u32>,
}

/// The environment of a task's runner, built from nothing (the daemon's own may hold secrets:
/// tokens, cloud keys, root's HOME; a runner under the user's uid is the user's to read, in
/// /proc/PID/environ): `PATH` (a plain default when the daemon has none), the locale (`LANG`,
/// `LANGUAGE`, `LC_*`), `TZ`, `HAAR_LOG`, and the user's own `HOME`, `USER` and `LOGNAME` from
/// the passwd database (`/` and the uid without an entry). The configuration reaches the
/// runner as `--config FILE`, or as `FDB5_CONFIG` when that is where the daemon read it.
pub(crate) fn runner_env(
    uid: u32,
    daemon_env: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    config: &haar::ConfigSource,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut out: Vec<(std::ffi::OsString, std::ffi::OsString)> = daemon_env
        .into_iter()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            matches!(&*k, "PATH" | "LANG" | "LANGUAGE" | "TZ" | "HAAR_LOG") || k.starts_with("LC_")
        })
        .collect();
    if !out.iter().any(|(k, _)| k == "PATH") {
        out.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
    }
    let (home, name) =
        crate::identity::home_and_name(uid).unwrap_or_else(|| ("/".into(), uid.to_string().into()));
    out.push(("HOME".into(), home));
    out.push(("USER".into(), name.clone()));
    out.push(("LOGNAME".into(), name));
    if let haar::ConfigSource::Yaml { text, origin } = config
        && origin == "$FDB5_CONFIG"
    {
        out.push(("FDB5_CONFIG".into(), text.into()));
    }
    out.sort();
    out
}

fn mkdir(path: &Path, mode: u32) -> Result<()> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
    {
        Ok(()) => Ok(()),
        Err(e) => Err(Error::io("create", path, e)),
    }
}

impl Daemon {
    /// [`Daemon::open_with`] a runner that takes no arguments (a stand-in runner that finds
    /// its task by other means, as in tests).
    pub fn open(cfg: DaemonConfig) -> Result<Arc<Daemon>> {
        Daemon::open_with(cfg, |_| Vec::new())
    }

    /// Opens (creating) the state directory and loads the registered dataspaces. Each task's
    /// runner is `cfg.runner` called with `argv`.
    pub fn open_with(cfg: DaemonConfig, argv: RunnerArgv) -> Result<Arc<Daemon>> {
        mkdir(&cfg.state.join("users"), 0o755)?;
        let reg = cfg.state.join("dataspaces");
        let registered = match Journal::read::<Registered>(&reg, SPACES_MAGIC) {
            Ok(r) => r.spaces,
            Err(Error::Missing(_)) => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        // The persist registries are root's (crate::persist): made here, before any user
        // could make one. A dataspace whose root root cannot write (a root-squashed shared
        // file system) keeps working without one.
        if euid() == 0 {
            let mut spaces = cfg.spaces.clone();
            for (k, v) in &registered {
                spaces.spaces.entry(k.clone()).or_insert_with(|| v.clone());
            }
            init_registries(&spaces);
        }
        Ok(Arc::new(Daemon {
            runner: Runner {
                exe: cfg.runner.clone(),
                argv,
            },
            cfg,
            registered: Mutex::new(registered),
            live: Arc::default(),
            open: Mutex::default(),
            metrics: Arc::default(),
            next_conn: AtomicU64::new(1),
        }))
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.cfg.socket
    }

    fn draining(&self) -> bool {
        self.cfg.state.join("draining").exists()
    }

    /// The configuration's dataspaces plus the registered ones.
    pub fn spaces(&self) -> Dataspaces {
        let mut s = self.cfg.spaces.clone();
        for (k, v) in self.registered.lock().expect("lock").iter() {
            s.spaces.entry(k.clone()).or_insert_with(|| v.clone());
        }
        s
    }

    fn user_dir(&self, uid: u32) -> PathBuf {
        self.cfg.state.join("users").join(uid.to_string())
    }

    /// The stager of `uid`'s journal, creating its directory (root's `users/` holds it; the
    /// user owns it) on first use. Use the journal through [`as_user`] only.
    fn stager_for(&self, uid: u32, gid: u32) -> Result<Stager> {
        let dir = self.user_dir(uid);
        if std::fs::symlink_metadata(&dir).is_err() {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| Error::io("create", &dir, e))?;
            if euid() == 0 {
                std::os::unix::fs::lchown(&dir, Some(uid), Some(gid))
                    .map_err(|e| Error::io("chown", &dir, e))?;
            }
        }
        Ok(Stager {
            spaces: self.spaces(),
            journal: Journal::new_unchecked(&dir),
        })
    }

    /// The users with a journal here: `(uid, gid of the directory, directory)`.
    fn users(&self) -> Vec<(u32, u32, PathBuf)> {
        let Ok(rd) = std::fs::read_dir(self.cfg.state.join("users")) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                let uid = e.file_name().to_str()?.parse::<u32>().ok()?;
                let meta = std::fs::symlink_metadata(e.path()).ok()?;
                (meta.is_dir() && meta.uid() == uid).then(|| (uid, meta.gid(), e.path()))
            })
            .collect()
    }

    /// Tasks running now, every user's (each journal read as its user).
    fn running(&self) -> usize {
        self.users()
            .into_iter()
            .map(|(uid, gid, dir)| {
                as_user(uid, gid, || {
                    let st = Stager {
                        spaces: self.cfg.spaces.clone(),
                        journal: Journal::new_unchecked(&dir),
                    };
                    Ok(st
                        .list()?
                        .iter()
                        .filter(|r| r.state == State::Running)
                        .count())
                })
                .unwrap_or(0)
            })
            .sum()
    }

    /// Starts `haar stage run ID` for task `id` of `uid`, in a new session, as that user.
    /// Called inside [`as_user`] (the log is created as the user).
    fn spawn_runner(&self, st: &Stager, uid: u32, gid: u32, id: &str) -> Result<()> {
        if !self
            .live
            .lock()
            .expect("lock")
            .insert((uid, id.to_string()))
        {
            return Ok(());
        }
        let r = self.start_runner(st, uid, gid, id);
        if r.is_ok() {
            self.metrics.runner_started();
            tracing::info!(uid, task = id, "runner started");
        }
        if r.is_err() {
            self.live
                .lock()
                .expect("lock")
                .remove(&(uid, id.to_string()));
        }
        r
    }

    fn start_runner(&self, st: &Stager, uid: u32, gid: u32, id: &str) -> Result<()> {
        let task_dir = st.journal.task_dir(id);
        let log_path = task_dir.join("log");
        let _ = std::fs::remove_file(&log_path);
        let log = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| Error::io("create", &log_path, e))?;
        let reg = self.cfg.state.join("dataspaces");
        let config = match &self.cfg.spaces.source {
            haar::ConfigSource::File(c) => Some(c.as_path()),
            _ => None,
        };
        let mut cmd = self.runner.command(&RunnerCall {
            task: id,
            journal: st.journal.dir(),
            config,
            registered: reg.exists().then_some(reg.as_path()),
        });
        cmd.env_clear()
            .envs(runner_env(
                uid,
                std::env::vars_os(),
                &self.cfg.spaces.source,
            ))
            .current_dir("/");
        if euid() == 0 {
            // std clears the supplementary groups when it sets the uid of a root child.
            cmd.uid(uid).gid(gid);
        }
        // The umask: what the runner creates beside the modes it keeps (crate::copy) gets the
        // usual 022, not whatever the daemon was started with.
        // What the task had staged before this runner (a resumed task keeps its objects).
        let bytes_before = st.status(id).map_or(0, |r| r.bytes_done);
        let mut child = launch::spawn_detached(cmd, log, Some(0o022))
            .map_err(|e| Error::io("start the runner", &self.cfg.runner, e))?;
        // Reaps the runner; a task it never started would stay queued for ever: fail it,
        // pointing at the runner's output. Then counts how the task ended.
        let (st, id, live) = (st.clone(), id.to_string(), Arc::clone(&self.live));
        let metrics = Arc::clone(&self.metrics);
        std::thread::spawn(move || {
            let how = match child.wait() {
                Ok(s) => s.to_string(),
                Err(e) => e.to_string(),
            };
            live.lock().expect("lock").remove(&(uid, id.clone()));
            let why = format!(
                "the stage service's runner of task {id} ended ({how}) before running it; its \
                 output: {}",
                log_path.display()
            );
            let rec = as_user(uid, gid, || {
                st.fail_unstarted(&id, &why)?;
                st.status(&id)
            });
            match rec {
                Ok(rec) => {
                    let state = state_label(rec.state);
                    let bytes = rec.bytes_done.saturating_sub(bytes_before);
                    metrics.runner_ended(state, bytes);
                    let class = rec.error_class.as_deref().unwrap_or("io");
                    match (rec.state, &rec.error) {
                        // Trouble of the service's own (storage, a runner that died, a
                        // permission) is the operator's; a user's missing source or wrong
                        // endpoint is the user's, told in the task's record.
                        (State::Failed, Some(e)) if matches!(class, "io" | "denied") => {
                            tracing::warn!(uid, task = %id, state, bytes, class, "task failed: {e}")
                        }
                        (State::Failed, Some(e)) => {
                            tracing::info!(uid, task = %id, state, bytes, class, "task failed: {e}")
                        }
                        _ => {
                            tracing::info!(uid, task = %id, state, bytes, runner = %how, "runner ended")
                        }
                    }
                }
                Err(e) => {
                    metrics.runner_ended("unknown", 0);
                    tracing::warn!(uid, task = %id, runner = %how, "runner ended; its task's record cannot be read: {e}");
                }
            }
        });
        Ok(())
    }

    /// Resumes what a previous daemon left: every task `interrupted` (its runner gone) or
    /// `queued` and not cancelled, of every user, unless draining. Returns `(uid, task)`.
    pub fn recover(&self) -> Result<Vec<(u32, String)>> {
        let mut out = Vec::new();
        if self.draining() {
            return Ok(out);
        }
        for (uid, gid, dir) in self.users() {
            let st = Stager {
                spaces: self.spaces(),
                journal: Journal::new_unchecked(&dir),
            };
            let resumed = as_user(uid, gid, || {
                let mut ids = Vec::new();
                for rec in st.list()? {
                    let cancelled = st.journal.task_dir(&rec.id).join("cancel").exists();
                    if (rec.state == State::Interrupted || rec.state == State::Queued) && !cancelled
                    {
                        st.requeue(&rec.id)?;
                        self.spawn_runner(&st, uid, gid, &rec.id)?;
                        ids.push(rec.id);
                    }
                }
                Ok(ids)
            })?;
            out.extend(resumed.into_iter().map(|id| (uid, id)));
        }
        Ok(out)
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

    fn is_admin(&self, peer: Peer, token: Option<&str>) -> bool {
        peer.uid == 0
            || match (&self.cfg.admin_token, token) {
                (Some(mine), Some(theirs)) => same_secret(mine.as_bytes(), theirs.as_bytes()),
                _ => false,
            }
    }

    /// Answers one request from `peer`, counting it; a denied request is logged with its
    /// cause (once: here), a failure of the service's own at warn, the rest at debug.
    pub fn handle(&self, peer: Peer, req: Request) -> Value {
        let op = req.op();
        match self.answer(peer, &req) {
            Ok(v) => {
                self.metrics.request(op, "ok");
                match (&req, v["task"]["id"].as_str()) {
                    (Request::Submit { .. } | Request::Cancel { .. }, Some(task)) => {
                        tracing::info!(uid = peer.uid, op, task, "request done")
                    }
                    _ => tracing::debug!(uid = peer.uid, op, "request done"),
                }
                v
            }
            Err(e) => {
                let class = e.class();
                self.metrics.request(op, class.name());
                match class {
                    ErrorClass::Denied => {
                        tracing::warn!(uid = peer.uid, pid = peer.pid, op, "request denied: {e}")
                    }
                    ErrorClass::Io => {
                        tracing::warn!(uid = peer.uid, pid = peer.pid, op, "request failed: {e}")
                    }
                    _ => tracing::debug!(
                        uid = peer.uid,
                        op,
                        class = class.name(),
                        "request refused: {e}"
                    ),
                }
                refusal(class, &e.to_string())
            }
        }
    }

    /// Serves `GET /metrics` at `addr` (`HOST:PORT`; port 0 picks one) on a thread of its
    /// own, with haar-net's endpoint; returns the bound address. The task gauges are found
    /// at each scrape, from every user's journal.
    pub fn serve_metrics(self: &Arc<Self>, addr: &str) -> Result<std::net::SocketAddr> {
        haar_net::metrics::listen(addr, Arc::clone(self))
            .map_err(|e| Error::io("serve metrics on", Path::new(addr), e))
    }

    /// Sets the task gauges from every user's journal (each read as its user).
    fn count_tasks(&self) {
        let mut by_state = [0u64; STATES.len()];
        let (mut done, mut total) = (0u64, 0u64);
        for (uid, gid, dir) in self.users() {
            let recs = as_user(uid, gid, || {
                Stager {
                    spaces: self.cfg.spaces.clone(),
                    journal: Journal::new_unchecked(&dir),
                }
                .list()
            });
            for r in recs.into_iter().flatten() {
                if let Some(k) = STATES.iter().position(|(s, _)| *s == r.state) {
                    by_state[k] += 1;
                }
                if matches!(r.state, State::Queued | State::Running) {
                    done += r.bytes_done;
                    total += r.bytes_total;
                }
            }
        }
        self.metrics.set_tasks(&by_state, done, total);
    }

    fn answer(&self, peer: Peer, req: &Request) -> Result<Value> {
        let admin = self.is_admin(peer, req.token());
        let need_admin = |what: &str| -> Result<()> {
            if admin {
                Ok(())
            } else {
                Err(Error::Denied(format!(
                    "{what} is an admin operation of the stage service: run it as root, or \
                     give the admin token (--token-file); uid {} is neither",
                    peer.uid
                )))
            }
        };
        // The user a status or cancel is about: the caller, or (admin) the one named.
        let subject = |user: &Option<String>, what: &str| -> Result<(u32, u32)> {
            match user {
                None => Ok((peer.uid, peer.gid)),
                Some(u) => {
                    need_admin(&format!("{what} of another user's tasks"))?;
                    let uid = crate::persist::user_id(u)?;
                    let gid = std::fs::metadata(self.user_dir(uid))
                        .map(|m| m.gid())
                        .unwrap_or(uid);
                    Ok((uid, gid))
                }
            }
        };
        match req {
            Request::Hello { .. } => Ok(json!({
                "ok": true,
                "version": PROTOCOL_VERSION,
                "uid": peer.uid,
                "admin": admin,
                "draining": self.draining(),
                "running": self.running(),
            })),
            Request::Submit { spec, .. } => {
                if self.draining() {
                    return Err(Error::Denied(format!(
                        "the stage service on this node is draining: no new tasks (running \
                         ones finish); submit elsewhere, or an admin runs `haar stage admin \
                         undrain` ({})",
                        self.cfg.socket.display()
                    )));
                }
                if euid() != 0 && peer.uid != euid() {
                    return Err(Error::Denied(format!(
                        "this stage service runs as uid {} and runs tasks for it alone, not for \
                         uid {}: start it as root",
                        euid(),
                        peer.uid
                    )));
                }
                let st = self.stager_for(peer.uid, peer.gid)?;
                let rec = as_user(peer.uid, peer.gid, || {
                    let mut rec = st.submit(spec)?;
                    // The same task asked for again (a retried Slurm stage-in) resumes it, as
                    // running it in-process would; done, running or cancelled, it is left so.
                    if matches!(rec.state, State::Failed | State::Interrupted) {
                        rec = st.requeue(&rec.id)?;
                    }
                    if rec.state == State::Queued {
                        self.spawn_runner(&st, peer.uid, peer.gid, &rec.id)?;
                    }
                    Ok(rec)
                })?;
                Ok(json!({"ok": true, "task": rec}))
            }
            Request::Status { task, user, .. } => {
                let (uid, gid) = subject(user, "status")?;
                if !self.user_dir(uid).exists() {
                    return match task {
                        Some(t) => Err(Error::Missing(format!(
                            "uid {uid} has no task {t} on this node's stage service"
                        ))),
                        None => Ok(json!({"ok": true, "tasks": []})),
                    };
                }
                let st = self.stager_for(uid, gid)?;
                let tasks: Vec<TaskRecord> = as_user(uid, gid, || match task {
                    Some(t) => Ok(vec![st.status(t)?]),
                    None => st.list(),
                })?;
                Ok(json!({"ok": true, "tasks": tasks}))
            }
            Request::Cancel { task, user, .. } => {
                let (uid, gid) = subject(user, "cancel")?;
                if !self.user_dir(uid).exists() {
                    return Err(Error::Missing(format!(
                        "uid {uid} has no task {task} on this node's stage service"
                    )));
                }
                let st = self.stager_for(uid, gid)?;
                let rec = as_user(uid, gid, || st.cancel(task, Duration::from_secs(30)))?;
                Ok(json!({"ok": true, "task": rec}))
            }
            Request::Register { name, space, .. } => {
                need_admin("register")?;
                if !valid_name(name) {
                    return Err(Error::Usage(format!(
                        "dataspace name {name:?}: use letters, digits, '_', '-' and '.'"
                    )));
                }
                self.config_owned(name)?;
                let mut reg = self.registered.lock().expect("lock");
                reg.insert(name.clone(), space.clone());
                self.save_registered(&reg)?;
                if euid() == 0 {
                    let mut one = Dataspaces {
                        source: self.cfg.spaces.source.clone(),
                        spaces: BTreeMap::new(),
                    };
                    one.spaces.insert(name.clone(), space.clone());
                    init_registries(&one);
                }
                Ok(json!({"ok": true}))
            }
            Request::Unregister { name, .. } => {
                need_admin("unregister")?;
                self.config_owned(name)?;
                let mut reg = self.registered.lock().expect("lock");
                if reg.remove(name).is_none() {
                    return Err(Error::Missing(format!(
                        "no registered dataspace {name:?} on this node"
                    )));
                }
                self.save_registered(&reg)?;
                Ok(json!({"ok": true}))
            }
            Request::Drain { .. } => {
                need_admin("drain")?;
                let p = self.cfg.state.join("draining");
                std::fs::write(&p, b"").map_err(|e| Error::io("create", &p, e))?;
                Ok(json!({"ok": true, "running": self.running()}))
            }
            Request::Undrain { .. } => {
                need_admin("undrain")?;
                let p = self.cfg.state.join("draining");
                match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io("remove", &p, e)),
                }
                Ok(json!({"ok": true, "running": self.running()}))
            }
            Request::Purge { user, .. } => {
                need_admin("purge")?;
                let uid = crate::persist::user_id(user)?;
                // Only the user's own records, only what the user owns, with the user's
                // file-system identity (crate::persist::purge).
                let removed = crate::persist::purge(&self.spaces(), uid)?;
                Ok(json!({"ok": true, "removed": removed}))
            }
        }
    }

    fn config_owned(&self, name: &str) -> Result<()> {
        if self.cfg.spaces.spaces.contains_key(name) {
            return Err(Error::Usage(format!(
                "dataspace {name:?} is defined in the configuration ({}): edit that file",
                match &self.cfg.spaces.source {
                    haar::ConfigSource::File(p) => p.display().to_string(),
                    haar::ConfigSource::Yaml { origin, .. } => origin.clone(),
                    haar::ConfigSource::Defaults => "the defaults".into(),
                }
            )));
        }
        Ok(())
    }

    fn save_registered(&self, reg: &BTreeMap<String, Dataspace>) -> Result<()> {
        let path = self.cfg.state.join("dataspaces");
        journal::write_record(
            &path,
            SPACES_MAGIC,
            &Registered {
                spaces: reg.clone(),
            },
        )?;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644));
        Ok(())
    }
}

/// Creates the persist registry of each directory dataspace of `spaces` that lacks one,
/// logging (not failing on) the ones it cannot.
fn init_registries(spaces: &Dataspaces) {
    for (name, d) in &spaces.spaces {
        if d.dir().is_none() {
            continue;
        }
        let mut one = Dataspaces {
            source: spaces.source.clone(),
            spaces: BTreeMap::new(),
        };
        one.spaces.insert(name.clone(), d.clone());
        if let Err(e) = crate::persist::init(&one) {
            tracing::warn!(dataspace = %name, "no persist registry: {e}");
        }
    }
}

impl haar_net::metrics::Exposition for Daemon {
    fn render(&self) -> String {
        self.count_tasks();
        haar_net::metrics::encode_registry(&self.metrics.registry)
    }
}

fn refusal(class: ErrorClass, message: &str) -> Value {
    json!({"ok": false, "class": class.name(), "error": message})
}

/// Binds the daemon's socket (mode 0666: identity comes from `SO_PEERCRED`), replacing a
/// stale one nobody answers on; refuses when another daemon answers there.
pub fn bind(socket: &Path) -> Result<UnixListener> {
    if let Some(parent) = socket.parent() {
        mkdir(parent, 0o755)?;
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

/// Reads the registered-dataspaces record `path` (as a runner does) and adds its dataspaces
/// to `spaces` (the configuration's win).
pub fn add_registered(spaces: &mut Dataspaces, path: &Path) -> Result<()> {
    let r: Registered = Journal::read(path, SPACES_MAGIC)?;
    for (k, v) in r.spaces {
        spaces.spaces.entry(k).or_insert(v);
    }
    Ok(())
}
