//! A/B of the archive copy: `copy_nt` then `haar_persist::crc32c` (two passes) against the
//! fused loop `copy_nt_crc32c_fused` (one), interleaved so host noise hits both alike. Prints
//! GB/s per field size. (`copy_nt_crc32c` picks one of the two by size; the full comparison,
//! with ratios to memcpy, is `haar-persist`'s `examples/crc_speed.rs`.)
use haar_persist::copy::copy_nt_crc32c_fused;
use haar_persist::{PersistMode, PoolMapping, copy_nt, crc32c, sfence};
use std::time::Instant;

fn main() {
    let path = std::path::Path::new("/dev/shm/haar-fused-crc.pool");
    let bytes = 256usize << 20;
    let pool = PoolMapping::open_with_mode(path, bytes, Some(PersistMode::Msync)).unwrap();
    let _ = std::fs::remove_file(path);
    pool.grow(bytes).unwrap();
    pool.populate(0, bytes).unwrap();
    {
        // CRC-32C alone: cache-resident (the same 64 KiB again and again) against a pass over
        // the whole populated mapping (DRAM), i.e. compute bound against memory bound.
        let hot: Vec<u8> = (0..64usize << 10).map(|i| (i * 7) as u8).collect();
        let all = pool.slice(0, bytes).unwrap();
        let (mut h, mut c) = (f64::INFINITY, f64::INFINITY);
        let mut sink = 0u32;
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..bytes / hot.len() {
                sink ^= crc32c(std::hint::black_box(&hot));
            }
            h = h.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            for chunk in all.chunks(800 << 10) {
                sink ^= crc32c(chunk);
            }
            c = c.min(t.elapsed().as_secs_f64());
        }
        println!(
            "haar_persist::crc32c: cache-resident {:.2} GB/s, from DRAM {:.2} GB/s [{sink}]",
            bytes as f64 / h / 1e9,
            bytes as f64 / c / 1e9
        );
    }
    for size in [64usize << 10, 800 << 10] {
        let src: Vec<u8> = (0..size).map(|i| (i * 131 + 7) as u8).collect();
        let n = bytes / size;
        let (mut two, mut one, mut copy) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
        let mut sink = 0u32;
        for _ in 0..7 {
            let t = Instant::now();
            for i in 0..n {
                // SAFETY: each chunk of the private mapping is written by this loop only.
                unsafe { copy_nt(pool.base().add(i * size), &src) };
                sink ^= crc32c(&src);
            }
            sfence();
            two = two.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            for i in 0..n {
                // SAFETY: as above.
                sink ^= unsafe { copy_nt_crc32c_fused(pool.base().add(i * size), &src) };
            }
            sfence();
            one = one.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            for i in 0..n {
                // SAFETY: as above.
                unsafe { copy_nt(pool.base().add(i * size), &src) };
            }
            sfence();
            copy = copy.min(t.elapsed().as_secs_f64());
        }
        let gbs = |s: f64| (n * size) as f64 / s / 1e9;
        println!(
            "{} KiB: copy_nt + crc32c {:.2} GB/s, fused {:.2} GB/s ({:.2}x), copy_nt alone {:.2} GB/s [{sink}]",
            size >> 10,
            gbs(two),
            gbs(one),
            two / one,
            gbs(copy)
        );
    }
}
