//! A program written for FDB5 runs unchanged on haar: `bench/fdb5_peer.c`, compiled against
//! FDB5 5.25's own header, runs the same workload linked once against FDB5 5.25's
//! `libfdb5.so` (the `fdb5lib` wheel) and once against haar's, each on a directory set up the
//! FDB5 way (`FDB5_CONFIG_FILE` naming a local TOC configuration, `HAAR_CONFIG` unset); the
//! bytes read back and the listings (keys, level by level, and lengths) must be identical.
//! Skipped with a message when the wheel is absent, unless `HAAR_REQUIRE_FDB5_WHEEL=1`.

#![cfg(not(feature = "fdb5-5_10"))]

mod fdb_common;

use std::path::Path;

use fdb_common::*;

/// The `digest` field of the peer's one-line JSON result.
fn digest(json: &str) -> String {
    let at = json.find("\"digest\":\"").expect("read reports a digest") + 10;
    json[at..at + 16].to_string()
}

fn workload(bin: &Path, root: &Path, lib_path: &str, n: &str, size: &str) -> (String, Vec<String>) {
    let root = root.to_str().unwrap();
    let args = |mode| [mode, root, n, size, "100"];
    ok(&run(bin, &args("write"), lib_path, &[]), "write");
    let read = ok(&run(bin, &args("read"), lib_path, &[]), "read");
    let list = ok(&run(bin, &args("list"), lib_path, &[]), "list");
    let mut lines: Vec<String> = list.lines().map(str::to_string).collect();
    lines.sort();
    (digest(&read), lines)
}

#[test]
fn fdb5_peer_reads_and_lists_the_same_on_haar_as_on_fdb5() {
    let Some(w) = wheel() else { return };
    if !Path::new("/etc/fdb/schema").is_file() {
        assert!(
            std::env::var(REQUIRE_WHEEL).as_deref() != Ok("1"),
            "/etc/fdb/schema missing: install Debian's fdb5 package"
        );
        eprintln!(
            "SKIPPED: /etc/fdb/schema missing (Debian's fdb5 package), which the peer copies"
        );
        return;
    }
    let dir = scratch();
    let haar_lib = haar_libfdb5(dir.path());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/fdb5_peer.c");
    let on_fdb5 = dir.path().join("peer-fdb5");
    let on_haar = dir.path().join("peer-haar");
    cc(&src, &on_fdb5, &w.include, &w.lib, Some(&w.lib_path));
    cc(&src, &on_haar, &w.include, &haar_lib, None);
    let haar_path = haar_lib.to_str().unwrap();

    for size in ["65536", "4096"] {
        let (fdb5_digest, fdb5_list) = workload(
            &on_fdb5,
            &dir.path().join(format!("fdb5-{size}")),
            &w.lib_path,
            "300",
            size,
        );
        let haar_root = dir.path().join(format!("haar-{size}"));
        let (haar_digest, haar_list) = workload(&on_haar, &haar_root, haar_path, "300", size);
        assert_eq!(haar_digest, fdb5_digest, "bytes read differ at {size} B");
        assert_eq!(haar_list.len(), 300);
        assert_eq!(haar_list, fdb5_list, "listings differ at {size} B");

        // FDB5's configuration opened a haar store under FDB5's root with FDB5's schema:
        // read it back with the library, not through the C API.
        let opts = haar::OpenOptions {
            config: haar::ConfigSource::File(haar_root.join("fdb5-config.yaml")),
            ..haar::OpenOptions::default()
        };
        let store = opts.field_store().unwrap();
        assert!(
            store
                .describe()
                .contains(&haar_root.join("db").display().to_string()),
            "{}",
            store.describe()
        );
        let listed = store.list(&haar_core::Request::default()).unwrap();
        assert_eq!(listed.len(), 300);
    }
}

#[test]
fn the_checked_in_header_is_fdb5_5_25s() {
    let Some(w) = wheel() else { return };
    let theirs = std::fs::read(w.include.join("fdb5/api/fdb_c.h")).unwrap();
    let ours = std::fs::read(include_dir().join("fdb5/api/fdb_c.h")).unwrap();
    assert!(
        theirs == ours,
        "tests/c/include/fdb5/api/fdb_c.h differs from the wheel's"
    );
}
