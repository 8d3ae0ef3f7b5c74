//! Hand-written declarations of the few ecCodes C functions haar uses, and a
//! handle type that deletes what it owns.
//!
//! Written against ecCodes 2.28 (`/usr/include/x86_64-linux-gnu/eccodes.h`,
//! Debian 12/13 `libeccodes-dev`); every function used here has had the same
//! signature since ecCodes 2.0. Only this module contains `unsafe` FFI calls;
//! the rest of the crate goes through [`Handle`].

use std::ffi::{CStr, CString, c_char, c_int, c_long, c_ulong, c_void};
use std::ptr::NonNull;

/// Opaque `codes_handle`.
#[repr(C)]
pub(crate) struct CodesHandle {
    _private: [u8; 0],
}

/// Opaque `codes_context`.
#[repr(C)]
pub(crate) struct CodesContext {
    _private: [u8; 0],
}

/// Opaque `codes_keys_iterator`.
#[repr(C)]
pub(crate) struct CodesKeysIterator {
    _private: [u8; 0],
}

/// `CODES_KEYS_ITERATOR_ALL_KEYS`: the flag FDB5/metkit pass.
pub(crate) const KEYS_ITERATOR_ALL_KEYS: c_ulong = 0;
/// `CODES_SUCCESS`.
pub(crate) const SUCCESS: c_int = 0;
/// `CODES_BUFFER_TOO_SMALL`.
pub(crate) const BUFFER_TOO_SMALL: c_int = -3;

unsafe extern "C" {
    fn codes_get_api_version() -> c_long;
    fn codes_definition_path(c: *const CodesContext) -> *mut c_char;
    fn codes_get_error_message(code: c_int) -> *const c_char;

    fn codes_handle_new_from_message(
        c: *mut CodesContext,
        data: *const c_void,
        data_len: usize,
    ) -> *mut CodesHandle;
    fn codes_grib_handle_new_from_samples(
        c: *mut CodesContext,
        sample_name: *const c_char,
    ) -> *mut CodesHandle;
    fn codes_handle_clone(h: *const CodesHandle) -> *mut CodesHandle;
    fn codes_handle_delete(h: *mut CodesHandle) -> c_int;

    fn codes_get_message(
        h: *const CodesHandle,
        message: *mut *const c_void,
        message_length: *mut usize,
    ) -> c_int;

    fn codes_get_size(h: *const CodesHandle, key: *const c_char, size: *mut usize) -> c_int;
    fn codes_get_long(h: *const CodesHandle, key: *const c_char, value: *mut c_long) -> c_int;
    fn codes_get_double(h: *const CodesHandle, key: *const c_char, value: *mut f64) -> c_int;
    fn codes_get_double_array(
        h: *const CodesHandle,
        key: *const c_char,
        vals: *mut f64,
        length: *mut usize,
    ) -> c_int;
    fn codes_get_long_array(
        h: *const CodesHandle,
        key: *const c_char,
        vals: *mut c_long,
        length: *mut usize,
    ) -> c_int;
    fn codes_get_string(
        h: *const CodesHandle,
        key: *const c_char,
        mesg: *mut c_char,
        length: *mut usize,
    ) -> c_int;
    fn codes_is_defined(h: *const CodesHandle, key: *const c_char) -> c_int;
    fn codes_is_missing(h: *const CodesHandle, key: *const c_char, err: *mut c_int) -> c_int;

    fn codes_set_long(h: *mut CodesHandle, key: *const c_char, val: c_long) -> c_int;
    fn codes_set_string(
        h: *mut CodesHandle,
        key: *const c_char,
        mesg: *const c_char,
        length: *mut usize,
    ) -> c_int;
    fn codes_set_long_array(
        h: *mut CodesHandle,
        key: *const c_char,
        vals: *const c_long,
        length: usize,
    ) -> c_int;
    fn codes_set_double_array(
        h: *mut CodesHandle,
        key: *const c_char,
        vals: *const f64,
        length: usize,
    ) -> c_int;

    fn codes_keys_iterator_new(
        h: *mut CodesHandle,
        filter_flags: c_ulong,
        name_space: *const c_char,
    ) -> *mut CodesKeysIterator;
    fn codes_keys_iterator_next(kiter: *mut CodesKeysIterator) -> c_int;
    fn codes_keys_iterator_get_name(kiter: *const CodesKeysIterator) -> *const c_char;
    fn codes_keys_iterator_delete(kiter: *mut CodesKeysIterator) -> c_int;
}

