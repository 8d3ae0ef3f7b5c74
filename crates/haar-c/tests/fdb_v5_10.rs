//! The FDB5 5.10 build option (cargo feature `fdb5-5_10`): a program written for Debian 12's
//! FDB5 5.10 C API (`tests/c/fdb_c_510.c`, compiled against Debian's `libfdb5-dev` header)
//! prints the same listing linked against haar's library as against Debian's `libfdb5.so`.
//! Run with `cargo test --release -p haar-c --features fdb5-5_10 --test fdb_v5_10`; skipped
//! with a message where Debian's FDB5 is not installed (unless `HAAR_REQUIRE_FDB5_WHEEL=1`).

#![cfg(feature = "fdb5-5_10")]

mod fdb_common;

use std::path::Path;

use fdb_common::*;

#[test]
fn a_5_10_program_lists_the_same_on_haar_as_on_debians_fdb5() {
    let include = Path::new("/usr/include/x86_64-linux-gnu");
    let debian_lib = Path::new("/usr/lib/x86_64-linux-gnu/libfdb5.so");
    if !include.join("fdb5/api/fdb_c.h").is_file()
        || !debian_lib.exists()
        || !Path::new("/etc/fdb/schema").is_file()
    {
        assert!(
            std::env::var(REQUIRE_WHEEL).as_deref() != Ok("1"),
            "Debian's FDB5 5.10 missing: apt-get install libfdb5-dev fdb5"
        );
        eprintln!("SKIPPED: Debian's FDB5 5.10 (libfdb5-dev, fdb5) is not installed");
        return;
    }
    let dir = scratch();
    let haar_lib = haar_libfdb5(dir.path());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fdb_c_510.c");
    let on_debian = dir.path().join("on-debian");
    let on_haar = dir.path().join("on-haar");
    cc(
        &src,
        &on_debian,
        include,
        debian_lib.parent().unwrap(),
        None,
    );
    cc(&src, &on_haar, include, &haar_lib, None);

    let mut listings = Vec::new();
    for (name, bin, lib_path) in [
        ("debian", &on_debian, String::new()),
        ("haar", &on_haar, haar_lib.display().to_string()),
    ] {
        let root = dir.path().join(name);
        std::fs::create_dir_all(root.join("db")).unwrap();
        std::fs::copy("/etc/fdb/schema", root.join("schema")).unwrap();
        std::fs::write(root.join("dbnames"), "").unwrap();
        let config = root.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "---\ntype: local\nengine: toc\nschema: {0}/schema\nspaces:\n  - handler: Default\n    roots:\n      - path: {0}/db\n",
                root.display()
            ),
        )
        .unwrap();
        let out = ok(
            &run(
                bin,
                &[],
                &lib_path,
                &[
                    ("FDB5_CONFIG_FILE", config.to_str().unwrap()),
                    ("FDB_DBNAMES_FILE", root.join("dbnames").to_str().unwrap()),
                ],
            ),
            name,
        );
        let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
        lines.sort();
        listings.push(lines);
    }
    // Three keys, the first archived twice: 5.10 lists the masked copy too.
    assert_eq!(listings[0].len(), 4, "{:?}", listings[0]);
    assert_eq!(
        listings[1], listings[0],
        "haar's 5.10 listing differs from Debian's FDB5"
    );
}
