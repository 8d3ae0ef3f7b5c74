//! `dist` and `select` front-ends (design §7): composition over [`FieldStore`] lanes.
//!
//! `DistStore` places each field on lanes ranked by rendezvous hashing of its database key (or
//! full key), with `replicas` copies and the failover rules of the design. `SelectStore` routes
//! by key patterns. Both are pure composition: they know nothing of servers or backends.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::marker::PhantomData;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use haar_core::request::{Request, Values};
use haar_core::schema::{Schema, SplitKey};
use haar_core::value::Context;
use haar_core::{Key, rendezvous};

use crate::backend::FieldBytes;
use crate::error::{Error, LaneFailures, Result};
use crate::frontend::{FieldStore, Sink};
use crate::store::axes_of;
use crate::store::{
    Checkpoint, DbStats, Field, PurgeReport, RetrieveReport, Store, StoreOptions, WipeReport,
};

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

    /// Delivers the fields of `keys` in their order, whichever lane holds each (design §7.1).
    /// Consecutive keys whose next lane is the same go to it as one
    /// batch, streamed: when the batch skips keys (its lane lacks them, e.g. fields archived
    /// while it was down), those are read from the next lanes of their rankings, by this same
    /// function, before the batch's next field is handed on; keys after the last field it
    /// sent, or after it failed, likewise once it ends. Nothing is buffered: each field goes
    /// to `sink` as it arrives, and at most one reply per lane is open at a time (a nested
    /// batch only asks lanes its keys have not been asked, so never one already streaming).
    fn fetch_in_order(
        &self,
        keys: Vec<Pending>,
        sink: &mut Sink<'_>,
        report: &mut RetrieveReport,
    ) -> Result<()> {
        let mut rest = keys.into_iter().peekable();
        while let Some(p) = rest.next() {
            let Some(&lane) = p.ranking.get(p.next) else {
                self.not_found(p, report)?;
                continue;
            };
            let mut run = vec![p];
            while let Some(q) = rest.next_if(|q| q.ranking.get(q.next) == Some(&lane)) {
                run.push(q);
            }
            self.fetch_batch(lane, run, sink, report)?;
        }
        Ok(())
    }

    /// One batch of [`DistStore::fetch_in_order`]: `run` all have `lane` next in their ranking.
    fn fetch_batch(
        &self,
        lane: usize,
        run: Vec<Pending>,
        sink: &mut Sink<'_>,
        report: &mut RetrieveReport,
    ) -> Result<()> {
        let keys: Vec<Key> = run.iter().map(|p| p.key.clone()).collect();
        let n = run.len();
        let mut slots: Vec<Option<Pending>> = run.into_iter().map(Some).collect();
        // Keys before `cursor` are settled; `got[i]`: key i was answered by this lane.
        let mut cursor = 0;
        let mut got = vec![false; n];
        // The lane's call failed because this read's sink (or a nested batch) did: that error
        // is the caller's, not the lane's, and is returned as it is.
        let mut sink_failed = false;
        let res = self.lanes[lane]
            .lock()
            .retrieve_keys(&keys, &mut |k, b, c| {
                let r = (|| {
                    // The lane answers keys in their order: a field belongs to the first key from
                    // the cursor on that it agrees with; keys it passed are the lane's misses.
                    let at = (cursor..n).find(|&j| slots[j].as_ref().is_some_and(|p| p.agrees(k)));
                    if let Some(j) = at {
                        let mut gaps = Vec::new();
                        for (x, slot) in slots.iter_mut().enumerate().take(j).skip(cursor) {
                            if let Some(p) = slot.take().filter(|_| !got[x]) {
                                gaps.push(p.passed(None));
                            }
                        }
                        if !gaps.is_empty() {
                            self.fetch_in_order(gaps, sink, report)?;
                        }
                        got[j] = true;
                        let p = slots[j]
                            .as_mut()
                            .expect("keys from the cursor on are pending");
                        if p.complete {
                            slots[j] = None;
                            cursor = j + 1;
                        } else if p.seen.contains(k) {
                            // Already delivered by a lane that failed after it (a partial key).
                            cursor = j;
                            return Ok(());
                        } else {
                            p.seen.push(k.clone());
                            cursor = j;
                        }
                    }
                    report.found += 1;
                    report.bytes += b.len() as u64;
                    sink(k, b, c)
                })();
                sink_failed |= r.is_err();
                r
            });
        let failed = match res {
            Ok(r) => {
                report.problems.extend(r.problems);
                None
            }
            Err(e) if !sink_failed && lane_fault(&e) => Some(e),
            Err(e) => return Err(e),
        };
        let name = &self.lanes[lane].name;
        let mut tail = Vec::new();
        for (x, slot) in slots.iter_mut().enumerate().skip(cursor) {
            let Some(p) = slot.take() else { continue };
            // A key the lane answered is done, unless the lane failed while it might still
            // have had more fields for it (a partial key): the next lane delivers the others.
            if got[x] && (failed.is_none() || p.complete) {
                continue;
            }
            tail.push(
                p.passed(
                    failed
                        .as_ref()
                        .map(|e| clone_fault("retrieve from", name, e)),
                ),
            );
        }
        self.fetch_in_order(tail, sink, report)
    }

    /// A key every lane of its ranking was asked for: missing, or an error when a lane that
    /// could hold it failed and no replica stands in for it.
    fn not_found(&self, p: Pending, report: &mut RetrieveReport) -> Result<()> {
        match self.unanswered(p.failed) {
            Some(e) => Err(e),
            None => {
                report.missing.push(p.key);
                Ok(())
            }
        }
    }

    /// The error of a key no lane had, given the last lane error met on its way: that error
    /// when no replica stands in for the lane (`replicas` 1, or one lane), else none (missing).
    fn unanswered(&self, failed: Option<Error>) -> Option<Error> {
        failed.filter(|_| self.replicas == 1 || self.lanes.len() == 1)
    }
}

