//! The `memory` backend: everything in process memory, for tests and as the reference model
//! the other backends are compared against. Nothing survives the process.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use haar_core::Key;

use crate::backend::{Backend, Capabilities, Committed, DbReader, DbWriter, Exclusive};
use crate::error::{Error, Result};
use crate::format::DataRef;

#[derive(Default)]
struct Db {
    generation: u64,
    objects: HashMap<u64, Vec<u8>>,
    log: Vec<Vec<u8>>,
    writers: usize,
    exclusive: bool,
}

type Shared = Arc<Mutex<HashMap<Key, Db>>>;

/// In-memory backend; clones share the same data.
#[derive(Clone, Default)]
pub struct MemoryBackend {
    dbs: Shared,
    next_id: Arc<AtomicU64>,
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        MemoryBackend {
            dbs: Shared::default(),
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }
}

fn busy(db: &Key, what: &str) -> Error {
    Error::Busy {
        db: db.to_string(),
        detail: format!("{what}; retry when the writers have finished"),
    }
}

impl Backend for MemoryBackend {
    fn describe(&self) -> String {
        "memory".into()
    }

    fn open_writer(&self, db: &Key) -> Result<Box<dyn DbWriter>> {
        let mut dbs = self.dbs.lock().unwrap();
        let next_id = &self.next_id;
        let entry = dbs.entry(db.clone()).or_insert_with(|| Db {
            generation: next_id.fetch_add(1, Ordering::Relaxed),
            ..Db::default()
        });
        if entry.exclusive {
            return Err(busy(db, "a purge holds it"));
        }
        entry.writers += 1;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        entry.objects.insert(id, Vec::new());
        Ok(Box::new(MemoryWriter {
            dbs: self.dbs.clone(),
            db: db.clone(),
            generation: entry.generation,
            id,
            snapshot: false,
        }))
    }

    fn open_reader(&self, db: &Key) -> Result<Option<Box<dyn DbReader>>> {
        let dbs = self.dbs.lock().unwrap();
        Ok(dbs.get(db).map(|d| {
            Box::new(MemoryReader {
                dbs: self.dbs.clone(),
                db: db.clone(),
                generation: d.generation,
                next: 0,
            }) as Box<dyn DbReader>
        }))
    }

    fn databases(&self) -> Result<Vec<Key>> {
        Ok(self.dbs.lock().unwrap().keys().cloned().collect())
    }

    fn wipe_database(&self, db: &Key) -> Result<()> {
        let mut dbs = self.dbs.lock().unwrap();
        if let Some(d) = dbs.get(db) {
            if d.writers > 0 {
                return Err(busy(db, &format!("{} writer(s) hold it", d.writers)));
            }
            if d.exclusive {
                return Err(busy(db, "a purge holds it"));
            }
            // Readers notice: the database is gone, or a re-created one has a new generation.
            dbs.remove(db);
        }
        Ok(())
    }

    fn exclusive(&self, db: &Key) -> Result<Box<dyn Exclusive>> {
        let mut dbs = self.dbs.lock().unwrap();
        let Some(d) = dbs.get_mut(db) else {
            return Err(Error::BadRequest {
                request: db.to_string(),
                reason: "no such database".into(),
            });
        };
        if d.writers > 0 || d.exclusive {
            return Err(busy(db, "writers hold it"));
        }
        d.exclusive = true;
        Ok(Box::new(MemoryExclusive {
            dbs: self.dbs.clone(),
            db: db.clone(),
            next_id: self.next_id.clone(),
        }))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reclaims_space: true,
            persistent: false,
        }
    }

    fn info(&self) -> serde_json::Value {
        let dbs = self.dbs.lock().unwrap();
        let bytes: usize = dbs
            .values()
            .flat_map(|d| d.objects.values())
            .map(Vec::len)
            .sum();
        serde_json::json!({ "backend": "memory", "databases": dbs.len(), "bytes": bytes })
    }
}

struct MemoryExclusive {
    dbs: Shared,
    db: Key,
    next_id: Arc<AtomicU64>,
}

impl Exclusive for MemoryExclusive {
    fn snapshot_writer(&mut self) -> Result<Box<dyn DbWriter>> {
        let mut dbs = self.dbs.lock().unwrap();
        let d = dbs.get_mut(&self.db).expect("held exclusively");
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        d.objects.insert(id, Vec::new());
        d.writers += 1;
        Ok(Box::new(MemoryWriter {
            dbs: self.dbs.clone(),
            db: self.db.clone(),
            generation: d.generation,
            id,
            snapshot: true,
        }))
    }

