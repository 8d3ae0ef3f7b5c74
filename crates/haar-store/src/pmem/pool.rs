//! The pool file itself (design §5.1): writing and checking the header (whose offsets are in
//! `layout`), creating and provisioning a new pool or checking an existing one, growing the
//! file, and [`Pool`], the state every other concern of the backend hangs its `impl Pool`
//! block on.
//!
//! Owns the header (written whole once, at creation; afterwards only its length field, as
//! the file grows) and the file's length. The heap top, the tail hint and the first extension
//! link are changed only by `heap` and `commit`; must not touch the heap's extents, commit
//! slots or records.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use haar_core::Key;
use haar_persist::PoolMapping;

use super::layout::{
    ALIGN, FREE_ENTRIES, FREE_ENTRY, HEADER, MAGIC, OFF_CRC, OFF_EPOCH, OFF_HEAP_START,
    OFF_HEAP_TOP, OFF_LEN, OFF_LINK0, OFF_NSLOTS, OFF_RECOVERED, OFF_TABLES, OFF_TAIL, PROC_ENTRY,
    PROCS, SlotArray, Tables, VERSION, VERSION_EXTENSIONS, VERSION_NO_EXTENSIONS,
};
use super::process::{self, Chunk, Pins};
use super::{PmemOptions, Prefault};
use crate::backend::LendBytes;
use crate::error::{Error, Result};
use crate::sys::flock;

/// The mapped pool and this process's state over it, shared (by `Arc`) by the backend, its
/// writers and its readers. `heap` and `commit` add their own `impl Pool` blocks.
pub(super) struct Pool {
    pub(super) map: PoolMapping,
    pub(super) path: PathBuf,
    file: File,
    max_size: u64,
    pub(super) heap_start: u64,
    /// Slots per array (primary and every extension).
    pub(super) nslots: u64,
    /// Layout version of the pool file.
    pub(super) version: u32,
    /// Slot arrays found so far by this process, in chain order (never shrinks).
    pub(super) arrays: Mutex<Vec<SlotArray>>,
    /// Pool bytes this process faulted in when it created the pool (0 if it did not).
    pub(super) created_mapped: u64,
    /// Heap reserved at a time (a multiple of ALIGN).
    pub(super) chunk_size: u64,
    /// This process's current chunk of the heap, `next..end` not yet handed out.
    pub(super) chunk: Mutex<Chunk>,
    /// Databases seen in the commit log, and how far it was scanned.
    pub(super) dbs: Mutex<(u64, HashMap<Key, bool>)>,
    /// Version 3: where the process and free tables are (`None`: no space reuse).
    pub(super) tables: Option<Tables>,
    /// This process's pins (design §5.4).
    pub(super) pins: Mutex<Pins>,
    /// The process-table entry that records the chunk (u64::MAX: none yet); the same entry
    /// as the pins' (design §5.4, "A killed writer's chunk").
    pub(super) chunk_entry: std::sync::atomic::AtomicU64,
    /// This process as a process-table owner.
    pub(super) me: u64,
    /// The free table's change count when this process last found it empty (design §5.4).
    pub(super) free_seen_empty: std::sync::atomic::AtomicU64,
    /// This process copies in bulk (`pool_prefault: never`, or set by
    /// [`Backend::provision`](crate::backend::Backend)):
    /// new pool space is allocated in the file but not mapped in, and fields of at least
    /// [`THROUGH_FILE_MIN`] bytes are written with `pwrite(2)` (design §5.1).
    pub(super) through_file: std::sync::atomic::AtomicBool,
    /// The file length a bulk copy planned ([`Pool::plan_growth`]); 0 if none.
    planned: std::sync::atomic::AtomicU64,
}

/// The smallest field a bulk-copying process writes through the file rather than the mapping.
pub(super) const THROUGH_FILE_MIN: usize = 64 << 10;

