//! The client side: [`RemoteStore`] (the `remote` front-end, one server), WATCH streams, and
//! [`wait`], the "step complete" trigger over one or more servers.
//!
//! Owns connections and their failure handling; routing over several servers belongs to
//! `haar_store::dist`, which composes `RemoteStore`s as lanes.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::{Request, Values};
use haar_core::schema::SplitKey;
use haar_store::{
    DbStats, Error, Event, Field, FieldStore, PurgeReport, Result, RetrieveReport, Sink,
    StoreOptions, WipeReport,
};
use serde::de::DeserializeOwned;

use crate::auth;
use crate::protocol::{
    self, Access, Challenge, ErrorMeta, EventMeta, FieldMeta, Frame, Hello, Kind, Limits,
    ListedField, LocalOffer, PurgeEnd, Refused, RequestMeta, RetrieveEnd, StatsEntry, Welcome,
    WipeEnd, WireError, to_meta,
};
use crate::server::HEARTBEAT;
use crate::transport::{Conn, Wire};

/// How a client reaches servers.
#[derive(Clone)]
pub struct ClientConfig {
    /// The shared secret (`HAAR_TOKEN` / `--token-file`).
    pub token: Option<String>,
    /// TLS 1.3 when set (the servers must have certificates this trusts).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Time allowed for TCP connect and for the handshake.
    pub connect_timeout: Duration,
    /// Serve retrieves from the server's own store when it is on this machine and offers it
    /// (design §8, same-host reads); `HAAR_LOCAL_READS=0` turns the default off.
    pub local_reads: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            token: None,
            tls: None,
            connect_timeout: Duration::from_secs(5),
            local_reads: std::env::var_os("HAAR_LOCAL_READS").is_none_or(|v| v != "0"),
        }
    }
}

impl ClientConfig {
    /// Token from `$HAAR_TOKEN`, no TLS.
    pub fn from_env() -> std::result::Result<ClientConfig, String> {
        Ok(ClientConfig {
            token: auth::load_token(None)?,
            ..ClientConfig::default()
        })
    }
}

fn io_error(op: &'static str, addr: &str, e: impl std::fmt::Display) -> Error {
    Error::Io {
        op,
        path: addr.into(),
        source: io::Error::other(e.to_string()),
    }
}

fn wire_error(addr: &str, e: WireError) -> Error {
    match e {
        WireError::Closed => io_error(
            "connection to",
            addr,
            "closed by the server (did it stop or restart? check its log)",
        ),
        e => io_error("connection to", addr, e),
    }
}

/// A server's ERROR as a store error: server-side I/O failures stay `Io` (a dist front-end
/// fails over on them), everything else is `Remote` with the server's exit code.
fn remote_error(addr: &str, m: ErrorMeta) -> Error {
    if m.exit_code == 3 {
        io_error("server", addr, m.message)
    } else {
        Error::Remote {
            server: addr.into(),
            message: m.message,
            exit_code: m.exit_code,
        }
    }
}

struct Session {
    wire: Wire,
    access: Access,
    local: Option<LocalOffer>,
}

