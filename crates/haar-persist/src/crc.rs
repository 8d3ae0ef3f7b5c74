//! CRC-32C (Castagnoli, CRC-32/ISCSI): haar's one checksum, for field bytes, headers, records
//! and frames alike ([`crc32c`], [`crc32c_append`]).
//!
//! Owns the choice of implementation and nothing else: every checksum in the workspace goes
//! through here, so that the fastest kernel is picked in one place and all of them agree bit for
//! bit with what is on disk. Must not change the values: they are the same CRC-32C (polynomial
//! `0x1EDC6F41`, reflected, init and xorout `0xFFFFFFFF`) that the `crc32c` crate computed
//! before, which the tests below check on every length and misalignment.
//!
//! Backed by the `crc-fast` crate, which has two CRC-32C kernels, and picks between them
//! per process:
//!
//! * its CRC-32/ISCSI entry ([`Kernel::Fusion`]): `PCLMULQDQ` folding interleaved with three
//!   streams of the `CRC32` instruction (AVX-512 / VPCLMULQDQ variants where present), the
//!   fastest where the `CRC32` instruction has full throughput;
//! * its generic kernel given the CRC-32C parameters ([`Kernel::Fold`]): `PCLMULQDQ` folding
//!   alone. Where `CRC32` is slow (the AMD EPYC, Zen 1, haar is benchmarked on: three streams
//!   of it reach only 5.7 GB/s) the fusion kernel waits on it and plain folding is faster.
//!
//! Measured by `examples/crc_speed.rs` on that EPYC (no AVX-512; best of 7 passes of 256 MiB),
//! GB/s at 800 KiB, cache-resident / from DRAM: `crc32c` 0.6 crate (haar's checksum before)
//! 5.68 / 5.08, fusion 7.65 / 7.43, folding 9.96 / 8.78, memcpy 27.3 / 11.1; cache-resident at
//! 256 B fusion 5.18, folding 3.77; at 1 KiB fusion 4.40, folding 7.01. So buffers under
//! [`FOLD_FROM`] bytes always take the fusion entry (its short-buffer path is a plain `CRC32`
//! loop), and longer ones take whichever of the two a short calibration on first use found
//! faster ([`kernel`]). Both compute the same function; only the speed differs. No CRC-32C
//! kernel reaches memcpy on that CPU: the `CRC32` instruction tops out near 5.7 GB/s and
//! `PCLMULQDQ` folding near 10 GB/s, so even a hand-written kernel keeping both units busy
//! could not pass about 15 GB/s, against memcpy's 27-37 GB/s in cache.

use crc_fast::CrcAlgorithm::Crc32Iscsi;
use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Instant;

/// Buffers shorter than this always take [`Kernel::Fusion`] (the crossover measured on the
/// EPYC lies between 256 B and 1 KiB).
pub const FOLD_FROM: usize = 1024;

/// A CRC-32C kernel of the `crc-fast` crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `crc-fast`'s CRC-32/ISCSI entry: `PCLMULQDQ` folding fused with the `CRC32` instruction.
    Fusion,
    /// `crc-fast`'s generic kernel with the CRC-32C parameters: `PCLMULQDQ` folding alone.
    Fold,
}

/// The CRC-32C of `bytes` (equal to `crc32c::crc32c(bytes)`).
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    if bytes.len() >= FOLD_FROM && kernel() == Kernel::Fold {
        fold(!0, bytes)
    } else {
        fusion(bytes)
    }
}

/// The CRC-32C of `a ‖ bytes`, given `crc = crc32c(a)` (equal to
/// `crc32c::crc32c_append(crc, bytes)`): checksums a message in pieces.
#[inline]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    // The running register of CRC-32C is the finished checksum with the xorout (all ones)
    // removed, so resuming from `crc` starts from its complement.
    if bytes.len() >= FOLD_FROM && kernel() == Kernel::Fold {
        fold(!crc, bytes)
    } else {
        fusion_from(!crc, bytes)
    }
}

/// The CRC-32C of `b`, given `whole = crc32c(a ‖ b)`, `prefix = crc32c(a)` and `b`'s length,
/// without reading `b`: CRC-32C is linear, `crc(a ‖ b) = M(len b)·crc(a) ⊕ crc(b)` over GF(2)
/// (the init and xorout terms cancel), so `crc(b) = crc(a ‖ b) ⊕ M(len b)·crc(a)`, which is
/// what combining `prefix` with `whole` computes. A reader handed a field with the CRC-32C its
/// store verified checks a checksum that covers part of the field (a payload's own body CRC)
/// in O(log n) instead of a second pass over the bytes.
pub fn crc32c_suffix(whole: u32, prefix: u32, suffix_len: u64) -> u32 {
    // Combining is M(n)·x ⊕ y, its own inverse in y.
    crc32c_combine(prefix, whole, suffix_len)
}

/// The CRC-32C of `a ‖ b`, given `first = crc32c(a)`, `second = crc32c(b)` and `b`'s length,
/// without reading either: by the same linearity as [`crc32c_suffix`]. A writer that
/// concatenates pieces whose checksums it already holds (fields with the CRC-32C their store
/// verified) gets the checksum of the whole in O(log n) per piece instead of a pass over the
/// bytes.
pub fn crc32c_combine(first: u32, second: u32, second_len: u64) -> u32 {
    crc_fast::checksum_combine(Crc32Iscsi, u64::from(first), u64::from(second), second_len) as u32
}

