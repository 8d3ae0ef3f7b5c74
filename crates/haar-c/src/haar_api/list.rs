//! `haar_list` (an iterator over the flushed fields matching a request, with each field's
//! key/value pairs and location) and `haar_axes` (the values present per keyword).
//!
//! Strings handed to C are kept in the iterator (the current element's) or the axes object,
//! so their pointers stay valid as documented without the caller freeing anything.

use std::ffi::{CString, c_char, c_int};

use haar::Field;

use super::handles::{self, Shell, impl_handle};
use super::store::haar_t;
use super::{HAAR_END, HAAR_OK, out, put, requests_arg, run};
use crate::ffi::{Failure, FfiResult};

/// A C string of `s` (interior NULs cannot occur in keys; replaced if they did).
fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).expect("NULs replaced")
}

/// The strings of the current element of a listing.
struct Current {
    pairs: Vec<(CString, CString)>,
    key: CString,
    database: CString,
    object: u64,
    offset: u64,
    length: u64,
}

/// The fields of a listing and where the iteration is.
pub struct Listing {
    fields: Vec<Field>,
    next: usize,
    current: Option<Current>,
}

impl Listing {
    fn current(&self) -> FfiResult<&Current> {
        self.current.as_ref().ok_or_else(|| {
            Failure::input("the list iterator has no current element: call haar_list_next first (and only while it returns HAAR_OK)")
        })
    }
}

/// An iterator over listed fields. Opaque; one thread at a time.
#[allow(non_camel_case_types)]
pub struct haar_list_t(Shell<Listing>);
impl_handle!(haar_list_t, Listing, 0x04);

/// The axes of a request: keywords, each with its values. Opaque; one thread at a time.
#[allow(non_camel_case_types)]
pub struct haar_axes_t(Shell<Vec<(CString, Vec<CString>)>>);
impl_handle!(haar_axes_t, Vec<(CString, Vec<CString>)>, 0x05);

/// Lists the flushed fields matching `request` (NULL: every field; else `k=v/v,k=v`, a MARS
/// request, or `@FILE`) and writes an iterator to `*it` (NULL on failure); free it with
/// `haar_list_free`. Fields are sorted by key, each once. Position the iterator with
/// `haar_list_next` before reading an element. The listing is taken during the call: fields
/// flushed later are not in it.
///
/// Errors: `HAAR_ERR_INPUT` (bad handle or request), `HAAR_ERR_STORAGE`.
///
/// # Safety
/// `h` is a live handle; `request` is NULL or NUL-terminated; `it` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_list(
    h: *mut haar_t,
    request: *const c_char,
    it: *mut *mut haar_list_t,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let slot = unsafe { out(it, "it") }?;
        *slot = std::ptr::null_mut();
        let opened = unsafe { handles::get(h, "h") }?;
        let reqs = unsafe { requests_arg(request) }?;
        let store = opened.lock()?;
        let mut fields = Vec::new();
        for req in &reqs {
            fields.extend(store.list(req)?);
        }
        if reqs.len() > 1 {
            fields.sort_by_key(|f| f.key().to_string());
            fields.dedup_by_key(|f| f.key());
        }
        *slot = handles::alloc::<haar_list_t>(Listing {
            fields,
            next: 0,
            current: None,
        })?;
        Ok(HAAR_OK)
    })
}

/// Moves the iterator to its next element: `HAAR_OK` when there is one, `HAAR_END` when the
/// listing is exhausted (not an error).
///
/// # Safety
/// `it` is a live iterator used by this thread only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_list_next(it: *mut haar_list_t) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let l = &mut *unsafe { handles::get_mut(it, "it") }?;
        let Some(f) = l.fields.get(l.next) else {
            l.current = None;
            return Ok(HAAR_END);
        };
        l.next += 1;
        let key = f.key().without_empty();
        l.current = Some(Current {
            pairs: key.iter().map(|(k, v)| (cstring(k), cstring(v))).collect(),
            key: cstring(&key.to_string()),
            database: cstring(&f.db.without_empty().to_string()),
            object: f.data.object,
            offset: f.data.offset,
            length: f.data.length,
        });
        Ok(HAAR_OK)
    })
}

/// The number of fields in the listing (all of them, wherever the iterator is).
///
/// # Safety
/// `it` is a live iterator; `count` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_list_count(it: *mut haar_list_t, count: *mut usize) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let l = &mut *unsafe { handles::get_mut(it, "it") }?;
        *unsafe { out(count, "count") }? = l.fields.len();
        Ok(HAAR_OK)
    })
}

/// The current element's full key as text, `"class=od,expver=0001,..."` (values canonical,
/// absent optional keywords left out). The string belongs to the iterator: valid until the
/// next `haar_list_next` or `haar_list_free`.
///
/// # Safety
/// `it` is a live iterator; `key` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_list_key(it: *mut haar_list_t, key: *mut *const c_char) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let l = &mut *unsafe { handles::get_mut(it, "it") }?;
        *unsafe { out(key, "key") }? = l.current()?.key.as_ptr();
        Ok(HAAR_OK)
    })
}

/// The number of keyword=value pairs of the current element's key.
///
/// # Safety
/// `it` is a live iterator; `count` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_list_key_count(it: *mut haar_list_t, count: *mut usize) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let l = &mut *unsafe { handles::get_mut(it, "it") }?;
        *unsafe { out(count, "count") }? = l.current()?.pairs.len();
        Ok(HAAR_OK)
    })
}

