//! The catalogue of a database (design §3.1): the index that answers which fields a database
//! holds and where, without replaying its whole commit log.
//!
//! From the bottom up, each file importing only those before it:
//! - [`manifest`]: the files of a catalogue directory, their names and locks, and the
//!   manifest's format;
//! - [`state`]: a datum's state and the count of dead fields;
//! - [`overlay`]: the commits after the manifest's position, replayed;
//! - [`run`]: the run file format and reading it;
//! - [`writer`]: writing runs, from an overlay or by merging runs;
//! - [`view`]: the reader-side view of one database ([`Catalogue`]);
//! - [`masked`](mod@masked): the masked copies a listing with duplicates shows;
//! - [`merge`](mod@merge): when and how runs are merged and manifests published.
//!
//! Readers never write; only [`merge()`] does, under the catalogue's merge lock.

pub(crate) mod manifest;
mod masked;
mod merge;
mod overlay;
mod run;
mod state;
mod view;
mod writer;

pub(crate) use masked::masked;
pub use merge::{MergeOutcome, MergePolicy, merge};
pub(crate) use view::{Catalogue, Full};