impl Session {
    /// False once the peer has closed or reset the connection (or sent something unasked):
    /// a poll that does not wait.
    fn alive(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut p = libc::pollfd {
            fd: self.wire.socket().as_raw_fd(),
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 0
    }
}

/// A store opened from a server's same-host offer.
struct LocalStore {
    offer: LocalOffer,
    store: Option<haar_store::Store>,
}

/// Opens the store a server offers, if it is on this machine: the same boot id, and the
/// root this process sees is the very directory the server named (device and inode).
fn open_offer(offer: &LocalOffer) -> Option<haar_store::Store> {
    use std::os::unix::fs::MetadataExt;
    if crate::server::boot_id().as_deref() != Some(offer.boot_id.as_str()) {
        return None;
    }
    let mut cfg: haar_store::Config = serde_json::from_value(offer.store.clone()).ok()?;
    // A reader: never reserve heap for writing when opening.
    cfg.pool_prefault = haar_store::pmem::Prefault::Create;
    let meta = std::fs::metadata(cfg.roots.first()?).ok()?;
    if (meta.dev(), meta.ino()) != (offer.dev, offer.ino) {
        return None;
    }
    if cfg.backend == haar_store::BackendKind::Pmem
        && !cfg.roots[0].join(haar_store::pmem::POOL_FILE).is_file()
    {
        return None; // never create a pool here
    }
    let mut opts = StoreOptions::default();
    if let Some(text) = &offer.schema {
        opts.schema = Arc::new(haar_core::schema::Schema::parse(text).ok()?);
    }
    let backend = cfg.open_backend().ok()?;
    Some(haar_store::Store::with_options(backend, opts))
}

/// Opens a connection and authenticates.
fn connect(addr: &str, cfg: &ClientConfig) -> Result<Session> {
    let hint = "is `haar serve` running there?";
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| io_error("resolve", addr, format!("{e}; give HOST:PORT")))?
        .collect();
    let mut last = None;
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, cfg.connect_timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let stream = stream.ok_or_else(|| {
        io_error(
            "connect",
            addr,
            format!(
                "{}; {hint}",
                last.map(|e| e.to_string())
                    .unwrap_or_else(|| "no address".into())
            ),
        )
    })?;
    let setup = |s: &TcpStream| -> io::Result<()> {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(cfg.connect_timeout))?;
        s.set_write_timeout(Some(cfg.connect_timeout))
    };
    setup(&stream).map_err(|e| io_error("connect", addr, e))?;
    let conn: Box<dyn Conn> = match &cfg.tls {
        Some(tls) => {
            let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| io_error("TLS to", addr, e))?;
            let c = rustls::ClientConnection::new(tls.clone(), name)
                .map_err(|e| io_error("TLS to", addr, e))?;
            Box::new(rustls::StreamOwned::new(c, stream))
        }
        None => Box::new(stream),
    };
    let mut wire = Wire::new(conn);
    let hs = |e: WireError| match e {
        WireError::Io(ref io)
            if io.get_ref().is_some_and(|x| {
                matches!(
                    x.downcast_ref::<rustls::Error>(),
                    Some(rustls::Error::InvalidCertificate(_))
                )
            }) =>
        {
            io_error(
                "TLS handshake with",
                addr,
                format!(
                    "{e}: the server's certificate is not trusted by this client; give --tls-ca the CA certificate that signed it (and check the server's name or IP address is in it)"
                ),
            )
        }
        WireError::Frame(protocol::FrameError::BadMagic(_)) => io_error(
            "handshake with",
            addr,
            format!("{e}; if the server uses TLS, give the client its CA (--tls-ca)"),
        ),
        WireError::Io(ref io)
            if io.kind() == io::ErrorKind::WouldBlock || io.kind() == io::ErrorKind::TimedOut =>
        {
            io_error("handshake with", addr, format!("no answer ({e}); {hint}"))
        }
        e => io_error("handshake with", addr, format!("{e}; {hint}")),
    };
    let client_nonce = auth::nonce();
    let hello = Hello {
        version: protocol::VERSION,
        client: format!("haar {}", env!("CARGO_PKG_VERSION")),
        nonce: client_nonce.clone(),
    };
    wire.send(Kind::Hello, 0, 0, &to_meta(&hello), &[])
        .map_err(hs)?;
    wire.flush().map_err(|e| hs(e.into()))?;
    let mut f = Frame::default();
    wire.read(Limits::HANDSHAKE, &mut f).map_err(hs)?;
    let refused = |f: &Frame| {
        let reason = f
            .meta::<Refused>()
            .map(|r| r.reason)
            .unwrap_or_else(|e| e.to_string());
        let extra = if cfg.token.is_none() && reason.contains("token") {
            " (this client has no token: set HAAR_TOKEN or --token-file)"
        } else {
            ""
        };
        Error::Remote {
            server: addr.into(),
            message: format!("refused the connection: {reason}{extra}"),
            exit_code: 1,
        }
    };
    let challenge: Challenge = match f.kind() {
        Some(Kind::Challenge) => f.meta().map_err(|e| hs(e.into()))?,
        Some(Kind::Refused) => return Err(refused(&f)),
        _ => {
            return Err(hs(io::Error::other(format!(
                "unexpected frame kind {}",
                f.kind
            ))
            .into()));
        }
    };
    if challenge.version != protocol::VERSION {
        return Err(Error::Remote {
            server: addr.into(),
            message: format!(
                "speaks protocol version {}, this client version {}; use the same haar release on both ends",
                challenge.version,
                protocol::VERSION
            ),
            exit_code: 1,
        });
    }
    let token = cfg.token.as_deref().unwrap_or("");
    let proof = auth::client_proof(token, &challenge.nonce, &client_nonce);
    wire.send(Kind::Auth, 0, 0, &to_meta(&protocol::Auth { proof }), &[])
        .map_err(hs)?;
    wire.flush().map_err(|e| hs(e.into()))?;
    wire.read(Limits::HANDSHAKE, &mut f).map_err(hs)?;
    let welcome: Welcome = match f.kind() {
        Some(Kind::Welcome) => f.meta().map_err(|e| hs(e.into()))?,
        Some(Kind::Refused) => return Err(refused(&f)),
        _ => {
            return Err(hs(io::Error::other(format!(
                "unexpected frame kind {}",
                f.kind
            ))
            .into()));
        }
    };
    let expected = auth::server_proof(token, &client_nonce, &challenge.nonce);
    if !auth::constant_time_eq(&expected, &welcome.proof) {
        return Err(Error::Remote {
            server: addr.into(),
            message: "the server could not prove it knows the token: wrong server, or a man in the middle; check the address".into(),
            exit_code: 1,
        });
    }
    wire.set_read_timeout(None)
        .map_err(|e| io_error("connect", addr, e))?;
    wire.socket()
        .set_write_timeout(None)
        .map_err(|e| io_error("connect", addr, e))?;
    Ok(Session {
        wire,
        access: welcome.access,
        local: welcome.local,
    })
}

