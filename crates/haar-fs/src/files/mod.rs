//! The writable part (design §15.2–15.3, §15.6): a namespace held in memory while mounted,
//! whose records and file chunks are fields of the file system's own database in the configured
//! store (a local backend, or servers through `dist`). Owns the chunk buffers, the barrier
//! (archive everything dirty, then flush the store) and the relaxed semantics' errnos. It must
//! not know about FUSE's wire types (the glue in `fuse.rs` converts) nor about `fields/`.
//!
//! This file holds [`Files`] and the types its operations take and return; each concern adds
//! its own `impl Files` block: `namespace` (the tree and its entries), `chunks` (file bytes),
//! `barrier` (archiving, flushing and the full state). `errno` and `reserve` are leaves.

mod barrier;
mod chunks;
mod errno;
mod namespace;
mod reserve;

pub use self::errno::{Errno, errno_of};
pub use self::reserve::Reserve;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use haar::{FieldBytes, FieldStore};

use crate::format::{InodeRecord, Kind};

/// Inode number of the root directory.
pub const ROOT: u64 = 1;

/// Dirty chunks a file may hold before they are archived (design §15.3).
const MAX_DIRTY_CHUNKS: usize = 64;

/// Inode numbers are `(mount id << ID_SHIFT) | n` (design §15.2).
pub const ID_SHIFT: u32 = 40;

/// Mount ids are below this (inode numbers stay below the `fields/` view's).
pub const MAX_MOUNT_ID: u32 = 1 << 20;

/// How often a shared mount looks for entries other mounts made in one directory (§15.6).
const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// How a file system is loaded.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Name of the file system (`haarfs=NAME`).
    pub fs: String,
    /// Owner of a root directory created now.
    pub uid: u32,
    /// Group of a root directory created now.
    pub gid: u32,
    /// This mount's id: the high bits of the inode numbers it hands out (design §15.2);
    /// below [`MAX_MOUNT_ID`]. Mounts that run at the same time need different ids.
    pub mount_id: u32,
    /// Other mounts may change the file system meanwhile (servers): look names this mount
    /// does not know up in the store, at most once a second per directory (design §15.6).
    pub shared: bool,
}

impl LoadOptions {
    /// File system `fs`, root owned by `uid`:`gid`, mount id 0, not shared.
    pub fn new(fs: &str, uid: u32, gid: u32) -> LoadOptions {
        LoadOptions {
            fs: fs.into(),
            uid,
            gid,
            mount_id: 0,
            shared: false,
        }
    }
}

/// Nanoseconds since the epoch now.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

struct Node {
    rec: InodeRecord,
    parent: u64,
    children: BTreeMap<Vec<u8>, u64>,
    /// Children that are directories (for the link count, without a scan).
    subdirs: u32,
    /// Chunks stored (non-empty) in the store.
    chunks: BTreeSet<u64>,
    /// Chunks written since they were last archived.
    dirty: BTreeMap<u64, Vec<u8>>,
    /// The last chunk read from the store (for reads smaller than a chunk).
    cache: Option<(u64, Arc<FieldBytes>)>,
    open: u32,
    unlinked: bool,
}

impl Node {
    fn new(rec: InodeRecord) -> Node {
        Node {
            rec,
            parent: 0,
            children: BTreeMap::new(),
            subdirs: 0,
            chunks: BTreeSet::new(),
            dirty: BTreeMap::new(),
            cache: None,
            open: 0,
            unlinked: false,
        }
    }
}

/// What `stat` says about an inode.
#[derive(Debug, Clone)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// The inode's record (kind, mode, owner, size, times).
    pub rec: InodeRecord,
    /// Link count: 1 for files and links, 2 + subdirectories for directories.
    pub nlink: u32,
}

/// A directory entry: inode, kind, name.
pub type DirEntry = (u64, Kind, Vec<u8>);

