//! `haar serve`: one server per node over a local store (design §7–§8).
//!
//! A thread per connection, blocking I/O: each connection owns its own store handle (a
//! `Store` over the shared backend), so a client's archives are private until its FLUSH, and
//! reads go straight to the shared backend. The server owns the flush-event log that WATCH
//! streams from; it never touches the store's files itself.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use haar_core::Key;
use haar_core::request::Request;
use haar_store::{Backend, FieldStore, Store, StoreOptions};
use serde_json::json;

use crate::auth::{self, Tokens};
use crate::protocol::{
    self, Access, Challenge, ErrorMeta, EventMeta, FLAG_END, FieldMeta, FlushOk, Frame, Hello,
    KeysMeta, Kind, Limits, ListedField, LocalOffer, PurgeEnd, Refused, RequestMeta, RetrieveEnd,
    StatsEntry, WipeEnd, WireError, to_meta,
};
use crate::transport::{Conn, Wire};

/// How often an idle WATCH stream carries a HEARTBEAT (clients give up after 3 missed).
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// Events kept in memory for watchers that are catching up.
pub const EVENT_LOG_CAPACITY: usize = 1 << 18;
/// Time a peer has to complete the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
}

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

struct Shared {
    target: Target,
    config: ServerConfig,
    events: EventLog,
    /// Flushes hold it shared while they commit and log their events; a new WATCH holds it
    /// exclusively while it notes the log position and lists what is already flushed, so every
    /// flushed field is either in that listing or after that position, never both.
    gate: RwLock<()>,
    name: String,
}

