//! The namespace of the writable part (design §15.2, §15.6): loading the tree, looking names
//! up (in the store too, for shared mounts), creating, linking, removing and renaming entries,
//! attributes and truncation, and the open count that keeps an unlinked file alive.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use haar::FieldStore;
use haar::Key;
use haar::request::Request;

use crate::format::{
    CHUNK_SIZE, DirentRecord, InodeRecord, Kind, chunk_key, dirent_key, inode_key,
};

use super::errno::{Errno, io_err};
use super::reserve::Reserve;
use super::{
    Attr, DirEntry, Files, ID_SHIFT, LoadOptions, MAX_MOUNT_ID, Node, Owner, REFRESH_EVERY, ROOT,
    now_ns,
};

impl Files {
    /// Loads file system `fs` from `store` (design §15.2, "Mounting"), creating its root
    /// directory (owned by `uid`:`gid`) if it has none, as mount id 0. A damaged record is an
    /// error naming its key.
    pub fn load(store: Box<dyn FieldStore>, fs: &str, uid: u32, gid: u32) -> haar::Result<Files> {
        Files::load_with(store, &LoadOptions::new(fs, uid, gid))
    }

    /// [`Files::load`] with every option.
    pub fn load_with(store: Box<dyn FieldStore>, o: &LoadOptions) -> haar::Result<Files> {
        let (fs, uid, gid) = (o.fs.as_str(), o.uid, o.gid);
        if o.mount_id >= MAX_MOUNT_ID {
            return Err(haar::Error::Config(format!(
                "mount id {} is too large: give one below {MAX_MOUNT_ID}",
                o.mount_id
            )));
        }
        let req = Request::parse(&format!("{}={fs}", crate::format::DB_KEYWORD))
            .map_err(|e| haar::Error::Config(format!("file system name {fs:?}: {e}")))?;
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
            return Err(haar::Error::Config(format!(
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
            files
                .barrier()
                .map_err(|e| haar::Error::Config(format!("cannot create the root: errno {e}")))?;
        }
        files.drop_unreachable();
        Ok(files)
    }

    /// After a successful barrier: storage that was full has room again once the reserve can
    /// be taken back.
    pub(super) fn recovered(&mut self) {
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

    pub(super) fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes.get(&ino).ok_or(libc::ENOENT)
    }

    pub(super) fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
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

    pub(super) fn archive(&mut self, key: &Key, bytes: &[u8]) -> Result<(), Errno> {
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
