//! `DistStore::read_by_lane` and `requests_for` (design §7.1): the path `haar::extract` takes
//! through `dist`, over in-process lanes that can be switched off like dead servers. The
//! operation here reads each lane by the requests `requests_for` makes of its keys, as an
//! EXTRACT does, and must give what `retrieve` gives: the same fields, in request order, with
//! the same replicas and failover; one call per lane when nothing is missing.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use haar_core::Key;
use haar_core::request::Request;
use haar_core::schema::Schema;
use haar_core::value::Context;
use haar_store::dist::{DistStore, Placement, requests_for};
use haar_store::{FieldStore, MemoryBackend, Store};
use proptest::prelude::*;

mod common;

use common::Switchable;

const LANES: usize = 3;

fn dist(
    backends: &[MemoryBackend],
    down: &[Arc<AtomicBool>],
    replicas: usize,
    placement: Placement,
) -> DistStore {
    let lanes = (0..LANES)
        .map(|i| {
            let name = format!("node{i}:7000");
            let lane: Box<dyn FieldStore> = Box::new(Switchable {
                inner: Store::new(backends[i].clone()),
                down: down[i].clone(),
                name: name.clone(),
                reads: Arc::default(),
            });
            (name, lane)
        })
        .collect();
    DistStore::new(
        lanes,
        replicas,
        placement,
        Arc::new(Schema::builtin().clone()),
        Context::now(),
    )
    .unwrap()
}

const BASE: &str = "class=od,expver=1,stream=oper,time=12,domain=g,type=fc,levtype=sfc,param=167";

fn key(date: u32, step: u32) -> Key {
    Key::parse(&format!("{BASE},date={date},step={step}")).unwrap()
}

/// The field of a key: its text, so a field names what it is.
fn payload(k: &Key) -> Vec<u8> {
    k.to_string().into_bytes()
}

/// `read_by_lane` with the operation an EXTRACT is: each lane read by `requests_for` of the
/// keys asked of it. Returns what was delivered, the keys missing and the calls per lane.
type ByLane = (Vec<(Key, Vec<u8>)>, Vec<Key>, Vec<usize>);

fn read(d: &DistStore, req: &Request) -> haar_store::Result<ByLane> {
    let (keys, _) = d.request_keys(req)?;
    let calls: Vec<AtomicUsize> = (0..LANES).map(|_| AtomicUsize::new(0)).collect();
    let mut out = Vec::new();
    let missing = d.read_by_lane(
        "extract from",
        keys,
        &|lane, keys, found| {
            calls[lane_index(lane)].fetch_add(1, Ordering::SeqCst);
            for r in requests_for(keys) {
                lane.retrieve(&r, &mut |k, b, _| {
                    found(k.clone(), b.to_vec());
                    Ok(())
                })?;
            }
            Ok(())
        },
        &mut |k, b| {
            out.push((k, b));
            Ok(())
        },
    )?;
    let calls = calls.into_iter().map(AtomicUsize::into_inner).collect();
    Ok((out, missing, calls))
}

/// Which lane of [`dist`] `lane` is, from its name (`node{i}:7000`).
fn lane_index(lane: &dyn FieldStore) -> usize {
    lane.describe()[4..5].parse().unwrap()
}

fn retrieved(d: &DistStore, req: &Request) -> Vec<(Key, Vec<u8>)> {
    let mut out = Vec::new();
    d.retrieve(req, &mut |k, b, _| {
        out.push((k.clone(), b.to_vec()));
        Ok(())
    })
    .unwrap();
    out
}

const DATES: [u32; 8] = [
    20261101, 20261102, 20261103, 20261104, 20261105, 20261106, 20261107, 20261108,
];
const STEPS: [u32; 4] = [18, 0, 12, 6];

fn request(dates: &[u32], steps: &[u32]) -> Request {
    let j = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join("/");
    Request::parse(&format!("{BASE},date={},step={}", j(dates), j(steps))).unwrap()
}

