//! One interface to the stage verbs, wherever the tasks run: [`Tasks`], implemented in this
//! process ([`Local`]: a [`Stager`] and the runner `--detach` starts) and by the per-node
//! stage service's [`Client`]; [`connect`] picks which, so a face never does.

use std::path::PathBuf;
use std::time::Duration;

use crate::daemon::{self, Client};
use crate::error::{Error, Result};
use crate::launch::{Runner, RunnerArgv};
use crate::task::{ProgressFn, Stager, TaskRecord, TaskSpec};

/// How long a cancel run in this process waits for the task's runner to stop.
const CANCEL_GRACE: Duration = Duration::from_secs(30);

/// The verbs a user has over their tasks.
pub trait Tasks {
    /// Records a task and has it run in the background; returns its record (`queued`) at once.
    fn submit(&mut self, spec: &TaskSpec) -> Result<TaskRecord>;
    /// Records a task and follows it to its end, telling `progress` as it goes; returns the
    /// final record (a failed task is a record, not an error).
    fn run(&mut self, spec: &TaskSpec, progress: &mut ProgressFn<'_>) -> Result<TaskRecord>;
    /// The task's record now.
    fn status(&mut self, id: &str) -> Result<TaskRecord>;
    /// Every task's record (the caller's).
    fn list(&mut self) -> Result<Vec<TaskRecord>>;
    /// The task's record once final, or after `timeout` whatever its state.
    fn wait(&mut self, id: &str, timeout: Option<Duration>) -> Result<TaskRecord>;
    /// Asks the task to stop; returns its record once final.
    fn cancel(&mut self, id: &str) -> Result<TaskRecord>;
}

/// Tasks run in this process, or (submitted) in a runner it starts in a new session.
#[derive(Debug)]
pub struct Local {
    /// The journal and dataspaces.
    pub stager: Stager,
    /// How this program is called as a runner (see [`crate::launch`]).
    pub argv: RunnerArgv,
}

impl Tasks for Local {
    fn submit(&mut self, spec: &TaskSpec) -> Result<TaskRecord> {
        let rec = self.stager.submit(spec)?;
        let runner = Runner::this_program(self.argv)
            .map_err(|e| Error::io("find", std::path::Path::new("/proc/self/exe"), e))?;
        self.stager.detach(&runner, &rec.id)?;
        Ok(rec)
    }

    fn run(&mut self, spec: &TaskSpec, progress: &mut ProgressFn<'_>) -> Result<TaskRecord> {
        let rec = self.stager.submit(spec)?;
        self.stager.run(&rec.id, progress)
    }

    fn status(&mut self, id: &str) -> Result<TaskRecord> {
        self.stager.status(id)
    }

    fn list(&mut self) -> Result<Vec<TaskRecord>> {
        self.stager.list()
    }

    fn wait(&mut self, id: &str, timeout: Option<Duration>) -> Result<TaskRecord> {
        self.stager.wait(id, timeout)
    }

    fn cancel(&mut self, id: &str) -> Result<TaskRecord> {
        self.stager.cancel(id, CANCEL_GRACE)
    }
}

impl Tasks for Client {
    fn submit(&mut self, spec: &TaskSpec) -> Result<TaskRecord> {
        Client::submit(self, spec)
    }

    fn run(&mut self, spec: &TaskSpec, progress: &mut ProgressFn<'_>) -> Result<TaskRecord> {
        let rec = Client::submit(self, spec)?;
        Client::wait(self, &rec.id, None, progress)
    }

    fn status(&mut self, id: &str) -> Result<TaskRecord> {
        Client::status(self, id)
    }

    fn list(&mut self) -> Result<Vec<TaskRecord>> {
        Client::list(self, None)
    }

    fn wait(&mut self, id: &str, timeout: Option<Duration>) -> Result<TaskRecord> {
        Client::wait(self, id, timeout, &mut |_| {})
    }

    fn cancel(&mut self, id: &str) -> Result<TaskRecord> {
        Client::cancel(self, id, None)
    }
}

/// Where a user's tasks should run.
#[derive(Debug, Clone, Default)]
pub struct Connect {
    /// Run them in this process even when a stage service answers.
    pub in_process: bool,
    /// The stage service's socket, which must then answer; default
    /// [`daemon::DEFAULT_SOCKET`], used when it answers.
    pub socket: Option<PathBuf>,
    /// File whose first line is the admin token sent to the service.
    pub token_file: Option<PathBuf>,
}

impl Connect {
    /// The stage service's socket: the one given, else [`daemon::DEFAULT_SOCKET`].
    pub fn socket(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(|| daemon::DEFAULT_SOCKET.into())
    }
}

/// The stage service when one answers (see [`Connect`]), else this process with what `local`
/// makes (called only then).
pub fn connect(to: &Connect, local: impl FnOnce() -> Result<Local>) -> Result<Box<dyn Tasks>> {
    if !to.in_process {
        let socket = to.socket();
        match Client::connect(&socket) {
            Ok(c) => return Ok(Box::new(with_token(c, to)?)),
            Err(e) if to.socket.is_some() => {
                return Err(not_running(&e, &socket, " (--no-daemon runs tasks here)"));
            }
            Err(_) => {}
        }
    }
    Ok(Box::new(local()?))
}

/// The stage service on `to`'s socket, which must answer: what admin operations go through.
pub fn service(to: &Connect) -> Result<Client> {
    let socket = to.socket();
    let c = Client::connect(&socket).map_err(|e| not_running(&e, &socket, ""))?;
    with_token(c, to)
}

fn with_token(mut c: Client, to: &Connect) -> Result<Client> {
    c.token = to.token_file.as_deref().map(read_token).transpose()?;
    Ok(c)
}

fn not_running(e: &Error, socket: &std::path::Path, hint: &str) -> Error {
    Error::Service(format!(
        "{e}: is `haar stage daemon --socket {}` running?{hint}",
        socket.display()
    ))
}

/// The admin token in a token file (its first line), for sending; unlike
/// [`daemon::read_token_file`] (the service's own), its modes are not checked.
pub fn read_token(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Usage(format!("admin token file {}: {e}", path.display())))?;
    Ok(daemon::token_of(&text))
}
