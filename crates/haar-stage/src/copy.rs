//! The copy protocol for one file (design §13.3): copy the source to a temporary name beside
//! the destination chunk by chunk, each chunk checksummed from the source just before it is
//! written and read back from the destination just after (both passes over bytes still in
//! the CPU's caches: the data crosses memory once each way, as `cp`'s does), then fdatasync,
//! check that the source did not change meanwhile, compare the checksums and rename into
//! place. On a disk file system the writeback follows the copy step by step
//! ([`crate::write_behind`]), so dirty pages never pile up. A process killed at any point leaves either the old destination or the new one
//! whole, plus at most a temporary file whose name says which task left it ([`temp_name`]).
//!
//! Owns only bytes of files: which files, and the journal, are [`crate::task`]'s.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result, joined};
use crate::eta::Phase;
use crate::write_behind::WriteBehind;

/// Bytes read and written at a time.
pub const CHUNK: usize = 4 << 20;

/// What a copy hears and asks between chunks.
pub trait Monitor {
    /// `bytes` more were copied.
    fn advance(&mut self, bytes: u64);
    /// Whether to stop now (the task was cancelled).
    fn cancelled(&mut self) -> bool;
}

/// What a routine staging fields hears and asks ([`crate::fields`]): a [`Monitor`] that also
/// knows the task's id and takes its single object's totals, phases and end. The task being
/// run implements it; the routines see nothing more of it.
pub(crate) trait Progress: Monitor {
    /// The task's id (temporary names, the error of a cancelled task).
    fn id(&self) -> &str;
    /// Sets the totals of a single-object task and reports.
    fn plan_one(&mut self, bytes: u64);
    /// Records the single object done.
    fn finish_one(&mut self, dst: PathBuf, bytes: u64, crc: u32);
    /// Sets the bytes staged so far (ingestion reports totals, not deltas; the store checks
    /// and persists as it archives, so they went through every phase).
    fn set_done(&mut self, bytes: u64);
    /// `bytes` more went through `phase` (the bytes of a single object written, made durable
    /// or read back); a byte is done once read back.
    fn phase(&mut self, phase: Phase, bytes: u64);
    /// `bytes` more were staged (fields: each is done when the store has it).
    fn advance_by(&mut self, bytes: u64);
}

/// Writes `bytes` to `w`, mapping the error onto `path`.
pub(crate) fn write_to(w: &mut impl Write, bytes: &[u8], path: &Path) -> Result<()> {
    w.write_all(bytes).map_err(|e| Error::io("write", path, e))
}

/// The temporary name a task writes `dst` under: `.NAME.haar-stage.TASK` in the same
/// directory (so the rename is atomic), hidden, and recognisable by the task that owns it.
pub fn temp_name(dst: &Path, task: &str) -> PathBuf {
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dst.with_file_name(format!(".{name}.haar-stage.{task}"))
}

/// Whether `name` is a temporary file of `task`.
pub fn is_temp_of(name: &str, task: &str) -> bool {
    name.starts_with('.') && name.ends_with(&format!(".haar-stage.{task}"))
}

/// The CRC-32C of a whole file, read in [`CHUNK`]s.
pub fn file_crc(path: &Path) -> Result<(u64, u32)> {
    let mut f = File::open(path).map_err(|e| Error::io("open", path, e))?;
    let mut buf = vec![0u8; CHUNK];
    let (mut len, mut crc) = (0u64, 0u32);
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io("read", path, e))?;
        if n == 0 {
            return Ok((len, crc));
        }
        crc = haar::crc32c_append(crc, &buf[..n]);
        len += n as u64;
    }
}

/// Copies the regular file `src` to `dst` by the protocol above; returns its length and
/// CRC-32C. `task` names the temporary file.
pub fn copy_file(src: &Path, dst: &Path, task: &str, mon: &mut dyn Monitor) -> Result<(u64, u32)> {
    let mut wb = WriteBehind::for_destination(dst.parent().unwrap_or(Path::new(".")));
    copy_to_temp(src, dst, task, mon, &mut wb)?.commit()
}

