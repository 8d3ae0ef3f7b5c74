//! `haar serve --metrics` and `--log-format json` on a real server process: the counters move
//! by exactly what a client did through it (archive, flush, retrieve, a refused login), the
//! page is OpenMetrics text, and every stderr line of a JSON log is a JSON object.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::Request;
use haar_net::{ClientConfig, RemoteStore};
use haar_store::FieldStore;

#[path = "common/metrics.rs"]
mod metrics;
use metrics::{get, parse, value};

const TOKEN: &str = "metrics-test-token";
const HAAR: &str = env!("CARGO_BIN_EXE_haar");

struct Served {
    child: Child,
    addr: String,
    metrics: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `haar serve --metrics 127.0.0.1:0 EXTRA`, stderr into `log`; both addresses from stdout.
fn serve(root: &Path, log: &Path, extra: &[&str], log_env: Option<&str>) -> Served {
    let mut cmd = Command::new(HAAR);
    cmd.arg("--root")
        .arg(root)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "127.0.0.1:0",
        ])
        .args(extra)
        .env("HAAR_TOKEN", TOKEN)
        .env_remove("HAAR_CONFIG")
        .env_remove("HAAR_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap());
    if let Some(v) = log_env {
        cmd.env("HAAR_LOG", v);
    }
    let mut child = cmd.spawn().expect("haar serve starts");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut next = |prefix: &str| {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        line.trim()
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("expected {prefix:?}, got {line:?}"))
            .to_string()
    };
    let addr = next("listening on ");
    let metrics = next("metrics on ");
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Served {
        child,
        addr,
        metrics,
    }
}

fn key(step: u32) -> Key {
    Key::parse(&format!(
        "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc,step={step},param=167"
    ))
    .unwrap()
}

fn client(addr: &str, token: &str) -> haar_store::Result<RemoteStore> {
    RemoteStore::connect(
        addr,
        &ClientConfig {
            token: Some(token.into()),
            // Reads through the server, not from its store directly.
            local_reads: false,
            ..ClientConfig::default()
        },
    )
}

