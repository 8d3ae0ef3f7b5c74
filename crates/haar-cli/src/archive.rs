//! `haar archive`: GRIB files (keys from ecCodes) or raw files with `--key`.
//!
//! Policy (documented in `haar archive --help`): a file with any fault archives nothing; the
//! other files are archived; one flush at the end.
//!
//! Pipeline: into a local store files are memory-mapped (no copy) under a SIGBUS guard
//! ([`crate::guarded_map`]: a file truncated meanwhile reads as zeros and is refused
//! afterwards, never a crash); with `--servers` they are read (read(2) into reused buffers) and
//! checked once read. Files are framed in Rust; one key worker per core reads the messages'
//! MARS keys through ecCodes, in file and message order, running ahead into the next files.
//! The main thread stores a file's fields in message order as their keys arrive, overlapping
//! the copy with the keying of the same file, and extracts keys too while it waits, so every
//! core stays busy. A fault in a later message, or a change of the file, makes the store forget
//! the file's fields ([`Store::discard_since`]: nothing is visible before the flush, which is
//! the commit), which is what keeps the policy above. With `--servers` (fields cannot be taken
//! back once sent) a file's fields are sent only once all of its messages have keys. Files are
//! opened at most [`LOOKAHEAD`] ahead of the one being stored.

use std::collections::VecDeque;
use std::io::Read;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use haar_core::Key;
use haar_core::request::Request;
use haar_core::schema::{Schema, SplitKey};
use haar_core::value::Context;
use haar_store::Store;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use crate::Failure;
use crate::args::{ArchiveArgs, Cli};
use crate::open;

/// Files opened (read and framed) ahead of the one being stored, so key workers never wait
/// for the main thread while it copies.
const LOOKAHEAD: usize = 4;

fn resolve_filter(store: &Store, text: &Option<String>) -> Result<Option<Request>, Failure> {
    let Some(text) = text else { return Ok(None) };
    let req = Request::parse(text).map_err(|e| Failure::usage(format!("request {text:?}: {e}")))?;
    Ok(Some(store.resolve(&req)?.0))
}

/// Bytes per read(2): large enough that syscalls cost nothing measurable, small enough that
/// the file position shows a read in progress (the truncation test watches it).
const READ_CHUNK: usize = 8 << 20;

/// Reusable input buffers: anonymous mappings advised as huge pages. A file is read into the
/// smallest free buffer that holds it, and the buffer comes back when the file is stored, so
/// later files are read into pages that are already resident (first touch of fresh memory
/// costs more than the copy itself, FACTS).
#[derive(Default)]
struct Buffers(Mutex<Vec<memmap2::MmapMut>>);

impl Buffers {
    fn take(&self, len: usize) -> std::io::Result<memmap2::MmapMut> {
        let mut free = self.0.lock().unwrap();
        let best = (free.iter().enumerate())
            .filter(|(_, m)| m.len() >= len)
            .min_by_key(|(_, m)| m.len())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(free.swap_remove(i));
        }
        drop(free);
        let m = memmap2::MmapOptions::new().len(len).map_anon()?;
        #[cfg(target_os = "linux")]
        let _ = m.advise(memmap2::Advice::HugePage);
        Ok(m)
    }

    fn give(&self, m: memmap2::MmapMut) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(m);
    }
}

/// An input file's bytes, privately owned: read with read(2), never mapped, so a file
/// truncated or rewritten while it is archived cannot fault (SIGBUS) or change bytes under
/// ecCodes; [`load`] notices the change instead.
struct Bytes {
    data: Data,
    len: usize,
}

enum Data {
    /// Mapped (local stores): no copy; a truncation reads zeros instead of faulting, and
    /// [`Bytes::changed`] says so.
    Mapped(crate::guarded_map::GuardedMap),
    /// A pooled buffer, returned to its pool on drop.
    Pooled(Option<memmap2::MmapMut>, Arc<Buffers>),
    /// Not a regular file (a pipe), or empty.
    Owned(Vec<u8>),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.data {
            Data::Mapped(m) => m,
            Data::Pooled(m, _) => &m.as_ref().expect("held until drop")[..self.len],
            Data::Owned(v) => v,
        }
    }
}

