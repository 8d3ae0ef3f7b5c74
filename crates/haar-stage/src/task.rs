//! Tasks: one staging of an endpoint to another, planned into objects, run with progress and
//! ETA, recorded in the journal so that `status`, `wait` and `cancel` work from any process
//! and a task killed with SIGKILL is resumed ([`Stager::run`] on its id again): objects the
//! journal records as done whose destination still has the recorded length and checksum are
//! kept, everything else is redone.
//!
//! Owns task states and the plan. The bytes of a file copy are [`crate::copy`]'s; fields go
//! through `haar::FieldStore` and `haar::ingest`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::copy::{self, Monitor, Progress};
use crate::dataspace::{Dataspace, Dataspaces, Endpoint, Object};
use crate::error::{Error, ErrorClass, Result};
use crate::eta::{Eta, Phase};
use crate::journal::{self, Journal, TASK_MAGIC};

/// Which way data goes, as the job sees it (NORNS's stage_in / stage_out); the mechanics are
/// the same, the direction says which destinations a job's teardown removes (stage-in ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Into the job's node-local tier.
    In,
    /// Out of it.
    Out,
    /// Neither (an administrator's copy).
    Copy,
}

/// How source objects map onto the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mapping {
    /// The destination is the copy: a file to a file, a directory to a directory, a request
    /// to one GRIB file.
    #[default]
    Same,
    /// The destination is a directory the source goes into, under its own name.
    Into,
}

impl std::str::FromStr for Mapping {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "same" => Ok(Mapping::Same),
            "into" => Ok(Mapping::Into),
            _ => Err(format!("unknown mapping {s:?}: use same or into")),
        }
    }
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Recorded, not started.
    Queued,
    /// A live process is running it.
    Running,
    /// Its runner died (killed, node rebooted): run it again to resume.
    Interrupted,
    /// Every object is at its destination, verified.
    Done,
    /// Stopped by an error (see `error`).
    Failed,
    /// Stopped by `cancel`.
    Cancelled,
}

impl State {
    /// Whether the task will not change any more by itself.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            State::Done | State::Failed | State::Cancelled | State::Interrupted
        )
    }
}

/// An object staged and verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoneObject {
    /// Its destination path (or the store dataspace's name for fields).
    pub dst: PathBuf,
    /// Its length.
    pub bytes: u64,
    /// CRC-32C of its bytes.
    pub crc32c: u32,
}

/// What to stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskSpec {
    /// The task's id; `None`: one is made up (`t` + time + pid).
    pub id: Option<String>,
    /// Which way.
    pub direction: Direction,
    /// Source endpoint.
    pub src: String,
    /// Destination endpoint.
    pub dst: String,
    /// How the source maps onto the destination.
    pub mapping: Mapping,
}

/// A task's journal record (design §13.2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The id.
    pub id: String,
    /// Which way.
    pub direction: Direction,
    /// Source endpoint as given.
    pub src: String,
    /// Destination endpoint as given.
    pub dst: String,
    /// Source dataspace.
    pub src_space: String,
    /// Destination dataspace.
    pub dst_space: String,
    /// Mapping.
    pub mapping: Mapping,
    /// State.
    pub state: State,
    /// The process running it (while running).
    pub pid: Option<u32>,
    /// That process's start time (clock ticks after boot, /proc/PID/stat field 22), so that a
    /// reused pid is not taken for the runner.
    pub pid_start: Option<u64>,
    /// Unix seconds it was recorded.
    pub created: f64,
    /// Unix seconds its last run started.
    pub started: Option<f64>,
    /// Unix seconds it ended.
    pub finished: Option<f64>,
    /// Runs so far (more than one: resumed).
    pub attempts: u32,
    /// Bytes to stage.
    pub bytes_total: u64,
    /// Bytes staged.
    pub bytes_done: u64,
    /// Objects to stage.
    pub objects_total: u64,
    /// Objects staged.
    pub objects_done: u64,
    /// Bytes per second of this run so far (or the pair's recorded rate before it measured).
    pub rate: f64,
    /// Seconds left at `rate`.
    pub eta_seconds: Option<f64>,
    /// Objects staged and verified (what a resumed run keeps).
    pub done: Vec<DoneObject>,
    /// Why it failed.
    pub error: Option<String>,
    /// What kind of failure: `missing` (the source is not there), `input` (a wrong endpoint,
    /// option or input file), `denied`, or `io` (storage, checksum, anything else).
    pub error_class: Option<ErrorClass>,
}

