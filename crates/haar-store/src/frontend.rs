//! The front-end API: what every way of reaching fields offers — the local [`Store`], a remote
//! server, `dist` (rendezvous hashing over lanes) and `select` (routing by key patterns). The
//! CLI, the server and the bindings talk to `dyn FieldStore`, so front-ends compose by
//! configuration (FDB5's local / remote / dist / select) without knowing each other.

use std::collections::{BTreeMap, BTreeSet};

use haar_core::Key;
use haar_core::request::Request;

use crate::error::Result;
use crate::store::{DbStats, Field, PurgeReport, RetrieveReport, Store, WipeReport};

/// Receives retrieved fields in order.
pub type Sink<'a> = dyn FnMut(&Key, &[u8]) -> Result<()> + 'a;

/// A sink that also receives each field's verified CRC-32C.
pub type CheckedSink<'a> = dyn FnMut(&Key, &[u8], u32) -> Result<()> + 'a;

/// A flushed field, as a notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The field's full key (database, index, datum joined).
    pub key: Key,
    /// Length of the field in bytes.
    pub length: u64,
    /// Where it was flushed (server address or store description).
    pub origin: String,
}

/// The operations every front-end offers. Each method has the semantics of the [`Store`]
/// method of the same name; front-ends document only how they route.
pub trait FieldStore: Send {
    /// A description for messages (`local posix:/data`, `remote host:port`, `dist(3 lanes)`).
    fn describe(&self) -> String;

    /// Stores `data` under `key`; invisible until [`FieldStore::flush`].
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<()>;

    /// Makes every field archived through this handle durable and visible; returns only when
    /// every destination (every replica) has persisted.
    fn flush(&mut self) -> Result<()>;

    /// Delivers the fields of `req` in request-expansion order; missing combinations are
    /// reported, not errors.
    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> Result<RetrieveReport>;

    /// [`FieldStore::retrieve`], also handing the sink each field's CRC-32C (verified against
    /// the bytes), so a server forwards it rather than computing it again.
    fn retrieve_checked(
        &self,
        req: &Request,
        sink: &mut CheckedSink<'_>,
    ) -> Result<RetrieveReport> {
        self.retrieve(req, &mut |k, d| sink(k, d, crc32c::crc32c(d)))
    }

    /// Every flushed field matching `req`, de-duplicated, sorted by key.
    fn list(&self, req: &Request) -> Result<Vec<Field>>;

    /// Values present per keyword among the fields matching `req`.
    fn axes(&self, req: &Request) -> Result<BTreeMap<String, BTreeSet<String>>> {
        let mut axes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in self.list(req)? {
            for (k, v) in f.key().iter().filter(|(_, v)| !v.is_empty()) {
                axes.entry(k.to_string()).or_default().insert(v.to_string());
            }
        }
        Ok(axes)
    }

    /// Removes fields matching `req` (a dry run unless `doit`).
    fn wipe(&mut self, req: &Request, doit: bool) -> Result<WipeReport>;

    /// Drops masked and wiped fields (a dry run unless `doit`).
    fn purge(&mut self, req: &Request, doit: bool) -> Result<PurgeReport>;

    /// Per-database statistics for databases matching `req`.
    fn stats(&self, req: &Request) -> Result<Vec<DbStats>>;
}

impl FieldStore for Store {
    fn describe(&self) -> String {
        format!("local {}", self.backend().describe())
    }
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<()> {
        Store::archive(self, key, data)
    }
    fn flush(&mut self) -> Result<()> {
        Store::flush(self)
    }
    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        Store::retrieve(self, req, sink)
    }
    fn retrieve_checked(
        &self,
        req: &Request,
        sink: &mut CheckedSink<'_>,
    ) -> Result<RetrieveReport> {
        Store::retrieve_checked(self, req, sink)
    }
    fn list(&self, req: &Request) -> Result<Vec<Field>> {
        Store::list(self, req)
    }
    fn axes(&self, req: &Request) -> Result<BTreeMap<String, BTreeSet<String>>> {
        Store::axes(self, req)
    }
    fn wipe(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        Store::wipe(self, req, doit)
    }
    fn purge(&mut self, req: &Request, doit: bool) -> Result<PurgeReport> {
        Store::purge(self, req, doit)
    }
    fn stats(&self, req: &Request) -> Result<Vec<DbStats>> {
        Store::stats(self, req)
    }
}
