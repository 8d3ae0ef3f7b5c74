//! Shared helpers for the CLI's end-to-end tests: real GRIB test data, running the `haar`
//! binary and the ecCodes / FDB5 tools as separate processes, and the oracles the tests compare
//! with (`grib_ls -m -j` keys, `fdb-list` lines).
//!
//! Every check here goes through a path that does not share code with what it checks where it
//! can: keys come from ecCodes' own `grib_ls`, message counts from `grib_count`, FDB5's view
//! from its own tools.

#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// One message's keys, keyword → value (order-free).
pub type Keys = BTreeMap<String, String>;

/// `<repo>/crates/haar-cli`.
pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `$HAAR_TESTDATA/grib` (default `<repo>/.testdata/grib`), fetched by haar-grib's
/// `tests/fetch-testdata.sh` if missing. Tests fail (never pass) without the data.
pub fn testdata() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = std::env::var_os("HAAR_TESTDATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest_dir().join("../../.testdata"));
        let script = manifest_dir().join("../haar-grib/tests/fetch-testdata.sh");
        // Idempotent: returns at once when the data is there.
        let out = Command::new("bash")
            .arg(&script)
            .env("HAAR_TESTDATA", &root)
            .output()
            .expect("run bash");
        assert!(
            out.status.success(),
            "real GRIB test data missing and fetching it failed; run `bash {}` \
             (needs pip and network access to PyPI):\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        root.join("grib")
    })
}

/// A file of the fetched test data: `data("cfgrib/era5-levels-members.grib")`.
pub fn data(rel: &str) -> PathBuf {
    let p = testdata().join(rel);
    assert!(p.is_file(), "{} missing from the test data", p.display());
    p
}

/// Every fetched GRIB file plus ecCodes' GRIB samples, sorted.
pub fn all_real_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for pkg in ["cfgrib", "earthkit-data"] {
        let dir = testdata().join(pkg);
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            files.push(e.unwrap().path());
        }
    }
    files.extend(eccodes_samples());
    files.sort();
    files
}

/// ecCodes' GRIB samples (`/usr/share/eccodes/samples`).
pub fn eccodes_samples() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir("/usr/share/eccodes/samples")
        .expect("ecCodes samples installed (Debian libeccodes-data)")
    {
        let p = e.unwrap().path();
        let name = file_name(&p);
        if name.contains("grib") || name.starts_with("GRIB") {
            files.push(p);
        }
    }
    files.sort();
    files
}

pub fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// The `haar` binary under test.
pub fn haar_bin() -> &'static str {
    env!("CARGO_BIN_EXE_haar")
}

/// Runs `haar ARGS` with `HAAR_CONFIG` and FDB5's configuration variables cleared (so a
/// developer's configuration never leaks in).
pub fn haar<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(haar_bin())
        .args(args)
        .env_remove("HAAR_CONFIG")
        .env_remove("FDB5_CONFIG")
        .env_remove("FDB5_CONFIG_FILE")
        .env_remove("FDB_HOME")
        .output()
        .expect("run haar")
}

/// Runs `haar --root ROOT --backend BACKEND ARGS` (a local store), as [`haar`] does.
pub fn haar_at(root: &Path, backend: &str, args: &[&str]) -> Output {
    let mut all: Vec<&OsStr> = vec![
        OsStr::new("--root"),
        root.as_os_str(),
        OsStr::new("--backend"),
        OsStr::new(backend),
    ];
    all.extend(args.iter().map(OsStr::new));
    haar(all)
}

/// Runs `haar ARGS` and panics with its stderr unless it succeeds; returns stdout.
pub fn haar_ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let out = haar(&args);
    assert!(
        out.status.success(),
        "haar {:?} failed ({}):\n{}",
        args,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs an external tool, panicking with a hint to install it if it cannot start.
pub fn tool(cmd: &str, args: &[&OsStr], hint: &str) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd} ({hint}): {e}"))
}

