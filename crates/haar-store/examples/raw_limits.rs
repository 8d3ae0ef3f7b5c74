//! Measures the raw copy limits of this machine: the ceilings haar-store's benchmarks are
//! reported against.
//!
//! ```text
//! cargo run --release -p haar-store --example raw_limits -- [DIR] [MIB]
//! ```
//!
//! `DIR` defaults to `/dev/shm`, `MIB` (bytes written per run) to 1024. Prints a table, then one
//! JSON line (prefixed `json:`) to save alongside benchmark results.

use std::path::PathBuf;

use haar_persist::{CpuFeatures, measure_raw_limits};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "/dev/shm".into()));
    let mib: usize = match args.next() {
        None => 1024,
        Some(s) => s.parse().map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("MIB {s:?}: {e}"))
        })?,
    };

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    let f = CpuFeatures::detect();
    println!("cpu: {cpu} ({threads} threads), kernel {kernel}");
    println!(
        "features: clwb={} clflushopt={} avx512f={} -> flush with {:?}",
        f.clwb,
        f.clflushopt,
        f.avx512f,
        f.flush_kind()
    );
    println!(
        "dir: {}, {mib} MiB per run, 800 KiB chunks, best of 3",
        dir.display()
    );

    let l = measure_raw_limits(&dir, mib << 20)?;
    let rows = [
        ("memcpy into resident mapping", l.memcpy_gbs, "7.5"),
        ("non-temporal copy (copy_nt)", l.nt_copy_gbs, "13.5-15"),
        ("non-temporal copy, MOVNTI only", l.nt_copy_movnti_gbs, "-"),
        ("memcpy + CLWB + SFENCE", l.clwb_copy_gbs, "~4"),
        (
            "first-touch write (sparse file)",
            l.first_touch_gbs,
            "1.0-1.9",
        ),
        ("provision (fallocate + populate)", l.provision_gbs, "-"),
    ];
    println!(
        "{:<34} {:>8} {:>11} {:>10}",
        "what", "GB/s", "FACTS.md", "/ memcpy"
    );
    for (what, gbs, facts) in rows {
        println!(
            "{what:<34} {gbs:>8.2} {facts:>11} {:>10.2}",
            gbs / l.memcpy_gbs
        );
    }
    println!(
        "json: {{\"cpu\":{cpu:?},\"kernel\":{kernel:?},\"dir\":{:?},\"bytes\":{},\"chunk\":{},\
         \"memcpy_gbs\":{:.3},\"nt_copy_gbs\":{:.3},\"nt_copy_movnti_gbs\":{:.3},\
         \"clwb_copy_gbs\":{:.3},\"first_touch_gbs\":{:.3},\"provision_gbs\":{:.3}}}",
        dir.display().to_string(),
        l.bytes,
        l.chunk,
        l.memcpy_gbs,
        l.nt_copy_gbs,
        l.nt_copy_movnti_gbs,
        l.clwb_copy_gbs,
        l.first_touch_gbs,
        l.provision_gbs
    );
    Ok(())
}
