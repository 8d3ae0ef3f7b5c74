//! The `pmem` backend (design §5): one pool file per root, mapped into memory; field bytes,
//! index segments and commit slots all live in the pool.
//!
//! Owns the pool layout, allocation and the commit protocol; the persistence primitives
//! (non-temporal copy, CLWB, msync, the mapping itself) come from the [`haar_persist`] crate.
//!
//! One module per concern, each an `impl Pool` block or the types it owns: `pool` (header,
//! creation and checks, growth of the file), `heap` (chunk reservation and allocation),
//! `commit` (the slot-array chain, segment records, the writer's commit and the readers) and
//! `reuse` (the epoch, process and free tables). Below them, imported by all and importing
//! none: `layout`, every offset, size, magic and version of the pool file, and `process`,
//! this process's in-memory state over the pool.
//! This module holds the public options and [`PmemBackend`] (database locks, the database
//! list, the `Backend` methods); it changes pool bytes only through the methods those
//! modules give `Pool`.

mod commit;
mod heap;
mod layout;
mod pool;
mod process;
mod reuse;

use std::collections::HashSet;
use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use haar_core::Key;
use haar_persist::PersistMode;

use serde::{Deserialize, Serialize};

use self::commit::{PmemReader, PmemWriter};
use self::layout::{OFF_HEAP_TOP, POOL_HEADER_MIN};
use self::pool::Pool;
use crate::backend::{Backend, Capabilities, DbReader, DbWriter, Exclusive};
use crate::error::{Error, Result};
use crate::format;
use crate::sys::flock;

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
    /// Create the pool (and its root) if there is none; `false` for reads, which never create
    /// or re-create a store and get [`Error::NoStore`] instead.
    pub create: bool,
}

/// When a process reserves and pre-faults (maps, page by page) its first chunk of the heap;
/// after PMDK's `prefault.at_create` and `prefault.at_open`. The process that creates a pool
/// faults in all of it, which also allocates its pages (provisioning), except with `Never`.
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
    /// Never, not even when it creates the pool (whose pages it still allocates), and fields
    /// of 64 KiB or more are written through the file (`pwrite`): for a process that copies
    /// in bulk, writing each page once and never reading it (`haar stage` into a pmem
    /// dataspace). On 4 KiB pages mapping costs about 1 µs a page, as much as allocating it
    /// (design §5.1).
    Never,
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
            create: true,
        }
    }
}

/// The pool's file name inside its root.
pub const POOL_FILE: &str = "haar.pool";

/// How many databases the catalogue directory `cat_dir` names (a `db.key` in a
/// sub-directory, readable or not).
fn catalogued_databases(cat_dir: &Path) -> usize {
    fs::read_dir(cat_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("db.key").exists())
        .count()
}

/// Persistent-memory pool backend.
pub struct PmemBackend {
    pool: Arc<Pool>,
    lock_dir: PathBuf,
    huge_pages: bool,
    /// `<root>/catalogue`: one directory per database (design §3.1).
    cat_dir: PathBuf,
    /// Inode of the pool file: the log id of every database's commit log.
    ino: u64,
}

