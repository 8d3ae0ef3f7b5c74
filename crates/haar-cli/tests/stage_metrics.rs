//! `haar stage daemon --metrics` and `--log-format json` on a real daemon (docs/operations.md):
//! a task staged through it, a request denied to a user, and a connection refused at the
//! service's limit move exactly the counters they should, the task gauges show the task, and
//! every stderr line of the JSON log is one JSON object with the fields an operator filters
//! on (`op`, `task`, the connection span's `uid`).
//!
//! Run as root, the denied request comes from `nobody` (setpriv); otherwise from this user,
//! whom a daemon of its own runs tasks for but does not take for an admin.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

#[path = "common/metrics.rs"]
mod metrics;
use metrics::value;

const HAAR: &str = env!("CARGO_BIN_EXE_haar");

struct Daemon {
    child: Child,
    metrics: String,
    socket: PathBuf,
    config: PathBuf,
    log: PathBuf,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Daemon {
    /// A daemon over dataspaces `shared` (pfs/) and `local` (node/), at most two connections
    /// at once, metrics on a free port, a JSON log at `info` into `log`.
    fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        // `nobody` reaches the socket below it.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        for d in ["pfs", "node"] {
            std::fs::create_dir(root.join(d)).unwrap();
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
        let (socket, log) = (root.join("run/stage.sock"), root.join("daemon.log"));
        let mut child = Command::new(HAAR)
            .args(["stage", "daemon", "--config"])
            .arg(&config)
            .arg("--socket")
            .arg(&socket)
            .arg("--state")
            .arg(root.join("state"))
            .args(["--max-connections", "2", "--max-connections-per-user", "2"])
            .args(["--metrics", "127.0.0.1:0", "--log-format", "json"])
            .env_remove("HAAR_CONFIG")
            .env("HAAR_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut lines = ["", ""].map(|_| {
            let mut l = String::new();
            out.read_line(&mut l).unwrap();
            l.trim_end().to_string()
        });
        assert!(
            lines[0].starts_with("haar stage daemon: listening on"),
            "{lines:?}; {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let metrics = std::mem::take(&mut lines[1])
            .strip_prefix("metrics on ")
            .unwrap_or_else(|| panic!("no metrics line: {lines:?}"))
            .to_string();
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Daemon {
            child,
            metrics,
            socket,
            config,
            log,
            root,
            _dir: dir,
        }
    }

    /// `haar stage ARGS` through the daemon, as this process's user or as `nobody`.
    fn haar(&self, as_nobody: bool, args: &[&str]) -> Output {
        let mut c = if as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=nobody", "--regid=65534", "--clear-groups", HAAR]);
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
            .current_dir("/")
            .output()
            .unwrap()
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

#[test]
fn the_stage_daemon_counts_tasks_bytes_denials_and_refusals_and_logs_json() {
    let d = Daemon::start();
    let before = metrics::scrape(&d.metrics);
    assert_eq!(value(&before, "haar_stage_runners_started_total"), 0.0);
    assert_eq!(value(&before, r#"haar_stage_tasks{state="done"}"#), 0.0);

    // A task staged through the service.
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.root.join("pfs/in.bin"), &payload).unwrap();
    let o = d.haar(
        false,
        &["copy", "shared:in.bin", "local:job/in.bin", "--id", "t1"],
    );
    ok(&o);
    assert!(std::fs::read(d.root.join("node/job/in.bin")).unwrap() == payload);

    // An admin operation asked for by a user who is not one.
    let o = d.haar(root(), &["admin", "drain"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("admin operation"),
        "{o:?}"
    );

    // Two connections held open: the third is refused at the service's limit.
    let held: Vec<UnixStream> = (0..2)
        .map(|_| UnixStream::connect(&d.socket).unwrap())
        .collect();
    metrics::scrape_until(&d.metrics, "two connections open", |m| {
        value(m, "haar_stage_connections_open") == 2.0
    });
    let mut refusal = String::new();
    BufReader::new(UnixStream::connect(&d.socket).unwrap())
        .read_line(&mut refusal)
        .unwrap();
    assert!(
        refusal.contains(r#""ok":false"#) && refusal.contains("limit"),
        "{refusal}"
    );
    drop(held);

    let m = metrics::scrape_until(&d.metrics, "the runner's end and the refusal", |m| {
        value(m, r#"haar_stage_runners_ended_total{state="done"}"#) == 1.0
            && value(m, r#"haar_stage_connections_refused_total{cause="busy"}"#) >= 1.0
            && value(m, "haar_stage_connections_open") == 0.0
    });
    let v = |s: &str| value(&m, s);
    assert_eq!(v("haar_stage_runners_started_total"), 1.0);
    assert_eq!(v("haar_stage_bytes_staged_total"), payload.len() as f64);
    assert_eq!(v(r#"haar_stage_tasks{state="done"}"#), 1.0);
    assert_eq!(v(r#"haar_stage_tasks{state="running"}"#), 0.0);
    assert_eq!(v("haar_stage_inflight_bytes_total"), 0.0);
    assert_eq!(
        v(r#"haar_stage_requests_total{op="submit",result="ok"}"#),
        1.0
    );
    assert_eq!(
        v(r#"haar_stage_requests_total{op="drain",result="denied"}"#),
        1.0
    );
    assert!(v("haar_stage_connections_accepted_total") >= 4.0, "{m:?}");

    // The log: one JSON object a line, the denial once with its cause and the caller's uid,
    // the task's runner by its id.
    let lines = metrics::json_log_until(&d.log, |lines| {
        lines.iter().any(|l| l["message"] == "runner ended")
            && lines.iter().any(|l| {
                l["message"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("request denied")
            })
            && lines.iter().any(|l| {
                l["message"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("connection refused")
            })
    });
    for l in &lines {
        assert!(l["level"].is_string() && l["timestamp"].is_string(), "{l}");
    }
    let denied: Vec<_> = (lines.iter())
        .filter(|l| {
            l["message"]
                .as_str()
                .unwrap_or("")
                .starts_with("request denied")
        })
        .collect();
    assert_eq!(denied.len(), 1, "{denied:?}");
    let denied = denied[0];
    assert_eq!(denied["level"], "WARN", "{denied}");
    assert_eq!(denied["op"], "drain", "{denied}");
    let uid = if root() {
        65534
    } else {
        unsafe { libc::getuid() }
    };
    assert_eq!(denied["uid"], uid, "{denied}");
    assert_eq!(denied["span"]["uid"], uid, "{denied}");
    assert!(denied["span"]["conn"].is_u64(), "{denied}");
    let ended = lines
        .iter()
        .find(|l| l["message"] == "runner ended")
        .unwrap();
    assert_eq!(ended["task"], "t1", "{ended}");
    assert_eq!(ended["state"], "done", "{ended}");
    assert_eq!(ended["bytes"], payload.len() as u64, "{ended}");
    let submitted = lines
        .iter()
        .find(|l| l["message"] == "request done" && l["op"] == "submit")
        .unwrap_or_else(|| panic!("no submit: {lines:?}"));
    assert_eq!(submitted["task"], "t1", "{submitted}");
}
