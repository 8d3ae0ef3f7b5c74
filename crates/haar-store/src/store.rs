//! The `Store`: the API every front-end (CLI, server, bindings) calls.
//!
//! Owns the semantics shared by all backends: schema split on archive, pending segments until
//! flush, the reader-side catalogue (masking by re-archive, tombstones, snapshots), request
//! matching, retrieve order, wipe and purge. Backends only store bytes and commit logs.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, mpsc};

use haar_core::Key;
use haar_core::request::{Request, Values};
use haar_core::schema::{Schema, SplitKey, Splitter};
use haar_core::value::Context;

use crate::backend::{Backend, DbWriter, FieldBytes};
use crate::catalogue::{Catalogue, MergeOutcome, MergePolicy};
use crate::error::{Error, Result};
use crate::format::{self, DataRef, Entry, FLAG_SNAPSHOT, SegmentBuilder};
use crate::sys::Noted;
// Callers outside the crate name it `store::os_error`.
pub use crate::sys::os_error;

/// One stored field as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Database-level key.
    pub db: Key,
    /// Index-level key.
    pub index: Key,
    /// Datum-level key.
    pub datum: Key,
    /// Where the bytes are.
    pub data: DataRef,
}

impl Field {
    /// The full key (db, index, datum joined).
    pub fn key(&self) -> Key {
        self.db.joined(&self.index).joined(&self.datum)
    }
}

/// The values present per keyword among `fields` (empty values left out).
pub fn axes_of(fields: &[Field]) -> BTreeMap<String, BTreeSet<String>> {
    let mut axes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in fields {
        for (k, v) in f.key().iter().filter(|(_, v)| !v.is_empty()) {
            axes.entry(k.to_string()).or_default().insert(v.to_string());
        }
    }
    axes
}

/// The fields a request lists, with their full keys, indexed by the values of the keywords of
/// the request's combinations (the same keywords in every combination).
struct PartialMatches {
    fields: Vec<(Field, Key)>,
    keywords: Vec<String>,
    by_values: HashMap<Vec<String>, Vec<usize>>,
}

impl PartialMatches {
    fn new(fields: Vec<Field>, combination: &Key) -> PartialMatches {
        let keywords: Vec<String> = combination.iter().map(|(k, _)| k.to_string()).collect();
        let fields: Vec<(Field, Key)> = fields
            .into_iter()
            .map(|f| {
                let k = f.key();
                (f, k)
            })
            .collect();
        let mut by_values: HashMap<Vec<String>, Vec<usize>> = HashMap::new();
        for (i, (_, full)) in fields.iter().enumerate() {
            let values: Option<Vec<String>> = keywords
                .iter()
                .map(|k| full.get(k).map(str::to_string))
                .collect();
            if let Some(v) = values {
                by_values.entry(v).or_default().push(i);
            }
        }
        PartialMatches {
            fields,
            keywords,
            by_values,
        }
    }

    /// The fields whose full key agrees with every keyword of `key`, in listing order.
    fn agreeing_with<'a>(&'a self, key: &Key) -> Vec<(&'a Field, &'a Key)> {
        let same_keywords = key.len() == self.keywords.len()
            && key.iter().zip(&self.keywords).all(|((k, _), kw)| k == kw);
        if same_keywords {
            let values: Vec<String> = key.iter().map(|(_, v)| v.to_string()).collect();
            return self
                .by_values
                .get(&values)
                .map(|ix| {
                    ix.iter()
                        .map(|&i| (&self.fields[i].0, &self.fields[i].1))
                        .collect()
                })
                .unwrap_or_default();
        }
        self.fields
            .iter()
            .filter(|(_, full)| key.iter().all(|(k, v)| full.get(k) == Some(v)))
            .map(|(f, full)| (f, full))
            .collect()
    }
}

/// What a retrieve found.
#[derive(Debug, Default, Clone)]
pub struct RetrieveReport {
    /// Fields delivered.
    pub found: usize,
    /// Bytes delivered.
    pub bytes: u64,
    /// Request combinations with no field, in request order.
    pub missing: Vec<Key>,
    /// Request keywords ignored because no schema rule uses them.
    pub ignored: Vec<String>,
    /// Damage found in the databases of missing fields (corrupt index segments …): a missing
    /// field may have been in them.
    pub problems: Vec<String>,
}

/// What a wipe did (or would do).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct WipeReport {
    /// Databases removed entirely.
    pub databases: Vec<String>,
    /// Fields removed from databases that stay.
    pub fields: usize,
    /// Bytes of the fields removed.
    pub bytes: u64,
}

/// What a purge did (or would do).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct PurgeReport {
    /// Databases examined.
    pub databases: usize,
    /// Masked or wiped fields dropped.
    pub dropped_fields: u64,
    /// Bytes those held.
    pub dropped_bytes: u64,
    /// Bytes returned to the system.
    pub freed_bytes: u64,
}

/// Per-database statistics.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct DbStats {
    /// The database key.
    pub db: String,
    /// Live fields.
    pub fields: u64,
    /// Live bytes.
    pub bytes: u64,
    /// Masked or wiped fields still occupying storage.
    pub dead_fields: u64,
    /// Bytes of those.
    pub dead_bytes: u64,
    /// Segments that could not be read (corruption), with the reason.
    pub problems: Vec<String>,
}

