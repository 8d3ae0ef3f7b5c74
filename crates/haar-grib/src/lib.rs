//! GRIB in, for haar: split GRIB files into messages (pure Rust) and read each
//! message's MARS keys through ecCodes, exactly as FDB5 does when it archives.
//!
//! - [`frame`]: message framing with no C library — [`messages`] over a buffer,
//!   [`MessageReader`] over any [`std::io::Read`]. Never panics on any input.
//! - [`keys`]: [`mars_keys`] through a hand-written ecCodes FFI, with FDB5's
//!   normalisation rules documented one by one; [`eccodes_version`].
//! - [`jump`]: values at index ranges of a field from its jump record, reading only the
//!   bytes that hold them (simple packing; ecCodes for the rest).
//! - [`synth`]: a reproducible synthetic ensemble generator (GRIB2 made by
//!   ecCodes) for tests and benchmarks.
//!
//! This crate must not know about schemas, stores or the CLI.
//!
//! ```
//! // A file with padding before one (framing-only) message:
//! let mut file = vec![0u8; 16];
//! file.extend(haar_grib::frame::tests_support::minimal_grib1(64));
//! let msgs: Vec<_> = haar_grib::messages(&file).collect::<Result<_, _>>().unwrap();
//! assert_eq!((msgs[0].index, msgs[0].offset, msgs[0].edition), (0, 16, 1));
//! ```

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod frame;
pub mod gaussian;
pub mod grid;
pub mod jump;
pub mod keys;
pub mod synth;

mod ffi;
mod param_cache;

pub use frame::{FrameError, Message, MessageReader, Messages, OwnedMessage, messages};
pub use keys::{KeyError, decode_embedded_request, eccodes_version, mars_keys, mars_keys_uncached};
pub use synth::{EnsembleSpec, Grid, Summary, SynthError, generate};
