//! The backend seam (design §1): a backend stores field bytes and an ordered commit log of
//! index segments per database. Everything else — schema, masking, request matching, purge —
//! lives in [`crate::Store`] and is shared by every backend.
//!
//! Each method's contract is one sentence; the conformance suite (`crate::conformance`)
//! checks every backend against it.

use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;

use haar_core::Key;

use crate::error::Result;
use crate::format::DataRef;

/// One committed segment as a reader sees it.
#[derive(Debug)]
pub enum Committed {
    /// Encoded segment bytes (verify and decode with [`crate::format::decode_segment`]);
    /// `origin` names where they came from for error messages.
    Segment {
        /// The encoded segment.
        bytes: Vec<u8>,
        /// File or pool location, for messages.
        origin: String,
    },
    /// A segment that could not be read back; the other segments still apply.
    Unreadable {
        /// File or pool location.
        origin: String,
        /// What failed.
        detail: String,
    },
    /// The database was wiped: forget everything read so far.
    Wiped,
}

/// A storage backend.
pub trait Backend: Send + Sync {
    /// A short description for messages (`posix:/data/haar`, `pmem:/dev/shm/haar/haar.pool`).
    fn describe(&self) -> String;

    /// Returns a writer for `db`, creating the database if it does not exist; concurrent
    /// creators in any process end up sharing one database.
    fn open_writer(&self, db: &Key) -> Result<Box<dyn DbWriter>>;

    /// Returns a reader positioned before the first commit of `db`, or `None` if `db` does not
    /// exist.
    fn open_reader(&self, db: &Key) -> Result<Option<Box<dyn DbReader>>>;

    /// Every database present, in no particular order.
    fn databases(&self) -> Result<Vec<Key>>;

    /// Databases whose `db.key` is there but cannot be read or decoded (damage), and
    /// databases another program wrote under the store's roots (posix: FDB5's TOC
    /// databases), each as "PATH: reason": they are missing from [`Backend::databases`], and
    /// since their key is unknown every listing reports them (corruption is never absence).
    fn damaged_databases(&self) -> Vec<String> {
        Vec::new()
    }

    /// Removes `db` and its bytes; fails with [`crate::Error::Busy`] while any writer holds it.
    fn wipe_database(&self, db: &Key) -> Result<()>;

    /// Finishes what wipes killed between their commit and their clean-up left behind
    /// (posix: a database directory renamed away but not yet deleted, design §4.6), so that a
    /// re-run of a killed wipe leaves what an uninterrupted one does even when every database
    /// it names is already gone. Best effort; backends whose wipe commits and cleans in one
    /// step have nothing to do.
    fn clear_wiped(&self) {}

    /// Gives back the space reserve (design §4.7) of the file system that holds `db`, so that
    /// a wipe or purge that found it full can write its few records; returns whether there was
    /// one to give. Writers take it again when there is room. Backends without one: `false`.
    fn release_reserve(&self, _db: &Key) -> bool {
        false
    }

    /// Files and directories in `db`'s storage that haar did not write (FDB5 calls a database
    /// holding such files "unclean"): [`Backend::wipe_database`] would delete them with the
    /// database, so a wipe refuses unless the caller asks for it (`--unsafe-wipe-all`). Empty
    /// where the backend keeps nothing a user could put files beside (memory).
    fn unowned_files(&self, _db: &Key) -> Result<Vec<PathBuf>> {
        Ok(Vec::new())
    }

    /// The file that holds the bytes `data` of `db` at `data.offset` (posix: the writer's
    /// data file; pmem: the pool), as FDB5's list gives a field's location; `None` where no
    /// file does (memory) or `db` does not exist.
    fn data_path(&self, _db: &Key, _data: &DataRef) -> Result<Option<PathBuf>> {
        Ok(None)
    }

    /// Takes exclusive access to an existing `db` for purge; fails with [`crate::Error::Busy`]
    /// while any writer holds it. Access ends when the returned value is dropped.
    fn exclusive(&self, db: &Key) -> Result<Box<dyn Exclusive>>;

    /// What this backend can do beyond the core contract.
    fn capabilities(&self) -> Capabilities;

    /// Makes room for about `bytes` more field data before they are archived: a pmem pool
    /// grows its file and maps its pages in at once, beyond the space freed for reuse,
    /// instead of in steps while the archives run, and says now, naming the pool, when they
    /// cannot fit. A hint: a backend without a pool does nothing.
    fn provision(&self, _bytes: u64) -> Result<()> {
        Ok(())
    }

    /// Gives back what this process holds reserved but has not used (pmem: the unused tail of
    /// its chunk of the heap, design §5.3), as dropping the backend would. For a server that
    /// stops while other handles on the backend live on until the process exits: without it,
    /// every stop leaks that tail. Writes after it take new space. Nothing to give: nothing.
    fn release_unused(&self) {}

    /// The directory that holds the catalogue runs and manifest of `db` (design §3.1), or
    /// `None` when the backend keeps none (memory) or `db` does not exist. The directory
    /// itself may not exist yet.
    fn catalogue_dir(&self, _db: &Key) -> Result<Option<PathBuf>> {
        Ok(None)
    }

    /// Backend-specific facts for `haar info` (sizes, paths, persistence mode).
    fn info(&self) -> serde_json::Value;
}

