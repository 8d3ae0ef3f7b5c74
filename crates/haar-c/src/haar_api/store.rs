//! Opening and closing a store (`haar_t`), keys (`haar_key_t`), archive and flush.
//!
//! A `haar_t` keeps the `OpenOptions` it was opened with, so that `haar_wait`/`haar_watch`
//! reach the same store (or servers) as the handle; its `FieldStore` sits behind a mutex, so
//! one handle may be shared by threads (their calls are serialised).

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use haar::Key;
use haar::ingest::{self, IngestOptions, Input};
use haar::{ConfigSource, FieldStore, OpenOptions};

use super::handles::{self, Shell, impl_handle};
use super::{HAAR_OK, out, put, run};
use crate::ffi::{self, Failure, FfiResult, Kind};

/// An open store and the options that opened it.
pub struct Opened {
    store: Mutex<Box<dyn FieldStore>>,
    /// The configuration, for waits and watches.
    pub opts: OpenOptions,
}

impl Opened {
    /// The store, locked for this call.
    pub fn lock(&self) -> FfiResult<MutexGuard<'_, Box<dyn FieldStore>>> {
        self.store.lock().map_err(|_| Failure {
            kind: Kind::Internal,
            message: "an earlier call on this haar_t failed inside haar (a bug): close it and open the store again".into(),
        })
    }
}

/// An open store (local, remote, dist or select, as its configuration says). Opaque.
#[allow(non_camel_case_types)]
pub struct haar_t(Shell<Opened>);
impl_handle!(haar_t, Opened, 0x01);

/// A key being built: keyword=value pairs in order. Opaque.
#[allow(non_camel_case_types)]
pub struct haar_key_t(Shell<KeyBuilder>);
impl_handle!(haar_key_t, KeyBuilder, 0x02);

/// A key being built, and where the next `haar_key_add` probably goes: a producer sets the
/// same keywords in the same order for every field, so the keyword after the last one set is
/// tried first, then the key is searched. A keyword found needs no check: it was checked
/// when it was added.
pub struct KeyBuilder {
    key: Key,
    next: usize,
}

impl KeyBuilder {
    /// The position of the C string `keyword` in the key, trying the expected one first.
    ///
    /// # Safety
    /// `keyword` is a NUL-terminated string.
    unsafe fn find(&self, keyword: *const c_char) -> Option<usize> {
        // SAFETY: per the caller's contract.
        if let Some((k, _)) = self.key.iter().nth(self.next)
            && unsafe { c_str_is(k, keyword) }
        {
            return Some(self.next);
        }
        // SAFETY: as above.
        self.key
            .iter()
            .position(|(k, _)| unsafe { c_str_is(k, keyword) })
    }

    /// `keyword=value`, appended or replacing the value (see `haar_key_add`).
    ///
    /// # Safety
    /// Both are NULL or NUL-terminated strings.
    unsafe fn set(&mut self, keyword: *const c_char, value: *const c_char) -> FfiResult<()> {
        // SAFETY: per the caller's contract.
        let v = unsafe { key_part(value, "value") }?;
        if keyword.is_null() {
            return Err(Failure::input("keyword is NULL: pass a string"));
        }
        // A keyword already in the key was checked when it was added.
        // SAFETY: non-null and NUL-terminated per the caller's contract.
        let at = match unsafe { self.find(keyword) } {
            Some(i) => {
                self.key.set_value_at(i, v);
                i
            }
            None => {
                // SAFETY: as above.
                let kw = unsafe { key_part(keyword, "keyword") }?;
                if kw.is_empty() {
                    return Err(Failure::input(format!(
                        "keyword is empty (value {v:?}): pass a keyword such as \"param\""
                    )));
                }
                self.key.push(kw, v);
                self.key.len() - 1
            }
        };
        self.next = at + 1;
        Ok(())
    }
}

/// Opens `opts` into a new handle written to `out_h`.
///
/// # Safety
/// `out_h` is valid for writes.
unsafe fn open_into(opts: OpenOptions, out_h: *mut *mut haar_t) -> FfiResult<c_int> {
    // SAFETY: per the caller's contract.
    let slot = unsafe { out(out_h, "out") }?;
    *slot = std::ptr::null_mut();
    let store = opts.field_store()?;
    *slot = handles::alloc::<haar_t>(Opened {
        store: Mutex::new(store),
        opts,
    })?;
    Ok(HAAR_OK)
}

