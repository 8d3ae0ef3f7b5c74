//! How a call into the library ends when it fails: [`Failure`], the [`raise`] that turns it into
//! the `haar._errors` exception of its class, and [`run`], the one way every entry point calls
//! the library (without the GIL, a panic caught and raised as `haar.Error`).
//!
//! The exception classes themselves are Python's (`haar/_errors.py`); this module only looks
//! them up.

use std::panic::{AssertUnwindSafe, catch_unwind};

use haar::Error;
use haar::Key;
use haar::error::Class;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::output::key_dict;

/// What a call into the library can end in, before it becomes a Python exception.
pub(crate) enum Failure {
    /// An error of the library, classed by [`Error::class`].
    Haar(Error),
    /// A wait that timed out: the message and the keys still missing.
    Timeout(String, Vec<Key>),
    /// Selected fields that are not stored: the message names them.
    Missing(String),
    /// A panic inside the library (a bug): the store handle may be unusable.
    Panic(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Haar(e)
    }
}

pub(crate) type Outcome<T> = std::result::Result<T, Failure>;

/// Builds the `haar._errors` exception for `f`.
pub(crate) fn raise(py: Python<'_>, f: Failure) -> PyErr {
    let (class, message, missing) = match f {
        Failure::Haar(e) => {
            let class = match e.class() {
                Class::Input => "BadRequestError",
                Class::Missing => "MissingError",
                Class::Storage => "StorageError",
                _ => "Error",
            };
            (class, e.to_string(), None)
        }
        Failure::Timeout(m, keys) => ("TimeoutError", m, Some(keys)),
        Failure::Missing(m) => ("MissingError", m, None),
        Failure::Panic(m) => (
            "Error",
            format!("internal error in haar (a bug): {m}"),
            None,
        ),
    };
    let made = (|| -> PyResult<PyErr> {
        let errors = py.import("haar._errors")?;
        let exc = errors.getattr(class)?.call1((message.clone(),))?;
        if let Some(keys) = missing {
            let list = PyList::empty(py);
            for k in &keys {
                list.append(key_dict(py, k)?)?;
            }
            exc.setattr("missing", list)?;
        }
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|e| e)
}

/// Runs `f` without the GIL, turning a panic into [`Failure::Panic`] and any failure into
/// the matching `haar` exception.
pub(crate) fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> Outcome<T> + Send) -> PyResult<T> {
    let out = py.detach(|| match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(Failure::Panic(panic_text(&p))),
    });
    out.map_err(|f| raise(py, f))
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}
