//! The copy protocol for one file (design §13.3): read the source with its CRC-32C computed on
//! the way, write a temporary name beside the destination, fsync it, read it back and compare
//! checksums, check that the source did not change meanwhile, then rename into place. A
//! process killed at any point leaves either the old destination or the new one whole, plus
//! at most a temporary file whose name says which task left it ([`temp_name`]).
//!
//! Owns only bytes of files: which files, and the journal, are [`crate::task`]'s.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Bytes read and written at a time.
pub const CHUNK: usize = 4 << 20;

/// What a copy hears and asks between chunks.
pub trait Monitor {
    /// `bytes` more were copied.
    fn advance(&mut self, bytes: u64);
    /// Whether to stop now (the task was cancelled).
    fn cancelled(&mut self) -> bool;
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
        crc = haar_persist::crc32c_append(crc, &buf[..n]);
        len += n as u64;
    }
}

/// The length and CRC-32C of an open file, computed over a read-only mapping of it (no copy
/// into a buffer: the read-back check costs one pass over the page cache). Only for the
/// task's own temporary files, which nobody else truncates while they are mapped.
fn mapped_crc(file: &File, path: &Path) -> Result<(u64, u32)> {
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, e))?
        .len();
    if len == 0 {
        return Ok((0, 0));
    }
    // SAFETY: the file is this task's temporary copy, written and fsynced by it; nothing
    // else writes or truncates it while it is mapped.
    let map = unsafe { memmap2::Mmap::map(file) }.map_err(|e| Error::io("map", path, e))?;
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok((len, haar_persist::crc32c(&map)))
}

