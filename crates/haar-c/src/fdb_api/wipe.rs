//! Wipe and purge (`fdb_wipe`, `fdb_purge`) and their iterators over lines of text
//! (`fdb_wipe_element_t`, `fdb_purge_element_t`).
//!
//! Owns turning `WipeReport` / `PurgeReport` into FDB5's elements; what is removed is the
//! store's (`FieldStore::wipe`, `FieldStore::purge`).

use std::ffi::{CString, c_char, c_int};

use haar::{PurgeReport, WipeReport};

use super::handle::fdb_handle_t;
use super::keys::{c_string, fdb_request_t};
use super::object::{self, Kind, Obj, kind};
use super::{FDB_ITERATION_COMPLETE, FDB_SUCCESS, call, call_ok, put};
use crate::ffi::{Failure, FfiResult};

/// Lines still to hand out, as a wipe or purge iterator.
pub struct Lines(std::vec::IntoIter<CString>);
/// One line, as a wipe or purge element.
pub struct Line(CString);

/// A wipe iterator (`fdb_wipe_iterator_t`).
pub struct WipeLines(pub Lines);
kind!(WipeLines, 0x16, "fdb_wipe_iterator_t", "fdb_wipe");
/// A wipe element (`fdb_wipe_element_t`).
pub struct WipeLine(pub Line);
kind!(
    WipeLine,
    0x17,
    "fdb_wipe_element_t",
    "fdb_wipe_iterator_next"
);
/// A purge iterator (`fdb_purge_iterator_t`).
pub struct PurgeLines(pub Lines);
kind!(PurgeLines, 0x18, "fdb_purge_iterator_t", "fdb_purge");
/// A purge element (`fdb_purge_element_t`).
pub struct PurgeLine(pub Line);
kind!(
    PurgeLine,
    0x19,
    "fdb_purge_element_t",
    "fdb_purge_iterator_next"
);

/// FDB5's `fdb_wipe_iterator_t`.
pub type fdb_wipe_iterator_t = Obj<WipeLines>;
/// FDB5's `fdb_wipe_element_t`.
pub type fdb_wipe_element_t = Obj<WipeLine>;
/// FDB5's `fdb_purge_iterator_t`.
pub type fdb_purge_iterator_t = Obj<PurgeLines>;
/// FDB5's `fdb_purge_element_t`.
pub type fdb_purge_element_t = Obj<PurgeLine>;

fn lines(v: Vec<String>) -> Lines {
    Lines(
        v.iter()
            .map(|s| c_string(s))
            .collect::<Vec<_>>()
            .into_iter(),
    )
}

/// What a wipe did or would do: one line per database removed, then one for all the fields
/// (those of the databases removed and those hidden in databases that stay); `porcelain`:
/// `database {KEY}` and `fields N bytes B` only.
pub fn wipe_lines(r: &WipeReport, doit: bool, porcelain: bool) -> Vec<String> {
    let mut out = Vec::new();
    let removed = if doit {
        "removed"
    } else {
        "would be removed (dry run: pass doit)"
    };
    for db in &r.databases {
        out.push(if porcelain {
            format!("database {{{db}}}")
        } else {
            format!("database {{{db}}} {removed} with its files")
        });
    }
    if r.fields > 0 {
        out.push(if porcelain {
            format!("fields {} bytes {}", r.fields, r.bytes)
        } else {
            format!("{} field(s), {} bytes, {removed} in all", r.fields, r.bytes)
        });
    }
    out
}

/// What a purge did or would do, one line (none when there was nothing to drop).
pub fn purge_lines(r: &PurgeReport, doit: bool, porcelain: bool) -> Vec<String> {
    if r.dropped_fields == 0 {
        return Vec::new();
    }
    vec![if porcelain {
        format!(
            "databases {} fields {} bytes {} freed {}",
            r.databases, r.dropped_fields, r.dropped_bytes, r.freed_bytes
        )
    } else if doit {
        format!(
            "{} masked or wiped field(s) ({} bytes) dropped from {} database(s), {} bytes freed",
            r.dropped_fields, r.dropped_bytes, r.databases, r.freed_bytes
        )
    } else {
        format!(
            "{} masked or wiped field(s) ({} bytes) in {} database(s) would be dropped (dry run: pass doit)",
            r.dropped_fields, r.dropped_bytes, r.databases
        )
    }]
}

