//! The byte layouts of the writable part's records (docs/design.md §15.2): inode and directory
//! entry records, and the keys they are stored under. Pure: no I/O, so every layout is tested
//! and fuzzable on its own. It must not know about FUSE or the in-memory tree.

use haar::Key;
use haar::crc32c;

/// Keyword naming the file system's database (`haarfs=NAME`).
pub const DB_KEYWORD: &str = "haarfs";

/// The file system's schema: `[ haarfs [ kind, ino [ part ]]]` (design §15.2), the rule every
/// server knows too (design §15.6).
pub const SCHEMA: &str = haar::schema::FILES_RULE;

/// Bytes of file data per chunk field.
pub const CHUNK_SIZE: u32 = 1 << 20;

const INODE_MAGIC: &[u8; 4] = b"HFSI";
const DIRENT_MAGIC: &[u8; 4] = b"HFSD";
const VERSION: u16 = 1;
const INODE_FIXED: usize = 60;
const DIRENT_FIXED: usize = 18;

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::File => 1,
            Kind::Dir => 2,
            Kind::Symlink => 3,
        }
    }

    fn from_code(c: u8) -> Option<Kind> {
        match c {
            1 => Some(Kind::File),
            2 => Some(Kind::Dir),
            3 => Some(Kind::Symlink),
            _ => None,
        }
    }
}

/// An inode's attributes as stored (design §15.2, inode record version 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeRecord {
    /// What the inode is.
    pub kind: Kind,
    /// A tombstone: the inode no longer exists.
    pub deleted: bool,
    /// Permission bits (`0o7777` mask).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Chunk size the file's data was written with.
    pub chunk_size: u32,
    /// Size in bytes.
    pub size: u64,
    /// Access time, ns since the epoch.
    pub atime: i64,
    /// Modification time, ns since the epoch.
    pub mtime: i64,
    /// Change time, ns since the epoch.
    pub ctime: i64,
    /// A symbolic link's target (empty otherwise).
    pub target: Vec<u8>,
}

/// A directory entry as stored (design §15.2, directory entry record version 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirentRecord {
    /// Kind of the entry's inode; `None` for a tombstone.
    pub kind: Option<Kind>,
    /// Inode number of the entry.
    pub ino: u64,
    /// The entry's name.
    pub name: Vec<u8>,
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Too short, or lengths that do not add up.
    #[error("record of {0} bytes is truncated or its lengths do not add up")]
    Length(usize),
    /// Another magic: not a record of this kind.
    #[error("not a {0} record (wrong magic)")]
    Magic(&'static str),
    /// A version this haar does not read.
    #[error("{0} record version {1} is not one this haar reads (1): upgrade haar")]
    Version(&'static str, u16),
    /// The checksum does not match: the record is damaged.
    #[error(
        "checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the record is damaged"
    )]
    Checksum {
        /// As stored.
        stored: u32,
        /// As computed.
        computed: u32,
    },
    /// A kind code that is not defined.
    #[error("unknown inode kind {0}")]
    Kind(u8),
}

fn seal(mut b: Vec<u8>) -> Vec<u8> {
    let crc = crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn unseal<'a>(
    b: &'a [u8],
    magic: &[u8; 4],
    what: &'static str,
    fixed: usize,
) -> Result<&'a [u8], RecordError> {
    if b.len() < fixed + 4 {
        return Err(RecordError::Length(b.len()));
    }
    if &b[..4] != magic {
        return Err(RecordError::Magic(what));
    }
    let version = u16::from_le_bytes([b[4], b[5]]);
    if version != VERSION {
        return Err(RecordError::Version(what, version));
    }
    let (body, tail) = b.split_at(b.len() - 4);
    let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
    let computed = crc32c(body);
    if stored != computed {
        return Err(RecordError::Checksum { stored, computed });
    }
    Ok(body)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl InodeRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(INODE_FIXED + self.target.len() + 4);
        b.extend_from_slice(INODE_MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.push(self.kind.code());
        b.push(u8::from(self.deleted));
        b.extend_from_slice(&(self.mode & 0o7777).to_le_bytes());
        b.extend_from_slice(&self.uid.to_le_bytes());
        b.extend_from_slice(&self.gid.to_le_bytes());
        b.extend_from_slice(&self.chunk_size.to_le_bytes());
        b.extend_from_slice(&self.size.to_le_bytes());
        b.extend_from_slice(&self.atime.to_le_bytes());
        b.extend_from_slice(&self.mtime.to_le_bytes());
        b.extend_from_slice(&self.ctime.to_le_bytes());
        b.extend_from_slice(&(self.target.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.target);
        seal(b)
    }

    /// Decodes and checks a record.
    pub fn decode(b: &[u8]) -> Result<InodeRecord, RecordError> {
        let body = unseal(b, INODE_MAGIC, "inode", INODE_FIXED)?;
        let t = u32_at(body, 56) as usize;
        if body.len() != INODE_FIXED + t {
            return Err(RecordError::Length(b.len()));
        }
        Ok(InodeRecord {
            kind: Kind::from_code(body[6]).ok_or(RecordError::Kind(body[6]))?,
            deleted: body[7] & 1 != 0,
            mode: u32_at(body, 8),
            uid: u32_at(body, 12),
            gid: u32_at(body, 16),
            chunk_size: u32_at(body, 20),
            size: u64_at(body, 24),
            atime: u64_at(body, 32) as i64,
            mtime: u64_at(body, 40) as i64,
            ctime: u64_at(body, 48) as i64,
            target: body[INODE_FIXED..].to_vec(),
        })
    }
}

