//! WATCH streams from one server ([`Watch`]) or several merged ([`WatchAll`]), and [`wait`],
//! the "step complete" trigger. Each stream owns a connection of its own.

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::{Request, Values};
use haar_store::{Error, Event, Result, StoreOptions};

use super::session::connect;
use super::{ClientConfig, RemoteStore, io_error, remote_error, wire_error};
use crate::protocol::{ErrorMeta, EventMeta, Frame, Kind, Limits, WireError};
use crate::server::HEARTBEAT;
use crate::transport::Wire;

/// A WATCH stream from one server.
pub struct Watch {
    wire: Wire,
    addr: String,
    done: bool,
}

impl Watch {
    /// Connects, authenticates and subscribes.
    pub fn open(addr: &str, cfg: &ClientConfig, req: &Request) -> Result<Watch> {
        // Watches resubscribe on their own schedule, so they bypass the memory of unreachable
        // servers; a server that answers one is reachable again for requests too.
        let mut s = connect(addr, cfg)?;
        super::down::answered(addr);
        let meta = RemoteStore::request_meta(req, false);
        let send = (|| -> std::result::Result<(), WireError> {
            s.wire.send(Kind::Watch, 0, 1, &meta, &[])?;
            s.wire.flush()?;
            // A server that stops sending heartbeats is dead or cut off.
            s.wire
                .set_read_timeout(Some(HEARTBEAT * 3 + Duration::from_secs(1)))?;
            Ok(())
        })();
        send.map_err(|e| wire_error(addr, e))?;
        Ok(Watch {
            wire: s.wire,
            addr: addr.to_string(),
            done: false,
        })
    }

    /// The next event with its protocol details (sequence number, replay flag).
    pub fn next_event(&mut self) -> Option<Result<(Event, EventMeta)>> {
        if self.done {
            return None;
        }
        let mut f = Frame::default();
        loop {
            if let Err(e) = self.wire.read(Limits::SESSION, &mut f) {
                self.done = true;
                let e = match e {
                    WireError::Io(ref io)
                        if matches!(
                            io.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        io_error(
                            "watch on",
                            &self.addr,
                            "no heartbeat from the server for 7 s: it stopped or the network is cut",
                        )
                    }
                    e => wire_error(&self.addr, e),
                };
                return Some(Err(e));
            }
            match f.kind() {
                Some(Kind::Heartbeat) => continue,
                Some(Kind::Event) => {
                    return Some(match f.meta::<EventMeta>() {
                        Ok(m) => Ok((
                            Event {
                                key: m.key.clone(),
                                length: m.length,
                                origin: self.addr.clone(),
                            },
                            m,
                        )),
                        Err(e) => {
                            self.done = true;
                            Err(io_error("watch on", &self.addr, e))
                        }
                    });
                }
                Some(Kind::Error) => {
                    self.done = true;
                    return Some(Err(match f.meta::<ErrorMeta>() {
                        Ok(m) => remote_error(&self.addr, m),
                        Err(e) => io_error("watch on", &self.addr, e),
                    }));
                }
                _ => {
                    self.done = true;
                    return Some(Err(io_error(
                        "watch on",
                        &self.addr,
                        format!("unexpected frame kind {}", f.kind),
                    )));
                }
            }
        }
    }
}

impl Iterator for Watch {
    type Item = Result<Event>;
    fn next(&mut self) -> Option<Result<Event>> {
        self.next_event().map(|r| r.map(|(e, _)| e))
    }
}

/// WATCH streams of several servers merged (each on its own thread), in arrival order, with
/// every version of a field (key + CRC-32C) reported once: replicas flush the same field on
/// several servers, and a server that comes back replays what it holds.
///
/// A server that cannot be reached (an `Io` error) is retried every second until it answers
/// again; its failure arrives as an `Err(Error::Net)` item naming it, and the stream goes on.
/// Nothing flushed is missed across a reconnection: the new subscription replays every field
/// the server holds. Any other error (a refused token, a bad request) is final for that server.
/// The de-duplication remembers every field seen (about 100 bytes each).
pub struct WatchAll {
    rx: mpsc::Receiver<Result<(Event, EventMeta)>>,
    seen: HashSet<(Key, u64, Option<u32>)>,
    stop: Arc<AtomicBool>,
}

/// Pause between attempts to reach a server that failed.
const RECONNECT: Duration = Duration::from_secs(1);

impl WatchAll {
    /// Subscribes on every server (a refusal or bad request surfaces here, and so does a
    /// failure to reach any server at all), then streams. A server that is down now is
    /// reported by the first item and subscribed to when it comes up.
    pub fn open(servers: &[String], cfg: &ClientConfig, req: &Request) -> Result<WatchAll> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut first: Vec<(String, Result<Watch>)> = Vec::new();
        for s in servers {
            match Watch::open(s, cfg, req) {
                Err(e) if !matches!(e, Error::Net { .. }) => return Err(e),
                r => first.push((s.clone(), r)),
            }
        }
        if first.iter().all(|(_, r)| r.is_err()) {
            let why: Vec<String> = first
                .iter()
                .filter_map(|(_, r)| r.as_ref().err().map(|e| e.to_string()))
                .collect();
            return Err(io_error(
                "watch on",
                &servers.join(","),
                format!("no server could be reached: {}", why.join("; ")),
            ));
        }
        for (server, w) in first {
            let (tx, cfg, req, stop) = (tx.clone(), cfg.clone(), req.clone(), stop.clone());
            std::thread::Builder::new()
                .name("haar-watch".into())
                .spawn(move || follow(server, w, &cfg, &req, &tx, &stop))
                .map_err(|e| io_error("spawn", "watch thread", e))?;
        }
        Ok(WatchAll {
            rx,
            seen: HashSet::new(),
            stop,
        })
    }

    /// True for the first sight of a field version; errors always pass.
    fn first_sight(&mut self, item: &Result<(Event, EventMeta)>) -> bool {
        match item {
            Ok((ev, m)) => self.seen.insert((ev.key.clone(), ev.length, m.crc)),
            Err(_) => true,
        }
    }

    /// The next event, waiting at most until `deadline`; `None` on timeout.
    pub fn next_before(&mut self, deadline: Instant) -> Option<Result<(Event, EventMeta)>> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let item = self.rx.recv_timeout(left).ok()?;
            if self.first_sight(&item) {
                return Some(item);
            }
        }
    }
}

