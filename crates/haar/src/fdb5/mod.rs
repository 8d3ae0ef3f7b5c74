//! The real FDB5 through its C API (`fdb5/api/fdb_c.h`), loaded at run time from
//! `libfdb5.so` (or the library [`LIB_ENV`] names), so haar builds and runs where FDB5 is not
//! installed. The one adapter haar has over FDB5: `haar import-fdb5` ([`crate::import`])
//! enumerates and reads databases through it, and the workloads (`haar_bench`) write and read
//! FDB5 through it exactly as they do haar, as a `dyn FieldStore` ([`Fdb5Store`]).
//!
//! FDB5's behaviours are kept, not papered over:
//! - A handle that has read a database does not see data flushed into it later. Reads go
//!   through a reader handle that every [`FieldStore::list`] replaces (so a poller sees new
//!   flushes), archive and flush through a writer handle of their own (so a new reader never
//!   drops unflushed fields).
//! - A retrieve of missing data succeeds with no bytes: presence is judged by the size the
//!   data reader reports.
//! - FDB5 splits keys with its own schema: [`FieldStore::archive`] hands it the key as given.
//! - FDB5 keeps no checksum of a field: sinks receive `None` for the CRC-32C (the `Sink`
//!   contract), so a timed retrieve does no work FDB5 itself does not do. (Computing one here
//!   cost 15-20% of `haar hammer --fdb5 DIR --mode read` at 800 KiB fields.)
//! - FDB5 takes its configuration from the environment only (`FDB5_CONFIG_FILE`,
//!   `FDB_DBNAMES_FILE`; the latter read once per process), and prints its errors on standard
//!   output ([`StdoutToStderr`] keeps them off a caller's output).
//!
//! `fdb_list` has two C signatures under one name: 5.10's `fdb_list(fdb, req, it)` with an
//! iterator yielding key strings, and 5.11+'s `fdb_list(fdb, req, &it, duplicates, depth)`
//! with split keys and locations. [`Fdb5Store::open`] keeps the one `fdb_version` says the
//! library has; [`Fdb5Store::list_fields`] enumerates with either (a null request for a whole
//! database: an empty one aborts FDB5 on an assertion). [`Fdb5Store::list_count`] is 5.11+
//! only (the scale benchmark's timing of FDB5's own listing).
//!
//! What FDB5's C API does not offer through this adapter fails with [`StoreError::Config`]
//! naming the operation: wipe, purge, stats, and a [`FieldStore::list`] of a request that does
//! not give every keyword its values (that list probes each key's size, the same on every
//! version; [`Fdb5Store::list_fields`] is the enumeration).
//!
//! Every `unsafe` of haar's access to FDB5 is in this module; each says why it is sound. No
//! Rust callback is handed to FDB5, so no panic can unwind through it.
//! Owns FDB5's C API; must not know any workload or what an import does with the fields.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_long};
use std::path::{Path, PathBuf};

use haar_core::request::{Request, Values};
use haar_core::{Key, SplitKey};
use haar_store::format::DataRef;
use haar_store::{
    DbStats, Error as StoreError, Field, FieldStore, PurgeReport, RetrieveReport, Sink,
    StoreOptions, WipeReport,
};

mod api;

use self::api::{Api, H, ITERATION_COMPLETE, List510Api, ListApi, SplitKeyApi, load};
pub use self::api::{LIB_ENV, load_error};

/// FDB5 through its C API, configured by the environment (`FDB5_CONFIG_FILE`,
/// `FDB_DBNAMES_FILE`; `haar_bench::fdb5::setup_root` prepares a self-contained one, and
/// [`Fdb5Store::open_config`] sets them).
pub struct Fdb5Store {
    api: Api,
    version: String,
    /// The configuration FDB5 was given, to name in errors.
    config: PathBuf,
    /// Archive and flush go through this handle.
    writer: H,
    /// Retrieves go through this handle; [`FieldStore::list`] replaces it.
    reader: RefCell<Reader>,
    /// Splits keys for [`FieldStore::list`]'s fields and resolves requests (the built-in
    /// schema, which is FDB5's default schema).
    options: StoreOptions,
}

/// The reader handle and the buffer fields are read into.
struct Reader {
    handle: H,
    buf: Vec<u8>,
}

