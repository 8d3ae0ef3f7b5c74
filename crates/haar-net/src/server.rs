//! `haar serve`: one server per node over a local store (design §7–§8).
//!
//! A thread per connection, blocking I/O: each connection owns its own store handle (a
//! `Store` over the shared backend), so a client's archives are private until its FLUSH, and
//! reads go straight to the shared backend. The server owns the flush-event log that WATCH
//! streams from; it never touches the store's files itself.
//!
//! Hostile peers (design §8, [`ServerLimits`]): connections are counted at accept and refused
//! over their bound; connections that have not logged in are counted per source address, and
//! a new one drops the oldest of its source (or, when all pre-login places are taken, the
//! oldest of the source holding the most), so a peer that reconnects without end cannot keep
//! other sources from logging in; the whole handshake has a deadline that a reaper thread
//! enforces by shutting the socket down; logged-in connections have idle and write timeouts;
//! frame buffers grow only as bytes arrive, and frames larger than [`SMALL_FRAME`] are
//! charged to their token's share of the server's buffer memory ([`ServerLimits::max_buffered`])
//! before their body is read; a read-only connection's writing requests are refused from their
//! header. Each kind of refusal is logged once per source or token, with its cause.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::Request;
use haar_store::{Backend, FieldStore, Store, StoreOptions};
use serde_json::json;

use crate::auth::{self, Tokens};
use crate::metrics::{Metrics, RefusalCause};
use crate::protocol::{
    self, Access, Challenge, ErrorMeta, EventMeta, FLAG_END, FieldMeta, FlushOk, Frame, Hello,
    KeysMeta, Kind, Limits, ListedField, LocalOffer, PurgeEnd, Refused, RequestMeta, RetrieveEnd,
    StatsEntry, WipeEnd, WireError, to_meta,
};
use crate::transport::{Conn, RETAIN, Wire};

/// How often an idle WATCH stream carries a HEARTBEAT (clients give up after 3 missed).
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// Events kept in memory for watchers that are catching up.
pub const EVENT_LOG_CAPACITY: usize = 1 << 18;

type Opener = dyn Fn() -> haar_store::Result<Box<dyn FieldStore>> + Send + Sync;

/// What a server serves.
pub enum Target {
    /// A local backend: every connection gets its own `Store` over it.
    Local {
        /// The shared backend.
        backend: Arc<dyn Backend>,
        /// Schema and normalisation context.
        options: StoreOptions,
    },
    /// Any front-end (e.g. a `dist` over other servers): `open` makes one handle per
    /// connection; `options` normalises keys for events and WATCH requests.
    Front {
        /// Makes a fresh handle.
        open: Box<Opener>,
        /// Schema and normalisation context used for events.
        options: StoreOptions,
    },
}

impl Target {
    /// Serves the backend of an existing local store, with its schema and context.
    pub fn from_store(store: &Store) -> Target {
        Target::Local {
            backend: store.backend().clone(),
            options: StoreOptions {
                schema: Arc::new(store.schema().clone()),
                context: store.context().clone(),
                merge: store.options().merge,
            },
        }
    }

    fn options(&self) -> &StoreOptions {
        match self {
            Target::Local { options, .. } | Target::Front { options, .. } => options,
        }
    }

    fn describe(&self) -> String {
        match self {
            Target::Local { backend, .. } => format!("local {}", backend.describe()),
            Target::Front { .. } => "front-end".into(),
        }
    }
}

/// Security settings of a server.
#[derive(Clone, Default)]
pub struct ServerConfig {
    /// Accepted tokens; a server without any refuses every client.
    pub tokens: Tokens,
    /// TLS 1.3 when set.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Offered to clients for same-host reads ([`local_offer`]).
    pub local: Option<LocalOffer>,
    /// Bounds on connections, handshakes and idle peers.
    pub limits: ServerLimits,
    /// When plain-TCP connections tag their frames (design §8): by default when the client's
    /// address is not a loopback address or the client asks.
    pub frame_tags: protocol::FrameTags,
}

/// Bounds that keep hostile or broken peers from exhausting a server (design §8). The
/// defaults suit a node serving a few hundred producer and consumer processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections served at once (each holds a thread); more are refused at accept.
    pub max_connections: usize,
    /// Connections that have not completed the handshake, at once. When all are taken, a new
    /// connection drops the oldest one of the source (address) that holds the most.
    pub max_unauthenticated: usize,
    /// Connections from one source address that have not completed the handshake, at once: a
    /// new one from that source drops that source's oldest (which is sent REFUSED).
    pub max_unauthenticated_per_source: usize,
    /// Time from accept to WELCOME for the whole handshake (TLS included): a peer that has
    /// not logged in by then is disconnected, however it paces its bytes.
    pub handshake_deadline: Duration,
    /// A logged-in connection that sends no byte for this long is closed.
    pub idle_timeout: Duration,
    /// A reply that makes no progress for this long (a peer that stopped reading) closes the
    /// connection; a frame waits at most this long for its token's buffer memory.
    pub write_timeout: Duration,
    /// Bytes of frames being received that the server holds at once, over every connection
    /// (frames of at most [`SMALL_FRAME`] bytes are not counted). Split between the tokens:
    /// [`ServerLimits::max_buffered_read_only`] for the read-only token's connections, the rest
    /// for the read-write token's. A frame that would go over its token's share waits (at most
    /// the write timeout) for other frames of that token to be done, then is refused; one
    /// larger than the share is refused at once.
    pub max_buffered: u64,
    /// Of [`ServerLimits::max_buffered`], what the read-only token's connections may hold
    /// together (requests only: field bytes never come from them).
    pub max_buffered_read_only: u64,
}

