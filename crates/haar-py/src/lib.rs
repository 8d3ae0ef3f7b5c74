//! haar's Python face: the extension module `haar._haar`, which the pure-Python package
//! `haar` (under `python/` in the repository) wraps in pyfdb's shape.
//!
//! Thin by design: stores are opened by [`haar::OpenOptions`], GRIB is keyed by
//! [`haar::ingest`], watch/wait are [`haar::watch`]; this crate only converts between Python
//! and those calls. Every call that touches storage or the network releases the GIL
//! ([`Python::detach`]), and every store handle sits behind a [`Mutex`] so that one `FDB`
//! object can be shared by threads. No panic crosses into Python as a `PanicException`: every
//! entry point runs under [`catch_unwind`] and a panic becomes `haar.Error`.
//!
//! The exception classes live in Python (`haar/_errors.py`, so that they can subclass both
//! `haar.Error` and the builtin they resemble); this module looks them up when it raises.
//!
//! Zero copy: a retrieve keeps the [`haar::FieldBytes`] that [`haar::read::retrieve_all`]
//! returns inside a [`Buffer`] (lent by the store, pmem's pool mapping, for the requests
//! [`haar::read::lent_one`] lends, as the C faces do), and [`BufferExporter`](exporter) exposes
//! it through the buffer protocol. PyO3 offers `__getbuffer__` under the stable ABI only from Python 3.11,
//! and the wheel is abi3 for 3.10, so that one slot is registered by hand (see [`exporter`]).

#![warn(missing_docs)]
#![warn(unreachable_pub)]

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use haar::Key;
use haar::WaitOutcome;
use haar::error::Class;
use haar::ingest::{self, IngestOptions, Input};
use haar::request::{KEYWORDS, Request, Values, canonical_keyword};
use haar::watch::{self, Watcher as HaarWatcher};
use haar::{ConfigSource, FieldStore, FieldStoreExt, OpenOptions};
use haar::{Error, Field, FieldBytes};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMapping, PyString};

pub mod exporter;

/// What a call into the library can end in, before it becomes a Python exception.
enum Failure {
    /// An error of the library, classed by [`Error::class`].
    Haar(Error),
    /// A wait that timed out: the message and the keys still missing.
    Timeout(String, Vec<Key>),
    /// Selected fields that are not stored: the message names them.
    Missing(String),
    /// A panic inside the library (a bug): the store handle may be unusable.
    Panic(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Haar(e)
    }
}

type Outcome<T> = std::result::Result<T, Failure>;

/// Builds the `haar._errors` exception for `f`.
fn raise(py: Python<'_>, f: Failure) -> PyErr {
    let (class, message, missing) = match f {
        Failure::Haar(e) => {
            let class = match e.class() {
                Class::Input => "BadRequestError",
                Class::Missing => "MissingError",
                Class::Storage => "StorageError",
                _ => "Error",
            };
            (class, e.to_string(), None)
        }
        Failure::Timeout(m, keys) => ("TimeoutError", m, Some(keys)),
        Failure::Missing(m) => ("MissingError", m, None),
        Failure::Panic(m) => (
            "Error",
            format!("internal error in haar (a bug): {m}"),
            None,
        ),
    };
    let made = (|| -> PyResult<PyErr> {
        let errors = py.import("haar._errors")?;
        let exc = errors.getattr(class)?.call1((message.clone(),))?;
        if let Some(keys) = missing {
            let list = PyList::empty(py);
            for k in &keys {
                list.append(key_dict(py, k)?)?;
            }
            exc.setattr("missing", list)?;
        }
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|e| e)
}

/// Runs `f` without the GIL, turning a panic into [`Failure::Panic`] and any failure into
/// the matching `haar` exception.
fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> Outcome<T> + Send) -> PyResult<T> {
    let out = py.detach(|| match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(Failure::Panic(panic_text(&p))),
    });
    out.map_err(|f| raise(py, f))
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// A key as a Python dict, keyword order kept.
fn key_dict<'py>(py: Python<'py>, key: &Key) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in key.iter() {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// A selection from Python: a MARS string, or keyword → values. `None` selects everything.
enum Selection {
    Text(String),
    Map(Vec<(String, Vec<String>)>),
}

/// Reads a selection: a `str`, or a mapping whose values are strings (`a/b` splits), numbers
/// or iterables of those. Done here rather than in Python: it is on every call's path.
fn read_selection(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Selection>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Some(Selection::Text(s.to_str()?.to_string())));
    }
    let bad = |m: String| {
        raise(
            obj.py(),
            Failure::Haar(Error::BadRequest {
                request: m.clone(),
                reason: "give a dict of keyword to value(s), values as strings, numbers or lists of them, or a MARS string like 'class=od,param=130/167'".into(),
            }),
        )
    };
    let mut out = Vec::new();
    let mut add = |k: Bound<'_, PyAny>, v: Bound<'_, PyAny>| -> PyResult<()> {
        let k = k.str()?.to_str()?.to_string();
        let mut values = Vec::with_capacity(1);
        push_values(&v, &mut values, true).map_err(|_| bad(format!("{k}={v}")))?;
        out.push((k, values));
        Ok(())
    };
    // A dict (the usual case) is walked directly; any other mapping through items().
    if let Ok(d) = obj.cast::<PyDict>() {
        for (k, v) in d.iter() {
            add(k, v)?;
        }
    } else {
        let map = obj.cast::<PyMapping>().map_err(|_| bad(format!("{obj}")))?;
        for item in map.items()?.iter() {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            add(k, v)?;
        }
    }
    Ok(Some(Selection::Map(out)))
}

