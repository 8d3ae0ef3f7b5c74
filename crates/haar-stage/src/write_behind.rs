//! Write-behind for destinations on a disk file system (design §13.3): as a file is written,
//! the writeback of each [`STEP`] is started (`sync_file_range(SYNC_FILE_RANGE_WRITE)`) and
//! the step written [`DEPTH`] steps earlier is waited for (`WAIT_BEFORE | WRITE |
//! WAIT_AFTER`) and dropped from the page cache (`posix_fadvise(DONTNEED)`). Dirty pages
//! never pile up, so the writer runs at the disk's rate from its first byte — not at memory
//! speed until the kernel's dirty limit, then at the disk's under writeback throttling — the
//! progress an ETA extrapolates is the steady rate, and the final `syncfs`/`fdatasync` finds
//! little left to write.
//!
//! The window spans files: a step of one file may be waited for while the next is written,
//! so files smaller than a window are throttled too. On tmpfs (and ramfs) there is no
//! writeback: [`WriteBehind::for_destination`] turns it off there.
//!
//! This is an optimisation of *when* bytes reach the disk, not a durability guarantee:
//! `sync_file_range` commits no metadata and flushes no device cache, and callers still make
//! every object durable by `syncfs` or `fdatasync` before reporting it done.
//!
//! Owns the writeback window only; which bytes are written, checksummed and read back is
//! [`crate::copy`]'s and the fields path's.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};

/// Bytes whose writeback is started at a time.
pub const STEP: u64 = 16 << 20;

/// Steps in flight behind the one being written: the writer waits for the step `DEPTH`
/// steps before the one it just started, so at most about `(DEPTH + 1) × STEP` bytes are
/// dirty at a time (48 MiB), while the disk always has the next step queued.
pub const DEPTH: usize = 2;

/// `TMPFS_MAGIC` and `RAMFS_MAGIC` of `statfs(2)`: memory file systems, nothing to write back.
const MEMORY_FS: [i64; 2] = [0x0102_1994, 0x8584_58f6];

/// A range whose writeback was started and not yet waited for.
#[derive(Debug)]
struct InFlight {
    file: Arc<File>,
    path: Arc<PathBuf>,
    off: u64,
    len: u64,
}

/// System calls issued, for tests and for the curious.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// `sync_file_range(WRITE)` calls (writeback started).
    pub started: u64,
    /// `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)` calls (writeback waited for).
    pub waited: u64,
    /// Bytes waited for.
    pub waited_bytes: u64,
}

/// The writeback window of one writer (one task's copy loop, or one output file).
#[derive(Debug)]
pub struct WriteBehind {
    enabled: bool,
    step: u64,
    depth: usize,
    drop_cache: bool,
    /// The file being written, the path errors name, and the end of what was started.
    current: Option<(Arc<File>, Arc<PathBuf>, u64)>,
    in_flight: VecDeque<InFlight>,
    counts: Counts,
}

impl WriteBehind {
    /// Write-behind on (`enabled`) or off, with [`STEP`] and [`DEPTH`], dropping waited-for
    /// steps from the page cache.
    pub fn new(enabled: bool) -> WriteBehind {
        WriteBehind::with_window(enabled, STEP, DEPTH)
    }

    /// Write-behind with steps of `step` bytes (a multiple of the page size), `depth` of them
    /// in flight behind the one being written.
    pub fn with_window(enabled: bool, step: u64, depth: usize) -> WriteBehind {
        WriteBehind {
            enabled,
            step: step.max(4096),
            depth,
            drop_cache: true,
            current: None,
            in_flight: VecDeque::new(),
            counts: Counts::default(),
        }
    }

    /// Write-behind for files written in the directory `dir`: on unless `dir` is on a memory
    /// file system (tmpfs, ramfs), where there is no writeback to pace. A `dir` that cannot
    /// be asked (`statfs` fails) gets it on: it costs a memory file system only two cheap
    /// system calls per step.
    pub fn for_destination(dir: &Path) -> WriteBehind {
        WriteBehind::new(!on_memory_fs(dir).unwrap_or(false))
    }

