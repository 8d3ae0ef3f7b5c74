//! Pure logic of the haar field store: keys, value normalisation, the MARS request language and
//! the FDB5 schema rule language.
//!
//! This crate performs no I/O of its own (the parameter table is built from text handed to it),
//! so property tests and fuzzers reach all of it directly. The single exception is
//! [`param::load_default`], a thin helper that reads ecCodes' definition files.
//!
//! ```
//! use haar_core::{Context, Key, Request, Schema};
//!
//! let ctx = Context::at(2024, 3, 1);
//! let schema = Schema::builtin();
//!
//! // Archive: a field's MARS keys split into database / index / datum keys.
//! let field = Key::parse(
//!     "class=od,expver=1,stream=oper,date=20240229,time=12,domain=g,\
//!      type=fc,levtype=pl,step=6,levelist=500.0,param=130",
//! )?;
//! let split = schema.split(&field, &ctx)?;
//! assert_eq!(split.datum.to_string(), "step=6,levelist=500,param=130");
//!
//! // Retrieve: a request resolves to the same canonical values.
//! let request = Request::parse("retrieve,class=od,expver=1,date=-1,time=1200,step=0/to/12/by/6,levelist=500,param=130.128")?
//!     .resolve(schema, &ctx)?;
//! assert_eq!(request.count(), 3);
//! assert!(request.matches(&split.full()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod key;
pub mod param;
pub mod rendezvous;
pub mod request;
pub mod schema;
mod text;
pub mod value;

pub use key::{Key, KeyParseError};
pub use param::ParamTable;
pub use request::{Param, Request, RequestError, Values, parse_requests};
pub use schema::{Schema, SchemaError, SplitKey, Splitter};
pub use value::{Context, ValueError, ValueType};
