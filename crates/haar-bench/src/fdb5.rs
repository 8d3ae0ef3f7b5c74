//! The real FDB5 as a [`FieldStore`]: [`Fdb5Store`] reaches FDB5 through its C API
//! (`fdb5/api/fdb_c.h`), loaded at run time from `libfdb5.so`, so haar builds and runs where
//! FDB5 is not installed and compares itself with it where it is (Debian 12: `apt-get install
//! fdb5 libfdb5-dev`). The workloads write and read FDB5 exactly as they do haar, through
//! `dyn FieldStore`.
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
//!
//! What FDB5's C API does not offer through this adapter fails with [`StoreError::Config`] naming
//! the operation: wipe, purge, stats, and listing a request that does not give every keyword
//! its values ([`FieldStore::list`] does not use `fdb_list`: its C signature differs between
//! FDB5 5.10 and 5.11+). [`Fdb5Store::list_count`] does, where the library is 5.11 or later
//! (the `fdb5lib` wheel's 5.25, named by [`LIB_ENV`]), for the scale benchmark.
//!
//! Every `unsafe` of haar's access to FDB5 is in this module; each says why it is sound.
//! Owns FDB5's C API and its set-up (a self-contained root); must not know any workload.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_long, c_void};
use std::path::{Path, PathBuf};

use haar_core::request::{Request, Values};
use haar_core::{Key, SplitKey};
use haar_store::format::DataRef;
use haar_store::{
    DbStats, Error as StoreError, Field, FieldStore, PurgeReport, RetrieveReport, Sink,
    StoreOptions, WipeReport,
};

use crate::error::{Error, io};

type H = *mut c_void;

struct Api {
    initialise: unsafe extern "C" fn() -> c_int,
    version: unsafe extern "C" fn(*mut *const c_char) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    new_handle: unsafe extern "C" fn(*mut H) -> c_int,
    delete_handle: unsafe extern "C" fn(H) -> c_int,
    archive: unsafe extern "C" fn(H, H, *const c_char, usize) -> c_int,
    flush: unsafe extern "C" fn(H) -> c_int,
    new_key: unsafe extern "C" fn(*mut H) -> c_int,
    key_add: unsafe extern "C" fn(H, *const c_char, *const c_char) -> c_int,
    delete_key: unsafe extern "C" fn(H) -> c_int,
    new_request: unsafe extern "C" fn(*mut H) -> c_int,
    request_add: unsafe extern "C" fn(H, *const c_char, *const *const c_char, c_int) -> c_int,
    delete_request: unsafe extern "C" fn(H) -> c_int,
    retrieve: unsafe extern "C" fn(H, H, H) -> c_int,
    new_datareader: unsafe extern "C" fn(*mut H) -> c_int,
    datareader_open: unsafe extern "C" fn(H, *mut c_long) -> c_int,
    datareader_read: unsafe extern "C" fn(H, *mut c_void, c_long, *mut c_long) -> c_int,
    datareader_close: unsafe extern "C" fn(H) -> c_int,
    delete_datareader: unsafe extern "C" fn(H) -> c_int,
    /// `fdb_list` and its iterator as FDB5 5.11 and later declare them; `None` where the
    /// library lacks them.
    list: Option<ListApi>,
}

/// FDB5's listing (5.11+: `fdb_list(fdb, req, &it, duplicates, depth)`). FDB5 5.10 declares
/// `fdb_list` with other arguments under the same name, so [`Fdb5Store::open`] drops this
/// where the library reports a version before 5.11.
struct ListApi {
    list: unsafe extern "C" fn(H, H, *mut H, bool, c_int) -> c_int,
    next: unsafe extern "C" fn(H) -> c_int,
    attrs: unsafe extern "C" fn(H, *mut *const c_char, *mut usize, *mut usize) -> c_int,
    delete: unsafe extern "C" fn(H) -> c_int,
}

/// `fdb_listiterator_next`'s return at the end of a listing (`FDB_ITERATION_COMPLETE`).
const ITERATION_COMPLETE: c_int = 3;

const LIBS: [&str; 2] = ["libfdb5.so.0d", "libfdb5.so"];

/// Names the FDB5 library to load instead of the system's (a path, e.g. the `fdb5lib`
/// wheel's `lib64/libfdb5.so`; its companions must be on `LD_LIBRARY_PATH`).
pub const LIB_ENV: &str = "HAAR_FDB5_LIB";

