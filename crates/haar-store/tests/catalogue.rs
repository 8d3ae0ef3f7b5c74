//! The catalogue's runs and manifest (design §3.1) against a model: random archives,
//! re-archives, flushes, partial wipes, purges and merges (small thresholds, so that runs of
//! several levels, tombstones and bases all occur), checked after every step through the
//! long-lived store and through fresh stores (as a new process would open them), on both
//! persistent backends. Also: damaged runs and manifests are ignored, never trusted.

use std::collections::BTreeMap;
use std::sync::Arc;

use haar_core::Key;
use haar_core::request::Request;
use haar_store::conformance::payload;
use haar_store::pmem::PmemOptions;
use haar_store::{
    Backend, FsyncPolicy, MergeOutcome, MergePolicy, PmemBackend, PosixBackend, Store, StoreOptions,
};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const DATES: [&str; 2] = ["20261121", "20261122"];
const PARAMS: [&str; 3] = ["130", "131", "132"];

fn key(date: &str, sfc: bool, step: u64, level: u64, param: &str) -> Key {
    let text = if sfc {
        format!(
            "class=od,expver=0001,stream=oper,date={date},time=1200,domain=g,type=fc,\
             levtype=sfc,step={step},param={param}"
        )
    } else {
        format!(
            "class=od,expver=0001,stream=oper,date={date},time=1200,domain=g,type=fc,\
             levtype=pl,levelist={level},step={step},param={param}"
        )
    };
    Key::parse(&text).unwrap()
}

fn db_request(date: &str) -> Request {
    Request::parse(&format!(
        "class=od,expver=0001,stream=oper,date={date},time=1200,domain=g"
    ))
    .unwrap()
}

fn policy() -> MergePolicy {
    MergePolicy {
        threshold: 7,
        fanout: 2,
        background: false,
    }
}

fn store(b: &Arc<dyn Backend>) -> Store {
    Store::with_options(
        b.clone(),
        StoreOptions {
            merge: policy(),
            ..StoreOptions::default()
        },
    )
}

/// The bytes of generation `g` of `k`; lengths vary with the key.
fn bytes(k: &Key, g: u8) -> Vec<u8> {
    let h = haar_store::format::fnv1a64(k.sorted().to_string().as_bytes());
    payload(k, g, 64 + (h % 50) as usize)
}

/// The stored form of a key (as `list` returns it), for comparison with the model.
fn stored(s: &Store, k: &Key) -> String {
    s.split(k).unwrap().full().to_string()
}

/// Checks `s` against `model` (stored key → generation): `list` of each database and of
/// a narrowed request, and the bytes of every field.
fn check(s: &Store, model: &BTreeMap<String, (Key, u8)>, what: &str) {
    for date in DATES {
        let got: Vec<String> = s
            .list(&db_request(date))
            .unwrap()
            .iter()
            .map(|f| f.key().to_string())
            .collect();
        let want: Vec<String> = model
            .iter()
            .filter(|(_, (k, _))| k.get("date") == Some(date))
            .map(|(sk, _)| sk.clone())
            .collect();
        let mut g = got.clone();
        g.sort();
        assert_eq!(g, want, "{what}: list of {date}");
        // A narrowed request: step 1 or 2, param 131, pressure levels.
        let req = Request::parse(&format!(
            "class=od,expver=0001,stream=oper,date={date},time=1200,domain=g,type=fc,\
             levtype=pl,step=1/2,param=131"
        ))
        .unwrap();
        let mut got: Vec<String> = s
            .list(&req)
            .unwrap()
            .iter()
            .map(|f| f.key().to_string())
            .collect();
        got.sort();
        let want: Vec<String> = model
            .iter()
            .filter(|(_, (k, _))| {
                k.get("date") == Some(date)
                    && k.get("levtype") == Some("pl")
                    && matches!(k.get("step"), Some("1") | Some("2"))
                    && k.get("param") == Some("131")
            })
            .map(|(sk, _)| sk.clone())
            .collect();
        assert_eq!(got, want, "{what}: narrowed list of {date}");
    }
    let keys: Vec<Key> = model.values().map(|(k, _)| k.clone()).collect();
    let gens: Vec<u8> = model.values().map(|(_, g)| *g).collect();
    let mut n = 0;
    let report = s
        .retrieve_keys(&keys, |_, got, _| {
            assert_eq!(
                got,
                &bytes(&keys[n], gens[n])[..],
                "{what}: bytes of {}",
                keys[n]
            );
            n += 1;
            Ok(())
        })
        .unwrap();
    assert!(
        report.missing.is_empty(),
        "{what}: missing {:?}",
        report.missing
    );
}

