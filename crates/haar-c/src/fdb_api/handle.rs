//! FDB handles (`fdb_handle_t`): opening a store from the environment or from YAML, archive
//! (one key and its bytes, or a buffer of GRIB messages keyed by ecCodes), flush, retrieve.
//!
//! Owns the mapping of these calls onto `dyn FieldStore`; opening is `haar::open`, GRIB
//! keying is `haar::ingest`. A retrieve of one complete key borrows the field's bytes from
//! the store where it lends them (`FieldStore::retrieve_lent`: pmem, no copy).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, c_int};

use haar::Key;
use haar::backend::FieldBytes;
use haar::ingest::{self, IngestOptions, Input};
use haar::request::Request;
use haar::schema::SplitKey;
use haar::{
    Checkpoint, DbStats, Field, PurgeReport, RetrieveReport, Sink, StoreOptions, WipeReport,
};
use haar::{ConfigSource, FieldStore, FieldStoreExt, OpenOptions};

use super::keys::{fdb_key_t, fdb_request_t};
use super::object::{self, Obj, kind};
use super::reader::fdb_datareader_t;
use super::{call_ok, put};
use crate::ffi::{Failure, FfiResult, str_arg};

/// An open store (`fdb_handle_t`).
pub struct HandleObj {
    /// The store every call goes to.
    pub store: Box<dyn FieldStore>,
    /// What `fdb_retrieve` does when fields it names are absent.
    pub missing: Missing,
}

/// What `fdb_retrieve` does when a request names fields that are not there: the
/// configuration's top-level `fdb5_missing` (`skip`, the default, or `error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// As FDB5 (`fdb_c.h`: "Return all available data whose metadata matches"): success with
    /// the fields that are there.
    Skip,
    /// haar's own faces' rule: fail, naming the missing keys.
    Error,
}

impl Missing {
    /// `fdb5_missing` of the configuration `opts` names (`skip` where it says nothing).
    fn configured(opts: &OpenOptions) -> FfiResult<Missing> {
        let Some((text, origin)) = opts.config.text()? else {
            return Ok(Missing::Skip);
        };
        let value: serde_yaml_ng::Value = match serde_yaml_ng::from_str(&text) {
            Ok(v) => v,
            // Opening the store words the syntax error.
            Err(_) => return Ok(Missing::Skip),
        };
        match value.get("fdb5_missing") {
            None => Ok(Missing::Skip),
            Some(v) => match v.as_str() {
                Some("skip") => Ok(Missing::Skip),
                Some("error") => Ok(Missing::Error),
                _ => Err(Failure::input(format!(
                    "{origin}: fdb5_missing must be `skip` (FDB5's behaviour, the default) or `error` (fdb_retrieve fails naming absent fields), not {v:?}"
                ))),
            },
        }
    }
}
kind!(HandleObj, 0x1a, "fdb_handle_t", "fdb_new_handle");

/// FDB5's `fdb_handle_t`.
pub type fdb_handle_t = Obj<HandleObj>;

fn open(opts: &OpenOptions) -> FfiResult<*mut fdb_handle_t> {
    let missing = Missing::configured(opts)?;
    let store = opts.field_store()?;
    object::new(HandleObj { store, missing })
}

/// Opens the store the environment names in `*fdb`: `$HAAR_CONFIG` (haar's configuration),
/// else FDB5's `$FDB5_CONFIG` (YAML text), `$FDB5_CONFIG_FILE`, `$FDB_HOME/etc/fdb/config.yaml`
/// (a local TOC configuration opens a haar store under the same roots with the same schema),
/// else haar's defaults. Delete it with `fdb_delete_handle`.
///
/// # Safety
/// `fdb` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_new_handle(fdb: *mut *mut fdb_handle_t) -> c_int {
    call_ok(|| {
        out_arg(fdb)?;
        let h = open(&OpenOptions::from_env())?;
        // SAFETY: per the caller's contract.
        unsafe { put(fdb, h, "fdb") }
    })
}

/// Checks the out-parameter before anything is opened.
fn out_arg(fdb: *mut *mut fdb_handle_t) -> FfiResult<()> {
    if fdb.is_null() {
        return Err(Failure::input(
            "fdb is NULL: pass where to store the handle",
        ));
    }
    Ok(())
}

