//! GRIB message framing in pure Rust: where each message starts, how long it
//! is, and whether it ends where it says it does.
//!
//! This module owns the byte-level layout of GRIB section 0 and nothing else: it
//! never calls ecCodes and never interprets a message beyond its length, so
//! `haar retrieve` and other byte paths can split files without the C library.
//!
//! # Layout read here
//!
//! Every message starts with the ASCII magic `GRIB` and ends with `7777`.
//!
//! | edition | section 0                                                   | length field         |
//! |---------|-------------------------------------------------------------|----------------------|
//! | 1       | `GRIB` · total length (3 bytes, big-endian) · edition (1)   | 24 bits              |
//! | 2       | `GRIB` · reserved (2) · discipline (1) · edition (1) · total length (8 bytes, big-endian) | 64 bits |
//!
//! Edition 1 has one more rule. A 24-bit length cannot describe a message of
//! 8 MiB or more, so ECMWF's convention for "large GRIB1" sets bit `0x800000`
//! of the length and stores the length in units of 120 bytes; the true length is
//! then recovered with the section 4 length, which is itself stored in units of
//! 120 bytes when it is below 120. We apply exactly the correction ecCodes
//! applies in `read_GRIB` (`src/grib_io.c`):
//!
//! ```text
//! if edition == 1 && (len & 0x800000) != 0 && sec4_len < 120 {
//!     len = (len & 0x7fffff) * 120 - sec4_len + 4
//! }
//! ```
//!
//! where `sec4_len` is the 3-byte length at the start of section 4, found by
//! walking section 1 (its own 3-byte length, flag octet 8: bit `0x80` means a
//! section 2 follows, bit `0x40` a section 3) and the optional sections 2 and 3.
//! If the bit is set but `sec4_len >= 120` the length is used as it stands,
//! also as ecCodes does.
//!
//! Bytes between messages (padding, record markers of Fortran files, garbage)
//! are skipped, as ecCodes does. A `GRIB` magic followed by an edition other
//! than 1 or 2 is treated as such garbage. A buffer that holds no message
//! start at all is reported as [`FrameError::NotGrib`].

use std::io::{self, Read};

/// The four bytes every GRIB message starts with.
pub const MAGIC: &[u8; 4] = b"GRIB";
/// The four bytes every GRIB message ends with.
pub const END_MARKER: &[u8; 4] = b"7777";

/// Smallest edition-1 message: section 0 (8) + minimal section 1 (28) +
/// section 4 header (11) + `7777`. Anything shorter cannot be a message.
const MIN_LEN_GRIB1: u64 = 8 + 28 + 11 + 4;
/// Smallest edition-2 message: section 0 (16) + section 1 header (21) +
/// `7777`. Anything shorter cannot be a message.
const MIN_LEN_GRIB2: u64 = 16 + 21 + 4;

/// One GRIB message found in a buffer, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// 0-based number of this message in the input; failed messages count too,
    /// so numbers match what a user sees when counting `GRIB` starts.
    pub index: usize,
    /// Byte offset of the `GRIB` magic from the start of the input.
    pub offset: u64,
    /// The whole message, from `GRIB` to `7777` inclusive.
    pub bytes: &'a [u8],
    /// GRIB edition: 1 or 2.
    pub edition: u8,
}

/// One GRIB message read from a stream by [`MessageReader`], owning its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedMessage {
    /// 0-based number of this message in the stream (failed messages count).
    pub index: usize,
    /// Byte offset of the `GRIB` magic from the start of the stream.
    pub offset: u64,
    /// The whole message, from `GRIB` to `7777` inclusive.
    pub bytes: Vec<u8>,
    /// GRIB edition: 1 or 2.
    pub edition: u8,
}

impl OwnedMessage {
    /// Borrow this message as a [`Message`].
    pub fn as_message(&self) -> Message<'_> {
        Message {
            index: self.index,
            offset: self.offset,
            bytes: &self.bytes,
            edition: self.edition,
        }
    }
}