/// Who creates an inode, and with which permission bits.
#[derive(Debug, Clone, Copy)]
pub struct Owner {
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// The writable file system: the tree, its buffers, and the store they go to.
pub struct Files {
    fs: String,
    store: Box<dyn FieldStore>,
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Last inode number this mount may hand out (the end of its id's range).
    last_ino: u64,
    /// Look up unknown names in the store (other mounts' entries, design §15.6).
    shared: bool,
    /// When each directory was last looked up in the store (shared mounts).
    refreshed: HashMap<u64, Instant>,
    /// Inodes whose record changed since the last barrier.
    dirty_records: BTreeSet<u64>,
    /// Inodes that may hold dirty chunks (so a barrier does not scan every inode).
    with_dirty: HashSet<u64>,
    /// Inodes with chunks archived but not flushed (a store read must flush first).
    pending: HashSet<u64>,
    /// Anything archived since the last flush.
    unflushed: bool,
    /// Space kept on the store's file system for removals when it is full ([`Reserve`]).
    reserve: Option<Reserve>,
    /// The store said its storage is full (ENOSPC, EDQUOT, a pool that cannot grow) and no
    /// barrier has succeeded with the reserve held again since: said once, not per call.
    full: bool,
    /// `full`, for the metrics endpoint's thread (`haar_mount_storage_full`).
    full_flag: Arc<AtomicBool>,
}

/// What a read returns.
pub enum ReadData {
    /// Bytes assembled for this read.
    Owned(Vec<u8>),
    /// A range of a stored chunk, lent.
    Lent(Arc<FieldBytes>, std::ops::Range<usize>),
}

impl std::ops::Deref for ReadData {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            ReadData::Owned(v) => v,
            ReadData::Lent(b, r) => &b[r.clone()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::CHUNK_SIZE;
    use haar::request::Request;

    /// xorshift: a reproducible sequence without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below.max(1)
        }
    }

    const OWNER: Owner = Owner {
        mode: 0o644,
        uid: 0,
        gid: 0,
    };

    /// Writes, truncations, barriers and reads at random offsets across chunk boundaries agree
    /// with a plain `Vec<u8>`, before and after the file system is loaded again from the
    /// same backend (after a last barrier).
    #[test]
    fn random_writes_and_truncations_match_a_model() {
        let backend: Arc<dyn haar::Backend> = Arc::new(haar::MemoryBackend::new());
        let mut fs = Files::load(
            Box::new(crate::files_store(Arc::clone(&backend)).unwrap()),
            "t",
            0,
            0,
        )
        .unwrap();
        let ino = fs.create(ROOT, b"f", Kind::File, OWNER, b"").unwrap().ino;
        let cs = CHUNK_SIZE as u64;
        let mut model: Vec<u8> = Vec::new();
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for step in 0..400u64 {
            match rng.next(10) {
                0..=4 => {
                    let off = rng.next(4 * cs);
                    let limit = if rng.next(2) == 0 { 300 } else { 2 * cs };
                    let len = rng.next(limit);
                    let data: Vec<u8> = (0..len).map(|i| (i ^ step) as u8 | 1).collect();
                    fs.write(ino, off, &data).unwrap();
                    let end = (off + len) as usize;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[off as usize..end].copy_from_slice(&data);
                }
                5 => {
                    let size = rng.next(5 * cs);
                    fs.setattr(ino, None, None, None, Some(size), None, None)
                        .unwrap();
                    model.resize(size as usize, 0);
                }
                6 => fs.barrier().unwrap(),
                _ => {
                    let off = rng.next(model.len() as u64 + 10);
                    let size = rng.next(3 * cs) as u32;
                    let got = fs.read(ino, off, size).unwrap();
                    let lo = (off as usize).min(model.len());
                    let hi = (off as usize + size as usize).min(model.len());
                    assert!(got[..] == model[lo..hi], "step {step}: read {off}+{size}");
                }
            }
            assert_eq!(fs.getattr(ino).unwrap().rec.size, model.len() as u64);
        }
        fs.barrier().unwrap();
        drop(fs);
        let mut fs =
            Files::load(Box::new(crate::files_store(backend).unwrap()), "t", 0, 0).unwrap();
        let ino = fs.lookup(ROOT, b"f").unwrap().ino;
        let got = fs.read(ino, 0, model.len() as u32 + 1).unwrap();
        assert!(got[..] == model[..], "after reloading");
    }