    fn reclaim(&mut self, live: &HashSet<u64>) -> Result<u64> {
        let mut dbs = self.dbs.lock().unwrap();
        let Some(d) = dbs.get_mut(&self.db) else {
            return Ok(0);
        };
        let mut freed = 0;
        d.objects.retain(|id, bytes| {
            let keep = live.contains(id);
            if !keep {
                freed += bytes.len() as u64;
            }
            keep
        });
        Ok(freed)
    }
}

impl Drop for MemoryExclusive {
    fn drop(&mut self) {
        if let Some(d) = self.dbs.lock().unwrap().get_mut(&self.db) {
            d.exclusive = false;
        }
    }
}

struct MemoryWriter {
    dbs: Shared,
    db: Key,
    generation: u64,
    id: u64,
    snapshot: bool,
}

impl MemoryWriter {
    fn with_db<T>(&self, f: impl FnOnce(&mut Db) -> T) -> Result<T> {
        let mut dbs = self.dbs.lock().unwrap();
        match dbs.get_mut(&self.db) {
            Some(d) if d.generation == self.generation => Ok(f(d)),
            _ => Err(Error::Busy {
                db: self.db.to_string(),
                detail: "the database was wiped while this writer was open".into(),
            }),
        }
    }
}

impl DbWriter for MemoryWriter {
    fn id(&self) -> u64 {
        self.id
    }

    fn append(&mut self, _index: &Key, bytes: &[u8]) -> Result<DataRef> {
        let id = self.id;
        self.with_db(|d| {
            let obj = d.objects.entry(id).or_default();
            let offset = obj.len() as u64;
            obj.extend_from_slice(bytes);
            DataRef {
                object: id,
                offset,
                length: bytes.len() as u64,
                crc: haar_persist::crc32c(bytes),
            }
        })
    }

    fn commit(&mut self, segment: &[u8]) -> Result<()> {
        let snapshot = self.snapshot;
        let next_gen = crate::sys::random_u64();
        self.with_db(|d| {
            if snapshot {
                // Replace the log; a new generation makes readers start over.
                d.log.clear();
                d.generation = next_gen;
            }
            d.log.push(segment.to_vec());
        })?;
        if snapshot {
            self.generation = next_gen;
        }
        Ok(())
    }
}

impl Drop for MemoryWriter {
    fn drop(&mut self) {
        if let Some(d) = self.dbs.lock().unwrap().get_mut(&self.db) {
            d.writers = d.writers.saturating_sub(1);
        }
    }
}

struct MemoryReader {
    dbs: Shared,
    db: Key,
    generation: u64,
    next: usize,
}

impl DbReader for MemoryReader {
    fn poll(&mut self) -> Result<Vec<Committed>> {
        let dbs = self.dbs.lock().unwrap();
        let mut out = Vec::new();
        match dbs.get(&self.db) {
            Some(d) if d.generation == self.generation => {}
            Some(d) => {
                out.push(Committed::Wiped);
                self.generation = d.generation;
                self.next = 0;
            }
            None => {
                if self.next > 0 {
                    out.push(Committed::Wiped);
                    self.next = 0;
                }
                return Ok(out);
            }
        }
        let d = &dbs[&self.db];
        for (i, seg) in d.log.iter().enumerate().skip(self.next) {
            out.push(Committed::Segment {
                bytes: seg.clone(),
                origin: format!("memory segment {i}"),
            });
        }
        self.next = d.log.len();
        Ok(out)
    }

    fn position(&self) -> u64 {
        self.next as u64
    }

    fn seek(&mut self, position: u64) {
        self.next = position as usize;
    }

    fn log_id(&self) -> u64 {
        self.generation
    }

    fn read(&self, data: &DataRef, out: &mut Vec<u8>) -> Result<()> {
        let dbs = self.dbs.lock().unwrap();
        let bytes = dbs
            .get(&self.db)
            .and_then(|d| d.objects.get(&data.object))
            .and_then(|o| o.get(data.offset as usize..(data.offset + data.length) as usize));
        match bytes {
            Some(b) => {
                out.extend_from_slice(b);
                Ok(())
            }
            None => Err(Error::io(
                "read",
                self.locate(data),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            )),
        }
    }

    fn locate(&self, data: &DataRef) -> String {
        format!("memory object {:016x} @ {}", data.object, data.offset)
    }
}
