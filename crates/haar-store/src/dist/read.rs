//! A `dist` read through an operation a facade names (`haar::extract`'s EXTRACT, design §7.1
//! and §16): `DistStore::read_by_lane` asks the lanes of each round at once, one thread each,
//! with the parent module's replicas and failover, and hands what they find on in request
//! order; `requests_for` turns a lane's keys into the requests such an operation takes.

use std::collections::BTreeMap;
use std::sync::mpsc;

use haar_core::Key;
use haar_core::request::{Request, Values};

use super::{DistStore, Pending, clone_fault, lane_fault};
use crate::error::Result;
use crate::frontend::FieldStore;

impl DistStore {
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