/// ecCodes' API version as a number, e.g. 22800 for 2.28.0.
// c_long is 32-bit on some targets, so the conversion is not useless everywhere.
#[allow(clippy::useless_conversion)]
pub(crate) fn api_version() -> i64 {
    // SAFETY: no arguments, returns a constant.
    i64::from(unsafe { codes_get_api_version() })
}

/// The directories ecCodes reads its definition files from (`ECCODES_DEFINITION_PATH` or
/// the built-in path), in search order.
pub(crate) fn definition_path() -> Vec<std::path::PathBuf> {
    // SAFETY: null means the default context; the result is a string owned by the context
    // (or null), valid for the life of the process.
    let p = unsafe { codes_definition_path(std::ptr::null()) };
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: non-null, NUL-terminated.
    let text = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    text.split(':')
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .collect()
}

/// ecCodes' text for an error code.
pub(crate) fn error_message(code: c_int) -> String {
    // SAFETY: returns a pointer to a static string (or null for unknown codes).
    let p = unsafe { codes_get_error_message(code) };
    if p.is_null() {
        return format!("ecCodes error {code}");
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// An ecCodes failure: the call, the key (if any) and ecCodes' own code and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodesError {
    pub(crate) call: &'static str,
    pub(crate) key: Option<String>,
    pub(crate) code: c_int,
}

impl CodesError {
    fn new(call: &'static str, key: Option<&str>, code: c_int) -> Self {
        Self {
            call,
            key: key.map(str::to_owned),
            code,
        }
    }
}

impl std::fmt::Display for CodesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.call)?;
        if let Some(key) = &self.key {
            write!(f, "(\"{key}\")")?;
        }
        write!(
            f,
            " failed: {} (code {})",
            error_message(self.code),
            self.code
        )
    }
}

fn check(call: &'static str, key: Option<&str>, code: c_int) -> Result<(), CodesError> {
    if code == SUCCESS {
        Ok(())
    } else {
        Err(CodesError::new(call, key, code))
    }
}

fn cstring(key: &str) -> Result<CString, CodesError> {
    // Key names never contain NUL; treat one as a "not found" from ecCodes.
    CString::new(key).map_err(|_| CodesError::new("CString::new", Some(key), -10))
}

/// An owned `codes_handle`, deleted on drop.
///
/// `'a` ties a handle made with [`Handle::from_message`] to the bytes it reads
/// from, since `codes_handle_new_from_message` does not copy them. A handle is
/// `Send` (ecCodes handles may move between threads) but not `Sync`: ecCodes
/// caches decoded values inside the handle, so two threads must not use one
/// handle at once.
pub(crate) struct Handle<'a> {
    ptr: NonNull<CodesHandle>,
    _borrow: std::marker::PhantomData<&'a [u8]>,
}

// SAFETY: a codes_handle is plain heap state with no thread affinity; ecCodes is
// built with thread support (GRIB_OMP_THREADS=1 in Debian's eccodes_config.h),
// so the shared default context is locked internally.
unsafe impl Send for Handle<'_> {}

impl<'a> Handle<'a> {
    /// A read-only view of `msg`, which must be one whole GRIB message. No copy
    /// is made: the handle borrows `msg` for its lifetime.
    pub(crate) fn from_message(msg: &'a [u8]) -> Result<Self, CodesError> {
        // SAFETY: msg is valid for msg.len() bytes for 'a, which outlives the
        // handle. ecCodes only reads a user buffer unless keys are set, and
        // `Handle<'a>` made here is never written to (setters take
        // `Handle<'static>`, made only from samples or clones).
        let p = unsafe {
            codes_handle_new_from_message(
                std::ptr::null_mut(),
                msg.as_ptr().cast::<c_void>(),
                msg.len(),
            )
        };
        NonNull::new(p)
            .map(|ptr| Self {
                ptr,
                _borrow: std::marker::PhantomData,
            })
            .ok_or(CodesError::new("codes_handle_new_from_message", None, -2))
    }

    fn raw(&self) -> *mut CodesHandle {
        self.ptr.as_ptr()
    }

    /// Number of values of `key` (1 for scalars).
    pub(crate) fn size(&self, key: &str) -> Result<usize, CodesError> {
        let k = cstring(key)?;
        let mut n = 0usize;
        // SAFETY: valid handle and NUL-terminated key; n is a valid out-pointer.
        check("codes_get_size", Some(key), unsafe {
            codes_get_size(self.raw(), k.as_ptr(), &mut n)
        })?;
        Ok(n)
    }

