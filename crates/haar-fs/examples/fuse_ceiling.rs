//! The FUSE ceiling of a host: a file system on the same `fuser` session, mount options,
//! thread count and `max_write` as `haar mount`, that stores nothing. Writes are discarded (a
//! file only remembers its size), reads return zeros from one static buffer, `fsync` does
//! nothing. What fio reaches on it is what any FUSE file system built this way can reach here;
//! `bench/mount.sh` runs it in the same run as tmpfs and `haar mount` (design §15.5).
//!
//! Usage: `cargo run --release -p haar-fs --example fuse_ceiling -- MOUNTPOINT`; prints
//! `mounted MOUNTPOINT` and serves until unmounted (`fusermount3 -u MOUNTPOINT`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

const CHUNK: u32 = 1 << 20;
const TTL: Duration = Duration::from_secs(1);
static ZEROS: [u8; CHUNK as usize] = [0; CHUNK as usize];

/// Files of the root: name → inode, inode → size, last inode handed out.
type Table = (HashMap<Vec<u8>, u64>, HashMap<u64, u64>, u64);

#[derive(Default)]
struct Null {
    files: Mutex<Table>,
}

fn attr(ino: u64, size: u64) -> FileAttr {
    let dir = ino == 1;
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: if dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if dir { 0o777 } else { 0o666 },
        nlink: if dir { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: CHUNK,
        flags: 0,
    }
}

impl Null {
    fn size(&self, ino: u64) -> Option<u64> {
        if ino == 1 {
            return Some(0);
        }
        self.files.lock().unwrap().1.get(&ino).copied()
    }
}

impl Filesystem for Null {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(CHUNK);
        let _ = config.set_max_readahead(CHUNK);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let f = self.files.lock().unwrap();
        match (parent.0, f.0.get(name.as_bytes())) {
            (1, Some(&ino)) => reply.entry(&TTL, &attr(ino, f.1[&ino]), Generation(0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.size(ino.0) {
            Some(s) => reply.attr(&TTL, &attr(ino.0, s)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
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
        let mut f = self.files.lock().unwrap();
        if let (Some(s), Some(cur)) = (size, f.1.get_mut(&ino.0)) {
            *cur = s;
        }
        let s = if ino.0 == 1 {
            Some(0)
        } else {
            f.1.get(&ino.0).copied()
        };
        match s {
            Some(s) => reply.attr(&TTL, &attr(ino.0, s)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut f = self.files.lock().unwrap();
        f.2 = f.2.max(1) + 1;
        let ino = f.2;
        f.0.insert(name.as_bytes().to_vec(), ino);
        f.1.insert(ino, 0);
        reply.created(
            &TTL,
            &attr(ino, 0),
            Generation(0),
            FileHandle(0),
            FopenFlags::empty(),
        );
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut f = self.files.lock().unwrap();
        match f.0.remove(name.as_bytes()) {
            Some(ino) => {
                f.1.remove(&ino);
                reply.ok()
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
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
        let end = self.size(ino.0).unwrap_or(0);
        let n = end.saturating_sub(offset).min(u64::from(size.min(CHUNK))) as usize;
        reply.data(&ZEROS[..n]);
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
        let mut f = self.files.lock().unwrap();
        if let Some(s) = f.1.get_mut(&ino.0) {
            *s = (*s).max(offset + data.len() as u64);
        }
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let f = self.files.lock().unwrap();
        let mut entries = vec![(1, FileType::Directory, b".".to_vec())];
        entries.push((1, FileType::Directory, b"..".to_vec()));
        for (name, ino) in &f.0 {
            entries.push((*ino, FileType::RegularFile, name.clone()));
        }
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, OsStr::from_bytes(&name)) {
                break;
            }
        }
        reply.ok();
    }
}

fn main() {
    let Some(mnt) = std::env::args_os().nth(1) else {
        eprintln!("usage: fuse_ceiling MOUNTPOINT");
        std::process::exit(2);
    };
    // As `haar mount` mounts (haar_fs::Mount::new).
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        fuser::MountOption::FSName("haar-ceiling".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoAtime,
    ];
    cfg.n_threads = Some(2);
    let session = match fuser::Session::new(Null::default(), &mnt, &cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fuse_ceiling: cannot mount {}: {e}", mnt.to_string_lossy());
            std::process::exit(1);
        }
    };
    println!("mounted {}", mnt.to_string_lossy());
    if let Err(e) = session.run() {
        eprintln!("fuse_ceiling: {e}");
        std::process::exit(1);
    }
}