/// The header's checksum: over the immutable fields, which version 3 extends by its tables.
fn header_crc(h: &[u8]) -> u32 {
    let mut b = Vec::with_capacity(72);
    b.extend_from_slice(&h[0..16]);
    b.extend_from_slice(&h[24..32]);
    b.extend_from_slice(&h[40..48]);
    if u32::from_le_bytes(h[8..12].try_into().unwrap()) >= 3 {
        b.extend_from_slice(&h[OFF_TABLES..OFF_TABLES + 32]);
    }
    haar_persist::crc32c(&b)
}

fn corrupt(path: &Path, detail: impl Into<String>) -> Error {
    Error::Corrupt {
        what: "pool header",
        path: path.to_path_buf(),
        detail: detail.into(),
    }
}

impl Pool {
    /// Maps the pool file at `path` and creates it (on first use) or checks its header, under
    /// the file's exclusive lock.
    pub(super) fn open(path: PathBuf, opts: &PmemOptions) -> Result<Pool> {
        let map = PoolMapping::open_with_mode(&path, opts.reserve, opts.force_mode)
            .map_err(|e| Error::io("map pool", &path, e))?;
        let file = File::open(&path).map_err(|e| Error::io("open", &path, e))?;
        // Creation and validation under an exclusive lock, so two first users agree.
        flock(&file, libc::LOCK_EX).map_err(|e| Error::io("lock", &path, e))?;
        let res = Self::init_or_check(&map, &path, opts);
        let _ = flock(&file, libc::LOCK_UN);
        let (heap_start, nslots, version, tables, provisioned) = res?;
        // The creating process faulted in every page; others map each chunk as they take it.
        let created_mapped = if provisioned {
            map.file_len() as u64
        } else {
            0
        };
        let pool = Pool {
            map,
            path,
            file,
            max_size: opts.max_size,
            heap_start,
            nslots,
            version,
            arrays: Mutex::new(vec![SlotArray {
                first: 0,
                slots_off: HEADER as u64,
                link_off: (version >= VERSION_EXTENSIONS).then_some(OFF_LINK0 as u64),
                linked_from: None,
            }]),
            created_mapped,
            chunk_size: opts.chunk.max(1).next_multiple_of(ALIGN),
            chunk: Mutex::new(Chunk::default()),
            dbs: Mutex::new((0, HashMap::new())),
            tables,
            pins: Mutex::new(Pins::default()),
            chunk_entry: std::sync::atomic::AtomicU64::new(u64::MAX),
            me: process::my_owner(),
            free_seen_empty: std::sync::atomic::AtomicU64::new(u64::MAX),
            through_file: std::sync::atomic::AtomicBool::new(opts.prefault == Prefault::Never),
            planned: std::sync::atomic::AtomicU64::new(0),
        };
        // What killed writers reserved and never used goes back (design §5.4).
        pool.recover_dead_chunks();
        Ok(pool)
    }

    /// Whether this pool was created over the leftover of an interrupted creation.
    pub(super) fn recovered(&self) -> bool {
        self.version >= 3 && self.map.atomic_u64(OFF_RECOVERED).load(Ordering::Acquire) == 1
    }

    /// The room above the heap top that archiving `bytes` more needs: what the free table
    /// holds is used first, so only the rest, plus the records' headers and alignment (under
    /// 1/256 of the bytes for fields of 16 KiB and more) and one chunk (writers reserve whole
    /// chunks); 0 when the free table holds it all.
    pub(super) fn room_for(&self, bytes: u64) -> u64 {
        let free = self.free_space().map_or(0, |f| f.bytes - f.waiting);
        match bytes.saturating_sub(free) {
            0 => 0,
            need => need + need / 256 + self.chunk_size,
        }
    }

    /// The heap top: the end of the space reserved so far.
    pub(super) fn heap_top(&self) -> u64 {
        self.map.atomic_u64(OFF_HEAP_TOP).load(Ordering::Acquire)
    }

    /// The first heap byte that can hold an extent (after the tables of a version 3 pool).
    pub(super) fn heap_floor(&self) -> u64 {
        match self.tables {
            Some(t) => t.free + t.nfree * FREE_ENTRY,
            None => self.heap_start,
        }
    }