// SAFETY: the handles are heap objects FDB5 made for this value and only it uses; FDB5 does not
// tie a handle to the thread that made it. `Fdb5Store` is not `Sync` (the `RefCell`), so one
// thread at a time uses them.
unsafe impl Send for Fdb5Store {}

impl Fdb5Store {
    /// Loads the library, initialises FDB5 and opens its handles.
    ///
    /// # Errors
    /// [`StoreError::Config`] where libfdb5 is not installed or too old; [`StoreError::Io`]
    /// naming the FDB5 call that failed.
    pub fn open() -> Result<Fdb5Store, StoreError> {
        let api = load().map_err(StoreError::Config)?;
        let config = std::env::var_os("FDB5_CONFIG_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| "FDB5 (default configuration)".into());
        let mut f = Fdb5Store {
            api,
            version: String::new(),
            config,
            writer: std::ptr::null_mut(),
            reader: RefCell::new(Reader {
                handle: std::ptr::null_mut(),
                buf: Vec::new(),
            }),
            options: StoreOptions::default(),
        };
        // SAFETY: C API calls with out-pointers we own; the version string is static in FDB5.
        unsafe {
            f.check("fdb_initialise", (f.api.initialise)())?;
            let mut v: *const c_char = std::ptr::null();
            f.check("fdb_version", (f.api.version)(&mut v))?;
            if !v.is_null() {
                f.version = CStr::from_ptr(v).to_string_lossy().into_owned();
            }
        }
        if lists_with_depth(&f.version) {
            f.api.list510 = None;
        } else {
            f.api.list = None;
            f.api.splitkey = None;
        }
        f.writer = f.new_handle()?;
        f.reader.get_mut().handle = f.new_handle()?;
        Ok(f)
    }

    /// Opens FDB5 on the configuration file `config`, and with `dbnames` as
    /// `FDB_DBNAMES_FILE` where given. FDB5 5.10's C API takes its configuration only from
    /// the environment, so both are set in this process's environment first; FDB5 reads
    /// `FDB_DBNAMES_FILE` once per process (at its first lookup of a database), so the first
    /// choice made in a process is the one that holds. Call it while no other thread of the
    /// process reads or changes the environment (the CLI calls it from its only thread).
    ///
    /// # Errors
    /// As [`Fdb5Store::open`].
    pub fn open_config(config: &Path, dbnames: Option<&Path>) -> Result<Fdb5Store, StoreError> {
        // SAFETY: the documented precondition: no other thread touches the environment
        // meanwhile.
        unsafe {
            std::env::set_var("FDB5_CONFIG_FILE", config);
            if let Some(d) = dbnames {
                std::env::set_var("FDB_DBNAMES_FILE", d);
            }
        }
        Fdb5Store::open()
    }

    fn check(&self, call: &'static str, rc: c_int) -> Result<(), StoreError> {
        match rc {
            0 => Ok(()),
            _ => Err(self.error(call, rc)),
        }
    }

    /// The error for FDB5 call `call` that returned `rc`, with FDB5's message.
    fn error(&self, call: &'static str, rc: c_int) -> StoreError {
        // SAFETY: FDB5 returns a static string for any code.
        let msg = unsafe {
            let p = (self.api.error_string)(rc);
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        StoreError::Io {
            op: call,
            path: self.config.clone(),
            source: std::io::Error::other(format!("FDB5 returned {rc}: {msg}")),
        }
    }

    fn new_handle(&self) -> Result<H, StoreError> {
        let mut h = std::ptr::null_mut();
        // SAFETY: an out-pointer we own.
        self.check("fdb_new_handle", unsafe { (self.api.new_handle)(&mut h) })?;
        Ok(h)
    }

    fn delete_handle(&self, h: H) {
        if !h.is_null() {
            // SAFETY: a handle from new_handle, deleted once (callers forget it).
            unsafe { (self.api.delete_handle)(h) };
        }
    }

    /// Opens a data reader for one key on `handle`; returns (reader, size FDB5 reports).
    fn open_reader(&self, handle: H, key: &Key) -> Result<(H, c_long), StoreError> {
        let strings = cstrings(key);
        // SAFETY: pointers come from CStrings that outlive the calls; the request is freed
        // here, the data reader by close_reader (or here on failure).
        unsafe {
            let mut req = std::ptr::null_mut();
            self.check("fdb_new_request", (self.api.new_request)(&mut req))?;
            for (k, v) in &strings {
                let vals = [v.as_ptr()];
                let rc = (self.api.request_add)(req, k.as_ptr(), vals.as_ptr(), 1);
                if rc != 0 {
                    (self.api.delete_request)(req);
                    return Err(self.error("fdb_request_add", rc));
                }
            }
            let mut dr = std::ptr::null_mut();
            let rc = (self.api.new_datareader)(&mut dr);
            if rc != 0 {
                (self.api.delete_request)(req);
                return Err(self.error("fdb_new_datareader", rc));
            }
            let rc = (self.api.retrieve)(handle, req, dr);
            (self.api.delete_request)(req);
            let mut size: c_long = 0;
            let rc = if rc == 0 {
                (self.api.datareader_open)(dr, &mut size)
            } else {
                rc
            };
            if rc != 0 {
                (self.api.delete_datareader)(dr);
                return Err(self.error("fdb_retrieve", rc));
            }
            Ok((dr, size))
        }
    }

    fn close_reader(&self, dr: H) {
        // SAFETY: `dr` came from open_reader and is not used again.
        unsafe {
            (self.api.datareader_close)(dr);
            (self.api.delete_datareader)(dr);
        }
    }

    /// Reads the field of `key` through `handle` into `buf`; returns its length, 0 when FDB5
    /// has no such field.
    fn read(&self, handle: H, key: &Key, buf: &mut Vec<u8>) -> Result<usize, StoreError> {
        let (dr, size) = self.open_reader(handle, key)?;
        buf.clear();
        buf.resize(size.max(0) as usize + 1, 0);
        let mut got = 0usize;
        let result = loop {
            let mut r: c_long = 0;
            // SAFETY: reading into our buffer, within its length.
            let rc = unsafe {
                (self.api.datareader_read)(
                    dr,
                    buf[got..].as_mut_ptr().cast(),
                    (buf.len() - got) as c_long,
                    &mut r,
                )
            };
            if let Err(e) = self.check("fdb_datareader_read", rc) {
                break Err(e);
            }
            if r <= 0 {
                break Ok(got);
            }
            got += r as usize;
            if got == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
        };
        self.close_reader(dr);
        result
    }

    /// The complete keys a request names (resolved with the built-in schema), or the error
    /// saying `op` needs every keyword's values.
    fn expand(&self, req: &Request, op: &str) -> Result<(Vec<Key>, Vec<String>), StoreError> {
        let (resolved, ignored) = self.options.resolve(req)?;
        if let Some(p) = resolved
            .params
            .iter()
            .find(|p| matches!(p.values, Values::All))
        {
            return Err(unsupported(&format!(
                "{op} of a request with {}=all (give every keyword its values; FDB5's fdb_list is not used)",
                p.keyword
            )));
        }
        Ok((resolved.expand(), ignored))
    }

    /// Reads `keys` through the reader handle, delivering each field found.
    fn deliver(
        &self,
        keys: &[Key],
        sink: &mut Sink<'_>,
        report: &mut RetrieveReport,
    ) -> Result<(), StoreError> {
        let mut r = self.reader.borrow_mut();
        let Reader { handle, buf } = &mut *r;
        for key in keys {
            let n = self.read(*handle, key, buf)?;
            if n == 0 {
                report.missing.push(key.clone());
                continue;
            }
            let data = &buf[..n];
            report.found += 1;
            report.bytes += n as u64;
            sink(key, data, None)?;
        }
        Ok(())
    }
}

/// Whether FDB5 `version` (`5.25.0`) declares `fdb_list` with `duplicates` and `depth`
/// (5.11 and later).
fn lists_with_depth(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (5, 11)
}

/// What the benchmarks time beyond [`FieldStore`]: FDB5's own listing, and reads through a
/// handle made for the one read.
impl Fdb5Store {
    /// FDB5's version as `fdb_version` reports it (`5.25.0`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Replaces the reader handle with a new one, which sees everything flushed so far.
    ///
    /// # Errors
    /// [`StoreError::Io`] if FDB5 cannot make a handle.
    pub fn renew_reader(&self) -> Result<(), StoreError> {
        let fresh = self.new_handle()?;
        let old = std::mem::replace(&mut self.reader.borrow_mut().handle, fresh);
        self.delete_handle(old);
        Ok(())
    }

    /// Reads the field of `key` into `buf` through the reader handle; returns its length, 0
    /// when FDB5 has no such field.
    ///
    /// # Errors
    /// [`StoreError::Io`] naming the FDB5 call that failed.
    pub fn read_warm(&self, key: &Key, buf: &mut Vec<u8>) -> Result<usize, StoreError> {
        let handle = self.reader.borrow().handle;
        self.read(handle, key, buf)
    }

    /// Makes a new FDB5 handle, reads the field of `key` into `buf` through it (the
    /// handle's first lookup opens the database), and deletes the handle: what a fresh reader
    /// pays for one field. Returns the length, 0 when FDB5 has no such field.
    ///
    /// # Errors
    /// [`StoreError::Io`] naming the FDB5 call that failed.
    pub fn read_fresh(&self, key: &Key, buf: &mut Vec<u8>) -> Result<usize, StoreError> {
        let handle = self.new_handle()?;
        let n = self.read(handle, key, buf);
        self.delete_handle(handle);
        n
    }

    /// Lists `request` (keyword → values, as `fdb_request_add` takes them) with FDB5's
    /// `fdb_list` (no duplicates, full depth) through the reader handle, reading every
    /// element's location (`fdb_listiterator_attrs`) as a caller would; returns the number
    /// of fields listed.
    ///
    /// # Errors
    /// [`StoreError::Config`] where the library has no `fdb_list` of 5.11 or later;
    /// [`StoreError::Io`] naming the FDB5 call that failed.
    pub fn list_count(&self, request: &[(String, Vec<String>)]) -> Result<usize, StoreError> {
        let Some(l) = &self.api.list else {
            return Err(unsupported(&format!(
                "fdb_list in FDB5 {} (the 5.11+ signature is needed)",
                self.version
            )));
        };
        let req = self.new_request(request)?;
        let handle = self.reader.borrow().handle;
        // SAFETY: the request is ours and freed here; the iterator is freed here on every
        // path.
        unsafe {
            let mut it = std::ptr::null_mut();
            let rc = (l.list)(handle, req, &mut it, false, 3);
            (self.api.delete_request)(req);
            self.check("fdb_list", rc)?;
            let mut n = 0;
            let result = loop {
                match (l.next)(it) {
                    0 => {}
                    ITERATION_COMPLETE => break Ok(n),
                    rc => break Err(self.error("fdb_listiterator_next", rc)),
                }
                let (mut uri, mut off, mut len) = (std::ptr::null(), 0usize, 0usize);
                let rc = (l.attrs)(it, &mut uri, &mut off, &mut len);
                if rc != 0 {
                    break Err(self.error("fdb_listiterator_attrs", rc));
                }
                n += usize::from(len > 0 && !uri.is_null());
            };
            (l.delete)(it);
            result
        }
    }
}

/// FDB5 (eckit) prints its error messages (`Exception: …`, `Caught exception on C-C++ API
/// boundary: …`) on standard output, where they would corrupt what the caller prints there
/// (e.g. `haar import-fdb5 --json`). While a value of this lives, file descriptor 1 is a copy
/// of standard error; dropping it restores standard output. Process-wide: hold it only while
/// nothing else in the process means to write to standard output.
pub struct StdoutToStderr {
    saved: c_int,
}

impl StdoutToStderr {
    /// Points file descriptor 1 at standard error; `None` if the descriptors cannot be
    /// duplicated (FDB5's messages then go where they would anyway).
    pub fn new() -> Option<StdoutToStderr> {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // SAFETY: dup/dup2 on the process's own standard descriptors; `saved` is closed once,
        // in drop.
        unsafe {
            let saved = libc::dup(1);
            if saved < 0 {
                return None;
            }
            if libc::dup2(2, 1) < 0 {
                libc::close(saved);
                return None;
            }
            Some(StdoutToStderr { saved })
        }
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // SAFETY: restores the descriptor saved in `new`, then closes the copy.
        unsafe {
            libc::dup2(self.saved, 1);
            libc::close(self.saved);
        }
    }
}

/// One field as FDB5's `fdb_list` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its key, level by level (keywords in FDB5's order: the schema's in 5.10, alphabetical
    /// within each level in 5.11+), optional keywords the field lacks left out.
    pub key: Key,
    /// Its length where FDB5 reports it (5.11+'s `fdb_listiterator_attrs`; 5.10 does not).
    pub length: Option<u64>,
}

/// Enumerating a database with `fdb_list`, in either C signature.
impl Fdb5Store {
    /// The fields FDB5 lists for `request` (keyword → values, given to `fdb_request_add` as
    /// they are: FDB5's C API does not expand them, so they must be canonical), or for the
    /// whole database with `None`, duplicates (fields archived again under the same key) left
    /// out. The whole database is listed with a null request: both 5.10.8 and 5.25 accept it
    /// and list everything, while an *empty* request fails FDB5's assertion
    /// `request.all() == request.request().empty()` and aborts the process (measured with
    /// C programs against both libraries, 2026-11-26), so an empty `request` is sent as null.
    ///
    /// # Errors
    /// [`StoreError::Config`] where the library offers neither `fdb_list`; [`StoreError::Io`]
    /// naming the FDB5 call that failed.
    pub fn list_fields(
        &self,
        request: Option<&[(String, Vec<String>)]>,
    ) -> Result<Vec<Listed>, StoreError> {
        let request = request.filter(|r| !r.is_empty());
        let req = match request {
            Some(r) => self.new_request(r)?,
            None => std::ptr::null_mut(),
        };
        let handle = self.reader.borrow().handle;
        let listed = if let Some(l) = &self.api.list510 {
            self.list_510(l, handle, req)
        } else if let (Some(l), Some(sk)) = (&self.api.list, &self.api.splitkey) {
            self.list_511(l, sk, handle, req)
        } else {
            Err(unsupported(&format!(
                "fdb_list in FDB5 {} (neither the 5.10 nor the 5.11+ listing was found)",
                self.version
            )))
        };
        if !req.is_null() {
            // SAFETY: a request from new_request, deleted once.
            unsafe { (self.api.delete_request)(req) };
        }
        let mut seen = std::collections::HashSet::new();
        Ok(listed?
            .into_iter()
            .filter(|f| seen.insert(f.key.to_string()))
            .collect())
    }

