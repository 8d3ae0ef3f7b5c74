//! The system calls under everything else: the page size and the shared, writable mapping of
//! a file (`MAP_SYNC` tried first) at a 2 MiB-aligned address.
//!
//! The leaf of the crate: imports nothing from it, so [`crate::mode`] can probe a file and
//! [`crate::flush`] can page-align an `msync` without reaching up to [`crate::map`]. Must not
//! keep a mapping (that is [`crate::map`]'s `PoolMapping`), flush or decide a mode.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::OnceLock;

/// `MAP_SYNC` from `<linux/mman.h>`; the `libc` crate only defines it for some targets.
#[cfg(target_os = "linux")]
const MAP_SYNC: libc::c_int = 0x8_0000;

/// The system page size, cached.
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 { p as usize } else { 4096 }
    })
}

/// Maps `len` bytes of `file` shared and writable, trying `MAP_SYNC` first.
/// Returns the base and whether `MAP_SYNC` was accepted (the file is on a DAX file system).
pub(crate) fn map_shared(file: &File, len: usize) -> io::Result<(NonNull<u8>, bool)> {
    let fd = file.as_raw_fd();
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // The file is mapped at a 2 MiB boundary, so that ranges backed by huge pages (DAX, or
    // `use_huge_pages`) can be mapped with them: reserve a little more, then map over it.
    let hint = aligned_range(len)?;
    // Linux checks MAP_SYNC support before it touches the range, so a refused MAP_SYNC
    // attempt leaves the reservation in place for the plain mapping to replace.
    let fixed = if hint.is_null() { 0 } else { libc::MAP_FIXED };
    #[cfg(target_os = "linux")]
    {
        let flags = libc::MAP_SHARED_VALIDATE | MAP_SYNC | fixed;
        // SAFETY: `hint` (if any) is our own fresh PROT_NONE reservation of `len` bytes;
        // else the kernel chooses a fresh range. Either way it aliases nothing we use.
        let p = unsafe { libc::mmap(hint, len, prot, flags, fd, 0) };
        if p != libc::MAP_FAILED {
            return Ok((NonNull::new(p.cast()).expect("mmap returned null"), true));
        }
        let err = io::Error::last_os_error();
        // EOPNOTSUPP: not a DAX file system (Linux >= 4.15). EINVAL: a kernel that predates
        // MAP_SHARED_VALIDATE. Anything else is a real failure of the mapping itself.
        if !matches!(err.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) {
            release(hint, len);
            return Err(err);
        }
    }
    // SAFETY: as above.
    let p = unsafe { libc::mmap(hint, len, prot, libc::MAP_SHARED | fixed, fd, 0) };
    if p == libc::MAP_FAILED {
        let err = io::Error::last_os_error();
        release(hint, len);
        return Err(err);
    }
    Ok((NonNull::new(p.cast()).expect("mmap returned null"), false))
}

/// Huge-page size the pool mapping is aligned to.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// A fresh `PROT_NONE` reservation of `len` bytes starting at a [`HUGE_PAGE`] boundary
/// (null when `len` is smaller than one, and the kernel may place the mapping anywhere).
fn aligned_range(len: usize) -> io::Result<*mut libc::c_void> {
    if len < HUGE_PAGE {
        return Ok(std::ptr::null_mut());
    }
    let total = len + HUGE_PAGE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: a fresh anonymous PROT_NONE range; nothing else refers to it.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), total, libc::PROT_NONE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let start = (p as usize).next_multiple_of(HUGE_PAGE);
    let head = start - p as usize;
    // SAFETY: the head and tail lie in the range just reserved and are ours to return.
    unsafe {
        if head > 0 {
            libc::munmap(p, head);
        }
        let tail = HUGE_PAGE - head;
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
    }
    Ok(start as *mut libc::c_void)
}

/// Returns an unused reservation from [`aligned_range`].
fn release(p: *mut libc::c_void, len: usize) {
    if !p.is_null() {
        // SAFETY: our own reservation, mapped nowhere else.
        unsafe { libc::munmap(p, len) };
    }
}
