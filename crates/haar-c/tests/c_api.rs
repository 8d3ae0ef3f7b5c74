//! The C programs in `tests/c/`, compiled with gcc (`-Wall -Wextra -Werror`) against
//! `include/haar.h` and the release cdylib (`libhaar_c.so`), run against a local posix store,
//! a local pmem pool on /dev/shm, a real `haar serve` process, and a dead server.
//!
//! Needs `cargo build --release -p haar-c -p haar-cli` first (the cdylib and the `haar`
//! binary next to this test's directory); the test says so when they are missing.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod cdylib;
use cdylib::{lib_dir, profile_dir};

const GRIB2: &str = "/usr/share/eccodes/samples/gg_sfc_grib2.tmpl";
/// The shared secret of the test server and its clients.
const TOKEN: &str = "c-api-test-token";
const GRIB1: &str = "/usr/share/eccodes/samples/GRIB1.tmpl";

/// Compiles `tests/c/<name>.c` into `out` and returns the executable.
fn compile(name: &str, out: &Path) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    let exe = out.join(name);
    let o = Command::new("gcc")
        .args(["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join(format!("tests/c/{name}.c")))
        .arg("-L")
        .arg(&lib)
        // RPATH, not RUNPATH: it wins over the LD_LIBRARY_PATH cargo sets (which may name an
        // older libhaar_c.so in the profile directory).
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lhaar_c", "-lpthread", "-o"])
        .arg(&exe)
        .output()
        .expect("gcc runs");
    assert!(
        o.status.success(),
        "gcc {name}.c failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}

/// Runs a compiled program with a clean environment for haar; panics with its output unless
/// it exits 0.
fn run(exe: &Path, args: &[&str]) -> String {
    run_with(exe, args, &[])
}

/// As [`run`], with `env` set.
fn run_with(exe: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let o = Command::new(exe)
        .args(args)
        .env_remove("HAAR_CONFIG")
        .env_remove("FDB5_CONFIG")
        .env_remove("FDB5_CONFIG_FILE")
        .env_remove("FDB_HOME")
        .envs(env.iter().copied())
        .output()
        .expect("program runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success(),
        "{} {args:?} failed ({}):\n{text}",
        exe.display(),
        o.status
    );
    text
}

fn write_config(dir: &Path, yaml: &str) -> String {
    let p = dir.join("haar.yaml");
    std::fs::write(&p, yaml).unwrap();
    p.display().to_string()
}

#[test]
fn round_trips_and_bad_input_on_a_local_posix_store() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("api_test", dir.path());
    let root = dir.path().join("store");
    let cfg = write_config(
        dir.path(),
        &format!("backend: posix\nroots: [{}]\n", root.display()),
    );
    let out = run(&exe, &[&cfg, GRIB2, GRIB1]);
    assert!(out.contains("all checks passed"), "{out}");
}

#[test]
fn one_store_handle_shared_by_threads() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("threads", dir.path());
    let root = dir.path().join("store");
    let cfg = write_config(
        dir.path(),
        &format!("backend: posix\nroots: [{}]\n", root.display()),
    );
    let out = run(&exe, &[&cfg]);
    assert!(out.contains("threads: ok"), "{out}");
}

#[test]
fn a_close_racing_other_threads_refuses_their_calls_and_never_reaches_the_next_handle() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("close_race", dir.path());
    let config = |name: &str| {
        let p = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &p,
            format!(
                "backend: posix\nroots: [{}]\n",
                dir.path().join(name).display()
            ),
        )
        .unwrap();
        p.display().to_string()
    };
    let (a, b) = (config("a"), config("b"));
    let out = run(&exe, &[&a, &b, "40"]);
    assert!(out.contains("close_race: ok"), "{out}");
}

#[test]
fn a_null_config_path_opens_what_haar_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("threads", dir.path());
    let root = dir.path().join("store");
    let cfg = write_config(
        dir.path(),
        &format!("backend: posix\nroots: [{}]\n", root.display()),
    );
    // threads.c opens argv[1]; "-" makes it pass NULL, so $HAAR_CONFIG decides.
    let out = run_with(&exe, &["-"], &[("HAAR_CONFIG", &cfg)]);
    assert!(out.contains("threads: ok"), "{out}");
    assert!(root.exists(), "the store $HAAR_CONFIG names was written");
}