/// `grib_count FILE`.
pub fn grib_count(file: &Path) -> usize {
    let out = tool("grib_count", &[file.as_os_str()], "Debian libeccodes-tools");
    assert!(
        out.status.success(),
        "grib_count {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("grib_count prints a number")
}

/// The MARS keys of every message of `file` as ecCodes' `grib_ls -m -j` prints them, after
/// FDB5's documented normalisation (keys beginning `_` skipped, `param` := `paramId` as
/// `grib_get -p paramId` prints it, whole-number `levelist` as an integer, `expver` left-padded
/// to 4 characters).
pub fn grib_ls_keys(file: &Path) -> Vec<Keys> {
    let out = tool(
        "grib_ls",
        &[OsStr::new("-m"), OsStr::new("-j"), file.as_os_str()],
        "Debian libeccodes-tools",
    );
    assert!(out.status.success(), "grib_ls -m -j {}", file.display());
    // grib_ls writes raw control characters into JSON strings.
    let text: String = String::from_utf8_lossy(&out.stdout)
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                format!("\\u{:04x}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect();
    let v: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: grib_ls JSON: {e}", file.display()));
    let pids = tool(
        "grib_get",
        &[
            OsStr::new("-f"),
            OsStr::new("-p"),
            OsStr::new("paramId"),
            file.as_os_str(),
        ],
        "Debian libeccodes-tools",
    );
    let pids = String::from_utf8_lossy(&pids.stdout).into_owned();
    let pids: Vec<&str> = pids.lines().map(str::trim).collect();
    v["messages"]
        .as_array()
        .expect("messages array")
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut keys = Keys::new();
            for (k, v) in m.as_object().unwrap() {
                if k.starts_with('_') {
                    continue;
                }
                let text = match v {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Number(n) => n.to_string(),
                    other => other.to_string(),
                };
                let text = match k.as_str() {
                    "expver" => format!("{:0>4}", text.trim()),
                    "levelist" => match text.parse::<f64>() {
                        Ok(f) if f.fract() == 0.0 => format!("{}", f as i64),
                        _ => text,
                    },
                    _ => text,
                };
                keys.insert(k.clone(), text);
            }
            if let Some(pid) = pids.get(i).filter(|p| !p.is_empty() && **p != "not_found") {
                keys.insert("param".into(), pid.to_string());
            }
            keys
        })
        .collect()
}

/// Splits GRIB bytes into messages (haar-grib's framer; the tests cross-check its count with
/// `grib_count`).
pub fn split_messages(bytes: &[u8]) -> Vec<Vec<u8>> {
    haar_grib::messages(bytes)
        .map(|m| m.expect("well-framed GRIB").bytes.to_vec())
        .collect()
}

/// A multiset of messages (sorted copies), for order-free comparison.
pub fn multiset(mut msgs: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    msgs.sort();
    msgs
}

/// One `fdb-list` line `{k=v,...}{k=v,...}{k=v,...}` (possibly followed by a location) as its
/// three levels, each in printed order.
pub fn parse_fdb_line(line: &str) -> Option<[Vec<(String, String)>; 3]> {
    let mut levels: Vec<Vec<(String, String)>> = Vec::new();
    let mut rest = line.trim();
    for _ in 0..3 {
        rest = rest.strip_prefix('{')?;
        let end = rest.find('}')?;
        let body = &rest[..end];
        rest = &rest[end + 1..];
        let level = if body.is_empty() {
            Vec::new()
        } else {
            body.split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_string(), v.to_string()))
                })
                .collect::<Option<Vec<_>>>()?
        };
        levels.push(level);
    }
    levels.try_into().ok()
}

/// The full key of an `fdb-list` line.
pub fn fdb_line_keys(line: &str) -> Keys {
    let levels = parse_fdb_line(line).unwrap_or_else(|| panic!("not an fdb-list line: {line:?}"));
    levels.into_iter().flatten().collect()
}

/// Median-free wall-clock timer for the figures the tests print.
pub struct Timer(std::time::Instant, &'static str);

impl Timer {
    pub fn start(what: &'static str) -> Timer {
        Timer(std::time::Instant::now(), what)
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        eprintln!(
            "timing: {} took {:.2} s",
            self.1,
            self.0.elapsed().as_secs_f64()
        );
    }
}
