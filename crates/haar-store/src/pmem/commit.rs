//! The commit log (design §5.1, §5.3): the chain of commit-slot arrays (primary array and
//! extensions), segment records, the writer's commit protocol and the readers' walk.
//!
//! Owns what goes into the extents it takes from `Pool::alloc` (field bytes, segment records,
//! slot-array extensions), the commit slots, the tail hint and the extension links. Must not
//! touch the heap top or the rest of the pool header.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use haar_core::Key;
use haar_persist::PersistMode;

use super::layout::{
    ALIGN, ARRAY_HEADER, ARRAY_MAGIC, ARRAY_OFF_LINK, DEAD_SLOT, OFF_TAIL, RECORD_HEADER,
    RECORD_MAGIC, SlotArray, VERSION_NO_EXTENSIONS,
};
use super::pool::{Pool, THROUGH_FILE_MIN};
use crate::backend::{Committed, DbReader, DbWriter, FieldBytes, LendBytes};
use crate::error::{Error, Result};
use crate::format::DataRef;

impl Pool {
    /// The array holding global slot `i`, following links from the arrays known so far.
    /// With `extend`, a missing extension is created (the caller persists the link before it
    /// publishes a slot behind it). `Ok(None)`: the chain does not reach `i`, or, for a
    /// reader, ends at a damaged extension.
    fn array_for(&self, i: u64, extend: bool) -> Result<Option<SlotArray>> {
        let mut arrays = self.arrays.lock().unwrap();
        loop {
            let k = (i / self.nslots) as usize;
            if let Some(a) = arrays.get(k) {
                return Ok(Some(*a));
            }
            let last = *arrays.last().expect("the primary array is always known");
            let Some(link_off) = last.link_off else {
                return Ok(None); // version 1: no extensions
            };
            let first = last.first + self.nslots;
            let link = self.map.atomic_u64(link_off as usize);
            let mut next = link.load(Ordering::Acquire);
            if next == 0 {
                if !extend {
                    return Ok(None);
                }
                next = self.extend(link, first)?;
            }
            match self.load_extension(next, first, link_off) {
                Ok(a) => arrays.push(a),
                Err(detail) if extend => {
                    return Err(Error::Corrupt {
                        what: "commit slot array",
                        path: self.path.clone(),
                        detail,
                    });
                }
                Err(_) => return Ok(None),
            }
        }
    }

    /// Creates an extension for global slots `first..first + nslots` and links it behind
    /// `link`; returns the extension that won the link (ours, or a racing writer's).
    fn extend(&self, link: &std::sync::atomic::AtomicU64, first: u64) -> Result<u64> {
        let size = ARRAY_HEADER + 8 * self.nslots;
        let off = self.alloc(size)?;
        let p = self
            .map
            .ptr_mut(off as usize, size as usize)
            .expect("allocation lies inside the pool");
        let mut h = [0u8; ARRAY_HEADER as usize];
        h[0..4].copy_from_slice(ARRAY_MAGIC);
        h[8..16].copy_from_slice(&first.to_le_bytes());
        h[16..24].copy_from_slice(&self.nslots.to_le_bytes());
        let crc = haar_persist::crc32c(&h[0..24]);
        h[24..28].copy_from_slice(&crc.to_le_bytes());
        // SAFETY: freshly allocated to this writer and unpublished until the link below.
        unsafe {
            std::ptr::write_bytes(p, 0, size as usize);
            std::ptr::copy_nonoverlapping(h.as_ptr(), p, h.len());
        }
        self.map
            .persist(off as usize, size as usize)
            .map_err(|e| Error::io("persist", &self.path, e))?;
        // The chunk's record covers the extension before the link publishes it (§5.4).
        self.persist_chunk_entry()?;
        Ok(
            match link.compare_exchange(0, off, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => off,
                Err(winner) => winner, // ours stays unreferenced: leaked space
            },
        )
    }

