//! The `pmem` backend (design §5): one pool file per root, mapped into memory; field bytes,
//! index segments and commit slots all live in the pool.
//!
//! Owns the pool layout, allocation and the commit protocol; the persistence primitives
//! (non-temporal copy, CLWB, msync, the mapping itself) come from the [`haar_persist`] crate.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use haar_core::Key;
use haar_persist::{PersistMode, PoolMapping};

use serde::{Deserialize, Serialize};

use crate::backend::{
    Backend, Capabilities, Committed, DbReader, DbWriter, Exclusive, FieldBytes, LendBytes,
};
use crate::error::{Error, Result};
use crate::format::{self, DataRef};
use crate::posix::flock;

const MAGIC: &[u8; 8] = b"HAARPOOL";
/// Version written into new pools: 2 has slot-array extensions (design §5.1).
const VERSION: u32 = 2;
/// The version before extensions, still read and written (without them).
const VERSION_NO_EXTENSIONS: u32 = 1;
const HEADER: usize = 4096;
const OFF_LEN: usize = 16;
const OFF_HEAP_START: usize = 24;
const OFF_HEAP_TOP: usize = 32;
const OFF_NSLOTS: usize = 40;
const OFF_TAIL: usize = 48;
const OFF_CRC: usize = 56;
/// Version 2: link to the first slot-array extension.
const OFF_LINK0: usize = 64;
const ARRAY_MAGIC: &[u8; 4] = b"HPSA";
const ARRAY_HEADER: u64 = 64;
const ARRAY_OFF_LINK: u64 = 32;
const RECORD_MAGIC: &[u8; 4] = b"HPSR";
const RECORD_HEADER: usize = 16;
const ALIGN: u64 = 64;
/// Default heap a process reserves at a time for its writes (design §5.3).
pub const DEFAULT_CHUNK: u64 = 16 << 20;

/// Pool sizing.
#[derive(Debug, Clone)]
pub struct PmemOptions {
    /// Size of a new pool file (bytes).
    pub initial_size: u64,
    /// Largest size the pool may grow to; 0 = as large as the device and reserve allow.
    pub max_size: u64,
    /// Commit slots in a new pool (each flush of a database uses one).
    pub slots: u64,
    /// Address space reserved for the mapping (bounds growth).
    pub reserve: usize,
    /// Override of the persistence mode (tests); `None` detects (or `HAAR_PMEM_FORCE`).
    pub force_mode: Option<PersistMode>,
    /// Heap this process reserves at a time for its writes, and maps as it reserves it
    /// (design §5.3); an allocation larger than this takes a chunk of its own size.
    pub chunk: u64,
    /// When this process reserves (and maps) its first chunk.
    pub prefault: Prefault,
    /// [`PmemBackend::provision`] backs the space with 2 MiB pages where the kernel can.
    pub huge_pages: bool,
}

/// When a process reserves and pre-faults (maps, page by page) its first chunk of the heap;
/// after PMDK's `prefault.at_create` and `prefault.at_open`. The process that creates a pool
/// always faults in all of it, which also allocates its pages (provisioning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Prefault {
    /// At its first write: opening costs nothing, and that write pays for mapping the chunk
    /// (about 0.1 ms per MiB on this class of machine).
    #[default]
    Create,
    /// When it opens the pool: for a process that is about to write a known amount (give
    /// `chunk` that size), as `haar hammer`'s workers do before their start barrier.
    Open,
}

impl Default for PmemOptions {
    fn default() -> Self {
        PmemOptions {
            initial_size: 1 << 30,
            max_size: 0,
            slots: 1 << 20,
            reserve: 1 << 40,
            force_mode: None,
            chunk: DEFAULT_CHUNK,
            prefault: Prefault::Create,
            huge_pages: false,
        }
    }
}

/// One array of commit slots: the primary one in the header area or an extension in the heap.
#[derive(Debug, Clone, Copy)]
struct SlotArray {
    /// Global index of its first slot.
    first: u64,
    /// Pool offset of its first slot.
    slots_off: u64,
    /// Pool offset of its link to the next extension (`None` in version 1 pools).
    link_off: Option<u64>,
    /// Pool offset of the link word that points to it (`None` for the primary array).
    linked_from: Option<u64>,
}

