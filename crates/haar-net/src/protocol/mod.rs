//! The wire protocol of `docs/design.md` §8, version 2: the frame codec here, the JSON bodies
//! of every message in `messages` (re-exported), the frame tags of plain-TCP connections in
//! `seal` (re-exported).
//!
//! Pure: encoding and decoding never touch a socket and never panic on any input; every length
//! is bounded before anything is allocated. The only I/O here are [`read_frame`] and
//! [`write_frame`], thin loops over `Read`/`Write` that the server and client share.

use std::io::{self, Read, Write};

use serde::{Serialize, de::DeserializeOwned};

/// First four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"HAR1";
/// The protocol version this build speaks (sent in HELLO and CHALLENGE). Version 2 (issue 14)
/// tags every frame after the login on plain TCP ([`Sealer`]); a peer of another version is
/// refused with both versions named.
pub const VERSION: u32 = 2;
/// When a plain-TCP connection tags its frames (design §8, "Protected traffic"). TLS
/// connections never do: TLS authenticates its own records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum FrameTags {
    /// Tag whenever either end's peer address is not a loopback address: traffic that never
    /// leaves the machine is not tagged (only the host's own root could alter it), traffic
    /// that can is.
    #[default]
    Auto,
    /// Tag every connection, loopback included.
    Always,
}

impl FrameTags {
    /// Whether this end asks for tags on a connection whose peer is `peer` (`None`: unknown,
    /// which asks for them).
    pub fn wanted(self, peer: Option<std::net::SocketAddr>) -> bool {
        match self {
            FrameTags::Always => true,
            FrameTags::Auto => !peer.is_some_and(|a| a.ip().to_canonical().is_loopback()),
        }
    }
}

impl std::str::FromStr for FrameTags {
    type Err = String;
    fn from_str(s: &str) -> Result<FrameTags, String> {
        match s {
            "auto" => Ok(FrameTags::Auto),
            "always" => Ok(FrameTags::Always),
            _ => Err(format!("frame tags `{s}`: expected `auto` or `always`")),
        }
    }
}

/// Bytes in a frame header.
pub const HEADER_LEN: usize = 28;
/// Flag bit 0: last frame of a reply stream.
pub const FLAG_END: u8 = 1;

/// Largest meta a client accepts in the server's handshake replies (a WELCOME may carry the
/// store's configuration and schema text).
pub const MAX_HANDSHAKE_META: u32 = 64 << 10;
/// Largest meta a server accepts before authentication: HELLO and AUTH are about 150 bytes,
/// and an unauthenticated peer gets no more of the server's memory than this.
pub const MAX_PRELOGIN_META: u32 = 1 << 10;
/// Largest meta accepted after authentication (a LIST reply of ~200,000 fields).
pub const MAX_META: u32 = 64 << 20;
/// Largest field accepted (a GRIB message of 1 GiB is already extreme).
pub const MAX_DATA: u32 = 1 << 30;

/// Frame kinds (byte 4 of the header). Values are part of the protocol: never renumber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// client → server: `{version, client, nonce}`.
    Hello = 1,
    /// server → client: `{version, server, nonce}`.
    Challenge = 2,
    /// client → server: `{proof}`.
    Auth = 3,
    /// server → client: `{access, proof}`.
    Welcome = 4,
    /// server → client, then close: `{reason}`.
    Refused = 5,
    /// `{key, crc}` + field bytes; no reply (errors are reported by the next FLUSH).
    Archive = 16,
    /// → `OK {fields}` or `ERROR`.
    Flush = 17,
    /// `{request}` → `FIELD`… then `END {report}`.
    Retrieve = 18,
    /// `{request}` → `END {result}`.
    List = 19,
    /// `{request}` → `END {result}`.
    Axes = 20,
    /// `{request}` → `END {result}`.
    Stats = 21,
    /// `{request, doit}` → `END {result}`.
    Wipe = 22,
    /// `{request, doit}` → `END {result}`.
    Purge = 23,
    /// `{request}` → `EVENT`… (and `HEARTBEAT`) until the client closes.
    Watch = 24,
    /// `{keys}` → `FIELD`… then `END {report}`: many keys in one round trip.
    RetrieveKeys = 25,
    /// `{request}` → `END {problems}`: the damage in the matching databases, without stats.
    Problems = 26,
    /// `{version, request, ranges | points}` → `VALUES`… then `END {found, values}`: values
    /// extracted on the server (design §8, issue 29).
    Extract = 27,
    /// `{version, db, object, offset, length, crc?}` → `FIELD` then `END {}`: the bytes a
    /// listing located, how a masked copy is read (design §8, "Masked copies").
    ReadLocated = 28,
    /// Reply to FLUSH: `{fields}`.
    Ok = 32,
    /// One retrieved field: `{key, crc}` + bytes.
    Field = 33,
    /// Last frame of a reply: `{…result}`; carries FLAG_END.
    End = 34,
    /// A flushed field: `{key, length, seq, replay}`.
    Event = 35,
    /// Ends any request: `{message, exit_code}`; carries FLAG_END.
    Error = 36,
    /// Sent on an idle WATCH stream every few seconds so both sides notice a dead peer.
    Heartbeat = 37,
    /// One field's extracted values: `{version, key, ranges, method, bytes_read, crc}` +
    /// f64 little-endian values.
    Values = 38,
}