impl ServerLimits {
    /// Default [`ServerLimits::max_connections`].
    pub const MAX_CONNECTIONS: usize = 1024;
    /// Default [`ServerLimits::max_unauthenticated`].
    pub const MAX_UNAUTHENTICATED: usize = 64;
    /// Default [`ServerLimits::handshake_deadline`].
    pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
    /// Default [`ServerLimits::idle_timeout`].
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
    /// Default [`ServerLimits::write_timeout`].
    pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
    /// Default [`ServerLimits::max_unauthenticated_per_source`].
    pub const MAX_UNAUTHENTICATED_PER_SOURCE: usize = 32;

    /// Default [`ServerLimits::max_buffered`]: a quarter of this machine's memory
    /// (`MemTotal`), or 1 GiB when it cannot be read.
    pub fn default_max_buffered() -> u64 {
        host_memory().map_or(1 << 30, |m| m / 4)
    }

    /// Default [`ServerLimits::max_buffered_read_only`]: a quarter of `max_buffered`.
    pub fn default_max_buffered_read_only(max_buffered: u64) -> u64 {
        max_buffered / 4
    }

    /// The buffer share of a token's connections.
    fn share(&self, access: Access) -> u64 {
        let ro = self.max_buffered_read_only.min(self.max_buffered);
        match access {
            Access::ReadOnly => ro,
            _ => self.max_buffered - ro,
        }
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn host_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = (text.lines())
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

impl Default for ServerLimits {
    fn default() -> Self {
        let max_buffered = Self::default_max_buffered();
        ServerLimits {
            max_connections: Self::MAX_CONNECTIONS,
            max_unauthenticated: Self::MAX_UNAUTHENTICATED,
            max_unauthenticated_per_source: Self::MAX_UNAUTHENTICATED_PER_SOURCE,
            handshake_deadline: Self::HANDSHAKE_DEADLINE,
            idle_timeout: Self::IDLE_TIMEOUT,
            write_timeout: Self::WRITE_TIMEOUT,
            max_buffered,
            max_buffered_read_only: Self::default_max_buffered_read_only(max_buffered),
        }
    }
}

/// Frames of at most this many bytes (meta and data) are not charged to their token's buffer
/// share: the connection's own read buffer is this large, and their number is bounded by
/// [`ServerLimits::max_connections`].
pub const SMALL_FRAME: u64 = 64 << 10;

/// This machine's boot id (`/proc/sys/kernel/random/boot_id`), if the kernel gives one.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The same-host read offer for a store configuration (design §8): `None` for a backend other
/// processes cannot open (memory) or where the machine or root cannot be identified.
pub fn local_offer(cfg: &haar_store::Config, schema: Option<String>) -> Option<LocalOffer> {
    use std::os::unix::fs::MetadataExt;
    if !matches!(
        cfg.backend,
        haar_store::BackendKind::Pmem | haar_store::BackendKind::Posix
    ) {
        return None;
    }
    let meta = std::fs::metadata(cfg.roots.first()?).ok()?;
    Some(LocalOffer {
        boot_id: boot_id()?,
        dev: meta.dev(),
        ino: meta.ino(),
        store: serde_json::to_value(cfg).ok()?,
        schema,
    })
}

struct Ev {
    key: Key,
    length: u64,
    crc: u32,
}

struct LogInner {
    events: VecDeque<Arc<Ev>>,
    /// Sequence number of `events[0]`.
    first: u64,
}

impl LogInner {
    fn next(&self) -> u64 {
        self.first + self.events.len() as u64
    }
}

/// Every flushed field, in flush order, with waiting watchers.
struct EventLog {
    inner: Mutex<LogInner>,
    cond: Condvar,
}

impl EventLog {
    fn append(&self, evs: impl IntoIterator<Item = Pending>) {
        let mut g = self.inner.lock().unwrap();
        for p in evs {
            g.events.push_back(Arc::new(Ev {
                key: p.key,
                length: p.length,
                crc: p.crc,
            }));
        }
        while g.events.len() > EVENT_LOG_CAPACITY {
            g.events.pop_front();
            g.first += 1;
        }
        drop(g);
        self.cond.notify_all();
    }
}

/// Handshake deadlines, enforced by [`Deadlines::reap`] on a thread of its own: it shuts a
/// late peer's socket down, which ends whatever read or write the connection's thread is
/// blocked in. A per-read timeout alone lets a peer send one byte per interval for hours.
struct Deadlines {
    /// Armed connections: deadline and socket.
    armed: Mutex<HashMap<u64, (Instant, RawFd)>>,
    cond: Condvar,
    next: AtomicU64,
}

/// An armed deadline; disarmed when dropped. It must be dropped before its socket is closed
/// (declare it after the socket's owner): the reaper only touches descriptors that are armed.
struct Armed<'a> {
    deadlines: &'a Deadlines,
    id: u64,
}

impl Deadlines {
    fn arm(&self, fd: RawFd, at: Instant) -> Armed<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.armed.lock().unwrap().insert(id, (at, fd));
        self.cond.notify_one();
        Armed {
            deadlines: self,
            id,
        }
    }