/// The `remote` front-end: one server, behind the same API as the local store.
///
/// Archives are pipelined (no round trip per field); an archive the server refuses is
/// reported by the next [`FieldStore::flush`]. A connection that fails is reopened on the next
/// operation; fields archived on it and not yet flushed are reported lost by `flush`.
pub struct RemoteStore {
    addr: String,
    cfg: ClientConfig,
    session: RefCell<Option<Session>>,
    access: Access,
    next_id: Cell<u64>,
    unflushed: u64,
    lost: Cell<u64>,
    /// The store of the server's latest same-host offer, when it could be opened.
    local: RefCell<Option<LocalStore>>,
    /// Schema and context keys are split with before they are sent.
    opts: StoreOptions,
}

impl RemoteStore {
    /// Connects to `addr` (`host:port`) and authenticates.
    pub fn connect(addr: &str, cfg: &ClientConfig) -> Result<RemoteStore> {
        let s = connect(addr, cfg)?;
        Ok(RemoteStore {
            addr: addr.to_string(),
            cfg: cfg.clone(),
            access: s.access,
            session: RefCell::new(Some(s)),
            next_id: Cell::new(1),
            unflushed: 0,
            lost: Cell::new(0),
            local: RefCell::new(None),
            opts: StoreOptions::default(),
        })
    }

    /// Splits keys with this schema and context (the built-in schema by default); the
    /// server splits them again with its own.
    pub fn with_options(mut self, opts: StoreOptions) -> RemoteStore {
        self.opts = opts;
        self
    }

    /// Reads the fields of `keys` as one RETRIEVE_KEYS round trip (or from the server's own
    /// store on its host).
    fn fetch_keys(&self, keys: &[Key], sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        if self.local_ready() {
            let local = self.local.borrow();
            if let Some(st) = local.as_ref().and_then(|l| l.store.as_ref()) {
                return st.retrieve_keys(keys, sink);
            }
        }
        let meta = to_meta(&protocol::KeysMeta {
            keys: keys.to_vec(),
        });
        let addr = &self.addr;
        let end: RetrieveEnd = self.call(Kind::RetrieveKeys, &meta, &mut |m, data| {
            deliver(addr, m, data, sink)
        })?;
        Ok(end.into())
    }

    /// `host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// What this connection's token allows.
    pub fn access(&self) -> Access {
        self.access
    }

    fn id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    /// True when retrieves may use the server's store directly: enabled, offered by the
    /// current connection, opened, and the connection is still up (so a dead server fails as
    /// it does over the wire).
    fn local_ready(&self) -> bool {
        if !self.cfg.local_reads {
            return false;
        }
        let slot = self.session.borrow();
        let Some(s) = slot.as_ref() else {
            return false; // the next request reconnects over the wire
        };
        let Some(offer) = &s.local else {
            return false;
        };
        let mut local = self.local.borrow_mut();
        if local.as_ref().is_none_or(|l| &l.offer != offer) {
            *local = Some(LocalStore {
                offer: offer.clone(),
                store: open_offer(offer),
            });
        }
        local.as_ref().is_some_and(|l| l.store.is_some()) && s.alive()
    }

