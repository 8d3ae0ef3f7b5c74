//! `haar._haar.Store`, the opened store that `haar.FDB` wraps: one method per operation, each
//! reading its arguments, calling the library once through [`run`], and converting the answer.
//!
//! Owns the handle and its lock; selections, failures, buffers and watchers are their own
//! modules'.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use haar::Key;
use haar::WaitOutcome;
use haar::ingest::{self, IngestOptions, Input};
use haar::request::canonical_keyword;
use haar::watch::{self, Watcher as HaarWatcher};
use haar::{Error, Field, FieldBytes};
use haar::{FieldStore, FieldStoreExt, OpenOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::buffer::Buffer;
use crate::config::open_options;
use crate::failure::{Failure, Outcome, run};
use crate::output::{fields_list, key_dict};
use crate::selection::{named_request_of, read_selection, request_of, single_key};
use crate::watch::{Watcher, duration};

/// One opened store (`haar.FDB` wraps it). Shared by threads: every operation locks it, with
/// the GIL released.
#[pyclass(frozen, module = "haar._haar")]
pub struct Store {
    store: Mutex<Box<dyn FieldStore>>,
    opts: OpenOptions,
    description: String,
}

impl Store {
    fn lock(&self) -> Outcome<MutexGuard<'_, Box<dyn FieldStore>>> {
        self.store.lock().map_err(|_| {
            Failure::Panic(format!(
                "{}: an earlier call failed inside haar and left this handle unusable; open a new haar.FDB",
                self.description
            ))
        })
    }
}

#[pymethods]
impl Store {
    /// Opens the store a configuration describes: `kind` is `env`, `file` or `yaml`.
    #[new]
    #[pyo3(signature = (kind, value=None))]
    fn new(py: Python<'_>, kind: &str, value: Option<String>) -> PyResult<Store> {
        let kind = kind.to_string();
        run(py, move || {
            let opts = open_options(&kind, value)?;
            let store = opts.field_store()?;
            let description = store.describe();
            Ok(Store {
                store: Mutex::new(store),
                opts,
                description,
            })
        })
    }

    /// What the store is (`local posix:/data`, `remote host:port` …).
    fn describe(&self) -> String {
        self.description.clone()
    }

    /// Archives GRIB messages keyed by ecCodes, or `data` under `key` as given. Returns the
    /// number of fields archived. Invisible until `flush`.
    #[pyo3(signature = (data, key=None))]
    fn archive(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyBytes>,
        key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let bytes = data.as_bytes();
        let key = read_selection(key)?;
        run(py, || {
            let mut store = self.lock()?;
            if let Some(sel) = key {
                let req = request_of(Some(sel))?;
                let key = single_key(&req).ok_or_else(|| {
                    Failure::Haar(Error::BadKey {
                        key: req.to_string(),
                        reason: "an identifier names one value per keyword".into(),
                    })
                })?;
                store.archive(&key, bytes)?;
                return Ok(1);
            }
            let opts = IngestOptions {
                flush: false,
                ..IngestOptions::default()
            };
            let inputs = vec![Input::buffer("the data given to archive", bytes)];
            let report = ingest::ingest(&mut **store, inputs, &opts, &mut |_| {})?;
            if let Some(why) = report.failed.first() {
                return Err(Failure::Haar(Error::BadRequest {
                    request: "archive".into(),
                    reason: format!("nothing archived: {why}").into(),
                }));
            }
            Ok(report.fields)
        })
    }

