//! Where time goes in the pmem backend (developer tool, for `perf record`): archive N fields of
//! SIZE bytes with a flush every 100 (as `haar bench` does), then (unless `READS=0`) retrieve them one at a
//! time with a fresh store handle (zero-copy `retrieve_key_with`, as `haar bench` does). `ROUNDS` repeats both phases so a profile has enough samples.
use haar_store::pmem::PmemOptions;
use haar_store::{PmemBackend, Store, StoreOptions};
use std::sync::Arc;
use std::time::Instant;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn key(round: usize, i: usize) -> haar_core::Key {
    haar_core::Key::new()
        .with("class", "od")
        .with("expver", "0001")
        .with("stream", "oper")
        .with("date", (20261101 + round).to_string())
        .with("time", "1200")
        .with("domain", "g")
        .with("type", "fc")
        .with("levtype", "pl")
        .with("levelist", (i % 100 + 1).to_string())
        .with("step", (i / 100).to_string())
        .with("param", "130")
}

fn main() {
    let dir = std::path::Path::new("/dev/shm/haar-pmem-profile");
    let size = env("SIZE", 800 * 1024);
    let n = env("N", 500);
    let rounds = env("ROUNDS", 1);
    // READS=0 profiles the archive phase alone.
    let reads = env("READS", 1) != 0;
    let data: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
    let gib = (n * size) as f64 / (1u64 << 30) as f64;
    // One pool provisioned for every round, so a profile of the rounds holds no set-up.
    let _ = std::fs::remove_dir_all(dir);
    let opts = || PmemOptions {
        initial_size: (rounds * (n * size + n * size / 8) + (64 << 20)) as u64,
        ..Default::default()
    };
    // The creating process pre-faulted the pool, as `haar bench`'s writer does.
    let writer = Arc::new(PmemBackend::open(dir, opts()).unwrap());
    for round in 0..rounds {
        let keys: Vec<_> = (0..n).map(|i| key(round, i)).collect();
        let mut store = Store::with_options(writer.clone(), StoreOptions::default());
        let t0 = Instant::now();
        for (i, k) in keys.iter().enumerate() {
            store.archive(k, &data).unwrap();
            if (i + 1) % 100 == 0 {
                store.flush().unwrap();
            }
        }
        store.flush().unwrap();
        let w = t0.elapsed().as_secs_f64();
        drop(store);
        // Readers map the pool afresh, as `haar bench`'s reader does.
        let store = Store::with_options(
            Arc::new(PmemBackend::open(dir, opts()).unwrap()),
            StoreOptions::default(),
        );
        if !reads {
            println!("write {:.0} fields/s {:.2} GiB/s", n as f64 / w, gib / w);
            continue;
        }
        let t0 = Instant::now();
        for k in &keys {
            let mut n = 0;
            store
                .retrieve_keys(std::slice::from_ref(k), |_, b, _| {
                    n = b.len();
                    Ok(())
                })
                .unwrap();
            assert_eq!(n, size);
        }
        let r = t0.elapsed().as_secs_f64();
        println!(
            "write {:.0} fields/s {:.2} GiB/s; read {:.0} fields/s {:.2} GiB/s",
            n as f64 / w,
            gib / w,
            n as f64 / r,
            gib / r
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