impl DirentRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(DIRENT_FIXED + self.name.len() + 4);
        b.extend_from_slice(DIRENT_MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.push(self.kind.map_or(0, Kind::code));
        b.push(0);
        b.extend_from_slice(&self.ino.to_le_bytes());
        b.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        b.extend_from_slice(&self.name);
        seal(b)
    }

    /// Decodes and checks a record.
    pub fn decode(b: &[u8]) -> Result<DirentRecord, RecordError> {
        let body = unseal(b, DIRENT_MAGIC, "directory entry", DIRENT_FIXED)?;
        let n = u16::from_le_bytes([body[16], body[17]]) as usize;
        if body.len() != DIRENT_FIXED + n {
            return Err(RecordError::Length(b.len()));
        }
        let kind = match body[6] {
            0 => None,
            c => Some(Kind::from_code(c).ok_or(RecordError::Kind(c))?),
        };
        Ok(DirentRecord {
            kind,
            ino: u64_at(body, 8),
            name: body[DIRENT_FIXED..].to_vec(),
        })
    }
}

/// Lowercase hex of `bytes` (a directory entry's name in its key).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// The database key of file system `fs`.
pub fn db_key(fs: &str) -> Key {
    Key::new().with(DB_KEYWORD, fs)
}

/// Key of inode `ino`'s record.
pub fn inode_key(fs: &str, ino: u64) -> Key {
    db_key(fs)
        .with("kind", "inode")
        .with("ino", ino.to_string())
        .with("part", "meta")
}

/// Key of the entry `name` in directory `parent`.
pub fn dirent_key(fs: &str, parent: u64, name: &[u8]) -> Key {
    db_key(fs)
        .with("kind", "dirent")
        .with("ino", parent.to_string())
        .with("part", hex(name))
}

/// The bytes a lowercase hex string (as [`hex`] writes) stands for; `None` if it is not one.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// Key of chunk `index` of file `ino`.
pub fn chunk_key(fs: &str, ino: u64, index: u64) -> Key {
    db_key(fs)
        .with("kind", "data")
        .with("ino", ino.to_string())
        .with("part", index.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode() -> InodeRecord {
        InodeRecord {
            kind: Kind::Symlink,
            deleted: false,
            mode: 0o755,
            uid: 1000,
            gid: 100,
            chunk_size: CHUNK_SIZE,
            size: 3,
            atime: 1,
            mtime: -2,
            ctime: 3,
            target: b"a/b".to_vec(),
        }
    }

    #[test]
    fn records_round_trip() {
        let i = inode();
        assert_eq!(InodeRecord::decode(&i.encode()).unwrap(), i);
        let d = DirentRecord {
            kind: Some(Kind::File),
            ino: 77,
            name: "caf\u{e9} x".as_bytes().to_vec(),
        };
        assert_eq!(DirentRecord::decode(&d.encode()).unwrap(), d);
        let t = DirentRecord { kind: None, ..d };
        assert_eq!(DirentRecord::decode(&t.encode()).unwrap(), t);
    }

    /// The layout of design §15.2, byte by byte: a change here is a format change.
    #[test]
    fn the_inode_layout_is_the_documented_one() {
        let b = inode().encode();
        assert_eq!(b.len(), 60 + 3 + 4);
        assert_eq!(&b[..4], b"HFSI");
        assert_eq!(&b[4..8], &[1, 0, 3, 0]);
        assert_eq!(&b[8..12], &0o755u32.to_le_bytes());
        assert_eq!(&b[20..24], &(1u32 << 20).to_le_bytes());
        assert_eq!(&b[40..48], &(-2i64).to_le_bytes());
        assert_eq!(&b[56..63], &[3, 0, 0, 0, b'a', b'/', b'b']);
        assert_eq!(&b[63..], &crc32c(&b[..63]).to_le_bytes());
    }

    #[test]
    fn every_damaged_byte_is_refused() {
        let good = inode().encode();
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x40;
            assert!(InodeRecord::decode(&b).is_err(), "byte {i}");
        }
        assert_eq!(
            InodeRecord::decode(&good[..good.len() - 1]).unwrap_err(),
            RecordError::Checksum {
                stored: u32::from_le_bytes(
                    good[good.len() - 5..good.len() - 1].try_into().unwrap()
                ),
                computed: crc32c(&good[..good.len() - 5]),
            }
        );
        assert!(matches!(
            DirentRecord::decode(&good),
            Err(RecordError::Magic(_))
        ));
    }

    #[test]
    fn names_in_keys_are_hex() {
        assert_eq!(hex(b"a/,=\xff"), "612f2c3dff");
        assert_eq!(unhex("612f2c3dff").unwrap(), b"a/,=\xff");
        assert_eq!(unhex("6"), None);
        assert_eq!(unhex("6G"), None);
        assert_eq!(
            dirent_key("main", 1, b"x").to_string(),
            "haarfs=main,kind=dirent,ino=1,part=78"
        );
    }
}
