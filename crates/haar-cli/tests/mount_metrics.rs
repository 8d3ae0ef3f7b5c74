//! `haar mount --metrics` and `--log-format json` on a real FUSE mount (docs/operations.md):
//! writes, reads and a failed lookup through the mount move the operation, byte and errno
//! counters; a store on a full tmpfs counts ENOSPC, shows `haar_mount_storage_full` 1 and logs
//! the full storage once, as a JSON object naming the errno and the caller, and 0 again once
//! space is freed. Needs /dev/fuse and root (as tests/mount.rs); skipped without them.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/metrics.rs"]
mod metrics;
#[path = "common/small_fs.rs"]
mod small_fs;
use metrics::value;
use small_fs::SmallFs;

const HAAR: &str = env!("CARGO_BIN_EXE_haar");

/// Taken by every test here: one test's fork and exec of a child (a mount, `mount -t tmpfs`)
/// closes, in that child, the descriptors another test holds open on its mount, and each such
/// close is a FUSE flush, a durability barrier. A barrier that succeeds (the file's record
/// fits in the last bytes of a full tmpfs) rightly ends the full state, so the full-storage
/// test could see `haar_mount_storage_full` 0 right after its ENOSPC (CI, stop 32).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running `haar … mount --metrics 127.0.0.1:0 --log-format json MNT`, unmounted on drop.
struct Mounted {
    child: Option<Child>,
    mnt: PathBuf,
    log: PathBuf,
    metrics: String,
}

