//! What `haar serve` counts, and the `GET /metrics` endpoint that shows it and every other
//! long-running face's counters (docs/operations.md).
//!
//! Every server keeps its [`Metrics`] (atomic counters: a few nanoseconds per request); they
//! are shown only when [`serve_metrics`] runs, which `haar serve --metrics ADDR` starts. The
//! text is the OpenMetrics exposition format (which Prometheus scrapes), formatted by the
//! official Prometheus client, `prometheus-client`.
//!
//! The endpoint serves anything that is an [`Exposition`]: the stage daemon and `haar mount`
//! keep their own registries (in their crates) and reuse [`listen`] rather than a server of
//! their own.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

pub use crate::protocol::RefusalCause;

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
        Kind::Extract => "extract",
        Kind::ReadLocated => "read_located",
        Kind::Watch => "watch",
        _ => "other",
    }
}

/// Something whose metrics the endpoint shows.
pub trait Exposition: Send + Sync {
    /// The OpenMetrics text, ending with `# EOF`; called once per scrape, on the endpoint's
    /// thread.
    fn render(&self) -> String;
}

/// The OpenMetrics text of `registry` (ending with `# EOF`).
pub fn encode_registry(registry: &Registry) -> String {
    let mut s = String::new();
    // Writing into a String does not fail.
    let _ = encode(&mut s, registry);
    s
}

/// How full the store is, as a scrape finds it: what `haar info` reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Databases.
    pub databases: u64,
    /// Live fields (the newest of each key).
    pub fields: u64,
    /// Bytes of the live fields.
    pub live_bytes: u64,
    /// Bytes of masked or wiped fields still stored (a purge frees them).
    pub dead_bytes: u64,
    /// A pmem pool: its file's size, its heap's used bytes, and the bytes of its free list
    /// (reused by new fields).
    pub pool: Option<PoolUsage>,
    /// The file systems the store lives on: `(path, size, free)` in bytes, free as an
    /// unprivileged writer sees it (`f_bavail`).
    pub disks: Vec<(String, u64, u64)>,
}

/// A pmem pool's space (see [`Usage::pool`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// The pool file's length.
    pub size_bytes: u64,
    /// Bytes of the heap handed out so far (live, dead, free and other).
    pub heap_used_bytes: u64,
    /// Bytes on the heap's free list.
    pub free_bytes: u64,
}

/// Finds the store's [`Usage`] at scrape time.
pub type UsageProbe = Box<dyn Fn() -> Option<Usage> + Send + Sync>;

/// The store usage gauges and what fills them, with the last figures and what they cost.
struct UsageGauges {
    databases: Gauge,
    fields: Gauge,
    live: Gauge,
    dead: Gauge,
    pool_size: Gauge,
    pool_heap: Gauge,
    pool_free: Gauge,
    disk_size: Family<PathLabel, Gauge>,
    disk_free: Family<PathLabel, Gauge>,
    seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    probe: Mutex<ProbeState>,
}

/// The probe, when it last ran and how long it took, and whether it runs now.
#[derive(Default)]
struct ProbeState {
    probe: Option<Arc<UsageProbe>>,
    last: Option<(Instant, Duration)>,
    running: bool,
}