/// The `i`-th keyword=value pair (0-based, schema order) of the current element's key. The
/// strings belong to the iterator: valid until the next `haar_list_next` or `haar_list_free`.
///
/// Errors: `HAAR_ERR_INPUT` (bad handle, no current element, `i` out of range).
///
/// # Safety
/// `it` is a live iterator; `keyword` and `value` are valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_list_key_at(
    it: *mut haar_list_t,
    i: usize,
    keyword: *mut *const c_char,
    value: *mut *const c_char,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let l = &mut *unsafe { handles::get_mut(it, "it") }?;
        let kw = unsafe { out(keyword, "keyword") }?;
        let v = unsafe { out(value, "value") }?;
        let cur = l.current()?;
        let (k, val) = cur.pairs.get(i).ok_or_else(|| {
            Failure::input(format!(
                "pair {i} asked of a key of {} pairs",
                cur.pairs.len()
            ))
        })?;
        *kw = k.as_ptr();
        *v = val.as_ptr();
        Ok(HAAR_OK)
    })
}

/// Where the current element's bytes are: its database key as text (owned by the iterator,
/// valid until the next `haar_list_next`), the object that holds them (posix: the data file's
/// writer id; pmem: 0), the byte offset in it and the length. Any out-parameter may be NULL.
///
/// # Safety
/// `it` is a live iterator; each out-parameter is NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_list_location(
    it: *mut haar_list_t,
    database: *mut *const c_char,
    object: *mut u64,
    offset: *mut u64,
    length: *mut u64,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let l = &mut *unsafe { handles::get_mut(it, "it") }?;
        let cur = l.current()?;
        unsafe {
            put(database, cur.database.as_ptr());
            put(object, cur.object);
            put(offset, cur.offset);
            put(length, cur.length);
        }
        Ok(HAAR_OK)
    })
}

/// Frees a list iterator (and the strings it handed out). NULL is accepted; an iterator
/// already freed gives `HAAR_ERR_INPUT`.
///
/// # Safety
/// `it` is NULL or an iterator from `haar_list`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_list_free(it: *mut haar_list_t) -> c_int {
    // SAFETY: per the caller's contract.
    run(|| unsafe { handles::free(it, "it") }.map(|()| HAAR_OK))
}

/// The axes of the flushed fields matching `request` (NULL: all): each keyword with the
/// values present, both sorted. Writes a new object to `*axes` (NULL on failure); read it
/// with `haar_axes_count`, `haar_axes_keyword` and `haar_axes_value`, free it with
/// `haar_axes_free`.
///
/// Errors: `HAAR_ERR_INPUT` (bad handle or request), `HAAR_ERR_STORAGE`.
///
/// # Safety
/// `h` is a live handle; `request` is NULL or NUL-terminated; `axes` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_axes(
    h: *mut haar_t,
    request: *const c_char,
    axes: *mut *mut haar_axes_t,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let slot = unsafe { out(axes, "axes") }?;
        *slot = std::ptr::null_mut();
        let opened = unsafe { handles::get(h, "h") }?;
        let reqs = unsafe { requests_arg(request) }?;
        let store = opened.lock()?;
        let mut all =
            std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
        for req in &reqs {
            for (k, vs) in store.axes(req)? {
                all.entry(k).or_default().extend(vs);
            }
        }
        let flat = all
            .into_iter()
            .map(|(k, vs)| (cstring(&k), vs.iter().map(|v| cstring(v)).collect()))
            .collect();
        *slot = handles::alloc::<haar_axes_t>(flat)?;
        Ok(HAAR_OK)
    })
}

/// The number of keywords in `axes`.
///
/// # Safety
/// `axes` is a live object; `count` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_axes_count(axes: *mut haar_axes_t, count: *mut usize) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let a = &mut *unsafe { handles::get_mut(axes, "axes") }?;
        *unsafe { out(count, "count") }? = a.len();
        Ok(HAAR_OK)
    })
}

/// The `i`-th keyword (0-based, sorted) and how many values it has. The string belongs to
/// `axes` (valid until `haar_axes_free`); `nvalues` may be NULL.
///
/// # Safety
/// `axes` is a live object; `keyword` is valid for writes; `nvalues` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_axes_keyword(
    axes: *mut haar_axes_t,
    i: usize,
    keyword: *mut *const c_char,
    nvalues: *mut usize,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let a = &mut *unsafe { handles::get_mut(axes, "axes") }?;
        let kw = unsafe { out(keyword, "keyword") }?;
        let (k, vs) = a
            .get(i)
            .ok_or_else(|| Failure::input(format!("keyword {i} asked of {} axes", a.len())))?;
        *kw = k.as_ptr();
        unsafe { put(nvalues, vs.len()) };
        Ok(HAAR_OK)
    })
}

/// The `j`-th value (0-based, sorted) of the `i`-th keyword. The string belongs to `axes`
/// (valid until `haar_axes_free`).
///
/// # Safety
/// `axes` is a live object; `value` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_axes_value(
    axes: *mut haar_axes_t,
    i: usize,
    j: usize,
    value: *mut *const c_char,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let a = &mut *unsafe { handles::get_mut(axes, "axes") }?;
        let v = unsafe { out(value, "value") }?;
        let (k, vs) = a
            .get(i)
            .ok_or_else(|| Failure::input(format!("keyword {i} asked of {} axes", a.len())))?;
        let val = vs.get(j).ok_or_else(|| {
            Failure::input(format!(
                "value {j} asked of {:?}, which has {}",
                k,
                vs.len()
            ))
        })?;
        *v = val.as_ptr();
        Ok(HAAR_OK)
    })
}

/// Frees an axes object. NULL is accepted; one already freed gives `HAAR_ERR_INPUT`.
///
/// # Safety
/// `axes` is NULL or an object from `haar_axes`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_axes_free(axes: *mut haar_axes_t) -> c_int {
    // SAFETY: per the caller's contract.
    run(|| unsafe { handles::free(axes, "axes") }.map(|()| HAAR_OK))
}
