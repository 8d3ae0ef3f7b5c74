//! The FUSE glue: `fuser::Filesystem` over [`Files`] (the writable part) and [`Fields`] (the
//! `fields/` view). Owns inode routing (the view's inodes start at [`FIELDS_BASE`]), attribute
//! conversion and errno replies; every callback answers (no panic crosses it: errors become
//! errnos). It must not hold file system logic of its own.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use haar::FieldBytes;

use crate::fields::{Entry, Fields};
use crate::files::{Attr, Files, ROOT};
use crate::format::{CHUNK_SIZE, Kind};
use crate::metrics::{MountMetrics, Op};

/// First inode number of the `fields/` view (its root); the writable part's are below it.
pub const FIELDS_BASE: u64 = 1 << 62;

/// The reserved name of the view at the root.
pub const FIELDS_NAME: &str = "fields";

const TTL: Duration = Duration::from_secs(1);

/// The mounted file system: both parts behind locks (callbacks come from several threads).
pub struct HaarFs {
    files: Option<Mutex<Files>>,
    fields: Mutex<Fields>,
    /// Open `fields/` files: the field's bytes, lent or owned, per handle.
    handles: Mutex<HashMap<u64, Arc<FieldBytes>>>,
    next_handle: AtomicU64,
    statfs_path: Option<PathBuf>,
    uid: u32,
    gid: u32,
    /// What the mount counts (`haar mount --metrics`).
    metrics: Arc<MountMetrics>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take every later callback with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn ns(t: TimeOrNow) -> i64 {
    let t = match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    };
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

/// Answers a `readdir` from the whole listing (`.` and `..` included): the entries from
/// `offset` on, as many as the reply holds, each with the offset of the next; or the errno.
pub(crate) fn reply_dir(
    mut reply: ReplyDirectory,
    entries: Result<Vec<(u64, FileType, Vec<u8>)>, i32>,
    offset: u64,
) {
    match entries {
        Ok(entries) => {
            for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
                if reply.add(INodeNo(ino), (i + 1) as u64, kind, OsStr::from_bytes(&name)) {
                    break;
                }
            }
            reply.ok()
        }
        Err(e) => reply.error(errno(e)),
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
    }
}