#[test]
fn reads_by_lane_as_retrieve_does_in_request_order_one_call_per_lane() {
    for placement in [Placement::Database, Placement::Field] {
        let backends: Vec<MemoryBackend> = (0..LANES).map(|_| MemoryBackend::new()).collect();
        let down: Vec<Arc<AtomicBool>> = (0..LANES).map(|_| Arc::default()).collect();
        let mut d = dist(&backends, &down, 1, placement);
        for date in DATES {
            for step in STEPS {
                let k = key(date, step);
                d.archive(&k, &payload(&k)).unwrap();
            }
        }
        d.flush().unwrap();
        // Dates out of order, every key stored: one call per lane that holds any.
        let req = request(&[20261105, 20261101, 20261108, 20261103], &[6, 0]);
        let (out, missing, calls) = read(&d, &req).unwrap();
        assert_eq!(out, retrieved(&d, &req), "{placement:?}");
        assert_eq!(out.len(), 4 * 2, "{placement:?}");
        assert!(missing.is_empty());
        assert!(calls.iter().all(|&c| c <= 1), "{placement:?}: {calls:?}");
        // A step and a date that are not stored: asked of every lane, then missing.
        let req = request(
            &[20261105, 20261101, 20261130, 20261108, 20261103],
            &[6, 0, 3],
        );
        let (out, missing, _) = read(&d, &req).unwrap();
        assert_eq!(out, retrieved(&d, &req), "{placement:?}");
        assert_eq!(out.len(), 4 * 2, "{placement:?}");
        assert_eq!(missing.len(), 5 * 3 - 4 * 2, "{placement:?}");
        // A partial request: the merged listing's keys, in key order.
        let (out, _, _) = read(&d, &Request::parse("class=od,step=12").unwrap()).unwrap();
        assert_eq!(out.len(), DATES.len(), "{placement:?}");
    }
}

#[test]
fn a_down_lane_is_stood_in_for_by_replicas_and_named_without() {
    let backends: Vec<MemoryBackend> = (0..LANES).map(|_| MemoryBackend::new()).collect();
    let down: Vec<Arc<AtomicBool>> = (0..LANES).map(|_| Arc::default()).collect();
    let mut two = dist(&backends, &down, 2, Placement::Database);
    for date in DATES {
        for step in STEPS {
            let k = key(date, step);
            two.archive(&k, &payload(&k)).unwrap();
        }
    }
    two.flush().unwrap();
    let req = request(&DATES, &STEPS);
    let all = retrieved(&two, &req);
    assert_eq!(all.len(), 32);
    for (dead, switch) in down.iter().enumerate() {
        switch.store(true, Ordering::SeqCst);
        let (out, missing, _) = read(&two, &req).unwrap();
        assert_eq!(out, all, "lane {dead} down");
        assert!(missing.is_empty());
        switch.store(false, Ordering::SeqCst);
    }
    // A lane down holding the only copy: replicas 1.
    let backends: Vec<MemoryBackend> = (0..LANES).map(|_| MemoryBackend::new()).collect();
    let mut one = dist(&backends, &down, 1, Placement::Database);
    for date in DATES {
        let k = key(date, 0);
        one.archive(&k, &payload(&k)).unwrap();
    }
    one.flush().unwrap();
    let dead = one.ranking(&key(DATES[0], 0)).unwrap()[0];
    down[dead].store(true, Ordering::SeqCst);
    let e = read(&one, &request(&DATES, &[0])).unwrap_err().to_string();
    assert!(
        e.contains(&format!("node{dead}:7000")) && e.contains("extract from"),
        "{e}"
    );
    let live: Vec<u32> = (DATES.iter().copied())
        .filter(|&d| one.ranking(&key(d, 0)).unwrap()[0] != dead)
        .collect();
    let (out, missing, _) = read(&one, &request(&live, &[0])).unwrap();
    assert_eq!(out.len(), live.len());
    assert!(missing.is_empty());
}