impl DistStore {
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

    /// A read of `keys` through an operation the lanes offer that this crate cannot name
    /// (`haar::extract` sends each server an EXTRACT, design §7.1): the same lanes, replicas
    /// and failover as [`FieldStore::retrieve`], the operation given as `read`.
    ///
    /// The read goes in rounds. In each, every key not yet settled goes to the next lane of
    /// its ranking, and every lane that has keys is asked at once, each on a thread of its own
    /// (`read(lane, keys, found)`, which hands `found` each thing it finds with the key of the
    /// field it is of): so a round takes about as long as its slowest lane, not the sum of
    /// them. With database placement a request within one database costs one call, and a
    /// request over several one call per lane (plus one per lane for the keys a lane lacked).
    /// A key the lane did not answer goes to the next lane of its ranking in the next round;
    /// on an error of the lane (I/O, network: the lane's fault, not the request's), every key
    /// it did not answer does, and a key no lane has is missing, or the last lane error
    /// (naming the server, `op` saying what failed) when `replicas` is 1, as a retrieve's. Any
    /// other error of `read`, or of `deliver`, ends the read as it is (once the lanes asked in
    /// that round have returned).
    ///
    /// `deliver` runs on the caller's thread and is handed what was found in the order of
    /// `keys` (a key that names fewer keywords than its rule: each field agreeing with it, in
    /// the lane's order), each key's as soon as every key before it is settled: a key that
    /// names every keyword when its field arrives, another when its lane's call ends. Held
    /// until then, so at most what one call per lane finds. Returns the keys no lane has.
    pub fn read_by_lane<T: Send>(
        &self,
        op: &'static str,
        keys: Vec<Key>,
        read: &LaneRead<'_, T>,
        deliver: &mut dyn FnMut(Key, T) -> Result<()>,
    ) -> Result<Vec<Key>> {
        let keys = keys
            .into_iter()
            .map(|k| self.pending(k))
            .collect::<Result<Vec<_>>>()?;
        let mut r = ByLane::new(keys);
        loop {
            r.settle_exhausted(self)?;
            r.deliver_settled(deliver)?;
            // This round: each key not settled, to the next lane of its ranking.
            let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            for i in r.emitted..r.keys.len() {
                if !r.settled[i] {
                    let p = &r.keys[i];
                    groups.entry(p.ranking[p.next]).or_default().push(i);
                }
            }
            if groups.is_empty() {
                return Ok(r.missing);
            }
            let asks: Vec<(usize, Vec<usize>)> = groups.into_iter().collect();
            let ends = self.ask_lanes(&mut r, &asks, read, deliver)?;
            for ((lane, group), (end, got)) in asks.iter().zip(ends) {
                let failed = match end {
                    Ok(()) => None,
                    Err(e) if lane_fault(&e) => Some(e),
                    Err(e) => return Err(e),
                };
                let name = &self.lanes[*lane].name;
                for (g, &i) in group.iter().enumerate() {
                    let p = &mut r.keys[i];
                    // As in a retrieve: a partial key answered by a lane that then failed may
                    // have more fields there; the next lane delivers the others.
                    if got[g] && (failed.is_none() || p.complete) {
                        r.settled[i] = true;
                        continue;
                    }
                    p.next += 1;
                    if let Some(e) = &failed {
                        p.failed = Some(clone_fault(op, name, e));
                    }
                }
            }
        }
    }

