//! The POSIX backend's own files (design §4): a database's directory name, its `db.key` file,
//! and the `toc` header and commit records.
//!
//! Keys inside these files are encoded by [`super::key`]; segments are [`super::segment`]'s.

use haar_core::Key;

use super::error::DecodeError;
use super::key::{decode_key_bytes, encode_key};

/// 64-bit FNV-1a: used for names and database hashes (not for integrity).
pub use haar_core::rendezvous::fnv1a64;

/// The directory name of a database (design §4.1): never `.`/`..`, never contains `/` or NUL,
/// at most 180 bytes.
pub fn db_dir_name(db: &Key) -> String {
    key_values_name(db, &DB_DIR_NAME)
}

/// What differs between the names §4.1 builds from key values: a database's directory name and
/// the stem of an index's data file. Everything else (the escapes, `%` for an empty value, `:`
/// between values, the hash suffix) is one rule, in [`key_values_name`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValuesName {
    /// Whether a `.` that is not the name's first byte stays as it is. A directory name keeps
    /// it (so it is never `.` or `..`, and reads as the value); a data file's stem encodes
    /// every `.`, so that the file's name has exactly two dots.
    keep_inner_dot: bool,
    /// A name longer than this many bytes is cut …
    max_len: usize,
    /// … to this many, then `~` and the 16 hex digits of the FNV-1a hash of the whole name.
    cut_to: usize,
}

/// A database's directory name (design §4.1, "Layout").
const DB_DIR_NAME: ValuesName = ValuesName {
    keep_inner_dot: true,
    max_len: 180,
    cut_to: 160,
};

/// The stem of an index's data file name (design §4.1, "Data files per index").
pub(crate) const INDEX_STEM: ValuesName = ValuesName {
    keep_inner_dot: false,
    max_len: 160,
    cut_to: 140,
};

/// `key`'s values joined by `:`, each byte outside ASCII letters, digits, `-`, `_` and `+`
/// written `%XX` (but see [`ValuesName::keep_inner_dot`]), an empty value or key `%`, cut as
/// `rules` say. The result is ASCII.
pub(crate) fn key_values_name(key: &Key, rules: &ValuesName) -> String {
    use std::fmt::Write as _;
    let mut name = String::new();
    for (i, (_, v)) in key.iter().enumerate() {
        if i > 0 {
            name.push(':');
        }
        if v.is_empty() {
            name.push('%');
            continue;
        }
        for (j, b) in v.bytes().enumerate() {
            let plain = b.is_ascii_alphanumeric()
                || b == b'-'
                || b == b'_'
                || b == b'+'
                || (b == b'.' && rules.keep_inner_dot && !(i == 0 && j == 0));
            if plain {
                name.push(b as char);
            } else {
                let _ = write!(name, "%{b:02X}");
            }
        }
    }
    if name.is_empty() {
        name.push('%');
    }
    if name.len() > rules.max_len {
        let h = fnv1a64(name.as_bytes());
        // ASCII only (every other byte was escaped): any byte is a character boundary.
        name.truncate(rules.cut_to);
        let _ = write!(name, "~{h:016x}");
    }
    name
}

/// `db.key` file (design §4.2).
pub fn encode_db_key_file(db: &Key) -> Result<Vec<u8>, String> {
    let mut key = Vec::new();
    encode_key(db, &mut key)?;
    let mut out = Vec::with_capacity(key.len() + 16);
    out.extend_from_slice(b"HDBK");
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&key);
    let crc = haar_persist::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes a `db.key` file.
pub fn decode_db_key_file(buf: &[u8]) -> Result<Key, DecodeError> {
    if buf.len() < 16 {
        return Err(DecodeError::Truncated(buf.len()));
    }
    let magic: [u8; 4] = buf[0..4].try_into().unwrap();
    if &magic != b"HDBK" {
        return Err(DecodeError::BadMagic(magic));
    }
    let (body, crc) = buf.split_at(buf.len() - 4);
    let stored = u32::from_le_bytes(crc.try_into().unwrap());
    let computed = haar_persist::crc32c(body);
    if stored != computed {
        return Err(DecodeError::Checksum { stored, computed });
    }
    let version = u16::from_le_bytes(buf[4..6].try_into().unwrap());
    if version != 1 {
        return Err(DecodeError::Version(version));
    }
    let len = u32::from_le_bytes(buf[8..12].try_into().unwrap()) as usize;
    if len != body.len() - 12 {
        return Err(DecodeError::Invalid(
            "key length does not match file length",
        ));
    }
    decode_key_bytes(&body[12..])
}

/// Size of the `toc` header and of each commit record (design §4.3).
pub const TOC_RECORD: usize = 64;
/// Commit record kinds.
pub const RECORD_SEGMENT: u8 = 1;
/// The database was wiped.
pub const RECORD_WIPED: u8 = 2;

/// The `toc` version this haar writes in new databases: 2, data files per index (design §4.1).
pub const TOC_VERSION: u16 = 2;

