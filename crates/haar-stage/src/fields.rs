//! Fields as staging objects: a MARS request's fields out of a store into one GRIB file,
//! GRIB files into a store (through `haar::ingest`, the path `haar archive` takes), and a
//! request from one store to another. Every field's CRC-32C is carried end to end: the store
//! verifies it on retrieve and hands it over, the file is read back and compared, the
//! destination store checks it on archive.
//!
//! Owns the mapping of fields onto tasks; stores are opened by [`crate::Dataspaces`].

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use haar::FieldStoreExt;
use haar::read::{Missing, retrieve_into};
use haar::request::Request;

use crate::copy::{self, Progress, write_to};
use crate::dataspace::Dataspaces;
use crate::error::{Error, Result, joined};
use crate::eta::Phase;
use crate::write_behind::{self, WriteBehind};

/// Bytes of the output file read back at a time, behind the writer: the write-behind step (a
/// multiple of the page size, so each segment can be mapped on its own).
const SEGMENT: u64 = write_behind::STEP;

/// The fields of `req` in store dataspace `space` written to the GRIB file `dst` (design
/// §13.3): under a temporary name, in segments each written back (on a disk file system,
/// [`crate::write_behind`]) and read back while the next ones are written (on a memory file
/// system, 1 MiB at a time by a thread beside the writer), then fdatasync,
/// the whole read-back CRC-32C compared with the one combined from the fields' (as their
/// store verified them), rename.
pub(crate) fn store_to_file(
    run: &mut impl Progress,
    spaces: &Dataspaces,
    space: &str,
    req: &Request,
    dst: &Path,
) -> Result<()> {
    let store = spaces.open_store(space, false)?;
    let total: u64 = store.list(req)?.iter().map(|f| f.data.length).sum();
    if total == 0 {
        return Err(Error::Missing(format!(
            "no field in dataspace {space} matches {req}"
        )));
    }
    run.plan_one(total);
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p).map_err(|e| Error::io("create", p, e))?;
    }
    let tmp = copy::temp_name(dst, run.id());
    let _ = std::fs::remove_file(&tmp);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    let result = (|| {
        let wb = WriteBehind::for_destination(tmp.parent().unwrap_or(Path::new(".")));
        let disk = wb.enabled();
        let mut back = ReadBack::new(&file, &tmp, wb)?;
        let written = if disk {
            write_inline(run, &*store, req, &file, &tmp, &mut back)
        } else {
            write_fetched(run, store, req, &file, &tmp, &mut back)
        };
        let (len, crc, missing) = written?;
        if !missing.is_empty() {
            return Err(missing_in(space, &missing));
        }
        let back = back.finish(len, &mut |p, n| run.phase(p, n))?;
        if back != (len, crc) {
            return Err(Error::Checksum {
                path: tmp.clone(),
                detail: format!(
                    "read back {} bytes with CRC-32C {:08x}, the fields make {len} with {crc:08x}",
                    back.0, back.1
                ),
            });
        }
        std::fs::rename(&tmp, dst).map_err(|e| Error::io("rename", dst, e))?;
        if let Some(p) = dst.parent() {
            copy::sync_dir(p)?;
        }
        Ok((len, crc))
    })();
    match result {
        Ok((len, crc)) => {
            run.finish_one(dst.into(), len, crc);
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// What writing a request's fields into a file gives: bytes written, their CRC-32C (combined
/// from the fields' verified ones) and what the request found nothing for.
type Written = (u64, u32, Missing);

/// The fields' CRC-32C: the one the store verified the field against before handing it over,
/// combined without a pass over the bytes (a store that hands none over is checksummed here).
fn combine(crc: u32, bytes: &[u8], field_crc: Option<u32>) -> u32 {
    let field_crc = field_crc.unwrap_or_else(|| haar::crc32c(bytes));
    haar::crc32c_combine(crc, field_crc, bytes.len() as u64)
}

/// The error a staging of fields fails with when its request found fields missing in dataspace
/// `space`: [`Missing`]'s words (the keys, or the request that matched nothing, and any damage
/// found), as every face words them.
fn missing_in(space: &str, missing: &Missing) -> Error {
    Error::Missing(format!("dataspace {space}: {missing}"))
}

/// To a disk file system: each field written from the store's buffer as it is handed over,
/// on this thread (the write-behind window paces it: design §13.3). Fields of 64 KiB or more
/// bypass the buffer (one copy fewer); smaller ones are gathered into 64 KiB writes.
fn write_inline(
    run: &mut impl Progress,
    store: &dyn haar::FieldStore,
    req: &Request,
    file: &std::fs::File,
    tmp: &Path,
    back: &mut ReadBack<'_>,
) -> Result<Written> {
    let mut out = std::io::BufWriter::with_capacity(64 << 10, file);
    let mut crc = 0u32;
    let mut len = 0u64;
    let mut failure: Option<Error> = None;
    let one = std::slice::from_ref(req);
    let report = retrieve_into(store, one, &mut |_key, bytes, field_crc| {
        if run.cancelled() {
            failure = Some(Error::Cancelled(run.id().into()));
            return Err(haar::Error::Config("cancelled".into()));
        }
        let step = (|| {
            write_to(&mut out, bytes, tmp)?;
            let before = len;
            len += bytes.len() as u64;
            run.phase(Phase::Copied, bytes.len() as u64);
            let step = back.step();
            if before / step != len / step {
                out.flush().map_err(|e| Error::io("write", tmp, e))?;
                back.written(len, &mut |p, n| run.phase(p, n))?;
            }
            Ok(())
        })();
        if let Err(e) = step {
            failure = Some(e);
            return Err(haar::Error::Config("write failed".into()));
        }
        crc = combine(crc, bytes, field_crc);
        Ok(())
    });
    if let Some(f) = failure {
        return Err(f);
    }
    let got = report?;
    out.flush().map_err(|e| Error::io("write", tmp, e))?;
    Ok((len, crc, got.missing))
}

/// Bytes of fields gathered per write to a memory file system.
const FETCH_BUFFER: usize = copy::CHUNK;

/// Buffers filled ahead of the writer.
const FETCH_DEPTH: usize = 2;

/// The fetching end of [`fetched_beside`]: buffers to fill, from those the consumer gave back,
/// and the queue of filled ones.
struct Handover<T> {
    free: std::sync::mpsc::Receiver<Vec<u8>>,
    full: std::sync::mpsc::SyncSender<T>,
}

impl<T> Handover<T> {
    /// An empty buffer to fill; fails once the consumer stopped.
    fn buffer(&self) -> haar::Result<Vec<u8>> {
        let mut buf = self.free.recv().map_err(|_| consumer_stopped())?;
        buf.clear();
        Ok(buf)
    }

    /// Hands `item` to the consumer; fails once it stopped.
    fn send(&self, item: T) -> haar::Result<()> {
        self.full.send(item).map_err(|_| consumer_stopped())
    }
}

/// What a fetcher's hand-over fails with once the consumer stopped (on an error or a cancel,
/// which the consumer reports).
fn consumer_stopped() -> haar::Error {
    haar::Error::Config("the writer stopped".into())
}

/// Runs `fetch` on a thread of its own, filling buffers of `capacity` bytes
/// ([`FETCH_DEPTH`] + 1 of them, reused) and handing items that hold them over, while
/// `consume` takes each item on this thread and gives its buffer back: reading a store runs
/// beside writing the destination. A consumer that fails stops the fetcher at its next
/// hand-over. Returns what the consumer ended with, then what the fetcher did (a panic of its
/// thread as an I/O error naming `at`).
fn fetched_beside<T: Send, R: Send>(
    capacity: usize,
    at: &Path,
    fetch: impl FnOnce(&Handover<T>) -> Result<R> + Send,
    mut consume: impl FnMut(T) -> Result<Vec<u8>>,
) -> (Result<()>, Result<R>) {
    use std::sync::mpsc::{channel, sync_channel};
    let (full, full_rx) = sync_channel::<T>(FETCH_DEPTH);
    let (free_tx, free) = channel::<Vec<u8>>();
    for _ in 0..FETCH_DEPTH + 1 {
        let _ = free_tx.send(Vec::with_capacity(capacity));
    }
    std::thread::scope(|scope| {
        let fetcher = scope.spawn(move || fetch(&Handover { free, full }));
        let consumed = full_rx.iter().try_for_each(|item| {
            let _ = free_tx.send(consume(item)?);
            Ok(())
        });
        // A consumer that stopped early lets the fetcher's next hand-over fail.
        drop(full_rx);
        drop(free_tx);
        let fetched = joined(fetcher.join(), "read", at, "the thread reading the store");
        (consumed, fetched)
    })
}

/// To a memory file system: the store's reads and checks run on a thread of their own, which
/// gathers the fields into [`FETCH_BUFFER`]-byte buffers that this thread writes whole, while
/// the read-back thread checks what was written, so the store's reads, the writes and the
/// read-back run side by side. (Until issue 15's fifth round the store's reads shared the
/// writer's thread: 16% of it, `perf`, 4 GiB to /dev/shm; the gathering copy they cost now
/// runs beside the write.)
fn write_fetched(
    run: &mut impl Progress,
    store: Box<dyn haar::FieldStore>,
    req: &Request,
    file: &std::fs::File,
    tmp: &Path,
    back: &mut ReadBack<'_>,
) -> Result<Written> {
    let fetch = move |h: &Handover<Vec<u8>>| -> Result<(u32, Missing)> {
        let mut crc = 0u32;
        let mut buf = h.buffer()?;
        let one = std::slice::from_ref(req);
        let got = retrieve_into(&*store, one, &mut |_key, bytes, field_crc| {
            crc = combine(crc, bytes, field_crc);
            let mut rest = bytes;
            while !rest.is_empty() {
                let n = rest.len().min(FETCH_BUFFER - buf.len());
                buf.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
                if buf.len() == FETCH_BUFFER {
                    h.send(std::mem::replace(&mut buf, h.buffer()?))?;
                }
            }
            Ok(())
        });
        if !buf.is_empty() {
            let _ = h.send(buf);
        }
        Ok((crc, got?.missing))
    };
    let mut len = 0u64;
    let (written, fetched) = fetched_beside(FETCH_BUFFER, tmp, fetch, |buf: Vec<u8>| {
        if run.cancelled() {
            return Err(Error::Cancelled(run.id().into()));
        }
        write_to(&mut &*file, &buf, tmp)?;
        let before = len;
        len += buf.len() as u64;
        run.phase(Phase::Copied, buf.len() as u64);
        let step = back.step();
        if before / step != len / step {
            back.written(len, &mut |p, n| run.phase(p, n))?;
        }
        Ok(buf)
    });
    written?;
    let (crc, missing) = fetched?;
    Ok((len, crc, missing))
}

/// The read-back of a file written front to back, behind the writer so each byte is read
/// once, and the CRC-32C of everything read back, in order. On a disk file system each
/// [`SEGMENT`] once the write-behind window has waited for its writeback (the disk writes the
/// next segments while it is read), through a mapping. On a memory file system (no
/// writeback) every [`PIECE`] as soon as it is written, by `pread` into one reused buffer, on
/// a second thread ([`Worker`]) while the writer fetches and writes the next fields. (Until
/// issue 15's fourth round it mapped each 16 MiB segment, on the writer's thread, once the
/// next was written: mapping, faulting and unmapping it and checksumming it out of DRAM cost
/// a quarter of the task's CPU time, all on the one thread the task ran on, `perf`, 4 GiB to
/// /dev/shm.)
///
/// Progress is reported through `report(phase, bytes)`, so the logic runs without a task.
struct ReadBack<'f> {
    file: &'f std::fs::File,
    path: &'f Path,
    wb: WriteBehind,
    /// Bytes read back and reported (on a disk file system, a multiple of [`SEGMENT`] until
    /// the end).
    checked: u64,
    crc: u32,
    /// Memory file system: the thread reading back behind the writer.
    worker: Option<Worker>,
}

/// Bytes read back at a time on a memory file system: small enough that what was just
/// written is likely still in the shared cache when read back, large enough that the system
/// calls and messages cost nothing.
const PIECE: u64 = 1 << 20;

/// Pieces the writer may run ahead of the read-back thread before it waits for it.
const WORKER_QUEUE: usize = 16;

/// The read-back thread of a memory file system: it receives the file's length after each
/// piece written, reads `[read back, length)` by `pread` and extends the CRC-32C; `done` is
/// what it has read back so far (the writer reports progress from it).
struct Worker {
    tx: Option<std::sync::mpsc::SyncSender<u64>>,
    handle: Option<std::thread::JoinHandle<Result<(u64, u32)>>>,
    done: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Worker {
    fn start(file: &std::fs::File, path: &Path) -> Result<Worker> {
        let file = file.try_clone().map_err(|e| Error::io("open", path, e))?;
        let named = path;
        let path = path.to_path_buf();
        let (tx, rx) = std::sync::mpsc::sync_channel::<u64>(WORKER_QUEUE);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = done.clone();
        let handle = std::thread::Builder::new()
            .name("haar-stage-readback".into())
            .spawn(move || {
                let mut buf = vec![0u8; PIECE as usize];
                let (mut at, mut crc) = (0u64, 0u32);
                for end in rx {
                    if end > at {
                        crc = pread_crc(&file, &path, &mut buf, at, end, crc)?;
                        at = end;
                        seen.store(at, std::sync::atomic::Ordering::Release);
                    }
                }
                Ok((at, crc))
            })
            .map_err(|e| Error::io("start the read-back of", named, e))?;
        Ok(Worker {
            tx: Some(tx),
            handle: Some(handle),
            done,
        })
    }

    /// Bytes read back so far.
    fn done(&self) -> u64 {
        self.done.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Has `[.., len)` read back; `false` if the thread has ended (on an error: see
    /// [`Worker::join`]).
    fn send(&self, len: u64) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.send(len).is_ok())
    }

    /// Waits for everything sent to be read back; what was (length, CRC-32C) or the error.
    fn join(&mut self, path: &Path) -> Result<(u64, u32)> {
        self.tx.take();
        match self.handle.take().map(|h| h.join()) {
            Some(r) => joined(r, "read back", path, "the read-back thread"),
            None => Err(Error::io(
                "read back",
                path,
                std::io::Error::other("the read-back thread was already joined"),
            )),
        }
    }
}

impl Drop for Worker {
    /// A task that fails or is cancelled leaves no thread behind reading its removed file.
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// `crc` extended by the bytes `[from, end)` of `file`, read by `pread` in pieces of `buf`'s
/// length; a file shorter than `end` fails (UnexpectedEof).
fn pread_crc(
    file: &std::fs::File,
    path: &Path,
    buf: &mut [u8],
    from: u64,
    end: u64,
    mut crc: u32,
) -> Result<u32> {
    use std::os::unix::fs::FileExt;
    let (mut at, cap) = (from, buf.len() as u64);
    while at < end {
        let piece = &mut buf[..(end - at).min(cap) as usize];
        file.read_exact_at(piece, at)
            .map_err(|e| Error::io("read back", path, e))?;
        crc = haar::crc32c_append(crc, piece);
        at += piece.len() as u64;
    }
    Ok(crc)
}

impl<'f> ReadBack<'f> {
    fn new(file: &'f std::fs::File, path: &'f Path, wb: WriteBehind) -> Result<Self> {
        // Segments are read back once waited for, then dropped here.
        let mut wb = wb.keep_cache();
        wb.begin(file, path)?;
        let worker = if wb.enabled() {
            None
        } else {
            Some(Worker::start(file, path)?)
        };
        Ok(ReadBack {
            file,
            path,
            wb,
            checked: 0,
            crc: 0,
            worker,
        })
    }

    /// Bytes the writer lets pass between calls of [`ReadBack::written`] (the caller
    /// flushes its buffer and calls it whenever the file's length crosses a multiple).
    fn step(&self) -> u64 {
        if self.wb.enabled() { SEGMENT } else { PIECE }
    }

    /// The file holds `len` bytes: moves the write-behind window on and reads back the
    /// segments made durable meanwhile; on a memory file system, hands everything written to
    /// the read-back thread and reports what it has read back.
    fn written(&mut self, len: u64, report: &mut dyn FnMut(Phase, u64)) -> Result<()> {
        if let Some(w) = &mut self.worker {
            if !w.send(len) {
                // The thread ended early: only on an error, which this returns.
                w.join(self.path)?;
            }
            let done = w.done();
            self.advance_to(done, report);
            return Ok(());
        }
        let end = self.wb.written(len)?;
        if end > self.checked {
            let (from, n) = (self.checked, end - self.checked);
            report(Phase::Durable, n);
            self.read_back(end, report)?;
            write_behind::drop_pages(self.file, from, n);
        }
        Ok(())
    }

    /// Reports `[checked, done)` durable (a memory file system has nothing to write back)
    /// and read back.
    fn advance_to(&mut self, done: u64, report: &mut dyn FnMut(Phase, u64)) {
        if done > self.checked {
            report(Phase::Durable, done - self.checked);
            report(Phase::Verified, done - self.checked);
            self.checked = done;
        }
    }

    /// The file is complete at `len` bytes: fdatasync (its data and the metadata to find it),
    /// reads back the rest; returns what was read back (length, CRC-32C), the length cut to
    /// the file's if it is shorter than what was read back (so it fails the comparison).
    fn finish(mut self, len: u64, report: &mut dyn FnMut(Phase, u64)) -> Result<(u64, u32)> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("fsync", self.path, e))?;
        let actual = self
            .file
            .metadata()
            .map_err(|e| Error::io("stat", self.path, e))?
            .len();
        if let Some(mut w) = self.worker.take() {
            w.send(actual);
            let (at, crc) = w.join(self.path)?;
            self.advance_to(at, report);
            self.crc = crc;
        } else {
            report(Phase::Durable, len.saturating_sub(self.checked));
            self.read_back(actual, report)?;
        }
        Ok((self.checked.min(actual), self.crc))
    }

    /// Reads `[checked, end)` back through a mapping (no copy into a buffer): the disk file
    /// system's path.
    fn read_back(&mut self, end: u64, report: &mut dyn FnMut(Phase, u64)) -> Result<()> {
        if end <= self.checked {
            return Ok(());
        }
        let n = end - self.checked;
        // SAFETY: the file is this task's temporary copy; nothing else writes or truncates it
        // while it is mapped. `checked` is a multiple of SEGMENT, hence of the page size.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(self.checked)
                .len(n as usize)
                .map(self.file)
        }
        .map_err(|e| Error::io("map", self.path, e))?;
        let _ = map.advise(memmap2::Advice::Sequential);
        self.crc = haar::crc32c_append(self.crc, &map);
        self.checked = end;
        report(Phase::Verified, n);
        Ok(())
    }
}