/// Copies the regular file `src` to `dst` by the protocol above; returns its length and
/// CRC-32C. `task` names the temporary file.
pub fn copy_file(src: &Path, dst: &Path, task: &str, mon: &mut dyn Monitor) -> Result<(u64, u32)> {
    copy_to_temp(src, dst, task, mon)?.commit()
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
    crc: u32,
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

    /// fdatasync, check the source did not change, read the copy back and compare its
    /// CRC-32C, rename into place. On error the temporary file is removed.
    pub fn commit(mut self) -> Result<(u64, u32)> {
        let r = self.finish();
        self.committed = r.is_ok();
        r
    }

    fn finish(&self) -> Result<(u64, u32)> {
        let (len, crc) = (self.len, self.crc);
        self.file
            .sync_data()
            .map_err(|e| Error::io("fsync", &self.tmp, e))?;
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
        let (back_len, back_crc) = mapped_crc(&self.file, &self.tmp)?;
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

    /// Writes back every dirty page of the file system holding the copy (syncfs): the
    /// commit's fdatasync of each copy of a batch then has nothing left to wait for.
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

/// Copies `src` to the temporary name of `dst` with its CRC-32C computed on the way, and
/// starts the writeback of what was written (`sync_file_range`), without waiting for it.
pub fn copy_to_temp(src: &Path, dst: &Path, task: &str, mon: &mut dyn Monitor) -> Result<Pending> {
    let mut input = File::open(src).map_err(|e| Error::io("open", src, e))?;
    let before = input.metadata().map_err(|e| Error::io("stat", src, e))?;
    let tmp = temp_name(dst, task);
    // A leftover of an earlier attempt of this task is ours to replace.
    let _ = std::fs::remove_file(&tmp);
    let mut out = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(before.permissions().mode() & 0o777 | 0o600)
        .open(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    let result = (|| {
        // A source of at least a chunk is mapped (under the SIGBUS guard, so a truncation
        // meanwhile is noticed, not fatal): written from the mapping while a second thread
        // computes its checksum, one copy in all as `cp` makes; else read through buffers.
        let mapped = (before.len() >= CHUNK as u64)
            .then(|| input.try_clone().ok())
            .flatten()
            .and_then(|f| haar::ingest::GuardedMap::new(f, &before));
        let (len, crc) = match mapped {
            Some(map) => mapped_copy(&map, &mut out, src, &tmp, task, mon)?,
            None => pipe_copy(&mut input, &mut out, src, &tmp, task, mon)?,
        };
        // SAFETY: a file descriptor we own; SYNC_FILE_RANGE_WRITE only starts writeback.
        unsafe {
            libc::sync_file_range(
                std::os::fd::AsRawFd::as_raw_fd(&out),
                0,
                0,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        Ok((len, crc))
    })();
    match result {
        Ok((len, crc)) => Ok(Pending {
            src: src.into(),
            tmp,
            dst: dst.into(),
            file: out,
            before,
            len,
            crc,
            committed: false,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Chunks in flight between the reading and the writing thread.
const IN_FLIGHT: usize = 3;

/// Buffers kept between files (allocating and zeroing fresh ones per file costs page faults
/// on every chunk).
static POOL: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

fn take_buffer() -> Vec<u8> {
    POOL.lock()
        .ok()
        .and_then(|mut p| p.pop())
        .unwrap_or_else(|| vec![0u8; CHUNK])
}

fn give_buffer(b: Vec<u8>) {
    if let Ok(mut p) = POOL.lock()
        && p.len() < 2 * IN_FLIGHT
    {
        p.push(b);
    }
}

/// Copies `input` to `out`: a second thread reads the source and computes its CRC-32C while
/// this one writes (and hears the monitor), so reading and writing overlap on two cores.
/// Returns the length and CRC-32C of what was read and written.
fn pipe_copy(
    input: &mut File,
    out: &mut File,
    src: &Path,
    tmp: &Path,
    task: &str,
    mon: &mut dyn Monitor,
) -> Result<(u64, u32)> {
    use std::sync::mpsc::sync_channel;
    let (full_tx, full_rx) = sync_channel::<(Vec<u8>, usize)>(IN_FLIGHT);
    let (empty_tx, empty_rx) = sync_channel::<Vec<u8>>(IN_FLIGHT);
    for _ in 0..IN_FLIGHT {
        empty_tx.send(take_buffer()).expect("receiver alive");
    }
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || -> std::io::Result<(u64, u32)> {
            let (mut len, mut crc) = (0u64, 0u32);
            // Ends when the writer stops handing buffers back (it finished or failed).
            while let Ok(mut buf) = empty_rx.recv() {
                let n = read_full(input, &mut buf)?;
                if n == 0 {
                    give_buffer(buf);
                    break;
                }
                crc = haar_persist::crc32c_append(crc, &buf[..n]);
                len += n as u64;
                if full_tx.send((buf, n)).is_err() {
                    break;
                }
            }
            Ok((len, crc))
        });
        let mut written = 0u64;
        let mut failure = None;
        for (buf, n) in full_rx.iter() {
            if mon.cancelled() {
                failure = Some(Error::Cancelled(task.into()));
                break;
            }
            if let Err(e) = out.write_all(&buf[..n]) {
                failure = Some(Error::io("write", tmp, e));
                break;
            }
            written += n as u64;
            mon.advance(n as u64);
            // The reader may have reached the end already: the chunks it sent are still
            // written, and the buffer goes back to the pool.
            if let Err(back) = empty_tx.send(buf) {
                give_buffer(back.0);
            }
        }
        drop(empty_tx);
        drop(full_rx);
        let read = reader.join().expect("reader thread");
        if let Some(f) = failure {
            return Err(f);
        }
        let (len, crc) = read.map_err(|e| Error::io("read", src, e))?;
        if len != written {
            return Err(Error::Checksum {
                path: tmp.into(),
                detail: format!("wrote {written} bytes of {len} read"),
            });
        }
        Ok((len, crc))
    })
}

/// Writes the mapped source to `out` in chunks while a second thread computes the
/// CRC-32C of the same mapping; a source changed meanwhile is an error.
fn mapped_copy(
    map: &haar::ingest::GuardedMap,
    out: &mut File,
    src: &Path,
    tmp: &Path,
    task: &str,
    mon: &mut dyn Monitor,
) -> Result<(u64, u32)> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    let bytes: &[u8] = map;
    let (crc, written) = std::thread::scope(|scope| {
        let summer = scope.spawn(|| {
            let mut crc = 0u32;
            for chunk in bytes.chunks(CHUNK) {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                crc = haar_persist::crc32c_append(crc, chunk);
            }
            crc
        });
        let mut result = Ok(0u64);
        for chunk in bytes.chunks(CHUNK) {
            if mon.cancelled() {
                result = Err(Error::Cancelled(task.into()));
                break;
            }
            if let Err(e) = out.write_all(chunk) {
                result = Err(Error::io("write", tmp, e));
                break;
            }
            if let Ok(n) = &mut result {
                *n += chunk.len() as u64;
            }
            mon.advance(chunk.len() as u64);
        }
        if result.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        (summer.join().expect("checksum thread"), result)
    });
    let written = written?;
    if map.changed() {
        return Err(Error::Checksum {
            path: src.into(),
            detail: "the source changed while it was being staged; stage it again".into(),
        });
    }
    Ok((written, crc))
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
        assert_eq!(crc, haar_persist::crc32c(&data));
        assert_eq!(std::fs::read(&dst).unwrap(), data);
        // Cancelled after the first chunk: no destination, no temporary file.
        let dst2 = d.path().join("c");
        let e = copy_file(&src, &dst2, "t2", &mut Count(0, Some(1))).unwrap_err();
        assert!(matches!(e, Error::Cancelled(_)), "{e}");
        assert!(!dst2.exists() && !temp_name(&dst2, "t2").exists());
        assert!(is_temp_of(".c.haar-stage.t2", "t2") && !is_temp_of("c", "t2"));
    }
}
