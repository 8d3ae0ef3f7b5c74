//! `dist` and `select` front-ends (design §7): composition over [`FieldStore`] lanes.
//!
//! `DistStore` places each field on lanes ranked by rendezvous hashing of its database key (or
//! full key), with `replicas` copies and the failover rules of the design. `SelectStore` routes
//! by key patterns. Both are pure composition: they know nothing of servers or backends.

use std::collections::BTreeMap;
use std::sync::Arc;

use haar_core::request::{Request, Values};
use haar_core::schema::Schema;
use haar_core::value::Context;
use haar_core::{Key, rendezvous};

use crate::error::{Error, Result};
use crate::frontend::{FieldStore, Sink};
use crate::store::{DbStats, Field, PurgeReport, RetrieveReport, WipeReport};

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
    store: Box<dyn FieldStore>,
    /// This handle archived to the lane since its last successful flush.
    dirty: bool,
    /// The lane failed during this handle's life; archives skip it.
    down: bool,
}

/// Rendezvous-hash distribution over lanes, with replication.
pub struct DistStore {
    lanes: Vec<Lane>,
    names: Vec<String>,
    replicas: usize,
    placement: Placement,
    schema: Arc<Schema>,
    ctx: Context,
}

/// Errors worth trying the next lane for (the lane, not the request, is at fault).
fn lane_fault(e: &Error) -> bool {
    matches!(
        e,
        Error::Io { .. } | Error::PoolFull { .. } | Error::Busy { .. }
    )
}

