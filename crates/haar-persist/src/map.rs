//! The mapping of a pool file ([`PoolMapping`]): a `MAP_SHARED` mapping of a large reserved
//! virtual range that only ever hands out bytes below the file's current length, plus
//! cross-process atomics placed inside the file.
//!
//! Owns the reserved range's life (`munmap`), growth (`fallocate`), pre-faulting and huge
//! pages; the `mmap` call itself and the page size are [`crate::sys`]'s. Must not know the
//! pool's layout (headers, allocation, commit records: the pmem backend of haar-store builds
//! those on top and must honour the contract stated on [`PoolMapping`]); copies and
//! persistence are delegated to [`crate::copy`] and [`crate::flush`].

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

use crate::copy::{copy_nt, copy_nt_crc32c};
#[cfg(doc)]
use crate::cpu::sfence;
use crate::flush::persist;
use crate::mode::PersistMode;
use crate::sys::{HUGE_PAGE, map_shared, page_size};

/// Default virtual address range reserved by [`PoolMapping::open`]: 64 GiB.
///
/// Reserving address space is free (no memory is committed for a shared file mapping); it bounds
/// how far the pool can grow without remapping, which would invalidate every pointer into it.
pub const DEFAULT_RESERVE: usize = 64 << 30;

/// A pool file mapped `MAP_SHARED` over a fixed, large reserved address range.
///
/// The range is reserved once (default [`DEFAULT_RESERVE`]) so the base address never moves:
/// offsets and pointers stay valid as the file grows. Only the first [`file_len`] bytes are
/// backed by the file; touching the rest raises SIGBUS, so every safe accessor is bounds-checked
/// against `file_len`, which only ever increases.
///
/// # Contract (why the safe accessors are sound)
///
/// The mapping is shared with other threads and other processes, which Rust cannot see. The
/// safe accessors are sound only if every user of the pool file (all haar code, in any process)
/// keeps these rules:
///
/// 1. **Committed bytes are immutable.** A range is written only while it is exclusively owned
///    by one writer (freshly allocated, not yet published). Once published, nobody writes it
///    again while any `&[u8]` of it can exist; [`slice`] may only be called on published
///    ranges, so a `&[u8]` never aliases a write. A layout that reuses freed space (haar's
///    pmem pools, design §5.4) must hand a range out again only after every process that
///    could hold a slice of it has let go (its grace period).
/// 2. **Shared words are atomic.** Words used for cross-process coordination (allocation
///    cursors, commit slots) are accessed only through [`atomic_u64`], never through [`slice`]
///    or plain writes.
/// 3. **Pool files never shrink** while mapped (no `ftruncate` down, no hole punching);
///    otherwise a slice handed out earlier could fault.
///
/// Writers use the `unsafe` [`write_nt`] / [`ptr_mut`], whose safety sections restate rule 1.
///
/// # Example
///
/// ```
/// use haar_persist::PoolMapping;
/// use std::sync::atomic::Ordering;
///
/// let path = std::env::temp_dir().join(format!("haar-doc-{}.pool", std::process::id()));
/// let pool = PoolMapping::open(&path, 1 << 30)?;
/// pool.grow(1 << 20)?;
/// pool.populate(0, 1 << 20)?;
///
/// // Bytes 0..8 hold a bump-allocation cursor shared by every process mapping the pool.
/// let cursor = pool.atomic_u64(0);
/// let off = 64 + cursor.fetch_add(5, Ordering::Relaxed) as usize;
/// // SAFETY: the fetch_add above gave this writer exclusive ownership of off..off + 5.
/// unsafe { pool.write_nt(off, b"field")? };
/// pool.persist(off, 5)?; // fences the non-temporal stores, then flushes or msyncs
/// assert_eq!(pool.slice(off, 5), Some(&b"field"[..]));
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// [`file_len`]: PoolMapping::file_len
/// [`slice`]: PoolMapping::slice
/// [`atomic_u64`]: PoolMapping::atomic_u64
/// [`write_nt`]: PoolMapping::write_nt
/// [`ptr_mut`]: PoolMapping::ptr_mut
pub struct PoolMapping {
    file: File,
    path: PathBuf,
    base: NonNull<u8>,
    reserve: usize,
    /// Bytes of the file known to exist; monotonically increasing.
    len: AtomicUsize,
    mode: PersistMode,
    dax: bool,
    /// The simulated power loss's durable image, when `HAAR_POWER_LOSS` records this pool
    /// ([`crate::powerfail`], compiled only with the `power-loss` feature).
    #[cfg(feature = "power-loss")]
    recorder: Option<std::sync::Arc<crate::powerfail::Recorder>>,
    /// The reservation registered with the SIGBUS handler ([`crate::sigbus`]): a pool file
    /// truncated under this process makes its accesses fail instead of killing it.
    guard: Option<crate::sigbus::Guard>,
}

