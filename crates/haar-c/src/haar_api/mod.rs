//! `libhaar`, haar's own C ABI: the functions and types of `include/haar.h`, which cbindgen
//! generates from this module (and only this module: `fdb_api` has FDB5's header).
//!
//! Every function returns an `int` code ([`HAAR_OK`], [`HAAR_END`] or a `HAAR_ERR_*`) and, on
//! failure, sets this thread's message ([`haar_last_error`]). Handles are opaque shells
//! ([`handles`]); every body runs inside [`ffi::guard`], so no panic
//! crosses into C. The work is done by the `haar` library (`haar::open`, `haar::ingest`,
//! `haar::watch`): this module only converts arguments, results and errors.
//!
//! Submodules: [`store`] (open, archive, flush, keys), [`list`] (list and axes), [`read`]
//! (retrieve and the reader), [`admin`] (wipe, purge, wait, watch), [`extract`] (values at
//! index ranges).

// In the order the header lists them.
pub mod admin;
pub mod handles;
pub mod list;
pub mod read;
pub mod store;
// After them: extraction (design §16).
pub mod extract;

use std::ffi::{c_char, c_int};

use haar::request::Request;

use crate::ffi::{self, Failure, FfiResult, Kind};

/// Success.
pub const HAAR_OK: c_int = 0;
/// Not an error: an iterator is exhausted (`haar_list_next`) or a watch reached its deadline
/// (`haar_watch`).
pub const HAAR_END: c_int = 1;
/// A bad argument: NULL or freed handle, bad key, request or configuration, unknown
/// configuration file, GRIB that cannot be keyed.
pub const HAAR_ERR_INPUT: c_int = 2;
/// Requested data is not there (a retrieve names missing fields: the message names them).
pub const HAAR_ERR_MISSING: c_int = 3;
/// Storage, a server or the network failed (e.g. connection refused); data already flushed is
/// not affected.
pub const HAAR_ERR_STORAGE: c_int = 4;
/// A bug in haar, caught at the boundary (please report the message).
pub const HAAR_ERR_INTERNAL: c_int = 5;
/// `haar_wait` timed out before every field was flushed; the message names the missing keys.
pub const HAAR_ERR_TIMEOUT: c_int = 6;

/// The code of a failure's kind.
fn code(kind: Kind) -> c_int {
    match kind {
        Kind::Input => HAAR_ERR_INPUT,
        Kind::Missing => HAAR_ERR_MISSING,
        Kind::Storage => HAAR_ERR_STORAGE,
        Kind::Internal => HAAR_ERR_INTERNAL,
    }
}

/// Runs an exported function's body under [`ffi::guard`]: its code, or the failure's code
/// with the message recorded for [`haar_last_error`].
fn run(body: impl FnOnce() -> FfiResult<c_int>) -> c_int {
    match ffi::guard(body) {
        Ok(c) => c,
        Err(f) => code(f.kind),
    }
}

/// An out-parameter, checked for NULL; the error names it.
///
/// # Safety
/// `p` is NULL or valid for writes of a `T`.
unsafe fn out<'a, T>(p: *mut T, what: &str) -> FfiResult<&'a mut T> {
    // SAFETY: per the caller's contract.
    unsafe { p.as_mut() }
        .ok_or_else(|| Failure::input(format!("{what} is NULL: pass where to write the result")))
}

/// Writes `v` through an optional out-parameter (NULL: not wanted).
///
/// # Safety
/// `p` is NULL or valid for writes of a `T`.
unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: per the caller's contract.
    if let Some(p) = unsafe { p.as_mut() } {
        *p = v;
    }
}

/// The requests of a C request argument: NULL selects everything; otherwise `k=v/v,k=v`, a
/// MARS request, or `@FILE` (see `haar::open::requests`).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn requests_arg(p: *const c_char) -> FfiResult<Vec<Request>> {
    if p.is_null() {
        return Ok(vec![Request::default()]);
    }
    // SAFETY: per the caller's contract.
    let text = unsafe { ffi::str_arg(p, "request") }?;
    Ok(haar::open::requests(Some(text))?)
}

/// The version of libhaar, e.g. `"0.1.0"`: a static string, never freed.
#[unsafe(no_mangle)]
pub extern "C" fn haar_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The message of this thread's last failed call (empty if none failed yet): what went wrong,
/// naming the key, request, file or server at fault, and what to do. The string belongs to
/// libhaar and stays valid until this thread's next failing call; do not free it. Each thread
/// has its own message.
#[unsafe(no_mangle)]
pub extern "C" fn haar_last_error() -> *const c_char {
    ffi::last_error()
}