impl Bytes {
    /// True if the file changed since it was opened, so these bytes must not be archived
    /// (only mapped bytes can; read bytes were checked once read).
    fn changed(&self) -> bool {
        matches!(&self.data, Data::Mapped(m) if m.changed())
    }
}

/// The refusal of a file that changed while haar used its bytes.
/// A store write that failed because its source, a mapped input, vanished under it: where user
/// code gets SIGBUS (caught by the guard), the kernel's copy in write(2) reports EFAULT. The
/// input changed, not the store (a failed append leaves the writer as it was).
fn source_vanished(e: &haar_store::Error) -> bool {
    matches!(e, haar_store::Error::Io { source, .. } if haar_store::store::os_error(source) == Some(libc::EFAULT))
}

fn changed_while_read(name: &str) -> String {
    format!(
        "{name}: changed while being read (truncated, extended or rewritten meanwhile); nothing from it is archived; archive it again once no one is writing it"
    )
}

impl Drop for Bytes {
    fn drop(&mut self) {
        if let Data::Pooled(m, pool) = &mut self.data
            && let Some(m) = m.take()
        {
            pool.give(m);
        }
    }
}

/// Fills `buf` from `file` in chunks of at most [`READ_CHUNK`]; the bytes read (fewer at end
/// of file).
fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let end = buf.len().min(got + READ_CHUNK);
        match file.read(&mut buf[got..end]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads a whole input file. A regular file must have the same length and modification time
/// after the read as before it and end where its length said: otherwise someone truncated,
/// extended or rewrote it meanwhile, the bytes may mix two versions, and the file is refused.
fn load(path: &Path, pool: &Arc<Buffers>, map: bool) -> Result<Bytes, String> {
    let name = path.display();
    let cannot = |e: std::io::Error| format!("{name}: cannot read: {e}");
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    let before = file.metadata().map_err(cannot)?;
    if map && before.is_file() && before.len() > 0 {
        let copy = file.try_clone().map_err(cannot)?;
        if let Some(m) = crate::guarded_map::GuardedMap::new(copy, &before) {
            let len = m.len();
            return Ok(Bytes {
                data: Data::Mapped(m),
                len,
            });
        }
    }
    if !before.is_file() || before.len() == 0 {
        let mut v = Vec::new();
        file.read_to_end(&mut v).map_err(cannot)?;
        let len = v.len();
        return Ok(Bytes {
            data: Data::Owned(v),
            len,
        });
    }
    let len = usize::try_from(before.len()).map_err(|_| format!("{name}: too large to read"))?;
    let mut buf = pool
        .take(len)
        .map_err(|e| format!("{name}: cannot allocate {len} bytes to read it into: {e}"))?;
    let read = read_full(&mut file, &mut buf[..len]).and_then(|got| {
        // One byte more: a file that grew meanwhile does not end at `len`.
        let extra = if got == len {
            read_full(&mut file, &mut [0u8; 1])?
        } else {
            0
        };
        Ok((got, extra, file.metadata()?))
    });
    let (got, extra, after) = match read {
        Ok(r) => r,
        Err(e) => {
            pool.give(buf);
            return Err(cannot(e));
        }
    };
    let same = got == len
        && extra == 0
        && after.len() == before.len()
        && after.modified().ok() == before.modified().ok();
    if !same {
        pool.give(buf);
        return Err(format!(
            "{name}: changed while being read (it was {len} bytes when opened, {got}{} bytes could be read, it is {} bytes now: truncated, extended or rewritten meanwhile); nothing from it is archived; archive it again once no one is writing it",
            if extra > 0 { "+" } else { "" },
            after.len()
        ));
    }
    Ok(Bytes {
        data: Data::Pooled(Some(buf), pool.clone()),
        len,
    })
}

/// What a file's fields are filtered and keyed with: the same for every message.
struct Keying<'a> {
    schema: &'a Schema,
    ctx: &'a Context,
    overrides: &'a Key,
    include: &'a Option<Request>,
    exclude: &'a Option<Request>,
}