impl PmemBackend {
    /// Opens the pool in `root`, creating it on first use.
    pub fn open(root: &Path, opts: PmemOptions) -> Result<PmemBackend> {
        let path = root.join(POOL_FILE);
        // A pool that held databases (its catalogue names them) and is now empty or gone was
        // truncated or deleted: damage, never "no store", and never re-created over them.
        let len = fs::metadata(&path).ok().map(|m| m.len());
        if len.is_none_or(|l| l < POOL_HEADER_MIN) {
            let named = catalogued_databases(&root.join(crate::posix::CATALOGUE_DIR));
            if named > 0 {
                return Err(Error::Corrupt {
                    what: "pool file",
                    path,
                    detail: format!(
                        "{} while its catalogue ({}) names {named} database(s): the pool was \
                         truncated or deleted and their fields are lost from it; restore the \
                         pool file from a copy (its size is in the copy's header, bytes 16..24), \
                         or, to give the data up, remove {} and the catalogue directory; \
                         archiving into it would only create an empty pool",
                        match len {
                            Some(l) => format!(
                                "is {l} bytes, shorter than a pool's header ({POOL_HEADER_MIN} bytes)"
                            ),
                            None => "is missing".into(),
                        },
                        root.join(crate::posix::CATALOGUE_DIR).display(),
                        root.join(POOL_FILE).display(),
                    ),
                });
            }
        }
        if !opts.create {
            // A read: the pool must exist, with something in it.
            match fs::metadata(&path) {
                Ok(m) if m.len() > 0 => {}
                Ok(_) => {
                    return Err(Error::NoStore {
                        path,
                        detail: "the pool file is empty (its creation never ran); archive \
                                 into it to create the pool"
                            .into(),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::NoStore {
                        path,
                        detail: "no pool file: nothing was archived there; check --root, \
                                 --backend or the configuration"
                            .into(),
                    });
                }
                Err(e) => return Err(Error::io("stat", &path, e)),
            }
        }
        crate::perm::create_dir_all(root).map_err(|e| Error::io("create root", root, e))?;
        let lock_dir = root.join("locks");
        crate::perm::create_dir_all(&lock_dir).map_err(|e| Error::io("create", &lock_dir, e))?;
        // The pool file is created here, with the configured mode, before it is mapped.
        crate::perm::create_options()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("create", &path, e))?;
        let pool = Arc::new(Pool::open(path.clone(), &opts)?);
        let ino = fs::metadata(&path)
            .map_err(|e| Error::io("stat", &path, e))?
            .ino();
        let backend = PmemBackend {
            pool,
            lock_dir,
            huge_pages: opts.huge_pages,
            cat_dir: root.join(crate::posix::CATALOGUE_DIR),
            ino,
        };
        backend.upgrade()?;
        if opts.prefault == Prefault::Open {
            backend
                .pool
                .new_chunk(&mut backend.pool.chunk.lock().unwrap(), 0)?;
        }
        Ok(backend)
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
        if self.huge_pages && !self.pool.through_file.load(Ordering::Relaxed) {
            let len = self.pool.map.file_len() - top as usize;
            self.pool.map.use_huge_pages(top as usize, len);
        }
        Ok(())
    }

    /// The free regions of the pool as (offset, length, epoch), for checks: a region must
    /// never overlap a field that a database still names. Empty for pools without reuse.
    pub fn free_regions(&self) -> Vec<(u64, u64, u64)> {
        self.pool.free_list()
    }

