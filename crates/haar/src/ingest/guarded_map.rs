//! Input files mapped so that a truncation while they are read cannot kill the process.
//!
//! Reading a mapped page past the end of its file raises SIGBUS. The mapping is registered with
//! haar's process-wide handler (`haar_persist::sigbus`, shared with the pmem pools), which maps
//! zero pages over the rest of it, marks it faulted and returns, so the access reads zeros and
//! the program runs on. Whoever uses a mapping's bytes must ask [`GuardedMap::changed`]
//! afterwards and throw away everything derived from them if it says so (it also notices
//! in-place rewrites and truncations that did not fault, by the file's length and modification
//! time).
//!
//! This module owns only the mapping; it does not know GRIB.

use std::fs::File;
use std::ops::Deref;
use std::time::SystemTime;

use haar_persist::sigbus;

/// A read-only mapping of a whole file, registered with the SIGBUS handler.
pub struct GuardedMap {
    // Declared before `map`: unregistered (dropped) before it is unmapped.
    guard: sigbus::Guard,
    map: memmap2::Mmap,
    file: File,
    len: u64,
    modified: Option<SystemTime>,
}

impl GuardedMap {
    /// Maps `file` (a regular, non-empty file whose metadata is `meta`); `None` when it cannot
    /// be mapped or every slot is taken (read the file instead).
    pub fn new(file: File, meta: &std::fs::Metadata) -> Option<GuardedMap> {
        // SAFETY: read-only and private; a truncation while mapped is what the guard
        // handles, and rewrites are noticed by `changed` (length, modification time).
        let map = unsafe { memmap2::MmapOptions::new().map(&file) }.ok()?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        // SAFETY: the mapping lives in `map`, dropped after `guard` (field order).
        let guard = unsafe { sigbus::guard(map.as_ptr(), map.len(), false) }?;
        Some(GuardedMap {
            guard,
            map,
            file,
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }

    /// Reads `buf.len()` bytes at `offset` with pread(2) instead of through the mapping: a
    /// copy out of the page cache costs less than faulting the same pages into this process
    /// (design §11). A file truncated meanwhile gives an error, as
    /// [`GuardedMap::changed`] would say.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(buf, offset)
    }

    /// True if the file was truncated, extended or rewritten since it was mapped (so the
    /// bytes read may be zeros or mix two versions), as far as can be told now.
    pub fn changed(&self) -> bool {
        self.guard.faulted()
            || self.file.metadata().map_or(true, |m| {
                m.len() != self.len || m.modified().ok() != self.modified
            })
    }
}

impl Deref for GuardedMap {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map
    }
}
