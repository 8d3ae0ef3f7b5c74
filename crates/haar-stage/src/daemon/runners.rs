//! The runners the stage service starts: one process per task, under the task's user, in a
//! new session (through [`launch`](crate::launch)), with an environment built from nothing;
//! reaped by a thread that fails a task its runner never started and counts how each ended.
//! A runner outlives the service; [`Daemon::recover`] starts again what a previous service
//! left.

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt as _;
use std::sync::Arc;

use super::metrics::state_label;
use super::server::Daemon;
use super::state::registered_file;
use crate::error::{Error, ErrorClass, Result};
use crate::identity::{as_user, euid};
use crate::journal::Journal;
use crate::launch::{self, RunnerCall};
use crate::task::{Stager, State};

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

impl Daemon {
    /// Starts `haar stage run ID` for task `id` of `uid`, in a new session, as that user.
    /// Called inside [`as_user`] (the log is created as the user).
    pub(super) fn spawn_runner(&self, st: &Stager, uid: u32, gid: u32, id: &str) -> Result<()> {
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
        let reg = registered_file(&self.cfg.state);
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
                    let class = rec.error_class.unwrap_or(ErrorClass::Io);
                    let operators = matches!(class, ErrorClass::Io | ErrorClass::Denied);
                    let class = class.name();
                    match (rec.state, &rec.error) {
                        // Trouble of the service's own (storage, a runner that died, a
                        // permission) is the operator's; a user's missing source or wrong
                        // endpoint is the user's, told in the task's record.
                        (State::Failed, Some(e)) if operators => {
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
}
