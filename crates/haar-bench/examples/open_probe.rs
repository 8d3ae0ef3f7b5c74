//! What a fresh handle and its first read cost on a store kept by `haar bench --scale
//! --keep` (at least 10^5 fields): opens the store, retrieves one field, drops it, N times.
//!
//! `cargo run --release -p haar-bench --example open_probe -- /dev/shm/haar-scale-PID/haar [N]`
//!
//! Prints the median of the open alone and of open + first read, and the fastest of the
//! latter; run it under `perf record` to see where a fresh reader's time goes.
use haar::OpenOptions;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(root) = args.next() else {
        eprintln!(
            "usage: open_probe ROOT [N]   (ROOT: a pmem store kept by haar bench --scale --keep)"
        );
        std::process::exit(2);
    };
    let n: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
        .max(1);
    let opts = OpenOptions {
        root: Some(root.into()),
        backend: Some("pmem".into()),
        ..OpenOptions::default()
    };
    let (mut open, mut first) = (Vec::new(), Vec::new());
    for i in 0..n {
        let key = haar_bench::scale::key((i as u64 * 7919) % 100_000);
        let t0 = Instant::now();
        let store = opts.field_store().expect("open the store");
        open.push(t0.elapsed().as_secs_f64() * 1e3);
        let mut len = 0;
        store
            .retrieve_keys(std::slice::from_ref(&key), &mut |_, d, _| {
                len += d.len();
                Ok(())
            })
            .expect("retrieve");
        first.push(t0.elapsed().as_secs_f64() * 1e3);
        assert!(len > 0, "field {key} not found");
    }
    open.sort_by(f64::total_cmp);
    first.sort_by(f64::total_cmp);
    println!(
        "open p50 {:.3} ms; open + first read p50 {:.3} ms, fastest {:.3} ms ({n} rounds)",
        open[n / 2],
        first[n / 2],
        first[0]
    );
}
