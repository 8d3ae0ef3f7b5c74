//! Space reuse in pmem pools (design §5.4): wipe and purge free pool space that later archives
//! reuse; a zero-copy view held by another process holds that space back until the view is
//! dropped or its process dies; kill -9 at random moments of archiving, re-archiving, purging
//! and wiping loses nothing flushed and never hands out live bytes.
//!
//! Trials of the kill test: `HAAR_CRASH_TRIALS` (default 200).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use haar_core::request::Request;
use haar_store::conformance::{payload, reuse_expver, reuse_key};
use haar_store::pmem::PmemOptions;
use haar_store::{Backend, PmemBackend, Store, StoreOptions};

const SIZE: usize = 64 << 10;

fn shm() -> tempfile::TempDir {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    tempfile::tempdir_in(base).unwrap()
}

fn open(root: &std::path::Path) -> (Arc<PmemBackend>, Store) {
    let b = Arc::new(
        PmemBackend::open(
            root,
            PmemOptions {
                initial_size: 16 << 20,
                chunk: 1 << 20,
                ..PmemOptions::default()
            },
        )
        .unwrap(),
    );
    let store = Store::with_options(b.clone() as Arc<dyn Backend>, StoreOptions::default());
    (b, store)
}

fn archive_db(store: &mut Store, expver: &str, n: u32, generation: u8) {
    for i in 0..n {
        let k = reuse_key(expver, i);
        store.archive(&k, &payload(&k, generation, SIZE)).unwrap();
    }
    store.flush().unwrap();
}

fn expver_request(expver: &str) -> Request {
    Request::parse(&format!("expver={expver}")).unwrap()
}

fn info_u64(b: &PmemBackend, what: &str) -> u64 {
    let info = b.info();
    info[what]
        .as_u64()
        .unwrap_or_else(|| panic!("info has no {what}: {info}"))
}

/// No free region overlaps another or any field a database still names.
fn check_space(b: &PmemBackend, store: &Store) {
    haar_store::conformance::assert_no_free_space_over_live_fields(b, store, "reuse");
}

fn assert_db(store: &Store, expver: &str, n: u32, generation: u8) {
    for i in 0..n {
        let k = reuse_key(expver, i);
        let got = store.retrieve_lent(&k).unwrap();
        let got = got.unwrap_or_else(|| panic!("{k} missing"));
        assert!(
            *got.1 == payload(&k, generation, SIZE)[..],
            "{k} not byte-identical"
        );
    }
}

/// The target: after wiping half of a full pool, archiving the same volume again does
/// not grow the pool file (nor the heap).
#[test]
fn wiping_half_a_pool_then_archiving_as_much_again_does_not_grow_it() {
    let dir = shm();
    let root = dir.path().join("store");
    let (b, mut store) = open(&root);
    let n = 200; // 12.5 MiB per database
    archive_db(&mut store, "aaaa", n, 0);
    archive_db(&mut store, "bbbb", n, 0);
    let (pool, top) = (info_u64(&b, "pool_bytes"), info_u64(&b, "heap_used_bytes"));
    assert_eq!(info_u64(&b, "free_bytes"), 0);
    let report = store.wipe(&expver_request("aaaa"), true).unwrap();
    assert_eq!(report.databases.len(), 1, "{report:?}");
    let free = info_u64(&b, "free_bytes");
    assert!(
        free >= n as u64 * SIZE as u64,
        "wipe freed {free} bytes, less than the database's {} field bytes",
        n as u64 * SIZE as u64
    );
    assert_eq!(info_u64(&b, "free_waiting_bytes"), 0, "nothing pins them");
    check_space(&b, &store);
    // Another process (a fresh open) archives the same volume again.
    drop(store);
    drop(b);
    let (b, mut store) = open(&root);
    archive_db(&mut store, "cccc", n, 0);
    assert_eq!(info_u64(&b, "pool_bytes"), pool, "the pool file grew");
    assert!(
        info_u64(&b, "heap_used_bytes") <= top,
        "the heap grew from {top} to {}",
        info_u64(&b, "heap_used_bytes")
    );
    check_space(&b, &store);
    assert_db(&store, "bbbb", n, 0);
    assert_db(&store, "cccc", n, 0);
    assert!(
        store
            .retrieve_lent(&reuse_key("aaaa", 0))
            .unwrap()
            .is_none()
    );
    // And a fresh reader agrees.
    drop(store);
    let (_, fresh) = open(&root);
    assert_db(&fresh, "bbbb", n, 0);
    assert_db(&fresh, "cccc", n, 0);
}