    /// Shuts down every socket whose deadline passed, forever.
    fn reap(&self) {
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
    fn expired(&self) -> bool {
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
struct Slot {
    shared: Arc<Shared>,
    /// Its entry in [`Shared::prelogin`] while it has not logged in.
    prelogin: Option<u64>,
    /// Set when it was dropped for a newer connection (its end is then not logged again).
    dropped: Arc<AtomicBool>,
}

impl Slot {
    fn logged_in(&mut self) {
        if let Some(id) = self.prelogin.take() {
            lock(&self.shared.prelogin).conns.remove(&id);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.logged_in();
        let left = self.shared.open.fetch_sub(1, Ordering::SeqCst) - 1;
        self.shared.metrics.set_open(left);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
struct Pending_ {
    source: IpAddr,
    socket: TcpStream,
    dropped: Arc<AtomicBool>,
}

/// Connections that have not logged in, oldest first (ids grow with accept order).
#[derive(Default)]
struct PreLogin {
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
struct Refusals {
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
struct Buffered {
    /// Read-only, read-write.
    held: Mutex<[u64; 2]>,
    cond: Condvar,
}

fn token_index(access: Access) -> usize {
    usize::from(access != Access::ReadOnly)
}

fn token_name(access: Access) -> &'static str {
    match access {
        Access::ReadOnly => "read-only",
        _ => "read-write",
    }
}

struct Shared {
    target: Target,
    config: ServerConfig,
    deadlines: Deadlines,
    /// Connections with a thread (or about to get one).
    open: AtomicUsize,
    /// Of those, connections that have not logged in.
    prelogin: Mutex<PreLogin>,
    buffered: Buffered,
    refusals: Refusals,
    events: EventLog,
    /// Flushes hold it shared while they commit and log their events; a new WATCH holds it
    /// exclusively while it notes the log position and lists what is already flushed, so every
    /// flushed field is either in that listing or after that position, never both.
    gate: RwLock<()>,
    name: String,
    metrics: Arc<Metrics>,
}

impl Shared {
    /// Counts a new connection in (dropping an older pre-login one if its source, or the
    /// server, holds its bound), or says why it is refused.
    fn admit(self: &Arc<Self>, stream: &TcpStream, peer: SocketAddr) -> Result<Slot, String> {
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
        slot.prelogin = Some(id);
        self.metrics.accepted();
        if let Some(v) = victim {
            self.drop_prelogin(v, src);
        }
        Ok(slot)
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
            let meta = to_meta(&Refused { reason });
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
    fn charge(&self, access: Access, want: u64, peer: &str) -> Result<(), String> {
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

    fn uncharge(&self, access: Access, bytes: u64) {
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

    fn open(&self) -> haar_store::Result<Box<dyn FieldStore>> {
        Ok(match &self.target {
            Target::Local { backend, options } => {
                Box::new(Store::with_options(backend.clone(), options.clone()))
            }
            Target::Front { open, .. } => open()?,
        })
    }

    /// A request resolved as `Store::list` resolves it (keywords no rule uses dropped).
    fn resolve(&self, req: &Request) -> Result<Request, String> {
        let o = self.target.options();
        let mut r = req
            .resolve(&o.schema, &o.context)
            .map_err(|e| format!("request {req}: {e}"))?;
        let known = o.schema.keywords();
        r.params.retain(|p| known.contains(&p.keyword.as_str()));
        Ok(r)
    }
}

/// Archives bytes whose sender computed `crc` into `store` and returns the key as it will be
/// listed (for the flush event). The store checks `crc` against the checksum it computes while
/// storing, so the bytes are read once.
fn archive_checked(
    store: &mut dyn FieldStore,
    key: &Key,
    data: &[u8],
    crc: u32,
) -> haar_store::Result<Key> {
    let split = store.split(key)?;
    store.archive_split(&split, data, Some(crc))?;
    Ok(split.full())
}

/// A bound server, ready to run.
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port; see [`Server::local_addr`]).
    pub fn bind(
        addr: impl ToSocketAddrs,
        target: Target,
        config: ServerConfig,
    ) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let name = listener.local_addr()?.to_string();
        let metrics = Arc::new(Metrics::default());
        if let Target::Local { backend, options } = &target {
            metrics.set_usage_probe(usage_probe(backend.clone(), options.clone()));
        }
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                target,
                config,
                deadlines: Deadlines {
                    armed: Mutex::new(HashMap::new()),
                    cond: Condvar::new(),
                    next: AtomicU64::new(0),
                },
                open: AtomicUsize::new(0),
                prelogin: Mutex::new(PreLogin::default()),
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
            }),
        })
    }

    /// What this server counts, for [`crate::metrics::serve_metrics`] (the store usage
    /// gauges of a local store found at each scrape).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// What is served (for the start-up line).
    pub fn describe(&self) -> String {
        self.shared.target.describe()
    }

    /// Accepts connections forever, one thread each. Fails only if the deadline thread cannot
    /// be started; after that, running out of descriptors, memory or threads refuses
    /// connections (each logged) but never ends the server.
    pub fn run(self) -> io::Result<()> {
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("haar-deadlines".into())
            .spawn(move || shared.deadlines.reap())?;
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(s) => s,
                Err(e) => {
                    let exhausted = matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    );
                    if exhausted {
                        // The connection stays in the backlog: wait for descriptors to be freed
                        // instead of spinning on the same error.
                        tracing::warn!(
                            listener = %self.shared.name,
                            error = %e,
                            "accept failed; retrying in 100 ms (raise `ulimit -n` or lower max_connections)"
                        );
                        std::thread::sleep(Duration::from_millis(100));
                    } else {
                        // A connection reset before it was accepted, and the like.
                        tracing::warn!(listener = %self.shared.name, error = %e, "accept failed");
                    }
                    continue;
                }
            };
            let slot = match self.shared.admit(&stream, peer) {
                Ok(slot) => slot,
                Err(reason) => {
                    refuse_at_accept(&self.shared, stream, peer, &reason);
                    continue;
                }
            };
            let shared = self.shared.clone();
            let dropped = slot.dropped.clone();
            let spawned = std::thread::Builder::new()
                .name("haar-conn".into())
                .spawn(move || {
                    // Every event of the connection carries its peer and, once logged in, its
                    // token's kind. The span's level is ERROR so that any filter that lets an
                    // event through keeps the span's fields on it.
                    let span = tracing::error_span!(
                        "connection",
                        %peer,
                        token = tracing::field::Empty
                    );
                    let _in = span.enter();
                    match connection(&shared, stream, slot) {
                        Ok(()) => tracing::debug!(%peer, "connection closed"),
                        // Logged (once per source) when it was dropped.
                        Err(e) if dropped.load(Ordering::SeqCst) => {
                            tracing::debug!(%peer, error = %e, "connection closed: dropped before login")
                        }
                        Err(e) => tracing::warn!(%peer, error = %e, "connection closed"),
                    }
                });
            if let Err(e) = spawned {
                // The closure (socket and slot) is dropped: the connection is closed and
                // uncounted.
                tracing::error!(
                    %peer,
                    error = %e,
                    "refused: cannot start a thread for the connection; lower max_connections"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Runs on a background thread (tests, embedding); returns the bound address.
    pub fn spawn(self) -> io::Result<SocketAddr> {
        let addr = self.local_addr()?;
        std::thread::Builder::new()
            .name("haar-accept".into())
            .spawn(move || self.run())?;
        Ok(addr)
    }
}

/// Binds and serves forever.
pub fn serve(addr: impl ToSocketAddrs, target: Target, config: ServerConfig) -> io::Result<()> {
    Server::bind(addr, target, config)?.run()
}

/// Refuses a connection over a limit without a thread: one REFUSED frame if it can be written
/// at once (plain TCP only: a TLS client could not read it), then close.
fn refuse_at_accept(shared: &Shared, stream: TcpStream, peer: SocketAddr, reason: &str) {
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
        });
        if let Ok(frame) = protocol::encode(Kind::Refused, FLAG_END, 0, &meta, &[]) {
            let _ = (&stream).write_all(&frame);
            let _ = stream.shutdown(std::net::Shutdown::Write);
        }
    }
}

fn refuse(
    shared: &Shared,
    cause: RefusalCause,
    wire: &mut Wire,
    id: u64,
    reason: String,
) -> Result<(), WireError> {
    shared.metrics.refused(cause);
    let peer = wire
        .socket()
        .peer_addr()
        .map_or_else(|_| "unknown".to_string(), |a| a.to_string());
    tracing::warn!(%peer, %reason, "refused");
    wire.send(
        Kind::Refused,
        FLAG_END,
        id,
        &to_meta(&Refused { reason }),
        &[],
    )?;
    wire.flush()?;
    Ok(())
}

/// The handshake: HELLO → CHALLENGE → AUTH → WELCOME (or REFUSED and close).
fn handshake(shared: &Shared, wire: &mut Wire) -> Result<Option<Access>, WireError> {
    let mut f = Frame::default();
    wire.read(Limits::PRELOGIN, &mut f)?;
    if f.kind() != Some(Kind::Hello) {
        refuse(
            shared,
            RefusalCause::NotAHaarClient,
            wire,
            f.id,
            "expected HELLO: the peer is not a haar client".into(),
        )?;
        return Ok(None);
    }
    let hello: Hello = match f.meta() {
        Ok(h) => h,
        Err(e) => {
            refuse(
                shared,
                RefusalCause::NotAHaarClient,
                wire,
                f.id,
                e.to_string(),
            )?;
            return Ok(None);
        }
    };
    if hello.version != protocol::VERSION {
        refuse(
            shared,
            RefusalCause::VersionMismatch,
            wire,
            f.id,
            format!(
                "protocol version mismatch: client {} speaks version {}, server {} speaks version {}; use the same haar release on both ends",
                hello.client,
                hello.version,
                shared.name,
                protocol::VERSION
            ),
        )?;
        return Ok(None);
    }
    let server_nonce = auth::nonce();
    // Plain TCP tags its frames after the login when the client asks or this server's rule
    // says so (design §8); TLS protects its records itself.
    let tags = auth::TagsAgreed {
        asked: hello.tags,
        granted: shared.config.tls.is_none()
            && (hello.tags
                || shared
                    .config
                    .frame_tags
                    .wanted(wire.socket().peer_addr().ok())),
    };
    let challenge = Challenge {
        version: protocol::VERSION,
        server: format!("haar {} at {}", env!("CARGO_PKG_VERSION"), shared.name),
        nonce: server_nonce.clone(),
        tags: tags.granted,
    };
    wire.send(Kind::Challenge, 0, f.id, &to_meta(&challenge), &[])?;
    wire.flush()?;
    wire.read(Limits::PRELOGIN, &mut f)?;
    let proof = match (f.kind(), f.meta::<protocol::Auth>()) {
        (Some(Kind::Auth), Ok(a)) => a.proof,
        _ => {
            refuse(
                shared,
                RefusalCause::NotAHaarClient,
                wire,
                f.id,
                "expected AUTH".into(),
            )?;
            return Ok(None);
        }
    };
    let Some((access, token)) =
        shared
            .config
            .tokens
            .check(&proof, &server_nonce, &hello.nonce, tags)
    else {
        refuse(
            shared,
            RefusalCause::TokenRejected,
            wire,
            f.id,
            "token rejected: check HAAR_TOKEN (or --token-file) on the client against the server's \
             (a handshake altered in flight is refused the same way)"
                .into(),
        )?;
        return Ok(None);
    };
    // The store's whereabouts only to a client on this machine, and to a reader only what
    // reading needs (design §8).
    let same_host = match (&hello.host, boot_id()) {
        (Some(theirs), Some(ours)) => {
            auth::constant_time_eq(theirs, &auth::host_proof(&ours, &hello.nonce))
        }
        _ => false,
    };
    let local = match &shared.config.local {
        Some(_) if !same_host => None,
        Some(offer) if access == Access::ReadOnly => offer.for_reader(),
        offer => offer.clone(),
    };
    let welcome = protocol::Welcome {
        access,
        proof: auth::server_proof(token, &hello.nonce, &server_nonce, tags),
        local,
    };
    // From WELCOME on, every frame of both directions is tagged when agreed (design §8).
    if tags.granted {
        let keys = auth::frame_keys(token, &server_nonce, &hello.nonce);
        wire.seal(
            protocol::Sealer::new(keys.server_to_client),
            protocol::Sealer::new(keys.client_to_server),
        );
    }
    wire.send(Kind::Welcome, 0, f.id, &to_meta(&welcome), &[])?;
    wire.flush()?;
    Ok(Some(access))
}

/// True when the first byte from the peer is the start of a plain haar frame (`H` of `HAR1`)
/// rather than of a TLS record.
fn plain_haar_client(stream: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first), Ok(1)) && first[0] == protocol::MAGIC[0]
}

