//! On-disk decoders of haar-store (`format.rs`): index segments, `db.key` files, bare keys, the
//! `toc` header and its 64-byte commit records.
//!
//! Every decoder verifies a CRC-32C, which random mutation almost never satisfies, so each input
//! is also decoded after "fixing it up": checksum (and length fields) recomputed, so the fuzzer
//! reaches the structural decoding behind the checksum.
//!
//! Properties: no decoder panics; a segment that decodes re-encodes with `SegmentBuilder` (same
//! flags / writer / sequence / db / entries) to exactly the bytes decoded; likewise bare keys,
//! `db.key` files and commit records (reserved bytes aside).
#![no_main]

use haar_store::format::{
    self, CommitRecord, SegmentBuilder, TOC_RECORD, check_toc_header, decode_db_key_file,
    decode_key_bytes, decode_segment,
};
use libfuzzer_sys::fuzz_target;

/// Segment header: magic, version, flags, writer, sequence, n_entries, body_len.
const SEGMENT_HEADER: usize = 32;

fn put_crc(buf: &mut [u8]) {
    let n = buf.len();
    let crc = crc32c::crc32c(&buf[..n - 4]);
    buf[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

fn segment(buf: &[u8]) {
    let Ok(seg) = decode_segment(buf) else {
        return;
    };
    let mut b = SegmentBuilder::new(seg.flags, seg.writer, seg.sequence, &seg.db)
        .expect("a decoded db key re-encodes");
    for e in &seg.entries {
        b.push(e).expect("a decoded entry re-encodes");
    }
    assert_eq!(b.len(), seg.entries.len());
    let again = b.finish();
    assert_eq!(
        again.as_slice(),
        buf,
        "decoded segment does not re-encode to the same bytes: {seg:?}"
    );
}

fn segment_fixed(data: &[u8]) {
    if data.len() < SEGMENT_HEADER + 4 {
        return;
    }
    let mut buf = data.to_vec();
    let n = buf.len();
    buf[0..4].copy_from_slice(format::SEGMENT_MAGIC);
    let body_len = (n - 4 - SEGMENT_HEADER) as u32;
    buf[28..32].copy_from_slice(&body_len.to_le_bytes());
    put_crc(&mut buf);
    segment(&buf);
}

fn db_key_file(buf: &[u8]) {
    let Ok(key) = decode_db_key_file(buf) else {
        return;
    };
    let again = format::encode_db_key_file(&key).expect("a decoded key re-encodes");
    // Bytes 6..8 are reserved (written as zero, not checked on read), hence the crc too.
    let n = buf.len();
    assert_eq!(again.len(), n, "db.key does not re-encode to its length: {key:?}");
    assert_eq!(again[..6], buf[..6], "db.key header does not re-encode: {key:?}");
    assert_eq!(again[8..n - 4], buf[8..n - 4], "db.key does not re-encode: {key:?}");
}

fn db_key_file_fixed(data: &[u8]) {
    if data.len() < 16 {
        return;
    }
    let mut buf = data.to_vec();
    let n = buf.len();
    buf[0..4].copy_from_slice(b"HDBK");
    buf[8..12].copy_from_slice(&((n - 16) as u32).to_le_bytes());
    put_crc(&mut buf);
    db_key_file(&buf);
}

fn key_bytes(buf: &[u8]) {
    let Ok(key) = decode_key_bytes(buf) else {
        return;
    };
    let mut again = Vec::new();
    format::encode_key(&key, &mut again).expect("a decoded key re-encodes");
    assert_eq!(again.as_slice(), buf, "key does not re-encode: {key:?}");
}

fn commit_record(r: &[u8]) {
    if let Ok(rec) = CommitRecord::decode(r) {
        // Bytes 5..8 and 40..60 are reserved (written as zero); only the fields round-trip.
        let again = CommitRecord::decode(&rec.encode()).expect("an encoded record decodes");
        assert_eq!(again, rec);
    }
}

fuzz_target!(|data: &[u8]| {
    // As given.
    segment(data);
    db_key_file(data);
    key_bytes(data);
    let _ = check_toc_header(data);
    for w in data.chunks_exact(TOC_RECORD).take(64) {
        commit_record(w);
    }
    if data.len() >= TOC_RECORD {
        let _ = CommitRecord::decode(&data[data.len() - TOC_RECORD..]);
    }

    // With checksums and length fields made consistent.
    segment_fixed(data);
    db_key_file_fixed(data);
    if data.len() >= TOC_RECORD {
        let mut h = [0u8; TOC_RECORD];
        h.copy_from_slice(&data[..TOC_RECORD]);
        h[0..4].copy_from_slice(b"HTOC");
        put_crc(&mut h);
        let _ = check_toc_header(&h);
        let mut r = h;
        r[0..4].copy_from_slice(b"HCR1");
        put_crc(&mut r);
        commit_record(&r);
    }
});
