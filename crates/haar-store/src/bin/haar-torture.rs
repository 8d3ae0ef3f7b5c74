//! Test tool for the crash tests (`tests/crash.rs`): archives batches of fields into two
//! databases, flushing after each batch and printing `ack B` once flush B has returned.
//! The test kills it with SIGKILL at a random moment and checks what survived. Built only
//! with the `testing` feature (`required-features`), as `cargo test -p haar-store` does; not
//! by `make build`.
//!
//! Usage: haar-torture posix|pmem ROOT WRITER BATCHES FIELDS_PER_BATCH SIZE
//!        haar-torture read posix|pmem ROOT WRITERS BATCHES FIELDS_PER_BATCH SIZE SECONDS
//!        haar-torture reuse ROOT TRIAL WRITER ROUNDS FIELDS_PER_ROUND SIZE
//!        haar-torture hold ROOT EXPVER I
//!        haar-torture create ROOT SIZE I
//!
//! The `read` form is a concurrent reader: for SECONDS it keeps retrieving every field of
//! every writer, checking each visible field byte for byte, that a writer's visible batches
//! are a prefix and that nothing once visible disappears; it prints `checks N visible M`.

use std::io::Write;
use std::sync::Arc;

use haar_store::conformance::{field_key, payload, reuse_expver, reuse_key};
use haar_store::pmem::PmemOptions;
use haar_store::{Backend, FsyncPolicy, PmemBackend, PosixBackend, Store, StoreOptions};

fn open(kind: &str, root: std::path::PathBuf) -> Store {
    let backend: Arc<dyn Backend> = match kind {
        "posix" => Arc::new(PosixBackend::new(vec![root], FsyncPolicy::Never).expect("posix")),
        "pmem" => Arc::new(
            PmemBackend::open(
                &root,
                PmemOptions {
                    initial_size: 64 << 20,
                    slots: 16, // small: kills also land while the slot chain is extended
                    ..PmemOptions::default()
                },
            )
            .expect("pmem"),
        ),
        other => panic!("unknown backend {other}"),
    };
    // Merge after nearly every flush, and into deeper levels often, so that kills also land
    // while runs are written and manifests published (design §3.1).
    let opts = StoreOptions {
        merge: haar_store::MergePolicy {
            threshold: 10,
            fanout: 2,
            background: true,
        },
        ..StoreOptions::default()
    };
    Store::with_options(backend, opts)
}

fn reader(a: &[String]) {
    let root = std::path::PathBuf::from(&a[3]);
    let num = |i: usize| -> u32 { a[i].parse().expect("number") };
    let (writers, batches, per, size) = (num(4), num(5), num(6), num(7) as usize);
    let seconds: f64 = a[8].parse().expect("SECONDS");
    // The database may not exist yet: wait for the writers to create it.
    let store = open(&a[2], root);
    let start = std::time::Instant::now();
    let mut seen = vec![0u32; writers as usize]; // batches known visible per writer
    let (mut checks, mut buf) = (0u64, Vec::new());
    // Until every batch is seen (or SECONDS pass, which the test then reports).
    while start.elapsed().as_secs_f64() < seconds && seen.iter().sum::<u32>() < writers * batches {
        for w in 0..writers {
            // Walk backwards: batches are flushed in order and each atomically, so once a
            // field is seen visible, every field checked after it (earlier fields, earlier
            // batches) was committed before it and must be visible too. Forward order would
            // race with flushes landing mid-walk.
            let mut highest: Option<u32> = None;
            for b in (0..batches).rev() {
                for i in (0..per).rev() {
                    let k = torture_key("20250101", w, b, i);
                    buf.clear();
                    let visible = store
                        .retrieve_keys(std::slice::from_ref(&k), |_, b, _| {
                            buf.extend_from_slice(b);
                            Ok(())
                        })
                        .expect("retrieve")
                        .found
                        == 1;
                    checks += 1;
                    if visible {
                        assert!(
                            buf == payload(&k, 0, size),
                            "reader: {k} not byte-identical"
                        );
                        highest.get_or_insert(b);
                    } else if highest.is_some() {
                        panic!(
                            "reader: {k} (batch {b} of writer {w}) invisible although a later field is visible"
                        );
                    }
                }
            }
            let prefix = highest.map_or(0, |b| b + 1);
            assert!(
                prefix >= seen[w as usize],
                "reader: writer {w} batches went from {} to {prefix}",
                seen[w as usize]
            );
            seen[w as usize] = prefix;
        }
    }
    println!("checks {checks} visible {}", seen.iter().sum::<u32>());
}

