//! Cost of schema split per key (developer tool).
use haar_core::{Context, Schema};
use haar_store::conformance::field_key;
fn main() {
    let keys: Vec<_> = (0..20000)
        .map(|i| field_key("20260101", (i / 100) as u32, (i % 100) as u32 + 1, "130"))
        .collect();
    let ctx = Context::now();
    let s = Schema::builtin();
    let t = std::time::Instant::now();
    let mut n = 0;
    for k in &keys {
        n += s.split(k, &ctx).unwrap().datum.len();
    }
    println!(
        "{:.2} µs per split ({n})",
        t.elapsed().as_secs_f64() * 1e6 / keys.len() as f64
    );
}