    /// Makes every field archived through this handle durable and visible.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        run(py, || Ok(self.lock()?.flush()?))
    }

    /// Retrieves the fields of a selection into a [`Buffer`]: lent without a copy where the
    /// selection names one complete key and the store can lend (local pmem), by the rule of
    /// the C faces ([`haar::read::lent_one`]). Missing fields, and a selection matching no
    /// field, raise `haar.MissingError`.
    fn retrieve(&self, py: Python<'_>, selection: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let selection = read_selection(Some(selection))?;
        run(py, || {
            let req = named_request_of(
                selection,
                "an empty selection retrieves everything; name the fields",
            )?;
            let store = self.lock()?;
            let (bytes, missing) = haar::read::retrieve_all(&**store, std::slice::from_ref(&req))?;
            if !missing.is_empty() {
                return Err(Failure::Missing(format!(
                    "retrieve {req} from {}: {missing}; list the selection to see what is stored",
                    self.description
                )));
            }
            Ok(Buffer { bytes })
        })
    }

    /// Values of each field of a selection at half-open index `ranges` `[(i, j), ...]`, or at
    /// the grid points nearest to `points` `[(lat, lon), ...]`: a list of
    /// `(key, method, ranges, values)` per field, `values` the values of every range in range
    /// order as little-endian float64 bytes (NaN where missing; one bytes object per field, not
    /// a Python float per value), `method` `"jump"` (only those bytes read) or
    /// `"eccodes-whole-field"`.
    #[pyo3(signature = (selection, ranges=None, points=None))]
    fn extract<'py>(
        &self,
        py: Python<'py>,
        selection: &Bound<'_, PyAny>,
        ranges: Option<Vec<(u64, u64)>>,
        points: Option<Vec<(f64, f64)>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let selection = read_selection(Some(selection))?;
        let sel = match (ranges, points) {
            (Some(r), None) => haar::extract::Selection::Ranges(r),
            (None, Some(p)) => haar::extract::Selection::Points(p),
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "give exactly one of ranges=[(i, j), ...] or points=[(lat, lon), ...]",
                ));
            }
        };
        let got = run(py, || {
            let req = request_of(selection)?;
            Ok(haar::extract::extract(&**self.lock()?, &req, &sel)?)
        })?;
        let out = PyList::empty(py);
        for e in &got {
            let flat: Vec<u8> = e
                .values
                .iter()
                .flatten()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            out.append((
                key_dict(py, &e.key)?,
                e.method.as_str(),
                e.ranges.clone(),
                PyBytes::new(py, &flat),
            ))?;
        }
        Ok(out)
    }

    /// Flushed fields matching a selection: `(db, index, datum, object, offset, length,
    /// path)` tuples, keys as dicts, sorted by key; `path` is the file holding the bytes at
    /// `offset` (posix: the data file, pmem: the pool), `None` where there is none (servers).
    /// With `masked`, each field is followed by the masked copies of its key the store still
    /// holds (newest first) until a purge, through servers too (a store that keeps none it
    /// can list, such as FDB5's, fails naming itself).
    #[pyo3(signature = (selection=None, masked=false))]
    fn list<'py>(
        &self,
        py: Python<'py>,
        selection: Option<&Bound<'_, PyAny>>,
        masked: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let selection = read_selection(selection)?;
        let fields = run(py, || {
            let req = request_of(selection)?;
            let store = self.lock()?;
            let fields = store.list_maybe_masked(&req, masked)?;
            // Damage is never a clean answer: a listing that may miss fields fails.
            if let Some(e) = haar::read::damage(&**store, &req, "the listing")? {
                return Err(e.into());
            }
            with_paths(&**store, fields)
        })?;
        fields_list(py, &fields)
    }

    /// The fields a selection names completely, as `list` gives them: each field the
    /// selection matches, kept only if the keywords the selection names are every keyword
    /// its schema rule needs (optional ones left out match any value, as in a retrieve), as
    /// FDB5's `inspect` finds the fields of complete keys and nothing for a partial one.
    fn inspect<'py>(
        &self,
        py: Python<'py>,
        selection: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let selection = read_selection(Some(selection))?;
        let fields = run(py, || {
            let req = request_of(selection)?;
            let store = self.lock()?;
            let named: Vec<String> = req
                .params
                .iter()
                .map(|p| canonical_keyword(&p.keyword).unwrap_or_else(|_| p.keyword.clone()))
                .collect();
            let mut kept = Vec::new();
            for f in store.list(&req)? {
                let key = f.key();
                let mut given = Key::new();
                for (k, v) in key.iter() {
                    if named.iter().any(|n| n == k) {
                        given.push(k.to_string(), v.to_string());
                    }
                }
                // Complete when what was named splits by the schema (every keyword it needs
                // is named; optional ones left out match any value, as in a retrieve).
                if store.split(&given).is_ok() {
                    kept.push(f);
                }
            }
            with_paths(&**store, kept)
        })?;
        fields_list(py, &fields)
    }

    /// The bytes `offset..offset + length` of data object `object` of database `db` (its key
    /// as `k=v,...`), as `list` located them: how a masked copy (which no key retrieves any
    /// more) is read, from any store kind. `index` and `datum` (as `k=v,...`) route the read
    /// through `dist`; with `crc`, bytes with another CRC-32C are refused.
    #[pyo3(signature = (db, object, offset, length, index=None, datum=None, crc=None))]
    #[allow(clippy::too_many_arguments)]
    fn read_located(
        &self,
        py: Python<'_>,
        db: &str,
        object: u64,
        offset: u64,
        length: u64,
        index: Option<&str>,
        datum: Option<&str>,
        crc: Option<u32>,
    ) -> PyResult<Buffer> {
        let bytes = run(py, || {
            let parse = |level: &str, text: Option<&str>| -> Outcome<Key> {
                match text {
                    None => Ok(Key::new()),
                    Some(t) => {
                        Key::parse(t).map_err(|e| Failure::Missing(format!("{level} {t}: {e}")))
                    }
                }
            };
            let field = haar::Field {
                db: parse("database", Some(db))?,
                index: parse("index", index)?,
                datum: parse("datum", datum)?,
                data: haar::format::DataRef {
                    object,
                    offset,
                    length,
                    crc: crc.unwrap_or(0),
                },
            };
            Ok(self.lock()?.read_at(&field, crc)?)
        })?;
        Ok(Buffer {
            bytes: FieldBytes::Owned(bytes),
        })
    }

    /// Values present per keyword among the fields matching a selection.
    #[pyo3(signature = (selection=None))]
    fn axes(
        &self,
        py: Python<'_>,
        selection: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<BTreeMap<String, Vec<String>>> {
        let selection = read_selection(selection)?;
        run(py, || {
            let req = request_of(selection)?;
            let axes = self.lock()?.axes(&req)?;
            Ok(axes
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().collect()))
                .collect())
        })
    }

    /// Removes fields (a dry run unless `doit`): `(databases removed, fields, bytes, files
    /// haar did not write)`. The files are those in databases removed whole: a wipe with
    /// `doit` refuses them (removing nothing) unless `unsafe_wipe_all`, which removes them
    /// too; a dry run names them.
    #[pyo3(signature = (selection, doit, unsafe_wipe_all=false))]
    #[allow(clippy::type_complexity)]
    fn wipe(
        &self,
        py: Python<'_>,
        selection: &Bound<'_, PyAny>,
        doit: bool,
        unsafe_wipe_all: bool,
    ) -> PyResult<(Vec<String>, usize, u64, Vec<String>)> {
        let selection = read_selection(Some(selection))?;
        run(py, || {
            let req = named_request_of(
                selection,
                "an empty selection would wipe everything; name what to wipe",
            )?;
            let mut store = self.lock()?;
            // Looked at before a wipe removes them (unsafe_wipe_all) or refuses them (doit).
            let unowned = if doit && !unsafe_wipe_all {
                Vec::new()
            } else {
                store.unowned_files(&req)?
            };
            let r = if unsafe_wipe_all {
                store.wipe_unsafe_all(&req, doit)?
            } else {
                store.wipe(&req, doit)?
            };
            let unowned = unowned.iter().map(|p| p.display().to_string()).collect();
            Ok((r.databases, r.fields, r.bytes, unowned))
        })
    }

    /// Drops masked and wiped fields (a dry run unless `doit`):
    /// `(databases, dropped fields, dropped bytes, freed bytes)`.
    #[pyo3(signature = (selection=None, doit=false))]
    fn purge(
        &self,
        py: Python<'_>,
        selection: Option<&Bound<'_, PyAny>>,
        doit: bool,
    ) -> PyResult<(usize, u64, u64, u64)> {
        let selection = read_selection(selection)?;
        run(py, || {
            let req = request_of(selection)?;
            let r = self.lock()?.purge(&req, doit)?;
            Ok((
                r.databases,
                r.dropped_fields,
                r.dropped_bytes,
                r.freed_bytes,
            ))
        })
    }

    /// Per-database statistics: `(db, fields, bytes, dead fields, dead bytes, problems)`.
    #[pyo3(signature = (selection=None))]
    #[allow(clippy::type_complexity)]
    fn stats(
        &self,
        py: Python<'_>,
        selection: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(String, u64, u64, u64, u64, Vec<String>)>> {
        let selection = read_selection(selection)?;
        run(py, || {
            let req = request_of(selection)?;
            let s = self.lock()?.stats(&req)?;
            Ok(s.into_iter()
                .map(|d| {
                    (
                        d.db,
                        d.fields,
                        d.bytes,
                        d.dead_fields,
                        d.dead_bytes,
                        d.problems,
                    )
                })
                .collect())
        })
    }

    /// Flush events for a selection (see [`Watcher`]).
    #[pyo3(signature = (selection=None))]
    fn watch(&self, py: Python<'_>, selection: Option<&Bound<'_, PyAny>>) -> PyResult<Watcher> {
        let selection = read_selection(selection)?;
        run(py, || {
            let req = request_of(selection)?;
            let w = HaarWatcher::open(&self.opts, &req)?;
            Ok(Watcher {
                inner: Mutex::new(w),
            })
        })
    }

    /// Waits until every key of the selection is flushed; returns how many fields that is.
    /// Raises `haar.TimeoutError` naming the missing keys when `timeout` seconds pass first.
    fn wait(&self, py: Python<'_>, selection: &Bound<'_, PyAny>, timeout: f64) -> PyResult<usize> {
        let timeout = duration(timeout)?;
        let selection = read_selection(Some(selection))?;
        run(py, || {
            let req = request_of(selection)?;
            match watch::wait(&self.opts, &req, timeout)? {
                WaitOutcome::Complete { fields } => Ok(fields),
                WaitOutcome::TimedOut { missing } => Err(Failure::Timeout(
                    watch::timed_out(&req, &missing).to_string(),
                    missing,
                )),
            }
        })
    }
}

/// Fields with the file holding each one's bytes, where the store has such a file.
fn with_paths(store: &dyn FieldStore, fields: Vec<Field>) -> Outcome<Vec<(Field, Option<String>)>> {
    let mut out = Vec::with_capacity(fields.len());
    // One data file holds many fields: ask once per (database, object).
    let mut known: Option<((Key, u64), Option<String>)> = None;
    for f in fields {
        let id = (f.db.clone(), f.data.object);
        let path = match &known {
            Some((k, p)) if *k == id => p.clone(),
            _ => {
                let p = store.data_path(&f)?.map(|p| p.display().to_string());
                known = Some((id, p.clone()));
                p
            }
        };
        out.push((f, path));
    }
    Ok(out)
}