    /// Drops a broken connection, remembering unflushed fields as lost.
    fn broken(&self, slot: &mut Option<Session>, unflushed: u64) {
        *slot = None;
        self.lost.set(self.lost.get() + unflushed);
    }

    /// Sends a request and reads its reply frames: FIELDs to `on_field`, then END (or OK),
    /// whose meta is returned. A read-only request on a connection that turns out to be dead
    /// is retried once on a new one.
    fn call<T: DeserializeOwned>(
        &self,
        kind: Kind,
        meta: &[u8],
        on_field: &mut dyn FnMut(FieldMeta, &[u8]) -> Result<()>,
    ) -> Result<T> {
        let mut slot = self.session.borrow_mut();
        for attempt in 0..2 {
            let reused = slot.is_some();
            if slot.is_none() {
                *slot = Some(connect(&self.addr, &self.cfg)?);
            }
            let s = slot.as_mut().unwrap();
            let id = self.id();
            let mut replied = false;
            let r = (|| -> std::result::Result<Option<serde_json::Value>, WireError> {
                s.wire.send(kind, 0, id, meta, &[])?;
                s.wire.flush()?;
                let mut f = Frame::default();
                loop {
                    s.wire.read(Limits::SESSION, &mut f)?;
                    replied = true;
                    if f.id != id {
                        return Err(io::Error::other(format!(
                            "reply for request {} while waiting for {id}: stream out of step",
                            f.id
                        ))
                        .into());
                    }
                    match f.kind() {
                        Some(Kind::Field) => {
                            let m: FieldMeta = f.meta()?;
                            if let Err(e) = on_field(m, &f.data) {
                                return Err(io::Error::other(SinkFailed(e.to_string())).into());
                            }
                        }
                        Some(Kind::End | Kind::Ok) => {
                            return Ok(Some(
                                serde_json::from_slice(&f.meta)
                                    .map_err(|e| io::Error::other(format!("bad END meta: {e}")))?,
                            ));
                        }
                        Some(Kind::Error) => {
                            let m: ErrorMeta = f.meta()?;
                            return Err(WireError::Io(io::Error::other(RemoteFailed(m))));
                        }
                        _ => {
                            return Err(io::Error::other(format!(
                                "unexpected reply frame kind {}",
                                f.kind
                            ))
                            .into());
                        }
                    }
                }
            })();
            match r {
                Ok(v) => {
                    return serde_json::from_value(v.unwrap_or_default())
                        .map_err(|e| io_error("reply from", &self.addr, format!("{e}")));
                }
                Err(WireError::Io(e)) if e.get_ref().is_some_and(|x| x.is::<RemoteFailed>()) => {
                    let m = e
                        .into_inner()
                        .unwrap()
                        .downcast::<RemoteFailed>()
                        .expect("checked");
                    return Err(remote_error(&self.addr, m.0));
                }
                Err(WireError::Io(e)) if e.get_ref().is_some_and(|x| x.is::<SinkFailed>()) => {
                    // The rest of the reply is still on the wire: this connection is out of step.
                    self.broken(&mut slot, 0);
                    let m = e.into_inner().unwrap().to_string();
                    return Err(io_error("output of retrieve from", &self.addr, m));
                }
                Err(e) => {
                    let unflushed = if kind == Kind::Flush {
                        0
                    } else {
                        self.unflushed
                    };
                    self.broken(&mut slot, unflushed);
                    let retry = attempt == 0
                        && reused
                        && !replied
                        && unflushed == 0
                        && !matches!(kind, Kind::Flush | Kind::Wipe | Kind::Purge);
                    if !retry {
                        return Err(wire_error(&self.addr, e));
                    }
                }
            }
        }
        unreachable!("the second attempt returns")
    }

    fn request_meta(req: &Request, doit: bool) -> Vec<u8> {
        to_meta(&RequestMeta {
            request: req.to_string(),
            doit,
        })
    }

    fn no_fields(_: FieldMeta, _: &[u8]) -> Result<()> {
        Ok(())
    }

    /// Streams an event for every field matching `req` flushed on this server: first those
    /// already flushed, then each new flush, until dropped. Uses a connection of its own.
    pub fn watch(&self, req: &Request) -> Result<Watch> {
        Watch::open(&self.addr, &self.cfg, req)
    }

