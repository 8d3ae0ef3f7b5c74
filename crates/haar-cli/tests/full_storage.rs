//! A full file system is a state haar leaves cleanly (issue 27): `wipe` and `purge` work when
//! the file system holding the store is at 100%, on both backends, on a real small tmpfs,
//! and lose nothing that is kept (design §4.6, §4.7).

#[path = "common/small_fs.rs"]
mod small_fs;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

use small_fs::SmallFs;

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn text(o: &Output) -> String {
    format!(
        "exit {}\nstdout: {}\nstderr: {}",
        code(o),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Bytes the file system at `p` has free, as `df` reports them.
fn available(p: &Path) -> u64 {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    s.f_bavail * s.f_frsize
}

/// Writes zeros into `path` until the file system refuses: it is then at 100%.
fn fill_to_the_brim(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let page = vec![0u8; 4096];
    loop {
        match f.write_all(&page) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    // The last partial write may have taken a page's part; a byte at a time to the end.
    while f.write_all(&[0]).is_ok() {}
    let _ = f.sync_all();
}

fn key(expver: &str, step: u32) -> String {
    format!(
        "class=od,expver={expver},stream=oper,date=20260901,time=12,domain=g,type=fc,levtype=sfc,step={step},param=167"
    )
}

const DB: &str = "class=od,expver={},stream=oper,date=20260901,time=12,domain=g";

fn db(expver: &str) -> String {
    DB.replace("{}", expver)
}

#[test]
fn wipe_and_purge_work_on_a_file_system_at_100_percent() {
    for (backend, size) in [("posix", "24m"), ("pmem", "48m")] {
        let Some(fs) = SmallFs::mount(size) else {
            return;
        };
        let root = fs.path().join("store");
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("haar.yaml");
        std::fs::write(
            &config,
            format!(
                "backend: {backend}\nroots: [{}]\npool_size: 20971520\npool_chunk: 1048576\n",
                root.display()
            ),
        )
        .unwrap();
        let haar = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_haar"))
                .arg("--config")
                .arg(&config)
                .args(args)
                .env_remove("HAAR_CONFIG")
                .output()
                .expect("run haar")
        };
        let ok = |args: &[&str]| {
            let o = haar(args);
            assert_eq!(code(&o), 0, "{backend}: haar {args:?}: {}", text(&o));
            o
        };
        let body = |step: u32, len: usize| -> Vec<u8> {
            (0..len).map(|i| (i as u32 * 7 + step) as u8).collect()
        };
        let archive = |expver: &str, step: u32, bytes: &[u8]| {
            let file = tmp.path().join("field.bin");
            std::fs::write(&file, bytes).unwrap();
            haar(&[
                "archive",
                "--key",
                &key(expver, step),
                file.to_str().unwrap(),
            ])
        };
        // Database 0001: 63 small flushes, so that its posix `toc` (64-byte header and
        // records) ends exactly at a page: one more record needs a page the file system has
        // not got (what the old wipe's record needed).
        for step in 0..63 {
            let o = archive("0001", step, &body(step, 100));
            assert_eq!(code(&o), 0, "{backend}: {}", text(&o));
        }
        // Database 0002: fields of 1 MiB until the file system is full.
        let mut stored = Vec::new();
        loop {
            let step = stored.len() as u32;
            let o = archive("0002", step, &body(step, 1 << 20));
            if code(&o) != 0 {
                assert_eq!(code(&o), 3, "{backend}: {}", text(&o));
                break;
            }
            stored.push(step);
            assert!(stored.len() < 100, "{backend}: {size} never filled");
        }
        assert!(stored.len() >= 10, "{backend}: full after {stored:?}");
        // Then to 100%: what the failed archive left, and (pmem) the pool's own room above
        // its heap top, taken by the smallest fields until even they are refused.
        fill_to_the_brim(&fs.path().join("filler"));
        if backend == "pmem" {
            // Halving sizes down to one byte: the room left is then under one small field
            // and its commit record (a few hundred bytes).
            let mut n = 0;
            for shift in (0..20).rev() {
                while code(&archive("0003", n, &vec![7; 1 << shift])) == 0 {
                    n += 1;
                    assert!(n < 1000, "pmem: the pool never filled");
                }
            }
        }
        assert_eq!(available(fs.path()), 0, "{backend}: not full");
        let pool = root.join("haar.pool");
        let pool_len = || std::fs::metadata(&pool).map(|m| m.len()).unwrap_or(0);
        let pool_before = pool_len();

        // A partial wipe: tombstones (a segment) for 3 fields of 0002.
        let o = ok(&["wipe", &format!("{},step=0/1/2", db("0002")), "--doit"]);
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("wiped 3 field(s)"),
            "{backend}: {}",
            text(&o)
        );
        // A purge of 0002 drops them and (posix) gives their space back.
        let before = available(fs.path());
        let o = ok(&["purge", &db("0002"), "--doit"]);
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("dropped 3 masked or wiped field(s)"),
            "{backend}: {}",
            text(&o)
        );
        if backend == "posix" {
            // Freed: the 3 MiB, of which the reserve (given back to the wipe) is taken again.
            let reserve = std::fs::metadata(root.join(".haar-reserve")).map_or(0, |m| m.len());
            assert_eq!(
                reserve,
                2 << 20,
                "{backend}: the reserve is not taken again"
            );
            assert!(
                available(fs.path()) + reserve >= before + (3 << 20),
                "{backend}: the purge freed {} bytes",
                available(fs.path()) + reserve - before
            );
        }
        // Fill again (posix), then a whole wipe of 0001, whose toc has no room for a record.
        fill_to_the_brim(&fs.path().join("filler2"));
        let o = ok(&["wipe", &db("0001"), "--doit"]);
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("wiped 63 field(s)"),
            "{backend}: {}",
            text(&o)
        );
        if backend == "pmem" {
            // The pool grew by at most the 1 MiB step the reserve holds (design §5.4).
            assert!(
                pool_len() <= pool_before + (1 << 20),
                "pmem: the pool grew from {pool_before} to {}",
                pool_len()
            );
        }
        // What is kept is intact; what was wiped is gone.
        let out = tmp.path().join("out.bin");
        for &step in &stored {
            let o = haar(&["retrieve", &key("0002", step), "-o", out.to_str().unwrap()]);
            if step <= 2 {
                assert_eq!(code(&o), 2, "{backend}: wiped step {step}: {}", text(&o));
            } else {
                assert_eq!(code(&o), 0, "{backend}: step {step}: {}", text(&o));
                assert!(
                    std::fs::read(&out).unwrap() == body(step, 1 << 20),
                    "{backend}: step {step} differs"
                );
            }
        }
        let o = haar(&["list", &db("0001")]);
        assert!(
            String::from_utf8_lossy(&o.stdout).trim().is_empty(),
            "{backend}: 0001 still listed: {}",
            text(&o)
        );
        // Once space is freed the store archives again.
        std::fs::remove_file(fs.path().join("filler")).unwrap();
        std::fs::remove_file(fs.path().join("filler2")).unwrap();
        let o = archive("0004", 0, &body(0, 1 << 20));
        assert_eq!(code(&o), 0, "{backend}: {}", text(&o));
        // No wiped database's directory is left behind (posix).
        let graves: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".wiped-"))
            .collect();
        assert!(graves.is_empty(), "{backend}: {graves:?}");
    }
}
