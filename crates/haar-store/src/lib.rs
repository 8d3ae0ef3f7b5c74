//! Storage layer of haar: the [`Store`] API over one small [`Backend`] trait.
//!
//! Backends: [`PosixBackend`] (directories of append-only files), [`PmemBackend`] (a pool file
//! mapped into memory) and [`MemoryBackend`] (tests). Byte layouts and the durability contract
//! are in `docs/design.md`.

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod backend;
mod catalogue;
pub mod config;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod dist;
pub mod error;
#[cfg(feature = "testing")]
pub mod fault;
pub mod format;
pub mod frontend;
pub mod memory;
pub mod perm;
pub mod pmem;
pub mod posix;
mod report;
pub mod reserve;
pub mod store;
mod sys;

pub use backend::{
    Backend, Capabilities, Committed, DbReader, DbWriter, Exclusive, FieldBytes, LendBytes,
};
pub use catalogue::{MergeOutcome, MergePolicy, merge};
pub use config::{BackendKind, Config, FrontendConfig, Route};
pub use error::{Class, Error, LaneFailures, Reason, Result};
pub use frontend::{Event, FieldStore, FieldStoreExt, Sink};
pub use memory::MemoryBackend;
pub use pmem::PmemBackend;
pub use posix::{FsyncPolicy, PosixBackend};
pub use store::{
    Checkpoint, DbStats, Field, PurgeReport, RetrieveReport, Store, StoreOptions, WipeReport,
};
