//! Values at index ranges of a GRIB field without decoding the whole field: the **jump
//! record** (packing parameters, section offsets, a popcount summary of the bitmap) parsed
//! from a message's leading bytes, and the decoding of half-open ranges `[i, j)` from it,
//! reading only the bytes that hold those values. Format: `docs/design.md` §16.
//!
//! Owns the record's bytes and the decoding arithmetic; knows nothing of stores: bytes come
//! through [`ByteSource`]. Simple packing is decoded bit-identically to ecCodes 2.28; every
//! other packing falls back to [`decode_values`] (ecCodes, whole field).
//!
//! ```
//! use haar_grib::jump::{self, JumpInfo};
//! let msg = jump::tests_support::simple_field(&[1.5, f64::NAN, 3.0, 4.25], 16);
//! let info = JumpInfo::parse(&msg[..]).unwrap();
//! let v = info.extract(&msg[..], &[(1, 4)]).unwrap();
//! assert!(v[0][0].is_nan());
//! assert_eq!(&v[0][1..], &[3.0, 4.25]);
//! ```

use std::borrow::Cow;

use crate::ffi::Handle;
pub use crate::gaussian::GaussianGrid;
pub use crate::grid::{Geometry, RegularLatLon};
use crate::grid::{be, gaussian1, gaussian2, geometry1, geometry2, signed};
use crate::keys::KeyError;

/// Record magic (`docs/design.md` §16).
pub const MAGIC: [u8; 4] = *b"HJMP";
/// Record format version written and read (version 1 lacked Gaussian geometry).
pub const VERSION: u16 = 2;
/// Grid points per bitmap popcount block.
pub const BLOCK_POINTS: u64 = 4096;
const HEADER_LEN: usize = 80;
const GEOMETRY_LEN: usize = 48;
/// Gaussian geometry before its per-row point counts.
const GAUSSIAN_LEN: usize = 32;
/// Widest packed value decoded from the record (wider ones go to ecCodes).
const MAX_BITS: u8 = 56;

/// Why a jump record could not be made or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JumpError {
    /// The bytes are not a GRIB message this module can walk.
    #[error("not a GRIB message haar can index: {0}")]
    Malformed(String),
    /// A range lies outside the field.
    #[error("range [{start}, {end}) is outside the field's {points} grid points")]
    OutOfRange {
        /// First index asked.
        start: u64,
        /// One past the last index asked.
        end: u64,
        /// Grid points of the field.
        points: u64,
    },
    /// A stored record is damaged or of another version: compute it again.
    #[error("jump record unusable: {0}")]
    Record(String),
    /// Reading the field's bytes failed.
    #[error("reading the field: {0}")]
    Read(String),
    /// ecCodes failed on the whole-field fallback.
    #[error(transparent)]
    Codes(#[from] KeyError),
}

/// The bytes of one GRIB message, read by range (a buffer, a file region, a pool mapping).
pub trait ByteSource {
    /// Length of the message.
    fn len(&self) -> u64;
    /// Whether the message is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes `off..off + len`; an error when they are not all there.
    fn bytes_at(&self, off: u64, len: usize) -> Result<Cow<'_, [u8]>, JumpError>;
}

impl ByteSource for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn bytes_at(&self, off: u64, len: usize) -> Result<Cow<'_, [u8]>, JumpError> {
        let start = usize::try_from(off).map_err(|_| short(off, len))?;
        self.get(start..start.checked_add(len).ok_or_else(|| short(off, len))?)
            .map(Cow::Borrowed)
            .ok_or_else(|| short(off, len))
    }
}

fn short(off: u64, len: usize) -> JumpError {
    JumpError::Malformed(format!(
        "message ends before bytes {off}..{}",
        off + len as u64
    ))
}

/// How a field's values are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Simple packing: ranges decoded from the record, reading only their bytes.
    Jump,
    /// Any other packing: the whole field decoded with ecCodes.
    WholeField,
}

impl Method {
    /// The name the reply's metadata carries.
    pub fn as_str(&self) -> &'static str {
        match self {
            Method::Jump => "jump",
            Method::WholeField => "eccodes-whole-field",
        }
    }
}

