//! The heap (design §5.3): this process's chunk, taken from a free region whose grace
//! period has passed (design §5.4) or reserved with one `fetch_add` on the heap top, and the
//! 64-byte aligned extents sub-allocated from it; the unused tail given back.
//!
//! Owns the heap top (after `pool` writes it at creation) and the chunk. Must not touch what
//! is inside the extents it hands out (their callers write them), commit slots or the tail
//! hint.

use std::sync::atomic::Ordering;

use super::layout::{ALIGN, OFF_HEAP_TOP};
use super::pool::Pool;
use super::process::Chunk;
use crate::error::{Error, Result};

impl Pool {
    /// Allocates `len` bytes (64-aligned) from this process's chunk of the heap, inside the
    /// file and pre-faulted; takes a new chunk when it does not fit (design §5.3).
    pub(super) fn alloc(&self, len: u64) -> Result<u64> {
        let size = len.max(1).next_multiple_of(ALIGN);
        let mut c = self.chunk.lock().unwrap();
        if c.end - c.next < size {
            self.new_chunk(&mut c, size)?;
        }
        let off = c.next;
        c.next += size;
        self.note_chunk_next(c.next);
        Ok(off)
    }

    /// Replaces this process's chunk by a fresh one of at least `need` bytes: freed space
    /// that no reader can still see (continuing the current chunk where it can), else
    /// reserved with one `fetch_add` on the heap top, grown into the file and mapped. The old
    /// chunk's unused tail goes back to the heap top if nobody has reserved after it, else to
    /// the free table (else it is leaked space).
    pub(super) fn new_chunk(&self, c: &mut Chunk, need: u64) -> Result<()> {
        let near = (c.end > 0).then_some(c.end);
        if let Some((off, len)) = self.take_free(near, need, self.chunk_size)? {
            if near == Some(off) && c.end - c.next + len >= need {
                c.end = off + len;
            } else {
                self.give_back(c);
                *c = Chunk {
                    start: off,
                    next: off,
                    end: off + len,
                };
            }
            // Recorded before anything in it is handed out (design §5.4).
            return self.record_chunk(Some((c.start, c.next, c.end)));
        }
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
        if end > from && !self.through_file.load(Ordering::Relaxed) {
            // Pre-faulting is an optimisation; a failure only costs page faults later.
            let _ = self.map.populate(from as usize, (end - from) as usize);
        }
        *c = Chunk {
            start: off,
            next: off,
            end,
        };
        self.record_chunk(Some((off, off, end)))
    }

    /// Returns the unused tail of `c` to the heap when the heap top is still its end, else
    /// to the free table with epoch 0 (it was never published). The process-table entry
    /// stops naming the chunk first (persisted), so that nobody gives the tail back twice
    /// (design §5.4); if that cannot be persisted the tail stays leaked.
    fn give_back(&self, c: &mut Chunk) {
        if c.end > 0 && self.record_chunk(None).is_ok() {
            self.return_tail(c.next, c.end);
        }
        *c = Chunk::default();
    }
}

impl Pool {
    /// Gives this process's chunk back (its unused tail), as closing the pool does; the next
    /// allocation takes a new one.
    pub(super) fn release_chunk(&self) {
        self.give_back(&mut self.chunk.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let mut c = std::mem::take(self.chunk.get_mut().unwrap_or_else(|e| e.into_inner()));
        self.give_back(&mut c);
        self.release_proc_entry();
    }
}