    /// Creates `<root>/catalogue` with one directory per database found in the pool, if it
    /// does not exist yet (a pool written before it existed, or a new pool).
    fn upgrade(&self) -> Result<()> {
        if self.cat_dir.exists() {
            return Ok(());
        }
        let root = self.cat_dir.parent().expect("catalogue dir has a parent");
        let tmp = root.join(format!(".catalogue.tmp-{:016x}", crate::sys::random_u64()));
        crate::perm::create_dir(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        let made = self
            .scan_databases()
            .and_then(|dbs| dbs.iter().try_for_each(|db| Self::make_db_dir(&tmp, db)));
        let made = made.and_then(|_| match fs::rename(&tmp, &self.cat_dir) {
            Ok(()) => Ok(()),
            // Another process upgraded first: use theirs.
            Err(_) if self.cat_dir.exists() => Ok(()),
            Err(e) => Err(Error::io("rename", &self.cat_dir, e)),
        });
        let _ = fs::remove_dir_all(&tmp);
        made
    }

    /// Creates `<parent>/<db dir name>/db.key` (atomically) unless it exists.
    fn make_db_dir(parent: &Path, db: &Key) -> Result<()> {
        let dir = parent.join(format::db_dir_name(db));
        if dir.join("db.key").exists() {
            return Ok(());
        }
        match crate::perm::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("create", &dir, e)),
        }
        let bytes = format::encode_db_key_file(db).map_err(|reason| Error::BadKey {
            key: db.to_string(),
            reason: reason.into(),
        })?;
        match crate::catalogue::manifest::write_atomic(&dir, "db.key", &bytes) {
            // Another process or thread created it at the same time (or removed it with a
            // wipe, which then wins): the key there is checked by every reader.
            Err(_) if dir.join("db.key").exists() => Ok(()),
            other => other,
        }
    }

    /// The database `db` if its catalogue directory names it.
    fn known(&self, db: &Key) -> Result<bool> {
        let path = self.cat_dir.join(format::db_dir_name(db)).join("db.key");
        match fs::read(&path) {
            Ok(bytes) => {
                let stored = format::decode_db_key_file(&bytes).map_err(|e| Error::Corrupt {
                    what: "database key",
                    path: path.clone(),
                    detail: e.to_string(),
                })?;
                if &stored != db {
                    return Err(Error::Corrupt {
                        what: "database key",
                        path,
                        detail: format!("holds {stored}, expected {db} (name collision)"),
                    });
                }
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("read", &path, e)),
        }
    }

    /// Every database committed to the pool, found by reading the commit log (O(commits);
    /// used once, to create the catalogue directories of a pool written without them).
    fn scan_databases(&self) -> Result<Vec<Key>> {
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

    /// The directory holding the pool file, its locks, catalogue and space reserve.
    fn root(&self) -> &Path {
        self.pool.path.parent().unwrap_or(Path::new("/"))
    }

    fn lock_file(&self, db: &Key) -> Result<File> {
        let path = self.lock_dir.join(format::db_dir_name(db));
        crate::perm::create_options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io("open", &path, e))
    }

    fn try_lock(&self, db: &Key, op: libc::c_int, what: &str) -> Result<File> {
        let f = self.lock_file(db)?;
        let locked = if op == libc::LOCK_EX {
            crate::sys::flock_exclusive_patiently(&f)
        } else {
            flock(&f, op | libc::LOCK_NB)
        };
        locked.map_err(|_| Error::Busy {
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
            reason: reason.into(),
        })?;
        Ok(PmemWriter {
            pool: self.pool.clone(),
            id: crate::sys::random_u64(),
            db_hash: format::fnv1a64(&key),
            unpersisted: Vec::new(),
            _lock: lock,
        })
    }
}

impl Backend for PmemBackend {
    fn describe(&self) -> String {
        format!("pmem:{}", self.pool.path.display())
    }

    fn provision(&self, bytes: u64) -> Result<()> {
        // A bulk copy follows: its space is checked now and allocated in the file as the copy
        // goes, and written through the file rather than faulted page by page into this
        // process's mapping (design §5.1).
        self.pool.through_file.store(true, Ordering::Relaxed);
        match self.pool.room_for(bytes) {
            0 => Ok(()),
            room => self.pool.plan_growth(self.pool.heap_top() + room),
        }
    }

    fn open_writer(&self, db: &Key) -> Result<Box<dyn DbWriter>> {
        let lock = self.try_lock(db, libc::LOCK_SH, "a wipe or purge holds it")?;
        let w = self.writer(db, Some(lock))?;
        // Before the first commit, so that the directories list every database.
        Self::make_db_dir(&self.cat_dir, db)?;
        Ok(Box::new(w))
    }

    fn open_reader(&self, db: &Key) -> Result<Option<Box<dyn DbReader>>> {
        let mut key = Vec::new();
        format::encode_key(db, &mut key).map_err(|reason| Error::BadKey {
            key: db.to_string(),
            reason: reason.into(),
        })?;
        if !self.known(db)? {
            return Ok(None);
        }
        Ok(Some(Box::new(PmemReader {
            pool: self.pool.clone(),
            db: db.clone(),
            db_hash: format::fnv1a64(&key),
            next: 0,
            ino: self.ino,
            seen: 0,
        })))
    }

