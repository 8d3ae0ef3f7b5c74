//! The per-node stage service (`haar stage daemon`, design §13.5) with real processes: the
//! daemon runs as root, users are real unprivileged users (`setpriv` to `nobody`), identity
//! comes from SO_PEERCRED. Checked: a user's task runs as that user and only its owner sees
//! and cancels it; admin operations are refused to users and allowed to root and to the
//! holder of the admin token; a drained node refuses new tasks and lets the running one
//! finish; a daemon killed with SIGKILL together with its runner mid-task resumes the task
//! when it starts again, leaving nothing half-copied under its name.
//!
//! Needs root (to start runners under other uids); skipped otherwise. Checks read files
//! directly (std::fs), not through haar_stage.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const HAAR: &str = env!("CARGO_BIN_EXE_haar");
const USER: &str = "nobody";
const USER_UID: u32 = 65534;

struct Node {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
    socket: PathBuf,
    state: PathBuf,
    daemon: Option<Child>,
}

fn root_or_skip() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "SKIPPED: stage-service tests need root (runners under other uids); CI runs them as root"
        );
        return false;
    }
    true
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        let root = dir.path().to_path_buf();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        for d in ["pfs", "node", "home"] {
            std::fs::create_dir(root.join(d)).unwrap();
            std::fs::set_permissions(root.join(d), std::fs::Permissions::from_mode(0o1777))
                .unwrap();
        }
        let config = root.join("haar.yaml");
        std::fs::write(
            &config,
            format!(
                "backend: posix\nroots: [{0}/store]\ndataspaces:\n  shared: {{kind: shared, path: {0}/pfs}}\n  local: {{kind: posix, path: {0}/node}}\n",
                root.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
        let token = root.join("token");
        std::fs::write(&token, "0123456789abcdef-admin\n").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut n = Node {
            socket: root.join("run/stage.sock"),
            state: root.join("state"),
            _dir: dir,
            root,
            config,
            daemon: None,
        };
        n.start();
        n
    }

    fn start(&mut self) {
        let child = Command::new(HAAR)
            .args(["stage", "daemon", "--config"])
            .arg(&self.config)
            .arg("--socket")
            .arg(&self.socket)
            .arg("--state")
            .arg(&self.state)
            .arg("--admin-token-file")
            .arg(self.root.join("token"))
            .env_remove("HAAR_CONFIG")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        self.daemon = Some(child);
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the daemon did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill9(&mut self) {
        let mut c = self.daemon.take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }

    /// `haar stage ARGS` as root (`as_user: false`) or as the unprivileged user.
    fn haar(&self, as_user: bool, args: &[&str]) -> Output {
        let mut c = if as_user {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={USER}"),
                &format!("--regid={USER_UID}"),
                "--clear-groups",
                HAAR,
            ]);
            c
        } else {
            Command::new(HAAR)
        };
        c.arg("stage")
            .arg("--config")
            .arg(&self.config)
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .env_remove("HAAR_CONFIG")
            .env("HOME", self.root.join("home"))
            .env_remove("XDG_STATE_HOME")
            .current_dir("/")
            .output()
            .unwrap()
    }

    fn json(&self, as_user: bool, args: &[&str]) -> serde_json::Value {
        let o = self.haar(as_user, args);
        ok(&o);
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// A token file the unprivileged user may read (its own, mode 0600).
    fn user_token(&self) -> PathBuf {
        let p = self.root.join("user-token");
        std::fs::copy(self.root.join("token"), &p).unwrap();
        std::os::unix::fs::chown(&p, Some(USER_UID), None).unwrap();
        p
    }

    /// `files` files of `mib` MiB under pfs/`name`, each with different bytes, readable by all.
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

    fn wait_running(&self, id: &str) -> serde_json::Value {
        let t = Instant::now();
        loop {
            let r = self.json(true, &["status", id, "--json"]);
            if r["state"] == "running" {
                return r;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30) && r["state"] == "queued",
                "task {id} never ran: {r}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.daemon.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
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

fn refused(o: &Output, code: i32, words: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(err.contains(words), "{err:?} does not say {words:?}");
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

#[test]
fn users_run_tasks_as_themselves_see_only_their_own_and_admin_needs_root_or_the_token() {
    if !root_or_skip() {
        return;
    }
    let n = Node::new();
    std::fs::write(n.root.join("pfs/in.bin"), vec![7u8; 3 << 20]).unwrap();
    std::fs::set_permissions(
        n.root.join("pfs/in.bin"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();

    // A user's task runs under the user's uid: the kernel decides, and the copy is its own.
    let rec = n.json(
        true,
        &[
            "copy",
            "shared:in.bin",
            "local:u/in.bin",
            "--id",
            "mine",
            "--json",
        ],
    );
    assert_eq!(rec["state"], "done", "{rec}");
    let out = n.root.join("node/u/in.bin");
    assert_eq!(std::fs::read(&out).unwrap(), vec![7u8; 3 << 20]);
    assert_eq!(std::fs::metadata(&out).unwrap().uid(), USER_UID);
    // The service wrote the user's journal as the user.
    for f in ["", "/mine", "/mine/task", "/mine/log"] {
        let p = n.state.join(format!("users/{USER_UID}{f}"));
        assert_eq!(
            std::fs::metadata(&p).unwrap().uid(),
            USER_UID,
            "{}",
            p.display()
        );
    }
    // A source the user may not read stays unread, though the daemon is root.
    std::fs::write(n.root.join("pfs/secret.bin"), b"root only").unwrap();
    std::fs::set_permissions(
        n.root.join("pfs/secret.bin"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let o = n.haar(true, &["copy", "shared:secret.bin", "local:u/secret.bin"]);
    assert!(
        !o.status.success(),
        "a user staged a file only root may read"
    );
    assert!(!n.root.join("node/u/secret.bin").exists());

    // Root's task is root's: the user neither sees nor cancels it.
    ok(&n.haar(
        false,
        &["copy", "shared:in.bin", "local:r/in.bin", "--id", "roots"],
    ));
    let mine = n.json(true, &["status", "--json"]);
    let ids: Vec<&str> = mine
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"mine") && !ids.contains(&"roots"), "{ids:?}");
    refused(&n.haar(true, &["cancel", "roots"]), 2, "no task roots");
    // ... unless an admin names the user.
    refused(
        &n.haar(true, &["admin", "tasks", "root"]),
        1,
        "admin operation",
    );
    let theirs = n.json(false, &["admin", "tasks", USER, "--json"]);
    assert_eq!(theirs[0]["id"], "mine", "{theirs}");

    // Admin operations: refused to the user, allowed to root and to the token's holder.
    for op in [
        &["admin", "drain"][..],
        &["admin", "undrain"],
        &["admin", "purge", "root"],
        &["admin", "register", "scratch", "posix", "/tmp"],
    ] {
        refused(&n.haar(true, op), 1, "admin operation");
    }
    let wrong = n.root.join("wrong-token");
    std::fs::write(&wrong, "not-the-token-at-all\n").unwrap();
    std::os::unix::fs::chown(&wrong, Some(USER_UID), None).unwrap();
    let wrong = wrong.to_str().unwrap();
    refused(
        &n.haar(true, &["admin", "drain", "--token-file", wrong]),
        1,
        "admin operation",
    );
    let token = n.user_token();
    let token = token.to_str().unwrap();
    ok(&n.haar(true, &["admin", "drain", "--token-file", token]));
    refused(
        &n.haar(true, &["copy", "shared:in.bin", "local:u/again.bin"]),
        1,
        "draining",
    );
    ok(&n.haar(true, &["admin", "undrain", "--token-file", token]));
    ok(&n.haar(true, &["copy", "shared:in.bin", "local:u/again.bin"]));

    // A registered dataspace is usable by users' tasks; the configuration's are not the
    // service's to change.
    let extra = n.root.join("extra");
    std::fs::create_dir(&extra).unwrap();
    std::fs::set_permissions(&extra, std::fs::Permissions::from_mode(0o1777)).unwrap();
    ok(&n.haar(
        false,
        &[
            "admin",
            "register",
            "extra",
            "posix",
            extra.to_str().unwrap(),
        ],
    ));
    ok(&n.haar(true, &["copy", "shared:in.bin", "extra:x.bin"]));
    assert_eq!(std::fs::read(extra.join("x.bin")).unwrap().len(), 3 << 20);
    refused(
        &n.haar(false, &["admin", "unregister", "local"]),
        1,
        "configuration",
    );
    ok(&n.haar(false, &["admin", "unregister", "extra"]));
    refused(
        &n.haar(true, &["copy", "shared:in.bin", "extra:y.bin"]),
        1,
        "no dataspace \"extra\"",
    );

    // Purge: every persisted location of the user goes, data and record; others' stay.
    for (who, loc) in [(true, "local:u"), (false, "local:r")] {
        ok(&n.haar(who, &["--no-daemon", "persist", "store", loc]));
    }
    let removed = n.json(false, &["admin", "purge", USER]);
    assert_eq!(removed["removed"].as_array().unwrap().len(), 1, "{removed}");
    assert!(
        !n.root.join("node/u").exists(),
        "purge left the user's data"
    );
    assert!(
        n.root.join("node/r/in.bin").exists(),
        "purge removed root's data"
    );
}

#[test]
fn a_drained_node_refuses_new_tasks_and_lets_the_running_one_finish() {
    if !root_or_skip() {
        return;
    }
    let n = Node::new();
    let src = n.source_tree("tree", 24, 16);
    ok(&n.haar(
        true,
        &[
            "in",
            "shared:tree",
            "local:tree",
            "--id",
            "long",
            "--detach",
        ],
    ));
    n.wait_running("long");
    let drained = n.json(false, &["admin", "drain"]);
    let still = n.json(true, &["status", "long", "--json"]);
    if still["state"] == "running" {
        assert!(drained["running"].as_u64().unwrap() >= 1, "{drained}");
    }
    refused(
        &n.haar(true, &["copy", "shared:tree/f000", "local:new"]),
        1,
        "draining",
    );
    ok(&n.haar(false, &["admin", "drain", "--wait"]));
    let rec = n.json(true, &["status", "long", "--json"]);
    assert_eq!(rec["state"], "done", "{rec}");
    assert_eq!(whole_or_absent(&src, &n.root.join("node/tree")), (24, 0));
    // Draining survives a restart of the daemon.
    let mut n = n;
    n.kill9();
    n.start();
    refused(
        &n.haar(true, &["copy", "shared:tree/f000", "local:new"]),
        1,
        "draining",
    );
}

#[test]
fn a_daemon_killed_with_its_runner_mid_task_resumes_the_task_when_it_starts_again() {
    if !root_or_skip() {
        return;
    }
    let mut n = Node::new();
    // Enough files that the task still runs for a good half second after its first batch is
    // verified (40 files, 0.3 s at 2.6 GB/s, once finished between two polls of a loaded CI).
    const FILES: usize = 120;
    let src = n.source_tree("tree", FILES, 16);
    ok(&n.haar(
        true,
        &["in", "shared:tree", "local:tree", "--id", "big", "--detach"],
    ));
    n.wait_running("big");
    // Kill when some objects are verified (so the resume has something to keep), if the
    // task is still running then.
    let t = Instant::now();
    let rec = loop {
        let r = n.json(true, &["status", "big", "--json"]);
        if r["objects_done"].as_u64().unwrap_or(0) > 0 || r["state"] != "running" {
            break r;
        }
        assert!(t.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        rec["state"], "running",
        "the task ended before the kill: {rec}"
    );
    let runner = rec["pid"].as_u64().unwrap() as i32;
    n.kill9();
    // SAFETY: kill with a pid read from the task record.
    assert_eq!(unsafe { libc::kill(runner, libc::SIGKILL) }, 0);
    let t = Instant::now();
    while std::fs::read_to_string(format!("/proc/{runner}/stat")).is_ok_and(|s| !s.contains(") Z "))
    {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    }
    let (visible, _) = whole_or_absent(&src, &n.root.join("node/tree"));
    assert!(visible < FILES, "everything was staged before the kill");

    n.start();
    let o = n.haar(true, &["wait", "big", "--timeout", "120", "--json"]);
    ok(&o);
    let rec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rec["state"], "done", "{rec}");
    assert_eq!(rec["attempts"], 2, "{rec}");
    assert_eq!(whole_or_absent(&src, &n.root.join("node/tree")), (FILES, 0));
}

#[test]
fn a_task_whose_runner_cannot_start_fails_naming_the_runners_output() {
    if !root_or_skip() {
        return;
    }
    let n = Node::new();
    std::fs::write(n.root.join("pfs/in.bin"), b"GRIB....7777").unwrap();
    // The runner, under the user's uid, can no longer read the configuration.
    std::fs::set_permissions(&n.config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = n.haar(
        true,
        &["copy", "shared:in.bin", "local:u/in.bin", "--id", "t"],
    );
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("before running it") && err.contains("/t/log"),
        "{err}"
    );
    let log = std::fs::read_to_string(n.state.join(format!("users/{USER_UID}/t/log"))).unwrap();
    assert!(
        log.contains("haar.yaml"),
        "the runner's output does not say why: {log}"
    );
}

#[test]
fn links_and_records_a_user_plants_give_the_root_service_no_reach_beyond_the_user() {
    if !root_or_skip() {
        return;
    }
    let n = Node::new();
    let victim = n.root.join("victim");
    std::fs::write(&victim, b"root's own").unwrap();
    // A task that fails (its source is missing), then its log made a link to root's file.
    let o = n.haar(true, &["copy", "shared:none.bin", "local:u/x", "--id", "t"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let log = n.state.join(format!("users/{USER_UID}/t/log"));
    let plant = Command::new("setpriv")
        .args([
            &format!("--reuid={USER}"),
            &format!("--regid={USER_UID}"),
            "--clear-groups",
        ])
        .args(["ln", "-sf"])
        .arg(&victim)
        .arg(&log)
        .status()
        .unwrap();
    assert!(plant.success());
    // Asked again, the task is resumed: the service writes the log as the user, not through
    // the link as root.
    let o = n.haar(true, &["copy", "shared:none.bin", "local:u/x", "--id", "t"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's own");
    assert_eq!(std::fs::metadata(&victim).unwrap().uid(), 0);

    // A persist record the user forged, naming root's files: purge removes neither.
    let reg = n.root.join("node/.haar-persist");
    std::fs::create_dir_all(&reg).unwrap();
    std::fs::set_permissions(&reg, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let root_file = n.root.join("node/roots-file");
    std::fs::write(&root_file, b"root's too").unwrap();
    for (i, path) in [
        root_file.clone(),
        n.root.join("node/../victim"),
        victim.clone(),
    ]
    .into_iter()
    .enumerate()
    {
        let rec = haar_stage::persist::Persisted {
            endpoint: format!("local:forged{i}"),
            path,
            owner: USER_UID,
            shared_with: vec![],
            created: 0.0,
            node: None,
        };
        let f = reg.join(format!("forged{i}"));
        haar_stage::journal::write_record(&f, haar_stage::persist::PERSIST_MAGIC, &rec).unwrap();
        std::os::unix::fs::chown(&f, Some(USER_UID), None).unwrap();
    }
    ok(&n.haar(false, &["admin", "purge", USER]));
    assert_eq!(std::fs::read(&root_file).unwrap(), b"root's too");
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's own");
}
