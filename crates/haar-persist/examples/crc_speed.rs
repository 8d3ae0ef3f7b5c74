//! CRC-32C implementations against memcpy, measured in the same run, and the archive copy
//! (non-temporal copy + CRC) fused against split.
//!
//! `cargo run --release -p haar-persist --example crc_speed -- [--runs N] [--bytes MIB]`
//!
//! **Table 1, the checksum alone**, at 64 B (a header), 256 B, 1, 2, 4 and 64 KiB, 800 KiB (a
//! typical field) and 8 MiB, from two places:
//!
//! * `cache`: the same buffer again and again (cache-resident up to the L2/L3 size);
//! * `shm`: a ring of distinct buffers (`--bytes`, 256 MiB by default: many times any L3) in a
//!   `/dev/shm` file written first (so resident in memory) and then mapped afresh with
//!   `MAP_POPULATE` (page tables filled at map time, not timed): every buffer comes from DRAM,
//!   as a field lent from a pool or read from the page cache does.
//!
//! Each is measured for `memcpy` (into one reused destination of the same size: the peer every
//! figure is a ratio to), the `crc32c` 0.6 crate (haar's checksum before), the `crc-fast` crate's
//! CRC-32/ISCSI entry (PCLMULQDQ folding fused with the `CRC32` instruction), `crc-fast`'s generic
//! kernel given the CRC-32C parameters (PCLMULQDQ folding alone), and `haar_persist::crc32c`
//! (one of the two `crc-fast` kernels, picked per process: the header names it). Methods are interleaved within each run so
//! host noise hits them alike; each figure is the best of `--runs` (default 7) passes of
//! `--bytes` bytes.
//!
//! **Table 2, the archive copy** at 256 B, 1, 4, 64 and 256 KiB and 800 KiB, streamed into a populated
//! `/dev/shm` mapping with non-temporal stores from one cache-resident source (`hot src`, a field
//! just produced) or from a different slice of a 256 MiB heap ring each time (`cold src`, from
//! DRAM): memcpy (the peer), `copy_nt` alone, the fused loop
//! (`copy_nt_crc32c`'s own kernel, pinned), `copy_nt` then `crc32c` 0.6 over the source, and
//! `copy_nt` then `haar_persist::crc32c` over the source, plus `copy_nt_crc32c` itself (which
//! picks one of the two per size).
//!
//! Prints both tables, then one JSON line with every figure and its ratio to memcpy.

use haar_persist::copy::copy_nt_crc32c_fused;
use haar_persist::{PersistMode, PoolMapping, copy_nt, copy_nt_crc32c, sfence};
use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Instant;

const SIZES: [usize; 8] = [
    64,
    256,
    1 << 10,
    2 << 10,
    4 << 10,
    64 << 10,
    800 << 10,
    8 << 20,
];
const COPY_SIZES: [usize; 6] = [256, 1 << 10, 4 << 10, 64 << 10, 256 << 10, 800 << 10];

/// One archive-copy method under test: copies `src` to `dst`, returns its CRC-32C (or 0).
type CopyOp<'a> = dyn Fn(*mut u8, &[u8]) -> u32 + 'a;

/// One checksum implementation under test.
struct Impl {
    name: &'static str,
    f: fn(&[u8]) -> u32,
}

const IMPLS: [Impl; 4] = [
    Impl {
        name: "crc32c-0.6",
        f: crc32c::crc32c,
    },
    Impl {
        name: "crc-fast-1.10",
        f: crc_fast_iscsi,
    },
    Impl {
        name: "crc-fast-1.10 fold",
        f: crc_fast_fold,
    },
    Impl {
        name: "haar_persist::crc32c",
        f: haar_persist::crc32c,
    },
];

/// `crc-fast`'s own CRC-32/ISCSI entry: PCLMULQDQ folding fused with three `CRC32` streams.
fn crc_fast_iscsi(b: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, b) as u32
}

/// `crc-fast`'s generic kernel given the CRC-32C parameters: PCLMULQDQ folding alone, no `CRC32`
/// instruction.
fn crc_fast_fold(b: &[u8]) -> u32 {
    static PARAMS: std::sync::OnceLock<crc_fast::CrcParams> = std::sync::OnceLock::new();
    let params = *PARAMS.get_or_init(|| {
        crc_fast::CrcParams::new(
            "CRC-32/ISCSI (generic)",
            32,
            0x1EDC_6F41,
            0xFFFF_FFFF,
            true,
            0xFFFF_FFFF,
            0xE306_9283,
        )
    });
    crc_fast::checksum_with_params(params, b) as u32
}