/// Removes the data `req` selects (a dry run unless `doit`) and hands in `*it` an iterator
/// over lines saying what was (or would be) removed; delete it with
/// `fdb_delete_wipe_iterator`. A request naming only database-level keywords removes those
/// databases with their files; otherwise the matching fields are hidden (their space is
/// given back by `fdb_purge`). `porcelain`: terse lines for scripts.
///
/// As FDB5: a database holding files haar did not write is "unclean"; a dry run lists them
/// (`unowned PATH` lines), and with `doit` the wipe fails naming them and removes nothing,
/// unless `unsafeWipeAll`, which deletes them with the database.
///
/// # Safety
/// `fdb` is null or a live handle; `req` is null or a live request; `it` is null or valid for
/// a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_wipe(
    fdb: *mut fdb_handle_t,
    req: *mut fdb_request_t,
    doit: bool,
    porcelain: bool,
    unsafe_wipe_all: bool,
    it: *mut *mut fdb_wipe_iterator_t,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let (mut h, r) = unsafe { (object::live(fdb)?, object::live(req)?) };
        if it.is_null() {
            return Err(Failure::input(
                "it is NULL: pass where to store the iterator",
            ));
        }
        let unowned = if doit {
            Vec::new()
        } else {
            h.store.unowned_files(&r.request)?
        };
        let report = if unsafe_wipe_all {
            h.store.wipe_unsafe_all(&r.request, doit)?
        } else {
            h.store.wipe(&r.request, doit)?
        };
        let mut text = wipe_lines(&report, doit, porcelain);
        text.extend(unowned_lines(&unowned, unsafe_wipe_all, porcelain));
        let l = WipeLines(lines(text));
        // SAFETY: per the caller's contract.
        unsafe { put(it, object::new(l)?, "it") }
    })
}

/// What a dry run says of the files haar did not write in the databases it would remove.
pub fn unowned_lines(
    unowned: &[std::path::PathBuf],
    unsafe_wipe_all: bool,
    porcelain: bool,
) -> Vec<String> {
    unowned
        .iter()
        .map(|p| {
            if porcelain {
                format!("unowned {}", p.display())
            } else if unsafe_wipe_all {
                format!(
                    "{}: not written by haar, would be removed (unsafeWipeAll)",
                    p.display()
                )
            } else {
                format!(
                    "{}: not written by haar; a wipe with doit refuses its database (cannot fully wipe an unclean database) unless unsafeWipeAll",
                    p.display()
                )
            }
        })
        .collect()
}

/// Drops the masked and wiped fields of the databases `req` selects from storage (a dry run
/// unless `doit`) and hands in `*it` an iterator over lines saying what; delete it with
/// `fdb_delete_purge_iterator`.
///
/// # Safety
/// `fdb` is null or a live handle; `req` is null or a live request; `it` is null or valid for
/// a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_purge(
    fdb: *mut fdb_handle_t,
    req: *mut fdb_request_t,
    doit: bool,
    porcelain: bool,
    it: *mut *mut fdb_purge_iterator_t,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let (mut h, r) = unsafe { (object::live(fdb)?, object::live(req)?) };
        if it.is_null() {
            return Err(Failure::input(
                "it is NULL: pass where to store the iterator",
            ));
        }
        let report = h.store.purge(&r.request, doit)?;
        let l = PurgeLines(lines(purge_lines(&report, doit, porcelain)));
        // SAFETY: per the caller's contract.
        unsafe { put(it, object::new(l)?, "it") }
    })
}