    /// Namespace changes made before a barrier are what a new load sees; a removed file's
    /// chunks are gone from the store's listing.
    #[test]
    fn the_namespace_is_reloaded_as_it_was_at_the_barrier() {
        let backend: Arc<dyn haar::Backend> = Arc::new(haar::MemoryBackend::new());
        let mut fs = Files::load(
            Box::new(crate::files_store(Arc::clone(&backend)).unwrap()),
            "t",
            0,
            0,
        )
        .unwrap();
        let d = fs.create(ROOT, b"d", Kind::Dir, OWNER, b"").unwrap().ino;
        let e = fs.create(d, b"e", Kind::Dir, OWNER, b"").unwrap().ino;
        let f = fs.create(e, b"f", Kind::File, OWNER, b"").unwrap().ino;
        fs.write(f, 0, &vec![7u8; 3 << 20]).unwrap();
        let g = fs.create(ROOT, b"g", Kind::File, OWNER, b"").unwrap().ino;
        fs.write(g, 0, b"gone").unwrap();
        fs.barrier().unwrap();
        fs.remove(ROOT, b"g", false).unwrap();
        fs.rename(ROOT, b"d", ROOT, b"moved", false).unwrap();
        fs.create(ROOT, b"l", Kind::Symlink, OWNER, b"moved/e/f")
            .unwrap();
        assert_eq!(fs.getattr(ROOT).unwrap().nlink, 3);
        drop(fs);
        let store = crate::files_store(backend).unwrap();
        let listed = store
            .list(&haar::request::Request::parse("haarfs=t,kind=data").unwrap())
            .unwrap();
        let live: Vec<_> = listed.iter().filter(|f| f.data.length > 0).collect();
        assert_eq!(live.len(), 3, "only f's chunks hold data: {listed:?}");
        let mut fs = Files::load(Box::new(store), "t", 0, 0).unwrap();
        let moved = fs.lookup(ROOT, b"moved").unwrap().ino;
        let e = fs.lookup(moved, b"e").unwrap().ino;
        assert_eq!(fs.lookup(e, b"f").unwrap().rec.size, 3 << 20);
        assert_eq!(fs.lookup(ROOT, b"g").unwrap_err(), libc::ENOENT);
        assert_eq!(fs.lookup(ROOT, b"d").unwrap_err(), libc::ENOENT);
        let l = fs.lookup(ROOT, b"l").unwrap().ino;
        assert_eq!(fs.readlink(l).unwrap(), b"moved/e/f");
        assert_eq!(fs.getattr(ROOT).unwrap().nlink, 3);
    }

    /// Two shared mounts of one store with different ids: their inode numbers never meet, and
    /// a file one of them made durable is found by the other's lookup and listing (design
    /// §15.6); a file the other already knows keeps what it knew.
    #[test]
    fn shared_mounts_see_each_others_new_files() {
        let backend: Arc<dyn haar::Backend> = Arc::new(haar::MemoryBackend::new());
        let open = |id: u32| {
            let o = LoadOptions {
                mount_id: id,
                shared: true,
                ..LoadOptions::new("t", 0, 0)
            };
            Files::load_with(
                Box::new(crate::files_store(Arc::clone(&backend)).unwrap()),
                &o,
            )
            .unwrap()
        };
        let mut a = open(1);
        let mut b = open(2);
        let fa = a
            .create(ROOT, b"from-a", Kind::File, OWNER, b"")
            .unwrap()
            .ino;
        let fb = b
            .create(ROOT, b"from-b", Kind::File, OWNER, b"")
            .unwrap()
            .ino;
        assert_eq!(fa >> ID_SHIFT, 1);
        assert_eq!(fb >> ID_SHIFT, 2);
        a.write(fa, 0, &vec![5u8; (CHUNK_SIZE + 10) as usize])
            .unwrap();
        a.barrier().unwrap();
        let d = a.create(ROOT, b"dir", Kind::Dir, OWNER, b"").unwrap().ino;
        let inner = a.create(d, b"inner", Kind::File, OWNER, b"").unwrap().ino;
        a.write(inner, 0, b"hello").unwrap();
        a.barrier().unwrap();
        b.barrier().unwrap();
        // b finds a's entries (its refresh of the root is more than a second old or never).
        b.refreshed.clear();
        let got = b.lookup(ROOT, b"from-a").unwrap();
        assert_eq!((got.ino, got.rec.size), (fa, u64::from(CHUNK_SIZE) + 10));
        let data = b.read(fa, u64::from(CHUNK_SIZE) - 2, 12).unwrap();
        assert_eq!(&data[..], &[5u8; 12][..]);
        let (_, names) = b.readdir(d).unwrap();
        assert_eq!(names.len(), 1);
        assert_eq!(&b.read(inner, 0, 100).unwrap()[..], b"hello");
        // a sees b's file after its own refresh interval.
        a.refreshed.clear();
        assert_eq!(a.lookup(ROOT, b"from-b").unwrap().ino, fb);
        // A file another mount removed reads as ESTALE, not as zeros.
        a.remove(ROOT, b"from-a", false).unwrap();
        assert_eq!(b.read(fa, 0, 10).err(), Some(libc::ESTALE));
        // A reload by id 1 continues past its own numbers.
        drop(a);
        let mut a = open(1);
        let next = a
            .create(ROOT, b"again", Kind::File, OWNER, b"")
            .unwrap()
            .ino;
        assert_eq!(next, inner + 1);
    }

