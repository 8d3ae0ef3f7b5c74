//! Starting a task's runner: the one place haar spawns a process that outlives its caller
//! (a new session, stdin from /dev/null, stdout and stderr into the task's log). The CLI's
//! `--detach` and the stage service's [`daemon`](crate::daemon) both come here, and `haar
//! mount --daemon` takes its new session from [`in_new_session`].
//!
//! What the runner's command line looks like is not this crate's: it belongs to the program
//! whose executable holds the runner entry point (the CLI's hidden `haar stage run`), which
//! hands it over as a [`RunnerArgv`] written beside that entry point. This module knows only
//! the [`RunnerCall`] — which task, which journal, which configuration — never the grammar.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::error::{Error, Result};
use crate::task::Stager;

/// What a runner is asked to do: run one task of one journal.
#[derive(Debug, Clone, Copy)]
pub struct RunnerCall<'a> {
    /// The task's id.
    pub task: &'a str,
    /// The journal the task is recorded in.
    pub journal: &'a Path,
    /// The configuration file naming the dataspaces, when they were read from one.
    pub config: Option<&'a Path>,
    /// The stage service's registered dataspaces, when it has any.
    pub registered: Option<&'a Path>,
}

/// The arguments (after the program name) that make the runner's executable run a
/// [`RunnerCall`]; the face that defines the runner entry point writes it, once.
pub type RunnerArgv = fn(&RunnerCall<'_>) -> Vec<OsString>;

/// A task runner: an executable and how to call it.
#[derive(Debug, Clone)]
pub struct Runner {
    /// The executable.
    pub exe: PathBuf,
    /// Its command line for a call.
    pub argv: RunnerArgv,
}

impl Runner {
    /// The running program as the runner (the CLI starting itself).
    pub fn this_program(argv: RunnerArgv) -> std::io::Result<Runner> {
        Ok(Runner {
            exe: std::env::current_exe()?,
            argv,
        })
    }

    /// The command that runs `call`, not yet started: its environment, directory and user
    /// are the caller's to set before [`spawn_detached`].
    pub fn command(&self, call: &RunnerCall<'_>) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.args((self.argv)(call));
        cmd
    }
}

/// Makes the child `cmd` starts the leader of a new session, so that it outlives the caller's
/// terminal, job control and the caller itself (a Ctrl-C meant for the caller's shell does
/// not reach it); with `umask`, the child's umask is set to it (a daemon's own may be
/// anything). Every process haar starts to outlive its starter comes through here: task
/// runners ([`spawn_detached`]) and `haar mount --daemon`'s server.
pub fn in_new_session(cmd: &mut Command, umask: Option<libc::mode_t>) -> &mut Command {
    // SAFETY: setsid and umask are async-signal-safe and touch no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            if let Some(mask) = umask {
                libc::umask(mask);
            }
            Ok(())
        })
    }
}

/// Starts `cmd` [`in_new_session`] (with `umask`), stdin from /dev/null, stdout and stderr
/// into `log`.
pub fn spawn_detached(
    mut cmd: Command,
    log: File,
    umask: Option<libc::mode_t>,
) -> std::io::Result<Child> {
    in_new_session(&mut cmd, umask)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
}

impl Stager {
    /// Runs task `id` (already submitted) in the background: `runner` started in a new
    /// session with this process's environment, its output in the task's `log`. Follow it
    /// with [`Stager::status`], [`wait`](Stager::wait) or [`cancel`](Stager::cancel).
    pub fn detach(&self, runner: &Runner, id: &str) -> Result<()> {
        let log_path = self.journal.task_dir(id).join("log");
        let log = File::create(&log_path).map_err(|e| Error::io("create", &log_path, e))?;
        let config = match &self.spaces.source {
            haar::ConfigSource::File(c) => Some(c.as_path()),
            _ => None,
        };
        let cmd = runner.command(&RunnerCall {
            task: id,
            journal: self.journal.dir(),
            config,
            registered: None,
        });
        spawn_detached(cmd, log, None)
            .map_err(|e| Error::io("start the runner", &runner.exe, e))?;
        Ok(())
    }
}