/// Why a message could not be framed. Every variant that concerns one message
/// names its 0-based number and the byte offset of its `GRIB` magic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The input holds no GRIB message at all (no `GRIB` magic followed by
    /// edition 1 or 2). Check that the file is GRIB and not, say, NetCDF or BUFR.
    #[error("not a GRIB file: no GRIB message found in {len} bytes")]
    NotGrib {
        /// Number of bytes examined.
        len: u64,
    },
    /// The message declares more bytes than the input holds: the file was cut
    /// short (interrupted copy or download) or the length field is corrupt.
    #[error(
        "GRIB message {} (1-based) at byte offset {offset} is truncated: it declares {declared_len} bytes but only {available} remain", index + 1
    )]
    Truncated {
        /// 0-based message number.
        index: usize,
        /// Byte offset of the message's `GRIB` magic.
        offset: u64,
        /// Length the message declares (for large GRIB1, the bytes known to be
        /// needed so far).
        declared_len: u64,
        /// Bytes from `offset` to the end of the input.
        available: u64,
    },
    /// The bytes where the message's declared length says it ends are not
    /// `7777`: the length field or the message is corrupt.
    #[error(
        "GRIB message {} (1-based) at byte offset {offset} is corrupt: no '7777' end marker where its length says it ends", index + 1
    )]
    BadEndMarker {
        /// 0-based message number.
        index: usize,
        /// Byte offset of the message's `GRIB` magic.
        offset: u64,
    },
    /// The message declares a length too small to hold its own sections.
    #[error(
        "GRIB message {} (1-based) at byte offset {offset} declares an impossible length of {declared_len} bytes", index + 1
    )]
    BadLength {
        /// 0-based message number.
        index: usize,
        /// Byte offset of the message's `GRIB` magic.
        offset: u64,
        /// The length read from section 0.
        declared_len: u64,
    },
    /// Reading the stream failed (only from [`MessageReader`]).
    #[error("I/O error while reading GRIB data at byte offset {offset}: {source}")]
    Io {
        /// Stream offset at which the read was attempted.
        offset: u64,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl FrameError {
    /// Message number the error concerns, if it concerns one message.
    pub fn index(&self) -> Option<usize> {
        match self {
            Self::Truncated { index, .. }
            | Self::BadEndMarker { index, .. }
            | Self::BadLength { index, .. } => Some(*index),
            Self::NotGrib { .. } | Self::Io { .. } => None,
        }
    }

    /// Byte offset the error concerns, if any.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Self::Truncated { offset, .. }
            | Self::BadEndMarker { offset, .. }
            | Self::BadLength { offset, .. }
            | Self::Io { offset, .. } => Some(*offset),
            Self::NotGrib { .. } => None,
        }
    }
}

/// What the bytes at a `GRIB` magic say about the message starting there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Header {
    /// Not a message start (unknown edition): skip the magic and scan on.
    NotAMessage,
    /// At least this many bytes from the magic are needed to decide.
    NeedMore(u64),
    /// A message of this edition and total length starts here.
    Message { edition: u8, len: u64 },
    /// The declared length cannot be a message.
    BadLength(u64),
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// Read the header of a message starting at `head[0]` (which must be `GRIB`).
/// `head` may be any prefix of the rest of the input.
fn parse_header(head: &[u8]) -> Header {
    debug_assert!(head.starts_with(MAGIC));
    if head.len() < 8 {
        return Header::NeedMore(8);
    }
    match head[7] {
        1 => parse_grib1(head),
        2 => {
            if head.len() < 16 {
                return Header::NeedMore(16);
            }
            let len = be(&head[8..16]);
            if len < MIN_LEN_GRIB2 {
                Header::BadLength(len)
            } else {
                Header::Message { edition: 2, len }
            }
        }
        _ => Header::NotAMessage,
    }
}

