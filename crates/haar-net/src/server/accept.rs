//! Admission (design §8): the state every connection of a server shares ([`Shared`]), the
//! bounds it enforces on them (connections counted at accept, pre-login places per source,
//! handshake deadlines reaped on a thread of their own, buffer memory per token) and the
//! refusals, each logged once per source or token.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use haar_core::request::Request;
use haar_store::{FieldStore, Store};

use super::config::{ServerConfig, ServerLimits, Target};
use super::events::{EventLog, LogInner};
use crate::metrics::{Metrics, RefusalCause};
use crate::protocol::{self, Access, FLAG_END, Kind, Refused, to_meta};

/// Handshake deadlines, enforced by [`Deadlines::reap`] on a thread of its own: it shuts a
/// late peer's socket down, which ends whatever read or write the connection's thread is
/// blocked in. A per-read timeout alone lets a peer send one byte per interval for hours.
pub(super) struct Deadlines {
    /// Armed connections: deadline and socket.
    armed: Mutex<HashMap<u64, (Instant, RawFd)>>,
    cond: Condvar,
    next: AtomicU64,
}

/// An armed deadline; disarmed when dropped. It must be dropped before its socket is closed
/// (declare it after the socket's owner): the reaper only touches descriptors that are armed.
pub(super) struct Armed<'a> {
    deadlines: &'a Deadlines,
    id: u64,
}

impl Deadlines {
    pub(super) fn arm(&self, fd: RawFd, at: Instant) -> Armed<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.armed.lock().unwrap().insert(id, (at, fd));
        self.cond.notify_one();
        Armed {
            deadlines: self,
            id,
        }
    }

    /// Shuts down every socket whose deadline passed, forever.
    pub(super) fn reap(&self) {
        let mut armed = self.armed.lock().unwrap();
        loop {
            let now = Instant::now();
            armed.retain(|_, &mut (at, fd)| {
                if at > now {
                    return true;
                }
                // SAFETY: `fd` is open: an armed descriptor is disarmed (under this lock)
                // before its socket is closed. shutdown(2) only ends the connection.
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                false
            });
            let wait = armed
                .values()
                .map(|&(at, _)| at.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(3600));
            armed = self.cond.wait_timeout(armed, wait).unwrap().0;
        }
    }
}

impl Armed<'_> {
    /// True once the reaper has shut the socket down.
    pub(super) fn expired(&self) -> bool {
        !self.deadlines.armed.lock().unwrap().contains_key(&self.id)
    }
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.deadlines.armed.lock().unwrap().remove(&self.id);
    }
}

/// A counted connection: holds its place under [`ServerLimits::max_connections`], and in
/// the pre-login registry until [`Slot::logged_in`] (or until a newer connection drops it).
pub(super) struct Slot {
    pub(super) shared: Arc<Shared>,
    /// Its id: its entry in [`Shared::prelogin`] while it has not logged in, then in
    /// [`Shared::live`].
    id: u64,
    /// Whether it is still in [`Shared::prelogin`].
    pub(super) prelogin: Option<u64>,
    /// Set when it was dropped for a newer connection (its end is then not logged again).
    pub(super) dropped: Arc<AtomicBool>,
}