/// The `toc` header of `version` (1: one data file per writer; 2: per writer and index).
pub fn encode_toc_header(version: u16) -> [u8; TOC_RECORD] {
    let mut h = [0u8; TOC_RECORD];
    h[0..4].copy_from_slice(b"HTOC");
    h[4..6].copy_from_slice(&version.to_le_bytes());
    let crc = haar_persist::crc32c(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Verifies a `toc` header; returns its version (1 or 2).
pub fn check_toc_header(h: &[u8]) -> Result<u16, DecodeError> {
    if h.len() < TOC_RECORD {
        return Err(DecodeError::Truncated(h.len()));
    }
    let magic: [u8; 4] = h[0..4].try_into().unwrap();
    if &magic != b"HTOC" {
        return Err(DecodeError::BadMagic(magic));
    }
    let stored = u32::from_le_bytes(h[60..64].try_into().unwrap());
    let computed = haar_persist::crc32c(&h[..60]);
    if stored != computed {
        return Err(DecodeError::Checksum { stored, computed });
    }
    let version = u16::from_le_bytes(h[4..6].try_into().unwrap());
    if version != 1 && version != TOC_VERSION {
        return Err(DecodeError::Version(version));
    }
    Ok(version)
}

/// A commit record of the posix `toc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitRecord {
    /// `RECORD_SEGMENT` or `RECORD_WIPED`.
    pub kind: u8,
    /// Writer whose index file holds the segment.
    pub writer: u64,
    /// Segment offset in the index file.
    pub offset: u64,
    /// Segment length.
    pub length: u32,
    /// Segment crc.
    pub segment_crc: u32,
    /// Commit time, ns since the epoch (diagnostic).
    pub time_ns: u64,
}

impl CommitRecord {
    /// Encodes to 64 bytes.
    pub fn encode(&self) -> [u8; TOC_RECORD] {
        let mut r = [0u8; TOC_RECORD];
        r[0..4].copy_from_slice(b"HCR1");
        r[4] = self.kind;
        r[8..16].copy_from_slice(&self.writer.to_le_bytes());
        r[16..24].copy_from_slice(&self.offset.to_le_bytes());
        r[24..28].copy_from_slice(&self.length.to_le_bytes());
        r[28..32].copy_from_slice(&self.segment_crc.to_le_bytes());
        r[32..40].copy_from_slice(&self.time_ns.to_le_bytes());
        let crc = haar_persist::crc32c(&r[..60]);
        r[60..64].copy_from_slice(&crc.to_le_bytes());
        r
    }

    /// Decodes and verifies 64 bytes.
    pub fn decode(r: &[u8]) -> Result<CommitRecord, DecodeError> {
        if r.len() != TOC_RECORD {
            return Err(DecodeError::Truncated(r.len()));
        }
        let magic: [u8; 4] = r[0..4].try_into().unwrap();
        if &magic != b"HCR1" {
            return Err(DecodeError::BadMagic(magic));
        }
        let stored = u32::from_le_bytes(r[60..64].try_into().unwrap());
        let computed = haar_persist::crc32c(&r[..60]);
        if stored != computed {
            return Err(DecodeError::Checksum { stored, computed });
        }
        let kind = r[4];
        if kind != RECORD_SEGMENT && kind != RECORD_WIPED {
            return Err(DecodeError::Invalid("unknown commit record kind"));
        }
        Ok(CommitRecord {
            kind,
            writer: u64::from_le_bytes(r[8..16].try_into().unwrap()),
            offset: u64::from_le_bytes(r[16..24].try_into().unwrap()),
            length: u32::from_le_bytes(r[24..28].try_into().unwrap()),
            segment_crc: u32::from_le_bytes(r[28..32].try_into().unwrap()),
            time_ns: u64::from_le_bytes(r[32..40].try_into().unwrap()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commit_record_round_trip_and_flip() {
        let r = CommitRecord {
            kind: 1,
            writer: 9,
            offset: 128,
            length: 77,
            segment_crc: 3,
            time_ns: 1,
        };
        let e = r.encode();
        assert_eq!(CommitRecord::decode(&e).unwrap(), r);
        for i in 0..64 {
            let mut bad = e;
            bad[i] ^= 1;
            assert!(CommitRecord::decode(&bad).is_err());
        }
    }

    #[test]
    fn dir_names_never_escape() {
        for v in [
            "..",
            ".",
            "/",
            "a/../b",
            "\0",
            "",
            "x".repeat(10_000).as_str(),
        ] {
            let name = db_dir_name(&Key::new().with("class", v));
            assert!(name != "." && name != "..", "{v:?} -> {name}");
            assert!(!name.contains('/') && !name.contains('\0'));
            assert!(name.len() <= 180);
        }
        assert_eq!(
            db_dir_name(&Key::new().with("class", "od").with("expver", "0001")),
            "od:0001"
        );
    }

    proptest! {
        #[test]
        fn distinct_keys_get_distinct_names(a in "[ -~]{0,40}", b in "[ -~]{0,40}") {
            prop_assume!(a != b);
            let na = db_dir_name(&Key::new().with("k", a.as_str()));
            let nb = db_dir_name(&Key::new().with("k", b.as_str()));
            prop_assert_ne!(na, nb);
        }
    }
}