/// One field's jump record (`docs/design.md` §16).
#[derive(Debug, Clone, PartialEq)]
pub struct JumpInfo {
    /// GRIB edition.
    pub edition: u8,
    /// Whether ranges are decoded from the record.
    pub method: Method,
    /// GRIB2 data representation template number; GRIB1 the BDS flag octet.
    pub packing_code: u16,
    /// Bits per packed value.
    pub bits_per_value: u8,
    /// Message length in bytes.
    pub message_length: u64,
    /// Grid points.
    pub points: u64,
    /// Packed values (points whose bitmap bit is 1).
    pub packed_values: u64,
    /// Reference value R.
    pub reference: f64,
    /// Binary scale factor E.
    pub binary_scale: i32,
    /// Decimal scale factor D.
    pub decimal_scale: i32,
    /// Byte offset of the first packed value.
    pub data_offset: u64,
    /// Byte offset of the bitmap and, per 4096-point block, set bits before it.
    pub bitmap: Option<(u64, Vec<u32>)>,
    /// Geometry for nearest-point lookup, on regular lat/lon and global Gaussian grids.
    pub grid: Option<Geometry>,
}

fn ibm_to_f64(b: &[u8]) -> f64 {
    let sign = if b[0] & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from(b[0] & 0x7f);
    let mant = be(&b[1..4]) as f64;
    sign * mant * 2f64.powi(4 * (exp - 64) - 24)
}

/// ecCodes' `grib_power`: `base^s` by repeated multiplication or division, which is what
/// makes the decoded doubles bit-identical to ecCodes'.
fn grib_power(s: i64, base: f64) -> f64 {
    let mut r = 1.0;
    if s == 0 {
        return 1.0;
    }
    if s == 1 {
        return base;
    }
    let mut s = s;
    while s < 0 {
        r /= base;
        s += 1;
    }
    while s > 0 {
        r *= base;
        s -= 1;
    }
    r
}

fn block_counts(bitmap: &[u8], points: u64) -> Vec<u32> {
    let block_bytes = (BLOCK_POINTS / 8) as usize;
    let mut counts = Vec::with_capacity(points.div_ceil(BLOCK_POINTS) as usize);
    let mut total = 0u32;
    for chunk in bitmap.chunks(block_bytes) {
        counts.push(total);
        total += chunk.iter().map(|b| b.count_ones()).sum::<u32>();
    }
    counts.truncate(points.div_ceil(BLOCK_POINTS) as usize);
    counts
}

impl JumpInfo {
    /// Parses the record of the message in `src`, reading its sections' headers and, with a
    /// bitmap, the bitmap once.
    pub fn parse<S: ByteSource + ?Sized>(src: &S) -> Result<JumpInfo, JumpError> {
        let head = src.bytes_at(0, 8)?;
        if &head[..4] != b"GRIB" {
            return Err(JumpError::Malformed("no GRIB at the start".into()));
        }
        match head[7] {
            2 => Self::parse2(src),
            1 => Self::parse1(src),
            e => Err(JumpError::Malformed(format!("GRIB edition {e}"))),
        }
    }