/// Where each database's unflushed fields ended when [`Store::checkpoint`] was called.
#[derive(Debug, Clone)]
pub struct Checkpoint(HashMap<Key, (u64, format::SegmentMark)>);

struct PendingDb {
    writer: Box<dyn DbWriter>,
    builder: SegmentBuilder,
    sequence: u64,
    /// Entries committed since a merge was last asked for.
    since_merge: usize,
}

/// The background thread that merges catalogue runs after flushes (design §3.1).
struct Merger {
    tx: Option<mpsc::Sender<Key>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Merger {
    fn start(backend: Arc<dyn Backend>, policy: MergePolicy) -> Merger {
        let (tx, rx) = mpsc::channel::<Key>();
        // Never set: a closing store finishes the merges it asked for.
        let flag = AtomicBool::new(false);
        let thread = std::thread::Builder::new()
            .name("haar-merge".into())
            .spawn(move || {
                while let Ok(db) = rx.recv() {
                    // Coalesce requests that queued up meanwhile.
                    let mut dbs = vec![db];
                    dbs.extend(rx.try_iter());
                    dbs.sort();
                    dbs.dedup();
                    for db in dbs {
                        if let Err(e) = crate::catalogue::merge(&*backend, &db, &policy, &flag, false)
                        {
                            // Reads stay correct (they replay the log); say why they are slower.
                            eprintln!(
                                "haar: merging the catalogue of database {db} failed: {e} (reads stay correct and replay the commit log; the next flush retries)"
                            );
                        }
                    }
                }
            })
            .ok();
        Merger {
            tx: thread.as_ref().map(|_| tx),
            thread,
        }
    }
}

impl Drop for Merger {
    /// Finishes the merges already asked for (the data is committed; this keeps the next
    /// reader's tail short), then ends the thread.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Options for opening a [`Store`].
#[derive(Clone)]
pub struct StoreOptions {
    /// The schema splitting keys into levels.
    pub schema: Arc<Schema>,
    /// Clock and parameter table for value normalisation.
    pub context: Context,
    /// When the catalogue's runs are merged (design §3.1).
    pub merge: MergePolicy,
}

impl StoreOptions {
    /// Normalises and splits a key with the schema; the error names the key.
    pub fn split(&self, key: &Key) -> Result<SplitKey> {
        self.schema
            .split(key, &self.context)
            .map_err(|e| Error::BadKey {
                key: key.to_string(),
                reason: e.into(),
            })
    }

    /// Resolves a request against the schema: ranges expanded, values normalised, keywords
    /// no schema rule uses removed (returned separately).
    pub fn resolve(&self, req: &Request) -> Result<(Request, Vec<String>)> {
        let resolved = req
            .resolve(&self.schema, &self.context)
            .map_err(|e| bad_request(req, e))?;
        // `mentions` stops at the first rule naming the keyword: building the whole keyword
        // set here cost 10% of a one-field retrieve through the C API (FDB5's schema).
        let mut ignored = Vec::new();
        let mut out = resolved;
        out.params.retain(|p| {
            let keep = self.schema.mentions(&p.keyword);
            if !keep {
                ignored.push(p.keyword.clone());
            }
            keep
        });
        Ok((out, ignored))
    }
}

/// The embedded default schema, shared: every store opened with it holds the same one (a
/// deep copy per open took a tenth of a fresh handle's first retrieve).
fn builtin_schema() -> Arc<Schema> {
    static SHARED: std::sync::OnceLock<Arc<Schema>> = std::sync::OnceLock::new();
    SHARED
        .get_or_init(|| Arc::new(Schema::builtin().clone()))
        .clone()
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            schema: builtin_schema(),
            context: Context::now(),
            merge: MergePolicy::default(),
        }
    }
}

/// A semantic field store over one backend.
///
/// ```
/// use haar_store::{Store, MemoryBackend};
/// use haar_core::{Key, request::Request};
///
/// let mut store = Store::new(MemoryBackend::new());
/// let key = Key::parse("class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,\
///                       type=fc,levtype=sfc,step=0,param=167").unwrap();
/// store.archive(&key, b"GRIB...7777").unwrap();
/// store.flush().unwrap();
/// let req = Request::parse("class=od,expver=1,stream=oper,date=20261121,time=12,\
///                           type=fc,levtype=sfc,step=0,param=167").unwrap();
/// let mut got = Vec::new();
/// let report = store.retrieve(&req, |_, bytes, _crc| { got.extend_from_slice(bytes); Ok(()) }).unwrap();
/// assert_eq!(report.found, 1);
/// assert_eq!(got, b"GRIB...7777");
/// ```
pub struct Store {
    backend: Arc<dyn Backend>,
    opts: StoreOptions,
    pending: HashMap<Key, PendingDb>,
    catalogues: Mutex<HashMap<Key, Catalogue>>,
    /// Started at the first flush that asks for a merge.
    merger: Option<Merger>,
    /// Splits archived keys; reuses the last split when only datum-like values change. Boxed:
    /// it is large and used once per archive, through one pointer.
    splitter: Box<Splitter>,
}

fn bad_request(req: &Request, reason: impl Into<crate::error::Reason>) -> Error {
    Error::BadRequest {
        request: req.to_string(),
        reason: reason.into(),
    }
}

