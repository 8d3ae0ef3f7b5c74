//! haar's workloads and benchmarks, as a library the `haar` CLI (and any other face) calls:
//!
//! - [`hammer`]: `haar hammer`, FDB5's fdb-hammer done right (N processes write, read or list
//!   members × steps × levels × params fields, verified by checksum).
//! - [`workflow`]: `haar workflow`, the forecast workflow in miniature (SC'19 Table 9):
//!   producers flushing per step, product generation triggered by step completion, on a
//!   shared POSIX directory, on haar servers and on the real FDB5.
//! - [`bench`](mod@bench): `haar bench`, the store's figures beside raw limits and FDB5 measured in the
//!   same run (local, network and GRIB sections).
//! - [`scale`]: `haar bench --scale`, the cost of archive, open, list and retrieve against
//!   the number of fields in one database, beside the real FDB5 in the same run.
//! - [`stage`]: `haar stage bench`, staging (`haar_stage`) against `cp` between the same
//!   directories.
//! - [`fdb5`]: the real FDB5 (its C API, loaded at run time) as one more store.
//!
//! Shared parts: the synthetic field payload ([`field`], docs/design.md §10.2), the key layout
//! ([`layout`]), worker processes ([`procs`], [`worker`]), opening the store under test and
//! learning when fields are flushed ([`target`]), order statistics ([`stats`]), the progress
//! bar ([`progress`]) and the figures ([`plot`]).
//!
//! Stores are opened through [`haar::OpenOptions`]; failures are [`Error`]s, whose kind a face
//! maps onto its exit codes. The workloads run their load as real processes: workers,
//! servers and `haar archive` are the current executable started again
//! (`haar [GLOBALS] workload-worker --spec JSON`, `haar serve`, …), so this library is meant
//! to run inside the `haar` executable.

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod bench;
pub mod cpu;
pub mod error;
pub mod fdb5;
pub mod field;
pub mod hammer;
pub mod layout;
pub mod plot;
pub mod procs;
pub mod progress;
pub mod scale;
pub mod stage;
pub mod stats;
pub mod table8;
pub mod target;
pub mod vcluster;
pub mod worker;
pub mod workflow;

pub use error::{Error, Result};
