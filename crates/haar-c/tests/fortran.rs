//! The Fortran face: `fortran/haar.f90` and the example producer
//! (`fortran/examples/producer.f90`) built with gfortran (`-std=f2018 -Wall -Wextra
//! -Werror`) against the release cdylib and run on a posix store and a pmem pool: 36 fields
//! archived in a loop with a flush per step, one read back bit for bit, a GRIB message
//! keyed by ecCodes, bad input refused with a status and a message.
//!
//! Needs `cargo build --release -p haar-c` first.

use std::path::{Path, PathBuf};
use std::process::Command;

mod cdylib;
use cdylib::lib_dir;

fn build_producer(out: &Path) -> PathBuf {
    let fortran = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fortran");
    let lib = lib_dir();
    let exe = out.join("producer");
    let o = Command::new("gfortran")
        .args(["-std=f2018", "-Wall", "-Wextra", "-Werror", "-J"])
        .arg(out)
        .arg(fortran.join("haar.f90"))
        .arg(fortran.join("examples/producer.f90"))
        .arg("-L")
        .arg(&lib)
        // RPATH, not RUNPATH: it wins over the LD_LIBRARY_PATH cargo sets (which may name an
        // older libhaar_c.so in the profile directory).
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lhaar_c", "-o"])
        .arg(&exe)
        .output()
        .expect("gfortran runs");
    assert!(
        o.status.success(),
        "gfortran failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}

fn produce(dir: &Path, yaml: &str) {
    let exe = build_producer(dir);
    let cfg = dir.join("haar.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let o = Command::new(&exe)
        .arg(&cfg)
        .arg("/usr/share/eccodes/samples/gg_sfc_grib2.tmpl")
        .env_remove("HAAR_CONFIG")
        .output()
        .expect("producer runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("producer: ok"),
        "producer failed ({}):\n{out}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn the_fortran_producer_archives_a_model_run_on_posix() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    produce(
        dir.path(),
        &format!("backend: posix\nroots: [{}]\n", root.display()),
    );
}

#[test]
fn the_fortran_producer_archives_a_model_run_on_pmem() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let root = dir.path().join("pool");
    produce(
        dir.path(),
        &format!("backend: pmem\nroots: [{}]\n", root.display()),
    );
}