    /// A request from keyword → values; the caller deletes it.
    fn new_request(&self, request: &[(String, Vec<String>)]) -> Result<H, StoreError> {
        let strings: Vec<(CString, Vec<CString>)> = request
            .iter()
            .map(|(k, vs)| (cstr(k), vs.iter().map(|v| cstr(v)).collect()))
            .collect();
        // SAFETY: pointers come from CStrings that outlive the calls; the request is deleted
        // here on failure.
        unsafe {
            let mut req = std::ptr::null_mut();
            self.check("fdb_new_request", (self.api.new_request)(&mut req))?;
            for (k, vs) in &strings {
                let ptrs: Vec<*const c_char> = vs.iter().map(|v| v.as_ptr()).collect();
                let rc =
                    (self.api.request_add)(req, k.as_ptr(), ptrs.as_ptr(), ptrs.len() as c_int);
                if rc != 0 {
                    (self.api.delete_request)(req);
                    return Err(self.error("fdb_request_add", rc));
                }
            }
            Ok(req)
        }
    }

    /// 5.10: `fdb_list(fdb, req, it)`, each element FDB5's key string.
    fn list_510(&self, l: &List510Api, handle: H, req: H) -> Result<Vec<Listed>, StoreError> {
        // SAFETY: `req` is null or ours; the iterator is made and deleted here; the strings
        // FDB5 returns are valid until the next call on the iterator and copied at once.
        unsafe {
            let mut it = std::ptr::null_mut();
            self.check("fdb_new_listiterator", (l.new_iterator)(&mut it))?;
            let rc = (l.list)(handle, req, it);
            if rc != 0 {
                (l.delete)(it);
                return Err(self.error("fdb_list", rc));
            }
            let mut out = Vec::new();
            let result = loop {
                let (mut exist, mut s) = (false, std::ptr::null());
                let rc = (l.next)(it, &mut exist, &mut s);
                if rc != 0 {
                    break Err(self.error("fdb_listiterator_next", rc));
                }
                if !exist || s.is_null() {
                    break Ok(out);
                }
                let text = CStr::from_ptr(s).to_string_lossy();
                match parse_key_string(&text) {
                    Some(key) => out.push(Listed { key, length: None }),
                    None => {
                        break Err(StoreError::Config(format!(
                            "FDB5 {} listed {text:?}, not a key of the form {{k=v,..}}{{..}}{{..}}",
                            self.version
                        )));
                    }
                }
            };
            (l.delete)(it);
            result
        }
    }

