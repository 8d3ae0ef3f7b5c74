//! The barrier (design §15.3): archive every dirty chunk and record, then flush the store; and
//! the full state it ends, with the space reserve that lets removals through a full store.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::format::{chunk_key, inode_key};

use super::Files;
use super::errno::{Errno, errno_of, io_err};
use super::reserve::Reserve;

impl Files {
    /// Keeps `reserve` (taken now if there is room) for removals on a full file system.
    pub fn set_reserve(&mut self, mut reserve: Reserve) {
        reserve.take();
        self.reserve = Some(reserve);
    }

    /// A store error as an errno; full storage is said once (until a barrier finds room
    /// again), anything else every time.
    pub(super) fn store_errno(&mut self, what: &str, e: &haar::Error) -> Errno {
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
    pub(super) fn room_for_removal(&mut self) {
        if self.full
            && let Some(r) = &mut self.reserve
        {
            r.give_back();
        }
    }

    pub(super) fn archive_dirty(&mut self, ino: u64) -> Result<(), Errno> {
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

    pub(super) fn flush_store(&mut self) -> Result<(), Errno> {
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
