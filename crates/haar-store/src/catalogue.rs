//! The reader-side catalogue of one database (design §3.1): the runs its manifest names plus
//! an overlay of the commits after the manifest's position, and verified reads of the fields
//! they index. Also the merge that writes runs and publishes manifests.
//!
//! Owns the view, its fallbacks (a damaged or stale run or manifest is ignored and the log
//! replayed) and the checksum check on every read. Readers never write; only [`merge`] does,
//! under the catalogue's merge lock.

use std::collections::{HashMap, HashSet};

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use std::fs::{self, File};
use std::hash::BuildHasher;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use haar_core::Key;
use haar_core::request::{Request, Values};

use crate::backend::{Backend, Committed, DbReader, FieldBytes};
use crate::error::{Error, Result};
use crate::format::{self, DataRef};
use crate::run::{self, Dead, FLAG_BASE, Manifest, Run, RunRef, Slot};

/// When and how runs are merged (design §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergePolicy {
    /// Entries committed after the manifest's position that make a merge worth it; a
    /// reader's overlay holds at most about this many (twice, before it reloads).
    pub threshold: usize,
    /// Runs of one level that are merged into one run of the next level.
    pub fanout: usize,
    /// Merge in a background thread of the writing process after flushes.
    pub background: bool,
}

impl Default for MergePolicy {
    /// Threshold 8,192 and fanout 8, merging in the background; `HAAR_MERGE_THRESHOLD`
    /// overrides the threshold, and `HAAR_MERGE_THRESHOLD=0` turns background merging off
    /// (for measurements; `haar compact` still merges).
    fn default() -> Self {
        let env = std::env::var("HAAR_MERGE_THRESHOLD")
            .ok()
            .and_then(|v| v.parse::<usize>().ok());
        MergePolicy {
            threshold: env.filter(|&t| t > 0).unwrap_or(8192),
            fanout: 8,
            background: env != Some(0),
        }
    }
}

/// The whole state of a database, for statistics and purge: O(fields).
pub(crate) struct Full {
    pub(crate) fields: HashMap<(Key, Key), DataRef>,
    pub(crate) dead: Dead,
}

/// Encoded entry keys ([`format::RawEntry::key`]) → their state, in insertion order.
///
/// The overlay keeps the segments it replayed, and its table holds where each key lies in
/// them, so replaying a tail of thousands of entries copies no key and makes a few
/// allocations, not one per entry; dropping it frees those few. A fresh reader's first
/// retrieve pays both.
#[derive(Default)]
pub(crate) struct Overlay {
    segments: Vec<Vec<u8>>,
    entries: Vec<At>,
    table: HashTable<usize>,
}

/// Where an overlay key lies, and its state.
struct At {
    segment: usize,
    start: usize,
    len: usize,
    slot: Slot,
}

/// A replayed segment's entries, by position in its bytes: what [`Overlay::apply`] takes
/// once the decoded form (which borrows the bytes) is dropped.
pub(crate) struct Positions(Vec<(usize, usize, Slot)>);

impl Positions {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The positions of `seg`'s entries in `bytes`, the buffer it was decoded from.
    pub(crate) fn of(bytes: &[u8], seg: &format::RawSegment<'_>) -> Positions {
        let base = bytes.as_ptr() as usize;
        Positions(
            seg.entries
                .iter()
                .map(|e| (e.key.as_ptr() as usize - base, e.key.len(), e.slot))
                .collect(),
        )
    }
}

impl Overlay {
    fn hash(key: &[u8]) -> u64 {
        FxBuildHasher.hash_one(key)
    }