    /// 5.11+: `fdb_list(fdb, req, &it, duplicates, depth)`, each element's split key and
    /// length.
    fn list_511(
        &self,
        l: &ListApi,
        sk: &SplitKeyApi,
        handle: H,
        req: H,
    ) -> Result<Vec<Listed>, StoreError> {
        // SAFETY: `req` is null or ours; the iterator and the split key are made and deleted
        // here; the strings FDB5 returns are copied before the next call.
        unsafe {
            let mut key_h = std::ptr::null_mut();
            self.check("fdb_new_splitkey", (sk.new)(&mut key_h))?;
            let mut it = std::ptr::null_mut();
            let rc = (l.list)(handle, req, &mut it, false, 3);
            if rc != 0 {
                (sk.delete)(key_h);
                return Err(self.error("fdb_list", rc));
            }
            let mut out = Vec::new();
            let result = 'outer: loop {
                match (l.next)(it) {
                    0 => {}
                    ITERATION_COMPLETE => break Ok(out),
                    rc => break Err(self.error("fdb_listiterator_next", rc)),
                }
                let (mut uri, mut off, mut len) = (std::ptr::null(), 0usize, 0usize);
                let rc = (l.attrs)(it, &mut uri, &mut off, &mut len);
                if rc != 0 {
                    break Err(self.error("fdb_listiterator_attrs", rc));
                }
                let rc = (sk.fill)(it, key_h);
                if rc != 0 {
                    break Err(self.error("fdb_listiterator_splitkey", rc));
                }
                let mut levels: Vec<Vec<(String, String)>> = vec![Vec::new(); 3];
                loop {
                    let (mut k, mut v, mut level) = (std::ptr::null(), std::ptr::null(), 0usize);
                    match (sk.next)(key_h, &mut k, &mut v, &mut level) {
                        0 => {}
                        ITERATION_COMPLETE => break,
                        rc => break 'outer Err(self.error("fdb_splitkey_next_metadata", rc)),
                    }
                    if k.is_null() || v.is_null() {
                        continue;
                    }
                    if levels.len() <= level {
                        levels.resize(level + 1, Vec::new());
                    }
                    levels[level].push((
                        CStr::from_ptr(k).to_string_lossy().into_owned(),
                        CStr::from_ptr(v).to_string_lossy().into_owned(),
                    ));
                }
                let mut key = Key::new();
                for (k, v) in levels.into_iter().flatten().filter(|(_, v)| !v.is_empty()) {
                    key.push(&k, &v);
                }
                out.push(Listed {
                    key,
                    length: Some(len as u64),
                });
            };
            (l.delete)(it);
            (sk.delete)(key_h);
            result
        }
    }
}