/// Optional abilities of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// `Exclusive::reclaim` returns freed storage to the system (posix deletes files); when
    /// false, purge only drops entries from the index.
    pub reclaims_space: bool,
    /// Data survives the process (false only for `memory`).
    pub persistent: bool,
}

/// Exclusive access to one database, for purge. No writer can open the database meanwhile.
pub trait Exclusive: Send {
    /// A writer whose [`DbWriter::commit`] replaces the whole commit log of the database with
    /// the one (snapshot) segment it commits, atomically for readers.
    fn snapshot_writer(&mut self) -> Result<Box<dyn DbWriter>>;

    /// Frees the data objects `dead` before the snapshot is written, so that a purge makes
    /// room first on a full file system; only masked or wiped entries may name them (no reader
    /// follows those). Returns the bytes freed; backends whose objects share one space (pmem,
    /// memory) free nothing here.
    fn discard(&mut self, _dead: &HashSet<u64>) -> Result<u64> {
        Ok(0)
    }

    /// Frees every data object not in `live` and every index structure the snapshot made
    /// obsolete; returns the bytes freed. Call after the snapshot is committed.
    fn reclaim(&mut self, live: &HashSet<u64>) -> Result<u64>;
}

/// A private writer to one database. Not shared between threads.
pub trait DbWriter: Send {
    /// The writer's id (unique across processes; written into segments).
    fn id(&self) -> u64;

    /// Stores `bytes`, a field of the index `index` (the schema's second level; posix keeps a
    /// data file per index, design §4.1), and returns where they are; neither visible nor
    /// durable until [`DbWriter::commit`].
    fn append(&mut self, index: &Key, bytes: &[u8]) -> Result<DataRef>;

    /// Makes every byte appended so far durable (per the backend's policy), then makes
    /// `segment` visible to every reader atomically.
    fn commit(&mut self, segment: &[u8]) -> Result<()>;
}

/// A reader of one database. Never takes locks.
pub trait DbReader: Send {
    /// Segments committed since the previous poll, in commit order; cheap when nothing changed.
    fn poll(&mut self) -> Result<Vec<Committed>>;

    /// Appends the bytes of a committed field to `out`. The caller checks the crc.
    fn read(&self, data: &DataRef, out: &mut Vec<u8>) -> Result<()>;

    /// The bytes of a committed field, without a copy where the backend can lend them (pmem
    /// lends its mapping); otherwise read into `scratch` (cleared first), which the result
    /// then owns. The caller checks the crc.
    fn read_bytes(&self, data: &DataRef, mut scratch: Vec<u8>) -> Result<FieldBytes> {
        scratch.clear();
        self.read(data, &mut scratch)?;
        Ok(FieldBytes::Owned(scratch))
    }

    /// A name for the location of `data`, for error messages.
    fn locate(&self, data: &DataRef) -> String;

    /// The log position just after the last commit [`DbReader::poll`] returned (design
    /// §3.1): posix, a byte offset in `toc`; pmem, a global slot index.
    fn position(&self) -> u64;

    /// Moves the reader to `position`, which a reader of the same log (same
    /// [`DbReader::log_id`]) returned: the next poll returns the commits after it.
    fn seek(&mut self, position: u64);

    /// The identity of the log that positions refer to (posix: the inode of `toc`, which a
    /// wipe or purge replaces; pmem: the inode of the pool file).
    fn log_id(&self) -> u64;
}

/// Memory a backend can lend field bytes from (a pool mapping). Published ranges are
/// immutable and stay mapped while any holder of the `Arc` lives.
pub trait LendBytes: Send + Sync {
    /// The bytes at `off..off + len`, or `None` if they lie outside the lender.
    fn lend(&self, off: usize, len: usize) -> Option<&[u8]>;
}

/// The bytes of one field as [`DbReader::read_bytes`] returns them: owned, or lent by the
/// backend (zero-copy) and kept valid by the value itself, not by the reader or any lock.
pub enum FieldBytes {
    /// Read into a buffer.
    Owned(Vec<u8>),
    /// A range of memory lent by the backend; checked against the lender when created.
    Lent {
        /// Whatever keeps the memory mapped.
        lender: Arc<dyn LendBytes>,
        /// Start of the range.
        off: usize,
        /// Length of the range.
        len: usize,
    },
}

impl FieldBytes {
    /// A lent range, if `lender` holds all of it.
    pub fn lent(lender: Arc<dyn LendBytes>, off: usize, len: usize) -> Option<FieldBytes> {
        lender.lend(off, len)?;
        Some(FieldBytes::Lent { lender, off, len })
    }

    /// The buffer back for reuse (empty if the bytes were lent).
    pub fn into_buffer(self) -> Vec<u8> {
        match self {
            FieldBytes::Owned(v) => v,
            FieldBytes::Lent { .. } => Vec::new(),
        }
    }
}

impl Deref for FieldBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FieldBytes::Owned(v) => v,
            FieldBytes::Lent { lender, off, len } => lender
                .lend(*off, *len)
                .expect("a lender never shrinks below a range it lent"),
        }
    }
}

impl fmt::Debug for FieldBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            FieldBytes::Owned(_) => "owned",
            FieldBytes::Lent { .. } => "lent",
        };
        write!(f, "FieldBytes({kind}, {} bytes)", self.len())
    }
}
