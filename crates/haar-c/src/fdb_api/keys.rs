//! Keys (`fdb_key_t`), requests (`fdb_request_t`: add, get, expand) and split keys
//! (`fdb_split_key_t`: a listed field's key, level by level).
//!
//! Owns turning C strings into haar's [`Key`] and [`Request`] and back; parsing, range
//! expansion and normalisation are haar's request language (`Request::resolve`).

use std::ffi::{CString, c_char, c_int};

use haar::Key;
use haar::StoreOptions;
use haar::request::{Request, Values, canonical_keyword};
use haar::schema::SplitKey;

use super::object::{self, Obj, kind};
use super::{FDB_ITERATION_COMPLETE, FDB_SUCCESS, call, call_ok, put};
use crate::ffi::{Failure, FfiResult, str_arg};

/// A key under construction (`fdb_key_t`): keyword=value pairs in the order added.
#[derive(Default)]
pub struct KeyObj {
    /// The pairs.
    pub key: Key,
}
kind!(KeyObj, 0x12, "fdb_key_t", "fdb_new_key");

/// FDB5's `fdb_key_t`.
pub type fdb_key_t = Obj<KeyObj>;

/// A request (`fdb_request_t`): a `retrieve` with keyword=values entries, as typed until
/// `fdb_expand_request` resolves them.
pub struct RequestObj {
    /// The request.
    pub request: Request,
}
kind!(RequestObj, 0x13, "fdb_request_t", "fdb_new_request");

/// FDB5's `fdb_request_t`.
pub type fdb_request_t = Obj<RequestObj>;

/// The metadata of one listed field, level by level (`fdb_split_key_t`), and where
/// `fdb_splitkey_next_metadata` is. The strings are its own, valid until it is filled again
/// or deleted.
#[derive(Default)]
pub struct SplitKeyObj {
    /// `(keyword, value, level)` in level order, then keyword order (alphabetical, as FDB5
    /// 5.25 hands them out).
    pairs: Vec<(CString, CString, usize)>,
    /// Pairs handed out so far.
    next: usize,
    /// Whether a list iterator filled it.
    filled: bool,
}
kind!(SplitKeyObj, 0x14, "fdb_split_key_t", "fdb_new_splitkey");

/// FDB5's `fdb_split_key_t`.
pub type fdb_split_key_t = Obj<SplitKeyObj>;

impl SplitKeyObj {
    /// Fills it with the three levels of `split` (levels left out beyond `depth`, keywords
    /// with empty values left out, as FDB5 does) and rewinds it.
    pub fn fill(&mut self, split: &SplitKey, depth: usize) {
        self.pairs.clear();
        for (level, key) in [&split.db, &split.index, &split.datum]
            .into_iter()
            .enumerate()
            .take(depth)
        {
            // An optional keyword a field lacks is stored with an empty value; FDB5 leaves it
            // out.
            let mut pairs: Vec<(&str, &str)> = key.iter().filter(|(_, v)| !v.is_empty()).collect();
            pairs.sort_unstable();
            for (k, v) in pairs {
                self.pairs.push((c_string(k), c_string(v), level));
            }
        }
        self.next = 0;
        self.filled = true;
    }
}

/// `s` as a C string (a NUL inside, which no stored key holds, is cut there).
pub fn c_string(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|e| {
        let n = e.nul_position();
        CString::new(&s[..n]).expect("cut at the first NUL")
    })
}

/// Creates an empty key in `*key`; delete it with `fdb_delete_key`.
///
/// # Safety
/// `key` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_new_key(key: *mut *mut fdb_key_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { put(key, object::new(KeyObj::default())?, "key") })
}

/// Sets `param=value` in `key` (a keyword set again takes the new value, as in FDB5).
///
/// # Safety
/// `key` is null or made by `fdb_new_key`; `param` and `value` are null or C strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_key_add(
    key: *mut fdb_key_t,
    param: *const c_char,
    value: *const c_char,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let (mut k, p, v) = unsafe {
            (
                object::live(key)?,
                str_arg(param, "param")?,
                str_arg(value, "value")?,
            )
        };
        if p.is_empty() {
            return Err(Failure::input(
                "param is empty: pass a keyword such as \"step\"",
            ));
        }
        k.key.push(p, v);
        Ok(())
    })
}