/// The next line of `lines` as a new element in `*element`; at the end an empty element and
/// `FDB_ITERATION_COMPLETE` (as FDB5: the caller deletes the element either way).
///
/// # Safety
/// `element` is null or valid for a write.
unsafe fn next<E: Kind>(
    lines: &mut Lines,
    element: *mut *mut Obj<E>,
    wrap: impl FnOnce(Line) -> E,
) -> FfiResult<c_int> {
    let (line, code) = match lines.0.next() {
        Some(l) => (l, FDB_SUCCESS),
        None => (CString::default(), FDB_ITERATION_COMPLETE),
    };
    // SAFETY: per the caller's contract.
    unsafe { put(element, object::new(wrap(Line(line)))?, "element")? };
    Ok(code)
}

/// Moves to the next line of a wipe, in a new element in `*element` (delete it with
/// `fdb_delete_wipe_element`); `FDB_ITERATION_COMPLETE` after the last.
///
/// # Safety
/// `it` is null or a live wipe iterator; `element` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_wipe_iterator_next(
    it: *mut fdb_wipe_iterator_t,
    element: *mut *mut fdb_wipe_element_t,
) -> c_int {
    call(|| {
        // SAFETY: per the caller's contract.
        let mut l = unsafe { object::live(it)? };
        // SAFETY: per the caller's contract.
        unsafe { next(&mut l.0, element, WipeLine) }
    })
}

/// Deletes a wipe iterator (NULL is accepted, as in FDB5).
///
/// # Safety
/// `it` is null or a live wipe iterator, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_delete_wipe_iterator(it: *mut fdb_wipe_iterator_t) -> c_int {
    if it.is_null() {
        return FDB_SUCCESS;
    }
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { object::free(it) })
}

/// Deletes a wipe element.
///
/// # Safety
/// `element` is null or a live wipe element, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_delete_wipe_element(element: *mut fdb_wipe_element_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { object::free(element) })
}

/// Stores the element's line in `*str` (valid until the element is deleted).
///
/// # Safety
/// `element` is null or a live wipe element; `str` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_wipe_element_string(
    element: *mut fdb_wipe_element_t,
    str: *mut *const c_char,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let e = unsafe { object::live(element)? };
        // SAFETY: per the caller's contract.
        unsafe { put(str, e.0.0.as_ptr(), "str") }
    })
}

/// Moves to the next line of a purge, in a new element in `*element` (delete it with
/// `fdb_delete_purge_element`); `FDB_ITERATION_COMPLETE` after the last.
///
/// # Safety
/// `it` is null or a live purge iterator; `element` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_purge_iterator_next(
    it: *mut fdb_purge_iterator_t,
    element: *mut *mut fdb_purge_element_t,
) -> c_int {
    call(|| {
        // SAFETY: per the caller's contract.
        let mut l = unsafe { object::live(it)? };
        // SAFETY: per the caller's contract.
        unsafe { next(&mut l.0, element, PurgeLine) }
    })
}

/// Deletes a purge iterator (NULL is accepted, as in FDB5).
///
/// # Safety
/// `it` is null or a live purge iterator, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_delete_purge_iterator(it: *mut fdb_purge_iterator_t) -> c_int {
    if it.is_null() {
        return FDB_SUCCESS;
    }
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { object::free(it) })
}

/// Deletes a purge element.
///
/// # Safety
/// `element` is null or a live purge element, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_delete_purge_element(element: *mut fdb_purge_element_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { object::free(element) })
}

/// Stores the element's line in `*str` (valid until the element is deleted).
///
/// # Safety
/// `element` is null or a live purge element; `str` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_purge_element_string(
    element: *mut fdb_purge_element_t,
    str: *mut *const c_char,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let e = unsafe { object::live(element)? };
        // SAFETY: per the caller's contract.
        unsafe { put(str, e.0.0.as_ptr(), "str") }
    })
}