// SAFETY: the mapping is process-wide memory, valid until `Drop`, with no thread affinity.
// Concurrent access through `&self` is either to immutable published bytes (`slice`), to atomics
// (`atomic_u64`, the `len` counter) or through `unsafe` methods whose callers guarantee exclusive
// ownership of the range they write (see the type's contract).
unsafe impl Send for PoolMapping {}
// SAFETY: see `Send` above.
unsafe impl Sync for PoolMapping {}

impl PoolMapping {
    /// Opens (creating it empty if absent) and maps the pool file at `path`, reserving `reserve`
    /// bytes of address space (rounded up to a page), with the [`PersistMode`] from
    /// `HAAR_PMEM_FORCE` or detection.
    ///
    /// # Errors
    /// I/O errors naming the path; `InvalidInput` if the file is already longer than `reserve`
    /// or `HAAR_PMEM_FORCE` is malformed.
    pub fn open(path: impl AsRef<Path>, reserve: usize) -> io::Result<PoolMapping> {
        Self::open_with_mode(path, reserve, None)
    }

    /// As [`PoolMapping::open`], but `force`, if given, overrides both `HAAR_PMEM_FORCE` and
    /// detection (tests use it to run the CLWB path on tmpfs without touching the environment).
    ///
    /// # Errors
    /// As [`PoolMapping::open`].
    pub fn open_with_mode(
        path: impl AsRef<Path>,
        reserve: usize,
        force: Option<PersistMode>,
    ) -> io::Result<PoolMapping> {
        let path = path.as_ref();
        let ctx = |what: &str, e: io::Error| annotate(e, path, what);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| ctx("cannot open pool file", e))?;
        let page = page_size();
        let reserve = reserve
            .max(page)
            .checked_next_multiple_of(page)
            .ok_or_else(|| invalid(format!("reserve of {reserve} bytes is too large")))?;
        let len = file_size(&file).map_err(|e| ctx("cannot stat pool file", e))?;
        if len > reserve {
            return Err(invalid(format!(
                "{}: pool file is {len} bytes, more than the {reserve} bytes reserved; \
                 reopen with a larger reserve",
                path.display()
            )));
        }
        let env = if force.is_none() {
            PersistMode::from_env()?
        } else {
            None
        };
        let (base, dax) = map_shared(&file, reserve)
            .map_err(|e| ctx(&format!("cannot map {reserve} bytes of pool file"), e))?;
        #[cfg(feature = "power-loss")]
        let recorder = if std::env::var_os(crate::powerfail::POWER_LOSS_ENV).is_some() {
            crate::powerfail::attach(path, len).map_err(|e| ctx("cannot record pool file", e))?
        } else {
            None
        };
        // SAFETY: `base..base + reserve` is our reservation until `Drop`, which unregisters
        // the guard before unmapping.
        let guard = unsafe { crate::sigbus::guard(base.as_ptr(), reserve, true) };
        Ok(PoolMapping {
            guard,
            #[cfg(feature = "power-loss")]
            recorder,
            file,
            path: path.to_owned(),
            base,
            reserve,
            len: AtomicUsize::new(len),
            mode: force.or(env).unwrap_or(PersistMode::for_mapping(dax)),
            dax,
        })
    }

    /// Start of the mapping. Only the first [`PoolMapping::file_len`] bytes may be touched.
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Bytes of the file known to this mapping (grows via [`grow`](Self::grow) and
    /// [`refresh_len`](Self::refresh_len), never shrinks).
    pub fn file_len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Size of the reserved address range: the most the pool can grow to through this mapping.
    pub fn reserve(&self) -> usize {
        self.reserve
    }

    /// How [`PoolMapping::persist`] makes bytes durable.
    pub fn mode(&self) -> PersistMode {
        self.mode
    }

    /// Whether the kernel accepted `MAP_SYNC`, i.e. the file is on real persistent memory.
    pub fn is_dax(&self) -> bool {
        self.dax
    }

    /// True once an access past the end of a truncated pool file was caught in this mapping
    /// (see [`crate::sigbus`]): every later access through it fails with an error naming the
    /// file.
    pub fn faulted(&self) -> bool {
        self.guard.as_ref().is_some_and(|g| g.faulted())
    }

    /// Path the pool was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Grows the file to at least `new_len` bytes with `fallocate(2)` (blocks are allocated and
    /// zeroed now, so later stores cannot fail for lack of space). Never shrinks; safe to race
    /// with other processes growing the same file. Does not pre-fault: see
    /// [`populate`](Self::populate).
    ///
    /// # Errors
    /// `InvalidInput` beyond the reserve; `ENOSPC` and other I/O errors naming the path.
    pub fn grow(&self, new_len: usize) -> io::Result<()> {
        let cur = self.file_len();
        if new_len <= cur {
            return Ok(());
        }
        if new_len > self.reserve {
            return Err(invalid(format!(
                "{}: cannot grow pool to {new_len} bytes, beyond the {} bytes reserved; \
                 reopen with a larger reserve",
                self.path.display(),
                self.reserve
            )));
        }
        allocate(&self.file, cur, new_len).map_err(|e| {
            annotate(
                e,
                &self.path,
                &format!("cannot grow pool file to {new_len} bytes"),
            )
        })?;
        self.len.fetch_max(new_len, Ordering::AcqRel);
        #[cfg(feature = "power-loss")]
        if let Some(r) = &self.recorder {
            r.grow(new_len);
        }
        Ok(())
    }

    /// Re-reads the file length (another process may have grown it) and returns the new
    /// [`PoolMapping::file_len`], capped at the reserve.
    ///
    /// # Errors
    /// `fstat` failures; `InvalidData` if the file shrank, which breaks the pool contract.
    pub fn refresh_len(&self) -> io::Result<usize> {
        let size =
            file_size(&self.file).map_err(|e| annotate(e, &self.path, "cannot stat pool file"))?;
        let cur = self.file_len();
        if size < cur {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: pool file shrank from {cur} to {size} bytes while mapped; \
                     something outside haar truncated it",
                    self.path.display()
                ),
            ));
        }
        let size = size.min(self.reserve);
        Ok(self.len.fetch_max(size, Ordering::AcqRel).max(size))
    }

    /// Backs `off..off + len` (rounded inwards to 2 MiB) with huge pages where the kernel
    /// can (Linux ≥ 6.1 `MADV_COLLAPSE`, which copies the pages already there, about a
    /// second per GiB), as a pmem namespace is mapped with 2 MiB pages: afterwards every
    /// process maps and unmaps that range 512 times faster. Returns whether it did.
    ///
    /// The range is populated in this mapping first. Linux 6.18 was seen to lose every
    /// later store through a mapping in which `MADV_COLLAPSE` had run over allocated but
    /// never-faulted pages of a `huge=always` tmpfs file: the stores stayed in the process,
    /// the file kept zeros (design §5.1); with the pages faulted in first it does not.
    pub fn use_huge_pages(&self, off: usize, len: usize) -> bool {
        const HUGE: usize = HUGE_PAGE;
        if self.check(off, len).is_err() {
            return false;
        }
        let start = off.next_multiple_of(HUGE);
        let end = (off + len) & !(HUGE - 1);
        if end <= start {
            return false;
        }
        if self.populate(start, end - start).is_err() {
            return false;
        }
        #[cfg(target_os = "linux")]
        {
            // SAFETY: inside the mapping; both advices leave contents unchanged.
            unsafe {
                let p = self.base.as_ptr().add(start).cast();
                libc::madvise(p, end - start, libc::MADV_HUGEPAGE);
                libc::madvise(p, end - start, libc::MADV_COLLAPSE) == 0
            }
        }
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Pre-faults the pages covering `off..off + len` for writing, so later stores run at memory
    /// bandwidth instead of page-fault speed. Uses `madvise(MADV_POPULATE_WRITE)` (Linux ≥ 5.14),
    /// else writes each page with an atomic `fetch_or(0)`, which leaves contents unchanged.
    /// Meant for freshly grown, unpublished ranges.
    ///
    /// # Errors
    /// `InvalidInput` past [`PoolMapping::file_len`]; `madvise` failures.
    pub fn populate(&self, off: usize, len: usize) -> io::Result<()> {
        self.check(off, len)?;
        if len == 0 {
            return Ok(());
        }
        let page = page_size();
        let start = off & !(page - 1);
        // The page holding end-of-file is mapped in full, so rounding up stays inside.
        let end = (off + len).next_multiple_of(page);
        // SAFETY: `start..end` lies inside the mapping and below the page holding EOF.
        let p = unsafe { self.base.as_ptr().add(start) };
        #[cfg(target_os = "linux")]
        {
            // SAFETY: MADV_POPULATE_WRITE only faults pages in; it never changes contents.
            let rc = unsafe { libc::madvise(p.cast(), end - start, libc::MADV_POPULATE_WRITE) };
            if rc == 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINVAL) {
                return Err(annotate(err, &self.path, "cannot populate pool mapping"));
            }
            // EINVAL: kernel older than 5.14; touch the pages instead.
        }
        for at in (0..end - start).step_by(page) {
            // SAFETY: in bounds as above. An atomic value-preserving RMW is a write fault
            // without a data race even if another writer owns bytes of the page.
            unsafe { (*p.add(at).cast::<AtomicU8>()).fetch_or(0, Ordering::Relaxed) };
        }
        Ok(())
    }

    /// The bytes at `off..off + len`, or `None` if any lies past [`PoolMapping::file_len`]
    /// (call [`refresh_len`](Self::refresh_len) first to see growth by other processes).
    ///
    /// Only call this on published (immutable) ranges: see the type's contract.
    pub fn slice(&self, off: usize, len: usize) -> Option<&[u8]> {
        self.check(off, len).ok()?;
        // SAFETY: in bounds of the file, which never shrinks (contract 3), and the mapping lives
        // as long as `&self`. Published bytes are never written again (contract 1), so the
        // shared borrow does not alias a mutation.
        Some(unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), len) })
    }

    /// Pointer to `off`, if `off..off + len` lies below [`PoolMapping::file_len`].
    ///
    /// Writing through it is `unsafe`: the caller must own `off..off + len` exclusively (not
    /// yet published, not read or written by any other thread or process) for the duration of
    /// the write.
    pub fn ptr_mut(&self, off: usize, len: usize) -> Option<*mut u8> {
        self.check(off, len).ok()?;
        // SAFETY: in bounds of the mapping (checked above).
        Some(unsafe { self.base.as_ptr().add(off) })
    }

    /// Copies `src` to `off` with [`copy_nt`] (no fence; follow with
    /// [`persist`](Self::persist) or [`sfence`] before publishing the range, since a `Release`
    /// store does not order non-temporal stores).
    ///
    /// # Safety
    /// The caller owns `off..off + src.len()` exclusively: no other thread or process reads or
    /// writes it during the call, and it has not been published (contract rule 1).
    ///
    /// # Errors
    /// `InvalidInput` if the range lies past [`PoolMapping::file_len`].
    pub unsafe fn write_nt(&self, off: usize, src: &[u8]) -> io::Result<()> {
        self.check(off, src.len())?;
        // SAFETY: in bounds (checked); exclusivity and no overlap with `src` (a slice borrowed
        // from elsewhere cannot be an unpublished range) are the caller's.
        unsafe { copy_nt(self.base.as_ptr().add(off), src) };
        #[cfg(feature = "power-loss")]
        if let Some(r) = &self.recorder {
            r.nt(off, src.len());
        }
        Ok(())
    }

    /// [`write_nt`](Self::write_nt) that also returns the CRC-32C of `src`, computed in the
    /// same pass ([`copy_nt_crc32c`]).
    ///
    /// # Safety
    /// As [`write_nt`](Self::write_nt).
    ///
    /// # Errors
    /// `InvalidInput` if the range lies past [`PoolMapping::file_len`].
    pub unsafe fn write_nt_crc32c(&self, off: usize, src: &[u8]) -> io::Result<u32> {
        self.check(off, src.len())?;
        // SAFETY: as `write_nt`.
        let crc = unsafe { copy_nt_crc32c(self.base.as_ptr().add(off), src) };
        #[cfg(feature = "power-loss")]
        if let Some(r) = &self.recorder {
            r.nt(off, src.len());
        }
        Ok(crc)
    }

    /// Writes `src` at `off` through the file (`pwrite(2)`) instead of the mapping, and
    /// returns its CRC-32C (computed over `src` first). For a process that writes each page
    /// of a range once and never touches it again (a bulk copy into a pool), this skips the
    /// page-table work of the mapping: on 4 KiB pages, faulting or populating a page costs
    /// about 1 µs, which caps a copy through the mapping near 4 GB/s whatever the memory's
    /// speed (design §5.1). The bytes are visible through every mapping of the file at once
    /// (one page cache, or the device itself under DAX). Durability is as for
    /// [`write_nt`](Self::write_nt): the range is durable after the next
    /// [`fence`](Self::fence) on a DAX file system (whose `write` stores with cache-bypassing
    /// copies) and after [`persist`](Self::persist) on a page-cache file.
    ///
    /// # Safety
    /// As [`write_nt`](Self::write_nt): the caller owns the range exclusively.
    ///
    /// # Errors
    /// `InvalidInput` if the range lies past [`PoolMapping::file_len`]; `pwrite` failures
    /// (`ENOSPC` from a full device is returned, where a store through the mapping would
    /// raise `SIGBUS`).
    pub unsafe fn write_file_crc32c(&self, off: usize, src: &[u8]) -> io::Result<u32> {
        use std::os::unix::fs::FileExt;
        self.check(off, src.len())?;
        let crc = crate::crc32c(src);
        self.file
            .write_all_at(src, off as u64)
            .map_err(|e| annotate(e, &self.path, "cannot write pool range"))?;
        #[cfg(feature = "power-loss")]
        if let Some(r) = &self.recorder {
            r.nt(off, src.len());
        }
        Ok(crc)
    }

    /// Makes `off..off + len` durable with the mapping's [`PersistMode`], and fences every
    /// non-temporal store issued by this thread (in both modes).
    ///
    /// # Errors
    /// `InvalidInput` past [`PoolMapping::file_len`]; `msync` failures.
    pub fn persist(&self, off: usize, len: usize) -> io::Result<()> {
        self.check(off, len)?;
        // SAFETY: the range is inside the live file mapping (checked).
        unsafe { persist(self.base.as_ptr().add(off), len, self.mode) }
            .map_err(|e| annotate(e, &self.path, "cannot persist pool range"))?;
        #[cfg(feature = "power-loss")]
        if let Some(r) = &self.recorder {
            // SAFETY: `file_len` bytes from the base are mapped.
            unsafe { r.persist(self.base.as_ptr(), self.file_len(), off, len) };
        }
        Ok(())
    }

    /// A store fence ([`crate::sfence`]): the non-temporal stores this thread issued
    /// through [`write_nt`](Self::write_nt) are ordered before later stores, and on real
    /// persistent memory ([`PersistMode::CpuCache`]) durable.
    pub fn fence(&self) {
        crate::sfence();
        #[cfg(feature = "power-loss")]
        if let Some(r) = &self.recorder {
            // SAFETY: `file_len` bytes from the base are mapped.
            unsafe { r.fence(self.base.as_ptr(), self.file_len()) };
        }
    }

    /// The 8 bytes at `off` as an atomic, shared with every process that maps the file
    /// (lock-prefixed instructions act on the physical page, which all mappings share).
    ///
    /// Those bytes must only ever be accessed atomically (contract rule 2). Persisting an
    /// update is separate: call [`persist`](Self::persist)`(off, 8)`.
    ///
    /// # Panics
    /// If `off` is not a multiple of 8 or `off + 8` exceeds [`PoolMapping::file_len`]: offsets
    /// of shared words are layout constants, so either is a bug in the caller.
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8),
            "atomic_u64 at offset {off}: not 8-byte aligned"
        );
        // Bounds only: after a caught truncation the range is still mapped (zero pages), so
        // the atomic stays sound, and the next checked access reports the damage.
        assert!(
            off.checked_add(8).is_some_and(|end| end <= self.file_len()),
            "atomic_u64 at offset {off}: past end of pool file ({} bytes)",
            self.file_len()
        );
        // SAFETY: in bounds and 8-aligned (the base is page-aligned); AtomicU64 has the layout
        // of u64 and its interior mutability makes concurrent atomic access from other threads
        // and processes sound; no non-atomic access exists (contract rule 2).
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
    }

    fn check(&self, off: usize, len: usize) -> io::Result<()> {
        if self.faulted() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: the pool file shrank while this process had it mapped (truncated by \
                     something outside haar; an access past its new end was caught): this \
                     process can no longer use it; restore the file, then restart the process",
                    self.path.display()
                ),
            ));
        }
        match off.checked_add(len) {
            Some(end) if end <= self.file_len() => Ok(()),
            _ => Err(invalid(format!(
                "{}: range {off}+{len} lies past the end of the pool file ({} bytes)",
                self.path.display(),
                self.file_len()
            ))),
        }
    }
}