fn connection(shared: &Arc<Shared>, stream: TcpStream, mut slot: Slot) -> Result<(), WireError> {
    let limits = shared.config.limits;
    let deadline = Instant::now() + limits.handshake_deadline;
    stream.set_nodelay(true)?;
    // Backstops: the deadline below ends the whole handshake.
    stream.set_read_timeout(Some(limits.handshake_deadline))?;
    stream.set_write_timeout(Some(limits.handshake_deadline))?;
    let fd = stream.as_raw_fd();
    // A TLS record starts with 0x16; a plain HELLO with the magic's 'H'. Tell a plain client
    // of a TLS server what to do instead of failing its handshake with a bare end of file.
    let plain_to_tls = shared.config.tls.is_some() && plain_haar_client(&stream);
    let conn: Box<dyn Conn> = match &shared.config.tls {
        Some(tls) if !plain_to_tls => {
            let sc = rustls::ServerConnection::new(tls.clone())
                .map_err(|e| io::Error::other(format!("TLS: {e}")))?;
            Box::new(rustls::StreamOwned::new(sc, stream))
        }
        _ => Box::new(stream),
    };
    let mut wire = Wire::new(conn);
    // Declared after `wire`, so disarmed before the socket is closed.
    let armed = shared.deadlines.arm(fd, deadline);
    if plain_to_tls {
        let mut f = Frame::default();
        let id = match wire.read(Limits::PRELOGIN, &mut f) {
            Ok(()) => f.id,
            Err(_) => 0,
        };
        refuse(
            shared,
            RefusalCause::TlsRequired,
            &mut wire,
            id,
            format!(
                "server {} accepts TLS only: connect with --tls-ca (the CA certificate that signed the server's)",
                shared.name
            ),
        )?;
        return Ok(());
    }
    let access = match handshake(shared, &mut wire) {
        Ok(a) => a,
        Err(e) if armed.expired() || timed_out(&e) => {
            shared.metrics.refused(RefusalCause::HandshakeTimeout);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "disconnected: no login within the handshake deadline of {:?} ({e})",
                    limits.handshake_deadline
                ),
            )
            .into());
        }
        Err(e) => return Err(e),
    };
    drop(armed);
    let Some(access) = access else {
        return Ok(());
    };
    slot.logged_in();
    tracing::Span::current().record("token", token_name(access));
    if let Ok(peer) = wire.socket().peer_addr() {
        tracing::info!(%peer, ?access, tls = shared.config.tls.is_some(), "logged in");
    }
    wire.set_read_timeout(Some(limits.idle_timeout))?;
    wire.set_write_timeout(Some(limits.write_timeout))?;
    let store = shared.open().map_err(|e| io::Error::other(e.to_string()))?;
    Session {
        shared: shared.clone(),
        wire,
        access,
        store,
        pending: Vec::new(),
        deferred: Vec::new(),
        deferred_code: 0,
        charged: 0,
    }
    .run()
    .map_err(|e| match e {
        // Reads that time out are reported as idle by `run`; what is left is a reply the
        // client stopped taking.
        WireError::Io(io) if io.kind() == io::ErrorKind::WouldBlock => io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "closed: the client took no byte of a reply for the write timeout of {:?} ({io})",
                limits.write_timeout
            ),
        )
        .into(),
        e => e,
    })
}

