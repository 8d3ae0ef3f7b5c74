//! What a workload worker writes to and reads from: haar through any front-end, or the real
//! FDB5 through its C API, behind the few operations the workloads need.

use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::Request;
use haar_store::{FieldStore, StoreOptions};

use crate::Failure;

/// Receives retrieved fields; an error stops the retrieve.
pub type FieldSink<'a> = dyn FnMut(&Key, &[u8]) -> Result<(), Failure> + 'a;

/// Keys of flushed fields, as notified.
pub type KeyStream = Box<dyn Iterator<Item = Result<Key, Failure>>>;

/// The store under test.
pub trait Target {
    /// What it is, for messages.
    fn describe(&self) -> String;
    /// Stores one field (invisible until flush).
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<(), Failure>;
    /// The durability and visibility barrier.
    fn flush(&mut self) -> Result<(), Failure>;
    /// Delivers the fields `keys` names (`req` is the same set as a MARS request); returns how
    /// many were found.
    fn retrieve(
        &mut self,
        req: &str,
        keys: &[Key],
        sink: &mut FieldSink<'_>,
    ) -> Result<usize, Failure>;
    /// How many of `keys` (`req`) are flushed, without reading them.
    fn count(&mut self, req: &str, keys: &[Key]) -> Result<usize, Failure>;
    /// A stream of the keys of fields matching `req` as they are flushed (those flushed
    /// before first), or `None` where the store cannot notify.
    fn watch(&mut self, _req: &str) -> Result<Option<KeyStream>, Failure> {
        Ok(None)
    }
    /// Returns once every field of `keys` (`req`) is flushed: a notification where the store
    /// has them, polling otherwise. Returns how many polls it took (0 for notifications).
    fn wait(&mut self, req: &str, keys: &[Key], timeout: Duration) -> Result<u64, Failure> {
        poll_until_flushed(self, req, keys, timeout)
    }
}

/// Polls [`Target::count`] until every field of `keys` is flushed; returns the polls taken.
pub fn poll_until_flushed<T: Target + ?Sized>(
    t: &mut T,
    req: &str,
    keys: &[Key],
    timeout: Duration,
) -> Result<u64, Failure> {
    let deadline = Instant::now() + timeout;
    let mut polls = 0;
    loop {
        polls += 1;
        let n = t.count(req, keys)?;
        if n == keys.len() {
            return Ok(polls);
        }
        if Instant::now() > deadline {
            return Err(Failure::missing(format!(
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

fn parse(req: &str) -> Result<Request, Failure> {
    Request::parse(req).map_err(|e| Failure::usage(format!("request {req:?}: {e}")))
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
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<(), Failure> {
        Ok(self.store.archive(key, data)?)
    }
    fn flush(&mut self) -> Result<(), Failure> {
        Ok(self.store.flush()?)
    }
    fn retrieve(
        &mut self,
        req: &str,
        _keys: &[Key],
        sink: &mut FieldSink<'_>,
    ) -> Result<usize, Failure> {
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
            return Err(Failure::io(format!("retrieve {req}: {p}")));
        }
        Ok(n)
    }
    fn count(&mut self, req: &str, _keys: &[Key]) -> Result<usize, Failure> {
        Ok(self.store.list(&parse(req)?)?.len())
    }
    fn watch(&mut self, req: &str) -> Result<Option<KeyStream>, Failure> {
        let Some((servers, cfg)) = &self.servers else {
            return Ok(None);
        };
        let w = haar_net::WatchAll::open(servers, cfg, &parse(req)?)?;
        Ok(Some(Box::new(
            w.map(|e| e.map(|(ev, _)| ev.key).map_err(Failure::from)),
        )))
    }
    fn wait(&mut self, req: &str, keys: &[Key], timeout: Duration) -> Result<u64, Failure> {
        let Some((servers, cfg)) = &self.servers else {
            return poll_until_flushed(self, req, keys, timeout);
        };
        match haar_net::wait(servers, cfg, &parse(req)?, &self.options, timeout)? {
            haar_net::WaitOutcome::Complete { .. } => Ok(0),
            haar_net::WaitOutcome::TimedOut { missing } => Err(Failure::missing(format!(
                "{} field(s) of {req} not flushed after {} s, e.g. {}",
                missing.len(),
                timeout.as_secs(),
                missing.first().map(|k| k.to_string()).unwrap_or_default()
            ))),
        }
    }
}