/// `reuse ROOT TRIAL WRITER ROUNDS PER SIZE`: space reuse under kill -9 (design §5.4). First
/// wipes the databases this writer made in the previous trial (`cleared`); then per round
/// archives PER fields into a new database (`ack R`); in odd rounds re-archives the first
/// half with new bytes (`re R`) and purges (`purged R`); from round 2 wipes the database of
/// two rounds before (`wiped R`). Small chunks, so that kills leak little.
fn reuse(a: &[String]) {
    let root = std::path::PathBuf::from(&a[2]);
    let num = |i: usize| -> u32 { a[i].parse().expect("number") };
    let (trial, writer, rounds, per, size) = (num(3), num(4), num(5), num(6), num(7) as usize);
    let backend = PmemBackend::open(
        &root,
        PmemOptions {
            initial_size: 16 << 20,
            slots: 16,
            chunk: 64 << 10,
            ..PmemOptions::default()
        },
    )
    .expect("pmem");
    let mut store = Store::with_options(Arc::new(backend), StoreOptions::default());
    let say = |line: String| {
        let mut o = std::io::stdout().lock();
        writeln!(o, "{line}").unwrap();
        o.flush().unwrap();
    };
    let db = |r: u32| {
        haar_core::request::Request::parse(&format!("expver={}", reuse_expver(trial, writer, r)))
            .unwrap()
    };
    if trial > 0 {
        for r in 0..rounds {
            let old = haar_core::request::Request::parse(&format!(
                "expver={}",
                reuse_expver(trial - 1, writer, r)
            ))
            .unwrap();
            store.wipe(&old, true).expect("wipe");
        }
        say("cleared".into());
    }
    for r in 0..rounds {
        let ev = reuse_expver(trial, writer, r);
        for i in 0..per {
            let k = reuse_key(&ev, i);
            store.archive(&k, &payload(&k, 0, size)).expect("archive");
        }
        store.flush().expect("flush");
        say(format!("ack {r}"));
        if r % 2 == 1 {
            for i in 0..per / 2 {
                let k = reuse_key(&ev, i);
                store.archive(&k, &payload(&k, 1, size)).expect("archive");
            }
            store.flush().expect("flush");
            say(format!("re {r}"));
            store.purge(&db(r), true).expect("purge");
            say(format!("purged {r}"));
        }
        if r >= 2 {
            store.wipe(&db(r - 2), true).expect("wipe");
            say(format!("wiped {}", r - 2));
        }
    }
}

/// `hold ROOT EXPVER I`: retrieves field I of the reuse torture's database EXPVER zero-copy,
/// prints `held`, then answers each line on stdin: `check` with `same` or `changed` (the
/// view's bytes against the field's payload), `drop` by dropping the view (`dropped`).
fn hold(a: &[String]) {
    let root = std::path::PathBuf::from(&a[2]);
    let backend = PmemBackend::open(&root, PmemOptions::default()).expect("pmem");
    let store = Store::with_options(Arc::new(backend), StoreOptions::default());
    let k = reuse_key(&a[3], a[4].parse().expect("I"));
    let (_, view) = store
        .retrieve_lent(&k)
        .expect("retrieve")
        .expect("the field to hold is there");
    let size = view.len();
    let mut view = Some(view);
    println!("held");
    for line in std::io::stdin().lines() {
        let line = line.unwrap();
        let answer = match (line.trim(), &view) {
            ("check", Some(v)) if **v == payload(&k, 0, size)[..] => "same",
            ("check", _) => "changed",
            ("drop", _) => {
                view = None;
                "dropped"
            }
            _ => "?",
        };
        let mut o = std::io::stdout().lock();
        writeln!(o, "{answer}").unwrap();
        o.flush().unwrap();
    }
}