fn push_values(v: &Bound<'_, PyAny>, out: &mut Vec<String>, nested: bool) -> PyResult<()> {
    if let Ok(s) = v.cast::<PyString>() {
        out.extend(s.to_str()?.split('/').map(str::to_string));
    } else if v.is_none() || v.is_instance_of::<PyBool>() {
        return Err(PyValueError::new_err("not a value"));
    } else if v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>() {
        out.push(v.str()?.to_str()?.to_string());
    } else if nested {
        for item in v.try_iter()? {
            push_values(&item?, out, false)?;
        }
    } else {
        return Err(PyValueError::new_err("not a value"));
    }
    Ok(())
}

fn request_of(sel: Option<Selection>) -> Outcome<Request> {
    let bad = |request: String, reason: String| {
        Failure::Haar(Error::BadRequest {
            request,
            reason: reason.into(),
        })
    };
    match sel {
        None => Ok(Request::default()),
        Some(Selection::Text(t)) => {
            let reqs = haar::open::requests(Some(&t))?;
            match <[Request; 1]>::try_from(reqs) {
                Ok([r]) => Ok(r),
                Err(v) => Err(bad(t, format!("expected one request, found {}", v.len()))),
            }
        }
        Some(Selection::Map(m)) => {
            let mut r = Request::default();
            for (k, v) in m {
                if v.is_empty() {
                    return Err(bad(
                        format!("{k}=[]"),
                        format!("{k} has no value; leave it out to select any value"),
                    ));
                }
                // A full keyword with plain values is taken as is (no parse on every call);
                // anything else goes through the request language, so that
                // abbreviations, `all` and `to`/`by` mean what they mean in a MARS string.
                // One empty value is an optional keyword the field does not have, as `list`
                // shows it (`levelist=` of a surface field): the request language has no
                // spelling for it, so it is taken as is.
                if is_plain(&k, &v) || is_empty_value(&k, &v) {
                    r.set(k, Values::List(v));
                    continue;
                }
                let text = format!("{k}={}", v.join("/"));
                let one = Request::parse(&text).map_err(|e| bad(text.clone(), e.to_string()))?;
                for p in one.params {
                    r.set(p.keyword, p.values);
                }
            }
            Ok(r)
        }
    }
}

/// A keyword already in its full lower-case form with values the request language would
/// keep as they are.
fn is_plain(keyword: &str, values: &[String]) -> bool {
    let special = |v: &str| {
        v.is_empty()
            || ["to", "by", "all"]
                .iter()
                .any(|w| v.eq_ignore_ascii_case(w))
            || v.contains(['/', ',', '=', '"', '\'', ' '])
    };
    (KEYWORDS.contains(&keyword) || canonical_keyword(keyword).is_ok_and(|c| c == keyword))
        && !values.iter().any(|v| special(v))
}

/// One empty value of a full keyword: an optional keyword a field does not have.
fn is_empty_value(keyword: &str, values: &[String]) -> bool {
    matches!(values, [v] if v.is_empty())
        && (KEYWORDS.contains(&keyword) || canonical_keyword(keyword).is_ok_and(|c| c == keyword))
}

/// The key an identifier given to `archive` names, if every keyword has exactly one plain
/// value. (Not a read rule: which reads are lent is `haar::read::lent_one`'s.)
fn single_key(req: &Request) -> Option<Key> {
    let mut key = Key::new();
    for p in &req.params {
        match &p.values {
            Values::List(v) if v.len() == 1 && v[0] != "to" && v[0] != "by" => {
                key.push(p.keyword.clone(), v[0].clone())
            }
            _ => return None,
        }
    }
    (!key.is_empty()).then_some(key)
}