/// Does `key` satisfy every parameter of `req` whose keyword `key` has? With `complete`, a
/// parameter whose keyword `key` lacks fails unless it allows the empty value or `all`.
fn matches(req: &Request, key: &Key, complete: bool) -> bool {
    req.params.iter().all(|p| match key.get(&p.keyword) {
        Some(v) => match &p.values {
            Values::All => true,
            Values::List(list) => list.iter().any(|x| x == v),
        },
        None => {
            !complete
                || matches!(&p.values, Values::All)
                || matches!(&p.values, Values::List(l) if l.iter().any(String::is_empty))
        }
    })
}

/// Stores one field of a split key in the pending segment of its database (opened on first
/// use). Free-standing so that [`Store::archive`] can pass a split borrowed from the store's
/// splitter.
fn archive_parts(
    backend: &Arc<dyn Backend>,
    pending: &mut HashMap<Key, PendingDb>,
    split: &SplitKey,
    data: &[u8],
    crc: Option<u32>,
) -> Result<()> {
    let db = &split.db;
    // One hash of the database key on the hot path (the database is usually open).
    if let Some(p) = pending.get_mut(db) {
        return append_field(p, split, data, crc);
    }
    let writer = backend.open_writer(db)?;
    let builder = SegmentBuilder::new(0, writer.id(), 0, db).map_err(|reason| Error::BadKey {
        key: db.to_string(),
        reason: reason.into(),
    })?;
    let p = pending.entry(db.clone()).or_insert(PendingDb {
        writer,
        builder,
        sequence: 0,
        since_merge: 0,
    });
    append_field(p, split, data, crc)
}

/// Appends the bytes of one field to its database's writer and indexes them in the pending
/// segment; with `crc`, the checksum computed while storing must equal it.
fn append_field(p: &mut PendingDb, split: &SplitKey, data: &[u8], crc: Option<u32>) -> Result<()> {
    let SplitKey { db, index, datum } = split;
    // Refuse an unencodable key before its bytes are stored, so no orphan bytes remain.
    format::check_key(index)
        .and_then(|_| format::check_key(datum))
        .map_err(|reason| Error::BadKey {
            key: db.joined(index).joined(datum).to_string(),
            reason: reason.into(),
        })?;
    let data = p.writer.append(index, data).map_err(|e| {
        with_note(
            e,
            &format!(
                "archiving {}; this field is not stored, fields flushed before are intact",
                db.joined(index).joined(datum)
            ),
        )
    })?;
    if let Some(expected) = crc.filter(|&c| c != data.crc) {
        return Err(Error::checksum(
            "(received bytes)",
            db.joined(index).joined(datum),
            data.crc,
            expected,
            "the sender computed",
            "damaged in transit, not stored: send it again",
        ));
    }
    p.builder
        .push_field(index, datum, &data)
        .map_err(|reason| Error::BadKey {
            key: db.joined(index).joined(datum).to_string(),
            reason: reason.into(),
        })
}

impl Store {
    /// A store over `backend` with the built-in schema.
    pub fn new(backend: impl Backend + 'static) -> Store {
        Store::with_options(Arc::new(backend), StoreOptions::default())
    }

    /// A store over a shared backend with explicit options.
    pub fn with_options(backend: Arc<dyn Backend>, opts: StoreOptions) -> Store {
        Store {
            backend,
            splitter: Box::new(Splitter::new(opts.schema.clone(), opts.context.clone())),
            opts,
            pending: HashMap::new(),
            catalogues: Mutex::new(HashMap::new()),
            merger: None,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The schema and normalisation context keys are split with.
    pub fn options(&self) -> &StoreOptions {
        &self.opts
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.opts.schema
    }

    /// The normalisation context (clock, parameter table).
    pub fn context(&self) -> &Context {
        &self.opts.context
    }

    /// Normalises and splits a key with the schema.
    pub fn split(&self, key: &Key) -> Result<SplitKey> {
        self.opts.split(key)
    }

    /// Stores `data` under `key`. Invisible to every reader until [`Store::flush`].
    pub fn archive(&mut self, key: &Key, data: &[u8]) -> Result<()> {
        // The split is borrowed from the splitter: no key is cloned on the hot path.
        let split = self.splitter.split(key).map_err(|e| Error::BadKey {
            key: key.to_string(),
            reason: e.into(),
        })?;
        archive_parts(&self.backend, &mut self.pending, split, data, None)
    }

    /// [`Store::archive`] for a key already split by [`Store::split`]. With `crc` (bytes
    /// whose CRC-32C the sender computed, e.g. the network server's), the checksum the backend
    /// computes while storing them must equal it, or the field is not indexed and the error
    /// names the key: the bytes are read once.
    pub fn archive_split(&mut self, split: &SplitKey, data: &[u8], crc: Option<u32>) -> Result<()> {
        archive_parts(&self.backend, &mut self.pending, split, data, crc)
    }

    /// Makes every field archived so far durable and visible, atomically per database.
    ///
    /// On error the databases already committed stay committed; the failing database's
    /// unflushed fields are dropped (the error says which) and must be archived again.
    pub fn flush(&mut self) -> Result<()> {
        let dbs: Vec<Key> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.builder.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for db in dbs {
            let p = self.pending.get_mut(&db).unwrap();
            let next = SegmentBuilder::new(0, p.writer.id(), p.sequence + 1, &db)
                .expect("database key already encoded once");
            let builder = std::mem::replace(&mut p.builder, next);
            let n = builder.len();
            let segment = builder.finish();
            if let Err(e) = p.writer.commit(&segment) {
                self.pending.remove(&db);
                return Err(annotate_flush(e, &db, n));
            }
            p.sequence += 1;
            p.since_merge += n;
            if p.since_merge >= self.opts.merge.threshold && self.opts.merge.background {
                p.since_merge = 0;
                let backend = self.backend.clone();
                let policy = self.opts.merge;
                let m = self
                    .merger
                    .get_or_insert_with(|| Merger::start(backend, policy));
                if let Some(tx) = &m.tx {
                    let _ = tx.send(db.clone());
                }
            }
        }
        Ok(())
    }

    /// Merges the catalogue runs of every database matching `req` now (design §3.1): with
    /// `full`, into one run each; otherwise as the merge policy says. Returns what was done
    /// per database. Background merging after flushes does the same without being asked.
    pub fn compact(&self, req: &Request, full: bool) -> Result<Vec<(Key, MergeOutcome)>> {
        let (resolved, _) = self.resolve(req)?;
        let stop = AtomicBool::new(false);
        let mut out = Vec::new();
        for db in self.candidate_dbs(&resolved)? {
            let o = crate::catalogue::merge(&*self.backend, &db, &self.opts.merge, &stop, full)?;
            out.push((db, o));
        }
        Ok(out)
    }

    /// Fields archived but not yet flushed.
    pub fn unflushed(&self) -> usize {
        self.pending.values().map(|p| p.builder.len()).sum()
    }

    /// A point to go back to with [`Store::discard_since`]: where every database's unflushed
    /// fields end now.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint(
            (self.pending.iter())
                .map(|(db, p)| (db.clone(), (p.sequence, p.builder.mark())))
                .collect(),
        )
    }

