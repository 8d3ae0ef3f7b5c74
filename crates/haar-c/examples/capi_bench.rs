//! Benchmark: archive+flush through libhaar's C API against the Rust `haar_store::Store` on
//! the same load, in the same run (issue 12: "within 5%").
//!
//! Loads: 1000 × 800 KiB and 20000 × 4 KiB fields, a flush every 100 / 2000 fields (10
//! steps), keyed like a model's output; posix on /dev/shm and a pmem pool on /dev/shm
//! (provisioned when opened, before the clock starts). Each side opens its store before the
//! clock and times only the archive+flush loop; every run writes into a new directory. The C
//! side is `bench/capi_bench.c` (compiled here with `gcc -O2` against the release
//! `libhaar_c.so`); the Rust side is this program re-run as a child (`--rust-child`): each
//! run is a fresh process, so neither side inherits a warm heap. Three sides, their order
//! rotated from run to run: C (three `haar_key_add` and one `haar_archive` per field), C
//! batched (one `haar_archive_with` per field) and Rust. Reported: the median of `--runs`
//! (default 5) of each, the ratios C throughput / Rust throughput of the medians and of the
//! best runs (the latter less sensitive to a shared host's noise).
//!
//! Run: `cargo build --release -p haar-c && cargo run --release -p haar-c --example
//! capi_bench [-- --runs N]`. Writes `bench/results/capi.json` and
//! `bench/results/benchmarks-capi.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use haar::{ConfigSource, OpenOptions};
use haar_core::Key;

/// One load: name, fields, bytes per field, fields per step (one flush each).
const LOADS: [(&str, usize, usize, usize); 2] = [
    ("1000 x 800 KiB", 1000, 800 * 1024, 100),
    ("20000 x 4 KiB", 20000, 4096, 2000),
];

fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn compile_c(out: &Path) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = release_dir();
    assert!(
        lib.join("libhaar_c.so").is_file(),
        "build the library first: cargo build --release -p haar-c"
    );
    let exe = out.join("capi_bench");
    let o = Command::new("gcc")
        .args(["-std=c11", "-O2", "-Wall", "-Werror", "-I"])
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("bench/capi_bench.c"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lhaar_c", "-o"])
        .arg(&exe)
        .output()
        .expect("gcc runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    exe
}

fn config(backend: &str, root: &Path, total: usize) -> String {
    match backend {
        "posix" => format!("backend: posix\nroots: [{}]\n", root.display()),
        _ => format!(
            "backend: pmem\nroots: [{}]\npool_size: {}\n",
            root.display(),
            // Room for the fields and their catalogue: no growth while timed.
            (total as u64 * 5 / 4).max(64 << 20)
        ),
    }
}

/// The Rust side: `Store` opened from the same configuration, the same keys and bytes.
fn rust_run(yaml: &str, fields: usize, bytes: usize, per_step: usize) -> f64 {
    let opts = OpenOptions {
        config: ConfigSource::Yaml {
            text: yaml.into(),
            origin: "bench".into(),
        },
        ..OpenOptions::default()
    };
    let mut store = opts.local().expect("open the store");
    let data: Vec<u8> = (0..bytes).map(|i| (i * 31 + 7) as u8).collect();
    let mut key = Key::parse(
        "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=pl,levelist=1,step=0,param=1",
    )
    .unwrap();
    let (pl, ps, pp) = (
        key.position("levelist").unwrap(),
        key.position("step").unwrap(),
        key.position("param").unwrap(),
    );
    // The values as text, made before the clock starts (as the C side does).
    let text: Vec<String> = (0..per_step + fields / per_step + 2)
        .map(|v| v.to_string())
        .collect();
    let t0 = Instant::now();
    for i in 0..fields {
        let in_step = i % per_step;
        for (pos, v) in [
            (pl, 1 + in_step % 10),
            (ps, i / per_step),
            (pp, 1 + in_step / 10),
        ] {
            key.set_value_at(pos, &text[v]);
        }
        store.archive(&key, &data).expect("archive");
        if in_step == per_step - 1 || i == fields - 1 {
            store.flush().expect("flush");
        }
    }
    let t = t0.elapsed().as_secs_f64();
    drop(store);
    t
}

/// This program as the Rust side's child process for `cfg`.
fn rust_cmd(cfg: &Path) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.arg("--rust-child").arg(cfg);
    c
}

