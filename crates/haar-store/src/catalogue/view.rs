//! The reader-side catalogue of one database (design §3.1): the runs its manifest names plus
//! an overlay of the commits after the manifest's position, and verified reads of the fields
//! they index.
//!
//! Owns the view, its fallbacks (a damaged or stale run or manifest is ignored and the log
//! replayed) and the checksum check on every read. Readers never write; only
//! [`super::merge`] does, under the catalogue's merge lock.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use haar_core::Key;
use haar_core::request::{Request, Values};

use super::manifest::{MANIFEST_FILE, Manifest};
use super::overlay::{Overlay, Positions};
use super::run::Run;
use super::state::{Dead, Slot};
use crate::backend::{Backend, Committed, DbReader, FieldBytes};
use crate::error::{Error, Result};
use crate::format::{self, DataRef};

/// The whole state of a database, for statistics and purge: O(fields).
pub(crate) struct Full {
    pub(crate) fields: HashMap<(Key, Key), DataRef>,
    pub(crate) dead: Dead,
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
pub(super) fn load(
    dir: &Path,
    log_id: u64,
) -> std::result::Result<Option<(Manifest, Vec<Run>)>, String> {
    let path = dir.join(MANIFEST_FILE);
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
                st = stamp(&dir.join(MANIFEST_FILE));
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
            && stamp(&dir.join(MANIFEST_FILE)) != self.stamp
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