    /// One round of [`DistStore::read_by_lane`]: each lane of `asks` (a lane and the indices
    /// of the keys asked of it) read at once, one thread each; what they find is matched to
    /// its key and delivered on this thread as it comes. Returns, in the order of `asks`, how
    /// each lane's call ended and which of its keys it answered.
    fn ask_lanes<T: Send>(
        &self,
        r: &mut ByLane<T>,
        asks: &[(usize, Vec<usize>)],
        read: &LaneRead<'_, T>,
        deliver: &mut dyn FnMut(Key, T) -> Result<()>,
    ) -> Result<Vec<(Result<()>, Vec<bool>)>> {
        let mut got: Vec<Vec<bool>> = (asks.iter())
            .map(|(_, group)| vec![false; group.len()])
            .collect();
        let mut ends: Vec<Option<Result<()>>> = asks.iter().map(|_| None).collect();
        std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = mpsc::channel::<Answer<T>>();
            for (a, (lane, group)) in asks.iter().enumerate() {
                let asked: Vec<Key> = group.iter().map(|&i| r.keys[i].key.clone()).collect();
                let lane = &self.lanes[*lane];
                let tx = tx.clone();
                scope.spawn(move || {
                    // A send fails only once this read has ended with an error.
                    let end = read(&**lane.lock(), &asked, &mut |k, t| {
                        let _ = tx.send(Answer::Found(a, k, t));
                    });
                    let _ = tx.send(Answer::End(a, end));
                });
            }
            drop(tx);
            // Until every lane's thread has ended and dropped its sender.
            for answer in rx {
                match answer {
                    Answer::Found(a, k, t) => {
                        if r.found(&asks[a].1, &mut got[a], k, t) {
                            r.deliver_settled(deliver)?;
                        }
                    }
                    Answer::End(a, end) => ends[a] = Some(end),
                }
            }
            Ok(())
        })?;
        Ok((ends.into_iter())
            .map(|end| end.expect("every lane's thread says how its call ended"))
            .zip(got)
            .collect())
    }
}

/// What a lane's thread in [`DistStore::ask_lanes`] sends the reading thread; `usize`: which
/// lane of the round.
enum Answer<T> {
    /// A thing the lane found, with the key of its field.
    Found(usize, Key, T),
    /// The lane's call returned.
    End(usize, Result<()>),
}

/// Where a [`DistStore::read_by_lane`] is: its keys, what was found for each, which are
/// settled (nothing more will be found for them) and which delivered.
struct ByLane<T> {
    keys: Vec<Pending>,
    found: Vec<Vec<(Key, T)>>,
    settled: Vec<bool>,
    missing: Vec<Key>,
    /// Keys before `emitted` are delivered.
    emitted: usize,
}

impl<T> ByLane<T> {
    fn new(keys: Vec<Pending>) -> ByLane<T> {
        let n = keys.len();
        ByLane {
            keys,
            found: (0..n).map(|_| Vec::new()).collect(),
            settled: vec![false; n],
            missing: Vec::new(),
            emitted: 0,
        }
    }

    /// Keys asked of every lane of their ranking are settled: what lanes that failed
    /// delivered before failing stays; a key with nothing is missing, or the error of `dist`'s
    /// rule ([`DistStore::unanswered`]).
    fn settle_exhausted(&mut self, dist: &DistStore) -> Result<()> {
        for i in self.emitted..self.keys.len() {
            let p = &mut self.keys[i];
            if self.settled[i] || p.next < p.ranking.len() {
                continue;
            }
            self.settled[i] = true;
            if self.found[i].is_empty() {
                if let Some(e) = dist.unanswered(p.failed.take()) {
                    return Err(e);
                }
                self.missing.push(p.key.clone());
            }
        }
        Ok(())
    }