    fn parse2<S: ByteSource + ?Sized>(src: &S) -> Result<JumpInfo, JumpError> {
        let s0 = src.bytes_at(0, 16)?;
        let message_length = be(&s0[8..16]);
        let mut info = JumpInfo {
            edition: 2,
            method: Method::WholeField,
            packing_code: u16::MAX,
            bits_per_value: 0,
            message_length,
            points: 0,
            packed_values: 0,
            reference: 0.0,
            binary_scale: 0,
            decimal_scale: 0,
            data_offset: 0,
            bitmap: None,
            grid: None,
        };
        let mut pos = 16u64;
        let mut bitmap_ok = true;
        let mut seen_data = false;
        while pos + 4 <= message_length {
            let h = src.bytes_at(pos, 4)?;
            if &h[..] == b"7777" {
                break;
            }
            let h = src.bytes_at(pos, 5)?;
            let len = be(&h[..4]);
            let num = h[4];
            if len < 5 || pos + len > message_length {
                return Err(JumpError::Malformed(format!("section {num} length {len}")));
            }
            match num {
                3 => {
                    let head = src.bytes_at(pos, len.min(72) as usize)?;
                    if head.len() < 14 {
                        return Err(JumpError::Malformed("section 3 too short".into()));
                    }
                    info.points = be(&head[6..10]);
                    match be(&head[12..14]) {
                        0 if head.len() >= 72 => {
                            info.grid = Some(Geometry::Regular(geometry2(&head)));
                        }
                        40 if head.len() >= 72 => {
                            // The pl list follows the template: read the whole section.
                            let s = src.bytes_at(pos, len as usize)?;
                            info.grid = gaussian2(&s).map(Geometry::Gaussian);
                        }
                        _ => {}
                    }
                }
                5 => {
                    let s = src.bytes_at(pos, len.min(21) as usize)?;
                    if s.len() < 11 {
                        return Err(JumpError::Malformed("section 5 too short".into()));
                    }
                    info.packed_values = be(&s[5..9]);
                    info.packing_code = be(&s[9..11]) as u16;
                    if info.packing_code == 0 && s.len() >= 20 {
                        let r = f32::from_bits(be(&s[11..15]) as u32);
                        info.reference = f64::from(r);
                        info.binary_scale = signed(&s[15..17]) as i32;
                        info.decimal_scale = signed(&s[17..19]) as i32;
                        info.bits_per_value = s[19];
                    }
                }
                6 => {
                    let s = src.bytes_at(pos, 6)?;
                    match s[5] {
                        255 => {}
                        0 => {
                            let n = info.points.div_ceil(8) as usize;
                            if len < 6 + n as u64 {
                                return Err(JumpError::Malformed("bitmap too short".into()));
                            }
                            let bits = src.bytes_at(pos + 6, n)?;
                            info.bitmap = Some((pos + 6, block_counts(&bits, info.points)));
                        }
                        // Predefined or "previously defined" bitmaps: ecCodes knows them.
                        _ => bitmap_ok = false,
                    }
                }
                7 => {
                    info.data_offset = pos + 5;
                    seen_data = true;
                    if info.packing_code == 0 && bitmap_ok && info.bits_per_value <= MAX_BITS {
                        let bytes =
                            (info.packed_values * u64::from(info.bits_per_value)).div_ceil(8);
                        if 5 + bytes > len {
                            return Err(JumpError::Malformed("data section too short".into()));
                        }
                        info.method = Method::Jump;
                    }
                }
                _ => {}
            }
            pos += len;
        }
        if !seen_data {
            return Err(JumpError::Malformed("no data section".into()));
        }
        if info.bitmap.is_none() && info.method == Method::Jump && info.packed_values != info.points
        {
            info.method = Method::WholeField;
        }
        Ok(info)
    }

