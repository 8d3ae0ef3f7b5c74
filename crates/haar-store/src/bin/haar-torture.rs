//! Test tool for the crash tests (`tests/crash.rs`): archives batches of fields into two
//! databases, flushing after each batch and printing `ack B` once flush B has returned.
//! The test kills it with SIGKILL at a random moment and checks what survived.
//!
//! Usage: haar-torture posix|pmem ROOT WRITER BATCHES FIELDS_PER_BATCH SIZE
//!        haar-torture read posix|pmem ROOT WRITERS BATCHES FIELDS_PER_BATCH SIZE SECONDS
//!
//! The `read` form is a concurrent reader: for SECONDS it keeps retrieving every field of
//! every writer, checking each visible field byte for byte, that a writer's visible batches
//! are a prefix and that nothing once visible disappears; it prints `checks N visible M`.

use std::io::Write;
use std::sync::Arc;

use haar_store::conformance::{field_key, payload};
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

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.get(1).map(String::as_str) == Some("read") && a.len() == 9 {
        return reader(&a);
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
