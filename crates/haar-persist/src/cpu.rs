//! CPU feature detection: which cache-control and streaming-store instructions the running CPU
//! has ([`CpuFeatures`]) and which write-back instruction is best ([`FlushKind`]).
//!
//! Owns the `CPUID` probe, its per-process cache, the cache-line size and the store fence
//! ([`sfence`]) that orders what the reported instructions issue. The leaf of the persistence
//! order: copy and flush import it, it imports neither. Must not touch memory: no copies,
//! flushes or mappings here; the kernels in [`crate::copy`] and [`crate::flush`] dispatch on
//! what it reports.

use std::sync::OnceLock;
#[cfg(not(target_arch = "x86_64"))]
use std::sync::atomic::Ordering;

/// Size of a CPU cache line on every x86_64 processor this code runs on.
pub const CACHE_LINE: usize = 64;

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
