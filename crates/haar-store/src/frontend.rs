//! The front-end API: what every way of reaching fields offers — the local [`Store`], a remote
//! server, `dist` (rendezvous hashing over lanes) and `select` (routing by key patterns). The
//! CLI, the server and the bindings talk to `dyn FieldStore`, so front-ends compose by
//! configuration (FDB5's local / remote / dist / select) without knowing each other.

use std::collections::{BTreeMap, BTreeSet};

use haar_core::Key;
use haar_core::request::Request;
use haar_core::schema::SplitKey;

use crate::backend::FieldBytes;
use crate::error::{Error, Result};
pub use crate::report::{is_damage, single_key_request};
pub use crate::store::axes_of;
use crate::store::{
    Checkpoint, DbStats, Field, PurgeReport, RetrieveReport, Store, StoreOptions, WipeReport,
};

/// Receives retrieved fields: the key as stored, the bytes, and the CRC-32C the store verified
/// them against (so a sender forwards it instead of computing it again), or `None` from a
/// store that keeps no checksum (FDB5): nobody pays for a checksum the store does not have.
pub type Sink<'a> = dyn FnMut(&Key, &[u8], Option<u32>) -> Result<()> + 'a;

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
/// method of the same name; front-ends document only how they route. Optional abilities are
/// capabilities ([`FieldStore::checkpoint`]) with a provided answer, never stubs that fail.
///
/// Every method here is one a store may answer better than its provided answer: a capability
/// (`checkpoint`, `provision`, `retrieve_lent`, `as_local`, `as_any`, `unowned_files`,
/// `data_path`, `wipe_unsafe_all`, `list_with_masked`, `read_located`), a form another store
/// routes differently (`archive` of an unsplit key: a server splits it with its own schema) or
/// a cheaper path (`retrieve_keys` batched per server, `axes` and `problems` without listing
/// every field). So a store that wraps others (`select`, `dist`, the C face's `Checked`, a down
/// lane) must decide for each one whether it forwards it: those impls carry
/// `#[deny(clippy::missing_trait_methods)]` and say, per method, forwarded or not and why, as
/// object_store's wrappers do. A wrapper that keeps a provided
/// answer calls the function it is made of ([`retrieve_keys_one_by_one`], [`axes_of`],
/// [`problems_of`], [`refuse_unsafe_wipe`]). Conveniences that no store answers differently
/// live in [`FieldStoreExt`], which nobody implements by hand.
pub trait FieldStore: Send {
    /// A description for messages (`local posix:/data`, `remote host:port`, `dist(3 lanes)`).
    fn describe(&self) -> String;

    /// The schema and normalisation context this store splits keys with.
    fn options(&self) -> &StoreOptions;

    /// Stores `data` under `key`; invisible until [`FieldStore::flush`].
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<()> {
        let split = self.options().split(key)?;
        self.archive_split(&split, data, None)
    }

    /// Stores `data` under a key already split by [`FieldStoreExt::split`]; invisible until
    /// [`FieldStore::flush`]. With `crc`, the CRC-32C the store computes while storing must
    /// equal it, or nothing is stored and the error names the key (the bytes are read once).
    fn archive_split(&mut self, split: &SplitKey, data: &[u8], crc: Option<u32>) -> Result<()>;

    /// Makes every field archived through this handle durable and visible; returns only when
    /// every destination (every replica) has persisted.
    fn flush(&mut self) -> Result<()>;

    /// Capability: a point to go back to with [`FieldStore::discard_since`], or `None` where
    /// archived fields cannot be taken back before the flush (remote and dist: they are
    /// already sent). Ingestion uses it to stream a file's fields as their keys arrive.
    fn checkpoint(&self) -> Option<Checkpoint> {
        None
    }

    /// Forgets every unflushed field archived since `cp` (a checkpoint this store returned):
    /// none of them ever becomes visible. Returns how many were forgotten.
    fn discard_since(&mut self, _cp: &Checkpoint) -> usize {
        0
    }

    /// Makes room for about `bytes` more field data before archiving them (a pmem pool grows
    /// and maps its pages in once; an error now, naming the pool, when they cannot fit). A
    /// hint: stores without a pool do nothing.
    fn provision(&self, _bytes: u64) -> Result<()> {
        Ok(())
    }

    /// Delivers the fields of `req` in request-expansion order; missing combinations are
    /// reported, not errors.
    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> Result<RetrieveReport>;