/// Deletes a key made by `fdb_new_key`.
///
/// # Safety
/// `key` is null or made by `fdb_new_key`, and not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_delete_key(key: *mut fdb_key_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { object::free(key) })
}

/// Creates an empty `retrieve` request in `*req`; delete it with `fdb_delete_request`.
///
/// # Safety
/// `req` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_new_request(req: *mut *mut fdb_request_t) -> c_int {
    let r = RequestObj {
        request: Request::new("retrieve"),
    };
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { put(req, object::new(r)?, "req") })
}

/// Sets the values of `param` in `req` (replacing earlier ones): each of the `numValues`
/// strings may hold several values separated by `/`, ranges included (`0/to/24/by/6`), as
/// in FDB5; a lone `all` means any value. Keyword abbreviations are resolved as MARS does.
///
/// # Safety
/// `req` is null or made by `fdb_new_request`; `param` is null or a C string; `values` is null
/// or points to `numValues` C strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_request_add(
    req: *mut fdb_request_t,
    param: *const c_char,
    values: *const *const c_char,
    num_values: c_int,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let (mut r, p) = unsafe { (object::live(req)?, str_arg(param, "param")?) };
        let keyword = canonical_keyword(p).map_err(|c| {
            Failure::input(format!(
                "param {p:?} is ambiguous: it abbreviates {}",
                c.join(", ")
            ))
        })?;
        if keyword.is_empty() {
            return Err(Failure::input(
                "param is empty: pass a keyword such as \"step\"",
            ));
        }
        if values.is_null() {
            return Err(Failure::input(format!(
                "values of {p:?} is NULL: pass an array of strings"
            )));
        }
        let n = usize::try_from(num_values).map_err(|_| {
            Failure::input(format!(
                "numValues of {p:?} is {num_values}: pass 0 or more"
            ))
        })?;
        let mut list = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: `values` holds `n` pointers per the caller's contract.
            let v = unsafe { str_arg(*values.add(i), &format!("values[{i}] of {p:?}"))? };
            list.extend(v.split('/').map(str::to_string));
        }
        let vals = if list.len() == 1 && list[0].eq_ignore_ascii_case("all") {
            Values::All
        } else {
            Values::List(list)
        };
        r.request.set(keyword, vals);
        Ok(())
    })
}

/// Stores in `*values` a malloc'd array of `*numValues` malloc'd C strings, the values of
/// `param` in `req` (`all` for any value); the caller frees each string and then the array
/// with `free()`. A keyword the request does not hold is an error.
///
/// # Safety
/// `req` is null or made by `fdb_new_request`; `param` is null or a C string; `values` and
/// `numValues` are null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_request_get(
    req: *mut fdb_request_t,
    param: *const c_char,
    values: *mut *mut *mut c_char,
    num_values: *mut usize,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let (r, p) = unsafe { (object::live(req)?, str_arg(param, "param")?) };
        if values.is_null() || num_values.is_null() {
            return Err(Failure::input(
                "values or numValues is NULL: pass where to store the result",
            ));
        }
        let keyword = canonical_keyword(p).unwrap_or_else(|_| p.to_ascii_lowercase());
        let got: Vec<String> = match r.request.get(&keyword) {
            Some(Values::All) => vec!["all".into()],
            Some(Values::List(v)) => v.clone(),
            None => {
                return Err(Failure::input(format!(
                    "the request has no {p:?} (it holds {})",
                    keywords_of(&r.request)
                )));
            }
        };
        let array = malloc_strings(&got)?;
        // SAFETY: both checked non-null above.
        unsafe {
            *values = array;
            *num_values = got.len();
        }
        Ok(())
    })
}