fn single_key_request(key: &Key) -> Request {
    let mut r = Request::default();
    for (k, v) in key.iter() {
        r.set(k, Values::List(vec![v.to_string()]));
    }
    r
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
                    store,
                    dirty: false,
                    down: false,
                })
                .collect(),
            names,
            replicas,
            placement,
            schema,
            ctx,
        })
    }

    /// Lanes ranked for `key` (best first).
    pub fn ranking(&self, key: &Key) -> Result<Vec<usize>> {
        let split = self
            .schema
            .split(key, &self.ctx)
            .map_err(|e| Error::BadKey {
                key: key.to_string(),
                reason: e.to_string(),
            })?;
        let place = match self.placement {
            Placement::Database => split.db,
            Placement::Field => split.full(),
        };
        Ok(rendezvous::rank(&self.names, &place))
    }

    /// Reads one complete key: the lanes in ranking order, falling back on a miss or an error.
    fn retrieve_one(
        &self,
        key: &Key,
        sink: &mut Sink<'_>,
        report: &mut RetrieveReport,
    ) -> Result<bool> {
        let req = single_key_request(key);
        let mut last_err = None;
        for i in self.ranking(key)? {
            let lane = &self.lanes[i];
            let mut found = false;
            let res = lane.store.retrieve(&req, &mut |k, b| {
                found = true;
                report.found += 1;
                report.bytes += b.len() as u64;
                sink(k, b)
            });
            match res {
                Ok(_) if found => return Ok(true),
                Ok(_) => {}
                Err(e) if lane_fault(&e) => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        match last_err {
            // Every lane that could hold it failed: that is an error, not "missing".
            Some(e) if self.replicas == 1 || self.lanes.len() == 1 => Err(e),
            _ => Ok(false),
        }
    }
}

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

    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<()> {
        let ranking = self.ranking(key)?;
        let mut stored = 0;
        let mut failures = Vec::new();
        for i in ranking {
            if stored == self.replicas {
                break;
            }
            let lane = &mut self.lanes[i];
            if lane.down {
                continue;
            }
            match lane.store.archive(key, data) {
                Ok(()) => {
                    lane.dirty = true;
                    stored += 1;
                }
                Err(e) if lane_fault(&e) && !lane.dirty => {
                    lane.down = true;
                    failures.push(format!("{}: {e}", lane.name));
                }
                Err(e) if lane_fault(&e) => {
                    // This error reports the lane's unflushed fields lost; it no longer holds
                    // anything of this writer's, so later flushes must not wait for it.
                    lane.down = true;
                    lane.dirty = false;
                    return Err(Error::Io {
                        op: "archive",
                        path: lane.name.clone().into(),
                        source: std::io::Error::other(format!(
                            "server {} failed while holding unflushed fields from this writer; those fields are lost to it and must be archived again ({e})",
                            lane.name
                        )),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        if stored < self.replicas {
            return Err(Error::Io {
                op: "archive",
                path: key.to_string().into(),
                source: std::io::Error::other(format!(
                    "only {stored} of {} replica(s) could be stored; failed lanes: {}",
                    self.replicas,
                    failures.join("; ")
                )),
            });
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let mut errors = Vec::new();
        for lane in self.lanes.iter_mut().filter(|l| l.dirty) {
            match lane.store.flush() {
                Ok(()) => lane.dirty = false,
                Err(e) => {
                    // Reported lost by the error below; the writer archives again elsewhere.
                    lane.down = true;
                    lane.dirty = false;
                    errors.push(format!("{}: {e}", lane.name));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Io {
                op: "flush",
                path: "dist".into(),
                source: std::io::Error::other(format!(
                    "flush failed on {} lane(s): {}; fields archived since the last flush to those lanes must be archived again",
                    errors.len(),
                    errors.join("; ")
                )),
            })
        }
    }

    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        let resolved = req
            .resolve(&self.schema, &self.ctx)
            .map_err(|e| Error::BadRequest {
                request: req.to_string(),
                reason: e.to_string(),
            })?;
        let mut report = RetrieveReport::default();
        let complete = !resolved
            .params
            .iter()
            .any(|p| matches!(p.values, Values::All));
        if complete {
            for key in resolved.expand() {
                if self.schema.split(&key, &self.ctx).is_ok() {
                    if !self.retrieve_one(&key, sink, &mut report)? {
                        report.missing.push(key);
                    }
                    continue;
                }
                // A partial combination: every listed field that agrees with it.
                let fields = self.list(&single_key_request(&key))?;
                if fields.is_empty() {
                    report.missing.push(key);
                }
                for f in fields {
                    self.retrieve_one(&f.key(), sink, &mut report)?;
                }
            }
        } else {
            for f in self.list(&resolved)? {
                self.retrieve_one(&f.key(), sink, &mut report)?;
            }
        }
        Ok(report)
    }

    fn list(&self, req: &Request) -> Result<Vec<Field>> {
        let mut merged: BTreeMap<Key, Field> = BTreeMap::new();
        let mut failed = Vec::new();
        for lane in &self.lanes {
            match lane.store.list(req) {
                Ok(fields) => {
                    for f in fields {
                        merged.entry(f.key()).or_insert(f);
                    }
                }
                Err(e) if lane_fault(&e) => failed.push(format!("{}: {e}", lane.name)),
                Err(e) => return Err(e),
            }
        }
        // Without replicas a failed lane means fields silently absent: refuse instead.
        if !failed.is_empty() && (self.replicas == 1 || failed.len() >= self.replicas) {
            return Err(Error::Io {
                op: "list",
                path: "dist".into(),
                source: std::io::Error::other(format!(
                    "lanes failed and no replica covers them: {}",
                    failed.join("; ")
                )),
            });
        }
        Ok(merged.into_values().collect())
    }

    fn wipe(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        let mut total = WipeReport::default();
        for lane in &mut self.lanes {
            add_wipe(&mut total, lane.store.wipe(req, doit)?);
        }
        // Replicas report the same database more than once.
        total.databases.sort();
        total.databases.dedup();
        Ok(total)
    }

    fn purge(&mut self, req: &Request, doit: bool) -> Result<PurgeReport> {
        let mut total = PurgeReport::default();
        for lane in &mut self.lanes {
            add_purge(&mut total, lane.store.purge(req, doit)?);
        }
        Ok(total)
    }

    fn stats(&self, req: &Request) -> Result<Vec<DbStats>> {
        let mut out = Vec::new();
        for lane in &self.lanes {
            for mut s in lane.store.stats(req)? {
                s.db = format!("{} @ {}", s.db, lane.name);
                out.push(s);
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
    schema: Arc<Schema>,
    ctx: Context,
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
            schema,
            ctx,
        })
    }

    fn route_for(&mut self, key: &Key) -> Result<&mut Box<dyn FieldStore>> {
        let full = self
            .schema
            .split(key, &self.ctx)
            .map_err(|e| Error::BadKey {
                key: key.to_string(),
                reason: e.to_string(),
            })?
            .full();
        self.routes
            .iter_mut()
            .find(|(p, _)| p.matches(&full))
            .map(|(_, s)| s)
            .ok_or_else(|| Error::BadKey {
                key: key.to_string(),
                reason: "no select route matches it; add a catch-all route".into(),
            })
    }

    /// Routes whose pattern can overlap `req` (no keyword with disjoint value lists).
    fn overlapping(&self, req: &Request) -> Vec<&(Request, Box<dyn FieldStore>)> {
        let req = req
            .resolve(&self.schema, &self.ctx)
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

impl FieldStore for SelectStore {
    fn describe(&self) -> String {
        let r: Vec<String> = self
            .routes
            .iter()
            .map(|(p, s)| format!("[{p}] → {}", s.describe()))
            .collect();
        format!("select({})", r.join("; "))
    }
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<()> {
        self.route_for(key)?.archive(key, data)
    }
    fn flush(&mut self) -> Result<()> {
        for (_, s) in &mut self.routes {
            s.flush()?;
        }
        Ok(())
    }
    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        let routes = self.overlapping(req);
        if routes.len() == 1 {
            return routes[0].1.retrieve(req, sink);
        }
        // Several routes: retrieve each field from the route that lists it, in key order.
        let mut report = RetrieveReport::default();
        let mut missing: Option<Vec<Key>> = None;
        for (_, s) in routes {
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
    fn list(&self, req: &Request) -> Result<Vec<Field>> {
        let mut merged: BTreeMap<Key, Field> = BTreeMap::new();
        for (_, s) in self.overlapping(req) {
            for f in s.list(req)? {
                merged.entry(f.key()).or_insert(f);
            }
        }
        Ok(merged.into_values().collect())
    }
    fn wipe(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        let mut total = WipeReport::default();
        for (_, s) in &mut self.routes {
            add_wipe(&mut total, s.wipe(req, doit)?);
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
}
