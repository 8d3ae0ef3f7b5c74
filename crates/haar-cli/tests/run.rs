//! `haar run --heap`: what the command line does before anything runs. The runs themselves,
//! with the preload library, are tested in crates/haar-heap-preload/tests/heap.rs (cargo
//! builds that library for its own tests only).

use std::process::Command;

fn haar(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_haar"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_unusable_heap_directory_stops_haar_run_before_the_command() {
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("ran");
    let missing = work.path().join("no-such-dir");
    let (code, err) = haar(
        &[
            "run",
            "--heap",
            &format!("{}:1G", missing.display()),
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&missing.display().to_string()) && err.contains("create it"),
        "{err}"
    );
    assert!(!marker.exists());

    let (code, err) = haar(&["run", "--heap", "/tmp:1K", "--", "true"], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("too small"), "{err}");
}

#[test]
fn a_missing_heap_library_says_how_to_build_it_and_leaves_no_pool() {
    let work = tempfile::tempdir().unwrap();
    let lib = work.path().join("gone.so");
    let pools = work.path().join("pools");
    std::fs::create_dir(&pools).unwrap();
    let (code, err) = haar(
        &[
            "run",
            "--heap",
            &format!("{}:128M", pools.display()),
            "--",
            "true",
        ],
        &[("HAAR_HEAP_LIB", lib.to_str().unwrap())],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cargo build --release -p haar-heap-preload"),
        "{err}"
    );
    assert!(err.contains(&lib.display().to_string()), "{err}");
    assert_eq!(std::fs::read_dir(&pools).unwrap().count(), 0);
}

#[test]
fn advise_prints_the_heap_command_where_the_tree_says_memory_mode() {
    let advise = |io: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_haar"));
        c.args(["advise", "--memory-intensive", "yes", "--io-intensive", io]);
        if io == "yes" {
            c.args(["--io-pattern", "local", "--modifiable", "no"]);
        }
        let out = c.output().unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for io in ["no", "yes"] {
        let text = advise(io);
        assert!(
            text.contains("haar run --heap /mnt/pmem_fsdax0:SIZE -- ./app"),
            "{text}"
        );
        assert!(text.contains("numactl --membind=N"), "{text}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_haar"))
        .args([
            "advise",
            "--memory-intensive",
            "no",
            "--io-intensive",
            "no",
            "--json",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["advice"]["heap"].is_null(), "{v}");
}
