//! Extraction through `dist` over 3 server processes (issue 29, design §7.1 and §8 EXTRACT):
//! each server extracts the fields it holds and only values travel.
//!
//! - Every value equals ecCodes' decoding of the stored field (bit for bit, NaN where the
//!   bitmap says missing) and the local extraction of the same fields; fields come in the
//!   request's order whichever server holds each; real ERA5 GRIB1 fields (a partial request,
//!   read through the merged listing) and synthetic GRIB2 fields spread over every server.
//! - The bytes the servers sent the client, counted by a TCP relay in front of each, are at
//!   most twice the values' size, handshakes and framing included (the target).
//! - With replicas 2, a server killed with SIGKILL is stood in for by its replicas and the
//!   values are the same; with replicas 1, the extraction fails naming the dead server.
//!
//! The servers are this test binary started again (`child_server`, an ignored test that does
//! nothing unless a scenario starts it), each running what `haar serve` runs
//! (`haar::serve::bind` and `run_until_signalled`) over a pmem pool of its own.

use std::collections::BTreeMap;
use std::path::Path;

use haar::extract::{Extracted, Method, Selection, extract};
use haar::{FieldStore, FieldStoreExt};
use haar_core::Key;
use haar_core::request::Request;
use haar_grib::jump;

mod common;
use haar_store::dist::DistStore;
use haar_testkit::{Relay, ServerProcess};

const TOKEN: &str = "extract-dist-token";
const CHILD_ENV: &str = "HAAR_EXTRACT_DIST_CHILD";

/// The server process of the scenarios: `haar serve` over the pmem root in `$CHILD_ENV`.
#[test]
#[ignore = "run by the other tests as their server process"]
fn child_server() {
    common::serve_child(CHILD_ENV);
}

fn as_dist(store: &dyn FieldStore) -> &DistStore {
    store.as_any().unwrap().downcast_ref::<DistStore>().unwrap()
}

const SYNTH: &str = "class=od,expver=1,stream=oper,time=12,domain=g,type=fc,levtype=sfc,param=167";

fn synth_key(date: u32, step: u32) -> Key {
    Key::parse(&format!("{SYNTH},date={date},step={step}")).unwrap()
}

/// A simple-packed GRIB2 field of 60,000 points, with a bitmap when `step` is not 0.
fn synth_field(date: u32, step: u32) -> Vec<u8> {
    let values: Vec<f64> = (0..60_000u32)
        .map(|i| {
            if step > 0 && i % (7 + step) == 3 {
                f64::NAN
            } else {
                250.0 + (f64::from(i) * 0.002 + f64::from(date % 97)).sin() * 40.0
            }
        })
        .collect();
    jump::tests_support::field("regular_ll_sfc_grib2", &values, 16, 300, 200)
}

const STEPS: [u32; 3] = [12, 0, 6];

/// Dates whose databases the lanes of `dist` rank first, at least `per_lane` for each lane.
fn dates_over_every_lane(dist: &DistStore, lanes: usize, per_lane: usize) -> Vec<u32> {
    let mut per = vec![0; lanes];
    let mut dates = Vec::new();
    for date in 20261101..20261201 {
        let best = dist.ranking(&synth_key(date, 0)).unwrap()[0];
        if per[best] < per_lane {
            per[best] += 1;
            dates.push(date);
        }
        if per.iter().all(|&n| n == per_lane) {
            return dates;
        }
    }
    panic!("no {per_lane} databases for every lane among 100 dates: {per:?}");
}

/// The ERA5 fields of cfgrib's sample (GRIB1, 7,320 points each), with their keys.
fn era5() -> Vec<(Key, Vec<u8>)> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python/tests/data/era5-levels-members.grib");
    let bytes = std::fs::read(file).unwrap();
    haar_grib::messages(&bytes)
        .map(|m| {
            let m = m.unwrap();
            let key: Key = haar_grib::mars_keys(m.bytes).unwrap().into_iter().collect();
            (key, m.bytes.to_vec())
        })
        .collect()
}

fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Every value of `out` is ecCodes' value of the stored field at that index.
fn check_against_eccodes(out: &[Extracted], stored: &BTreeMap<Key, Vec<u8>>) {
    for e in out {
        let msg = stored
            .get(&e.key)
            .unwrap_or_else(|| panic!("{} was not archived", e.key));
        let want = jump::decode_values(msg).unwrap();
        assert_eq!(e.method, Method::Jump, "{}", e.key);
        for (&(i, j), v) in e.ranges.iter().zip(&e.values) {
            assert!(
                same(v, &want[i as usize..j as usize]),
                "{} [{i}, {j})",
                e.key
            );
        }
    }
}

