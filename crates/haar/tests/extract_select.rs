//! Extraction through `select` over 3 server processes (issue 29, design §7 and §16): each
//! route a retrieve would consult extracts by its own path, so a route that is a `dist` of
//! servers or one server (`remote`) extracts there and only values travel.
//!
//! - Every value equals ecCodes' decoding of the whole stored field (bit for bit, NaN where
//!   the bitmap says missing), and the fields come in the order `select`'s retrieve gives them.
//! - The bytes the servers sent the client, counted by a TCP relay in front of each, are at
//!   most twice the values' size, handshakes and framing included, and a small fraction of the
//!   fields' size (before, select retrieved whole fields through every route).
//!
//! The servers are this test binary started again (`child_server`, an ignored test that does
//! nothing unless the scenario starts it), each running what `haar serve` runs
//! (`haar::serve::bind` and `run_until_signalled`) over a pmem pool of its own. The process and
//! relay helpers are shared with `extract_dist.rs` (`tests/common`).

use std::path::Path;

use haar::extract::{Method, Selection, extract};
use haar::{ConfigSource, FieldStore, OpenOptions};
use haar_core::Key;
use haar_core::request::Request;
use haar_grib::jump;

mod common;
use haar_testkit::{Relay, ServerProcess};

const TOKEN: &str = "extract-select-token";
const CHILD_ENV: &str = "HAAR_EXTRACT_SELECT_CHILD";

/// The server process of the scenarios: `haar serve` over the pmem root in `$CHILD_ENV`.
#[test]
#[ignore = "run by the other tests as their server process"]
fn child_server() {
    common::serve_child(CHILD_ENV);
}

/// `select` as every face opens it: temperature (`param=167`) to a `dist` of the first two
/// servers, everything else to the third.
fn open_select(servers: &[String], token: &Path) -> Box<dyn FieldStore> {
    let yaml = format!(
        "type: select\nroutes:\n  - match: param=167\n    store: {{type: dist, replicas: 1, \
         lanes: [{{type: remote, server: '{}'}}, {{type: remote, server: '{}'}}]}}\n  \
         - match: ''\n    store: {{type: remote, server: '{}'}}\n",
        servers[0], servers[1], servers[2]
    );
    OpenOptions {
        config: ConfigSource::Yaml {
            text: yaml,
            origin: "test".into(),
        },
        token_file: Some(token.into()),
        ..OpenOptions::default()
    }
    .field_store()
    .unwrap()
}

const BASE: &str = "class=od,expver=1,stream=oper,time=12,domain=g,type=fc,levtype=sfc";
const DATES: [u32; 6] = [20261101, 20261102, 20261103, 20261104, 20261105, 20261106];
const STEPS: [u32; 2] = [0, 6];
const PARAMS: [u32; 2] = [167, 165];
const POINTS: u64 = 60_000;

fn key(param: u32, date: u32, step: u32) -> Key {
    Key::parse(&format!("{BASE},param={param},date={date},step={step}")).unwrap()
}

/// A simple-packed GRIB2 field of 60,000 points, with a bitmap when `step` is not 0.
fn field(param: u32, date: u32, step: u32) -> Vec<u8> {
    let values: Vec<f64> = (0..POINTS as u32)
        .map(|i| {
            if step > 0 && i % (7 + step) == 3 {
                f64::NAN
            } else {
                f64::from(param) + (f64::from(i) * 0.002 + f64::from(date % 97)).sin() * 40.0
            }
        })
        .collect();
    jump::tests_support::field("regular_ll_sfc_grib2", &values, 16, 300, 200)
}

fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

#[test]
fn select_over_servers_extracts_on_each_route_and_only_values_travel() {
    let dir = tempfile::tempdir().unwrap();
    let procs: Vec<ServerProcess> = (0..3)
        .map(|i| common::start_server(&dir.path().join(format!("node{i}")), CHILD_ENV, TOKEN))
        .collect();
    let relays: Vec<Relay> = procs.iter().map(|p| Relay::start(&p.addr)).collect();
    let via: Vec<String> = relays.iter().map(|r| r.addr.clone()).collect();
    let token = dir.path().join("node0/token");

    let mut store = open_select(&via, &token);
    for p in PARAMS {
        for d in DATES {
            for s in STEPS {
                store.archive(&key(p, d, s), &field(p, d, s)).unwrap();
            }
        }
    }
    store.flush().unwrap();
    drop(store);

    let j = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join("/");
    let req = Request::parse(&format!(
        "{BASE},param={},date={},step={}",
        j(&PARAMS),
        j(&DATES),
        j(&STEPS)
    ))
    .unwrap();
    // The whole fields, as select's retrieve gives them (and in its order).
    let store = open_select(&via, &token);
    let mut whole: Vec<(Key, Vec<u8>)> = Vec::new();
    store
        .retrieve(&req, &mut |k, b, _| {
            whole.push((k.clone(), b.to_vec()));
            Ok(())
        })
        .unwrap();
    assert_eq!(whole.len(), PARAMS.len() * DATES.len() * STEPS.len());
    drop(store);

    let ranges: Vec<(u64, u64)> = (0..100u64)
        .map(|i| {
            let g = (i * 7919 + 13) % POINTS;
            (g, g + 1)
        })
        .collect();
    let sel = Selection::Ranges(ranges.clone());
    let before: Vec<u64> = relays.iter().map(Relay::sent).collect();
    // Opened after the count starts: its handshakes count too.
    let store = open_select(&via, &token);
    let out = extract(&*store, &req, &sel).unwrap();
    let sent: Vec<u64> = (relays.iter().zip(&before))
        .map(|(r, b)| r.sent() - b)
        .collect();
    let wire: u64 = sent.iter().sum();

    let keys = |x: &[(Key, Vec<u8>)]| x.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(
        out.iter().map(|e| e.key.clone()).collect::<Vec<_>>(),
        keys(&whole),
        "extraction gives the fields a retrieve gives, in its order"
    );
    for (e, (_, msg)) in out.iter().zip(&whole) {
        assert_eq!(e.method, Method::Jump, "{}", e.key);
        let want = jump::decode_values(msg).unwrap();
        for (&(i, j), v) in e.ranges.iter().zip(&e.values) {
            assert!(
                same(v, &want[i as usize..j as usize]),
                "{} [{i}, {j})",
                e.key
            );
        }
    }
    let values_bytes = (out.len() * ranges.len() * 8) as u64;
    let field_bytes: u64 = whole.iter().map(|(_, m)| m.len() as u64).sum();
    println!(
        "select over 3 servers, {} fields: {wire} bytes from the servers ({sent:?} per server) \
         for {values_bytes} bytes of values ({:.2}x); the fields are {field_bytes} bytes",
        out.len(),
        wire as f64 / values_bytes as f64
    );
    assert!(
        wire <= 2 * values_bytes,
        "{wire} bytes on the wire for {values_bytes} bytes of values"
    );
    assert!(wire * 20 < field_bytes, "{wire} of {field_bytes} bytes");
}
