//! haar as a library: the product every face (the `haar` CLI, `haar serve`, the C library, the
//! Python package, the FUSE mount, the staging service) is a thin layer over.
//!
//! - [`open`]: one configuration (a file, a YAML string or the defaults, plus overrides) opens
//!   any store — a local [`Store`], one remote server, `dist` over several, `select` by key
//!   pattern — as a [`FieldStore`].
//! - [`ingest`]: GRIB files, buffers and streams archived into any [`FieldStore`], keyed in
//!   parallel, an input with a fault archiving nothing.
//! - [`serve`]: the local store served to the network, with tokens, TLS and the same-host
//!   offer.
//! - [`watch`]: flush events and the "step complete" wait, from servers or a local store.
//! - [`import`]: an FDB5 database imported into any [`FieldStore`] through FDB5's C API,
//!   every field verified.
//! - [`extract`]: values of every field of a request at index ranges or points, reading only
//!   the bytes that hold them where the store can (design §16).
//! - [`fdb5`]: the real FDB5 through its C API, loaded at run time (so haar builds and runs
//!   without it), as a [`FieldStore`] and a lister of whole databases.
//!
//! Every operation goes through [`FieldStore`], whose contract is written on each method in
//! `haar_store::frontend`. Byte layouts and the durability contract are in `docs/design.md`.
//!
//! ```
//! use haar::{OpenOptions, ConfigSource};
//! use haar_core::{Key, request::Request};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let opts = OpenOptions {
//!     config: ConfigSource::Yaml { text: "backend: posix\n".into(), origin: "example".into() },
//!     root: Some(dir.path().into()),
//!     ..OpenOptions::default()
//! };
//! let mut store = opts.field_store().unwrap();
//! let key = Key::parse("class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,\
//!                       type=fc,levtype=sfc,step=0,param=167").unwrap();
//! store.archive(&key, b"GRIB...7777").unwrap();
//! store.flush().unwrap();
//! assert_eq!(store.list(&Request::parse("param=167").unwrap()).unwrap().len(), 1);
//! ```

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod extract;
pub mod fdb5;
pub mod import;
pub mod ingest;
pub mod open;
pub mod read;
pub mod serve;
pub mod watch;

pub use haar_store::frontend::FieldStoreExt;
pub use haar_store::{
    Config, Error, Field, FieldStore, Result, RetrieveReport, Store, StoreOptions,
};

// The store's whole vocabulary, so that a face (CLI, C, Python, FUSE, staging) depends on
// `haar` alone and never reaches past it (issue 28, move 5; docs/design.md §1).
pub use haar_core::{Key, Request, request, schema};
pub use haar_net::{ClientConfig, ServerLimits, WaitOutcome, WatchAll, metrics, protocol, wait};
pub use haar_persist::crc::{crc32c, crc32c_append, crc32c_combine};
pub use haar_store::{
    Backend, Checkpoint, Class, DbStats, FieldBytes, MemoryBackend, MergeOutcome, PurgeReport,
    Sink, WipeReport, backend, dist, error, format, frontend,
};
pub use open::{ConfigSource, OpenOptions};