/// Parses FDB5's key string, `{k=v,..}{k=v,..}{k=v,..}` (what 5.10's `fdb_list` and
/// `fdb-list --porcelain` print), into a key; empty values are left out. Anything after the
/// third level (e.g. a location) is ignored.
pub fn parse_key_string(line: &str) -> Option<Key> {
    let mut rest = line.trim();
    let mut key = Key::new();
    for _ in 0..3 {
        rest = rest.strip_prefix('{')?;
        let end = rest.find('}')?;
        for kv in rest[..end].split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=')?;
            if !v.is_empty() {
                key.push(k, v);
            }
        }
        rest = &rest[end + 1..];
    }
    Some(key)
}

fn unsupported(what: &str) -> StoreError {
    StoreError::Config(format!(
        "FDB5 (through its C API) does not offer {what}; use FDB5's own tools"
    ))
}

fn cstr(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("NUL removed")
}

/// A key's non-empty keyword/value pairs as C strings.
fn cstrings(key: &Key) -> Vec<(CString, CString)> {
    key.iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (cstr(k), cstr(v)))
        .collect()
}

impl Drop for Fdb5Store {
    fn drop(&mut self) {
        let reader = self.reader.get_mut().handle;
        self.delete_handle(self.writer);
        self.delete_handle(reader);
    }
}