impl Slot {
    /// Leaves the pre-login registry for the live one (which a stopping server shuts down).
    pub(super) fn logged_in(&mut self) {
        let Some(id) = self.prelogin.take() else {
            return;
        };
        let Some(pending) = lock(&self.shared.prelogin).conns.remove(&id) else {
            return; // dropped for a newer connection: its socket is already shut down
        };
        let socket = pending.socket;
        // Checked after the insert (`stop` sets the flag before it scans): a connection that
        // logs in while the server stops is either seen by the scan or sees the flag.
        lock(&self.shared.live).insert(self.id, socket);
        if self.shared.stopping.load(Ordering::SeqCst)
            && let Some(s) = lock(&self.shared.live).get(&self.id)
        {
            let _ = s.shutdown(std::net::Shutdown::Read);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(id) = self.prelogin.take() {
            lock(&self.shared.prelogin).conns.remove(&id);
        }
        lock(&self.shared.live).remove(&self.id);
        let left = self.shared.open.fetch_sub(1, Ordering::SeqCst) - 1;
        self.shared.metrics.set_open(left);
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where a connection comes from, for the per-source pre-login bound: its address (an
/// IPv4-mapped IPv6 address as the IPv4 one).
fn source(peer: &SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        ip => ip,
    }
}

/// A connection that has not logged in: its source, a second handle on its socket (a
/// duplicated descriptor, so shutting it down can never touch another socket), and its flag.
pub(super) struct Pending_ {
    source: IpAddr,
    socket: TcpStream,
    dropped: Arc<AtomicBool>,
}

/// Connections that have not logged in, oldest first (ids grow with accept order).
#[derive(Default)]
pub(super) struct PreLogin {
    next: u64,
    conns: BTreeMap<u64, Pending_>,
}

impl PreLogin {
    /// The connection to drop so that one more from `src` fits: the oldest of `src` when it
    /// holds its per-source bound, else, when every place is taken, the oldest of the source
    /// holding the most.
    fn victim(&self, src: IpAddr, l: &ServerLimits) -> Option<u64> {
        let oldest_of = |s: IpAddr| {
            (self.conns.iter())
                .find(|(_, p)| p.source == s)
                .map(|(id, _)| *id)
        };
        let from_src = self.conns.values().filter(|p| p.source == src).count();
        if from_src >= l.max_unauthenticated_per_source.max(1) {
            return oldest_of(src);
        }
        if self.conns.len() >= l.max_unauthenticated.max(1) {
            let mut counts: HashMap<IpAddr, usize> = HashMap::new();
            for p in self.conns.values() {
                *counts.entry(p.source).or_default() += 1;
            }
            let (&most, _) = counts.iter().max_by_key(|(_, n)| **n)?;
            return oldest_of(most);
        }
        None
    }
}

/// Logs each kind of refusal once per source or token, with its cause; later ones of the
/// same kind are counted and logged at debug level (a flood must not flood the log).
#[derive(Default)]
pub(super) struct Refusals {
    seen: Mutex<HashMap<(String, &'static str), u64>>,
}

impl Refusals {
    /// True the first time `what` happens to `who` (bounded: after 4,096 distinct pairs,
    /// every new one is logged).
    fn first(&self, who: String, what: &'static str) -> bool {
        let mut seen = lock(&self.seen);
        if seen.len() >= 4096 {
            seen.clear();
        }
        let n = seen.entry((who, what)).or_default();
        *n += 1;
        *n == 1
    }
}

/// Bytes of frames being received, per token (design §8).
#[derive(Default)]
pub(super) struct Buffered {
    /// Read-only, read-write.
    held: Mutex<[u64; 2]>,
    cond: Condvar,
}

fn token_index(access: Access) -> usize {
    usize::from(access != Access::ReadOnly)
}

pub(super) fn token_name(access: Access) -> &'static str {
    match access {
        Access::ReadOnly => "read-only",
        _ => "read-write",
    }
}

pub(super) struct Shared {
    pub(super) target: Target,
    pub(super) config: ServerConfig,
    pub(super) deadlines: Deadlines,
    /// Connections with a thread (or about to get one).
    pub(super) open: AtomicUsize,
    /// Of those, connections that have not logged in.
    pub(super) prelogin: Mutex<PreLogin>,
    /// Of those, logged-in connections: a second handle on each socket (a duplicated
    /// descriptor), so that a stopping server can end them.
    pub(super) live: Mutex<HashMap<u64, TcpStream>>,
    /// Set once the server stops: no connection is accepted, and those open are ended.
    pub(super) stopping: AtomicBool,
    pub(super) buffered: Buffered,
    pub(super) refusals: Refusals,
    pub(super) events: EventLog,
    /// Flushes hold it shared while they commit and log their events; a new WATCH holds it
    /// exclusively while it notes the log position and lists what is already flushed, so every
    /// flushed field is either in that listing or after that position, never both.
    pub(super) gate: RwLock<()>,
    pub(super) name: String,
    pub(super) metrics: Arc<Metrics>,
}

impl Shared {
    /// Counts a new connection in (dropping an older pre-login one if its source, or the
    /// server, holds its bound), or says why it is refused.
    pub(super) fn admit(
        self: &Arc<Self>,
        stream: &TcpStream,
        peer: SocketAddr,
    ) -> Result<Slot, String> {
        let l = &self.config.limits;
        let before = self.open.fetch_add(1, Ordering::SeqCst);
        if before >= l.max_connections {
            self.open.fetch_sub(1, Ordering::SeqCst);
            self.metrics.refused(RefusalCause::Busy);
            return Err(format!(
                "server {} is busy: {} connections open, the limit; try again later (or raise max_connections)",
                self.name, l.max_connections
            ));
        }
        self.metrics.set_open(before + 1);
        let mut slot = Slot {
            shared: self.clone(),
            id: u64::MAX,
            prelogin: None,
            dropped: Arc::new(AtomicBool::new(false)),
        };
        let socket = stream.try_clone().map_err(|e| {
            format!(
                "server {} cannot take the connection: {e}; raise `ulimit -n` or lower max_connections",
                self.name
            )
        })?;
        let src = source(&peer);
        let (id, victim) = {
            let mut pre = lock(&self.prelogin);
            let victim = pre.victim(src, l).and_then(|v| pre.conns.remove(&v));
            let id = pre.next;
            pre.next += 1;
            pre.conns.insert(
                id,
                Pending_ {
                    source: src,
                    socket,
                    dropped: slot.dropped.clone(),
                },
            );
            (id, victim)
        };
        slot.id = id;
        slot.prelogin = Some(id);
        self.metrics.accepted();
        if let Some(v) = victim {
            self.drop_prelogin(v, src);
        }
        Ok(slot)
    }

    /// Ends the open connections of a stopping server: those logging in at once, logged-in
    /// ones as `how` says (`Read`: the request in progress finishes and is answered, the
    /// next read sees the end; `Both`: at once). Returns how many were open.
    pub(super) fn end_connections(&self, how: std::net::Shutdown) -> usize {
        for p in lock(&self.prelogin).conns.values() {
            let _ = p.socket.shutdown(std::net::Shutdown::Both);
        }
        for s in lock(&self.live).values() {
            let _ = s.shutdown(how);
        }
        self.open.load(Ordering::SeqCst)
    }

    /// Ends a pre-login connection dropped for a newer one from `newcomer`: REFUSED (plain
    /// TCP, if it can be written at once) and a shutdown, which ends its thread's read.
    fn drop_prelogin(&self, v: Pending_, newcomer: IpAddr) {
        v.dropped.store(true, Ordering::SeqCst);
        self.metrics.refused(RefusalCause::PreloginDropped);
        let l = &self.config.limits;
        let reason = if v.source == newcomer {
            format!(
                "server {} is busy: {} connections from {} are logging in, the limit per source; the oldest is dropped for the newest; log in within the handshake, or connect less often",
                self.name, l.max_unauthenticated_per_source, v.source
            )
        } else {
            format!(
                "server {} is busy: {} connections are logging in, the limit; the oldest of the source holding the most ({}) is dropped for one from {newcomer}; try again later",
                self.name, l.max_unauthenticated, v.source
            )
        };
        if self
            .refusals
            .first(v.source.to_string(), "dropped before login")
        {
            tracing::warn!(source = %v.source, %reason, "dropped before login (logged once per source)");
        } else {
            tracing::debug!(source = %v.source, %reason, "dropped before login");
        }
        if self.config.tls.is_none() {
            let meta = to_meta(&Refused {
                reason,
                cause: Some(RefusalCause::PreloginDropped),
            });
            if let Ok(frame) = protocol::encode(Kind::Refused, FLAG_END, 0, &meta, &[]) {
                // SAFETY: a send on our own duplicated descriptor, which stays open until `v`
                // is dropped below; MSG_DONTWAIT leaves the socket's blocking mode alone.
                unsafe {
                    libc::send(
                        v.socket.as_raw_fd(),
                        frame.as_ptr().cast(),
                        frame.len(),
                        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    )
                };
            }
        }
        let _ = v.socket.shutdown(std::net::Shutdown::Both);
    }

    /// Charges `want` more bytes to `access`'s share, waiting (at most the write timeout) for
    /// other frames of that token to be done; or says why not.
    pub(super) fn charge(&self, access: Access, want: u64, peer: &str) -> Result<(), String> {
        let l = &self.config.limits;
        let share = l.share(access);
        let i = token_index(access);
        let name = token_name(access);
        let over = |held: u64| held.saturating_add(want) > share;
        let mut held = lock(&self.buffered.held);
        if want > share {
            return Err(self.refused_memory(
                peer,
                access,
                format!(
                    "a frame of {want} bytes is larger than the {name} token's buffer share of {share} bytes on server {}; send smaller fields or raise --max-buffered{}",
                    self.name,
                    if access == Access::ReadOnly { "-read-only" } else { "" }
                ),
            ));
        }
        let until = Instant::now() + l.write_timeout;
        while over(held[i]) {
            let now = Instant::now();
            if now >= until {
                let in_use = held[i];
                drop(held);
                return Err(self.refused_memory(
                    peer,
                    access,
                    format!(
                        "a frame of {want} bytes waited {:?} for buffer memory: the {name} token's connections hold {in_use} of its {share} bytes on server {}; try again later, or raise --max-buffered{}",
                        l.write_timeout,
                        self.name,
                        if access == Access::ReadOnly { "-read-only" } else { "" }
                    ),
                ));
            }
            held = (self.buffered.cond.wait_timeout(held, until - now))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        held[i] += want;
        Ok(())
    }

    pub(super) fn uncharge(&self, access: Access, bytes: u64) {
        if bytes > 0 {
            let mut held = lock(&self.buffered.held);
            let i = token_index(access);
            held[i] = held[i].saturating_sub(bytes);
            drop(held);
            self.buffered.cond.notify_all();
        }
    }

    fn refused_memory(&self, peer: &str, access: Access, reason: String) -> String {
        if self
            .refusals
            .first(token_name(access).into(), "buffer memory")
        {
            tracing::warn!(%peer, token = token_name(access), %reason, "frame refused (logged once per token)");
        } else {
            tracing::debug!(%peer, token = token_name(access), %reason, "frame refused");
        }
        reason
    }

    pub(super) fn open(&self) -> haar_store::Result<Box<dyn FieldStore>> {
        Ok(match &self.target {
            Target::Local { backend, options } => {
                Box::new(Store::with_options(backend.clone(), options.clone()))
            }
            Target::Front { open, .. } => open()?,
        })
    }

    /// A request resolved as `Store::list` resolves it (keywords no rule uses dropped).
    pub(super) fn resolve(&self, req: &Request) -> Result<Request, String> {
        let o = self.target.options();
        let mut r = req
            .resolve(&o.schema, &o.context)
            .map_err(|e| format!("request {req}: {e}"))?;
        let known = o.schema.keywords();
        r.params.retain(|p| known.contains(&p.keyword.as_str()));
        Ok(r)
    }
}

impl Shared {
    /// The state of a new server over `target`, named `name` (its bound address) in messages.
    pub(super) fn new(
        target: Target,
        config: ServerConfig,
        name: String,
        metrics: Arc<Metrics>,
    ) -> Shared {
        Shared {
            target,
            config,
            deadlines: Deadlines {
                armed: Mutex::new(HashMap::new()),
                cond: Condvar::new(),
                next: AtomicU64::new(0),
            },
            open: AtomicUsize::new(0),
            prelogin: Mutex::new(PreLogin::default()),
            live: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            buffered: Buffered::default(),
            refusals: Refusals::default(),
            events: EventLog {
                inner: Mutex::new(LogInner {
                    events: VecDeque::new(),
                    first: 0,
                }),
                cond: Condvar::new(),
            },
            gate: RwLock::new(()),
            name,
            metrics,
        }
    }
}

/// Refuses a connection over a limit without a thread: one REFUSED frame if it can be written
/// at once (plain TCP only: a TLS client could not read it), then close.
pub(super) fn refuse_at_accept(shared: &Shared, stream: TcpStream, peer: SocketAddr, reason: &str) {
    if shared
        .refusals
        .first(source(&peer).to_string(), "refused at accept")
    {
        tracing::warn!(%peer, %reason, "refused (logged once per source)");
    } else {
        tracing::debug!(%peer, %reason, "refused");
    }
    if shared.config.tls.is_none() && stream.set_nonblocking(true).is_ok() {
        let meta = to_meta(&Refused {
            reason: reason.to_string(),
            cause: Some(RefusalCause::Busy),
        });
        if let Ok(frame) = protocol::encode(Kind::Refused, FLAG_END, 0, &meta, &[]) {
            let _ = (&stream).write_all(&frame);
            let _ = stream.shutdown(std::net::Shutdown::Write);
        }
    }
}
