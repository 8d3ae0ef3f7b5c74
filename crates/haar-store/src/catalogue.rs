//! The reader-side catalogue of one database: its commit log applied in order (masking by
//! re-archive, tombstones, snapshots), and verified reads of the fields it indexes.
//!
//! Owns the in-memory view and the checksum check on every read. It must not write: commits
//! and purges are the [`crate::Store`]'s.

use std::collections::HashMap;
use std::io;

use haar_core::Key;

use crate::backend::{Committed, DbReader, FieldBytes};
use crate::error::{Error, Result};
use crate::format::{self, DataRef, Entry};

/// Reader-side view of one database: the commit log applied in order.
pub(crate) struct Catalogue {
    pub(crate) reader: Box<dyn DbReader>,
    pub(crate) fields: HashMap<(Key, Key), DataRef>,
    pub(crate) dead_fields: u64,
    pub(crate) dead_bytes: u64,
    /// Dead bytes per data object (for purge).
    pub(crate) dead_by_object: HashMap<u64, u64>,
    pub(crate) problems: Vec<String>,
}

impl Catalogue {
    pub(crate) fn new(reader: Box<dyn DbReader>) -> Self {
        Catalogue {
            reader,
            fields: HashMap::new(),
            dead_fields: 0,
            dead_bytes: 0,
            dead_by_object: HashMap::new(),
            problems: Vec::new(),
        }
    }

    fn reset(&mut self) {
        self.fields.clear();
        self.dead_fields = 0;
        self.dead_bytes = 0;
        self.dead_by_object.clear();
        self.problems.clear();
    }

    fn kill(&mut self, old: DataRef) {
        self.dead_fields += 1;
        self.dead_bytes += old.length;
        *self.dead_by_object.entry(old.object).or_default() += old.length;
    }

    /// Applies every segment committed since the last refresh.
    pub(crate) fn refresh(&mut self, db: &Key) -> Result<()> {
        for c in self.reader.poll()? {
            match c {
                Committed::Wiped => self.reset(),
                Committed::Unreadable { origin, detail } => {
                    self.problems.push(format!("{origin}: {detail}"))
                }
                Committed::Segment { bytes, origin } => match format::decode_segment(&bytes) {
                    Err(e) => self.problems.push(format!("{origin}: index segment: {e}")),
                    Ok(seg) if &seg.db != db => self.problems.push(format!(
                        "{origin}: index segment names database {}, expected {db}",
                        seg.db
                    )),
                    Ok(seg) => {
                        if seg.is_snapshot() {
                            self.reset();
                        }
                        for e in seg.entries {
                            match e {
                                Entry::Field { index, datum, data } => {
                                    if let Some(old) = self.fields.insert((index, datum), data) {
                                        self.kill(old);
                                    }
                                }
                                Entry::Tombstone { index, datum } => {
                                    if let Some(old) = self.fields.remove(&(index, datum)) {
                                        self.kill(old);
                                    }
                                }
                            }
                        }
                    }
                },
            }
        }
        Ok(())
    }

    /// The verified bytes of one field and their CRC-32C, lent by the backend where it can (no
    /// copy), else read into `scratch`; `None` if the field is not there. A vanished file (concurrent purge) is
    /// retried once after a refresh.
    pub(crate) fn fetch(
        &mut self,
        db: &Key,
        index: &Key,
        datum: &Key,
        mut scratch: Vec<u8>,
    ) -> Result<Option<(FieldBytes, u32)>> {
        for attempt in 0..2 {
            let Some(data) = self.fields.get(&(index.clone(), datum.clone())).copied() else {
                return Ok(None);
            };
            match self.reader.read_bytes(&data, scratch) {
                Ok(bytes) => {
                    let crc = crc32c::crc32c(&bytes);
                    if crc != data.crc {
                        return Err(self.crc_error(db, index, datum, &data, crc));
                    }
                    return Ok(Some((bytes, crc)));
                }
                Err(Error::Io { source, .. })
                    if attempt == 0 && source.kind() == io::ErrorKind::NotFound =>
                {
                    self.refresh(db)?;
                    scratch = Vec::new();
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    pub(crate) fn crc_error(
        &self,
        db: &Key,
        index: &Key,
        datum: &Key,
        data: &DataRef,
        crc: u32,
    ) -> Error {
        Error::checksum(
            self.reader.locate(data),
            format_args!("key {}", db.joined(index).joined(datum)),
            crc,
            data.crc,
            "index says",
            "other fields are unaffected",
        )
    }
}
