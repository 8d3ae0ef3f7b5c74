//! `haar stage` end to end, with real processes: a task killed with SIGKILL mid-copy leaves no
//! half-copied object under its name and is resumed; a cancelled task leaves no temporary
//! files; fields go from a store to a GRIB file and back into another store, byte for byte;
//! errors name what is missing and exit with the documented status.
//!
//! Checks read files directly (std::fs), not through haar_stage.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const HAAR: &str = env!("CARGO_BIN_EXE_haar");

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
    journal: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let root = dir.path().to_path_buf();
    for d in ["pfs", "node"] {
        std::fs::create_dir(root.join(d)).unwrap();
    }
    let config = root.join("haar.yaml");
    std::fs::write(
        &config,
        format!(
            "backend: posix\nroots: [{0}/store]\ndataspaces:\n  shared: {{kind: shared, path: {0}/pfs}}\n  local: {{kind: posix, path: {0}/node}}\n  nv: {{kind: store, root: {0}/nv}}\n  home: {{kind: store}}\n",
            root.display()
        ),
    )
    .unwrap();
    Setup {
        journal: root.join("journal"),
        _dir: dir,
        root,
        config,
    }
}

impl Setup {
    fn haar(&self, args: &[&str]) -> Output {
        Command::new(HAAR)
            .arg("stage")
            .arg("--config")
            .arg(&self.config)
            .arg("--journal")
            .arg(&self.journal)
            .args(args)
            .env_remove("HAAR_CONFIG")
            .output()
            .unwrap()
    }

    /// `haar archive` of the file `f` under `key` into the configuration's store.
    fn archive(&self, key: &str, f: &Path) {
        let o = Command::new(HAAR)
            .args(["archive", "--config"])
            .arg(&self.config)
            .args(["--key", key])
            .arg(f)
            .env_remove("HAAR_CONFIG")
            .output()
            .unwrap();
        ok(&o);
    }

    fn status(&self, id: &str) -> serde_json::Value {
        let o = self.haar(&["status", id, "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// `files` files of `mib` MiB under pfs/`name`, each with different bytes.
    fn source_tree(&self, name: &str, files: usize, mib: usize) -> PathBuf {
        let d = self.root.join("pfs").join(name);
        std::fs::create_dir_all(&d).unwrap();
        let mut x = 0x1234_5678_9abc_def1u64;
        for i in 0..files {
            let mut buf = vec![0u8; mib << 20];
            for c in buf.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.copy_from_slice(&x.to_le_bytes());
            }
            std::fs::write(d.join(format!("f{i:03}")), buf).unwrap();
        }
        d
    }
}

/// Every visible file of `dst` equals its source; returns (visible, hidden temporaries).
fn whole_or_absent(src: &Path, dst: &Path) -> (usize, usize) {
    let (mut visible, mut temps) = (0, 0);
    let Ok(rd) = std::fs::read_dir(dst) else {
        return (0, 0);
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            assert!(name.contains(".haar-stage."), "stray file {name}");
            temps += 1;
            continue;
        }
        let a = std::fs::read(src.join(&name)).unwrap();
        let b = std::fs::read(e.path()).unwrap();
        assert!(a == b, "{name} is under its name but not whole");
        visible += 1;
    }
    (visible, temps)
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}: {}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_task_killed_with_sigkill_leaves_no_half_object_and_resumes_keeping_verified_ones() {
    let s = setup();
    let src = s.source_tree("big", 160, 8);
    let o = s.haar(&[
        "in",
        "shared:big",
        "local:job/big",
        "--id",
        "k1",
        "--detach",
    ]);
    ok(&o);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "k1");
    // Wait until some objects are done, then kill the runner.
    let start = Instant::now();
    let pid = loop {
        let st = s.status("k1");
        assert_ne!(
            st["state"], "done",
            "finished before it could be killed: make it bigger"
        );
        if st["objects_done"].as_u64().unwrap_or(0) >= 1 && st["state"] == "running" {
            break st["pid"].as_u64().unwrap();
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{st}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill(2) of the runner this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    std::thread::sleep(Duration::from_millis(200));
    let st = s.status("k1");
    assert_eq!(st["state"], "interrupted", "{st}");
    let dst = s.root.join("node/job/big");
    let (visible, _temps) = whole_or_absent(&src, &dst);
    assert!(visible < 160, "all objects were there before the resume");
    let kept: Vec<(String, u64)> = st["done"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let p = d["dst"].as_str().unwrap().to_string();
            let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&p).unwrap());
            (p, ino)
        })
        .collect();
    assert!(!kept.is_empty());
    // `wait` on an interrupted task says so and how to resume.
    let w = s.haar(&["wait", "k1"]);
    assert_eq!(w.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&w.stderr).contains("haar stage resume k1"));
    ok(&s.haar(&["resume", "k1", "--quiet"]));
    let st = s.status("k1");
    assert_eq!(st["state"], "done", "{st}");
    assert_eq!(st["attempts"], 2);
    assert_eq!(whole_or_absent(&src, &dst), (160, 0));
    // The pair's bandwidth was recorded for the next task's ETA.
    let o = s.haar(&["rates", "--json"]);
    ok(&o);
    let rates: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        rates["pairs"]["shared->local"]["bytes"].as_u64().unwrap() > 0,
        "{rates}"
    );
    // Objects verified by the first run were kept, not copied again.
    for (p, ino) in kept {
        let now = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&p).unwrap());
        assert_eq!(now, ino, "{p} was copied again");
    }
}