impl Kind {
    /// The kind for a header byte, if known.
    pub fn from_u8(b: u8) -> Option<Kind> {
        use Kind::*;
        Some(match b {
            1 => Hello,
            2 => Challenge,
            3 => Auth,
            4 => Welcome,
            5 => Refused,
            16 => Archive,
            17 => Flush,
            18 => Retrieve,
            19 => List,
            20 => Axes,
            21 => Stats,
            22 => Wipe,
            23 => Purge,
            24 => Watch,
            25 => RetrieveKeys,
            26 => Problems,
            27 => Extract,
            28 => ReadLocated,
            32 => Ok,
            33 => Field,
            34 => End,
            35 => Event,
            36 => Error,
            37 => Heartbeat,
            38 => Values,
            _ => return None,
        })
    }

    /// Upper-case protocol name (for messages).
    pub fn name(self) -> &'static str {
        use Kind::*;
        match self {
            Hello => "HELLO",
            Challenge => "CHALLENGE",
            Auth => "AUTH",
            Welcome => "WELCOME",
            Refused => "REFUSED",
            Archive => "ARCHIVE",
            Flush => "FLUSH",
            Retrieve => "RETRIEVE",
            List => "LIST",
            Axes => "AXES",
            Stats => "STATS",
            Wipe => "WIPE",
            Purge => "PURGE",
            RetrieveKeys => "RETRIEVE_KEYS",
            Problems => "PROBLEMS",
            Extract => "EXTRACT",
            ReadLocated => "READ_LOCATED",
            Values => "VALUES",
            Watch => "WATCH",
            Ok => "OK",
            Field => "FIELD",
            End => "END",
            Event => "EVENT",
            Error => "ERROR",
            Heartbeat => "HEARTBEAT",
        }
    }
}

impl Kind {
    /// True for the requests that change the store (a read-only connection may not send
    /// them at all; the server refuses them from the header).
    pub fn writes(self) -> bool {
        matches!(self, Kind::Archive | Kind::Flush | Kind::Wipe | Kind::Purge)
    }
}

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The first four bytes are not `HAR1`: not a haar peer, or a stream out of step.
    #[error(
        "bad magic {0:02x?}: the peer does not speak the haar protocol (or TLS is on at one end only)"
    )]
    BadMagic([u8; 4]),
    /// Reserved header bytes are not zero.
    #[error("reserved header bytes are {0:#06x}, expected 0")]
    Reserved(u16),
    /// Meta longer than the limit in force.
    #[error("meta of {len} bytes exceeds the limit of {max}")]
    MetaTooLong {
        /// Length in the header.
        len: u32,
        /// Limit in force.
        max: u32,
    },
    /// Data longer than the limit in force.
    #[error("data of {len} bytes exceeds the limit of {max}")]
    DataTooLong {
        /// Length in the header.
        len: u32,
        /// Limit in force.
        max: u32,
    },
    /// Header + meta checksum mismatch.
    #[error("frame crc {actual:#010x} does not match the header's {expected:#010x}")]
    Crc {
        /// In the header.
        expected: u32,
        /// Computed.
        actual: u32,
    },
    /// A protected frame whose tag does not match: altered, injected, replayed, reordered,
    /// or a frame before it was dropped on the way.
    #[error(
        "frame MAC mismatch at frame {seq} of this connection: the frame was altered, injected, replayed or reordered on the way, or one before it was dropped (the connection is closed)"
    )]
    Mac {
        /// The frame's number in its direction (0 = the first after the login).
        seq: u64,
    },
    /// Fewer bytes than the frame needs (only from [`decode`]).
    #[error("truncated frame: {need} more bytes needed")]
    Truncated {
        /// Bytes missing.
        need: usize,
    },
    /// Meta that is not the JSON object the kind requires.
    #[error("bad {kind} meta: {detail}")]
    Meta {
        /// Frame kind name.
        kind: &'static str,
        /// serde's message.
        detail: String,
    },
}