    /// Forgets every field archived since `cp` that is not flushed: none of them ever becomes
    /// visible, and fields archived before `cp` are flushed as usual. (Fields flushed since
    /// `cp` stay: a flush is the commit.) The forgotten fields' bytes stay where the backend
    /// appended them, referenced by no index, as after a writer killed before its flush.
    /// Returns how many fields were forgotten.
    pub fn discard_since(&mut self, cp: &Checkpoint) -> usize {
        let mut n = 0;
        for (db, p) in &mut self.pending {
            let before = p.builder.len();
            match cp.0.get(db) {
                Some(&(sequence, mark)) if sequence == p.sequence => p.builder.truncate(mark),
                // New since `cp`, or flushed since: everything unflushed came after `cp`.
                _ => {
                    p.builder = SegmentBuilder::new(0, p.writer.id(), p.sequence, db)
                        .expect("database key already encoded once")
                }
            }
            n += before - p.builder.len();
        }
        n
    }

    /// Releases writers (and their locks). Unflushed fields are discarded.
    pub fn close_writers(&mut self) {
        self.pending.clear();
    }

    /// Resolves a request against the schema: ranges expanded, values normalised, keywords
    /// no schema rule uses removed (returned separately).
    pub fn resolve(&self, req: &Request) -> Result<(Request, Vec<String>)> {
        self.opts.resolve(req)
    }

    fn with_catalogue<T>(
        &self,
        db: &Key,
        f: impl FnOnce(&mut Catalogue) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut cats = self.catalogues.lock().unwrap();
        if let Some(cat) = cats.get_mut(db) {
            cat.refresh(&*self.backend, db)?;
        } else {
            match self.backend.open_reader(db)? {
                Some(r) => {
                    let cat = Catalogue::open(&*self.backend, db, r, self.opts.merge.threshold)?;
                    cats.insert(db.clone(), cat);
                }
                None => return Ok(None),
            }
        }
        f(cats.get_mut(db).unwrap()).map(Some)
    }

    /// Databases whose key is compatible with `req` (resolved).
    fn candidate_dbs(&self, req: &Request) -> Result<Vec<Key>> {
        let mut dbs: Vec<Key> = self
            .backend
            .databases()?
            .into_iter()
            .filter(|db| matches(req, db, false))
            .collect();
        dbs.sort();
        dbs.dedup();
        Ok(dbs)
    }