    /// Hands on what was found for the settled keys at the head of the request.
    fn deliver_settled(&mut self, deliver: &mut dyn FnMut(Key, T) -> Result<()>) -> Result<()> {
        while self.emitted < self.keys.len() && self.settled[self.emitted] {
            for (k, t) in std::mem::take(&mut self.found[self.emitted]) {
                deliver(k, t)?;
            }
            self.emitted += 1;
        }
        Ok(())
    }

    /// A thing a lane found for the field `k`, the lane asked for the keys `group` (`got`: of
    /// those, the ones it answered so far). Kept for the first of them it agrees with that
    /// still wants a field; dropped if none does (archived since the keys were listed) or a
    /// lane that failed after it already delivered it. Returns whether that settled the key
    /// (it names every keyword, so one field is all it has).
    fn found(&mut self, group: &[usize], got: &mut [bool], k: Key, t: T) -> bool {
        let Some(g) = (0..group.len()).find(|&g| {
            let p = &self.keys[group[g]];
            p.agrees(&k) && !(p.complete && got[g])
        }) else {
            return false;
        };
        let i = group[g];
        let p = &mut self.keys[i];
        if !p.complete {
            if p.seen.contains(&k) {
                return false;
            }
            p.seen.push(k.clone());
        }
        got[g] = true;
        self.found[i].push((k, t));
        self.settled[i] |= p.complete;
        p.complete
    }
}

/// One lane's part of [`DistStore::read_by_lane`]: `read(lane, keys, found)`, called on a
/// thread of the lane's own, at the same time as the other lanes' (so `Fn` and `Sync`).
pub type LaneRead<'a, T> =
    dyn Fn(&dyn FieldStore, &[Key], &mut dyn FnMut(Key, T)) -> Result<()> + Sync + 'a;

