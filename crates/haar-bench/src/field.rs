//! The synthetic field payload of `haar hammer` and `haar workflow` (docs/design.md §10).
//!
//! A field is a 64-byte header and a body of packed values, in the spirit of GRIB's simple
//! packing: value `i` is `reference + scale * X[i]`, with `X` 16-bit unsigned integers (members'
//! fields) or IEEE 754 single precision (products). Both halves carry a CRC-32C, so a reader
//! that gets the wrong field, a torn one or a stale one notices.
//!
//! ```text
//! offset size  field
//!  0      4    magic "HWF1"
//!  4      2    version (1), u16 LE
//!  6      2    bits per value: 16 (u16 X, value = reference + scale*X) or 32 (f32 value)
//!  8      4    member (0 for products), u32 LE
//! 12      4    step index, u32 LE
//! 16      4    paramId, u32 LE
//! 20      4    level, u32 LE
//! 24      8    reference, f64 LE
//! 32      8    scale, f64 LE
//! 40      4    values in the body, u32 LE
//! 44      4    kind: 0 member field, 1 ensemble mean, 2 ensemble standard deviation
//! 48      8    seed of the body's values (0 for products)
//! 56      4    CRC-32C of bytes 64.. (body and zero padding)
//! 60      4    CRC-32C of bytes 0..60
//! ```
//!
//! Members' bodies are pure functions of a seed (`X[i] = splitmix64(seed + i) >> 48`), so any
//! value can be recomputed without the field: that is how a run checks its products.
//!
//! Owns this byte layout (documented in docs/design.md §10.2) and the ensemble arithmetic;
//! pure, must not touch stores or processes.

use haar_core::rendezvous::splitmix64;

/// Header bytes.
pub const HEADER: usize = 64;
/// Smallest field: header and one 16-bit value.
pub const MIN_SIZE: usize = HEADER + 2;
/// Largest field the workloads make.
pub const MAX_SIZE: usize = 1 << 30;
const MAGIC: &[u8; 4] = b"HWF1";
const VERSION: u16 = 1;

/// Kind of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A member's forecast field (16-bit packed).
    Member = 0,
    /// Ensemble mean (f32).
    Mean = 1,
    /// Ensemble standard deviation (f32).
    Spread = 2,
}

/// The header's fields.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Header {
    /// 16 or 32.
    pub bits: u16,
    /// Member number (0 for products).
    pub member: u32,
    /// Step index.
    pub step: u32,
    /// paramId.
    pub param: u32,
    /// Level.
    pub level: u32,
    /// Reference value.
    pub reference: f64,
    /// Scale.
    pub scale: f64,
    /// Values in the body.
    pub nvalues: u32,
    /// What the field is.
    pub kind: Kind,
    /// Seed of the body (members).
    pub seed: u64,
    /// CRC-32C of the body.
    pub body_crc: u32,
}

/// Values a 16-bit field of `size` bytes holds.
pub fn nvalues16(size: usize) -> u32 {
    ((size - HEADER) / 2) as u32
}

/// The `i`th packed value of a body with `seed`.
#[inline]
pub fn packed(seed: u64, i: u32) -> u16 {
    (splitmix64(seed.wrapping_add(u64::from(i))) >> 48) as u16
}

/// Member `m`'s body seed for field index `f` of a run with `salt`.
pub fn seed(salt: u64, member: u32, f: u32) -> u64 {
    splitmix64(salt ^ (u64::from(member) << 40) ^ u64::from(f))
}

/// A member field's bytes, header not yet stamped: builds the body once, so archiving only
/// rewrites 64 bytes (encoding stays out of the timed path).
pub fn template(size: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; size];
    let n = nvalues16(size);
    for (i, c) in v[HEADER..HEADER + 2 * n as usize]
        .chunks_exact_mut(2)
        .enumerate()
    {
        c.copy_from_slice(&packed(seed, i as u32).to_le_bytes());
    }
    v
}