/// Outcome of one message: its split key, `None` when a filter leaves it out, or the fault.
type Outcome = Result<Option<SplitKey>, String>;

impl Keying<'_> {
    fn message(&self, name: &str, msg: &[u8], number: usize, offset: usize) -> Outcome {
        let at = || format!("{name}: message {number} (1-based) at byte offset {offset}");
        let pairs = haar_grib::mars_keys(msg).map_err(|e| format!("{}: {e}", at()))?;
        let mut key: Key = pairs.into_iter().collect();
        for (k, v) in self.overrides.iter() {
            key.push(k, v);
        }
        let split = self
            .schema
            .split(&key, self.ctx)
            .map_err(|e| format!("{}: key {key}: {e}", at()))?;
        let full = split.full();
        let keep = self.include.as_ref().is_none_or(|r| r.matches(&full))
            && !self.exclude.as_ref().is_some_and(|r| r.matches(&full));
        Ok(keep.then_some(split))
    }
}

/// One opened GRIB file whose messages are being keyed.
struct Job {
    name: String,
    bytes: Bytes,
    /// (0-based message number, byte offset, length) of every framed message.
    msgs: Vec<(usize, usize, usize)>,
    /// Next message to claim.
    next: AtomicUsize,
    /// Messages finished (keyed, filtered out, failed or skipped after a fault).
    done: AtomicUsize,
    /// Lowest message position that failed; messages after it are skipped, not keyed.
    first_fault: AtomicUsize,
    outcomes: Vec<OnceLock<Outcome>>,
}

impl Job {
    fn complete(&self) -> bool {
        self.done.load(Ordering::Acquire) == self.msgs.len()
    }

    /// Claims and keys one message; false when none is left to claim.
    fn work_one(&self, keying: &Keying, shared: &Shared) -> bool {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(&(index, offset, len)) = self.msgs.get(i) else {
            return false;
        };
        if i < self.first_fault.load(Ordering::Relaxed) {
            let r = keying.message(
                &self.name,
                &self.bytes[offset..offset + len],
                index + 1,
                offset,
            );
            if r.is_err() {
                self.first_fault.fetch_min(i, Ordering::Relaxed);
            }
            let _ = self.outcomes[i].set(r);
        }
        self.done.fetch_add(1, Ordering::AcqRel);
        // Every message, not only the last: the main thread stores a file's fields in message
        // order as they come. Under the lock, so a waiter that checked cannot miss the wake-up.
        let _guard = shared.queue.lock().unwrap();
        shared.wake.notify_all();
        true
    }

    /// The outcome of message position `i`, keying this file's messages while it is not ready;
    /// `None` if it was skipped after an earlier fault.
    fn outcome(&self, i: usize, keying: &Keying, shared: &Shared) -> Option<&Outcome> {
        loop {
            if let Some(o) = self.outcomes[i].get() {
                return Some(o);
            }
            if i >= self.first_fault.load(Ordering::Relaxed) {
                return None;
            }
            if !self.work_one(keying, shared) {
                // Every message is claimed: wait for the worker keying this one.
                let mut q = shared.queue.lock().unwrap();
                while self.outcomes[i].get().is_none() && !self.complete() {
                    q = shared.wake.wait(q).unwrap();
                }
                return self.outcomes[i].get();
            }
        }
    }

    /// The file's fields in message order, or its first fault.
    fn fields(&self) -> Result<Prepared, String> {
        let mut fields = Vec::with_capacity(self.msgs.len());
        let mut skipped = 0;
        for (slot, &(_, offset, len)) in self.outcomes.iter().zip(&self.msgs) {
            match slot.get() {
                Some(Ok(Some(split))) => fields.push((split.clone(), offset..offset + len)),
                Some(Ok(None)) => skipped += 1,
                Some(Err(e)) => return Err(e.clone()),
                None => unreachable!("messages before the first fault are all keyed"),
            }
        }
        Ok(Prepared { fields, skipped })
    }
}

/// State shared by the main thread and the key workers.
struct Shared {
    /// Opened files whose messages are not all claimed yet, oldest first; `None` when no more
    /// files will come.
    queue: Mutex<Option<VecDeque<Arc<Job>>>>,
    wake: Condvar,
}