/// Opens the store `system_config` describes in `*fdb`: an FDB5 configuration (a local TOC
/// one maps onto a haar store under its roots with its schema) or a haar one (local, remote,
/// dist, select); an empty or blank one means the environment's, as `fdb_new_handle`.
/// `user_config` (FDB5's per-user settings) may be NULL and is not used: haar has no such
/// settings. Delete the handle with `fdb_delete_handle`.
///
/// # Safety
/// `fdb` is null or valid for a write; the configs are null or C strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_new_handle_from_yaml(
    fdb: *mut *mut fdb_handle_t,
    system_config: *const c_char,
    user_config: *const c_char,
) -> c_int {
    call_ok(|| {
        out_arg(fdb)?;
        // SAFETY: per the caller's contract.
        let text = unsafe { str_arg(system_config, "system_config")? };
        if !user_config.is_null() {
            // SAFETY: per the caller's contract (checked to be text, then not used).
            unsafe { str_arg(user_config, "user_config")? };
        }
        let opts = if text.trim().is_empty() {
            OpenOptions::from_env()
        } else {
            OpenOptions {
                config: ConfigSource::Yaml {
                    text: text.to_string(),
                    origin: "fdb_new_handle_from_yaml system_config".into(),
                },
                ..OpenOptions::default()
            }
        };
        let h = open(&opts)?;
        // SAFETY: per the caller's contract.
        unsafe { put(fdb, h, "fdb") }
    })
}

/// Archives `length` bytes at `data` under `key` (a complete key of the store's schema);
/// invisible until `fdb_flush`. The bytes are copied before this returns.
///
/// # Safety
/// `fdb`, `key` are null or live objects of this library; `data` is null or valid for
/// `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_archive(
    fdb: *mut fdb_handle_t,
    key: *mut fdb_key_t,
    data: *const c_char,
    length: usize,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let (mut h, k) = unsafe { (object::live(fdb)?, object::live(key)?) };
        // SAFETY: per the caller's contract.
        let bytes = unsafe { bytes_arg(data, length)? };
        h.store.archive(&k.key, bytes)?;
        Ok(())
    })
}

/// `length` bytes at `data` as a slice; the error says what to pass.
///
/// # Safety
/// `data` is null or valid for `length` bytes that outlive `'a`.
unsafe fn bytes_arg<'a>(data: *const c_char, length: usize) -> FfiResult<&'a [u8]> {
    if data.is_null() {
        return Err(Failure::input("data is NULL: pass the bytes to archive"));
    }
    // SAFETY: per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), length) })
}

/// Archives the GRIB messages in `length` bytes at `data`, each under the MARS key ecCodes
/// reads from it; invisible until `fdb_flush`. A buffer with a fault (not GRIB, a truncated
/// message, a key the schema refuses) archives nothing. With `req`, as in FDB5, every message
/// must match the request and every field the request names must be among them; otherwise
/// nothing of the buffer is archived (where the store can take fields back before the flush:
/// local stores) and the error names the fields at fault.
///
/// # Safety
/// `fdb` is null or a live handle; `req` is null or a live request; `data` is null or valid
/// for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_archive_multiple(
    fdb: *mut fdb_handle_t,
    req: *mut fdb_request_t,
    data: *const c_char,
    length: usize,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let (mut h, r) = unsafe { (object::live(fdb)?, object::optional(req)?) };
        // SAFETY: per the caller's contract.
        let bytes = unsafe { bytes_arg(data, length)? };
        archive_multiple(&mut *h.store, r.as_deref().map(|r| &r.request), bytes)
    })
}

