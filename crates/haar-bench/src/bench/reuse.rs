//! Space reuse in a pmem pool (design §5.4), the target: fill a new pool with two
//! databases, wipe one (half the pool), archive the same volume again into a third, and see
//! whether the pool file grew; with the archive rate into reused space beside the rate into
//! fresh space, and the cost of the wipe's reclaim.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use haar_core::Key;
use haar_core::request::Request;
use haar_store::pmem::PmemOptions;
use haar_store::{Backend, PmemBackend, Store, StoreOptions};
use serde_json::{Value, json};

use super::{GIB, body, f, fail, stamp};
use crate::error::Error;

const FIELD: usize = 64 << 10;
const FLUSH_EVERY: usize = 100;

fn key(db: &str, i: usize) -> Key {
    Key::parse(&format!(
        "class=od,expver={db},stream=oper,date=20261121,time=0000,domain=g,type=fc,\
         levtype=ml,levelist={},step={},param=130",
        i % 137 + 1,
        i / 137
    ))
    .expect("valid key")
}

fn pool_info(b: &PmemBackend, what: &str) -> u64 {
    b.info()[what].as_u64().unwrap_or(0)
}

/// Archives `n` fields into database `db`; returns seconds.
fn fill(store: &mut Store, db: &str, n: usize) -> Result<f64, Error> {
    let mut data = body(FIELD);
    let pb = crate::progress::bar(n as u64, &format!("reuse: archive {db}"), false);
    let t = Instant::now();
    for i in 0..n {
        stamp(&mut data, i);
        store.archive(&key(db, i), &data).map_err(fail("archive"))?;
        if (i + 1) % FLUSH_EVERY == 0 {
            store.flush().map_err(fail("flush"))?;
            pb.set_position(i as u64 + 1);
        }
    }
    store.flush().map_err(fail("flush"))?;
    pb.finish_and_clear();
    Ok(t.elapsed().as_secs_f64())
}

/// Runs the measurement in `dir` with a pool of `pool` bytes.
pub fn run(dir: &Path, pool: u64) -> Result<Value, Error> {
    let root = dir.join("reuse");
    let backend = Arc::new(
        PmemBackend::open(
            &root,
            PmemOptions {
                initial_size: pool,
                ..PmemOptions::default()
            },
        )
        .map_err(fail("open pool"))?,
    );
    let mut store =
        Store::with_options(backend.clone() as Arc<dyn Backend>, StoreOptions::default());
    // Two databases that fill the pool, leaving room for one chunk (16 MiB) of slack.
    let room = pool - pool_info(&backend, "heap_used_bytes") - (32 << 20);
    let n = (room / (2 * FIELD as u64)) as usize;
    let fresh = fill(&mut store, "aaaa", n)? + fill(&mut store, "bbbb", n)?;
    let pool_before = pool_info(&backend, "pool_bytes");
    let heap_before = pool_info(&backend, "heap_used_bytes");
    let t = Instant::now();
    let wiped = store
        .wipe(&Request::parse("expver=aaaa").expect("request"), true)
        .map_err(fail("wipe"))?;
    let wipe_s = t.elapsed().as_secs_f64();
    let freed = pool_info(&backend, "free_bytes");
    let reused = fill(&mut store, "cccc", n)?;
    let pool_after = pool_info(&backend, "pool_bytes");
    let heap_after = pool_info(&backend, "heap_used_bytes");
    // Every field of the refill and of the database kept reads back.
    let mut expect = body(FIELD);
    for db in ["bbbb", "cccc"] {
        for i in 0..n {
            stamp(&mut expect, i);
            let got = store
                .retrieve_lent(&key(db, i))
                .map_err(fail("retrieve"))?
                .ok_or_else(|| Error::Failed(format!("reuse bench: {} missing", key(db, i))))?;
            if *got.1 != expect[..] {
                return Err(Error::Failed(format!(
                    "reuse bench: {} read back wrong",
                    key(db, i)
                )));
            }
        }
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&root);
    let volume = (n * FIELD) as f64;
    Ok(json!({
        "pool_bytes": pool,
        "field_bytes": FIELD,
        "fields_per_database": n,
        "wiped_fields": wiped.fields,
        "pool_file_bytes_before": pool_before,
        "pool_file_bytes_after": pool_after,
        "heap_used_before": heap_before,
        "heap_used_after": heap_after,
        "freed_bytes": freed,
        "wipe_seconds": wipe_s,
        "archive_fresh_gib_per_s": 2.0 * volume / GIB / fresh,
        "archive_reused_gib_per_s": volume / GIB / reused,
        "pool_grew": pool_after > pool_before,
    }))
}

/// The section of the report.
pub fn render(r: &Value) -> String {
    if r.is_null() {
        return String::new();
    }
    let mib = |v: &Value| f(v) / (1u64 << 20) as f64;
    format!(
        "\nspace reuse (pmem pool of {:.0} MiB, {} KiB fields): two databases of {} fields fill it \
         (heap {:.1} MiB, file {:.1} MiB); wiping one took {:.1} ms and freed {:.1} MiB; \
         archiving as much again: heap {:.1} MiB, file {:.1} MiB — {}; archive into reused \
         space {:.2} GiB/s = {:.2}× into fresh space ({:.2} GiB/s)\n",
        mib(&r["pool_bytes"]),
        f(&r["field_bytes"]) / 1024.0,
        r["fields_per_database"],
        mib(&r["heap_used_before"]),
        mib(&r["pool_file_bytes_before"]),
        f(&r["wipe_seconds"]) * 1e3,
        mib(&r["freed_bytes"]),
        mib(&r["heap_used_after"]),
        mib(&r["pool_file_bytes_after"]),
        if r["pool_grew"] == true {
            "FAIL: the pool file grew"
        } else {
            "PASS: the pool file did not grow"
        },
        f(&r["archive_reused_gib_per_s"]),
        f(&r["archive_reused_gib_per_s"]) / f(&r["archive_fresh_gib_per_s"]),
        f(&r["archive_fresh_gib_per_s"]),
    )
}