/// Requests that together name exactly `keys` (a union of cartesian products, no other key):
/// how a group of keys is asked of a lane that takes requests, not keys (a server's EXTRACT).
/// Keys that differ in one keyword's value only are merged into one request, keyword by
/// keyword from the last, so the keys of a request's expansion within one database give one
/// request, and a lane's share of them under field placement one per run of other values.
/// Keys naming different keywords are never merged.
pub fn requests_for(keys: &[Key]) -> Vec<Request> {
    // A box: per keyword (in the key's order), its values in first-seen order.
    type Boxed = Vec<(String, Vec<String>)>;
    let mut boxes: Vec<Boxed> = keys
        .iter()
        .map(|k| {
            k.iter()
                .map(|(w, v)| (w.to_string(), vec![v.to_string()]))
                .collect()
        })
        .collect();
    let mut words: Vec<String> = Vec::new();
    for k in keys {
        for w in k.keywords() {
            if !words.iter().any(|x| x == w) {
                words.push(w.to_string());
            }
        }
    }
    for word in words.iter().rev() {
        // Boxes equal but for `word`'s values merge into the first of them.
        let mut merged: Vec<Boxed> = Vec::new();
        let mut at: std::collections::HashMap<Boxed, usize> = std::collections::HashMap::new();
        for b in boxes {
            let Some(pos) = b.iter().position(|(w, _)| w == word) else {
                merged.push(b);
                continue;
            };
            let mut rest = b.clone();
            rest[pos].1.clear();
            match at.get(&rest) {
                Some(&m) => {
                    let vals = &mut merged[m][pos].1;
                    for v in &b[pos].1 {
                        if !vals.contains(v) {
                            vals.push(v.clone());
                        }
                    }
                }
                None => {
                    at.insert(rest, merged.len());
                    merged.push(b);
                }
            }
        }
        boxes = merged;
    }
    boxes
        .into_iter()
        .map(|b| {
            let mut r = Request::default();
            for (w, vals) in b {
                r.set(w, Values::List(vals));
            }
            r
        })
        .collect()
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
        // Without replicas a failed lane means fields silently absent: refuse instead.
        if !failed.is_empty() && (self.replicas == 1 || failed.len() >= self.replicas) {
            return Err(Error::Lanes {
                op: "list",
                summary: "lanes failed and no replica covers them".into(),
                failures: LaneFailures(failed),
            });
        }
        Ok(merged.into_values().collect())
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

/// Routes fields to stores by key patterns: the first route whose pattern matches the field's
/// key takes it; reads consult every route whose pattern is compatible with the request.
pub struct SelectStore {
    routes: Vec<(Request, Box<dyn FieldStore>)>,
    opts: StoreOptions,
}

impl SelectStore {
    /// Routes: (pattern, store). An empty pattern matches everything (put it last).
    pub fn new(
        routes: Vec<(Request, Box<dyn FieldStore>)>,
        schema: Arc<Schema>,
        ctx: Context,
    ) -> Result<SelectStore> {
        if routes.is_empty() {
            return Err(Error::Config("select needs at least one route".into()));
        }
        let mut resolved = Vec::new();
        for (pattern, store) in routes {
            let p = pattern
                .resolve(&schema, &ctx)
                .map_err(|e| Error::Config(format!("select pattern {pattern}: {e}")))?;
            resolved.push((p, store));
        }
        Ok(SelectStore {
            routes: resolved,
            opts: StoreOptions {
                schema,
                context: ctx,
                merge: Default::default(),
            },
        })
    }

    fn route_for(&mut self, split: &SplitKey) -> Result<&mut Box<dyn FieldStore>> {
        let full = split.full();
        self.routes
            .iter_mut()
            .find(|(p, _)| p.matches(&full))
            .map(|(_, s)| s)
            .ok_or_else(|| Error::BadKey {
                key: full.to_string(),
                reason: "no select route matches it; add a catch-all route".into(),
            })
    }

    /// The stores a read of `req` consults, in route order: those of every route whose pattern
    /// can overlap `req` (no keyword with disjoint value lists). [`FieldStore::retrieve`] asks
    /// each of them for the whole request; a facade above this crate reads through them with an
    /// operation they offer the same way (`haar::extract` extracts through each, so a route
    /// that is a server or a `dist` of servers sends only values).
    pub fn read_routes(&self, req: &Request) -> Vec<&dyn FieldStore> {
        (self.overlapping(req).into_iter())
            .map(|(_, s)| &**s)
            .collect()
    }

    /// Routes whose pattern can overlap `req` (no keyword with disjoint value lists).
    fn overlapping(&self, req: &Request) -> Vec<&(Request, Box<dyn FieldStore>)> {
        let req = req
            .resolve(&self.opts.schema, &self.opts.context)
            .unwrap_or_else(|_| req.clone());
        self.routes
            .iter()
            .filter(|(p, _)| {
                p.params
                    .iter()
                    .all(|pp| match (&pp.values, req.get(&pp.keyword)) {
                        (Values::List(a), Some(Values::List(b))) => a.iter().any(|x| b.contains(x)),
                        _ => true,
                    })
            })
            .collect()
    }
}

// Every method is stated: forwarded to the routes, or answered here and why.
#[deny(clippy::missing_trait_methods)]
impl FieldStore for SelectStore {
    fn describe(&self) -> String {
        let r: Vec<String> = self
            .routes
            .iter()
            .map(|(p, s)| format!("[{p}] → {}", s.describe()))
            .collect();
        format!("select({})", r.join("; "))
    }
    /// Not forwarded: select splits with its own schema, the one its patterns are resolved
    /// with.
    fn options(&self) -> &StoreOptions {
        &self.opts
    }
    /// Not forwarded: the route is chosen by the split key, so it is split here.
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<()> {
        let split = self.opts.split(key)?;
        self.archive_split(&split, data, None)
    }
    fn archive_split(&mut self, split: &SplitKey, data: &[u8], crc: Option<u32>) -> Result<()> {
        self.route_for(split)?.archive_split(split, data, crc)
    }
    /// Not forwarded: a checkpoint names one store's unflushed fields, and a writer's may sit
    /// in several routes. Ingestion then keys an input whole before archiving any of it (all
    /// or nothing still holds).
    fn checkpoint(&self) -> Option<Checkpoint> {
        None
    }
    /// Not forwarded: there is no checkpoint of this store to go back to.
    fn discard_since(&mut self, _cp: &Checkpoint) -> usize {
        0
    }
    /// Not forwarded: which routes the bytes go to is known only key by key; each route makes
    /// room as its fields arrive.
    fn provision(&self, _bytes: u64) -> Result<()> {
        Ok(())
    }
    /// Forwarded to the route that archives `key` (the first whose pattern matches it), so a
    /// select over local pmem lends as the pmem store does. `Ok(None)` from it sends the
    /// caller the general way, which also asks the other routes whose patterns overlap.
    fn retrieve_lent(&self, key: &Key) -> Option<Result<Option<(Key, FieldBytes)>>> {
        let full = match self.opts.split(key) {
            Ok(split) => split.full(),
            Err(e) => return Some(Err(e)),
        };
        let (_, store) = self.routes.iter().find(|(p, _)| p.matches(&full))?;
        store.retrieve_lent(key)
    }
    /// Not forwarded: this store itself, so that a facade above this crate reads through the
    /// routes a retrieve would consult ([`SelectStore::read_routes`]: `haar::extract` extracts
    /// through each, so its servers send only values).
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    /// Not forwarded: select holds no field bytes itself, and which route holds a field is
    /// known only per field.
    fn as_local(&self) -> Option<&Store> {
        None
    }
    fn flush(&mut self) -> Result<()> {
        for (_, s) in &mut self.routes {
            s.flush()?;
        }
        Ok(())
    }
    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        let routes = self.read_routes(req);
        if routes.len() == 1 {
            return routes[0].retrieve(req, sink);
        }
        // Several routes: retrieve each field from the route that lists it, in key order.
        let mut report = RetrieveReport::default();
        let mut missing: Option<Vec<Key>> = None;
        for s in routes {
            let r = s.retrieve(req, sink)?;
            report.found += r.found;
            report.bytes += r.bytes;
            report.ignored.extend(r.ignored);
            report.problems.extend(r.problems);
            // Missing only if missing from every route.
            missing = Some(match missing {
                None => r.missing,
                Some(mut m) => {
                    m.retain(|k| r.missing.contains(k));
                    m
                }
            });
        }
        report.missing = missing.unwrap_or_default();
        Ok(report)
    }
    /// Not forwarded: one retrieve per key through [`FieldStore::retrieve`], which finds the
    /// route of each.
    fn retrieve_keys(&self, keys: &[Key], sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        crate::frontend::retrieve_keys_one_by_one(self, keys, sink)
    }
    fn list(&self, req: &Request) -> Result<Vec<Field>> {
        let mut merged: BTreeMap<Key, Field> = BTreeMap::new();
        for (_, s) in self.overlapping(req) {
            for f in s.list(req)? {
                merged.entry(f.key()).or_insert(f);
            }
        }
        Ok(merged.into_values().collect())
    }
    /// Not forwarded: the values of the listing merged over the overlapping routes.
    fn axes(&self, req: &Request) -> Result<BTreeMap<String, BTreeSet<String>>> {
        Ok(axes_of(&self.list(req)?))
    }
    fn wipe(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        if doit {
            // Checked on every route first, so that a refusal removes nothing anywhere.
            crate::report::refuse_unowned(req, &self.unowned_files(req)?)?;
        }
        let mut total = WipeReport::default();
        for (_, s) in &mut self.routes {
            add_wipe(&mut total, s.wipe(req, doit)?);
        }
        Ok(total)
    }
    fn unowned_files(&self, req: &Request) -> Result<Vec<std::path::PathBuf>> {
        let mut out = Vec::new();
        for (_, s) in self.overlapping(req) {
            out.extend(s.unowned_files(req)?);
        }
        Ok(out)
    }
    fn data_path(&self, field: &Field) -> Result<Option<std::path::PathBuf>> {
        for (_, s) in &self.routes {
            if let Some(p) = s.data_path(field)? {
                return Ok(Some(p));
            }
        }
        Ok(None)
    }
    fn wipe_unsafe_all(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        let mut total = WipeReport::default();
        for (_, s) in &mut self.routes {
            add_wipe(&mut total, s.wipe_unsafe_all(req, doit)?);
        }
        Ok(total)
    }
    fn purge(&mut self, req: &Request, doit: bool) -> Result<PurgeReport> {
        let mut total = PurgeReport::default();
        for (_, s) in &mut self.routes {
            add_purge(&mut total, s.purge(req, doit)?);
        }
        Ok(total)
    }
    fn stats(&self, req: &Request) -> Result<Vec<DbStats>> {
        let mut out = Vec::new();
        for (_, s) in self.overlapping(req) {
            out.extend(s.stats(req)?);
        }
        Ok(out)
    }

    fn problems(&self, req: &Request) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for (_, s) in self.overlapping(req) {
            out.extend(s.problems(req)?);
        }
        Ok(out)
    }
}