fn archive_multiple(
    store: &mut dyn FieldStore,
    req: Option<&Request>,
    bytes: &[u8],
) -> FfiResult<()> {
    let opts = IngestOptions {
        flush: false,
        ..IngestOptions::default()
    };
    let inputs = || vec![Input::buffer("fdb_archive_multiple data", bytes)];
    let Some(req) = req else {
        if bytes.is_empty() {
            return Ok(());
        }
        let report = ingest::ingest(store, inputs(), &opts, &mut |_| {})?;
        return failed(&report.failed);
    };
    let (resolved, _ignored) = store.options().resolve(req)?;
    let start = store.checkpoint();
    let mut checked = Checked {
        inner: store,
        req: &resolved,
        archived: Vec::new(),
    };
    if !bytes.is_empty() {
        let report = ingest::ingest(&mut checked, inputs(), &opts, &mut |_| {})?;
        failed(&report.failed)?;
    }
    let archived = checked.archived;
    let vacant: Vec<Key> = resolved
        .expand()
        .into_iter()
        .filter(|want| {
            !archived
                .iter()
                .any(|got| want.iter().all(|(k, v)| got.get(k) == Some(v)))
        })
        .collect();
    if vacant.is_empty() {
        return Ok(());
    }
    let taken_back = match &start {
        Some(cp) => store.discard_since(cp) > 0 || archived.is_empty(),
        None => false,
    };
    Err(Failure::input(format!(
        "fdb_archive_multiple: the data holds {} field(s) and lacks {} that the request names: {}{}",
        archived.len(),
        vacant.len(),
        first_keys(&vacant),
        if taken_back {
            "; nothing of it was archived"
        } else {
            "; the fields it holds were sent already (this store cannot take them back before the flush)"
        }
    )))
}

fn failed(failed: &[String]) -> FfiResult<()> {
    match failed.first() {
        None => Ok(()),
        Some(why) => Err(Failure::input(format!("nothing archived: {why}"))),
    }
}

/// Up to five keys, then how many more.
pub(crate) fn first_keys(keys: &[Key]) -> String {
    let mut s = keys
        .iter()
        .take(5)
        .map(|k| format!("{{{k}}}"))
        .collect::<Vec<_>>()
        .join(", ");
    if keys.len() > 5 {
        s.push_str(&format!(" and {} more", keys.len() - 5));
    }
    s
}

/// A store that archives into another only fields matching a request, remembering their
/// keys: `fdb_archive_multiple`'s check, as a wrapper so that ingestion needs no change.
struct Checked<'a> {
    inner: &'a mut dyn FieldStore,
    req: &'a Request,
    archived: Vec<Key>,
}

// Every method is stated: all forwarded to the store checked into, but the two archives,
// which check first.
#[deny(clippy::missing_trait_methods)]
impl FieldStore for Checked<'_> {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn options(&self) -> &StoreOptions {
        self.inner.options()
    }
    /// Not forwarded: split here, then archived through the check of `archive_split` (the
    /// inner store's own `archive` would skip it).
    fn archive(&mut self, key: &Key, data: &[u8]) -> haar::Result<()> {
        let split = self.split(key)?;
        self.archive_split(&split, data, None)
    }
    fn archive_split(
        &mut self,
        split: &SplitKey,
        data: &[u8],
        crc: Option<u32>,
    ) -> haar::Result<()> {
        let full = split.full();
        if !self.req.matches(&full) {
            return Err(haar::Error::BadKey {
                key: full.to_string(),
                reason: format!(
                    "fdb_archive_multiple: the message is not among the fields the request names ({})",
                    self.req
                )
                .into(),
            });
        }
        self.inner.archive_split(split, data, crc)?;
        self.archived.push(full);
        Ok(())
    }
    fn flush(&mut self) -> haar::Result<()> {
        self.inner.flush()
    }
    fn checkpoint(&self) -> Option<Checkpoint> {
        self.inner.checkpoint()
    }
    fn discard_since(&mut self, cp: &Checkpoint) -> usize {
        self.inner.discard_since(cp)
    }
    /// Forwarded: a hint for the store checked into (nothing here calls it today).
    fn provision(&self, bytes: u64) -> haar::Result<()> {
        self.inner.provision(bytes)
    }
    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> haar::Result<RetrieveReport> {
        self.inner.retrieve(req, sink)
    }
    fn retrieve_lent(&self, key: &Key) -> Option<haar::Result<Option<(Key, FieldBytes)>>> {
        self.inner.retrieve_lent(key)
    }
    fn as_local(&self) -> Option<&haar::Store> {
        self.inner.as_local()
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.inner.as_any()
    }
    fn retrieve_keys(&self, keys: &[Key], sink: &mut Sink<'_>) -> haar::Result<RetrieveReport> {
        self.inner.retrieve_keys(keys, sink)
    }
    fn list(&self, req: &Request) -> haar::Result<Vec<Field>> {
        self.inner.list(req)
    }
    fn list_with_masked(&self, req: &Request) -> Option<haar::Result<Vec<Field>>> {
        self.inner.list_with_masked(req)
    }
    fn read_located(&self, field: &Field, crc: Option<u32>) -> Option<haar::Result<Vec<u8>>> {
        self.inner.read_located(field, crc)
    }
    fn axes(&self, req: &Request) -> haar::Result<BTreeMap<String, BTreeSet<String>>> {
        self.inner.axes(req)
    }
    fn wipe(&mut self, req: &Request, doit: bool) -> haar::Result<WipeReport> {
        self.inner.wipe(req, doit)
    }
    fn purge(&mut self, req: &Request, doit: bool) -> haar::Result<PurgeReport> {
        self.inner.purge(req, doit)
    }
    fn unowned_files(&self, req: &Request) -> haar::Result<Vec<std::path::PathBuf>> {
        self.inner.unowned_files(req)
    }
    fn data_path(&self, field: &Field) -> haar::Result<Option<std::path::PathBuf>> {
        self.inner.data_path(field)
    }
    fn wipe_unsafe_all(&mut self, req: &Request, doit: bool) -> haar::Result<WipeReport> {
        self.inner.wipe_unsafe_all(req, doit)
    }
    fn stats(&self, req: &Request) -> haar::Result<Vec<DbStats>> {
        self.inner.stats(req)
    }
    fn problems(&self, req: &Request) -> haar::Result<Vec<String>> {
        self.inner.problems(req)
    }
}

