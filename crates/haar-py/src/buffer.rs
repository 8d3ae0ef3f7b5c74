//! `haar._haar.Buffer`: retrieved bytes, owned or lent by the store, which `haar.DataHandle`
//! exports through the buffer protocol (the protocol's slot is [`crate::exporter`]'s).

use haar::FieldBytes;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Retrieved bytes: owned, or lent by the store (pmem: the pool mapping, kept mapped by this
/// object). Read-only; exposed through the buffer protocol by `haar.DataHandle`.
#[pyclass(frozen, module = "haar._haar")]
pub struct Buffer {
    pub(crate) bytes: FieldBytes,
}

#[pymethods]
impl Buffer {
    fn __len__(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the bytes are lent by the store (no copy was made).
    #[getter]
    fn lent(&self) -> bool {
        matches!(self.bytes, FieldBytes::Lent { .. })
    }

    /// `(self, address, length)`: what the buffer protocol exports.
    fn buffer_info(slf: &Bound<'_, Self>) -> (Py<Buffer>, usize, usize) {
        let b = &slf.get().bytes;
        (slf.clone().unbind(), b.as_ptr() as usize, b.len())
    }

    /// A copy of `start..end` (clamped) as `bytes`.
    fn slice<'py>(&self, py: Python<'py>, start: usize, end: usize) -> Bound<'py, PyBytes> {
        let end = end.min(self.bytes.len());
        let start = start.min(end);
        PyBytes::new(py, &self.bytes[start..end])
    }
}