impl TaskRecord {
    /// `SRC->DST`, the key bandwidth is recorded under.
    pub fn pair(&self) -> String {
        format!("{}->{}", self.src_space, self.dst_space)
    }
}

/// Bytes of copies made durable together.
const BATCH_BYTES: u64 = 96 << 20;
/// Copies made durable together.
const BATCH_FILES: usize = 256;

/// Progress as reported to the caller (every 100 ms at most, and at the end).
pub type ProgressFn<'a> = dyn FnMut(&TaskRecord) + 'a;

/// The data mover: dataspaces plus a journal.
#[derive(Debug, Clone)]
pub struct Stager {
    /// The configured dataspaces.
    pub spaces: Dataspaces,
    /// The task journal.
    pub journal: Journal,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The start time of process `pid` in clock ticks after boot, if it exists.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing paren.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    // A zombie (killed, not yet reaped by its parent) runs nothing any more.
    if matches!(fields.next()?, "Z" | "X" | "x") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

impl Stager {
    /// Records a new task (state `queued`); run it with [`Stager::run`].
    pub fn submit(&self, spec: &TaskSpec) -> Result<TaskRecord> {
        let src = self.spaces.endpoint(&spec.src)?;
        let dst = self.spaces.endpoint(&spec.dst)?;
        let id = match &spec.id {
            Some(id) if crate::dataspace::valid_name(id) => id.clone(),
            Some(id) => {
                return Err(Error::Usage(format!(
                    "task id {id:?}: use letters, digits, '_', '-' and '.'"
                )));
            }
            None => format!(
                "t{}-{}",
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or(0),
                std::process::id()
            ),
        };
        let rec = TaskRecord {
            id: id.clone(),
            direction: spec.direction,
            src: spec.src.clone(),
            dst: spec.dst.clone(),
            src_space: src.space,
            dst_space: dst.space,
            mapping: spec.mapping,
            state: State::Queued,
            pid: None,
            pid_start: None,
            created: now(),
            started: None,
            finished: None,
            attempts: 0,
            bytes_total: 0,
            bytes_done: 0,
            objects_total: 0,
            objects_done: 0,
            rate: 0.0,
            eta_seconds: None,
            done: Vec::new(),
            error: None,
            error_class: None,
        };
        if spec.id.is_some()
            && let Ok(existing) = self.status(&id)
        {
            // The same task asked for again (a retried Slurm stage-in): the caller runs it,
            // which resumes it; a different one under a taken id is refused.
            if (
                existing.direction,
                &existing.src,
                &existing.dst,
                existing.mapping,
            ) == (rec.direction, &rec.src, &rec.dst, rec.mapping)
            {
                return Ok(existing);
            }
            return Err(Error::Usage(format!(
                "task {id} exists already in {} for {} -> {}: choose another --id",
                self.journal.dir().display(),
                existing.src,
                existing.dst
            )));
        }
        self.journal.create_task_dir(&id)?;
        self.save(&rec)?;
        Ok(rec)
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.journal.task_dir(id).join("task")
    }

    fn save(&self, rec: &TaskRecord) -> Result<()> {
        journal::write_record(&self.record_path(&rec.id), TASK_MAGIC, rec)
    }

