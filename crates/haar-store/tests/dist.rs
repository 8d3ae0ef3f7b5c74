//! dist and select front-ends over in-process lanes: placement by rendezvous hash, replicas,
//! failover and read fallback (design §7). Real servers are tested in haar-net.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use haar_core::request::Request;
use haar_core::schema::Schema;
use haar_core::value::Context;
use haar_core::{Key, rendezvous};
mod common;

use common::Switchable;
use haar_store::conformance::{field_key, payload};
use haar_store::dist::{DistStore, Placement, SelectStore};
use haar_store::{FieldStore, FieldStoreExt, MemoryBackend, Store};

struct Cluster {
    names: Vec<String>,
    backends: Vec<MemoryBackend>,
    switches: Vec<Arc<AtomicBool>>,
    reads: Vec<Arc<AtomicUsize>>,
}

impl Cluster {
    fn new(n: usize) -> Cluster {
        Cluster {
            names: (0..n).map(|i| format!("node{i}:7000")).collect(),
            backends: (0..n).map(|_| MemoryBackend::new()).collect(),
            switches: (0..n).map(|_| Arc::new(AtomicBool::new(false))).collect(),
            reads: (0..n).map(|_| Arc::new(AtomicUsize::new(0))).collect(),
        }
    }
    fn dist(&self, replicas: usize, placement: Placement) -> DistStore {
        let lanes = (0..self.names.len())
            .map(|i| {
                let lane: Box<dyn FieldStore> = Box::new(Switchable {
                    inner: Store::new(self.backends[i].clone()),
                    down: self.switches[i].clone(),
                    name: self.names[i].clone(),
                    reads: self.reads[i].clone(),
                });
                (self.names[i].clone(), lane)
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
    fn holders(&self, key: &Key) -> Vec<usize> {
        (0..self.names.len())
            .filter(|&i| {
                let s = Store::new(self.backends[i].clone());
                s.retrieve_keys(std::slice::from_ref(key), |_, _, _| Ok(()))
                    .unwrap()
                    .found
                    == 1
            })
            .collect()
    }
    fn set_down(&self, i: usize, down: bool) {
        self.switches[i].store(down, Ordering::SeqCst);
    }
}

fn keys() -> Vec<Key> {
    let mut v = Vec::new();
    for d in 1..=8 {
        for s in 0..5 {
            v.push(field_key(&format!("202604{d:02}"), s, 500, "130"));
        }
    }
    v
}

fn db_of(key: &Key) -> Key {
    Schema::builtin().split(key, &Context::now()).unwrap().db
}

#[test]
fn each_database_lives_on_its_top_lane() {
    let c = Cluster::new(4);
    let mut d = c.dist(1, Placement::Database);
    for k in keys() {
        d.archive(&k, &payload(&k, 0, 300)).unwrap();
    }
    d.flush().unwrap();
    let mut used = std::collections::HashSet::new();
    for k in keys() {
        let top = rendezvous::rank(&c.names, &db_of(&k))[0];
        assert_eq!(c.holders(&k), [top], "{k}");
        used.insert(top);
    }
    assert!(
        used.len() >= 3,
        "8 databases should spread over the lanes: {used:?}"
    );
    // Reads through dist, in request order, byte-identical.
    let req = Request::parse("class=od,expver=1,stream=oper,date=20260403/20260401,time=12,type=fc,levtype=pl,levelist=500,step=4/0,param=130").unwrap();
    let mut got = Vec::new();
    let rep = d
        .retrieve(&req, &mut |k, b, _| {
            assert!(b == payload(k, 0, 300));
            got.push((
                k.get("date").unwrap().to_string(),
                k.get("step").unwrap().to_string(),
            ));
            Ok(())
        })
        .unwrap();
    assert!(rep.missing.is_empty(), "{:?}", rep.missing);
    assert_eq!(
        got,
        [
            ("20260403", "4"),
            ("20260403", "0"),
            ("20260401", "4"),
            ("20260401", "0")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert_eq!(
        d.list(&Request::parse("class=od").unwrap()).unwrap().len(),
        40
    );
}

#[test]
fn field_placement_spreads_one_database() {
    let c = Cluster::new(4);
    let mut d = c.dist(1, Placement::Field);
    let ks: Vec<Key> = (0..40)
        .map(|s| field_key("20260501", s, 500, "130"))
        .collect();
    for k in &ks {
        d.archive(k, &payload(k, 0, 100)).unwrap();
    }
    d.flush().unwrap();
    let lanes: std::collections::HashSet<usize> = ks.iter().map(|k| c.holders(k)[0]).collect();
    assert!(lanes.len() >= 3, "{lanes:?}");
}

#[test]
fn replicas_survive_a_dead_lane_and_failover_is_by_hash_order() {
    let c = Cluster::new(4);
    let mut d = c.dist(2, Placement::Database);
    for k in keys() {
        d.archive(&k, &payload(&k, 0, 200)).unwrap();
    }
    d.flush().unwrap();
    for k in keys() {
        let r = rendezvous::rank(&c.names, &db_of(&k));
        let mut want = vec![r[0], r[1]];
        want.sort();
        assert_eq!(c.holders(&k), want, "{k}");
    }
    // Kill the top lane of the first key's database: reads fall back to the replica.
    let k0 = keys()[0].clone();
    let top = rendezvous::rank(&c.names, &db_of(&k0))[0];
    c.set_down(top, true);
    let reader = c.dist(2, Placement::Database);
    for k in keys() {
        let mut n = 0;
        reader
            .retrieve(&Request::parse(&k.to_string()).unwrap(), &mut |kk, b, _| {
                assert!(b == payload(kk, 0, 200));
                n += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(n, 1, "{k} unreadable with one lane down");
    }
    assert_eq!(
        reader
            .list(&Request::parse("class=od").unwrap())
            .unwrap()
            .len(),
        40
    );
    // A new writer skips the dead lane: the next lanes in hash order take the copies.
    let mut w = c.dist(2, Placement::Database);
    let k = field_key("20260401", 77, 500, "130");
    w.archive(&k, &payload(&k, 1, 50)).unwrap();
    w.flush().unwrap();
    let r = rendezvous::rank(&c.names, &db_of(&k));
    let mut want: Vec<usize> = r.iter().copied().filter(|&i| i != top).take(2).collect();
    want.sort();
    c.set_down(top, false);
    assert_eq!(c.holders(&k), want);
}

/// Reads come in request order whichever lane serves each field (design §7): steps archived
/// while lanes were down (so each lane holds a different subset, and the best lane of a read
/// lacks some) and read with a lane down, for both placements and without `domain` (a key that
/// omits an optional keyword ranks the lanes differently from the stored field's).
#[test]
fn reads_keep_request_order_whatever_lane_serves_each_field() {
    for placement in [Placement::Database, Placement::Field] {
        let c = Cluster::new(4);
        let key = |s: u32| field_key("20260401", s, 500, "130");
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for s in 0..24 {
            // A lane (or none) down while step s is archived, by a new writer each time.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let down = (x % 5) as usize;
            for i in 0..4 {
                c.set_down(i, i == down);
            }
            let mut w = c.dist(2, placement);
            w.archive(&key(s), &payload(&key(s), 0, 100)).unwrap();
            w.flush().unwrap();
        }
        let steps: Vec<u32> = (0..24).rev().step_by(2).chain((0..24).step_by(2)).collect();
        let list: Vec<String> = steps.iter().map(u32::to_string).collect();
        for dead in [None, Some(0), Some(1), Some(2), Some(3)] {
            for i in 0..4 {
                c.set_down(i, Some(i) == dead);
            }
            let reader = c.dist(2, placement);
            for domain in [",domain=g", ""] {
                let req = format!(
                    "class=od,expver=0001,stream=oper,date=20260401,time=1200{domain},type=fc,\
                     levtype=pl,levelist=500,param=130,step={}",
                    list.join("/")
                );
                let mut got = Vec::new();
                let r = reader
                    .retrieve(&Request::parse(&req).unwrap(), &mut |k, b, _| {
                        assert!(b == payload(k, 0, 100), "{k}: bytes differ");
                        got.push(k.get("step").unwrap().parse::<u32>().unwrap());
                        Ok(())
                    })
                    .unwrap();
                assert_eq!(
                    got, steps,
                    "{placement:?}, lane {dead:?} down, request {req}"
                );
                assert!(r.missing.is_empty(), "{:?}", r.missing);
            }
        }
    }
}

#[test]
fn a_lane_dying_with_unflushed_data_is_an_error_naming_it() {
    let c = Cluster::new(3);
    let mut d = c.dist(1, Placement::Database);
    let k = field_key("20260601", 0, 500, "130");
    d.archive(&k, &payload(&k, 0, 50)).unwrap();
    let top = rendezvous::rank(&c.names, &db_of(&k))[0];
    c.set_down(top, true);
    let k2 = field_key("20260601", 1, 500, "130");
    let e = d
        .archive(&k2, &payload(&k2, 0, 50))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&c.names[top]) && e.contains("unflushed"), "{e}");
    // With replicas 1, reads of its data name the dead server.
    let r = c.dist(1, Placement::Database);
    let e = r
        .retrieve(&Request::parse(&k.to_string()).unwrap(), &mut |_, _, _| {
            Ok(())
        })
        .map(|rep| rep.missing.len())
        .unwrap_err()
        .to_string();
    assert!(e.contains(&c.names[top]), "{e}");
}

/// Regression: a lane that died holding unflushed data stayed "dirty" after the error that
/// reported the loss, so every later flush of the same handle tried the dead lane again and
/// failed, even after the writer re-archived the batch onto the surviving lanes. Found by
/// kill -9 of a real server (crates/haar-cli/tests/net_cluster.rs).
#[test]
fn after_reporting_a_lost_batch_the_writer_goes_on_without_the_dead_lane() {
    for die_before in ["flush", "archive"] {
        let c = Cluster::new(3);
        let mut d = c.dist(2, Placement::Database);
        let batch: Vec<Key> = (0..4)
            .map(|s| field_key("20260701", s, 500, "130"))
            .collect();
        let first = rendezvous::rank(&c.names, &db_of(&batch[0]))[0];
        let failed = if die_before == "flush" {
            for k in &batch {
                d.archive(k, &payload(k, 0, 50)).unwrap();
            }
            c.set_down(first, true);
            d.flush().unwrap_err()
        } else {
            d.archive(&batch[0], &payload(&batch[0], 0, 50)).unwrap();
            c.set_down(first, true);
            d.archive(&batch[1], &payload(&batch[1], 0, 50))
                .unwrap_err()
        };
        assert!(failed.to_string().contains(&c.names[first]), "{failed}");
        // The writer archives the batch again: it goes to two live lanes and flushes.
        for k in &batch {
            d.archive(k, &payload(k, 0, 50)).unwrap();
        }
        d.flush()
            .unwrap_or_else(|e| panic!("{die_before}: flush after re-archiving: {e}"));
        for k in &batch {
            let holders = c.holders(k);
            assert_eq!(holders.len(), 2, "{die_before}: {k} on {holders:?}");
            assert!(
                !holders.contains(&first),
                "{die_before}: {k} on the dead lane"
            );
        }
    }
}

#[test]
fn select_routes_by_pattern() {
    let enfo = MemoryBackend::new();
    let rest = MemoryBackend::new();
    let schema = Arc::new(Schema::builtin().clone());
    let mut s = SelectStore::new(
        vec![
            (
                Request::parse("stream=enfo").unwrap(),
                Box::new(Store::new(enfo.clone())) as Box<dyn FieldStore>,
            ),
            (
                Request::default(),
                Box::new(Store::new(rest.clone())) as Box<dyn FieldStore>,
            ),
        ],
        schema,
        Context::now(),
    )
    .unwrap();
    let oper = field_key("20260701", 0, 500, "130");
    let ens = Key::parse("class=od,expver=0001,stream=enfo,date=20260701,time=1200,domain=g,type=pf,levtype=pl,levelist=500,step=0,number=3,param=130").unwrap();
    s.archive(&oper, b"GRIB-oper-7777").unwrap();
    s.archive(&ens, b"GRIB-enfo-7777").unwrap();
    s.flush().unwrap();
    assert!(has(&Store::new(enfo.clone()), &ens));
    assert!(!has(&Store::new(enfo), &oper));
    assert!(has(&Store::new(rest), &oper));
    assert_eq!(
        s.list(&Request::parse("date=20260701").unwrap())
            .unwrap()
            .len(),
        2
    );
    let mut n = 0;
    s.retrieve(
        &Request::parse(&ens.to_string()).unwrap(),
        &mut |_, d, _| {
            assert_eq!(d, b"GRIB-enfo-7777");
            n += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(n, 1);
}

/// A batch of keys costs one read per lane holding them, not one per field, with either
/// placement; fields are delivered once each, and missing keys are reported.
#[test]
fn retrieve_keys_costs_one_call_per_lane() {
    for placement in [Placement::Database, Placement::Field] {
        let c = Cluster::new(3);
        let mut d = c.dist(1, placement);
        let ks = keys();
        for k in &ks {
            d.archive(k, &payload(k, 0, 64)).unwrap();
        }
        d.flush().unwrap();
        let used: std::collections::BTreeSet<usize> =
            ks.iter().map(|k| d.ranking(k).unwrap()[0]).collect();
        assert!(used.len() > 1, "the keys should spread over lanes");
        for r in &c.reads {
            r.store(0, Ordering::SeqCst);
        }
        let mut asked = ks.clone();
        let missing = field_key("20260430", 0, 500, "130");
        asked.push(missing.clone());
        let mut got = std::collections::BTreeMap::new();
        let report = d
            .retrieve_keys(&asked, &mut |k, b, crc| {
                assert_eq!(crc, Some(crc32c::crc32c(b)));
                assert!(got.insert(k.clone(), b.to_vec()).is_none(), "{k} twice");
                Ok(())
            })
            .unwrap();
        assert_eq!(report.found, ks.len());
        assert_eq!(report.missing, vec![missing.clone()]);
        for k in &ks {
            let full = d.split(k).unwrap().full();
            assert_eq!(got.get(&full), Some(&payload(k, 0, 64)), "{k}");
        }
        let reads: usize = c.reads.iter().map(|r| r.load(Ordering::SeqCst)).sum();
        // One batch per lane used, plus one read per other lane for the missing key (a field
        // may live on a later lane of its ranking after a failover).
        assert_eq!(
            reads,
            used.len() + 2,
            "{placement:?}: reads per lane {:?}",
            c.reads
        );
    }
}

/// Whether `store` has a flushed field under `key`.
fn has(store: &Store, key: &Key) -> bool {
    store
        .retrieve_keys(std::slice::from_ref(key), |_, _, _| Ok(()))
        .unwrap()
        .found
        == 1
}