    fn parse1<S: ByteSource + ?Sized>(src: &S) -> Result<JumpInfo, JumpError> {
        let s0 = src.bytes_at(0, 8)?;
        let message_length = be(&s0[4..7]);
        if message_length & 0x800000 != 0 {
            // ECMWF's large-GRIB1 length convention: leave it to ecCodes.
            return Err(JumpError::Malformed("large GRIB1 message".into()));
        }
        let pds = src.bytes_at(8, 28)?;
        let pds_len = be(&pds[..3]);
        let flags = pds[7];
        let decimal_scale = signed(&pds[26..28]) as i32;
        let mut pos = 8 + pds_len;
        let mut grid = None;
        let mut points = None;
        if flags & 0x80 != 0 {
            let g = src.bytes_at(pos, 6)?;
            let len = be(&g[..3]);
            if g[5] == 0 && len >= 28 {
                let s = src.bytes_at(pos, 28)?;
                let ni = be(&s[6..8]) as u32;
                let nj = be(&s[8..10]) as u32;
                // Reduced grids (a `pl` list) say "missing" (all ones) for Ni or Nj.
                if ni != 0xffff && nj != 0xffff {
                    points = Some(u64::from(ni) * u64::from(nj));
                    grid = Some(Geometry::Regular(geometry1(&s)));
                }
            } else if g[5] == 4 && len >= 28 {
                let s = src.bytes_at(pos, len as usize)?;
                if let Some(gg) = gaussian1(&s) {
                    points = Some(gg.pl.iter().map(|&p| u64::from(p)).sum());
                    grid = Some(Geometry::Gaussian(gg));
                }
            }
            pos += len;
        }
        let mut bitmap = None;
        let mut bitmap_ok = true;
        if flags & 0x40 != 0 {
            let b = src.bytes_at(pos, 6)?;
            let len = be(&b[..3]);
            let unused = u64::from(b[3]);
            if be(&b[4..6]) != 0 {
                bitmap_ok = false;
            } else {
                let n = (len - 6) * 8 - unused;
                points = Some(n);
                let bits = src.bytes_at(pos + 6, n.div_ceil(8) as usize)?;
                bitmap = Some((pos + 6, block_counts(&bits, n)));
            }
            pos += len;
        }
        let bds = src.bytes_at(pos, 11)?;
        let bds_len = be(&bds[..3]);
        let flag = bds[3];
        let unused = u64::from(flag & 0x0f);
        let bits_per_value = bds[10];
        let packed_values = if bits_per_value == 0 {
            points.unwrap_or(0)
        } else {
            ((bds_len - 11) * 8).saturating_sub(unused) / u64::from(bits_per_value)
        };
        let packed_values = match &bitmap {
            Some((off, counts)) => {
                let n = points.unwrap_or(0);
                let last = src.bytes_at(
                    off + (counts.len() as u64 - 1) * BLOCK_POINTS / 8,
                    (n - (counts.len() as u64 - 1) * BLOCK_POINTS).div_ceil(8) as usize,
                )?;
                u64::from(counts.last().copied().unwrap_or(0))
                    + last.iter().map(|b| u64::from(b.count_ones())).sum::<u64>()
            }
            None => packed_values,
        };
        // A constant field (no packed bits) on a grid whose size this module does not read.
        let known = points.is_some() || bits_per_value > 0;
        let points = points.unwrap_or(packed_values);
        // Grid point data (bit 0x80 clear), simple packing (0x40 clear), floats (0x20 clear),
        // no extended flags (0x10 clear).
        let simple = flag & 0xf0 == 0;
        let method = if simple && known && bitmap_ok && bits_per_value <= MAX_BITS {
            Method::Jump
        } else {
            Method::WholeField
        };
        Ok(JumpInfo {
            edition: 1,
            method,
            packing_code: u16::from(flag & 0xf0),
            bits_per_value,
            message_length,
            points,
            packed_values,
            reference: ibm_to_f64(&bds[6..10]),
            binary_scale: signed(&bds[4..6]) as i32,
            decimal_scale,
            data_offset: pos + 11,
            bitmap,
            grid,
        })
    }

    /// Values at each half-open range `[i, j)` of grid indices, in range order, reading from
    /// `src` only the bytes that hold them (NaN where the bitmap says missing). Only for
    /// [`Method::Jump`]; [`extract_from_message`] covers every packing.
    pub fn extract<S: ByteSource + ?Sized>(
        &self,
        src: &S,
        ranges: &[(u64, u64)],
    ) -> Result<Vec<Vec<f64>>, JumpError> {
        if self.method != Method::Jump {
            return Err(JumpError::Record(
                "packing is not simple: decode the whole field".into(),
            ));
        }
        ranges.iter().map(|&r| self.range(src, r)).collect()
    }

    fn check(&self, (start, end): (u64, u64)) -> Result<(), JumpError> {
        if start > end || end > self.points {
            return Err(JumpError::OutOfRange {
                start,
                end,
                points: self.points,
            });
        }
        Ok(())
    }

    fn range<S: ByteSource + ?Sized>(
        &self,
        src: &S,
        (start, end): (u64, u64),
    ) -> Result<Vec<f64>, JumpError> {
        self.check((start, end))?;
        if start == end {
            return Ok(Vec::new());
        }
        let n = (end - start) as usize;
        let Some((bm_off, counts)) = &self.bitmap else {
            return self.packed(src, start, n);
        };
        let block = start / BLOCK_POINTS;
        let first_bit = block * BLOCK_POINTS;
        let bm = src.bytes_at(
            bm_off + first_bit / 8,
            (end.div_ceil(8) - first_bit / 8) as usize,
        )?;
        let bit = |g: u64| {
            let k = (g - first_bit) as usize;
            bm[k / 8] & (0x80 >> (k % 8)) != 0
        };
        let mut before = u64::from(counts[block as usize]);
        for g in first_bit..start {
            before += u64::from(bit(g));
        }
        let present = (start..end).filter(|&g| bit(g)).count();
        let packed = self.packed(src, before, present)?;
        let mut it = packed.into_iter();
        Ok((start..end)
            .map(|g| {
                if bit(g) {
                    it.next().unwrap_or(f64::NAN)
                } else {
                    f64::NAN
                }
            })
            .collect())
    }

