//! Writing catalogue runs (design §3.1): a run streamed from the overlay of a database's
//! newest commits ([`write_map`]), and the merge of runs into one without decoding their keys
//! ([`merge_runs`]). A run is durable and renamed into place before a manifest names it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use haar_core::Key;

use super::manifest::{RunRef, VERSION, part_path, run_path};
use super::overlay::Overlay;
use super::run::{
    FLAG_BASE, Group, HEADER, KIND_FIELD, KIND_TOMBSTONE, RUN_MAGIC, Run, corrupt, le_u32,
};
use super::state::{Dead, Slot};
use crate::error::{Error, Result};
use crate::format;

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
    crate::sys::random_u64()
}

/// Writes the entries of `map` (encoded entry keys → state: a database's state over part of
/// its log) as a run. Tombstones are dropped when `flags` has [`FLAG_BASE`].
pub(crate) fn write_map(
    dir: &Path,
    map: &Overlay,
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