/// Runs one side's process (C or Rust) on the load; its archive+flush seconds.
fn timed(cmd: &mut Command) -> f64 {
    let o = cmd
        .env_remove("HAAR_CONFIG")
        .output()
        .expect("the benchmark process runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "benchmark process failed: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.trim()
        .strip_prefix("seconds=")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the benchmark process printed {out:?}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The Rust side in a process of its own, like the C side: `--rust-child CFG FIELDS BYTES
/// PER_STEP` prints `seconds=S`.
fn rust_child(args: &[String]) {
    let yaml = std::fs::read_to_string(&args[0]).unwrap();
    let n = |i: usize| args[i].parse::<usize>().unwrap();
    println!("seconds={:.6}", rust_run(&yaml, n(1), n(2), n(3)));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--rust-child") {
        return rust_child(&args[2..]);
    }
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let exe = compile_c(work.path());
    let host = Command::new("sh")
        .args(["-c", "lscpu | grep 'Model name' | sed 's/.*: *//'"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut json_rows = Vec::new();
    let mut md = String::new();
    writeln!(
        md,
        "### C API (libhaar) archive+flush vs the Rust `Store`, same load, same run\n\n\
         Command: `cargo run --release -p haar-c --example capi_bench -- --runs {runs}`; host: {host}; \
         median of {runs} runs each, order rotated; /dev/shm; flush every 10th of the load.\n\n\
         C API: three `haar_key_add` and one `haar_archive` per field; C batched: one `haar_archive_with` per field (the same three values).\n\n\
         | backend | load | Rust Store (median) | C API (median) | C / Rust, medians | C / Rust, best runs | C batched (median) | batched / Rust, medians | batched / Rust, best runs |\n|---|---|---|---|---|---|---|---|---|"
    )
    .unwrap();
    let mut n = 0;
    for backend in ["posix", "pmem"] {
        for (name, fields, bytes, per_step) in LOADS {
            let total = fields * bytes;
            let (mut rust, mut c, mut cb) = (Vec::new(), Vec::new(), Vec::new());
            for rep in 0..runs {
                let order = match rep % 3 {
                    0 => [0, 1, 2],
                    1 => [1, 2, 0],
                    _ => [2, 0, 1],
                };
                for side in order {
                    n += 1;
                    let dir = work.path().join(format!("run{n}"));
                    std::fs::create_dir(&dir).unwrap();
                    let yaml = config(backend, &dir.join("root"), total);
                    let cfg = dir.join("haar.yaml");
                    std::fs::write(&cfg, &yaml).unwrap();
                    let load = [fields, bytes, per_step].map(|v| v.to_string());
                    match side {
                        0 => rust.push(timed(rust_cmd(&cfg).args(&load))),
                        1 => c.push(timed(Command::new(&exe).arg(&cfg).args(&load))),
                        _ => cb.push(timed(
                            Command::new(&exe).arg(&cfg).args(&load).arg("batched"),
                        )),
                    }
                    std::fs::remove_dir_all(&dir).unwrap();
                }
            }
            let (r, cm, cbm) = (median(rust.clone()), median(c.clone()), median(cb.clone()));
            let ratio = r / cm;
            let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
            let best_ratio = best(&rust) / best(&c);
            let (ratio_b, best_ratio_b) = (r / cbm, best(&rust) / best(&cb));
            let rate = |s: f64| {
                format!(
                    "{:.2} GiB/s, {:.0} fields/s",
                    total as f64 / s / (1u64 << 30) as f64,
                    fields as f64 / s
                )
            };
            println!(
                "{backend:5} {name:15} Rust {:.4} s ({})  C {:.4} s ({})  C/Rust {:.3} (best runs {:.3})  C batched/Rust {:.3} (best runs {:.3})",
                r,
                rate(r),
                cm,
                rate(cm),
                ratio,
                best_ratio,
                ratio_b,
                best_ratio_b
            );
            writeln!(
                md,
                "| {backend} | {name} | {} | {} | {ratio:.3} | {best_ratio:.3} | {} | {ratio_b:.3} | {best_ratio_b:.3} |",
                rate(r),
                rate(cm),
                rate(cbm)
            )
            .unwrap();
            json_rows.push(format!(
                "    {{\"backend\": \"{backend}\", \"load\": \"{name}\", \"fields\": {fields}, \"bytes\": {bytes}, \"per_flush\": {per_step}, \"rust_seconds\": {rust:?}, \"c_seconds\": {c:?}, \"rust_median\": {r}, \"c_median\": {cm}, \"c_over_rust_throughput\": {ratio}, \"c_over_rust_best\": {best_ratio}, \"c_batched_seconds\": {cb:?}, \"c_batched_median\": {cbm}, \"c_batched_over_rust_throughput\": {ratio_b}, \"c_batched_over_rust_best\": {best_ratio_b}}}"
            ));
        }
    }
    let json = format!(
        "{{\n  \"benchmark\": \"capi archive+flush vs Rust Store\",\n  \"host\": \"{host}\",\n  \"runs\": {runs},\n  \"results\": [\n{}\n  ]\n}}\n",
        json_rows.join(",\n")
    );
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/results");
    std::fs::create_dir_all(&results).unwrap();
    std::fs::write(results.join("capi.json"), json).unwrap();
    std::fs::write(results.join("benchmarks-capi.md"), &md).unwrap();
    print!("\n{md}");
}