    /// Whether write-behind is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Keep waited-for steps in the page cache (a reader of them follows: the fields path
    /// reads each step back once it is durable, and drops it itself).
    pub fn keep_cache(mut self) -> WriteBehind {
        self.drop_cache = false;
        self
    }

    /// System calls issued so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// A new file, written front to back from offset 0, whose writes [`WriteBehind::written`]
    /// will report. The previous file's steps stay in flight (the window spans files).
    pub fn begin(&mut self, file: &File, path: &Path) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let dup = file.try_clone().map_err(|e| Error::io("dup", path, e))?;
        self.current = Some((Arc::new(dup), Arc::new(path.to_path_buf()), 0));
        Ok(())
    }

    /// The current file holds `end` bytes: starts the writeback of every whole step not yet
    /// started, and waits for the steps more than [`DEPTH`] behind. Returns the offset up to
    /// which the current file's writeback has been waited for (its bytes below are on the
    /// device, not yet flushed from its cache).
    pub fn written(&mut self, end: u64) -> Result<u64> {
        let step = self.step;
        while let Some((file, path, started)) = self.current.as_mut()
            && end - *started >= step
        {
            let range = InFlight {
                file: file.clone(),
                path: path.clone(),
                off: *started,
                len: step,
            };
            *started += step;
            start(&range, &mut self.counts)?;
            self.in_flight.push_back(range);
            self.keep_window()?;
        }
        Ok(self.waited_upto())
    }

    /// The current file is complete at `len` bytes: starts the writeback of its tail, a range
    /// of the window like a step (waited for when later ones start, by
    /// [`WriteBehind::drain`], or by the caller's `syncfs`/`fdatasync`).
    pub fn end(&mut self, len: u64) -> Result<()> {
        self.written(len)?;
        if let Some((file, path, started)) = self.current.take()
            && len > started
        {
            let range = InFlight {
                file,
                path,
                off: started,
                len: len - started,
            };
            start(&range, &mut self.counts)?;
            self.in_flight.push_back(range);
            self.keep_window()?;
        }
        Ok(())
    }

    /// Waits for the oldest ranges until at most [`DEPTH`] are in flight.
    fn keep_window(&mut self) -> Result<()> {
        while self.in_flight.len() > self.depth {
            let old = self.in_flight.pop_front().expect("longer than depth");
            wait(&old, self.drop_cache, &mut self.counts)?;
        }
        Ok(())
    }

    /// Waits for every step in flight.
    pub fn drain(&mut self) -> Result<()> {
        while let Some(old) = self.in_flight.pop_front() {
            wait(&old, self.drop_cache, &mut self.counts)?;
        }
        Ok(())
    }

    /// The current file's offset below which every step was waited for.
    fn waited_upto(&self) -> u64 {
        let Some((file, _, started)) = &self.current else {
            return 0;
        };
        // Steps of the current file still in flight are its last ones.
        self.in_flight
            .iter()
            .find(|r| Arc::ptr_eq(&r.file, file))
            .map_or(*started, |r| r.off)
    }
}

fn start(r: &InFlight, counts: &mut Counts) -> Result<()> {
    sync_range(r, libc::SYNC_FILE_RANGE_WRITE)?;
    counts.started += 1;
    Ok(())
}

fn wait(r: &InFlight, drop_cache: bool, counts: &mut Counts) -> Result<()> {
    sync_range(
        r,
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER,
    )?;
    counts.waited += 1;
    counts.waited_bytes += r.len;
    if drop_cache {
        drop_pages(&r.file, r.off, r.len);
    }
    Ok(())
}