/// The lanes of a round are asked at once: each call waits (up to 10 s, far beyond need) until
/// every lane asked is inside its call, so asked one after another the first would see only
/// itself. Counted, not timed: the test cannot pass by luck of the clock. The time printed is
/// for the reader (3 lanes of 100 ms each: about 0.1 s at once, 0.3 s one after another).
#[test]
fn the_lanes_of_a_round_are_asked_at_once_and_deliver_in_request_order() {
    let backends: Vec<MemoryBackend> = (0..LANES).map(|_| MemoryBackend::new()).collect();
    let down: Vec<Arc<AtomicBool>> = (0..LANES).map(|_| Arc::default()).collect();
    let mut d = dist(&backends, &down, 1, Placement::Database);
    for date in DATES {
        for step in STEPS {
            let k = key(date, step);
            d.archive(&k, &payload(&k)).unwrap();
        }
    }
    d.flush().unwrap();
    let best = |date: u32| d.ranking(&key(date, 0)).unwrap()[0];
    let lanes: BTreeSet<usize> = DATES.iter().map(|&date| best(date)).collect();
    assert_eq!(lanes.len(), LANES, "the dates' databases cover every lane");
    // Every date, backwards (interleaved over the lanes), every key stored.
    let dates: Vec<u32> = DATES.iter().rev().copied().collect();
    let req = request(&dates, &STEPS);
    let asked = lanes;
    let (keys, _) = d.request_keys(&req).unwrap();
    let inside = AtomicUsize::new(0);
    let most_inside = AtomicUsize::new(0);
    let started = std::time::Instant::now();
    let mut out = Vec::new();
    let missing = d
        .read_by_lane(
            "extract from",
            keys,
            &|lane, keys, found| {
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most_inside.fetch_max(now, Ordering::SeqCst);
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while most_inside.load(Ordering::SeqCst) < asked.len()
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                // A slow server.
                std::thread::sleep(std::time::Duration::from_millis(100));
                for r in requests_for(keys) {
                    lane.retrieve(&r, &mut |k, b, _| {
                        found(k.clone(), b.to_vec());
                        Ok(())
                    })?;
                }
                inside.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            },
            &mut |k, b| {
                out.push((k, b));
                Ok(())
            },
        )
        .unwrap();
    println!(
        "{} lanes of 100 ms each: {:.3} s",
        asked.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        most_inside.into_inner(),
        asked.len(),
        "lanes inside at once"
    );
    assert!(missing.is_empty());
    assert_eq!(out, retrieved(&d, &req), "the request's order");
}

proptest! {
    /// The requests name exactly the keys given: no key left out, none added.
    #[test]
    fn requests_for_names_exactly_the_keys(
        picks in proptest::collection::vec(any::<bool>(), 3 * 4 * 2),
        optional in any::<bool>(),
    ) {
        let mut keys = Vec::new();
        let mut i = 0;
        for date in [20261101, 20261102, 20261103] {
            for step in [0, 6, 12, 18] {
                for param in ["167", "130"] {
                    if picks[i] {
                        let mut k = Key::parse(&format!("class=od,date={date},step={step}"))
                            .unwrap()
                            .with("param", param);
                        // Keys naming a keyword more: never merged with the others.
                        if optional && step == 6 {
                            k = k.with("number", "1");
                        }
                        keys.push(k);
                    }
                    i += 1;
                }
            }
        }
        let reqs = requests_for(&keys);
        let named: Vec<Key> = reqs.iter().flat_map(Request::expand).collect();
        let want: BTreeSet<Key> = keys.iter().cloned().collect();
        prop_assert_eq!(named.len(), want.len(), "a key named twice: {:?}", reqs);
        prop_assert_eq!(named.into_iter().collect::<BTreeSet<_>>(), want);
        if keys.len() == 24 && !optional {
            prop_assert_eq!(reqs.len(), 1, "a full product is one request");
        }
    }
}
