//! The floor under a verified zero-copy read of a field from a file mapping, measured on a
//! real file (a pool, or any file of the fields' size): the limit `bench/hammer_read.sh`
//! prints beside haar's and FDB5's reads in the same run.
//!
//! `cargo run --release -p haar-persist --example map_floor -- FILE FIELD_BYTES [COUNT]`
//!
//! For COUNT consecutive field-sized ranges of FILE (default: as many as fit, at most 1,000),
//! each in a mapping made afresh for the pass (so every page is faulted in, as in a new reader
//! process), p50 in µs of:
//! * `touch`: one byte read per 4 KiB page — the page-fault floor of a zero-copy read;
//! * `crc`: `haar_persist::crc32c` over the range — a verified zero-copy read's floor;
//! * `crc_copy`: the same, then a copy of the range into one reused buffer — the floor of a
//!   verified read into the caller's memory from a mapping (FDB5's `fdb_datareader_read`);
//! * `pread`: `pread(2)` of the range into one reused buffer — the kernel-copy read a file store
//!   (FDB5) does, without its own lookup;
//! * `pread+crc`: the same, then the checksum over the buffer.
//!
//! Prints one JSON object.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::time::Instant;

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn map(f: &File, len: usize) -> *const u8 {
    // SAFETY: a shared read-only mapping of an open file; unmapped by the caller.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p.cast()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, size, rest @ ..] = args.as_slice() else {
        eprintln!("usage: map_floor FILE FIELD_BYTES [COUNT]");
        std::process::exit(2);
    };
    let size: usize = size.parse().expect("FIELD_BYTES: a number");
    let f = File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let len = f.metadata().expect("stat").len() as usize;
    let fit = len / size;
    let count: usize = rest
        .first()
        .map(|c| c.parse().expect("COUNT: a number"))
        .unwrap_or(fit.min(1000))
        .min(fit);
    assert!(count > 0, "{path} holds no field of {size} bytes");
    let span = count * size;
    let pass = |what: &dyn Fn(&[u8]) -> u64| -> Vec<f64> {
        let p = map(&f, span);
        let mut lat = Vec::with_capacity(count);
        let mut sink = 0u64;
        for i in 0..count {
            // SAFETY: within the mapping made above, alive until the munmap below.
            let field = unsafe { std::slice::from_raw_parts(p.add(i * size), size) };
            let t = Instant::now();
            sink = sink.wrapping_add(what(field));
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        std::hint::black_box(sink);
        // SAFETY: the mapping made above, no slice of it outlives this point.
        unsafe { libc::munmap(p as *mut libc::c_void, span) };
        lat
    };
    let touch = pass(&|b| b.iter().step_by(4096).map(|&x| u64::from(x)).sum());
    let crc = pass(&|b| u64::from(haar_persist::crc32c(b)));
    let copy_to = std::cell::RefCell::new(vec![0u8; size]);
    let crc_copy = pass(&|b| {
        let c = haar_persist::crc32c(b);
        copy_to.borrow_mut().copy_from_slice(b);
        u64::from(c)
    });
    let mut buf = vec![0u8; size];
    let mut pread = Vec::with_capacity(count);
    let mut pread_crc = Vec::with_capacity(count);
    for (i, with_crc) in (0..2 * count).map(|j| (j % count, j >= count)) {
        let t = Instant::now();
        f.read_exact_at(&mut buf, (i * size) as u64).expect("pread");
        if with_crc {
            std::hint::black_box(haar_persist::crc32c(&buf));
            pread_crc.push(t.elapsed().as_secs_f64() * 1e6);
        } else {
            std::hint::black_box(&buf);
            pread.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    println!(
        "{{\"file\": {path:?}, \"field_bytes\": {size}, \"fields\": {count}, \
         \"touch_p50_us\": {:.2}, \"crc_p50_us\": {:.2}, \"crc_copy_p50_us\": {:.2}, \
         \"pread_p50_us\": {:.2}, \"pread_crc_p50_us\": {:.2}}}",
        p50(touch),
        p50(crc),
        p50(crc_copy),
        p50(pread),
        p50(pread_crc)
    );
}