impl Mounted {
    /// `haar GLOBAL mount …` on `mnt`; `None` (skipped) without /dev/fuse or root.
    fn spawn(global: &[&std::ffi::OsStr], mnt: &Path) -> Option<Mounted> {
        if !can_mount() {
            return None;
        }
        fs::create_dir_all(mnt).unwrap();
        let log = mnt.with_extension("log");
        let mut child = Command::new(HAAR)
            .args(global)
            .env_remove("HAAR_CONFIG")
            .env_remove("HAAR_LOG")
            .args(["mount", "--metrics", "127.0.0.1:0", "--log-format", "json"])
            .arg(mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("run haar mount");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut lines = ["", ""].map(|_| {
            let mut l = String::new();
            out.read_line(&mut l).unwrap();
            l.trim_end().to_string()
        });
        let mut m = Mounted {
            child: Some(child),
            mnt: mnt.into(),
            log,
            metrics: String::new(),
        };
        assert_eq!(
            lines[0],
            format!("mounted {}", mnt.display()),
            "{}",
            fs::read_to_string(&m.log).unwrap_or_default()
        );
        m.metrics = std::mem::take(&mut lines[1])
            .strip_prefix("metrics on ")
            .unwrap_or_else(|| panic!("no metrics line: {lines:?}"))
            .to_string();
        Some(m)
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

/// Whether this process can mount FUSE file systems (/dev/fuse, root); says so when not.
fn can_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    if !Path::new("/dev/fuse").exists() || unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("HAAR_REQUIRE_ROOT_TESTS").is_none(),
            "no /dev/fuse or not root, and HAAR_REQUIRE_ROOT_TESTS is set"
        );
        eprintln!("skipped: haar mount tests need /dev/fuse and root");
        return false;
    }
    true
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        if let Some(mut c) = self.child.take() {
            let t = Instant::now();
            while c.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn the_mount_counts_operations_bytes_and_errnos() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let Some(m) = Mounted::spawn(
        &[
            "--backend".as_ref(),
            "posix".as_ref(),
            "--root".as_ref(),
            root.as_os_str(),
        ],
        &dir.path().join("mnt"),
    ) else {
        return;
    };
    let before = metrics::scrape(&m.metrics);
    assert_eq!(value(&before, r#"haar_mount_bytes_total{op="write"}"#), 0.0);

    let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    fs::write(m.p("a.bin"), &payload).unwrap();
    assert!(fs::read(m.p("a.bin")).unwrap() == payload);
    assert!(!m.p("not-there").exists());
    fs::create_dir(m.p("d")).unwrap();

    let after = metrics::scrape(&m.metrics);
    let v = |s: &str| value(&after, s);
    assert_eq!(
        v(r#"haar_mount_bytes_total{op="write"}"#),
        payload.len() as f64
    );
    assert!(v(r#"haar_mount_bytes_total{op="read"}"#) >= payload.len() as f64);
    assert!(v(r#"haar_mount_operations_total{op="write"}"#) >= 1.0);
    assert!(v(r#"haar_mount_operations_total{op="create"}"#) >= 1.0);
    assert_eq!(v(r#"haar_mount_operations_total{op="mkdir"}"#), 1.0);
    assert!(v(r#"haar_mount_errors_total{op="lookup",errno="ENOENT"}"#) >= 1.0);
    assert!(
        v(r#"haar_mount_operation_duration_seconds_count{op="write"}"#)
            == v(r#"haar_mount_operations_total{op="write"}"#)
    );
    assert_eq!(v("haar_mount_storage_full"), 0.0);
    assert_eq!(
        value(&after, r#"haar_mount_errors_total{op="write",errno="EIO"}"#),
        0.0
    );
}

/// Full storage (issue 27) as an operator sees it: ENOSPC counted, the full state shown, and
/// one warning with its cause until a barrier finds room again.
#[test]
fn a_full_store_is_counted_shown_and_logged_once() {
    let _serial = serial();
    let Some(small) = SmallFs::mount("8m") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = small.path().join("store");
    let filler = small.path().join("filler");
    fs::write(&filler, vec![1u8; 1 << 20]).unwrap();
    let Some(m) = Mounted::spawn(
        &[
            "--backend".as_ref(),
            "posix".as_ref(),
            "--root".as_ref(),
            root.as_os_str(),
        ],
        &dir.path().join("mnt"),
    ) else {
        return;
    };
    let chunk = vec![2u8; 1 << 20];
    let mut f = fs::File::create(m.p("big")).unwrap();
    let mut failed = None;
    for _ in 0..16 {
        if let Err(e) = f.write_all(&chunk) {
            failed = Some(e);
            break;
        }
    }
    let failed = failed
        .or_else(|| f.sync_all().err())
        .expect("16 MiB fitted in 8");
    assert_eq!(failed.raw_os_error(), Some(libc::ENOSPC), "{failed}");
    // Full until a barrier succeeds again: the writes refused meanwhile are counted each.
    let full = metrics::scrape(&m.metrics);
    drop(f);
    let sum = |errno: &str| -> (f64, Vec<String>) {
        let series: Vec<_> = (full.iter())
            .filter(|(k, _)| k.starts_with("haar_mount_errors_total{") && k.contains(errno))
            .collect();
        let lines = series.iter().map(|(k, v)| format!("{k} {v}")).collect();
        (series.iter().map(|(_, v)| **v).sum(), lines)
    };
    assert_eq!(value(&full, "haar_mount_storage_full"), 1.0);
    let (enospc, lines) = sum(r#"errno="ENOSPC""#);
    assert!(enospc >= 1.0, "{lines:?}");
    let (eio, lines) = sum(r#"errno="EIO""#);
    assert_eq!(eio, 0.0, "{lines:?}");

    // Space freed (the file that filled it, through the mount, and outside): the next barrier
    // finds room, and the state says so.
    fs::remove_file(m.p("big")).unwrap();
    fs::remove_file(&filler).unwrap();
    fs::write(m.p("after"), b"room again").unwrap();
    let lines = metrics::json_log_until(&m.log, |lines| {
        lines
            .iter()
            .any(|l| (l["message"].as_str().unwrap_or("")).starts_with("the store has room again"))
    });
    metrics::scrape_until(&m.metrics, "room again", |m| {
        value(m, "haar_mount_storage_full") == 0.0
    });
    let full_lines: Vec<_> = (lines.iter())
        .filter(|l| (l["message"].as_str().unwrap_or("")).contains("storage is full"))
        .collect();
    assert_eq!(full_lines.len(), 1, "said once: {lines:?}");
    let l = full_lines[0];
    assert_eq!(l["level"], "WARN", "{l}");
    assert_eq!(l["errno"], "ENOSPC", "{l}");
    assert!(l["cause"].is_string(), "{l}");
    assert!(
        l["op"].is_string() && l["pid"].is_u64() && l["uid"] == 0,
        "{l}"
    );
}

/// `haar mount --daemon --metrics`: the command returns after both lines, and the mount it
/// left serves its metrics.
#[test]
fn mount_daemon_passes_the_metrics_line_on() {
    let _serial = serial();
    if !can_mount() {
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let out = Command::new(HAAR)
        .args(["--backend", "posix", "--root"])
        .arg(dir.path().join("store"))
        .args(["mount", "--daemon", "--metrics", "127.0.0.1:0"])
        .arg(&mnt)
        .env_remove("HAAR_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _guard = Unmount(mnt.clone());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], format!("mounted {}", mnt.display()));
    let addr = lines[1].strip_prefix("metrics on ").expect(&text);
    fs::write(mnt.join("x"), b"12345").unwrap();
    metrics::scrape_until(addr, "the write", |m| {
        value(m, r#"haar_mount_bytes_total{op="write"}"#) == 5.0
    });
}
