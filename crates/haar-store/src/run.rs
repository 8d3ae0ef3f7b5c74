//! Catalogue runs and the manifest (design §3.1): immutable sorted tables holding a database's
//! index entries up to a position of its commit log, so that opening a database, looking up
//! one key and listing a request cost O(runs × log N) and O(result) instead of a replay of
//! everything ever archived.
//!
//! Owns the two file formats, reading (lookup, request scan, full iteration) and writing
//! (from an in-memory map, and by merging runs without decoding their keys). When to merge
//! and the manifest's publication live in [`crate::catalogue`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use haar_core::Key;
use haar_core::request::{Request, Values};
use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::format::{self, Cursor, DataRef};

const RUN_MAGIC: &[u8; 4] = b"HRUN";
const MANIFEST_MAGIC: &[u8; 4] = b"HMAN";
const VERSION: u16 = 1;
const HEADER: usize = 128;
/// The oldest run of a database: it holds no tombstones.
pub(crate) const FLAG_BASE: u16 = 1;
const KIND_FIELD: u8 = 1;
const KIND_TOMBSTONE: u8 = 2;
/// Most request value combinations a scan narrows by before it filters instead.
const MAX_PREFIXES: usize = 4096;

/// A datum's state: a field, or removed by a tombstone (`None`).
pub(crate) type Slot = Option<DataRef>;

/// Dead (masked or removed) fields and bytes, in total and per data object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Dead {
    pub(crate) fields: u64,
    pub(crate) bytes: u64,
    pub(crate) by_object: HashMap<u64, u64>,
}

impl Dead {
    pub(crate) fn kill(&mut self, old: &DataRef) {
        self.fields += 1;
        self.bytes += old.length;
        *self.by_object.entry(old.object).or_default() += old.length;
    }

    pub(crate) fn add(&mut self, other: &Dead) {
        self.fields += other.fields;
        self.bytes += other.bytes;
        for (o, b) in &other.by_object {
            *self.by_object.entry(*o).or_default() += b;
        }
    }
}

/// One run as the manifest names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunRef {
    pub(crate) id: u64,
    pub(crate) len: u64,
    pub(crate) header_crc: u32,
    pub(crate) level: u32,
}

/// The manifest (design §3.1): which runs hold the log up to which position.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub(crate) log_id: u64,
    pub(crate) position: u64,
    pub(crate) generation: u64,
    /// Oldest first.
    pub(crate) runs: Vec<RunRef>,
    pub(crate) problems: Vec<String>,
}

pub(crate) const MANIFEST_FILE: &str = "manifest";
pub(crate) const LOCK_FILE: &str = "merge.lock";
/// Held by the one merger compacting runs (design §3.1).
pub(crate) const COMPACT_LOCK_FILE: &str = "compact.lock";

