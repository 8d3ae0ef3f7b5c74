//! The data reader (`fdb_datareader_t`): the bytes a retrieve found, read with FDB5's
//! open / read / seek / skip / tell / size / close.
//!
//! Owns the read position over bytes it holds (owned, or lent by the store without a copy);
//! retrieving them is `handle`'s.

use std::ffi::{c_int, c_long, c_void};

use haar::backend::FieldBytes;

use super::object::{self, Obj, kind};
use super::{call_ok, put};
use crate::ffi::{Failure, FfiResult};

/// A data reader (`fdb_datareader_t`).
#[derive(Default)]
pub struct ReaderObj {
    data: Option<FieldBytes>,
    pos: usize,
    open: bool,
}
kind!(ReaderObj, 0x11, "fdb_datareader_t", "fdb_new_datareader");

/// FDB5's `fdb_datareader_t`.
pub type fdb_datareader_t = Obj<ReaderObj>;

impl ReaderObj {
    /// Holds `data` (what `fdb_retrieve` found), closed, at position 0.
    pub fn set(&mut self, data: FieldBytes) {
        self.data = Some(data);
        self.pos = 0;
        self.open = false;
    }

    fn bytes(&self) -> FfiResult<&[u8]> {
        self.data.as_deref().ok_or_else(|| {
            Failure::input("the data reader holds nothing: pass it to fdb_retrieve first")
        })
    }

    fn opened(&self) -> FfiResult<&[u8]> {
        let b = self.bytes()?;
        if !self.open {
            return Err(Failure::input(
                "the data reader is not open: call fdb_datareader_open first",
            ));
        }
        Ok(b)
    }

    fn move_to(&mut self, pos: i128) -> FfiResult<()> {
        let len = self.opened()?.len();
        if pos < 0 || pos > len as i128 {
            return Err(Failure::input(format!(
                "position {pos} is outside the data (0 to {len} bytes)"
            )));
        }
        self.pos = pos as usize;
        Ok(())
    }
}

fn long(n: usize) -> c_long {
    c_long::try_from(n).unwrap_or(c_long::MAX)
}

/// Creates an empty data reader in `*dr`, for `fdb_retrieve`; delete it with
/// `fdb_delete_datareader`.
///
/// # Safety
/// `dr` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_new_datareader(dr: *mut *mut fdb_datareader_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { put(dr, object::new(ReaderObj::default())?, "dr") })
}

/// Opens the reader at position 0 and stores the size of its data in `*size` (may be NULL).
///
/// # Safety
/// `dr` is null or a live data reader; `size` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_datareader_open(
    dr: *mut fdb_datareader_t,
    size: *mut c_long,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let mut r = unsafe { object::live(dr)? };
        let len = r.bytes()?.len();
        r.open = true;
        r.pos = 0;
        if !size.is_null() {
            // SAFETY: non-null and valid per the caller's contract.
            unsafe { *size = long(len) };
        }
        Ok(())
    })
}

/// Closes the reader (it may be opened again).
///
/// # Safety
/// `dr` is null or a live data reader.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_datareader_close(dr: *mut fdb_datareader_t) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let mut r = unsafe { object::live(dr)? };
        r.bytes()?;
        r.open = false;
        Ok(())
    })
}

/// Stores the read position (bytes from the start) in `*pos`.
///
/// # Safety
/// `dr` is null or a live data reader; `pos` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_datareader_tell(dr: *mut fdb_datareader_t, pos: *mut c_long) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let r = unsafe { object::live(dr)? };
        r.opened()?;
        // SAFETY: per the caller's contract.
        unsafe { put(pos, long(r.pos), "pos") }
    })
}

/// Moves the read position to `pos` bytes from the start (0 to the size).
///
/// # Safety
/// `dr` is null or a live data reader.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_datareader_seek(dr: *mut fdb_datareader_t, pos: c_long) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let mut r = unsafe { object::live(dr)? };
        r.move_to(i128::from(pos))
    })
}

/// Moves the read position `count` bytes on (back, if negative), staying within the data.
///
/// # Safety
/// `dr` is null or a live data reader.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_datareader_skip(dr: *mut fdb_datareader_t, count: c_long) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let mut r = unsafe { object::live(dr)? };
        let to = r.pos as i128 + i128::from(count);
        r.move_to(to)
    })
}

/// Stores the size of the reader's data in bytes in `*size`.
///
/// # Safety
/// `dr` is null or a live data reader; `size` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_datareader_size(
    dr: *mut fdb_datareader_t,
    size: *mut c_long,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let r = unsafe { object::live(dr)? };
        let len = r.bytes()?.len();
        // SAFETY: per the caller's contract.
        unsafe { put(size, long(len), "size") }
    })
}

/// Copies up to `count` bytes from the read position into `buf`, stores how many in `*read`
/// (0 at the end of the data) and moves the position on.
///
/// # Safety
/// `dr` is null or a live data reader; `buf` is null or valid for `count` bytes; `read` is
/// null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_datareader_read(
    dr: *mut fdb_datareader_t,
    buf: *mut c_void,
    count: c_long,
    read: *mut c_long,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let mut r = unsafe { object::live(dr)? };
        if buf.is_null() || read.is_null() {
            return Err(Failure::input(
                "buf or read is NULL: pass a buffer and where to store the count",
            ));
        }
        let count = usize::try_from(count)
            .map_err(|_| Failure::input(format!("count is {count}: pass 0 or more")))?;
        let data = r.opened()?;
        let n = count.min(data.len() - r.pos);
        // SAFETY: `buf` holds `count >= n` bytes per the caller's contract; the source is
        // within `data`.
        unsafe {
            std::ptr::copy_nonoverlapping(data[r.pos..].as_ptr(), buf.cast::<u8>(), n);
            *read = long(n);
        }
        r.pos += n;
        Ok(())
    })
}

/// Deletes a data reader and the data it holds.
///
/// # Safety
/// `dr` is null or a live data reader, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_delete_datareader(dr: *mut fdb_datareader_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { object::free(dr) })
}