    /// Capability: the verified bytes of the one field stored under `key`, lent by the backend
    /// without a copy where it can (pmem: the pool mapping) and kept valid by the returned
    /// value, not by this store; with the key as stored. `Ok(None)` when no flushed field has
    /// that key; `None` from stores that cannot lend (remote, dist, FDB5): use
    /// [`FieldStore::retrieve`].
    fn retrieve_lent(&self, _key: &Key) -> Option<Result<Option<(Key, FieldBytes)>>> {
        None
    }

    /// Capability: the local [`Store`] this front-end is, for reads of parts of fields
    /// (extraction, design §16: [`Store::with_field_ranges`]); `None` from stores that hold no
    /// field bytes here (remote, dist, select, FDB5), which are read whole.
    fn as_local(&self) -> Option<&Store> {
        None
    }

    /// Capability: this front-end as [`std::any::Any`], for a facade above this crate that
    /// uses an ability of a concrete front-end this trait cannot name (`haar::extract` reaches
    /// a server's EXTRACT, design §8, through haar-net's `RemoteStore`, and each lane's through
    /// [`crate::dist::DistStore::read_by_lane`], and a `select`'s routes through
    /// [`crate::dist::SelectStore::read_routes`]). `None` by default.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// Delivers the fields of many complete keys as one batch: each found field once, with its
    /// key as stored, in an order the store chooses (dist: grouped per server, one round trip
    /// each); keys with no flushed field are reported missing.
    fn retrieve_keys(&self, keys: &[Key], sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        retrieve_keys_one_by_one(self, keys, sink)
    }

    /// Every flushed field matching `req`, de-duplicated, sorted by key.
    fn list(&self, req: &Request) -> Result<Vec<Field>>;

    /// Capability: [`FieldStore::list`] and, right after each field, the masked copies of its
    /// key the store still holds (archived before it and not yet purged), newest first, each
    /// with the location of its own bytes ([`Store::list_with_masked`]; through a server, its
    /// LIST with `masked`, design §8). `None` from stores that keep no masked copies they can
    /// name (FDB5's databases). Faces call [`FieldStoreExt::list_maybe_masked`].
    fn list_with_masked(&self, _req: &Request) -> Option<Result<Vec<Field>>> {
        None
    }

    /// Capability: the bytes at the location `field.data` (object, offset, length) of database
    /// `field.db`, as a listing located them: how a masked copy, which no key retrieves, is
    /// read. With `crc`, bytes with another CRC-32C are refused (a location is only meaningful
    /// where it was listed). `field.index` and `field.datum` may be empty; a store routing by
    /// key (dist) uses them when given. `None` from stores that cannot read by location.
    /// Faces call [`FieldStoreExt::read_at`].
    fn read_located(&self, _field: &Field, _crc: Option<u32>) -> Option<Result<Vec<u8>>> {
        None
    }

    /// Values present per keyword among the fields matching `req`.
    fn axes(&self, req: &Request) -> Result<BTreeMap<String, BTreeSet<String>>> {
        Ok(axes_of(&self.list(req)?))
    }

    /// Removes fields matching `req` (a dry run unless `doit`).
    fn wipe(&mut self, req: &Request, doit: bool) -> Result<WipeReport>;

    /// Drops masked and wiped fields (a dry run unless `doit`).
    fn purge(&mut self, req: &Request, doit: bool) -> Result<PurgeReport>;

    /// Files the store did not write in the databases a wipe of `req` would remove whole
    /// (FDB5's "unknown URIs"): a wipe with `doit` refuses them and removes nothing. Empty
    /// where the store cannot see them (a server checks its own when it wipes).
    fn unowned_files(&self, _req: &Request) -> Result<Vec<std::path::PathBuf>> {
        Ok(Vec::new())
    }

    /// The file holding `field`'s bytes at `field.data.offset` (posix: its data file; pmem:
    /// the pool), for FDB5's list; `None` where the store has no such file or cannot see it
    /// (memory, servers).
    fn data_path(&self, _field: &Field) -> Result<Option<std::path::PathBuf>> {
        Ok(None)
    }

    /// [`FieldStore::wipe`], also deleting the files the store did not write in the
    /// databases it removes whole (FDB5's `unsafeWipeAll`). Where the store cannot (through
    /// servers), a dry run is the plain wipe's and `doit` is refused, removing nothing.
    fn wipe_unsafe_all(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        refuse_unsafe_wipe(self, req, doit)
    }

    /// Per-database statistics for databases matching `req`.
    fn stats(&self, req: &Request) -> Result<Vec<DbStats>>;

    /// Damage found in the databases matching `req` (corrupt index segments, unusable
    /// catalogue runs), each prefixed with its database: what [`FieldStore::stats`] reports
    /// as `problems`, without counting every field (a local store answers from its
    /// catalogue in O(runs)).
    fn problems(&self, req: &Request) -> Result<Vec<String>> {
        Ok(problems_of(self.stats(req)?))
    }
}

