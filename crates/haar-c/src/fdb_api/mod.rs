//! FDB5's public C API (`fdb5/api/fdb_c.h` as shipped with FDB5 5.25) over haar, so that a
//! program written for FDB5 links against haar's `libfdb5.so` and runs unchanged.
//!
//! Owns the C face only: the exported `fdb_*` functions, their objects and FDB5's error
//! protocol (return codes, `fdb_error_string`, the failure handler). Every store is opened by
//! `haar::open`, GRIB is keyed by `haar::ingest`, requests are resolved by haar's request
//! language; nothing here knows how a store keeps bytes. Where haar's semantics differ from
//! FDB5's (listings sorted, a handle seeing later flushes) see `NOTES-fdb.md`.
//!
//! Layout: this module holds the error protocol, initialisation and versions; [`object`] the
//! checked opaque objects (tagged, generation-checked handles: NULL, freed, foreign and busy
//! objects are refused); [`keys`] keys, requests and split keys; [`handle`] handles, archive, flush and
//! retrieve; [`reader`] the data reader; [`list`] listing; [`wipe`] wipe and purge. With the
//! cargo feature `fdb5-5_10`, `v5_10` replaces `fdb_list` and `fdb_listiterator_next` with
//! FDB5 5.10's (Debian 12's `libfdb5-dev`), whose signatures differ under the same names.
//!
//! Thread safety is FDB5's: a handle (and every object) is used by one thread at a time
//! (checked: another thread's call meanwhile is refused, a delete waits for a call in
//! flight); different handles may be used by different threads at once. The last error message is
//! per thread (FDB5's is process-wide); the failure handler is process-wide, as in FDB5.

#![allow(non_camel_case_types)]

pub mod handle;
pub mod keys;
pub mod list;
pub mod object;
pub mod reader;
#[cfg(feature = "fdb5-5_10")]
pub mod v5_10;
pub mod wipe;

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Mutex;

use crate::ffi::{self, FfiResult, Kind};

/// `FDB_SUCCESS`: the call did what it was asked.
pub const FDB_SUCCESS: c_int = 0;
/// `FDB_ERROR_GENERAL_EXCEPTION`: the call failed; `fdb_error_string` says why.
pub const FDB_ERROR_GENERAL_EXCEPTION: c_int = 1;
/// `FDB_ERROR_UNKNOWN_EXCEPTION`: a bug in haar was caught at the boundary (a panic).
pub const FDB_ERROR_UNKNOWN_EXCEPTION: c_int = 2;
/// `FDB_ITERATION_COMPLETE`: an iterator has no more elements (not a failure).
pub const FDB_ITERATION_COMPLETE: c_int = 3;

/// The version `fdb_version` reports: the FDB5 API level this library implements, so that
/// programs parsing it as FDB5's `MAJOR.MINOR.PATCH` see the API they were written for.
/// `fdb_vcs_version` names haar (`haar-<version>`).
pub const FDB5_API_VERSION: &CStr = c"5.25.0";

/// The failure handler FDB5 calls on every failure: `fdb_failure_handler_t`.
pub type fdb_failure_handler_t =
    Option<unsafe extern "C" fn(context: *mut c_void, error_code: c_int)>;

/// The process-wide failure handler and its context (as a number: the pointer is the
/// caller's, only handed back).
static FAILURE_HANDLER: Mutex<Option<(unsafe extern "C" fn(*mut c_void, c_int), usize)>> =
    Mutex::new(None);

/// Runs the body of an exported function with FDB5's error protocol: `Ok(code)` is returned
/// as is (`FDB_SUCCESS`, `FDB_ITERATION_COMPLETE`); a failure records its message for
/// `fdb_error_string`, calls the failure handler, and returns
/// `FDB_ERROR_GENERAL_EXCEPTION` (or `FDB_ERROR_UNKNOWN_EXCEPTION` for a caught panic).
pub(crate) fn call(body: impl FnOnce() -> FfiResult<c_int>) -> c_int {
    match ffi::guard(body) {
        Ok(code) => code,
        Err(f) => {
            let code = if f.kind == Kind::Internal {
                FDB_ERROR_UNKNOWN_EXCEPTION
            } else {
                FDB_ERROR_GENERAL_EXCEPTION
            };
            let handler = *FAILURE_HANDLER.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((h, ctx)) = handler {
                // SAFETY: the caller registered this function for exactly this call.
                unsafe { h(ctx as *mut c_void, code) };
            }
            code
        }
    }
}