    /// The task's record as the journal has it, with `running` turned into `interrupted` when
    /// its runner is gone.
    pub fn status(&self, id: &str) -> Result<TaskRecord> {
        let mut rec: TaskRecord =
            Journal::read(&self.record_path(id), TASK_MAGIC).map_err(|e| match e {
                Error::Missing(_) => Error::Missing(format!(
                    "no task {id} in the journal {}",
                    self.journal.dir().display()
                )),
                e => e,
            })?;
        if rec.state == State::Running {
            let alive = rec
                .pid
                .is_some_and(|p| process_start(p).is_some() && process_start(p) == rec.pid_start);
            if !alive {
                rec.state = State::Interrupted;
            }
        }
        Ok(rec)
    }

    /// Every task in the journal.
    pub fn list(&self) -> Result<Vec<TaskRecord>> {
        self.journal
            .task_ids()?
            .iter()
            .map(|id| self.status(id))
            .collect()
    }

    /// Waits until the task is final (or `timeout` passes: then its current record).
    pub fn wait(&self, id: &str, timeout: Option<Duration>) -> Result<TaskRecord> {
        let start = Instant::now();
        loop {
            let rec = self.status(id)?;
            if rec.state.is_final() || rec.state == State::Queued && rec.attempts > 0 {
                return Ok(rec);
            }
            if timeout.is_some_and(|t| start.elapsed() >= t) {
                return Ok(rec);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asks the task to stop: its runner sees the request between chunks, removes its
    /// temporary files and records `cancelled`; a task with no live runner is marked at once.
    /// Returns the record once final (at most `timeout`).
    pub fn cancel(&self, id: &str, timeout: Duration) -> Result<TaskRecord> {
        let rec = self.status(id)?;
        if matches!(rec.state, State::Done | State::Failed | State::Cancelled) {
            return Ok(rec);
        }
        let marker = self.journal.task_dir(id).join("cancel");
        std::fs::write(&marker, b"").map_err(|e| Error::io("create", &marker, e))?;
        if rec.state != State::Running {
            let mut rec = rec;
            self.remove_temps(&rec)?;
            rec.state = State::Cancelled;
            rec.finished = Some(now());
            self.save(&rec)?;
            return Ok(rec);
        }
        self.wait(id, Some(timeout))
    }

    /// Marks an `interrupted` or `failed` task `queued` again, for a runner about to resume
    /// it (so that nobody waiting takes the old runner's state for the outcome).
    pub fn requeue(&self, id: &str) -> Result<TaskRecord> {
        let mut rec = self.status(id)?;
        if matches!(rec.state, State::Interrupted | State::Failed) {
            rec.state = State::Queued;
            rec.pid = None;
            rec.pid_start = None;
            self.save(&rec)?;
        }
        Ok(rec)
    }

    /// Records `failed` with `why` for a task still `queued`: its runner ended without
    /// starting it (nothing else would ever finish it).
    pub fn fail_unstarted(&self, id: &str, why: &str) -> Result<()> {
        let mut rec = self.status(id)?;
        if rec.state == State::Queued {
            rec.state = State::Failed;
            rec.finished = Some(now());
            rec.error = Some(why.to_string());
            rec.error_class = Some(ErrorClass::Io);
            self.save(&rec)?;
        }
        Ok(())
    }

    fn cancel_requested(&self, id: &str) -> bool {
        self.journal.task_dir(id).join("cancel").exists()
    }

    /// Runs (or resumes) task `id` in this process until it is final; `progress` hears of it
    /// every 100 ms at most. A task already done is returned as it is.
    pub fn run(&self, id: &str, progress: &mut ProgressFn<'_>) -> Result<TaskRecord> {
        let mut rec = self.status(id)?;
        match rec.state {
            State::Done | State::Cancelled => return Ok(rec),
            State::Running => {
                return Err(Error::Usage(format!(
                    "task {id} is running in process {}",
                    rec.pid.unwrap_or(0)
                )));
            }
            _ => {}
        }
        if self.cancel_requested(id) {
            rec.state = State::Cancelled;
            self.save(&rec)?;
            return Ok(rec);
        }
        let pid = std::process::id();
        rec.state = State::Running;
        rec.pid = Some(pid);
        rec.pid_start = process_start(pid);
        rec.started = Some(now());
        rec.finished = None;
        rec.error = None;
        rec.error_class = None;
        rec.attempts += 1;
        rec.bytes_done = 0;
        rec.objects_done = 0;
        self.save(&rec)?;
        let prior = self
            .journal
            .rates()
            .pairs
            .get(&rec.pair())
            .and_then(|p| p.mean());
        let mut run = TaskRun {
            stager: self,
            rec,
            start: Instant::now(),
            last_report: None,
            last_save: Instant::now(),
            last_cancel_check: Instant::now(),
            cancelled: false,
            progress,
            save_error: None,
            eta: Eta::new(0, prior),
        };
        let outcome = run.execute();
        let mut rec = run.rec;
        rec.finished = Some(now());
        rec.pid = None;
        rec.pid_start = None;
        match outcome {
            Ok(()) => {
                rec.state = State::Done;
                rec.eta_seconds = Some(0.0);
                let secs = run.start.elapsed().as_secs_f64();
                rec.rate = if secs > 0.0 {
                    rec.bytes_done as f64 / secs
                } else {
                    0.0
                };
                self.journal
                    .record_rate(&rec.pair(), rec.bytes_done, secs)?;
            }
            Err(Error::Cancelled(_)) => {
                rec.state = State::Cancelled;
                self.remove_temps(&rec)?;
            }
            Err(e) => {
                rec.state = State::Failed;
                rec.error_class = Some(e.class());
                rec.error = Some(e.to_string());
            }
        }
        self.save(&rec)?;
        (run.progress)(&rec);
        Ok(rec)
    }

    /// Removes the temporary files the task may have left in its destination.
    fn remove_temps(&self, rec: &TaskRecord) -> Result<()> {
        let Ok(Endpoint {
            object: Object::Path(dst),
            ..
        }) = self.spaces.endpoint(&rec.dst)
        else {
            return Ok(());
        };
        let mut dirs = vec![dst.clone()];
        if let Some(p) = dst.parent() {
            dirs.push(p.to_path_buf());
        }
        while let Some(d) = dirs.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let ft = e.file_type().ok();
                if copy::is_temp_of(&name, &rec.id) {
                    let _ = std::fs::remove_file(e.path());
                } else if ft.is_some_and(|t| t.is_dir()) && e.path().starts_with(&dst) {
                    dirs.push(e.path());
                }
            }
        }
        Ok(())
    }

    /// What a job's teardown removes: the destinations of this journal's `in` tasks and the
    /// sources of its `out` tasks, where they lie in a `posix` (node-local) dataspace; data
    /// in shared dataspaces, stores and absolute paths is never removed.
    pub fn teardown_paths(&self) -> Result<Vec<PathBuf>> {
        self.teardown_paths_of("")
    }

    /// [`Stager::teardown_paths`] of the tasks whose id starts with `prefix` (a job's tasks
    /// in a journal it shares with others: the stage service's per-user journal).
    pub fn teardown_paths_of(&self, prefix: &str) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for rec in self.list()? {
            if !rec.id.starts_with(prefix) {
                continue;
            }
            let (endpoint, named_by_src) = match rec.direction {
                Direction::In => (&rec.dst, true),
                Direction::Out => (&rec.src, false),
                Direction::Copy => continue,
            };
            let Ok(e) = self.spaces.endpoint(endpoint) else {
                continue;
            };
            if !matches!(
                self.spaces.spaces.get(&e.space),
                Some(Dataspace::Posix { .. })
            ) {
                continue;
            }
            let Object::Path(p) = e.object else { continue };
            out.push(match (rec.mapping, named_by_src) {
                (Mapping::Into, true) => match self.spaces.endpoint(&rec.src)?.object {
                    Object::Path(s) => p.join(s.file_name().unwrap_or_default()),
                    Object::Fields(_) => p.join("fields.grib"),
                },
                _ => p,
            });
        }
        Ok(out)
    }

