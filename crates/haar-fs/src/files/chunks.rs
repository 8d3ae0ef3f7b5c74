//! The file bytes of the writable part (design §15.3): chunks read from the store (the last
//! one cached), written into buffers, and stored when a file holds too many dirty ones.

use std::sync::Arc;

use haar::FieldBytes;
use haar::Key;

use crate::format::{CHUNK_SIZE, Kind, chunk_key};

use super::errno::{Errno, io_err};
use super::{Files, MAX_DIRTY_CHUNKS, ReadData, now_ns};

impl Files {
    /// A chunk's current bytes as an owned buffer (dirty, else stored, else empty).
    pub(super) fn chunk_for_update(&mut self, ino: u64, c: u64) -> Result<Vec<u8>, Errno> {
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
}

/// Copies the part of chunk `b` that starts at `within` into `dst` (bytes past `b` stay zero).
fn copy_part(dst: &mut [u8], b: &[u8], within: usize) {
    if within < b.len() {
        let n = (b.len() - within).min(dst.len());
        dst[..n].copy_from_slice(&b[within..within + n]);
    }
}
