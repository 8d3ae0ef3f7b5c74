//! The state directory the stage service owns (design §13.5): one journal per user under
//! `users/UID` (the user's own directory, read and written only as that user), the
//! registered dataspaces (`dataspaces`, a journal record) and the drain mark (`draining`).
//! Nothing here listens or starts a process.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::metrics::STATES;
use super::server::{Daemon, DaemonConfig};
use crate::dataspace::{Dataspace, Dataspaces};
use crate::error::{Error, Result};
use crate::identity::{as_user, euid};
use crate::journal::{self, Journal};
use crate::launch::RunnerArgv;
use crate::task::{Stager, State};

/// Magic word of the registered-dataspaces record.
pub(crate) const SPACES_MAGIC: &str = "haar-stage-spaces";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Registered {
    spaces: BTreeMap<String, Dataspace>,
}

/// The registered-dataspaces record of the state directory `state`.
pub(super) fn registered_file(state: &Path) -> PathBuf {
    state.join("dataspaces")
}

/// The dataspaces registered in the state directory `state` (none before the first).
pub(super) fn load_registered(state: &Path) -> Result<BTreeMap<String, Dataspace>> {
    match Journal::read::<Registered>(&registered_file(state), SPACES_MAGIC) {
        Ok(r) => Ok(r.spaces),
        Err(Error::Missing(_)) => Ok(BTreeMap::new()),
        Err(e) => Err(e),
    }
}

pub(super) fn mkdir(path: &Path, mode: u32) -> Result<()> {
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
    /// Opens (creating) the state directory and loads the registered dataspaces. Each task's
    /// runner is `cfg.runner` called with `argv`.
    pub fn open_with(cfg: DaemonConfig, argv: RunnerArgv) -> Result<Arc<Daemon>> {
        mkdir(&cfg.state.join("users"), 0o755)?;
        let registered = load_registered(&cfg.state)?;
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
        Ok(Daemon::new(cfg, argv, registered))
    }

    pub(super) fn draining(&self) -> bool {
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

    pub(super) fn user_dir(&self, uid: u32) -> PathBuf {
        self.cfg.state.join("users").join(uid.to_string())
    }

    /// The stager of `uid`'s journal, creating its directory (root's `users/` holds it; the
    /// user owns it) on first use. Use the journal through [`as_user`] only.
    pub(super) fn stager_for(&self, uid: u32, gid: u32) -> Result<Stager> {
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
    pub(super) fn users(&self) -> Vec<(u32, u32, PathBuf)> {
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
    pub(super) fn running(&self) -> usize {
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

    /// Sets the task gauges from every user's journal (each read as its user).
    pub(super) fn count_tasks(&self) {
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

    pub(super) fn config_owned(&self, name: &str) -> Result<()> {
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

    pub(super) fn save_registered(&self, reg: &BTreeMap<String, Dataspace>) -> Result<()> {
        let path = registered_file(&self.cfg.state);
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
pub(super) fn init_registries(spaces: &Dataspaces) {
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

/// Reads the registered-dataspaces record `path` (as a runner does) and adds its dataspaces
/// to `spaces` (the configuration's win).
pub fn add_registered(spaces: &mut Dataspaces, path: &Path) -> Result<()> {
    let r: Registered = Journal::read(path, SPACES_MAGIC)?;
    for (k, v) in r.spaces {
        spaces.spaces.entry(k).or_insert(v);
    }
    Ok(())
}
