//! Space reuse in a version 3 pool (design §5.4): the reclaim epoch, the process table and
//! its pins (the grace period of zero-copy views), the free table, and reclaiming what a
//! wipe or purge snapshot made unreachable.
//!
//! Owns the epoch word, both tables and dead commit slots. Must not touch the heap top (the
//! heap gives tails back there itself), live commit slots or anything a live entry names.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use haar_core::Key;

use super::layout::{
    ADDING, ALIGN, EMPTY, FREE, FREE_ENTRY, MAX_REGION, NO_PIN, OFF_EPOCH, OFF_FREE_CHANGES,
    OFF_HEAP_TOP, PROC_CHUNK_END, PROC_CHUNK_NEXT, PROC_CHUNK_START, PROC_ENTRY, SPLITTING, Tables,
    record_size,
};
use super::pool::Pool;
use super::process::start_time;
use crate::backend::LendBytes;
use crate::error::{Error, Result};
use crate::format::{self, Entry};

/// A pin on the epoch a reader read before it walked the log: while it lives, no region
/// freed after that epoch is handed out again. Lends the pool's bytes, so a zero-copy view
/// holds its own pin.
pub(super) struct PinGuard {
    pool: Arc<Pool>,
    epoch: u64,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        self.pool.unpin(self.epoch);
    }
}

impl LendBytes for PinGuard {
    fn lend(&self, off: usize, len: usize) -> Option<&[u8]> {
        self.pool.map.slice(off, len)
    }
}

/// Free-table entries by the offsets where their regions start and end (hints for
/// [`Pool::absorb_neighbours`]).
#[derive(Default)]
struct Neighbours {
    by_start: HashMap<u64, u64>,
    by_end: HashMap<u64, u64>,
}

/// What the free table holds, for `haar info`.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FreeSpace {
    pub(super) bytes: u64,
    pub(super) regions: u64,
    /// Of `bytes`, freed after the oldest pin of a live process (not reusable yet).
    pub(super) waiting: u64,
    pub(super) live_processes: u64,
}

fn state(generation: u64, kind: u64, pid: u32) -> u64 {
    ((generation & 0xff_ffff) << 40) | (kind << 32) | u64::from(pid)
}
fn kind_of(s: u64) -> u64 {
    (s >> 32) & 0xff
}
fn bump(s: u64, kind: u64, pid: u32) -> u64 {
    state((s >> 40) + 1, kind, pid)
}
fn region(off: u64, len: u64) -> u64 {
    ((off / ALIGN) << 24) | (len / ALIGN)
}
fn unregion(r: u64) -> (u64, u64) {
    ((r >> 24) * ALIGN, (r & 0xff_ffff) * ALIGN)
}

/// Whether the process-table `owner` still runs (same pid, same start time).
fn owner_alive(owner: u64) -> bool {
    match start_time((owner >> 32) as u32) {
        None => false,
        Some(u64::MAX) => true,
        Some(t) => t == owner & 0xffff_ffff,
    }
}

/// Whether the free-table state's `pid` still runs (a pid reused since only delays reuse).
fn pid_alive(s: u64) -> bool {
    start_time(s as u32).is_some()
}

impl Pool {
    fn tables(&self) -> Option<Tables> {
        self.tables
    }

    /// The reclaim epoch (0 in pools without space reuse).
    pub(super) fn epoch(&self) -> u64 {
        match self.tables {
            Some(_) => self.map.atomic_u64(OFF_EPOCH).load(SeqCst),
            None => 0,
        }
    }

    fn proc_owner(&self, t: &Tables, i: u64) -> &AtomicU64 {
        self.map.atomic_u64((t.procs + i * PROC_ENTRY) as usize)
    }

    fn proc_pin(&self, t: &Tables, i: u64) -> &AtomicU64 {
        self.map.atomic_u64((t.procs + i * PROC_ENTRY + 8) as usize)
    }

    fn proc_word(&self, t: &Tables, i: u64, word: u64) -> &AtomicU64 {
        self.map
            .atomic_u64((t.procs + i * PROC_ENTRY + word) as usize)
    }

