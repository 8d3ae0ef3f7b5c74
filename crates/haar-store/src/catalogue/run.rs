//! Catalogue runs (design §3.1): immutable sorted tables holding a database's index entries up
//! to a position of its commit log, so that opening a database, looking up one key and
//! listing a request cost O(runs × log N) and O(result) instead of a replay of everything ever
//! archived.
//!
//! Owns the run file format and reading it (lookup, request scan, full iteration). Writing
//! runs is [`super::writer`]; the manifest that names them is [`super::manifest`].

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use haar_core::Key;
use haar_core::request::{Request, Values};
use memmap2::Mmap;

use super::manifest::{RunRef, VERSION, run_path};
use super::state::{Dead, Slot};
use crate::error::{Error, Result};
use crate::format::{self, Cursor, DataRef};

pub(super) const RUN_MAGIC: &[u8; 4] = b"HRUN";
pub(super) const HEADER: usize = 128;
/// The oldest run of a database: it holds no tombstones.
pub(crate) const FLAG_BASE: u16 = 1;
pub(super) const KIND_FIELD: u8 = 1;
pub(super) const KIND_TOMBSTONE: u8 = 2;
/// Most request value combinations a scan narrows by before it filters instead.
const MAX_PREFIXES: usize = 4096;

pub(super) fn corrupt(path: &Path, what: &'static str, detail: impl Into<String>) -> Error {
    Error::Corrupt {
        what,
        path: path.to_path_buf(),
        detail: detail.into(),
    }
}

/// One group of a run: the entries of one index key whose datum keys have one keyword list.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) index: Key,
    pub(crate) keywords: Vec<String>,
    first: usize,
    pub(super) n: usize,
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

pub(super) fn le_u32(b: &[u8], at: usize) -> u32 {
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
    pub(super) fn values(&self) -> Result<Vec<&str>> {
        (0..self.dict_n as u32).map(|i| self.value(i)).collect()
    }

    /// Record `i` of group `g`, checked.
    pub(super) fn record(&self, g: &Group, i: usize) -> Result<&[u8]> {
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

    pub(super) fn slot(&self, rec: &[u8], nk: usize) -> Result<Slot> {
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