/// Makes every field archived through `fdb` durable and visible to every reader (atomically
/// per database).
///
/// # Safety
/// `fdb` is null or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_flush(fdb: *mut fdb_handle_t) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let mut h = unsafe { object::live(fdb)? };
        h.store.flush()?;
        Ok(())
    })
}

/// Retrieves the fields `req` names into the data reader `dr` (read it after
/// `fdb_datareader_open`), in request order. As FDB5 ("Return all available data whose
/// metadata matches"), fields that are not there are left out and the call succeeds (with
/// no bytes if none is there); with `fdb5_missing: error` in the configuration it fails
/// instead, naming the missing keys. Damage found in the databases of missing fields fails
/// either way: corruption is never absence. Fields flushed by other handles after this handle
/// was opened are seen.
///
/// # Safety
/// `fdb`, `req`, `dr` are null or live objects of this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_retrieve(
    fdb: *mut fdb_handle_t,
    req: *mut fdb_request_t,
    dr: *mut fdb_datareader_t,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let (h, r, mut d) = unsafe { (object::live(fdb)?, object::live(req)?, object::live(dr)?) };
        d.set(retrieve(&*h.store, &r.request, h.missing)?);
        Ok(())
    })
}

/// The bytes of the fields of `req`, borrowed from the store for one complete key where it
/// lends them (`haar::read` decides that and what is missing).
fn retrieve(store: &dyn FieldStore, req: &Request, missing: Missing) -> FfiResult<FieldBytes> {
    let (bytes, absent) = haar::read::retrieve_all(store, std::slice::from_ref(req))?;
    // As FDB5, a request matching nothing at all is an empty success under `skip`; damage
    // under a missing field fails either way (corruption is never absence).
    if !absent.keys.is_empty() && (missing == Missing::Error || !absent.problems.is_empty()) {
        let mut m = format!(
            "fdb_retrieve: {} of the fields requested {} not in {}: {} (fdb5_missing: error, or damage below)",
            absent.keys.len(),
            if absent.keys.len() == 1 { "is" } else { "are" },
            store.describe(),
            first_keys(&absent.keys)
        );
        for p in &absent.problems {
            m.push_str(&format!("; {p}"));
        }
        return Err(Failure::missing(m));
    }
    Ok(bytes)
}

/// Deletes a handle: flushes what it archived (as FDB5 does when an FDB object goes away),
/// then closes it. If that flush fails the handle is still deleted, and the error says what
/// was not flushed.
///
/// # Safety
/// `fdb` is null or a live handle, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_delete_handle(fdb: *mut fdb_handle_t) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let mut h = unsafe { object::live(fdb)? };
        let flushed = h.store.flush();
        // Released before the free, which waits for every call holding the handle.
        drop(h);
        // SAFETY: not used again per the caller's contract.
        unsafe { object::free(fdb)? };
        flushed.map_err(|e| {
            Failure::from(e).with_prefix(
                "fdb_delete_handle: the handle is deleted, but the fields archived since its last flush were not flushed",
            )
        })
    })
}
