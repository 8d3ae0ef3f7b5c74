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
    let crc = crc32c::crc32c(&w[..60]);
    w[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// CRC-32C of a field's body.
pub fn body_crc(buf: &[u8]) -> u32 {
    crc32c::crc32c(&buf[HEADER..])
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
    if crc32c::crc32c(&buf[..60]) != crc {
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
    let h = header(buf)?;
    if body_crc(buf) != h.body_crc {
        return Err("body checksum mismatch".into());
    }
    Ok(h)
}

/// Ensemble mean and (population) standard deviation, point by point, of member fields (each
/// checked by [`verify`]): `n` points, computed in blocks so the running sums stay in L1 and
/// every field is read once.
pub fn ensemble_stats(members: &[(&[u8], Header)], n: usize) -> (Vec<f32>, Vec<f32>) {
    const BLOCK: usize = 1024;
    let (mut mean, mut sd) = (vec![0f32; n], vec![0f32; n]);
    let m = members.len().max(1) as f64;
    let (mut s, mut q) = ([0f64; BLOCK], [0f64; BLOCK]);
    for start in (0..n).step_by(BLOCK) {
        let len = BLOCK.min(n - start);
        let (s, q) = (&mut s[..len], &mut q[..len]);
        s.fill(0.0);
        q.fill(0.0);
        for (buf, h) in members {
            let body = &buf[HEADER + 2 * start..HEADER + 2 * (start + len)];
            let (r, sc) = (h.reference, h.scale);
            for ((c, a), b) in body.chunks_exact(2).zip(s.iter_mut()).zip(q.iter_mut()) {
                let v = r + sc * f64::from(u16::from_le_bytes([c[0], c[1]]));
                *a += v;
                *b += v * v;
            }
        }
        for i in 0..len {
            let mu = s[i] / m;
            mean[start + i] = mu as f32;
            sd[start + i] = (q[i] / m - mu * mu).max(0.0).sqrt() as f32;
        }
    }
    (mean, sd)
}

/// A product field (f32 values) of `size` bytes.
pub fn product(size: usize, h: Header, values: impl Iterator<Item = f32>) -> Vec<u8> {
    let mut v = vec![0u8; size];
    let n = (size - HEADER) / 4;
    let mut count = 0u32;
    for (c, x) in v[HEADER..HEADER + 4 * n].chunks_exact_mut(4).zip(values) {
        c.copy_from_slice(&x.to_le_bytes());
        count += 1;
    }
    let h = Header {
        bits: 32,
        nvalues: count,
        body_crc: crc32c::crc32c(&v[HEADER..]),
        ..h
    };
    stamp(&mut v, &h);
    v
}

/// The `i`th value of a product field.
pub fn product_value(buf: &[u8], i: usize) -> f32 {
    let o = HEADER + 4 * i;
    f32::from_le_bytes(buf[o..o + 4].try_into().expect("4 bytes"))
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
        for i in [0, 1023, 1024, 2999] {
            let va = 250.5 + 0.001 * f64::from(packed(7, i as u32));
            let vb = 240.0 + 0.001 * f64::from(packed(8, i as u32));
            assert!((f64::from(mean[i]) - (va + vb) / 2.0).abs() < 1e-4, "{i}");
            assert!(
                (f64::from(sd[i]) - (va - vb).abs() / 2.0).abs() < 1e-3,
                "{i}"
            );
        }
        let h = ha;
        let p = product(
            64 + 16,
            Header {
                kind: Kind::Mean,
                member: 0,
                seed: 0,
                ..h
            },
            [1.5f32, 2.5].into_iter(),
        );
        let ph = verify(&p).unwrap();
        assert_eq!((ph.bits, ph.nvalues, ph.kind), (32, 2, Kind::Mean));
        assert_eq!(product_value(&p, 1), 2.5);
    }
}