    /// Returns when every field `req` names has been flushed on this server (see [`wait`]).
    pub fn wait(&self, req: &Request, timeout: Duration) -> Result<WaitOutcome> {
        wait(
            std::slice::from_ref(&self.addr),
            &self.cfg,
            req,
            &StoreOptions::default(),
            timeout,
        )
    }
}

#[derive(Debug)]
struct RemoteFailed(ErrorMeta);
impl std::fmt::Display for RemoteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.message)
    }
}
impl std::error::Error for RemoteFailed {}

#[derive(Debug)]
struct SinkFailed(String);
impl std::fmt::Display for SinkFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for SinkFailed {}

#[derive(serde::Deserialize)]
struct ListEnd {
    fields: Vec<ListedField>,
}
#[derive(serde::Deserialize)]
struct AxesEnd {
    axes: BTreeMap<String, BTreeSet<String>>,
}
#[derive(serde::Deserialize)]
struct StatsEnd {
    databases: Vec<StatsEntry>,
}
#[derive(serde::Deserialize)]
struct ReportEnd<T> {
    report: T,
}

impl RemoteStore {
    /// ARCHIVE: pipelined, no reply; the server checks `crc` (computed here when unknown).
    fn send_field(&mut self, key: &Key, data: &[u8], crc: Option<u32>) -> Result<()> {
        if self.access != Access::ReadWrite {
            return Err(Error::Remote {
                server: self.addr.clone(),
                message: format!(
                    "archive of {key} refused: this client's token is read-only; use the read-write token (HAAR_TOKEN or --token-file)"
                ),
                exit_code: 1,
            });
        }
        let meta = to_meta(&FieldMeta {
            key: key.clone(),
            crc: crc.unwrap_or_else(|| crc32c::crc32c(data)),
        });
        let id = self.id();
        let mut slot = self.session.borrow_mut();
        if slot.is_none() {
            *slot = Some(connect(&self.addr, &self.cfg)?);
        }
        let r = slot
            .as_mut()
            .unwrap()
            .wire
            .send(Kind::Archive, 0, id, &meta, data);
        match r {
            Ok(()) => {
                self.unflushed += 1;
                Ok(())
            }
            Err(e) => {
                let lost = self.unflushed;
                self.broken(&mut slot, lost);
                self.unflushed = 0;
                Err(io_error(
                    "archive to",
                    &self.addr,
                    format!(
                        "{}; this field and the {lost} archived since the last flush are not stored: archive them again",
                        wire_error(&self.addr, e)
                    ),
                ))
            }
        }
    }
}

impl FieldStore for RemoteStore {
    fn describe(&self) -> String {
        let local = self.local.borrow();
        match local.as_ref().and_then(|l| l.store.as_ref()) {
            Some(st) => format!(
                "remote {} (same-host reads from {})",
                self.addr,
                st.backend().describe()
            ),
            None => format!("remote {}", self.addr),
        }
    }

    fn options(&self) -> &StoreOptions {
        &self.opts
    }

    /// Sends the key as given: the server splits it with its own schema (which may differ
    /// from this client's), and refuses it at the next flush if it does not fit.
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<()> {
        self.send_field(key, data, None)
    }

    fn archive_split(&mut self, split: &SplitKey, data: &[u8], crc: Option<u32>) -> Result<()> {
        self.send_field(&split.full(), data, crc)
    }

    fn flush(&mut self) -> Result<()> {
        let lost = self.lost.replace(0);
        if lost > 0 {
            return Err(io_error(
                "flush to",
                &self.addr,
                format!(
                    "the connection failed before this flush; {lost} field(s) archived on it were not stored: archive them again"
                ),
            ));
        }
        let n = self.unflushed;
        self.unflushed = 0;
        let r: Result<protocol::FlushOk> = self.call(Kind::Flush, b"{}", &mut Self::no_fields);
        match r {
            Ok(_) => Ok(()),
            Err(e @ Error::Io { op, .. }) if n > 0 && op != "server" => Err(io_error(
                "flush to",
                &self.addr,
                format!(
                    "{e}; whether the {n} field(s) archived since the last flush were stored is unknown: list them, or archive them again"
                ),
            )),
            Err(e) => Err(e),
        }
    }

