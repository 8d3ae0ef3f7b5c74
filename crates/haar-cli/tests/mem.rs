//! `haar stream` and `haar advise` through the real binary: JSON fields, exit codes, temporary
//! files removed (also on Ctrl-C), the paper's worked cases end to end.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn haar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_haar"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run haar")
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().count() == 0
}

#[test]
fn stream_on_memory_reports_four_validated_kernels() {
    let v = json_of(&haar(&[
        "stream",
        "--array-mib",
        "8",
        "--ntimes",
        "3",
        "--json",
    ]));
    let r = &v["report"];
    assert_eq!(r["elements"], 8 << 17);
    assert_eq!(r["bytes_per_array"], 8 << 20);
    assert_eq!(r["ntimes"], 3);
    assert_eq!(r["placement"]["kind"], "dram");
    assert!(r["validation"].as_str().unwrap().contains("validates"));
    let kernels = r["kernels"].as_array().unwrap();
    let names: Vec<&str> = kernels
        .iter()
        .map(|k| k["kernel"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["copy", "scale", "add", "triad"]);
    for k in kernels {
        let best = k["best_rate_mb_s"].as_f64().unwrap();
        let median = k["median_rate_mb_s"].as_f64().unwrap();
        let worst = k["worst_rate_mb_s"].as_f64().unwrap();
        assert!(best >= median && median >= worst && worst > 0.0, "{k}");
    }
    // stream.c's byte counting: 2 words for copy, 3 for triad.
    assert_eq!(kernels[0]["bytes"], 16 * (8u64 << 17));
    assert_eq!(kernels[3]["bytes"], 24 * (8u64 << 17));
    assert!(v["llc_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn stream_on_a_mapped_file_persists_and_removes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for (persist, expect) in [("cpu", "cpu-cache"), ("msync", "msync"), ("auto", "msync")] {
        let v = json_of(&haar(&[
            "stream",
            "--array-mib",
            "8",
            "--ntimes",
            "2",
            "--path",
            d,
            "--persist",
            persist,
            "--json",
        ]));
        let p = &v["report"]["placement"];
        assert_eq!(p["kind"], "file");
        assert_eq!(p["dir"], d);
        // Temporary directories are never DAX here, so auto falls back to msync.
        if !p["dax"].as_bool().unwrap() {
            assert_eq!(p["persist"], expect);
        }
        assert!(empty(dir.path()), "array file left behind ({persist})");
    }
}

#[test]
fn stream_as_processes_validates_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let v = json_of(&haar(&[
        "stream",
        "--processes",
        "--threads",
        "2",
        "--array-mib",
        "8",
        "--ntimes",
        "2",
        "--path",
        dir.path().to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v["report"]["workers"], "processes");
    assert_eq!(v["report"]["cpus"].as_array().unwrap().len(), 2);
    assert!(empty(dir.path()));
}

#[test]
fn stream_refuses_bad_input_before_allocating() {
    let t = Instant::now();
    let out = haar(&["stream", "--path", "/no/such/dir", "--array-mib", "8"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/no/such/dir"), "{}", stderr(&out));

    let out = haar(&["stream", "--array-mib", "100000000"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("available"), "{}", stderr(&out));

    let dir = tempfile::tempdir().unwrap();
    let out = haar(&[
        "stream",
        "--path",
        dir.path().to_str().unwrap(),
        "--array-mib",
        "100000000",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("free"), "{}", stderr(&out));
    assert!(empty(dir.path()));

    let file = tempfile::NamedTempFile::new().unwrap();
    let out = haar(&["stream", "--path", file.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not a directory"));

    let out = haar(&["stream", "--ntimes", "1", "--array-mib", "8"]);
    assert_eq!(out.status.code(), Some(1));
    let out = haar(&["stream", "--persist", "cpu"]);
    assert_eq!(out.status.code(), Some(1), "--persist needs --path");
    // Refusals happen before anything is allocated or run.
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn stream_sweep_saves_a_png_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("sweep.png");
    let save = dir.path().join("sweep.json");
    let v = json_of(&haar(&[
        "stream",
        "--sweep",
        "--sweep-min-kib",
        "256",
        "--sweep-max-mib",
        "2",
        "--ntimes",
        "2",
        "--plot",
        png.to_str().unwrap(),
        "--save",
        save.to_str().unwrap(),
        "--json",
    ]));
    let sweep = v["sweep"].as_array().unwrap();
    assert_eq!(sweep.len(), 4, "256K, 512K, 1M, 2M");
    assert!(sweep[0]["inner_reps"].as_u64().unwrap() > 1);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let saved: Value = serde_json::from_slice(&std::fs::read(&save).unwrap()).unwrap();
    assert_eq!(saved["sweep"].as_array().unwrap().len(), 4);
}

#[test]
fn ctrl_c_removes_the_array_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_haar"))
        .args([
            "stream",
            "--array-mib",
            "16",
            "--ntimes",
            "100000",
            "--path",
            dir.path().to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while empty(dir.path()) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "array file never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(empty(dir.path()), "array file left behind after SIGINT");
}

#[test]
fn advise_by_flags_gives_the_papers_fdb5_answer_with_path_and_setup() {
    let out = haar(&[
        "advise",
        "--memory-intensive",
        "no",
        "--io-intensive",
        "yes",
        "--io-pattern",
        "global",
        "--modifiable",
        "yes",
        "--performance-critical",
        "yes",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Recommended configuration: AppDirect (PMDK)"),
        "{text}"
    );
    assert!(text.contains("Fig. 10  Global I/O?"), "{text}");
    assert!(
        text.contains("ndctl create-namespace --mode=fsdax"),
        "{text}"
    );
    assert!(text.contains("mount -o dax"), "{text}");
    assert!(text.contains("backend: pmem"), "{text}");
}

/// Table 3 of the paper, row by row, through the binary and its JSON output.
#[test]
fn advise_json_for_the_six_worked_cases() {
    let cases: [(&str, &[&str], &str); 6] = [
        (
            "CASTEP",
            &["--memory-intensive", "yes", "--io-intensive", "no"],
            "Memory mode",
        ),
        (
            "snappyHexMesh",
            &["--memory-intensive", "yes", "--io-intensive", "no"],
            "Memory mode",
        ),
        (
            "simpleFoam",
            &[
                "--memory-intensive",
                "no",
                "--io-intensive",
                "yes",
                "--io-pattern",
                "local",
                "--modifiable",
                "undesirable",
                "--performance-critical",
                "yes",
            ],
            "AppDirect (fsdax)",
        ),
        (
            "IO500",
            &[
                "--memory-intensive",
                "no",
                "--io-intensive",
                "yes",
                "--io-pattern",
                "both",
                "--modifiable",
                "no",
                "--performance-critical",
                "yes",
            ],
            "AppDirect (GekkoFS)",
        ),
        (
            "MONC ensemble",
            &[
                "--memory-intensive",
                "no",
                "--io-intensive",
                "yes",
                "--io-pattern",
                "local",
                "--modifiable",
                "yes",
                "--performance-critical",
                "no",
            ],
            "AppDirect (fsdax)",
        ),
        (
            "FDB5",
            &[
                "--memory-intensive",
                "no",
                "--io-intensive",
                "yes",
                "--io-pattern",
                "global",
                "--modifiable",
                "yes",
                "--performance-critical",
                "yes",
            ],
            "AppDirect (PMDK)",
        ),
    ];
    for (name, flags, expected) in cases {
        let mut args = vec!["advise", "--json"];
        args.extend_from_slice(flags);
        let v = json_of(&haar(&args));
        assert_eq!(v["advice"]["configuration"], expected, "{name}");
        assert!(!v["advice"]["path"].as_array().unwrap().is_empty());
        assert!(v["advice"]["reason"].as_str().unwrap().len() > 20);
    }
}

#[test]
fn advise_from_an_answer_file_and_conflicts_with_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("monc.json");
    std::fs::write(
        &file,
        r#"{"application": "MONC ensemble", "memory_intensive": false, "io_intensive": true,
            "io_pattern": "local", "modifiable": "yes", "performance_critical": false}"#,
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let v = json_of(&haar(&["advise", "--answers", f, "--json"]));
    assert_eq!(v["advice"]["configuration"], "AppDirect (fsdax)");
    assert_eq!(v["answers"]["io_pattern"], "local");

    // A flag that agrees is fine; one that disagrees is a contradiction.
    assert!(
        haar(&["advise", "--answers", f, "--io-intensive", "yes"])
            .status
            .success()
    );
    let out = haar(&["advise", "--answers", f, "--io-pattern", "global"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("contradictory"), "{}", stderr(&out));

    std::fs::write(&file, r#"{"io_pattern": "sideways"}"#).unwrap();
    let out = haar(&["advise", "--answers", f]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("sideways"));
    let out = haar(&["advise", "--answers", "/no/such/answers.json"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn advise_refuses_contradictions_and_missing_answers_without_a_terminal() {
    let out = haar(&[
        "advise",
        "--memory-intensive",
        "no",
        "--io-intensive",
        "no",
        "--io-pattern",
        "local",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("--io-pattern local"),
        "{}",
        stderr(&out)
    );

    let out = haar(&["advise", "--memory-intensive", "no"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--io-intensive"), "{}", stderr(&out));

    let out = haar(&["advise", "--io-pattern", "sideways"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn advise_probe_describes_this_machine() {
    let out = haar(&["advise", "--probe"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("DRAM (MemTotal)"), "{text}");
    assert!(text.contains("DAX mounts (/proc/mounts)"), "{text}");
    assert!(text.contains("What this implies"), "{text}");
    let v = json_of(&haar(&["advise", "--probe", "--json"]));
    let p = &v["probe"];
    assert!(p["mem_total"].as_u64().unwrap() > 0);
    for key in ["nvdimm", "cxl", "dev_nodes", "dax_mounts", "implications"] {
        assert!(p[key].is_array(), "{key}");
    }
    assert!(v["advice"].is_null());
    // On a machine without persistent memory (this one and CI) the probe says so.
    if p["nvdimm"].as_array().unwrap().is_empty() && p["dax_mounts"].as_array().unwrap().is_empty()
    {
        assert!(text.contains("none found"), "{text}");
    }
}