/// The kernel that checksums buffers of [`FOLD_FROM`] bytes and more in this process: the
/// faster of the two on a 32 KiB buffer, timed once (about 50 µs) on first use. The fusion
/// kernel, `crc-fast`'s default, is kept unless folding is at least 10% faster.
pub fn kernel() -> Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        let buf = vec![0xA5u8; 32 << 10];
        let (mut t_fusion, mut t_fold) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..5 {
            let t = Instant::now();
            black_box(fusion(black_box(&buf)));
            t_fusion = t_fusion.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            black_box(fold(!0, black_box(&buf)));
            t_fold = t_fold.min(t.elapsed().as_secs_f64());
        }
        if t_fold * 1.1 < t_fusion {
            Kernel::Fold
        } else {
            Kernel::Fusion
        }
    })
}

/// CRC-32C by [`Kernel::Fusion`].
#[inline]
fn fusion(bytes: &[u8]) -> u32 {
    // A CRC-32 algorithm's checksum fits in 32 bits; the upper half is always zero.
    crc_fast::checksum(Crc32Iscsi, bytes) as u32
}

/// [`Kernel::Fusion`] from raw register `state` (the complement of a checksum so far).
#[inline]
fn fusion_from(state: u32, bytes: &[u8]) -> u32 {
    let mut digest = crc_fast::Digest::new_with_init_state(Crc32Iscsi, u64::from(state));
    digest.update(bytes);
    digest.finalize() as u32
}

/// [`Kernel::Fold`] from raw register `state` (`!0` for a whole message).
fn fold(state: u32, bytes: &[u8]) -> u32 {
    static PARAMS: OnceLock<crc_fast::CrcParams> = OnceLock::new();
    let mut params = *PARAMS.get_or_init(|| {
        crc_fast::CrcParams::new(
            "CRC-32C",
            32,
            0x1EDC_6F41,
            0xFFFF_FFFF,
            true,
            0xFFFF_FFFF,
            0xE306_9283,
        )
    });
    params.init = u64::from(state);
    params.init_algorithm = u64::from(state);
    crc_fast::checksum_with_params(params, bytes) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random byte string (xorshift64).
    fn random(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    type Crc = fn(&[u8]) -> u32;

    /// Both kernels, whichever [`kernel`] picked, plus the public entry.
    fn kernels() -> [(&'static str, Crc); 3] {
        [
            ("fusion", fusion),
            ("fold", |b| fold(!0, b)),
            ("crc32c", crc32c),
        ]
    }

    #[test]
    fn check_value_of_crc32c() {
        // The catalogue's check value for CRC-32/ISCSI.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c_append(0, b""), 0);
    }

    #[test]
    fn equals_the_crc32c_crate_for_every_length_below_1000_at_every_misalignment() {
        let data = random(1000 + 128, 0x9E37_79B9_7F4A_7C15);
        // Offsets 0..64 from a 64-byte boundary: every alignment the kernels distinguish.
        let base = data.as_ptr().align_offset(64);
        let data = &data[base..];
        for mis in 0..64 {
            for len in 0..1000 {
                let s = &data[mis..mis + len];
                for (name, f) in kernels() {
                    assert_eq!(f(s), crc32c::crc32c(s), "{name} len {len} mis {mis}");
                }
            }
        }
    }

    #[test]
    fn equals_the_crc32c_crate_on_field_sized_buffers() {
        let data = random((8 << 20) + 64, 7);
        for len in [
            FOLD_FROM - 1,
            FOLD_FROM,
            FOLD_FROM + 1,
            4096,
            65_535,
            65_536,
            65_537,
            819_200,
            819_200 + 63,
            (8 << 20) - 1,
            8 << 20,
        ] {
            for mis in [0usize, 1, 8, 33, 63] {
                let s = &data[mis..mis + len];
                for (name, f) in kernels() {
                    assert_eq!(f(s), crc32c::crc32c(s), "{name} len {len} mis {mis}");
                }
            }
        }
    }

    #[test]
    fn combine_is_the_checksum_of_the_concatenation() {
        let b: Vec<u8> = (0..70_000u32).map(|i| (i * 31 % 253) as u8).collect();
        for cut in [0, 1, 63, 1024, 4096, 65_536, 70_000] {
            let (a, rest) = b.split_at(cut);
            assert_eq!(
                crc32c_combine(crc32c(a), crc32c(rest), rest.len() as u64),
                crc32c(&b),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn suffix_is_derived_from_the_whole_and_the_prefix() {
        for (n, cut) in [
            (0, 0),
            (1, 0),
            (1, 1),
            (100, 64),
            (819_200, 64),
            (4096, 4095),
        ] {
            let b = random(n, n as u64 + 7);
            let (a, rest) = b.split_at(cut);
            assert_eq!(
                crc32c_suffix(crc32c(&b), crc32c(a), rest.len() as u64),
                crc32c(rest),
                "length {n}, prefix {cut}"
            );
        }
        // A changed byte anywhere changes the derived value.
        let b = random(5000, 3);
        let mut c = b.clone();
        c[4000] ^= 1;
        assert_ne!(
            crc32c_suffix(crc32c(&c), crc32c(&b[..64]), 4936),
            crc32c(&b[64..])
        );
    }

    #[test]
    fn append_equals_the_crc32c_crate_and_the_whole() {
        let data = random(5000, 3);
        for start in [0u32, 1, 0x1234_5678, u32::MAX] {
            for len in (0..300).chain([1000, FOLD_FROM, 4096, 5000]) {
                let s = &data[..len];
                let want = crc32c::crc32c_append(start, s);
                assert_eq!(crc32c_append(start, s), want, "start {start:#x} len {len}");
                assert_eq!(
                    fusion_from(!start, s),
                    want,
                    "fusion start {start:#x} len {len}"
                );
                assert_eq!(fold(!start, s), want, "fold start {start:#x} len {len}");
            }
        }
        for split in (0..5000).step_by(37) {
            let (a, b) = data.split_at(split);
            assert_eq!(crc32c_append(crc32c(a), b), crc32c(&data), "split {split}");
        }
    }
}
