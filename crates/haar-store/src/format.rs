//! Byte layouts shared by the backends, exactly as `docs/design.md` §3–§5 specify them.
//!
//! Pure encode/decode functions over byte slices: no I/O here, so fuzzers and property tests
//! reach every decoder directly. Decoders never panic on any input.
//!
//! One file per layout, each owning its bytes: `key` the key encoding every other layout
//! embeds, `segment` the index segment, `posix` the POSIX backend's own files, `error`
//! the [`DecodeError`] they share. The names are re-exported here, so callers write
//! `format::decode_segment` whichever file holds it.

mod error;
mod key;
mod posix;
mod segment;

pub use error::DecodeError;
pub(crate) use key::{Cursor, RawPairs, decode_key};
pub use key::{MAX_KEYWORD_LEN, MAX_PAIRS, MAX_VALUE_LEN, check_key, decode_key_bytes, encode_key};
pub use posix::{
    CommitRecord, RECORD_SEGMENT, RECORD_WIPED, TOC_RECORD, TOC_VERSION, check_toc_header,
    db_dir_name, decode_db_key_file, encode_db_key_file, encode_toc_header, fnv1a64,
};
pub(crate) use posix::{INDEX_STEM, key_values_name};
pub use segment::{
    DataRef, Entry, FLAG_SNAPSHOT, SEGMENT_MAGIC, SEGMENT_VERSION, Segment, SegmentBuilder,
    SegmentMark, decode_segment, segment_crc,
};
// `RawEntry` is named only by documentation (the catalogue's); it keeps the path it had.
#[allow(unused_imports)]
pub(crate) use segment::RawEntry;
pub(crate) use segment::{RawSegment, decode_segment_raw, raw_key, raw_keys, raw_parts};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_segment(&bytes);
            let _ = decode_db_key_file(&bytes);
            let _ = decode_key_bytes(&bytes);
            let _ = check_toc_header(&bytes);
            if bytes.len() >= 64 { let _ = CommitRecord::decode(&bytes[..64]); }
        }
    }
}
