//! GRIB framing: `haar_grib::messages` over a buffer and `MessageReader` over the same bytes as a
//! stream must agree message by message (index, offset, length, edition, bytes) and error by
//! error (kind, index, offset). The stream is read both whole (`&[u8]`) and through a reader
//! that returns short reads, whose size the input's first byte picks.
#![no_main]

use std::io::{self, Read};

use haar_grib::{FrameError, MessageReader, messages};
use libfuzzer_sys::fuzz_target;

/// At most this many items are compared (the iterators always terminate, but an input full of
/// `GRIB` magics yields one error per magic).
const MAX_ITEMS: usize = 4096;

#[derive(Debug, PartialEq, Eq)]
enum Item {
    Msg {
        index: usize,
        offset: u64,
        len: usize,
        edition: u8,
        hash: u32,
    },
    Err {
        kind: &'static str,
        index: Option<usize>,
        offset: Option<u64>,
    },
}

fn kind(e: &FrameError) -> &'static str {
    match e {
        FrameError::NotGrib { .. } => "NotGrib",
        FrameError::Truncated { .. } => "Truncated",
        FrameError::BadEndMarker { .. } => "BadEndMarker",
        FrameError::BadLength { .. } => "BadLength",
        FrameError::Io { .. } => "Io",
        _ => "other",
    }
}

fn err(e: &FrameError) -> Item {
    Item::Err {
        kind: kind(e),
        index: e.index(),
        offset: e.offset(),
    }
}

/// A reader returning at most `chunk` bytes per call.
struct Short<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl Read for Short<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.chunk).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fn from_reader<R: Read>(r: R) -> Vec<Item> {
    MessageReader::new(r)
        .take(MAX_ITEMS)
        .map(|m| match m {
            Ok(m) => {
                let msg = m.as_message();
                Item::Msg {
                    index: msg.index,
                    offset: msg.offset,
                    len: msg.bytes.len(),
                    edition: msg.edition,
                    hash: crc32c::crc32c(msg.bytes),
                }
            }
            Err(e) => err(&e),
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let mut it = messages(data);
    let mut expected = Vec::new();
    for m in it.by_ref().take(MAX_ITEMS) {
        expected.push(match m {
            Ok(m) => {
                assert_eq!(
                    &data[m.offset as usize..m.offset as usize + m.bytes.len()],
                    m.bytes,
                    "message bytes are not the input at its offset"
                );
                assert!(m.bytes.starts_with(b"GRIB") && m.bytes.ends_with(b"7777"));
                Item::Msg {
                    index: m.index,
                    offset: m.offset,
                    len: m.bytes.len(),
                    edition: m.edition,
                    hash: crc32c::crc32c(m.bytes),
                }
            }
            Err(e) => err(&e),
        });
    }
    let _ = it.skipped_bytes();

    let whole = from_reader(data);
    assert_eq!(whole, expected, "MessageReader over &[u8] differs from messages()");

    let chunk = data.first().map_or(1, |&b| (b as usize % 64) + 1);
    let short = from_reader(Short { data, chunk });
    assert_eq!(short, expected, "MessageReader with {chunk}-byte reads differs from messages()");
});