    /// `n` packed values from packed index `first`.
    fn packed<S: ByteSource + ?Sized>(
        &self,
        src: &S,
        first: u64,
        n: usize,
    ) -> Result<Vec<f64>, JumpError> {
        if first + n as u64 > self.packed_values {
            return Err(JumpError::Record(format!(
                "packed values {first}..{} beyond the field's {}",
                first + n as u64,
                self.packed_values
            )));
        }
        let bpv = u64::from(self.bits_per_value);
        if bpv == 0 || n == 0 {
            return Ok(vec![self.reference; n]);
        }
        let s = grib_power(i64::from(self.binary_scale), 2.0);
        let d = grib_power(-i64::from(self.decimal_scale), 10.0);
        let r = self.reference;
        let bit0 = first * bpv;
        let byte0 = bit0 / 8;
        let nbytes = ((first + n as u64) * bpv).div_ceil(8) - byte0;
        let bytes = src.bytes_at(self.data_offset + byte0, nbytes as usize)?;
        let mask = (1u64 << bpv) - 1;
        let mut out = Vec::with_capacity(n);
        let mut p = bit0 - byte0 * 8;
        for _ in 0..n {
            let b = (p / 8) as usize;
            let mut w = [0u8; 8];
            let avail = (bytes.len() - b).min(8);
            w[..avail].copy_from_slice(&bytes[b..b + avail]);
            let x = (u64::from_be_bytes(w) >> (64 - (p % 8) - bpv)) & mask;
            out.push(((x as f64 * s) + r) * d);
            p += bpv;
        }
        Ok(out)
    }

