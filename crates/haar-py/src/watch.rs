//! `haar._haar.Watcher`, a stream of flush events for a selection, and the timeout argument
//! that it and `Store.wait` read.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use haar::watch::Watcher as HaarWatcher;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::failure::{Failure, run};
use crate::output::key_dict;

pub(crate) fn duration(seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| PyValueError::new_err(format!("timeout {seconds}: give seconds, >= 0")))
}

/// A stream of flush events for a selection ([`haar::watch::Watcher`]).
#[pyclass(frozen, module = "haar._haar")]
pub struct Watcher {
    pub(crate) inner: Mutex<HaarWatcher>,
}

#[pymethods]
impl Watcher {
    /// The next event as `(key, length, origin)`, waiting at most `timeout` seconds (`None`:
    /// no limit); `None` when the time passes first.
    #[pyo3(signature = (timeout=None))]
    #[allow(clippy::type_complexity)]
    fn next<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<(Bound<'py, PyDict>, u64, String)>> {
        let limit = timeout.map(duration).transpose()?;
        // Waits in slices so that Ctrl-C (a signal checked with the GIL) stops a wait with no
        // limit.
        let slice = Duration::from_millis(200);
        let end = limit.map(|l| Instant::now() + l);
        loop {
            let until = match end {
                Some(e) => e.min(Instant::now() + slice),
                None => Instant::now() + slice,
            };
            let got = run(py, || {
                let mut w = self.inner.lock().map_err(|_| {
                    Failure::Panic("this watcher failed earlier; open a new one".into())
                })?;
                w.next_before(until).transpose().map_err(Failure::from)
            })?;
            if let Some(ev) = got {
                return Ok(Some((key_dict(py, &ev.key)?, ev.length, ev.origin)));
            }
            if end.is_some_and(|e| Instant::now() >= e) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }
}