/// True for a socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO` report `EAGAIN`).
fn timed_out(e: &WireError) -> bool {
    matches!(e, WireError::Io(io) if matches!(io.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
}

/// Why a logged-in connection may not send a frame with this header, before its body is
/// read: field bytes only on ARCHIVE, and no writing request on a read-only token.
fn refused_header(access: Access, header: &protocol::Header) -> Option<ErrorMeta> {
    let kind = Kind::from_u8(header.kind);
    let name = kind.map(Kind::name).unwrap_or("unknown");
    if access != Access::ReadWrite && kind.is_some_and(Kind::writes) {
        return Some(ErrorMeta {
            message: format!(
                "{name} refused: this connection's token is read-only; use the read-write token (the connection is closed)"
            ),
            exit_code: 1,
        });
    }
    if header.data_len > 0 && kind != Some(Kind::Archive) {
        return Some(ErrorMeta {
            message: format!(
                "{name} frame announcing {} data bytes refused: only ARCHIVE carries field bytes (the connection is closed)",
                header.data_len
            ),
            exit_code: 1,
        });
    }
    None
}

/// A field archived on a connection and not yet flushed.
struct Pending {
    /// The key as it will be listed.
    key: Key,
    length: u64,
    crc: u32,
}

struct Session {
    shared: Arc<Shared>,
    wire: Wire,
    access: Access,
    store: Box<dyn FieldStore>,
    /// Fields archived since the last flush: the next flush's events.
    pending: Vec<Pending>,
    /// ARCHIVE failures since the last flush (reported by the next FLUSH).
    deferred: Vec<String>,
    deferred_code: i32,
    /// Bytes charged to the token's buffer share ([`Shared::charge`]).
    charged: u64,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.uncharge(self.access, self.charged);
    }
}

fn store_error(e: &haar_store::Error) -> ErrorMeta {
    ErrorMeta::from_error(e)
}

impl Session {
    fn run(mut self) -> Result<(), WireError> {
        let mut f = Frame::default();
        loop {
            // Large buffers of the previous frame are not kept while the connection idles;
            // what is kept stays charged to the token.
            if f.data.capacity() > RETAIN {
                f.data = Vec::new();
            }
            if f.meta.capacity() > RETAIN {
                f.meta = Vec::new();
            }
            self.settle((f.data.capacity() + f.meta.capacity()) as u64);
            match self.read(&mut f) {
                Ok(()) => {}
                Err(WireError::Closed) => return Ok(()),
                Err(e) if timed_out(&e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "closed: no request for the idle timeout of {:?}",
                            self.shared.config.limits.idle_timeout
                        ),
                    )
                    .into());
                }
                Err(WireError::Frame(e)) => {
                    // Out of step: say why, then close (the stream cannot be resynchronised).
                    let m = ErrorMeta {
                        message: format!("bad frame from client: {e}"),
                        exit_code: 3,
                    };
                    let _ = self.wire.send(Kind::Error, FLAG_END, 0, &to_meta(&m), &[]);
                    let _ = self.wire.flush();
                    self.linger();
                    return Err(e.into());
                }
                Err(e) => return Err(e),
            }
            let id = f.id;
            let kind = f.kind();
            let started = Instant::now();
            let metrics = self.shared.metrics.clone();
            if kind == Some(Kind::Archive) {
                let ok = self.archive(&f);
                metrics.received(Kind::Archive, f.data.len() as u64);
                metrics.request(Kind::Archive, ok, started.elapsed().as_secs_f64());
                continue;
            }
            if kind == Some(Kind::Watch) {
                metrics.request(Kind::Watch, true, 0.0);
                return self.watch(&f);
            }
            let reply = match kind {
                Some(Kind::Flush) => self.flush(id),
                Some(
                    k @ (Kind::Retrieve
                    | Kind::RetrieveKeys
                    | Kind::Problems
                    | Kind::List
                    | Kind::Axes
                    | Kind::Stats
                    | Kind::Wipe
                    | Kind::Purge),
                ) => self.request(k, &f),
                _ => Err(ErrorMeta {
                    message: format!(
                        "unknown or unexpected request kind {} ({})",
                        f.kind,
                        kind.map(Kind::name).unwrap_or("unknown")
                    ),
                    exit_code: 1,
                }),
            };
            let ok = reply.is_ok();
            match reply {
                Ok(()) => {}
                Err(m) => self
                    .wire
                    .send(Kind::Error, FLAG_END, id, &to_meta(&m), &[])?,
            }
            self.wire.flush()?;
            if let Some(k) = kind {
                metrics.request(k, ok, started.elapsed().as_secs_f64());
            }
        }
    }

    /// Reads the next frame; a header this connection may not send, or whose frame its
    /// token's buffer share cannot hold, is answered with ERROR and the connection closed
    /// without reading the body.
    fn read(&mut self, f: &mut Frame) -> Result<(), WireError> {
        let (h, header) = self.wire.read_header(Limits::SESSION)?;
        let refused = refused_header(self.access, &header).or_else(|| {
            let size = u64::from(header.meta_len) + u64::from(header.data_len);
            self.hold(size).err().map(|message| ErrorMeta {
                message: format!("{message} (the connection is closed)"),
                exit_code: 3,
            })
        });
        if let Some(m) = refused {
            let message = m.message.clone();
            self.wire
                .send(Kind::Error, FLAG_END, header.id, &to_meta(&m), &[])?;
            self.wire.flush()?;
            self.linger();
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, message).into());
        }
        self.wire.read_body(&h, &header, f)
    }

    /// Makes what this connection holds charged to its token at least `size` bytes (a frame
    /// of that size), if it is more than [`SMALL_FRAME`].
    fn hold(&mut self, size: u64) -> Result<(), String> {
        if size <= SMALL_FRAME || size <= self.charged {
            return Ok(());
        }
        let peer = (self.wire.socket().peer_addr()).map_or_else(|_| "?".into(), |a| a.to_string());
        self.shared
            .charge(self.access, size - self.charged, &peer)?;
        self.charged = size;
        Ok(())
    }

    /// After a frame: what is charged falls to what the kept buffers hold.
    fn settle(&mut self, kept: u64) {
        let kept = if kept <= SMALL_FRAME { 0 } else { kept };
        if kept < self.charged {
            self.shared.uncharge(self.access, self.charged - kept);
            self.charged = kept;
        }
    }

    /// Before closing a connection whose peer may still be sending: stops writing, then
    /// discards up to 1 MiB for at most a second, so the close does not reset the connection
    /// (which could discard the ERROR just sent before the peer reads it).
    fn linger(&mut self) {
        let sock = self.wire.socket();
        let _ = sock.shutdown(std::net::Shutdown::Write);
        let _ = sock.set_read_timeout(Some(Duration::from_secs(1)));
        let until = Instant::now() + Duration::from_secs(1);
        let mut sock = sock;
        let mut sink = [0u8; 8192];
        let mut left = 1usize << 20;
        while left > 0 && Instant::now() < until {
            match sock.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    }

    fn defer(&mut self, message: String, code: i32) {
        if self.deferred.len() < 20 {
            self.deferred.push(message);
        } else if self.deferred.len() == 20 {
            self.deferred.push("… more".into());
        }
        self.deferred_code = self.deferred_code.max(code);
    }

    /// Stores one ARCHIVE's field (unflushed); false when it failed (reported by the next
    /// FLUSH).
    fn archive(&mut self, f: &Frame) -> bool {
        // A read-only connection never gets here: its ARCHIVE is refused from the header.
        let meta: FieldMeta = match f.meta() {
            Ok(m) => m,
            Err(e) => {
                self.defer(e.to_string(), 1);
                return false;
            }
        };
        match archive_checked(self.store.as_mut(), &meta.key, &f.data, meta.crc) {
            Ok(full) => {
                self.pending.push(Pending {
                    key: full,
                    length: f.data.len() as u64,
                    crc: meta.crc,
                });
                true
            }
            Err(e) => {
                self.defer(e.to_string(), protocol::class_code(e.class()));
                false
            }
        }
    }

    fn flush(&mut self, id: u64) -> Result<(), ErrorMeta> {
        // A key archived twice before one flush is one flushed field: one event (the last).
        let mut last: std::collections::HashMap<&Key, usize> = std::collections::HashMap::new();
        for (i, p) in self.pending.iter().enumerate() {
            last.insert(&p.key, i);
        }
        if last.len() < self.pending.len() {
            let keep: Vec<bool> = (0..self.pending.len())
                .map(|i| last.get(&self.pending[i].key) == Some(&i))
                .collect();
            let mut it = keep.into_iter();
            self.pending.retain(|_| it.next().unwrap_or(true));
        }
        let n = self.pending.len() as u64;
        let result = {
            let _gate = self.shared.gate.read().unwrap();
            let r = self.store.flush();
            if r.is_ok() {
                self.shared.events.append(self.pending.drain(..));
            }
            r
        };
        self.pending.clear();
        let deferred = std::mem::take(&mut self.deferred);
        let code = std::mem::replace(&mut self.deferred_code, 0);
        match result {
            Err(e) => {
                let mut m = store_error(&e);
                if !deferred.is_empty() {
                    m.message.push_str(&format!(
                        "; earlier archive failures: {}",
                        deferred.join("; ")
                    ));
                }
                Err(m)
            }
            Ok(()) if !deferred.is_empty() => Err(ErrorMeta {
                message: format!(
                    "{} archive(s) failed since the last flush and were not stored: {}; the other {n} field(s) were flushed",
                    deferred.len(),
                    deferred.join("; ")
                ),
                exit_code: code,
            }),
            Ok(()) => {
                self.wire
                    .send(
                        Kind::Ok,
                        FLAG_END,
                        id,
                        &to_meta(&FlushOk { fields: n }),
                        &[],
                    )
                    .map_err(|e| ErrorMeta {
                        message: e.to_string(),
                        exit_code: 3,
                    })?;
                Ok(())
            }
        }
    }

    fn parse(&self, f: &Frame) -> Result<(Request, bool), ErrorMeta> {
        let m: RequestMeta = f.meta().map_err(|e| ErrorMeta {
            message: e.to_string(),
            exit_code: 1,
        })?;
        let req = Request::parse(&m.request).map_err(|e| ErrorMeta {
            message: format!("request {:?}: {e}", m.request),
            exit_code: 1,
        })?;
        Ok((req, m.doit))
    }

    fn end(&mut self, id: u64, v: serde_json::Value) -> Result<(), ErrorMeta> {
        self.wire
            .send(Kind::End, FLAG_END, id, &to_meta(&v), &[])
            .map_err(|e| ErrorMeta {
                message: e.to_string(),
                exit_code: 3,
            })
    }

    /// RETRIEVE_KEYS: the fields of many keys as one reply stream.
    fn retrieve_keys(&mut self, f: &Frame) -> Result<(), ErrorMeta> {
        let m: KeysMeta = f.meta().map_err(|e| ErrorMeta {
            message: e.to_string(),
            exit_code: 1,
        })?;
        let (id, wire) = (f.id, &mut self.wire);
        let mut sent = 0u64;
        let report = self.store.retrieve_keys(&m.keys, &mut |key, data, crc| {
            send_field(wire, id, key, data, crc)?;
            sent += data.len() as u64;
            Ok(())
        });
        self.shared.metrics.sent(Kind::RetrieveKeys, sent);
        let report = report.map_err(|e| store_error(&e))?;
        self.end(id, json!(RetrieveEnd::from(&report)))
    }

    fn request(&mut self, kind: Kind, f: &Frame) -> Result<(), ErrorMeta> {
        if kind == Kind::RetrieveKeys {
            return self.retrieve_keys(f);
        }
        let (req, doit) = self.parse(f)?;
        let id = f.id;
        // WIPE and PURGE of a read-only connection were refused from their header.
        let e = |e: haar_store::Error| store_error(&e);
        match kind {
            Kind::Retrieve => {
                let wire = &mut self.wire;
                let mut sent = 0u64;
                let report = self.store.retrieve(&req, &mut |key, data, crc| {
                    send_field(wire, id, key, data, crc)?;
                    sent += data.len() as u64;
                    Ok(())
                });
                self.shared.metrics.sent(Kind::Retrieve, sent);
                let report = report.map_err(e)?;
                self.end(id, json!(RetrieveEnd::from(&report)))
            }
            Kind::List => {
                let fields: Vec<ListedField> = self
                    .store
                    .list(&req)
                    .map_err(e)?
                    .iter()
                    .map(ListedField::from)
                    .collect();
                self.end(id, json!({ "fields": fields }))
            }
            Kind::Axes => {
                let axes = self.store.axes(&req).map_err(e)?;
                self.end(id, json!({ "axes": axes }))
            }
            Kind::Problems => {
                let problems = self.store.problems(&req).map_err(e)?;
                self.end(id, json!({ "problems": problems }))
            }
            Kind::Stats => {
                let dbs: Vec<StatsEntry> = self
                    .store
                    .stats(&req)
                    .map_err(e)?
                    .into_iter()
                    .map(StatsEntry::from)
                    .collect();
                self.end(id, json!({ "databases": dbs }))
            }
            Kind::Wipe => {
                let r = self.store.wipe(&req, doit).map_err(e)?;
                let w = WipeEnd {
                    databases: r.databases,
                    fields: r.fields,
                    bytes: r.bytes,
                };
                self.end(id, json!({ "report": w }))
            }
            Kind::Purge => {
                let r = self.store.purge(&req, doit).map_err(e)?;
                let p = PurgeEnd {
                    databases: r.databases,
                    dropped_fields: r.dropped_fields,
                    dropped_bytes: r.dropped_bytes,
                    freed_bytes: r.freed_bytes,
                };
                self.end(id, json!({ "report": p }))
            }
            _ => unreachable!("request() is called for request kinds only"),
        }
    }

    /// WATCH: replay what is flushed, then stream each new flush; the connection is the
    /// stream's from here on.
    fn watch(mut self, f: &Frame) -> Result<(), WireError> {
        let id = f.id;
        let prepared = self.parse(f).and_then(|(req, _)| {
            let resolved = self.shared.resolve(&req).map_err(|message| ErrorMeta {
                message,
                exit_code: 1,
            })?;
            let _gate = self.shared.gate.write().unwrap();
            let start = self.shared.events.inner.lock().unwrap().next();
            let listed = self.store.list(&req).map_err(|e| store_error(&e))?;
            Ok((resolved, start, listed))
        });
        let (resolved, start, listed) = match prepared {
            Ok(p) => p,
            Err(m) => {
                self.wire
                    .send(Kind::Error, FLAG_END, id, &to_meta(&m), &[])?;
                self.wire.flush()?;
                return Ok(());
            }
        };
        for field in &listed {
            let m = EventMeta {
                key: field.key(),
                length: field.data.length,
                seq: start,
                replay: true,
                crc: Some(field.data.crc),
            };
            self.wire.send(Kind::Event, 0, id, &to_meta(&m), &[])?;
        }
        self.wire.flush()?;
        drop(listed);
        let mut cursor = start;
        let log = &self.shared.events;
        loop {
            let batch: Vec<(u64, Arc<Ev>)> = {
                let mut g = log.inner.lock().unwrap();
                if g.next() <= cursor {
                    g = log.cond.wait_timeout(g, HEARTBEAT).unwrap().0;
                }
                if cursor < g.first {
                    let m = ErrorMeta {
                        message: format!(
                            "this watcher fell more than {EVENT_LOG_CAPACITY} events behind and lost some; watch again (a new watch replays everything flushed)"
                        ),
                        exit_code: 3,
                    };
                    drop(g);
                    self.wire
                        .send(Kind::Error, FLAG_END, id, &to_meta(&m), &[])?;
                    self.wire.flush()?;
                    return Ok(());
                }
                let skip = (cursor - g.first) as usize;
                g.events
                    .iter()
                    .skip(skip)
                    .enumerate()
                    .map(|(i, e)| (cursor + i as u64, e.clone()))
                    .collect()
            };
            if batch.is_empty() {
                self.wire.send(Kind::Heartbeat, 0, id, b"{}", &[])?;
            }
            for (seq, ev) in &batch {
                if resolved.matches(&ev.key) {
                    let m = EventMeta {
                        key: ev.key.clone(),
                        length: ev.length,
                        seq: *seq,
                        replay: false,
                        crc: Some(ev.crc),
                    };
                    self.wire.send(Kind::Event, 0, id, &to_meta(&m), &[])?;
                }
            }
            cursor += batch.len() as u64;
            self.wire.flush()?;
        }
    }
}

