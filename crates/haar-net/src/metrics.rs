//! What `haar serve` counts, and the `GET /metrics` endpoint that shows it (design,
//! "Operations: metrics and logs").
//!
//! Every server keeps its [`Metrics`] (atomic counters: a few nanoseconds per request); they
//! are shown only when [`serve_metrics`] runs, which `haar serve --metrics ADDR` starts. The
//! text is the OpenMetrics exposition format (which Prometheus scrapes), formatted by the
//! official Prometheus client, `prometheus-client`.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::protocol::Kind;

/// One label: `op="archive"`, `cause="token_rejected"`, ...
type Label = [(&'static str, &'static str); 1];
/// An operation and how it ended.
type OpResult = [(&'static str, &'static str); 2];

/// Why a connection did not get to log in: the `cause` label of
/// `haar_logins_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalCause {
    /// `max_connections` connections were open.
    Busy,
    /// Dropped before login for a newer connection (pre-login bounds).
    PreloginDropped,
    /// No login within the handshake deadline.
    HandshakeTimeout,
    /// The peer did not speak haar's handshake (no HELLO, no AUTH, or a bad one).
    NotAHaarClient,
    /// The client speaks another protocol version.
    VersionMismatch,
    /// The token's proof did not match.
    TokenRejected,
    /// A plain-TCP client of a TLS-only server.
    TlsRequired,
}

impl RefusalCause {
    fn label(self) -> &'static str {
        match self {
            RefusalCause::Busy => "busy",
            RefusalCause::PreloginDropped => "prelogin_dropped",
            RefusalCause::HandshakeTimeout => "handshake_timeout",
            RefusalCause::NotAHaarClient => "not_a_haar_client",
            RefusalCause::VersionMismatch => "version_mismatch",
            RefusalCause::TokenRejected => "token_rejected",
            RefusalCause::TlsRequired => "tls_required",
        }
    }
}

/// The `op` label of a request kind: its protocol name in lower case.
pub fn op_label(kind: Kind) -> &'static str {
    match kind {
        Kind::Archive => "archive",
        Kind::Flush => "flush",
        Kind::Retrieve => "retrieve",
        Kind::RetrieveKeys => "retrieve_keys",
        Kind::List => "list",
        Kind::Axes => "axes",
        Kind::Stats => "stats",
        Kind::Wipe => "wipe",
        Kind::Purge => "purge",
        Kind::Problems => "problems",
        Kind::Watch => "watch",
        _ => "other",
    }
}

/// A server's counters (see the module's documentation for their names).
pub struct Metrics {
    registry: Registry,
    requests: Family<OpResult, Counter>,
    received: Family<Label, Counter>,
    sent: Family<Label, Counter>,
    duration: Family<Label, Histogram, fn() -> Histogram>,
    open: Gauge,
    accepted: Counter,
    refused: Family<Label, Counter>,
}

fn latency_histogram() -> Histogram {
    // 10 µs to about 42 s, by factors of 4.
    Histogram::new(exponential_buckets(1e-5, 4.0, 12))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("haar");
        let requests = Family::<OpResult, Counter>::default();
        let received = Family::<Label, Counter>::default();
        let sent = Family::<Label, Counter>::default();
        let duration =
            Family::<Label, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let open = Gauge::default();
        let accepted = Counter::default();
        let refused = Family::<Label, Counter>::default();
        // The client appends `_total` to counters.
        registry.register(
            "requests",
            "Requests served, by operation and result (ok or error)",
            requests.clone(),
        );
        registry.register(
            "field_bytes_received",
            "Field bytes received from clients, by operation (ARCHIVE's data)",
            received.clone(),
        );
        registry.register(
            "field_bytes_sent",
            "Field bytes sent to clients, by operation (the FIELD frames of RETRIEVE and RETRIEVE_KEYS)",
            sent.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a request's last byte read to its reply's last byte written, by operation (ARCHIVE: until stored, unflushed)",
            duration.clone(),
        );
        registry.register(
            "connections_open",
            "Connections open now (logged in or not)",
            open.clone(),
        );
        registry.register(
            "connections_accepted",
            "Connections accepted and admitted (before any login)",
            accepted.clone(),
        );
        registry.register(
            "logins_refused",
            "Connections that did not get to log in, by cause",
            refused.clone(),
        );
        Metrics {
            registry,
            requests,
            received,
            sent,
            duration,
            open,
            accepted,
            refused,
        }
    }
}

impl Metrics {
    /// Counts one request of `kind` that took `seconds` and ended well or not.
    pub fn request(&self, kind: Kind, ok: bool, seconds: f64) {
        let op = op_label(kind);
        let result = if ok { "ok" } else { "error" };
        self.requests
            .get_or_create(&[("op", op), ("result", result)])
            .inc();
        if kind != Kind::Watch {
            self.duration.get_or_create(&[("op", op)]).observe(seconds);
        }
    }

    /// Counts field bytes received with a request of `kind`.
    pub fn received(&self, kind: Kind, bytes: u64) {
        self.received
            .get_or_create(&[("op", op_label(kind))])
            .inc_by(bytes);
    }

    /// Counts field bytes sent in reply to a request of `kind`.
    pub fn sent(&self, kind: Kind, bytes: u64) {
        self.sent
            .get_or_create(&[("op", op_label(kind))])
            .inc_by(bytes);
    }

    /// Counts a connection admitted.
    pub fn accepted(&self) {
        self.accepted.inc();
    }

    /// Sets the number of connections open.
    pub fn set_open(&self, n: usize) {
        self.open.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Counts a connection that did not get to log in.
    pub fn refused(&self, cause: RefusalCause) {
        self.refused
            .get_or_create(&[("cause", cause.label())])
            .inc();
    }

    /// The OpenMetrics text (ending with `# EOF`).
    pub fn render(&self) -> String {
        let mut s = String::new();
        // Writing into a String does not fail.
        let _ = encode(&mut s, &self.registry);
        s
    }
}

/// Serves `GET /metrics` on `listener` on a thread of its own, forever.
///
/// A minimal HTTP/1.1 responder rather than a web framework: the endpoint has one read-only
/// page that a scraper fetches every few seconds, one connection at a time is plenty, and the
/// server stays free of an async runtime. Each scrape reads the request head (at most 8 KiB,
/// 5 s), answers and closes.
pub fn serve_metrics(listener: TcpListener, metrics: Arc<Metrics>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("haar-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(s) => {
                        if let Err(e) = answer(s, &metrics) {
                            tracing::debug!(error = %e, "metrics request failed");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics endpoint: accept failed");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })?;
    Ok(())
}

fn answer(stream: TcpStream, metrics: &Metrics) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(io::Read::take(&stream, 8192));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    // The rest of the head, up to its blank line.
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
    }
    let path = path.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.render(),
        ),
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "haar serve: the metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "haar serve: GET /metrics\n".to_string(),
        ),
    };
    let mut w = &stream;
    write!(
        w,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if method != "HEAD" {
        w.write_all(body.as_bytes())?;
    }
    w.flush()
}
