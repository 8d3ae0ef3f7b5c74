//! What Python receives: keys as dicts (keyword order kept) and `list`'s field tuples.
//!
//! Pure conversions; no call into the library starts here.

use haar::{Field, Key};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A key as a Python dict, keyword order kept.
pub(crate) fn key_dict<'py>(py: Python<'py>, key: &Key) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in key.iter() {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// `list`'s tuples: `(db, index, datum, object, offset, length, path)`.
pub(crate) fn fields_list<'py>(
    py: Python<'py>,
    fields: &[(Field, Option<String>)],
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for (f, path) in fields {
        out.append((
            key_dict(py, &f.db)?,
            key_dict(py, &f.index)?,
            key_dict(py, &f.datum)?,
            f.data.object,
            f.data.offset,
            f.data.length,
            path.as_deref(),
        ))?;
    }
    Ok(out)
}