/// The GRIB file `src` (or every file below the directory `src`) archived into the store of
/// dataspace `space` and flushed; an input with any fault fails the task (nothing of it is
/// archived, as `haar archive` guarantees).
pub(crate) fn file_to_store(
    run: &mut impl Progress,
    spaces: &Dataspaces,
    src: &Path,
    space: &str,
) -> Result<()> {
    let mut files = Vec::new();
    collect_files(src, &mut files)?;
    let mut total = 0;
    for f in &files {
        total += std::fs::metadata(f)
            .map_err(|e| Error::io("stat", f, e))?
            .len();
    }
    run.plan_one(total);
    let mut store = spaces.open_store(space, true)?;
    let inputs = files
        .iter()
        .map(|f| haar::ingest::Input::File(f.clone()))
        .collect();
    let report = haar::ingest::ingest(
        &mut *store,
        inputs,
        &haar::ingest::IngestOptions::default(),
        &mut |p| run.set_done(p.bytes),
    )?;
    if !report.failed.is_empty() {
        return Err(Error::Usage(format!(
            "not archived into {space}: {}",
            report.failed.join("; ")
        )));
    }
    run.set_done(total);
    run.finish_one(space.into(), report.bytes, 0);
    Ok(())
}

/// The fields of `req` in dataspace `from` archived into dataspace `to` with the CRC-32C the
/// source store verified (the destination refuses bytes that do not match it), then flushed.
/// A thread reads the fields out of the source into reused buffers ([`FETCH_DEPTH`] + 1 of
/// them) while this one archives them, so reading the source runs beside writing the
/// destination. (Until issue 15's sixth round both ran on this thread: 0.2-0.3 s of a 2 s
/// stage of 4 GiB into a pmem store on /dev/shm.)
pub(crate) fn store_to_store(
    run: &mut impl Progress,
    spaces: &Dataspaces,
    from: &str,
    req: &Request,
    to: &str,
) -> Result<()> {
    let src = spaces.open_store(from, false)?;
    let total: u64 = src.list(req)?.iter().map(|f| f.data.length).sum();
    if total == 0 {
        return Err(Error::Missing(format!(
            "no field in dataspace {from} matches {req}"
        )));
    }
    run.plan_one(total);
    let mut dst = spaces.open_store(to, true)?;
    // Room for every byte is checked first (a pool that cannot hold them fails the task
    // before anything is copied), and a pmem pool grows as the copy needs it (design §5.1).
    dst.provision(total)?;
    let fetch = move |h: &Handover<(haar::Key, Vec<u8>, Option<u32>)>| {
        let one = std::slice::from_ref(req);
        Ok(retrieve_into(&*src, one, &mut |key, bytes, crc| {
            let mut buf = h.buffer()?;
            buf.extend_from_slice(bytes);
            h.send((key.clone(), buf, crc))
        })?)
    };
    let mut len = 0u64;
    let (archived, fetched) = fetched_beside(0, Path::new(from), fetch, |(key, buf, crc)| {
        if run.cancelled() {
            return Err(Error::Cancelled(run.id().into()));
        }
        let split = dst.split(&key)?;
        dst.archive_split(&split, &buf, crc)?;
        len += buf.len() as u64;
        run.advance_by(buf.len() as u64);
        Ok(buf)
    });
    archived?;
    let got = fetched?;
    if !got.missing.is_empty() {
        return Err(missing_in(from, &got.missing));
    }
    dst.flush()?;
    run.finish_one(to.into(), len, 0);
    Ok(())
}