#[test]
fn a_null_config_path_accepts_an_fdb5_configuration() {
    // What an FDB5 job already sets: FDB5_CONFIG_FILE naming a local TOC configuration,
    // mapped onto a posix root with FDB5's schema.
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("threads", dir.path());
    let root = dir.path().join("fdb-root");
    std::fs::create_dir(&root).unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "type: local\nengine: toc\nschema: /etc/fdb/schema\nspaces:\n  - handler: Default\n    roots:\n      - path: {}\n",
            root.display()
        ),
    );
    let out = run_with(&exe, &["-"], &[("FDB5_CONFIG_FILE", &cfg)]);
    assert!(out.contains("threads: ok"), "{out}");
    assert!(
        std::fs::read_dir(&root).unwrap().next().is_some(),
        "the store was written under the FDB5 root"
    );
}

#[test]
fn round_trips_on_a_pmem_pool_with_zero_copy_views() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let exe = compile("api_test", dir.path());
    let root = dir.path().join("pool");
    let cfg = write_config(
        dir.path(),
        &format!("backend: pmem\nroots: [{}]\n", root.display()),
    );
    let out = run(&exe, &[&cfg, GRIB2, GRIB1, "--lent"]);
    assert!(out.contains("all checks passed"), "{out}");
}

/// A `haar serve` process on a free loopback port, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(root: &Path) -> Server {
    let haar = profile_dir().join("haar");
    assert!(
        haar.is_file(),
        "{} is missing: run `cargo build --release -p haar-cli` first",
        haar.display()
    );
    let log = std::fs::File::create(root.with_extension("log")).unwrap();
    let mut child = Command::new(&haar)
        .arg("--root")
        .arg(root)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("HAAR_CONFIG")
        .env("HAAR_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("haar serve starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        let _ = tx.send(line);
        let _ = std::io::copy(&mut r, &mut std::io::sink());
    });
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("haar serve printed its address");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| {
            panic!(
                "haar serve printed {line:?}; log: {}",
                std::fs::read_to_string(root.with_extension("log")).unwrap_or_default()
            )
        })
        .to_string();
    Server { child, addr }
}

#[test]
fn round_trips_through_a_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("api_test", dir.path());
    let server = serve(&dir.path().join("served"));
    let cfg = write_config(
        dir.path(),
        &format!("type: remote\nserver: '{}'\n", server.addr),
    );
    let out = run_with(
        &exe,
        &[&cfg, GRIB2, GRIB1, "--remote"],
        &[("HAAR_TOKEN", TOKEN)],
    );
    assert!(out.contains("all checks passed"), "{out}");
}

#[test]
fn round_trips_through_dist_and_select_over_two_servers() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("api_test", dir.path());
    for name in ["dist", "select"] {
        // Fresh servers for each: the program expects empty stores.
        let sub = dir.path().join(name);
        std::fs::create_dir(&sub).unwrap();
        let a = serve(&sub.join("a"));
        let b = serve(&sub.join("b"));
        let yaml = if name == "dist" {
            format!(
                "type: dist\nlanes:\n  - {{type: remote, server: '{}'}}\n  - {{type: remote, server: '{}'}}\n",
                a.addr, b.addr
            )
        } else {
            format!(
                "type: select\nroutes:\n  - match: param=165\n    store: {{type: remote, server: '{}'}}\n  - match: ''\n    store: {{type: remote, server: '{}'}}\n",
                a.addr, b.addr
            )
        };
        let cfg = write_config(&sub, &yaml);
        let out = run_with(
            &exe,
            &[&cfg, GRIB2, GRIB1, "--remote"],
            &[("HAAR_TOKEN", TOKEN)],
        );
        assert!(out.contains("all checks passed"), "{name}: {out}");
    }
}

#[test]
fn a_dead_server_is_a_storage_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("dead_server", dir.path());
    // A port nobody listens on: bound, then released.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let out = run(&exe, &[&addr]);
    assert!(out.contains("dead_server: ok"), "{out}");
}