    /// A job's teardown: removes each of [`Stager::teardown_paths`] (a file or a tree) that
    /// no `persist store` keeps, and says what it removed and what it kept.
    pub fn teardown(&self) -> Result<Teardown> {
        self.teardown_of("")
    }

    /// [`Stager::teardown`] of the tasks whose id starts with `prefix`.
    pub fn teardown_of(&self, prefix: &str) -> Result<Teardown> {
        let persisted = crate::persist::list(&self.spaces)?;
        let mut done = Teardown::default();
        for p in self.teardown_paths_of(prefix)? {
            if crate::persist::is_persisted(&persisted, &p) {
                done.kept_persisted.push(p);
                continue;
            }
            let r = match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p),
                Ok(_) => std::fs::remove_file(&p),
                Err(_) => continue,
            };
            r.map_err(|e| Error::io("remove", &p, e))?;
            done.removed.push(p);
        }
        Ok(done)
    }
}

/// What [`Stager::teardown`] did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Teardown {
    /// Paths removed.
    pub removed: Vec<PathBuf>,
    /// Paths left in place because they are persisted.
    pub kept_persisted: Vec<PathBuf>,
}

/// What the file committer hands back.
enum Committed {
    /// A batch of this many bytes was made durable (syncfs).
    Durable(u64),
    /// An object was fdatasynced, found equal to its source and renamed.
    Renamed(DoneObject),
}