#[test]
fn a_cancelled_task_stops_and_leaves_no_temporary_file() {
    let s = setup();
    let src = s.source_tree("c", 48, 8);
    ok(&s.haar(&["copy", "shared:c", "local:c", "--id", "c1", "--detach"]));
    let start = Instant::now();
    let pid = loop {
        let st = s.status("c1");
        if st["state"] == "running" {
            break st["pid"].as_u64().unwrap() as libc::pid_t;
        }
        assert_eq!(
            st["state"], "queued",
            "the task ended before it could be cancelled: {st}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never started: {st}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    // The runner is stopped while the cancel is asked, so the copy (0.2 s of 384 MiB on a
    // quiet host) cannot finish first and the test cannot race it; it resumes once the
    // marker is written and sees it at its next chunk.
    // SAFETY: signals to the task's runner process, a child of this test's haar.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let cancel = Command::new(HAAR)
        .arg("stage")
        .arg("--config")
        .arg(&s.config)
        .arg("--journal")
        .arg(&s.journal)
        .args(["cancel", "c1", "--json"])
        .env_remove("HAAR_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let marker = s.journal.join("c1").join("cancel");
    while !marker.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no cancel marker"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let o = cancel.wait_with_output().unwrap();
    ok(&o);
    let rec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rec["state"], "cancelled", "{rec}");
    let (visible, temps) = whole_or_absent(&src, &s.root.join("node/c"));
    assert_eq!(temps, 0);
    assert!(visible < 48);
}

#[test]
fn fields_go_from_a_store_to_a_grib_file_and_into_another_store_byte_for_byte() {
    let s = setup();
    // Two raw fields archived into the configuration's own store (dataspace `home`).
    let keys = [
        "class=od,expver=1,stream=oper,date=20261122,time=0,domain=g,type=fc,levtype=sfc,step=0,param=167",
        "class=od,expver=1,stream=oper,date=20261122,time=0,domain=g,type=fc,levtype=sfc,step=6,param=167",
    ];
    let mut expected = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let f = s.root.join(format!("field{i}"));
        let bytes: Vec<u8> = (0..100_000u32)
            .map(|j| (j * (i as u32 + 3) % 251) as u8)
            .collect();
        std::fs::write(&f, &bytes).unwrap();
        expected.extend_from_slice(&bytes);
        s.archive(k, &f);
    }
    let req = "home:class=od,expver=1,stream=oper,date=20261122,time=0,type=fc,levtype=sfc,step=0/6,param=167";
    ok(&s.haar(&["out", req, "shared:out/fields.grib", "--quiet"]));
    assert_eq!(
        std::fs::read(s.root.join("pfs/out/fields.grib")).unwrap(),
        expected
    );
    // Store to store: the node-local store `nv` gets the same fields.
    ok(&s.haar(&["in", req, "nv:", "--quiet"]));
    let o = Command::new(HAAR)
        .args(["retrieve", "--root"])
        .arg(s.root.join("nv"))
        .arg(req.trim_start_matches("home:"))
        .arg("-o")
        .arg(s.root.join("back.grib"))
        .output()
        .unwrap();
    ok(&o);
    assert_eq!(std::fs::read(s.root.join("back.grib")).unwrap(), expected);
    // A request that selects nothing fails with exit 2, naming the dataspace.
    let o = s.haar(&[
        "out",
        "home:class=od,step=99",
        "shared:none.grib",
        "--quiet",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("dataspace home"));
    assert!(!s.root.join("pfs/none.grib").exists());
}

/// To a memory file system the store's reads run on a thread of their own and the fields are
/// written in 4 MiB buffers: fields that straddle buffers, and a last buffer only partly full,
/// arrive byte for byte.
#[test]
fn fields_staged_to_a_memory_file_system_arrive_byte_for_byte() {
    let s = setup();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut text = std::fs::read_to_string(&s.config).unwrap();
    text.push_str(&format!(
        "  mem: {{kind: shared, path: {}}}\n",
        shm.path().display()
    ));
    std::fs::write(&s.config, text).unwrap();
    let mut expected = Vec::new();
    let steps = [0, 6, 12, 18, 24, 30, 36];
    for (i, step) in steps.iter().enumerate() {
        let f = s.root.join(format!("field{i}"));
        let bytes: Vec<u8> = (0..1_300_000u32)
            .map(|j| (j.wrapping_mul(i as u32 + 7) % 253) as u8)
            .collect();
        std::fs::write(&f, &bytes).unwrap();
        expected.extend_from_slice(&bytes);
        let key = format!(
            "class=od,expver=1,stream=oper,date=20261122,time=0,domain=g,type=fc,levtype=sfc,step={step},param=167"
        );
        s.archive(&key, &f);
    }
    let req = "home:class=od,expver=1,stream=oper,date=20261122,time=0,type=fc,levtype=sfc,step=0/6/12/18/24/30/36,param=167";
    ok(&s.haar(&["out", req, "mem:out/fields.grib", "--quiet"]));
    let got = std::fs::read(shm.path().join("out/fields.grib")).unwrap();
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the staged file differs from the fields");
}

#[test]
fn bad_endpoints_and_missing_sources_exit_with_what_to_do() {
    let s = setup();
    let o = s.haar(&["in", "nowhere:x", "local:y"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("local, nv, shared"));
    let o = s.haar(&["in", "shared:../../etc/passwd", "local:y"]);
    assert_eq!(o.status.code(), Some(1));
    let o = s.haar(&["in", "shared:absent", "local:y", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let rec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rec["state"], "failed");
    assert_eq!(rec["error_class"], "missing");
    assert!(rec["error"].as_str().unwrap().contains("does not exist"));
}
