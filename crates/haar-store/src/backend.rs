//! The backend seam (design §1): a backend stores field bytes and an ordered commit log of
//! index segments per database. Everything else — schema, masking, request matching, purge —
//! lives in [`crate::Store`] and is shared by every backend.
//!
//! Each method's contract is one sentence; the conformance suite (`crate::conformance`)
//! checks every backend against it.

use std::collections::HashSet;

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

    /// Removes `db` and its bytes; fails with [`crate::Error::Busy`] while any writer holds it.
    fn wipe_database(&self, db: &Key) -> Result<()>;

    /// Takes exclusive access to an existing `db` for purge; fails with [`crate::Error::Busy`]
    /// while any writer holds it. Access ends when the returned value is dropped.
    fn exclusive(&self, db: &Key) -> Result<Box<dyn Exclusive>>;

    /// What this backend can do beyond the core contract.
    fn capabilities(&self) -> Capabilities;

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

    /// Frees every data object not in `live` and every index structure the snapshot made
    /// obsolete; returns the bytes freed. Call after the snapshot is committed.
    fn reclaim(&mut self, live: &HashSet<u64>) -> Result<u64>;
}

/// A private writer to one database. Not shared between threads.
pub trait DbWriter: Send {
    /// The writer's id (unique across processes; written into segments).
    fn id(&self) -> u64;

    /// Stores `bytes` and returns where they are; neither visible nor durable until
    /// [`DbWriter::commit`].
    fn append(&mut self, bytes: &[u8]) -> Result<DataRef>;

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

    /// A name for the location of `data`, for error messages.
    fn locate(&self, data: &DataRef) -> String;
}