fn exercise(make: &dyn Fn() -> Arc<dyn Backend>, seed: u64) {
    let mut rng = Rng(seed);
    let backend = make();
    let mut s = store(&backend);
    // Stored key → (key as archived, generation).
    let mut model: BTreeMap<String, (Key, u8)> = BTreeMap::new();
    let mut pending: Vec<(Key, u8)> = Vec::new();
    let mut generation = 0u8;
    let mut merges = 0;
    for step in 0..260 {
        match rng.below(20) {
            0..=11 => {
                generation = generation.wrapping_add(1);
                let k = key(
                    DATES[rng.below(2) as usize],
                    rng.below(4) == 0,
                    rng.below(4),
                    1 + rng.below(5),
                    PARAMS[rng.below(3) as usize],
                );
                pending.push((k, generation));
            }
            12..=15 => {
                for (k, g) in pending.drain(..) {
                    s.archive(&k, &bytes(&k, g)).unwrap();
                    model.insert(stored(&s, &k), (k, g));
                }
                s.flush().unwrap();
            }
            16 => {
                // Partial wipe of one step of one database (tombstones).
                let date = DATES[rng.below(2) as usize];
                let st = rng.below(4);
                let req = Request::parse(&format!(
                    "class=od,expver=0001,stream=oper,date={date},time=1200,domain=g,\
                     type=fc,levtype=pl,step={st}"
                ))
                .unwrap();
                s.wipe(&req, true).unwrap();
                model.retain(|_, (k, _)| {
                    !(k.get("date") == Some(date)
                        && k.get("levtype") == Some("pl")
                        && k.get("step") == Some(st.to_string().as_str()))
                });
            }
            17 => {
                let full = rng.below(2) == 0;
                for date in DATES {
                    for (_, o) in s.compact(&db_request(date), full).unwrap() {
                        if matches!(o, MergeOutcome::Published { .. }) {
                            merges += 1;
                        }
                    }
                }
            }
            18 => {
                if pending.is_empty() {
                    s.close_writers();
                    s.purge(&db_request(DATES[rng.below(2) as usize]), true)
                        .unwrap();
                }
            }
            _ => {
                // A fresh store over a fresh backend handle: what a new process sees.
                let fresh = store(&make());
                check(&fresh, &model, &format!("seed {seed} step {step} (fresh)"));
            }
        }
        if pending.is_empty() {
            check(&s, &model, &format!("seed {seed} step {step}"));
        }
    }
    assert!(merges > 3, "the test merged only {merges} times");
    let fresh = store(&make());
    check(&fresh, &model, &format!("seed {seed} end (fresh)"));
}

#[test]
fn posix_catalogue_matches_the_model() {
    for seed in [1, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        exercise(
            &|| {
                Arc::new(PosixBackend::new(vec![root.clone()], FsyncPolicy::Never).unwrap())
                    as Arc<dyn Backend>
            },
            seed * 7919,
        );
    }
}

fn pmem_options() -> PmemOptions {
    PmemOptions {
        initial_size: 16 << 20,
        slots: 64,
        chunk: 1 << 20,
        ..PmemOptions::default()
    }
}

#[test]
fn pmem_catalogue_matches_the_model() {
    for seed in [4, 5, 6] {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let root = dir.path().to_path_buf();
        exercise(
            &|| Arc::new(PmemBackend::open(&root, pmem_options()).unwrap()) as Arc<dyn Backend>,
            seed * 104_729,
        );
    }
}

/// Fills one database with `n` fields in flushes of 50, merged as it goes.
fn fill(s: &mut Store, n: u64) -> Vec<Key> {
    let mut keys = Vec::new();
    for i in 0..n {
        let k = key(DATES[0], false, i / 50, 1 + i % 50, "130");
        s.archive(&k, &bytes(&k, 0)).unwrap();
        keys.push(k);
        if i % 50 == 49 {
            s.flush().unwrap();
            s.compact(&db_request(DATES[0]), false).unwrap();
        }
    }
    s.flush().unwrap();
    keys
}

