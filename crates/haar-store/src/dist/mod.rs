//! `dist` and `select` front-ends (design §7): composition over [`FieldStore`] lanes.
//!
//! `DistStore` places each field on lanes ranked by rendezvous hashing of its database key (or
//! full key), with `replicas` copies and the failover rules of the design. `SelectStore` routes
//! by key patterns. Both are pure composition: they know nothing of servers or backends.
//!
//! This file owns the lanes, their placement and failover policy, and what a `DistStore` does
//! on every lane (archive, flush, list, wipe, purge). The reads are split by concern:
//! `retrieve.rs` streams a retrieve in request order (design §7.1), `read.rs` reads through an
//! operation a facade names (`DistStore::read_by_lane`, the lanes of a round at once), and
//! `select.rs` is the `select` front-end, which shares nothing with `dist` but the wipe and
//! purge sums.

mod read;
mod retrieve;
mod select;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use haar_core::request::{Request, Values};
use haar_core::schema::{Schema, SplitKey};
use haar_core::value::Context;
use haar_core::{Key, rendezvous};

use crate::backend::FieldBytes;
use crate::error::{Error, LaneFailures, Result};
use crate::frontend::{FieldStore, FieldStoreExt, Sink};
use crate::store::axes_of;
use crate::store::{
    Checkpoint, DbStats, Field, PurgeReport, RetrieveReport, Store, StoreOptions, WipeReport,
};

pub use read::{LaneRead, requests_for};
pub use select::SelectStore;

/// What the rendezvous hash places.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// A database lives on one lane (and its replicas).
    #[default]
    Database,
    /// Fields are spread individually (NEXTGenIO's FDB5 distribution).
    Field,
}

struct Lane {
    name: String,
    /// In a mutex only so that [`DistStore::read_by_lane`] can hand each lane to a thread of
    /// its own: a lane (a server connection, `RemoteStore`) is `Send` but not `Sync`, and a
    /// mutex is the safe way to lend a `&self` method's lane to one other thread. Never
    /// contended: see [`Lane::lock`].
    store: Mutex<Box<dyn FieldStore>>,
    /// This handle archived to the lane since its last successful flush.
    dirty: bool,
    /// The lane failed during this handle's life; archives skip it.
    down: bool,
}

