//! The `select` front-end (design §7): routes fields to stores by key patterns. It owns the
//! routing (archives to the first matching route, reads from every overlapping one) and knows
//! nothing of lanes, replicas or servers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use haar_core::Key;
use haar_core::request::{Request, Values};
use haar_core::schema::{Schema, SplitKey};
use haar_core::value::Context;

use super::{add_purge, add_wipe};
use crate::backend::FieldBytes;
use crate::error::{Error, Result};
use crate::frontend::{FieldStore, FieldStoreExt, Sink};
use crate::store::axes_of;
use crate::store::{
    Checkpoint, DbStats, Field, PurgeReport, RetrieveReport, Store, StoreOptions, WipeReport,
};

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
    /// Forwarded to the overlapping routes; per key, the copies of the first route that lists
    /// it (as [`FieldStore::list`] keeps its field), so each key's live and masked copies come
    /// from one store and stay together. A route without the capability fails it, naming
    /// itself.
    fn list_with_masked(&self, req: &Request) -> Option<Result<Vec<Field>>> {
        let run = || {
            let mut merged: BTreeMap<Key, Vec<Field>> = BTreeMap::new();
            for (_, s) in self.overlapping(req) {
                for (key, copies) in super::key_runs(s.list_maybe_masked(req, true)?) {
                    merged.entry(key).or_insert(copies);
                }
            }
            Ok(merged.into_values().flatten().collect())
        };
        Some(run())
    }
    /// Forwarded to the route that archives the location's key when `field` names it whole;
    /// else to each route in turn, the first that reads it (with `crc`, bytes of that
    /// checksum) answering.
    fn read_located(&self, field: &Field, crc: Option<u32>) -> Option<Result<Vec<u8>>> {
        let full = field.key();
        if self.opts.split(&full).is_ok()
            && let Some((_, s)) = self.routes.iter().find(|(p, _)| p.matches(&full))
        {
            return Some(s.read_at(field, crc));
        }
        let mut first = None;
        for (_, s) in &self.routes {
            match s.read_at(field, crc) {
                Ok(bytes) => return Some(Ok(bytes)),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        first.map(Err)
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