/// Purge frees the bytes of superseded and partially wiped fields and keeps the live ones
/// where they are; a second purge frees what was superseded since, nothing twice.
#[test]
fn purge_frees_superseded_fields_once_and_keeps_live_ones() {
    let dir = shm();
    let root = dir.path().join("store");
    let (b, mut store) = open(&root);
    archive_db(&mut store, "pppp", 40, 0);
    archive_db(&mut store, "pppp", 20, 1); // supersedes fields 0..20
    let purged = store.purge(&expver_request("pppp"), true).unwrap();
    assert_eq!(purged.dropped_fields, 20, "{purged:?}");
    let free1 = info_u64(&b, "free_bytes");
    assert!(free1 >= 20 * SIZE as u64, "purge freed only {free1} bytes");
    check_space(&b, &store);
    for i in 0..40 {
        let k = reuse_key("pppp", i);
        let (_, v) = store.retrieve_lent(&k).unwrap().unwrap();
        assert!(*v == payload(&k, u8::from(i < 20), SIZE)[..], "{k}");
    }
    // Partial wipe of 10 fields, then purge: exactly their bytes (and the old segments) more.
    let wipe = Request::parse("expver=pppp,levelist=30/to/39").unwrap();
    assert_eq!(store.wipe(&wipe, true).unwrap().fields, 10);
    store.purge(&expver_request("pppp"), true).unwrap();
    let free2 = info_u64(&b, "free_bytes");
    assert!(
        free2 >= free1 + 10 * SIZE as u64 && free2 < free1 + 11 * SIZE as u64,
        "second purge: free bytes {free1} -> {free2}"
    );
    check_space(&b, &store);
    // A purge with nothing dead frees nothing.
    store.purge(&expver_request("pppp"), true).unwrap();
    assert_eq!(info_u64(&b, "free_bytes"), free2);
    assert_eq!(store.list(&expver_request("pppp")).unwrap().len(), 30);
}

fn spawn_holder(root: &std::path::Path, expver: &str, i: u32) -> std::process::Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_haar-torture"))
        .args(["hold", root.to_str().unwrap(), expver, &i.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn haar-torture hold");
    assert_eq!(line(&mut c), "held");
    c
}

fn line(c: &mut std::process::Child) -> String {
    let mut l = String::new();
    BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut l)
        .unwrap();
    l.trim().to_string()
}

fn ask(c: &mut std::process::Child, what: &str) -> String {
    writeln!(c.stdin.as_mut().unwrap(), "{what}").unwrap();
    line(c)
}

/// A process holding a zero-copy view of a field that another process wipes keeps its bytes:
/// the space is not reused while the view lives (the heap grows instead), and is reused
/// once the view is dropped, or once its process is killed with SIGKILL.
#[test]
fn a_view_held_by_another_process_holds_back_reuse_until_dropped_or_killed() {
    let dir = shm();
    let root = dir.path().join("store");
    let (b, mut store) = open(&root);
    let n = 48; // 3 MiB
    for (held, end) in [("hd01", "drop"), ("hk01", "kill")] {
        archive_db(&mut store, held, n, 0);
        let mut holder = spawn_holder(&root, held, 7);
        store.wipe(&expver_request(held), true).unwrap();
        assert!(info_u64(&b, "free_waiting_bytes") >= n as u64 * SIZE as u64);
        let top = info_u64(&b, "heap_used_bytes");
        let fill = format!("{}f", &held[..3]);
        archive_db(&mut store, &fill, n, 0);
        assert!(
            info_u64(&b, "heap_used_bytes") > top,
            "{end}: space freed under a live view was reused"
        );
        assert_eq!(
            ask(&mut holder, "check"),
            "same",
            "{end}: the held view changed"
        );
        if end == "drop" {
            assert_eq!(ask(&mut holder, "drop"), "dropped");
        } else {
            // SIGKILL: its pin stays in the pool, its process does not (once it has died:
            // until then it may still read the view).
            holder.kill().unwrap();
            let _ = holder.wait();
        }
        assert_eq!(info_u64(&b, "free_waiting_bytes"), 0, "{end}");
        let top = info_u64(&b, "heap_used_bytes");
        let again = format!("{}g", &held[..3]);
        archive_db(&mut store, &again, n, 0);
        let after = info_u64(&b, "heap_used_bytes");
        assert!(
            after <= top,
            "{end}: the freed space was not reused (heap {top} -> {after})"
        );
        assert!(
            b.free_regions().iter().map(|r| r.1).sum::<u64>() < SIZE as u64,
            "{end}: the freed space was not used"
        );
        check_space(&b, &store);
        assert_db(&store, &fill, n, 0);
        assert_db(&store, &again, n, 0);
        drop(holder.stdin.take());
        let _ = holder.wait();
    }
}