/// Sends one retrieved field; the store verified the bytes against `crc` just now.
fn send_field(
    wire: &mut Wire,
    id: u64,
    key: &Key,
    data: &[u8],
    crc: Option<u32>,
) -> haar_store::Result<()> {
    let m = FieldMeta {
        key: key.clone(),
        crc: crc.unwrap_or_else(|| haar_persist::crc32c(data)),
    };
    wire.send(Kind::Field, 0, id, &to_meta(&m), data)
        .map_err(|e| {
            let peer =
                (wire.socket().peer_addr()).map_or_else(|_| "client".into(), |a| a.to_string());
            haar_store::Error::net("send to", peer, io::Error::other(e))
        })
}

/// What the store usage gauges of a local store's server are found with at a scrape: the
/// figures `haar info` reports (every database's live and dead bytes, a pmem pool's heap)
/// and `statvfs` of each root or pool file. One store is kept between scrapes so that its
/// catalogues are not reopened each time.
fn usage_probe(backend: Arc<dyn Backend>, options: StoreOptions) -> crate::metrics::UsageProbe {
    use crate::metrics::{PoolUsage, Usage};
    let store = Mutex::new(Store::with_options(backend, options));
    Box::new(move || {
        let store = store.lock().unwrap_or_else(|p| p.into_inner());
        let dbs = match store.stats(&Request::default()) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: cannot add up the store's usage");
                return None;
            }
        };
        let info = store.backend().info();
        let pool = info["heap_used_bytes"]
            .as_u64()
            .map(|heap_used_bytes| PoolUsage {
                size_bytes: info["pool_bytes"].as_u64().unwrap_or(0),
                heap_used_bytes,
                free_bytes: info["free_bytes"].as_u64().unwrap_or(0),
            });
        let paths: Vec<String> = match (&info["roots"], &info["pool"]) {
            (serde_json::Value::Array(roots), _) => roots
                .iter()
                .filter_map(|r| r.as_str().map(String::from))
                .collect(),
            (_, serde_json::Value::String(pool)) => vec![pool.clone()],
            _ => Vec::new(),
        };
        let disks = paths
            .into_iter()
            .filter_map(|p| {
                let (size, free) = statvfs_bytes(&p)?;
                Some((p, size, free))
            })
            .collect();
        Some(Usage {
            databases: dbs.len() as u64,
            fields: dbs.iter().map(|d| d.fields).sum(),
            live_bytes: dbs.iter().map(|d| d.bytes).sum(),
            dead_bytes: dbs.iter().map(|d| d.dead_bytes).sum(),
            pool,
            disks,
        })
    })
}

/// Size and bytes free to unprivileged writers of the file system holding `path`.
fn statvfs_bytes(path: &str) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: a valid C string and a zeroed struct of the right type.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some((st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize))
}
