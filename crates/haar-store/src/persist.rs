//! Low-level persistence primitives for a pool file mapped into memory.
//!
//! This module owns three things and nothing else:
//!
//! * **CPU cache control**: run-time detection of `CLWB` / `CLFLUSHOPT` / AVX-512
//!   ([`CpuFeatures`]), non-temporal copies ([`copy_nt`]), cache-line write-back
//!   ([`flush_lines`]) and the store fence ([`sfence`]).
//! * **How to make bytes durable** ([`PersistMode`]): either by flushing CPU caches (real
//!   persistent memory mapped with `MAP_SYNC`), or by `msync(MS_SYNC)` (everything else).
//!   Detection follows libpmem: if the kernel accepts `MAP_SHARED_VALIDATE | MAP_SYNC` for the
//!   file, the file is on a DAX file system and CPU cache flushes are enough.
//! * **The mapping of a pool file** ([`PoolMapping`]): a `MAP_SHARED` mapping of a large
//!   reserved virtual range that only ever hands out bytes below the file's current length,
//!   plus cross-process atomics placed inside the file.
//!
//! It knows nothing about the pool's layout (headers, allocation, commit records): that lives in
//! the pmem backend, which builds on these primitives and must honour the contract stated on
//! [`PoolMapping`].
//!
//! # Durability of an emulated pool
//!
//! A pool in `/dev/shm` (tmpfs) or on an ordinary file system is *emulated* persistent memory.
//! On tmpfs `msync` is a no-op: an emulated pool survives the crash of any process (the page
//! cache outlives it) but not a power cut or a reboot. On a disk file system `msync(MS_SYNC)`
//! makes the range durable at the cost of a writeback. Forcing [`PersistMode::CpuCache`] on a
//! file that is not on real persistent memory (`HAAR_PMEM_FORCE=cpu`) exercises the CLWB code
//! path but gives **no power-loss durability at all**: the data sits in the page cache.
//!
//! # Portability
//!
//! The mapping code targets Linux (`MAP_SYNC`, `fallocate(2)`, `MADV_POPULATE_WRITE`); other
//! Unix systems get a plain `MAP_SHARED` mapping with `msync`. On targets other than x86_64,
//! [`copy_nt`] is an ordinary copy, [`flush_lines`] does nothing, and [`persist`] always uses
//! `msync`, even in [`PersistMode::CpuCache`].

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Size of a CPU cache line on every x86_64 processor this code runs on.
pub const CACHE_LINE: usize = 64;

/// Default virtual address range reserved by [`PoolMapping::open`]: 64 GiB.
///
/// Reserving address space is free (no memory is committed for a shared file mapping); it bounds
/// how far the pool can grow without remapping, which would invalidate every pointer into it.
pub const DEFAULT_RESERVE: usize = 64 << 30;

/// Environment variable overriding [`PersistMode`] detection: `cpu` or `msync`.
pub const FORCE_ENV: &str = "HAAR_PMEM_FORCE";

/// `MAP_SYNC` from `<linux/mman.h>`; the `libc` crate only defines it for some targets.
#[cfg(target_os = "linux")]
const MAP_SYNC: libc::c_int = 0x8_0000;

// ---------------------------------------------------------------------------------------------
// CPU features
// ---------------------------------------------------------------------------------------------

/// Cache-control and streaming-store instructions available on the running CPU.
///
/// Detected once per process with `CPUID` (and, for AVX-512, the OS's XSAVE state) and cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuFeatures {
    /// `CLWB`: writes a line back without evicting it (CPUID leaf 7, EBX bit 24).
    pub clwb: bool,
    /// `CLFLUSHOPT`: weakly ordered flush-and-evict (CPUID leaf 7, EBX bit 23).
    pub clflushopt: bool,
    /// `CLFLUSH`: the strongly ordered flush every x86_64 CPU has.
    pub clflush: bool,
    /// SSE2 `MOVNTI`: 8-byte non-temporal store (baseline on x86_64).
    pub movnti: bool,
    /// SSE 4.2 `CRC32`: hardware CRC-32C, used to checksum bytes while copying them.
    pub sse42: bool,
    /// AVX-512F usable (CPU and OS): 64-byte non-temporal stores, one full line each.
    pub avx512f: bool,
}

/// Instruction used to write a cache line back towards memory, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushKind {
    /// `CLWB`; needs a following [`sfence`].
    Clwb,
    /// `CLFLUSHOPT`; needs a following [`sfence`].
    Clflushopt,
    /// `CLFLUSH`; ordered by itself, a following [`sfence`] is harmless.
    Clflush,
    /// No cache-control instruction (not x86_64): persistence must go through `msync`.
    None,
}

impl CpuFeatures {
    /// Features of the running CPU, detected on first call and cached for the process.
    pub fn detect() -> CpuFeatures {
        static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
        *FEATURES.get_or_init(Self::probe)
    }