impl Shared {
    /// The oldest job with a message left to claim, or `None` once no more will come.
    fn next_job(&self) -> Option<Arc<Job>> {
        let mut q = self.queue.lock().unwrap();
        loop {
            let jobs = q.as_mut()?;
            while jobs
                .front()
                .is_some_and(|j| j.next.load(Ordering::Relaxed) >= j.msgs.len())
            {
                jobs.pop_front();
            }
            if let Some(j) = jobs.front() {
                return Some(j.clone());
            }
            q = self.wake.wait(q).unwrap();
        }
    }
}

/// A file ready to archive: every field's split key and byte range.
struct Prepared {
    fields: Vec<(SplitKey, Range<usize>)>,
    skipped: usize,
}

/// A file after opening: GRIB messages to key, raw bytes to store whole, or a fault.
enum Opened {
    Grib(Arc<Job>),
    Raw(Bytes, SplitKey),
    Failed(String),
}

fn open_file(
    store: &Store,
    path: &Path,
    overrides: &Key,
    pool: &Arc<Buffers>,
    map: bool,
) -> Opened {
    let name = path.display().to_string();
    let bytes = match load(path, pool, map) {
        Ok(b) => b,
        Err(e) => return Opened::Failed(e),
    };
    match frame_file(store, &name, &bytes, overrides) {
        // Zeros where a truncated mapping was are no fault of the file's format.
        Err(_) if bytes.changed() => Opened::Failed(changed_while_read(&name)),
        Err(e) => Opened::Failed(e),
        Ok(Framed::Raw(split)) => Opened::Raw(bytes, split),
        Ok(Framed::Grib(msgs)) => {
            let outcomes = (0..msgs.len()).map(|_| OnceLock::new()).collect();
            Opened::Grib(Arc::new(Job {
                name,
                bytes,
                first_fault: AtomicUsize::new(msgs.len()),
                msgs,
                next: AtomicUsize::new(0),
                done: AtomicUsize::new(0),
                outcomes,
            }))
        }
    }
}

/// What framing found: GRIB messages (number, offset, length), or raw bytes to store whole.
enum Framed {
    Grib(Vec<(usize, usize, usize)>),
    Raw(SplitKey),
}

fn frame_file(store: &Store, name: &str, bytes: &[u8], overrides: &Key) -> Result<Framed, String> {
    let mut msgs = Vec::new();
    for m in haar_grib::messages(bytes) {
        match m {
            Ok(m) => msgs.push((m.index, m.offset as usize, m.bytes.len())),
            // No GRIB message at all: raw bytes, archived whole under --key.
            Err(haar_grib::FrameError::NotGrib { .. }) if msgs.is_empty() => {
                if overrides.is_empty() {
                    return Err(format!(
                        "{name}: not a GRIB file (no GRIB message found); to archive raw bytes give their key with --key k=v,..."
                    ));
                }
                return match store.split(overrides) {
                    Ok(split) => Ok(Framed::Raw(split)),
                    Err(e) => Err(format!("{name}: {e}")),
                };
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    }
    if msgs.is_empty() {
        return Err(format!("{name}: no complete GRIB message"));
    }
    Ok(Framed::Grib(msgs))
}

/// Closes the work queue when dropped: the key workers finish their message and return.
struct StopWorkers<'a>(&'a Shared);

impl Drop for StopWorkers<'_> {
    fn drop(&mut self) {
        let mut q = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
        *q = None;
        self.0.wake.notify_all();
    }
}

/// The bytes of a file being stored, whether keyed GRIB or raw.
trait AsBytes: Send + Sync {
    fn as_bytes(&self) -> &[u8];
    /// True if the file changed since it was opened (see [`Bytes::changed`]).
    fn changed(&self) -> bool;
}

impl AsBytes for Job {
    fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
    fn changed(&self) -> bool {
        self.bytes.changed()
    }
}

struct RawBytes(Bytes);

impl AsBytes for RawBytes {
    fn as_bytes(&self) -> &[u8] {
        &self.0
    }
    fn changed(&self) -> bool {
        self.0.changed()
    }
}