/// As [`call`] for bodies with nothing to report but success.
pub(crate) fn call_ok(body: impl FnOnce() -> FfiResult<()>) -> c_int {
    call(|| body().map(|()| FDB_SUCCESS))
}

/// Writes `value` through the out-parameter `out`; the error names `what`.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T, what: &str) -> FfiResult<()> {
    if out.is_null() {
        return Err(ffi::Failure::input(format!(
            "{what} is NULL: pass where to store the result"
        )));
    }
    // SAFETY: non-null and valid per the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Initialises the API. FDB5 needs it before any other call; haar needs nothing, so it only
/// succeeds (calling it twice is harmless, as in FDB5).
#[unsafe(no_mangle)]
pub extern "C" fn fdb_initialise() -> c_int {
    FDB_SUCCESS
}

/// Stores in `*version` the FDB5 API version this library implements ([`FDB5_API_VERSION`]);
/// the string lives as long as the program.
///
/// # Safety
/// `version` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_version(version: *mut *const c_char) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { put(version, FDB5_API_VERSION.as_ptr(), "version") })
}

/// Stores in `*sha1` what built this library: `haar-<version>` (haar is not FDB5, and this
/// is how a program can tell); the string lives as long as the program.
///
/// # Safety
/// `sha1` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_vcs_version(sha1: *mut *const c_char) -> c_int {
    const VCS: &CStr = match CStr::from_bytes_with_nul(
        concat!("haar-", env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
    ) {
        Ok(s) => s,
        Err(_) => panic!("no NUL inside the version"),
    };
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { put(sha1, VCS.as_ptr(), "sha1") })
}

/// A message for the return code `err`: `"Success"`, `"Iteration complete"`, this thread's
/// last failure for the two error codes, `"<unknown>"` otherwise (FDB5's strings). Valid until
/// this thread's next failing call.
#[unsafe(no_mangle)]
pub extern "C" fn fdb_error_string(err: c_int) -> *const c_char {
    match err {
        FDB_SUCCESS => c"Success".as_ptr(),
        FDB_ERROR_GENERAL_EXCEPTION | FDB_ERROR_UNKNOWN_EXCEPTION => ffi::last_error(),
        FDB_ITERATION_COMPLETE => c"Iteration complete".as_ptr(),
        _ => c"<unknown>".as_ptr(),
    }
}

/// Sets the function called, with `context` and the return code, on every failure of any
/// call (process-wide, as in FDB5); a NULL `handler` removes it.
///
/// # Safety
/// `handler` is null or a function that may be called from any thread calling this library
/// for as long as it is set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_set_failure_handler(
    handler: fdb_failure_handler_t,
    context: *mut c_void,
) -> c_int {
    call_ok(|| {
        *FAILURE_HANDLER.lock().unwrap_or_else(|p| p.into_inner()) =
            handler.map(|h| (h, context as usize));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};

    static SEEN: AtomicI32 = AtomicI32::new(-1);
    unsafe extern "C" fn record(context: *mut c_void, code: c_int) {
        assert_eq!(context as usize, 42);
        SEEN.store(code, Ordering::SeqCst);
    }

    #[test]
    fn a_panic_is_unknown_exception_a_failure_general_and_both_reach_the_handler() {
        unsafe { fdb_set_failure_handler(Some(record), 42 as *mut c_void) };
        assert_eq!(call(|| panic!("bug")), FDB_ERROR_UNKNOWN_EXCEPTION);
        assert_eq!(SEEN.load(Ordering::SeqCst), FDB_ERROR_UNKNOWN_EXCEPTION);
        let msg = unsafe { CStr::from_ptr(fdb_error_string(FDB_ERROR_UNKNOWN_EXCEPTION)) };
        assert!(msg.to_str().unwrap().contains("bug"), "{msg:?}");
        assert_eq!(
            call(|| Err(ffi::Failure::input("bad key"))),
            FDB_ERROR_GENERAL_EXCEPTION
        );
        assert_eq!(SEEN.load(Ordering::SeqCst), FDB_ERROR_GENERAL_EXCEPTION);
        SEEN.store(-1, Ordering::SeqCst);
        assert_eq!(call(|| Ok(FDB_ITERATION_COMPLETE)), FDB_ITERATION_COMPLETE);
        assert_eq!(
            SEEN.load(Ordering::SeqCst),
            -1,
            "completion is not a failure"
        );
        unsafe { fdb_set_failure_handler(None, std::ptr::null_mut()) };
    }
}