/// Writers killed with SIGKILL while their chunk's unused tail is reserved: the next process
/// that opens the pool gives each tail back (design §5.4, "A killed writer's chunk"), so the
/// heap does not grow by a chunk (16 MiB) per killed writer; what they flushed stays, and no
/// free region lies over it. Before chunk records, three such kills left the heap at over
/// 32 MiB for 240 KiB of fields.
#[test]
fn a_killed_writers_unused_chunk_goes_back_to_the_pool() {
    let dir = shm();
    let root = dir.path().join("store");
    const N: u32 = 20;
    let mut heap = Vec::new();
    for w in 0..3 {
        let expver = format!("kc0{w}");
        let mut c = Command::new(env!("CARGO_BIN_EXE_haar-torture"))
            .args(["flushed", root.to_str().unwrap(), &expver, &N.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn haar-torture flushed");
        assert_eq!(line(&mut c), "flushed");
        c.kill().unwrap();
        let _ = c.wait();
        let (b, store) = open(&root);
        heap.push(info_u64(&b, "heap_used_bytes"));
        check_space(&b, &store);
        for v in 0..=w {
            let expver = format!("kc0{v}");
            for i in 0..N {
                let k = reuse_key(&expver, i);
                let (_, got) = store
                    .retrieve_lent(&k)
                    .unwrap()
                    .unwrap_or_else(|| panic!("{k}: flushed by a killed writer, now missing"));
                assert!(*got == payload(&k, 0, 4096)[..], "{k}: wrong bytes");
            }
        }
    }
    let chunk = haar_store::pmem::DEFAULT_CHUNK;
    assert!(
        heap.iter().all(|&h| h < chunk),
        "heap after each killed writer {heap:?}: a killed writer's chunk tail ({chunk} bytes a chunk) was not given back"
    );
}

const WRITERS: u32 = 2;
const ROUNDS: u32 = 6;
const PER: u32 = 4;
const KILL_SIZE: usize = 20_000;

fn trials() -> u32 {
    std::env::var("HAAR_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Writers archive, re-archive, purge and wipe (`haar-torture reuse`) and are killed at
/// random moments; after each trial every field is where the acknowledgements say, all or
/// nothing per flush, wipe and purge, and no free region overlaps a live field.
#[test]
fn kill_9_during_space_reuse() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("reuse crash test: seed {seed}, {} trials", trials());
    let mut rng = seed;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let dir = shm();
    let root = dir.path().join("store");
    let lines_per_writer = 1 + ROUNDS + 2 * (ROUNDS / 2) + (ROUNDS - 2);
    let (mut killed, mut written) = (0, 0u64);
    for trial in 0..trials() {
        let mut children = Vec::new();
        for w in 0..WRITERS {
            let c = Command::new(env!("CARGO_BIN_EXE_haar-torture"))
                .args([
                    "reuse",
                    root.to_str().unwrap(),
                    &trial.to_string(),
                    &w.to_string(),
                    &ROUNDS.to_string(),
                    &PER.to_string(),
                    &KILL_SIZE.to_string(),
                ])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn haar-torture reuse");
            children.push((w, c));
        }
        let mut said: Vec<BTreeSet<String>> = Vec::new();
        for (_, mut c) in children {
            let wait_lines = next() % (lines_per_writer as u64 + 1);
            let mut out = BufReader::new(c.stdout.take().unwrap());
            let mut lines = BTreeSet::new();
            while (lines.len() as u64) < wait_lines {
                let mut l = String::new();
                if out.read_line(&mut l).unwrap() == 0 {
                    break;
                }
                lines.insert(l.trim().to_string());
            }
            std::thread::sleep(Duration::from_micros(next() % 2_000));
            let _ = c.kill();
            if !c.wait().unwrap().success() {
                killed += 1;
            }
            lines.extend(out.lines().map(|l| l.unwrap().trim().to_string()));
            written += lines.iter().filter(|l| l.starts_with("ack ")).count() as u64
                * (PER as u64 * KILL_SIZE as u64);
            said.push(lines);
        }
        verify_trial(&root, trial, &said);
    }
    let (b, _) = open(&root);
    let used = info_u64(&b, "heap_used_bytes");
    eprintln!(
        "reuse crash test: {killed} writers killed mid-run; {written} bytes acknowledged, heap holds {used}, free {}",
        info_u64(&b, "free_bytes")
    );
    assert!(
        killed as u32 > trials() / 2,
        "too few kills landed mid-run ({killed}); the test is not testing"
    );
    assert!(
        used < written / 2,
        "the heap ({used} bytes) is not much smaller than all that was written ({written}): space is not reused"
    );
}

fn verify_trial(root: &std::path::Path, trial: u32, said: &[BTreeSet<String>]) {
    let (b, store) = open(root);
    for (w, lines) in said.iter().enumerate() {
        let has = |l: String| lines.contains(&l);
        for r in 0..ROUNDS {
            let ev = reuse_expver(trial, w as u32, r);
            let mut seen = Vec::new();
            for i in 0..PER {
                let k = reuse_key(&ev, i);
                let got = store.retrieve_lent(&k).expect("retrieve after kill");
                seen.push(got.map(|(_, v)| {
                    if *v == payload(&k, 0, KILL_SIZE)[..] {
                        0u8
                    } else {
                        assert!(
                            *v == payload(&k, 1, KILL_SIZE)[..],
                            "trial {trial}: {k} holds bytes it was never given"
                        );
                        1
                    }
                }));
            }
            let what =
                format!("trial {trial} writer {w} round {r} ({ev}): {seen:?}, said {lines:?}");
            let none = seen.iter().all(Option::is_none);
            if has(format!("wiped {r}")) {
                assert!(none, "{what}: wiped but visible");
                continue;
            }
            let wipe_may_run = has(format!("ack {}", r + 2));
            if none && (wipe_may_run || !has(format!("ack {r}"))) {
                continue; // wiped by a wipe that was killed before it said so, or never flushed
            }
            assert!(seen.iter().all(Option::is_some), "{what}: partly visible");
            let first: BTreeSet<u8> = seen[..PER as usize / 2].iter().flatten().copied().collect();
            let second: BTreeSet<u8> = seen[PER as usize / 2..].iter().flatten().copied().collect();
            assert_eq!(second, BTreeSet::from([0]), "{what}");
            assert_eq!(first.len(), 1, "{what}: re-archive partly visible");
            if has(format!("re {r}")) {
                assert_eq!(first, BTreeSet::from([1]), "{what}: re-archive lost");
            } else if r % 2 == 0 || !has(format!("ack {r}")) {
                assert_eq!(first, BTreeSet::from([0]), "{what}");
            }
        }
    }
    check_space(&b, &store);
    let problems = store.problems(&Request::default()).unwrap();
    assert!(problems.is_empty(), "trial {trial}: {problems:?}");
}

/// The kill test's workload run to the end, twice over: the baseline the kills are judged by.
#[test]
fn reuse_torture_without_kills_keeps_everything() {
    let dir = shm();
    let root = dir.path().join("store");
    for trial in 0..2 {
        let out = Command::new(env!("CARGO_BIN_EXE_haar-torture"))
            .args([
                "reuse",
                root.to_str().unwrap(),
                &trial.to_string(),
                "0",
                &ROUNDS.to_string(),
                &PER.to_string(),
                &KILL_SIZE.to_string(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: BTreeSet<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        verify_trial(&root, trial, &[lines]);
    }
}

/// A version 2 pool (written before space reuse) is read and written as before: a wipe
/// frees nothing, `info` says reuse is off, and everything stays readable.
#[test]
fn version_2_pool_works_without_reuse() {
    let dir = shm();
    let root = dir.path().join("store");
    drop(open(&root)); // a new, empty version 3 pool: rewrite it as version 2
    haar_store::conformance::set_pool_version(&root.join("haar.pool"), 2);
    let (b, mut store) = open(&root);
    assert_eq!(b.info()["pool_version"], 2);
    assert_eq!(b.info()["space_reuse"], false);
    archive_db(&mut store, "v2aa", 20, 0);
    archive_db(&mut store, "v2bb", 20, 0);
    let top = info_u64(&b, "heap_used_bytes");
    store.wipe(&expver_request("v2aa"), true).unwrap();
    assert!(b.free_regions().is_empty());
    archive_db(&mut store, "v2cc", 20, 0);
    assert!(info_u64(&b, "heap_used_bytes") > top);
    drop(store);
    let (_, fresh) = open(&root);
    assert_db(&fresh, "v2bb", 20, 0);
    assert_db(&fresh, "v2cc", 20, 0);
    assert!(
        fresh
            .retrieve_lent(&reuse_key("v2aa", 0))
            .unwrap()
            .is_none()
    );
}

/// A server restarted every run that wipes the previous run's databases and archives as
/// much again (the node-failure suite's n1, docs/cluster.md): fields of four writers of
/// mixed sizes interleave in its chunks, so a wipe of their databases frees many pieces that
/// only together make room for a field or a chunk. The heap stops growing after the first
/// runs: freed neighbours are one region again, and a new chunk takes a region smaller than
/// a chunk when no larger one is free.
#[test]
fn a_server_restarted_every_run_that_wipes_the_last_run_keeps_its_heap() {
    let dir = shm();
    let root = dir.path().join("store");
    let open_default = || {
        let b = Arc::new(
            PmemBackend::open(
                &root,
                PmemOptions {
                    initial_size: 16 << 20,
                    ..PmemOptions::default()
                },
            )
            .unwrap(),
        );
        let store = Store::with_options(b.clone() as Arc<dyn Backend>, StoreOptions::default());
        (b, store)
    };
    let expver = |run: u32, w: u32| reuse_expver(7, w, run);
    let size = |run: u32, w: u32, i: u32| ((run * 7 + w * 13 + i * 29) % 9 + 1) as usize * 100_000;
    let runs = 24;
    let mut heap = Vec::new();
    for run in 0..runs {
        let (b, mut store) = open_default();
        if run > 0 {
            for w in 0..4 {
                store
                    .wipe(&expver_request(&expver(run - 1, w)), true)
                    .unwrap();
            }
        }
        for i in 0..(20 + run % 5) {
            for w in 0..4 {
                let k = reuse_key(&expver(run, w), i);
                let mut bytes = payload(&k, 0, size(run, w, i));
                bytes.truncate(size(run, w, i));
                store.archive(&k, &bytes).unwrap();
            }
            if i % 3 == 2 {
                store.flush().unwrap();
            }
        }
        store.flush().unwrap();
        check_space(&b, &store);
        heap.push((info_u64(&b, "heap_used_bytes"), info_u64(&b, "free_bytes")));
    }
    // Two runs' fields (the last run's, live until the next wipe, and this run's) and a
    // chunk: the heap after run 2 holds that. Before freed neighbours were joined, each run
    // took about 30 MB more from the heap top, beside as much free space in pieces.
    let settled = heap[1].0;
    for (run, &(used, free)) in heap.iter().enumerate() {
        assert!(
            used <= settled + (16 << 20),
            "the heap grew from {settled} bytes after run 2 to {used} after run {} \
             ({free} bytes free); (used, free) per run: {heap:?}",
            run + 1
        );
    }
}