    fn init_or_check(
        map: &PoolMapping,
        path: &Path,
        opts: &PmemOptions,
    ) -> Result<(u64, u64, u32, Option<Tables>, bool)> {
        let len = map.refresh_len().map_err(|e| Error::io("stat", path, e))?;
        let recovered = len > 0 && interrupted_creation(map, len);
        if (len == 0 || recovered) && !opts.create {
            return Err(Error::NoStore {
                path: path.to_path_buf(),
                detail: "the pool was never completely created (an interrupted creation); \
                         archive into it to create the pool"
                    .into(),
            });
        }
        if len == 0 || recovered {
            let slots = opts.slots.max(1);
            let heap_start = (HEADER as u64 + 8 * slots).next_multiple_of(4096);
            // The tables come first in the heap, zeroed by the new file (all entries empty).
            let tables = Tables {
                procs: heap_start,
                nprocs: PROCS,
                free: heap_start + PROCS * PROC_ENTRY,
                nfree: FREE_ENTRIES,
            };
            let heap_top = tables.free + FREE_ENTRIES * FREE_ENTRY;
            // A bulk copier starts the pool at its minimum: the copy grows it as it goes, a
            // step at a time, so its progress is steady from the first byte (design §5.1).
            let initial = match opts.prefault {
                Prefault::Never => 0,
                _ => opts.initial_size,
            };
            let size = initial.max(heap_top + (16 << 20)).max(len as u64);
            map.grow(size as usize).map_err(|e| {
                let mut err = pool_grow_error(path, size, e);
                if size > initial
                    && let Error::PoolFull { detail, .. } = &mut err
                {
                    detail.push_str(&format!(
                        " (a new pool needs at least {size} bytes: its {slots} commit slots, \
                         tables and a first 16 MiB; pool_size {} was raised to that)",
                        opts.initial_size
                    ));
                }
                err
            })?;
            if recovered {
                // What the interrupted creation wrote (never used: no magic, nothing
                // allocated or committed) is zeroed before the header is written again.
                let n = (heap_top as usize).min(len);
                let p = map.ptr_mut(0, n).expect("inside the file");
                // SAFETY: we hold the exclusive creation lock; nothing in the file is
                // published (it has no magic, so no process has opened it).
                unsafe { std::ptr::write_bytes(p, 0, n) };
            }
            // Provision: fault in (and so zero) every page now, once, instead of paying
            // first-touch costs inside archive (several times slower than a copy into
            // resident pages); a bulk copier writes through the file and maps nothing.
            let mapped = opts.prefault != Prefault::Never;
            if mapped {
                let _ = map.populate(0, size as usize);
            }
            let mut h = [0u8; 128];
            h[0..8].copy_from_slice(MAGIC);
            h[8..12].copy_from_slice(&VERSION.to_le_bytes());
            h[OFF_LEN..OFF_LEN + 8].copy_from_slice(&size.to_le_bytes());
            h[OFF_HEAP_START..OFF_HEAP_START + 8].copy_from_slice(&heap_start.to_le_bytes());
            h[OFF_HEAP_TOP..OFF_HEAP_TOP + 8].copy_from_slice(&heap_top.to_le_bytes());
            h[OFF_NSLOTS..OFF_NSLOTS + 8].copy_from_slice(&slots.to_le_bytes());
            h[OFF_EPOCH..OFF_EPOCH + 8].copy_from_slice(&1u64.to_le_bytes());
            h[OFF_RECOVERED..OFF_RECOVERED + 8]
                .copy_from_slice(&u64::from(recovered).to_le_bytes());
            for (k, v) in [tables.procs, tables.nprocs, tables.free, tables.nfree]
                .into_iter()
                .enumerate()
            {
                h[OFF_TABLES + 8 * k..OFF_TABLES + 8 * k + 8].copy_from_slice(&v.to_le_bytes());
            }
            let crc = header_crc(&h);
            h[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
            // Everything but the magic first, persisted; then the magic: a crash in between
            // leaves a file without magic, which the next opener re-initialises.
            let p = map
                .ptr_mut(0, h.len())
                .expect("header inside the grown file");
            // SAFETY: we hold the exclusive creation lock and nothing is published yet.
            unsafe { std::ptr::copy_nonoverlapping(h[8..].as_ptr(), p.add(8), h.len() - 8) };
            map.persist(0, h.len())
                .map_err(|e| Error::io("persist", path, e))?;
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), p, 8) };
            map.persist(0, 8)
                .map_err(|e| Error::io("persist", path, e))?;
            return Ok((heap_start, slots, VERSION, Some(tables), mapped));
        }
        let h = map.slice(0, 128).ok_or_else(|| {
            corrupt(
                path,
                format!("file is {len} bytes, shorter than the header"),
            )
        })?;
        if &h[0..8] != MAGIC {
            return Err(corrupt(
                path,
                "not a haar pool (no magic, and not what an interrupted creation leaves: it \
                 holds data); move it away if it is not a pool, else report the damage",
            ));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().unwrap());
        if !(VERSION_NO_EXTENSIONS..=VERSION).contains(&version) {
            return Err(corrupt(
                path,
                format!(
                    "pool version {version}; this haar reads versions {VERSION_NO_EXTENSIONS} to {VERSION}"
                ),
            ));
        }
        let stored = u32::from_le_bytes(h[OFF_CRC..OFF_CRC + 4].try_into().unwrap());
        if stored != header_crc(h) {
            return Err(corrupt(path, "header checksum mismatch"));
        }
        // The header records the length the file grew to (after growing it): a shorter file
        // was truncated outside haar, and what lay beyond is gone.
        let recorded = u64::from_le_bytes(h[OFF_LEN..OFF_LEN + 8].try_into().unwrap());
        if recorded > len as u64 {
            return Err(Error::Corrupt {
                what: "pool file",
                path: path.to_path_buf(),
                detail: format!(
                    "is {len} bytes but its header records {recorded}: it was truncated \
                     outside haar and the fields beyond byte {len} are lost; restore the \
                     file from a copy (do not archive into it)"
                ),
            });
        }
        let heap_start =
            u64::from_le_bytes(h[OFF_HEAP_START..OFF_HEAP_START + 8].try_into().unwrap());
        let nslots = u64::from_le_bytes(h[OFF_NSLOTS..OFF_NSLOTS + 8].try_into().unwrap());
        if nslots == 0 {
            return Err(corrupt(path, "zero commit slots"));
        }
        let slots_end = nslots
            .checked_mul(8)
            .and_then(|n| n.checked_add(HEADER as u64));
        if slots_end.is_none_or(|e| heap_start < e) || heap_start as usize > len {
            return Err(corrupt(path, "heap start outside the pool"));
        }
        let tables = if version >= 3 {
            let word = |k: usize| {
                u64::from_le_bytes(
                    h[OFF_TABLES + 8 * k..OFF_TABLES + 8 * k + 8]
                        .try_into()
                        .unwrap(),
                )
            };
            let t = Tables {
                procs: word(0),
                nprocs: word(1),
                free: word(2),
                nfree: word(3),
            };
            let fits = |off: u64, n: u64, size: u64| {
                off >= heap_start
                    && off.is_multiple_of(ALIGN)
                    && (1..=1 << 24).contains(&n)
                    && n.checked_mul(size)
                        .and_then(|b| b.checked_add(off))
                        .is_some_and(|end| end <= len as u64)
            };
            if !fits(t.procs, t.nprocs, PROC_ENTRY) || !fits(t.free, t.nfree, FREE_ENTRY) {
                return Err(corrupt(path, "process or free table outside the pool"));
            }
            Some(t)
        } else {
            None
        };
        Ok((heap_start, nslots, version, tables, false))
    }

    /// Ensures `off..off+len` is inside the file, growing it (under the pool lock) if needed.
    pub(super) fn ensure(&self, off: u64, len: u64) -> Result<()> {
        let end = off + len;
        if end as usize <= self.map.file_len() {
            return Ok(());
        }
        let cur = self
            .map
            .refresh_len()
            .map_err(|e| Error::io("stat", &self.path, e))?;
        if end as usize <= cur {
            return Ok(());
        }
        let planned = self.planned.load(Ordering::Relaxed);
        self.grow_locked(end, |cur| {
            if end <= planned {
                // A bulk copy's planned growth: a step at a time, so the copy's progress is
                // steady (each step allocates what it then fills).
                end.max(cur + PLANNED_STEP)
                    .min(planned)
                    .next_multiple_of(1 << 20)
            } else {
                // Grow by at least a quarter (and 64 MiB) so growth is rare.
                end.max(cur + cur / 4)
                    .max(cur + (64 << 20))
                    .next_multiple_of(1 << 20)
            }
        })
    }

    /// The file's length now (another process may have grown it).
    fn refreshed_len(&self) -> Result<u64> {
        let len = self.map.refresh_len();
        Ok(len.map_err(|e| Error::io("stat", &self.path, e))? as u64)
    }

    /// Fails, naming the pool and what to do, when a file of `end` bytes is beyond `pool_max`
    /// or the reserved address space.
    fn check_room(&self, end: u64) -> Result<()> {
        if self.max_size > 0 && end > self.max_size {
            return Err(Error::PoolFull {
                path: self.path.clone(),
                detail: format!(
                    "needs {end} bytes but pool_max is {}; raise pool_max, purge, or wipe databases",
                    self.max_size
                ),
            });
        }
        if end as usize > self.map.reserve() {
            return Err(Error::PoolFull {
                path: self.path.clone(),
                detail: format!(
                    "needs {end} bytes, more than the {} bytes of address space reserved",
                    self.map.reserve()
                ),
            });
        }
        Ok(())
    }

    /// Grows the file, under the pool lock, so that it holds at least `end` bytes: to
    /// `target(current length)` (capped at `pool_max`), or to just `end` when the device
    /// cannot hold the target; maps the new pages in unless this process copies in bulk.
    fn grow_locked(&self, end: u64, target: impl FnOnce(u64) -> u64) -> Result<()> {
        flock(&self.file, libc::LOCK_EX).map_err(|e| Error::io("lock", &self.path, e))?;
        let res = (|| {
            let cur = self.refreshed_len()?;
            if end <= cur {
                return Ok(());
            }
            self.check_room(end)?;
            let mut target = target(cur).max(end);
            if self.max_size > 0 {
                target = target.min(self.max_size);
            }
            if target as usize > self.map.reserve() {
                target = end;
            }
            // A file system too full for the usual step may still hold what this allocation
            // needs: a nearly full device is used to its end before the pool reports full.
            let needed = end.next_multiple_of(1 << 20).max(cur);
            match self.map.grow(target as usize) {
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull && needed < target => {
                    target = needed;
                    self.map
                        .grow(target as usize)
                        .map_err(|e| pool_grow_error(&self.path, target, e))?;
                }
                r => r.map_err(|e| pool_grow_error(&self.path, target, e))?,
            }
            if !self.through_file.load(Ordering::Relaxed) {
                let _ = self.map.populate(cur as usize, (target - cur) as usize);
            }
            self.map
                .atomic_u64(OFF_LEN)
                .fetch_max(target, Ordering::AcqRel);
            let _ = self.map.persist(OFF_LEN, 8);
            Ok(())
        })();
        let _ = flock(&self.file, libc::LOCK_UN);
        res
    }

    /// Plans growing the file to `end` bytes for a bulk copy (design §5.1): checked now, so a
    /// copy that cannot fit fails before it starts, and then grown [`PLANNED_STEP`] at a time
    /// as the copy needs it. (Growing it all first, or on a thread of its own, costs the same
    /// on a memory file system: allocating and writing a file's pages hold the same inode
    /// lock, so they never overlap; and the copy's progress would stall for the whole growth.)
    ///
    /// # Errors
    /// [`Error::PoolFull`], naming the pool, when `pool_max`, the reserve or the free space
    /// of the file system cannot hold `end` bytes.
    pub(super) fn plan_growth(&self, end: u64) -> Result<()> {
        let cur = self.refreshed_len()?;
        if end <= cur {
            return Ok(());
        }
        self.check_room(end)?;
        let free = haar_persist::available_bytes(&self.path)
            .map_err(|e| Error::io("statvfs", &self.path, e))?;
        if end - cur > free {
            return Err(Error::PoolFull {
                path: self.path.clone(),
                detail: format!(
                    "needs {} more bytes but its file system has {free} free; free space \
                     there or stage into another dataspace",
                    end - cur
                ),
            });
        }
        self.planned.fetch_max(end, Ordering::Relaxed);
        Ok(())
    }
}

