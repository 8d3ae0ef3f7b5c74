//! Cache-line write-back and making a mapped range durable.
//!
//! Owns the cache-control instructions (`CLWB`, `CLFLUSHOPT`, `CLFLUSH`) behind [`flush_lines`]
//! and [`persist`], which turns a [`PersistMode`] into either flushes plus the fence
//! ([`sfence`], from [`crate::cpu`]) or `msync(MS_SYNC)`. Must not copy bytes (that is
//! [`crate::copy`]), create or resize mappings (that is [`crate::map`]) or decide the mode
//! (that is [`crate::mode`]). Every function here leaves memory contents unchanged.

use std::io;

use crate::cpu::{CACHE_LINE, CpuFeatures, FlushKind, sfence};
use crate::mode::PersistMode;
use crate::sys::page_size;

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The cache-control instructions themselves. Every function here requires the CPU feature
    //! it uses; the callers dispatch on [`crate::cpu::CpuFeatures`].

    /// # Safety
    /// The CPU supports CLWB and `p` points into mapped memory.
    #[inline(always)]
    pub(super) unsafe fn clwb(p: *const u8) {
        // SAFETY: caller guarantees CLWB exists and `p` is mapped. CLWB does not change memory
        // contents. No `nomem`/`readonly` option, so the compiler treats it as touching memory
        // and keeps every earlier store before it.
        unsafe { core::arch::asm!("clwb [{}]", in(reg) p, options(nostack, preserves_flags)) }
    }

    /// # Safety
    /// The CPU supports CLFLUSHOPT and `p` points into mapped memory.
    #[inline(always)]
    pub(super) unsafe fn clflushopt(p: *const u8) {
        // SAFETY: as for `clwb`; CLFLUSHOPT evicts the line but does not change its contents.
        unsafe { core::arch::asm!("clflushopt [{}]", in(reg) p, options(nostack, preserves_flags)) }
    }

    /// # Safety
    /// `p` points into mapped memory.
    #[inline(always)]
    pub(super) unsafe fn clflush(p: *const u8) {
        // SAFETY: CLFLUSH is part of SSE2, baseline on x86_64; `p` is mapped (caller).
        unsafe { core::arch::x86_64::_mm_clflush(p) }
    }
}

/// Writes back every cache line overlapping `ptr..ptr + len`, without a fence.
///
/// Uses CLWB, else CLFLUSHOPT, else CLFLUSH. Follow with [`sfence`] before relying on the data
/// having left the caches. Does nothing on targets other than x86_64.
///
/// # Safety
/// The whole range must be mapped (a flush of an unmapped address, or of a file mapping past
/// end of file, kills the process with SIGSEGV / SIGBUS). Contents are never changed.
pub unsafe fn flush_lines(ptr: *const u8, len: usize) {
    // SAFETY: forwarded contract.
    unsafe { flush_lines_with(CpuFeatures::detect().flush_kind(), ptr, len) }
}

/// [`flush_lines`] with an explicit instruction.
///
/// # Safety
/// As [`flush_lines`]; `kind` must be supported by the running CPU.
pub(crate) unsafe fn flush_lines_with(kind: FlushKind, ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = (ptr as usize) & !(CACHE_LINE - 1);
    let end = (ptr as usize).saturating_add(len);
    let lines = (start..end).step_by(CACHE_LINE).map(|a| a as *const u8);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: each line address lies in (or is the line-aligned start of) the caller's mapped
    // range, and `kind` is supported (caller).
    unsafe {
        match kind {
            FlushKind::Clwb => lines.for_each(|p| x86::clwb(p)),
            FlushKind::Clflushopt => lines.for_each(|p| x86::clflushopt(p)),
            FlushKind::Clflush => lines.for_each(|p| x86::clflush(p)),
            FlushKind::None => {}
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kind, lines);
    }
}

/// Makes `ptr..ptr + len` durable according to `mode`.
///
/// * [`PersistMode::CpuCache`]: [`flush_lines`] then [`sfence`] (x86_64); elsewhere `msync`.
/// * [`PersistMode::Msync`]: [`sfence`] then `msync(MS_SYNC)` of the page-aligned range
///   covering it.
///
/// Either way every earlier non-temporal store of this thread is fenced on return.
///
/// # Safety
/// The range must lie inside a live mapping (of a file, for `msync` to mean anything).
pub unsafe fn persist(ptr: *const u8, len: usize, mode: PersistMode) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    match mode {
        #[cfg(target_arch = "x86_64")]
        PersistMode::CpuCache => {
            // SAFETY: forwarded contract.
            unsafe { flush_lines(ptr, len) };
            sfence();
            Ok(())
        }
        _ => {
            // Non-temporal stores are weakly ordered even against the kernel's later reads of
            // the page (writeback, other processes): drain them first.
            sfence();
            // SAFETY: forwarded contract.
            unsafe { msync_range(ptr, len) }
        }
    }
}

/// `msync(MS_SYNC)` of the pages covering `ptr..ptr + len`.
///
/// # Safety
/// The range must lie inside a live mapping.
unsafe fn msync_range(ptr: *const u8, len: usize) -> io::Result<()> {
    let page = page_size();
    let start = (ptr as usize) & !(page - 1);
    let span = (ptr as usize) + len - start;
    // SAFETY: msync only reads the page tables of the given range; an unmapped range yields
    // ENOMEM, not undefined behaviour.
    let rc = unsafe { libc::msync(start as *mut libc::c_void, span, libc::MS_SYNC) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::pattern;

    fn flush_kinds() -> Vec<FlushKind> {
        let f = CpuFeatures::detect();
        let mut v = vec![];
        if f.clwb {
            v.push(FlushKind::Clwb);
        }
        if f.clflushopt {
            v.push(FlushKind::Clflushopt);
        }
        if f.clflush {
            v.push(FlushKind::Clflush);
        }
        v.push(FlushKind::None);
        v
    }

    #[test]
    fn flush_lines_on_arbitrary_ranges_does_not_fault_or_change_data() {
        let data = pattern(4096 + 256, 1);
        let copy = data.clone();
        for kind in flush_kinds() {
            for off in [0, 1, 31, 63, 64, 65, 100] {
                for len in [0, 1, 2, 63, 64, 65, 127, 128, 129, 4000] {
                    // SAFETY: `off + len` stays inside `data`.
                    unsafe { flush_lines_with(kind, data.as_ptr().add(off), len) };
                }
            }
            sfence();
        }
        // SAFETY: whole vector, mapped.
        unsafe { flush_lines(data.as_ptr(), data.len()) };
        assert_eq!(data, copy);
    }
}
