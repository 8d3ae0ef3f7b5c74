//! Tasks: one staging of an endpoint to another, planned into objects, run with progress and
//! ETA, recorded in the journal so that `status`, `wait` and `cancel` work from any process
//! and a task killed with SIGKILL is resumed ([`Stager::run`] on its id again): objects the
//! journal records as done whose destination still has the recorded length and checksum are
//! kept, everything else is redone.
//!
//! Owns task states and the plan. The bytes of a file copy are [`crate::copy`]'s; fields go
//! through `haar::FieldStore` and `haar::ingest`.
//!
//! Its parts: the records a task is written down as ([`TaskSpec`], [`TaskRecord`], their
//! states) in `record`; the [`Stager`] here (submit, status, wait, cancel, run, teardown over
//! the journal); one run of a task, its progress and its file commits, in `run`.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::copy;
use crate::dataspace::{Dataspace, Dataspaces, Endpoint, Object};
use crate::error::{Error, ErrorClass, Result};
use crate::eta::Eta;
use crate::journal::{self, Journal, TASK_MAGIC};

mod record;
mod run;

pub use record::{Direction, DoneObject, Mapping, State, TaskRecord, TaskSpec};
use run::TaskRun;

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

#[cfg(test)]
mod tests {
    use std::path::Path;

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