/// How the configuration is given, from the Python layer.
fn open_options(kind: &str, value: Option<String>) -> Outcome<OpenOptions> {
    let config = match (kind, value) {
        ("env", _) => ConfigSource::from_env(),
        ("file", Some(p)) => ConfigSource::File(p.into()),
        ("yaml", Some(text)) => ConfigSource::Yaml {
            text,
            origin: "the config given to haar.FDB".into(),
        },
        (k, _) => {
            return Err(Failure::Haar(Error::Config(format!(
                "unknown configuration kind {k:?} (env, file or yaml)"
            ))));
        }
    };
    Ok(OpenOptions {
        config,
        ..OpenOptions::default()
    })
}

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
            let req = request_of(selection)?;
            if req.params.is_empty() {
                return Err(Failure::Haar(Error::BadRequest {
                    request: String::new(),
                    reason: "an empty selection retrieves everything; name the fields".into(),
                }));
            }
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
    /// With `masked`, each field is followed by the masked copies of its key a local store
    /// still holds (newest first) until a purge; through servers only the live copy is listed.
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
            let fields = match store.as_local() {
                Some(local) if masked => local.list_with_masked(&req)?,
                _ => store.list(&req)?,
            };
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
    /// more) is read. A local store only.
    fn read_located(
        &self,
        py: Python<'_>,
        db: &str,
        object: u64,
        offset: u64,
        length: u64,
    ) -> PyResult<Buffer> {
        let bytes = run(py, || {
            let db = Key::parse(db).map_err(|e| Failure::Missing(format!("database {db}: {e}")))?;
            let store = self.lock()?;
            let Some(local) = store.as_local() else {
                return Err(Failure::Missing(format!(
                    "{} lends no located reads: read a listed field by its key",
                    store.describe()
                )));
            };
            let field = haar::Field {
                db: db.clone(),
                index: Key::new(),
                datum: Key::new(),
                data: haar::format::DataRef {
                    object,
                    offset,
                    length,
                    crc: 0,
                },
            };
            local
                .with_field_ranges(&field, |read| read(0, length))?
                .ok_or_else(|| Failure::Missing(format!("database {db} is not stored")))?
                .map_err(Failure::from)
        })?;
        Ok(Buffer { bytes })
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
            let req = request_of(selection)?;
            if req.params.is_empty() {
                return Err(Failure::Haar(Error::BadRequest {
                    request: String::new(),
                    reason: "an empty selection would wipe everything; name what to wipe".into(),
                }));
            }
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

/// `list`'s tuples: `(db, index, datum, object, offset, length, path)`.
fn fields_list<'py>(
    py: Python<'py>,
    fields: &[(Field, Option<String>)],
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for (f, path) in fields {
        out.append((
            key_dict(py, &f.db)?,
            key_dict(py, &f.index)?,
            key_dict(py, &f.datum)?,
            f.data.object,
            f.data.offset,
            f.data.length,
            path.as_deref(),
        ))?;
    }
    Ok(out)
}

fn duration(seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| PyValueError::new_err(format!("timeout {seconds}: give seconds, >= 0")))
}

/// A stream of flush events for a selection ([`haar::watch::Watcher`]).
#[pyclass(frozen, module = "haar._haar")]
pub struct Watcher {
    inner: Mutex<HaarWatcher>,
}

#[pymethods]
impl Watcher {
    /// The next event as `(key, length, origin)`, waiting at most `timeout` seconds (`None`:
    /// no limit); `None` when the time passes first.
    #[pyo3(signature = (timeout=None))]
    #[allow(clippy::type_complexity)]
    fn next<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<(Bound<'py, PyDict>, u64, String)>> {
        let limit = timeout.map(duration).transpose()?;
        // Waits in slices so that Ctrl-C (a signal checked with the GIL) stops a wait with no
        // limit.
        let slice = Duration::from_millis(200);
        let end = limit.map(|l| Instant::now() + l);
        loop {
            let until = match end {
                Some(e) => e.min(Instant::now() + slice),
                None => Instant::now() + slice,
            };
            let got = run(py, || {
                let mut w = self.inner.lock().map_err(|_| {
                    Failure::Panic("this watcher failed earlier; open a new one".into())
                })?;
                w.next_before(until).transpose().map_err(Failure::from)
            })?;
            if let Some(ev) = got {
                return Ok(Some((key_dict(py, &ev.key)?, ev.length, ev.origin)));
            }
            if end.is_some_and(|e| Instant::now() >= e) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }
}

/// Retrieved bytes: owned, or lent by the store (pmem: the pool mapping, kept mapped by this
/// object). Read-only; exposed through the buffer protocol by `haar.DataHandle`.
#[pyclass(frozen, module = "haar._haar")]
pub struct Buffer {
    bytes: FieldBytes,
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the bytes are lent by the store (no copy was made).
    #[getter]
    fn lent(&self) -> bool {
        matches!(self.bytes, FieldBytes::Lent { .. })
    }