/// Runs `haar archive`.
pub fn run(cli: &Cli, a: &ArchiveArgs) -> Result<(), Failure> {
    // With --servers the local store only splits keys (in memory); fields go to the servers.
    let mut remote = open::remote(cli)?;
    let mut store = match remote {
        Some(_) => open::normaliser(cli)?,
        None => open::store(cli)?,
    };
    let overrides = match &a.key {
        Some(k) => Key::parse(k).map_err(|e| Failure::usage(format!("--key {k:?}: {e}")))?,
        None => Key::new(),
    };
    let include = resolve_filter(&store, &a.include)?;
    let exclude = resolve_filter(&store, &a.exclude)?;
    let total: u64 = a
        .files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {msg}",
        )
        .expect("valid template"),
    );
    let start = Instant::now();
    let mut summary = Vec::new();
    let mut failed = Vec::new();
    let (mut n_fields, mut n_bytes) = (0usize, 0u64);

    // The workers key with their own copies of the schema and context, so the store stays free
    // for the main thread to archive into.
    let (schema, ctx) = (store.schema().clone(), store.context().clone());
    let keying = Keying {
        schema: &schema,
        ctx: &ctx,
        overrides: &overrides,
        include: &include,
        exclude: &exclude,
    };
    let shared = Shared {
        queue: Mutex::new(Some(VecDeque::new())),
        wake: Condvar::new(),
    };
    let pool = Arc::new(Buffers::default());
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    std::thread::scope(|s| -> Result<(), Failure> {
        for _ in 0..workers {
            s.spawn(|| {
                while let Some(job) = shared.next_job() {
                    job.work_one(&keying, &shared);
                }
            });
        }
        // However this closure ends (an archive error returns early), the workers stop.
        let _stop = StopWorkers(&shared);
        let mut opened: VecDeque<Opened> = VecDeque::new();
        let mut to_open = a.files.iter();
        for path in &a.files {
            while opened.len() < LOOKAHEAD {
                let Some(p) = to_open.next() else { break };
                let o = open_file(&store, p, &overrides, &pool, remote.is_none());
                if let Opened::Grib(job) = &o {
                    let mut q = shared.queue.lock().unwrap();
                    q.as_mut()
                        .expect("open until the end")
                        .push_back(job.clone());
                    shared.wake.notify_all();
                }
                opened.push_back(o);
            }
            let (prepared, bytes) = match opened.pop_front().expect("opened in order") {
                Opened::Failed(msg) => {
                    failed.push(msg);
                    continue;
                }
                Opened::Raw(bytes, split) => {
                    let len = bytes.len();
                    let fields = vec![(split, 0..len)];
                    (
                        Prepared { fields, skipped: 0 },
                        Arc::new(RawBytes(bytes)) as Arc<dyn AsBytes>,
                    )
                }
                // A local store: each field is stored as soon as it and every message before
                // it have keys, while the workers key the rest of the file; if a later message
                // of the file fails, the store forgets the file's fields (nothing is visible
                // before the flush at the end, and the flush is the commit).
                Opened::Grib(job) if remote.is_none() => {
                    let checkpoint = store.checkpoint();
                    let (mut fields, mut skipped, mut fbytes) = (0usize, 0usize, 0u64);
                    let mut fault = None;
                    for (i, &(_, offset, len)) in job.msgs.iter().enumerate() {
                        match job.outcome(i, &keying, &shared) {
                            Some(Ok(Some(split))) => {
                                if let Err(e) = store.archive_split(
                                    split,
                                    &job.bytes[offset..offset + len],
                                    None,
                                ) {
                                    if !source_vanished(&e) {
                                        return Err(e.into());
                                    }
                                    fault = Some(changed_while_read(&job.name));
                                    break;
                                }
                                fields += 1;
                                fbytes += len as u64;
                                let n = n_fields + fields;
                                let secs = start.elapsed().as_secs_f64().max(1e-9);
                                bar.set_message(format!(
                                    "{n} fields, {:.0} fields/s",
                                    n as f64 / secs
                                ));
                            }
                            Some(Ok(None)) => skipped += 1,
                            Some(Err(e)) => {
                                fault = Some(e.clone());
                                break;
                            }
                            None => unreachable!("messages before the first fault are all keyed"),
                        }
                    }
                    // Checked last: a truncation may have shown up as zeros, or not at all.
                    if job.bytes.changed() {
                        fault = Some(changed_while_read(&job.name));
                    }
                    if let Some(e) = fault {
                        store.discard_since(&checkpoint);
                        failed.push(e);
                        continue;
                    }
                    n_fields += fields;
                    n_bytes += fbytes;
                    summary.push(json!({
                        "file": path.display().to_string(), "fields": fields,
                        "skipped": skipped, "bytes": fbytes,
                    }));
                    bar.inc(job.bytes.len() as u64);
                    continue;
                }
                // With --servers fields go out as they are archived and cannot be taken back:
                // a file's fields are sent only once all of its messages have keys.
                Opened::Grib(job) => {
                    // Help key this file's messages, then wait for the workers' last ones.
                    while job.work_one(&keying, &shared) {}
                    let mut q = shared.queue.lock().unwrap();
                    while !job.complete() {
                        q = shared.wake.wait(q).unwrap();
                    }
                    drop(q);
                    match job.fields() {
                        Ok(p) => (p, job as Arc<dyn AsBytes>),
                        Err(msg) => {
                            failed.push(msg);
                            continue;
                        }
                    }
                }
            };
            let owner = bytes;
            let bytes = owner.as_bytes();
            let checkpoint = remote.is_none().then(|| store.checkpoint());
            let mut fbytes = 0u64;
            let mut vanished = false;
            for (i, (split, range)) in prepared.fields.iter().enumerate() {
                match &mut remote {
                    Some(r) => r.archive(&split.full(), &bytes[range.clone()])?,
                    None => match store.archive_split(split, &bytes[range.clone()], None) {
                        Err(e) if source_vanished(&e) => {
                            vanished = true;
                            break;
                        }
                        r => r?,
                    },
                }
                fbytes += range.len() as u64;
                let n = n_fields + i + 1;
                let secs = start.elapsed().as_secs_f64().max(1e-9);
                bar.set_message(format!("{n} fields, {:.0} fields/s", n as f64 / secs));
            }
            // Mapped bytes (a local store) are checked after use; fields sent to servers were
            // read, and checked once read.
            if let Some(cp) = checkpoint
                && (vanished || owner.changed())
            {
                store.discard_since(&cp);
                failed.push(changed_while_read(&path.display().to_string()));
                continue;
            }
            n_fields += prepared.fields.len();
            n_bytes += fbytes;
            summary.push(json!({
                "file": path.display().to_string(), "fields": prepared.fields.len(),
                "skipped": prepared.skipped, "bytes": fbytes,
            }));
            bar.inc(bytes.len() as u64);
        }
        Ok(())
    })?;
    match &mut remote {
        Some(r) => r.flush()?,
        None => store.flush()?,
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            json!({"files": summary, "failed": failed, "fields": n_fields, "bytes": n_bytes, "seconds": secs})
        );
    } else {
        for s in &summary {
            println!(
                "{}: {} field(s), {:.1} MiB{}",
                s["file"].as_str().unwrap_or(""),
                s["fields"],
                s["bytes"].as_u64().unwrap_or(0) as f64 / 1048576.0,
                match s["skipped"].as_u64() {
                    Some(0) | None => String::new(),
                    Some(n) => format!(" ({n} filtered out)"),
                }
            );
        }
        println!(
            "archived and flushed {n_fields} field(s), {:.1} MiB in {secs:.2} s ({:.0} fields/s, {:.0} MiB/s)",
            n_bytes as f64 / 1048576.0,
            n_fields as f64 / secs.max(1e-9),
            n_bytes as f64 / 1048576.0 / secs.max(1e-9)
        );
    }
    if !failed.is_empty() {
        for f in &failed {
            eprintln!("haar: {f}");
        }
        return Err(Failure::usage(format!(
            "{} file(s) not archived (nothing from them was stored; the other files were archived and flushed)",
            failed.len()
        )));
    }
    Ok(())
}
