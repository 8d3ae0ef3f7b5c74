//! The store a workload worker writes to and reads from, and how it learns that fields are
//! flushed. Every store is a `dyn FieldStore`: haar through any front-end (local, remote,
//! dist), opened by [`haar::OpenOptions`], or the real FDB5 ([`crate::fdb5::Fdb5Store`]).
//! Step-complete notifications are a separate small helper, [`Flushes`]: the servers' WATCH
//! (`haar_net::WatchAll`, `haar_net::wait`) for stores that have servers, polling with `list`
//! otherwise.
//!
//! Owns opening and waiting; must not know what a workload reads or writes.

use std::time::{Duration, Instant};

use haar::OpenOptions;
use haar_core::Key;
use haar_core::request::Request;
use haar_store::{FieldStore, StoreOptions};

use crate::error::Error;

/// Keys of flushed fields, as notified.
pub type KeyStream = Box<dyn Iterator<Item = Result<Key, Error>>>;

/// How often a reader without notifications looks again (FDB5 users poll like this).
pub const POLL: Duration = Duration::from_millis(10);

/// Opens the store a worker uses: FDB5 (configured by the environment) or haar through the
/// store `opts` describe; given the bytes it will write, a local pmem pool reserves and maps
/// that much heap for it now rather than as its writes reach it. Returns the store and how to
/// learn of its flushes.
pub fn open(
    opts: &OpenOptions,
    fdb5: bool,
    writes: Option<u64>,
) -> Result<(Box<dyn FieldStore>, Flushes), Error> {
    if fdb5 {
        return Ok((Box::new(crate::fdb5::Fdb5Store::open()?), Flushes::Poll));
    }
    let store = match writes {
        Some(bytes) => opts.field_store_for_writes(bytes)?,
        None => opts.field_store()?,
    };
    let flushes = match opts.server_names()? {
        Some(servers) => Flushes::Servers {
            servers,
            config: opts.client_config()?,
            options: opts.store_options()?,
        },
        None => Flushes::Poll,
    };
    Ok((store, flushes))
}

/// How a reader learns that fields are flushed.
pub enum Flushes {
    /// The servers notify (design §8 WATCH).
    Servers {
        /// Their addresses.
        servers: Vec<String>,
        /// Token and TLS trust.
        config: haar_net::ClientConfig,
        /// Schema and context the requests are resolved with.
        options: StoreOptions,
    },
    /// No notifications: look with `list` every [`POLL`].
    Poll,
}

impl Flushes {
    /// The keys of fields matching `req` as they are flushed (those flushed before first), or
    /// `None` where the store cannot notify.
    pub fn watch(&self, req: &Request) -> Result<Option<KeyStream>, Error> {
        let Flushes::Servers {
            servers, config, ..
        } = self
        else {
            return Ok(None);
        };
        let w = haar_net::WatchAll::open(servers, config, req)?;
        Ok(Some(Box::new(
            w.map(|e| e.map(|(ev, _)| ev.key).map_err(Error::from)),
        )))
    }

    /// Returns once all `expected` fields of `req` are flushed in `store`: a notification
    /// where the store has servers, polling otherwise. Returns the polls it took (0 for a
    /// notification).
    pub fn wait(
        &self,
        store: &dyn FieldStore,
        req: &Request,
        expected: usize,
        timeout: Duration,
    ) -> Result<u64, Error> {
        let Flushes::Servers {
            servers,
            config,
            options,
        } = self
        else {
            return poll_until_flushed(store, req, expected, timeout);
        };
        match haar_net::wait(servers, config, req, options, timeout)? {
            haar_net::WaitOutcome::Complete { .. } => Ok(0),
            haar_net::WaitOutcome::TimedOut { missing } => Err(Error::Missing(format!(
                "{} field(s) of {req} not flushed after {} s, e.g. {}",
                missing.len(),
                timeout.as_secs(),
                missing.first().map(|k| k.to_string()).unwrap_or_default()
            ))),
        }
    }
}

/// Lists `req` in `store` until it holds `expected` fields; returns the polls taken.
pub fn poll_until_flushed(
    store: &dyn FieldStore,
    req: &Request,
    expected: usize,
    timeout: Duration,
) -> Result<u64, Error> {
    let deadline = Instant::now() + timeout;
    let mut polls = 0;
    loop {
        polls += 1;
        let n = store.list(req)?.len();
        if n == expected {
            return Ok(polls);
        }
        if Instant::now() > deadline {
            return Err(Error::Missing(format!(
                "{}: only {n} of {expected} fields of {req} flushed after {} s",
                store.describe(),
                timeout.as_secs()
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// Retrieves `keys` from `store` in one batch, handing each field found to `f` (an error
/// from `f` stops the retrieve and is returned); returns how many were found. Damage the
/// store reports is a failure: a benchmark must not count a partial answer.
pub fn retrieve(
    store: &dyn FieldStore,
    keys: &[Key],
    mut f: impl FnMut(&Key, &[u8], Option<u32>) -> Result<(), Error>,
) -> Result<usize, Error> {
    let mut stopped = None;
    let report = store.retrieve_keys(keys, &mut |k, d, crc| {
        f(k, d, crc).map_err(|e| {
            stopped = Some(e);
            haar_store::Error::Config("stopped by the reader".into())
        })
    });
    if let Some(e) = stopped {
        return Err(e);
    }
    let report = report?;
    if let Some(p) = report.problems.first() {
        return Err(Error::Failed(format!(
            "retrieve from {}: {p}",
            store.describe()
        )));
    }
    Ok(report.found)
}

/// Parses a request the workloads built.
pub fn request(text: &str) -> Result<Request, Error> {
    Request::parse(text).map_err(|e| Error::Usage(format!("request {text:?}: {e}")))
}