/// One run of a task.
pub(crate) struct TaskRun<'s, 'p> {
    stager: &'s Stager,
    rec: TaskRecord,
    start: Instant,
    last_report: Option<Instant>,
    last_save: Instant,
    last_cancel_check: Instant,
    cancelled: bool,
    progress: &'p mut ProgressFn<'p>,
    save_error: Option<Error>,
    /// Every phase of every byte of this run (objects kept from an earlier run excluded),
    /// for the rate and ETA.
    eta: Eta,
}

impl Monitor for TaskRun<'_, '_> {
    /// Bytes copied to a temporary name and read back (crate::copy does both piece by
    /// piece): two of their three phases; a byte is done, in `bytes_done`, once its object
    /// is durable and renamed.
    fn advance(&mut self, bytes: u64) {
        let t = self.start.elapsed().as_secs_f64();
        self.eta.advance(Phase::Copied, bytes, t);
        self.eta.advance(Phase::Verified, bytes, t);
        self.tick(false);
    }
    fn cancelled(&mut self) -> bool {
        if !self.cancelled && self.last_cancel_check.elapsed() >= Duration::from_millis(50) {
            self.last_cancel_check = Instant::now();
            self.cancelled = self.stager.cancel_requested(&self.rec.id);
        }
        self.cancelled
    }
}