    /// Checks the extension at `off` (magic, crc, place in the chain, inside the pool).
    fn load_extension(
        &self,
        off: u64,
        first: u64,
        linked_from: u64,
    ) -> std::result::Result<SlotArray, String> {
        let size = (ARRAY_HEADER + 8 * self.nslots) as usize;
        if self.map.slice(off as usize, size).is_none() {
            let _ = self.map.refresh_len();
        }
        if self.map.slice(off as usize, size).is_none() || !off.is_multiple_of(ALIGN) {
            return Err(format!(
                "slot array extension at {off} lies outside the pool"
            ));
        }
        // Only the immutable first 32 bytes: the link word after them changes atomically.
        let h = self.map.slice(off as usize, 32).expect("checked above");
        let stored = u32::from_le_bytes(h[24..28].try_into().unwrap());
        let field = |r: std::ops::Range<usize>| u64::from_le_bytes(h[r].try_into().unwrap());
        if &h[0..4] != ARRAY_MAGIC
            || stored != haar_persist::crc32c(&h[0..24])
            || field(8..16) != first
            || field(16..24) != self.nslots
        {
            return Err(format!(
                "slot array extension at {off} (for slots from {first}) is damaged"
            ));
        }
        Ok(SlotArray {
            first,
            slots_off: off + ARRAY_HEADER,
            link_off: Some(off + ARRAY_OFF_LINK),
            linked_from: Some(linked_from),
        })
    }

    /// Reads the segment record a slot points to, if it belongs to `db_hash`.
    pub(super) fn record(
        &self,
        off: u64,
        db_hash: Option<u64>,
    ) -> std::result::Result<Option<Vec<u8>>, String> {
        let off = off as usize;
        let mut head = self.map.slice(off, RECORD_HEADER);
        if head.is_none() {
            let _ = self.map.refresh_len();
            head = self.map.slice(off, RECORD_HEADER);
        }
        // Zeros caught by the SIGBUS guard are not damage to the file: say what happened.
        let why = |what: String| {
            if self.map.faulted() {
                format!(
                    "{what}: the pool file shrank while this process had it mapped (truncated \
                     outside haar); restore the file, then restart this process"
                )
            } else {
                what
            }
        };
        let head = head.ok_or_else(|| why(format!("record offset {off} beyond the pool")))?;
        if &head[0..4] != RECORD_MAGIC {
            return Err(why(format!("bad segment record magic at {off}")));
        }
        let len = u32::from_le_bytes(head[4..8].try_into().unwrap()) as usize;
        let hash = u64::from_le_bytes(head[8..16].try_into().unwrap());
        if db_hash.is_some_and(|h| h != hash) {
            return Ok(None);
        }
        let seg = self
            .map
            .slice(off + RECORD_HEADER, len)
            .ok_or_else(|| format!("segment record at {off} of {len} bytes runs past the pool"))?;
        Ok(Some(seg.to_vec()))
    }

    /// Turns global slot `i`, which holds `rec`, into a dead slot (design §5.4), persisted.
    pub(super) fn kill_slot(&self, i: u64, rec: u64) -> Result<()> {
        let Some(a) = self.array_for(i, false)? else {
            return Ok(());
        };
        let off = a.slots_off + 8 * (i - a.first);
        let slot = self.map.atomic_u64(off as usize);
        if slot
            .compare_exchange(rec, DEAD_SLOT, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.map
                .persist(off as usize, 8)
                .map_err(|e| Error::io("persist", &self.path, e))?;
        }
        Ok(())
    }

    pub(super) fn tail(&self) -> u64 {
        self.map.atomic_u64(OFF_TAIL).load(Ordering::Acquire)
    }

    /// Visits committed slots from global index `from`, across arrays; returns the next slot
    /// to visit.
    pub(super) fn walk(&self, from: u64, mut visit: impl FnMut(u64, u64)) -> u64 {
        let tail = self.tail();
        let mut i = from;
        while let Ok(Some(a)) = self.array_for(i, false) {
            let end = a.first + self.nslots;
            while i < end {
                let off = a.slots_off + 8 * (i - a.first);
                let v = self.map.atomic_u64(off as usize).load(Ordering::Acquire);
                if v == 0 {
                    if i < tail {
                        i += 1; // a hole left by a power cut (design §5.3)
                        continue;
                    }
                    return i;
                }
                if v != DEAD_SLOT {
                    visit(i, v);
                }
                i += 1;
            }
        }
        i
    }
}

