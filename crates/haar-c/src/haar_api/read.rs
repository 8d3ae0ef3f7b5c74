//! `haar_retrieve` and the reader it returns: read/seek/tell/size over the bytes of the
//! fields of a request, and a zero-copy view of them where the backend lends them (pmem: one
//! field's bytes in the pool mapping, through `FieldStore::retrieve_lent`).
//!
//! Semantics stricter than FDB5's: a request naming any field that is not flushed fails with
//! `HAAR_ERR_MISSING` and a message naming the missing keys, instead of an empty stream.

use std::ffi::{c_char, c_int, c_void};

use haar::request::Request;
use haar::{FieldBytes, FieldStore};

use super::handles::{self, Shell, impl_handle};
use super::store::haar_t;
use super::{HAAR_OK, out, put, requests_arg, run};
use crate::ffi::{Failure, FfiResult};

/// The retrieved bytes and the read position.
pub struct Reader {
    bytes: FieldBytes,
    pos: usize,
}

/// The bytes a retrieve returned, with a read position. Opaque; one thread at a time.
#[allow(non_camel_case_types)]
pub struct haar_reader_t(Shell<Reader>);
impl_handle!(haar_reader_t, Reader, 0x03);

/// Every field of `reqs`, concatenated in request order; missing fields are an error naming
/// them (`haar::read` decides what is missing and when bytes are lent).
fn retrieve_all(store: &dyn FieldStore, reqs: &[Request]) -> FfiResult<FieldBytes> {
    let (bytes, missing) = haar::read::retrieve_all(store, reqs)?;
    if !missing.is_empty() {
        let asked: Vec<String> = reqs.iter().map(Request::to_string).collect();
        return Err(Failure::missing(format!(
            "retrieve {}: {missing}; check the request with haar_list",
            asked.join(" / ")
        )));
    }
    Ok(bytes)
}

/// Retrieves every field `request` names (`k=v/v,k=v`, a MARS request, or `@FILE`),
/// concatenated in request order, and writes a reader over the bytes to `*reader` (NULL on
/// failure); free it with `haar_reader_free`. The reader stays valid after `haar_close(h)`.
///
/// For a single complete key on a store that lends bytes (pmem), the reader holds the bytes
/// in place, without a copy (`haar_reader_view` says so); otherwise they are copied into it.
///
/// Errors: `HAAR_ERR_MISSING` (some named field is not flushed: the message names the keys;
/// nothing is returned), `HAAR_ERR_INPUT` (bad handle or request, NULL request),
/// `HAAR_ERR_STORAGE`.
///
/// # Safety
/// `h` is a live handle; `request` is NUL-terminated; `reader` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_retrieve(
    h: *mut haar_t,
    request: *const c_char,
    reader: *mut *mut haar_reader_t,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let slot = unsafe { out(reader, "reader") }?;
        *slot = std::ptr::null_mut();
        let opened = unsafe { handles::get(h, "h") }?;
        if request.is_null() {
            return Err(Failure::input(
                "request is NULL: name the fields to retrieve (e.g. \"param=167,step=0\")",
            ));
        }
        let reqs = unsafe { requests_arg(request) }?;
        let bytes = {
            let store = opened.lock()?;
            retrieve_all(&**store, &reqs)?
        };
        *slot = handles::alloc::<haar_reader_t>(Reader { bytes, pos: 0 })?;
        Ok(HAAR_OK)
    })
}

/// Copies up to `len` bytes from the read position into `buf` and advances it; `*nread`
/// receives the number copied (0 at the end of the data).
///
/// # Safety
/// `reader` is a live reader used by this thread only; `buf` is valid for writes of `len`
/// bytes; `nread` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_reader_read(
    reader: *mut haar_reader_t,
    buf: *mut c_void,
    len: usize,
    nread: *mut usize,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let r = &mut *unsafe { handles::get_mut(reader, "reader") }?;
        let n_out = unsafe { out(nread, "nread") }?;
        *n_out = 0;
        if len == 0 {
            return Ok(HAAR_OK);
        }
        if buf.is_null() {
            return Err(Failure::input("buf is NULL: pass where to copy the bytes"));
        }
        let data: &[u8] = &r.bytes;
        let n = len.min(data.len() - r.pos);
        // SAFETY: `buf` holds `len >= n` bytes per the caller's contract; ranges are disjoint.
        unsafe { std::ptr::copy_nonoverlapping(data[r.pos..].as_ptr(), buf.cast::<u8>(), n) };
        r.pos += n;
        *n_out = n;
        Ok(HAAR_OK)
    })
}

/// Moves the read position to byte `offset` from the start (at most the size).
///
/// Errors: `HAAR_ERR_INPUT` (bad handle, `offset` beyond the end).
///
/// # Safety
/// `reader` is a live reader used by this thread only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_reader_seek(reader: *mut haar_reader_t, offset: u64) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let r = &mut *unsafe { handles::get_mut(reader, "reader") }?;
        let size = r.bytes.len();
        match usize::try_from(offset) {
            Ok(o) if o <= size => {
                r.pos = o;
                Ok(HAAR_OK)
            }
            _ => Err(Failure::input(format!(
                "seek to {offset} beyond the end of {size} bytes"
            ))),
        }
    })
}

/// The read position, in bytes from the start.
///
/// # Safety
/// `reader` is a live reader; `offset` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_reader_tell(reader: *mut haar_reader_t, offset: *mut u64) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let r = &mut *unsafe { handles::get_mut(reader, "reader") }?;
        *unsafe { out(offset, "offset") }? = r.pos as u64;
        Ok(HAAR_OK)
    })
}

/// The number of bytes retrieved.
///
/// # Safety
/// `reader` is a live reader; `size` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_reader_size(reader: *mut haar_reader_t, size: *mut u64) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let r = &mut *unsafe { handles::get_mut(reader, "reader") }?;
        *unsafe { out(size, "size") }? = r.bytes.len() as u64;
        Ok(HAAR_OK)
    })
}

/// All the retrieved bytes without a copy: `*data` and `*len` describe them; `*lent`
/// (may be NULL) is 1 when they are the store's own memory (pmem pool mapping, zero-copy),
/// 0 when they are the reader's copy. Valid until `haar_reader_free`; read-only. A field lent
/// by a pmem store must not be wiped and purged while viewed (purge may reuse the space).
///
/// # Safety
/// `reader` is a live reader; `data` and `len` are valid for writes; `lent` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_reader_view(
    reader: *mut haar_reader_t,
    data: *mut *const c_void,
    len: *mut usize,
    lent: *mut c_int,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        let r = &mut *unsafe { handles::get_mut(reader, "reader") }?;
        let d = unsafe { out(data, "data") }?;
        let l = unsafe { out(len, "len") }?;
        let bytes: &[u8] = &r.bytes;
        *d = bytes.as_ptr().cast();
        *l = bytes.len();
        unsafe {
            put(
                lent,
                c_int::from(matches!(r.bytes, FieldBytes::Lent { .. })),
            )
        };
        Ok(HAAR_OK)
    })
}

/// Frees a reader and its bytes. NULL is accepted; a reader already freed gives
/// `HAAR_ERR_INPUT`.
///
/// # Safety
/// `reader` is NULL or a reader from `haar_retrieve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_reader_free(reader: *mut haar_reader_t) -> c_int {
    // SAFETY: per the caller's contract.
    run(|| unsafe { handles::free(reader, "reader") }.map(|()| HAAR_OK))
}
