//! STREAM: the four kernels of McCalpin's benchmark with its rules, on pinned threads or one
//! process per core, with arrays in ordinary memory or in a memory-mapped file that is
//! persisted after every kernel (EPCC's App Direct STREAM).
//!
//! Rules kept from the reference `stream.c` (version 5.10):
//! * kernels, in this order per iteration: copy `c = a`, scale `b = s*c`, add `c = a + b`,
//!   triad `a = b + s*c`, with `s = 3.0`, on `f64`;
//! * arrays initialised to `a = 1, b = 2, c = 0`, then `a = 2a` once (the timer test);
//! * `ntimes` iterations (default 10), the first not counted; min, average and max time per
//!   kernel; best rate = bytes / min time;
//! * bytes counted as 2 words per element for copy and scale, 3 for add and triad (no
//!   write-allocate traffic);
//! * results validated against the same recurrence run on scalars, with relative average
//!   error below 1e-13.
//!
//! Added: median and worst rates (EPCC reports min / median / max), the persist step of the
//! App Direct variant (inside the timed region, as in EPCC's code), and optional inner
//! repetitions for the array-size sweep (idempotent kernels, so validation still holds).
//!
//! This module owns the kernels, their timing and validation, and the array placement. It
//! prints nothing; the CLI formats the [`Report`].
//!
//! One submodule per concern, everything public re-exported here:
//! * `kernels`: the four loops, the values they must produce and stream.c's verdict;
//! * `config`: what to run (size, workers, placement, persist step) and the checks made
//!   before anything is allocated;
//! * `arrays`: the three arrays, in anonymous memory or in a mapped file persisted through
//!   haar-persist;
//! * `runner`: the workers (pinned threads or forked processes), their barrier and timing;
//! * `report`: per-kernel statistics and the [`Report`];
//! * `sweep`: sizes and repetitions of the array-size sweep.

mod arrays;
mod config;
mod kernels;
mod report;
mod runner;
mod sweep;

pub use config::{Config, Persist, Placement, StreamError, Workers, preflight};
pub use kernels::{EPSILON, Kernel, SCALAR, error_sums, expected_values, verdict};
pub use report::{KernelResult, PlacementReport, Report, capitalise, summarise};
pub use runner::run;
pub use sweep::{Sweep, default_sweep_max, run_sweep, sweep_reps, sweep_sizes};