impl TaskRun<'_, '_> {
    /// Updates rate and ETA; reports every 100 ms and saves the record every 250 ms.
    fn tick(&mut self, force: bool) {
        // Every phase of every byte counts (crate::eta): the copy, the syncfs or fdatasync,
        // the read-back and the rename.
        if let Some((rate, left)) = self.eta.estimate(self.start.elapsed().as_secs_f64()) {
            self.rec.rate = rate;
            self.rec.eta_seconds = Some(left);
        }
        if force
            || self
                .last_report
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(100))
        {
            self.last_report = Some(Instant::now());
            (self.progress)(&self.rec);
        }
        if force || self.last_save.elapsed() >= Duration::from_millis(250) {
            self.last_save = Instant::now();
            if let Err(e) = self.stager.save(&self.rec) {
                self.save_error.get_or_insert(e);
            }
        }
    }

    fn execute(&mut self) -> Result<()> {
        let src = self.stager.spaces.endpoint(&self.rec.src)?;
        let dst = self.stager.spaces.endpoint(&self.rec.dst)?;
        let stager = self.stager;
        let spaces = &stager.spaces;
        match (&src.object, &dst.object) {
            (Object::Path(s), Object::Path(d)) => {
                let d = match self.rec.mapping {
                    Mapping::Same => d.clone(),
                    Mapping::Into => d.join(s.file_name().unwrap_or_default()),
                };
                self.copy_paths(s, &d)
            }
            (Object::Fields(req), Object::Path(d)) => {
                let d = match self.rec.mapping {
                    Mapping::Same => d.clone(),
                    Mapping::Into => d.join("fields.grib"),
                };
                crate::fields::store_to_file(self, spaces, &src.space, req, &d)
            }
            (Object::Path(s), Object::Fields(_)) => {
                crate::fields::file_to_store(self, spaces, s, &dst.space)
            }
            (Object::Fields(req), Object::Fields(_)) => {
                crate::fields::store_to_store(self, spaces, &src.space, req, &dst.space)
            }
        }?;
        if let Some(e) = self.save_error.take() {
            return Err(e);
        }
        Ok(())
    }

    /// Plans and copies a file or a directory tree.
    fn copy_paths(&mut self, src: &Path, dst: &Path) -> Result<()> {
        let meta = std::fs::symlink_metadata(src).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Missing(format!(
                "source {} ({}) does not exist",
                self.rec.src,
                src.display()
            )),
            _ => Error::io("stat", src, e),
        })?;
        // The plan: directories to make, then files to copy, all known up front for the ETA.
        let mut dirs = Vec::new();
        let mut files = Vec::new();
        if meta.is_dir() {
            walk(src, dst, &mut dirs, &mut files)?;
        } else if meta.is_file() {
            files.push((src.to_path_buf(), dst.to_path_buf(), meta.len()));
        } else {
            return Err(Error::Usage(format!(
                "{} is neither a file nor a directory",
                src.display()
            )));
        }
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
        }
        // Each directory (of this user's: one that exists and is another's, a dataspace's
        // root say, is left as it is) gets room for its owner to fill it; its source's mode is
        // set once every file below it is in place (a 0500 source stays 0500, a 0700 one
        // 0700, whatever the umask).
        let mut own_dirs = Vec::new();
        for (d, mode) in &dirs {
            std::fs::create_dir_all(d).map_err(|e| Error::io("create", d, e))?;
            let m = std::fs::symlink_metadata(d).map_err(|e| Error::io("stat", d, e))?;
            if m.uid() == crate::identity::euid() {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| Error::io("chmod", d, e))?;
                own_dirs.push((d.clone(), *mode));
            }
        }
        self.rec.objects_total = files.len() as u64;
        self.rec.bytes_total = files.iter().map(|f| f.2).sum();
        self.eta.set_total(self.rec.bytes_total);
        let kept = std::mem::take(&mut self.rec.done);
        self.tick(true);
        let mut touched_dirs: Vec<PathBuf> = Vec::new();
        // Copies (each read back as it was written) are committed in batches (design
        // §13.3), on a second thread while this one copies the next batch: one syncfs makes
        // a batch durable (one device cache flush instead of one per file: an fdatasync per
        // file, even of a file syncfs left clean, issues its own flush on ext4), then each
        // file is checked against its source and renamed. At most one batch waits while
        // another is committed.
        let id = self.rec.id.clone();
        // One write-behind window for all the task's files (design §13.3): on a disk file
        // system the copy runs at the disk's rate from the start, so the rate the ETA sees
        // at 10% is the steady one, and each batch's syncfs finds little left to write.
        let mut wb = crate::write_behind::WriteBehind::for_destination(
            dst.parent().filter(|_| !meta.is_dir()).unwrap_or(dst),
        );
        std::thread::scope(|scope| -> Result<()> {
            let (batch_tx, batch_rx) = std::sync::mpsc::sync_channel::<Vec<copy::Pending>>(1);
            let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<Committed>>();
            scope.spawn(move || {
                for batch in batch_rx {
                    // On the batch's first copy, opened before any of them was written, so
                    // that a writeback error of any is reported (copy::Pending::sync_fs).
                    if let Some(first) = batch.first() {
                        let r = first
                            .sync_fs()
                            .map(|()| Committed::Durable(batch.iter().map(|p| p.len()).sum()));
                        let failed = r.is_err();
                        if done_tx.send(r).is_err() || failed {
                            return;
                        }
                    }
                    for p in batch {
                        let dst = p.dst().to_path_buf();
                        let r = p.commit_synced().map(|(bytes, crc32c)| {
                            Committed::Renamed(DoneObject { dst, bytes, crc32c })
                        });
                        let failed = r.is_err();
                        // The rest of the batch is dropped with its temporary files.
                        if done_tx.send(r).is_err() || failed {
                            return;
                        }
                    }
                }
            });
            let mut batch = Vec::new();
            let mut batch_bytes = 0u64;
            for (s, d, len) in files {
                while let Ok(r) = done_rx.try_recv() {
                    self.record_done(r?, &mut touched_dirs);
                }
                // Resuming: an object verified by an earlier run, still whole, is kept.
                if let Some(k) = kept.iter().find(|k| k.dst == d && k.bytes == len)
                    && copy::file_crc(&d).ok() == Some((k.bytes, k.crc32c))
                {
                    self.rec.done.push(k.clone());
                    self.rec.bytes_done += len;
                    self.rec.objects_done += 1;
                    self.eta.skip(len);
                    self.tick(false);
                    continue;
                }
                let p = copy::copy_to_temp(&s, &d, &id, self, &mut wb)?;
                batch_bytes += p.len();
                batch.push(p);
                if batch_bytes >= BATCH_BYTES || batch.len() >= BATCH_FILES {
                    batch_bytes = 0;
                    // A committer that stopped has sent its error, read below.
                    let _ = batch_tx.send(std::mem::take(&mut batch));
                }
            }
            if !batch.is_empty() {
                let _ = batch_tx.send(batch);
            }
            drop(batch_tx);
            for r in done_rx {
                self.record_done(r?, &mut touched_dirs);
            }
            Ok(())
        })?;
        for d in touched_dirs {
            copy::sync_dir(&d)?;
        }
        // Last, once nothing more is written into them (a source's 0500 would refuse it).
        for (d, mode) in own_dirs.iter().rev() {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(*mode))
                .map_err(|e| Error::io("chmod", d, e))?;
        }
        self.tick(true);
        Ok(())
    }

    /// Records what the committer did: a batch made durable, or an object checked and
    /// renamed (its read-back was counted as it was copied).
    fn record_done(&mut self, done: Committed, touched_dirs: &mut Vec<PathBuf>) {
        let done = match done {
            Committed::Durable(bytes) => return self.phase(Phase::Durable, bytes),
            Committed::Renamed(d) => d,
        };
        self.rec.bytes_done += done.bytes;
        if let Some(parent) = done.dst.parent()
            && !touched_dirs.iter().any(|t| t == parent)
        {
            touched_dirs.push(parent.to_path_buf());
        }
        self.rec.done.push(done);
        self.rec.objects_done += 1;
        self.tick(false);
    }
}

