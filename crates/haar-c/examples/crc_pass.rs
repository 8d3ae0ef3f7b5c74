//! The cost of one CRC-32C pass over each field, the check haar's stores make on every read
//! (`haar_persist::crc32c`, the checksum the stores use): `bench/fdbapi_bench.py` runs it
//! beside the file system's own limits so the retrieve figures can be read against what the
//! check alone costs.
//!
//! `cargo run --release -p haar-c --example crc_pass -- FIELDS SIZE` prints one JSON line:
//! `{"fields":N,"size":S,"seconds":T,"p50_us":U}`. The fields are distinct buffers in a ring
//! four times larger than a typical last-level cache (or all of them, if fewer), so each is
//! read from memory, as a field freshly read from a file or a pool is.

use std::time::Instant;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("usage: crc_pass FIELDS SIZE"))
        .collect();
    let [fields, size] = args[..] else {
        panic!("usage: crc_pass FIELDS SIZE");
    };
    let ring = ((256u64 << 20) / size).clamp(1, fields) as usize;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let buffers: Vec<Vec<u8>> = (0..ring)
        .map(|_| {
            (0..size)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        })
        .collect();
    let mut each = Vec::with_capacity(fields as usize);
    let mut sink = 0u32;
    let start = Instant::now();
    for i in 0..fields as usize {
        let t = Instant::now();
        sink ^= haar_persist::crc32c(&buffers[i % ring]);
        each.push(t.elapsed().as_secs_f64());
    }
    let seconds = start.elapsed().as_secs_f64();
    each.sort_by(f64::total_cmp);
    println!(
        "{{\"fields\":{fields},\"size\":{size},\"seconds\":{seconds},\"p50_us\":{},\"crc_xor\":{sink}}}",
        each[each.len() / 2] * 1e6
    );
}
