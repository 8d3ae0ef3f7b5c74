//! Low-level persistence primitives for a pool file mapped into memory: the bottom floor of
//! haar, shared by the store (`haar-store`'s pmem backend) and the memory tools (`haar-mem`).
//!
//! This crate owns eight things and nothing else, one module each:
//!
//! * **CPU cache control**: run-time detection of `CLWB` / `CLFLUSHOPT` / AVX-512
//!   ([`cpu`]: [`CpuFeatures`]), non-temporal copies and the fused copy + CRC-32C ([`copy`]:
//!   [`copy_nt`], [`copy_nt_crc32c`]), cache-line write-back and the store fence ([`flush`]:
//!   [`flush_lines`], [`sfence`], [`persist`]).
//! * **The checksum** ([`crc`]: [`crc32c`], [`crc32c_append`]): CRC-32C, the one kernel every
//!   haar crate checksums with.
//! * **How to make bytes durable** ([`mode`]: [`PersistMode`]): either by flushing CPU caches
//!   (real persistent memory mapped with `MAP_SYNC`), or by `msync(MS_SYNC)` (everything else).
//!   Detection follows libpmem: if the kernel accepts `MAP_SHARED_VALIDATE | MAP_SYNC` for the
//!   file, the file is on a DAX file system and CPU cache flushes are enough.
//! * **The mapping of a pool file** ([`map`]: [`PoolMapping`]): a `MAP_SHARED` mapping of a
//!   large reserved virtual range that only ever hands out bytes below the file's current
//!   length, plus cross-process atomics placed inside the file.
//! * **The raw limits** ([`limits`]: [`measure_raw_limits`]): the copy bandwidths of this
//!   machine that haar's benchmarks are reported against.
//! * **Truncated mappings** ([`sigbus`]): one process-wide SIGBUS handler that turns an access
//!   past the end of a truncated mapped file into zeros and a flag, instead of a dead process.
//! * **The system calls under them** ([`sys`]: [`page_size`] and the shared mapping of a
//!   file), the leaf every other module imports downward: sys and cpu at the bottom, then
//!   mode, flush, copy, and the mapping on top.
//! * **Simulated power loss** (`powerfail`): a test facility compiled only with the
//!   non-default `power-loss` feature (the store's and the FUSE tests' dev-dependencies turn
//!   it on); with it, a pool opened while `HAAR_POWER_LOSS` is set keeps the image a power
//!   cut would leave beside the mapping and, at a chosen persistence point, writes it out and
//!   ends the process. Without the feature no artifact contains or reads that variable.
//!
//! It knows nothing about the pool's layout (headers, allocation, commit records): that lives in
//! the pmem backend, which builds on these primitives and must honour the contract stated on
//! [`PoolMapping`]. It depends on no other haar crate.
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

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod copy;
pub mod cpu;
pub mod crc;
pub mod flush;
pub mod limits;
pub mod map;
pub mod mode;
#[cfg(feature = "power-loss")]
pub mod powerfail;
pub mod sigbus;
pub mod sys;

pub use copy::{copy_nt, copy_nt_crc32c};
pub use cpu::{CACHE_LINE, CpuFeatures, FlushKind, sfence};
pub use crc::{crc32c, crc32c_append, crc32c_combine, crc32c_suffix};
pub use flush::{flush_lines, persist};
pub use limits::{RawLimits, measure_raw_limits};
pub use map::{DEFAULT_RESERVE, PoolMapping, available_bytes};
pub use mode::{FORCE_ENV, PersistMode};
pub use sys::page_size;

#[cfg(test)]
mod test_support {
    /// A deterministic byte pattern with no zero bytes (so a missed write shows).
    pub(crate) fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
            .collect()
    }
}