/// Limits applied when decoding a header.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest meta.
    pub meta: u32,
    /// Largest data.
    pub data: u32,
}

impl Limits {
    /// A client reading the server's handshake replies.
    pub const HANDSHAKE: Limits = Limits {
        meta: MAX_HANDSHAKE_META,
        data: 0,
    };
    /// A server reading an unauthenticated peer (HELLO, AUTH).
    pub const PRELOGIN: Limits = Limits {
        meta: MAX_PRELOGIN_META,
        data: 0,
    };
    /// A server reading a read-only connection: requests only, never field bytes.
    pub const READ_ONLY: Limits = Limits {
        meta: MAX_META,
        data: 0,
    };
    /// After authentication.
    pub const SESSION: Limits = Limits {
        meta: MAX_META,
        data: MAX_DATA,
    };
}

/// A decoded header (crc not yet checked: it covers the meta too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Raw kind byte (unknown kinds are answered with ERROR, not a decode failure).
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Request id.
    pub id: u64,
    /// Meta length.
    pub meta_len: u32,
    /// Data length.
    pub data_len: u32,
    /// crc32c over header bytes [0, 24) and the meta.
    pub crc: u32,
}

/// One frame, owned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame {
    /// Raw kind byte.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Request id.
    pub id: u64,
    /// JSON meta bytes.
    pub meta: Vec<u8>,
    /// Field bytes.
    pub data: Vec<u8>,
}

impl Frame {
    /// The kind, if known.
    pub fn kind(&self) -> Option<Kind> {
        Kind::from_u8(self.kind)
    }

    /// Parses the meta as `T`.
    pub fn meta<T: DeserializeOwned>(&self) -> Result<T, FrameError> {
        serde_json::from_slice(&self.meta).map_err(|e| FrameError::Meta {
            kind: self.kind().map(Kind::name).unwrap_or("unknown"),
            detail: e.to_string(),
        })
    }
}

/// Encodes a header for `meta` and a data part of `data_len` bytes.
pub fn encode_header(
    kind: Kind,
    flags: u8,
    id: u64,
    meta: &[u8],
    data_len: usize,
) -> Result<[u8; HEADER_LEN], FrameError> {
    let meta_len = u32::try_from(meta.len())
        .ok()
        .filter(|&l| l <= MAX_META)
        .ok_or(FrameError::MetaTooLong {
            len: meta.len().min(u32::MAX as usize) as u32,
            max: MAX_META,
        })?;
    let data_len = u32::try_from(data_len)
        .ok()
        .filter(|&l| l <= MAX_DATA)
        .ok_or(FrameError::DataTooLong {
            len: data_len.min(u32::MAX as usize) as u32,
            max: MAX_DATA,
        })?;
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC);
    h[4] = kind as u8;
    h[5] = flags;
    h[8..16].copy_from_slice(&id.to_le_bytes());
    h[16..20].copy_from_slice(&meta_len.to_le_bytes());
    h[20..24].copy_from_slice(&data_len.to_le_bytes());
    let crc = haar_persist::crc32c_append(haar_persist::crc32c(&h[..24]), meta);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    Ok(h)
}