/// A file copied to its temporary name, its writeback started, not yet durable, verified or
/// renamed: [`Pending::commit`] finishes it, [`Pending::abandon`] removes it. Several pending
/// copies let the disk write one file while the next is read (design §13.3).
#[derive(Debug)]
pub struct Pending {
    src: PathBuf,
    tmp: PathBuf,
    dst: PathBuf,
    file: File,
    before: std::fs::Metadata,
    len: u64,
    /// CRC-32C of the source's bytes.
    crc: u32,
    /// Length and CRC-32C of the temporary file's bytes, read back after each chunk.
    back: (u64, u32),
    committed: bool,
}

/// A pending copy dropped before its commit (an error elsewhere in its batch, a cancelled
/// task) takes its temporary file with it.
impl Drop for Pending {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

impl Pending {
    /// Bytes copied.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The destination.
    pub fn dst(&self) -> &Path {
        &self.dst
    }

    /// fdatasync, check the source did not change, compare the CRC-32C the copy was read
    /// back with to the source's, rename into place. On error the temporary file is
    /// removed.
    pub fn commit(mut self) -> Result<(u64, u32)> {
        let r = self.finish(true);
        self.committed = r.is_ok();
        r
    }

    /// [`Pending::commit`] of a copy a [`Pending::sync_fs`] that returned after it was
    /// written has made durable already: no fdatasync (on ext4 each one issues its own
    /// device cache flush even when nothing is dirty).
    pub fn commit_synced(mut self) -> Result<(u64, u32)> {
        let r = self.finish(false);
        self.committed = r.is_ok();
        r
    }

    fn finish(&self, fsync: bool) -> Result<(u64, u32)> {
        let (len, crc) = (self.len, self.crc);
        if fsync {
            self.file
                .sync_data()
                .map_err(|e| Error::io("fsync", &self.tmp, e))?;
        }
        let after = std::fs::metadata(&self.src).map_err(|e| Error::io("stat", &self.src, e))?;
        if after.len() != len
            || after.mtime() != self.before.mtime()
            || after.mtime_nsec() != self.before.mtime_nsec()
        {
            return Err(Error::Checksum {
                path: self.src.clone(),
                detail: "the source changed while it was being staged; stage it again".into(),
            });
        }
        let (back_len, back_crc) = self.back;
        if (back_len, back_crc) != (len, crc) {
            return Err(Error::Checksum {
                path: self.tmp.clone(),
                detail: format!(
                    "read back {back_len} bytes with CRC-32C {back_crc:08x}, wrote {len} with {crc:08x}"
                ),
            });
        }
        std::fs::rename(&self.tmp, &self.dst).map_err(|e| Error::io("rename", &self.dst, e))?;
        Ok((len, crc))
    }