    fn key<'a>(segments: &'a [Vec<u8>], at: &At) -> &'a [u8] {
        &segments[at.segment][at.start..at.start + at.len]
    }

    fn find(&self, key: &[u8]) -> Option<usize> {
        self.table
            .find(Self::hash(key), |&i| {
                Self::key(&self.segments, &self.entries[i]) == key
            })
            .copied()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.segments.clear();
        self.entries.clear();
        self.table.clear();
    }

    /// The state of `key`, if the overlay holds it.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Slot> {
        self.find(key).map(|i| &self.entries[i].slot)
    }

    /// Applies the entries at `positions` of the segment `bytes` in order, counting the
    /// fields they mask in `dead`.
    pub(crate) fn apply(&mut self, dead: &mut Dead, bytes: Vec<u8>, positions: &Positions) {
        let segment = self.segments.len();
        self.segments.push(bytes);
        let Overlay {
            segments,
            entries,
            table,
        } = self;
        let n = positions.0.len();
        entries.reserve(n);
        table.reserve(n, |&j| Self::hash(Self::key(segments, &entries[j])));
        for &(start, len, slot) in &positions.0 {
            let at = At {
                segment,
                start,
                len,
                slot,
            };
            let key = Self::key(segments, &at);
            let hash = Self::hash(key);
            match table.find(hash, |&i| Self::key(segments, &entries[i]) == key) {
                Some(&i) => {
                    if let Some(old) = std::mem::replace(&mut entries[i].slot, slot) {
                        dead.kill(&old);
                    }
                }
                None => {
                    table.insert_unique(hash, entries.len(), |&j| {
                        Self::hash(Self::key(segments, &entries[j]))
                    });
                    entries.push(at);
                }
            }
        }
    }

    /// Every (encoded key, state), in the order the keys were first inserted.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &Slot)> {
        self.entries
            .iter()
            .map(|at| (Self::key(&self.segments, at), &at.slot))
    }
}

/// Does the encoded entry key `raw` of database `db` satisfy `req` (complete match)?
fn matches_raw(req: &Request, db: &Key, raw: &[u8]) -> bool {
    let (index, datum) = format::raw_parts(raw);
    req.params.iter().all(|p| {
        let v = db.get(&p.keyword).or_else(|| {
            index
                .clone()
                .chain(datum.clone())
                .find(|(k, _)| *k == p.keyword)
                .map(|(_, v)| v)
        });
        match (v, &p.values) {
            (_, Values::All) => true,
            (Some(v), Values::List(l)) => l.iter().any(|x| x == v),
            (None, Values::List(l)) => l.iter().any(String::is_empty),
        }
    })
}

/// Identity of a manifest file: a publish renames a new file into place.
type Stamp = (u64, i64, i64);

fn stamp(path: &Path) -> Option<Stamp> {
    fs::metadata(path)
        .ok()
        .map(|m| (m.ino(), m.mtime(), m.mtime_nsec()))
}

/// Reader-side view of one database.
pub(crate) struct Catalogue {
    pub(crate) reader: Box<dyn DbReader>,
    dir: Option<PathBuf>,
    /// Oldest first.
    runs: Vec<Run>,
    stamp: Option<Stamp>,
    /// Encoded (index, datum) key → state, for the commits after the manifest's position.
    overlay: Overlay,
    overlay_dead: Dead,
    /// Entries applied to the overlay since the runs were loaded.
    applied: usize,
    pub(crate) problems: Vec<String>,
    threshold: usize,
}

