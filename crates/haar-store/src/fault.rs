//! Fault injection: a backend adapter that wraps any [`Backend`] and makes chosen operations
//! fail (ENOSPC, EIO, short writes), for tests of the store's error paths. It composes like
//! the other adapters: the wrapped backend is untouched. Compiled only with the `testing`
//! feature (this crate's tests turn it on): nothing shipped can fail on purpose.

use std::io;
use std::sync::{Arc, Mutex};

use haar_core::Key;

use crate::backend::{Backend, Capabilities, Committed, DbReader, DbWriter, Exclusive};
use crate::error::{Error, Result};
use crate::format::DataRef;

/// A fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `append` fails with ENOSPC, storing nothing.
    NoSpace,
    /// `append` stores only the first half of the bytes, then fails with EIO.
    ShortWrite,
    /// `commit` fails with EIO before anything becomes visible.
    CommitIo,
    /// `read` fails with EIO.
    ReadIo,
}

#[derive(Debug, Default)]
struct Plan {
    /// (fault, remaining matching operations to let pass before firing)
    armed: Vec<(Fault, usize)>,
    fired: Vec<Fault>,
}

/// Shared control of a [`FaultyBackend`]: arm faults, see which fired.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan(Arc<Mutex<Plan>>);

impl FaultPlan {
    /// Fires `fault` once, on the operation after `skip` matching operations.
    pub fn arm(&self, fault: Fault, skip: usize) {
        self.0.lock().unwrap().armed.push((fault, skip));
    }

    /// Faults that fired so far.
    pub fn fired(&self) -> Vec<Fault> {
        self.0.lock().unwrap().fired.clone()
    }

    fn take(&self, wanted: &[Fault]) -> Option<Fault> {
        let mut p = self.0.lock().unwrap();
        let i = p.armed.iter().position(|(f, _)| wanted.contains(f))?;
        if p.armed[i].1 > 0 {
            p.armed[i].1 -= 1;
            return None;
        }
        let (f, _) = p.armed.remove(i);
        p.fired.push(f);
        Some(f)
    }
}

fn injected(op: &'static str, what: &str, errno: i32) -> Error {
    Error::io(
        op,
        format!("<fault injected: {what}>"),
        io::Error::from_raw_os_error(errno),
    )
}

/// Wraps a backend; faults armed in its [`FaultPlan`] fire in its writers and readers.
pub struct FaultyBackend {
    inner: Arc<dyn Backend>,
    plan: FaultPlan,
}

impl FaultyBackend {
    /// Wraps `inner`, controlled by `plan`.
    pub fn new(inner: Arc<dyn Backend>, plan: FaultPlan) -> Self {
        FaultyBackend { inner, plan }
    }
}

impl Backend for FaultyBackend {
    fn describe(&self) -> String {
        format!("faulty({})", self.inner.describe())
    }
    fn open_writer(&self, db: &Key) -> Result<Box<dyn DbWriter>> {
        Ok(Box::new(FaultyWriter {
            inner: self.inner.open_writer(db)?,
            plan: self.plan.clone(),
        }))
    }
    fn open_reader(&self, db: &Key) -> Result<Option<Box<dyn DbReader>>> {
        Ok(self.inner.open_reader(db)?.map(|inner| {
            Box::new(FaultyReader {
                inner,
                plan: self.plan.clone(),
            }) as Box<dyn DbReader>
        }))
    }
    fn databases(&self) -> Result<Vec<Key>> {
        self.inner.databases()
    }
    fn damaged_databases(&self) -> Vec<String> {
        self.inner.damaged_databases()
    }
    fn wipe_database(&self, db: &Key) -> Result<()> {
        self.inner.wipe_database(db)
    }
    fn clear_wiped(&self) {
        self.inner.clear_wiped()
    }
    fn release_reserve(&self, db: &Key) -> bool {
        self.inner.release_reserve(db)
    }
    fn unowned_files(&self, db: &Key) -> Result<Vec<std::path::PathBuf>> {
        self.inner.unowned_files(db)
    }
    fn data_path(&self, db: &Key, data: &DataRef) -> Result<Option<std::path::PathBuf>> {
        self.inner.data_path(db, data)
    }
    fn exclusive(&self, db: &Key) -> Result<Box<dyn Exclusive>> {
        self.inner.exclusive(db)
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn info(&self) -> serde_json::Value {
        self.inner.info()
    }
}

struct FaultyWriter {
    inner: Box<dyn DbWriter>,
    plan: FaultPlan,
}

impl DbWriter for FaultyWriter {
    fn id(&self) -> u64 {
        self.inner.id()
    }
    fn append(&mut self, index: &Key, bytes: &[u8]) -> Result<DataRef> {
        match self.plan.take(&[Fault::NoSpace, Fault::ShortWrite]) {
            Some(Fault::NoSpace) => Err(injected("write", "ENOSPC", libc::ENOSPC)),
            Some(_) => {
                self.inner.append(index, &bytes[..bytes.len() / 2])?;
                Err(injected("write", "short write", libc::EIO))
            }
            None => self.inner.append(index, bytes),
        }
    }
    fn commit(&mut self, segment: &[u8]) -> Result<()> {
        match self.plan.take(&[Fault::CommitIo]) {
            Some(_) => Err(injected("commit", "EIO", libc::EIO)),
            None => self.inner.commit(segment),
        }
    }
}

struct FaultyReader {
    inner: Box<dyn DbReader>,
    plan: FaultPlan,
}

impl DbReader for FaultyReader {
    fn poll(&mut self) -> Result<Vec<Committed>> {
        self.inner.poll()
    }
    fn read(&self, data: &DataRef, out: &mut Vec<u8>) -> Result<()> {
        match self.plan.take(&[Fault::ReadIo]) {
            Some(_) => Err(injected("read", "EIO", libc::EIO)),
            None => self.inner.read(data, out),
        }
    }
    fn locate(&self, data: &DataRef) -> String {
        self.inner.locate(data)
    }
    fn position(&self) -> u64 {
        self.inner.position()
    }
    fn seek(&mut self, position: u64) {
        self.inner.seek(position)
    }
    fn log_id(&self) -> u64 {
        self.inner.log_id()
    }
}