/// A field's ranges, the bits of its values and how they were found.
type Found = (Vec<(u64, u64)>, Vec<Vec<u64>>, Method);

/// `a` and `b` hold the same fields with the same values (in any order).
fn same_results(a: &[Extracted], b: &[Extracted]) {
    let by_key = |x: &[Extracted]| -> BTreeMap<Key, Found> {
        x.iter()
            .map(|e| {
                let bits = (e.values.iter())
                    .map(|r| r.iter().map(|v| v.to_bits()).collect())
                    .collect();
                (e.key.clone(), (e.ranges.clone(), bits, e.method))
            })
            .collect()
    };
    assert_eq!(by_key(a), by_key(b));
}

/// 100 single-point ranges spread over the grid, and one longer range.
fn scattered(points: u64, grid: u64) -> Vec<(u64, u64)> {
    let mut r: Vec<(u64, u64)> = (0..points - 1)
        .map(|i| {
            let g = (i * 7919 + 13) % grid;
            (g, g + 1)
        })
        .collect();
    r.push((grid - 1, grid));
    r
}

#[test]
fn dist_over_three_servers_extracts_on_each_and_only_values_travel() {
    let dir = tempfile::tempdir().unwrap();
    let procs: Vec<ServerProcess> = (0..3)
        .map(|i| common::start_server(&dir.path().join(format!("node{i}")), CHILD_ENV, TOKEN))
        .collect();
    let relays: Vec<Relay> = procs.iter().map(|p| Relay::start(&p.addr)).collect();
    let via: Vec<String> = relays.iter().map(|r| r.addr.clone()).collect();
    let token = dir.path().join("node0/token");

    let mut store = common::open_dist(&via, 1, &token);
    let dates = dates_over_every_lane(as_dist(&*store), 3, 3);
    let mut local_store = common::open_local(&dir.path().join("local"), "backend: posix\n");
    let mut stored: BTreeMap<Key, Vec<u8>> = BTreeMap::new();
    let mut fields = era5();
    for &d in &dates {
        for s in STEPS {
            fields.push((synth_key(d, s), synth_field(d, s)));
        }
    }
    for (k, m) in &fields {
        store.archive(k, m).unwrap();
        local_store.archive(k, m).unwrap();
        stored.insert(store.split(k).unwrap().full(), m.clone());
    }
    store.flush().unwrap();
    local_store.flush().unwrap();
    drop(store);

    // Every server holds some of the fields.
    for p in &procs {
        let one = common::open_dist(std::slice::from_ref(&p.addr), 1, &token);
        let n = one.list(&Request::parse(SYNTH).unwrap()).unwrap().len();
        assert!(n >= 9, "{} holds {n} synthetic fields", p.addr);
    }

    // Synthetic fields, every keyword named: the request's order, dates interleaved over lanes.
    let date_list: Vec<String> = dates.iter().rev().map(|d| d.to_string()).collect();
    let step_list: Vec<String> = STEPS.iter().map(|s| s.to_string()).collect();
    let req = Request::parse(&format!(
        "{SYNTH},date={},step={}",
        date_list.join("/"),
        step_list.join("/")
    ))
    .unwrap();
    let sel = Selection::Ranges(scattered(100, 60_000));
    let before: u64 = relays.iter().map(Relay::sent).sum();
    // Opened after the count starts: its handshakes count too.
    let store = common::open_dist(&via, 1, &token);
    let out = extract(&*store, &req, &sel).unwrap();
    let wire: u64 = relays.iter().map(Relay::sent).sum::<u64>() - before;
    let mut order: Vec<Key> = Vec::new();
    for d in dates.iter().rev() {
        for s in STEPS {
            order.push(local_store.split(&synth_key(*d, s)).unwrap().full());
        }
    }
    assert_eq!(out.iter().map(|e| e.key.clone()).collect::<Vec<_>>(), order);
    check_against_eccodes(&out, &stored);
    same_results(&out, &extract(&*local_store, &req, &sel).unwrap());
    let values_bytes = (out.len() * 100 * 8) as u64;
    let field_bytes: u64 = out.iter().map(|e| stored[&e.key].len() as u64).sum();
    println!(
        "3 servers, {} fields: {wire} bytes from the servers for {values_bytes} bytes of \
         values ({:.2}x); the fields are {field_bytes} bytes",
        out.len(),
        wire as f64 / values_bytes as f64
    );
    assert!(
        wire <= 2 * values_bytes,
        "{wire} bytes on the wire for {values_bytes} bytes of values"
    );
    // Each server sent some of them.
    for r in &relays {
        assert!(r.sent() > 0, "nothing from {}", r.addr);
    }

    // Real GRIB1, a partial request (read through the merged listing), ranges and points.
    let era = Request::parse("class=ea").unwrap();
    for sel in [
        Selection::Ranges(vec![(0, 3), (7317, 7320), (100, 101), (5, 5)]),
        Selection::Points(vec![(90.0, 0.0), (-89.0, 358.0), (45.3, 10.2)]),
    ] {
        let out = extract(&*store, &era, &sel).unwrap();
        assert_eq!(out.len(), 160);
        check_against_eccodes(&out, &stored);
        same_results(&out, &extract(&*local_store, &era, &sel).unwrap());
    }
}

