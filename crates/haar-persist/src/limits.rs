//! The raw-limits benchmark: copy bandwidths into a `/dev/shm`-style mapping ([`RawLimits`],
//! [`measure_raw_limits`]), the ceilings haar's store benchmarks are reported against.
//!
//! Owns the measuring loop and its scratch files (created in the caller's directory, removed
//! before it returns). Must not add kernels of its own: it times the ones in [`crate::copy`] and
//! [`crate::flush`] as the store uses them, pinning code paths only through their feature
//! arguments.

use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::time::Instant;

#[cfg(doc)]
use crate::copy::copy_nt;
use crate::copy::copy_nt_with;
use crate::cpu::CpuFeatures;
use crate::cpu::sfence;
#[cfg(doc)]
use crate::flush::flush_lines;
use crate::flush::flush_lines_with;
use crate::map::PoolMapping;
use crate::mode::PersistMode;

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

#[cfg(test)]
mod tests {
    use super::*;

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