    /// `key` as a long integer.
    #[allow(clippy::useless_conversion)] // c_long is 32-bit on some targets
    pub(crate) fn get_long(&self, key: &str) -> Result<i64, CodesError> {
        let k = cstring(key)?;
        let mut v: c_long = 0;
        // SAFETY: as in `size`.
        check("codes_get_long", Some(key), unsafe {
            codes_get_long(self.raw(), k.as_ptr(), &mut v)
        })?;
        Ok(i64::from(v))
    }

    /// `key` as an array of longs (e.g. `freeFormData`, one byte per element).
    #[allow(clippy::useless_conversion)] // c_long is 32-bit on some targets
    pub(crate) fn get_long_array(&self, key: &str) -> Result<Vec<i64>, CodesError> {
        let n = self.size(key)?;
        let k = cstring(key)?;
        let mut v: Vec<c_long> = vec![0; n];
        let mut len = n;
        // SAFETY: v holds n writable longs; ecCodes writes at most len and updates it.
        check("codes_get_long_array", Some(key), unsafe {
            codes_get_long_array(self.raw(), k.as_ptr(), v.as_mut_ptr(), &mut len)
        })?;
        v.truncate(len);
        Ok(v.into_iter().map(i64::from).collect())
    }

    /// `key` as an array of doubles (e.g. `values`: the whole field decoded).
    pub(crate) fn get_double_array(&self, key: &str) -> Result<Vec<f64>, CodesError> {
        let n = self.size(key)?;
        let k = cstring(key)?;
        let mut v = vec![0f64; n];
        let mut len = n;
        // SAFETY: v holds n writable doubles; ecCodes writes at most len and updates it.
        check("codes_get_double_array", Some(key), unsafe {
            codes_get_double_array(self.raw(), k.as_ptr(), v.as_mut_ptr(), &mut len)
        })?;
        v.truncate(len);
        Ok(v)
    }

    /// `key` as a double.
    pub(crate) fn get_double(&self, key: &str) -> Result<f64, CodesError> {
        let k = cstring(key)?;
        let mut v = 0f64;
        // SAFETY: as in `size`.
        check("codes_get_double", Some(key), unsafe {
            codes_get_double(self.raw(), k.as_ptr(), &mut v)
        })?;
        Ok(v)
    }

    /// `key` as ecCodes formats it as a string.
    pub(crate) fn get_string(&self, key: &str) -> Result<String, CodesError> {
        let k = cstring(key)?;
        let mut cap = 1024usize;
        loop {
            let mut buf = vec![0u8; cap];
            let mut len = cap;
            // SAFETY: buf holds `len` writable bytes; ecCodes writes at most len
            // bytes including the NUL and updates len.
            let rc = unsafe {
                codes_get_string(
                    self.raw(),
                    k.as_ptr(),
                    buf.as_mut_ptr().cast::<c_char>(),
                    &mut len,
                )
            };
            if rc == BUFFER_TOO_SMALL && cap < (1 << 20) {
                cap *= 16;
                continue;
            }
            check("codes_get_string", Some(key), rc)?;
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            buf.truncate(end);
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
    }

    /// Whether `key` exists in this message (ecCodes `codes_is_defined`).
    pub(crate) fn is_defined(&self, key: &str) -> bool {
        let Ok(k) = cstring(key) else { return false };
        // SAFETY: valid handle and key.
        unsafe { codes_is_defined(self.raw(), k.as_ptr()) == 1 }
    }

    /// Whether `key` is defined and not set to "missing" — metkit's `has()`.
    pub(crate) fn has(&self, key: &str) -> bool {
        if !self.is_defined(key) {
            return false;
        }
        let Ok(k) = cstring(key) else { return false };
        let mut err: c_int = 0;
        // SAFETY: valid handle, key and out-pointer.
        let missing = unsafe { codes_is_missing(self.raw(), k.as_ptr(), &mut err) };
        err == SUCCESS && missing != 1
    }

    /// Names of the keys of `namespace`, in ecCodes' order, with the flags FDB5 uses.
    pub(crate) fn key_names(&self, namespace: &str) -> Result<Vec<String>, CodesError> {
        let ns = cstring(namespace)?;
        // SAFETY: valid handle and namespace; the iterator is deleted below.
        let it =
            unsafe { codes_keys_iterator_new(self.raw(), KEYS_ITERATOR_ALL_KEYS, ns.as_ptr()) };
        if it.is_null() {
            return Err(CodesError::new(
                "codes_keys_iterator_new",
                Some(namespace),
                -2,
            ));
        }
        let mut names = Vec::new();
        // SAFETY: `it` is a live iterator until codes_keys_iterator_delete; the
        // name pointer is valid until the next call on the iterator and is
        // copied at once.
        unsafe {
            while codes_keys_iterator_next(it) != 0 {
                let p = codes_keys_iterator_get_name(it);
                if !p.is_null() {
                    names.push(CStr::from_ptr(p).to_string_lossy().into_owned());
                }
            }
            codes_keys_iterator_delete(it);
        }
        Ok(names)
    }

    /// The handle's message as ecCodes would write it.
    pub(crate) fn message(&self) -> Result<&[u8], CodesError> {
        let mut p: *const c_void = std::ptr::null();
        let mut len = 0usize;
        // SAFETY: valid handle and out-pointers. The returned buffer lives as
        // long as the handle and is not changed until the next set call, which
        // needs `&mut self` and so ends this borrow.
        check("codes_get_message", None, unsafe {
            codes_get_message(self.raw(), &mut p, &mut len)
        })?;
        if p.is_null() {
            return Err(CodesError::new("codes_get_message", None, -2));
        }
        // SAFETY: ecCodes guarantees `len` readable bytes at `p`.
        Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
    }
}

impl Handle<'static> {
    /// A new handle from an ecCodes GRIB sample, e.g. `"GRIB2"` or
    /// `"reduced_gg_pl_320_grib2"` (files in `/usr/share/eccodes/samples`).
    pub(crate) fn from_sample(name: &str) -> Result<Self, CodesError> {
        let n = cstring(name)?;
        // SAFETY: NUL-terminated sample name; null context means the default.
        let p = unsafe { codes_grib_handle_new_from_samples(std::ptr::null_mut(), n.as_ptr()) };
        NonNull::new(p)
            .map(|ptr| Self {
                ptr,
                _borrow: std::marker::PhantomData,
            })
            .ok_or(CodesError::new(
                "codes_grib_handle_new_from_samples",
                Some(name),
                -2,
            ))
    }