impl Progress for TaskRun<'_, '_> {
    /// Sets the totals of a single-object task (fields) and reports.
    fn plan_one(&mut self, bytes: u64) {
        self.rec.objects_total = 1;
        self.rec.bytes_total = bytes;
        self.eta.set_total(bytes);
        self.rec.done.clear();
        self.tick(true);
    }

    /// Records the single object done.
    fn finish_one(&mut self, dst: PathBuf, bytes: u64, crc: u32) {
        self.rec.done.push(DoneObject {
            dst,
            bytes,
            crc32c: crc,
        });
        self.rec.objects_done = 1;
        self.tick(true);
    }

    /// Sets the bytes staged so far (ingestion reports totals, not deltas; the store checks
    /// and persists as it archives, so they went through every phase).
    fn set_done(&mut self, bytes: u64) {
        let more = bytes.saturating_sub(self.rec.bytes_done);
        self.rec.bytes_done = bytes;
        self.eta
            .advance_all(more, self.start.elapsed().as_secs_f64());
        self.tick(false);
    }

    /// `bytes` more went through `phase` (the bytes of a single object written, made durable
    /// or read back); a byte is done once read back.
    fn phase(&mut self, phase: Phase, bytes: u64) {
        if phase == Phase::Verified {
            self.rec.bytes_done += bytes;
        }
        self.eta
            .advance(phase, bytes, self.start.elapsed().as_secs_f64());
        self.tick(false);
    }