fn collect_files(p: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    let meta = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::Missing(format!("source {} does not exist", p.display()))
        }
        _ => Error::io("stat", p, e),
    })?;
    if meta.is_file() {
        out.push(p.into());
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(p)
        .map_err(|e| Error::io("list", p, e))?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for e in entries {
        collect_files(&e, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    /// Writes `data` to a new file in `dir` in pieces of `sizes` (cycled), calling the
    /// read-back as `store_to_file` does; returns what it read back and the bytes reported
    /// per phase, and what it had read back before `finish`.
    fn write_and_read_back(
        dir: &Path,
        wb: WriteBehind,
        data: &[u8],
        sizes: &[usize],
        tamper: Option<u64>,
        cut: bool,
    ) -> (Result<(u64, u32)>, [u64; 3], u64) {
        let path = dir.join("out");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        let mut phases = [0u64; 3];
        let mut report = |p: Phase, n: u64| phases[p as usize] += n;
        let mut back = ReadBack::new(&file, &path, wb).unwrap();
        let (mut len, mut k) = (0u64, 0);
        let mut out = std::io::BufWriter::with_capacity(64 << 10, &file);
        while (len as usize) < data.len() {
            let n = sizes[k % sizes.len()].min(data.len() - len as usize);
            out.write_all(&data[len as usize..len as usize + n])
                .unwrap();
            let before = len;
            len += n as u64;
            k += 1;
            let step = back.step();
            if before / step != len / step {
                out.flush().unwrap();
                if let Some(at) = tamper.filter(|&at| at < len) {
                    // A byte changed between the write and its read-back.
                    file.write_at(&[data[at as usize] ^ 1], at).unwrap();
                }
                back.written(len, &mut report).unwrap();
            }
        }
        out.flush().unwrap();
        drop(out);
        let before_finish = back.checked;
        if cut {
            file.set_len(len - 1).unwrap();
        }
        let r = back.finish(len, &mut report);
        (r, phases, before_finish)
    }

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 131 + i / 4099) as u8).collect()
    }

    #[test]
    fn on_a_memory_fs_the_read_back_thread_gives_the_files_crc_and_reports_every_byte_once() {
        let d = tempfile::tempdir().unwrap();
        // Fields of odd sizes, some under the 64 KiB buffer, some over a piece.
        let data = data(5 * PIECE as usize + 12_345);
        let sizes = [700 << 10, 300 << 10, 17, (2 << 20) + 5, 40_000];
        let (r, phases, _) = write_and_read_back(
            d.path(),
            WriteBehind::new(false),
            &data,
            &sizes,
            None,
            false,
        );
        let len = data.len() as u64;
        assert_eq!(r.unwrap(), (len, haar::crc32c(&data)));
        assert_eq!(phases, [0, len, len], "durable and verified once each");
    }

    #[test]
    fn a_file_cut_short_before_finish_fails_the_comparison() {
        for wb in [WriteBehind::new(false), WriteBehind::new(true)] {
            let d = tempfile::tempdir().unwrap();
            let data = data(2 * PIECE as usize + 10);
            let len = data.len() as u64;
            let (r, _, _) = write_and_read_back(d.path(), wb, &data, &[1 << 20], None, true);
            // Either the read-back fails (the bytes are gone) or what it returns differs.
            if let Ok(back) = r {
                assert_ne!(back, (len, haar::crc32c(&data)));
            }
        }
    }

    #[test]
    fn a_byte_changed_before_its_read_back_changes_the_crc() {
        let d = tempfile::tempdir().unwrap();
        let data = data(3 * PIECE as usize + 999);
        let sizes = [1 << 20];
        let (r, _, _) = write_and_read_back(
            d.path(),
            WriteBehind::new(false),
            &data,
            &sizes,
            Some(PIECE + 7),
            false,
        );
        assert_ne!(r.unwrap().1, haar::crc32c(&data));
    }

    #[test]
    fn the_mapped_read_back_of_a_disk_fs_gives_the_same_crc() {
        let d = tempfile::tempdir().unwrap();
        let data = data(3 * PIECE as usize + 999);
        let (r, phases, _) = write_and_read_back(
            d.path(),
            WriteBehind::new(true),
            &data,
            &[1 << 20],
            None,
            false,
        );
        let len = data.len() as u64;
        assert_eq!(r.unwrap(), (len, haar::crc32c(&data)));
        assert_eq!(phases, [0, len, len]);
    }
}