impl Drop for PoolMapping {
    fn drop(&mut self) {
        // Unregistered first: the address range may be reused by another mapping at once.
        drop(self.guard.take());
        // SAFETY: `base..base + reserve` is our mapping; `&mut self` proves no slice or atomic
        // reference borrowed from it is still alive.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.reserve) };
    }
}

impl fmt::Debug for PoolMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolMapping")
            .field("path", &self.path)
            .field("file_len", &self.file_len())
            .field("reserve", &self.reserve)
            .field("mode", &self.mode)
            .field("dax", &self.dax)
            .finish_non_exhaustive()
    }
}

fn file_size(file: &File) -> io::Result<usize> {
    let len = file.metadata()?.len();
    usize::try_from(len)
        .map_err(|_| invalid(format!("file of {len} bytes exceeds the address space")))
}

/// Bytes available to this user in the file system holding `path` (`statvfs`): what a pool
/// file there can still grow by.
///
/// # Errors
/// `InvalidInput` for a path with a NUL byte; `statvfs` failures.
pub fn available_bytes(path: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| invalid(format!("{}: path holds a NUL byte", path.display())))?;
    // SAFETY: statvfs writes into a zeroed struct it is given; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Extends `file` from `cur` to at least `new_len` bytes with allocated blocks.
#[cfg(target_os = "linux")]
fn allocate(file: &File, cur: usize, new_len: usize) -> io::Result<()> {
    // Allocating only the new part keeps growth O(added bytes); `cur` may be stale-low, which
    // merely re-allocates blocks that already exist. Mode 0 never shrinks the file, so racing
    // growers are harmless.
    let (off, add) = (cur as libc::off_t, (new_len - cur) as libc::off_t);
    // SAFETY: plain system call on an fd we own.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, off, add) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
        // File systems without fallocate: extend sparsely. Not atomic against another process
        // growing concurrently (it could shrink what that one just grew): serialise growth there.
        return extend_sparse(file, new_len);
    }
    Err(err)
}

#[cfg(not(target_os = "linux"))]
fn allocate(file: &File, _cur: usize, new_len: usize) -> io::Result<()> {
    extend_sparse(file, new_len)
}

fn extend_sparse(file: &File, new_len: usize) -> io::Result<()> {
    if file_size(file)? < new_len {
        file.set_len(new_len as u64)?;
    }
    Ok(())
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Keeps the error kind (and OS code in the message) but says which file and what failed.
fn annotate(e: io::Error, path: &Path, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}

#[cfg(test)]
mod tests;
