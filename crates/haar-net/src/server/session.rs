//! A logged-in connection (design §7): its requests (ARCHIVE, FLUSH, LIST, RETRIEVE, WIPE,
//! PURGE, STATS, WATCH, …) served over its own store handle, the frames it may not send,
//! and the buffer memory its frames hold.

use std::io::{self, Read};
use std::sync::Arc;
use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::Request;
use haar_store::{FieldStore, FieldStoreExt};
use serde_json::json;

use super::accept::Shared;
use super::config::SMALL_FRAME;
use super::events::{EVENT_LOG_CAPACITY, Ev, HEARTBEAT, Pending};
use crate::protocol::{
    self, Access, ErrorMeta, EventMeta, FLAG_END, FieldMeta, FlushOk, Frame, KeysMeta, Kind,
    Limits, ListEnd, ListedField, LocatedMeta, MASKED_LIST_VERSION, PurgeEnd, READ_LOCATED_VERSION,
    RequestMeta, RetrieveEnd, StatsEntry, WipeEnd, WireError, to_meta,
};
use crate::transport::{RETAIN, Wire};

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

pub(super) struct Session {
    pub(super) shared: Arc<Shared>,
    pub(super) wire: Wire,
    pub(super) access: Access,
    pub(super) store: Box<dyn FieldStore>,
    /// Fields archived since the last flush: the next flush's events.
    pub(super) pending: Vec<Pending>,
    /// ARCHIVE failures since the last flush (reported by the next FLUSH).
    pub(super) deferred: Vec<String>,
    pub(super) deferred_code: i32,
    /// Bytes charged to the token's buffer share ([`Shared::charge`]).
    pub(super) charged: u64,
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
    pub(super) fn run(mut self) -> Result<(), WireError> {
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
                Some(Kind::Extract) => self.extract(&f),
                Some(Kind::ReadLocated) => self.read_located(&f),
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

    /// A request body: the request, WIPE/PURGE's `doit`, LIST's `masked` version.
    fn parse(&self, f: &Frame) -> Result<(Request, bool, u32), ErrorMeta> {
        let m: RequestMeta = f.meta().map_err(|e| ErrorMeta {
            message: e.to_string(),
            exit_code: 1,
        })?;
        let req = Request::parse(&m.request).map_err(|e| ErrorMeta {
            message: format!("request {:?}: {e}", m.request),
            exit_code: 1,
        })?;
        Ok((req, m.doit, m.masked))
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
        let (req, doit, masked) = self.parse(f)?;
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
            Kind::List if masked == 0 => {
                let fields: Vec<ListedField> = self
                    .store
                    .list(&req)
                    .map_err(e)?
                    .iter()
                    .map(ListedField::from)
                    .collect();
                self.end(id, json!({ "fields": fields }))
            }
            Kind::List => {
                if masked != MASKED_LIST_VERSION {
                    return Err(ErrorMeta {
                        message: format!(
                            "LIST masked: this server speaks masked listing version \
                             {MASKED_LIST_VERSION}, not {masked}"
                        ),
                        exit_code: 1,
                    });
                }
                let Some(listed) = self.store.list_with_masked(&req) else {
                    return Err(ErrorMeta {
                        message: format!(
                            "LIST masked: {} keeps no masked copies it can list",
                            self.store.describe()
                        ),
                        exit_code: 1,
                    });
                };
                let fields = masked_fields(listed.map_err(e)?);
                self.end(id, json!(ListEnd { fields, masked }))
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
        let prepared = self.parse(f).and_then(|(req, _, _)| {
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
                let stopping = || {
                    self.shared
                        .stopping
                        .load(std::sync::atomic::Ordering::SeqCst)
                };
                let mut g = log.inner.lock().unwrap();
                if g.next() <= cursor && !stopping() {
                    g = log.cond.wait_timeout(g, HEARTBEAT).unwrap().0;
                }
                // A stopping server ends its streams at once (it wakes them under this lock):
                // the client sees the connection end and watches again after the restart.
                if stopping() {
                    return Ok(());
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

/// A masked listing as LIST sends it: each field after the first of its key marked masked.
fn masked_fields(fields: Vec<haar_store::Field>) -> Vec<ListedField> {
    let mut out: Vec<ListedField> = Vec::with_capacity(fields.len());
    for f in &fields {
        let mut l = ListedField::from(f);
        l.masked = out
            .last()
            .is_some_and(|p| (&p.db, &p.index, &p.datum) == (&l.db, &l.index, &l.datum));
        out.push(l);
    }
    out
}

/// The largest READ_LOCATED answered (a field's bytes travel in one FIELD frame, and a
/// location is not trusted to be a field's: the store would read what it names).
const READ_LOCATED_MAX: u64 = 1 << 30;

impl Session {
    /// READ_LOCATED (design §8): the bytes at a location a listing gave.
    fn read_located(&mut self, f: &Frame) -> Result<(), ErrorMeta> {
        let m: LocatedMeta = f.meta().map_err(|e| ErrorMeta {
            message: e.to_string(),
            exit_code: 1,
        })?;
        if m.version != READ_LOCATED_VERSION {
            return Err(ErrorMeta {
                message: format!(
                    "unknown or unexpected request kind {} (READ_LOCATED version {}; this \
                     server speaks version {READ_LOCATED_VERSION})",
                    Kind::ReadLocated as u8,
                    m.version
                ),
                exit_code: 1,
            });
        }
        if m.length > READ_LOCATED_MAX {
            return Err(ErrorMeta {
                message: format!(
                    "READ_LOCATED of {} bytes of database {}: at most {READ_LOCATED_MAX} bytes \
                     are read by location (no field is larger)",
                    m.length, m.db
                ),
                exit_code: 1,
            });
        }
        let field = haar_store::Field {
            db: m.db,
            index: Key::new(),
            datum: Key::new(),
            data: haar_store::format::DataRef {
                object: m.object,
                offset: m.offset,
                length: m.length,
                crc: m.crc.unwrap_or(0),
            },
        };
        let Some(read) = self.store.read_located(&field, m.crc) else {
            return Err(ErrorMeta {
                message: format!(
                    "unknown or unexpected request kind {} (READ_LOCATED: {} cannot read by \
                     location)",
                    Kind::ReadLocated as u8,
                    self.store.describe()
                ),
                exit_code: 1,
            });
        };
        let bytes = read.map_err(|e| store_error(&e))?;
        let id = f.id;
        send_field(&mut self.wire, id, &field.db, &bytes, None).map_err(|e| store_error(&e))?;
        self.shared
            .metrics
            .sent(Kind::ReadLocated, bytes.len() as u64);
        self.end(id, json!({}))
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

/// True for a socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO` report `EAGAIN`).
pub(super) fn timed_out(e: &WireError) -> bool {
    matches!(e, WireError::Io(io) if matches!(io.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
}
