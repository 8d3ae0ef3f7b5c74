//! The index segment of design §3, the unit of atomic visibility: [`DataRef`], [`Entry`],
//! [`SegmentBuilder`] and [`decode_segment`], and the raw decoding ([`RawSegment`]) that
//! checks a segment as fully but leaves its entries' keys encoded.
//!
//! Keys are encoded by [`super::key`]; the files that hold segments are not this module's.

use haar_core::Key;

use super::error::DecodeError;
use super::key::{Cursor, RawPairs, decode_key, encode_key, skip_key};

/// Index segment magic.
pub const SEGMENT_MAGIC: &[u8; 4] = b"HSEG";
/// Index segment version written by this code.
pub const SEGMENT_VERSION: u16 = 1;
/// Segment flag: replaces every earlier entry of the database.
pub const FLAG_SNAPSHOT: u16 = 1;
const SEGMENT_HEADER: usize = 32;

/// Where a field's bytes live (design §3, 28 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DataRef {
    /// posix: the writer id naming the data file; pmem: 0.
    pub object: u64,
    /// Byte offset in the object or pool.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
    /// CRC-32C of the field bytes.
    pub crc: u32,
}

/// One entry of an index segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A field stored at `data`.
    Field {
        /// Index-level key.
        index: Key,
        /// Datum-level key.
        datum: Key,
        /// Location of the bytes.
        data: DataRef,
    },
    /// Removal of (index, datum) by a partial wipe.
    Tombstone {
        /// Index-level key.
        index: Key,
        /// Datum-level key.
        datum: Key,
    },
}

/// A decoded index segment (design §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Flags (`FLAG_SNAPSHOT`).
    pub flags: u16,
    /// The writer that committed it.
    pub writer: u64,
    /// Sequence number within the writer.
    pub sequence: u64,
    /// The database key.
    pub db: Key,
    /// Entries in order; later ones win.
    pub entries: Vec<Entry>,
}

impl Segment {
    /// True if this segment replaces every earlier entry of its database.
    pub fn is_snapshot(&self) -> bool {
        self.flags & FLAG_SNAPSHOT != 0
    }
}

/// One entry of a segment as encoded: `key` is the index key's encoding followed by the
/// datum key's (both self-delimiting), `slot` the field's location or `None` (tombstone).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawEntry<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) slot: Option<DataRef>,
}

/// A segment decoded without building its entries' keys (catalogue replay and merges).
pub(crate) struct RawSegment<'a> {
    pub(crate) flags: u16,
    pub(crate) db: Key,
    pub(crate) entries: Vec<RawEntry<'a>>,
}

impl RawSegment<'_> {
    pub(crate) fn is_snapshot(&self) -> bool {
        self.flags & FLAG_SNAPSHOT != 0
    }
}

/// [`decode_segment`] with every check, but entries left encoded.
pub(crate) fn decode_segment_raw(buf: &[u8]) -> Result<RawSegment<'_>, DecodeError> {
    let (flags, n, mut c) = segment_body(buf)?;
    let db = decode_key(&mut c)?;
    let mut entries = Vec::with_capacity(n.min(c.remaining() / 8));
    for _ in 0..n {
        let kind = c.u8()?;
        let start = c.pos();
        skip_key(&mut c)?;
        skip_key(&mut c)?;
        let key = &c.buf[start..c.pos()];
        let data = decode_ref(&mut c)?;
        let slot = match kind {
            1 => Some(data),
            2 if data == DataRef::default() => None,
            2 => {
                return Err(DecodeError::Invalid(
                    "tombstone with a non-zero data reference",
                ));
            }
            _ => return Err(DecodeError::Invalid("unknown entry kind")),
        };
        entries.push(RawEntry { key, slot });
    }
    if c.remaining() != 0 {
        return Err(DecodeError::Invalid("trailing bytes in segment"));
    }
    Ok(RawSegment { flags, db, entries })
}