/// Opens the store a configuration file describes and writes its handle to `*out`.
///
/// `config_path`: a haar YAML configuration (a local store, or `type: remote | dist |
/// select`), or an FDB5 local TOC configuration; NULL: the environment decides
/// (`$HAAR_CONFIG`, else FDB5's `$FDB5_CONFIG`, `$FDB5_CONFIG_FILE`, `$FDB_HOME`, else the
/// built-in defaults). The string is read during the call only. `*out` is set to NULL on
/// failure; free the handle with `haar_close`.
///
/// Errors: `HAAR_ERR_INPUT` (unreadable or invalid configuration, naming the file),
/// `HAAR_ERR_STORAGE` (the store or a server cannot be reached: the message names it).
///
/// # Safety
/// `config_path` is NULL or a NUL-terminated string; `out` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_open(config_path: *const c_char, out: *mut *mut haar_t) -> c_int {
    run(|| {
        let config = if config_path.is_null() {
            ConfigSource::from_env()
        } else {
            // SAFETY: per the caller's contract.
            let path = unsafe { ffi::str_arg(config_path, "config_path") }?;
            if !std::path::Path::new(path).is_file() {
                return Err(Failure::input(format!(
                    "configuration file {path} does not exist: give the path of a haar (or FDB5) YAML configuration, or NULL for the environment's"
                )));
            }
            ConfigSource::File(path.into())
        };
        // SAFETY: per the caller's contract.
        unsafe {
            open_into(
                OpenOptions {
                    config,
                    ..OpenOptions::default()
                },
                out,
            )
        }
    })
}

/// Opens the store a YAML configuration text describes (as `haar_open` for a file) and
/// writes its handle to `*out` (NULL on failure). The text is read during the call only.
///
/// Errors: `HAAR_ERR_INPUT` (invalid YAML or configuration), `HAAR_ERR_STORAGE`.
///
/// # Safety
/// `yaml` is a NUL-terminated string; `out` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_open_yaml(yaml: *const c_char, out: *mut *mut haar_t) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let text = unsafe { ffi::str_arg(yaml, "yaml") }?;
        let config = ConfigSource::Yaml {
            text: text.into(),
            origin: "the YAML given to haar_open_yaml".into(),
        };
        // SAFETY: per the caller's contract.
        unsafe {
            open_into(
                OpenOptions {
                    config,
                    ..OpenOptions::default()
                },
                out,
            )
        }
    })
}

/// Closes a store handle. Fields archived and not flushed are dropped (as in FDB5: flush
/// first); flushed fields are durable. NULL is accepted; a handle already closed gives
/// `HAAR_ERR_INPUT`, also once a new handle has been opened (a handle never reaches another).
/// Calls other threads are making on `h` are waited for; their later calls on `h` give
/// `HAAR_ERR_INPUT` (already freed).
///
/// # Safety
/// `h` is NULL or a handle from `haar_open`/`haar_open_yaml`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_close(h: *mut haar_t) -> c_int {
    // SAFETY: per the caller's contract.
    run(|| unsafe { handles::free(h, "h") }.map(|()| HAAR_OK))
}

/// Makes every field archived through `h` durable and visible to readers (every replica
/// persisted); returns when done.
///
/// Errors: `HAAR_ERR_INPUT` (bad handle), `HAAR_ERR_STORAGE` (the message names the
/// database or server; fields flushed before are not affected).
///
/// # Safety
/// `h` is a handle from `haar_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_flush(h: *mut haar_t) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let opened = unsafe { handles::get(h, "h") }?;
        opened.lock()?.flush()?;
        Ok(HAAR_OK)
    })
}

/// A byte slice from a C pointer and length (NULL allowed for length 0).
///
/// # Safety
/// `data` is valid for reads of `len` bytes unless `len` is 0.
unsafe fn bytes_arg<'a>(data: *const c_void, len: usize, what: &str) -> FfiResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(Failure::input(format!(
            "{what} is NULL with length {len}: pass the bytes"
        )));
    }
    // SAFETY: per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
}

/// Archives `len` bytes at `data` under `key` (a complete key of the store's schema). The
/// bytes are copied during the call; the field is invisible until `haar_flush`.
///
/// Errors: `HAAR_ERR_INPUT` (bad handle, a key the schema refuses — the message names the key
/// and the keyword at fault), `HAAR_ERR_STORAGE`. Through a server the key is checked by the
/// server's own schema (which this client does not know), so a refused key is reported by
/// the next `haar_flush` (`HAAR_ERR_INPUT` naming it; the other fields are flushed).
///
/// # Safety
/// `h` and `key` are live handles; `data` is valid for reads of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_archive(
    h: *mut haar_t,
    key: *const haar_key_t,
    data: *const c_void,
    len: usize,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let opened = unsafe { handles::get(h, "h") }?;
        let key = &unsafe { handles::get(key, "key") }?.key;
        let data = unsafe { bytes_arg(data, len, "data") }?;
        opened.lock()?.archive(key, data)?;
        Ok(HAAR_OK)
    })
}