struct Pool {
    map: PoolMapping,
    path: PathBuf,
    file: File,
    max_size: u64,
    heap_start: u64,
    /// Slots per array (primary and every extension).
    nslots: u64,
    /// Layout version of the pool file.
    version: u32,
    /// Slot arrays found so far by this process, in chain order (never shrinks).
    arrays: Mutex<Vec<SlotArray>>,
    /// Pool bytes this process faulted in when it created the pool (0 if it did not).
    created_mapped: u64,
    /// Heap reserved at a time (a multiple of ALIGN).
    chunk_size: u64,
    /// This process's current chunk of the heap, `next..end` not yet handed out.
    chunk: Mutex<Chunk>,
    /// Databases seen in the commit log, and how far it was scanned.
    dbs: Mutex<(u64, HashMap<Key, bool>)>,
}

/// The pool's file name inside its root.
pub const POOL_FILE: &str = "haar.pool";

/// A range of the heap reserved by this process, sub-allocated privately (design §5.3).
#[derive(Debug, Default)]
struct Chunk {
    next: u64,
    end: u64,
}

/// Persistent-memory pool backend.
pub struct PmemBackend {
    pool: Arc<Pool>,
    lock_dir: PathBuf,
    huge_pages: bool,
}

fn header_crc(h: &[u8]) -> u32 {
    let mut b = Vec::with_capacity(40);
    b.extend_from_slice(&h[0..16]);
    b.extend_from_slice(&h[24..32]);
    b.extend_from_slice(&h[40..48]);
    crc32c::crc32c(&b)
}

fn corrupt(path: &Path, detail: impl Into<String>) -> Error {
    Error::Corrupt {
        what: "pool header",
        path: path.to_path_buf(),
        detail: detail.into(),
    }
}

