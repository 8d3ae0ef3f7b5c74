//! Test tool for the crash tests (`tests/crash.rs`): archives batches of fields into two
//! databases, flushing after each batch and printing `ack B` once flush B has returned.
//! The test kills it with SIGKILL at a random moment and checks what survived.
//!
//! Usage: haar-torture posix|pmem ROOT WRITER BATCHES FIELDS_PER_BATCH SIZE

use std::io::Write;
use std::sync::Arc;

use haar_store::conformance::{field_key, payload};
use haar_store::pmem::PmemOptions;
use haar_store::{Backend, FsyncPolicy, PmemBackend, PosixBackend, Store, StoreOptions};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 7 {
        eprintln!("usage: haar-torture posix|pmem ROOT WRITER BATCHES FIELDS_PER_BATCH SIZE");
        std::process::exit(1);
    }
    let root = std::path::PathBuf::from(&a[2]);
    let writer: u32 = a[3].parse().expect("WRITER");
    let batches: u32 = a[4].parse().expect("BATCHES");
    let per: u32 = a[5].parse().expect("FIELDS_PER_BATCH");
    let size: usize = a[6].parse().expect("SIZE");
    let backend: Arc<dyn Backend> = match a[1].as_str() {
        "posix" => Arc::new(PosixBackend::new(vec![root], FsyncPolicy::Never).expect("posix")),
        "pmem" => Arc::new(
            PmemBackend::open(
                &root,
                PmemOptions {
                    initial_size: 64 << 20,
                    slots: 1 << 16,
                    ..PmemOptions::default()
                },
            )
            .expect("pmem"),
        ),
        other => panic!("unknown backend {other}"),
    };
    let mut store = Store::with_options(backend, StoreOptions::default());
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