/// Conveniences over [`FieldStore`] for every store and wrapper alike, as object_store's
/// `ObjectStoreExt` over `ObjectStore`: built only on the core methods, implemented once for
/// every [`FieldStore`] (`dyn` included), never by hand, so no wrapper can forget one.
pub trait FieldStoreExt: FieldStore {
    /// Normalises and splits `key` with [`FieldStore::options`]; the error names the key.
    /// Every store splits by its options (a wrapper by its own schema, the one its routing
    /// hashes), so no store answers this differently.
    fn split(&self, key: &Key) -> Result<SplitKey> {
        self.options().split(key)
    }

    /// The damage among [`FieldStore::problems`] for `req` ([`is_damage`]): what a listing of
    /// `req` may be missing fields because of. Notes on databases another program wrote
    /// (FDB5's) are left out.
    fn damage(&self, req: &Request) -> Result<Vec<String>> {
        Ok(self
            .problems(req)?
            .into_iter()
            .filter(|p| is_damage(p))
            .collect())
    }

    /// Delivers the field stored under the one complete `key` ([`FieldStore::retrieve`] of
    /// [`single_key_request`]); an absent one is reported missing.
    fn retrieve_key(&self, key: &Key, sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        self.retrieve(&single_key_request(key), sink)
    }

    /// The listing of `req` for a face: with `masked`, [`FieldStore::list_with_masked`] (each
    /// field followed by its key's masked copies, newest first), else [`FieldStore::list`]. A
    /// store without the capability fails, naming itself: a masked listing is never silently
    /// a plain one.
    fn list_maybe_masked(&self, req: &Request, masked: bool) -> Result<Vec<Field>> {
        if !masked {
            return self.list(req);
        }
        self.list_with_masked(req).unwrap_or_else(|| {
            Err(Error::BadRequest {
                request: req.to_string(),
                reason: format!(
                    "{} keeps no masked copies it can list: list without masked copies",
                    self.describe()
                )
                .into(),
            })
        })
    }

    /// [`FieldStore::read_located`] for a face; a store without the capability fails, naming
    /// itself.
    fn read_at(&self, field: &Field, crc: Option<u32>) -> Result<Vec<u8>> {
        self.read_located(field, crc).unwrap_or_else(|| {
            Err(Error::BadRequest {
                request: format!("{} {}", field.db, located(field)),
                reason: format!(
                    "{} cannot read by location: read a listed field by its key",
                    self.describe()
                )
                .into(),
            })
        })
    }
}

impl<T: FieldStore + ?Sized> FieldStoreExt for T {}

/// [`FieldStore::retrieve_keys`] as the trait provides it: one [`FieldStore::retrieve`] per
/// key, a key delivering nothing reported missing. For stores without a batched path.
pub fn retrieve_keys_one_by_one<S: FieldStore + ?Sized>(
    store: &S,
    keys: &[Key],
    sink: &mut Sink<'_>,
) -> Result<RetrieveReport> {
    let mut total = RetrieveReport::default();
    for key in keys {
        let r = store.retrieve(&single_key_request(key), sink)?;
        total.found += r.found;
        total.bytes += r.bytes;
        if r.found == 0 {
            total.missing.push(key.clone());
        }
        total.problems.extend(r.problems);
    }
    Ok(total)
}

/// A location as messages name it: `object 00000000000000a1 @ 4096+1000`.
pub fn located(field: &Field) -> String {
    format!(
        "object {:016x} @ {}+{}",
        field.data.object, field.data.offset, field.data.length
    )
}

/// [`FieldStore::read_located`] of a local store: the bytes at `field`'s location, checked
/// against `crc` when given.
fn read_located_local(store: &Store, field: &Field, crc: Option<u32>) -> Result<Vec<u8>> {
    let where_ = || format!("database {} {}", field.db, located(field));
    let bytes = store
        .with_field_ranges(field, |read| read(0, field.data.length))?
        .ok_or_else(|| Error::NoStore {
            path: store.backend().describe().into(),
            detail: format!("{} is not stored here: list again", where_()),
        })??;
    if let Some(expected) = crc {
        let actual = haar_persist::crc32c(&bytes);
        if actual != expected {
            return Err(Error::checksum(
                store.backend().describe(),
                where_(),
                actual,
                expected,
                "the listing says",
                "the copy listed there is gone (a purge or a wipe since the listing?): list again",
            ));
        }
    }
    Ok(bytes.to_vec())
}