fn parse_grib1(head: &[u8]) -> Header {
    let raw = be(&head[4..7]);
    if raw & 0x80_0000 == 0 {
        return if raw < MIN_LEN_GRIB1 {
            Header::BadLength(raw)
        } else {
            Header::Message {
                edition: 1,
                len: raw,
            }
        };
    }
    // Large GRIB1: walk sections 1..3 to the length of section 4.
    let mut pos: u64 = 8;
    let need = |pos: u64, n: u64| -> Option<(usize, usize)> {
        let end = pos.checked_add(n)?;
        if end > head.len() as u64 {
            None
        } else {
            Some((pos as usize, end as usize))
        }
    };
    // Section 1: 3-byte length, octet 8 holds the flags.
    let Some((a, b)) = need(pos, 8) else {
        return Header::NeedMore(pos + 8);
    };
    let sec1_len = be(&head[a..a + 3]);
    let flags = head[b - 1];
    if sec1_len < 8 {
        return Header::BadLength(raw);
    }
    pos += sec1_len;
    for present in [flags & 0x80 != 0, flags & 0x40 != 0] {
        if present {
            let Some((a, _)) = need(pos, 3) else {
                return Header::NeedMore(pos + 3);
            };
            let sec_len = be(&head[a..a + 3]);
            if sec_len < 3 {
                return Header::BadLength(raw);
            }
            pos += sec_len;
        }
    }
    let Some((a, _)) = need(pos, 3) else {
        return Header::NeedMore(pos + 3);
    };
    let sec4_len = be(&head[a..a + 3]);
    let len = if sec4_len < 120 {
        ((raw & 0x7f_ffff) * 120 + 4).saturating_sub(sec4_len)
    } else {
        raw
    };
    if len < MIN_LEN_GRIB1 || len < pos {
        Header::BadLength(len)
    } else {
        Header::Message { edition: 1, len }
    }
}

/// Position of the first `GRIB` magic in `buf`, if any.
fn find_magic(buf: &[u8]) -> Option<usize> {
    // memchr for 'G' then compare: fast on the long runs of packed data.
    let mut start = 0;
    while start + 4 <= buf.len() {
        let rel = buf[start..buf.len() - 3].iter().position(|&b| b == b'G')?;
        let at = start + rel;
        if &buf[at..at + 4] == MAGIC {
            return Some(at);
        }
        start = at + 1;
    }
    None
}

/// Split a buffer into GRIB messages without copying.
///
/// The iterator yields every message in order. After an error it resumes the
/// scan just past the faulty message's magic, so a caller can report every bad
/// message and still find the good ones after it; a caller that wants
/// all-or-nothing stops at the first `Err`. The iterator never panics, whatever
/// the input.
///
/// ```
/// let msg = haar_grib::frame::tests_support::minimal_grib2(100);
/// let mut file = b"padding".to_vec();
/// file.extend_from_slice(&msg);
/// let found: Vec<_> = haar_grib::messages(&file).collect::<Result<_, _>>().unwrap();
/// assert_eq!(found.len(), 1);
/// assert_eq!(found[0].offset, 7);
/// assert_eq!(found[0].edition, 2);
/// ```
pub fn messages(buf: &[u8]) -> Messages<'_> {
    Messages {
        buf,
        pos: 0,
        index: 0,
        found_any: false,
        done: false,
        skipped: 0,
    }
}

/// Iterator returned by [`messages`].
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    buf: &'a [u8],
    pos: usize,
    index: usize,
    found_any: bool,
    done: bool,
    skipped: u64,
}

impl Messages<'_> {
    /// Bytes skipped so far that belonged to no message (padding, garbage).
    pub fn skipped_bytes(&self) -> u64 {
        self.skipped
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            let Some(rel) = find_magic(&self.buf[self.pos..]) else {
                self.skipped += (self.buf.len() - self.pos) as u64;
                self.pos = self.buf.len();
                self.done = true;
                if !self.found_any {
                    return Some(Err(FrameError::NotGrib {
                        len: self.buf.len() as u64,
                    }));
                }
                return None;
            };
            self.skipped += rel as u64;
            let start = self.pos + rel;
            let rest = &self.buf[start..];
            let offset = start as u64;
            let available = rest.len() as u64;
            let header = parse_header(rest);
            if header == Header::NotAMessage {
                self.pos = start + 1;
                self.skipped += 1;
                continue;
            }
            self.found_any = true;
            let index = self.index;
            self.index += 1;
            // On any error, resume the scan just past this magic.
            self.pos = start + 4;
            let (edition, len) = match header {
                Header::NotAMessage => unreachable!("handled above"),
                Header::NeedMore(declared_len) => {
                    return Some(Err(FrameError::Truncated {
                        index,
                        offset,
                        declared_len,
                        available,
                    }));
                }
                Header::BadLength(declared_len) => {
                    return Some(Err(FrameError::BadLength {
                        index,
                        offset,
                        declared_len,
                    }));
                }
                Header::Message { edition, len } => (edition, len),
            };
            if len > available {
                return Some(Err(FrameError::Truncated {
                    index,
                    offset,
                    declared_len: len,
                    available,
                }));
            }
            let len = len as usize; // len <= available, which is a usize
            if &rest[len - 4..len] != END_MARKER {
                return Some(Err(FrameError::BadEndMarker { index, offset }));
            }
            self.pos = start + len;
            return Some(Ok(Message {
                index,
                offset,
                bytes: &rest[..len],
                edition,
            }));
        }
    }
}