fn keywords_of(r: &Request) -> String {
    if r.params.is_empty() {
        return "nothing".into();
    }
    r.params
        .iter()
        .map(|p| p.keyword.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A malloc'd array of malloc'd C strings (for the caller to `free()`).
fn malloc_strings(items: &[String]) -> FfiResult<*mut *mut c_char> {
    let oom = || Failure::input("out of memory");
    // SAFETY: plain allocation; at least one byte so that NULL means failure only.
    let array = unsafe { libc::malloc(items.len().max(1) * size_of::<*mut c_char>()) }
        .cast::<*mut c_char>();
    if array.is_null() {
        return Err(oom());
    }
    for (i, s) in items.iter().enumerate() {
        let c = c_string(s);
        let bytes = c.as_bytes_with_nul();
        // SAFETY: allocation of `bytes.len()` bytes, filled in full below.
        let p = unsafe { libc::malloc(bytes.len()) }.cast::<c_char>();
        if p.is_null() {
            for j in 0..i {
                // SAFETY: the strings allocated so far, and the array.
                unsafe { libc::free((*array.add(j)).cast()) };
            }
            // SAFETY: allocated above.
            unsafe { libc::free(array.cast()) };
            return Err(oom());
        }
        // SAFETY: `p` has room for `bytes`; `array` for `items.len()` pointers.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), p, bytes.len());
            *array.add(i) = p;
        }
    }
    Ok(array)
}

/// Expands `req` in place as MARS does: ranges (`0/to/24/by/6`) become their values,
/// abbreviations and values take their canonical form (`expver=1` → `0001`, `time=12` →
/// `1200`, `param=t` → `130`) with haar's built-in schema; unknown keywords and bad values
/// are errors.
///
/// # Safety
/// `req` is null or made by `fdb_new_request`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_expand_request(req: *mut fdb_request_t) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let mut r = unsafe { object::live(req)? };
        let opts = StoreOptions::default();
        let resolved = r
            .request
            .resolve(&opts.schema, &opts.context)
            .map_err(|e| Failure::input(format!("request {}: {e}", r.request)))?;
        r.request = resolved;
        Ok(())
    })
}

/// Deletes a request made by `fdb_new_request`.
///
/// # Safety
/// `req` is null or made by `fdb_new_request`, and not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_delete_request(req: *mut fdb_request_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { object::free(req) })
}

/// Creates an empty split key in `*key`, to be filled by `fdb_listiterator_splitkey`; delete
/// it with `fdb_delete_splitkey`.
///
/// # Safety
/// `key` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_new_splitkey(key: *mut *mut fdb_split_key_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { put(key, object::new(SplitKeyObj::default())?, "key") })
}

/// Hands out the next keyword, value and level (0: database, 1: index, 2: datum) of a split
/// key; `FDB_ITERATION_COMPLETE` after the last. The strings live until the split key is
/// filled again or deleted. `level` may be NULL.
///
/// # Safety
/// `it` is null or made by `fdb_new_splitkey`; `key` and `value` are null or valid for a
/// write; `level` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_splitkey_next_metadata(
    it: *mut fdb_split_key_t,
    key: *mut *const c_char,
    value: *mut *const c_char,
    level: *mut usize,
) -> c_int {
    call(|| {
        // SAFETY: per the caller's contract.
        let s = &mut *unsafe { object::live(it)? };
        if key.is_null() || value.is_null() {
            return Err(Failure::input(
                "key or value is NULL: pass where to store the result",
            ));
        }
        if !s.filled {
            return Err(Failure::input(
                "the split key is empty: fill it with fdb_listiterator_splitkey first",
            ));
        }
        let Some((k, v, l)) = s.pairs.get(s.next) else {
            return Ok(FDB_ITERATION_COMPLETE);
        };
        s.next += 1;
        // SAFETY: checked non-null above; `level` is null or valid.
        unsafe {
            *key = k.as_ptr();
            *value = v.as_ptr();
            if !level.is_null() {
                *level = *l;
            }
        }
        Ok(FDB_SUCCESS)
    })
}

/// Deletes a split key made by `fdb_new_splitkey`.
///
/// # Safety
/// `key` is null or made by `fdb_new_splitkey`, and not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_delete_splitkey(key: *mut fdb_split_key_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { object::free(key) })
}
