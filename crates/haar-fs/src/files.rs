//! The writable part (design §15.2–15.3, §15.6): a namespace held in memory while mounted,
//! whose records and file chunks are fields of the file system's own database in the configured
//! store (a local backend, or servers through `dist`). Owns the chunk buffers, the barrier (archive everything dirty, then flush the
//! store) and the relaxed semantics' errnos. It must not know about FUSE's wire types (the
//! glue in `fuse.rs` converts) nor about `fields/`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use haar_core::Key;
use haar_core::request::Request;
use haar_store::{FieldBytes, FieldStore};

use crate::format::{
    CHUNK_SIZE, DirentRecord, InodeRecord, Kind, chunk_key, dirent_key, inode_key,
};

/// An errno (positive), what every operation fails with.
pub type Errno = i32;

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

/// Logs a failure of the store that the mount answers with EIO, naming the request's
/// process, and returns EIO.
fn io_err(what: &str, e: impl std::fmt::Display) -> Errno {
    let (op, uid, pid) = crate::metrics::requester();
    tracing::error!(op, uid, pid, errno = "EIO", "{what}: {e}");
    libc::EIO
}

/// The errno a store error stands for: ENOSPC for full storage (the file system's, or a pmem
/// pool that cannot grow), EDQUOT for a quota, else EIO.
pub fn errno_of(e: &haar_store::Error) -> Errno {
    use haar_store::Error;
    let of_io = |io: &std::io::Error| {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(io);
        while let Some(c) = cur {
            if let Some(code) = c
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::raw_os_error)
                .filter(|c| [libc::ENOSPC, libc::EDQUOT].contains(c))
            {
                return Some(code);
            }
            cur = c.source();
        }
        None
    };
    let found = match e {
        Error::PoolFull { .. } => Some(libc::ENOSPC),
        Error::Io { source, .. } | Error::Net { source, .. } => of_io(source),
        Error::Lanes { failures, .. } => failures.0.first().map(|(_, e)| errno_of(e)),
        _ => None,
    };
    // A server's own full storage arrives as its message.
    let text = e.to_string();
    found.unwrap_or(
        if text.contains("No space left on device") || text.contains("is full") {
            libc::ENOSPC
        } else if text.contains("Disk quota exceeded") {
            libc::EDQUOT
        } else {
            libc::EIO
        },
    )
}

/// Space held on the store's file system (a file of its own, allocated) so that removals
/// through the mount still succeed when that file system is full: a removal's records need a
/// little room, and on a full file system every other way to free space would fail
/// (issue 27). Given back for a removal once the store has said it is full; taken again by
/// the first barrier that finds the room.
#[derive(Debug)]
pub struct Reserve {
    path: std::path::PathBuf,
    size: u64,
    held: bool,
}

impl Reserve {
    /// Bytes a mount keeps by default: room for the records of many removals.
    pub const SIZE: u64 = 1 << 20;

    /// A reserve of `size` bytes in file `path` (not taken yet: [`Reserve::take`]).
    pub fn new(path: std::path::PathBuf, size: u64) -> Reserve {
        Reserve {
            path,
            size,
            held: false,
        }
    }