/// The index and datum keys of an encoded entry key.
pub(crate) fn raw_parts(key: &[u8]) -> (RawPairs<'_>, RawPairs<'_>) {
    let rest = RawPairs::new(key).rest();
    (RawPairs::new(key), RawPairs::new(rest))
}

/// The encoded entry key of (index, datum), as [`RawEntry::key`] holds it.
pub(crate) fn raw_key(index: &Key, datum: &Key) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    // Keys in the catalogue were checked when archived; an unencodable one matches nothing.
    if encode_key(index, &mut out).is_err() || encode_key(datum, &mut out).is_err() {
        out.clear();
    }
    out
}

/// Builds the keys of an encoded entry key.
pub(crate) fn raw_keys(key: &[u8]) -> (Key, Key) {
    let (i, d) = raw_parts(key);
    let mut index = Key::new();
    for (k, v) in i {
        index.push(k, v);
    }
    let mut datum = Key::new();
    for (k, v) in d {
        datum.push(k, v);
    }
    (index, datum)
}

fn encode_ref(r: &DataRef, out: &mut Vec<u8>) {
    out.extend_from_slice(&r.object.to_le_bytes());
    out.extend_from_slice(&r.offset.to_le_bytes());
    out.extend_from_slice(&r.length.to_le_bytes());
    out.extend_from_slice(&r.crc.to_le_bytes());
}

fn decode_ref(c: &mut Cursor<'_>) -> Result<DataRef, DecodeError> {
    Ok(DataRef {
        object: c.u64()?,
        offset: c.u64()?,
        length: c.u64()?,
        crc: c.u32()?,
    })
}

/// A position in a [`SegmentBuilder`]: its entries up to that point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentMark {
    len: usize,
    n: u32,
}

/// Builds an index segment incrementally, so a writer pays the encoding cost at archive time
/// rather than in one burst at flush.
#[derive(Debug, Clone)]
pub struct SegmentBuilder {
    buf: Vec<u8>,
    n: u32,
}

impl SegmentBuilder {
    /// Starts a segment for database `db`.
    pub fn new(flags: u16, writer: u64, sequence: u64, db: &Key) -> Result<Self, String> {
        let mut buf = Vec::with_capacity(4096);
        buf.extend_from_slice(SEGMENT_MAGIC);
        buf.extend_from_slice(&SEGMENT_VERSION.to_le_bytes());
        buf.extend_from_slice(&flags.to_le_bytes());
        buf.extend_from_slice(&writer.to_le_bytes());
        buf.extend_from_slice(&sequence.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes()); // n_entries, patched in finish
        buf.extend_from_slice(&0u32.to_le_bytes()); // body_len, patched in finish
        encode_key(db, &mut buf)?;
        Ok(SegmentBuilder { buf, n: 0 })
    }

    /// Appends an entry.
    pub fn push(&mut self, entry: &Entry) -> Result<(), String> {
        match entry {
            Entry::Field { index, datum, data } => self.push_parts(1, index, datum, data),
            Entry::Tombstone { index, datum } => {
                self.push_parts(2, index, datum, &DataRef::default())
            }
        }
    }

    /// Appends a field entry from borrowed parts (the archive hot path: no key clones).
    pub fn push_field(&mut self, index: &Key, datum: &Key, data: &DataRef) -> Result<(), String> {
        self.push_parts(1, index, datum, data)
    }

    fn push_parts(
        &mut self,
        kind: u8,
        index: &Key,
        datum: &Key,
        data: &DataRef,
    ) -> Result<(), String> {
        let mark = self.buf.len();
        self.buf.push(kind);
        let r = encode_key(index, &mut self.buf)
            .and_then(|_| encode_key(datum, &mut self.buf))
            .map(|_| encode_ref(data, &mut self.buf));
        if r.is_err() {
            self.buf.truncate(mark);
        } else {
            self.n += 1;
        }
        r
    }

    /// Number of entries so far.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True if no entry was pushed.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Where the segment ends now, for [`SegmentBuilder::truncate`].
    pub fn mark(&self) -> SegmentMark {
        SegmentMark {
            len: self.buf.len(),
            n: self.n,
        }
    }

