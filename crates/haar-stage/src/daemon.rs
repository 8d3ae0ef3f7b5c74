//! The per-node stage service (`haar stage daemon`, design §13.5): a Unix-socket server that
//! runs users' tasks under their own uid, with admin operations (register and unregister
//! dataspaces, drain, purge a user's persisted data) that only root or the holder of the
//! admin token may perform; and the client the CLI uses to talk to it.
//!
//! Identity is the kernel's: the uid of the connecting process as `SO_PEERCRED` states it,
//! never a name in the request. Owns the daemon's state directory (per-user journals, the
//! registered dataspaces, the drain mark) and the wire format; how a task copies bytes is
//! [`Stager`]'s, run in a separate runner process per task (`haar stage run ID`) so that a
//! task outlives a daemon killed under it and is resumed when the daemon starts again.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::dataspace::{Dataspace, Dataspaces, valid_name};
use crate::error::{Error, Result};
use crate::identity::{as_user, euid};
use crate::journal::{self, Journal};
use crate::launch::{self, Runner, RunnerArgv, RunnerCall};
use crate::task::{Stager, State, TaskRecord, TaskSpec};

/// The protocol version this code speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Where the daemon listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/haar/stage.sock";
/// The daemon's state directory unless told otherwise.
pub const DEFAULT_STATE: &str = "/var/lib/haar/stage";
/// Magic word of the registered-dataspaces record.
pub const SPACES_MAGIC: &str = "haar-stage-spaces";
const PREFIX: &str = "HAAR-STAGE/";
/// Longest reply line a client accepts.
pub const MAX_LINE: usize = 1 << 20;

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
    fn token(&self) -> Option<&str> {
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

    fn set_token(&mut self, t: Option<String>) {
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
pub fn encode_line(v: &Value) -> String {
    format!("{PREFIX}{PROTOCOL_VERSION} {v}\n")
}

/// Parses a line (with or without its newline) into its JSON object; the error says what is
/// wrong with it, naming the version spoken here when the peer's differs.
pub fn decode_line(line: &str) -> std::result::Result<Value, String> {
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
fn read_request(
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
fn read_line(r: &mut impl BufRead) -> std::io::Result<Option<String>> {
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

/// The identity of the process at the other end of a Unix socket, as the kernel states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its uid.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// Its pid.
    pub pid: i32,
}

/// `SO_PEERCRED` of a connected Unix socket.
pub fn peer_of(s: &UnixStream) -> std::io::Result<Peer> {
    use std::os::fd::AsRawFd;
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket fd, and a ucred-sized buffer with its length.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Peer {
        uid: c.uid,
        gid: c.gid,
        pid: c.pid,
    })
}

/// Constant-time comparison (the token must not leak through timing).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token a token file's text holds: its first line, trimmed.
pub fn token_of(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_string()
}

/// Reads the admin token file: its first line; refused when it is readable by group or
/// others, or belongs to another user than the daemon's.
pub fn read_token_file(path: &Path) -> Result<String> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
    if meta.mode() & 0o077 != 0 || meta.uid() != euid() {
        return Err(Error::Config(format!(
            "admin token file {}: must belong to uid {} and be readable by it alone (chmod 600)",
            path.display(),
            euid()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))?;
    let t = token_of(&text);
    if t.len() < 16 {
        return Err(Error::Config(format!(
            "admin token file {}: the token (first line) needs 16 characters or more",
            path.display()
        )));
    }
    Ok(t)
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
pub fn runner_env(
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
        let mut child = launch::spawn_detached(cmd, log, Some(0o022))
            .map_err(|e| Error::io("start the runner", &self.cfg.runner, e))?;
        // Reaps the runner; a task it never started would stay queued for ever: fail it,
        // pointing at the runner's output.
        let (st, id, live) = (st.clone(), id.to_string(), Arc::clone(&self.live));
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
            let _ = as_user(uid, gid, || st.fail_unstarted(&id, &why));
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
            if let Err((why, first)) = self.admit(peer) {
                if first {
                    tracing::warn!(uid = peer.uid, pid = peer.pid, "connection refused: {why}");
                }
                let _ = conn.set_nonblocking(true);
                let _ = (&conn).write_all(encode_line(&refusal("denied", &why)).as_bytes());
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
    fn admit(&self, peer: Peer) -> std::result::Result<(), (String, bool)> {
        let l = self.cfg.limits;
        let mut open = self.open.lock().expect("lock");
        let why = if open.total >= l.connections {
            Some(format!(
                "the stage service on {} has {} connections open, its limit: try again later",
                self.cfg.socket.display(),
                l.connections
            ))
        } else if peer.uid != 0 && open.per_uid.get(&peer.uid).copied().unwrap_or(0) >= l.per_user {
            Some(format!(
                "uid {} has {} connections open to the stage service on {}, the limit per \
                 user: close some (each `haar stage` command needs one)",
                peer.uid,
                l.per_user,
                self.cfg.socket.display()
            ))
        } else {
            None
        };
        if let Some(why) = why {
            let first = open.refusal_logged.insert(peer.uid);
            return Err((why, first));
        }
        open.refusal_logged.remove(&peer.uid);
        *open.per_uid.entry(peer.uid).or_default() += 1;
        open.total += 1;
        Ok(())
    }

    fn leave(&self, peer: Peer) {
        let mut open = self.open.lock().expect("lock");
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_uid.get_mut(&peer.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.per_uid.remove(&peer.uid);
            }
        }
    }

    fn connection(&self, conn: UnixStream, peer: Peer) {
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
                    tracing::debug!(uid = peer.uid, pid = peer.pid, "connection closed: {e}");
                    let _ = w.write_all(encode_line(&refusal("input", &e.to_string())).as_bytes());
                    return;
                }
            };
            let (reply, close) = match decode_line(&line) {
                Err(m) => (refusal("input", &m), true),
                Ok(v) => match serde_json::from_value::<Request>(v) {
                    Err(e) => (refusal("input", &format!("bad request: {e}")), false),
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

    /// Answers one request from `peer`.
    pub fn handle(&self, peer: Peer, req: Request) -> Value {
        match self.answer(peer, &req) {
            Ok(v) => v,
            Err(e) => refusal(e.class(), &e.to_string()),
        }
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

fn refusal(class: &str, message: &str) -> Value {
    json!({"ok": false, "class": class, "error": message})
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

/// A connection to a stage service.
#[derive(Debug)]
pub struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
    socket: PathBuf,
    /// The admin token sent with every request.
    pub token: Option<String>,
}

impl Client {
    /// Connects to the service on `socket`.
    pub fn connect(socket: &Path) -> Result<Client> {
        let s = UnixStream::connect(socket)
            .map_err(|e| Error::io("connect to the stage service on", socket, e))?;
        let w = s
            .try_clone()
            .map_err(|e| Error::io("connect to the stage service on", socket, e))?;
        Ok(Client {
            r: BufReader::new(s),
            w,
            socket: socket.to_path_buf(),
            token: None,
        })
    }

    /// Sends `req` and returns the reply's object; a refusal becomes the error of its class.
    pub fn call(&mut self, mut req: Request) -> Result<Value> {
        if req.token().is_none() {
            req.set_token(self.token.clone());
        }
        let line = encode_line(&serde_json::to_value(&req).expect("requests serialise"));
        let gone = |what: String| {
            Error::Service(format!(
                "the stage service on {} went away ({what}); once it runs again its tasks \
                 resume: ask again (`haar stage wait TASK`, or release the Slurm job)",
                self.socket.display()
            ))
        };
        // A service that refuses the connection (over its limits) says why and closes it,
        // maybe before the request is sent: its reply is read even when sending failed.
        let sent = self.w.write_all(line.as_bytes());
        let reply = match (read_line(&mut self.r), sent) {
            (Ok(Some(reply)), _) => reply,
            (_, Err(e)) => return Err(gone(format!("send: {e}"))),
            (Err(e), Ok(())) => return Err(gone(format!("receive: {e}"))),
            (Ok(None), Ok(())) => return Err(gone("it closed the connection".into())),
        };
        let v = decode_line(&reply).map_err(|m| {
            Error::Service(format!("stage service on {}: {m}", self.socket.display()))
        })?;
        if v["ok"] == Value::Bool(true) {
            return Ok(v);
        }
        let msg = v["error"].as_str().unwrap_or("refused").to_string();
        Err(match v["class"].as_str() {
            Some("missing") => Error::Missing(msg),
            Some("input") => Error::Usage(msg),
            Some("denied") => Error::Denied(msg),
            _ => Error::Service(msg),
        })
    }

    /// Submits a task; returns its record.
    pub fn submit(&mut self, spec: &TaskSpec) -> Result<TaskRecord> {
        let v = self.call(Request::Submit {
            spec: spec.clone(),
            token: None,
        })?;
        record(&v["task"])
    }

    /// One of the caller's tasks.
    pub fn status(&mut self, task: &str) -> Result<TaskRecord> {
        let v = self.call(Request::Status {
            task: Some(task.into()),
            user: None,
            token: None,
        })?;
        let mut all = records(&v["tasks"])?;
        all.pop()
            .ok_or_else(|| Error::Service("status: an empty reply".into()))
    }

    /// The caller's tasks (`user`: another user's, for an admin).
    pub fn list(&mut self, user: Option<&str>) -> Result<Vec<TaskRecord>> {
        let v = self.call(Request::Status {
            task: None,
            user: user.map(String::from),
            token: None,
        })?;
        records(&v["tasks"])
    }

    /// Cancels one of the caller's tasks (`user`: another user's, for an admin).
    pub fn cancel(&mut self, task: &str, user: Option<&str>) -> Result<TaskRecord> {
        let v = self.call(Request::Cancel {
            task: task.into(),
            user: user.map(String::from),
            token: None,
        })?;
        record(&v["task"])
    }

    /// Polls the task every 100 ms until it is final (or `timeout`), telling `progress`.
    pub fn wait(
        &mut self,
        task: &str,
        timeout: Option<Duration>,
        progress: &mut dyn FnMut(&TaskRecord),
    ) -> Result<TaskRecord> {
        let start = std::time::Instant::now();
        loop {
            let rec = self.status(task)?;
            progress(&rec);
            if rec.state.is_final() || timeout.is_some_and(|t| start.elapsed() >= t) {
                return Ok(rec);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn record(v: &Value) -> Result<TaskRecord> {
    serde_json::from_value(v.clone())
        .map_err(|e| Error::Service(format!("a task record the client cannot read: {e}")))
}

fn records(v: &Value) -> Result<Vec<TaskRecord>> {
    serde_json::from_value(v.clone())
        .map_err(|e| Error::Service(format!("task records the client cannot read: {e}")))
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(serde_json::from_value::<Request>(json!({"op": "drain", "as": 0})).is_err());
        assert!(serde_json::from_value::<Request>(json!({"op": "become_root"})).is_err());
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same_secret(b"0123456789abcdef", b"0123456789abcdeX"));
        assert!(!same_secret(b"0123456789abcdef", b"0123456789abcde"));
    }
}