    #[cfg(target_arch = "x86_64")]
    fn probe() -> CpuFeatures {
        use core::arch::x86_64::__cpuid_count;
        let max_leaf = __cpuid_count(0, 0).eax;
        let leaf1_edx = __cpuid_count(1, 0).edx;
        let leaf7_ebx = if max_leaf >= 7 {
            __cpuid_count(7, 0).ebx
        } else {
            0
        };
        CpuFeatures {
            clwb: leaf7_ebx & (1 << 24) != 0,
            clflushopt: leaf7_ebx & (1 << 23) != 0,
            clflush: leaf1_edx & (1 << 19) != 0,
            movnti: true,
            sse42: std::arch::is_x86_feature_detected!("sse4.2"),
            // The macro also checks that the OS saves ZMM state (XCR0), which CPUID alone
            // does not say.
            avx512f: std::arch::is_x86_feature_detected!("avx512f"),
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn probe() -> CpuFeatures {
        CpuFeatures {
            clwb: false,
            clflushopt: false,
            clflush: false,
            movnti: false,
            sse42: false,
            avx512f: false,
        }
    }

    /// The best available write-back instruction: CLWB, else CLFLUSHOPT, else CLFLUSH.
    pub fn flush_kind(&self) -> FlushKind {
        if self.clwb {
            FlushKind::Clwb
        } else if self.clflushopt {
            FlushKind::Clflushopt
        } else if self.clflush {
            FlushKind::Clflush
        } else {
            FlushKind::None
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The instructions themselves. Every function here requires the CPU feature it uses; the
    //! callers dispatch on [`super::CpuFeatures`].
    use core::arch::x86_64::{__m512i, _mm_stream_si64, _mm512_loadu_si512, _mm512_stream_si512};

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

    /// Streams `lines` whole cache lines with 64-byte non-temporal stores.
    ///
    /// # Safety
    /// AVX-512F is usable; `dst` is 64-byte aligned and valid for `lines * 64` bytes of writes;
    /// `src` is valid for as many reads; the ranges do not overlap.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn stream_lines_avx512(dst: *mut u8, src: *const u8, lines: usize) {
        for i in 0..lines {
            // SAFETY: offsets stay within the `lines * 64` bytes the caller vouched for; the
            // load is unaligned-tolerant and the store target is 64-byte aligned.
            unsafe {
                let v = _mm512_loadu_si512(src.add(i * 64).cast::<__m512i>());
                _mm512_stream_si512(dst.add(i * 64).cast::<__m512i>(), v);
            }
        }
    }

    /// Streams `lines` whole cache lines with 8-byte `MOVNTI` stores.
    ///
    /// # Safety
    /// `dst` is 8-byte aligned and valid for `lines * 64` bytes of writes; `src` is valid for as
    /// many reads; the ranges do not overlap.
    #[inline]
    pub(super) unsafe fn stream_lines_movnti(dst: *mut u8, src: *const u8, lines: usize) {
        for i in 0..lines * 8 {
            // SAFETY: offsets stay within the caller's range; the source read is unaligned,
            // the destination is 8-byte aligned as MOVNTI requires; SSE2 is baseline.
            unsafe {
                let v = src.add(i * 8).cast::<i64>().read_unaligned();
                _mm_stream_si64(dst.add(i * 8).cast::<i64>(), v);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Copy, flush, fence
// ---------------------------------------------------------------------------------------------

/// Copies `src` to `dst` with non-temporal (cache-bypassing) stores, without a fence.
///
/// The unaligned head and tail are copied with ordinary stores and their cache lines written
/// back with [`flush_lines`]; the 64-byte-aligned middle is streamed with AVX-512 (one full line
/// per store) if available, else with 8-byte `MOVNTI`. After a [`sfence`] the whole range has
/// left the CPU caches, which on real persistent memory makes it durable. The caller issues the
/// fence, so that many copies can share one.
///
/// **Fence before publishing.** Non-temporal stores are not ordered by `Release` atomics (on x86
/// a release store is a plain `mov`): call [`sfence`] (or [`persist`], which fences in every
/// mode) before the store that makes the copied bytes visible to other threads or processes.
///
/// On targets other than x86_64 this is an ordinary copy.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes, must not overlap `src`, and no other
/// thread or process may read or write `dst..dst + src.len()` during the copy.
pub unsafe fn copy_nt(dst: *mut u8, src: &[u8]) {
    // SAFETY: forwarded contract; the features are the running CPU's.
    unsafe { copy_nt_with(&CpuFeatures::detect(), dst, src) }
}

/// [`copy_nt`] with an explicit feature set, so tests and benchmarks can pin the code path.
///
/// # Safety
/// As [`copy_nt`]; `features` must be a subset of the running CPU's.
unsafe fn copy_nt_with(features: &CpuFeatures, dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        let len = src.len();
        let s = src.as_ptr();
        let head = (dst as usize).wrapping_neg() % CACHE_LINE;
        let head = head.min(len);
        let lines = (len - head) / CACHE_LINE;
        let body = lines * CACHE_LINE;
        let tail = len - head - body;
        // SAFETY (whole block): every offset is below `len`, for which the caller vouched;
        // `dst + head` is 64-byte aligned whenever `lines > 0`; the features are real.
        unsafe {
            if head > 0 {
                std::ptr::copy_nonoverlapping(s, dst, head);
                flush_lines_with(features.flush_kind(), dst, head);
            }
            if lines > 0 {
                if features.avx512f {
                    x86::stream_lines_avx512(dst.add(head), s.add(head), lines);
                } else {
                    x86::stream_lines_movnti(dst.add(head), s.add(head), lines);
                }
            }
            if tail > 0 {
                let at = head + body;
                std::ptr::copy_nonoverlapping(s.add(at), dst.add(at), tail);
                flush_lines_with(features.flush_kind(), dst.add(at), tail);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = features;
        // SAFETY: forwarded contract.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
    }
}

/// [`copy_nt`] that also returns the CRC-32C of `src`, computed in the same pass.
///
/// Equal to `crc32c::crc32c(src)` (design §3's checksum, unchanged), but each source line is
/// loaded once: it is fed to the `CRC32` instruction from the same registers or L1 line that
/// the non-temporal store takes it from, so the checksum runs in the shadow of the store
/// bandwidth instead of as a second pass over the field. The field is split into thirds, one
/// independent CRC stream each to hide the instruction's latency, joined by shifting over a
/// third's length with power-of-two shift tables. Without SSE 4.2 (or off x86_64) it is [`copy_nt`] followed by `crc32c`.
///
/// The same fence rule as [`copy_nt`] applies before publishing the bytes.
///
/// # Safety
/// As [`copy_nt`].
pub unsafe fn copy_nt_crc32c(dst: *mut u8, src: &[u8]) -> u32 {
    // SAFETY: forwarded contract; the features are the running CPU's.
    unsafe { copy_nt_crc32c_with(&CpuFeatures::detect(), dst, src) }
}

/// [`copy_nt_crc32c`] with an explicit feature set (tests pin every code path).
///
/// # Safety
/// As [`copy_nt`]; `features` must be a subset of the running CPU's.
unsafe fn copy_nt_crc32c_with(features: &CpuFeatures, dst: *mut u8, src: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if features.sse42 {
        // SAFETY: forwarded contract; SSE 4.2 (and AVX-512F where chosen) are present.
        return unsafe {
            if features.avx512f {
                fused::copy_crc_avx512(features.flush_kind(), dst, src)
            } else {
                fused::copy_crc_movnti(features.flush_kind(), dst, src)
            }
        };
    }
    // SAFETY: forwarded contract.
    unsafe { copy_nt_with(features, dst, src) };
    crc32c::crc32c(src)
}

#[cfg(target_arch = "x86_64")]
mod fused {
    //! The fused copy + CRC-32C loop. CRC registers here are *raw* (not inverted): the
    //! checksum of a byte string is `!raw(!0, bytes)`, and the raw update is linear, so the
    //! register of `a ‖ b` is `shift_|b|(raw(a)) ^ raw_from_zero(b)`.
    use super::{CACHE_LINE, FlushKind, flush_lines_with};
    use core::arch::x86_64::{
        __m512i, _mm_crc32_u8, _mm_crc32_u64, _mm_stream_si64, _mm512_loadu_si512,
        _mm512_stream_si512,
    };
    use std::sync::OnceLock;

    /// Largest third, in lines, that one pass splits a field into (64 MiB per stream).
    const MAX_THIRD_LINES_LOG2: usize = 20;

    /// Advances a raw CRC-32C register over a fixed number of zero bytes, byte-sliced
    /// (4 lookups).
    pub(super) struct ZeroShift([[u32; 256]; 4]);

    impl ZeroShift {
        /// Tables for the linear map that sends single bit `j` to `bit[j]`.
        fn from_bits(bit: &[u32; 32]) -> ZeroShift {
            let mut t = [[0u32; 256]; 4];
            for (i, row) in t.iter_mut().enumerate() {
                for (b, v) in row.iter_mut().enumerate() {
                    *v = (0..8)
                        .filter(|k| b >> k & 1 == 1)
                        .fold(0, |acc, k| acc ^ bit[8 * i + k]);
                }
            }
            ZeroShift(t)
        }

        #[inline(always)]
        pub(super) fn apply(&self, r: u64) -> u64 {
            let t = &self.0;
            u64::from(
                t[0][(r & 0xff) as usize]
                    ^ t[1][(r >> 8 & 0xff) as usize]
                    ^ t[2][(r >> 16 & 0xff) as usize]
                    ^ t[3][(r >> 24 & 0xff) as usize],
            )
        }
    }

    /// `tables()[k]` advances a register over `64 · 2^k` zero bytes, so a shift over any
    /// whole number of lines is one lookup round per set bit of that number.
    pub(super) fn tables() -> &'static [ZeroShift] {
        static T: OnceLock<Vec<ZeroShift>> = OnceLock::new();
        // SAFETY: only reached from the fused loops, which require SSE 4.2.
        T.get_or_init(|| unsafe { build_tables() })
    }

    #[target_feature(enable = "sse4.2")]
    fn build_tables() -> Vec<ZeroShift> {
        let mut bit = [0u32; 32];
        for (j, out) in bit.iter_mut().enumerate() {
            let mut r = 1u64 << j;
            for _ in 0..CACHE_LINE / 8 {
                r = _mm_crc32_u64(r, 0);
            }
            *out = r as u32;
        }
        let mut tables = vec![ZeroShift::from_bits(&bit)];
        for _ in 0..MAX_THIRD_LINES_LOG2 {
            let t = tables.last().expect("one table");
            // Twice the distance: the previous map applied twice to each single bit.
            bit = std::array::from_fn(|j| t.apply(t.apply(1 << j)) as u32);
            tables.push(ZeroShift::from_bits(&bit));
        }
        tables
    }

    /// Advances raw register `r` over `lines` zero lines.
    #[inline]
    fn shift_lines(tables: &[ZeroShift], mut r: u64, lines: usize) -> u64 {
        let mut m = lines;
        let mut k = 0;
        while m != 0 {
            if m & 1 == 1 {
                r = tables[k].apply(r);
            }
            m >>= 1;
            k += 1;
        }
        r
    }

    /// CRC of unaligned bytes, one at a time (heads and tails only: under 64 bytes).
    #[inline]
    #[target_feature(enable = "sse4.2")]
    fn crc_bytes(mut r: u64, bytes: &[u8]) -> u64 {
        for &b in bytes {
            r = u64::from(_mm_crc32_u8(r as u32, b));
        }
        r
    }

    macro_rules! fused_copy {
        ($name:ident, $features:literal, $store:ident) => {
            /// # Safety
            /// As `copy_nt`; the CPU has the features named in the attribute; `kind` is
            /// supported.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name(kind: FlushKind, dst: *mut u8, src: &[u8]) -> u32 {
                let tables = tables();
                let len = src.len();
                let s = src.as_ptr();
                let head = ((dst as usize).wrapping_neg() % CACHE_LINE).min(len);
                let lines = (len - head) / CACHE_LINE;
                let mut r = u64::from(!0u32);
                // SAFETY (whole body): offsets stay below `len`, for which the caller vouched;
                // `dst + head` is 64-byte aligned when `lines > 0`.
                unsafe {
                    if head > 0 {
                        std::ptr::copy_nonoverlapping(s, dst, head);
                        flush_lines_with(kind, dst, head);
                        r = crc_bytes(r, &src[..head]);
                    }
                    let mut at = head;
                    let end = head + lines * CACHE_LINE;
                    // Thirds of the whole body (up to 64 MiB each) as three CRC streams, joined
                    // by shifting over a third's length: two short shift chains per field.
                    while end - at >= 3 * CACHE_LINE {
                        let third = ((end - at) / CACHE_LINE / 3).min(1 << MAX_THIRD_LINES_LOG2);
                        let block = third * CACHE_LINE;
                        let (mut r0, mut r1, mut r2) = (r, 0u64, 0u64);
                        for o in (at..at + block).step_by(CACHE_LINE) {
                            $store(dst.add(o), s.add(o), &mut r0);
                            $store(dst.add(o + block), s.add(o + block), &mut r1);
                            $store(dst.add(o + 2 * block), s.add(o + 2 * block), &mut r2);
                        }
                        r = shift_lines(tables, r0, third) ^ r1;
                        r = shift_lines(tables, r, third) ^ r2;
                        at += 3 * block;
                    }
                    while at < end {
                        $store(dst.add(at), s.add(at), &mut r);
                        at += CACHE_LINE;
                    }
                    if at < len {
                        std::ptr::copy_nonoverlapping(s.add(at), dst.add(at), len - at);
                        flush_lines_with(kind, dst.add(at), len - at);
                        r = crc_bytes(r, &src[at..]);
                    }
                }
                !(r as u32)
            }
        };
    }

    /// Streams one line with a 64-byte store and checksums it from the same L1 line.
    ///
    /// # Safety
    /// AVX-512F and SSE 4.2; `d` 64-byte aligned and writable for 64 bytes; `s` readable.
    #[inline]
    #[target_feature(enable = "sse4.2,avx512f")]
    unsafe fn line_avx512(d: *mut u8, s: *const u8, r: &mut u64) {
        // SAFETY: the caller's ranges; unaligned loads, aligned stream store.
        unsafe {
            let v = _mm512_loadu_si512(s.cast::<__m512i>());
            _mm512_stream_si512(d.cast::<__m512i>(), v);
            for k in 0..8 {
                *r = _mm_crc32_u64(*r, s.add(8 * k).cast::<u64>().read_unaligned());
            }
        }
    }

    /// Streams one line with eight `MOVNTI`s of the words the CRC consumes.
    ///
    /// # Safety
    /// SSE 4.2; `d` 8-byte aligned and writable for 64 bytes; `s` readable for 64.
    #[inline]
    #[target_feature(enable = "sse4.2")]
    unsafe fn line_movnti(d: *mut u8, s: *const u8, r: &mut u64) {
        // SAFETY: the caller's ranges; unaligned loads, aligned 8-byte stream stores.
        unsafe {
            for k in 0..8 {
                let w = s.add(8 * k).cast::<u64>().read_unaligned();
                *r = _mm_crc32_u64(*r, w);
                _mm_stream_si64(d.add(8 * k).cast::<i64>(), w as i64);
            }
        }
    }

    fused_copy!(copy_crc_avx512, "sse4.2,avx512f", line_avx512);
    fused_copy!(copy_crc_movnti, "sse4.2", line_movnti);
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
unsafe fn flush_lines_with(kind: FlushKind, ptr: *const u8, len: usize) {
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

/// Store fence: orders all earlier stores, including non-temporal stores and cache-line
/// write-backs, before any later store. On persistent memory, data flushed or streamed before
/// the fence is durable once it returns.
#[inline]
pub fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SFENCE (SSE) is baseline on x86_64 and touches no memory operand.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(Ordering::SeqCst);
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

/// The system page size, cached.
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 { p as usize } else { 4096 }
    })
}

// ---------------------------------------------------------------------------------------------
// Persist mode
// ---------------------------------------------------------------------------------------------

/// How stores into a pool mapping are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistMode {
    /// Real persistent memory (a DAX file mapped with `MAP_SYNC`): flush the cache lines and
    /// fence; no system call. Forced on anything else it gives no power-loss durability.
    CpuCache,
    /// Anything else: `msync(MS_SYNC)` of the page-aligned range. A no-op on tmpfs, where the
    /// pool survives process crashes but not power loss.
    Msync,
}

impl PersistMode {
    /// The mode forced by `HAAR_PMEM_FORCE` (`cpu` or `msync`), or `None` if it is unset or
    /// empty.
    ///
    /// # Errors
    /// `InvalidInput` if the variable holds anything else.
    pub fn from_env() -> io::Result<Option<PersistMode>> {
        match std::env::var_os(FORCE_ENV) {
            None => Ok(None),
            Some(v) => Self::parse_force(&v.to_string_lossy()),
        }
    }

    /// Parses a `HAAR_PMEM_FORCE` value: `cpu` / `msync` (any case), empty means "detect".
    ///
    /// # Errors
    /// `InvalidInput`, naming the variable and the accepted values.
    pub fn parse_force(value: &str) -> io::Result<Option<PersistMode>> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" => Ok(None),
            "cpu" => Ok(Some(PersistMode::CpuCache)),
            "msync" => Ok(Some(PersistMode::Msync)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{FORCE_ENV}={value:?} is not understood: use `cpu` or `msync`, or unset it to detect"
                ),
            )),
        }
    }

