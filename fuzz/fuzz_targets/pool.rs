//! Hostile pmem pools (issue 14): a real pool (a few committed fields, a wipe, free regions)
//! with fuzzed bytes written over one of its parts — the header (its checksum recomputed or
//! not), the commit slots, the process and free tables, or the heap (segment records, field
//! bytes) — is opened, listed, read, archived into and wiped.
//!
//! Property: nothing panics or faults; every failure is an error.
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use haar_core::request::Request;
use haar_store::conformance::{payload, reuse_key};
use haar_store::pmem::PmemOptions;
use haar_store::{Backend, PmemBackend, Store, StoreOptions};
use libfuzzer_sys::fuzz_target;

fn options() -> PmemOptions {
    PmemOptions {
        initial_size: 1 << 20,
        slots: 16,
        chunk: 64 << 10,
        reserve: 1 << 30,
        ..PmemOptions::default()
    }
}

/// The template pool's bytes and the directory the fuzzed copies go to.
fn template() -> &'static (Vec<u8>, PathBuf) {
    static T: OnceLock<(Vec<u8>, PathBuf)> = OnceLock::new();
    T.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        };
        let dir = PathBuf::from(base).join(format!("haar-fuzz-pool-{}", std::process::id()));
        // libFuzzer ends a run without unwinding: remove what runs that have ended left.
        for e in std::fs::read_dir(base).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("haar-fuzz-pool-")
                && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("template");
        let b = PmemBackend::open(&root, options()).expect("template pool");
        let mut s = Store::with_options(Arc::new(b), StoreOptions::default());
        for db in ["fz01", "fz02"] {
            for i in 0..6 {
                let k = reuse_key(db, i);
                s.archive(&k, &payload(&k, 0, 3000)).unwrap();
                s.flush().unwrap();
            }
        }
        s.wipe(&Request::parse("expver=fz01").unwrap(), true)
            .unwrap();
        drop(s);
        let bytes = std::fs::read(root.join("haar.pool")).expect("template bytes");
        (bytes, dir)
    })
}

/// Header CRC as the pool computes it (version 3: also over bytes 80..112).
fn fix_crc(h: &mut [u8]) {
    let mut b = Vec::new();
    b.extend_from_slice(&h[0..16]);
    b.extend_from_slice(&h[24..32]);
    b.extend_from_slice(&h[40..48]);
    if u32::from_le_bytes(h[8..12].try_into().unwrap()) >= 3 {
        b.extend_from_slice(&h[80..112]);
    }
    let crc = crc32c::crc32c(&b);
    h[56..60].copy_from_slice(&crc.to_le_bytes());
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (bytes, dir) = template();
    let mut pool = bytes.clone();
    let word = |o: usize| u64::from_le_bytes(pool[o..o + 8].try_into().unwrap()) as usize;
    // Where the patch goes: header, slots, tables, or the heap past the tables.
    let at = match data[0] % 4 {
        0 => 0,
        1 => 4096,
        2 => word(80),
        _ => word(96) + 16384 * 32 + usize::from(data[1]) * 64,
    };
    let patch = &data[2..];
    let end = (at + patch.len()).min(pool.len());
    if at < end {
        pool[at..end].copy_from_slice(&patch[..end - at]);
    }
    if data[0] % 4 == 0 && data[1] & 1 == 1 && pool.len() >= 128 {
        fix_crc(&mut pool[..128]);
    }
    let root = dir.join("case");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    // The catalogue directories the template's pool had (its databases).
    let _ = std::process::Command::new("cp")
        .args([
            "-r",
            &dir.join("template/catalogue").to_string_lossy(),
            &root.to_string_lossy(),
        ])
        .status();
    std::fs::write(root.join("haar.pool"), &pool).unwrap();
    let Ok(b) = PmemBackend::open(&root, options()) else {
        return;
    };
    let _ = b.info();
    let b: Arc<dyn Backend> = Arc::new(b);
    let mut s = Store::with_options(b, StoreOptions::default());
    if let Ok(fields) = s.list(&Request::default()) {
        for f in fields.iter().take(16) {
            let _ = s.retrieve_lent(&f.key());
        }
    }
    let k = reuse_key("fz03", 0);
    if s.archive(&k, &payload(&k, 0, 3000)).is_ok() {
        let _ = s.flush();
    }
    let _ = s.wipe(&Request::parse("expver=fz02").unwrap(), true);
    let _ = s.purge(&Request::default(), true);
    let _ = s.stats(&Request::default());
});
