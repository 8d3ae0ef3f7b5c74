//! Measure MARS key extraction (`mars_keys`) in messages per second, on one
//! thread and on two, over a synthetic O320 ensemble (about 824 KiB per
//! message) or the GRIB files given on the command line; also times the
//! generator itself.
//!
//! `cargo run --release -p haar-grib --example keys_bench [-- FILE...]`
//!
//! Prints one line per measurement; `HAAR_BENCH_MESSAGES` sets the synthetic
//! message count (default 800 = 10 members × 4 steps × 4 levels × 5 params).
use std::time::Instant;

use haar_grib::{EnsembleSpec, Grid, generate, mars_keys, messages};

/// CPU time of this process (user + system): on a shared machine it varies far less than
/// wall time.
fn cpu_seconds() -> f64 {
    let mut t = std::mem::MaybeUninit::<[i64; 2]>::uninit();
    // SAFETY: clock_gettime writes a struct timespec (two 64-bit fields on Linux x86-64).
    unsafe { clock_gettime(2, t.as_mut_ptr()) }; // CLOCK_PROCESS_CPUTIME_ID
    // SAFETY: initialised by the call above.
    let [s, ns] = unsafe { t.assume_init() };
    s as f64 + ns as f64 * 1e-9
}

unsafe extern "C" {
    fn clock_gettime(clock: i32, tp: *mut [i64; 2]) -> i32;
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    let data: Vec<u8> = if files.is_empty() {
        let spec = EnsembleSpec {
            members: 10,
            steps: vec![0, 6, 12, 18],
            levels: vec![1000, 850, 500, 250],
            params: vec![129, 130, 131, 132, 133],
            grid: Grid::O320,
            date: 20240101,
            time: 0,
            expver: "0001".into(),
            class: "od".into(),
        };
        let mut out = Vec::new();
        let t = Instant::now();
        let s = generate(&spec, &mut out)?;
        let dt = t.elapsed().as_secs_f64();
        println!(
            "generate: {} messages, {:.1} MiB in {:.2} s ({:.0} messages/s, {:.0} MiB/s), {:.1} KiB/message",
            s.messages,
            s.bytes as f64 / 1048576.0,
            dt,
            s.messages as f64 / dt,
            s.bytes as f64 / 1048576.0 / dt,
            s.bytes as f64 / s.messages as f64 / 1024.0
        );
        out
    } else {
        let mut all = Vec::new();
        for f in &files {
            all.extend(std::fs::read(f)?);
        }
        all
    };
    let t = Instant::now();
    let msgs: Vec<&[u8]> = messages(&data)
        .filter_map(Result::ok)
        .map(|m| m.bytes)
        .collect();
    let frame_s = t.elapsed().as_secs_f64();
    println!(
        "frame: {} messages in {:.2} ms ({:.1} GiB/s; bodies are skipped, not read)",
        msgs.len(),
        frame_s * 1e3,
        data.len() as f64 / frame_s / 1073741824.0
    );
    // Warm ecCodes' definitions once so neither run pays the parse.
    mars_keys(msgs[0])?;
    let cpu = cpu_seconds();
    for m in &msgs {
        haar_grib::mars_keys_uncached(m)?;
    }
    println!(
        "mars_keys_uncached (paramId evaluated by ecCodes every time), 1 thread: {:.3} ms CPU/message",
        (cpu_seconds() - cpu) * 1e3 / msgs.len() as f64
    );
    for threads in [1usize, 2] {
        let cpu = cpu_seconds();
        let t = Instant::now();
        std::thread::scope(|s| {
            for id in 0..threads {
                let msgs = &msgs;
                s.spawn(move || {
                    for m in msgs.iter().skip(id).step_by(threads) {
                        mars_keys(m).expect("keys");
                    }
                });
            }
        });
        let dt = t.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu;
        println!(
            "mars_keys, {threads} thread(s): {} messages in {:.3} s: {:.0} messages/s, {:.3} ms CPU/message",
            msgs.len(),
            dt,
            msgs.len() as f64 / dt,
            cpu * 1e3 / msgs.len() as f64
        );
    }
    println!("ecCodes {}", haar_grib::eccodes_version());
    Ok(())
}
