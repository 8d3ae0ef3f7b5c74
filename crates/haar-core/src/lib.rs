//! Pure logic of the haar field store: keys, value normalisation, the MARS request language and
//! the FDB5 schema rule language.
//!
//! This crate performs no I/O of its own (the parameter table is built from text handed to it),
//! so property tests and fuzzers reach all of it directly. The single exception is
//! [`param::load_default`], a thin helper that reads ecCodes' definition files.

pub mod key;
pub mod param;
pub mod request;
pub mod schema;
mod text;
pub mod value;

pub use key::{Key, KeyParseError};
pub use param::ParamTable;
pub use request::{Param, Request, RequestError, Values, parse_requests};
pub use schema::{Schema, SchemaError, SplitKey};
pub use value::{Context, ValueError, ValueType};