    /// Every field matching a resolved request, sorted by key.
    fn list_resolved(&self, req: &Request) -> Result<Vec<Field>> {
        let mut out = Vec::new();
        for db in self.candidate_dbs(req)? {
            self.with_catalogue(&db, |cat| {
                out.extend(cat.list(&*self.backend, &db, req)?.into_iter().map(
                    |(index, datum, data)| Field {
                        db: db.clone(),
                        index,
                        datum,
                        data,
                    },
                ));
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// Every flushed field matching `req`, sorted by database, index and datum key.
    pub fn list(&self, req: &Request) -> Result<Vec<Field>> {
        let (req, _) = self.resolve(req)?;
        self.list_resolved(&req)
    }

    /// [`Store::list`] and, after each field, the masked copies of its key that are still
    /// stored (archived before it and not purged; newest first), as FDB5 lists without
    /// deduplication. Replays each matching database's commit log (design §3.1): O(log).
    pub fn list_with_masked(&self, req: &Request) -> Result<Vec<Field>> {
        let (req, _) = self.resolve(req)?;
        let mut masked: HashMap<(Key, Key, Key), Vec<DataRef>> = HashMap::new();
        for db in self.candidate_dbs(&req)? {
            for (index, datum, data) in crate::catalogue::masked(&*self.backend, &db)? {
                masked
                    .entry((db.clone(), index, datum))
                    .or_default()
                    .push(data);
            }
        }
        let mut out = Vec::new();
        for f in self.list_resolved(&req)? {
            let older = masked.remove(&(f.db.clone(), f.index.clone(), f.datum.clone()));
            let copy = |data| Field { data, ..f.clone() };
            let older: Vec<Field> = older.into_iter().flatten().map(copy).collect();
            out.push(f);
            out.extend(older);
        }
        Ok(out)
    }

    /// The values present for each keyword among fields matching `req`.
    pub fn axes(&self, req: &Request) -> Result<BTreeMap<String, BTreeSet<String>>> {
        Ok(axes_of(&self.list(req)?))
    }

    /// Delivers the verified bytes of the field of each of `keys` to `sink` with its CRC-32C,
    /// in the order given. Each key is matched as a one-key request is by [`Store::retrieve`]:
    /// the field with exactly that key first, else every field that agrees with it (a key
    /// that omits an optional keyword); keys matching nothing are reported missing. The bytes
    /// are lent by the backend where it can (pmem: straight from the pool mapping, no copy),
    /// so this is the fastest way to read fields whose keys are known. `sink` runs after the
    /// store's locks are released and may call back into the store.
    pub fn retrieve_keys(
        &self,
        keys: &[Key],
        mut sink: impl FnMut(&Key, &[u8], u32) -> Result<()>,
    ) -> Result<RetrieveReport> {
        let mut report = RetrieveReport::default();
        let mut buf = Vec::new();
        for key in keys {
            if let Ok(split) = self.opts.schema.split(key, &self.opts.context) {
                if self.deliver(&split, key, &mut buf, &mut report, &mut sink)? {
                    continue;
                }
                // The key names every keyword of its rule, so no other field can agree with
                // it: the miss is final (and cheap, for pollers).
                if split.full().iter().all(|(k, _)| key.get(k).is_some()) {
                    report.missing.push(key.clone());
                    continue;
                }
            }
            let r = self.retrieve(&crate::report::single_key_request(key), &mut sink)?;
            report.found += r.found;
            report.bytes += r.bytes;
            if r.found == 0 {
                report.missing.push(key.clone());
            }
            report.problems.extend(r.problems);
        }
        report.problems.sort();
        report.problems.dedup();
        Ok(report)
    }

    /// The verified bytes of the field stored under the complete key `key`, lent by the
    /// backend where it can (pmem: zero-copy from the pool, valid as long as the value lives),
    /// with the key as stored; `None` if no flushed field has that key.
    pub fn retrieve_lent(&self, key: &Key) -> Result<Option<(Key, FieldBytes)>> {
        let split = self.split(key)?;
        Ok(self
            .fetch(&split.db, &split.index, &split.datum, Vec::new())?
            .map(|(bytes, _crc)| (split.full(), bytes)))
    }

    /// Runs `f` with a reader of byte ranges of the flushed field `field` (as [`Store::list`]
    /// returned it): `read(off, len)` gives bytes `off..off + len` of the field, lent by the
    /// backend where it can (pmem: the pool mapping, no copy), read alone otherwise (posix: a
    /// `pread` of those bytes). For extraction (design §16): only those bytes are read, so
    /// they are not checked against the field's CRC-32C. `None` if `field.db` is gone.
    pub fn with_field_ranges<T>(
        &self,
        field: &Field,
        f: impl FnOnce(&dyn Fn(u64, u64) -> Result<FieldBytes>) -> T,
    ) -> Result<Option<T>> {
        self.with_catalogue(&field.db, |cat| {
            Ok(f(&|off, len| cat.read_range(&field.data, off, len)))
        })
    }

    /// The directory of `db`'s catalogue (design §3.1), where caches beside it live (the
    /// extraction's `jumps`, §16); `None` where the backend keeps none.
    pub fn catalogue_dir(&self, db: &Key) -> Result<Option<PathBuf>> {
        self.backend.catalogue_dir(db)
    }

    /// Hands the field of a split key to `sink` if it is flushed (counting it in `report`);
    /// `buf` is the scratch buffer passed from read to read.
    /// `asked` is the key as the caller gave it: handed back as is when it already is the
    /// stored form (no key is built on the one-field-at-a-time path).
    fn deliver(
        &self,
        split: &SplitKey,
        asked: &Key,
        buf: &mut Vec<u8>,
        report: &mut RetrieveReport,
        sink: &mut impl FnMut(&Key, &[u8], u32) -> Result<()>,
    ) -> Result<bool> {
        let scratch = std::mem::take(buf);
        let Some((bytes, crc)) = self.fetch(&split.db, &split.index, &split.datum, scratch)? else {
            return Ok(false);
        };
        report.found += 1;
        report.bytes += bytes.len() as u64;
        if split.is_full(asked) {
            sink(asked, &bytes, crc)?;
        } else {
            sink(&split.full(), &bytes, crc)?;
        }
        *buf = bytes.into_buffer();
        Ok(true)
    }

    /// The verified bytes of one field of a split key (lent where the backend can) and their
    /// CRC-32C.
    fn fetch(
        &self,
        db: &Key,
        index: &Key,
        datum: &Key,
        scratch: Vec<u8>,
    ) -> Result<Option<(FieldBytes, u32)>> {
        Ok(self
            .with_catalogue(db, |cat| {
                cat.fetch(&*self.backend, db, index, datum, scratch)
            })?
            .flatten())
    }

    /// Delivers every field of `req` to `sink` in request-expansion order (first keyword
    /// slowest). Combinations with no field are listed in the report; the caller decides
    /// whether that is an error.
    ///
    /// The sink also receives each field's CRC-32C, already verified against the bytes, so a
    /// sender forwards it instead of computing it again.
    pub fn retrieve(
        &self,
        req: &Request,
        mut sink: impl FnMut(&Key, &[u8], u32) -> Result<()>,
    ) -> Result<RetrieveReport> {
        let (resolved, ignored) = self.resolve(req)?;
        let mut report = RetrieveReport {
            ignored,
            ..RetrieveReport::default()
        };
        let mut buf = Vec::new();
        let has_all = resolved
            .params
            .iter()
            .any(|p| matches!(p.values, Values::All));
        if has_all {
            for f in self.list_resolved(&resolved)? {
                let key = f.key();
                if let Some((bytes, crc)) =
                    self.fetch(&f.db, &f.index, &f.datum, std::mem::take(&mut buf))?
                {
                    report.found += 1;
                    report.bytes += bytes.len() as u64;
                    sink(&key, &bytes, crc)?;
                    buf = bytes.into_buffer();
                }
            }
            return Ok(report);
        }
        let mut listed: Option<PartialMatches> = None;
        for key in resolved.expand() {
            // Fast path: the combination is a complete key of a schema rule.
            if let Ok(split) = self.opts.schema.split(&key, &self.opts.context)
                && self.deliver(&split, &key, &mut buf, &mut report, &mut sink)?
            {
                continue;
            }
            // Partial key: every stored field that agrees with it, in key order. The listing
            // is made once and indexed by the values of the combination's keywords, so a
            // request of N partial combinations over M fields costs N + M, not N x M.
            if listed.is_none() {
                listed = Some(PartialMatches::new(self.list_resolved(&resolved)?, &key));
            }
            let mut any = false;
            let matches = listed.as_ref().unwrap().agreeing_with(&key);
            for (f, full) in matches {
                if let Some((bytes, crc)) =
                    self.fetch(&f.db, &f.index, &f.datum, std::mem::take(&mut buf))?
                {
                    any = true;
                    report.found += 1;
                    report.bytes += bytes.len() as u64;
                    sink(full, &bytes, crc)?;
                    buf = bytes.into_buffer();
                }
            }
            if !any {
                report.missing.push(key);
            }
        }
        self.add_problems(&mut report)?;
        Ok(report)
    }

    /// Adds the damage found in the databases of missing fields to a report: a missing field
    /// may have been in them.
    fn add_problems(&self, report: &mut RetrieveReport) -> Result<()> {
        let mut seen = HashSet::new();
        for key in &report.missing {
            let Ok(split) = self.opts.schema.split(key, &self.opts.context) else {
                continue;
            };
            if seen.insert(split.db.clone())
                && let Some(p) = self.with_catalogue(&split.db, |c| Ok(c.problems.clone()))?
            {
                report
                    .problems
                    .extend(p.into_iter().map(|p| format!("database {}: {p}", split.db)));
            }
        }
        Ok(())
    }

    /// Removes fields matching `req`. A database the request selects as a whole (every
    /// request keyword is a database-level keyword) is removed with its files; otherwise the
    /// matching fields are hidden by tombstones (storage is freed by [`Store::purge`]).
    /// With `doit == false` nothing changes and the report says what would.
    ///
    /// A database to be removed whole that holds files haar did not write
    /// ([`Store::unowned_files`]) makes the wipe fail, naming them, before anything is
    /// removed (FDB5's "Cannot fully wipe unclean FDB database");
    /// [`Store::wipe_unsafe_all`] removes them too.
    pub fn wipe(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        self.wipe_with(req, doit, false)
    }

    /// [`Store::wipe`], removing the files haar did not write in the databases removed whole
    /// along with them (FDB5's `unsafeWipeAll`, `haar wipe --unsafe-wipe-all`).
    pub fn wipe_unsafe_all(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        self.wipe_with(req, doit, true)
    }

    /// The files haar did not write in the databases a wipe of `req` would remove whole,
    /// sorted: what [`Store::wipe`] refuses to delete.
    pub fn unowned_files(&self, req: &Request) -> Result<Vec<PathBuf>> {
        let (resolved, _) = self.resolve(req)?;
        let mut out = Vec::new();
        for db in self.candidate_dbs(&resolved)? {
            if resolved.params.iter().all(|p| db.get(&p.keyword).is_some()) {
                out.extend(self.backend.unowned_files(&db)?);
            }
        }
        Ok(out)
    }

    fn wipe_with(&mut self, req: &Request, doit: bool, unsafe_all: bool) -> Result<WipeReport> {
        let (resolved, _) = self.resolve(req)?;
        if resolved.params.is_empty() {
            return Err(bad_request(
                req,
                "wipe needs at least one keyword; to remove everything, name the databases (see `haar list`)",
            ));
        }
        // What to do to each database, decided (and checked) before anything is removed.
        let mut plan = Vec::new();
        let listed = self.list_resolved(&resolved)?;
        for db in self.candidate_dbs(&resolved)? {
            let whole = resolved.params.iter().all(|p| db.get(&p.keyword).is_some());
            let fields: Vec<Field> = listed.iter().filter(|f| f.db == db).cloned().collect();
            plan.push((db, whole, fields));
        }
        if doit && !unsafe_all {
            let mut unowned = Vec::new();
            for (db, whole, _) in &plan {
                if *whole {
                    unowned.extend(self.backend.unowned_files(db)?);
                }
            }
            crate::report::refuse_unowned(req, &unowned)?;
        }
        if doit {
            // A wipe killed after its commit (the rename) left its directory: finish it, also
            // when no database the request names is left.
            self.backend.clear_wiped();
        }
        let mut report = WipeReport::default();
        for (db, whole, fields) in plan {
            if whole {
                report.databases.push(db.to_string());
                report.fields += fields.len();
                report.bytes += fields.iter().map(|f| f.data.length).sum::<u64>();
                if doit {
                    self.pending.remove(&db);
                    let backend = self.backend.clone();
                    retry_when_full(&*backend, &db, || backend.wipe_database(&db))?;
                    self.catalogues.lock().unwrap().remove(&db);
                }
            } else if !fields.is_empty() {
                report.fields += fields.len();
                report.bytes += fields.iter().map(|f| f.data.length).sum::<u64>();
                if doit {
                    let backend = self.backend.clone();
                    retry_when_full(&*backend, &db, || {
                        let mut writer = backend.open_writer(&db)?;
                        let mut b =
                            SegmentBuilder::new(0, writer.id(), 0, &db).map_err(|reason| {
                                Error::BadKey {
                                    key: db.to_string(),
                                    reason: reason.into(),
                                }
                            })?;
                        for f in &fields {
                            b.push(&Entry::Tombstone {
                                index: f.index.clone(),
                                datum: f.datum.clone(),
                            })
                            .expect("keys were decoded from storage");
                        }
                        writer.commit(&b.finish())
                    })?;
                }
            }
        }
        Ok(report)
    }

    /// Drops masked and wiped fields of the databases matching `req` from storage.
    pub fn purge(&mut self, req: &Request, doit: bool) -> Result<PurgeReport> {
        let (resolved, _) = self.resolve(req)?;
        let mut report = PurgeReport::default();
        for db in self.candidate_dbs(&resolved)? {
            report.databases += 1;
            let backend = self.backend.clone();
            let Some((dead_fields, dead_bytes)) = self.with_catalogue(&db, |c| {
                let full = c.full(&*backend, &db)?;
                Ok((full.dead.fields, full.dead.bytes))
            })?
            else {
                continue;
            };
            report.dropped_fields += dead_fields;
            report.dropped_bytes += dead_bytes;
            if !doit || dead_fields == 0 {
                continue;
            }
            self.pending.remove(&db);
            let backend = self.backend.clone();
            report.freed_bytes += retry_when_full(&*backend, &db, || self.purge_db(&db))?;
            self.catalogues.lock().unwrap().remove(&db);
            // The snapshot starts a new base: merge it now rather than make every reader
            // replay it. A failure only leaves reads slower.
            let _ = crate::catalogue::merge(
                &*self.backend,
                &db,
                &self.opts.merge,
                &AtomicBool::new(false),
                true,
            );
        }
        Ok(report)
    }

    /// Purges one database under its exclusive lock (design §4.6): frees the data objects
    /// that hold no live field first, then commits a snapshot of the live fields, copying
    /// those that share an object with dead ones where the backend reclaims space and the
    /// storage has room for the copy; returns the bytes freed.
    fn purge_db(&self, db: &Key) -> Result<u64> {
        let mut ex = self.backend.exclusive(db)?;
        // Re-read from scratch under the lock: the view must be complete.
        let reader = self.backend.open_reader(db)?.ok_or_else(|| Error::Busy {
            db: db.to_string(),
            detail: "wiped during purge".into(),
        })?;
        let mut cat = Catalogue::open(&*self.backend, db, reader, self.opts.merge.threshold)?;
        let full = cat.full(&*self.backend, db)?;
        let copy = self.backend.capabilities().reclaims_space;
        let mut freed = 0;
        if copy {
            let live: HashSet<u64> = full.fields.values().map(|r| r.object).collect();
            let dead: HashSet<u64> = full
                .dead
                .by_object
                .iter()
                .filter(|&(o, &n)| n > 0 && !live.contains(o))
                .map(|(&o, _)| o)
                .collect();
            freed += ex.discard(&dead)?;
        }
        let live = match self.purge_snapshot(&mut *ex, &cat, &full, db, copy) {
            // No room to copy: the live fields stay where they are (design §4.6).
            Err(e) if copy && crate::reserve::is_full(&e) => {
                self.purge_snapshot(&mut *ex, &cat, &full, db, false)?
            }
            r => r?,
        };
        freed += ex.reclaim(&live)?;
        Ok(freed)
    }

    /// Commits the snapshot of a purge: every live field of `full`, those in objects that
    /// also hold dead fields copied into the snapshot writer's object when `copy`; returns the
    /// objects the snapshot names.
    fn purge_snapshot(
        &self,
        ex: &mut dyn crate::backend::Exclusive,
        cat: &Catalogue,
        full: &crate::catalogue::Full,
        db: &Key,
        copy: bool,
    ) -> Result<HashSet<u64>> {
        let mut writer = ex.snapshot_writer()?;
        let mut b = SegmentBuilder::new(FLAG_SNAPSHOT, writer.id(), 0, db).map_err(|reason| {
            Error::BadKey {
                key: db.to_string(),
                reason: reason.into(),
            }
        })?;
        let mut live = HashSet::new();
        live.insert(writer.id());
        let mut entries: Vec<(&(Key, Key), &DataRef)> = full.fields.iter().collect();
        entries.sort_by_key(|(_, r)| (r.object, r.offset));
        let mut buf = Vec::new();
        let mut moved = Vec::new();
        for ((index, datum), data) in entries {
            let mut r = *data;
            if copy && full.dead.by_object.get(&data.object).copied().unwrap_or(0) > 0 {
                buf.clear();
                cat.reader.read(data, &mut buf)?;
                r = writer.append(index, &buf)?;
                // A posix writer of a version 2 database appends to a data file per index,
                // each its own object (design §4.1): every one is live.
                live.insert(r.object);
            } else {
                live.insert(data.object);
            }
            moved.push(Entry::Field {
                index: index.clone(),
                datum: datum.clone(),
                data: r,
            });
        }
        for e in &moved {
            b.push(e).expect("keys were decoded from storage");
        }
        writer.commit(&b.finish())?;
        Ok(live)
    }

    /// The damage found in the databases matching `req` (as [`Store::stats`] reports it),
    /// each prefixed with its database; costs O(runs), not O(fields).
    pub fn problems(&self, req: &Request) -> Result<Vec<String>> {
        let (resolved, _) = self.resolve(req)?;
        let mut out = Vec::new();
        for db in self.candidate_dbs(&resolved)? {
            if let Some(p) = self.with_catalogue(&db, |c| Ok(c.problems.clone()))? {
                out.extend(p.into_iter().map(|p| format!("database {db}: {p}")));
            }
        }
        // A database FDB5 wrote is named as such, not as damage (its message says so).
        out.extend(self.backend.damaged_databases().into_iter().map(|why| {
            if crate::report::is_damage(&why) {
                format!("unreadable database: {why}")
            } else {
                why
            }
        }));
        Ok(out)
    }

    /// Statistics for every database matching `req`.
    pub fn stats(&self, req: &Request) -> Result<Vec<DbStats>> {
        let (resolved, _) = self.resolve(req)?;
        let mut out = Vec::new();
        for db in self.candidate_dbs(&resolved)? {
            if let Some(s) = self.with_catalogue(&db, |c| {
                let full = c.full(&*self.backend, &db)?;
                Ok(DbStats {
                    db: db.to_string(),
                    fields: full.fields.len() as u64,
                    bytes: full.fields.values().map(|r| r.length).sum(),
                    dead_fields: full.dead.fields,
                    dead_bytes: full.dead.bytes,
                    problems: c.problems.clone(),
                })
            })? {
                out.push(s);
            }
        }
        // A database whose key cannot be read is reported, whatever the request: it might
        // match (corruption is never absence).
        out.extend(self.backend.damaged_databases().into_iter().map(|why| {
            DbStats {
                db: if crate::report::is_damage(&why) {
                    "(unreadable database)"
                } else {
                    "(FDB5's database)"
                }
                .into(),
                problems: vec![why],
                ..DbStats::default()
            }
        }));
        Ok(out)
    }
}

/// Runs `op`, a wipe's or purge's change to `db`; when it fails for want of space, gives back
/// the backend's reserve and runs it once more (design §4.7). `op` must leave nothing visible
/// when it fails (each is one commit).
fn retry_when_full<T>(
    backend: &dyn Backend,
    db: &Key,
    mut op: impl FnMut() -> Result<T>,
) -> Result<T> {
    match op() {
        Err(e) if crate::reserve::is_full(&e) && backend.release_reserve(db) => op(),
        r => r,
    }
}

fn annotate_flush(e: Error, db: &Key, n: usize) -> Error {
    let note = format!(
        "flush of database {db} failed; its {n} field(s) archived since the last flush are not stored and must be archived again; everything flushed before is intact"
    );
    with_note(e, &note)
}

/// Adds what the store was doing (key, consequence) to an error's message.
fn with_note(e: Error, note: &str) -> Error {
    match e {
        Error::Io { op, path, source } => Error::Io {
            op,
            path,
            source: io::Error::new(
                source.kind(),
                Noted {
                    source,
                    note: note.to_string(),
                },
            ),
        },
        Error::PoolFull { path, detail } => Error::PoolFull {
            path,
            detail: format!("{detail} ({note})"),
        },
        other => other,
    }
}
