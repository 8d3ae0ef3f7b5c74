//! Pure logic of the haar field store: keys, value normalisation, the MARS request language and
//! the FDB5 schema rule language.
//!
//! This crate performs no I/O of its own (the parameter table is built from text handed to it),
//! so property tests and fuzzers reach all of it directly.

pub mod key;

pub use key::{Key, KeyParseError};