#[test]
fn metrics_count_what_clients_did_and_parse_as_openmetrics() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(&dir.path().join("root"), &dir.path().join("log"), &[], None);

    let (head, body) = get(&s.metrics, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text"),
        "{head}"
    );
    let before = parse(&body);
    assert_eq!(value(&before, "haar_connections_open"), 0.0);
    assert_eq!(value(&before, "haar_connections_accepted_total"), 0.0);

    let sizes = [1000usize, 2500, 70_000];
    let total: usize = sizes.iter().sum();
    {
        let mut c = client(&s.addr, TOKEN).unwrap();
        for (i, n) in sizes.iter().enumerate() {
            c.archive(&key(i as u32), &vec![i as u8; *n]).unwrap();
        }
        c.flush().unwrap();
        let mut got = 0usize;
        let req = Request::parse(
            "class=od,stream=oper,date=20261121,time=12,type=fc,levtype=sfc,step=0/1/2,param=167",
        )
        .unwrap();
        let report = c
            .retrieve(&req, &mut |_, d, _| {
                got += d.len();
                Ok(())
            })
            .unwrap();
        assert_eq!(got, total, "{report:?}");
        // The connection is open while the client holds it.
        let open = parse(&get(&s.metrics, "/metrics").1);
        assert_eq!(value(&open, "haar_connections_open"), 1.0);
    }
    // A wrong token: refused at login, counted by cause.
    let refused = client(&s.addr, "not-the-token").map(|_| ()).unwrap_err();
    assert!(refused.to_string().contains("token rejected"), "{refused}");

    // The server counts a request after its reply is written and a close after the client's:
    // wait until the last of them shows (no sleep of a guessed length).
    let until = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let m = parse(&get(&s.metrics, "/metrics").1);
        if value(&m, "haar_connections_open") == 0.0
            && value(&m, r#"haar_logins_refused_total{cause="token_rejected"}"#) >= 1.0
        {
            break m;
        }
        assert!(Instant::now() < until, "{m:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let v = |s: &str| value(&after, s);
    assert_eq!(v(r#"haar_requests_total{op="archive",result="ok"}"#), 3.0);
    assert_eq!(v(r#"haar_requests_total{op="flush",result="ok"}"#), 1.0);
    assert_eq!(v(r#"haar_requests_total{op="retrieve",result="ok"}"#), 1.0);
    assert_eq!(
        v(r#"haar_field_bytes_received_total{op="archive"}"#),
        total as f64
    );
    assert_eq!(
        v(r#"haar_field_bytes_sent_total{op="retrieve"}"#),
        total as f64
    );
    assert_eq!(
        v(r#"haar_request_duration_seconds_count{op="archive"}"#),
        3.0
    );
    assert_eq!(
        v(r#"haar_request_duration_seconds_bucket{le="+Inf",op="retrieve"}"#),
        1.0
    );
    assert_eq!(
        v(r#"haar_logins_refused_total{cause="token_rejected"}"#),
        1.0
    );
    assert_eq!(v("haar_connections_accepted_total"), 2.0);
    assert_eq!(v("haar_connections_open"), 0.0);

    // The store's usage, found at a scrape (a scrape right after the last may show the
    // figures it found).
    let usage = metrics::scrape_until(&s.metrics, "usage after the flush", |m| {
        value(m, "haar_store_live_bytes") == total as f64
    });
    assert_eq!(value(&usage, "haar_store_fields"), 3.0);
    assert_eq!(value(&usage, "haar_store_databases"), 1.0);
    assert_eq!(value(&usage, "haar_store_dead_bytes"), 0.0);
    let disk = |name: &str| {
        (usage.iter())
            .find(|(k, _)| k.starts_with(&format!("{name}{{path=")))
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no {name}: {usage:?}"))
    };
    assert!(disk("haar_disk_free_bytes") > 0.0);
    assert!(disk("haar_disk_size_bytes") >= disk("haar_disk_free_bytes"));

    // Anything else than /metrics is not found.
    let (head, _) = get(&s.metrics, "/");
    assert!(head.starts_with("HTTP/1.1 404 "), "{head}");
}

/// A pmem pool's server shows its heap, and a field archived again moves the first copy's
/// bytes from live to dead (a purge would free them).
#[test]
fn a_pool_servers_usage_shows_live_dead_and_heap_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(
        &dir.path().join("root"),
        &dir.path().join("log"),
        &["--backend", "pmem"],
        None,
    );
    let mut c = client(&s.addr, TOKEN).unwrap();
    c.archive(&key(0), &[7u8; 5000]).unwrap();
    c.flush().unwrap();
    let m = metrics::scrape_until(&s.metrics, "the first field", |m| {
        value(m, "haar_store_live_bytes") == 5000.0
    });
    assert!(value(&m, "haar_pool_size_bytes") > 0.0, "{m:?}");
    assert!(value(&m, "haar_pool_heap_used_bytes") >= 5000.0, "{m:?}");
    c.archive(&key(0), &[8u8; 3000]).unwrap();
    c.flush().unwrap();
    let m = metrics::scrape_until(&s.metrics, "the field archived again", |m| {
        value(m, "haar_store_live_bytes") == 3000.0
    });
    assert_eq!(value(&m, "haar_store_dead_bytes"), 5000.0, "{m:?}");
    assert_eq!(value(&m, "haar_store_fields"), 1.0, "{m:?}");
    assert!(
        (m.keys()).any(|k| k.starts_with("haar_disk_free_bytes{path=")),
        "{m:?}"
    );
}

#[test]
fn json_log_lines_are_objects_with_level_and_peer() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let s = serve(
        &dir.path().join("root"),
        &log,
        &["--log-format", "json"],
        Some("info"),
    );
    client(&s.addr, TOKEN)
        .unwrap()
        .list(&Request::default())
        .unwrap();
    let _ = client(&s.addr, "not-the-token").map(|_| ()).unwrap_err();
    let lines = metrics::json_log_until(&log, |lines| {
        let refused = lines.iter().any(|l| l["message"] == "refused");
        let logged_in = lines.iter().any(|l| l["message"] == "logged in");
        refused && logged_in
    });
    for l in &lines {
        assert!(l["level"].is_string(), "{l}");
    }
    let login = lines.iter().find(|l| l["message"] == "logged in").unwrap();
    assert!(
        login["span"]["peer"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"),
        "{login}"
    );
    assert_eq!(login["span"]["token"], "read-write", "{login}");
    let refused = lines.iter().find(|l| l["message"] == "refused").unwrap();
    assert_eq!(refused["level"], "WARN", "{refused}");
    assert!(
        refused["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{refused}"
    );
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .contains("token rejected"),
        "{refused}"
    );
}