fn attr_of(a: &Attr) -> FileAttr {
    let r = &a.rec;
    FileAttr {
        ino: INodeNo(a.ino),
        size: r.size,
        blocks: r.size.div_ceil(512),
        atime: time(r.atime),
        mtime: time(r.mtime),
        ctime: time(r.ctime),
        crtime: time(r.ctime),
        kind: file_type(r.kind),
        perm: (r.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: r.uid,
        gid: r.gid,
        rdev: 0,
        blksize: CHUNK_SIZE,
        flags: 0,
    }
}

impl HaarFs {
    /// The file system over a writable part (`None`: only `fields/`, the root read-only) and
    /// a view; `statfs_path` is a directory of the backing store whose space `df` reports.
    pub fn new(files: Option<Files>, fields: Fields, statfs_path: Option<PathBuf>) -> HaarFs {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let metrics = Arc::new(MountMetrics::default());
        if let Some(f) = &files {
            metrics.watch_full(f.full_flag());
        }
        HaarFs {
            metrics,
            files: files.map(Mutex::new),
            fields: Mutex::new(fields),
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            statfs_path,
            uid,
            gid,
        }
    }

    /// What this mount counts, for [`haar::metrics::listen`].
    pub fn metrics(&self) -> Arc<MountMetrics> {
        Arc::clone(&self.metrics)
    }

    /// Starts counting a request of `op` from `req`'s process.
    fn call(&self, op: Op, req: &Request) -> crate::metrics::Call<'_> {
        self.metrics.call(op, req.uid(), req.pid())
    }

    fn files(&self) -> Result<MutexGuard<'_, Files>, i32> {
        self.files.as_ref().map(lock).ok_or(libc::EROFS)
    }

    fn view_attr(&self, fields: &Fields, ino: u64) -> Result<FileAttr, i32> {
        let e = fields.entry(ino)?;
        let (kind, size, perm, nlink) = match e {
            Entry::Dir { .. } => (FileType::Directory, 0, 0o555, 2 + fields.subdirs(e)),
            Entry::Field { length, .. } => (FileType::RegularFile, *length, 0o444, 1),
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 1 << 16,
            flags: 0,
        })
    }

    fn root_attr(&self) -> Result<FileAttr, i32> {
        match &self.files {
            Some(f) => {
                let mut a = attr_of(&lock(f).getattr(ROOT)?);
                a.nlink += 1; // fields/
                Ok(a)
            }
            None => {
                let mut a = self.view_attr(&lock(&self.fields), FIELDS_BASE)?;
                a.ino = INodeNo(ROOT);
                a.nlink = 3;
                Ok(a)
            }
        }
    }

    fn getattr_of(&self, ino: u64) -> Result<FileAttr, i32> {
        if ino == ROOT {
            self.root_attr()
        } else if ino >= FIELDS_BASE {
            self.view_attr(&lock(&self.fields), ino)
        } else {
            Ok(attr_of(&self.files()?.getattr(ino)?))
        }
    }

    fn lookup_of(&self, parent: u64, name: &OsStr) -> Result<FileAttr, i32> {
        if parent >= FIELDS_BASE {
            let mut f = lock(&self.fields);
            let name = name.to_str().ok_or(libc::ENOENT)?;
            let ino = f.lookup(parent, name)?;
            return self.view_attr(&f, ino);
        }
        if parent == ROOT && name == FIELDS_NAME {
            let mut f = lock(&self.fields);
            f.refresh()?;
            return self.view_attr(&f, FIELDS_BASE);
        }
        Ok(attr_of(&self.files()?.lookup(parent, name.as_bytes())?))
    }

    /// Refuses to make or remove `name` in `parent` where the view is.
    fn writable(&self, parent: u64, name: &OsStr) -> Result<(), i32> {
        if parent >= FIELDS_BASE {
            return Err(libc::EROFS);
        }
        if parent == ROOT && name == FIELDS_NAME {
            return Err(libc::EPERM);
        }
        Ok(())
    }

    fn make(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        kind: Kind,
        mode: u32,
        target: &[u8],
    ) -> Result<FileAttr, i32> {
        self.writable(parent, name)?;
        let mut files = self.files()?;
        Ok(attr_of(&files.create(
            parent,
            name.as_bytes(),
            kind,
            crate::files::Owner {
                mode,
                uid: req.uid(),
                gid: req.gid(),
            },
            target,
        )?))
    }
}

/// Answers with the result of `$res` (the value through `$ok`, or the errno), counted by
/// `$call` (started before `$res` is found).
macro_rules! answer {
    ($call:expr, $reply:ident, $res:expr, |$v:ident| $ok:expr) => {{
        let call = $call;
        let res = $res;
        call.result(&res);
        match res {
            Ok($v) => $ok,
            Err(e) => $reply.error(errno(e)),
        }
    }};
}