// Each transmute's target type is the `Api` field it initialises, spelled out there.
#[allow(clippy::missing_transmute_annotations)]
fn load() -> Result<Api, String> {
    let open = |name: &str| {
        let c = CString::new(name).expect("no NUL");
        // SAFETY: dlopen with a valid C string; the library stays loaded for the process.
        unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) }
    };
    let lib = match std::env::var(LIB_ENV).ok().filter(|v| !v.is_empty()) {
        Some(path) => {
            let lib = open(&path);
            if lib.is_null() {
                // SAFETY: dlerror returns a thread-local C string or NULL.
                let why = unsafe {
                    let e = libc::dlerror();
                    if e.is_null() {
                        String::new()
                    } else {
                        CStr::from_ptr(e).to_string_lossy().into_owned()
                    }
                };
                return Err(format!("cannot load {path} (${LIB_ENV}): {why}"));
            }
            lib
        }
        None => LIBS
            .iter()
            .map(|name| open(name))
            .find(|l| !l.is_null())
            .unwrap_or(std::ptr::null_mut()),
    };
    if lib.is_null() {
        return Err(
            "the FDB5 library (libfdb5.so) is not installed: apt-get install fdb5 libfdb5-dev"
                .into(),
        );
    }
    let optional = |name: &str| {
        let c = CString::new(name).expect("no NUL");
        // SAFETY: dlsym on a handle from dlopen.
        unsafe { libc::dlsym(lib, c.as_ptr()) }
    };
    let list = [
        "fdb_list",
        "fdb_listiterator_next",
        "fdb_listiterator_attrs",
        "fdb_delete_listiterator",
    ]
    .map(optional);
    let list = (!list.iter().any(|p| p.is_null())).then(|| {
        // SAFETY: the symbols' C signatures (FDB5 5.11+, fdb5/api/fdb_c.h) are the fields'
        // types; `open` drops these for older libraries, whose `fdb_list` differs.
        unsafe {
            ListApi {
                list: std::mem::transmute::<*mut c_void, _>(list[0]),
                next: std::mem::transmute::<*mut c_void, _>(list[1]),
                attrs: std::mem::transmute::<*mut c_void, _>(list[2]),
                delete: std::mem::transmute::<*mut c_void, _>(list[3]),
            }
        }
    });
    macro_rules! sym {
        ($name:literal) => {{
            let c = CString::new($name).expect("no NUL");
            // SAFETY: dlsym on a handle from dlopen; the symbol's C signature is the field's
            // type, as declared in fdb5/api/fdb_c.h (5.10).
            let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
            if p.is_null() {
                return Err(format!("libfdb5 lacks {} (FDB5 too old?)", $name));
            }
            // SAFETY: see above.
            unsafe { std::mem::transmute::<*mut c_void, _>(p) }
        }};
    }
    Ok(Api {
        initialise: sym!("fdb_initialise"),
        version: sym!("fdb_version"),
        error_string: sym!("fdb_error_string"),
        new_handle: sym!("fdb_new_handle"),
        delete_handle: sym!("fdb_delete_handle"),
        archive: sym!("fdb_archive"),
        flush: sym!("fdb_flush"),
        new_key: sym!("fdb_new_key"),
        key_add: sym!("fdb_key_add"),
        delete_key: sym!("fdb_delete_key"),
        new_request: sym!("fdb_new_request"),
        request_add: sym!("fdb_request_add"),
        delete_request: sym!("fdb_delete_request"),
        retrieve: sym!("fdb_retrieve"),
        new_datareader: sym!("fdb_new_datareader"),
        datareader_open: sym!("fdb_datareader_open"),
        datareader_read: sym!("fdb_datareader_read"),
        datareader_close: sym!("fdb_datareader_close"),
        delete_datareader: sym!("fdb_delete_datareader"),
        list,
    })
}

/// True if the FDB5 library can be loaded here.
pub fn available() -> bool {
    load().is_ok() && Path::new("/etc/fdb/schema").exists()
}

/// Prepares a self-contained FDB5 under `root` (config, schema, empty dbnames, `db/`)
/// and returns the environment its processes need.
pub fn setup_root(root: &Path) -> Result<Vec<(String, String)>, Error> {
    let io = |what: &str, p: &Path| io(format!("FDB5 set-up: cannot {what} {}", p.display()));
    let db = root.join("db");
    std::fs::create_dir_all(&db).map_err(io("create", &db))?;
    let schema = root.join("schema");
    // FDB5's default schema where FDB5 is installed system-wide; else (PyPI's wheel ships
    // none) haar's built-in schema, which is FDB5's default.
    if Path::new("/etc/fdb/schema").exists() {
        std::fs::copy("/etc/fdb/schema", &schema)
            .map_err(io("copy /etc/fdb/schema to", &schema))?;
    } else {
        std::fs::write(&schema, haar_core::schema::BUILTIN_SCHEMA).map_err(io("write", &schema))?;
    }
    let dbnames = root.join("dbnames");
    std::fs::write(&dbnames, "").map_err(io("write", &dbnames))?;
    let config = root.join("fdb5-config.yaml");
    let text = format!(
        "---\ntype: local\nengine: toc\nschema: {}\nspaces:\n  - handler: Default\n    roots:\n      - path: {}\n",
        schema.display(),
        db.display()
    );
    std::fs::write(&config, text).map_err(io("write", &config))?;
    Ok(vec![
        ("FDB5_CONFIG_FILE".into(), config.display().to_string()),
        ("FDB_DBNAMES_FILE".into(), dbnames.display().to_string()),
    ])
}