/// Drops the clean pages of `[off, off + len)` of `file` from the page cache (advice: a page
/// still dirty stays).
pub fn drop_pages(file: &File, off: u64, len: u64) {
    // SAFETY: a file descriptor we own; advice changes no data.
    unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            off as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
}

fn sync_range(r: &InFlight, flags: libc::c_uint) -> Result<()> {
    // SAFETY: a file descriptor we own (a duplicate kept open while the range is in flight).
    let rc = unsafe {
        libc::sync_file_range(
            r.file.as_raw_fd(),
            r.off as libc::off64_t,
            r.len as libc::off64_t,
            flags,
        )
    };
    if rc != 0 {
        return Err(Error::io(
            "sync_file_range",
            r.path.as_path(),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Whether `dir` is on tmpfs or ramfs.
fn on_memory_fs(dir: &Path) -> Option<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statfs buffer of the right size.
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    Some(MEMORY_FS.contains(&(fs.f_type as i64)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A directory on a disk file system: the test's own temporary directory if it is one,
    /// else /var/tmp (the sync_file_range calls must reach a file system with writeback).
    fn disk_dir() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        if on_memory_fs(t.path()) == Some(false) {
            return t;
        }
        tempfile::tempdir_in("/var/tmp").unwrap()
    }

    #[test]
    fn files_written_behind_are_byte_identical_and_every_step_is_started_and_waited_for() {
        let d = disk_dir();
        let step = 64u64 << 10;
        let mut wb = WriteBehind::with_window(true, step, 2);
        assert!(wb.enabled());
        // Three files across one window: 5.5 steps, 1 step, a tail under a step.
        let sizes = [step * 11 / 2, step, step / 3];
        let mut datas = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..size).map(|j| (j * 31 + i as u64 * 7) as u8).collect();
            let path = d.path().join(format!("f{i}"));
            let mut f = File::create(&path).unwrap();
            wb.begin(&f, &path).unwrap();
            let mut waited_before = 0;
            for (k, piece) in data.chunks(20_000).enumerate() {
                f.write_all(piece).unwrap();
                let end = (k * 20_000 + piece.len()) as u64;
                let upto = wb.written(end).unwrap();
                // What was waited for is behind what was written, on step boundaries, and
                // never moves back.
                assert!(upto <= end && upto.is_multiple_of(step) && upto >= waited_before);
                waited_before = upto;
            }
            wb.end(size).unwrap();
            datas.push((path, data));
        }
        // Whole steps: 5 + 1 + 0, tails: 1 (half step) + 0 + 1 (a third).
        let c = wb.counts();
        assert_eq!(c.started, 8, "{c:?}");
        // Every range but the last DEPTH started was waited for as the next ones started.
        assert_eq!(c.waited, 8 - 2, "{c:?}");
        wb.drain().unwrap();
        let c = wb.counts();
        assert_eq!((c.started, c.waited), (8, 8), "{c:?}");
        assert_eq!(c.waited_bytes, sizes.iter().sum::<u64>());
        for (path, data) in datas {
            assert_eq!(std::fs::read(&path).unwrap(), data, "{}", path.display());
        }
    }

    #[test]
    fn off_on_memory_file_systems_and_silent_when_off() {
        if Path::new("/dev/shm").exists() && on_memory_fs(Path::new("/dev/shm")) == Some(true) {
            assert!(!WriteBehind::for_destination(Path::new("/dev/shm")).enabled());
        }
        let d = disk_dir();
        assert!(WriteBehind::for_destination(d.path()).enabled());
        let path = d.path().join("f");
        let mut f = File::create(&path).unwrap();
        let mut wb = WriteBehind::new(false);
        wb.begin(&f, &path).unwrap();
        f.write_all(&vec![1u8; 3 * STEP as usize]).unwrap();
        assert_eq!(wb.written(3 * STEP).unwrap(), 0);
        wb.end(3 * STEP).unwrap();
        wb.drain().unwrap();
        assert_eq!(wb.counts(), Counts::default());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * STEP);
    }
}