impl Lane {
    /// The lane, for a read. Nobody else holds it: `DistStore` is not `Sync` (one thread uses
    /// it), `read_by_lane` gives each lane to at most one of its threads and joins them before
    /// it returns, and a retrieve's nested batch only asks lanes its keys have not been asked,
    /// never one whose batch is streaming. A lane found held is that reasoning broken: a panic
    /// that says so, not a deadlock.
    fn lock(&self) -> MutexGuard<'_, Box<dyn FieldStore>> {
        match self.store.try_lock() {
            Ok(lane) => lane,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                panic!("dist lane {} asked while a read of it is open", self.name)
            }
        }
    }

    /// The lane, for a write (`&mut self`: no lock taken).
    fn get_mut(&mut self) -> &mut dyn FieldStore {
        &mut **self.store.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Rendezvous-hash distribution over lanes, with replication.
pub struct DistStore {
    lanes: Vec<Lane>,
    names: Vec<String>,
    replicas: usize,
    placement: Placement,
    opts: StoreOptions,
    /// Not `Sync`, as its lanes are not: two threads retrieving at once could each hold a lane
    /// the other's nested batch needs ([`Lane::lock`]).
    _one_thread: PhantomData<Cell<()>>,
}

/// Errors worth trying the next lane for (the lane, not the request, is at fault).
fn lane_fault(e: &Error) -> bool {
    matches!(
        e,
        Error::Io { .. }
            | Error::Net { .. }
            | Error::Lanes { .. }
            | Error::PoolFull { .. }
            | Error::Busy { .. }
    )
}

impl DistStore {
    /// Distributes over `lanes` (name, store) with `replicas` copies of every field.
    pub fn new(
        lanes: Vec<(String, Box<dyn FieldStore>)>,
        replicas: usize,
        placement: Placement,
        schema: Arc<Schema>,
        ctx: Context,
    ) -> Result<DistStore> {
        if lanes.is_empty() {
            return Err(Error::Config("dist needs at least one lane".into()));
        }
        if replicas == 0 || replicas > lanes.len() {
            return Err(Error::Config(format!(
                "replicas must be between 1 and the number of lanes ({}), not {replicas}",
                lanes.len()
            )));
        }
        let names = lanes.iter().map(|(n, _)| n.clone()).collect();
        Ok(DistStore {
            lanes: lanes
                .into_iter()
                .map(|(name, store)| Lane {
                    name,
                    store: Mutex::new(store),
                    dirty: false,
                    down: false,
                })
                .collect(),
            names,
            replicas,
            placement,
            opts: StoreOptions {
                schema,
                context: ctx,
                merge: Default::default(),
            },
            _one_thread: PhantomData,
        })
    }

    /// Lanes ranked for `key` (best first).
    pub fn ranking(&self, key: &Key) -> Result<Vec<usize>> {
        Ok(self.ranking_split(&self.opts.split(key)?))
    }

    /// Lanes ranked for a split key (best first).
    fn ranking_split(&self, split: &SplitKey) -> Vec<usize> {
        match self.placement {
            Placement::Database => rendezvous::rank(&self.names, &split.db),
            Placement::Field => rendezvous::rank(&self.names, &split.full()),
        }
    }

    /// A key of a read, about to be asked of the first lane of its ranking.
    fn pending(&self, key: Key) -> Result<Pending> {
        let split = self.opts.split(&key)?;
        let full = split.full();
        let complete = full.iter().all(|(k, _)| key.get(k).is_some());
        Ok(Pending {
            ranking: self.ranking_split(&split),
            want: full.without_empty(),
            complete,
            key,
            next: 0,
            failed: None,
            seen: Vec::new(),
        })
    }

    /// The error of a key no lane had, given the last lane error met on its way: that error
    /// when no replica stands in for the lane (`replicas` 1, or one lane), else none (missing).
    fn unanswered(&self, failed: Option<Error>) -> Option<Error> {
        failed.filter(|_| self.replicas == 1 || self.lanes.len() == 1)
    }

    /// The keys a read of `req` asks the lanes for, in request-expansion order, and the report
    /// it starts from (the combinations already known missing, the keywords ignored): the
    /// request's own keys when it names every keyword it uses; for an `all` or a partial
    /// combination, the keys the merged listing has ([`FieldStore::list`]).
    pub fn request_keys(&self, req: &Request) -> Result<(Vec<Key>, RetrieveReport)> {
        let (resolved, ignored) = self.opts.resolve(req)?;
        let mut report = RetrieveReport {
            ignored,
            ..RetrieveReport::default()
        };
        let complete = !resolved
            .params
            .iter()
            .any(|p| matches!(p.values, Values::All));
        let mut keys: Vec<Key> = Vec::new();
        if !complete {
            keys.extend(self.list(&resolved)?.iter().map(Field::key));
            return Ok((keys, report));
        }
        // Partial combinations take every listed field that agrees with them, from one
        // listing of the whole request (not one per combination: one round trip per lane),
        // grouped by their values of the request's keywords.
        let mut listed: Option<HashMap<Vec<String>, Vec<Key>>> = None;
        let words: Vec<&str> = (resolved.params.iter())
            .filter(|p| matches!(p.values, Values::List(_)))
            .map(|p| p.keyword.as_str())
            .collect();
        let values_of = |k: &Key| -> Vec<String> {
            (words.iter())
                .map(|w| k.get(w).unwrap_or("").to_string())
                .collect()
        };
        for key in resolved.expand() {
            if self.opts.split(&key).is_ok() {
                keys.push(key);
                continue;
            }
            if listed.is_none() {
                let mut by: HashMap<Vec<String>, Vec<Key>> = HashMap::new();
                for f in self.list(&resolved)? {
                    let k = f.key();
                    by.entry(values_of(&k)).or_default().push(k);
                }
                listed = Some(by);
            }
            match listed.as_ref().and_then(|l| l.get(&values_of(&key))) {
                Some(fields) => keys.extend(fields.iter().cloned()),
                None => report.missing.push(key),
            }
        }
        Ok((keys, report))
    }
}

/// A key of a read and how far along its ranking it has been asked.
struct Pending {
    key: Key,
    /// Its split key without defaulted (empty) values: what a field for it agrees with.
    want: Key,
    /// It names every keyword of its rule: exactly one field can answer it.
    complete: bool,
    /// Lanes best first; `ranking[..next]` have been asked.
    ranking: Vec<usize>,
    next: usize,
    /// The last lane error met on its way (the error a replica-less read reports).
    failed: Option<Error>,
    /// Keys already delivered for it (a partial key answered in part by a lane that failed).
    seen: Vec<Key>,
}

impl Pending {
    fn agrees(&self, field: &Key) -> bool {
        self.want.iter().all(|(k, v)| field.get(k) == Some(v))
    }

    /// On to the next lane of its ranking, keeping the last error met.
    fn passed(mut self, failed: Option<Error>) -> Pending {
        self.next += 1;
        if failed.is_some() {
            self.failed = failed;
        }
        self
    }
}

/// A lane error met by a batch, handed on to the one-by-one fallback of each key it did not
/// deliver (which needs an error of its own per key).
fn clone_fault(op: &'static str, lane: &str, e: &Error) -> Error {
    Error::net(op, lane, std::io::Error::other(e.to_string()))
}

// Every method is stated: forwarded to the lanes, or answered here and why.
#[deny(clippy::missing_trait_methods)]
impl FieldStore for DistStore {
    fn describe(&self) -> String {
        format!(
            "dist({} lanes, {} replica(s), by {:?}: {})",
            self.lanes.len(),
            self.replicas,
            self.placement,
            self.names.join(", ")
        )
    }

    /// Not forwarded: dist splits with its own schema, which its placement hashes.
    fn options(&self) -> &StoreOptions {
        &self.opts
    }

    /// Not forwarded: the lanes are chosen by the split key, so it is split here (a lane's
    /// server is handed the split key's fields as any archive of its own).
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<()> {
        let split = self.opts.split(key)?;
        self.archive_split(&split, data, None)
    }

    /// Not forwarded: a checkpoint names one store's unflushed fields, and a writer's are
    /// spread over several lanes, most of them servers that already hold them. Ingestion then
    /// keys an input whole before archiving any of it (all or nothing still holds).
    fn checkpoint(&self) -> Option<Checkpoint> {
        None
    }

    /// Not forwarded: there is no checkpoint of this store to go back to.
    fn discard_since(&mut self, _cp: &Checkpoint) -> usize {
        0
    }

    /// Not forwarded: which lanes the bytes go to is known only key by key; each lane makes
    /// room as its fields arrive.
    fn provision(&self, _bytes: u64) -> Result<()> {
        Ok(())
    }

    /// Not forwarded: a key's field may be on any lane of its ranking (failover, replicas),
    /// which only [`FieldStore::retrieve`] walks; the lanes are servers, which do not lend.
    fn retrieve_lent(&self, _key: &Key) -> Option<Result<Option<(Key, FieldBytes)>>> {
        None
    }

    /// Not forwarded: this store itself, so that a facade above this crate reads through
    /// its lanes with an operation they offer ([`DistStore::read_by_lane`]: `haar::extract`
    /// sends each server an EXTRACT for the keys it holds).
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    /// Not forwarded: dist holds no field bytes here.
    fn as_local(&self) -> Option<&Store> {
        None
    }

    fn archive_split(&mut self, split: &SplitKey, data: &[u8], crc: Option<u32>) -> Result<()> {
        let ranking = self.ranking_split(split);
        let mut stored = 0;
        let mut failures = Vec::new();
        for i in ranking {
            if stored == self.replicas {
                break;
            }
            let lane = &mut self.lanes[i];
            if lane.down {
                // Named if the archive fails: the error says which servers it could not use.
                failures.push((
                    lane.name.clone(),
                    Error::net(
                        "archive to",
                        &lane.name,
                        std::io::Error::other("skipped: it failed earlier in this writer's life"),
                    ),
                ));
                continue;
            }
            match lane.get_mut().archive_split(split, data, crc) {
                Ok(()) => {
                    lane.dirty = true;
                    stored += 1;
                }
                Err(e) if lane_fault(&e) && !lane.dirty => {
                    lane.down = true;
                    failures.push((lane.name.clone(), e));
                }
                Err(e) if lane_fault(&e) => {
                    // This error reports the lane's unflushed fields lost; it no longer holds
                    // anything of this writer's, so later flushes must not wait for it.
                    lane.down = true;
                    lane.dirty = false;
                    return Err(Error::Lanes {
                        op: "archive",
                        summary: format!(
                            "server {} failed while holding unflushed fields from this writer; those fields are lost to it and must be archived again",
                            lane.name
                        ),
                        failures: LaneFailures(vec![(lane.name.clone(), e)]),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        if stored < self.replicas {
            return Err(Error::Lanes {
                op: "archive",
                summary: format!(
                    "{}: only {stored} of {} replica(s) could be stored",
                    split.full(),
                    self.replicas
                ),
                failures: LaneFailures(failures),
            });
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let mut errors = Vec::new();
        for lane in self.lanes.iter_mut().filter(|l| l.dirty) {
            match lane.get_mut().flush() {
                Ok(()) => lane.dirty = false,
                Err(e) => {
                    // Reported lost by the error below; the writer archives again elsewhere.
                    lane.down = true;
                    lane.dirty = false;
                    errors.push((lane.name.clone(), e));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Lanes {
                op: "flush",
                summary: format!(
                    "flush failed on {} lane(s); fields archived since the last flush to those lanes must be archived again",
                    errors.len()
                ),
                failures: LaneFailures(errors),
            })
        }
    }

    /// Request order is kept whichever lane serves each field: consecutive complete keys with
    /// the same best lane go to it as one batch (with database placement, a request within one
    /// database is one round trip); the keys a batch skips are read from the next lanes of
    /// their ranking before its next field is delivered (see `fetch_in_order`).
    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        let (keys, mut report) = self.request_keys(req)?;
        let pending = keys
            .into_iter()
            .map(|k| self.pending(k))
            .collect::<Result<Vec<_>>>()?;
        self.fetch_in_order(pending, sink, &mut report)?;
        Ok(report)
    }

    /// One batch per lane: every key goes to its best lane, so the whole call costs one round
    /// trip per server (plus one per run of keys a best lane lacks); fields come grouped by
    /// best lane, in the keys' order within each group.
    fn retrieve_keys(&self, keys: &[Key], sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        let mut groups: BTreeMap<usize, Vec<Pending>> = BTreeMap::new();
        for key in keys {
            let p = self.pending(key.clone())?;
            groups.entry(p.ranking[0]).or_default().push(p);
        }
        let mut report = RetrieveReport::default();
        for keys in groups.into_values() {
            self.fetch_in_order(keys, sink, &mut report)?;
        }
        Ok(report)
    }

    fn list(&self, req: &Request) -> Result<Vec<Field>> {
        let mut merged: BTreeMap<Key, Field> = BTreeMap::new();
        let mut failed = Vec::new();
        for lane in &self.lanes {
            match lane.lock().list(req) {
                Ok(fields) => {
                    for f in fields {
                        merged.entry(f.key()).or_insert(f);
                    }
                }
                Err(e) if lane_fault(&e) => failed.push((lane.name.clone(), e)),
                Err(e) => return Err(e),
            }
        }
        self.refuse_uncovered_listing(failed)?;
        Ok(merged.into_values().collect())
    }

    /// Each lane's masked listing; per key, the copies (live, then masked newest first) of the
    /// first lane that lists it, whose live copy [`FieldStore::list`] shows. The other lanes' copies
    /// of that key are replicas' (each replica holds the same versions at its own locations):
    /// listing them would list each older version once per replica, and another replica's
    /// live copy as a masked one (design §8, "Masked copies"). A failed lane counts as in
    /// [`FieldStore::list`]. A lane without the capability fails the listing, naming it.
    fn list_with_masked(&self, req: &Request) -> Option<Result<Vec<Field>>> {
        Some(self.list_masked_lanes(req))
    }

    /// The lanes of the location's key's ranking in order (by the full key when `field`
    /// names its index and datum, else by the database under database placement, else every
    /// lane), the first whose read succeeds: a lane holding no such location (or, with `crc`,
    /// other bytes there) fails and the next is asked.
    fn read_located(&self, field: &Field, crc: Option<u32>) -> Option<Result<Vec<u8>>> {
        Some(self.read_located_lanes(field, crc))
    }

    /// Not forwarded: the values of the merged listing, which covers a failed lane with its
    /// replicas as [`FieldStore::list`] does.
    fn axes(&self, req: &Request) -> Result<BTreeMap<String, BTreeSet<String>>> {
        Ok(axes_of(&self.list(req)?))
    }

    fn wipe(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        if doit {
            // Checked on every lane first, so that a refusal removes nothing anywhere.
            crate::report::refuse_unowned(req, &self.unowned_files(req)?)?;
        }
        let mut total = WipeReport::default();
        for lane in &mut self.lanes {
            add_wipe(&mut total, lane.get_mut().wipe(req, doit)?);
        }
        // Replicas report the same database more than once.
        total.databases.sort();
        total.databases.dedup();
        Ok(total)
    }

    fn unowned_files(&self, req: &Request) -> Result<Vec<std::path::PathBuf>> {
        let mut out = Vec::new();
        for lane in &self.lanes {
            out.extend(lane.lock().unowned_files(req)?);
        }
        Ok(out)
    }

    fn data_path(&self, field: &Field) -> Result<Option<std::path::PathBuf>> {
        // The first lane that holds the field's database; a failed lane is not asked again.
        for lane in &self.lanes {
            if let Ok(Some(p)) = lane.lock().data_path(field) {
                return Ok(Some(p));
            }
        }
        Ok(None)
    }

    fn wipe_unsafe_all(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        let mut total = WipeReport::default();
        for lane in &mut self.lanes {
            add_wipe(&mut total, lane.get_mut().wipe_unsafe_all(req, doit)?);
        }
        total.databases.sort();
        total.databases.dedup();
        Ok(total)
    }

    fn purge(&mut self, req: &Request, doit: bool) -> Result<PurgeReport> {
        let mut total = PurgeReport::default();
        for lane in &mut self.lanes {
            add_purge(&mut total, lane.get_mut().purge(req, doit)?);
        }
        Ok(total)
    }

    fn stats(&self, req: &Request) -> Result<Vec<DbStats>> {
        let mut out = Vec::new();
        for lane in &self.lanes {
            for mut s in lane.lock().stats(req)? {
                s.db = format!("{} @ {}", s.db, lane.name);
                out.push(s);
            }
        }
        Ok(out)
    }

    fn problems(&self, req: &Request) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for lane in &self.lanes {
            for p in lane.lock().problems(req)? {
                out.push(format!("{p} (lane {})", lane.name));
            }
        }
        Ok(out)
    }
}

impl DistStore {
    /// [`FieldStore::list_with_masked`]: see there.
    fn list_masked_lanes(&self, req: &Request) -> Result<Vec<Field>> {
        // Key → its copies, from the first lane that lists it (as `list` keeps its field).
        let mut merged: BTreeMap<Key, Vec<Field>> = BTreeMap::new();
        let mut failed = Vec::new();
        for lane in &self.lanes {
            let listed = lane.lock().list_maybe_masked(req, true);
            match listed {
                Ok(fields) => {
                    for (key, copies) in key_runs(fields) {
                        merged.entry(key).or_insert(copies);
                    }
                }
                Err(e) if lane_fault(&e) => failed.push((lane.name.clone(), e)),
                Err(e) => return Err(e),
            }
        }
        self.refuse_uncovered_listing(failed)?;
        Ok(merged.into_values().flatten().collect())
    }

    /// A listing's lane failures, refused unless replicas cover them: without replicas a
    /// failed lane means fields silently absent from the listing.
    fn refuse_uncovered_listing(&self, failed: Vec<(String, Error)>) -> Result<()> {
        if !failed.is_empty() && (self.replicas == 1 || failed.len() >= self.replicas) {
            return Err(Error::Lanes {
                op: "list",
                summary: "lanes failed and no replica covers them".into(),
                failures: LaneFailures(failed),
            });
        }
        Ok(())
    }

    /// [`FieldStore::read_located`]: see there.
    fn read_located_lanes(&self, field: &Field, crc: Option<u32>) -> Result<Vec<u8>> {
        let named = !field.index.is_empty() || !field.datum.is_empty();
        let order = match self.opts.split(&field.key()) {
            Ok(split) if named => self.ranking_split(&split),
            _ if self.placement == Placement::Database => rendezvous::rank(&self.names, &field.db),
            _ => (0..self.lanes.len()).collect(),
        };
        let mut failures = Vec::new();
        for i in order {
            let lane = &self.lanes[i];
            match lane.lock().read_at(field, crc) {
                Ok(bytes) => return Ok(bytes),
                // The request itself is wrong: every lane would say so.
                Err(e) if e.class() == crate::error::Class::Input => return Err(e),
                Err(e) => failures.push((lane.name.clone(), e)),
            }
        }
        Err(Error::Lanes {
            op: "read located",
            summary: format!(
                "no lane holds database {} {}{}",
                field.db,
                crate::frontend::located(field),
                crc.map(|c| format!(" with crc {c:#010x}"))
                    .unwrap_or_default()
            ),
            failures: LaneFailures(failures),
        })
    }
}

/// A masked listing cut into runs of one key's copies (its live field, then its masked copies,
/// newest first), as [`FieldStore::list_with_masked`] gives them.
pub(crate) fn key_runs(fields: Vec<Field>) -> Vec<(Key, Vec<Field>)> {
    let mut runs: Vec<(Key, Vec<Field>)> = Vec::new();
    for f in fields {
        let key = f.key();
        match runs.last_mut() {
            Some((k, copies)) if *k == key => copies.push(f),
            _ => runs.push((key, vec![f])),
        }
    }
    runs
}

fn add_wipe(total: &mut WipeReport, r: WipeReport) {
    total.fields += r.fields;
    total.bytes += r.bytes;
    total.databases.extend(r.databases);
}

fn add_purge(total: &mut PurgeReport, r: PurgeReport) {
    total.databases += r.databases;
    total.dropped_fields += r.dropped_fields;
    total.dropped_bytes += r.dropped_bytes;
    total.freed_bytes += r.freed_bytes;
}
