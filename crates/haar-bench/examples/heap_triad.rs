//! Prints `haar_bench::bench::heap::triad`'s figures as JSON: the STREAM-shaped triad on the
//! DRAM heap and under `haar run --heap DIR` (default /dev/shm), same run.
//!
//! ```text
//! cargo build --release -p haar-heap-preload
//! cargo run --release -p haar-bench --example heap_triad [DIR] [ELEMENTS] [ROUNDS]
//! ```

use haar_bench::bench::heap::{HeapOptions, triad};

fn main() {
    let mut o = HeapOptions::default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(d) = args.first() {
        o.dir = d.into();
    }
    if let Some(n) = args.get(1) {
        o.elements = n.parse().expect("ELEMENTS is a number");
    }
    if let Some(r) = args.get(2) {
        o.rounds = r.parse().expect("ROUNDS is a number");
    }
    match triad(&o) {
        Ok(t) => println!("{}", serde_json::to_string_pretty(&t).expect("json")),
        Err(e) => {
            eprintln!("heap_triad: {e}");
            std::process::exit(1);
        }
    }
}
