//! What a workload worker writes to and reads from: haar through any front-end, or the real
//! FDB5 through its C API, behind the few operations the workloads need.

use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::Request;
use haar_store::{FieldStore, StoreOptions};

use haar::OpenOptions;

use crate::error::Error;

/// Receives retrieved fields; an error stops the retrieve.
pub type FieldSink<'a> = dyn FnMut(&Key, &[u8]) -> Result<(), Error> + 'a;

/// Keys of flushed fields, as notified.
pub type KeyStream = Box<dyn Iterator<Item = Result<Key, Error>>>;

/// The store under test.
pub trait Target {
    /// What it is, for messages.
    fn describe(&self) -> String;
    /// Stores one field (invisible until flush).
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<(), Error>;
    /// The durability and visibility barrier.
    fn flush(&mut self) -> Result<(), Error>;
    /// Delivers the fields `keys` names (`req` is the same set as a MARS request); returns how
    /// many were found.
    fn retrieve(
        &mut self,
        req: &str,
        keys: &[Key],
        sink: &mut FieldSink<'_>,
    ) -> Result<usize, Error>;
    /// How many of `keys` (`req`) are flushed, without reading them.
    fn count(&mut self, req: &str, keys: &[Key]) -> Result<usize, Error>;
    /// A stream of the keys of fields matching `req` as they are flushed (those flushed
    /// before first), or `None` where the store cannot notify.
    fn watch(&mut self, _req: &str) -> Result<Option<KeyStream>, Error> {
        Ok(None)
    }
    /// Returns once every field of `keys` (`req`) is flushed: a notification where the store
    /// has them, polling otherwise. Returns how many polls it took (0 for notifications).
    fn wait(&mut self, req: &str, keys: &[Key], timeout: Duration) -> Result<u64, Error> {
        poll_until_flushed(self, req, keys, timeout)
    }
}

/// Polls [`Target::count`] until every field of `keys` is flushed; returns the polls taken.
pub fn poll_until_flushed<T: Target + ?Sized>(
    t: &mut T,
    req: &str,
    keys: &[Key],
    timeout: Duration,
) -> Result<u64, Error> {
    let deadline = Instant::now() + timeout;
    let mut polls = 0;
    loop {
        polls += 1;
        let n = t.count(req, keys)?;
        if n == keys.len() {
            return Ok(polls);
        }
        if Instant::now() > deadline {
            return Err(Error::Missing(format!(
                "{}: only {n} of {} fields of {req} flushed after {} s",
                t.describe(),
                keys.len(),
                timeout.as_secs()
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// How often a reader without notifications looks again (FDB5 users poll like this).
pub const POLL: Duration = Duration::from_millis(10);

fn parse(req: &str) -> Result<Request, Error> {
    Request::parse(req).map_err(|e| Error::Usage(format!("request {req:?}: {e}")))
}

/// haar through a front-end; `servers` (when the front-end has them) deliver notifications.
pub struct Haar {
    /// The front-end.
    pub store: Box<dyn FieldStore>,
    /// Servers to watch for step completion (none: poll).
    pub servers: Option<(Vec<String>, haar_net::ClientConfig)>,
    /// Schema and context for `wait`.
    pub options: StoreOptions,
}

impl Target for Haar {
    fn describe(&self) -> String {
        self.store.describe()
    }
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<(), Error> {
        Ok(self.store.archive(key, data)?)
    }
    fn flush(&mut self) -> Result<(), Error> {
        Ok(self.store.flush()?)
    }
    fn retrieve(
        &mut self,
        req: &str,
        _keys: &[Key],
        sink: &mut FieldSink<'_>,
    ) -> Result<usize, Error> {
        let mut n = 0;
        let mut failure = None;
        let report = self.store.retrieve(&parse(req)?, &mut |k, d, _| {
            n += 1;
            if let Err(f) = sink(k, d) {
                failure = Some(f);
                return Err(haar_store::Error::Config("stopped by the reader".into()));
            }
            Ok(())
        });
        if let Some(f) = failure {
            return Err(f);
        }
        let report = report?;
        if let Some(p) = report.problems.first() {
            return Err(Error::Failed(format!("retrieve {req}: {p}")));
        }
        Ok(n)
    }
    fn count(&mut self, req: &str, _keys: &[Key]) -> Result<usize, Error> {
        Ok(self.store.list(&parse(req)?)?.len())
    }
    fn watch(&mut self, req: &str) -> Result<Option<KeyStream>, Error> {
        let Some((servers, cfg)) = &self.servers else {
            return Ok(None);
        };
        let w = haar_net::WatchAll::open(servers, cfg, &parse(req)?)?;
        Ok(Some(Box::new(
            w.map(|e| e.map(|(ev, _)| ev.key).map_err(Error::from)),
        )))
    }
    fn wait(&mut self, req: &str, keys: &[Key], timeout: Duration) -> Result<u64, Error> {
        let Some((servers, cfg)) = &self.servers else {
            return poll_until_flushed(self, req, keys, timeout);
        };
        match haar_net::wait(servers, cfg, &parse(req)?, &self.options, timeout)? {
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

/// Opens the target a worker writes to: FDB5 (configured by the environment) or haar through
/// the front-end the global options describe; given the bytes it will write, a local pmem
/// pool reserves and maps that much heap for it now rather than as its writes reach it.
pub fn open_target(
    opts: &OpenOptions,
    fdb5: bool,
    writes: Option<u64>,
) -> Result<Box<dyn Target>, Error> {
    if fdb5 {
        return Ok(Box::new(crate::fdb5::Fdb5::open()?));
    }
    let store = match writes {
        Some(bytes) => opts.field_store_for_writes(bytes)?,
        None => opts.field_store()?,
    };
    let servers = match opts.server_names()? {
        Some(s) => Some((s, opts.client_config()?)),
        None => None,
    };
    Ok(Box::new(Haar {
        store,
        servers,
        options: opts.store_options()?,
    }))
}