    /// `bytes` more were staged (fields: each is done when the store has it).
    fn advance_by(&mut self, bytes: u64) {
        self.rec.bytes_done += bytes;
        self.eta
            .advance_all(bytes, self.start.elapsed().as_secs_f64());
        self.tick(false);
    }

    /// The task's id.
    fn id(&self) -> &str {
        &self.rec.id
    }
}

/// Lists a directory tree: directories to create (with their source's permission bits) and
/// files to copy (symbolic links and special files are refused: a mover that followed them
/// could leave the dataspace).
fn walk(
    src: &Path,
    dst: &Path,
    dirs: &mut Vec<(PathBuf, u32)>,
    files: &mut Vec<(PathBuf, PathBuf, u64)>,
) -> Result<()> {
    let mode = std::fs::symlink_metadata(src)
        .map_err(|e| Error::io("stat", src, e))?
        .permissions()
        .mode()
        & 0o1777;
    dirs.push((dst.to_path_buf(), mode));
    let mut entries: Vec<_> = std::fs::read_dir(src)
        .map_err(|e| Error::io("list", src, e))?
        .collect::<std::io::Result<_>>()
        .map_err(|e| Error::io("list", src, e))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let t = e
            .file_type()
            .map_err(|er| Error::io("stat", &e.path(), er))?;
        let (s, d) = (e.path(), dst.join(e.file_name()));
        if t.is_dir() {
            walk(&s, &d, dirs, files)?;
        } else if t.is_file() {
            let len = e.metadata().map_err(|er| Error::io("stat", &s, er))?.len();
            files.push((s, d, len));
        } else {
            return Err(Error::Usage(format!(
                "{} is a symbolic link or special file: haar stage copies files and directories",
                s.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stager(dir: &Path) -> Stager {
        let text = format!(
            "dataspaces:\n  a: {{kind: shared, path: {0}/a}}\n  b: {{kind: posix, path: {0}/b}}\n",
            dir.display()
        );
        Stager {
            spaces: Dataspaces::load(haar::ConfigSource::Yaml {
                text,
                origin: "t".into(),
            })
            .unwrap(),
            journal: Journal::open(&dir.join("j")).unwrap(),
        }
    }

    #[test]
    fn the_same_task_asked_again_resumes_and_another_under_its_id_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("a")).unwrap();
        std::fs::write(d.path().join("a/x"), b"abc").unwrap();
        let st = stager(d.path());
        let spec = TaskSpec {
            id: Some("in-1".into()),
            direction: Direction::In,
            src: "a:x".into(),
            dst: "b:x".into(),
            mapping: Mapping::Same,
        };
        st.submit(&spec).unwrap();
        assert_eq!(st.run("in-1", &mut |_| {}).unwrap().state, State::Done);
        // Asked again (a retried stage-in): the done task, not an error.
        assert_eq!(st.submit(&spec).unwrap().state, State::Done);
        let other = TaskSpec {
            dst: "b:y".into(),
            ..spec
        };
        let e = st.submit(&other).unwrap_err().to_string();
        assert!(e.contains("exists already") && e.contains("b:x"), "{e}");
        // Teardown names the node-local destination only.
        assert_eq!(st.teardown_paths().unwrap(), vec![d.path().join("b/x")]);
    }
}