/// Sets `n` keyword=value pairs in `key` (each as `haar_key_add` does) and archives `len`
/// bytes at `data` under the result, in one call: for a producer whose fields differ in a few
/// values (levelist, step, param), one boundary crossing per field instead of `n + 1`. The
/// key keeps the values set. On an error in a pair, the pairs before it are set and nothing
/// is archived.
///
/// Errors: as `haar_key_add` and `haar_archive`.
///
/// # Safety
/// `h` and `key` are live handles (`key` used by this thread only); `keywords` and `values`
/// point to `n` NUL-terminated strings each (may be NULL when `n` is 0); `data` is valid for
/// reads of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_archive_with(
    h: *mut haar_t,
    key: *mut haar_key_t,
    n: usize,
    keywords: *const *const c_char,
    values: *const *const c_char,
    data: *const c_void,
    len: usize,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let opened = unsafe { handles::get(h, "h") }?;
        let k = &mut *unsafe { handles::get_mut(key, "key") }?;
        let data = unsafe { bytes_arg(data, len, "data") }?;
        if n > 0 && (keywords.is_null() || values.is_null()) {
            return Err(Failure::input(format!(
                "keywords or values is NULL with n = {n}: pass n strings in each"
            )));
        }
        for i in 0..n {
            // SAFETY: both arrays hold `n` pointers per the caller's contract.
            unsafe { k.set(*keywords.add(i), *values.add(i)) }?;
        }
        opened.lock()?.archive(&k.key, data)?;
        Ok(HAAR_OK)
    })
}

/// As `haar_archive`, with the key given as text: `"class=od,expver=1,stream=oper,..."`.
///
/// # Safety
/// `h` is a live handle; `key` is a NUL-terminated string; `data` is valid for reads of
/// `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_archive_str(
    h: *mut haar_t,
    key: *const c_char,
    data: *const c_void,
    len: usize,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let opened = unsafe { handles::get(h, "h") }?;
        let text = unsafe { ffi::str_arg(key, "key") }?;
        let data = unsafe { bytes_arg(data, len, "data") }?;
        let key = Key::parse(text).map_err(|e| {
            Failure::input(format!(
                "key {text:?}: {e}; write keyword=value pairs separated by commas"
            ))
        })?;
        opened.lock()?.archive(&key, data)?;
        Ok(HAAR_OK)
    })
}

/// Archives a buffer of GRIB messages (back to back), each keyed by ecCodes with its MARS
/// keys, like `haar archive`. All or nothing: a buffer with any fault (not GRIB, truncated,
/// a key the schema refuses) archives nothing and gives `HAAR_ERR_INPUT` naming the message
/// and offset. Not flushed: call `haar_flush`. `*fields_out` (may be NULL) receives the
/// number of fields archived. The buffer is read during the call only.
///
/// # Safety
/// `h` is a live handle; `buf` is valid for reads of `len` bytes; `fields_out` is NULL or
/// valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_archive_grib(
    h: *mut haar_t,
    buf: *const c_void,
    len: usize,
    fields_out: *mut usize,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        unsafe { put(fields_out, 0) };
        let opened = unsafe { handles::get(h, "h") }?;
        let data = unsafe { bytes_arg(buf, len, "buf") }?;
        let opts = IngestOptions {
            flush: false,
            ..IngestOptions::default()
        };
        let mut store = opened.lock()?;
        let report = ingest::ingest(
            &mut **store,
            vec![Input::buffer("the GRIB buffer", data)],
            &opts,
            &mut |_| {},
        )?;
        if let Some(why) = report.failed.first() {
            return Err(Failure::input(format!("nothing archived: {why}")));
        }
        // SAFETY: per the caller's contract.
        unsafe { put(fields_out, report.fields) };
        Ok(HAAR_OK)
    })
}