impl FieldStore for Fdb5Store {
    fn describe(&self) -> String {
        format!("FDB5 {} (C API, TOC)", self.version)
    }

    fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// FDB5 splits the key with its own schema: it is handed over as given.
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<(), StoreError> {
        let strings = cstrings(key);
        // SAFETY: pointers from CStrings and `data` outlive the calls; the key is freed here.
        unsafe {
            let mut k = std::ptr::null_mut();
            self.check("fdb_new_key", (self.api.new_key)(&mut k))?;
            for (kw, v) in &strings {
                let rc = (self.api.key_add)(k, kw.as_ptr(), v.as_ptr());
                if rc != 0 {
                    (self.api.delete_key)(k);
                    return Err(self.error("fdb_key_add", rc));
                }
            }
            let rc = (self.api.archive)(self.writer, k, data.as_ptr().cast(), data.len());
            (self.api.delete_key)(k);
            self.check("fdb_archive", rc)
        }
    }

    fn archive_split(
        &mut self,
        split: &SplitKey,
        data: &[u8],
        crc: Option<u32>,
    ) -> Result<(), StoreError> {
        let key = split.db.joined(&split.index).joined(&split.datum);
        if let Some(expected) = crc {
            let actual = haar_persist::crc32c(data);
            if actual != expected {
                return Err(StoreError::checksum(
                    "(bytes to archive into FDB5)",
                    key,
                    actual,
                    expected,
                    "the caller computed",
                    "not archived",
                ));
            }
        }
        self.archive(&key, data)
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        // SAFETY: our handle.
        let rc = unsafe { (self.api.flush)(self.writer) };
        self.check("fdb_flush", rc)
    }

    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> Result<RetrieveReport, StoreError> {
        let (keys, ignored) = self.expand(req, "retrieve")?;
        let mut report = RetrieveReport {
            ignored,
            ..RetrieveReport::default()
        };
        self.deliver(&keys, sink, &mut report)?;
        Ok(report)
    }

