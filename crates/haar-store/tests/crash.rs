//! Durability contract (design §6), tested by killing real writer processes with SIGKILL at
//! random moments: every field whose flush returned is retrieved byte-identical; nothing
//! unflushed is partly visible (per writer and database the visible batches are a prefix, and
//! each batch is all or nothing); the store opens without repair.
//!
//! Trials per backend: `HAAR_CRASH_TRIALS` (default 200).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use haar_core::request::Request;
use haar_store::conformance::{field_key, payload};
use haar_store::pmem::PmemOptions;
use haar_store::{Backend, FsyncPolicy, PmemBackend, PosixBackend, Store, StoreOptions};

const WRITERS: u32 = 2;
const PER: u32 = 4;
const SIZE: usize = 20_000;
const BATCHES: u32 = 12;

fn trials() -> usize {
    std::env::var("HAAR_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// xorshift, seeded from the clock: each run kills at different moments; the seed is printed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn open(kind: &str, root: &std::path::Path) -> Store {
    let b: Arc<dyn Backend> = match kind {
        "posix" => {
            Arc::new(PosixBackend::new(vec![root.to_path_buf()], FsyncPolicy::Never).unwrap())
        }
        _ => Arc::new(
            PmemBackend::open(
                root,
                PmemOptions {
                    initial_size: 64 << 20,
                    slots: 16, // small: kills also land while the slot chain is extended
                    ..Default::default()
                },
            )
            .unwrap(),
        ),
    };
    Store::with_options(b, StoreOptions::default())
}

fn run(kind: &str) {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test {kind}: seed {seed}, {} trials", trials());
    let mut rng = Rng(seed);
    let base = if kind == "pmem" && std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let root = base.path().join("store");
    // acked[writer] = highest batch acknowledged so far across trials (batches accumulate:
    // each trial's writers continue with fresh batch numbers so earlier data must persist).
    let mut acked: BTreeMap<u32, i64> = BTreeMap::new();
    let mut killed_mid = 0;
    let mut acks_at_kill: BTreeMap<usize, usize> = BTreeMap::new();
    for trial in 0..trials() {
        let mut children = Vec::new();
        for w in 0..WRITERS {
            let child = Command::new(env!("CARGO_BIN_EXE_haar-torture"))
                .args([
                    kind,
                    root.to_str().unwrap(),
                    &w.to_string(),
                    &BATCHES.to_string(),
                    &PER.to_string(),
                    &SIZE.to_string(),
                ])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn haar-torture");
            children.push((w, child));
        }
        // Kill each writer after a random number of acknowledged flushes plus a random
        // fraction of a millisecond, so kills land in archive, in flush and between flushes.
        for (w, mut c) in children {
            let wait_acks = (rng.next() % BATCHES as u64) as usize;
            let mut out = BufReader::new(c.stdout.take().unwrap());
            let mut lines = Vec::new();
            while lines.len() < wait_acks {
                let mut l = String::new();
                if out.read_line(&mut l).unwrap() == 0 {
                    break;
                }
                lines.push(l.trim().to_string());
            }
            std::thread::sleep(Duration::from_micros(rng.next() % 3_000));
            let _ = c.kill(); // SIGKILL
            let status = c.wait().unwrap();
            if !status.success() {
                killed_mid += 1;
            }
            lines.extend(out.lines().map(|l| l.unwrap()));
            *acks_at_kill.entry(lines.len()).or_default() += 1;
            for line in lines {
                let b: i64 = line.strip_prefix("ack ").unwrap().parse().unwrap();
                let e = acked.entry(w).or_insert(-1);
                *e = (*e).max(b);
            }
            // Every trial rewrites batches from 0: re-archives of identical bytes, so a batch
            // acknowledged in any trial must stay visible in all later ones.
        }
        if trial % 20 == 19 || trial + 1 == trials() {
            verify(kind, &root, &acked);
        }
    }
    verify(kind, &root, &acked);
    assert!(
        manifests(&root) > 0,
        "{kind}: the writers published no catalogue manifest, so no kill hit a merge"
    );
    eprintln!(
        "crash test {kind}: {killed_mid} writer processes killed before finishing; acks seen per kill: {acks_at_kill:?}"
    );
    let landed_mid_run: usize = acks_at_kill
        .iter()
        .filter(|(a, _)| **a > 0 && **a < BATCHES as usize)
        .map(|(_, n)| n)
        .sum();
    assert!(
        landed_mid_run > trials() / 4,
        "too few kills landed between flushes ({landed_mid_run}); the test is not testing"
    );
}

/// Catalogue manifests under `dir` (design §3.1): the writers merge after nearly every
/// flush, so kills also land during merges.
fn manifests(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    let p = e.path();
                    if p.is_dir() {
                        manifests(&p)
                    } else {
                        usize::from(p.file_name().is_some_and(|n| n == "manifest"))
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

fn verify(kind: &str, root: &std::path::Path, acked: &BTreeMap<u32, i64>) {
    let store = open(kind, root);
    for date in ["20250101", "20250102"] {
        for w in 0..WRITERS {
            let mut visible = Vec::new();
            for b in 0..BATCHES {
                let mut n = 0;
                for i in 0..PER {
                    let k = field_key(date, b, w * 1000 + i, "130");
                    let mut got = None;
                    store
                        .retrieve(&Request::parse(&k.to_string()).unwrap(), |_, bytes, _| {
                            got = Some(bytes.to_vec());
                            Ok(())
                        })
                        .expect("retrieve after crash");
                    if let Some(g) = got {
                        assert!(
                            g == payload(&k, 0, SIZE),
                            "{kind}: field {k} not byte-identical after crash"
                        );
                        n += 1;
                    }
                }
                assert!(
                    n == 0 || n == PER,
                    "{kind}: batch {b} of writer {w} in {date} partly visible ({n} of {PER})"
                );
                visible.push(n == PER);
            }
            let acked_b = acked.get(&w).copied().unwrap_or(-1);
            for b in 0..=acked_b.min(BATCHES as i64 - 1) {
                assert!(
                    visible[b as usize],
                    "{kind}: batch {b} of writer {w} in {date} was acknowledged but is missing"
                );
            }
        }
    }
    let stats = store.stats(&Request::default()).unwrap();
    for s in stats {
        assert!(
            s.problems.is_empty(),
            "{kind}: problems after crash in {}: {:?}",
            s.db,
            s.problems
        );
    }
}

#[test]
fn kill_9_posix_writers() {
    run("posix");
}

#[test]
fn kill_9_pmem_writers() {
    run("pmem");
}