    /// A deep copy of this handle, owning its own message buffer.
    pub(crate) fn try_clone(&self) -> Result<Self, CodesError> {
        // SAFETY: valid handle; the clone copies the message.
        let p = unsafe { codes_handle_clone(self.raw()) };
        NonNull::new(p)
            .map(|ptr| Self {
                ptr,
                _borrow: std::marker::PhantomData,
            })
            .ok_or(CodesError::new("codes_handle_clone", None, -2))
    }

    /// Set an integer key.
    pub(crate) fn set_long(&mut self, key: &str, value: i64) -> Result<(), CodesError> {
        let k = cstring(key)?;
        let v = c_long::try_from(value)
            .map_err(|_| CodesError::new("codes_set_long", Some(key), -13))?;
        // SAFETY: valid, uniquely borrowed handle and key.
        check("codes_set_long", Some(key), unsafe {
            codes_set_long(self.raw(), k.as_ptr(), v)
        })
    }

    /// Set a string key.
    pub(crate) fn set_string(&mut self, key: &str, value: &str) -> Result<(), CodesError> {
        let k = cstring(key)?;
        let v = cstring(value)?;
        let mut len = value.len();
        // SAFETY: valid, uniquely borrowed handle; NUL-terminated key and value.
        check("codes_set_string", Some(key), unsafe {
            codes_set_string(self.raw(), k.as_ptr(), v.as_ptr(), &mut len)
        })
    }

    /// Set an integer array key.
    pub(crate) fn set_long_array(&mut self, key: &str, values: &[i64]) -> Result<(), CodesError> {
        let k = cstring(key)?;
        let v: Vec<c_long> = values.iter().map(|&x| x as c_long).collect();
        // SAFETY: v holds v.len() longs.
        check("codes_set_long_array", Some(key), unsafe {
            codes_set_long_array(self.raw(), k.as_ptr(), v.as_ptr(), v.len())
        })
    }

    /// Set a double array key (e.g. `values`, which repacks the data section).
    pub(crate) fn set_double_array(&mut self, key: &str, values: &[f64]) -> Result<(), CodesError> {
        let k = cstring(key)?;
        // SAFETY: values holds values.len() doubles.
        check("codes_set_double_array", Some(key), unsafe {
            codes_set_double_array(self.raw(), k.as_ptr(), values.as_ptr(), values.len())
        })
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        // SAFETY: we own the handle and nothing borrows it past this point.
        unsafe {
            codes_handle_delete(self.raw());
        }
    }
}