    /// Drops every entry pushed after `mark` (a mark of this builder).
    pub fn truncate(&mut self, mark: SegmentMark) {
        if mark.len <= self.buf.len() && mark.n <= self.n {
            self.buf.truncate(mark.len);
            self.n = mark.n;
        }
    }

    /// Finishes the segment: patches counts, appends the crc.
    pub fn finish(mut self) -> Vec<u8> {
        let body_len = (self.buf.len() - SEGMENT_HEADER) as u32;
        self.buf[24..28].copy_from_slice(&self.n.to_le_bytes());
        self.buf[28..32].copy_from_slice(&body_len.to_le_bytes());
        let crc = haar_persist::crc32c(&self.buf);
        self.buf.extend_from_slice(&crc.to_le_bytes());
        self.buf
    }
}

/// The crc stored at the end of an encoded segment (for commit records).
pub fn segment_crc(encoded: &[u8]) -> u32 {
    let n = encoded.len();
    u32::from_le_bytes(encoded[n - 4..].try_into().unwrap())
}

/// Checks a segment's magic, crc, version and length; returns its flags, entry count and a
/// cursor at its database key.
fn segment_body(buf: &[u8]) -> Result<(u16, usize, Cursor<'_>), DecodeError> {
    if buf.len() < SEGMENT_HEADER + 4 {
        return Err(DecodeError::Truncated(buf.len()));
    }
    let magic: [u8; 4] = buf[0..4].try_into().unwrap();
    if &magic != SEGMENT_MAGIC {
        return Err(DecodeError::BadMagic(magic));
    }
    let (body, crc) = buf.split_at(buf.len() - 4);
    let stored = u32::from_le_bytes(crc.try_into().unwrap());
    let computed = haar_persist::crc32c(body);
    if stored != computed {
        return Err(DecodeError::Checksum { stored, computed });
    }
    let mut c = Cursor::new(body);
    c.take(4)?;
    let version = c.u16()?;
    if version != SEGMENT_VERSION {
        return Err(DecodeError::Version(version));
    }
    let flags = c.u16()?;
    let _writer = c.u64()?;
    let _sequence = c.u64()?;
    let n = c.u32()? as usize;
    let body_len = c.u32()? as usize;
    if body_len != c.remaining() {
        return Err(DecodeError::Invalid(
            "body length does not match segment length",
        ));
    }
    Ok((flags, n, c))
}