impl Drop for WatchAll {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One server's thread: forwards its events; on an `Io` failure reports it once and
/// resubscribes every [`RECONNECT`] until the server answers again or the [`WatchAll`] is
/// dropped.
fn follow(
    server: String,
    mut current: Result<Watch>,
    cfg: &ClientConfig,
    req: &Request,
    tx: &mpsc::Sender<Result<(Event, EventMeta)>>,
    stop: &AtomicBool,
) {
    let mut reported = false;
    loop {
        match current {
            Ok(mut w) => {
                reported = false;
                while let Some(item) = w.next_event() {
                    let failed = match &item {
                        Ok(_) => None,
                        Err(e) => Some(matches!(e, Error::Net { .. })),
                    };
                    if tx.send(item).is_err() {
                        return;
                    }
                    match failed {
                        None => {}
                        Some(true) => {
                            reported = true;
                            break;
                        }
                        Some(false) => return,
                    }
                }
            }
            Err(e @ Error::Net { .. }) => {
                if !reported && tx.send(Err(e)).is_err() {
                    return;
                }
                reported = true;
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        }
        std::thread::sleep(RECONNECT);
        if stop.load(Ordering::Relaxed) {
            return;
        }
        current = Watch::open(&server, cfg, req);
    }
}

impl Iterator for WatchAll {
    type Item = Result<(Event, EventMeta)>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let item = self.rx.recv().ok()?;
            if self.first_sight(&item) {
                return Some(item);
            }
        }
    }
}

/// What [`wait`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitOutcome {
    /// Every field of the request is flushed.
    Complete {
        /// Fields the request names.
        fields: usize,
    },
    /// The timeout passed first; these request keys are still missing.
    TimedOut {
        /// Missing keys (request keywords only), in request order.
        missing: Vec<Key>,
    },
}

/// What a "step complete" wait waits for: the keys a request expands to, over the keywords it
/// names. Shared by the server watch ([`wait`]) and local polling (`haar::watch`).
#[derive(Debug, Clone)]
pub struct StepTarget {
    /// The request's keywords (schema keywords only), in request order.
    pub keywords: Vec<String>,
    /// Every key the request expands to, over `keywords`, in request order.
    pub expected: Vec<Key>,
}

impl StepTarget {
    /// Resolves `req` with `options` (schema, dates). Refused when a keyword has `all`
    /// (it would never complete).
    pub fn new(req: &Request, options: &StoreOptions) -> Result<StepTarget> {
        let bad = |reason: haar_store::Reason| Error::BadRequest {
            request: req.to_string(),
            reason,
        };
        let mut resolved = req
            .resolve(&options.schema, &options.context)
            .map_err(|e| bad(e.into()))?;
        let known = options.schema.keywords();
        resolved
            .params
            .retain(|p| known.contains(&p.keyword.as_str()));
        if resolved
            .params
            .iter()
            .any(|p| matches!(p.values, Values::All))
        {
            return Err(bad(
                "wait needs explicit values for every keyword (`all` never completes)".into(),
            ));
        }
        Ok(StepTarget {
            keywords: resolved.params.iter().map(|p| p.keyword.clone()).collect(),
            expected: resolved.expand(),
        })
    }

    /// A stored key cut down to the request's keywords (comparable with `expected`).
    pub fn project(&self, k: &Key) -> Key {
        let mut p = Key::new();
        for kw in &self.keywords {
            p.push(kw.clone(), k.get(kw).unwrap_or("").to_string());
        }
        p
    }
}

/// Returns when every key that `req` expands to has been flushed on one of `servers` (or
/// `timeout` passes): the "step complete" trigger. `req` must name every keyword's values
/// explicitly (no `all`); `options` resolves it (schema, dates) as the servers do.
pub fn wait(
    servers: &[String],
    cfg: &ClientConfig,
    req: &Request,
    options: &StoreOptions,
    timeout: Duration,
) -> Result<WaitOutcome> {
    let deadline = Instant::now() + timeout;
    let target = StepTarget::new(req, options)?;
    let expected = target.expected.clone();
    let mut missing: HashSet<Key> = expected.iter().cloned().collect();
    let project = |k: &Key| target.project(k);
    let mut watch = WatchAll::open(servers, cfg, req)?;
    while !missing.is_empty() {
        match watch.next_before(deadline) {
            None => {
                return Ok(WaitOutcome::TimedOut {
                    missing: expected
                        .into_iter()
                        .filter(|k| missing.contains(k))
                        .collect(),
                });
            }
            // A server that went away is resubscribed when it returns (its replay covers
            // what it flushed meanwhile); anything else ends the wait.
            Some(Err(Error::Net { .. })) => {}
            Some(Err(e)) => return Err(e),
            Some(Ok((ev, _))) => {
                missing.remove(&project(&ev.key));
            }
        }
    }
    Ok(WaitOutcome::Complete {
        fields: expected.len(),
    })
}
