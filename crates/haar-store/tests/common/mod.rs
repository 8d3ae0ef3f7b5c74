//! Test stand-ins shared by the dist tests: an in-process lane that can be switched off like
//! a server that died, and counts the read calls that reach it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use haar_core::Key;
use haar_core::request::Request;
use haar_core::schema::SplitKey;
use haar_store::{
    DbStats, Error, Field, FieldStore, PurgeReport, RetrieveReport, Sink, Store, StoreOptions,
    WipeReport,
};

/// A lane that can be switched off, like a server that died.
pub struct Switchable {
    pub inner: Store,
    pub down: Arc<AtomicBool>,
    pub name: String,
    /// Read calls that reached this lane (each is one round trip to a server).
    pub reads: Arc<AtomicUsize>,
}

impl Switchable {
    fn check(&self) -> haar_store::Result<()> {
        if self.down.load(Ordering::SeqCst) {
            Err(Error::io(
                "connect",
                &self.name,
                std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            ))
        } else {
            Ok(())
        }
    }
}

impl FieldStore for Switchable {
    fn describe(&self) -> String {
        self.name.clone()
    }
    fn options(&self) -> &StoreOptions {
        self.inner.options()
    }
    fn archive_split(
        &mut self,
        split: &SplitKey,
        data: &[u8],
        crc: Option<u32>,
    ) -> haar_store::Result<()> {
        self.check()?;
        self.inner.archive_split(split, data, crc)
    }
    fn flush(&mut self) -> haar_store::Result<()> {
        self.check()?;
        self.inner.flush()
    }
    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> haar_store::Result<RetrieveReport> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        FieldStore::retrieve(&self.inner, req, sink)
    }
    fn retrieve_keys(
        &self,
        keys: &[Key],
        sink: &mut Sink<'_>,
    ) -> haar_store::Result<RetrieveReport> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.check()?;
        FieldStore::retrieve_keys(&self.inner, keys, sink)
    }
    fn list(&self, req: &Request) -> haar_store::Result<Vec<Field>> {
        self.check()?;
        self.inner.list(req)
    }
    fn wipe(&mut self, req: &Request, doit: bool) -> haar_store::Result<WipeReport> {
        self.check()?;
        self.inner.wipe(req, doit)
    }
    fn purge(&mut self, req: &Request, doit: bool) -> haar_store::Result<PurgeReport> {
        self.check()?;
        self.inner.purge(req, doit)
    }
    fn stats(&self, req: &Request) -> haar_store::Result<Vec<DbStats>> {
        self.check()?;
        self.inner.stats(req)
    }
}