/// How long a scrape waits for usage figures being found before it shows the last ones.
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// `path="/dev/shm/haar"`.
type PathLabel = [(&'static str, String); 1];

fn gauge_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl UsageGauges {
    /// Runs the probe on a thread of its own unless it runs already or its last run was so
    /// recent that running it again would spend more than a tenth of the time since on it (a
    /// store of millions of fields takes seconds to add up); waits at most [`PROBE_WAIT`] for
    /// it, so that a scrape never waits longer: a longer run's figures show at a later scrape.
    fn refresh(self: &Arc<Self>) {
        let probe = {
            let mut st = self.probe.lock().unwrap_or_else(|p| p.into_inner());
            let due = st.last.is_none_or(|(at, took)| at.elapsed() >= took * 10);
            match st.probe.clone() {
                Some(p) if due && !st.running => {
                    st.running = true;
                    p
                }
                _ => return,
            }
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("haar-usage".into())
            .spawn(move || {
                let start = Instant::now();
                let usage = probe();
                let took = start.elapsed();
                me.show(usage, took);
                let mut st = me.probe.lock().unwrap_or_else(|p| p.into_inner());
                st.last = Some((start, took));
                st.running = false;
                drop(st);
                let _ = tx.send(());
            });
        match spawned {
            Ok(_) => {
                let _ = rx.recv_timeout(PROBE_WAIT);
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics: no thread to find the store's usage");
                self.probe.lock().unwrap_or_else(|p| p.into_inner()).running = false;
            }
        }
    }

    /// Sets the gauges to what a probe found in `took`.
    fn show(&self, usage: Option<Usage>, took: Duration) {
        self.seconds.set(took.as_secs_f64());
        let Some(u) = usage else { return };
        self.databases.set(gauge_of(u.databases));
        self.fields.set(gauge_of(u.fields));
        self.live.set(gauge_of(u.live_bytes));
        self.dead.set(gauge_of(u.dead_bytes));
        if let Some(p) = u.pool {
            self.pool_size.set(gauge_of(p.size_bytes));
            self.pool_heap.set(gauge_of(p.heap_used_bytes));
            self.pool_free.set(gauge_of(p.free_bytes));
        }
        for (path, size, free) in u.disks {
            self.disk_size
                .get_or_create(&[("path", path.clone())])
                .set(gauge_of(size));
            self.disk_free
                .get_or_create(&[("path", path)])
                .set(gauge_of(free));
        }
    }
}

/// A server's counters (see docs/operations.md for their names).
pub struct Metrics {
    registry: Registry,
    requests: Family<OpResult, Counter>,
    received: Family<Label, Counter>,
    sent: Family<Label, Counter>,
    duration: Family<Label, Histogram, fn() -> Histogram>,
    open: Gauge,
    accepted: Counter,
    refused: Family<Label, Counter>,
    usage: Arc<UsageGauges>,
}

/// The buckets of every latency histogram haar shows: 10 µs to about 42 s, by factors of 4.
pub fn latency_histogram() -> Histogram {
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
        let usage = Arc::new(UsageGauges {
            databases: Gauge::default(),
            fields: Gauge::default(),
            live: Gauge::default(),
            dead: Gauge::default(),
            pool_size: Gauge::default(),
            pool_heap: Gauge::default(),
            pool_free: Gauge::default(),
            disk_size: Family::default(),
            disk_free: Family::default(),
            seconds: Gauge::default(),
            probe: Mutex::default(),
        });
        for (name, help, g) in [
            (
                "store_databases",
                "Databases in the served store",
                &usage.databases,
            ),
            (
                "store_fields",
                "Live fields in the served store (the newest of each key)",
                &usage.fields,
            ),
            (
                "store_live_bytes",
                "Bytes of the live fields in the served store",
                &usage.live,
            ),
            (
                "store_dead_bytes",
                "Bytes of masked or wiped fields the served store still holds (a purge frees them)",
                &usage.dead,
            ),
            (
                "pool_size_bytes",
                "Length of the pmem pool file (pmem backend only)",
                &usage.pool_size,
            ),
            (
                "pool_heap_used_bytes",
                "Bytes of the pmem pool's heap handed out: live, dead, free and other (pmem backend only)",
                &usage.pool_heap,
            ),
            (
                "pool_free_bytes",
                "Bytes on the pmem pool heap's free list, reused by new fields (pmem backend only)",
                &usage.pool_free,
            ),
        ] {
            registry.register(name, help, g.clone());
        }
        registry.register(
            "disk_size_bytes",
            "Size of the file system holding each store root or pool file",
            usage.disk_size.clone(),
        );
        registry.register(
            "disk_free_bytes",
            "Bytes free for unprivileged writers on the file system holding each store root or pool file",
            usage.disk_free.clone(),
        );
        registry.register(
            "usage_probe_seconds",
            "Time the last computation of the store usage gauges took (a scrape starts one unless that would spend more than a tenth of the time since, and waits at most 1 s for it: a longer one's figures show at a later scrape)",
            usage.seconds.clone(),
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
            usage,
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

    /// Sets what finds the store usage gauges at each scrape (`haar_store_*`, `haar_pool_*`,
    /// `haar_disk_*`); without one they stay 0.
    pub fn set_usage_probe(&self, probe: UsageProbe) {
        let mut st = self.usage.probe.lock().unwrap_or_else(|p| p.into_inner());
        *st = ProbeState {
            probe: Some(Arc::new(probe)),
            ..ProbeState::default()
        };
    }

    /// The OpenMetrics text (ending with `# EOF`), store usage found now.
    pub fn render(&self) -> String {
        self.usage.refresh();
        encode_registry(&self.registry)
    }
}

impl Exposition for Metrics {
    fn render(&self) -> String {
        Metrics::render(self)
    }
}

/// Binds `addr` (`HOST:PORT`; port 0 picks a free one) and serves `GET /metrics` of `source`
/// there ([`serve_metrics`]); returns the bound address. What `--metrics ADDR` of every
/// long-running face calls.
pub fn listen<E: Exposition + ?Sized + 'static>(
    addr: &str,
    source: Arc<E>,
) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let at = listener.local_addr()?;
    serve_metrics(listener, source)?;
    Ok(at)
}

/// Serves `GET /metrics` on `listener` on a thread of its own, forever.
///
/// A minimal HTTP/1.1 responder rather than a web framework: the endpoint has one read-only
/// page that a scraper fetches every few seconds, one connection at a time is plenty, and the
/// server stays free of an async runtime. Each scrape reads the request head (at most 8 KiB,
/// 5 s), answers and closes.
pub fn serve_metrics<E: Exposition + ?Sized + 'static>(
    listener: TcpListener,
    metrics: Arc<E>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("haar-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(s) => {
                        if let Err(e) = answer(s, &*metrics) {
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

fn answer<E: Exposition + ?Sized>(stream: TcpStream, metrics: &E) -> io::Result<()> {
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
            "haar: the metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "haar: GET /metrics\n".to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, name: &str) -> Option<String> {
        text.lines()
            .find(|l| l.starts_with(name) && l.as_bytes().get(name.len()) == Some(&b' '))
            .map(String::from)
    }

    #[test]
    fn usage_is_shown_at_once_when_quick_and_later_when_slow() {
        let quick = Metrics::default();
        quick.set_usage_probe(Box::new(|| {
            Some(Usage {
                live_bytes: 42,
                disks: vec![("/x".into(), 100, 7)],
                ..Usage::default()
            })
        }));
        let text = quick.render();
        assert_eq!(
            line(&text, "haar_store_live_bytes").unwrap(),
            "haar_store_live_bytes 42"
        );
        assert!(
            text.contains("haar_disk_free_bytes{path=\"/x\"} 7"),
            "{text}"
        );

        let slow = Metrics::default();
        slow.set_usage_probe(Box::new(|| {
            std::thread::sleep(PROBE_WAIT + Duration::from_secs(1));
            Some(Usage {
                fields: 5,
                ..Usage::default()
            })
        }));
        let t = Instant::now();
        let text = slow.render();
        assert!(t.elapsed() < PROBE_WAIT + Duration::from_millis(800));
        assert_eq!(
            line(&text, "haar_store_fields").unwrap(),
            "haar_store_fields 0"
        );
        // Running still: a second scrape does not start another, nor wait.
        let t = Instant::now();
        slow.render();
        assert!(t.elapsed() < Duration::from_millis(500));
        std::thread::sleep(Duration::from_millis(1500));
        let text = slow.render();
        assert_eq!(
            line(&text, "haar_store_fields").unwrap(),
            "haar_store_fields 5"
        );
    }
}
