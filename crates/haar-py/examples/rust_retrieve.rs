//! The Rust peer of `bench/python_retrieve.py`: the same one-field-at-a-time retrieve of the
//! same keys from the same store, through the `haar` library directly, so the Python face is
//! measured against the API it wraps in one run.
//!
//! `rust_retrieve CONFIG KEYS ROUNDS`: CONFIG is a haar YAML file, KEYS a file of one
//! `k=v,k=v` key per line. Prints one JSON object: the best of ROUNDS for `copy` (each field
//! delivered by `FieldStore::retrieve` and copied into an owned `Vec`, as Python's
//! `read()` copies into `bytes`) and `lent` (`FieldStore::retrieve_lent`: the bytes the store
//! lends, as `memoryview(handle)` sees them) and `lent_copy` (`retrieve_lent` then a copy into
//! a `Vec`: the cheapest way to owned bytes, what Python's `read()` does), in seconds.

use std::time::Instant;

use haar::{ConfigSource, OpenOptions};
use haar_core::Key;
use haar_store::frontend::single_key_request;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, config, keys, rounds] = &args[..] else {
        return Err("usage: rust_retrieve CONFIG KEYS ROUNDS".into());
    };
    let rounds: usize = rounds.parse()?;
    let opts = OpenOptions {
        config: ConfigSource::File(config.into()),
        ..OpenOptions::default()
    };
    let store = opts.field_store()?;
    let keys: Vec<Key> = std::fs::read_to_string(keys)?
        .lines()
        .filter(|l| !l.is_empty())
        .map(Key::parse)
        .collect::<Result<_, _>>()?;
    let requests: Vec<_> = keys.iter().map(single_key_request).collect();
    // Steady state, as the Python side: every field touched once before timing (a fresh
    // mapping of the pool faults its pages in on first use).
    for key in &keys {
        std::hint::black_box(store.retrieve_lent(key).ok_or("this store cannot lend")??);
    }
    let (mut best_copy, mut best_lent, mut best_lent_copy) = (f64::MAX, f64::MAX, f64::MAX);
    let mut total = 0u64;
    for _ in 0..rounds {
        let t = Instant::now();
        total = 0;
        for req in &requests {
            let mut out = Vec::new();
            let r = store.retrieve(req, &mut |_, d, _| {
                out.extend_from_slice(d);
                Ok(())
            })?;
            if r.found != 1 {
                return Err(format!("{req}: {} fields", r.found).into());
            }
            total += std::hint::black_box(out).len() as u64;
        }
        best_copy = best_copy.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for key in &keys {
            let lent = store
                .retrieve_lent(key)
                .ok_or("this store cannot lend")??
                .ok_or_else(|| format!("{key}: missing"))?;
            std::hint::black_box(lent.1.len());
        }
        best_lent = best_lent.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for key in &keys {
            let lent = store
                .retrieve_lent(key)
                .ok_or("this store cannot lend")??
                .ok_or_else(|| format!("{key}: missing"))?;
            std::hint::black_box(lent.1.to_vec());
        }
        best_lent_copy = best_lent_copy.min(t.elapsed().as_secs_f64());
    }
    println!(
        "{{\"fields\": {}, \"bytes\": {total}, \"copy_seconds\": {best_copy}, \"lent_seconds\": {best_lent}, \"lent_copy_seconds\": {best_lent_copy}}}",
        keys.len()
    );
    Ok(())
}