/// Whether `s` is 16 lowercase hex digits, haar's spelling of a writer, run or temporary id.
pub(crate) fn is_id(s: &str) -> bool {
    s.len() == 16
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` is a file haar writes in a catalogue directory (design §3.1): the manifest,
/// the two merge locks, runs, the part files of compactions, and the temporaries that
/// [`write_atomic`] and the run writer leave while they write (manifest, runs, and the
/// `db.key` of pmem databases). A wipe refuses to delete anything else unless told to
/// (FDB5's "unclean database").
pub(crate) fn is_catalogue_file(name: &str) -> bool {
    // `jumps`: the extraction's cache of jump records (design §16).
    if [
        MANIFEST_FILE,
        LOCK_FILE,
        COMPACT_LOCK_FILE,
        "db.key",
        "jumps",
    ]
    .contains(&name)
    {
        return true;
    }
    for suffix in [".run", ".run.tmp", ".run.part"] {
        if name.strip_suffix(suffix).is_some_and(is_id) {
            return true;
        }
    }
    // `write_atomic`'s temporaries: `{name}.{id}.tmp`.
    name.strip_suffix(".tmp")
        .and_then(|n| n.rsplit_once('.'))
        .is_some_and(|(base, id)| (base == MANIFEST_FILE || base == "db.key") && is_id(id))
}

fn corrupt(path: &Path, what: &'static str, detail: impl Into<String>) -> Error {
    Error::Corrupt {
        what,
        path: path.to_path_buf(),
        detail: detail.into(),
    }
}

impl Manifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + 24 * self.runs.len());
        b.extend_from_slice(MANIFEST_MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&self.log_id.to_le_bytes());
        b.extend_from_slice(&self.position.to_le_bytes());
        b.extend_from_slice(&self.generation.to_le_bytes());
        b.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.problems.len() as u32).to_le_bytes());
        for r in &self.runs {
            b.extend_from_slice(&r.id.to_le_bytes());
            b.extend_from_slice(&r.len.to_le_bytes());
            b.extend_from_slice(&r.header_crc.to_le_bytes());
            b.extend_from_slice(&r.level.to_le_bytes());
        }
        for p in &self.problems {
            b.extend_from_slice(&(p.len() as u32).to_le_bytes());
            b.extend_from_slice(p.as_bytes());
        }
        let crc = haar_persist::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    pub(crate) fn decode(buf: &[u8]) -> std::result::Result<Manifest, String> {
        if buf.len() < 44 {
            return Err(format!("{} bytes, shorter than a manifest", buf.len()));
        }
        let (body, crc) = buf.split_at(buf.len() - 4);
        let crc = u32::from_le_bytes(crc.try_into().unwrap());
        let computed = haar_persist::crc32c(body);
        if crc != computed {
            return Err(format!("crc {computed:#010x}, stored {crc:#010x}"));
        }
        let mut c = Cursor::new(body);
        let err = |e: format::DecodeError| e.to_string();
        if c.take(4).map_err(err)? != MANIFEST_MAGIC {
            return Err("bad magic (not a haar manifest)".into());
        }
        let version = c.u16().map_err(err)?;
        if version != VERSION {
            return Err(format!(
                "version {version}, this haar reads {VERSION}: it is ignored and rebuilt"
            ));
        }
        c.u16().map_err(err)?;
        let log_id = c.u64().map_err(err)?;
        let position = c.u64().map_err(err)?;
        let generation = c.u64().map_err(err)?;
        let n_runs = c.u32().map_err(err)? as usize;
        let n_problems = c.u32().map_err(err)? as usize;
        if n_runs > c.remaining() / 24 {
            return Err("run count past the end".into());
        }
        let mut runs = Vec::with_capacity(n_runs);
        for _ in 0..n_runs {
            runs.push(RunRef {
                id: c.u64().map_err(err)?,
                len: c.u64().map_err(err)?,
                header_crc: c.u32().map_err(err)?,
                level: c.u32().map_err(err)?,
            });
        }
        let mut problems = Vec::new();
        for _ in 0..n_problems {
            let n = c.u32().map_err(err)? as usize;
            let t = c.take(n).map_err(err)?;
            problems.push(String::from_utf8_lossy(t).into_owned());
        }
        if c.remaining() != 0 {
            return Err("trailing bytes".into());
        }
        Ok(Manifest {
            log_id,
            position,
            generation,
            runs,
            problems,
        })
    }
}

/// The file of run `id` in a catalogue directory.
pub(crate) fn run_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016x}.run"))
}

/// Writes `bytes` to `dir/name` atomically: a temporary file, `fdatasync`, rename, then an
/// `fsync` of the directory.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    // A name of its own, so that concurrent writers of the same file never share one.
    let tmp = dir.join(format!("{name}.{:016x}.tmp", crate::posix::random_u64()));
    let path = dir.join(name);
    let mut f = crate::perm::create_file(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_data())
        .map_err(|e| Error::io("write", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, e))?;
    sync_dir(dir)
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync", dir, e))
}

/// One group of a run: the entries of one index key whose datum keys have one keyword list.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) index: Key,
    pub(crate) keywords: Vec<String>,
    first: usize,
    n: usize,
}

impl Group {
    fn rec_len(&self) -> usize {
        4 * self.keywords.len() + 36
    }

    fn cmp_key(&self, index: &Key, keywords: &[&str]) -> std::cmp::Ordering {
        self.index.cmp(index).then_with(|| {
            self.keywords
                .iter()
                .map(String::as_str)
                .cmp(keywords.iter().copied())
        })
    }
}

/// A run file, mapped read-only. Records are checked by their crc when read.
pub(crate) struct Run {
    path: PathBuf,
    map: Mmap,
    pub(crate) n_entries: u64,
    pub(crate) dead: Dead,
    groups: Vec<Group>,
    dict_n: usize,
    dict_off: usize,
    strings_off: usize,
    strings_len: usize,
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The checked region `[off, off + len)` of `map` whose last 4 bytes are the crc of the rest.
fn crc_region<'a>(
    map: &'a [u8],
    off: u64,
    len: u64,
    path: &Path,
    what: &'static str,
) -> Result<&'a [u8]> {
    let (off, len) = (off as usize, len as usize);
    if len < 4 || off.checked_add(len).is_none_or(|end| end > map.len()) {
        return Err(corrupt(
            path,
            what,
            format!("{len} bytes at {off} lie outside the run"),
        ));
    }
    let region = &map[off..off + len];
    let (body, crc) = region.split_at(len - 4);
    let stored = u32::from_le_bytes(crc.try_into().unwrap());
    let computed = haar_persist::crc32c(body);
    if stored != computed {
        return Err(corrupt(
            path,
            what,
            format!("crc {computed:#010x}, stored {stored:#010x}"),
        ));
    }
    Ok(body)
}

impl Run {
    /// Maps and checks the run `rr` of `dir`: header, group table, dictionary and dead table.
    pub(crate) fn open(dir: &Path, rr: &RunRef) -> Result<Run> {
        let path = run_path(dir, rr.id);
        let file = File::open(&path).map_err(|e| Error::io("open", &path, e))?;
        // SAFETY: run files are immutable once renamed into place (design §3.1) and are
        // only ever deleted, never truncated or rewritten; a deleted file stays mapped.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io("map", &path, e))?;
        if map.len() as u64 != rr.len || map.len() < HEADER {
            return Err(corrupt(
                &path,
                "catalogue run",
                format!("{} bytes, the manifest says {}", map.len(), rr.len),
            ));
        }
        let h = &map[..HEADER];
        let crc = le_u32(h, 124);
        if crc != haar_persist::crc32c(&h[..124]) || crc != rr.header_crc || &h[0..4] != RUN_MAGIC {
            return Err(corrupt(&path, "catalogue run", "header crc or magic wrong"));
        }
        let version = u16::from_le_bytes([h[4], h[5]]);
        if version != VERSION {
            return Err(corrupt(
                &path,
                "catalogue run",
                format!("version {version}, this haar reads {VERSION}"),
            ));
        }
        let n_entries = le_u64(h, 16);
        let n_groups = le_u64(h, 24) as usize;
        let gbody = crc_region(&map, le_u64(h, 32), le_u64(h, 40), &path, "run group table")?;
        let dbody = crc_region(&map, le_u64(h, 48), le_u64(h, 56), &path, "run dictionary")?;
        let xbody = crc_region(&map, le_u64(h, 64), le_u64(h, 72), &path, "run dead table")?;
        let bad = |what: &'static str| corrupt(&path, what, "does not decode");
        // Groups.
        let mut groups = Vec::with_capacity(n_groups.min(1 << 20));
        let mut c = Cursor::new(gbody);
        for _ in 0..n_groups {
            let index = format::decode_key(&mut c).map_err(|_| bad("run group table"))?;
            let nk = c.u16().map_err(|_| bad("run group table"))? as usize;
            let mut keywords = Vec::with_capacity(nk);
            for _ in 0..nk {
                let l = c.u16().map_err(|_| bad("run group table"))? as usize;
                let k = c.take(l).map_err(|_| bad("run group table"))?;
                keywords.push(String::from_utf8(k.to_vec()).map_err(|_| bad("run group table"))?);
            }
            let first = c.u64().map_err(|_| bad("run group table"))? as usize;
            let n = c.u64().map_err(|_| bad("run group table"))? as usize;
            let g = Group {
                index,
                keywords,
                first,
                n,
            };
            if n.checked_mul(g.rec_len())
                .and_then(|l| l.checked_add(first))
                .is_none_or(|end| end > map.len())
            {
                return Err(corrupt(
                    &path,
                    "run group table",
                    "a group lies outside the run",
                ));
            }
            groups.push(g);
        }
        // Dictionary.
        let dict_off = le_u64(h, 48) as usize;
        if dbody.len() < 4 {
            return Err(bad("run dictionary"));
        }
        let dict_n = le_u32(dbody, 0) as usize;
        let strings_rel = 4 + 8 * dict_n;
        if strings_rel > dbody.len() {
            return Err(bad("run dictionary"));
        }
        let strings_len = dbody.len() - strings_rel;
        let strings = &dbody[strings_rel..];
        let mut prev: Option<&[u8]> = None;
        for i in 0..dict_n {
            let o = le_u32(dbody, 4 + 8 * i) as usize;
            let l = le_u32(dbody, 8 + 8 * i) as usize;
            let v = strings.get(o..o + l).ok_or_else(|| bad("run dictionary"))?;
            std::str::from_utf8(v).map_err(|_| bad("run dictionary"))?;
            if prev.is_some_and(|p| p >= v) {
                return Err(corrupt(&path, "run dictionary", "values not sorted"));
            }
            prev = Some(v);
        }
        // Dead table.
        let mut dead = Dead {
            fields: le_u64(h, 80),
            bytes: le_u64(h, 88),
            by_object: HashMap::new(),
        };
        if xbody.len() < 4 {
            return Err(bad("run dead table"));
        }
        let nx = le_u32(xbody, 0) as usize;
        if xbody.len() != 4 + 16 * nx {
            return Err(bad("run dead table"));
        }
        for i in 0..nx {
            dead.by_object
                .insert(le_u64(xbody, 4 + 16 * i), le_u64(xbody, 12 + 16 * i));
        }
        Ok(Run {
            path,
            n_entries,
            dead,
            groups,
            dict_n,
            dict_off,
            strings_off: dict_off + strings_rel,
            strings_len,
            map,
        })
    }

    /// The run's file, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The dictionary value of `id`.
    fn value(&self, id: u32) -> Result<&str> {
        let id = id as usize;
        if id >= self.dict_n {
            return Err(corrupt(
                &self.path,
                "run entry",
                format!("value id {id} outside the dictionary"),
            ));
        }
        let at = self.dict_off + 4 + 8 * id;
        let o = le_u32(&self.map, at) as usize;
        let l = le_u32(&self.map, at + 4) as usize;
        // Checked in bounds and UTF-8 when the run was opened.
        let s = &self.map[self.strings_off + o..self.strings_off + o + l];
        debug_assert!(o + l <= self.strings_len);
        std::str::from_utf8(s).map_err(|_| corrupt(&self.path, "run dictionary", "not UTF-8"))
    }

    /// The id of `v`, if the dictionary holds it.
    fn id_of(&self, v: &str) -> Result<Option<u32>> {
        let (mut lo, mut hi) = (0usize, self.dict_n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.value(mid as u32)?.as_bytes().cmp(v.as_bytes()) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Some(mid as u32)),
            }
        }
        Ok(None)
    }

    /// Every dictionary value, in id order.
    fn values(&self) -> Result<Vec<&str>> {
        (0..self.dict_n as u32).map(|i| self.value(i)).collect()
    }

    /// Record `i` of group `g`, checked.
    fn record(&self, g: &Group, i: usize) -> Result<&[u8]> {
        let len = g.rec_len();
        let at = g.first + i * len;
        let rec = &self.map[at..at + len];
        let stored = le_u32(rec, len - 4);
        if stored != haar_persist::crc32c(&rec[..len - 4]) {
            return Err(corrupt(
                &self.path,
                "run entry",
                format!("record {i} of index {} at {at}: crc mismatch", g.index),
            ));
        }
        Ok(rec)
    }

    fn slot(&self, rec: &[u8], nk: usize) -> Result<Slot> {
        let at = 4 * nk;
        match rec[at] {
            KIND_FIELD => Ok(Some(DataRef {
                object: le_u64(rec, at + 4),
                offset: le_u64(rec, at + 12),
                length: le_u64(rec, at + 20),
                crc: le_u32(rec, at + 28),
            })),
            KIND_TOMBSTONE => Ok(None),
            k => Err(corrupt(
                &self.path,
                "run entry",
                format!("unknown entry kind {k}"),
            )),
        }
    }

    fn datum(&self, g: &Group, rec: &[u8]) -> Result<Key> {
        let mut k = Key::new();
        for (j, kw) in g.keywords.iter().enumerate() {
            k.push(kw.as_str(), self.value(le_u32(rec, 4 * j))?);
        }
        Ok(k)
    }

    fn group_of(&self, index: &Key, datum: &Key) -> Option<&Group> {
        let kws: Vec<&str> = datum.iter().map(|(k, _)| k).collect();
        self.groups
            .binary_search_by(|g| g.cmp_key(index, &kws))
            .ok()
            .map(|i| &self.groups[i])
    }

    /// First record of `g` in `lo..hi` whose leading ids are not below (`upper`: above)
    /// `prefix`.
    fn bound(
        &self,
        g: &Group,
        range: (usize, usize),
        prefix: &[u32],
        upper: bool,
    ) -> Result<usize> {
        let (mut lo, mut hi) = range;
        while lo < hi {
            let mid = (lo + hi) / 2;
            let rec = self.record(g, mid)?;
            let ord = (0..prefix.len())
                .map(|j| le_u32(rec, 4 * j))
                .cmp(prefix.iter().copied());
            let go_right = match ord {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => upper,
                std::cmp::Ordering::Greater => false,
            };
            if go_right {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// The state of (index, datum) in this run: `None` if the run does not mention it.
    pub(crate) fn lookup(&self, index: &Key, datum: &Key) -> Result<Option<Slot>> {
        let Some(g) = self.group_of(index, datum) else {
            return Ok(None);
        };
        let mut want = Vec::with_capacity(g.keywords.len());
        for (_, v) in datum.iter() {
            match self.id_of(v)? {
                Some(id) => want.push(id),
                None => return Ok(None),
            }
        }
        let i = self.bound(g, (0, g.n), &want, false)?;
        if i == g.n {
            return Ok(None);
        }
        let rec = self.record(g, i)?;
        if (0..want.len()).any(|j| le_u32(rec, 4 * j) != want[j]) {
            return Ok(None);
        }
        self.slot(rec, want.len()).map(Some)
    }

    /// Hands every entry of the run that may match `req` (resolved) in database `db` to
    /// `emit`: groups whose index key contradicts the request are skipped, and datum values
    /// the request lists narrow each group by binary search; the others are filtered by id.
    /// Exact: an entry is handed over if and only if its key (with `db`) matches `req` as a
    /// complete key.
    pub(crate) fn scan(
        &self,
        db: &Key,
        req: &Request,
        emit: &mut dyn FnMut(&Key, Key, Slot),
    ) -> Result<()> {
        'groups: for g in &self.groups {
            // Allowed ids per datum position (None: any).
            let mut allowed: Vec<Option<Vec<u32>>> = vec![None; g.keywords.len()];
            for p in &req.params {
                let fixed = db.get(&p.keyword).or_else(|| g.index.get(&p.keyword));
                let pos = g.keywords.iter().position(|k| *k == p.keyword);
                match (&p.values, fixed, pos) {
                    (Values::All, _, _) => {}
                    (Values::List(l), Some(v), _) => {
                        if !l.iter().any(|x| x == v) {
                            continue 'groups;
                        }
                    }
                    (Values::List(l), None, Some(j)) => {
                        let mut ids = Vec::new();
                        for v in l {
                            if let Some(id) = self.id_of(v)? {
                                ids.push(id);
                            }
                        }
                        if ids.is_empty() {
                            continue 'groups;
                        }
                        ids.sort_unstable();
                        ids.dedup();
                        allowed[j] = Some(ids);
                    }
                    (Values::List(l), None, None) => {
                        if !l.iter().any(String::is_empty) {
                            continue 'groups;
                        }
                    }
                }
            }
            // Narrow by the leading positions the request fixes, one position at a time,
            // while splitting the ranges (two binary searches per value) costs less than
            // scanning them; the positions after that are filtered by id.
            let mut ranges: Vec<(Vec<u32>, usize, usize)> = vec![(Vec::new(), 0, g.n)];
            let mut depth = 0;
            for (j, a) in allowed.iter().enumerate() {
                let Some(ids) = a else {
                    // A keyword the request leaves open, e.g. an optional one stored empty:
                    // when each range holds one value there (its first and last records
                    // agree), narrowing goes on past it.
                    let mut same = true;
                    for (prefix, lo, hi) in &mut ranges {
                        let first = le_u32(self.record(g, *lo)?, 4 * j);
                        if first != le_u32(self.record(g, *hi - 1)?, 4 * j) {
                            same = false;
                            break;
                        }
                        prefix.push(first);
                    }
                    if !same || ranges.is_empty() {
                        break;
                    }
                    depth += 1;
                    continue;
                };
                let total: usize = ranges.iter().map(|r| r.2 - r.1).sum();
                let avg = total / ranges.len().max(1) + 1;
                let probes = ranges.len() * ids.len() * 2 * (avg.ilog2() as usize + 1);
                if ranges.len() * ids.len() > MAX_PREFIXES || total <= 4 * probes {
                    break;
                }
                let mut next = Vec::with_capacity(ranges.len() * ids.len());
                for (prefix, lo, hi) in &ranges {
                    let mut from = *lo;
                    for &id in ids {
                        let mut p = prefix.clone();
                        p.push(id);
                        let l = self.bound(g, (from, *hi), &p, false)?;
                        let h = self.bound(g, (l, *hi), &p, true)?;
                        from = h;
                        if l < h {
                            next.push((p, l, h));
                        }
                    }
                }
                ranges = next;
                depth += 1;
            }
            for &(_, lo, hi) in &ranges {
                for i in lo..hi {
                    let rec = self.record(g, i)?;
                    let ok = allowed.iter().enumerate().skip(depth).all(|(j, a)| {
                        a.as_ref()
                            .is_none_or(|ids| ids.binary_search(&le_u32(rec, 4 * j)).is_ok())
                    });
                    if ok {
                        emit(
                            &g.index,
                            self.datum(g, rec)?,
                            self.slot(rec, g.keywords.len())?,
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// Every entry, group by group in order.
    pub(crate) fn for_each(&self, f: &mut dyn FnMut(&Key, Key, Slot)) -> Result<()> {
        for g in &self.groups {
            for i in 0..g.n {
                let rec = self.record(g, i)?;
                f(
                    &g.index,
                    self.datum(g, rec)?,
                    self.slot(rec, g.keywords.len())?,
                );
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Writing

/// Streams a run to `<id>.run.tmp`; [`RunWriter::finish`] makes it durable and renames it.
pub(crate) struct RunWriter {
    dir: PathBuf,
    id: u64,
    tmp: PathBuf,
    out: BufWriter<File>,
    pos: u64,
    n_entries: u64,
    /// (index, keywords, first byte, n)
    groups: Vec<(Key, Vec<String>, u64, u64)>,
    dict: Vec<String>,
    rec: Vec<u8>,
    /// Rename into place when finished (else the caller installs it with [`install`]).
    install: bool,
}

/// The file a compaction writes run `id` to until it is published ([`install`]).
pub(crate) fn part_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016x}.run.part"))
}

/// Renames a finished compaction output into place (call with the merge lock held, just
/// before publishing a manifest that names it).
pub(crate) fn install(dir: &Path, id: u64) -> Result<()> {
    let path = run_path(dir, id);
    fs::rename(part_path(dir, id), &path).map_err(|e| Error::io("rename", &path, e))
}

impl RunWriter {
    /// Starts run `id` in `dir` whose datum values are `dict` (sorted, distinct).
    pub(crate) fn create(dir: &Path, id: u64, dict: Vec<String>) -> Result<RunWriter> {
        Self::create_as(dir, id, dict, true)
    }

    fn create_as(dir: &Path, id: u64, dict: Vec<String>, install: bool) -> Result<RunWriter> {
        let tmp = if install {
            dir.join(format!("{id:016x}.run.tmp"))
        } else {
            part_path(dir, id)
        };
        let f = crate::perm::create_file(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        let mut out = BufWriter::with_capacity(1 << 20, f);
        out.write_all(&[0u8; HEADER])
            .map_err(|e| Error::io("write", &tmp, e))?;
        Ok(RunWriter {
            dir: dir.to_path_buf(),
            id,
            tmp,
            out,
            pos: HEADER as u64,
            n_entries: 0,
            groups: Vec::new(),
            dict,
            rec: Vec::new(),
            install,
        })
    }

    /// Starts a group; groups come in (index, keywords) order.
    pub(crate) fn group(&mut self, index: &Key, keywords: &[String]) {
        self.groups
            .push((index.clone(), keywords.to_vec(), self.pos, 0));
    }

    /// Appends an entry to the current group; entries come in id order.
    pub(crate) fn push(&mut self, ids: &[u32], slot: &Slot) -> Result<()> {
        let r = &mut self.rec;
        r.clear();
        for id in ids {
            r.extend_from_slice(&id.to_le_bytes());
        }
        match slot {
            Some(d) => {
                r.extend_from_slice(&[KIND_FIELD, 0, 0, 0]);
                r.extend_from_slice(&d.object.to_le_bytes());
                r.extend_from_slice(&d.offset.to_le_bytes());
                r.extend_from_slice(&d.length.to_le_bytes());
                r.extend_from_slice(&d.crc.to_le_bytes());
            }
            None => {
                r.extend_from_slice(&[KIND_TOMBSTONE, 0, 0, 0]);
                r.extend_from_slice(&[0u8; 28]);
            }
        }
        let crc = haar_persist::crc32c(r);
        r.extend_from_slice(&crc.to_le_bytes());
        self.out
            .write_all(r)
            .map_err(|e| Error::io("write", &self.tmp, e))?;
        self.pos += r.len() as u64;
        self.n_entries += 1;
        self.groups.last_mut().expect("a group was started").3 += 1;
        Ok(())
    }

    fn section(&mut self, mut body: Vec<u8>) -> Result<(u64, u64)> {
        let crc = haar_persist::crc32c(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        let at = self.pos;
        self.out
            .write_all(&body)
            .map_err(|e| Error::io("write", &self.tmp, e))?;
        self.pos += body.len() as u64;
        Ok((at, body.len() as u64))
    }

    /// Writes the tables and the header, makes the file durable and renames it into place.
    pub(crate) fn finish(mut self, flags: u16, level: u32, dead: &Dead) -> Result<RunRef> {
        self.groups.retain(|g| g.3 > 0);
        let mut gt = Vec::new();
        for (index, kws, first, n) in &self.groups {
            format::encode_key(index, &mut gt).map_err(|e| corrupt(&self.tmp, "run", e))?;
            gt.extend_from_slice(&(kws.len() as u16).to_le_bytes());
            for k in kws {
                gt.extend_from_slice(&(k.len() as u16).to_le_bytes());
                gt.extend_from_slice(k.as_bytes());
            }
            gt.extend_from_slice(&first.to_le_bytes());
            gt.extend_from_slice(&n.to_le_bytes());
        }
        let n_groups = self.groups.len() as u64;
        let (g_off, g_len) = self.section(gt)?;
        let mut dt = Vec::new();
        dt.extend_from_slice(&(self.dict.len() as u32).to_le_bytes());
        let mut o = 0u32;
        for v in &self.dict {
            dt.extend_from_slice(&o.to_le_bytes());
            dt.extend_from_slice(&(v.len() as u32).to_le_bytes());
            o += v.len() as u32;
        }
        for v in &self.dict {
            dt.extend_from_slice(v.as_bytes());
        }
        let (d_off, d_len) = self.section(dt)?;
        let mut xt = Vec::new();
        let mut objs: Vec<(&u64, &u64)> = dead.by_object.iter().collect();
        objs.sort();
        xt.extend_from_slice(&(objs.len() as u32).to_le_bytes());
        for (o, b) in objs {
            xt.extend_from_slice(&o.to_le_bytes());
            xt.extend_from_slice(&b.to_le_bytes());
        }
        let (x_off, x_len) = self.section(xt)?;
        let mut h = Vec::with_capacity(HEADER);
        h.extend_from_slice(RUN_MAGIC);
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&flags.to_le_bytes());
        for v in [
            self.id,
            self.n_entries,
            n_groups,
            g_off,
            g_len,
            d_off,
            d_len,
            x_off,
            x_len,
            dead.fields,
            dead.bytes,
        ] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        h.resize(124, 0);
        let crc = haar_persist::crc32c(&h);
        h.extend_from_slice(&crc.to_le_bytes());
        let tmp = self.tmp.clone();
        let mut f = self
            .out
            .into_inner()
            .map_err(|e| Error::io("write", &tmp, e.into_error()))?;
        f.seek(SeekFrom::Start(0))
            .and_then(|_| f.write_all_at(&h, 0))
            .and_then(|_| f.sync_data())
            .map_err(|e| Error::io("write", &tmp, e))?;
        if self.install {
            let path = run_path(&self.dir, self.id);
            fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, e))?;
        }
        Ok(RunRef {
            id: self.id,
            len: self.pos,
            header_crc: crc,
            level,
        })
    }
}

/// A random run id.
fn new_id() -> u64 {
    crate::posix::random_u64()
}

/// Writes the entries of `map` (encoded entry keys → state: a database's state over part of
/// its log) as a run. Tombstones are dropped when `flags` has [`FLAG_BASE`].
pub(crate) fn write_map(
    dir: &Path,
    map: &crate::catalogue::Overlay,
    flags: u16,
    level: u32,
    dead: &Dead,
) -> Result<RunRef> {
    use rustc_hash::FxHashMap;
    let base = flags & FLAG_BASE != 0;
    /// Entries of one (index key, datum keywords): values flat, `nk` per row.
    struct G<'a> {
        index: &'a [u8],
        keywords: Vec<&'a str>,
        values: Vec<&'a str>,
        slots: Vec<&'a Slot>,
    }
    // One pass, no allocation per entry: groups are found by (encoded index key, a hash of
    // the datum's keywords) and confirmed by comparing the keywords.
    let mut groups: Vec<G<'_>> = Vec::new();
    let mut by_key: FxHashMap<(&[u8], u64), Vec<usize>> = FxHashMap::default();
    let mut distinct: FxHashMap<&str, u32> = FxHashMap::default();
    for (raw, slot) in map.iter() {
        if base && slot.is_none() {
            continue;
        }
        let (index, datum) = format::raw_parts(raw);
        let rest = index.rest();
        let index = &raw[..raw.len() - rest.len()];
        let sig = datum.clone().fold(0xcbf2_9ce4_8422_2325u64, |h, (k, _)| {
            k.bytes()
                .fold(h, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
                .wrapping_mul(31)
        });
        let cands = by_key.entry((index, sig)).or_default();
        let gi = match cands.iter().copied().find(|&gi| {
            groups[gi]
                .keywords
                .iter()
                .copied()
                .eq(datum.clone().map(|(k, _)| k))
        }) {
            Some(gi) => gi,
            None => {
                groups.push(G {
                    index,
                    keywords: datum.clone().map(|(k, _)| k).collect(),
                    values: Vec::new(),
                    slots: Vec::new(),
                });
                cands.push(groups.len() - 1);
                groups.len() - 1
            }
        };
        let g = &mut groups[gi];
        for (_, v) in datum {
            distinct.entry(v).or_insert(0);
            g.values.push(v);
        }
        g.slots.push(slot);
    }
    let mut dict: Vec<&str> = distinct.keys().copied().collect();
    dict.sort_unstable();
    for (i, v) in dict.iter().enumerate() {
        distinct.insert(v, i as u32);
    }
    // Groups in (index key, keywords) order: decode each index key once.
    let mut ordered: Vec<(Key, Vec<String>, &G<'_>)> = groups
        .iter()
        .map(|g| {
            let mut index = Key::new();
            for (k, v) in format::RawPairs::new(g.index) {
                index.push(k, v);
            }
            (index, g.keywords.iter().map(|k| k.to_string()).collect(), g)
        })
        .collect();
    ordered.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let mut w = RunWriter::create(dir, new_id(), dict.iter().map(|v| v.to_string()).collect())?;
    let mut ids: Vec<u32> = Vec::new();
    let mut order: Vec<usize> = Vec::new();
    for (index, kws, g) in ordered {
        w.group(&index, &kws);
        let nk = kws.len();
        ids.clear();
        ids.extend(g.values.iter().map(|v| distinct[v]));
        order.clear();
        order.extend(0..g.slots.len());
        let row = |r: usize| &ids[r * nk..(r + 1) * nk];
        order.sort_unstable_by(|&a, &b| row(a).cmp(row(b)));
        for &r in &order {
            w.push(row(r), g.slots[r])?;
        }
    }
    w.finish(flags, level, dead)
}

/// Why a merge stopped early.
#[derive(Debug)]
pub(crate) struct Stopped;

/// Merges `inputs` (oldest first) into one run of `level`, left as a part file for
/// [`install`]: for each key the newest entry
/// wins and the older ones count as dead; with `base` the result is the oldest run of the
/// database and tombstones are dropped. Keys are never decoded: the dictionaries are merged
/// and each input's ids remapped (ids order as values do, so remapping keeps order).
pub(crate) fn merge_runs(
    dir: &Path,
    inputs: &[&Run],
    base: bool,
    level: u32,
    stop: &AtomicBool,
) -> Result<std::result::Result<RunRef, Stopped>> {
    let mut all: BTreeSet<&str> = BTreeSet::new();
    let mut dicts = Vec::new();
    for r in inputs {
        let v = r.values()?;
        all.extend(v.iter().copied());
        dicts.push(v);
    }
    let dict: Vec<String> = all.iter().map(|v| v.to_string()).collect();
    let index: HashMap<&str, u32> = all
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, i as u32))
        .collect();
    let remap: Vec<Vec<u32>> = dicts
        .iter()
        .map(|d| d.iter().map(|v| index[v]).collect())
        .collect();
    // (index, datum keywords) → (input, its group) holding them.
    type Members<'a> = BTreeMap<(&'a Key, &'a [String]), Vec<(usize, &'a Group)>>;
    let mut groups: Members<'_> = BTreeMap::new();
    for (ri, r) in inputs.iter().enumerate() {
        for g in r.groups() {
            groups
                .entry((&g.index, g.keywords.as_slice()))
                .or_default()
                .push((ri, g));
        }
    }
    let mut dead = Dead::default();
    for r in inputs {
        dead.add(&r.dead);
    }
    // A part file until the caller publishes it (the merge lock is not held meanwhile).
    let mut w = RunWriter::create_as(dir, new_id(), dict, false)?;
    let flags = if base { FLAG_BASE } else { 0 };
    for ((index, kws), members) in groups {
        if stop.load(Ordering::Relaxed) {
            let tmp = w.tmp.clone();
            drop(w);
            let _ = fs::remove_file(tmp);
            return Ok(Err(Stopped));
        }
        w.group(index, kws);
        let nk = kws.len();
        // Cursor per member: (next record, current remapped ids).
        let mut cur: Vec<(usize, Vec<u32>)> = vec![(0, Vec::new()); members.len()];
        let load = |m: usize, i: usize, ids: &mut Vec<u32>| -> Result<bool> {
            let (ri, g) = members[m];
            if i >= g.n {
                return Ok(false);
            }
            let rec = inputs[ri].record(g, i)?;
            ids.clear();
            for j in 0..nk {
                let old = le_u32(rec, 4 * j) as usize;
                ids.push(*remap[ri].get(old).ok_or_else(|| {
                    corrupt(
                        inputs[ri].path(),
                        "run entry",
                        "value id outside the dictionary",
                    )
                })?);
            }
            Ok(true)
        };
        let mut live: Vec<bool> = vec![false; members.len()];
        for m in 0..members.len() {
            live[m] = load(m, 0, &mut cur[m].1)?;
        }
        // The smallest id tuple among live cursors, while any is live.
        while let Some(min) = (0..members.len())
            .filter(|&m| live[m])
            .min_by(|&a, &b| cur[a].1.cmp(&cur[b].1))
        {
            let key = cur[min].1.clone();
            // Members holding it, oldest first (members are in input order).
            let mut winner: Option<Slot> = None;
            for m in 0..members.len() {
                if !live[m] || cur[m].1 != key {
                    continue;
                }
                let (ri, g) = members[m];
                let rec = inputs[ri].record(g, cur[m].0)?;
                let slot = inputs[ri].slot(rec, nk)?;
                if let Some(Some(old)) = &winner {
                    dead.kill(old);
                }
                winner = Some(slot);
                cur[m].0 += 1;
                let i = cur[m].0;
                live[m] = load(m, i, &mut cur[m].1)?;
            }
            match winner {
                Some(None) if base => {}
                Some(slot) => w.push(&key, &slot)?,
                None => unreachable!("the minimum came from a live cursor"),
            }
        }
    }
    w.finish(flags, level, &dead).map(Ok)
}

/// Removes `*.tmp` files and the runs `keep` does not name, and with `parts` the part files
/// of compactions (only when none is running). Call with the merge lock held.
pub(crate) fn remove_unreferenced(dir: &Path, keep: &HashSet<u64>, parts: bool) -> io::Result<()> {
    for ent in fs::read_dir(dir)? {
        let ent = ent?;
        let name = ent.file_name();
        let name = name.to_string_lossy();
        // Only the merger's own temporaries (runs, manifests): another file's temporary may
        // be in use by a process that holds no merge lock (db.key of pmem databases).
        let stale = if name.ends_with(".run.tmp")
            || (name.starts_with(MANIFEST_FILE) && name.ends_with(".tmp"))
        {
            true
        } else if name.ends_with(".part") {
            parts
        } else if let Some(id) = name.strip_suffix(".run") {
            u64::from_str_radix(id, 16).is_ok_and(|id| !keep.contains(&id))
        } else {
            false
        };
        if stale {
            let _ = fs::remove_file(ent.path());
        }
    }
    Ok(())
}
