//! haar over the network (design §7–§8): the versioned wire protocol, `haar serve`, and the
//! `remote` front-end with notifications.
//!
//! * [`protocol`] — the frame codec and message bodies (pure; property-tested).
//! * [`auth`] — shared-secret HMAC handshake, tokens.
//! * [`server`] — a thread per connection over a local store; the flush-event log for WATCH.
//! * [`client`] — [`RemoteStore`] (a `haar_store::FieldStore`), [`Watch`], [`wait`].
//! * [`metrics`] — what a server counts, and its `GET /metrics` endpoint (OpenMetrics text).
//!
//! ```no_run
//! use haar_net::{ClientConfig, RemoteStore};
//! use haar_store::FieldStore;
//! use haar_core::{Key, request::Request};
//!
//! let cfg = ClientConfig::from_env().unwrap(); // token from $HAAR_TOKEN
//! let mut remote = RemoteStore::connect("127.0.0.1:7070", &cfg).unwrap();
//! let key = Key::parse("class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,\
//!                       type=fc,levtype=sfc,step=0,param=167").unwrap();
//! remote.archive(&key, b"GRIB...7777").unwrap();
//! remote.flush().unwrap();
//! let fields = remote.list(&Request::parse("class=od,step=0").unwrap()).unwrap();
//! assert_eq!(fields.len(), 1);
//! ```

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod auth;
pub mod client;
pub mod metrics;
pub mod protocol;
pub mod server;
pub mod transport;

pub use client::{ClientConfig, RemoteStore, StepTarget, WaitOutcome, Watch, WatchAll, wait};
pub use server::{Server, ServerConfig, ServerLimits, Stopper, Target, serve};
