//! One run of a task: the plan, the copies with their progress and ETA, the batched durable
//! commits of files, and the record kept up to date in the journal.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::copy::{self, Monitor, Progress};
use crate::dataspace::Object;
use crate::error::{Error, Result};
use crate::eta::{Eta, Phase};

use super::{DoneObject, Mapping, ProgressFn, Stager, TaskRecord};

/// Bytes of copies made durable together.
const BATCH_BYTES: u64 = 96 << 20;
/// Copies made durable together.
const BATCH_FILES: usize = 256;

/// What the file committer hands back.
enum Committed {
    /// A batch of this many bytes was made durable (syncfs).
    Durable(u64),
    /// An object was fdatasynced, found equal to its source and renamed.
    Renamed(DoneObject),
}

/// One run of a task.
pub(super) struct TaskRun<'s, 'p> {
    pub(super) stager: &'s Stager,
    pub(super) rec: TaskRecord,
    pub(super) start: Instant,
    pub(super) last_report: Option<Instant>,
    pub(super) last_save: Instant,
    pub(super) last_cancel_check: Instant,
    pub(super) cancelled: bool,
    pub(super) progress: &'p mut ProgressFn<'p>,
    pub(super) save_error: Option<Error>,
    /// Every phase of every byte of this run (objects kept from an earlier run excluded),
    /// for the rate and ETA.
    pub(super) eta: Eta,
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

    pub(super) fn execute(&mut self) -> Result<()> {
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