/// How much a planned growth ([`Pool::plan_growth`]) adds at a time.
const PLANNED_STEP: u64 = 64 << 20;

/// Bytes from the start of a file without magic that must be zero, past the header, for it to
/// be taken for an interrupted creation whatever its header holds (design §5.1): the commit
/// slots, tables and first heap bytes of any pool that was ever used lie inside.
const CREATION_PROBE: usize = 64 << 20;

/// Whether the file at the pool's path is what an interrupted creation leaves (design §5.1):
/// no magic (the last store of a creation), and either nothing else written, or a header
/// complete but for its magic whose heap and commit log were never used. Anything else
/// without a magic may be damage to a pool with data, and is never overwritten.
fn interrupted_creation(map: &PoolMapping, len: usize) -> bool {
    let Some(h) = map.slice(0, len.min(HEADER)) else {
        return false;
    };
    if h.starts_with(MAGIC) {
        return false;
    }
    if h.iter().all(|&b| b == 0) {
        return true;
    }
    if h.len() < 128 || h[0..8] != [0; 8] {
        return false;
    }
    // A power cut before the header's persist may leave any of its cache lines durable and
    // not the others (a header that is neither zeros nor complete). A creation writes nothing
    // else before its magic, and a pool that was ever used holds non-zero bytes right after
    // the header (its commit slots, process table, heap): zeros there mean nothing to lose.
    let probe = len.min(CREATION_PROBE);
    if let Some(rest) = map.slice(128, probe.saturating_sub(128))
        && probe > 128
        && rest.iter().all(|&b| b == 0)
    {
        return true;
    }
    let mut with = h[..128].to_vec();
    with[0..8].copy_from_slice(MAGIC);
    let word = |o: usize| u64::from_le_bytes(with[o..o + 8].try_into().unwrap());
    let crc = u32::from_le_bytes(with[OFF_CRC..OFF_CRC + 4].try_into().unwrap());
    let version = u32::from_le_bytes(with[8..12].try_into().unwrap());
    // The heap top a new pool starts with: after the tables (version 3) or at the heap start.
    let fresh_top = if version >= 3 {
        word(OFF_TABLES + 16).saturating_add(word(OFF_TABLES + 24).saturating_mul(FREE_ENTRY))
    } else {
        word(OFF_HEAP_START)
    };
    crc == header_crc(&with) && word(OFF_TAIL) == 0 && word(OFF_HEAP_TOP) == fresh_top
}

fn pool_grow_error(path: &Path, size: u64, e: io::Error) -> Error {
    Error::PoolFull {
        path: path.to_path_buf(),
        detail: format!(
            "cannot grow the pool file to {size} bytes: {e}; free space on its file system (df {}) or give a larger device",
            path.parent().unwrap_or(Path::new("/")).display()
        ),
    }
}

impl LendBytes for Pool {
    fn lend(&self, off: usize, len: usize) -> Option<&[u8]> {
        self.map.slice(off, len)
    }
}