    /// `(self, address, length)`: what the buffer protocol exports.
    fn buffer_info(slf: &Bound<'_, Self>) -> (Py<Buffer>, usize, usize) {
        let b = &slf.get().bytes;
        (slf.clone().unbind(), b.as_ptr() as usize, b.len())
    }

    /// A copy of `start..end` (clamped) as `bytes`.
    fn slice<'py>(&self, py: Python<'py>, start: usize, end: usize) -> Bound<'py, PyBytes> {
        let end = end.min(self.bytes.len());
        let start = start.min(end);
        PyBytes::new(py, &self.bytes[start..end])
    }
}

/// Panics inside the library, as a bug would: lets the tests check that a panic reaches
/// Python as `haar.Error`, never as `PanicException` or an abort. Only in a wheel built with
/// the `testing` feature (`make pytest`).
#[cfg(feature = "testing")]
#[pyfunction]
fn _panic_for_tests(py: Python<'_>) -> PyResult<()> {
    run(py, || -> Outcome<()> {
        panic!("deliberate panic for the tests")
    })
}

/// The configuration a source names, as JSON text, for `FDB.config()`: the YAML given or read
/// (a file, or from the environment `$HAAR_CONFIG`, then FDB5's variables: haar's keys or
/// FDB5's, as written), or, where the environment names none, haar's defaults as the library
/// uses them. Opens no store.
#[pyfunction]
#[pyo3(signature = (kind, value=None))]
fn config_json(py: Python<'_>, kind: &str, value: Option<String>) -> PyResult<String> {
    let kind = kind.to_string();
    run(py, move || {
        let opts = open_options(&kind, value)?;
        let parsed: serde_json::Value = match opts.config.text()? {
            Some((text, origin)) => serde_yaml_ng::from_str(&text)
                .map_err(|e| Error::Config(format!("{origin}: not YAML: {e}")))?,
            None => serde_json::to_value(opts.config()?)
                .map_err(|e| Error::Config(format!("haar's default configuration: {e}")))?,
        };
        Ok(parsed.to_string())
    })
}

/// The extension module.
#[pymodule]
fn _haar(m: &Bound<'_, PyModule>) -> PyResult<()> {
    #[cfg(feature = "testing")]
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    m.add_function(wrap_pyfunction!(config_json, m)?)?;
    m.add_class::<Store>()?;
    m.add_class::<Watcher>()?;
    m.add_class::<Buffer>()?;
    m.add("BufferExporter", exporter::exporter_type(m.py())?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &[&str])]) -> Option<Selection> {
        Some(Selection::Map(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
                .collect(),
        ))
    }

    fn request(sel: Option<Selection>) -> Request {
        match request_of(sel) {
            Ok(r) => r,
            Err(_) => panic!("refused"),
        }
    }

    #[test]
    fn dict_and_mars_string_selections_make_the_same_request() {
        let from_map = request(map(&[
            ("class", &["od"]),
            ("param", &["130", "167"]),
            ("step", &["0", "to", "12", "by", "6"]),
        ]));
        let from_text = request(Some(Selection::Text(
            "class=od,param=130/167,step=0/to/12/by/6".into(),
        )));
        assert_eq!(from_map, from_text);
        assert_eq!(from_map.expand().len(), 10); // unresolved: to/by still literal
    }

    #[test]
    fn abbreviations_go_through_the_request_language() {
        let r = request(map(&[("levtype", &["sfc"]), ("PARAM", &["167"])]));
        assert!(r.get("param").is_some(), "{r}");
        assert!(!is_plain("PARAM", &["167".into()]));
        assert!(!is_plain("step", &["all".into()]));
        assert!(is_plain("step", &["6".into()]));
    }

    #[test]
    fn one_key_only_when_every_keyword_has_one_plain_value() {
        let one = request(map(&[("class", &["od"]), ("step", &["6"])]));
        assert_eq!(single_key(&one).unwrap().to_string(), "class=od,step=6");
        let two = request(map(&[("class", &["od"]), ("step", &["6", "12"])]));
        assert!(single_key(&two).is_none());
        assert!(single_key(&Request::default()).is_none());
    }

    #[test]
    fn one_empty_value_names_an_optional_keyword_the_field_lacks() {
        // What list shows for a surface field (`levelist=`) retrieves it as one key.
        let r = request(map(&[("levtype", &["sfc"]), ("levelist", &[""])]));
        assert_eq!(single_key(&r).unwrap().to_string(), "levtype=sfc,levelist=");
        assert!(!is_empty_value("LEVELIST", &["".into()]));
        assert!(!is_empty_value("levelist", &["".into(), "500".into()]));
    }

    #[test]
    fn an_empty_value_list_is_refused_naming_the_keyword() {
        match request_of(map(&[("param", &[])])) {
            Err(Failure::Haar(e)) => assert!(e.to_string().contains("param has no value"), "{e}"),
            _ => panic!("accepted"),
        }
    }
}
