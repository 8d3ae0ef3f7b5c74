//! Simulated power loss for file-backed stores (docs/design.md §6.2): a FUSE file system that
//! keeps its files in memory and records every operation that reaches it, in the order the
//! kernel sends them, and a replay that builds from that record the directory tree a power cut
//! at any point would leave on a disk.
//!
//! It is a test facility, compiled only with the non-default `power-loss` feature (the POSIX
//! power-loss test's dev-dependency turns it on): a store's POSIX backend (or any program)
//! runs unmodified on the mount, and [`Recording::log`] afterwards yields the operations. Only
//! what a file system must make durable is durable in a crash image:
//! * a file's bytes and length — as of its last `fsync`/`fdatasync` ([`Op::Sync`] of the file);
//! * directory entries (create, unlink, rename, mkdir, rmdir) — once the directory holding them
//!   is `fsync`ed ([`Op::Sync`] of the directory). [`Namespace::Ordered`] models a journalling
//!   file system (ext4, XFS): entry changes reach the disk in the order they were made, so
//!   syncing a directory makes every earlier change durable. [`Namespace::Weak`] is what POSIX
//!   alone promises: syncing a directory makes only the changes in that directory durable.
//!
//! Writes after the last sync are not simply lost: with eviction ([`Cut::evict`]) each 4 KiB page
//! written since a file's last sync reaches the disk with probability ½ (the page cache may
//! have written any dirty page back), the file's length follows the pages that did, and of the
//! directory changes not yet durable a random prefix (ordered) or a random subset (weak) did —
//! torn at page granularity, as a disk is.
//!
//! The mount serves from one thread, so the record is a total order: a program that writes a
//! line to a file on the mount after each call that returned can be read back, at any cut, from
//! the *live* state ([`Replay::live_file`]) to learn which calls were acknowledged before the
//! power went.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// The page size at which unsynced writes are torn.
pub const PAGE: u64 = 4096;

const ROOT: u64 = 1;
const TTL: Duration = Duration::from_secs(1);

/// One operation as the file system received it (only those that succeeded are recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A new file or directory `ino` named `name` in directory `parent`.
    Create {
        /// Directory holding the new entry.
        parent: u64,
        /// Its name.
        name: Vec<u8>,
        /// The new inode.
        ino: u64,
        /// A directory (else a regular file).
        dir: bool,
    },
    /// Bytes written into file `ino` at `offset`.
    Write {
        /// The file.
        ino: u64,
        /// Where.
        offset: u64,
        /// What.
        data: Vec<u8>,
    },
    /// File `ino` truncated or extended to `len` bytes.
    SetLen {
        /// The file.
        ino: u64,
        /// Its new length.
        len: u64,
    },
    /// Entry `name` of directory `parent` removed (unlink or rmdir).
    Remove {
        /// The directory.
        parent: u64,
        /// The entry's name.
        name: Vec<u8>,
    },
    /// Entry `name` of `parent`, inode `ino`, renamed to `newname` in `newparent` (replacing
    /// what was there).
    Rename {
        /// Source directory.
        parent: u64,
        /// Source name.
        name: Vec<u8>,
        /// Target directory.
        newparent: u64,
        /// Target name.
        newname: Vec<u8>,
        /// The inode moved.
        ino: u64,
    },
    /// `fsync`/`fdatasync` of a file, or `fsync` of a directory: a persistence barrier.
    Sync {
        /// The file or directory.
        ino: u64,
        /// Whether `ino` is a directory.
        dir: bool,
    },
}

impl Op {
    /// Whether a power cut just before this operation is worth a trial: a barrier or a
    /// directory change (where ordering bugs show).
    pub fn is_cut_point(&self) -> bool {
        matches!(
            self,
            Op::Sync { .. } | Op::Rename { .. } | Op::Create { .. }
        )
    }
}

#[derive(Debug, Clone)]
enum Body {
    Dir(BTreeMap<Vec<u8>, u64>),
    File(Vec<u8>),
}

#[derive(Debug, Clone)]
struct Node {
    body: Body,
    mode: u32,
    parent: u64,
    mtime: SystemTime,
}