fn random(n: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A read-only, populated mapping of a `/dev/shm` file holding `data`; unmapped on drop.
struct ShmRing {
    ptr: *mut u8,
    len: usize,
}

impl ShmRing {
    fn new(data: &[u8]) -> std::io::Result<ShmRing> {
        use std::os::fd::AsRawFd;
        let path = format!("/dev/shm/haar-crc-speed-{}.bin", std::process::id());
        std::fs::write(&path, data)?;
        let file = std::fs::File::open(&path)?;
        let _ = std::fs::remove_file(&path);
        // SAFETY: a fresh shared read-only mapping of a whole file we opened; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                data.len(),
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ShmRing {
            ptr: ptr.cast(),
            len: data.len(),
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for ShmRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Best seconds of each op over `runs` interleaved passes.
fn best_of(runs: usize, ops: &mut [&mut dyn FnMut() -> f64]) -> Vec<f64> {
    let mut best = vec![f64::INFINITY; ops.len()];
    for op in ops.iter_mut() {
        op(); // warm-up: code, tables, page tables, caches
    }
    for _ in 0..runs {
        for (b, op) in best.iter_mut().zip(ops.iter_mut()) {
            *b = b.min(op());
        }
    }
    best
}

struct Row {
    table: &'static str,
    size: usize,
    mode: &'static str,
    peer: &'static str,
    peer_gbs: f64,
    figures: Vec<(&'static str, f64)>,
}

fn human(size: usize) -> String {
    if size >= 1 << 20 {
        format!("{} MiB", size >> 20)
    } else if size >= 1 << 10 {
        format!("{} KiB", size >> 10)
    } else {
        format!("{size} B")
    }
}

fn main() {
    let mut runs = 7usize;
    let mut ring_bytes = 256usize << 20;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().and_then(|v| v.parse::<usize>().ok());
        match a.as_str() {
            "--runs" => runs = value().expect("--runs N").max(1),
            "--bytes" => ring_bytes = value().expect("--bytes MIB") << 20,
            "-h" | "--help" => {
                println!("usage: crc_speed [--runs N (7)] [--bytes MIB per pass (256)]");
                return;
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let ring_bytes = ring_bytes.max(16 << 20);

    let data = random(ring_bytes);
    for imp in &IMPLS {
        for len in [0, 1, 63, 4096, 819_200] {
            assert_eq!(
                (imp.f)(&data[..len]),
                crc32c::crc32c(&data[..len]),
                "{}",
                imp.name
            );
        }
    }
    let shm = ShmRing::new(&data).expect("map a /dev/shm file");
    let mut rows = Vec::new();

    for &size in &SIZES {
        let mut dst = vec![0u8; size];
        let hot = &data[..size];
        let ring = shm.bytes();
        let count = ring_bytes / size;
        for mode in ["cache", "shm"] {
            let src = |i: usize| -> &[u8] {
                if mode == "cache" {
                    hot
                } else {
                    &ring[(i % count) * size..][..size]
                }
            };
            let mut memcpy = || {
                let t = Instant::now();
                for i in 0..count {
                    dst.copy_from_slice(black_box(src(i)));
                    black_box(&mut dst);
                }
                t.elapsed().as_secs_f64()
            };
            let mut crcs: Vec<Box<dyn FnMut() -> f64>> = IMPLS
                .iter()
                .map(|imp| {
                    let f = imp.f;
                    Box::new(move || {
                        let t = Instant::now();
                        let mut x = 0u32;
                        for i in 0..count {
                            x ^= f(black_box(src(i)));
                        }
                        black_box(x);
                        t.elapsed().as_secs_f64()
                    }) as Box<dyn FnMut() -> f64>
                })
                .collect();
            let mut ops: Vec<&mut dyn FnMut() -> f64> = vec![&mut memcpy];
            ops.extend(crcs.iter_mut().map(|b| &mut **b as &mut dyn FnMut() -> f64));
            let best = best_of(runs, &mut ops);
            drop(ops);
            drop(crcs);
            let gbs = |s: f64| (count * size) as f64 / s / 1e9;
            rows.push(Row {
                table: "crc",
                size,
                mode,
                peer: "memcpy",
                peer_gbs: gbs(best[0]),
                figures: IMPLS
                    .iter()
                    .zip(&best[1..])
                    .map(|(imp, &s)| (imp.name, gbs(s)))
                    .collect(),
            });
        }
    }

    // Table 2: the archive copy into a populated /dev/shm mapping, from a hot or a cold source.
    let path = std::path::PathBuf::from(format!(
        "/dev/shm/haar-crc-speed-pool-{}.pool",
        std::process::id()
    ));
    let pool = PoolMapping::open_with_mode(&path, ring_bytes, Some(PersistMode::Msync))
        .expect("map a /dev/shm pool");
    let _ = std::fs::remove_file(&path);
    pool.grow(ring_bytes).expect("grow");
    pool.populate(0, ring_bytes).expect("populate");
    let base = pool.base();
    for &size in &COPY_SIZES {
        let count = ring_bytes / size;
        for mode in ["hot src", "cold src"] {
            // `hot src`: one source, cache-resident (a field just produced); `cold src`: chunk `i`
            // copies its own slice of the ring in `data`, so every source comes from DRAM.
            let src = |i: usize| -> &[u8] {
                if mode == "hot src" {
                    &data[..size]
                } else {
                    &data[i * size..][..size]
                }
            };
            // SAFETY (every op): chunk `i` of the private pool mapping is written by this loop
            // only, and the sources live in a heap vector, so the ranges never overlap.
            let timed = |op: &CopyOp<'_>| {
                let t = Instant::now();
                let mut x = 0u32;
                for i in 0..count {
                    x ^= op(black_box(unsafe { base.add(i * size) }), black_box(src(i)));
                }
                sfence();
                black_box(x);
                t.elapsed().as_secs_f64()
            };
            let memcpy = |d: *mut u8, s: &[u8]| {
                unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), d, s.len()) };
                0
            };
            let nt_only = |d: *mut u8, s: &[u8]| {
                unsafe { copy_nt(d, s) };
                0
            };
            let fused_loop = |d: *mut u8, s: &[u8]| unsafe { copy_nt_crc32c_fused(d, s) };
            let split_old = |d: *mut u8, s: &[u8]| {
                unsafe { copy_nt(d, s) };
                crc32c::crc32c(s)
            };
            let split_new = |d: *mut u8, s: &[u8]| {
                unsafe { copy_nt(d, s) };
                haar_persist::crc32c(s)
            };
            let chosen = |d: *mut u8, s: &[u8]| unsafe { copy_nt_crc32c(d, s) };
            // The peer for a copy into memory: memcpy of the same bytes to the same mapping.
            let ops: [(&'static str, &CopyOp<'_>); 6] = [
                ("memcpy", &memcpy),
                ("copy_nt", &nt_only),
                ("fused copy_nt+crc32c loop", &fused_loop),
                ("copy_nt, then crc32c-0.6", &split_old),
                ("copy_nt, then haar_persist::crc32c", &split_new),
                ("copy_nt_crc32c (as shipped)", &chosen),
            ];
            // Same destination, same result: the two must agree before being timed.
            // SAFETY: as above.
            unsafe {
                assert_eq!(
                    copy_nt_crc32c_fused(base, src(0)),
                    haar_persist::crc32c(src(0))
                );
            }
            let mut best = vec![f64::INFINITY; ops.len()];
            for r in 0..=runs {
                for (b, (_, op)) in best.iter_mut().zip(ops.iter()) {
                    let s = timed(op);
                    if r > 0 {
                        *b = b.min(s);
                    }
                }
            }
            let gbs = |s: f64| (count * size) as f64 / s / 1e9;
            rows.push(Row {
                table: "archive-copy",
                size,
                mode,
                peer: "memcpy",
                peer_gbs: gbs(best[0]),
                figures: ops[1..]
                    .iter()
                    .zip(&best[1..])
                    .map(|((name, _), &s)| (*name, gbs(s)))
                    .collect(),
            });
        }
    }
    drop(pool);

    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    let kernel = format!("{:?}", haar_persist::crc::kernel());
    println!(
        "host: {model}; haar_persist::crc32c kernel: {kernel}; best of {runs} passes of {} MiB; \
         GB/s (ratio to memcpy in the same row)",
        ring_bytes >> 20
    );
    for table in ["crc", "archive-copy"] {
        let first = rows.iter().find(|r| r.table == table).expect("rows");
        let mut head = format!("\n{:<8} {:<9} {:>8}", "size", "from", first.peer);
        for (name, _) in &first.figures {
            let _ = write!(head, " | {:>22}", name.chars().take(22).collect::<String>());
        }
        println!("{head}");
        for r in rows.iter().filter(|r| r.table == table) {
            let mut line = format!("{:<8} {:<9} {:>8.2}", human(r.size), r.mode, r.peer_gbs);
            for (_, g) in &r.figures {
                let _ = write!(line, " | {:>12.2} ({:>5.2}x)", g, g / r.peer_gbs);
            }
            println!("{line}");
        }
    }
    let mut json = format!(
        "{{\"host\":\"{model}\",\"kernel\":\"{kernel}\",\"runs\":{runs},\"pass_bytes\":{ring_bytes},\"rows\":["
    );
    for (k, r) in rows.iter().enumerate() {
        let _ = write!(
            json,
            "{}{{\"table\":\"{}\",\"size\":{},\"from\":\"{}\",\"peer\":\"{}\",\"peer_gbs\":{:.3},\"results\":{{",
            if k > 0 { "," } else { "" },
            r.table,
            r.size,
            r.mode,
            r.peer,
            r.peer_gbs
        );
        for (j, (name, g)) in r.figures.iter().enumerate() {
            let _ = write!(
                json,
                "{}\"{name}\":{{\"gbs\":{g:.3},\"ratio\":{:.3}}}",
                if j > 0 { "," } else { "" },
                g / r.peer_gbs
            );
        }
        json.push_str("}}");
    }
    json.push_str("]}");
    println!("\n{json}");
}
