//! haar's Python face: the extension module `haar._haar`, which the pure-Python package
//! `haar` (under `python/` in the repository) wraps in pyfdb's shape.
//!
//! Thin by design: stores are opened by [`haar::OpenOptions`], GRIB is keyed by
//! [`haar::ingest`], watch/wait are [`haar::watch`]; this crate only converts between Python
//! and those calls. Every call that touches storage or the network releases the GIL
//! ([`Python::detach`]), and every store handle sits behind a [`Mutex`](std::sync::Mutex) so
//! that one `FDB` object can be shared by threads. No panic crosses into Python as a
//! `PanicException`: every entry point runs under [`catch_unwind`](std::panic::catch_unwind)
//! and a panic becomes `haar.Error`.
//!
//! The exception classes live in Python (`haar/_errors.py`, so that they can subclass both
//! `haar.Error` and the builtin they resemble); this module looks them up when it raises.
//!
//! Zero copy: a retrieve keeps the [`haar::FieldBytes`] that [`haar::read::retrieve_all`]
//! returns inside a [`Buffer`] (lent by the store, pmem's pool mapping, for the requests
//! [`haar::read::lent_one`] lends, as the C faces do), and [`BufferExporter`](exporter) exposes
//! it through the buffer protocol. PyO3 offers `__getbuffer__` under the stable ABI only from Python 3.11,
//! and the wheel is abi3 for 3.10, so that one slot is registered by hand (see [`exporter`]).
//!
//! One module per concern, each imported only downward: `store` (the `Store` class) reads its
//! arguments through `selection`, calls the library through `failure::run`, and answers
//! through `output`, `buffer` and `watch`; `config` reads the configuration argument. This
//! file only declares the module `haar._haar` (and its test-only entry point).

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod exporter;

mod buffer;
mod config;
mod failure;
mod output;
mod selection;
mod store;
mod watch;

pub use buffer::Buffer;
pub use store::Store;
pub use watch::Watcher;

use config::config_json;
#[cfg(feature = "testing")]
use failure::{Outcome, run};
use pyo3::prelude::*;

/// Panics inside the library, as a bug would: lets the tests check that a panic reaches
/// Python as `haar.Error`, never as `PanicException` or an abort. Only in a wheel built with
/// the `testing` feature (`make pytest`).
#[cfg(feature = "testing")]
#[pyfunction]
fn _panic_for_tests(py: Python<'_>) -> PyResult<()> {
    run(py, || -> Outcome<()> {
        panic!("deliberate panic for the tests")
    })
}

/// The extension module.
#[pymodule]
fn _haar(m: &Bound<'_, PyModule>) -> PyResult<()> {
    #[cfg(feature = "testing")]
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    m.add_function(wrap_pyfunction!(config_json, m)?)?;
    m.add_class::<Store>()?;
    m.add_class::<Watcher>()?;
    m.add_class::<Buffer>()?;
    m.add("BufferExporter", exporter::exporter_type(m.py())?)?;
    Ok(())
}
