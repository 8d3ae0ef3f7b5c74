//! FDB5 5.10's listing (Debian 12's `libfdb5-dev`), built instead of 5.25's with the cargo
//! feature `fdb5-5_10`: `fdb_new_listiterator` makes an empty iterator, `fdb_list(fdb, req,
//! it)` fills it, `fdb_listiterator_next(it, &exist, &str)` hands out each field as FDB5 5.10
//! prints it (`{db keys}{index keys}{datum keys}`, keywords in the schema's order).
//!
//! Owns only these three signatures; what is listed is `list`'s.

use std::ffi::{c_char, c_int};

use super::handle::fdb_handle_t;
use super::keys::{c_string, fdb_request_t};
use super::list::{ListObj, elements, fdb_listiterator_t};
use super::object;
use super::{call_ok, put};
use crate::ffi::Failure;

/// Creates an empty list iterator in `*it`, for `fdb_list`; delete it with
/// `fdb_delete_listiterator`.
///
/// # Safety
/// `it` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_new_listiterator(it: *mut *mut fdb_listiterator_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { put(it, object::new(ListObj::new(Vec::new(), 3))?, "it") })
}

/// Lists every field matching `req` (NULL: every field) into the iterator `it` (made by
/// `fdb_new_listiterator`), replacing what it held. As FDB5 5.10, which does not deduplicate
/// here (measured against Debian's 5.10.8), the masked copies of re-archived keys that a
/// local store still holds are listed too, each after its key's live copy.
///
/// # Safety
/// `fdb` is null or a live handle; `req` is null or a live request; `it` is null or a live
/// list iterator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_list(
    fdb: *mut fdb_handle_t,
    req: *const fdb_request_t,
    it: *mut fdb_listiterator_t,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let (h, r, mut l) = unsafe {
            (
                object::live(fdb)?,
                object::optional(req.cast_mut())?,
                object::live(it)?,
            )
        };
        *l = ListObj::new(
            elements(&*h.store, r.as_deref().map(|r| &r.request), 3, true)?,
            3,
        );
        Ok(())
    })
}

/// Moves to the next listed field: `*exist` says whether there is one, and `*str` (valid
/// until the next call) is its key as FDB5 5.10 prints it. Returns `FDB_SUCCESS` at the end
/// too, with `*exist` false, as FDB5 5.10 does.
///
/// # Safety
/// `it` is null or a live list iterator; `exist` and `str` are null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_listiterator_next(
    it: *mut fdb_listiterator_t,
    exist: *mut bool,
    str: *mut *const c_char,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let mut l = unsafe { object::live(it)? };
        if exist.is_null() || str.is_null() {
            return Err(Failure::input(
                "exist or str is NULL: pass where to store the result",
            ));
        }
        let more = l.advance();
        if more {
            let s = &l.current()?.split;
            l.text = c_string(&format!(
                "{{{}}}{{{}}}{{{}}}",
                s.db.without_empty(),
                s.index.without_empty(),
                s.datum.without_empty()
            ));
        }
        // SAFETY: checked non-null; valid per the caller's contract.
        unsafe {
            *exist = more;
            if more {
                *str = l.text.as_ptr();
            }
        }
        Ok(())
    })
}