/// Encodes a whole frame into one buffer.
pub fn encode(
    kind: Kind,
    flags: u8,
    id: u64,
    meta: &[u8],
    data: &[u8],
) -> Result<Vec<u8>, FrameError> {
    let h = encode_header(kind, flags, id, meta, data.len())?;
    let mut out = Vec::with_capacity(HEADER_LEN + meta.len() + data.len());
    out.extend_from_slice(&h);
    out.extend_from_slice(meta);
    out.extend_from_slice(data);
    Ok(out)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Decodes and bounds-checks a header (the crc is checked by [`check_crc`] once the meta is in).
pub fn decode_header(h: &[u8; HEADER_LEN], limits: Limits) -> Result<Header, FrameError> {
    if h[0..4] != MAGIC {
        return Err(FrameError::BadMagic([h[0], h[1], h[2], h[3]]));
    }
    let reserved = u16::from_le_bytes([h[6], h[7]]);
    if reserved != 0 {
        return Err(FrameError::Reserved(reserved));
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&h[8..16]);
    let header = Header {
        kind: h[4],
        flags: h[5],
        id: u64::from_le_bytes(id),
        meta_len: u32_at(h, 16),
        data_len: u32_at(h, 20),
        crc: u32_at(h, 24),
    };
    if header.meta_len > limits.meta {
        return Err(FrameError::MetaTooLong {
            len: header.meta_len,
            max: limits.meta,
        });
    }
    if header.data_len > limits.data {
        return Err(FrameError::DataTooLong {
            len: header.data_len,
            max: limits.data,
        });
    }
    Ok(header)
}

/// Checks the frame crc over the header's first 24 bytes and the meta.
pub fn check_crc(h: &[u8; HEADER_LEN], header: &Header, meta: &[u8]) -> Result<(), FrameError> {
    let actual = haar_persist::crc32c_append(haar_persist::crc32c(&h[..24]), meta);
    if actual != header.crc {
        return Err(FrameError::Crc {
            expected: header.crc,
            actual,
        });
    }
    Ok(())
}

/// Decodes one frame from the start of `buf`; returns it and the bytes it used.
pub fn decode(buf: &[u8], limits: Limits) -> Result<(Frame, usize), FrameError> {
    let Some(h) = buf.first_chunk::<HEADER_LEN>() else {
        return Err(FrameError::Truncated {
            need: HEADER_LEN - buf.len(),
        });
    };
    let header = decode_header(h, limits)?;
    let total = HEADER_LEN + header.meta_len as usize + header.data_len as usize;
    if buf.len() < total {
        return Err(FrameError::Truncated {
            need: total - buf.len(),
        });
    }
    let meta_end = HEADER_LEN + header.meta_len as usize;
    let meta = &buf[HEADER_LEN..meta_end];
    check_crc(h, &header, meta)?;
    Ok((
        Frame {
            kind: header.kind,
            flags: header.flags,
            id: header.id,
            meta: meta.to_vec(),
            data: buf[meta_end..total].to_vec(),
        },
        total,
    ))
}

/// Failure reading or writing frames on a stream.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The bytes are not a valid frame.
    #[error("{0}")]
    Frame(#[from] FrameError),
    /// The peer closed the connection cleanly between frames.
    #[error("connection closed by the peer")]
    Closed,
}

/// Bytes a frame buffer grows by before any of them has arrived: a header that announces
/// 1 GiB followed by nothing costs this much, not 1 GiB.
pub const READ_STEP: usize = 64 << 10;

/// Reads one frame into `frame`, reusing its buffers (a steady stream of equal-sized fields
/// allocates and zeroes nothing).
pub fn read_frame(r: &mut impl Read, limits: Limits, frame: &mut Frame) -> Result<(), WireError> {
    let (h, header) = read_header(r, limits)?;
    read_body(r, &h, &header, frame)
}

/// Reads and bounds-checks the next header (so a caller can refuse a frame by its kind and
/// lengths before reading its body). [`WireError::Closed`] when the peer closed between frames.
pub fn read_header(
    r: &mut impl Read,
    limits: Limits,
) -> Result<([u8; HEADER_LEN], Header), WireError> {
    let mut h = [0u8; HEADER_LEN];
    // Distinguish a clean close (no byte of a new frame) from a truncated one.
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Err(WireError::Closed),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let header = decode_header(&h, limits)?;
    Ok((h, header))
}

/// Reads the meta and data of the frame whose header [`read_header`] returned. Buffers grow
/// only as bytes arrive ([`read_growing`]), so memory follows what the peer sent, not what
/// it announced.
pub fn read_body(
    r: &mut impl Read,
    h: &[u8; HEADER_LEN],
    header: &Header,
    frame: &mut Frame,
) -> Result<(), WireError> {
    frame.kind = header.kind;
    frame.flags = header.flags;
    frame.id = header.id;
    read_growing(r, &mut frame.meta, header.meta_len as usize)?;
    check_crc(h, header, &frame.meta)?;
    read_growing(r, &mut frame.data, header.data_len as usize)?;
    Ok(())
}

/// Reads exactly `len` bytes into `buf` (its length becomes `len`). The buffer is grown in
/// steps of at most [`READ_STEP`] or what has already arrived, whichever is larger, so it is
/// never more than about twice the bytes received; bytes a previous frame initialised are
/// reused without zeroing them again.
pub fn read_growing(r: &mut impl Read, buf: &mut Vec<u8>, len: usize) -> io::Result<()> {
    let mut filled = 0;
    while filled < len {
        let want = (filled + filled.max(READ_STEP)).min(len);
        if buf.len() < want {
            buf.resize(want, 0);
        }
        match r.read(&mut buf[filled..want]) {
            Ok(0) => {
                buf.truncate(filled);
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("frame truncated: {filled} of {len} bytes arrived"),
                ));
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                buf.truncate(filled);
                return Err(e);
            }
        }
    }
    buf.truncate(len);
    Ok(())
}