/// `flushed ROOT EXPVER N`: archives fields 0..N of the reuse torture's database EXPVER
/// (4 KiB each) into a pmem pool, flushes, prints `flushed`, then waits for stdin to close
/// with its chunk's unused tail still reserved: the test kills it there (design §5.4, "A
/// killed writer's chunk").
fn flushed(a: &[String]) {
    let root = std::path::PathBuf::from(&a[2]);
    let backend = PmemBackend::open(&root, PmemOptions::default()).expect("pmem");
    let mut store = Store::with_options(Arc::new(backend), StoreOptions::default());
    for i in 0..a[4].parse::<u32>().expect("N") {
        let k = reuse_key(&a[3], i);
        store.archive(&k, &payload(&k, 0, 4096)).expect("archive");
    }
    store.flush().expect("flush");
    println!("flushed");
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().lines().count();
}

/// `create ROOT SIZE I`: opens (and, the first time, creates) a pmem pool of SIZE bytes in
/// ROOT, archives field I of the reuse torture's database `crea`, flushes and prints `ok I`.
/// The pool-creation test kills it while it creates the pool.
fn create(a: &[String]) {
    let root = std::path::PathBuf::from(&a[2]);
    let size: u64 = a[3].parse().expect("SIZE");
    let i: u32 = a[4].parse().expect("I");
    let backend = PmemBackend::open(
        &root,
        PmemOptions {
            initial_size: size,
            ..PmemOptions::default()
        },
    )
    .expect("pmem");
    let mut store = Store::with_options(Arc::new(backend), StoreOptions::default());
    let k = reuse_key("crea", i);
    store.archive(&k, &payload(&k, 0, 4096)).expect("archive");
    store.flush().expect("flush");
    println!("ok {i}");
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.get(1).map(String::as_str) == Some("create") && a.len() == 5 {
        return create(&a);
    }
    if a.get(1).map(String::as_str) == Some("read") && a.len() == 9 {
        return reader(&a);
    }
    if a.get(1).map(String::as_str) == Some("reuse") && a.len() == 8 {
        return reuse(&a);
    }
    if a.get(1).map(String::as_str) == Some("hold") && a.len() == 5 {
        return hold(&a);
    }
    if a.get(1).map(String::as_str) == Some("flushed") && a.len() == 5 {
        return flushed(&a);
    }
    if a.len() != 7 {
        eprintln!("usage: haar-torture posix|pmem ROOT WRITER BATCHES FIELDS_PER_BATCH SIZE");
        std::process::exit(1);
    }
    let root = std::path::PathBuf::from(&a[2]);
    let writer: u32 = a[3].parse().expect("WRITER");
    let batches: u32 = a[4].parse().expect("BATCHES");
    let per: u32 = a[5].parse().expect("FIELDS_PER_BATCH");
    let size: usize = a[6].parse().expect("SIZE");
    let mut store = open(&a[1], root);
    let out = std::io::stdout();
    for b in 0..batches {
        for i in 0..per {
            for date in ["20250101", "20250102"] {
                let k = torture_key(date, writer, b, i);
                store.archive(&k, &payload(&k, 0, size)).expect("archive");
            }
        }
        store.flush().expect("flush");
        let mut o = out.lock();
        writeln!(o, "ack {b}").unwrap();
        o.flush().unwrap();
    }
}

/// The key of field `i` of batch `b` of `writer` (shared with the test through this formula).
fn torture_key(date: &str, writer: u32, b: u32, i: u32) -> haar_core::Key {
    field_key(date, b, writer * 1000 + i, "130")
}