/// Split a stream into GRIB messages without reading it whole: memory use is
/// one message plus a 64 KiB scan buffer.
///
/// Yields owned messages in order; the error behaviour matches [`messages`]
/// (after a bad message the scan resumes past its magic), except that an I/O
/// error ends the iteration.
#[derive(Debug)]
pub struct MessageReader<R> {
    inner: R,
    /// Bytes read but not yet consumed; `buf[..]` starts at stream offset `buf_offset`.
    buf: Vec<u8>,
    buf_offset: u64,
    /// Read buffer for scanning, zeroed once.
    scratch: Vec<u8>,
    eof: bool,
    index: usize,
    found_any: bool,
    done: bool,
    skipped: u64,
}

const CHUNK: usize = 64 * 1024;

impl<R: Read> MessageReader<R> {
    /// Frame the messages of `inner`, whose first byte is at offset 0.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::with_capacity(CHUNK),
            buf_offset: 0,
            scratch: Vec::new(),
            eof: false,
            index: 0,
            found_any: false,
            done: false,
            skipped: 0,
        }
    }

    /// Bytes skipped so far that belonged to no message (padding, garbage).
    pub fn skipped_bytes(&self) -> u64 {
        self.skipped
    }

    /// Give back the underlying reader.
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// Read until `buf` holds at least `want` bytes or the stream ends.
    fn fill(&mut self, want: usize) -> io::Result<()> {
        if self.buf.len() >= want || self.eof {
            return Ok(());
        }
        let need = (want - self.buf.len()) as u64;
        let got = (&mut self.inner).take(need).read_to_end(&mut self.buf)?;
        if (got as u64) < need {
            self.eof = true;
        }
        Ok(())
    }

    /// One read of up to a chunk, so a slow stream yields what it has.
    fn fill_some(&mut self) -> io::Result<()> {
        if self.eof {
            return Ok(());
        }
        self.scratch.resize(CHUNK, 0);
        loop {
            match self.inner.read(&mut self.scratch) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&self.scratch[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn consume(&mut self, n: usize) {
        self.buf.drain(..n);
        self.buf_offset += n as u64;
    }

    fn io_error(&mut self, source: io::Error) -> Option<Result<OwnedMessage, FrameError>> {
        self.done = true;
        Some(Err(FrameError::Io {
            offset: self.buf_offset + self.buf.len() as u64,
            source,
        }))
    }
}

impl<R: Read> Iterator for MessageReader<R> {
    type Item = Result<OwnedMessage, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            // Find a magic in what is buffered, reading more as needed.
            let start = loop {
                if let Some(at) = find_magic(&self.buf) {
                    break at;
                }
                if self.eof {
                    self.skipped += self.buf.len() as u64;
                    let total = self.buf_offset + self.buf.len() as u64;
                    self.consume(self.buf.len());
                    self.done = true;
                    if !self.found_any {
                        return Some(Err(FrameError::NotGrib { len: total }));
                    }
                    return None;
                }
                // Keep the last 3 bytes: a magic may straddle two reads.
                let keep = self.buf.len().min(3);
                let drop = self.buf.len() - keep;
                self.skipped += drop as u64;
                self.consume(drop);
                if let Err(e) = self.fill_some() {
                    return self.io_error(e);
                }
            };
            self.skipped += start as u64;
            self.consume(start);
            let offset = self.buf_offset;
            // Read as much header as the edition needs.
            let header = loop {
                let h = parse_header(&self.buf);
                match h {
                    Header::NeedMore(n) if !self.eof => {
                        let Ok(want) = usize::try_from(n) else {
                            break h;
                        };
                        if let Err(e) = self.fill(want) {
                            return self.io_error(e);
                        }
                    }
                    _ => break h,
                }
            };
            if header == Header::NotAMessage {
                self.skipped += 1;
                self.consume(1);
                continue;
            }
            self.found_any = true;
            let index = self.index;
            self.index += 1;
            let (edition, len) = match header {
                Header::NotAMessage => unreachable!("handled above"),
                Header::NeedMore(declared_len) => {
                    let available = self.buf.len() as u64;
                    self.consume(4);
                    return Some(Err(FrameError::Truncated {
                        index,
                        offset,
                        declared_len,
                        available,
                    }));
                }
                Header::BadLength(declared_len) => {
                    self.consume(4);
                    return Some(Err(FrameError::BadLength {
                        index,
                        offset,
                        declared_len,
                    }));
                }
                Header::Message { edition, len } => (edition, len),
            };
            // Read the body straight into the message's own buffer, so a large
            // message is copied once, not once per chunk.
            let Ok(len_usize) = usize::try_from(len) else {
                // Longer than the address space: it cannot be in this stream.
                let available = self.buf.len() as u64;
                self.consume(4);
                return Some(Err(FrameError::Truncated {
                    index,
                    offset,
                    declared_len: len,
                    available,
                }));
            };
            if len_usize <= self.buf.len() {
                if self.buf[len_usize - 4..len_usize] != END_MARKER[..] {
                    self.consume(4);
                    return Some(Err(FrameError::BadEndMarker { index, offset }));
                }
                let bytes = self.buf[..len_usize].to_vec();
                self.consume(len_usize);
                return Some(Ok(OwnedMessage {
                    index,
                    offset,
                    bytes,
                    edition,
                }));
            }
            let mut bytes = std::mem::take(&mut self.buf);
            let mut filled = bytes.len();
            // Grow step by step so a corrupt length cannot make us allocate
            // gigabytes before the stream proves it has them.
            while filled < len_usize {
                let step = (len_usize - filled).min(16 * 1024 * 1024);
                bytes.resize(filled + step, 0);
                match read_full(&mut self.inner, &mut bytes[filled..filled + step]) {
                    Ok(n) => {
                        filled += n;
                        if n < step {
                            self.eof = true;
                            break;
                        }
                    }
                    Err(e) => {
                        bytes.truncate(filled);
                        self.buf = bytes;
                        return self.io_error(e);
                    }
                }
            }
            bytes.truncate(filled);
            if filled < len_usize || !bytes.ends_with(END_MARKER) {
                // Keep the bytes so the scan resumes just past this magic.
                let available = filled as u64;
                self.buf = bytes;
                self.consume(4);
                return Some(Err(if filled < len_usize {
                    FrameError::Truncated {
                        index,
                        offset,
                        declared_len: len,
                        available,
                    }
                } else {
                    FrameError::BadEndMarker { index, offset }
                }));
            }
            self.buf = Vec::with_capacity(CHUNK);
            self.buf_offset = offset + len;
            return Some(Ok(OwnedMessage {
                index,
                offset,
                bytes,
                edition,
            }));
        }
    }
}

