//! The real FDB5 as a workload target, through its C API (`fdb5/api/fdb_c.h`) loaded at run
//! time from `libfdb5.so`, so haar builds and runs where FDB5 is not installed and compares
//! itself with it where it is (Debian 12: `apt-get install fdb5 libfdb5-dev`).
//!
//! FDB5's behaviours are kept, not papered over: a handle does not see data flushed after it
//! first read a database, so a poll makes a new handle; a retrieve of missing data succeeds
//! with no bytes, so presence is judged by the size the reader reports.

use std::ffi::{CStr, CString, c_char, c_int, c_long, c_void};
use std::path::Path;

use haar_core::Key;

use crate::error::{Error, io};
use crate::target::Target;

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
}

const LIBS: [&str; 2] = ["libfdb5.so.0d", "libfdb5.so"];

// Each transmute's target type is the `Api` field it initialises, spelled out there.
#[allow(clippy::missing_transmute_annotations)]
fn load() -> Result<Api, String> {
    let mut lib = std::ptr::null_mut();
    for name in LIBS {
        let c = CString::new(name).expect("no NUL");
        // SAFETY: dlopen with a valid C string; the library stays loaded for the process.
        lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if !lib.is_null() {
            break;
        }
    }
    if lib.is_null() {
        return Err(
            "the FDB5 library (libfdb5.so) is not installed: apt-get install fdb5 libfdb5-dev"
                .into(),
        );
    }
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
    })
}

/// True if the FDB5 library can be loaded here.
pub fn available() -> bool {
    load().is_ok() && Path::new("/etc/fdb/schema").exists()
}

/// Prepares a self-contained FDB5 under `root` (config, schema copy, empty dbnames, `db/`)
/// and returns the environment its processes need.
pub fn setup_root(root: &Path) -> Result<Vec<(String, String)>, Error> {
    let io = |what: &str, p: &Path| io(format!("FDB5 set-up: cannot {what} {}", p.display()));
    let db = root.join("db");
    std::fs::create_dir_all(&db).map_err(io("create", &db))?;
    let schema = root.join("schema");
    std::fs::copy("/etc/fdb/schema", &schema).map_err(io(
        "copy /etc/fdb/schema (is the fdb5 package installed?) to",
        &schema,
    ))?;
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

/// FDB5 through its C API, configured by the environment [`setup_root`] returned.
pub struct Fdb5 {
    api: Api,
    handle: H,
    version: String,
    buf: Vec<u8>,
}

impl Fdb5 {
    /// Loads the library, initialises FDB5 and opens a handle.
    pub fn open() -> Result<Fdb5, Error> {
        let api = load().map_err(Error::Usage)?;
        let mut f = Fdb5 {
            api,
            handle: std::ptr::null_mut(),
            version: String::new(),
            buf: Vec::new(),
        };
        // SAFETY: C API calls with out-pointers we own.
        unsafe {
            f.check("fdb_initialise", (f.api.initialise)())?;
            let mut v: *const c_char = std::ptr::null();
            f.check("fdb_version", (f.api.version)(&mut v))?;
            if !v.is_null() {
                f.version = CStr::from_ptr(v).to_string_lossy().into_owned();
            }
            let mut h = std::ptr::null_mut();
            f.check("fdb_new_handle", (f.api.new_handle)(&mut h))?;
            f.handle = h;
        }
        Ok(f)
    }

    fn check(&self, call: &str, rc: c_int) -> Result<(), Error> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: FDB5 returns a static string for any code.
        let msg = unsafe {
            let p = (self.api.error_string)(rc);
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Err(Error::Failed(format!("FDB5 {call} failed ({rc}): {msg}")))
    }

    /// A fresh handle: FDB5 handles do not see data flushed after their first read.
    fn renew(&mut self) -> Result<(), Error> {
        // SAFETY: the old handle is ours and not used again.
        unsafe {
            (self.api.delete_handle)(self.handle);
            let mut h = std::ptr::null_mut();
            self.check("fdb_new_handle", (self.api.new_handle)(&mut h))?;
            self.handle = h;
        }
        Ok(())
    }

    /// Opens a reader for one key; returns (reader, size FDB5 reports).
    fn open_reader(&self, key: &Key) -> Result<(H, c_long), Error> {
        let strings = cstrings(key);
        // SAFETY: pointers come from CStrings that outlive the calls; objects are freed below.
        unsafe {
            let mut req = std::ptr::null_mut();
            self.check("fdb_new_request", (self.api.new_request)(&mut req))?;
            for (k, v) in &strings {
                let vals = [v.as_ptr()];
                self.check(
                    "fdb_request_add",
                    (self.api.request_add)(req, k.as_ptr(), vals.as_ptr(), 1),
                )?;
            }
            let mut dr = std::ptr::null_mut();
            self.check("fdb_new_datareader", (self.api.new_datareader)(&mut dr))?;
            let rc = (self.api.retrieve)(self.handle, req, dr);
            (self.api.delete_request)(req);
            self.check("fdb_retrieve", rc)?;
            let mut size: c_long = 0;
            self.check(
                "fdb_datareader_open",
                (self.api.datareader_open)(dr, &mut size),
            )?;
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

impl Drop for Fdb5 {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            // SAFETY: our handle, dropped once.
            unsafe { (self.api.delete_handle)(self.handle) };
        }
    }
}

impl Target for Fdb5 {
    fn describe(&self) -> String {
        format!("FDB5 {} (C API, TOC)", self.version)
    }

    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<(), Error> {
        let strings = cstrings(key);
        // SAFETY: as in open_reader; `data` outlives the call.
        unsafe {
            let mut k = std::ptr::null_mut();
            self.check("fdb_new_key", (self.api.new_key)(&mut k))?;
            for (kw, v) in &strings {
                self.check(
                    "fdb_key_add",
                    (self.api.key_add)(k, kw.as_ptr(), v.as_ptr()),
                )?;
            }
            let rc = (self.api.archive)(self.handle, k, data.as_ptr().cast(), data.len());
            (self.api.delete_key)(k);
            self.check("fdb_archive", rc)
        }
    }

    fn flush(&mut self) -> Result<(), Error> {
        // SAFETY: our handle.
        let rc = unsafe { (self.api.flush)(self.handle) };
        self.check("fdb_flush", rc)
    }

    fn retrieve(
        &mut self,
        _req: &str,
        keys: &[Key],
        sink: &mut crate::target::FieldSink<'_>,
    ) -> Result<usize, Error> {
        let mut found = 0;
        for key in keys {
            let (dr, size) = self.open_reader(key)?;
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            buf.resize(size.max(0) as usize + 1, 0);
            let mut got = 0usize;
            let result = loop {
                let mut r: c_long = 0;
                // SAFETY: reading into our buffer within its length.
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
                    break Ok(());
                }
                got += r as usize;
                if got == buf.len() {
                    buf.resize(buf.len() * 2, 0);
                }
            };
            self.close_reader(dr);
            result?;
            if got > 0 {
                found += 1;
                sink(key, &buf[..got])?;
            }
            self.buf = buf;
        }
        Ok(found)
    }

    fn count(&mut self, _req: &str, keys: &[Key]) -> Result<usize, Error> {
        self.renew()?;
        let mut n = 0;
        for key in keys {
            // While a writer is creating the database FDB5 may fail to open it (its schema
            // file is not there yet): for a poll that is "not there yet", not an error.
            match self.open_reader(key) {
                Ok((dr, size)) => {
                    self.close_reader(dr);
                    if size > 0 {
                        n += 1;
                    }
                }
                Err(_) => return Ok(n),
            }
        }
        Ok(n)
    }
}