pub(super) struct PmemWriter {
    pub(super) pool: Arc<Pool>,
    pub(super) id: u64,
    pub(super) db_hash: u64,
    /// Ranges written since the last commit (persisted by msync in Msync mode).
    pub(super) unpersisted: Vec<(u64, u64)>,
    pub(super) _lock: Option<File>,
}

impl PmemWriter {
    fn persist(&self, off: u64, len: u64) -> Result<()> {
        self.pool
            .map
            .persist(off as usize, len as usize)
            .map_err(|e| Error::io("persist", &self.pool.path, e))
    }
}

impl DbWriter for PmemWriter {
    fn id(&self) -> u64 {
        self.id
    }

    fn append(&mut self, _index: &Key, bytes: &[u8]) -> Result<DataRef> {
        let off = self.pool.alloc(bytes.len() as u64)?;
        // A bulk copy writes large fields through the file, never mapping their pages in;
        // otherwise the checksum is computed in the same pass as the copy (one read).
        let through_file =
            bytes.len() >= THROUGH_FILE_MIN && self.pool.through_file.load(Ordering::Relaxed);
        // SAFETY: `off..off+len` was just allocated to this writer and is not published.
        let crc = if through_file {
            unsafe { self.pool.map.write_file_crc32c(off as usize, bytes) }
        } else {
            unsafe { self.pool.map.write_nt_crc32c(off as usize, bytes) }
        }
        .map_err(|e| Error::io("write", &self.pool.path, e))?;
        self.unpersisted.push((off, bytes.len() as u64));
        Ok(DataRef {
            object: 0,
            offset: off,
            length: bytes.len() as u64,
            crc,
        })
    }

    fn commit(&mut self, segment: &[u8]) -> Result<()> {
        let pool = &*self.pool;
        // 1. field bytes durable (non-temporal stores need only the fence in CpuCache mode).
        match pool.map.mode() {
            PersistMode::CpuCache => pool.map.fence(),
            PersistMode::Msync => {
                for &(off, len) in &self.unpersisted {
                    self.persist(off, len)?;
                }
            }
        }
        self.unpersisted.clear();
        // 2. the segment record, persisted.
        let total = (RECORD_HEADER + segment.len()) as u64;
        let rec = pool.alloc(total)?;
        let mut head = [0u8; RECORD_HEADER];
        head[0..4].copy_from_slice(RECORD_MAGIC);
        head[4..8].copy_from_slice(&(segment.len() as u32).to_le_bytes());
        head[8..16].copy_from_slice(&self.db_hash.to_le_bytes());
        let p = pool
            .map
            .ptr_mut(rec as usize, total as usize)
            .expect("allocation lies inside the pool");
        // SAFETY: freshly allocated to this writer, unpublished.
        unsafe {
            std::ptr::copy_nonoverlapping(head.as_ptr(), p, RECORD_HEADER);
            std::ptr::copy_nonoverlapping(segment.as_ptr(), p.add(RECORD_HEADER), segment.len());
        }
        self.persist(rec, total)?;
        // The chunk's record covers the fields and the record before a slot publishes them
        // (design §5.4, "A killed writer's chunk").
        pool.persist_chunk_entry()?;
        // 3. claim a slot: the one 8-byte store that publishes the segment.
        let mut i = pool.tail();
        let slot_off = loop {
            let Some(a) = pool.array_for(i, true)? else {
                return Err(Error::PoolFull {
                    path: pool.path.clone(),
                    detail: format!(
                        "all {} commit slots of this version {VERSION_NO_EXTENSIONS} pool are used \
                         (version {VERSION_NO_EXTENSIONS} pools cannot grow their slot array); \
                         move its databases to a new pool, which has no such limit",
                        pool.nslots
                    ),
                });
            };
            if let Some(link) = a.linked_from {
                // Whoever linked this array, the link must be durable before a slot behind
                // it is published, or a power cut could strand the commit (design §5.3).
                self.persist(link, 8)?;
            }
            let off = a.slots_off + 8 * (i - a.first);
            let slot = pool.map.atomic_u64(off as usize);
            if slot
                .compare_exchange(0, rec, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break off;
            }
            i += 1;
        };
        // 4. persist the slot, then advance and persist the tail hint.
        self.persist(slot_off, 8)?;
        pool.map
            .atomic_u64(OFF_TAIL)
            .fetch_max(i + 1, Ordering::AcqRel);
        self.persist(OFF_TAIL as u64, 8)?;
        // After the commit: a wipe that gave the reserve back must not have it taken again
        // before its own commit (design §4.7).
        crate::reserve::keep(pool.path.parent().unwrap_or(std::path::Path::new("/")));
        Ok(())
    }
}