/// Decodes and verifies an index segment.
pub fn decode_segment(buf: &[u8]) -> Result<Segment, DecodeError> {
    let (flags, n, mut c) = segment_body(buf)?;
    let writer = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    let sequence = u64::from_le_bytes(buf[16..24].try_into().unwrap());
    let db = decode_key(&mut c)?;
    let mut entries = Vec::with_capacity(n.min(c.remaining() / 8));
    for _ in 0..n {
        let kind = c.u8()?;
        let index = decode_key(&mut c)?;
        let datum = decode_key(&mut c)?;
        let data = decode_ref(&mut c)?;
        entries.push(match kind {
            1 => Entry::Field { index, datum, data },
            // Design §3: a tombstone carries a zero DataRef; anything else is not ours.
            2 if data == DataRef::default() => Entry::Tombstone { index, datum },
            2 => {
                return Err(DecodeError::Invalid(
                    "tombstone with a non-zero data reference",
                ));
            }
            _ => return Err(DecodeError::Invalid("unknown entry kind")),
        });
    }
    if c.remaining() != 0 {
        return Err(DecodeError::Invalid("trailing bytes in segment"));
    }
    Ok(Segment {
        flags,
        writer,
        sequence,
        db,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_segment() -> Vec<u8> {
        let db = Key::new().with("class", "od").with("date", "20261121");
        let mut b = SegmentBuilder::new(0, 7, 3, &db).unwrap();
        b.push(&Entry::Field {
            index: Key::new().with("type", "fc"),
            datum: Key::new().with("step", "0").with("param", "130"),
            data: DataRef {
                object: 7,
                offset: 64,
                length: 100,
                crc: 5,
            },
        })
        .unwrap();
        b.push(&Entry::Tombstone {
            index: Key::new().with("type", "fc"),
            datum: Key::new().with("step", "6").with("param", "130"),
        })
        .unwrap();
        b.finish()
    }

    #[test]
    fn segment_round_trip() {
        let enc = sample_segment();
        let seg = decode_segment(&enc).unwrap();
        assert_eq!(seg.writer, 7);
        assert_eq!(seg.sequence, 3);
        assert_eq!(seg.entries.len(), 2);
        assert_eq!(seg.db.get("class"), Some("od"));
        assert!(matches!(seg.entries[1], Entry::Tombstone { .. }));
    }

    /// `enc` with the bytes `from` (found once, after the header) replaced by `to`, and its
    /// crc recomputed: a segment that passes the crc but not the checks behind it.
    fn patched(enc: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        let at = (SEGMENT_HEADER..enc.len())
            .find(|&i| enc[i..].starts_with(from))
            .expect("pattern in segment");
        let mut out = enc.to_vec();
        out[at..at + to.len()].copy_from_slice(to);
        let n = out.len();
        let crc = haar_persist::crc32c(&out[..n - 4]);
        out[n - 4..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn raw_decoding_checks_keys_as_the_full_decoder_does() {
        let db = Key::new().with("class", "od");
        let mut b = SegmentBuilder::new(0, 1, 1, &db).unwrap();
        let data = DataRef {
            object: 1,
            offset: 0,
            length: 8,
            crc: 0,
        };
        // Non-ASCII UTF-8 takes the per-string path; the other entry is all ASCII.
        let index = Key::new().with("type", "fc");
        b.push_field(
            &index,
            &Key::new().with("expver", "é1").with("step", "0"),
            &data,
        )
        .unwrap();
        b.push_field(
            &index,
            &Key::new()
                .with("levtype", "sfc")
                .with("step", "6")
                .with("stop", "x"),
            &data,
        )
        .unwrap();
        let enc = b.finish();
        let raw = decode_segment_raw(&enc).unwrap();
        assert_eq!(raw.entries.len(), 2);
        let (_, datum) = raw_keys(raw.entries[0].key);
        assert_eq!(datum.get("expver"), Some("é1"));

        let cases: [(&[u8], &[u8], &str); 4] = [
            // "é" (C3 A9) → an invalid sequence, in the non-ASCII entry
            ("é1".as_bytes(), b"\xff\xfe", "value not UTF-8"),
            // a value of the all-ASCII entry: the fast path must not wave it through
            (b"sfc", b"\xe9fc", "value not UTF-8"),
            (b"levtype", b"lev\xfepe", "keyword not UTF-8"),
            (b"stop", b"step", "duplicate keyword"),
        ];
        for (from, to, why) in cases {
            let bad = patched(&enc, from, to);
            match decode_segment_raw(&bad) {
                Err(DecodeError::Invalid(m)) => assert_eq!(m, why, "{from:?} → {to:?}"),
                other => panic!("{from:?} → {to:?}: {:?}", other.map(|s| s.entries.len())),
            }
            assert!(decode_segment(&bad).is_err(), "{from:?} → {to:?}");
        }
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let enc = sample_segment();
        for i in 0..enc.len() {
            let mut bad = enc.clone();
            bad[i] ^= 0x40;
            assert!(
                decode_segment(&bad).is_err(),
                "flip at byte {i} not detected"
            );
        }
    }

    #[test]
    fn tombstone_with_nonzero_ref_is_refused() {
        // Found by the `segment` fuzz target: such a segment decoded but re-encoded differently.
        let hex = "4853454701000000000000000000000000000000000000000100000023000000000002000000000100000000000000000000000000000000000000000000000000000001c4f550";
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert!(matches!(
            decode_segment(&bytes),
            Err(DecodeError::Invalid(_))
        ));
    }
}
