//! A `dist` retrieve in request order (design §7.1): batches of keys streamed from their lanes,
//! the keys a batch skips read from the next lanes of their rankings before its next field is
//! handed on. Nothing is buffered; the lane policy (rankings, replicas, which errors are the
//! lane's) is the parent module's.

use haar_core::Key;

use super::{DistStore, Pending, clone_fault, lane_fault};
use crate::error::Result;
use crate::frontend::Sink;
use crate::store::RetrieveReport;

impl DistStore {
    /// Delivers the fields of `keys` in their order, whichever lane holds each (design §7.1).
    /// Consecutive keys whose next lane is the same go to it as one
    /// batch, streamed: when the batch skips keys (its lane lacks them, e.g. fields archived
    /// while it was down), those are read from the next lanes of their rankings, by this same
    /// function, before the batch's next field is handed on; keys after the last field it
    /// sent, or after it failed, likewise once it ends. Nothing is buffered: each field goes
    /// to `sink` as it arrives, and at most one reply per lane is open at a time (a nested
    /// batch only asks lanes its keys have not been asked, so never one already streaming).
    pub(super) fn fetch_in_order(
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
}