/// Loads the manifest of `dir` and its runs if they belong to the log `log_id`; `Ok(None)`
/// when there is no manifest, `Err(text)` when it or a run cannot be used.
fn load(dir: &Path, log_id: u64) -> std::result::Result<Option<(Manifest, Vec<Run>)>, String> {
    let path = dir.join(run::MANIFEST_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let m = Manifest::decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if m.log_id != log_id {
        // Written for a log since replaced (wipe, purge): stale, not damaged.
        return Ok(None);
    }
    let mut runs = Vec::with_capacity(m.runs.len());
    for rr in &m.runs {
        runs.push(Run::open(dir, rr).map_err(|e| e.to_string())?);
    }
    Ok(Some((m, runs)))
}

impl Catalogue {
    /// Opens the catalogue of `db` over `reader` (positioned at the start of the log): the
    /// manifest's runs, then the commits after its position.
    pub(crate) fn open(
        backend: &dyn Backend,
        db: &Key,
        mut reader: Box<dyn DbReader>,
        threshold: usize,
    ) -> Result<Catalogue> {
        let dir = backend.catalogue_dir(db)?;
        let mut problems = Vec::new();
        let mut runs = Vec::new();
        let mut st = None;
        if let Some(dir) = &dir {
            // A merge may replace a run between reading the manifest and opening it: retry.
            for attempt in 0..3 {
                st = stamp(&dir.join(run::MANIFEST_FILE));
                match load(dir, reader.log_id()) {
                    Ok(None) => break,
                    Ok(Some((m, r))) => {
                        reader.seek(m.position);
                        problems = m.problems;
                        runs = r;
                        break;
                    }
                    Err(e) if attempt == 2 => {
                        problems.push(format!(
                            "catalogue {e}; the commit log was replayed instead"
                        ));
                        st = None;
                    }
                    Err(_) => {}
                }
            }
        }
        let mut cat = Catalogue {
            reader,
            dir,
            runs,
            stamp: st,
            overlay: Overlay::default(),
            overlay_dead: Dead::default(),
            applied: 0,
            problems,
            threshold,
        };
        cat.apply_new(db)?;
        Ok(cat)
    }

    fn reset(&mut self) {
        self.runs.clear();
        self.overlay.clear();
        self.overlay_dead = Dead::default();
        self.problems.clear();
    }

    /// Applies every segment committed since the last poll to the overlay.
    fn apply_new(&mut self, db: &Key) -> Result<()> {
        for c in self.reader.poll()? {
            match c {
                Committed::Wiped => self.reset(),
                Committed::Unreadable { origin, detail } => {
                    self.problems.push(format!("{origin}: {detail}"))
                }
                Committed::Segment { bytes, origin } => match format::decode_segment_raw(&bytes) {
                    Err(e) => self.problems.push(format!("{origin}: index segment: {e}")),
                    Ok(seg) if &seg.db != db => self.problems.push(format!(
                        "{origin}: index segment names database {}, expected {db}",
                        seg.db
                    )),
                    Ok(seg) => {
                        if seg.is_snapshot() {
                            self.reset();
                        }
                        self.applied += seg.entries.len();
                        let at = Positions::of(&bytes, &seg);
                        drop(seg);
                        self.overlay.apply(&mut self.overlay_dead, bytes, &at);
                    }
                },
            }
        }
        Ok(())
    }

    /// Brings the view up to date: new commits, or the manifest published since (when the
    /// overlay has grown past twice the merge threshold).
    pub(crate) fn refresh(&mut self, backend: &dyn Backend, db: &Key) -> Result<()> {
        self.apply_new(db)?;
        if self.applied > 2 * self.threshold
            && let Some(dir) = &self.dir
            && stamp(&dir.join(run::MANIFEST_FILE)) != self.stamp
            && let Some(reader) = backend.open_reader(db)?
        {
            *self = Catalogue::open(backend, db, reader, self.threshold)?;
        }
        Ok(())
    }

    /// Drops the runs after `e` (a damaged run) and replays the whole log instead.
    fn fall_back(&mut self, backend: &dyn Backend, db: &Key, e: &Error) -> Result<()> {
        let Some(reader) = backend.open_reader(db)? else {
            self.reset();
            return Ok(());
        };
        self.reader = reader;
        self.dir = None;
        self.reset();
        self.applied = 0;
        self.apply_new(db)?;
        self.problems.push(format!(
            "catalogue {e}; the commit log was replayed instead"
        ));
        Ok(())
    }

    fn lookup_runs(&self, index: &Key, datum: &Key) -> Result<Option<DataRef>> {
        if !self.overlay.is_empty()
            && let Some(slot) = self.overlay.get(&format::raw_key(index, datum))
        {
            return Ok(*slot);
        }
        for r in self.runs.iter().rev() {
            if let Some(slot) = r.lookup(index, datum)? {
                return Ok(slot);
            }
        }
        Ok(None)
    }

    /// Where the field (index, datum) is, if it is there.
    pub(crate) fn lookup(
        &mut self,
        backend: &dyn Backend,
        db: &Key,
        index: &Key,
        datum: &Key,
    ) -> Result<Option<DataRef>> {
        match self.lookup_runs(index, datum) {
            Err(e @ Error::Corrupt { .. }) => {
                self.fall_back(backend, db, &e)?;
                self.lookup_runs(index, datum)
            }
            other => other,
        }
    }

    fn list_runs(&self, db: &Key, req: &Request) -> Result<Vec<(Key, Key, DataRef)>> {
        // Matches per source (runs oldest first, then the overlay); each source's are exact.
        let mut sources: Vec<Vec<(Key, Key, Slot)>> = Vec::new();
        for r in &self.runs {
            let mut v = Vec::new();
            r.scan(db, req, &mut |i, d, s| v.push((i.clone(), d, s)))?;
            if !v.is_empty() {
                sources.push(v);
            }
        }
        let v: Vec<(Key, Key, Slot)> = (self.overlay.iter())
            .filter(|(raw, _)| matches_raw(req, db, raw))
            .map(|(raw, s)| {
                let (i, d) = format::raw_keys(raw);
                (i, d, *s)
            })
            .collect();
        if !v.is_empty() {
            sources.push(v);
        }
        let by_key = |a: &(Key, Key, Slot), b: &(Key, Key, Slot)| (&a.0, &a.1).cmp(&(&b.0, &b.1));
        let merged = if sources.len() <= 1 {
            // The common case (a step's fields sit in one run): already in order unless
            // several keyword lists share an index key.
            let mut v = sources.pop().unwrap_or_default();
            if !v.is_sorted_by(|a, b| by_key(a, b).is_le()) {
                v.sort_by(by_key);
            }
            v
        } else {
            // Newest source first among equal keys, then keep the first of each key.
            let mut all: Vec<(usize, (Key, Key, Slot))> = sources
                .into_iter()
                .enumerate()
                .flat_map(|(rank, v)| v.into_iter().map(move |e| (rank, e)))
                .collect();
            all.sort_by(|a, b| by_key(&a.1, &b.1).then(b.0.cmp(&a.0)));
            all.dedup_by(|later, first| by_key(&later.1, &first.1).is_eq());
            all.into_iter().map(|(_, e)| e).collect()
        };
        Ok(merged
            .into_iter()
            .filter_map(|(i, d, s)| s.map(|r| (i, d, r)))
            .collect())
    }

    /// Every field matching `req` (resolved), sorted by (index, datum).
    pub(crate) fn list(
        &mut self,
        backend: &dyn Backend,
        db: &Key,
        req: &Request,
    ) -> Result<Vec<(Key, Key, DataRef)>> {
        match self.list_runs(db, req) {
            Err(e @ Error::Corrupt { .. }) => {
                self.fall_back(backend, db, &e)?;
                self.list_runs(db, req)
            }
            other => other,
        }
    }

    fn full_runs(&self) -> Result<Full> {
        let mut fields: HashMap<(Key, Key), DataRef> = HashMap::new();
        let mut dead = Dead::default();
        let apply = |fields: &mut HashMap<(Key, Key), DataRef>, dead: &mut Dead, k, s| {
            let old = match s {
                Some(r) => fields.insert(k, r),
                None => fields.remove(&k),
            };
            if let Some(old) = old {
                dead.kill(&old);
            }
        };
        for r in &self.runs {
            dead.add(&r.dead);
            r.for_each(&mut |i, d, s| apply(&mut fields, &mut dead, (i.clone(), d), s))?;
        }
        for (raw, s) in self.overlay.iter() {
            apply(&mut fields, &mut dead, format::raw_keys(raw), *s);
        }
        dead.add(&self.overlay_dead);
        Ok(Full { fields, dead })
    }

    /// The whole state (statistics, purge).
    pub(crate) fn full(&mut self, backend: &dyn Backend, db: &Key) -> Result<Full> {
        match self.full_runs() {
            Err(e @ Error::Corrupt { .. }) => {
                self.fall_back(backend, db, &e)?;
                self.full_runs()
            }
            other => other,
        }
    }

    /// The verified bytes of one field and their CRC-32C, lent by the backend where it can (no
    /// copy), else read into `scratch`; `None` if the field is not there. A vanished file (concurrent purge) is
    /// retried once after a refresh.
    pub(crate) fn fetch(
        &mut self,
        backend: &dyn Backend,
        db: &Key,
        index: &Key,
        datum: &Key,
        mut scratch: Vec<u8>,
    ) -> Result<Option<(FieldBytes, u32)>> {
        // A location can go stale between lookup and read (posix: a purge replaced the data
        // file; pmem: a reclaim moved the epoch on): look the key up again.
        for attempt in 0..3 {
            let Some(data) = self.lookup(backend, db, index, datum)? else {
                return Ok(None);
            };
            match self.reader.read_bytes(&data, scratch) {
                Ok(bytes) => {
                    let crc = haar_persist::crc32c(&bytes);
                    if crc != data.crc {
                        return Err(self.crc_error(db, index, datum, &data, crc));
                    }
                    return Ok(Some((bytes, crc)));
                }
                Err(Error::Io { source, .. })
                    if attempt < 2 && source.kind() == io::ErrorKind::NotFound =>
                {
                    self.refresh(backend, db)?;
                    scratch = Vec::new();
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Bytes `off..off + len` of the committed field at `data`, lent where the backend can;
    /// not checked against the field's CRC-32C, which covers the whole field.
    pub(crate) fn read_range(&self, data: &DataRef, off: u64, len: u64) -> Result<FieldBytes> {
        if off.checked_add(len).is_none_or(|end| end > data.length) {
            return Err(Error::BadRequest {
                request: self.reader.locate(data),
                reason: format!(
                    "bytes {off}..{} are outside the field's {} bytes",
                    off.saturating_add(len),
                    data.length
                )
                .into(),
            });
        }
        let part = DataRef {
            offset: data.offset + off,
            length: len,
            ..*data
        };
        self.reader.read_bytes(&part, Vec::new())
    }

    pub(crate) fn crc_error(
        &self,
        db: &Key,
        index: &Key,
        datum: &Key,
        data: &DataRef,
        crc: u32,
    ) -> Error {
        Error::checksum(
            self.reader.locate(data),
            format_args!("key {}", db.joined(index).joined(datum)),
            crc,
            data.crc,
            "index says",
            "other fields are unaffected",
        )
    }
}

/// Opens (creating) the lock file at `path` and takes `flock(op)` on it; `None` when `op`
/// has `LOCK_NB` and the lock cannot be taken now. The lock lasts as long as the file.
fn lock_file(path: &Path, op: libc::c_int) -> Result<Option<File>> {
    let f = crate::perm::create_options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| Error::io("open", path, e))?;
    match crate::posix::flock(&f, op) {
        Ok(()) => Ok(Some(f)),
        Err(_) if op & libc::LOCK_NB != 0 => Ok(None),
        Err(e) => Err(Error::io("lock", path, e)),
    }
}

/// Writes manifest `m` into place and removes what it no longer names (part files of
/// compactions only with `parts`: when no compaction can be running).
fn publish(dir: &Path, m: &Manifest, parts: bool) -> Result<()> {
    run::write_atomic(dir, run::MANIFEST_FILE, &m.encode())?;
    let keep: HashSet<u64> = m.runs.iter().map(|r| r.id).collect();
    let _ = run::remove_unreferenced(dir, &keep, parts);
    Ok(())
}

/// What a [`merge`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum MergeOutcome {
    /// The backend keeps no catalogue runs (memory).
    Unsupported,
    /// Another process is merging this database.
    Busy,
    /// The database does not exist.
    Gone,
    /// Too few new entries to be worth a merge.
    Nothing {
        /// Entries after the manifest's position.
        tail: usize,
    },
    /// Stopped on request (the store is closing); nothing was published.
    Stopped,
    /// A manifest was published.
    Published {
        /// Entries of the tail written as a new run.
        tail: usize,
        /// Runs the manifest names now.
        runs: usize,
        /// Entries in them.
        entries: u64,
    },
}

/// Merges the commits of `db` since its manifest's position into runs and publishes a new
/// manifest (design §3.1). With `full`, everything is merged into one run whatever the
/// policy says. Never changes the commit log; a merger killed at any point leaves the
/// previous manifest intact.
pub fn merge(
    backend: &dyn Backend,
    db: &Key,
    policy: &MergePolicy,
    stop: &AtomicBool,
    full: bool,
) -> Result<MergeOutcome> {
    let Some(dir) = backend.catalogue_dir(db)? else {
        return Ok(MergeOutcome::Unsupported);
    };
    match crate::perm::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(MergeOutcome::Gone),
        Err(e) => return Err(Error::io("create", &dir, e)),
    }
    let lock_path = dir.join(run::LOCK_FILE);
    let Some(lock) = lock_file(&lock_path, libc::LOCK_EX | libc::LOCK_NB)? else {
        return Ok(MergeOutcome::Busy);
    };
    let Some(mut reader) = backend.open_reader(db)? else {
        return Ok(MergeOutcome::Gone);
    };
    let (mut manifest, mut runs) = match load(&dir, reader.log_id()) {
        Ok(Some((m, r))) => {
            reader.seek(m.position);
            (m, r)
        }
        // No usable manifest: everything is tail.
        Ok(None) | Err(_) => (Manifest::default(), Vec::new()),
    };
    let mut tail = Overlay::default();
    let mut tail_dead = Dead::default();
    let mut tail_n = 0usize;
    let mut reset = false;
    let mut problems = std::mem::take(&mut manifest.problems);
    let commits = reader.poll()?;
    for c in commits {
        // (is a snapshot, entry positions) of a segment of this database; None for a wipe.
        let seg = match &c {
            Committed::Wiped => None,
            Committed::Unreadable { origin, detail } => {
                problems.push(format!("{origin}: {detail}"));
                continue;
            }
            Committed::Segment { bytes, origin } => match format::decode_segment_raw(bytes) {
                Ok(seg) if &seg.db == db => Some((seg.is_snapshot(), Positions::of(bytes, &seg))),
                Ok(seg) => {
                    problems.push(format!(
                        "{origin}: index segment names database {}, expected {db}",
                        seg.db
                    ));
                    continue;
                }
                Err(e) => {
                    problems.push(format!("{origin}: index segment: {e}"));
                    continue;
                }
            },
        };
        if seg.as_ref().is_none_or(|(snapshot, _)| *snapshot) {
            reset = true;
            tail.clear();
            tail_dead = Dead::default();
            problems.clear();
            runs.clear();
            manifest.runs.clear();
        }
        if let (Some((_, at)), Committed::Segment { bytes, .. }) = (seg, c) {
            tail_n += at.len();
            tail.apply(&mut tail_dead, bytes, &at);
        }
    }
    if !full && !reset && tail_n < policy.threshold {
        return Ok(MergeOutcome::Nothing { tail: tail_n });
    }
    // Phase 1, under the merge lock: the tail becomes a level-0 run, published at once.
    let mut refs: Vec<RunRef> = manifest.runs.clone();
    if !tail.is_empty() || tail_dead.fields > 0 {
        let flags = if refs.is_empty() { FLAG_BASE } else { 0 };
        let rr = run::write_map(&dir, &tail, flags, 0, &tail_dead)?;
        runs.push(Run::open(&dir, &rr)?);
        refs.push(rr);
    }
    drop(tail);
    let log_id = reader.log_id();
    let mut current = Manifest {
        log_id,
        position: reader.position(),
        generation: manifest.generation + 1,
        runs: refs,
        problems,
    };
    // One compaction at a time; a merger that cannot take it leaves compaction to the one
    // that holds it (and must not remove its part files).
    let compact = lock_file(
        &dir.join(run::COMPACT_LOCK_FILE),
        libc::LOCK_EX | libc::LOCK_NB,
    )?;
    let compacting = compact.is_some();
    publish(&dir, &current, compacting)?;
    drop(lock);
    // Phase 2, without the merge lock (level-0 runs keep being published meanwhile, so the
    // tail stays short): compactions, each published under the lock after re-reading the
    // manifest.
    if compacting {
        for pass in 0.. {
            let n = current.runs.len();
            let k = if full {
                if n <= 1 || pass > 0 { 0 } else { n }
            } else {
                let level = current.runs.last().map_or(0, |r| r.level);
                let same = (current.runs.iter().rev())
                    .take_while(|r| r.level == level)
                    .count();
                if same >= policy.fanout.max(2) {
                    same
                } else {
                    0
                }
            };
            if k == 0 {
                break;
            }
            let level = current.runs[n - k..]
                .iter()
                .map(|r| r.level)
                .max()
                .unwrap_or(0)
                + 1;
            let ids: Vec<u64> = current.runs[n - k..].iter().map(|r| r.id).collect();
            let inputs: Vec<&Run> = runs[n - k..].iter().collect();
            let rr = match run::merge_runs(&dir, &inputs, k == n, level, stop)? {
                Ok(rr) => rr,
                Err(run::Stopped) => return Ok(MergeOutcome::Stopped),
            };
            drop(inputs);
            let lock =
                lock_file(&lock_path, libc::LOCK_EX)?.expect("a blocking lock is always taken");
            // The manifest as it is now: level-0 runs may have been added after the inputs.
            let fresh = match load(&dir, log_id) {
                Ok(Some(m)) => m,
                _ => {
                    let _ = fs::remove_file(run::part_path(&dir, rr.id));
                    break;
                }
            };
            let (mut m, _) = fresh;
            let at = m
                .runs
                .windows(k)
                .position(|w| w.iter().map(|r| r.id).eq(ids.iter().copied()));
            let Some(at) = at.filter(|&at| k != n || at == 0) else {
                // Replaced meanwhile (a wipe or purge started a new base): drop the result.
                let _ = fs::remove_file(run::part_path(&dir, rr.id));
                break;
            };
            run::install(&dir, rr.id)?;
            m.runs.splice(at..at + k, [rr]);
            m.generation += 1;
            publish(&dir, &m, true)?;
            // Reopen what the new manifest names, for the next pass.
            runs = m
                .runs
                .iter()
                .map(|r| Run::open(&dir, r))
                .collect::<Result<Vec<_>>>()?;
            current = m;
            drop(lock);
        }
    }
    let entries = runs.iter().map(|r| r.n_entries).sum();
    let new = current;
    Ok(MergeOutcome::Published {
        tail: tail_n,
        runs: new.runs.len(),
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Entry, SegmentBuilder};

    fn segment(entries: &[(&str, Option<u64>)]) -> Vec<u8> {
        let db = Key::new().with("class", "od");
        let mut b = SegmentBuilder::new(0, 1, 1, &db).unwrap();
        for (step, object) in entries {
            let index = Key::new().with("type", "fc");
            let datum = Key::new().with("step", *step);
            b.push(&match object {
                Some(o) => Entry::Field {
                    index,
                    datum,
                    data: DataRef {
                        object: *o,
                        offset: 0,
                        length: 10,
                        crc: 0,
                    },
                },
                None => Entry::Tombstone { index, datum },
            })
            .unwrap();
        }
        b.finish()
    }

    fn apply(o: &mut Overlay, dead: &mut Dead, bytes: Vec<u8>) {
        let seg = format::decode_segment_raw(&bytes).unwrap();
        let at = Positions::of(&bytes, &seg);
        drop(seg);
        o.apply(dead, bytes, &at);
    }

    fn key(step: &str) -> Vec<u8> {
        format::raw_key(
            &Key::new().with("type", "fc"),
            &Key::new().with("step", step),
        )
    }

    #[test]
    fn overlay_keeps_the_newest_state_and_counts_what_it_masks() {
        let mut o = Overlay::default();
        let mut dead = Dead::default();
        apply(
            &mut o,
            &mut dead,
            segment(&[("0", Some(1)), ("6", Some(2))]),
        );
        // A later segment replaces step 0, removes step 6 and adds step 12; a tombstone
        // replaced again masks nothing more.
        apply(
            &mut o,
            &mut dead,
            segment(&[("0", Some(3)), ("6", None), ("12", Some(4)), ("6", None)]),
        );
        assert_eq!(o.get(&key("0")).unwrap().unwrap().object, 3);
        assert_eq!(o.get(&key("6")), Some(&None));
        assert_eq!(o.get(&key("12")).unwrap().unwrap().object, 4);
        assert_eq!(o.get(&key("18")), None);
        assert_eq!((dead.fields, dead.bytes), (2, 20));
        let order: Vec<Key> = o.iter().map(|(raw, _)| format::raw_keys(raw).1).collect();
        let steps: Vec<&str> = order.iter().map(|k| k.get("step").unwrap()).collect();
        assert_eq!(steps, ["0", "6", "12"]);
        o.clear();
        assert!(o.is_empty() && o.get(&key("0")).is_none());
    }
}