    fn catalogue_dir(&self, db: &Key) -> Result<Option<PathBuf>> {
        Ok(self
            .known(db)?
            .then(|| self.cat_dir.join(format::db_dir_name(db))))
    }

    fn databases(&self) -> Result<Vec<Key>> {
        let rd = match fs::read_dir(&self.cat_dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list", &self.cat_dir, e)),
        };
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| Error::io("list", &self.cat_dir, e))?;
            // A directory without a db.key is being created or wiped: skipped.
            if let crate::posix::DbDir::Database(key) = crate::posix::read_db_dir(&ent.path()) {
                out.push(key);
            }
        }
        Ok(out)
    }

    fn damaged_databases(&self) -> Vec<String> {
        fs::read_dir(&self.cat_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|ent| match crate::posix::read_db_dir(&ent.path()) {
                crate::posix::DbDir::Damaged(why) => Some(why),
                _ => None,
            })
            .collect()
    }

    fn wipe_database(&self, db: &Key) -> Result<()> {
        let lock = self.try_lock(db, libc::LOCK_EX, "writers hold it")?;
        let mut w = self.writer(db, Some(lock))?;
        let b =
            format::SegmentBuilder::new(format::FLAG_SNAPSHOT, w.id, 0, db).map_err(|reason| {
                Error::BadKey {
                    key: db.to_string(),
                    reason: reason.into(),
                }
            })?;
        w.commit(&b.finish())?;
        // Still under the lock, the space of what the snapshot made unreachable (design §5.4).
        let reclaimed = self.pool.reclaim(db, w.db_hash);
        // After the empty snapshot is committed: a crash in between leaves an empty database.
        let dir = self.cat_dir.join(format::db_dir_name(db));
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove", &dir, e)),
        }
        reclaimed.map(|_| ())
    }

    fn release_reserve(&self, _db: &Key) -> bool {
        crate::reserve::release(self.root())
    }

    fn release_unused(&self) {
        self.pool.release_chunk();
    }

    fn data_path(&self, db: &Key, _data: &crate::format::DataRef) -> Result<Option<PathBuf>> {
        Ok(self.known(db)?.then(|| self.pool.path.clone()))
    }

    fn unowned_files(&self, db: &Key) -> Result<Vec<PathBuf>> {
        // The pool's bytes are haar's alone; a user can only put files beside a database's
        // catalogue, which the wipe removes with it.
        let mut out =
            crate::posix::unowned_in_catalogue(&self.cat_dir.join(format::db_dir_name(db)))?;
        out.sort();
        Ok(out)
    }

    fn exclusive(&self, db: &Key) -> Result<Box<dyn Exclusive>> {
        let lock = self.try_lock(db, libc::LOCK_EX, "writers hold it")?;
        Ok(Box::new(PmemExclusive {
            backend: PmemBackend {
                pool: self.pool.clone(),
                lock_dir: self.lock_dir.clone(),
                huge_pages: self.huge_pages,
                cat_dir: self.cat_dir.clone(),
                ino: self.ino,
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
        let free = self.pool.free_space();
        let mut v = serde_json::json!({
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
            "space_reuse": free.is_some(),
            "created_over_interrupted_creation": self.pool.recovered(),
        });
        if let Some(f) = free {
            v["free_bytes"] = f.bytes.into();
            v["free_regions"] = f.regions.into();
            v["free_waiting_bytes"] = f.waiting.into();
            v["reclaim_epoch"] = self.pool.epoch().into();
            v["pool_processes"] = f.live_processes.into();
        }
        v
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
        // The snapshot just committed names every live field; the rest of what this
        // database's earlier segments name is freed (design §5.4).
        let w = self.backend.writer(&self.db, None)?;
        self.backend.pool.reclaim(&self.db, w.db_hash)
    }
}