#[test]
fn damaged_runs_and_manifests_are_ignored_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let make = || {
        Arc::new(PosixBackend::new(vec![root.clone()], FsyncPolicy::Never).unwrap())
            as Arc<dyn Backend>
    };
    let mut s = store(&make());
    let keys = fill(&mut s, 400);
    s.compact(&db_request(DATES[0]), true).unwrap();
    let cat = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("catalogue").is_dir())
        .unwrap()
        .join("catalogue");
    let run = std::fs::read_dir(&cat)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "run"))
        .expect("a run after a full compaction");
    let read_all = |what: &str| {
        let fresh = store(&make());
        let mut n = 0;
        let r = fresh
            .retrieve_keys(&keys, |k, b, _| {
                assert_eq!(b, &bytes(k, 0)[..], "{what}: {k}");
                n += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(n, keys.len(), "{what}: missing {:?}", r.missing);
        assert_eq!(fresh.list(&db_request(DATES[0])).unwrap().len(), keys.len());
        fresh
    };
    read_all("intact");
    // Flip one byte in the middle of the entries: the damaged record is caught by its crc,
    // the run is dropped and the log replayed; every field still reads back.
    let mut bytes = std::fs::read(&run).unwrap();
    let at = 128 + 48 * 200 + 5;
    bytes[at] ^= 0x40;
    std::fs::write(&run, &bytes).unwrap();
    let fresh = read_all("damaged run");
    let stats = fresh.stats(&db_request(DATES[0])).unwrap();
    assert!(
        stats[0].problems.iter().any(|p| p.contains("run entry")),
        "the damage is reported: {:?}",
        stats[0].problems
    );
    // A damaged manifest: ignored, reported, everything reads back.
    let m = cat.join("manifest");
    let mut bytes = std::fs::read(&m).unwrap();
    bytes[20] ^= 1;
    std::fs::write(&m, &bytes).unwrap();
    let fresh = read_all("damaged manifest");
    let stats = fresh.stats(&db_request(DATES[0])).unwrap();
    assert!(
        stats[0].problems.iter().any(|p| p.contains("manifest")),
        "{:?}",
        stats[0].problems
    );
    // The next merge replaces both.
    let o = s.compact(&db_request(DATES[0]), true).unwrap();
    assert!(matches!(o[0].1, MergeOutcome::Published { .. }), "{o:?}");
    let fresh = read_all("rebuilt");
    assert!(
        fresh.stats(&db_request(DATES[0])).unwrap()[0]
            .problems
            .is_empty()
    );
}

#[test]
fn a_fresh_reader_replays_only_the_tail() {
    // After a merge the manifest's position covers the log: a fresh reader's overlay is
    // only what came after, so it finds fields even when the log's old segments are gone.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let make = || {
        Arc::new(PosixBackend::new(vec![root.clone()], FsyncPolicy::Never).unwrap())
            as Arc<dyn Backend>
    };
    let mut s = store(&make());
    let keys = fill(&mut s, 300);
    s.compact(&db_request(DATES[0]), true).unwrap();
    // Remove the index files the toc points to: only the runs can answer now.
    let dbdir = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("catalogue").is_dir())
        .unwrap();
    for e in std::fs::read_dir(&dbdir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|e| e == "index") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let fresh = store(&make());
    assert_eq!(fresh.list(&db_request(DATES[0])).unwrap().len(), keys.len());
    let r = fresh.retrieve_keys(&keys, |_, _, _| Ok(())).unwrap();
    assert_eq!(r.found, keys.len());
}

#[test]
fn a_pmem_pool_written_before_catalogue_directories_is_upgraded_on_open() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let root = dir.path().to_path_buf();
    let make = || Arc::new(PmemBackend::open(&root, pmem_options()).unwrap()) as Arc<dyn Backend>;
    let mut s = store(&make());
    let mut keys = Vec::new();
    for date in DATES {
        for step in 0..3 {
            let k = key(date, false, step, 1, "130");
            s.archive(&k, &bytes(&k, 1)).unwrap();
            keys.push(k);
        }
        s.flush().unwrap();
    }
    drop(s);
    // What a pool written by an older haar looks like: no catalogue directory at all.
    std::fs::remove_dir_all(root.join("catalogue")).unwrap();
    let fresh = store(&make());
    assert!(
        root.join("catalogue").is_dir(),
        "opening creates the directories"
    );
    let mut dbs: Vec<String> = fresh
        .backend()
        .databases()
        .unwrap()
        .iter()
        .map(|k| k.to_string())
        .collect();
    dbs.sort();
    assert_eq!(dbs.len(), 2, "{dbs:?}");
    let mut n = 0;
    fresh
        .retrieve_keys(&keys, |k, b, _| {
            assert_eq!(b, &bytes(k, 1)[..]);
            n += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(n, keys.len());
    // A whole-database wipe removes its directory: the database is gone for new readers.
    let mut w = store(&make());
    w.wipe(&db_request(DATES[0]), true).unwrap();
    let dbs = store(&make()).backend().databases().unwrap();
    assert_eq!(dbs.len(), 1, "{dbs:?}");
    assert_eq!(dbs[0].get("date"), Some(DATES[1]));
}
