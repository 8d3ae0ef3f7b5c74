//! The copy kernels: non-temporal (cache-bypassing) copies into a mapping, alone
//! ([`copy_nt`]) or with the CRC-32C of the bytes copied ([`copy_nt_crc32c`]: fused into the
//! copy loop, or a separate [`crate::crc32c`] pass for fields of 4 KiB to under 64 KiB).
//!
//! Owns the streaming-store loops (AVX-512 or `MOVNTI`) and the fused copy + CRC loop with its
//! shift tables. Must not fence, persist or map: callers issue [`crate::sfence`] (or
//! [`crate::persist`]) before publishing, so that many copies can share one fence, and the
//! mapping lives in [`crate::map`]. Unaligned heads and tails are written back with
//! [`crate::flush`]'s line flush, the only thing it borrows from there.

use crate::cpu::CpuFeatures;
#[cfg(doc)]
use crate::cpu::sfence;
#[cfg(doc)]
use crate::flush::{flush_lines, persist};
#[cfg(target_arch = "x86_64")]
use crate::{cpu::CACHE_LINE, flush::flush_lines_with};

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The streaming stores themselves. Every function here requires the CPU feature it uses;
    //! the callers dispatch on [`crate::cpu::CpuFeatures`].
    use core::arch::x86_64::{__m512i, _mm_stream_si64, _mm512_loadu_si512, _mm512_stream_si512};

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
pub(crate) unsafe fn copy_nt_with(features: &CpuFeatures, dst: *mut u8, src: &[u8]) {
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

/// [`copy_nt`] that also returns the CRC-32C of `src`.
///
/// Equal to [`crate::crc32c`]`(src)` (design §3's checksum, unchanged). Fields from
/// [`SPLIT_FROM`] (4 KiB) to under [`SPLIT_BELOW`] (64 KiB) are copied, then checksummed in a
/// second pass over the source, which is then in L1/L2: the PCLMULQDQ kernel behind
/// [`crate::crc32c`] outruns the `CRC32` instruction the fused loop is bound by (figures on
/// [`SPLIT_FROM`]). Other sizes take the
/// fused loop ([`copy_nt_crc32c_fused`]), where each source line is loaded once: it is fed to
/// the `CRC32` instruction from the same registers or L1 line that the non-temporal store takes
/// it from, so the checksum runs in the shadow of the store bandwidth. That loop splits the
/// field into thirds, one independent CRC stream each to hide the instruction's latency, joined
/// by shifting over a third's length with power-of-two shift tables. Without SSE 4.2 (or off
/// x86_64) it is [`copy_nt`] followed by [`crate::crc32c`].
///
/// The same fence rule as [`copy_nt`] applies before publishing the bytes.
///
/// # Safety
/// As [`copy_nt`].
pub unsafe fn copy_nt_crc32c(dst: *mut u8, src: &[u8]) -> u32 {
    // SAFETY: forwarded contract; the features are the running CPU's.
    unsafe { copy_nt_crc32c_with(&CpuFeatures::detect(), dst, src) }
}

/// Fields of at least [`SPLIT_FROM`] and under [`SPLIT_BELOW`] bytes are copied by
/// [`copy_nt_crc32c`] with [`copy_nt`] and then checksummed by [`crate::crc32c`] over the
/// source, which the copy has just brought into L1/L2; all others take the fused loop.
///
/// Measured by `examples/crc_speed.rs` (table 2: streamed into a populated `/dev/shm` mapping,
/// best of 7 passes of 256 MiB) on the AMD EPYC (Zen 1, no AVX-512) haar is benchmarked on,
/// GB/s, fused loop / copy then `crate::crc32c`, from one cache-resident source (a field just
/// produced) and from a fresh slice of a 256 MiB ring each time (from DRAM):
///
/// | size    | hot source  | cold source |
/// |---------|-------------|-------------|
/// | 256 B   | 3.32 / 3.17 | 3.14 / 2.89 |
/// | 1 KiB   | 4.10 / 4.07 | 3.47 / 3.61 |
/// | 4 KiB   | 4.43 / 5.30 | 3.54 / 3.57 |
/// | 64 KiB  | 4.54 / 5.04 | 3.95 / 3.64 |
/// | 256 KiB | 4.51 / 5.03 | 4.14 / 3.64 |
/// | 800 KiB | 4.45 / 4.97 | 4.23 / 3.71 |
///
/// (memcpy 6.6-7.3 hot, 4.6-5.2 cold; `copy_nt` alone 7.5-11.2.) The fused loop is bound by the
/// `CRC32` instruction (about 5 GB/s on that CPU) wherever the source is; the separate pass
/// folds with `PCLMULQDQ` (about 10 GB/s) but reads the source a second time. From 4 KiB that
/// wins with a hot source and ties with a cold one; from 64 KiB it wins by 11-12% hot but loses
/// by 8-14% cold, and the FDB5-API benchmark (`bench/fdbapi_bench.py`, sources in a 6.4 MiB
/// ring) archived 1000 × 800 KiB into pmem in 0.22-0.24 s split against 0.197 s fused, so the
/// fused loop stays there.
pub const SPLIT_FROM: usize = 4 << 10;

/// See [`SPLIT_FROM`]: fields of this many bytes and more take the fused loop again.
pub const SPLIT_BELOW: usize = 64 << 10;

/// [`copy_nt_crc32c`] with an explicit feature set (tests pin every code path).
///
/// # Safety
/// As [`copy_nt`]; `features` must be a subset of the running CPU's.
unsafe fn copy_nt_crc32c_with(features: &CpuFeatures, dst: *mut u8, src: &[u8]) -> u32 {
    if (SPLIT_FROM..SPLIT_BELOW).contains(&src.len()) {
        // SAFETY: forwarded contract.
        unsafe { copy_nt_with(features, dst, src) };
        return crate::crc::crc32c(src);
    }
    // SAFETY: forwarded contract.
    unsafe { copy_nt_crc32c_fused_with(features, dst, src) }
}

/// The fused copy + CRC-32C loop alone, at every size (what [`copy_nt_crc32c`] runs outside
/// [`SPLIT_FROM`]..[`SPLIT_BELOW`]): for benchmarks that compare it with [`copy_nt`] followed by
/// [`crate::crc32c`]. Without SSE 4.2 (or off x86_64) it is [`copy_nt`] followed by
/// [`crate::crc32c`].
///
/// # Safety
/// As [`copy_nt`].
pub unsafe fn copy_nt_crc32c_fused(dst: *mut u8, src: &[u8]) -> u32 {
    // SAFETY: forwarded contract; the features are the running CPU's.
    unsafe { copy_nt_crc32c_fused_with(&CpuFeatures::detect(), dst, src) }
}

/// [`copy_nt_crc32c_fused`] with an explicit feature set.
///
/// # Safety
/// As [`copy_nt`]; `features` must be a subset of the running CPU's.
unsafe fn copy_nt_crc32c_fused_with(features: &CpuFeatures, dst: *mut u8, src: &[u8]) -> u32 {
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
    crate::crc::crc32c(src)
}

#[cfg(target_arch = "x86_64")]
mod fused {
    //! The fused copy + CRC-32C loop. CRC registers here are *raw* (not inverted): the
    //! checksum of a byte string is `!raw(!0, bytes)`, and the raw update is linear, so the
    //! register of `a ‖ b` is `shift_|b|(raw(a)) ^ raw_from_zero(b)`.
    use crate::cpu::{CACHE_LINE, FlushKind};
    use crate::flush::flush_lines_with;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::sfence;
    use crate::test_support::pattern;

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
    fn copy_nt_crc32c_and_fused_loop_equal_crc32c_for_every_path_length_and_misalignment() {
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
        lens.extend([SPLIT_FROM - 1, SPLIT_FROM, SPLIT_FROM + 1, SPLIT_BELOW - 1]);
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
        type Entry = unsafe fn(&CpuFeatures, *mut u8, &[u8]) -> u32;
        let entries: [(&str, Entry); 2] = [
            ("copy_nt_crc32c", copy_nt_crc32c_with),
            ("fused", copy_nt_crc32c_fused_with),
        ];
        for features in sets {
            for &len in &lens {
                for mis in [0usize, 1, 7, 8, 33, 63] {
                    let src = &src_all[(mis * 5) % 13..][..len];
                    let at = aligned + mis;
                    for (name, f) in entries {
                        buf[at - 64..at + len + 64].fill(0);
                        // SAFETY: `at + len` is inside `buf`, which does not overlap `src_all`.
                        let crc = unsafe { f(&features, buf.as_mut_ptr().add(at), src) };
                        sfence();
                        let what = format!("{name} len {len} mis {mis} {features:?}");
                        assert_eq!(crc, crc32c::crc32c(src), "{what}");
                        assert_eq!(&buf[at..at + len], src, "{what}");
                        assert!(
                            buf[at - 64..at].iter().all(|&b| b == 0),
                            "wrote before dst: {what}"
                        );
                        assert!(
                            buf[at + len..at + len + 64].iter().all(|&b| b == 0),
                            "wrote past end: {what}"
                        );
                    }
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
}