    /// Makes every file of the file system holding the copy durable, data and metadata
    /// (syncfs: writeback, journal commit, device cache flush). It reports any writeback
    /// error of that file system since this copy's file was opened (Linux 5.8 and later), so
    /// it is called on the first copy of a batch: an error writing any of them is seen.
    pub fn sync_fs(&self) -> Result<()> {
        // SAFETY: a file descriptor we own.
        if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&self.file)) } != 0 {
            return Err(Error::io(
                "syncfs",
                &self.tmp,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Removes the temporary file (as dropping it does).
    pub fn abandon(self) {}
}

/// Copies `src` to the temporary name of `dst`, checksumming each chunk of the source before
/// it is written and reading it back from the destination after, its writeback started and
/// waited for step by step through `wb` (a task passes the same one for all its files: the
/// window spans files) or, with `wb` off, started at the end without waiting for it.
pub fn copy_to_temp(
    src: &Path,
    dst: &Path,
    task: &str,
    mon: &mut dyn Monitor,
    wb: &mut WriteBehind,
) -> Result<Pending> {
    let mut input = File::open(src).map_err(|e| Error::io("open", src, e))?;
    let before = input.metadata().map_err(|e| Error::io("stat", src, e))?;
    let tmp = temp_name(dst, task);
    // A leftover of an earlier attempt of this task is ours to replace.
    let _ = std::fs::remove_file(&tmp);
    let mut out = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    // The source's permission bits exactly, whatever the umask (the descriptor stays
    // writable: it was opened before).
    if let Err(e) = out.set_permissions(std::fs::Permissions::from_mode(
        before.permissions().mode() & 0o777,
    )) {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io("chmod", &tmp, e));
    }
    let result = (|| {
        // A source of at least a chunk is mapped (under the SIGBUS guard, so a truncation
        // meanwhile is noticed, not fatal) and written from the mapping, one copy in all as
        // `cp` makes; a smaller one is read through a buffer.
        let mapped = (before.len() >= CHUNK as u64)
            .then(|| input.try_clone().ok())
            .flatten()
            .and_then(|f| haar::ingest::GuardedMap::new(f, &before));
        wb.begin(&out, &tmp)?;
        let disk = wb.enabled();
        let mut copier = Copier::new(&mut out, &tmp, task, wb);
        match &mapped {
            Some(map) => {
                // To a memory file system the checks run on a second thread beside the
                // write; to a disk, where the write-behind window paces the copy, on the
                // writer's (measured, 4 GiB to ext4: 1.8-1.9 s on one thread against 2.5-2.6 s
                // on two). A truncated source fails the write itself (EFAULT: the kernel's
                // copy out of the mapping faults past the end): the change is the error to
                // give.
                let copied = if disk {
                    map.chunks(CHUNK).try_for_each(|c| copier.chunk(c, mon))
                } else {
                    copier.mapped(map, mon)
                };
                if map.changed() {
                    return Err(Error::Checksum {
                        path: src.into(),
                        detail: "the source changed while it was being staged; stage it again"
                            .into(),
                    });
                }
                copied?;
            }
            None => {
                let mut buf = take_buffer();
                let r: Result<()> = (|| loop {
                    let n =
                        read_full(&mut input, &mut buf).map_err(|e| Error::io("read", src, e))?;
                    if n == 0 {
                        return Ok(());
                    }
                    copier.chunk(&buf[..n], mon)?;
                })();
                give_buffer(buf);
                r?;
            }
        }
        let done = copier.done();
        if wb.enabled() {
            wb.end(done.0)?;
        } else {
            // SAFETY: a file descriptor we own; SYNC_FILE_RANGE_WRITE only starts writeback.
            unsafe {
                libc::sync_file_range(
                    std::os::fd::AsRawFd::as_raw_fd(&out),
                    0,
                    0,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
        }
        Ok(done)
    })();
    match result {
        Ok((len, crc, back)) => Ok(Pending {
            src: src.into(),
            tmp,
            dst: dst.into(),
            file: out,
            before,
            len,
            crc,
            back,
            committed: false,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Bytes checksummed, written and read back at a time: small enough that a piece is still
/// in the core's L2 cache when it is written and when it is read back.
const PIECE: usize = 512 << 10;

/// Pieces the writer of a mapped source may run ahead of the thread checking them (8 MiB).
const AHEAD: usize = 16;

/// The copy loop: for each piece, CRC-32C of the source bytes (which brings them into the
/// cache the write then copies from), write, read the piece back from the destination
/// (`pread`, from the page cache the write just filled) and checksum what was read; after
/// each chunk, the write-behind window moves on.
struct Copier<'a> {
    out: &'a mut File,
    tmp: &'a Path,
    task: &'a str,
    wb: &'a mut WriteBehind,
    len: u64,
    crc: u32,
    back_crc: u32,
    back_len: u64,
    buf: Vec<u8>,
}

impl<'a> Copier<'a> {
    fn new(out: &'a mut File, tmp: &'a Path, task: &'a str, wb: &'a mut WriteBehind) -> Self {
        Copier {
            out,
            tmp,
            task,
            wb,
            len: 0,
            crc: 0,
            back_crc: 0,
            back_len: 0,
            buf: take_buffer(),
        }
    }

    /// Copies `chunk` (at most [`CHUNK`] bytes) piece by piece; hears the monitor once.
    fn chunk(&mut self, chunk: &[u8], mon: &mut dyn Monitor) -> Result<()> {
        use std::os::unix::fs::FileExt;
        if mon.cancelled() {
            return Err(Error::Cancelled(self.task.into()));
        }
        for piece in chunk.chunks(PIECE) {
            self.crc = haar::crc32c_append(self.crc, piece);
            self.out
                .write_all(piece)
                .map_err(|e| Error::io("write", self.tmp, e))?;
            let back = &mut self.buf[..piece.len()];
            let mut got = 0;
            while got < back.len() {
                match self.out.read_at(&mut back[got..], self.len + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::io("read back", self.tmp, e)),
                }
            }
            self.back_crc = haar::crc32c_append(self.back_crc, &back[..got]);
            self.back_len += got as u64;
            self.len += piece.len() as u64;
        }
        // The progress is counted once the window has moved: with write-behind on, at the
        // rate the disk takes the bytes, not the rate the page cache does.
        self.wb.written(self.len)?;
        mon.advance(chunk.len() as u64);
        Ok(())
    }

    /// Copies the mapped source `src` whole: written here chunk by chunk, while a second
    /// thread checksums each [`PIECE`] of the source and reads it back from the destination
    /// (`pread`) and checksums that, at most [`AHEAD`] pieces behind the writer. The two passes
    /// the copy adds to `cp`'s then run beside the write instead of after it (one thread did
    /// all three until issue 15's fifth round: 0.72–0.85 of `cp` to tmpfs). Progress is
    /// reported as the writer goes; the checker trails it by at most [`AHEAD`] pieces, and the
    /// copy returns only once it has checked everything.
    fn mapped(&mut self, src: &[u8], mon: &mut dyn Monitor) -> Result<()> {
        use std::os::unix::fs::FileExt;
        use std::sync::mpsc::sync_channel;
        let out: &File = self.out;
        let (tmp, start) = (self.tmp, self.len);
        let (tx, rx) = sync_channel::<(usize, usize)>(AHEAD);
        let buf = &mut self.buf;
        let (crc, back_crc, back_len) = (self.crc, self.back_crc, self.back_len);
        std::thread::scope(|scope| {
            let checker = scope.spawn(move || -> Result<(u32, u32, u64)> {
                let (mut crc, mut back_crc, mut back_len) = (crc, back_crc, back_len);
                for (at, len) in rx {
                    crc = haar::crc32c_append(crc, &src[at..at + len]);
                    let back = &mut buf[..len];
                    let mut got = 0;
                    while got < len {
                        match out.read_at(&mut back[got..], start + (at + got) as u64) {
                            Ok(0) => break,
                            Ok(n) => got += n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(Error::io("read back", tmp, e)),
                        }
                    }
                    back_crc = haar::crc32c_append(back_crc, &back[..got]);
                    back_len += got as u64;
                }
                Ok((crc, back_crc, back_len))
            });
            let written = (|| {
                let mut at = 0;
                for chunk in src.chunks(CHUNK) {
                    if mon.cancelled() {
                        return Err(Error::Cancelled(self.task.into()));
                    }
                    for piece in chunk.chunks(PIECE) {
                        (&*out)
                            .write_all(piece)
                            .map_err(|e| Error::io("write", tmp, e))?;
                        // A checker that stopped has an error to give at its join.
                        if tx.send((at, piece.len())).is_err() {
                            return Ok(());
                        }
                        at += piece.len();
                    }
                    self.len += chunk.len() as u64;
                    self.wb.written(self.len)?;
                    mon.advance(chunk.len() as u64);
                }
                Ok(())
            })();
            drop(tx);
            let checked = joined(checker.join(), "read back", tmp, "the read-back thread");
            written?;
            (self.crc, self.back_crc, self.back_len) = checked?;
            Ok(())
        })
    }

    /// Bytes copied, the source's CRC-32C, and (length, CRC-32C) of what was read back.
    fn done(self) -> (u64, u32, (u64, u32)) {
        (self.len, self.crc, (self.back_len, self.back_crc))
    }
}

impl Drop for Copier<'_> {
    fn drop(&mut self) {
        give_buffer(std::mem::take(&mut self.buf));
    }
}

/// Buffers kept between files (allocating and zeroing fresh ones per file costs page faults
/// on every chunk).
static POOL: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// A buffer of [`CHUNK`] bytes.
fn take_buffer() -> Vec<u8> {
    POOL.lock()
        .ok()
        .and_then(|mut p| p.pop())
        .unwrap_or_else(|| vec![0u8; CHUNK])
}

fn give_buffer(b: Vec<u8>) {
    if let Ok(mut p) = POOL.lock()
        && p.len() < 4
    {
        p.push(b);
    }
}

/// Reads until `buf` is full or the end of the file.
fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// fsyncs a directory, so that renames into it survive a power cut.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Count(u64, Option<u64>);
    impl Monitor for Count {
        fn advance(&mut self, b: u64) {
            self.0 += b;
        }
        fn cancelled(&mut self) -> bool {
            self.1.is_some_and(|at| self.0 >= at)
        }
    }

    #[test]
    fn a_copy_is_whole_or_absent_and_its_checksum_is_the_source_s() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("a");
        let data: Vec<u8> = (0..(CHUNK * 2 + 123))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&src, &data).unwrap();
        let dst = d.path().join("b");
        let (len, crc) = copy_file(&src, &dst, "t1", &mut Count(0, None)).unwrap();
        assert_eq!(len, data.len() as u64);
        assert_eq!(crc, haar::crc32c(&data));
        assert_eq!(std::fs::read(&dst).unwrap(), data);
        // Cancelled after the first chunk: no destination, no temporary file.
        let dst2 = d.path().join("c");
        let e = copy_file(&src, &dst2, "t2", &mut Count(0, Some(1))).unwrap_err();
        assert!(matches!(e, Error::Cancelled(_)), "{e}");
        assert!(!dst2.exists() && !temp_name(&dst2, "t2").exists());
        assert!(is_temp_of(".c.haar-stage.t2", "t2") && !is_temp_of("c", "t2"));
    }

    #[test]
    fn copies_written_behind_on_disk_are_the_source_s_bytes_and_their_writeback_is_waited_for() {
        // A disk file system for the destination (write-behind does nothing on tmpfs).
        let mut d = tempfile::tempdir().unwrap();
        if !WriteBehind::for_destination(d.path()).enabled() {
            d = tempfile::tempdir_in("/var/tmp").unwrap();
        }
        let src = d.path().join("a");
        let data: Vec<u8> = (0..(CHUNK * 5 + 4321))
            .map(|i| (i * 13 % 253) as u8)
            .collect();
        std::fs::write(&src, &data).unwrap();
        // Steps of one chunk, two in flight: a window that moves within this file.
        let mut wb = WriteBehind::with_window(true, CHUNK as u64, 2);
        let mut mon = Count(0, None);
        let dsts: Vec<_> = (0..2).map(|i| d.path().join(format!("b{i}"))).collect();
        for dst in &dsts {
            let p = copy_to_temp(&src, dst, "wb", &mut mon, &mut wb).unwrap();
            assert_eq!(
                p.commit().unwrap(),
                (data.len() as u64, haar::crc32c(&data))
            );
        }
        // Per file: five whole steps and a tail started; all but the last two waited for.
        let c = wb.counts();
        assert_eq!((c.started, c.waited), (12, 10), "{c:?}");
        assert_eq!(mon.0, 2 * data.len() as u64);
        for dst in &dsts {
            assert_eq!(std::fs::read(dst).unwrap(), data);
        }
    }

    /// Rewrites the source once the copy has started (a writer racing the stager).
    struct Rewrite<'a>(&'a Path, bool);
    impl Monitor for Rewrite<'_> {
        fn advance(&mut self, _: u64) {}
        fn cancelled(&mut self) -> bool {
            if !self.1 {
                // A different length and a later mtime: noticed whichever way it is read.
                std::thread::sleep(std::time::Duration::from_millis(20));
                std::fs::write(self.0, vec![1u8; CHUNK + 5]).unwrap();
                self.1 = true;
            }
            false
        }
    }

    #[test]
    fn a_source_changed_while_copied_is_refused_and_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        for len in [CHUNK * 3, 1000] {
            let src = d.path().join("s");
            std::fs::write(&src, vec![7u8; len]).unwrap();
            let dst = d.path().join("d");
            let e = copy_file(&src, &dst, "t", &mut Rewrite(&src, false)).unwrap_err();
            assert!(matches!(e, Error::Checksum { .. }), "{len}: {e}");
            assert!(!dst.exists() && !temp_name(&dst, "t").exists(), "{len}");
        }
    }
}
