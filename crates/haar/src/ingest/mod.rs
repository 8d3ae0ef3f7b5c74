//! GRIB ingestion: files, buffers and streams of GRIB messages (or raw bytes under a given
//! key) archived into any [`FieldStore`](crate::FieldStore), keyed in parallel through ecCodes.
//!
//! Policy: an input with any fault (not GRIB, a truncated or corrupt message, keys the schema
//! refuses, a file changed while being read) archives nothing and is reported with the message
//! number and byte offset at fault; the other inputs are archived; one flush at the end.
//! Nothing flushed before is ever touched.
//!
//! How, by module:
//! - `input`: an [`Input`]'s bytes. Into a store that can take fields back (its `checkpoint()`
//!   is `Some`) files are memory-mapped, no copy, under a SIGBUS guard (`guarded_map`: a file
//!   truncated meanwhile reads as zeros and is refused afterwards, never a crash); otherwise
//!   they are read into reused buffers and checked once read.
//! - `keying`: inputs are framed in Rust; one key worker per core but one reads the messages' MARS
//!   keys through ecCodes, in input and message order, running ahead into the next inputs.
//! - `pipeline`: the calling thread archives. Into a store with checkpoints it stores an
//!   input's fields in message order as their keys arrive, overlapping the copy with the
//!   keying of the same input, and forgets them (`discard_since`) if a later message fails or
//!   the mapped file changed; into any other store (remote, dist: fields cannot be taken back
//!   once sent) it archives an input only once all of its messages have keys. Inputs are
//!   opened at most a few ahead of the one being archived.
//!
//! This module owns the public types. It must not know how a store keeps bytes or where it
//! is: everything goes through `FieldStore`.
//!
//! ```no_run
//! use haar::ingest::{self, IngestOptions, Input};
//!
//! let mut store = haar::OpenOptions::from_env().field_store()?;
//! let grib: Vec<u8> = std::fs::read("fields.grib")?;
//! let inputs = vec![Input::buffer("fields.grib", &grib[..])];
//! let report = ingest::ingest(&mut *store, inputs, &IngestOptions::default(), &mut |_| {})?;
//! println!("{} field(s), {} failed input(s)", report.fields, report.failed.len());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod guarded_map;
mod input;
mod keying;
mod pipeline;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use haar_core::Key;
use haar_core::request::Request;
use haar_store::FieldStoreExt;

/// A read-only mapping whose truncation under the reader is noticed, not fatal (SIGBUS
/// guard); also what the data mover (`haar_stage`) reads sources through.
pub use guarded_map::GuardedMap;
pub use pipeline::ingest;

/// One input: a file, a buffer of GRIB messages, or a stream of them.
pub enum Input<'a> {
    /// A file: mapped (stores with checkpoints) or read; a pipe or other special file is read
    /// to its end.
    File(PathBuf),
    /// Bytes in memory (what a C caller's `fdb_archive_multiple` or a Python `bytes` hands
    /// over): borrowed for the ingestion, never copied before the store copies them.
    Buffer {
        /// What to call it in reports and messages.
        name: String,
        /// The messages, back to back.
        bytes: Cow<'a, [u8]>,
    },
    /// A stream, read to its end before its messages are keyed.
    Stream {
        /// What to call it in reports and messages.
        name: String,
        /// The stream.
        reader: Box<dyn Read + 'a>,
    },
}

impl<'a> Input<'a> {
    /// A buffer of GRIB messages called `name` in reports.
    pub fn buffer(name: impl Into<String>, bytes: impl Into<Cow<'a, [u8]>>) -> Input<'a> {
        Input::Buffer {
            name: name.into(),
            bytes: bytes.into(),
        }
    }

    /// A stream of GRIB messages called `name` in reports.
    pub fn stream(name: impl Into<String>, reader: impl Read + 'a) -> Input<'a> {
        Input::Stream {
            name: name.into(),
            reader: Box::new(reader),
        }
    }
}

impl From<PathBuf> for Input<'_> {
    fn from(p: PathBuf) -> Self {
        Input::File(p)
    }
}

/// How inputs are keyed, filtered and committed.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Keys set on every field, over the GRIB keys; the whole key of an input that holds no
    /// GRIB (raw bytes, archived as one field). Empty: GRIB keys only, raw inputs refused.
    pub key: Key,
    /// Archive only fields matching this request (resolved with the store's schema).
    pub include: Option<Request>,
    /// Skip fields matching this request.
    pub exclude: Option<Request>,
    /// Key workers; `None`: one per core but the one the archiving thread uses (at least one).
    pub workers: Option<usize>,
    /// Flush once every input is done (the default). Without it the fields become visible
    /// at the caller's flush, and a failed input's fields are still never among them where
    /// the store has checkpoints.
    pub flush: bool,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            key: Key::new(),
            include: None,
            exclude: None,
            workers: None,
            flush: true,
        }
    }
}

/// Where an ingestion is, reported after every field archived and every input finished.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// Fields archived so far, counting those of the input being archived (which go again if
    /// a later message of it fails).
    pub fields: usize,
    /// Input bytes of the inputs archived so far.
    pub bytes: u64,
    /// Input bytes in all, as far as known at the start (a stream counts 0).
    pub total_bytes: u64,
    /// Time since the ingestion started.
    pub elapsed: Duration,
}

/// What an ingestion did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct IngestReport {
    /// Every input archived, in order.
    pub files: Vec<FileReport>,
    /// Every input refused, with why (its name first); nothing of them was archived.
    pub failed: Vec<String>,
    /// Fields archived.
    pub fields: usize,
    /// Bytes of the fields archived.
    pub bytes: u64,
    /// Seconds from the start to the end of the flush.
    pub seconds: f64,
}

/// One input archived.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileReport {
    /// The file's path as given, or the buffer's or stream's name.
    #[serde(rename = "file")]
    pub name: String,
    /// Fields archived.
    pub fields: usize,
    /// Messages left out by the include/exclude filters.
    pub skipped: usize,
    /// Bytes of the fields archived.
    pub bytes: u64,
}

/// Keys one GRIB message through ecCodes with the store's schema, for callers that archive
/// message by message and must name each field (FDB5's store plugin records the key as the
/// field's location): archive it with `store.archive_split(&split, msg, None)`.
///
/// Unlike [`ingest`] there is no framing and there are no key overrides: `msg` must be
/// exactly one message. Errors: [`Error::BadKey`](haar_store::Error::BadKey) when ecCodes
/// cannot read the message or the schema refuses its keys.
pub fn key_message(
    store: &dyn haar_store::FieldStore,
    msg: &[u8],
) -> haar_store::Result<haar_core::schema::SplitKey> {
    let bad = |why: String| haar_store::Error::BadKey {
        key: format!("the GRIB message of {} bytes", msg.len()),
        reason: format!("{why}: pass one whole GRIB message").into(),
    };
    // Exactly one message, from `GRIB` at byte 0 to its `7777` at the end: ecCodes would key
    // the first of several and the field would hold them all.
    let mut frames = haar_grib::messages(msg);
    match (frames.next(), frames.next()) {
        (Some(Ok(m)), None) if m.offset == 0 && m.bytes.len() == msg.len() => {}
        (Some(Err(e)), _) => return Err(bad(e.to_string())),
        (Some(Ok(_)), Some(_)) => return Err(bad("the buffer holds more than one message".into())),
        _ => return Err(bad("the buffer holds bytes outside its message".into())),
    }
    let pairs = haar_grib::mars_keys(msg).map_err(|e| bad(e.to_string()))?;
    let key: Key = pairs.into_iter().collect();
    store.split(&key)
}
