//! Scraping a `--metrics` endpoint in tests (`haar serve`, `haar stage daemon`, `haar mount`),
//! shared by the test binaries that include it with
//! `#[path = "common/metrics.rs"] mod metrics;`: the page over plain TCP, its samples, and a
//! check of the OpenMetrics form on the way; and the check that a JSON log is one object a
//! line.
#![allow(dead_code)] // each binary uses some

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// The body of `GET path`, after checking the status and content type.
pub fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: */*\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP head");
    (head.to_string(), body.to_string())
}

/// Samples of an exposition (`name{labels}` → value), checking its form on the way: every
/// sample belongs to a family declared by `# TYPE` before it, and the text ends with `# EOF`.
pub fn parse(text: &str) -> HashMap<String, f64> {
    assert!(text.ends_with("# EOF\n"), "no # EOF at the end: {text}");
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with('#') {
            assert!(
                line.starts_with("# HELP ") || line == "# EOF",
                "unexpected comment {line}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        let name = series.split('{').next().unwrap();
        assert!(name.starts_with("haar_"), "{line}");
        let family = types
            .keys()
            .filter(|f| name.starts_with(f.as_str()))
            .max_by_key(|f| f.len())
            .unwrap_or_else(|| panic!("{line}: no # TYPE before it"));
        let suffix = &name[family.len()..];
        let ok = match types[family].as_str() {
            "counter" => suffix == "_total",
            "gauge" => suffix.is_empty(),
            _ => ["_sum", "_count", "_bucket"].contains(&suffix),
        };
        assert!(ok, "{line}: {suffix:?} in a {} family", types[family]);
        samples.insert(series.to_string(), value);
    }
    samples
}

pub fn value(samples: &HashMap<String, f64>, series: &str) -> f64 {
    samples.get(series).copied().unwrap_or(0.0)
}

/// The samples of `GET /metrics` at `addr`, after checking the status and content type.
pub fn scrape(addr: &str) -> HashMap<String, f64> {
    let (head, body) = get(addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text"),
        "{head}"
    );
    parse(&body)
}

/// Scrapes `addr` until `done` holds of the samples (30 s at most: a counter that moves after
/// the reply, as at the end of a connection, shows a little later).
pub fn scrape_until(
    addr: &str,
    what: &str,
    done: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let m = scrape(addr);
        if done(&m) {
            return m;
        }
        assert!(Instant::now() < until, "{what}: never happened; {m:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The whole lines of the log file `path`, each parsed as a JSON object (a line that is not
/// one fails the test), read until `done` holds of them (30 s at most).
pub fn json_log_until(
    path: &Path,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // Only whole lines: the last one may be being written.
        let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        let lines: Vec<serde_json::Value> = (whole.lines())
            .map(|l| {
                let v: serde_json::Value =
                    serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
                assert!(v.is_object(), "not an object: {l}");
                v
            })
            .collect();
        if done(&lines) {
            return lines;
        }
        assert!(Instant::now() < until, "{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