    /// The file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Allocates the file's bytes (again); false when there is no room (or the file cannot
    /// be made): the reserve is then not held.
    pub fn take(&mut self) -> bool {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        if self.held {
            return true;
        }
        let Ok(f) = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&self.path)
        else {
            return false;
        };
        // SAFETY: fallocate on a descriptor we own.
        let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, self.size as libc::off_t) };
        self.held = r == 0;
        if !self.held {
            let _ = std::fs::remove_file(&self.path);
        }
        self.held
    }

    /// Gives the bytes back to the file system.
    pub fn give_back(&mut self) {
        if std::mem::take(&mut self.held) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// True while the bytes are held.
    pub fn held(&self) -> bool {
        self.held
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl Files {
    /// Loads file system `fs` from `store` (design §15.2, "Mounting"), creating its root
    /// directory (owned by `uid`:`gid`) if it has none, as mount id 0. A damaged record is an
    /// error naming its key.
    pub fn load(
        store: Box<dyn FieldStore>,
        fs: &str,
        uid: u32,
        gid: u32,
    ) -> haar_store::Result<Files> {
        Files::load_with(store, &LoadOptions::new(fs, uid, gid))
    }

    /// [`Files::load`] with every option.
    pub fn load_with(store: Box<dyn FieldStore>, o: &LoadOptions) -> haar_store::Result<Files> {
        let (fs, uid, gid) = (o.fs.as_str(), o.uid, o.gid);
        if o.mount_id >= MAX_MOUNT_ID {
            return Err(haar_store::Error::Config(format!(
                "mount id {} is too large: give one below {MAX_MOUNT_ID}",
                o.mount_id
            )));
        }
        let req = Request::parse(&format!("{}={fs}", crate::format::DB_KEYWORD))
            .map_err(|e| haar_store::Error::Config(format!("file system name {fs:?}: {e}")))?;
        let listed = store.list(&req)?;
        let mut record_keys = Vec::new();
        let mut chunks: HashMap<u64, BTreeSet<u64>> = HashMap::new();
        for f in &listed {
            let key = f.key();
            let ino: u64 = key.get("ino").and_then(|v| v.parse().ok()).unwrap_or(0);
            match key.get("kind") {
                Some("data") => {
                    if f.data.length > 0
                        && let Some(c) = key.get("part").and_then(|p| p.parse().ok())
                    {
                        chunks.entry(ino).or_default().insert(c);
                    }
                }
                Some("inode") | Some("dirent") => record_keys.push(key),
                _ => {}
            }
        }
        let mut inodes: HashMap<u64, InodeRecord> = HashMap::new();
        let mut dirents: Vec<(u64, DirentRecord)> = Vec::new();
        let mut bad: Option<String> = None;
        store.retrieve_keys(&record_keys, &mut |key: &Key, bytes: &[u8], _crc| {
            let ino: u64 = key.get("ino").and_then(|v| v.parse().ok()).unwrap_or(0);
            let res = if key.get("kind") == Some("inode") {
                InodeRecord::decode(bytes).map(|r| {
                    if !r.deleted {
                        inodes.insert(ino, r);
                    }
                })
            } else {
                DirentRecord::decode(bytes).map(|d| {
                    if d.kind.is_some() {
                        dirents.push((ino, d));
                    }
                })
            };
            if let Err(e) = res
                && bad.is_none()
            {
                bad = Some(format!("{key}: {e}"));
            }
            Ok(())
        })?;
        if let Some(b) = bad {
            return Err(haar_store::Error::Config(format!(
                "the file system {fs:?} has a damaged record, so it is not mounted: {b}"
            )));
        }
        // This mount hands out numbers of its own id's range, past any already used there.
        let first = (u64::from(o.mount_id) << ID_SHIFT).max(ROOT) + 1;
        let last_ino = (u64::from(o.mount_id) + 1) << ID_SHIFT;
        let mut next_ino = first;
        let mut seen = |ino: u64| {
            if (first..last_ino).contains(&ino) {
                next_ino = next_ino.max(ino + 1);
            }
        };
        for ino in inodes.keys() {
            seen(*ino);
        }
        for (_, d) in &dirents {
            seen(d.ino);
        }
        let mut nodes: HashMap<u64, Node> = HashMap::new();
        for (ino, rec) in inodes {
            let mut n = Node::new(rec);
            n.chunks = chunks.remove(&ino).unwrap_or_default();
            nodes.insert(ino, n);
        }
        for (parent, d) in dirents {
            let child_is_dir = nodes.get(&d.ino).map(|c| c.rec.kind == Kind::Dir);
            if let Some(child_is_dir) = child_is_dir
                && let Some(p) = nodes.get_mut(&parent)
                && p.rec.kind == Kind::Dir
            {
                p.children.insert(d.name, d.ino);
                p.subdirs += u32::from(child_is_dir);
                if let Some(c) = nodes.get_mut(&d.ino) {
                    c.parent = parent;
                }
            }
        }
        let mut files = Files {
            fs: fs.to_string(),
            store,
            nodes,
            next_ino,
            last_ino,
            shared: o.shared,
            refreshed: HashMap::new(),
            dirty_records: BTreeSet::new(),
            with_dirty: HashSet::new(),
            pending: HashSet::new(),
            unflushed: false,
            reserve: None,
            full: false,
            full_flag: Arc::default(),
        };
        if let std::collections::hash_map::Entry::Vacant(e) = files.nodes.entry(ROOT) {
            e.insert(Node::new(new_record(Kind::Dir, 0o755, uid, gid)));
            files.dirty_records.insert(ROOT);
            files.barrier().map_err(|e| {
                haar_store::Error::Config(format!("cannot create the root: errno {e}"))
            })?;
        }
        files.drop_unreachable();
        Ok(files)
    }

    /// Keeps `reserve` (taken now if there is room) for removals on a full file system.
    pub fn set_reserve(&mut self, mut reserve: Reserve) {
        reserve.take();
        self.reserve = Some(reserve);
    }

    /// A store error as an errno; full storage is said once (until a barrier finds room
    /// again), anything else every time.
    fn store_errno(&mut self, what: &str, e: &haar_store::Error) -> Errno {
        let code = errno_of(e);
        if code == libc::EIO {
            return io_err(what, e);
        }
        if !self.full {
            self.full = true;
            self.full_flag.store(true, Ordering::Relaxed);
            let (op, uid, pid) = crate::metrics::requester();
            let errno = crate::metrics::errno_name(code);
            tracing::warn!(
                op,
                uid,
                pid,
                errno,
                cause = %e,
                "{what}: the store's storage is full: writes and creations fail with {errno} until space is freed there (removals through the mount still work; said once until then)"
            );
        }
        code
    }

    /// Whether the store's storage is full now (see [`Files`]'s `full`), shared for reading
    /// from other threads.
    pub fn full_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.full_flag)
    }

    /// Before a removal: on full storage, the reserve's bytes are given back for its records.
    fn room_for_removal(&mut self) {
        if self.full
            && let Some(r) = &mut self.reserve
        {
            r.give_back();
        }
    }

    /// After a successful barrier: storage that was full has room again once the reserve can
    /// be taken back.
    fn recovered(&mut self) {
        if self.full && self.reserve.as_mut().is_none_or(Reserve::take) {
            self.full = false;
            self.full_flag.store(false, Ordering::Relaxed);
            tracing::warn!("the store has room again: writes and creations work");
        }
    }

    /// Forgets inodes no entry reaches from the root (design §15.2).
    fn drop_unreachable(&mut self) {
        let mut seen = HashSet::new();
        let mut stack = vec![ROOT];
        while let Some(i) = stack.pop() {
            if seen.insert(i)
                && let Some(n) = self.nodes.get(&i)
            {
                stack.extend(n.children.values().copied());
            }
        }
        self.nodes.retain(|i, _| seen.contains(i));
    }

    fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    /// The attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr, Errno> {
        let n = self.node(ino)?;
        let nlink = match n.rec.kind {
            Kind::Dir => 2 + n.subdirs,
            _ => u32::from(!n.unlinked),
        };
        Ok(Attr {
            ino,
            rec: n.rec.clone(),
            nlink,
        })
    }

    /// The entry `name` of directory `parent` (on a shared mount, looked for in the store
    /// when this mount does not know it).
    pub fn lookup(&mut self, parent: u64, name: &[u8]) -> Result<Attr, Errno> {
        let p = self.node(parent)?;
        if p.rec.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        if !p.children.contains_key(name) {
            self.refresh_dir(parent)?;
        }
        let ino = *self.node(parent)?.children.get(name).ok_or(libc::ENOENT)?;
        self.getattr(ino)
    }

    /// On a shared mount, adds the entries other mounts made durable in directory `dir`
    /// since this mount last looked (at most once a second per directory; design §15.6).
    fn refresh_dir(&mut self, dir: u64) -> Result<(), Errno> {
        if !self.shared || (self.refreshed.get(&dir)).is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
            return Ok(());
        }
        self.refreshed.insert(dir, Instant::now());
        let req = format!(
            "{}={},kind=dirent,ino={dir}",
            crate::format::DB_KEYWORD,
            self.fs
        );
        let req = Request::parse(&req).map_err(|e| io_err(&req, e))?;
        let listed = (self.store.list(&req))
            .map_err(|e| io_err(&format!("cannot list directory {dir} of {}", self.fs), e))?;
        let known = &self.node(dir)?.children;
        let keys: Vec<Key> = (listed.iter().map(|f| f.key()))
            .filter(|k| {
                let name = k.get("part").and_then(crate::format::unhex);
                name.is_some_and(|n| !known.contains_key(&n))
            })
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let mut found = Vec::new();
        let mut bad = None;
        let res = self.store.retrieve_keys(&keys, &mut |key, bytes, _| {
            match DirentRecord::decode(bytes) {
                Ok(d) => found.push(d),
                Err(e) => bad = Some(format!("{key}: {e}")),
            }
            Ok(())
        });
        res.map_err(|e| io_err(&format!("cannot read entries of directory {dir}"), e))?;
        if let Some(b) = bad {
            return Err(io_err("a damaged entry, not shown", b));
        }
        for d in found {
            let Some(kind) = d.kind else { continue };
            // A name known meanwhile, or an inode this mount has under another name (renamed
            // or removed here: its own record is the newer).
            if self.node(dir)?.children.contains_key(&d.name) || self.nodes.contains_key(&d.ino) {
                continue;
            }
            let Some(mut node) = self.fetch_inode(d.ino)? else {
                continue; // its record is not durable yet: the next look finds it
            };
            if node.rec.kind != kind {
                continue;
            }
            node.parent = dir;
            self.nodes.insert(d.ino, node);
            let p = self.node_mut(dir)?;
            p.children.insert(d.name, d.ino);
            p.subdirs += u32::from(kind == Kind::Dir);
        }
        Ok(())
    }

    /// Another mount's inode: its record and the chunks it has stored.
    fn fetch_inode(&mut self, ino: u64) -> Result<Option<Node>, Errno> {
        let key = inode_key(&self.fs, ino);
        let mut rec = None;
        let mut bad = None;
        let res = self
            .store
            .retrieve_keys(std::slice::from_ref(&key), &mut |_, bytes, _| {
                match InodeRecord::decode(bytes) {
                    Ok(r) => rec = Some(r),
                    Err(e) => bad = Some(e.to_string()),
                }
                Ok(())
            });
        res.map_err(|e| io_err(&format!("cannot read {key}"), e))?;
        if let Some(b) = bad {
            return Err(io_err(&format!("{key} is damaged"), b));
        }
        let Some(rec) = rec.filter(|r| !r.deleted) else {
            return Ok(None);
        };
        let mut node = Node::new(rec);
        if node.rec.kind == Kind::File {
            let req = format!(
                "{}={},kind=data,ino={ino}",
                crate::format::DB_KEYWORD,
                self.fs
            );
            let req = Request::parse(&req).map_err(|e| io_err(&req, e))?;
            let listed = (self.store.list(&req))
                .map_err(|e| io_err(&format!("cannot list the chunks of inode {ino}"), e))?;
            for f in listed.iter().filter(|f| f.data.length > 0) {
                if let Some(c) = f.key().get("part").and_then(|p| p.parse().ok()) {
                    node.chunks.insert(c);
                }
            }
        }
        Ok(Some(node))
    }

    /// The entries of directory `ino` (without `.` and `..`), with the parent's inode.
    pub fn readdir(&mut self, ino: u64) -> Result<(u64, Vec<DirEntry>), Errno> {
        if self.node(ino)?.rec.kind == Kind::Dir {
            self.refresh_dir(ino)?;
        }
        let n = self.node(ino)?;
        if n.rec.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        let entries = n
            .children
            .iter()
            .filter_map(|(name, c)| Some((*c, self.nodes.get(c)?.rec.kind, name.clone())))
            .collect();
        Ok((if ino == ROOT { ROOT } else { n.parent }, entries))
    }

    /// Checks that `name` may be created in `parent`.
    fn check_new(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        let p = self.node(parent)?;
        if p.rec.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        if p.children.contains_key(name) {
            return Err(libc::EEXIST);
        }
        if name.len() > 255 {
            return Err(libc::ENAMETOOLONG);
        }
        Ok(())
    }

    fn archive(&mut self, key: &Key, bytes: &[u8]) -> Result<(), Errno> {
        self.unflushed = true;
        match self.store.archive(key, bytes) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.store_errno(&format!("cannot store {key}"), &e)),
        }
    }

    fn link_entry(&mut self, parent: u64, name: &[u8], ino: u64, kind: Kind) -> Result<(), Errno> {
        let rec = DirentRecord {
            kind: Some(kind),
            ino,
            name: name.to_vec(),
        };
        self.archive(&dirent_key(&self.fs, parent, name), &rec.encode())?;
        let now = now_ns();
        let p = self.node_mut(parent)?;
        p.children.insert(name.to_vec(), ino);
        p.subdirs += u32::from(kind == Kind::Dir);
        p.rec.mtime = now;
        p.rec.ctime = now;
        self.dirty_records.insert(parent);
        self.node_mut(ino)?.parent = parent;
        Ok(())
    }

    fn unlink_entry(&mut self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        let rec = DirentRecord {
            kind: None,
            ino: 0,
            name: name.to_vec(),
        };
        self.archive(&dirent_key(&self.fs, parent, name), &rec.encode())?;
        let now = now_ns();
        let was_dir = self
            .node(parent)?
            .children
            .get(name)
            .and_then(|c| self.nodes.get(c))
            .is_some_and(|c| c.rec.kind == Kind::Dir);
        let p = self.node_mut(parent)?;
        p.children.remove(name);
        p.subdirs -= u32::from(was_dir);
        p.rec.mtime = now;
        p.rec.ctime = now;
        self.dirty_records.insert(parent);
        Ok(())
    }

    /// Creates `name` in `parent`: a file, a directory or a symbolic link to `target`.
    /// Directories and links are durable on return (a barrier); files at their first close.
    pub fn create(
        &mut self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        owner: Owner,
        target: &[u8],
    ) -> Result<Attr, Errno> {
        self.check_new(parent, name)?;
        let ino = self.next_ino;
        if ino >= self.last_ino {
            return Err(libc::ENOSPC); // 2^40 inodes made by one mount id
        }
        self.next_ino += 1;
        let mut rec = new_record(kind, owner.mode, owner.uid, owner.gid);
        if kind == Kind::Symlink {
            rec.target = target.to_vec();
            rec.size = target.len() as u64;
        }
        self.nodes.insert(ino, Node::new(rec));
        self.dirty_records.insert(ino);
        if let Err(e) = self.link_entry(parent, name, ino, kind) {
            // Nothing of it is left behind (its entry was not stored).
            self.nodes.remove(&ino);
            self.dirty_records.remove(&ino);
            return Err(e);
        }
        if kind != Kind::File {
            self.barrier()?;
        }
        self.getattr(ino)
    }

    /// A symbolic link's target.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        let n = self.node(ino)?;
        if n.rec.kind != Kind::Symlink {
            return Err(libc::EINVAL);
        }
        Ok(n.rec.target.clone())
    }

    /// Removes the entry `name` of `parent`: a file or link (`dir == false`) or an empty
    /// directory (`dir == true`). A barrier.
    pub fn remove(&mut self, parent: u64, name: &[u8], dir: bool) -> Result<(), Errno> {
        self.room_for_removal();
        let ino = *self.node(parent)?.children.get(name).ok_or(libc::ENOENT)?;
        let n = self.node(ino)?;
        match (dir, n.rec.kind == Kind::Dir) {
            (true, false) => return Err(libc::ENOTDIR),
            (false, true) => return Err(libc::EISDIR),
            (true, true) if !n.children.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        self.unlink_entry(parent, name)?;
        self.orphan(ino)?;
        self.barrier()
    }

    /// `ino` has lost its only entry: gone now, or at its last close.
    fn orphan(&mut self, ino: u64) -> Result<(), Errno> {
        let n = self.node_mut(ino)?;
        n.unlinked = true;
        n.rec.ctime = now_ns();
        if n.open == 0 {
            self.destroy(ino)?;
        }
        Ok(())
    }

    /// Tombstones `ino`'s record and masks each of its chunks with an empty one (a hole), so
    /// that `haar purge` frees their storage. Masking costs one small archive per chunk, taken
    /// by the next flush; a wipe would cost a flush and a pass over the catalogue per file.
    fn destroy(&mut self, ino: u64) -> Result<(), Errno> {
        let Some(n) = self.nodes.remove(&ino) else {
            return Ok(());
        };
        self.dirty_records.remove(&ino);
        self.with_dirty.remove(&ino);
        let mut rec = n.rec;
        rec.deleted = true;
        self.archive(&inode_key(&self.fs, ino), &rec.encode())?;
        for c in n.chunks {
            self.archive(&chunk_key(&self.fs, ino, c), &[])?;
        }
        Ok(())
    }

    /// Renames `parent/name` to `newparent/newname`, replacing a file there or an empty
    /// directory, as rename(2). `noreplace`: fail with `EEXIST` instead. A barrier.
    pub fn rename(
        &mut self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        noreplace: bool,
    ) -> Result<(), Errno> {
        self.room_for_removal();
        let ino = *self.node(parent)?.children.get(name).ok_or(libc::ENOENT)?;
        let np = self.node(newparent)?;
        if np.rec.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        if newname.len() > 255 {
            return Err(libc::ENAMETOOLONG);
        }
        let is_dir = self.node(ino)?.rec.kind == Kind::Dir;
        if is_dir {
            // Not into its own subtree.
            let mut a = newparent;
            loop {
                if a == ino {
                    return Err(libc::EINVAL);
                }
                if a == ROOT || a == 0 {
                    break;
                }
                a = self.node(a)?.parent;
            }
        }
        if let Some(&old) = np.children.get(newname) {
            if old == ino {
                return Ok(());
            }
            if noreplace {
                return Err(libc::EEXIST);
            }
            let o = self.node(old)?;
            match (is_dir, o.rec.kind == Kind::Dir) {
                (false, true) => return Err(libc::EISDIR),
                (true, false) => return Err(libc::ENOTDIR),
                (true, true) if !o.children.is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
            self.unlink_entry(newparent, newname)?;
            self.orphan(old)?;
        }
        let kind = self.node(ino)?.rec.kind;
        self.unlink_entry(parent, name)?;
        self.link_entry(newparent, newname, ino, kind)?;
        self.node_mut(ino)?.rec.ctime = now_ns();
        self.dirty_records.insert(ino);
        self.barrier()
    }

    /// Changes attributes; a smaller size drops the data past it, a larger one reads as
    /// zeros. Durable at the next barrier.
    #[allow(clippy::too_many_arguments)]
    pub fn setattr(
        &mut self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<i64>,
        mtime: Option<i64>,
    ) -> Result<Attr, Errno> {
        if let Some(size) = size {
            self.truncate(ino, size)?;
        }
        let now = now_ns();
        let n = self.node_mut(ino)?;
        if let Some(m) = mode {
            n.rec.mode = m & 0o7777;
        }
        if let Some(u) = uid {
            n.rec.uid = u;
        }
        if let Some(g) = gid {
            n.rec.gid = g;
        }
        if let Some(t) = atime {
            n.rec.atime = t;
        }
        if let Some(t) = mtime {
            n.rec.mtime = t;
        }
        n.rec.ctime = now;
        self.dirty_records.insert(ino);
        self.getattr(ino)
    }

    fn truncate(&mut self, ino: u64, size: u64) -> Result<(), Errno> {
        let cs = u64::from(CHUNK_SIZE);
        let n = self.node(ino)?;
        match n.rec.kind {
            Kind::Dir => return Err(libc::EISDIR),
            Kind::Symlink => return Err(libc::EINVAL),
            Kind::File => {}
        }
        if size < n.rec.size {
            // Chunks wholly past the new end become holes; the one holding it is cut.
            let first_gone = size.div_ceil(cs);
            let gone: Vec<u64> = n.chunks.range(first_gone..).copied().collect();
            for c in &gone {
                self.archive(&chunk_key(&self.fs, ino, *c), &[])?;
            }
            let cut = size / cs;
            let keep = (size % cs) as usize;
            if keep > 0 {
                let mut buf = self.chunk_for_update(ino, cut)?;
                buf.truncate(keep);
                self.node_mut(ino)?.dirty.insert(cut, buf);
                self.with_dirty.insert(ino);
            }
            let n = self.node_mut(ino)?;
            for c in gone {
                n.chunks.remove(&c);
            }
            n.dirty.retain(|c, _| *c < first_gone);
            n.cache = None;
        }
        let now = now_ns();
        let n = self.node_mut(ino)?;
        n.rec.size = size;
        n.rec.mtime = now;
        self.dirty_records.insert(ino);
        Ok(())
    }

    /// Notes an open of `ino`.
    pub fn open(&mut self, ino: u64) -> Result<(), Errno> {
        self.node_mut(ino)?.open += 1;
        Ok(())
    }

    /// Notes a close of `ino` (after its flush): the last close of an unlinked file frees it.
    pub fn release(&mut self, ino: u64) -> Result<(), Errno> {
        let n = self.node_mut(ino)?;
        n.open = n.open.saturating_sub(1);
        if n.open == 0 {
            n.cache = None;
            if n.unlinked {
                self.room_for_removal();
                self.destroy(ino)?;
                return self.barrier();
            }
        }
        Ok(())
    }

    /// A chunk's current bytes as an owned buffer (dirty, else stored, else empty).
    fn chunk_for_update(&mut self, ino: u64, c: u64) -> Result<Vec<u8>, Errno> {
        if let Some(b) = self.node_mut(ino)?.dirty.remove(&c) {
            return Ok(b);
        }
        Ok(self
            .stored_chunk(ino, c)?
            .map(|b| b.to_vec())
            .unwrap_or_default())
    }

    /// A stored chunk's bytes (flushing first if some of this file's chunks are pending).
    fn stored_chunk(&mut self, ino: u64, c: u64) -> Result<Option<FieldBytes>, Errno> {
        let n = self.node(ino)?;
        if !n.chunks.contains(&c) {
            return Ok(None);
        }
        if self.pending.contains(&ino) {
            self.flush_store()?;
        }
        let key = chunk_key(&self.fs, ino, c);
        let chunk = self.fetch_chunk(&key)?;
        // This mount knows the chunk holds data; an empty one is another mount's removal or
        // truncation (design §15.6): say so rather than read zeros.
        if self.shared && chunk.as_ref().is_some_and(|b| b.is_empty()) {
            let (op, uid, pid) = crate::metrics::requester();
            tracing::warn!(
                op,
                uid,
                pid,
                errno = "ESTALE",
                "{key} was emptied by another mount (file removed or truncated there); mount again to see its namespace"
            );
            return Err(libc::ESTALE);
        }
        Ok(chunk)
    }

    /// A chunk's stored bytes, lent where the store can.
    fn fetch_chunk(&self, key: &Key) -> Result<Option<FieldBytes>, Errno> {
        let missing = || {
            io_err(
                &format!("chunk {key} is listed but missing"),
                "no server or store holds it",
            )
        };
        match self.store.retrieve_lent(key) {
            Some(Ok(Some((_, b)))) => Ok(Some(b)),
            Some(Ok(None)) => Err(missing()),
            Some(Err(e)) => Err(io_err(&format!("cannot read {key}"), e)),
            // Servers: read into a buffer (from a replica if the best server is down).
            None => {
                let mut out = None;
                let res = (self.store).retrieve_keys(std::slice::from_ref(key), &mut |_, b, _| {
                    out = Some(FieldBytes::Owned(b.to_vec()));
                    Ok(())
                });
                res.map_err(|e| io_err(&format!("cannot read {key}"), e))?;
                out.map(Some).ok_or_else(missing)
            }
        }
    }

    /// Archives chunk `c` of `ino` (durable at the next barrier).
    fn store_chunk(&mut self, ino: u64, c: u64, bytes: &[u8]) -> Result<(), Errno> {
        self.archive(&chunk_key(&self.fs, ino, c), bytes)?;
        self.pending.insert(ino);
        let n = self.node_mut(ino)?;
        n.chunks.insert(c);
        if n.cache.as_ref().is_some_and(|(i, _)| *i == c) {
            n.cache = None;
        }
        Ok(())
    }

    /// Writes `data` at `offset` of file `ino`; returns the bytes written.
    pub fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<usize, Errno> {
        let cs = u64::from(CHUNK_SIZE);
        if self.node(ino)?.rec.kind != Kind::File {
            return Err(libc::EBADF);
        }
        let end = offset.checked_add(data.len() as u64).ok_or(libc::EFBIG)?;
        let mut pos = offset;
        while pos < end {
            let c = pos / cs;
            let within = (pos % cs) as usize;
            let len = (cs - pos % cs).min(end - pos) as usize;
            let src = &data[(pos - offset) as usize..][..len];
            let whole = within == 0 && len == cs as usize;
            if whole {
                // A whole chunk (fio's or dd's aligned 1 MiB writes): stored straight from the
                // kernel's buffer, no copy of ours.
                self.node_mut(ino)?.dirty.remove(&c);
                self.store_chunk(ino, c, src)?;
            } else {
                let mut buf = self.chunk_for_update(ino, c)?;
                if buf.len() < within + len {
                    buf.resize(within + len, 0);
                }
                buf[within..within + len].copy_from_slice(src);
                if buf.len() == cs as usize {
                    // Filled to its end: store it now (durable at the next barrier).
                    self.store_chunk(ino, c, &buf)?;
                } else {
                    self.node_mut(ino)?.dirty.insert(c, buf);
                    self.with_dirty.insert(ino);
                }
            }
            pos += len as u64;
        }
        let now = now_ns();
        let n = self.node_mut(ino)?;
        n.rec.size = n.rec.size.max(end);
        n.rec.mtime = now;
        n.rec.ctime = now;
        self.dirty_records.insert(ino);
        if self.node(ino)?.dirty.len() > MAX_DIRTY_CHUNKS {
            self.archive_dirty(ino)?;
        }
        Ok(data.len())
    }

    /// Reads up to `size` bytes at `offset` of file `ino`: a range of one stored chunk is
    /// lent as it is (a pmem pool's mapping: no copy before the kernel's), anything else is
    /// assembled into a buffer.
    pub fn read(&mut self, ino: u64, offset: u64, size: u32) -> Result<ReadData, Errno> {
        let cs = u64::from(CHUNK_SIZE);
        let n = self.node(ino)?;
        let end = n.rec.size.min(offset.saturating_add(u64::from(size)));
        let c = offset / cs;
        if n.rec.kind == Kind::File
            && offset < end
            && (end - 1) / cs == c
            && !n.dirty.contains_key(&c)
            && n.chunks.contains(&c)
        {
            let cached = n.cache.as_ref().filter(|(i, _)| *i == c).is_some();
            if !cached {
                let b = self.stored_chunk(ino, c)?;
                self.node_mut(ino)?.cache = b.map(|b| (c, Arc::new(b)));
            }
            if let Some((_, b)) = &self.node(ino)?.cache {
                let (start, stop) = ((offset - c * cs) as usize, (end - c * cs) as usize);
                if stop <= b.len() {
                    return Ok(ReadData::Lent(Arc::clone(b), start..stop));
                }
            }
        }
        self.read_into_buffer(ino, offset, size)
            .map(ReadData::Owned)
    }

    fn read_into_buffer(&mut self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        let cs = u64::from(CHUNK_SIZE);
        let n = self.node(ino)?;
        match n.rec.kind {
            Kind::Dir => return Err(libc::EISDIR),
            Kind::Symlink => return Err(libc::EINVAL),
            Kind::File => {}
        }
        let end = n.rec.size.min(offset.saturating_add(u64::from(size)));
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let mut pos = offset;
        while pos < end {
            let c = pos / cs;
            let within = (pos % cs) as usize;
            let len = (cs - pos % cs).min(end - pos) as usize;
            let dst = &mut out[(pos - offset) as usize..][..len];
            let n = self.node(ino)?;
            if let Some(b) = n.dirty.get(&c) {
                copy_part(dst, b, within);
            } else if n.chunks.contains(&c) {
                let cached = n.cache.as_ref().filter(|(i, _)| *i == c).is_some();
                if !cached {
                    let b = self.stored_chunk(ino, c)?;
                    self.node_mut(ino)?.cache = b.map(|b| (c, Arc::new(b)));
                }
                if let Some((_, b)) = &self.node(ino)?.cache {
                    copy_part(dst, b, within);
                }
            }
            pos += len as u64;
        }
        Ok(out)
    }

    fn archive_dirty(&mut self, ino: u64) -> Result<(), Errno> {
        let dirty = std::mem::take(&mut self.node_mut(ino)?.dirty);
        if dirty.is_empty() {
            return Ok(());
        }
        for (c, buf) in &dirty {
            if let Err(e) = self.archive(&chunk_key(&self.fs, ino, *c), buf) {
                // Still dirty: the next barrier tries them again (full storage may have room
                // by then), and reads still see them.
                self.node_mut(ino)?.dirty = dirty;
                return Err(e);
            }
        }
        let n = self.node_mut(ino)?;
        n.cache = None;
        for (c, buf) in dirty {
            if buf.is_empty() {
                n.chunks.remove(&c);
            } else {
                n.chunks.insert(c);
            }
        }
        self.pending.insert(ino);
        Ok(())
    }

    fn flush_store(&mut self) -> Result<(), Errno> {
        if self.unflushed {
            if let Err(e) = self.store.flush() {
                return Err(self.store_errno("cannot flush the store", &e));
            }
            self.unflushed = false;
        }
        self.pending.clear();
        self.recovered();
        Ok(())
    }

    /// The durability barrier (design §15.3): every dirty chunk and changed record archived,
    /// then the store flushed. Returns when the store has persisted them.
    pub fn barrier(&mut self) -> Result<(), Errno> {
        // An inode leaves the set only once its chunks are archived: after a failure the
        // next barrier tries the rest again.
        let todo: Vec<u64> = self.with_dirty.iter().copied().collect();
        for ino in todo {
            if self.nodes.contains_key(&ino) {
                self.archive_dirty(ino)?;
            }
            self.with_dirty.remove(&ino);
        }
        let records: Vec<u64> = self.dirty_records.iter().copied().collect();
        for ino in records {
            if let Some(n) = self.nodes.get(&ino) {
                let bytes = n.rec.encode();
                self.archive(&inode_key(&self.fs, ino), &bytes)?;
            }
            self.dirty_records.remove(&ino);
        }
        self.flush_store()
    }

    /// Inodes in use and bytes stored (for statfs).
    pub fn usage(&self) -> (u64, u64) {
        let bytes = self
            .nodes
            .values()
            .map(|n| n.rec.size.div_ceil(512) * 512)
            .sum();
        (self.nodes.len() as u64, bytes)
    }
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

/// Copies the part of chunk `b` that starts at `within` into `dst` (bytes past `b` stay zero).
fn copy_part(dst: &mut [u8], b: &[u8], within: usize) {
    if within < b.len() {
        let n = (b.len() - within).min(dst.len());
        dst[..n].copy_from_slice(&b[within..within + n]);
    }
}

fn new_record(kind: Kind, mode: u32, uid: u32, gid: u32) -> InodeRecord {
    let now = now_ns();
    InodeRecord {
        kind,
        deleted: false,
        mode: mode & 0o7777,
        uid,
        gid,
        chunk_size: CHUNK_SIZE,
        size: 0,
        atime: now,
        mtime: now,
        ctime: now,
        target: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let backend: Arc<dyn haar_store::Backend> = Arc::new(haar_store::MemoryBackend::new());
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
        let backend: Arc<dyn haar_store::Backend> = Arc::new(haar_store::MemoryBackend::new());
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
            .list(&haar_core::request::Request::parse("haarfs=t,kind=data").unwrap())
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
        let backend: Arc<dyn haar_store::Backend> = Arc::new(haar_store::MemoryBackend::new());
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
        use haar_store::dist::{DistStore, Placement};
        let backends: Vec<Arc<dyn haar_store::Backend>> = (0..3)
            .map(|_| Arc::new(haar_store::MemoryBackend::new()) as Arc<dyn haar_store::Backend>)
            .collect();
        let dist = |lanes: &[Arc<dyn haar_store::Backend>]| -> Box<dyn FieldStore> {
            let opts = crate::files_options().unwrap();
            let lanes = (lanes.iter().enumerate())
                .map(|(i, b)| {
                    let s = haar_store::Store::with_options(Arc::clone(b), opts.clone());
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
            lanes[lost] = Arc::new(haar_store::MemoryBackend::new());
            let mut fs = Files::load_with(dist(&lanes), &shared).unwrap();
            let d = fs.lookup(ROOT, b"d").unwrap().ino;
            let f = fs.lookup(d, b"f").unwrap().ino;
            let got = fs.read(f, 0, data.len() as u32 + 1).unwrap();
            assert!(got[..] == data[..], "lane {lost} lost");
        }
    }
}
