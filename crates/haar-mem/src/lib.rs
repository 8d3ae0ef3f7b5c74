//! Memory tools of haar, from the NEXTGenIO papers: how fast is this machine's memory in each
//! placement (STREAM, and EPCC's App Direct STREAM that maps its arrays from a file and
//! persists them), and which persistent-memory configuration suits an application (the two
//! decision trees of the JCST usage-scenarios paper).
//!
//! * [`advise`]: the decision trees as data, pure (answers in, advice out).
//! * [`stream`]: the STREAM kernels, their timing and validation, array placement.
//! * [`machine`]: reading caches, memory, devices and mounts from `/sys` and `/proc`.
//! * [`plot`]: the sweep's PNG plot.
//! * [`cleanup`]: temporary files removed on exit and on Ctrl-C.
//! * [`units`]: byte sizes (`64KiB`, sysfs's `36608K`), parsed once for every tool.
//!
//! ```
//! use haar_mem::advise::{advise, table3};
//!
//! let fdb5 = table3().into_iter().find(|c| c.application == "FDB5").unwrap();
//! let advice = advise(&fdb5.answers).unwrap();
//! assert_eq!(advice.configuration, "AppDirect (PMDK)");
//! ```

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod advise;
pub mod cleanup;
pub mod machine;
pub mod plot;
pub mod stream;
mod text;
pub mod units;
