//! Many writer processes and many reader processes on one node at once (no global lock on
//! the hot path): readers check every visible field byte for byte while writers flush, see
//! batches appear as prefixes, never partly, and never see one disappear.

use std::process::{Command, Stdio};

fn run(kind: &str) {
    let base = if kind == "pmem" && std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let root = base.path().join("store");
    let (writers, batches, per, size) = (3u32, 30u32, 4u32, 8192usize);
    let exe = env!("CARGO_BIN_EXE_haar-torture");
    // One writer first, so the database exists before readers open it.
    let mut procs = Vec::new();
    for w in 0..writers {
        procs.push(
            Command::new(exe)
                .args([
                    kind,
                    root.to_str().unwrap(),
                    &w.to_string(),
                    &batches.to_string(),
                    &per.to_string(),
                    &size.to_string(),
                ])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        if w == 0 {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    }
    let readers: Vec<_> = (0..2)
        .map(|_| {
            Command::new(exe)
                .args([
                    "read",
                    kind,
                    root.to_str().unwrap(),
                    &writers.to_string(),
                    &batches.to_string(),
                    &per.to_string(),
                    &size.to_string(),
                    "120",
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut p in procs {
        assert!(p.wait().unwrap().success(), "writer failed");
    }
    for r in readers {
        let out = r.wait_with_output().unwrap();
        assert!(out.status.success(), "reader failed (see its panic above)");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut it = text.split_whitespace();
        assert_eq!(it.next(), Some("checks"), "{text}");
        let checks: u64 = it.next().unwrap().parse().unwrap();
        it.next();
        let visible: u32 = it.next().unwrap().parse().unwrap();
        assert!(checks > 100, "reader made only {checks} checks");
        assert_eq!(
            visible,
            writers * batches,
            "reader did not end up seeing every batch"
        );
    }
}

#[test]
fn three_writers_two_readers_posix() {
    run("posix");
}

#[test]
fn three_writers_two_readers_pmem() {
    run("pmem");
}