/// [`FieldStore::wipe_unsafe_all`] as the trait provides it, for a store that cannot see the
/// files it did not write: a dry run is the plain wipe's; `doit` is refused, removing nothing.
pub fn refuse_unsafe_wipe<S: FieldStore + ?Sized>(
    store: &mut S,
    req: &Request,
    doit: bool,
) -> Result<WipeReport> {
    if !doit {
        return store.wipe(req, false);
    }
    Err(Error::BadRequest {
        request: req.to_string(),
        reason: format!(
            "{} cannot wipe files it did not write (--unsafe-wipe-all): wipe on the host that \
             holds the files",
            store.describe()
        )
        .into(),
    })
}

/// The problems of per-database statistics, each prefixed with its database (as
/// [`FieldStore::problems`] reports them).
pub fn problems_of(stats: Vec<DbStats>) -> Vec<String> {
    stats
        .into_iter()
        .flat_map(|s| {
            let db = s.db;
            s.problems
                .into_iter()
                .map(move |p| format!("database {db}: {p}"))
        })
        .collect()
}

/// How a pmem pool's heap divides (design §5.4), from the backend's `info` and the
/// statistics of every database: live + dead + free + other (segment records, tables,
/// space of killed writers). `None` for backends without a free table.
pub fn pool_space(backend_info: &serde_json::Value, dbs: &[DbStats]) -> Option<serde_json::Value> {
    let used = backend_info["heap_used_bytes"].as_u64()?;
    let free = backend_info.get("free_bytes")?.as_u64().unwrap_or(0);
    let live: u64 = dbs.iter().map(|d| d.bytes).sum();
    let dead: u64 = dbs.iter().map(|d| d.dead_bytes).sum();
    Some(serde_json::json!({
        "heap_used_bytes": used,
        "live_bytes": live,
        "dead_bytes": dead,
        "free_bytes": free,
        "free_waiting_bytes": backend_info["free_waiting_bytes"],
        "other_bytes": used.saturating_sub(live + dead + free),
    }))
}

impl FieldStore for Store {
    fn describe(&self) -> String {
        format!("local {}", self.backend().describe())
    }
    fn options(&self) -> &StoreOptions {
        Store::options(self)
    }
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<()> {
        Store::archive(self, key, data)
    }
    fn archive_split(&mut self, split: &SplitKey, data: &[u8], crc: Option<u32>) -> Result<()> {
        Store::archive_split(self, split, data, crc)
    }
    fn flush(&mut self) -> Result<()> {
        Store::flush(self)
    }
    fn checkpoint(&self) -> Option<Checkpoint> {
        Some(Store::checkpoint(self))
    }
    fn discard_since(&mut self, cp: &Checkpoint) -> usize {
        Store::discard_since(self, cp)
    }
    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        Store::retrieve(self, req, |k, d, crc| sink(k, d, Some(crc)))
    }
    fn retrieve_keys(&self, keys: &[Key], sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        Store::retrieve_keys(self, keys, |k, d, crc| sink(k, d, Some(crc)))
    }
    fn provision(&self, bytes: u64) -> Result<()> {
        self.backend().provision(bytes)
    }
    fn retrieve_lent(&self, key: &Key) -> Option<Result<Option<(Key, FieldBytes)>>> {
        Some(Store::retrieve_lent(self, key))
    }
    fn as_local(&self) -> Option<&Store> {
        Some(self)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    fn list(&self, req: &Request) -> Result<Vec<Field>> {
        Store::list(self, req)
    }
    fn list_with_masked(&self, req: &Request) -> Option<Result<Vec<Field>>> {
        Some(Store::list_with_masked(self, req))
    }
    fn read_located(&self, field: &Field, crc: Option<u32>) -> Option<Result<Vec<u8>>> {
        Some(read_located_local(self, field, crc))
    }
    fn axes(&self, req: &Request) -> Result<BTreeMap<String, BTreeSet<String>>> {
        Store::axes(self, req)
    }
    fn wipe(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        Store::wipe(self, req, doit)
    }
    fn unowned_files(&self, req: &Request) -> Result<Vec<std::path::PathBuf>> {
        Store::unowned_files(self, req)
    }
    fn data_path(&self, field: &Field) -> Result<Option<std::path::PathBuf>> {
        self.backend().data_path(&field.db, &field.data)
    }
    fn wipe_unsafe_all(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        Store::wipe_unsafe_all(self, req, doit)
    }
    fn purge(&mut self, req: &Request, doit: bool) -> Result<PurgeReport> {
        Store::purge(self, req, doit)
    }
    fn stats(&self, req: &Request) -> Result<Vec<DbStats>> {
        Store::stats(self, req)
    }
    fn problems(&self, req: &Request) -> Result<Vec<String>> {
        Store::problems(self, req)
    }
}