    /// The record's bytes (`docs/design.md` §16), CRC included.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_LEN + GEOMETRY_LEN + 4);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.push(self.edition);
        b.push(match self.method {
            Method::Jump => 0,
            Method::WholeField => 1,
        });
        b.extend_from_slice(&self.packing_code.to_le_bytes());
        b.push(self.bits_per_value);
        let (regular, gaussian) = match &self.grid {
            Some(Geometry::Regular(g)) => (Some(g), None),
            Some(Geometry::Gaussian(g)) => (None, Some(g)),
            None => (None, None),
        };
        b.push(
            u8::from(self.bitmap.is_some())
                | (u8::from(regular.is_some()) << 1)
                | (u8::from(gaussian.is_some()) << 2),
        );
        b.extend_from_slice(&[0; 4]);
        for v in [self.message_length, self.points, self.packed_values] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.reference.to_bits().to_le_bytes());
        b.extend_from_slice(&self.binary_scale.to_le_bytes());
        b.extend_from_slice(&self.decimal_scale.to_le_bytes());
        b.extend_from_slice(&self.data_offset.to_le_bytes());
        let (bm_off, counts) = match &self.bitmap {
            Some((o, c)) => (*o, c.as_slice()),
            None => (0, &[][..]),
        };
        b.extend_from_slice(&bm_off.to_le_bytes());
        b.extend_from_slice(&(counts.len() as u32).to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        for c in counts {
            b.extend_from_slice(&c.to_le_bytes());
        }
        if let Some(g) = gaussian {
            b.extend_from_slice(&g.n.to_le_bytes());
            b.extend_from_slice(&(g.pl.len() as u32).to_le_bytes());
            for v in [g.lat1, g.lon1] {
                b.extend_from_slice(&v.to_bits().to_le_bytes());
            }
            b.push(g.scanning_mode);
            b.extend_from_slice(&[0; 7]);
            for p in &g.pl {
                b.extend_from_slice(&p.to_le_bytes());
            }
        }
        if let Some(g) = regular {
            b.extend_from_slice(&g.ni.to_le_bytes());
            b.extend_from_slice(&g.nj.to_le_bytes());
            for v in [g.lat1, g.lon1, g.di, g.dj] {
                b.extend_from_slice(&v.to_bits().to_le_bytes());
            }
            b.push(g.scanning_mode);
            b.extend_from_slice(&[0; 7]);
        }
        let crc = haar_persist::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// A record read back from [`JumpInfo::to_bytes`]'s bytes; refuses damage, another magic
    /// or version, and trailing bytes.
    pub fn from_bytes(b: &[u8]) -> Result<JumpInfo, JumpError> {
        let bad = |what: &str| JumpError::Record(what.to_string());
        if b.len() < HEADER_LEN + 4 {
            return Err(bad("too short"));
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if haar_persist::crc32c(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err(bad("checksum mismatch"));
        }
        if body[..4] != MAGIC {
            return Err(bad("bad magic"));
        }
        let u16_at = |o: usize| u16::from_le_bytes(body[o..o + 2].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(body[o..o + 8].try_into().unwrap());
        if u16_at(4) != VERSION {
            return Err(bad("unknown version"));
        }
        let flags = body[11];
        let blocks = u32_at(72) as usize;
        let g = HEADER_LEN + 4 * blocks;
        let rows = if flags & 4 != 0 && body.len() >= g + GAUSSIAN_LEN {
            u32_at(g + 4) as usize
        } else {
            0
        };
        let want = g
            + if flags & 2 != 0 { GEOMETRY_LEN } else { 0 }
            + if flags & 4 != 0 {
                GAUSSIAN_LEN + 4 * rows
            } else {
                0
            };
        if flags & 6 == 6 || body.len() != want {
            return Err(bad("length does not match its contents"));
        }
        let counts: Vec<u32> = (0..blocks).map(|k| u32_at(HEADER_LEN + 4 * k)).collect();
        let regular = (flags & 2 != 0).then(|| {
            Geometry::Regular(RegularLatLon {
                ni: u32_at(g),
                nj: u32_at(g + 4),
                lat1: f64::from_bits(u64_at(g + 8)),
                lon1: f64::from_bits(u64_at(g + 16)),
                di: f64::from_bits(u64_at(g + 24)),
                dj: f64::from_bits(u64_at(g + 32)),
                scanning_mode: body[g + 40],
            })
        });
        let gaussian = (flags & 4 != 0).then(|| {
            Geometry::Gaussian(GaussianGrid {
                n: u32_at(g),
                lat1: f64::from_bits(u64_at(g + 8)),
                lon1: f64::from_bits(u64_at(g + 16)),
                scanning_mode: body[g + 24],
                pl: (0..rows)
                    .map(|r| u32_at(g + GAUSSIAN_LEN + 4 * r))
                    .collect(),
            })
        });
        Ok(JumpInfo {
            edition: body[6],
            method: match body[7] {
                0 => Method::Jump,
                _ => Method::WholeField,
            },
            packing_code: u16_at(8),
            bits_per_value: body[10],
            message_length: u64_at(16),
            points: u64_at(24),
            packed_values: u64_at(32),
            reference: f64::from_bits(u64_at(40)),
            binary_scale: u32_at(48) as i32,
            decimal_scale: u32_at(52) as i32,
            data_offset: u64_at(56),
            bitmap: (flags & 1 != 0).then(|| (u64_at(64), counts)),
            grid: regular.or(gaussian),
        })
    }
}

/// The whole field decoded by ecCodes (`values`), NaN where the bitmap says missing: the
/// fallback for packings the record cannot decode, and the oracle the tests compare with.
pub fn decode_values(msg: &[u8]) -> Result<Vec<f64>, JumpError> {
    let h = Handle::from_message(msg)
        .map_err(|_| JumpError::Codes(KeyError::NotAMessage { len: msg.len() }))?;
    let mut values = h.get_double_array("values").map_err(KeyError::from)?;
    if h.is_defined("bitmapPresent") && h.get_long("bitmapPresent").map_err(KeyError::from)? == 1 {
        let bitmap = h.get_long_array("bitmap").map_err(KeyError::from)?;
        for (v, b) in values.iter_mut().zip(bitmap) {
            if b == 0 {
                *v = f64::NAN;
            }
        }
    }
    Ok(values)
}

/// Values at `ranges` of one whole message, by the record where it can and ecCodes
/// otherwise; with the method used.
pub fn extract_from_message(
    msg: &[u8],
    ranges: &[(u64, u64)],
) -> Result<(Vec<Vec<f64>>, Method), JumpError> {
    let info = JumpInfo::parse(msg);
    if let Ok(info) = &info
        && info.method == Method::Jump
    {
        return Ok((info.extract(msg, ranges)?, Method::Jump));
    }
    let all = decode_values(msg)?;
    let points = all.len() as u64;
    let out = ranges
        .iter()
        .map(|&(i, j)| {
            if i > j || j > points {
                Err(JumpError::OutOfRange {
                    start: i,
                    end: j,
                    points,
                })
            } else {
                Ok(all[i as usize..j as usize].to_vec())
            }
        })
        .collect::<Result<_, _>>()?;
    Ok((out, Method::WholeField))
}

/// Helpers for doctests and other crates' tests: small simple-packed fields made by ecCodes.
#[doc(hidden)]
pub mod tests_support {
    use crate::ffi::Handle;

    /// A GRIB2 regular lat/lon field holding `values` (NaN: missing, through a bitmap) at
    /// `bits` bits per value, `values.len()` points along one parallel.
    pub fn simple_field(values: &[f64], bits: i64) -> Vec<u8> {
        field("regular_ll_sfc_grib2", values, bits, values.len() as i64, 1)
    }

    /// Every grid point's latitude and longitude in degrees, in index order, by ecCodes.
    pub fn coordinates(msg: &[u8]) -> (Vec<f64>, Vec<f64>) {
        let h = Handle::from_message(msg).expect("a GRIB message");
        (
            h.get_double_array("latitudes").unwrap(),
            h.get_double_array("longitudes").unwrap(),
        )
    }

    /// A synthetic octahedral reduced Gaussian field O`n` (rows of 20, 24, ... 4n+16 points
    /// from each pole), made from ecCodes sample `sample` (a reduced Gaussian one, GRIB1 or
    /// GRIB2), holding `value(index)` at 16 bits.
    pub fn octahedral(sample: &str, n: i64, value: impl Fn(usize) -> f64) -> Vec<u8> {
        let mut h = Handle::from_sample(sample).expect("ecCodes sample");
        let half: Vec<i64> = (0..n).map(|i| 20 + 4 * i).collect();
        let pl: Vec<i64> = half.iter().chain(half.iter().rev()).copied().collect();
        let points: i64 = pl.iter().sum();
        h.set_long("N", n).unwrap();
        h.set_long_array("pl", &pl).unwrap();
        let _ = h.set_long("numberOfDataPoints", points);
        h.set_long("bitsPerValue", 16).unwrap();
        let values: Vec<f64> = (0..points as usize).map(value).collect();
        h.set_double_array("values", &values).unwrap();
        h.message().unwrap().to_vec()
    }

    /// A field from ecCodes sample `sample` (e.g. `regular_ll_sfc_grib1`) on an `ni` × `nj`
    /// global grid holding `values` (NaN: missing).
    pub fn field(sample: &str, values: &[f64], bits: i64, ni: i64, nj: i64) -> Vec<u8> {
        let mut h = Handle::from_sample(sample).expect("ecCodes sample");
        h.set_long("Ni", ni).unwrap();
        h.set_long("Nj", nj).unwrap();
        // GRIB2 stores the point count; GRIB1 computes it.
        let _ = h.set_long("numberOfDataPoints", ni * nj);
        h.set_long("bitsPerValue", bits).unwrap();
        let missing = values.iter().any(|v| v.is_nan());
        if missing {
            h.set_long("bitmapPresent", 1).unwrap();
        }
        let filled: Vec<f64> = values
            .iter()
            .map(|v| if v.is_nan() { 9999.0 } else { *v })
            .collect();
        h.set_double_array("values", &filled).unwrap();
        h.message().unwrap().to_vec()
    }
}