impl Filesystem for HaarFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Large writes (the kernel caps this at its own maximum): fewer round trips per chunk.
        let _ = config.set_max_write(CHUNK_SIZE);
        let _ = config.set_max_readahead(CHUNK_SIZE);
        Ok(())
    }

    fn destroy(&mut self) {
        if let Some(f) = &self.files
            && let Err(e) = lock(f).barrier()
        {
            tracing::error!(
                errno = crate::metrics::errno_name(e),
                "the last flush at unmount failed (errno {e}): data written since the last fsync or close may be lost"
            );
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let call = self.call(Op::Lookup, req);
        answer!(call, reply, self.lookup_of(parent.0, name), |a| reply
            .entry(&TTL, &a, Generation(0)))
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let call = self.call(Op::Getattr, req);
        answer!(call, reply, self.getattr_of(ino.0), |a| reply
            .attr(&TTL, &a))
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let call = self.call(Op::Setattr, req);
        let res = (|| {
            if ino.0 >= FIELDS_BASE {
                return Err(libc::EROFS);
            }
            let a =
                self.files()?
                    .setattr(ino.0, mode, uid, gid, size, atime.map(ns), mtime.map(ns))?;
            if ino.0 == ROOT {
                self.root_attr()
            } else {
                Ok(attr_of(&a))
            }
        })();
        answer!(call, reply, res, |a| reply.attr(&TTL, &a))
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let call = self.call(Op::Readlink, req);
        let res = (|| self.files()?.readlink(ino.0))();
        answer!(call, reply, res, |t| reply.data(&t))
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let call = self.call(Op::Mknod, req);
        let res = if mode & libc::S_IFMT == libc::S_IFREG {
            self.make(req, parent.0, name, Kind::File, mode & !umask, &[])
        } else {
            // Devices, FIFOs and sockets are not kept (design §15.3).
            Err(libc::EPERM)
        };
        answer!(call, reply, res, |a| reply.entry(&TTL, &a, Generation(0)))
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let call = self.call(Op::Mkdir, req);
        let res = self.make(req, parent.0, name, Kind::Dir, mode & !umask, &[]);
        answer!(call, reply, res, |a| reply.entry(&TTL, &a, Generation(0)))
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let call = self.call(Op::Symlink, req);
        let res = self.make(
            req,
            parent.0,
            link_name,
            Kind::Symlink,
            0o777,
            target.as_os_str().as_bytes(),
        );
        answer!(call, reply, res, |a| reply.entry(&TTL, &a, Generation(0)))
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let call = self.call(Op::Unlink, req);
        let res = (|| {
            self.writable(parent.0, name)?;
            self.files()?.remove(parent.0, name.as_bytes(), false)
        })();
        answer!(call, reply, res, |_v| reply.ok())
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let call = self.call(Op::Rmdir, req);
        let res = (|| {
            self.writable(parent.0, name)?;
            self.files()?.remove(parent.0, name.as_bytes(), true)
        })();
        answer!(call, reply, res, |_v| reply.ok())
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let call = self.call(Op::Rename, req);
        let res = (|| {
            if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
                return Err(libc::EINVAL);
            }
            if (parent.0 >= FIELDS_BASE) != (newparent.0 >= FIELDS_BASE) {
                return Err(libc::EXDEV);
            }
            self.writable(parent.0, name)?;
            self.writable(newparent.0, newname)?;
            self.files()?.rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.contains(RenameFlags::RENAME_NOREPLACE),
            )
        })();
        answer!(call, reply, res, |_v| reply.ok())
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let call = self.call(Op::Link, req);
        // Hard links are not kept (design §15.3).
        let e = if ino.0 >= FIELDS_BASE {
            libc::EROFS
        } else {
            libc::EPERM
        };
        call.done(Some(e), 0);
        reply.error(errno(e))
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let call = self.call(Op::Open, req);
        let res = (|| {
            if ino.0 >= FIELDS_BASE {
                if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
                    return Err(libc::EROFS);
                }
                let bytes = lock(&self.fields).open(ino.0)?;
                let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
                lock(&self.handles).insert(fh, Arc::new(bytes));
                return Ok((fh, FopenFlags::FOPEN_KEEP_CACHE));
            }
            self.files()?.open(ino.0)?;
            Ok((0, FopenFlags::empty()))
        })();
        answer!(call, reply, res, |v| reply.opened(FileHandle(v.0), v.1))
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let call = self.call(Op::Read, req);
        if ino.0 >= FIELDS_BASE {
            let bytes = lock(&self.handles).get(&fh.0).cloned();
            match bytes {
                Some(b) => {
                    // The reply is written from the lent range itself (a pmem pool's mapping).
                    let start = (offset as usize).min(b.len());
                    let end = start.saturating_add(size as usize).min(b.len());
                    call.done(None, (end - start) as u64);
                    reply.data(&b[start..end]);
                }
                None => {
                    call.done(Some(libc::EBADF), 0);
                    reply.error(Errno::EBADF)
                }
            }
            return;
        }
        match self.files().and_then(|mut f| f.read(ino.0, offset, size)) {
            Ok(d) => {
                call.done(None, d.len() as u64);
                reply.data(&d)
            }
            Err(e) => {
                call.done(Some(e), 0);
                reply.error(errno(e))
            }
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let call = self.call(Op::Write, req);
        match self.files().and_then(|mut f| f.write(ino.0, offset, data)) {
            Ok(n) => {
                call.done(None, n as u64);
                reply.written(n as u32)
            }
            Err(e) => {
                call.done(Some(e), 0);
                reply.error(errno(e))
            }
        }
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let call = self.call(Op::Flush, req);
        // close(2) is a durability barrier (design §15.3).
        let res = if ino.0 >= FIELDS_BASE {
            Ok(())
        } else {
            (|| self.files()?.barrier())()
        };
        answer!(call, reply, res, |_v| reply.ok())
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let call = self.call(Op::Release, req);
        let res = if ino.0 >= FIELDS_BASE {
            lock(&self.handles).remove(&fh.0);
            Ok(())
        } else {
            (|| self.files()?.release(ino.0))()
        };
        answer!(call, reply, res, |_v| reply.ok())
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let call = self.call(Op::Fsync, req);
        let res = if ino.0 >= FIELDS_BASE {
            Ok(())
        } else {
            (|| self.files()?.barrier())()
        };
        answer!(call, reply, res, |_v| reply.ok())
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fsync(req, ino, fh, datasync, reply)
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let call = self.call(Op::Readdir, req);
        let res: Result<Vec<(u64, FileType, Vec<u8>)>, i32> = (|| {
            let mut out = Vec::new();
            if ino.0 >= FIELDS_BASE {
                let mut f = lock(&self.fields);
                if ino.0 == FIELDS_BASE {
                    f.refresh()?;
                }
                let Entry::Dir { parent, children } = f.entry(ino.0)?.clone() else {
                    return Err(libc::ENOTDIR);
                };
                let parent = if ino.0 == FIELDS_BASE { ROOT } else { parent };
                out.push((ino.0, FileType::Directory, b".".to_vec()));
                out.push((parent, FileType::Directory, b"..".to_vec()));
                for (name, c) in children {
                    let t = match f.entry(c)? {
                        Entry::Dir { .. } => FileType::Directory,
                        Entry::Field { .. } => FileType::RegularFile,
                    };
                    out.push((c, t, name.into_bytes()));
                }
                return Ok(out);
            }
            out.push((ino.0, FileType::Directory, b".".to_vec()));
            if ino.0 == ROOT {
                out.push((ROOT, FileType::Directory, b"..".to_vec()));
                out.push((FIELDS_BASE, FileType::Directory, FIELDS_NAME.into()));
                if self.files.is_none() {
                    return Ok(out);
                }
            }
            let (parent, entries) = self.files()?.readdir(ino.0)?;
            if ino.0 != ROOT {
                out.push((parent, FileType::Directory, b"..".to_vec()));
            }
            out.extend(entries.into_iter().map(|(i, k, n)| (i, file_type(k), n)));
            Ok(out)
        })();
        call.result(&res);
        reply_dir(reply, res, offset)
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let call = self.call(Op::Statfs, req);
        let (files, _) = self.files.as_ref().map_or((0, 0), |f| lock(f).usage());
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let ok = self.statfs_path.as_ref().is_some_and(|p| {
            let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
                return false;
            };
            // SAFETY: a valid C string and a zeroed struct of the right type.
            unsafe { libc::statvfs(c.as_ptr(), &mut st) == 0 }
        });
        call.done(None, 0);
        if ok {
            reply.statfs(
                st.f_blocks,
                st.f_bfree,
                st.f_bavail,
                files + st.f_ffree,
                st.f_ffree,
                st.f_bsize as u32,
                255,
                st.f_frsize as u32,
            );
        } else {
            reply.statfs(0, 0, 0, files, 0, 4096, 255, 4096);
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.call(Op::Xattr, req).done(Some(libc::ENOTSUP), 0);
        reply.error(Errno::from_i32(libc::ENOTSUP))
    }

    fn getxattr(&self, req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        self.call(Op::Xattr, req).done(Some(libc::ENODATA), 0);
        reply.error(Errno::from_i32(libc::ENODATA))
    }

    fn listxattr(&self, req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.call(Op::Xattr, req).done(None, 0);
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let call = self.call(Op::Create, req);
        let res = (|| {
            let a = self.make(req, parent.0, name, Kind::File, mode & !umask, &[])?;
            self.files()?.open(a.ino.0)?;
            Ok(a)
        })();
        answer!(call, reply, res, |a| reply.created(
            &TTL,
            &a,
            Generation(0),
            FileHandle(0),
            FopenFlags::empty()
        ))
    }
}