pub(super) struct PmemReader {
    pub(super) pool: Arc<Pool>,
    pub(super) db: Key,
    pub(super) db_hash: u64,
    pub(super) next: u64,
    /// The pool file's inode (the log id).
    pub(super) ino: u64,
    /// The reclaim epoch read before the last walk (design §5.4): locations found by it are
    /// lent only while the epoch has not moved on.
    pub(super) seen: u64,
}

impl DbReader for PmemReader {
    fn poll(&mut self) -> Result<Vec<Committed>> {
        // Pinned while walking and copying records, so none of them is reused meanwhile.
        let (epoch, _pin) = loop {
            let e = self.pool.epoch();
            if let Some(pin) = self.pool.pin(e)? {
                break (e, pin);
            }
        };
        let mut found = Vec::new();
        self.next = self.pool.walk(self.next, |i, off| found.push((i, off)));
        self.seen = epoch;
        let mut out = Vec::new();
        for (i, off) in found {
            let origin = format!("{} slot {i} @ {off}", self.pool.path.display());
            match self.pool.record(off, Some(self.db_hash)) {
                Ok(Some(bytes)) => out.push(Committed::Segment { bytes, origin }),
                Ok(None) => {}
                Err(detail) => out.push(Committed::Unreadable { origin, detail }),
            }
        }
        let _ = &self.db;
        Ok(out)
    }

    fn read(&self, data: &DataRef, out: &mut Vec<u8>) -> Result<()> {
        out.extend_from_slice(&self.read_bytes(data, Vec::new())?);
        Ok(())
    }

    fn read_bytes(&self, data: &DataRef, _scratch: Vec<u8>) -> Result<FieldBytes> {
        // Zero-copy: committed ranges are not written again while a pin on the epoch they were
        // found under lives (design §5.4) and the pool never shrinks, so the mapping itself
        // is lent, with the pin, for as long as the view lives.
        let Some(pin) = self.pool.pin(self.seen)? else {
            return Err(Error::io(
                "read",
                &self.pool.path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "pool space was reclaimed since the catalogue was read; look the key up again",
                ),
            ));
        };
        let (off, len) = (data.offset as usize, data.length as usize);
        let lender: Arc<dyn LendBytes> = Arc::new(pin);
        if let Some(b) = FieldBytes::lent(lender.clone(), off, len) {
            return Ok(b);
        }
        let _ = self.pool.map.refresh_len();
        FieldBytes::lent(lender, off, len).ok_or_else(|| Error::Corrupt {
            what: "field reference",
            path: self.pool.path.clone(),
            detail: format!("{len} bytes at {off} lie beyond the pool"),
        })
    }

    fn locate(&self, data: &DataRef) -> String {
        format!("{} @ {}", self.pool.path.display(), data.offset)
    }

    fn position(&self) -> u64 {
        self.next
    }

    fn seek(&mut self, position: u64) {
        self.next = position;
    }

    fn log_id(&self) -> u64 {
        self.ino
    }
}