impl Shared {
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
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                target,
                config,
                events: EventLog {
                    inner: Mutex::new(LogInner {
                        events: VecDeque::new(),
                        first: 0,
                    }),
                    cond: Condvar::new(),
                },
                gate: RwLock::new(()),
                name,
            }),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// What is served (for the start-up line).
    pub fn describe(&self) -> String {
        self.shared.target.describe()
    }

    /// Accepts connections forever, one thread each.
    pub fn run(self) -> io::Result<()> {
        for stream in self.listener.incoming() {
            let stream = match stream {
                Ok(s) => s,
                // Out of descriptors or a connection reset before accept: keep serving.
                Err(e) => {
                    eprintln!("haar serve: accept: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let shared = self.shared.clone();
            std::thread::Builder::new()
                .name("haar-conn".into())
                .spawn(move || {
                    let peer = stream
                        .peer_addr()
                        .map(|a| a.to_string())
                        .unwrap_or_else(|_| "?".into());
                    if let Err(e) = connection(&shared, stream) {
                        eprintln!("haar serve: {peer}: {e}");
                    }
                })?;
        }
        Ok(())
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

fn refuse(wire: &mut Wire, id: u64, reason: String) -> Result<(), WireError> {
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
    wire.read(Limits::HANDSHAKE, &mut f)?;
    if f.kind() != Some(Kind::Hello) {
        refuse(
            wire,
            f.id,
            "expected HELLO: the peer is not a haar client".into(),
        )?;
        return Ok(None);
    }
    let hello: Hello = match f.meta() {
        Ok(h) => h,
        Err(e) => {
            refuse(wire, f.id, e.to_string())?;
            return Ok(None);
        }
    };
    if hello.version != protocol::VERSION {
        refuse(
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
    let challenge = Challenge {
        version: protocol::VERSION,
        server: format!("haar {} at {}", env!("CARGO_PKG_VERSION"), shared.name),
        nonce: server_nonce.clone(),
    };
    wire.send(Kind::Challenge, 0, f.id, &to_meta(&challenge), &[])?;
    wire.flush()?;
    wire.read(Limits::HANDSHAKE, &mut f)?;
    let proof = match (f.kind(), f.meta::<protocol::Auth>()) {
        (Some(Kind::Auth), Ok(a)) => a.proof,
        _ => {
            refuse(wire, f.id, "expected AUTH".into())?;
            return Ok(None);
        }
    };
    let Some((access, token)) = shared
        .config
        .tokens
        .check(&proof, &server_nonce, &hello.nonce)
    else {
        refuse(
            wire,
            f.id,
            "token rejected: check HAAR_TOKEN (or --token-file) on the client against the server's"
                .into(),
        )?;
        return Ok(None);
    };
    let welcome = protocol::Welcome {
        access,
        proof: auth::server_proof(token, &hello.nonce, &server_nonce),
        local: shared.config.local.clone(),
    };
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

fn connection(shared: &Arc<Shared>, stream: TcpStream) -> Result<(), WireError> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let conn: Box<dyn Conn> = match &shared.config.tls {
        Some(_) if plain_haar_client(&stream) => {
            // A TLS record starts with 0x16; a plain HELLO with the magic's 'H'. Tell the
            // client what to do instead of failing its handshake with a bare end of file.
            let mut wire = Wire::new(Box::new(stream));
            let mut f = Frame::default();
            let id = match wire.read(Limits::HANDSHAKE, &mut f) {
                Ok(()) => f.id,
                Err(_) => 0,
            };
            refuse(
                &mut wire,
                id,
                format!(
                    "server {} accepts TLS only: connect with --tls-ca (the CA certificate that signed the server's)",
                    shared.name
                ),
            )?;
            return Ok(());
        }
        Some(tls) => {
            let sc = rustls::ServerConnection::new(tls.clone())
                .map_err(|e| io::Error::other(format!("TLS: {e}")))?;
            Box::new(rustls::StreamOwned::new(sc, stream))
        }
        None => Box::new(stream),
    };
    let mut wire = Wire::new(conn);
    let Some(access) = handshake(shared, &mut wire)? else {
        return Ok(());
    };
    wire.set_read_timeout(None)?;
    let store = shared.open().map_err(|e| io::Error::other(e.to_string()))?;
    Session {
        shared: shared.clone(),
        wire,
        access,
        store,
        pending: Vec::new(),
        deferred: Vec::new(),
        deferred_code: 0,
    }
    .run()
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
}

fn store_error(e: &haar_store::Error) -> ErrorMeta {
    ErrorMeta::from_error(e)
}

impl Session {
    fn run(mut self) -> Result<(), WireError> {
        let mut f = Frame::default();
        loop {
            match self.wire.read(Limits::SESSION, &mut f) {
                Ok(()) => {}
                Err(WireError::Closed) => return Ok(()),
                Err(WireError::Frame(e)) => {
                    // Out of step: say why, then close (the stream cannot be resynchronised).
                    let m = ErrorMeta {
                        message: format!("bad frame from client: {e}"),
                        exit_code: 3,
                    };
                    let _ = self.wire.send(Kind::Error, FLAG_END, 0, &to_meta(&m), &[]);
                    let _ = self.wire.flush();
                    return Err(e.into());
                }
                Err(e) => return Err(e),
            }
            let id = f.id;
            let kind = f.kind();
            if kind == Some(Kind::Archive) {
                self.archive(&f);
                continue;
            }
            if kind == Some(Kind::Watch) {
                return self.watch(&f);
            }
            let reply = match kind {
                Some(Kind::Flush) => self.flush(id),
                Some(
                    k @ (Kind::Retrieve
                    | Kind::RetrieveKeys
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
            match reply {
                Ok(()) => {}
                Err(m) => self
                    .wire
                    .send(Kind::Error, FLAG_END, id, &to_meta(&m), &[])?,
            }
            self.wire.flush()?;
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

    fn archive(&mut self, f: &Frame) {
        if self.access != Access::ReadWrite {
            self.defer(
                "ARCHIVE refused: this connection's token is read-only; use the read-write token"
                    .into(),
                1,
            );
            return;
        }
        let meta: FieldMeta = match f.meta() {
            Ok(m) => m,
            Err(e) => return self.defer(e.to_string(), 1),
        };
        match archive_checked(self.store.as_mut(), &meta.key, &f.data, meta.crc) {
            Ok(full) => self.pending.push(Pending {
                key: full,
                length: f.data.len() as u64,
                crc: meta.crc,
            }),
            Err(e) => self.defer(e.to_string(), protocol::class_code(e.class())),
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
        let report = self
            .store
            .retrieve_keys(&m.keys, &mut |key, data, crc| {
                send_field(wire, id, key, data, crc)
            })
            .map_err(|e| store_error(&e))?;
        self.end(id, json!(RetrieveEnd::from(&report)))
    }

    fn request(&mut self, kind: Kind, f: &Frame) -> Result<(), ErrorMeta> {
        if kind == Kind::RetrieveKeys {
            return self.retrieve_keys(f);
        }
        let (req, doit) = self.parse(f)?;
        let id = f.id;
        if matches!(kind, Kind::Wipe | Kind::Purge) && self.access != Access::ReadWrite {
            return Err(ErrorMeta {
                message: format!(
                    "{} refused: this connection's token is read-only; use the read-write token",
                    kind.name()
                ),
                exit_code: 1,
            });
        }
        let e = |e: haar_store::Error| store_error(&e);
        match kind {
            Kind::Retrieve => {
                let wire = &mut self.wire;
                let report = self
                    .store
                    .retrieve(&req, &mut |key, data, crc| {
                        send_field(wire, id, key, data, crc)
                    })
                    .map_err(e)?;
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