/// Read until `buf` is full or the stream ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Builders of minimal synthetic messages, for doctests and tests of callers.
/// They only satisfy the framing rules; ecCodes would reject them.
#[doc(hidden)]
pub mod tests_support {
    /// An edition-2 frame of exactly `len` bytes (at least 41).
    pub fn minimal_grib2(len: u64) -> Vec<u8> {
        let len = len.max(super::MIN_LEN_GRIB2);
        let mut v = Vec::with_capacity(len as usize);
        v.extend_from_slice(b"GRIB");
        v.extend_from_slice(&[0, 0, 0, 2]);
        v.extend_from_slice(&len.to_be_bytes());
        v.resize(len as usize - 4, 0xAB);
        v.extend_from_slice(b"7777");
        v
    }

    /// An edition-1 frame of exactly `len` bytes (at least 51, below 8 MiB).
    pub fn minimal_grib1(len: u32) -> Vec<u8> {
        let len = len.clamp(super::MIN_LEN_GRIB1 as u32, 0x7f_ffff);
        let mut v = Vec::with_capacity(len as usize);
        v.extend_from_slice(b"GRIB");
        v.extend_from_slice(&len.to_be_bytes()[1..4]);
        v.push(1);
        v.resize(len as usize - 4, 0xCD);
        v.extend_from_slice(b"7777");
        v
    }
}