/// Writes `h` (its body CRC computed here unless `body_crc` is already right) into `buf`.
pub fn stamp(buf: &mut [u8], h: &Header) {
    let w = &mut buf[..HEADER];
    w[0..4].copy_from_slice(MAGIC);
    w[4..6].copy_from_slice(&VERSION.to_le_bytes());
    w[6..8].copy_from_slice(&h.bits.to_le_bytes());
    w[8..12].copy_from_slice(&h.member.to_le_bytes());
    w[12..16].copy_from_slice(&h.step.to_le_bytes());
    w[16..20].copy_from_slice(&h.param.to_le_bytes());
    w[20..24].copy_from_slice(&h.level.to_le_bytes());
    w[24..32].copy_from_slice(&h.reference.to_le_bytes());
    w[32..40].copy_from_slice(&h.scale.to_le_bytes());
    w[40..44].copy_from_slice(&h.nvalues.to_le_bytes());
    w[44..48].copy_from_slice(&(h.kind as u32).to_le_bytes());
    w[48..56].copy_from_slice(&h.seed.to_le_bytes());
    w[56..60].copy_from_slice(&h.body_crc.to_le_bytes());
    let crc = haar_persist::crc32c(&w[..60]);
    w[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// CRC-32C of a field's body.
pub fn body_crc(buf: &[u8]) -> u32 {
    haar_persist::crc32c(&buf[HEADER..])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

fn f64_at(b: &[u8], o: usize) -> f64 {
    f64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// Parses and checks a header (magic, version, CRC, sizes); does not read the body.
pub fn header(buf: &[u8]) -> Result<Header, String> {
    if buf.len() < MIN_SIZE {
        return Err(format!(
            "{} bytes is too short for a field (at least {MIN_SIZE})",
            buf.len()
        ));
    }
    if &buf[0..4] != MAGIC {
        return Err("not a haar workload field (magic is not HWF1)".into());
    }
    let version = u16::from_le_bytes([buf[4], buf[5]]);
    if version != VERSION {
        return Err(format!(
            "field version {version}, this haar reads {VERSION}"
        ));
    }
    let crc = u32_at(buf, 60);
    if haar_persist::crc32c(&buf[..60]) != crc {
        return Err("header checksum mismatch".into());
    }
    let bits = u16::from_le_bytes([buf[6], buf[7]]);
    let nvalues = u32_at(buf, 40);
    if !(bits == 16 || bits == 32) || HEADER + nvalues as usize * (bits as usize / 8) > buf.len() {
        return Err(format!(
            "{nvalues} values of {bits} bits do not fit in {} bytes",
            buf.len()
        ));
    }
    let kind = match u32_at(buf, 44) {
        0 => Kind::Member,
        1 => Kind::Mean,
        2 => Kind::Spread,
        k => return Err(format!("unknown field kind {k}")),
    };
    Ok(Header {
        bits,
        member: u32_at(buf, 8),
        step: u32_at(buf, 12),
        param: u32_at(buf, 16),
        level: u32_at(buf, 20),
        reference: f64_at(buf, 24),
        scale: f64_at(buf, 32),
        nvalues,
        kind,
        seed: u64::from_le_bytes(buf[48..56].try_into().expect("8 bytes")),
        body_crc: u32_at(buf, 56),
    })
}

/// Checks the header and the body's CRC.
pub fn verify(buf: &[u8]) -> Result<Header, String> {
    verify_with(buf, None)
}

/// As [`verify`], given the CRC-32C of the whole of `buf` when its store verified one (haar
/// stores do, on every read): the body's CRC is then derived from it and the header's
/// (`haar_persist::crc32c_suffix`, O(log n)) instead of a second pass over the body, so a
/// field read from haar is checked end to end once. A store that keeps no checksum (FDB5, a
/// plain file) passes `None` and the body is checksummed here.
pub fn verify_with(buf: &[u8], whole_crc: Option<u32>) -> Result<Header, String> {
    let h = header(buf)?;
    let body = match whole_crc {
        Some(whole) => haar_persist::crc32c_suffix(
            whole,
            haar_persist::crc32c(&buf[..HEADER]),
            (buf.len() - HEADER) as u64,
        ),
        None => body_crc(buf),
    };
    if body != h.body_crc {
        return Err("body checksum mismatch".into());
    }
    Ok(h)
}

/// Points per block of the ensemble reduction: the running sums (2 x 8 KiB) and the first
/// member's values stay in L1 while every member's slice of the block is added.
const BLOCK: usize = 2048;

/// Ensemble mean and (population) standard deviation, point by point, of member fields (each
/// checked by [`verify`]; 16-bit bodies): `n` points. Blockwise, so every field is read once;
/// shifted data (each member minus the first member at the same point, so equal members give
/// exactly zero spread), sums in f32, vectorised with AVX2 where the CPU has it.
pub fn ensemble_stats(members: &[(&[u8], Header)], n: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut mean, mut sd) = (vec![0f32; n], vec![0f32; n]);
    if members.is_empty() {
        return (mean, sd);
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function is compiled for.
        unsafe { stats_avx2(members, &mut mean, &mut sd) };
        return (mean, sd);
    }
    stats_blocks(members, &mut mean, &mut sd);
    (mean, sd)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn stats_avx2(members: &[(&[u8], Header)], mean: &mut [f32], sd: &mut [f32]) {
    stats_blocks(members, mean, sd);
}

#[inline(always)]
fn stats_blocks(members: &[(&[u8], Header)], mean: &mut [f32], sd: &mut [f32]) {
    let n = mean.len();
    let (b0, h0) = members[0];
    let m = members.len() as f32;
    let s0 = h0.scale as f32;
    // Member k's value minus member 0's: (r_k - r_0) + s_k X_k - s_0 X_0.
    let rest: Vec<(&[u8], f32, f32)> = members[1..]
        .iter()
        .map(|(b, h)| (*b, (h.reference - h0.reference) as f32, h.scale as f32))
        .collect();
    let (mut y0, mut s, mut q) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
    let mut x = [0f32; BLOCK];
    for start in (0..n).step_by(BLOCK) {
        let len = BLOCK.min(n - start);
        let (y0, s, q, x) = (&mut y0[..len], &mut s[..len], &mut q[..len], &mut x[..len]);
        let (lo, hi) = (HEADER + 2 * start, HEADER + 2 * (start + len));
        unpack(&b0[lo..hi], x);
        for (y, x) in y0.iter_mut().zip(x.iter()) {
            *y = s0 * x;
        }
        s.fill(0.0);
        q.fill(0.0);
        for &(b, off, sc) in &rest {
            unpack(&b[lo..hi], x);
            for i in 0..len {
                let d = off + sc * x[i] - y0[i];
                s[i] += d;
                q[i] += d * d;
            }
        }
        let (mean, sd) = (&mut mean[start..start + len], &mut sd[start..start + len]);
        let r0 = h0.reference as f32;
        for i in 0..len {
            let mu = s[i] / m;
            mean[i] = r0 + (y0[i] + mu);
            sd[i] = (q[i] / m - mu * mu).max(0.0).sqrt();
        }
    }
}

/// Little-endian u16s to f32s (exact), `x.len()` of them.
#[inline(always)]
fn unpack(bytes: &[u8], x: &mut [f32]) {
    let bytes = &bytes[..2 * x.len()];
    for (x, c) in x.iter_mut().zip(bytes.chunks_exact(2)) {
        *x = f32::from(u16::from(c[0]) | (u16::from(c[1]) << 8));
    }
}

/// A product field of `size` bytes holding `values`, 16-bit packed as GRIB simple packing
/// packs: reference = minimum, scale = range / 65535, `X` rounded to nearest (so each value is
/// exact to half a scale step).
pub fn product(size: usize, h: Header, values: &[f32]) -> Vec<u8> {
    let mut v = vec![0u8; size];
    let n = values.len().min((size - HEADER) / 2);
    let values = &values[..n];
    let (lo, hi) = values
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    // A constant field packs as GRIB packs it: scale 0, every X 0, the value the reference.
    let (reference, scale) = if n == 0 || hi <= lo {
        (if n == 0 { 0.0 } else { f64::from(lo) }, 0.0)
    } else {
        (f64::from(lo), (f64::from(hi) - f64::from(lo)) / 65535.0)
    };
    if scale > 0.0 {
        pack(
            &mut v[HEADER..HEADER + 2 * n],
            values,
            reference as f32,
            (1.0 / scale) as f32,
        );
    }
    let h = Header {
        bits: 16,
        nvalues: n as u32,
        reference,
        scale,
        body_crc: haar_persist::crc32c(&v[HEADER..]),
        ..h
    };
    stamp(&mut v, &h);
    v
}

/// `X = round((x - r) * inv)`, clamped to u16, little-endian into `out`.
fn pack(out: &mut [u8], values: &[f32], r: f32, inv: f32) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has the feature the function is compiled for.
        unsafe { pack_avx2(out, values, r, inv) };
        return;
    }
    pack_plain(out, values, r, inv);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn pack_avx2(out: &mut [u8], values: &[f32], r: f32, inv: f32) {
    pack_plain(out, values, r, inv);
}

#[inline(always)]
fn pack_plain(out: &mut [u8], values: &[f32], r: f32, inv: f32) {
    for (c, &x) in out.chunks_exact_mut(2).zip(values) {
        // Non-negative after the clamp, so adding a half and truncating rounds to nearest.
        let q = ((x - r) * inv + 0.5).clamp(0.0, 65535.0) as u16;
        c[0] = q as u8;
        c[1] = (q >> 8) as u8;
    }
}

/// The `i`th value of a checked field (16-bit packed or f32).
pub fn value(buf: &[u8], h: &Header, i: usize) -> f64 {
    if h.bits == 32 {
        let o = HEADER + 4 * i;
        f64::from(f32::from_le_bytes(
            buf[o..o + 4].try_into().expect("4 bytes"),
        ))
    } else {
        let o = HEADER + 2 * i;
        h.reference + h.scale * f64::from(u16::from_le_bytes([buf[o], buf[o + 1]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member_header(buf: &[u8]) -> Header {
        Header {
            bits: 16,
            member: 3,
            step: 2,
            param: 130,
            level: 7,
            reference: 250.5,
            scale: 0.001,
            nvalues: nvalues16(buf.len()),
            kind: Kind::Member,
            seed: 42,
            body_crc: body_crc(buf),
        }
    }

    #[test]
    fn round_trip_and_corruption() {
        let mut t = template(1001, 42);
        let h = member_header(&t);
        stamp(&mut t, &h);
        assert_eq!(verify(&t).unwrap(), h);
        assert_eq!(h.nvalues, 468);
        // Recomputable from the seed.
        assert_eq!(u16::from_le_bytes([t[64], t[65]]), packed(42, 0));
        let mut bad = t.clone();
        bad[500] ^= 1;
        assert_eq!(verify(&bad).unwrap_err(), "body checksum mismatch");
        bad = t.clone();
        bad[9] ^= 1;
        assert_eq!(verify(&bad).unwrap_err(), "header checksum mismatch");
        assert!(verify(&t[..10]).is_err());
        assert!(verify(&[0u8; 100]).unwrap_err().contains("magic"));
    }

    /// Given the whole field's CRC (as a store verified it), the body is checked without a
    /// second pass, and a damaged body is still caught: the store's CRC covers the damaged
    /// bytes, the header's body CRC the original ones.
    #[test]
    fn verify_with_the_store_crc() {
        let mut t = template(819_200, 9);
        let h = member_header(&t);
        stamp(&mut t, &h);
        let whole = haar_persist::crc32c(&t);
        assert_eq!(verify_with(&t, Some(whole)).unwrap(), h);
        let mut bad = t.clone();
        bad[500_000] ^= 1;
        let whole_bad = haar_persist::crc32c(&bad);
        assert_eq!(
            verify_with(&bad, Some(whole_bad)).unwrap_err(),
            "body checksum mismatch"
        );
        // A CRC that does not belong to the bytes is not taken on trust either.
        assert!(verify_with(&t, Some(whole ^ 1)).is_err());
    }

    #[test]
    fn ensemble_stats_and_products() {
        let n = 3000; // more than one block
        let mut a = template(64 + 2 * n, 7);
        let ha = member_header(&a);
        stamp(&mut a, &ha);
        let mut b = template(64 + 2 * n, 8);
        let hb = Header {
            reference: 240.0,
            seed: 8,
            body_crc: body_crc(&b),
            ..member_header(&b)
        };
        stamp(&mut b, &hb);
        let (mean, sd) = ensemble_stats(&[(&a, ha), (&b, hb)], n);
        for i in [0, 2047, 2048, 2999] {
            let va = 250.5 + 0.001 * f64::from(packed(7, i as u32));
            let vb = 240.0 + 0.001 * f64::from(packed(8, i as u32));
            assert!((f64::from(mean[i]) - (va + vb) / 2.0).abs() < 1e-4, "{i}");
            assert!(
                (f64::from(sd[i]) - (va - vb).abs() / 2.0).abs() < 1e-3,
                "{i}"
            );
        }
        // Ten members with different references and scales, every point against a two-pass
        // f64 reference; and identical members have exactly zero spread.
        let ms: Vec<(Vec<u8>, Header)> = (0..10u32)
            .map(|k| {
                let mut t = template(64 + 2 * n, 100 + u64::from(k));
                let h = Header {
                    reference: 240.0 + f64::from(k) * 1.7,
                    scale: 0.001 + 0.0001 * f64::from(k),
                    seed: 100 + u64::from(k),
                    body_crc: body_crc(&t),
                    ..member_header(&t)
                };
                stamp(&mut t, &h);
                (t, h)
            })
            .collect();
        let refs: Vec<(&[u8], Header)> = ms.iter().map(|(b, h)| (&b[..], *h)).collect();
        let (mean, sd) = ensemble_stats(&refs, n);
        for i in 0..n {
            let v: Vec<f64> = refs.iter().map(|(b, h)| value(b, h, i)).collect();
            let mu = v.iter().sum::<f64>() / 10.0;
            let var = v.iter().map(|x| (x - mu) * (x - mu)).sum::<f64>() / 10.0;
            assert!((f64::from(mean[i]) - mu).abs() < 1e-4, "mean {i}");
            assert!((f64::from(sd[i]) - var.sqrt()).abs() < 1e-4, "sd {i}");
        }
        let same = vec![refs[3]; 7];
        let (mean, sd) = ensemble_stats(&same, n);
        assert!(sd.iter().all(|&x| x == 0.0));
        assert!((f64::from(mean[5]) - value(refs[3].0, &refs[3].1, 5)).abs() < 1e-4);
        let h = ha;
        let p = product(
            64 + 6,
            Header {
                kind: Kind::Mean,
                member: 0,
                seed: 0,
                ..h
            },
            &[1.5f32, 2.5, 2.0],
        );
        let ph = verify(&p).unwrap();
        assert_eq!((ph.bits, ph.nvalues, ph.kind), (16, 3, Kind::Mean));
        assert_eq!(value(&p, &ph, 0), 1.5);
        assert_eq!(value(&p, &ph, 1), 2.5);
        assert!((value(&p, &ph, 2) - 2.0).abs() <= ph.scale / 2.0);
        let c = product(64 + 8, h, &[3.25f32; 4]);
        let ch = verify(&c).unwrap();
        assert_eq!((ch.scale, value(&c, &ch, 3)), (0.0, 3.25));
        // Packed to half a scale step over a wide range.
        let xs: Vec<f32> = (0..5000).map(|i| 200.0 + (i as f32).sin() * 80.0).collect();
        let p = product(64 + 2 * xs.len(), h, &xs);
        let ph = verify(&p).unwrap();
        for (i, &x) in xs.iter().enumerate() {
            assert!(
                (value(&p, &ph, i) - f64::from(x)).abs() <= ph.scale * 0.5 + 1e-4,
                "{i}"
            );
        }
    }
}
