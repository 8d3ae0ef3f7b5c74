//! Where archive time goes in the pmem backend (developer tool).
use haar_store::conformance::field_key;
use haar_store::pmem::PmemOptions;
use haar_store::{PmemBackend, Store, StoreOptions};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let dir = std::path::Path::new("/dev/shm/haar-pmem-profile");
    let _ = std::fs::remove_dir_all(dir);
    let size: usize = std::env::var("SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(800 * 1024);
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let t = Instant::now();
    let b = PmemBackend::open(
        dir,
        PmemOptions {
            initial_size: (n * size + (128 << 20)) as u64,
            ..Default::default()
        },
    )
    .unwrap();
    println!("open+provision {:?}", t.elapsed());
    let mut store = Store::with_options(Arc::new(b), StoreOptions::default());
    let data = vec![5u8; size];
    let keys: Vec<_> = (0..n)
        .map(|i| field_key("20260101", (i / 100) as u32, (i % 100) as u32 + 1, "130"))
        .collect();
    let (mut ts, mut ta, mut tf) = (0.0, 0.0, 0.0);
    let t0 = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        let t = Instant::now();
        let split = store.split(k).unwrap();
        ts += t.elapsed().as_secs_f64();
        let t = Instant::now();
        store.archive_split(split, &data).unwrap();
        ta += t.elapsed().as_secs_f64();
        if (i + 1) % 100 == 0 {
            let t = Instant::now();
            store.flush().unwrap();
            tf += t.elapsed().as_secs_f64();
        }
    }
    let total = t0.elapsed().as_secs_f64();
    println!(
        "total {total:.3}s = {:.2} GiB/s; split {ts:.3} archive {ta:.3} flush {tf:.3}",
        (n * size) as f64 / total / (1u64 << 30) as f64
    );
    let _ = std::fs::remove_dir_all(dir);
}