/// Archives one GRIB message keyed by ecCodes with the store's schema (as `haar archive`
/// keys it) and writes its complete key, NUL-terminated (`class=od,expver=0001,...`), to
/// `key_out`: for a caller that must name each field it archives (FDB5's store plugin keeps
/// the key as the field's location). `*key_len` (may be NULL) receives the key's length
/// without the NUL, also when it does not fit. Not flushed: call `haar_flush`.
///
/// Errors: `HAAR_ERR_INPUT` (not one GRIB message, keys the schema refuses, or `key_cap` too
/// small for the key: nothing is archived then, and `*key_len` says the size needed).
///
/// # Safety
/// `h` is a live handle; `buf` is valid for reads of `len` bytes; `key_out` is valid for
/// writes of `key_cap` bytes; `key_len` is NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_archive_grib_message(
    h: *mut haar_t,
    buf: *const c_void,
    len: usize,
    key_out: *mut c_char,
    key_cap: usize,
    key_len: *mut usize,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        unsafe { put(key_len, 0) };
        let opened = unsafe { handles::get(h, "h") }?;
        let data = unsafe { bytes_arg(buf, len, "buf") }?;
        if key_out.is_null() {
            return Err(Failure::input("key_out is NULL: pass a buffer for the key"));
        }
        let mut store = opened.lock()?;
        let split = ingest::key_message(&**store, data)?;
        let text = split.full().to_string();
        // SAFETY: per the caller's contract.
        unsafe { put(key_len, text.len()) };
        if text.len() >= key_cap {
            return Err(Failure::input(format!(
                "the key {text} needs {} bytes with its NUL, key_cap is {key_cap}: nothing archived",
                text.len() + 1
            )));
        }
        store.archive_split(&split, data, None)?;
        // SAFETY: `key_out` holds `key_cap` > `text.len()` bytes per the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), key_out.cast::<u8>(), text.len());
            *key_out.add(text.len()) = 0;
        }
        Ok(HAAR_OK)
    })
}

/// A keyword or value for a key: a C string without `,` or `=`, measured and checked in one
/// pass over its bytes (the hot path of a producer that sets a few short values per field).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a`.
unsafe fn key_part<'a>(p: *const c_char, what: &str) -> FfiResult<&'a str> {
    if p.is_null() {
        return Err(Failure::input(format!("{what} is NULL: pass a string")));
    }
    let mut n = 0;
    let mut ascii = true;
    loop {
        // SAFETY: every byte up to and including the NUL is readable per the contract.
        let b = unsafe { *p.add(n) } as u8;
        if b == 0 {
            break;
        }
        if b == b',' || b == b'=' {
            // SAFETY: as above.
            let text = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy();
            return Err(Failure::input(format!(
                "{what} {text:?} holds ',' or '=', which separate a key's pairs"
            )));
        }
        ascii &= b.is_ascii();
        n += 1;
    }
    // SAFETY: the `n` bytes before the NUL.
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
    if ascii {
        // SAFETY: ASCII is UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).map_err(|_| Failure::input(format!("{what} is not UTF-8")))
    }
}

/// True when the NUL-terminated `p` holds exactly `stored` (which has no NUL), read without
/// measuring `p` first.
///
/// # Safety
/// `p` is a NUL-terminated string.
unsafe fn c_str_is(stored: &str, p: *const c_char) -> bool {
    for (i, &b) in stored.as_bytes().iter().enumerate() {
        // SAFETY: the bytes before `i` equal `stored`'s, so none was the NUL: `p[i]` exists.
        if unsafe { *p.add(i) } as u8 != b {
            return false;
        }
    }
    // SAFETY: as above, for `i = stored.len()`.
    unsafe { *p.add(stored.len()) == 0 }
}

/// Creates an empty key and writes its handle to `*out`; free it with `haar_key_free`. A key
/// may be reused for many archives (change values with `haar_key_add`).
///
/// # Safety
/// `out` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_key_new(out: *mut *mut haar_key_t) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let slot = unsafe { super::out(out, "out") }?;
        *slot = handles::alloc::<haar_key_t>(KeyBuilder {
            key: Key::new(),
            next: 0,
        })?;
        Ok(HAAR_OK)
    })
}

/// Sets `keyword=value` in `key`: appended, or the value replaced where the keyword is
/// already there (its position kept). Both strings are copied. Values are checked against
/// the schema when the key is used.
///
/// Errors: `HAAR_ERR_INPUT` (bad handle, NULL or empty keyword, a keyword or value holding
/// `,` or `=`).
///
/// # Safety
/// `key` is a live handle used by this thread only; the strings are NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_key_add(
    key: *mut haar_key_t,
    keyword: *const c_char,
    value: *const c_char,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let k = &mut *unsafe { handles::get_mut(key, "key") }?;
        unsafe { k.set(keyword, value) }?;
        Ok(HAAR_OK)
    })
}

/// Frees a key. NULL is accepted; a key already freed gives `HAAR_ERR_INPUT`.
///
/// # Safety
/// `key` is NULL or a handle from `haar_key_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_key_free(key: *mut haar_key_t) -> c_int {
    // SAFETY: per the caller's contract.
    run(|| unsafe { handles::free(key, "key") }.map(|()| HAAR_OK))
}