/// FDB5 through its C API, configured by the environment [`setup_root`] returned
/// (`FDB5_CONFIG_FILE`, `FDB_DBNAMES_FILE`).
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
        if !lists_with_depth(&f.version) {
            f.api.list = None;
        }
        f.writer = f.new_handle()?;
        f.reader.get_mut().handle = f.new_handle()?;
        Ok(f)
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
        let strings: Vec<(CString, Vec<CString>)> = request
            .iter()
            .map(|(k, vs)| (cstr(k), vs.iter().map(|v| cstr(v)).collect()))
            .collect();
        let handle = self.reader.borrow().handle;
        // SAFETY: pointers come from CStrings that outlive the calls; the request and the
        // iterator are freed here on every path.
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

fn unsupported(what: &str) -> StoreError {
    StoreError::Config(format!(
        "FDB5 (through its C API in haar-bench) does not offer {what}; use FDB5's own tools"
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The FDB5 behaviours the workloads rely on, through the adapter: a reader made before a
    /// flush does not see it until `list` renews it; missing data is reported missing, not an
    /// error; what the C API does not offer fails by name. Skipped where FDB5 is not installed.
    #[test]
    fn fdb5_as_a_field_store() {
        if !available() {
            eprintln!("FDB5 not installed: skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let env = setup_root(dir.path()).unwrap();
        // SAFETY (test): FDB5 reads its configuration from the environment; this test is the
        // only one in this crate that opens FDB5.
        for (k, v) in &env {
            unsafe { std::env::set_var(k, v) };
        }
        let key = |step: u32| {
            Key::parse(&format!(
                "class=rd,expver=xxxx,stream=enfo,date=20261121,time=0000,domain=g,type=pf,\
                 levtype=ml,step={step},number=1,levelist=1,param=130"
            ))
            .unwrap()
        };
        let mut w = Fdb5Store::open().unwrap();
        let r = Fdb5Store::open().unwrap();
        assert!(w.describe().starts_with("FDB5 "));
        w.archive(&key(0), b"first").unwrap();
        w.flush().unwrap();
        let mut got = Vec::new();
        let rep = r
            .retrieve_keys(&[key(0), key(6)], &mut |k, d, crc| {
                assert_eq!(crc, None, "FDB5 keeps no checksum: {}", d.len());
                got.push((k.clone(), d.to_vec()));
                Ok(())
            })
            .unwrap();
        assert_eq!(got, vec![(key(0), b"first".to_vec())]);
        assert_eq!((rep.found, rep.missing.clone()), (1, vec![key(6)]));
        // Flushed after the reader read the database: invisible to it until a list.
        w.archive(&key(6), b"second").unwrap();
        w.flush().unwrap();
        let seen = |r: &Fdb5Store| {
            let mut n = 0;
            r.retrieve_keys(&[key(6)], &mut |_, _, _| {
                n += 1;
                Ok(())
            })
            .unwrap();
            n
        };
        assert_eq!(seen(&r), 0);
        let req = Request::parse(
            "class=rd,expver=xxxx,stream=enfo,date=20261121,time=0000,domain=g,type=pf,\
             levtype=ml,step=0/6/12,number=1,levelist=1,param=130",
        )
        .unwrap();
        let listed = r.list(&req).unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1].data.length, 6);
        assert_eq!(seen(&r), 1);
        let e = r
            .list(&Request::parse("class=rd,step=all").unwrap())
            .unwrap_err();
        assert!(
            e.to_string().contains("list of a request with step=all"),
            "{e}"
        );
        let e = w.wipe(&req, true).unwrap_err().to_string();
        assert!(e.contains("does not offer wipe"), "{e}");
        assert!(r.stats(&req).is_err());
        let split = w.split(&key(12)).unwrap();
        let e = w.archive_split(&split, b"x", Some(1)).unwrap_err();
        assert!(e.to_string().contains("not archived"), "{e}");
    }
}