    /// Detects the mode for `file` as libpmem does: [`PersistMode::CpuCache`] if the kernel
    /// accepts a `MAP_SHARED_VALIDATE | MAP_SYNC` mapping of it (a DAX file system), else
    /// [`PersistMode::Msync`]. Maps and unmaps one page; the file need not be that long.
    ///
    /// # Errors
    /// Any mapping error other than "`MAP_SYNC` not supported".
    pub fn detect(file: &File) -> io::Result<PersistMode> {
        let page = page_size();
        let (base, dax) = map_shared(file, page)?;
        // SAFETY: `base` is the mapping of `page` bytes just created and never shared.
        unsafe { libc::munmap(base.as_ptr().cast(), page) };
        Ok(Self::for_mapping(dax))
    }

    /// The mode for `file`: `force` if given, else `HAAR_PMEM_FORCE` if set, else
    /// [`PersistMode::detect`].
    ///
    /// # Errors
    /// A malformed `HAAR_PMEM_FORCE`, or a mapping error from detection.
    pub fn from_env_or_detect(file: &File, force: Option<PersistMode>) -> io::Result<PersistMode> {
        match force {
            Some(mode) => Ok(mode),
            None => match Self::from_env()? {
                Some(mode) => Ok(mode),
                None => Self::detect(file),
            },
        }
    }