/// The live file system and its record.
struct Inner {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    log: Vec<Op>,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panic in one callback must not take every later one with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    fn new() -> Inner {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                body: Body::Dir(BTreeMap::new()),
                mode: 0o755,
                parent: ROOT,
                mtime: SystemTime::now(),
            },
        );
        Inner {
            nodes,
            next_ino: ROOT + 1,
            log: Vec::new(),
        }
    }

    fn node(&self, ino: u64) -> Result<&Node, i32> {
        self.nodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn entries(&self, dir: u64) -> Result<&BTreeMap<Vec<u8>, u64>, i32> {
        match &self.node(dir)?.body {
            Body::Dir(e) => Ok(e),
            Body::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn entries_mut(&mut self, dir: u64) -> Result<&mut BTreeMap<Vec<u8>, u64>, i32> {
        let n = self.nodes.get_mut(&dir).ok_or(libc::ENOENT)?;
        n.mtime = SystemTime::now();
        match &mut n.body {
            Body::Dir(e) => Ok(e),
            Body::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn file_mut(&mut self, ino: u64) -> Result<&mut Vec<u8>, i32> {
        let n = self.nodes.get_mut(&ino).ok_or(libc::ENOENT)?;
        n.mtime = SystemTime::now();
        match &mut n.body {
            Body::File(d) => Ok(d),
            Body::Dir(_) => Err(libc::EISDIR),
        }
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, i32> {
        let n = self.node(ino)?;
        let (kind, size, nlink) = match &n.body {
            Body::Dir(_) => (FileType::Directory, 0, 2),
            Body::File(d) => (FileType::RegularFile, d.len() as u64, 1),
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: n.mtime,
            mtime: n.mtime,
            ctime: n.mtime,
            crtime: n.mtime,
            kind,
            perm: (n.mode & 0o7777) as u16,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: PAGE as u32,
            flags: 0,
        })
    }

    fn create(&mut self, parent: u64, name: &[u8], dir: bool, mode: u32) -> Result<u64, i32> {
        if self.entries(parent)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let body = if dir {
            Body::Dir(BTreeMap::new())
        } else {
            Body::File(Vec::new())
        };
        self.nodes.insert(
            ino,
            Node {
                body,
                mode,
                parent,
                mtime: SystemTime::now(),
            },
        );
        self.entries_mut(parent)?.insert(name.to_vec(), ino);
        self.log.push(Op::Create {
            parent,
            name: name.to_vec(),
            ino,
            dir,
        });
        Ok(ino)
    }

    fn remove(&mut self, parent: u64, name: &[u8], dir: bool) -> Result<(), i32> {
        let ino = *self.entries(parent)?.get(name).ok_or(libc::ENOENT)?;
        match (&self.node(ino)?.body, dir) {
            (Body::Dir(e), true) if !e.is_empty() => return Err(libc::ENOTEMPTY),
            (Body::Dir(_), false) => return Err(libc::EISDIR),
            (Body::File(_), true) => return Err(libc::ENOTDIR),
            _ => {}
        }
        self.entries_mut(parent)?.remove(name);
        // The inode stays: an open file keeps its bytes (and inodes are never reused).
        self.log.push(Op::Remove {
            parent,
            name: name.to_vec(),
        });
        Ok(())
    }

    fn rename(
        &mut self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        noreplace: bool,
    ) -> Result<(), i32> {
        let ino = *self.entries(parent)?.get(name).ok_or(libc::ENOENT)?;
        let src_dir = matches!(self.node(ino)?.body, Body::Dir(_));
        if let Some(&old) = self.entries(newparent)?.get(newname) {
            if noreplace {
                return Err(libc::EEXIST);
            }
            if old == ino {
                return Ok(());
            }
            match (&self.node(old)?.body, src_dir) {
                (Body::Dir(e), true) if !e.is_empty() => return Err(libc::ENOTEMPTY),
                (Body::Dir(_), false) => return Err(libc::EISDIR),
                (Body::File(_), true) => return Err(libc::ENOTDIR),
                _ => {}
            }
        }
        if src_dir {
            // A directory may not move below itself.
            let mut p = newparent;
            while p != ROOT {
                if p == ino {
                    return Err(libc::EINVAL);
                }
                p = self.node(p)?.parent;
            }
        }
        self.entries_mut(parent)?.remove(name);
        self.entries_mut(newparent)?.insert(newname.to_vec(), ino);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = newparent;
        }
        self.log.push(Op::Rename {
            parent,
            name: name.to_vec(),
            newparent,
            newname: newname.to_vec(),
            ino,
        });
        Ok(())
    }

    fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Result<usize, i32> {
        let f = self.file_mut(ino)?;
        let end = offset as usize + data.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[offset as usize..end].copy_from_slice(data);
        self.log.push(Op::Write {
            ino,
            offset,
            data: data.to_vec(),
        });
        Ok(data.len())
    }

    fn set_len(&mut self, ino: u64, len: u64) -> Result<(), i32> {
        let f = self.file_mut(ino)?;
        if f.len() as u64 != len {
            f.resize(len as usize, 0);
            self.log.push(Op::SetLen { ino, len });
        }
        Ok(())
    }

    fn sync(&mut self, ino: u64) -> Result<(), i32> {
        let dir = matches!(self.node(ino)?.body, Body::Dir(_));
        self.log.push(Op::Sync { ino, dir });
        Ok(())
    }
}

/// A recording file system: mount it with [`Recording::mount`].
#[derive(Clone)]
pub struct Recording {
    inner: Arc<Mutex<Inner>>,
}

impl Default for Recording {
    fn default() -> Self {
        Recording::new()
    }
}

/// A mounted [`Recording`]; unmounted when dropped or by [`Mounted::unmount`].
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
}

impl Mounted {
    /// Unmounts the file system and waits for its thread.
    ///
    /// # Errors
    /// What the kernel said.
    pub fn unmount(mut self) -> io::Result<()> {
        match self.session.take() {
            Some(s) => s.umount_and_join(),
            None => Ok(()),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

impl Recording {
    /// An empty file system.
    pub fn new() -> Recording {
        Recording {
            inner: Arc::new(Mutex::new(Inner::new())),
        }
    }

    /// Mounts it on `path` (root only: mount(2) on `/dev/fuse`, or `fusermount3`), served by
    /// one background thread so that the record is one total order.
    ///
    /// # Errors
    /// What the kernel or fusermount3 said.
    pub fn mount(&self, path: &Path) -> io::Result<Mounted> {
        let mut cfg = fuser::Config::default();
        cfg.mount_options = vec![
            fuser::MountOption::FSName("haar-powerfail".into()),
            fuser::MountOption::NoAtime,
        ];
        cfg.n_threads = Some(1);
        let session = fuser::Session::new(
            RecordingFs {
                inner: self.inner.clone(),
            },
            path,
            &cfg,
        )?;
        Ok(Mounted {
            session: Some(session.spawn()?),
        })
    }

    /// The operations recorded so far.
    pub fn log(&self) -> Vec<Op> {
        lock(&self.inner).log.clone()
    }
}

struct RecordingFs {
    inner: Arc<Mutex<Inner>>,
}

fn reply_err(e: i32) -> Errno {
    Errno::from_i32(e)
}

macro_rules! answer {
    ($reply:ident, $res:expr, |$v:ident| $ok:expr) => {
        match $res {
            Ok($v) => $ok,
            Err(e) => $reply.error(reply_err(e)),
        }
    };
}

impl Filesystem for RecordingFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let g = lock(&self.inner);
        let res = g
            .entries(parent.0)
            .and_then(|e| e.get(name.as_bytes()).copied().ok_or(libc::ENOENT))
            .and_then(|ino| g.attr(ino));
        answer!(reply, res, |a| reply.entry(&TTL, &a, Generation(0)))
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let res = lock(&self.inner).attr(ino.0);
        answer!(reply, res, |a| reply.attr(&TTL, &a))
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut g = lock(&self.inner);
        let res = (|| {
            if let Some(len) = size {
                g.set_len(ino.0, len)?;
            }
            if let Some(m) = mode {
                // Modes are not part of the crash model (images are written 0600/0700).
                g.nodes.get_mut(&ino.0).ok_or(libc::ENOENT)?.mode = m;
            }
            g.attr(ino.0)
        })();
        answer!(reply, res, |a| reply.attr(&TTL, &a))
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let mut g = lock(&self.inner);
        let res = if mode & libc::S_IFMT == libc::S_IFREG {
            g.create(parent.0, name.as_bytes(), false, mode & !umask)
                .and_then(|ino| g.attr(ino))
        } else {
            Err(libc::EPERM)
        };
        answer!(reply, res, |a| reply.entry(&TTL, &a, Generation(0)))
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut g = lock(&self.inner);
        let res = g
            .create(parent.0, name.as_bytes(), true, mode & !umask)
            .and_then(|ino| g.attr(ino));
        answer!(reply, res, |a| reply.entry(&TTL, &a, Generation(0)))
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = lock(&self.inner).remove(parent.0, name.as_bytes(), false);
        answer!(reply, res, |_v| reply.ok())
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let res = lock(&self.inner).remove(parent.0, name.as_bytes(), true);
        answer!(reply, res, |_v| reply.ok())
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let res = if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            Err(libc::EINVAL)
        } else {
            lock(&self.inner).rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.contains(RenameFlags::RENAME_NOREPLACE),
            )
        };
        answer!(reply, res, |_v| reply.ok())
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        // Not modelled: a store must not depend on hard links.
        reply.error(Errno::EPERM)
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let res = lock(&self.inner).attr(ino.0);
        answer!(reply, res, |_a| reply
            .opened(FileHandle(0), FopenFlags::empty()))
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let g = lock(&self.inner);
        match g.node(ino.0).map(|n| &n.body) {
            Ok(Body::File(d)) => {
                let start = (offset as usize).min(d.len());
                let end = start.saturating_add(size as usize).min(d.len());
                reply.data(&d[start..end])
            }
            Ok(Body::Dir(_)) => reply.error(Errno::EISDIR),
            Err(e) => reply.error(reply_err(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let res = lock(&self.inner).write(ino.0, offset, data);
        answer!(reply, res, |n| reply.written(n as u32))
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let res = lock(&self.inner).sync(ino.0);
        answer!(reply, res, |_v| reply.ok())
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Recorded the same way: `Op::Sync` knows from the inode that it is a directory.
        self.fsync(req, ino, fh, datasync, reply)
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let g = lock(&self.inner);
        let res = (|| {
            let parent = g.node(ino.0)?.parent;
            let mut out = vec![
                (ino.0, FileType::Directory, b".".to_vec()),
                (parent, FileType::Directory, b"..".to_vec()),
            ];
            for (name, &c) in g.entries(ino.0)? {
                let t = match g.node(c)?.body {
                    Body::Dir(_) => FileType::Directory,
                    Body::File(_) => FileType::RegularFile,
                };
                out.push((c, t, name.clone()));
            }
            Ok(out)
        })();
        crate::fuse::reply_dir(reply, res, offset)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let files = lock(&self.inner).nodes.len() as u64;
        reply.statfs(
            1 << 24,
            1 << 23,
            1 << 23,
            files,
            1 << 20,
            PAGE as u32,
            255,
            PAGE as u32,
        );
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut g = lock(&self.inner);
        let res = g
            .create(parent.0, name.as_bytes(), false, mode & !umask)
            .and_then(|ino| g.attr(ino));
        answer!(reply, res, |a| reply.created(
            &TTL,
            &a,
            Generation(0),
            FileHandle(0),
            FopenFlags::empty()
        ))
    }
}

/// What a directory `fsync` makes durable (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    /// Every earlier directory change (a journalling file system: ext4, XFS).
    Ordered,
    /// The changes in that directory only (POSIX's promise).
    Weak,
}

/// Where the power goes and what else reached the disk.
#[derive(Debug, Clone, Copy)]
pub struct Cut {
    /// The durability model of directory changes.
    pub namespace: Namespace,
    /// Whether unsynced pages and directory changes may have reached the disk (drawn from
    /// `seed`), or only what was synced.
    pub evict: bool,
    /// Seed of the draw.
    pub seed: u64,
}

/// A directory change waiting to become durable: entries removed, then inserted.
#[derive(Debug, Clone)]
struct Change {
    dirs: [u64; 2],
    remove: Option<(u64, Vec<u8>)>,
    insert: Option<(u64, Vec<u8>, u64)>,
}

#[derive(Debug, Clone, Default)]
struct FileState {
    live: Vec<u8>,
    durable: Vec<u8>,
    dirty: BTreeSet<u64>,
}

/// Replays a record operation by operation, keeping what is live and what is durable.
pub struct Replay<'a> {
    log: &'a [Op],
    next: usize,
    live: HashMap<u64, BTreeMap<Vec<u8>, u64>>,
    durable: HashMap<u64, BTreeMap<Vec<u8>, u64>>,
    pending: Vec<Change>,
    files: HashMap<u64, FileState>,
    namespace: Namespace,
}

fn apply(dirs: &mut HashMap<u64, BTreeMap<Vec<u8>, u64>>, c: &Change) {
    if let Some((d, n)) = &c.remove
        && let Some(e) = dirs.get_mut(d)
    {
        e.remove(n);
    }
    if let Some((d, n, ino)) = &c.insert {
        dirs.entry(*d).or_default().insert(n.clone(), *ino);
    }
}

/// A small deterministic generator for the eviction draw (xorshift64*).
struct Draw(u64);

impl Draw {
    fn new(seed: u64) -> Draw {
        Draw(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn coin(&mut self) -> bool {
        self.next() >> 63 == 1
    }
}

impl<'a> Replay<'a> {
    /// A replay of `log` from its start (an empty file system), under `namespace`.
    pub fn new(log: &'a [Op], namespace: Namespace) -> Replay<'a> {
        let mut live = HashMap::new();
        live.insert(ROOT, BTreeMap::new());
        Replay {
            log,
            next: 0,
            durable: live.clone(),
            live,
            pending: Vec::new(),
            files: HashMap::new(),
            namespace,
        }
    }

    /// How many operations have been applied: the power goes just before `log[position()]`.
    pub fn position(&self) -> usize {
        self.next
    }

    /// Applies operations up to (not including) `log[to]`.
    pub fn advance(&mut self, to: usize) {
        while self.next < to.min(self.log.len()) {
            let op = &self.log[self.next];
            self.next += 1;
            self.step(op);
        }
    }

    fn step(&mut self, op: &Op) {
        let change = match op {
            Op::Create {
                parent,
                name,
                ino,
                dir,
            } => {
                if *dir {
                    self.live.entry(*ino).or_default();
                    self.durable.entry(*ino).or_default();
                } else {
                    self.files.entry(*ino).or_default();
                }
                Some(Change {
                    dirs: [*parent, *parent],
                    remove: None,
                    insert: Some((*parent, name.clone(), *ino)),
                })
            }
            Op::Remove { parent, name } => Some(Change {
                dirs: [*parent, *parent],
                remove: Some((*parent, name.clone())),
                insert: None,
            }),
            Op::Rename {
                parent,
                name,
                newparent,
                newname,
                ino,
            } => Some(Change {
                dirs: [*parent, *newparent],
                remove: Some((*parent, name.clone())),
                insert: Some((*newparent, newname.clone(), *ino)),
            }),
            Op::Write { ino, offset, data } => {
                let f = self.files.entry(*ino).or_default();
                let end = *offset as usize + data.len();
                if f.live.len() < end {
                    f.live.resize(end, 0);
                }
                f.live[*offset as usize..end].copy_from_slice(data);
                if !data.is_empty() {
                    f.dirty.extend(offset / PAGE..=(end as u64 - 1) / PAGE);
                }
                None
            }
            Op::SetLen { ino, len } => {
                let f = self.files.entry(*ino).or_default();
                let old = f.live.len() as u64;
                f.live.resize(*len as usize, 0);
                // The pages between the two lengths change (zeros past the new end).
                let (lo, hi) = (old.min(*len), old.max(*len));
                if hi > lo {
                    f.dirty.extend(lo / PAGE..=(hi - 1) / PAGE);
                }
                None
            }
            Op::Sync { ino, dir: false } => {
                if let Some(f) = self.files.get_mut(ino) {
                    f.durable.resize(f.live.len(), 0);
                    for &p in &f.dirty {
                        let lo = (p * PAGE) as usize;
                        let hi = ((p + 1) * PAGE).min(f.live.len() as u64) as usize;
                        if lo < hi {
                            f.durable[lo..hi].copy_from_slice(&f.live[lo..hi]);
                        }
                    }
                    f.dirty.clear();
                }
                None
            }
            Op::Sync { ino, dir: true } => {
                let pending = std::mem::take(&mut self.pending);
                for c in pending {
                    let covered = match self.namespace {
                        Namespace::Ordered => true,
                        Namespace::Weak => c.dirs.contains(ino),
                    };
                    if covered {
                        apply(&mut self.durable, &c);
                    } else {
                        self.pending.push(c);
                    }
                }
                None
            }
        };
        if let Some(c) = change {
            apply(&mut self.live, &c);
            self.pending.push(c);
        }
    }

    /// The live bytes of the file at `path` (relative to the root), if it exists now.
    pub fn live_file(&self, path: &str) -> Option<&[u8]> {
        let mut ino = ROOT;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            ino = *self.live.get(&ino)?.get(part.as_bytes())?;
        }
        self.files.get(&ino).map(|f| f.live.as_slice())
    }

    /// Writes the tree a power cut here would leave into `dir` (which must exist and be
    /// empty): directories 0700, files 0600.
    ///
    /// # Errors
    /// Writing the image failed.
    pub fn write_image(&self, cut: Cut, dir: &Path) -> io::Result<ImageStats> {
        let mut draw = Draw::new(cut.seed);
        // Directory changes: what was synced, plus (evicting) a prefix or subset of the rest.
        let mut names = self.durable.clone();
        if cut.evict {
            match self.namespace {
                Namespace::Ordered => {
                    let n = (draw.next() % (self.pending.len() as u64 + 1)) as usize;
                    for c in &self.pending[..n] {
                        apply(&mut names, c);
                    }
                }
                Namespace::Weak => {
                    for c in &self.pending {
                        if draw.coin() {
                            apply(&mut names, c);
                        }
                    }
                }
            }
        }
        let mut stats = ImageStats::default();
        let mut contents: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut stack = vec![(ROOT, dir.to_path_buf())];
        // Weak ordering can leave a directory reachable twice (a rename durable in one of its
        // two directories only): it is written once.
        let mut seen_dirs = BTreeSet::new();
        while let Some((d, path)) = stack.pop() {
            let Some(entries) = names.get(&d) else {
                continue;
            };
            if !seen_dirs.insert(d) {
                continue;
            }
            for (name, &ino) in entries {
                let p = path.join(OsStr::from_bytes(name));
                if names.contains_key(&ino) && !self.files.contains_key(&ino) {
                    std::fs::DirBuilder::new().mode(0o700).create(&p)?;
                    stats.dirs += 1;
                    stack.push((ino, p));
                    continue;
                }
                let bytes = contents
                    .entry(ino)
                    .or_insert_with(|| self.crash_bytes(ino, cut.evict, &mut draw, &mut stats));
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&p)?;
                io::Write::write_all(&mut f, bytes)?;
                stats.files += 1;
                stats.bytes += bytes.len() as u64;
            }
        }
        Ok(stats)
    }

    fn crash_bytes(
        &self,
        ino: u64,
        evict: bool,
        draw: &mut Draw,
        stats: &mut ImageStats,
    ) -> Vec<u8> {
        let Some(f) = self.files.get(&ino) else {
            return Vec::new();
        };
        let mut out = f.durable.clone();
        if !evict {
            return out;
        }
        let live_len = f.live.len() as u64;
        let mut len = out.len() as u64;
        if live_len < len && draw.coin() {
            len = live_len;
        }
        for &p in &f.dirty {
            if !draw.coin() {
                continue;
            }
            stats.torn_pages += 1;
            let lo = p * PAGE;
            let hi = ((p + 1) * PAGE).min(live_len);
            if lo >= hi {
                continue;
            }
            if hi > len {
                len = hi;
            }
            if out.len() < hi as usize {
                out.resize(hi as usize, 0);
            }
            out[lo as usize..hi as usize].copy_from_slice(&f.live[lo as usize..hi as usize]);
        }
        out.resize(len as usize, 0);
        out
    }
}

/// What an image holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageStats {
    /// Directories written.
    pub dirs: u64,
    /// Files written.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Unsynced pages that reached the image (with eviction).
    pub torn_pages: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
                if e.file_type().unwrap().is_dir() {
                    out.insert(format!("{rel}/"), Vec::new());
                    stack.push(e.path());
                } else {
                    out.insert(rel, std::fs::read(e.path()).unwrap());
                }
            }
        }
        out
    }

    fn image(log: &[Op], at: usize, cut: Cut) -> BTreeMap<String, Vec<u8>> {
        let mut r = Replay::new(log, cut.namespace);
        r.advance(at);
        let t = tempfile::tempdir().unwrap();
        r.write_image(cut, t.path()).unwrap();
        read_tree(t.path())
    }

    const SYNCED: Cut = Cut {
        namespace: Namespace::Ordered,
        evict: false,
        seed: 1,
    };

    /// The write-then-rename pattern: nothing of it is durable before the syncs, all of it
    /// after; an unsynced rename of a synced file shows the old name.
    #[test]
    fn only_synced_data_and_entries_are_durable() {
        let log = vec![
            Op::Create {
                parent: ROOT,
                name: b"d".to_vec(),
                ino: 2,
                dir: true,
            },
            Op::Sync {
                ino: ROOT,
                dir: true,
            },
            Op::Create {
                parent: 2,
                name: b"tmp".to_vec(),
                ino: 3,
                dir: false,
            },
            Op::Write {
                ino: 3,
                offset: 0,
                data: vec![7; 5000],
            },
            Op::Sync { ino: 3, dir: false },
            Op::Rename {
                parent: 2,
                name: b"tmp".to_vec(),
                newparent: 2,
                newname: b"f".to_vec(),
                ino: 3,
            },
            Op::Sync { ino: 2, dir: true },
            Op::Write {
                ino: 3,
                offset: 5000,
                data: vec![9; 100],
            },
        ];
        assert_eq!(image(&log, 1, SYNCED).len(), 0, "mkdir not yet synced");
        assert_eq!(image(&log, 2, SYNCED).keys().collect::<Vec<_>>(), ["d/"]);
        // Data synced, entry not: the file is not there.
        assert_eq!(image(&log, 5, SYNCED).keys().collect::<Vec<_>>(), ["d/"]);
        let full = image(&log, log.len(), SYNCED);
        assert_eq!(
            full["d/f"],
            vec![7; 5000],
            "the unsynced append is not durable"
        );
        assert!(!full.contains_key("d/tmp"));
        // With eviction, an unsynced append lands whole or not at all here (one page), and
        // the length follows it.
        let mut seen = BTreeSet::new();
        for seed in 0..32 {
            let cut = Cut {
                evict: true,
                seed,
                ..SYNCED
            };
            seen.insert(image(&log, log.len(), cut)["d/f"].len());
        }
        assert!(seen.contains(&5000) && seen.contains(&5100), "{seen:?}");
    }

    /// Weak: syncing one directory leaves another's changes pending; ordered: it does not.
    #[test]
    fn weak_namespace_syncs_one_directory() {
        let log = vec![
            Op::Create {
                parent: ROOT,
                name: b"a".to_vec(),
                ino: 2,
                dir: true,
            },
            Op::Create {
                parent: ROOT,
                name: b"b".to_vec(),
                ino: 3,
                dir: true,
            },
            Op::Sync {
                ino: ROOT,
                dir: true,
            },
            Op::Create {
                parent: 2,
                name: b"x".to_vec(),
                ino: 4,
                dir: false,
            },
            Op::Create {
                parent: 3,
                name: b"y".to_vec(),
                ino: 5,
                dir: false,
            },
            Op::Sync { ino: 3, dir: true },
        ];
        let ordered = image(&log, log.len(), SYNCED);
        assert!(ordered.contains_key("a/x") && ordered.contains_key("b/y"));
        let weak = image(
            &log,
            log.len(),
            Cut {
                namespace: Namespace::Weak,
                ..SYNCED
            },
        );
        assert!(
            !weak.contains_key("a/x") && weak.contains_key("b/y"),
            "{weak:?}"
        );
    }

    /// Unsynced writes across pages tear at page boundaries: some pages new, some old.
    #[test]
    fn unsynced_overwrites_tear_at_pages() {
        let log = vec![
            Op::Create {
                parent: ROOT,
                name: b"f".to_vec(),
                ino: 2,
                dir: false,
            },
            Op::Write {
                ino: 2,
                offset: 0,
                data: vec![1; 4 * PAGE as usize],
            },
            Op::Sync { ino: 2, dir: false },
            Op::Sync {
                ino: ROOT,
                dir: true,
            },
            Op::Write {
                ino: 2,
                offset: 0,
                data: vec![2; 4 * PAGE as usize],
            },
        ];
        let mut mixed = false;
        for seed in 0..16 {
            let img = image(
                &log,
                log.len(),
                Cut {
                    evict: true,
                    seed,
                    ..SYNCED
                },
            );
            let f = &img["f"];
            assert_eq!(f.len(), 4 * PAGE as usize);
            for page in f.chunks(PAGE as usize) {
                assert!(page.iter().all(|&b| b == page[0]), "torn inside a page");
            }
            let pages: BTreeSet<u8> = f.chunks(PAGE as usize).map(|p| p[0]).collect();
            mixed |= pages.len() == 2;
        }
        assert!(mixed, "no image mixed old and new pages");
    }
}