    /// Over `dist` with 3 lanes, replicas 2 and placement by full key (design §15.6): the
    /// chunks of one file land on every lane, and with any one lane emptied (a server whose
    /// store was lost) a new load sees the whole namespace and every byte.
    #[test]
    fn over_dist_chunks_spread_and_any_one_lane_may_be_lost() {
        use haar::dist::{DistStore, Placement};
        let backends: Vec<Arc<dyn haar::Backend>> = (0..3)
            .map(|_| Arc::new(haar::MemoryBackend::new()) as Arc<dyn haar::Backend>)
            .collect();
        let dist = |lanes: &[Arc<dyn haar::Backend>]| -> Box<dyn FieldStore> {
            let opts = crate::files_options().unwrap();
            let lanes = (lanes.iter().enumerate())
                .map(|(i, b)| {
                    let s = haar::Store::with_options(Arc::clone(b), opts.clone());
                    (format!("lane{i}"), Box::new(s) as Box<dyn FieldStore>)
                })
                .collect();
            Box::new(DistStore::new(lanes, 2, Placement::Field, opts.schema, opts.context).unwrap())
        };
        let shared = LoadOptions {
            shared: true,
            ..LoadOptions::new("t", 0, 0)
        };
        let mut fs = Files::load_with(dist(&backends), &shared).unwrap();
        let d = fs.create(ROOT, b"d", Kind::Dir, OWNER, b"").unwrap().ino;
        let f = fs.create(d, b"f", Kind::File, OWNER, b"").unwrap().ino;
        let data: Vec<u8> = (0..12 * CHUNK_SIZE as usize + 99)
            .map(|i| (i * 7 + i / 4099) as u8)
            .collect();
        fs.write(f, 0, &data).unwrap();
        fs.barrier().unwrap();
        drop(fs);
        let req = Request::parse("haarfs=t,kind=data").unwrap();
        for (i, b) in backends.iter().enumerate() {
            let held = (crate::files_store(Arc::clone(b))
                .unwrap()
                .list(&req)
                .unwrap())
            .into_iter()
            .filter(|c| c.data.length > 0)
            .count();
            // 13 chunks, 2 copies each over 3 lanes: every lane holds some, none holds all.
            assert!(
                (1..13).contains(&held),
                "lane {i} holds {held} of 13 chunks"
            );
        }
        for lost in 0..3 {
            let mut lanes = backends.clone();
            lanes[lost] = Arc::new(haar::MemoryBackend::new());
            let mut fs = Files::load_with(dist(&lanes), &shared).unwrap();
            let d = fs.lookup(ROOT, b"d").unwrap().ino;
            let f = fs.lookup(d, b"f").unwrap().ino;
            let got = fs.read(f, 0, data.len() as u32 + 1).unwrap();
            assert!(got[..] == data[..], "lane {lost} lost");
        }
    }
}
