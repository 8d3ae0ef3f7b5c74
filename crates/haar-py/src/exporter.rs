//! `haar._haar.BufferExporter`: a base class whose instances export a read-only buffer, so
//! that `memoryview(handle)` works on the Python `haar.DataHandle` (which subclasses it).
//!
//! Why by hand: PyO3 registers `__getbuffer__` under the stable ABI only when built for
//! Python ≥ 3.11, and the wheel is abi3 for ≥ 3.10. CPython accepts the `Py_bf_getbuffer`
//! type slot in `PyType_FromSpec` since 3.9 (bpo-40724) and the `Py_buffer` layout has not
//! changed since 3.3, so this module declares both itself. It owns nothing but that slot: the
//! bytes and their lifetime are a [`crate::Buffer`].
//!
//! Protocol: `getbuffer` calls `self._buffer_info()`, which returns `(owner, address,
//! length)`; the exported view references `owner` (the `Buffer` that keeps the bytes — pmem:
//! the pool mapping — alive) for as long as any memoryview of it lives, and is read-only.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;

/// CPython's `Py_buffer` (unchanged since 3.3; not in the 3.10 limited API headers).
#[repr(C)]
pub struct RawBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

unsafe extern "C" {
    /// Exported by every CPython 3 (stable ABI from 3.11, present long before).
    fn PyBuffer_FillInfo(
        view: *mut RawBuffer,
        obj: *mut ffi::PyObject,
        buf: *mut c_void,
        len: ffi::Py_ssize_t,
        readonly: c_int,
        flags: c_int,
    ) -> c_int;
}

unsafe extern "C" fn getbuffer(
    slf: *mut ffi::PyObject,
    view: *mut RawBuffer,
    flags: c_int,
) -> c_int {
    // SAFETY: CPython calls a type slot with the GIL held and a valid `slf`.
    let py = unsafe { Python::assume_attached() };
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> PyResult<c_int> {
        let this = unsafe { Bound::from_borrowed_ptr(py, slf) };
        let (owner, addr, len): (Bound<'_, PyAny>, usize, usize) =
            this.call_method0("_buffer_info")?.extract()?;
        let len = ffi::Py_ssize_t::try_from(len)
            .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("buffer too large"))?;
        // SAFETY: `owner` keeps `addr..addr + len` valid while referenced; FillInfo takes a
        // reference to it for the view and refuses writable requests (readonly = 1).
        let rc =
            unsafe { PyBuffer_FillInfo(view, owner.as_ptr(), addr as *mut c_void, len, 1, flags) };
        if rc != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(0)
    }));
    match out {
        Ok(Ok(rc)) => rc,
        Ok(Err(e)) => {
            unsafe { (*view).obj = ptr::null_mut() };
            e.restore(py);
            -1
        }
        Err(_) => {
            unsafe { (*view).obj = ptr::null_mut() };
            pyo3::exceptions::PyRuntimeError::new_err("internal error in haar's buffer export")
                .restore(py);
            -1
        }
    }
}

const DOC: &[u8] =
    b"Base class of objects that export retrieved bytes read-only through the buffer protocol.\0";

/// Creates the `BufferExporter` type.
pub fn exporter_type(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    // CPython copies the slots; the spec and the name must outlive the type (static).
    let mut slots = [
        ffi::PyType_Slot {
            slot: ffi::Py_bf_getbuffer,
            pfunc: getbuffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_doc,
            pfunc: DOC.as_ptr() as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: 0,
            pfunc: ptr::null_mut(),
        },
    ];
    let mut spec = ffi::PyType_Spec {
        name: c"haar._haar.BufferExporter".as_ptr(),
        basicsize: 0,
        itemsize: 0,
        flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_BASETYPE) as _,
        slots: slots.as_mut_ptr(),
    };
    // SAFETY: a valid spec; PyType_FromSpec copies what it keeps except the name, which is a
    // static C string.
    unsafe {
        let t = ffi::PyType_FromSpec(&mut spec);
        Bound::from_owned_ptr_or_err(py, t)
    }
}
