//! What a verified copy of a lent field into a caller's buffer costs (FDB5's C API reader
//! contract: `fdb_datareader_read` fills the caller's memory), each way of doing it measured in
//! the same run against plain memcpy:
//!
//! * `memcpy`: the copy alone (the floor: an unverified read);
//! * `crc`: the CRC-32C pass alone;
//! * `crc,copy`: check the whole field, then copy it (two passes over the source);
//! * `fusedN`: block by block (N = 4, 16, 64, 256 KiB), check a block then copy it while it is
//!   still in L1/L2: one read of the source from DRAM instead of two.
//!
//! `cargo run --release -p haar-persist --example copy_verify -- [FIELD_BYTES] [DIR]`
//!
//! Fields are consecutive ranges of a 256 MiB populated file mapping in DIR (default /dev/shm),
//! each copied into one reused buffer, so the source comes from DRAM, as a retrieve's does.
//! Prints p50 µs per field of each, and one JSON object.

use std::os::unix::io::AsRawFd;
use std::time::Instant;

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Checks then copies `src` into `dst` block by block; the CRC-32C of `src`.
fn fused(dst: &mut [u8], src: &[u8], block: usize) -> u32 {
    let mut crc = 0;
    for (d, s) in dst.chunks_mut(block).zip(src.chunks(block)) {
        crc = haar_persist::crc32c_append(crc, s);
        d.copy_from_slice(s);
    }
    crc
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size: usize = args
        .first()
        .map(|s| s.parse().expect("FIELD_BYTES: a number"))
        .unwrap_or(800 << 10);
    let dir = args.get(1).map(String::as_str).unwrap_or("/dev/shm");
    let total = 256usize << 20;
    let file = tempfile::tempfile_in(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    file.set_len(total as u64).expect("set_len");
    // SAFETY: a fresh shared mapping of a file of `total` bytes, populated; never unmapped
    // while used.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED, "mmap");
    // SAFETY: the mapping above, `total` bytes.
    let src = unsafe { std::slice::from_raw_parts_mut(base.cast::<u8>(), total) };
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for c in src.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    let fields = total / size;
    let mut dst = vec![0u8; size];
    let want: Vec<u32> = (0..fields)
        .map(|i| haar_persist::crc32c(&src[i * size..(i + 1) * size]))
        .collect();
    type Way = fn(&mut [u8], &[u8]) -> u32;
    let ways: [(&str, Way); 7] = [
        ("memcpy", |d, s| {
            d.copy_from_slice(s);
            0
        }),
        ("crc", |_, s| haar_persist::crc32c(s)),
        ("crc,copy", |d, s| {
            let c = haar_persist::crc32c(s);
            d.copy_from_slice(s);
            c
        }),
        ("fused4k", |d, s| fused(d, s, 4 << 10)),
        ("fused16k", |d, s| fused(d, s, 16 << 10)),
        ("fused64k", |d, s| fused(d, s, 64 << 10)),
        ("fused256k", |d, s| fused(d, s, 256 << 10)),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    for round in 0..5 {
        for (w, (name, f)) in ways.iter().enumerate() {
            for i in 0..fields {
                let s = &src[i * size..(i + 1) * size];
                let t = Instant::now();
                let c = std::hint::black_box(f(&mut dst, s));
                times[w].push(t.elapsed().as_secs_f64() * 1e6);
                if *name != "memcpy" {
                    assert_eq!(c, want[i], "{name}: wrong CRC-32C");
                }
                if *name != "crc" {
                    debug_assert_eq!(&dst[..], s);
                }
            }
            let _ = round;
        }
    }
    let mut json = format!("{{\"field_bytes\":{size},\"dir\":\"{dir}\"");
    let memcpy = p50(times[0].clone());
    for (w, (name, _)) in ways.iter().enumerate() {
        let p = p50(times[w].clone());
        println!(
            "{name:>9}: p50 {p:8.1} µs  {:6.2} GB/s  {:.2}× memcpy's time",
            size as f64 / p / 1e3,
            p / memcpy
        );
        json.push_str(&format!(",\"{name}_p50_us\":{p:.2}"));
    }
    println!("{json}}}");
}