    fn free_state(&self, t: &Tables, i: u64) -> &AtomicU64 {
        self.map.atomic_u64((t.free + i * FREE_ENTRY) as usize)
    }

    fn free_region(&self, t: &Tables, i: u64) -> &AtomicU64 {
        self.map.atomic_u64((t.free + i * FREE_ENTRY + 8) as usize)
    }

    fn free_epoch(&self, t: &Tables, i: u64) -> &AtomicU64 {
        self.map.atomic_u64((t.free + i * FREE_ENTRY + 16) as usize)
    }

    fn persist_range(&self, off: u64, len: u64) -> Result<()> {
        self.map
            .persist(off as usize, len as usize)
            .map_err(|e| Error::io("persist", &self.path, e))
    }

    /// Pins `epoch` for this process. `None` (and nothing pinned) if the epoch has moved on
    /// since: a reclaim may have freed what the caller found under it.
    pub(super) fn pin(self: &Arc<Self>, epoch: u64) -> Result<Option<PinGuard>> {
        let Some(t) = self.tables() else {
            return Ok(Some(PinGuard {
                pool: self.clone(),
                epoch,
            }));
        };
        {
            let mut pins = self.pins.lock().unwrap();
            let entry = self.entry_in(&t, &mut pins)?;
            match pins.counts.iter_mut().find(|(e, _)| *e == epoch) {
                Some((_, n)) => *n += 1,
                None => pins.counts.push((epoch, 1)),
            }
            if epoch < pins.published {
                pins.published = epoch;
                self.proc_pin(&t, entry).store(epoch, SeqCst);
            }
        }
        // Store the pin, then load the epoch (both sequentially consistent): a reclaim that
        // bumps the epoch after this load sees the pin before it lets anyone reuse.
        std::sync::atomic::fence(SeqCst);
        let guard = PinGuard {
            pool: self.clone(),
            epoch,
        };
        if self.epoch() == epoch {
            Ok(Some(guard))
        } else {
            Ok(None) // dropping the guard unpins
        }
    }

    fn unpin(&self, epoch: u64) {
        let Some(t) = self.tables() else { return };
        let mut pins = self.pins.lock().unwrap();
        let Some(pos) = pins.counts.iter().position(|(e, _)| *e == epoch) else {
            return;
        };
        pins.counts[pos].1 -= 1;
        if pins.counts[pos].1 == 0 {
            pins.counts.swap_remove(pos);
        }
        let min = pins.counts.iter().map(|(e, _)| *e).min().unwrap_or(NO_PIN);
        if min != pins.published
            && let Some(i) = pins.entry
        {
            pins.published = min;
            self.proc_pin(&t, i).store(min, SeqCst);
        }
    }

    /// This pool object's process-table entry, claimed now if it has none.
    fn entry_in(&self, t: &Tables, pins: &mut super::process::Pins) -> Result<u64> {
        if let Some(i) = pins.entry {
            return Ok(i);
        }
        let i = self.claim_proc_entry(t)?;
        pins.entry = Some(i);
        pins.published = NO_PIN;
        Ok(i)
    }

    /// Records this pool object's chunk `start..end`, `next` the first byte not handed out,
    /// in its process-table entry, persisted (`None`: no chunk); design §5.4, "A killed
    /// writer's chunk". Called under the chunk's lock, before anything is allocated in a new
    /// chunk and before an old chunk's tail is given back.
    pub(super) fn record_chunk(&self, chunk: Option<(u64, u64, u64)>) -> Result<()> {
        let Some(t) = self.tables() else {
            return Ok(());
        };
        let i = match self.chunk_entry.load(SeqCst) {
            u64::MAX if chunk.is_none() => return Ok(()),
            u64::MAX => {
                let i = self.entry_in(&t, &mut self.pins.lock().unwrap())?;
                self.chunk_entry.store(i, SeqCst);
                i
            }
            i => i,
        };
        match chunk {
            None => self.proc_word(&t, i, PROC_CHUNK_START).store(0, SeqCst),
            Some((start, next, end)) => {
                self.proc_word(&t, i, PROC_CHUNK_END).store(end, SeqCst);
                self.proc_word(&t, i, PROC_CHUNK_NEXT).store(next, SeqCst);
                self.proc_word(&t, i, PROC_CHUNK_START).store(start, SeqCst);
            }
        }
        self.persist_range(t.procs + i * PROC_ENTRY, PROC_ENTRY)
    }

