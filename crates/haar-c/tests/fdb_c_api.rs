//! haar's `libfdb5.so` against an independent program written only from FDB5 5.25's header
//! (`tests/c/fdb_c_all.c`): it calls every function of `fdb_c.h` and checks results and error
//! paths (NULL and freed objects, bad keys, missing fields, bad configurations, a dead
//! server), compiled with `-Wall -Wextra -Werror` against FDB5's own header, with the store
//! opened from FDB5's configuration variables (`FDB5_CONFIG_FILE`, `HAAR_CONFIG` unset).

#![cfg(not(feature = "fdb5-5_10"))]

mod fdb_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use fdb_common::*;

/// Three GRIB messages of one field at levelist 1000, 850 and 500 (ecCodes' sample).
fn grib_file(dir: &Path) -> PathBuf {
    let sample = Path::new("/usr/share/eccodes/samples/reduced_gg_pl_32_grib2.tmpl");
    assert!(
        sample.is_file(),
        "{} missing: install libeccodes-data",
        sample.display()
    );
    let mut all = Vec::new();
    for level in ["1000", "850", "500"] {
        let out = dir.join(format!("l{level}.grib"));
        let o = Command::new("grib_set")
            .args(["-s", &format!("level={level}")])
            .arg(sample)
            .arg(&out)
            .output()
            .expect("grib_set runs (install libeccodes-tools)");
        assert!(
            o.status.success(),
            "grib_set: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        all.extend(std::fs::read(&out).unwrap());
    }
    let path = dir.join("three.grib");
    std::fs::write(&path, all).unwrap();
    path
}

/// A port on 127.0.0.1 that nothing listens on (bound, then released).
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The functions `fdb_c.h` declares.
fn header_functions(header: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(header).unwrap();
    text.lines()
        .filter(|l| l.starts_with("int fdb_") || l.starts_with("const char* fdb_"))
        .map(|l| {
            let start = l.find("fdb_").unwrap();
            let end = l[start..].find('(').unwrap() + start;
            l[start..end].to_string()
        })
        .collect()
}

#[test]
fn an_independent_program_calls_every_function_and_every_check_passes() {
    let include = match wheel() {
        Some(w) => w.include,
        None => include_dir(),
    };
    let header = include.join("fdb5/api/fdb_c.h");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fdb_c_all.c");
    let functions = header_functions(&header);
    assert_eq!(
        functions.len(),
        47,
        "fdb_c.h of FDB5 5.25 declares 47 functions"
    );
    let program = std::fs::read_to_string(&src).unwrap();
    for f in &functions {
        assert!(
            program.contains(&format!("{f}(")),
            "fdb_c_all.c never calls {f}"
        );
    }

    let dir = scratch();
    let lib = haar_libfdb5(dir.path());
    let bin = dir.path().join("fdb_c_all");
    cc(&src, &bin, &include, &lib, None);

    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("db")).unwrap();
    let config = root.join("fdb5-config.yaml");
    std::fs::write(
        &config,
        format!(
            "---\ntype: local\nengine: toc\nspaces:\n  - handler: Default\n    roots:\n      - path: {}/db\n",
            root.display()
        ),
    )
    .unwrap();
    let grib = grib_file(dir.path());
    let port = dead_port().to_string();
    let o = run(
        &bin,
        &[root.to_str().unwrap(), grib.to_str().unwrap(), &port],
        lib.to_str().unwrap(),
        &[("FDB5_CONFIG_FILE", config.to_str().unwrap())],
    );
    let out = ok(&o, "fdb_c_all");
    assert!(out.contains(", 0 failed"), "{out}");

    // What the program archived through FDB5's configuration is a haar store under that
    // root, read here with the library rather than the C API.
    let store = haar::OpenOptions {
        config: haar::ConfigSource::File(config),
        ..haar::OpenOptions::default()
    }
    .field_store()
    .unwrap();
    let fields = store.list(&haar_core::Request::default()).unwrap();
    assert_eq!(fields.len(), 3, "{fields:?}");
}