    fn retrieve(&self, req: &Request, sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        if self.local_ready() {
            let local = self.local.borrow();
            if let Some(st) = local.as_ref().and_then(|l| l.store.as_ref()) {
                return st.retrieve(req, sink);
            }
        }
        let addr = &self.addr;
        let end: RetrieveEnd = self.call(
            Kind::Retrieve,
            &Self::request_meta(req, false),
            &mut |m: FieldMeta, data: &[u8]| deliver(addr, m, data, sink),
        )?;
        Ok(end.into())
    }

    fn retrieve_keys(&self, keys: &[Key], sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        self.fetch_keys(keys, sink)
    }

    fn list(&self, req: &Request) -> Result<Vec<Field>> {
        let end: ListEnd = self.call(
            Kind::List,
            &Self::request_meta(req, false),
            &mut Self::no_fields,
        )?;
        Ok(end.fields.into_iter().map(Field::from).collect())
    }

    fn axes(&self, req: &Request) -> Result<BTreeMap<String, BTreeSet<String>>> {
        let end: AxesEnd = self.call(
            Kind::Axes,
            &Self::request_meta(req, false),
            &mut Self::no_fields,
        )?;
        Ok(end.axes)
    }

    fn wipe(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        let end: ReportEnd<WipeEnd> = self.call(
            Kind::Wipe,
            &Self::request_meta(req, doit),
            &mut Self::no_fields,
        )?;
        Ok(WipeReport {
            databases: end.report.databases,
            fields: end.report.fields,
            bytes: end.report.bytes,
        })
    }

    fn purge(&mut self, req: &Request, doit: bool) -> Result<PurgeReport> {
        let end: ReportEnd<PurgeEnd> = self.call(
            Kind::Purge,
            &Self::request_meta(req, doit),
            &mut Self::no_fields,
        )?;
        Ok(PurgeReport {
            databases: end.report.databases,
            dropped_fields: end.report.dropped_fields,
            dropped_bytes: end.report.dropped_bytes,
            freed_bytes: end.report.freed_bytes,
        })
    }

    fn stats(&self, req: &Request) -> Result<Vec<DbStats>> {
        let end: StatsEnd = self.call(
            Kind::Stats,
            &Self::request_meta(req, false),
            &mut Self::no_fields,
        )?;
        Ok(end
            .databases
            .into_iter()
            .map(|s| DbStats {
                db: s.db,
                fields: s.fields,
                bytes: s.bytes,
                dead_fields: s.dead_fields,
                dead_bytes: s.dead_bytes,
                problems: s.problems,
            })
            .collect())
    }
}

/// A WATCH stream from one server.
pub struct Watch {
    wire: Wire,
    addr: String,
    done: bool,
}

impl Watch {
    /// Connects, authenticates and subscribes.
    pub fn open(addr: &str, cfg: &ClientConfig, req: &Request) -> Result<Watch> {
        let mut s = connect(addr, cfg)?;
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
/// again; its failure arrives as an `Err(Error::Io)` item naming it, and the stream goes on.
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
                Err(e) if !matches!(e, Error::Io { .. }) => return Err(e),
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
                        Err(e) => Some(matches!(e, Error::Io { .. })),
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
            Err(e @ Error::Io { .. }) => {
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
    let bad = |reason: String| Error::BadRequest {
        request: req.to_string(),
        reason,
    };
    let mut resolved = req
        .resolve(&options.schema, &options.context)
        .map_err(|e| bad(e.to_string()))?;
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
    let keywords: Vec<String> = resolved.params.iter().map(|p| p.keyword.clone()).collect();
    let expected = resolved.expand();
    let mut missing: HashSet<Key> = expected.iter().cloned().collect();
    let project = |k: &Key| -> Key {
        let mut p = Key::new();
        for kw in &keywords {
            p.push(kw.clone(), k.get(kw).unwrap_or("").to_string());
        }
        p
    };
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
            Some(Err(Error::Io { .. })) => {}
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

/// Hands a received field to `sink` after checking it against the CRC-32C the server sent.
fn deliver(addr: &str, m: FieldMeta, data: &[u8], sink: &mut Sink<'_>) -> Result<()> {
    let crc = crc32c::crc32c(data);
    if crc != m.crc {
        return Err(Error::checksum(
            addr,
            &m.key,
            crc,
            m.crc,
            "the server sent",
            "damaged in transit: retrieve again",
        ));
    }
    sink(&m.key, data, crc)
}