    /// Notes the chunk's first byte not handed out (a plain store: exact after a kill, and
    /// persisted by [`Pool::persist_chunk_entry`] before anything in the chunk is published).
    pub(super) fn note_chunk_next(&self, next: u64) {
        if let (Some(t), i) = (self.tables(), self.chunk_entry.load(SeqCst))
            && i != u64::MAX
        {
            self.proc_word(&t, i, PROC_CHUNK_NEXT)
                .store(next, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Persists the chunk's record before a store that publishes bytes of the chunk (a commit
    /// slot, an extension's link): after a power cut, the recorded `next` is then at or above
    /// every published byte.
    pub(super) fn persist_chunk_entry(&self) -> Result<()> {
        match (self.tables(), self.chunk_entry.load(SeqCst)) {
            (Some(t), i) if i != u64::MAX => {
                self.persist_range(t.procs + i * PROC_ENTRY + PROC_CHUNK_START, 24)
            }
            _ => Ok(()),
        }
    }

    /// Gives back what the dead owner `dead` of entry `i` reserved and never used, and frees
    /// the entry (design §5.4): takes the entry first, so no other process recovers it too;
    /// clears its chunk, persisted, before the tail goes back, so a recoverer killed in
    /// between leaks the tail but never gives it back twice.
    fn recover_dead(&self, t: &Tables, i: u64, dead: u64) {
        let owner = self.proc_owner(t, i);
        if owner
            .compare_exchange(dead, self.me, SeqCst, SeqCst)
            .is_err()
        {
            return;
        }
        self.proc_pin(t, i).store(NO_PIN, SeqCst);
        let start = self.proc_word(t, i, PROC_CHUNK_START).load(SeqCst);
        if start != 0 {
            let next = self.proc_word(t, i, PROC_CHUNK_NEXT).load(SeqCst);
            let end = self.proc_word(t, i, PROC_CHUNK_END).load(SeqCst);
            self.proc_word(t, i, PROC_CHUNK_START).store(0, SeqCst);
            let top = self.map.atomic_u64(OFF_HEAP_TOP).load(SeqCst);
            let sane = start <= next
                && next <= end
                && end <= top
                && start >= self.heap_start
                && (next | end).is_multiple_of(ALIGN);
            if sane
                && next < end
                && self
                    .persist_range(t.procs + i * PROC_ENTRY + PROC_CHUNK_START, 8)
                    .is_ok()
            {
                self.return_tail(next, end);
            }
        }
        let _ = owner.compare_exchange(self.me, 0, SeqCst, SeqCst);
    }

    /// Recovers the chunks of every dead owner (when the pool is opened).
    pub(super) fn recover_dead_chunks(&self) {
        let Some(t) = self.tables() else { return };
        for i in 0..t.nprocs {
            let cur = self.proc_owner(&t, i).load(SeqCst);
            if cur != 0
                && cur != self.me
                && self.proc_word(&t, i, PROC_CHUNK_START).load(SeqCst) != 0
                && !owner_alive(cur)
            {
                self.recover_dead(&t, i, cur);
            }
        }
    }

    /// Returns `next..end`, reserved but never handed out, to the heap top if it is the top,
    /// else to the free table with epoch 0 (it was never published); best effort: what
    /// cannot be registered stays leaked.
    pub(super) fn return_tail(&self, next: u64, end: u64) {
        if next < end
            && self
                .map
                .atomic_u64(OFF_HEAP_TOP)
                .compare_exchange(end, next, SeqCst, SeqCst)
                .is_err()
        {
            let _ = self.register(&[(next, end - next)], 0);
        }
    }

    /// Claims a process-table entry for this process, sweeping entries of dead processes.
    fn claim_proc_entry(&self, t: &Tables) -> Result<u64> {
        for sweep in [false, true] {
            for i in 0..t.nprocs {
                let owner = self.proc_owner(t, i);
                let cur = owner.load(SeqCst);
                if sweep && cur != 0 && cur != self.me && !owner_alive(cur) {
                    self.recover_dead(t, i, cur);
                }
                if owner.load(SeqCst) == 0
                    && owner.compare_exchange(0, self.me, SeqCst, SeqCst).is_ok()
                {
                    self.proc_pin(t, i).store(NO_PIN, SeqCst);
                    // Left by a binary that predates chunk records, or a recoverer that died.
                    self.proc_word(t, i, PROC_CHUNK_START).store(0, SeqCst);
                    return Ok(i);
                }
            }
        }
        Err(Error::PoolFull {
            path: self.path.clone(),
            detail: format!(
                "all {} process entries of the pool are held by running processes; \
                 stop some of the processes using it",
                t.nprocs
            ),
        })
    }

    /// Releases this process's process-table entry (when the pool is closed).
    pub(super) fn release_proc_entry(&self) {
        let Some(t) = self.tables() else { return };
        let pins = self.pins.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = pins.entry {
            self.proc_pin(&t, i).store(NO_PIN, SeqCst);
            let _ = self
                .proc_owner(&t, i)
                .compare_exchange(self.me, 0, SeqCst, SeqCst);
        }
    }

    /// The smallest pin of a live process (u64::MAX when none): regions freed at an epoch up
    /// to it may be handed out again. Frees the entries of dead processes.
    fn safe_epoch(&self, t: &Tables) -> u64 {
        let mut safe = NO_PIN;
        for i in 0..t.nprocs {
            let owner = self.proc_owner(t, i);
            let cur = owner.load(SeqCst);
            if cur == 0 {
                continue;
            }
            let pin = self.proc_pin(t, i).load(SeqCst);
            let chunk = self.proc_word(t, i, PROC_CHUNK_START).load(SeqCst) != 0;
            if pin == NO_PIN && !chunk {
                continue;
            }
            if cur != self.me && !owner_alive(cur) {
                self.recover_dead(t, i, cur);
                continue;
            }
            if pin != NO_PIN {
                safe = safe.min(pin);
            }
        }
        safe
    }

    /// Repairs a free-table entry left *adding* or *splitting* by a process that died: an
    /// addition is dropped (its region leaks), a split is finished (either region word names
    /// free space). Returns the entry's state afterwards.
    fn recover(&self, t: &Tables, i: u64, s: u64) -> u64 {
        let k = kind_of(s);
        if (k != ADDING && k != SPLITTING) || pid_alive(s) {
            return s;
        }
        let to = bump(s, if k == ADDING { EMPTY } else { FREE }, 0);
        match self
            .free_state(t, i)
            .compare_exchange(s, to, SeqCst, SeqCst)
        {
            Ok(_) => {
                if k == SPLITTING {
                    self.freed_one();
                }
                to
            }
            Err(now) => now,
        }
    }

    /// Counts an entry made free (after it is published), so allocators look again.
    fn freed_one(&self) {
        self.map.atomic_u64(OFF_FREE_CHANGES).fetch_add(1, SeqCst);
    }

    /// Registers free `regions` (64-aligned offsets and lengths) with `epoch`, largest first,
    /// each grown first by the free regions that adjoin it (design §5.4, *Coalesce*); returns
    /// the bytes that did not fit in the table (leaked).
    pub(super) fn register(&self, regions: &[(u64, u64)], epoch: u64) -> Result<u64> {
        let Some(t) = self.tables() else {
            return Ok(regions.iter().map(|r| r.1).sum());
        };
        let mut pieces: Vec<(u64, u64, u64)> = Vec::new();
        for &(mut off, mut len) in regions {
            while len > 0 {
                let n = len.min(MAX_REGION);
                pieces.push((off, n, epoch));
                off += n;
                len -= n;
            }
        }
        let mut free = self.free_neighbours(&t);
        for p in pieces.iter_mut() {
            *p = self.absorb_neighbours(&t, &mut free, *p)?;
        }
        pieces.sort_by_key(|p| std::cmp::Reverse(p.1));
        let pid = std::process::id();
        let mut i = 0;
        let mut leaked = 0;
        for (n, &(off, len, epoch)) in pieces.iter().enumerate() {
            let placed = loop {
                if i >= t.nfree {
                    break false;
                }
                let st = self.free_state(&t, i);
                let s = self.recover(&t, i, st.load(SeqCst));
                if kind_of(s) != EMPTY {
                    i += 1;
                    continue;
                }
                let adding = bump(s, ADDING, pid);
                if st.compare_exchange(s, adding, SeqCst, SeqCst).is_err() {
                    continue; // someone else took it: look at it again
                }
                self.free_region(&t, i).store(region(off, len), SeqCst);
                self.free_epoch(&t, i).store(epoch, SeqCst);
                let entry = t.free + i * FREE_ENTRY;
                self.persist_range(entry + 8, 16)?;
                st.store(bump(adding, FREE, 0), SeqCst);
                self.freed_one();
                self.persist_range(entry, 8)?;
                i += 1;
                break true;
            };
            if !placed {
                leaked += pieces[n..].iter().map(|p| p.1).sum::<u64>();
                break;
            }
        }
        Ok(leaked)
    }

    /// The free entries by where their region starts and where it ends (one scan; each is
    /// checked again when claimed).
    fn free_neighbours(&self, t: &Tables) -> Neighbours {
        let mut n = Neighbours::default();
        for i in 0..t.nfree {
            let s = self.recover(t, i, self.free_state(t, i).load(SeqCst));
            if kind_of(s) == FREE {
                let (off, len) = unregion(self.free_region(t, i).load(SeqCst));
                n.by_start.insert(off, i);
                n.by_end.insert(off + len, i);
            }
        }
        n
    }

    /// Grows the region `(off, len, epoch)` by each free region that adjoins it, emptying the
    /// neighbour's entry (design §5.4, *Coalesce*): claimed (`free → splitting`), its region
    /// read again, then set empty and persisted before the caller registers the grown region.
    /// The grown region takes the larger epoch and never exceeds what one entry can name. A
    /// kill in between leaks what was absorbed; it is never listed twice.
    fn absorb_neighbours(
        &self,
        t: &Tables,
        free: &mut Neighbours,
        (mut off, mut len, mut epoch): (u64, u64, u64),
    ) -> Result<(u64, u64, u64)> {
        let pid = std::process::id();
        loop {
            // Each hint is used once: removed before it is checked.
            let Some(i) = free
                .by_end
                .remove(&off)
                .or_else(|| free.by_start.remove(&(off + len)))
            else {
                return Ok((off, len, epoch));
            };
            let st = self.free_state(t, i);
            let s = st.load(SeqCst);
            let (o, l) = unregion(self.free_region(t, i).load(SeqCst));
            free.by_start.remove(&o);
            free.by_end.remove(&(o + l));
            let adjoins = o + l == off || off + len == o;
            if kind_of(s) != FREE || !adjoins || len + l > MAX_REGION {
                continue;
            }
            let claimed = bump(s, SPLITTING, pid);
            if st.compare_exchange(s, claimed, SeqCst, SeqCst).is_err() {
                continue; // taken or split meanwhile: leave it
            }
            if unregion(self.free_region(t, i).load(SeqCst)) != (o, l) {
                st.store(bump(claimed, FREE, 0), SeqCst);
                continue;
            }
            let e = self.free_epoch(t, i).load(SeqCst);
            st.store(bump(claimed, EMPTY, 0), SeqCst);
            self.persist_range(t.free + i * FREE_ENTRY, 8)?;
            (off, len, epoch) = (off.min(o), len + l, epoch.max(e));
        }
    }

    /// Takes free space for a chunk of at least `need` bytes (normally `chunk`), preferring a
    /// region that starts at `near` (the end of the caller's current chunk). `None` when no
    /// region whose grace period has passed is large enough.
    pub(super) fn take_free(
        &self,
        near: Option<u64>,
        need: u64,
        chunk: u64,
    ) -> Result<Option<(u64, u64)>> {
        let Some(t) = self.tables() else {
            return Ok(None);
        };
        let want = need.max(chunk).next_multiple_of(ALIGN);
        let pid = std::process::id();
        let changes = self.map.atomic_u64(OFF_FREE_CHANGES).load(SeqCst);
        if self.free_seen_empty.load(SeqCst) == changes {
            return Ok(None); // nothing made free since the table was last found empty
        }
        for _attempt in 0..8 {
            // (index, state, offset, length)
            let mut found: Vec<(u64, u64, u64, u64)> = Vec::new();
            let (mut safe, mut any) = (None, false);
            for i in 0..t.nfree {
                let st = self.free_state(&t, i);
                let s = self.recover(&t, i, st.load(SeqCst));
                if kind_of(s) != FREE {
                    continue;
                }
                any = true;
                let (off, len) = unregion(self.free_region(&t, i).load(SeqCst));
                let epoch = self.free_epoch(&t, i).load(SeqCst);
                if st.load(SeqCst) != s || len < need {
                    continue;
                }
                // Only ever inside the heap (a damaged table must not hand out the header).
                if off < self.heap_floor() || off + len > self.heap_top() {
                    continue;
                }
                if epoch > 0 && epoch > *safe.get_or_insert_with(|| self.safe_epoch(&t)) {
                    continue;
                }
                found.push((i, s, off, len));
            }
            let best = near
                .and_then(|n| found.iter().find(|f| f.2 == n))
                .or_else(|| found.iter().filter(|f| f.3 >= want).min_by_key(|f| f.3))
                .or_else(|| found.iter().max_by_key(|f| f.3));
            let Some(&(i, s, off, len)) = best else {
                if !any {
                    self.free_seen_empty.store(changes, SeqCst);
                }
                return Ok(None);
            };
            let st = self.free_state(&t, i);
            if len <= 2 * want {
                if st
                    .compare_exchange(s, bump(s, EMPTY, 0), SeqCst, SeqCst)
                    .is_ok()
                {
                    self.persist_range(t.free + i * FREE_ENTRY, 8)?;
                    return Ok(Some((off, len)));
                }
                continue;
            }
            let splitting = bump(s, SPLITTING, pid);
            if st.compare_exchange(s, splitting, SeqCst, SeqCst).is_err() {
                continue;
            }
            let entry = t.free + i * FREE_ENTRY;
            self.free_region(&t, i)
                .store(region(off + want, len - want), SeqCst);
            self.persist_range(entry + 8, 8)?;
            st.store(bump(splitting, FREE, 0), SeqCst);
            self.freed_one();
            self.persist_range(entry, 8)?;
            return Ok(Some((off, want)));
        }
        Ok(None)
    }

    /// Every free region as (offset, length, epoch).
    pub(super) fn free_list(&self) -> Vec<(u64, u64, u64)> {
        let Some(t) = self.tables() else {
            return Vec::new();
        };
        (0..t.nfree)
            .filter(|&i| kind_of(self.free_state(&t, i).load(SeqCst)) == FREE)
            .map(|i| {
                let (off, len) = unregion(self.free_region(&t, i).load(SeqCst));
                (off, len, self.free_epoch(&t, i).load(SeqCst))
            })
            .collect()
    }

    /// The free table's contents and the live processes holding pins, for `haar info`.
    pub(super) fn free_space(&self) -> Option<FreeSpace> {
        let t = self.tables()?;
        let safe = self.safe_epoch(&t);
        let mut out = FreeSpace::default();
        for i in 0..t.nprocs {
            if self.proc_owner(&t, i).load(SeqCst) != 0 {
                out.live_processes += 1;
            }
        }
        for i in 0..t.nfree {
            let s = self.free_state(&t, i).load(SeqCst);
            if kind_of(s) != FREE {
                continue;
            }
            let (_, len) = unregion(self.free_region(&t, i).load(SeqCst));
            out.bytes += len;
            out.regions += 1;
            if self.free_epoch(&t, i).load(SeqCst) > safe {
                out.waiting += len;
            }
        }
        Some(out)
    }

    /// Reclaims what the last snapshot of database `db` made unreachable (design §5.4): its
    /// earlier segments' records and every field extent only they name become dead slots and
    /// free regions. Call after the snapshot is committed, under the database's exclusive
    /// lock. Returns the bytes freed.
    pub(super) fn reclaim(self: &Arc<Self>, db: &Key, db_hash: u64) -> Result<u64> {
        if self.tables().is_none() {
            return Ok(0);
        }
        // 1. This database's segments that are not dead yet, read under a pin.
        let segs = loop {
            let e = self.epoch();
            let Some(guard) = self.pin(e)? else { continue };
            let mut slots = Vec::new();
            self.walk(0, |i, off| slots.push((i, off)));
            let mut segs = Vec::new();
            for (i, off) in slots {
                if let Ok(Some(bytes)) = self.record(off, Some(db_hash))
                    && let Ok(seg) = format::decode_segment(&bytes)
                    && &seg.db == db
                {
                    segs.push((i, off, bytes.len() as u64, seg));
                }
            }
            drop(guard);
            break segs;
        };
        let Some(last) = segs.iter().rposition(|s| s.3.is_snapshot()) else {
            return Ok(0);
        };
        let named = |e: &Entry| match e {
            Entry::Field { data, .. } => Some((data.offset, data.length.max(1))),
            _ => None,
        };
        let keep: HashSet<u64> = segs[last..]
            .iter()
            .flat_map(|s| s.3.entries.iter().filter_map(named))
            .map(|(off, _)| off)
            .collect();
        let mut freed: HashMap<u64, u64> = HashMap::new();
        for (_, off, len, seg) in &segs[..last] {
            freed.insert(*off, record_size(*len));
            for (o, l) in seg.entries.iter().filter_map(named) {
                if !keep.contains(&o) {
                    freed.insert(o, l.next_multiple_of(ALIGN));
                }
            }
        }
        let mut extents: Vec<(u64, u64)> = freed.into_iter().collect();
        extents.sort_unstable();
        // Everything freed must lie in the heap and overlap nothing else freed: anything else
        // means damage, and reclaiming then could hand out live bytes.
        let top = self.heap_top();
        let mut regions: Vec<(u64, u64)> = Vec::new();
        for &(off, len) in &extents {
            let end = off.checked_add(len);
            if off < self.heap_floor() || !off.is_multiple_of(ALIGN) || end.is_none_or(|e| e > top)
            {
                return Err(
                    self.reclaim_refused(db, format!("extent {off}+{len} lies outside the heap"))
                );
            }
            match regions.last_mut() {
                Some(r) if r.0 + r.1 > off => {
                    return Err(self.reclaim_refused(db, format!("extents overlap at {off}")));
                }
                Some(r) if r.0 + r.1 == off => r.1 += len,
                _ => regions.push((off, len)),
            }
        }
        // 2. Dead slots: readers skip them; they all lie before the snapshot.
        for (i, off, _, _) in &segs[..last] {
            self.kill_slot(*i, *off)?;
        }
        // 3. A new epoch: readers pinned below it may still look at what was freed.
        let t = self.map.atomic_u64(OFF_EPOCH).fetch_add(1, SeqCst) + 1;
        self.persist_range(OFF_EPOCH as u64, 8)?;
        // 4. The free regions, reusable once no live process pins an epoch below `t`.
        let total: u64 = regions.iter().map(|r| r.1).sum();
        let leaked = self.register(&regions, t)?;
        Ok(total - leaked)
    }

    fn reclaim_refused(&self, db: &Key, detail: String) -> Error {
        Error::Corrupt {
            what: "pool heap",
            path: self.path.clone(),
            detail: format!(
                "database {db} was wiped or purged, but its space was not reclaimed: {detail}; \
                 its data stays where it is (run `haar info` and report this pool)"
            ),
        }
    }
}
