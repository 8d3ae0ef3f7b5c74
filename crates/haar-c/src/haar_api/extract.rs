//! `haar_extract` and its result: the values of each field of a request at half-open index
//! ranges, through `haar::extract` (design §16: simple-packed fields read by range, other
//! packings decoded whole with ecCodes).

use std::ffi::{CString, c_char, c_int};

use haar::extract::{Extracted, Selection};

use super::handles::{self, Shell, impl_handle};
use super::store::haar_t;
use super::{HAAR_OK, out, put, requests_arg, run};
use crate::ffi::Failure;

/// One extraction: per field, its key as text, its values (every range's, in range order)
/// and its method.
pub struct Extraction {
    fields: Vec<(CString, Extracted, Vec<f64>)>,
}

/// The values `haar_extract` found. Opaque; one thread at a time.
#[allow(non_camel_case_types)]
pub struct haar_extract_t(Shell<Extraction>);
impl_handle!(haar_extract_t, Extraction, 0x06);

/// Extracts from every stored field of `request` (`k=v/v,k=v`, a MARS request, or `@FILE`)
/// the values at `nranges` half-open ranges of grid indices, `ranges[2k]` to `ranges[2k + 1]`
/// (`[i, j)`, as pygribjump counts), and writes the result to `*result` (NULL on failure);
/// free it with `haar_extract_free`. Fields the request names that are not stored are left
/// out (`haar_extract_count` says how many were found). Simple-packed fields are read by
/// range only; other packings are decoded whole (`haar_extract_field`'s `whole_field`).
///
/// Errors: `HAAR_ERR_INPUT` (bad handle, request or range, a range beyond a field: the message
/// names the field), `HAAR_ERR_STORAGE`.
///
/// # Safety
/// `h` is a live handle; `request` is NUL-terminated; `ranges` holds `2 * nranges` values;
/// `result` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_extract(
    h: *mut haar_t,
    request: *const c_char,
    ranges: *const u64,
    nranges: usize,
    result: *mut *mut haar_extract_t,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let slot = unsafe { out(result, "result") }?;
        *slot = std::ptr::null_mut();
        let opened = unsafe { handles::get(h, "h") }?;
        if request.is_null() {
            return Err(Failure::input(
                "request is NULL: name the fields (e.g. \"param=167,step=0\")",
            ));
        }
        if ranges.is_null() && nranges > 0 {
            return Err(Failure::input("ranges is NULL: pass 2 * nranges indices"));
        }
        let reqs = unsafe { requests_arg(request) }?;
        let flat: &[u64] = if nranges == 0 {
            &[]
        } else {
            // SAFETY: `ranges` holds 2 * nranges values per the caller's contract.
            unsafe { std::slice::from_raw_parts(ranges, 2 * nranges) }
        };
        let sel = Selection::Ranges(flat.chunks(2).map(|p| (p[0], p[1])).collect());
        let mut fields = Vec::new();
        {
            let store = opened.lock()?;
            for req in &reqs {
                for e in haar::extract::extract(&**store, req, &sel)? {
                    let key = CString::new(e.key.to_string())
                        .map_err(|_| Failure::input("a key holds a NUL byte"))?;
                    let flat = e.values.iter().flatten().copied().collect();
                    fields.push((key, e, flat));
                }
            }
        }
        *slot = handles::alloc::<haar_extract_t>(Extraction { fields })?;
        Ok(HAAR_OK)
    })
}

/// The number of fields in an extraction.
///
/// # Safety
/// `result` is a live extraction; `count` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_extract_count(
    result: *mut haar_extract_t,
    count: *mut usize,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let r = unsafe { handles::get(result, "result") }?;
        *unsafe { out(count, "count") }? = r.fields.len();
        Ok(HAAR_OK)
    })
}

/// Field `i` of an extraction: `*key` its full key as text, `*values` and `*nvalues` the
/// values of every range in range order (NaN where the field has no value), `*whole_field`
/// (may be NULL) 1 when its packing is not simple and it was decoded whole with ecCodes. The
/// strings and arrays belong to the extraction: valid until `haar_extract_free`.
///
/// # Safety
/// `result` is a live extraction; `key`, `values` and `nvalues` are valid for writes;
/// `whole_field` is NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_extract_field(
    result: *mut haar_extract_t,
    i: usize,
    key: *mut *const c_char,
    values: *mut *const f64,
    nvalues: *mut usize,
    whole_field: *mut c_int,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let r = unsafe { handles::get(result, "result") }?;
        let (k, e, flat) = r.fields.get(i).ok_or_else(|| {
            Failure::input(format!(
                "field {i} of an extraction of {} fields",
                r.fields.len()
            ))
        })?;
        *unsafe { out(key, "key") }? = k.as_ptr();
        *unsafe { out(values, "values") }? = flat.as_ptr();
        *unsafe { out(nvalues, "nvalues") }? = flat.len();
        unsafe {
            put(
                whole_field,
                c_int::from(e.method == haar::extract::Method::WholeField),
            )
        };
        Ok(HAAR_OK)
    })
}

/// Frees an extraction. NULL is accepted; one already freed gives `HAAR_ERR_INPUT`.
///
/// # Safety
/// `result` is NULL or an extraction from `haar_extract`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_extract_free(result: *mut haar_extract_t) -> c_int {
    // SAFETY: per the caller's contract.
    run(|| unsafe { handles::free(result, "result") }.map(|()| HAAR_OK))
}