#[test]
fn a_dead_server_is_stood_in_for_by_its_replica_and_named_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut procs: Vec<ServerProcess> = (0..3)
        .map(|i| common::start_server(&dir.path().join(format!("node{i}")), CHILD_ENV, TOKEN))
        .collect();
    let addrs: Vec<String> = procs.iter().map(|p| p.addr.clone()).collect();
    let token = dir.path().join("node0/token");

    // Replicas 2 for some databases, 1 for others; every lane first for one of each.
    let mut two = common::open_dist(&addrs, 2, &token);
    let dates = dates_over_every_lane(as_dist(&*two), 3, 2);
    let best = |d: u32| as_dist(&*two).ranking(&synth_key(d, 0)).unwrap()[0];
    let (mut replicated, mut single) = (Vec::new(), Vec::new());
    for &d in &dates {
        if replicated.iter().any(|&r| best(r) == best(d)) {
            single.push(d);
        } else {
            replicated.push(d);
        }
    }
    let mut stored: BTreeMap<Key, Vec<u8>> = BTreeMap::new();
    for &d in &replicated {
        for s in STEPS {
            let (k, m) = (synth_key(d, s), synth_field(d, s));
            two.archive(&k, &m).unwrap();
            stored.insert(two.split(&k).unwrap().full(), m);
        }
    }
    two.flush().unwrap();
    drop(two);
    let mut one = common::open_dist(&addrs, 1, &token);
    for &d in &single {
        for s in STEPS {
            let (k, m) = (synth_key(d, s), synth_field(d, s));
            one.archive(&k, &m).unwrap();
            stored.insert(one.split(&k).unwrap().full(), m);
        }
    }
    one.flush().unwrap();

    // The first lane of the first replicated database dies.
    let dead = as_dist(&*one)
        .ranking(&synth_key(replicated[0], 0))
        .unwrap()[0];
    let dead_addr = addrs[dead].clone();
    procs[dead].kill_9();
    drop(one);

    let request = |dates: &[u32]| {
        let d: Vec<String> = dates.iter().map(|d| d.to_string()).collect();
        Request::parse(&format!("{SYNTH},date={},step=0/6/12", d.join("/"))).unwrap()
    };
    let sel = Selection::Ranges(vec![(0, 10), (59_990, 60_000), (31_337, 31_338)]);
    let two = common::open_dist(&addrs, 2, &token);
    let out = extract(&*two, &request(&replicated), &sel).unwrap();
    assert_eq!(out.len(), 9, "every replicated field, through the replicas");
    check_against_eccodes(&out, &stored);

    // Without replicas, a database of the dead server: the error names it.
    let on_dead: Vec<u32> = (single.iter().copied())
        .filter(|&d| as_dist(&*two).ranking(&synth_key(d, 0)).unwrap()[0] == dead)
        .collect();
    assert_eq!(on_dead.len(), 1);
    let one = common::open_dist(&addrs, 1, &token);
    let e = extract(&*one, &request(&on_dead), &sel)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&dead_addr), "{e} does not name {dead_addr}");
    // The live servers' databases still extract.
    let live: Vec<u32> = (single.iter().copied())
        .filter(|d| !on_dead.contains(d))
        .collect();
    let out = extract(&*one, &request(&live), &sel).unwrap();
    assert_eq!(out.len(), live.len() * 3);
    check_against_eccodes(&out, &stored);
}