    /// One FDB5 retrieve per key, in the order given, through the current reader handle.
    fn retrieve_keys(
        &self,
        keys: &[Key],
        sink: &mut Sink<'_>,
    ) -> Result<RetrieveReport, StoreError> {
        let mut report = RetrieveReport::default();
        self.deliver(keys, sink, &mut report)?;
        Ok(report)
    }

    /// The fields of a request that names every keyword's values, found by asking FDB5 for
    /// each key's size through a new reader handle (which later retrieves use too). While a
    /// writer is creating a database FDB5 may fail to open it: the probe stops there and
    /// reports what it found, as a poll reads "not there yet".
    fn list(&self, req: &Request) -> Result<Vec<Field>, StoreError> {
        let (keys, _) = self.expand(req, "list")?;
        let fresh = self.new_handle()?;
        let old = std::mem::replace(&mut self.reader.borrow_mut().handle, fresh);
        self.delete_handle(old);
        let mut fields = Vec::new();
        for key in keys {
            let Ok((dr, size)) = self.open_reader(fresh, &key) else {
                break;
            };
            self.close_reader(dr);
            if size > 0 {
                let split = self.options.split(&key)?;
                fields.push(Field {
                    db: split.db,
                    index: split.index,
                    datum: split.datum,
                    // FDB5 tells neither where the bytes are nor their checksum.
                    data: DataRef {
                        length: size as u64,
                        ..DataRef::default()
                    },
                });
            }
        }
        fields.sort_by_key(Field::key);
        Ok(fields)
    }

    fn wipe(&mut self, _: &Request, _: bool) -> Result<WipeReport, StoreError> {
        Err(unsupported("wipe (fdb-wipe does)"))
    }

    fn purge(&mut self, _: &Request, _: bool) -> Result<PurgeReport, StoreError> {
        Err(unsupported("purge (fdb-purge does)"))
    }

    fn stats(&self, _: &Request) -> Result<Vec<DbStats>, StoreError> {
        Err(unsupported("stats (fdb-info and fdb-stats do)"))
    }
}