impl PmemBackend {
    /// Opens the pool in `root`, creating it on first use.
    pub fn open(root: &Path, opts: PmemOptions) -> Result<PmemBackend> {
        fs::create_dir_all(root).map_err(|e| Error::io("create root", root, e))?;
        let lock_dir = root.join("locks");
        fs::create_dir_all(&lock_dir).map_err(|e| Error::io("create", &lock_dir, e))?;
        let path = root.join(POOL_FILE);
        let map = PoolMapping::open_with_mode(&path, opts.reserve, opts.force_mode)
            .map_err(|e| Error::io("map pool", &path, e))?;
        let file = File::open(&path).map_err(|e| Error::io("open", &path, e))?;
        // Creation and validation under an exclusive lock, so two first users agree.
        flock(&file, libc::LOCK_EX).map_err(|e| Error::io("lock", &path, e))?;
        let res = Self::init_or_check(&map, &path, &opts);
        let _ = flock(&file, libc::LOCK_UN);
        let (heap_start, nslots, version, provisioned) = res?;
        // The creating process faulted in every page; others map each chunk as they take it.
        let created_mapped = if provisioned {
            map.file_len() as u64
        } else {
            0
        };
        let backend = PmemBackend {
            pool: Arc::new(Pool {
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
                    link_off: (version >= VERSION).then_some(OFF_LINK0 as u64),
                    linked_from: None,
                }]),
                created_mapped,
                chunk_size: opts.chunk.max(1).next_multiple_of(ALIGN),
                chunk: Mutex::new(Chunk::default()),
                dbs: Mutex::new((0, HashMap::new())),
            }),
            lock_dir,
            huge_pages: opts.huge_pages,
        };
        if opts.prefault == Prefault::Open {
            backend
                .pool
                .new_chunk(&mut backend.pool.chunk.lock().unwrap(), 0)?;
        }
        Ok(backend)
    }

    fn init_or_check(
        map: &PoolMapping,
        path: &Path,
        opts: &PmemOptions,
    ) -> Result<(u64, u64, u32, bool)> {
        let len = map.refresh_len().map_err(|e| Error::io("stat", path, e))?;
        if len == 0 {
            let slots = opts.slots.max(1);
            let heap_start = (HEADER as u64 + 8 * slots).next_multiple_of(4096);
            let size = opts.initial_size.max(heap_start + (16 << 20));
            map.grow(size as usize)
                .map_err(|e| pool_grow_error(path, size, e))?;
            // Provision: fault in (and so zero) every page now, once, instead of paying
            // first-touch costs inside archive (several times slower than a copy into
            // resident pages).
            let _ = map.populate(0, size as usize);
            let mut h = [0u8; 64];
            h[0..8].copy_from_slice(MAGIC);
            h[8..12].copy_from_slice(&VERSION.to_le_bytes());
            h[OFF_LEN..OFF_LEN + 8].copy_from_slice(&size.to_le_bytes());
            h[OFF_HEAP_START..OFF_HEAP_START + 8].copy_from_slice(&heap_start.to_le_bytes());
            h[OFF_HEAP_TOP..OFF_HEAP_TOP + 8].copy_from_slice(&heap_start.to_le_bytes());
            h[OFF_NSLOTS..OFF_NSLOTS + 8].copy_from_slice(&slots.to_le_bytes());
            let crc = header_crc(&h);
            h[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
            // Everything but the magic first, persisted; then the magic: a crash in between
            // leaves a file without magic, which the next opener re-initialises.
            let p = map.ptr_mut(0, 64).expect("header inside the grown file");
            // SAFETY: we hold the exclusive creation lock and nothing is published yet.
            unsafe { std::ptr::copy_nonoverlapping(h[8..].as_ptr(), p.add(8), 56) };
            map.persist(0, 64)
                .map_err(|e| Error::io("persist", path, e))?;
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), p, 8) };
            map.persist(0, 8)
                .map_err(|e| Error::io("persist", path, e))?;
            return Ok((heap_start, slots, VERSION, true));
        }
        let h = map.slice(0, 64).ok_or_else(|| {
            corrupt(
                path,
                format!("file is {len} bytes, shorter than the header"),
            )
        })?;
        if &h[0..8] != MAGIC {
            if h.iter().all(|&b| b == 0) {
                return Err(corrupt(
                    path,
                    "pool header is all zeros (creation interrupted?): remove the file to start a new pool",
                ));
            }
            return Err(corrupt(path, "not a haar pool (bad magic)"));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().unwrap());
        if version != VERSION && version != VERSION_NO_EXTENSIONS {
            return Err(corrupt(
                path,
                format!(
                    "pool version {version}; this haar reads versions {VERSION_NO_EXTENSIONS} and {VERSION}"
                ),
            ));
        }
        let stored = u32::from_le_bytes(h[OFF_CRC..OFF_CRC + 4].try_into().unwrap());
        if stored != header_crc(h) {
            return Err(corrupt(path, "header checksum mismatch"));
        }
        let heap_start =
            u64::from_le_bytes(h[OFF_HEAP_START..OFF_HEAP_START + 8].try_into().unwrap());
        let nslots = u64::from_le_bytes(h[OFF_NSLOTS..OFF_NSLOTS + 8].try_into().unwrap());
        if nslots == 0 {
            return Err(corrupt(path, "zero commit slots"));
        }
        if heap_start < HEADER as u64 + 8 * nslots || heap_start as usize > len {
            return Err(corrupt(path, "heap start outside the pool"));
        }
        Ok((heap_start, nslots, version, false))
    }

    /// Provisions the pool for `free` more bytes of writes: grows the file (if needed) so that
    /// `free` bytes beyond the heap top lie inside it, with their pages allocated, and backs
    /// the free part with huge pages where the kernel can (design §5.1), as `haar hammer`
    /// does before its start barrier. Nothing is allocated from the heap.
    ///
    /// # Errors
    /// [`Error::PoolFull`] when the device, `pool_max` or the reserve cannot hold it.
    pub fn provision(&self, free: u64) -> Result<()> {
        let top = self
            .pool
            .map
            .atomic_u64(OFF_HEAP_TOP)
            .load(Ordering::Acquire);
        self.pool.ensure(top, free.max(1))?;
        // Optionally like a DAX namespace, mapped with 2 MiB pages: every process then maps
        // (and unmaps) the space for 512 times fewer page-table entries, but on tmpfs the
        // kernel copies every page into them first (provisioning about 2-3x slower here).
        // Best effort.
        if self.huge_pages {
            let len = self.pool.map.file_len() - top as usize;
            self.pool.map.use_huge_pages(top as usize, len);
        }
        Ok(())
    }

    fn lock_file(&self, db: &Key) -> Result<File> {
        let path = self.lock_dir.join(format::db_dir_name(db));
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("open", &path, e))
    }

    fn try_lock(&self, db: &Key, op: libc::c_int, what: &str) -> Result<File> {
        let f = self.lock_file(db)?;
        flock(&f, op | libc::LOCK_NB).map_err(|_| Error::Busy {
            db: db.to_string(),
            detail: format!(
                "{what} (pool {}); retry when they have finished",
                self.pool.path.display()
            ),
        })?;
        Ok(f)
    }

    fn writer(&self, db: &Key, lock: Option<File>) -> Result<PmemWriter> {
        let mut key = Vec::new();
        format::encode_key(db, &mut key).map_err(|reason| Error::BadKey {
            key: db.to_string(),
            reason,
        })?;
        Ok(PmemWriter {
            pool: self.pool.clone(),
            id: crate::posix::random_u64(),
            db_hash: format::fnv1a64(&key),
            unpersisted: Vec::new(),
            _lock: lock,
        })
    }
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
        let crc = crc32c::crc32c(&h[0..24]);
        h[24..28].copy_from_slice(&crc.to_le_bytes());
        // SAFETY: freshly allocated to this writer and unpublished until the link below.
        unsafe {
            std::ptr::write_bytes(p, 0, size as usize);
            std::ptr::copy_nonoverlapping(h.as_ptr(), p, h.len());
        }
        self.map
            .persist(off as usize, size as usize)
            .map_err(|e| Error::io("persist", &self.path, e))?;
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
            || stored != crc32c::crc32c(&h[0..24])
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

    /// Ensures `off..off+len` is inside the file, growing it (under the pool lock) if needed.
    fn ensure(&self, off: u64, len: u64) -> Result<()> {
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
        flock(&self.file, libc::LOCK_EX).map_err(|e| Error::io("lock", &self.path, e))?;
        let res = (|| {
            let cur = self
                .map
                .refresh_len()
                .map_err(|e| Error::io("stat", &self.path, e))? as u64;
            if end <= cur {
                return Ok(());
            }
            // Grow by at least a quarter (and 64 MiB) so growth is rare.
            let mut target = end
                .max(cur + cur / 4)
                .max(cur + (64 << 20))
                .next_multiple_of(1 << 20);
            if self.max_size > 0 {
                if end > self.max_size {
                    return Err(Error::PoolFull {
                        path: self.path.clone(),
                        detail: format!(
                            "needs {end} bytes but pool_max is {}; raise pool_max, purge, or wipe databases",
                            self.max_size
                        ),
                    });
                }
                target = target.min(self.max_size);
            }
            if target as usize > self.map.reserve() {
                return Err(Error::PoolFull {
                    path: self.path.clone(),
                    detail: format!(
                        "needs {end} bytes, more than the {} bytes of address space reserved",
                        self.map.reserve()
                    ),
                });
            }
            self.map
                .grow(target as usize)
                .map_err(|e| pool_grow_error(&self.path, target, e))?;
            let _ = self.map.populate(cur as usize, (target - cur) as usize);
            self.map
                .atomic_u64(OFF_LEN)
                .fetch_max(target, Ordering::AcqRel);
            let _ = self.map.persist(OFF_LEN, 8);
            Ok(())
        })();
        let _ = flock(&self.file, libc::LOCK_UN);
        res
    }

    /// Allocates `len` bytes (64-aligned) from this process's chunk of the heap, inside the
    /// file and pre-faulted; takes a new chunk when it does not fit (design §5.3).
    fn alloc(&self, len: u64) -> Result<u64> {
        let size = len.max(1).next_multiple_of(ALIGN);
        let mut c = self.chunk.lock().unwrap();
        if c.end - c.next < size {
            self.new_chunk(&mut c, size)?;
        }
        let off = c.next;
        c.next += size;
        Ok(off)
    }

    /// Replaces this process's chunk by a fresh one of at least `need` bytes: reserved with
    /// one `fetch_add` on the heap top, grown into the file and mapped. The old chunk's
    /// unused tail is given back if nobody has reserved after it, else it is leaked space.
    fn new_chunk(&self, c: &mut Chunk, need: u64) -> Result<()> {
        self.give_back(c);
        let top = self.map.atomic_u64(OFF_HEAP_TOP);
        let mut size = need.max(self.chunk_size);
        let mut off = top.fetch_add(size, Ordering::AcqRel);
        if let Err(e) = self.ensure(off, size) {
            // A full chunk does not fit (pool_max, device): return it and try the exact size.
            let _ = top.compare_exchange(off + size, off, Ordering::AcqRel, Ordering::Acquire);
            if size == need {
                return Err(e);
            }
            size = need;
            off = top.fetch_add(size, Ordering::AcqRel);
            self.ensure(off, size)?;
        }
        // The reservation is durable before anything in it can be published, so after a
        // power cut the heap top never lies below committed bytes. (Giving a tail back need
        // not be: a stale, higher top only leaks the tail.)
        self.map
            .persist(OFF_HEAP_TOP, 8)
            .map_err(|e| Error::io("persist", &self.path, e))?;
        let end = off + size;
        let from = off.max(self.created_mapped);
        if end > from {
            // Pre-faulting is an optimisation; a failure only costs page faults later.
            let _ = self.map.populate(from as usize, (end - from) as usize);
        }
        *c = Chunk { next: off, end };
        Ok(())
    }

    /// Returns the unused tail of `c` to the heap when the heap top is still its end.
    fn give_back(&self, c: &mut Chunk) {
        if c.next < c.end {
            let _ = self.map.atomic_u64(OFF_HEAP_TOP).compare_exchange(
                c.end,
                c.next,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        *c = Chunk::default();
    }

    /// Reads the segment record a slot points to, if it belongs to `db_hash`.
    fn record(
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
        let head = head.ok_or_else(|| format!("record offset {off} beyond the pool"))?;
        if &head[0..4] != RECORD_MAGIC {
            return Err(format!("bad segment record magic at {off}"));
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

    fn tail(&self) -> u64 {
        self.map.atomic_u64(OFF_TAIL).load(Ordering::Acquire)
    }

    /// Visits committed slots from global index `from`, across arrays; returns the next slot
    /// to visit.
    fn walk(&self, from: u64, mut visit: impl FnMut(u64, u64)) -> u64 {
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
                visit(i, v);
                i += 1;
            }
        }
        i
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let mut c = std::mem::take(self.chunk.get_mut().unwrap_or_else(|e| e.into_inner()));
        self.give_back(&mut c);
    }
}

impl LendBytes for Pool {
    fn lend(&self, off: usize, len: usize) -> Option<&[u8]> {
        self.map.slice(off, len)
    }
}

impl Backend for PmemBackend {
    fn describe(&self) -> String {
        format!("pmem:{}", self.pool.path.display())
    }

    fn open_writer(&self, db: &Key) -> Result<Box<dyn DbWriter>> {
        let lock = self.try_lock(db, libc::LOCK_SH, "a wipe or purge holds it")?;
        Ok(Box::new(self.writer(db, Some(lock))?))
    }

    fn open_reader(&self, db: &Key) -> Result<Option<Box<dyn DbReader>>> {
        let mut key = Vec::new();
        format::encode_key(db, &mut key).map_err(|reason| Error::BadKey {
            key: db.to_string(),
            reason,
        })?;
        if !self.databases()?.contains(db) {
            return Ok(None);
        }
        Ok(Some(Box::new(PmemReader {
            pool: self.pool.clone(),
            db: db.clone(),
            db_hash: format::fnv1a64(&key),
            next: 0,
        })))
    }

    fn databases(&self) -> Result<Vec<Key>> {
        let mut cache = self.pool.dbs.lock().unwrap();
        let (scanned, ref mut dbs) = *cache;
        let mut found = Vec::new();
        let next = self.pool.walk(scanned, |_, off| found.push(off));
        for off in found {
            if let Ok(Some(bytes)) = self.pool.record(off, None)
                && let Ok(seg) = format::decode_segment(&bytes)
            {
                // A snapshot with no entries is a wipe: the database is gone.
                let alive = !(seg.is_snapshot() && seg.entries.is_empty());
                dbs.insert(seg.db, alive);
            }
        }
        cache.0 = next;
        Ok(cache
            .1
            .iter()
            .filter(|(_, alive)| **alive)
            .map(|(k, _)| k.clone())
            .collect())
    }

    fn wipe_database(&self, db: &Key) -> Result<()> {
        let lock = self.try_lock(db, libc::LOCK_EX, "writers hold it")?;
        let mut w = self.writer(db, Some(lock))?;
        let b =
            format::SegmentBuilder::new(format::FLAG_SNAPSHOT, w.id, 0, db).map_err(|reason| {
                Error::BadKey {
                    key: db.to_string(),
                    reason,
                }
            })?;
        w.commit(&b.finish())
    }

    fn exclusive(&self, db: &Key) -> Result<Box<dyn Exclusive>> {
        let lock = self.try_lock(db, libc::LOCK_EX, "writers hold it")?;
        Ok(Box::new(PmemExclusive {
            backend: PmemBackend {
                pool: self.pool.clone(),
                lock_dir: self.lock_dir.clone(),
                huge_pages: self.huge_pages,
            },
            db: db.clone(),
            _lock: lock,
        }))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reclaims_space: false,
            persistent: true,
        }
    }

    fn info(&self) -> serde_json::Value {
        let m = &self.pool.map;
        let top = m.atomic_u64(OFF_HEAP_TOP).load(Ordering::Acquire);
        serde_json::json!({
            "backend": "pmem",
            "pool": self.pool.path,
            "pool_bytes": m.file_len(),
            "heap_used_bytes": top - self.pool.heap_start,
            "pool_version": self.pool.version,
            "commit_slots_per_array": self.pool.nslots,
            "commit_slots_used": self.pool.tail(),
            "commit_slot_arrays": self.pool.arrays.lock().unwrap().len(),
            "persist_mode": format!("{:?}", m.mode()),
            "dax": m.is_dax(),
        })
    }
}

