//! What the stage service answers: each [`Request`] checked against who asks (the peer's
//! uid, root or the admin token), carried out on the state directory and the runners, and
//! the reply line's body; a refusal carries its [`ErrorClass`] by name.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use serde_json::{Value, json};

use super::codec::{PROTOCOL_VERSION, Request, refusal};
use super::denials::Line;
use super::peer::Peer;
use super::server::Daemon;
use super::state::init_registries;
use super::tokens::same_secret;
use crate::dataspace::{Dataspaces, valid_name};
use crate::error::{Error, ErrorClass, Result};
use crate::identity::{as_user, euid};
use crate::task::{State, TaskRecord};

impl Daemon {
    fn is_admin(&self, peer: Peer, token: Option<&str>) -> bool {
        peer.uid == 0
            || match (&self.cfg.admin_token, token) {
                (Some(mine), Some(theirs)) => same_secret(mine.as_bytes(), theirs.as_bytes()),
                _ => false,
            }
    }

    /// Answers one request from `peer`, counting it; a denied request is logged with its
    /// cause the first time per (uid, cause) and then as a count at most once per
    /// [`Limits::denied_log_every`](super::Limits), a failure of the service's own at warn,
    /// the rest at debug.
    pub fn handle(&self, peer: Peer, req: Request) -> Value {
        let op = req.op();
        self.log_denials_due();
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
                        let cause = e.to_string();
                        let now = std::time::Instant::now();
                        match self
                            .denials
                            .lock()
                            .expect("lock")
                            .note(peer.uid, &cause, now)
                        {
                            Some(Line::First) => tracing::warn!(
                                uid = peer.uid,
                                pid = peer.pid,
                                op,
                                "request denied: {cause}"
                            ),
                            Some(again) => log_again(&again),
                            None => {}
                        }
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

    /// Logs the summaries of denials that went quiet (the daemon has no timer: any request
    /// brings them out, at most a period late).
    fn log_denials_due(&self) {
        let due = self
            .denials
            .lock()
            .expect("lock")
            .due(std::time::Instant::now());
        for line in &due {
            log_again(line);
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
}

/// The summary line of denials counted since their (uid, cause) was last logged.
fn log_again(line: &Line) {
    if let Line::Again {
        uid,
        cause,
        count,
        over,
    } = line
    {
        tracing::warn!(
            uid,
            denied = count,
            seconds = over.as_secs(),
            "requests denied again: {count} in the last {}s, for the cause logged before: {cause}",
            over.as_secs()
        );
    }
}
