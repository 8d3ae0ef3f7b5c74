//! haar's C faces, one shared library with two APIs over the `haar` library:
//!
//! - [`haar_api`]: `libhaar`, haar's own C ABI (`include/haar.h`, generated from this crate):
//!   opaque handles, an error code from every call and a thread-local message
//!   (`haar_last_error()`).
//! - [`fdb_api`]: FDB5's public C API (`fdb5/api/fdb_c.h`, FDB5 5.25) so that a program
//!   written for FDB5 links against haar's `libfdb5.so` unchanged.
//!
//! Both are thin: every store is opened by `haar::open`, GRIB is keyed by `haar::ingest`, and
//! no panic crosses the boundary ([`ffi::guard`]).

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod fdb_api;
pub mod ffi;
pub mod haar_api;
pub mod table;
