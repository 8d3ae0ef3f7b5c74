//! Cost of `Schema::split`, `Request::resolve` and `Request::matches` (developer tool).
//!
//! `cargo run --release -p haar-core --example split_bench`
use haar_core::{Context, Key, Request, Schema};
use std::hint::black_box;
use std::time::Instant;

fn field_key(stream: &str, date: &str, step: u32, level: u32, param: &str) -> Key {
    let key = Key::parse(&format!(
        "class=od,expver=0001,stream={stream},date={date},time=1200,domain=g,type=fc,levtype=pl,\
         levelist={level},step={step},param={param}"
    ))
    .expect("valid key");
    if stream == "enfo" {
        key.with("type", "pf")
            .with("number", (step % 50 + 1).to_string())
    } else {
        key
    }
}

/// On-CPU time of this thread in ns (Linux), so that a busy machine inflates timings less.
fn cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// A start mark: wall clock and on-CPU time.
struct Mark(Instant, Option<u64>);

fn mark() -> Mark {
    Mark(Instant::now(), cpu_ns())
}

/// µs per operation: on-CPU time when available, else wall clock.
fn per_op(n: usize, t: Mark) -> f64 {
    let ns = match (t.1, cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64,
        _ => t.0.elapsed().as_secs_f64() * 1e9,
    };
    ns / 1e3 / n as f64
}

fn main() {
    let ctx = Context::now();
    let s = Schema::builtin();
    let rounds = 20;
    // Optional argument: only "split" or only "request" (for profiling).
    let only = std::env::args().nth(1).unwrap_or_default();
    for stream in ["oper", "enfo"] {
        if only == "request" {
            break;
        }
        let keys: Vec<_> = (0..20000)
            .map(|i| {
                field_key(
                    stream,
                    "20260101",
                    (i / 100) as u32,
                    (i % 100) as u32 + 1,
                    "130",
                )
            })
            .collect();
        let mut best = f64::MAX;
        for _ in 0..rounds {
            let t = mark();
            let mut n = 0;
            for k in &keys {
                n += s.split(black_box(k), &ctx).unwrap().datum.len();
            }
            black_box(n);
            best = best.min(per_op(keys.len(), t));
        }
        println!("split {stream}: {best:.2} µs per split");
    }

    if only == "split" {
        return;
    }
    let text = "retrieve,class=od,expver=1,stream=oper,date=20260101,time=1200,domain=g,type=fc,\
                levtype=pl,levelist=500,step=6,param=130";
    let req = Request::parse(text).unwrap();
    let n = 20000;
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let t = mark();
        for _ in 0..n {
            black_box(black_box(&req).resolve(s, &ctx).unwrap());
        }
        best = best.min(per_op(n, t));
    }
    println!("resolve (11 keywords): {best:.2} µs");

    let resolved = req.resolve(s, &ctx).unwrap();
    let key = s
        .split(&field_key("oper", "20260101", 6, 500, "130"), &ctx)
        .unwrap()
        .full();
    assert!(resolved.matches(&key));
    let n = 200_000;
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let t = mark();
        for _ in 0..n {
            black_box(black_box(&resolved).matches(black_box(&key)));
        }
        best = best.min(per_op(n, t));
    }
    println!("matches (11 keywords): {best:.3} µs");
}
