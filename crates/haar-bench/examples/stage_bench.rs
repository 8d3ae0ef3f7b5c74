//! Prints `haar_bench::stage::stage_vs_cp` as JSON: stage-in of about 1 GiB of files against
//! `cp -r` between the same directories, and the ETA error at 10% progress.
//!
//! `cargo run --release -p haar-bench --example stage_bench -- [DIR] [MIB] [FILE_MIB] [ROUNDS]`
//! (defaults: a temporary directory under /tmp, 1024, 16, 3).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let base = args.first().cloned().unwrap_or_else(|| "/tmp".into());
    let dir = tempfile::Builder::new()
        .prefix("haar-stage-bench")
        .tempdir_in(base)
        .expect("temporary directory");
    let r = haar_bench::stage::stage_vs_cp(
        dir.path(),
        num(1, 1024) << 20,
        num(2, 16) << 20,
        num(3, 3) as usize,
    )
    .expect("benchmark");
    println!("{}", serde_json::to_string_pretty(&r).expect("json"));
}