    fn for_mapping(dax: bool) -> PersistMode {
        // Without cache-control instructions even a DAX mapping must be persisted by msync.
        if dax && cfg!(target_arch = "x86_64") {
            PersistMode::CpuCache
        } else {
            PersistMode::Msync
        }
    }
}

/// Maps `len` bytes of `file` shared and writable, trying `MAP_SYNC` first.
/// Returns the base and whether `MAP_SYNC` was accepted (the file is on a DAX file system).
fn map_shared(file: &File, len: usize) -> io::Result<(NonNull<u8>, bool)> {
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
const HUGE_PAGE: usize = 2 << 20;

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

// ---------------------------------------------------------------------------------------------
// Pool mapping
// ---------------------------------------------------------------------------------------------

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
///    again; [`slice`] may only be called on published ranges, so a `&[u8]` never aliases a
///    write.
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
/// use haar_store::persist::PoolMapping;
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
        Ok(PoolMapping {
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
        Ok(unsafe { copy_nt_crc32c(self.base.as_ptr().add(off), src) })
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
            .map_err(|e| annotate(e, &self.path, "cannot persist pool range"))
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
        assert!(
            self.check(off, 8).is_ok(),
            "atomic_u64 at offset {off}: past end of pool file ({} bytes)",
            self.file_len()
        );
        // SAFETY: in bounds and 8-aligned (the base is page-aligned); AtomicU64 has the layout
        // of u64 and its interior mutability makes concurrent atomic access from other threads
        // and processes sound; no non-atomic access exists (contract rule 2).
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
    }

    fn check(&self, off: usize, len: usize) -> io::Result<()> {
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

// ---------------------------------------------------------------------------------------------
// Raw limits
// ---------------------------------------------------------------------------------------------

/// Copy bandwidths into a `/dev/shm`-style mapping: the ceilings the store's benchmarks are
/// reported against. All figures in GB/s (10^9 bytes per second), best of 3 runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawLimits {
    /// `memcpy` into a pre-faulted mapping.
    pub memcpy_gbs: f64,
    /// [`copy_nt`] + [`sfence`] per chunk into a pre-faulted mapping (AVX-512 if present).
    pub nt_copy_gbs: f64,
    /// As `nt_copy_gbs` but forced to 8-byte `MOVNTI` stores (equal if no AVX-512).
    pub nt_copy_movnti_gbs: f64,
    /// `memcpy` + [`flush_lines`] (CLWB) of every line + [`sfence`] per chunk.
    pub clwb_copy_gbs: f64,
    /// `memcpy` into a fresh sparse file: every page is faulted in and zeroed on first write.
    pub first_touch_gbs: f64,
    /// [`PoolMapping::grow`] + [`PoolMapping::populate`] of a fresh file: provisioning speed.
    pub provision_gbs: f64,
    /// Chunk size of every copy (800 KiB, a typical field).
    pub chunk: usize,
    /// Bytes written per run.
    pub bytes: usize,
    /// Features used by the CPU paths.
    pub features: CpuFeatures,
}

/// Measures [`RawLimits`] with files created (and removed) in `dir`, writing `bytes` (rounded
/// down to whole 800 KiB chunks, at least one) per run, best of 3.
///
/// Sources are a 6.4 MiB ring of 8 distinct chunks, cache-resident after the first pass, as a
/// freshly encoded field would be; destinations stream through `bytes` of mapping, so use at
/// least 1 GiB (ten times the L3) to measure memory rather than cache. The methods are
/// interleaved within each run so that host noise hits them alike.
///
/// # Errors
/// Creating, growing or mapping the scratch files.
pub fn measure_raw_limits(dir: &Path, bytes: usize) -> io::Result<RawLimits> {
    const CHUNK: usize = 800 << 10;
    const RING: usize = 8;
    const RUNS: usize = 3;
    let chunks = (bytes / CHUNK).max(1);
    let bytes = chunks * CHUNK;
    let features = CpuFeatures::detect();
    let movnti_only = CpuFeatures {
        avx512f: false,
        ..features
    };

    let mut src = vec![0u8; CHUNK * RING];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for b in src.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }

    let scratch =
        |tag: &str| dir.join(format!("haar-raw-limits-{}-{tag}.pool", std::process::id()));
    let gbs = |secs: f64| bytes as f64 / secs / 1e9;

    // One pass over the destination, timed; returns seconds.
    let pass = |base: *mut u8, op: &dyn Fn(*mut u8, &[u8])| -> f64 {
        let t = Instant::now();
        for i in 0..chunks {
            let s = &src[(i % RING) * CHUNK..][..CHUNK];
            // SAFETY (closure callers): `base` maps at least `bytes` bytes owned by this function.
            let d = std::hint::black_box(unsafe { base.add(i * CHUNK) });
            op(d, std::hint::black_box(s));
        }
        let secs = t.elapsed().as_secs_f64();
        // Read back one byte per chunk so the stores are observably used.
        let mut sum = 0u8;
        for i in 0..chunks {
            // SAFETY: in bounds as above, and no writer is running.
            sum = sum.wrapping_add(unsafe { base.add(i * CHUNK + i % CHUNK).read_volatile() });
        }
        std::hint::black_box(sum);
        secs
    };
    // SAFETY (all four ops): `d` is valid for CHUNK bytes of the destination mapping, owned by
    // this function, and cannot overlap `s`, which lives in a heap vector.
    let memcpy =
        |d: *mut u8, s: &[u8]| unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), d, s.len()) };
    let nt = |d: *mut u8, s: &[u8]| {
        unsafe { copy_nt_with(&features, d, s) };
        sfence();
    };
    let nt_movnti = |d: *mut u8, s: &[u8]| {
        unsafe { copy_nt_with(&movnti_only, d, s) };
        sfence();
    };
    let clwb = |d: *mut u8, s: &[u8]| {
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), d, s.len());
            flush_lines_with(features.flush_kind(), d, s.len());
        }
        sfence();
    };

    let resident_path = scratch("resident");
    let resident = PoolMapping::open_with_mode(&resident_path, bytes, Some(PersistMode::Msync))?;
    let _ = std::fs::remove_file(&resident_path);
    resident.grow(bytes)?;
    resident.populate(0, bytes)?;
    pass(resident.base(), &memcpy); // warm-up: pages dirty and mapped, source in cache

    let mut best = [f64::INFINITY; 6];
    for run in 0..RUNS {
        for (slot, op) in [&memcpy as &dyn Fn(*mut u8, &[u8]), &nt, &nt_movnti, &clwb]
            .into_iter()
            .enumerate()
        {
            best[slot] = best[slot].min(pass(resident.base(), op));
        }

        let path = scratch(&format!("touch{run}"));
        {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            f.set_len(bytes as u64)?; // sparse: pages appear on first write
        }
        let fresh = PoolMapping::open_with_mode(&path, bytes, Some(PersistMode::Msync))?;
        let _ = std::fs::remove_file(&path);
        best[4] = best[4].min(pass(fresh.base(), &memcpy));
        drop(fresh);

        let path = scratch(&format!("provision{run}"));
        let fresh = PoolMapping::open_with_mode(&path, bytes, Some(PersistMode::Msync))?;
        let _ = std::fs::remove_file(&path);
        let t = Instant::now();
        fresh.grow(bytes)?;
        fresh.populate(0, bytes)?;
        best[5] = best[5].min(t.elapsed().as_secs_f64());
    }
    Ok(RawLimits {
        memcpy_gbs: gbs(best[0]),
        nt_copy_gbs: gbs(best[1]),
        nt_copy_movnti_gbs: gbs(best[2]),
        clwb_copy_gbs: gbs(best[3]),
        first_touch_gbs: gbs(best[4]),
        provision_gbs: gbs(best[5]),
        chunk: CHUNK,
        bytes,
        features,
    })
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code path the CPU can run: detected features, and with AVX-512 switched off.
    fn feature_sets() -> Vec<CpuFeatures> {
        let f = CpuFeatures::detect();
        let mut v = vec![f];
        if f.avx512f {
            v.push(CpuFeatures {
                avx512f: false,
                ..f
            });
        }
        v
    }

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

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
            .collect()
    }

    #[test]
    fn copy_nt_matches_source_for_every_length_and_misalignment() {
        const GUARD: usize = 128;
        let src_all = pattern(300 + 64, 7);
        let mut buf = vec![0u8; 64 + GUARD + 64 + 300 + GUARD];
        let aligned = buf.as_ptr().align_offset(64) + GUARD;
        for features in feature_sets() {
            for mis in 0..64 {
                for len in 0..300 {
                    buf.fill(0);
                    let src = &src_all[(mis * 7) % 13..][..len];
                    let at = aligned + mis;
                    // SAFETY: `at + len` is inside `buf`, which does not overlap `src_all`.
                    unsafe { copy_nt_with(&features, buf.as_mut_ptr().add(at), src) };
                    sfence();
                    assert_eq!(&buf[at..at + len], src, "len {len} mis {mis} {features:?}");
                    assert!(
                        buf[..at].iter().all(|&b| b == 0),
                        "wrote before dst: len {len} mis {mis}"
                    );
                    assert!(
                        buf[at + len..].iter().all(|&b| b == 0),
                        "wrote past end: len {len} mis {mis}"
                    );
                }
            }
        }
    }

    #[test]
    fn copy_nt_crc32c_equals_crc32c_for_every_path_length_and_misalignment() {
        const GUARD: usize = 128;
        // Lengths that reach every branch: heads, tails, single lines, short and long chunks.
        let mut lens: Vec<usize> = (0..300).collect();
        lens.extend([
            767,
            768,
            769,
            3 * 8192 - 1,
            3 * 8192,
            3 * 8192 + 64 * 13 + 5,
        ]);
        lens.extend([
            65536,
            65536 + 1,
            819_200,
            819_200 + 63,
            3 * 8192 * 3 + 768 * 2 + 65,
        ]);
        let max = *lens.iter().max().unwrap();
        let src_all = pattern(max + 64, 11);
        let mut buf = vec![0u8; 64 + GUARD + 64 + max + GUARD];
        let aligned = buf.as_ptr().align_offset(64) + GUARD;
        let mut sets = feature_sets();
        sets.push(CpuFeatures {
            sse42: false,
            ..CpuFeatures::detect()
        });
        for features in sets {
            for &len in &lens {
                for mis in [0usize, 1, 7, 8, 33, 63] {
                    let src = &src_all[(mis * 5) % 13..][..len];
                    let at = aligned + mis;
                    buf[at - 64..at + len + 64].fill(0);
                    // SAFETY: `at + len` is inside `buf`, which does not overlap `src_all`.
                    let crc =
                        unsafe { copy_nt_crc32c_with(&features, buf.as_mut_ptr().add(at), src) };
                    sfence();
                    assert_eq!(crc, crc32c::crc32c(src), "len {len} mis {mis} {features:?}");
                    assert_eq!(&buf[at..at + len], src, "len {len} mis {mis} {features:?}");
                    assert!(buf[at - 64..at].iter().all(|&b| b == 0), "wrote before dst");
                    assert!(
                        buf[at + len..at + len + 64].iter().all(|&b| b == 0),
                        "wrote past end"
                    );
                }
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn every_shift_table_matches_crc32c_over_zeros() {
        if !CpuFeatures::detect().sse42 {
            return;
        }
        let tables = fused::tables();
        let zeros = vec![0u8; CACHE_LINE << (tables.len() - 1)];
        for (k, t) in tables.iter().enumerate() {
            for c in [0u32, 1, 0x1234_5678, u32::MAX] {
                let want = crc32c::crc32c_append(c, &zeros[..CACHE_LINE << k]);
                assert_eq!(
                    !(t.apply(u64::from(!c)) as u32),
                    want,
                    "table {k} crc {c:#x}"
                );
            }
        }
    }

    #[test]
    fn copy_nt_public_entry_copies_large_ranges() {
        let src = pattern(1 << 20, 3);
        let mut dst = vec![0u8; (1 << 20) + 5];
        // SAFETY: `dst[5..]` holds exactly `src.len()` bytes and is a separate allocation.
        unsafe { copy_nt(dst.as_mut_ptr().add(5), &src) };
        sfence();
        assert_eq!(&dst[5..], &src[..]);
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

    #[test]
    fn parse_force_accepts_cpu_msync_and_empty_and_names_the_variable_otherwise() {
        assert_eq!(
            PersistMode::parse_force("cpu").unwrap(),
            Some(PersistMode::CpuCache)
        );
        assert_eq!(
            PersistMode::parse_force(" MSYNC ").unwrap(),
            Some(PersistMode::Msync)
        );
        assert_eq!(PersistMode::parse_force("").unwrap(), None);
        let err = PersistMode::parse_force("clwb").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains(FORCE_ENV), "{err}");
    }

    #[test]
    fn detect_succeeds_and_agrees_with_the_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let pool = PoolMapping::open_with_mode(&path, 1 << 20, None).unwrap();
        let detected = PersistMode::detect(&File::open(&path).unwrap());
        // A read-only fd cannot be mapped writable: detection must report that, not guess.
        assert!(detected.is_err());
        let rw = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let detected = PersistMode::detect(&rw).unwrap();
        assert_eq!(detected, PersistMode::for_mapping(pool.is_dax()));
        let forced = PersistMode::from_env_or_detect(&rw, Some(PersistMode::CpuCache)).unwrap();
        assert_eq!(forced, PersistMode::CpuCache);
    }

    /// The mapping starts at a 2 MiB boundary (so huge pages can back it), and backing a
    /// range with huge pages, where the kernel can, leaves every byte as it was.
    #[test]
    fn mapping_is_huge_page_aligned_and_huge_pages_keep_contents() {
        let dir = tempfile::tempdir().unwrap();
        let pool = PoolMapping::open(dir.path().join("pool"), 64 << 20).unwrap();
        assert_eq!(pool.base() as usize % HUGE_PAGE, 0);
        pool.grow(8 << 20).unwrap();
        let data = pattern(8 << 20, 7);
        // SAFETY: in bounds; nothing else uses this mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), pool.base(), data.len()) };
        pool.use_huge_pages(4096, (8 << 20) - 4096); // best effort: either way
        assert!(pool.slice(0, 8 << 20).unwrap() == &data[..]);
        assert!(!pool.use_huge_pages(0, 4096), "no whole huge page inside");
        let small = PoolMapping::open(dir.path().join("small"), 1 << 20).unwrap();
        small.grow(4096).unwrap();
        assert!(small.slice(0, 4096).is_some());
    }

    #[test]
    fn slice_past_eof_returns_none() {
        let dir = tempfile::tempdir().unwrap();
        let pool = PoolMapping::open(dir.path().join("pool"), 1 << 20).unwrap();
        assert_eq!(pool.file_len(), 0);
        assert_eq!(pool.slice(0, 0), Some(&[][..]));
        assert!(pool.slice(0, 1).is_none());
        pool.grow(100).unwrap();
        assert_eq!(pool.slice(0, 100).map(<[u8]>::len), Some(100));
        assert_eq!(pool.slice(100, 0).map(<[u8]>::len), Some(0));
        assert!(pool.slice(99, 2).is_none());
        assert!(pool.slice(101, 0).is_none());
        assert!(pool.slice(usize::MAX, 2).is_none());
        assert!(pool.ptr_mut(50, 51).is_none());
        assert!(pool.persist(0, 101).is_err());
        assert!(pool.populate(4096, 1).is_err());
    }

    #[test]
    fn grow_then_access_persist_and_read_back_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        for mode in [PersistMode::CpuCache, PersistMode::Msync] {
            let _ = std::fs::remove_file(&path);
            let pool = PoolMapping::open_with_mode(&path, 1 << 30, Some(mode)).unwrap();
            assert_eq!(pool.mode(), mode);
            let len = 3 * page_size() + 5;
            pool.grow(len).unwrap();
            pool.grow(10).unwrap(); // never shrinks
            assert_eq!(pool.file_len(), len);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), len as u64);
            pool.populate(0, len).unwrap();
            assert!(pool.slice(0, len).unwrap().iter().all(|&b| b == 0));

            let data = pattern(len - 3, 9);
            // SAFETY: the pool is private to this test; nothing else reads or writes it.
            unsafe { pool.write_nt(3, &data).unwrap() };
            pool.persist(3, data.len()).unwrap();
            assert_eq!(pool.slice(3, data.len()).unwrap(), &data[..]);

            // Read back bypassing the mapping.
            let on_disk = std::fs::read(&path).unwrap();
            assert_eq!(&on_disk[3..], &data[..]);
            drop(pool);

            // A new mapping sees the same bytes and length.
            let again = PoolMapping::open(&path, 1 << 30).unwrap();
            assert_eq!(again.file_len(), len);
            assert_eq!(again.slice(3, data.len()).unwrap(), &data[..]);
        }
    }

    #[test]
    fn grow_beyond_reserve_and_open_of_oversized_file_fail_with_advice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let pool = PoolMapping::open(&path, 8192).unwrap();
        let err = pool.grow(8193).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("larger reserve"), "{err}");
        pool.grow(8192).unwrap();
        drop(pool);
        let err = PoolMapping::open(&path, 4096).unwrap_err();
        assert!(err.to_string().contains("larger reserve"), "{err}");
    }

    #[test]
    fn refresh_len_sees_growth_through_another_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let a = PoolMapping::open(&path, 1 << 24).unwrap();
        let b = PoolMapping::open(&path, 1 << 24).unwrap();
        b.grow(10_000).unwrap();
        // SAFETY: the range is written by `b` only, before `a` reads it.
        unsafe { b.write_nt(9_000, b"hello").unwrap() };
        sfence();
        assert!(a.slice(9_000, 5).is_none());
        assert_eq!(a.refresh_len().unwrap(), 10_000);
        assert_eq!(a.slice(9_000, 5).unwrap(), b"hello");
    }

    #[test]
    #[should_panic(expected = "not 8-byte aligned")]
    fn atomic_u64_rejects_misaligned_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let pool = PoolMapping::open(dir.path().join("pool"), 1 << 20).unwrap();
        pool.grow(64).unwrap();
        pool.atomic_u64(4);
    }

    #[test]
    #[should_panic(expected = "past end of pool file")]
    fn atomic_u64_rejects_offsets_past_eof() {
        let dir = tempfile::tempdir().unwrap();
        let pool = PoolMapping::open(dir.path().join("pool"), 1 << 20).unwrap();
        pool.grow(64).unwrap();
        pool.atomic_u64(64);
    }

    const CHILD_ENV: &str = "HAAR_PERSIST_TEST_CHILD_POOL";
    const INCREMENTS: u64 = 200_000;
    const COUNTER_OFF: usize = 64;

    /// Runs only when re-executed by `atomic_counter_is_shared_between_processes`: maps the pool
    /// independently and bumps the shared counter.
    #[test]
    fn cross_process_child() {
        let Some(path) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let pool = PoolMapping::open(path, 1 << 20).unwrap();
        let counter = pool.atomic_u64(COUNTER_OFF);
        for _ in 0..INCREMENTS {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        pool.persist(COUNTER_OFF, 8).unwrap();
    }

    #[test]
    fn atomic_counter_is_shared_between_processes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let pool = PoolMapping::open(&path, 1 << 20).unwrap();
        pool.grow(4096).unwrap();
        let counter = pool.atomic_u64(COUNTER_OFF);

        // The test's own name, from this module's path minus the crate name.
        let module = module_path!().split_once("::").map_or("", |(_, rest)| rest);
        let child_test = format!("{module}::cross_process_child");
        let exe = std::env::current_exe().unwrap();
        let children: Vec<_> = (0..2)
            .map(|_| {
                std::process::Command::new(&exe)
                    .args(["--exact", &child_test, "--test-threads=1", "--nocapture"])
                    .env(CHILD_ENV, &path)
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for _ in 0..INCREMENTS {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "child failed: {stdout}");
            assert!(
                stdout.contains("1 passed"),
                "child did not run the test: {stdout}"
            );
        }
        assert_eq!(counter.load(Ordering::SeqCst), 3 * INCREMENTS);
        let on_disk = std::fs::read(&path).unwrap();
        let word = u64::from_le_bytes(on_disk[COUNTER_OFF..COUNTER_OFF + 8].try_into().unwrap());
        assert_eq!(word, 3 * INCREMENTS);
    }

    #[test]
    fn measure_raw_limits_runs_on_a_small_size() {
        let dir = tempfile::tempdir().unwrap();
        let limits = measure_raw_limits(dir.path(), 4 << 20).unwrap();
        assert_eq!(limits.bytes, 5 * (800 << 10));
        for v in [
            limits.memcpy_gbs,
            limits.nt_copy_gbs,
            limits.clwb_copy_gbs,
            limits.first_touch_gbs,
        ] {
            assert!(v.is_finite() && v > 0.0, "{limits:?}");
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "scratch files left behind"
        );
    }
}
