//! [`RemoteStore`]: the `FieldStore` over one server. Owns request/reply framing on a session,
//! pipelined archives and the loss accounting of a failed connection; asks [`super::retry`]
//! whether a failed request may be sent again.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::time::Duration;

use haar_core::Key;
use haar_core::request::Request;
use haar_core::schema::SplitKey;
use haar_store::{
    DbStats, Error, Field, FieldStore, PurgeReport, Result, RetrieveReport, Sink, StoreOptions,
    WipeReport,
};
use serde::de::DeserializeOwned;

use super::down::connect;
use super::local::{LocalStore, open_offer};
use super::retry::{Failed, may_retry};
use super::session::Session;
use super::watch::{WaitOutcome, Watch, wait};
use super::{ClientConfig, io_error, remote_error, wire_error};
use crate::protocol::{
    self, Access, ErrorMeta, FieldMeta, Frame, Kind, Limits, ListEnd, LocatedMeta,
    MASKED_LIST_VERSION, PurgeEnd, READ_LOCATED_VERSION, RequestMeta, RetrieveEnd, StatsEntry,
    WipeEnd, WireError, to_meta,
};

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
                return FieldStore::retrieve_keys(st, keys, sink);
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

    /// Drops an idle connection the server has closed (its idle timeout, a restart), so the
    /// next request opens a new one instead of failing: only while nothing archived on it
    /// awaits a flush, so no loss is hidden.
    fn drop_if_closed(&self, slot: &mut Option<Session>) {
        if self.unflushed == 0 && slot.as_ref().is_some_and(|s| !s.alive()) {
            *slot = None;
        }
    }

    /// Refuses a writing request locally on a read-only token (the server would refuse it
    /// from its header and close the connection).
    fn writable(&self, what: &str) -> Result<()> {
        if self.access == Access::ReadWrite {
            return Ok(());
        }
        Err(Error::Remote {
            server: self.addr.clone(),
            message: format!(
                "{what} refused: this client's token is read-only; use the read-write token (HAAR_TOKEN or --token-file)"
            ),
            class: haar_store::Class::Input,
        })
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
        self.call_frames(kind, meta, &mut |f: &Frame| {
            let m: FieldMeta = f.meta()?;
            on_field(m, &f.data).map_err(CallError::Sink)
        })
    }

    /// As [`RemoteStore::call`], handing every FIELD or VALUES frame of the reply to `on_data`.
    pub(super) fn call_frames<T: DeserializeOwned>(
        &self,
        kind: Kind,
        meta: &[u8],
        on_data: &mut dyn FnMut(&Frame) -> std::result::Result<(), CallError>,
    ) -> Result<T> {
        let mut slot = self.session.borrow_mut();
        if kind != Kind::Flush {
            self.drop_if_closed(&mut slot);
        }
        for attempt in 0..2u32 {
            let reused = slot.is_some();
            if slot.is_none() {
                *slot = Some(connect(&self.addr, &self.cfg)?);
            }
            let s = slot.as_mut().unwrap();
            let id = self.id();
            let mut replied = false;
            let r = (|| -> std::result::Result<Option<serde_json::Value>, CallError> {
                s.wire.send(kind, 0, id, meta, &[])?;
                s.wire.flush()?;
                let mut f = Frame::default();
                loop {
                    s.wire.read(Limits::SESSION, &mut f)?;
                    replied = true;
                    // An ERROR ends the request whatever its id: a server closing the connection
                    // for a bad frame cannot tell which request that frame belonged to.
                    if f.id != id && f.kind() != Some(Kind::Error) {
                        return Err(io::Error::other(format!(
                            "reply for request {} while waiting for {id}: stream out of step",
                            f.id
                        ))
                        .into());
                    }
                    match f.kind() {
                        Some(Kind::Field | Kind::Values) => on_data(&f)?,
                        Some(Kind::End | Kind::Ok) => {
                            return Ok(Some(
                                serde_json::from_slice(&f.meta)
                                    .map_err(|e| io::Error::other(format!("bad END meta: {e}")))?,
                            ));
                        }
                        Some(Kind::Error) => return Err(CallError::Remote(f.meta()?)),
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
                Err(CallError::Remote(m)) => return Err(remote_error(&self.addr, m)),
                Err(CallError::Sink(e)) => {
                    // The rest of the reply is still on the wire: this connection is out of step.
                    self.broken(&mut slot, 0);
                    return Err(e);
                }
                Err(CallError::Wire(e)) => {
                    // A server that stopped answering is not asked again: that would only
                    // double the wait.
                    let hung = matches!(&e, WireError::Io(io) if matches!(
                        io.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ));
                    let unflushed = if kind == Kind::Flush {
                        0
                    } else {
                        self.unflushed
                    };
                    self.broken(&mut slot, unflushed);
                    let failed = Failed {
                        attempt,
                        reused,
                        replied,
                        unflushed,
                    };
                    if hung || !may_retry(kind, &failed) {
                        return Err(wire_error(&self.addr, e));
                    }
                }
            }
        }
        unreachable!("the second attempt returns")
    }

    pub(super) fn request_meta(req: &Request, doit: bool) -> Vec<u8> {
        to_meta(&RequestMeta {
            request: req.to_string(),
            doit,
            masked: 0,
        })
    }

    /// The server's masked listing (design §8, "Masked copies"). A reply without the masked
    /// version is a server that predates masked listings and answered a plain one: refused,
    /// naming the server, never passed on as a masked listing.
    fn list_masked(&self, req: &Request) -> Result<Vec<Field>> {
        let meta = to_meta(&RequestMeta {
            request: req.to_string(),
            doit: false,
            masked: MASKED_LIST_VERSION,
        });
        let end: ListEnd = self.call(Kind::List, &meta, &mut Self::no_fields)?;
        masked_reply(&self.addr, end)
    }

    /// READ_LOCATED (design §8): the bytes at a location the server's listing gave, checked
    /// against the CRC-32C the server sent and, with `crc`, the one the listing gave.
    fn read_at_location(&self, field: &Field, crc: Option<u32>) -> Result<Vec<u8>> {
        let meta = to_meta(&LocatedMeta {
            version: READ_LOCATED_VERSION,
            db: field.db.clone(),
            object: field.data.object,
            offset: field.data.offset,
            length: field.data.length,
            crc,
        });
        let addr = &self.addr;
        let mut got: Option<Vec<u8>> = None;
        let r: Result<serde_json::Value> = self.call(
            Kind::ReadLocated,
            &meta,
            &mut |m: FieldMeta, data: &[u8]| {
                deliver(addr, m, data, &mut |_, bytes, _| {
                    got = Some(bytes.to_vec());
                    Ok(())
                })
            },
        );
        let unsupported = format!(
            "unknown or unexpected request kind {}",
            Kind::ReadLocated as u8
        );
        match r {
            Err(Error::Remote { message, class, .. }) if message.starts_with(&unsupported) => {
                Err(Error::Remote {
                    server: self.addr.clone(),
                    message: format!(
                        "this server predates located reads (READ_LOCATED), so it cannot read a \
                         masked copy: upgrade it ({message})"
                    ),
                    class,
                })
            }
            Err(e) => Err(e),
            Ok(_) => got.ok_or_else(|| {
                io_error(
                    "read located from",
                    &self.addr,
                    format!(
                        "the server ended READ_LOCATED of database {} {} without the bytes",
                        field.db,
                        haar_store::frontend::located(field)
                    ),
                )
            }),
        }
    }

    fn no_fields(_: FieldMeta, _: &[u8]) -> Result<()> {
        Ok(())
    }

    /// One STATS round trip: the statistics as the server's store gave them.
    fn server_stats(&self, req: &Request) -> Result<Vec<DbStats>> {
        let end: StatsEnd = self.call(
            Kind::Stats,
            &Self::request_meta(req, false),
            &mut Self::no_fields,
        )?;
        Ok(end.databases.into_iter().map(DbStats::from).collect())
    }

    /// A problem the server's store reported (its database and a file on the server's
    /// machine), attributed to this server: damage must say where to look (design §8).
    fn on_server(&self, problem: String) -> String {
        format!("server {}: {problem}", self.addr)
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

/// Why a request's reply loop ended before its END: the connection, the server's ERROR, or
/// the caller's sink (whose error is returned as it is, e.g. a full output disk).
pub(super) enum CallError {
    Wire(WireError),
    Remote(ErrorMeta),
    Sink(Error),
}

impl From<WireError> for CallError {
    fn from(e: WireError) -> Self {
        CallError::Wire(e)
    }
}

impl From<protocol::FrameError> for CallError {
    fn from(e: protocol::FrameError) -> Self {
        CallError::Wire(e.into())
    }
}

impl From<io::Error> for CallError {
    fn from(e: io::Error) -> Self {
        CallError::Wire(e.into())
    }
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
struct ProblemsEnd {
    problems: Vec<String>,
}
#[derive(serde::Deserialize)]
struct ReportEnd<T> {
    report: T,
}

impl RemoteStore {
    /// ARCHIVE: pipelined, no reply; the server checks `crc` (computed here when unknown).
    fn send_field(&mut self, key: &Key, data: &[u8], crc: Option<u32>) -> Result<()> {
        self.writable(&format!("archive of {key}"))?;
        let meta = to_meta(&FieldMeta {
            key: key.clone(),
            crc: crc.unwrap_or_else(|| haar_persist::crc32c(data)),
        });
        let id = self.id();
        let mut slot = self.session.borrow_mut();
        self.drop_if_closed(&mut slot);
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
        if self.access != Access::ReadWrite {
            // Nothing to flush: archives on a read-only token are refused before sending.
            return Ok(());
        }
        let n = self.unflushed;
        self.drop_if_closed(&mut self.session.borrow_mut());
        self.unflushed = 0;
        let r: Result<protocol::FlushOk> = self.call(Kind::Flush, b"{}", &mut Self::no_fields);
        match r {
            Ok(_) => Ok(()),
            Err(e @ Error::Net { op, .. }) if n > 0 && op != "server" => Err(io_error(
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
                return FieldStore::retrieve(st, req, sink);
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

    /// The server's LIST with `masked` (design §8); a server that predates it is refused.
    fn list_with_masked(&self, req: &Request) -> Option<Result<Vec<Field>>> {
        Some(self.list_masked(req))
    }

    /// The server's READ_LOCATED (design §8); a server that predates it is refused. Always
    /// over the wire: same-host reads serve retrieves only.
    fn read_located(&self, field: &Field, crc: Option<u32>) -> Option<Result<Vec<u8>>> {
        Some(self.read_at_location(field, crc))
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
        self.writable("WIPE")?;
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
        self.writable("PURGE")?;
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

    /// Itself: `haar::extract` finds [`RemoteStore::extract`] through it.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    /// Each database's problems name this server (design §8, "Damage in replies").
    fn stats(&self, req: &Request) -> Result<Vec<DbStats>> {
        Ok(self
            .server_stats(req)?
            .into_iter()
            .map(|mut s| {
                s.problems = s.problems.into_iter().map(|p| self.on_server(p)).collect();
                s
            })
            .collect())
    }

    /// One PROBLEMS round trip: the server asks its store for the damage only, without
    /// counting fields. A server that predates PROBLEMS answers ERROR for the kind; then the
    /// problems come from STATS, as they did before. Either way each names this server.
    fn problems(&self, req: &Request) -> Result<Vec<String>> {
        let r: Result<ProblemsEnd> = self.call(
            Kind::Problems,
            &Self::request_meta(req, false),
            &mut Self::no_fields,
        );
        match r {
            Ok(end) => Ok(end.problems),
            Err(Error::Remote { message, .. })
                if message.starts_with(&format!(
                    "unknown or unexpected request kind {}",
                    Kind::Problems as u8
                )) =>
            {
                Ok(haar_store::frontend::problems_of(self.server_stats(req)?))
            }
            Err(e) => Err(e),
        }
        .map(|problems| problems.into_iter().map(|p| self.on_server(p)).collect())
    }
}

/// Hands a received field to `sink` after checking it against the CRC-32C the server sent.
/// A reply to a masked LIST as fields: refused, naming the server, when it is not a masked
/// listing (a server that predates them ignores the request's `masked` and answers a plain
/// listing, whose END carries no `masked`) or a masked copy does not follow its key's live
/// field. Pure, so the refusal is tested without an old server.
pub(crate) fn masked_reply(addr: &str, end: ListEnd) -> Result<Vec<Field>> {
    let refused = |why: String| Error::Remote {
        server: addr.to_string(),
        message: why,
        class: haar_store::Class::Input,
    };
    if end.masked != MASKED_LIST_VERSION {
        return Err(refused(match end.masked {
            0 => "this server predates masked listings (its LIST reply says nothing of \
                  masked copies, so it listed live fields only): upgrade it to list \
                  masked copies through it, or list without masked copies"
                .to_string(),
            v => format!(
                "this server answered masked listing version {v}, not \
                 {MASKED_LIST_VERSION}: a client and server of the same release list \
                 masked copies"
            ),
        }));
    }
    let mut out: Vec<Field> = Vec::with_capacity(end.fields.len());
    for l in end.fields {
        let masked = l.masked;
        let f = Field::from(l);
        if masked && out.last().is_none_or(|p| p.key() != f.key()) {
            return Err(refused(format!(
                "its masked listing sent a masked copy of {} that does not follow that \
                 key's live field: list again, and report this server's version",
                f.key()
            )));
        }
        out.push(f);
    }
    Ok(out)
}

fn deliver(addr: &str, m: FieldMeta, data: &[u8], sink: &mut Sink<'_>) -> Result<()> {
    let crc = haar_persist::crc32c(data);
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
    sink(&m.key, data, Some(crc))
}

#[cfg(test)]
mod masked_tests {
    use super::*;
    use crate::protocol::ListedField;

    fn listed(step: u32, object: u64, masked: bool) -> ListedField {
        ListedField {
            db: Key::parse("class=od,expver=1").unwrap(),
            index: Key::parse("type=fc").unwrap(),
            datum: Key::parse(&format!("step={step}")).unwrap(),
            object,
            offset: 0,
            length: 4,
            crc: 7,
            masked,
        }
    }

    /// An older server skips the request's `masked` (it reads bodies with serde's defaults)
    /// and answers a plain listing: that must be an error naming it, never a listing.
    #[test]
    fn a_plain_reply_to_a_masked_list_is_refused_naming_the_server() {
        // What a server that predates masked listings reads of the request: `masked` skipped.
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct OldRequestMeta {
            request: String,
            #[serde(default)]
            doit: bool,
        }
        let asked = to_meta(&RequestMeta {
            request: "class=od".into(),
            doit: false,
            masked: MASKED_LIST_VERSION,
        });
        let old: OldRequestMeta = serde_json::from_slice(&asked).unwrap();
        assert_eq!(old.request, "class=od");
        // Its reply, as it sends it: no `masked`.
        let reply: ListEnd =
            serde_json::from_value(serde_json::json!({ "fields": [listed(0, 1, false)] })).unwrap();
        let e = masked_reply("old-host:7000", reply).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("old-host:7000"), "{text}");
        assert!(text.contains("predates masked listings"), "{text}");
        assert_eq!(e.class(), haar_store::Class::Input);
        // Another version is refused too.
        let reply = ListEnd {
            fields: vec![],
            masked: MASKED_LIST_VERSION + 1,
        };
        let text = masked_reply("h:1", reply).unwrap_err().to_string();
        assert!(text.contains("version 2, not 1"), "{text}");
    }

    #[test]
    fn a_masked_copy_must_follow_its_keys_live_field() {
        let ok = ListEnd {
            fields: vec![
                listed(0, 3, false),
                listed(0, 2, true),
                listed(0, 1, true),
                listed(6, 3, false),
            ],
            masked: MASKED_LIST_VERSION,
        };
        let fields = masked_reply("h:1", ok).unwrap();
        let objects: Vec<u64> = fields.iter().map(|f| f.data.object).collect();
        assert_eq!(objects, [3, 2, 1, 3]);
        for stray in [
            vec![listed(0, 2, true)],
            vec![listed(0, 3, false), listed(6, 2, true)],
        ] {
            let reply = ListEnd {
                fields: stray,
                masked: MASKED_LIST_VERSION,
            };
            let text = masked_reply("h:1", reply).unwrap_err().to_string();
            assert!(text.contains("does not follow"), "{text}");
        }
    }

    /// A plain LIST is sent as before masked listings existed (no `masked` field), so older
    /// servers and their replies are unchanged.
    #[test]
    fn a_plain_list_request_carries_no_masked_field() {
        let meta = RemoteStore::request_meta(&Request::parse("class=od").unwrap(), false);
        let v: serde_json::Value = serde_json::from_slice(&meta).unwrap();
        assert!(v.get("masked").is_none(), "{v}");
        let plain = serde_json::to_value(ListEnd {
            fields: vec![listed(0, 1, false)],
            masked: 0,
        })
        .unwrap();
        assert!(plain.get("masked").is_none(), "{plain}");
        assert!(plain["fields"][0].get("masked").is_none(), "{plain}");
    }
}
