//! Flush notifications and the "step complete" wait for any configured store: the servers'
//! WATCH streams where the configuration names servers, polling the catalogue of a local
//! store otherwise (a local store has no server to push events; its readers see new commits
//! on their next poll). Every face's `watch` and `wait` are this module.
//!
//! Owns only the choice between the two and the local polling; the wire side lives in
//! `haar_net::client::watch`.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::Request;
use haar_net::{StepTarget, WaitOutcome, WatchAll};
use haar_store::{Error, Event, FieldStore, Result};

use crate::open::OpenOptions;

/// How often a local store's catalogue is polled for new fields.
pub const POLL: Duration = Duration::from_millis(10);

/// A stream of flush events for the fields matching a request: each flushed field once (the
/// fields already flushed when it opens come first), until dropped.
pub struct Watcher {
    inner: Inner,
}

enum Inner {
    Servers(WatchAll),
    Local {
        store: Box<dyn FieldStore>,
        req: Request,
        seen: HashSet<Key>,
        pending: VecDeque<Event>,
        origin: String,
    },
}

impl Watcher {
    /// Subscribes to the servers the options name, or polls the local store they open.
    pub fn open(opts: &OpenOptions, req: &Request) -> Result<Watcher> {
        let inner = match opts.server_names()? {
            Some(servers) => Inner::Servers(WatchAll::open(&servers, &opts.client_config()?, req)?),
            None => {
                let store = opts.field_store()?;
                let origin = store.describe();
                Inner::Local {
                    store,
                    req: req.clone(),
                    seen: HashSet::new(),
                    pending: VecDeque::new(),
                    origin,
                }
            }
        };
        Ok(Watcher { inner })
    }

    /// The next event, waiting at most until `deadline`; `None` when the deadline passes
    /// first. A server that fails is reported as an `Err(Error::Net)` item and resubscribed.
    pub fn next_before(&mut self, deadline: Instant) -> Option<Result<Event>> {
        match &mut self.inner {
            Inner::Servers(w) => w.next_before(deadline).map(|r| r.map(|(ev, _)| ev)),
            Inner::Local {
                store,
                req,
                seen,
                pending,
                origin,
            } => loop {
                if let Some(ev) = pending.pop_front() {
                    return Some(Ok(ev));
                }
                let fields = match store.list(req) {
                    Ok(f) => f,
                    Err(e) => return Some(Err(e)),
                };
                for f in fields {
                    let key = f.key();
                    if seen.insert(key.clone()) {
                        pending.push_back(Event {
                            key,
                            length: f.data.length,
                            origin: origin.clone(),
                        });
                    }
                }
                if !pending.is_empty() {
                    continue;
                }
                let now = Instant::now();
                if now >= deadline {
                    return None;
                }
                std::thread::sleep(POLL.min(deadline - now));
            },
        }
    }
}

/// Returns when every key `req` expands to has been flushed (or `timeout` passes): the "step
/// complete" trigger, for servers and local stores alike. `req` must name every keyword's
/// values explicitly (no `all`).
pub fn wait(opts: &OpenOptions, req: &Request, timeout: Duration) -> Result<WaitOutcome> {
    if let Some(servers) = opts.server_names()? {
        return haar_net::wait(
            &servers,
            &opts.client_config()?,
            req,
            &opts.store_options()?,
            timeout,
        );
    }
    let deadline = Instant::now() + timeout;
    let store = opts.field_store()?;
    let target = StepTarget::new(req, store.options())?;
    let mut missing: HashSet<Key> = target.expected.iter().cloned().collect();
    loop {
        for f in store.list(req)? {
            missing.remove(&target.project(&f.key()));
        }
        if missing.is_empty() {
            return Ok(WaitOutcome::Complete {
                fields: target.expected.len(),
            });
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(WaitOutcome::TimedOut {
                missing: target
                    .expected
                    .into_iter()
                    .filter(|k| missing.contains(k))
                    .collect(),
            });
        }
        std::thread::sleep(POLL.min(deadline - now));
    }
}

/// The error a face reports for a wait that timed out, naming the first missing keys.
pub fn timed_out(req: &Request, missing: &[Key]) -> Error {
    let shown: Vec<String> = missing.iter().take(3).map(|k| k.to_string()).collect();
    Error::Config(format!(
        "wait for {req}: timed out with {} field(s) missing ({}{}); raise the timeout or check the producer",
        missing.len(),
        shown.join("; "),
        if missing.len() > 3 { "; ..." } else { "" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::open::ConfigSource;

    fn key(step: u32) -> Key {
        Key::parse(&format!(
            "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc,step={step},param=167"
        ))
        .unwrap()
    }

    #[test]
    fn a_local_wait_completes_when_another_handle_flushes_the_step() {
        let dir = tempfile::tempdir().unwrap();
        let opts = OpenOptions {
            config: ConfigSource::Yaml {
                text: "backend: posix\n".into(),
                origin: "test".into(),
            },
            root: Some(dir.path().into()),
            ..OpenOptions::default()
        };
        let req = Request::parse(
            "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc,step=0/6,param=167",
        )
        .unwrap();
        match wait(&opts, &req, Duration::from_millis(30)).unwrap() {
            WaitOutcome::TimedOut { missing } => assert_eq!(missing.len(), 2),
            o => panic!("{o:?}"),
        }
        let mut watcher = Watcher::open(&opts, &req).unwrap();
        let writer = {
            let opts = opts.clone();
            std::thread::spawn(move || {
                let mut s = opts.field_store().unwrap();
                for step in [0, 6] {
                    std::thread::sleep(Duration::from_millis(50));
                    s.archive(&key(step), b"GRIB....7777").unwrap();
                    s.flush().unwrap();
                }
            })
        };
        match wait(&opts, &req, Duration::from_secs(10)).unwrap() {
            WaitOutcome::Complete { fields } => assert_eq!(fields, 2),
            o => panic!("{o:?}"),
        }
        writer.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let a = watcher.next_before(deadline).unwrap().unwrap();
        let b = watcher.next_before(deadline).unwrap().unwrap();
        assert_eq!(
            (a.key.get("step"), b.key.get("step")),
            (Some("0"), Some("6"))
        );
        assert_eq!(a.length, 12);
        assert!(watcher.next_before(Instant::now() + POLL * 3).is_none());
    }
}