/// Writes one frame: header and meta in one buffer, the data straight from the caller's slice.
/// The caller flushes (requests are pipelined through a `BufWriter`).
pub fn write_frame(
    w: &mut impl Write,
    kind: Kind,
    flags: u8,
    id: u64,
    meta: &[u8],
    data: &[u8],
) -> Result<(), WireError> {
    let h = encode_header(kind, flags, id, meta, data.len())?;
    w.write_all(&h)?;
    w.write_all(meta)?;
    if !data.is_empty() {
        w.write_all(data)?;
    }
    Ok(())
}

/// Serialises a message body.
pub fn to_meta<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("message bodies serialise")
}

mod messages;
pub use messages::*;
mod seal;
pub use seal::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_tags_are_wanted_off_loopback() {
        let addr = |s: &str| Some(s.parse::<std::net::SocketAddr>().unwrap());
        for a in [
            "127.0.0.1:1",
            "127.8.9.10:1",
            "[::1]:1",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(!FrameTags::Auto.wanted(addr(a)), "{a}");
            assert!(FrameTags::Always.wanted(addr(a)), "{a}");
        }
        for a in [
            "10.0.0.5:1",
            "192.168.1.1:1",
            "[2001:db8::1]:1",
            "[::ffff:10.0.0.5]:1",
        ] {
            assert!(FrameTags::Auto.wanted(addr(a)), "{a}");
        }
        assert!(
            FrameTags::Auto.wanted(None),
            "an unknown peer is not trusted"
        );
        assert_eq!("always".parse::<FrameTags>(), Ok(FrameTags::Always));
        assert!("sometimes".parse::<FrameTags>().is_err());
    }
    use haar_core::Key;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_layout() {
        let meta = to_meta(&FieldMeta {
            key: Key::parse("class=od,step=0").unwrap(),
            crc: 7,
        });
        let bytes = encode(Kind::Archive, 0, 42, &meta, b"GRIB7777").unwrap();
        assert_eq!(&bytes[0..4], b"HAR1");
        assert_eq!(bytes[4], 16);
        assert_eq!(u64::from_le_bytes(bytes[8..16].try_into().unwrap()), 42);
        assert_eq!(u32_at(&bytes, 16) as usize, meta.len());
        assert_eq!(u32_at(&bytes, 20), 8);
        let (f, used) = decode(&bytes, Limits::SESSION).unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(f.kind(), Some(Kind::Archive));
        assert_eq!(f.data, b"GRIB7777");
        let m: FieldMeta = f.meta().unwrap();
        assert_eq!(m.crc, 7);
        // Through the stream helpers too.
        let mut r = io::Cursor::new(bytes.clone());
        let mut g = Frame::default();
        read_frame(&mut r, Limits::SESSION, &mut g).unwrap();
        assert_eq!(g, f);
        assert!(matches!(
            read_frame(&mut r, Limits::SESSION, &mut g),
            Err(WireError::Closed)
        ));
    }

    #[test]
    fn refuses_bad_frames() {
        let bytes = encode(Kind::Hello, 0, 1, b"{}", b"").unwrap();
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(matches!(
            decode(&bad, Limits::SESSION),
            Err(FrameError::BadMagic(_))
        ));
        let mut bad = bytes.clone();
        bad[29] ^= 1; // meta byte
        assert!(matches!(
            decode(&bad, Limits::SESSION),
            Err(FrameError::Crc { .. })
        ));
        let mut bad = bytes.clone();
        bad[6] = 1;
        assert!(matches!(
            decode(&bad, Limits::SESSION),
            Err(FrameError::Reserved(1))
        ));
        // A huge announced length is refused before anything is allocated.
        let mut bad = bytes.clone();
        bad[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode(&bad, Limits::SESSION),
            Err(FrameError::MetaTooLong { .. })
        ));
        let data = encode(Kind::Archive, 0, 1, b"{}", b"xx").unwrap();
        assert!(matches!(
            decode(&data, Limits::HANDSHAKE),
            Err(FrameError::DataTooLong { .. })
        ));
        assert!(matches!(
            decode(&bytes[..10], Limits::SESSION),
            Err(FrameError::Truncated { need: 18 })
        ));
        let f = decode(&bytes, Limits::SESSION).unwrap().0;
        assert!(f.meta::<Hello>().is_err());
    }

    /// A reader that hands out at most `step` bytes per call, like a slow socket.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.step).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    #[test]
    fn an_announced_length_is_not_allocated_before_its_bytes_arrive() {
        let meta = b"{}";
        let mut bytes = encode_header(Kind::Archive, 0, 1, meta, MAX_DATA as usize)
            .unwrap()
            .to_vec();
        bytes.extend_from_slice(meta);
        bytes.extend_from_slice(&[7u8; 1000]);
        let mut f = Frame::default();
        let e = read_frame(&mut io::Cursor::new(&bytes), Limits::SESSION, &mut f).unwrap_err();
        assert!(e.to_string().contains("1000 of 1073741824 bytes"), "{e}");
        assert!(f.data.capacity() <= 2 * READ_STEP, "{}", f.data.capacity());
        // Grown in steps, a large field still arrives whole, however the reads are cut.
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let bytes = encode(Kind::Archive, 0, 2, meta, &data).unwrap();
        for step in [1, 4099, 1 << 20] {
            let mut r = Trickle {
                bytes: &bytes,
                step,
            };
            read_frame(&mut r, Limits::SESSION, &mut f).unwrap();
            assert_eq!(f.data, data, "reads of {step} bytes");
        }
        // A header announcing data before login is refused before anything is read.
        let hello = encode(Kind::Hello, 0, 3, &[b' '; 2000], b"").unwrap();
        assert!(matches!(
            read_frame(&mut io::Cursor::new(&hello), Limits::PRELOGIN, &mut f),
            Err(WireError::Frame(FrameError::MetaTooLong { .. }))
        ));
    }

    #[test]
    fn every_kind_byte_round_trips() {
        for b in 0..=255u8 {
            if let Some(k) = Kind::from_u8(b) {
                assert_eq!(k as u8, b);
                assert!(!k.name().is_empty());
                // The requests a read-only token may not send.
                assert_eq!(k.writes(), matches!(b, 16 | 17 | 22 | 23), "{}", k.name());
            }
        }
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes, Limits::SESSION);
            let _ = decode(&bytes, Limits::HANDSHAKE);
            let mut f = Frame::default();
            let _ = read_frame(&mut io::Cursor::new(&bytes), Limits::SESSION, &mut f);
        }

        #[test]
        fn decoding_mutated_frames_never_panics(
            meta in proptest::collection::vec(any::<u8>(), 0..64),
            data in proptest::collection::vec(any::<u8>(), 0..64),
            flips in proptest::collection::vec((0usize..200, any::<u8>()), 0..4),
        ) {
            let mut bytes = encode(Kind::Field, 0, 9, &meta, &data).unwrap();
            for (at, v) in flips {
                let n = bytes.len();
                bytes[at % n] = v;
            }
            let _ = decode(&bytes, Limits::SESSION);
        }

        #[test]
        fn encode_decode_round_trips(
            kind in prop::sample::select(vec![Kind::Hello, Kind::Archive, Kind::Field, Kind::End, Kind::Event]),
            flags in any::<u8>(),
            id in any::<u64>(),
            meta in proptest::collection::vec(any::<u8>(), 0..512),
            data in proptest::collection::vec(any::<u8>(), 0..2048),
        ) {
            let bytes = encode(kind, flags, id, &meta, &data).unwrap();
            let (f, used) = decode(&bytes, Limits::SESSION).unwrap();
            prop_assert_eq!(used, bytes.len());
            prop_assert_eq!(f, Frame { kind: kind as u8, flags, id, meta, data });
        }

        #[test]
        fn key_meta_round_trips(pairs in proptest::collection::vec(("[a-z]{1,8}", "\\PC{0,12}"), 0..6)) {
            let mut key = Key::new();
            for (k, v) in pairs {
                if key.get(&k).is_none() {
                    key.push(k, v);
                }
            }
            let m = FieldMeta { key: key.clone(), crc: 1 };
            let bytes = encode(Kind::Archive, 0, 1, &to_meta(&m), b"").unwrap();
            let back: FieldMeta = decode(&bytes, Limits::SESSION).unwrap().0.meta().unwrap();
            prop_assert_eq!(back.key, key);
        }
    }
}
