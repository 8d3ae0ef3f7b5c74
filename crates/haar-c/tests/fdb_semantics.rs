//! FDB5's C API semantics, checked on both libraries: `tests/c/fdb_semantics.c` (haar's own
//! test, shaped like the cases of FDB5's C API test: archive and list, list depth, retrieve,
//! expand; plus a retrieve naming absent fields, list URIs that are file paths, a re-archived
//! field and a wipe of an unclean database), compiled against FDB5 5.25's header, runs once
//! linked against FDB5 5.25's `libfdb5.so` (the `fdb5lib` wheel) and once against haar's, each
//! on a fresh root of a local TOC configuration whose schema types `param` as FDB5's
//! `ParamID`. Every check must pass on both. Skipped with a message when the wheel is absent,
//! unless `HAAR_REQUIRE_FDB5_WHEEL=1`.

#![cfg(not(feature = "fdb5-5_10"))]

mod fdb_common;

use std::path::Path;
use std::process::Command;

use fdb_common::*;

/// A schema in FDB5's rule language with FDB5's test-schema type for `param`.
const SCHEMA: &str = "param: ParamID;\nstep: Step;\ndate: Date;\nlevelist: Double;\n\
expver: Expver;\ntime: Time;\n\
[ class, expver, stream, date, time, domain?g\n  [ type, levtype\n    [ step, levelist?, param ]]]\n";

/// The three GRIB fields FDB5's and pyfdb's tests read (vo on pressure levels, class rd),
/// made with ecCodes from its spherical-harmonics sample.
fn gribs(dir: &Path) {
    let sample = Path::new("/usr/share/eccodes/samples/sh_pl_grib1.tmpl");
    assert!(
        sample.is_file(),
        "{} missing: install libeccodes-data",
        sample.display()
    );
    for (name, expver, level) in [
        ("x138-300", "xxxx", "300"),
        ("x138-400", "xxxx", "400"),
        ("y138-400", "xxxy", "400"),
    ] {
        let o = Command::new("grib_set")
            .args(["-s", &format!("class=rd,stream=oper,type=an,expver={expver},date=20191110,time=0000,step=0,paramId=138,levtype=pl,level={level}")])
            .arg(sample)
            .arg(dir.join(format!("{name}.grib")))
            .output()
            .expect("grib_set runs (install libeccodes-tools)");
        assert!(
            o.status.success(),
            "grib_set: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Runs the program on a fresh root; returns its report.
fn run_on(bin: &Path, dir: &Path, name: &str, lib_path: &str) -> String {
    let root = dir.join(name);
    std::fs::create_dir_all(root.join("db")).unwrap();
    std::fs::write(root.join("schema"), SCHEMA).unwrap();
    let config = root.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "---\ntype: local\nengine: toc\nschema: {0}/schema\nspaces:\n  - handler: Default\n    roots:\n      - path: {0}/db\n",
            root.display()
        ),
    )
    .unwrap();
    let dbnames = dir.join("empty-dbnames");
    std::fs::write(&dbnames, "").unwrap();
    let o = run(
        bin,
        &[dir.to_str().unwrap()],
        lib_path,
        &[
            ("FDB5_CONFIG_FILE", config.to_str().unwrap()),
            ("FDB_DBNAMES_FILE", dbnames.to_str().unwrap()),
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    println!("on {name}:\n{out}");
    assert!(
        o.status.success() && out.contains(", 0 failed"),
        "fdb_semantics on {name} ({}):\n{out}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn fdb5s_c_api_semantics_hold_on_fdb5_and_on_haar() {
    let Some(w) = wheel() else { return };
    let dir = scratch();
    gribs(dir.path());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fdb_semantics.c");
    let on_fdb5 = dir.path().join("semantics-fdb5");
    let on_haar = dir.path().join("semantics-haar");
    let haar_lib = haar_libfdb5(dir.path());
    cc(&src, &on_fdb5, &w.include, &w.lib, Some(&w.lib_path));
    cc(&src, &on_haar, &w.include, &haar_lib, None);
    let fdb5 = run_on(&on_fdb5, dir.path(), "fdb5", &w.lib_path);
    let haar = run_on(&on_haar, dir.path(), "haar", haar_lib.to_str().unwrap());
    // The same checks ran on both.
    let cases = |s: &str| s.lines().filter(|l| l.starts_with("case ")).count();
    assert_eq!(cases(&fdb5), 7, "{fdb5}");
    assert_eq!(cases(&haar), cases(&fdb5));

    // haar's library on the root FDB5 wrote (its xxxy database is left): a listing says so,
    // naming the directory and `haar import-fdb5`, instead of listing nothing.
    let config = std::fs::read_to_string(dir.path().join("fdb5/config.yaml")).unwrap();
    let config = std::ffi::CString::new(config).unwrap();
    let mut fdb = std::ptr::null_mut();
    unsafe {
        use haar_c::fdb_api::handle::{fdb_delete_handle, fdb_new_handle_from_yaml};
        use haar_c::fdb_api::list::fdb_list;
        use haar_c::fdb_api::{FDB_ERROR_GENERAL_EXCEPTION, FDB_SUCCESS, fdb_error_string};
        assert_eq!(
            fdb_new_handle_from_yaml(&mut fdb, config.as_ptr(), std::ptr::null()),
            FDB_SUCCESS
        );
        let mut it = std::ptr::null_mut();
        assert_eq!(
            fdb_list(fdb, std::ptr::null(), &mut it, true, 3),
            FDB_ERROR_GENERAL_EXCEPTION
        );
        let m = std::ffi::CStr::from_ptr(fdb_error_string(FDB_ERROR_GENERAL_EXCEPTION))
            .to_string_lossy()
            .into_owned();
        assert!(
            m.contains("FDB5 wrote") && m.contains("haar import-fdb5") && m.contains("xxxy"),
            "{m}"
        );
        assert_eq!(fdb_delete_handle(fdb), FDB_SUCCESS);
    }
}