struct PmemExclusive {
    backend: PmemBackend,
    db: Key,
    _lock: File,
}

impl Exclusive for PmemExclusive {
    fn snapshot_writer(&mut self) -> Result<Box<dyn DbWriter>> {
        // A snapshot segment is an ordinary commit: its SNAPSHOT flag makes readers reset.
        Ok(Box::new(self.backend.writer(&self.db, None)?))
    }

    fn reclaim(&mut self, _live: &HashSet<u64>) -> Result<u64> {
        Ok(0) // heap space is not reused yet (design §5.4)
    }
}

struct PmemWriter {
    pool: Arc<Pool>,
    id: u64,
    db_hash: u64,
    /// Ranges written since the last commit (persisted by msync in Msync mode).
    unpersisted: Vec<(u64, u64)>,
    _lock: Option<File>,
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

    fn append(&mut self, bytes: &[u8]) -> Result<DataRef> {
        let off = self.pool.alloc(bytes.len() as u64)?;
        // SAFETY: `off..off+len` was just allocated to this writer and is not published.
        // The checksum is computed in the same pass as the copy (one read of the field).
        let crc = unsafe { self.pool.map.write_nt_crc32c(off as usize, bytes) }
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
            PersistMode::CpuCache => haar_persist::sfence(),
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
        Ok(())
    }
}

struct PmemReader {
    pool: Arc<Pool>,
    db: Key,
    db_hash: u64,
    next: u64,
}

impl DbReader for PmemReader {
    fn poll(&mut self) -> Result<Vec<Committed>> {
        let mut found = Vec::new();
        self.next = self.pool.walk(self.next, |i, off| found.push((i, off)));
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
        // Zero-copy: committed ranges are immutable (PoolMapping contract rule 1) and the pool
        // never shrinks, so the mapping itself can be lent for as long as the Arc lives.
        let (off, len) = (data.offset as usize, data.length as usize);
        let lender: Arc<dyn LendBytes> = self.pool.clone();
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
}
