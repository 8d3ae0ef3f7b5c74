//! `haar bench --scale` as a user runs it, end to end and small: two sizes (one and two
//! member-steps) of tiny fields, one timed run each,
//! haar's worker and FDB5's (where PyPI's fdb5lib wheel is installed), one-off `haar list`,
//! `haar retrieve`, `fdb-list` and `fdb-read` processes; the JSON must hold every column for
//! both stores at every size, with the Markdown report and the plot beside it, and the run
//! must leave no store behind. Timings are printed and saved, never asserted.

mod common;

use std::path::Path;

use common::{haar, haar_ok};
use serde_json::Value;

/// Set to `1` (as `make unit` does) to make a missing FDB5 wheel a failure instead of a skip.
const REQUIRE_WHEEL: &str = "HAAR_REQUIRE_FDB5_WHEEL";

fn wheel_installed() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import fdb5lib"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The columns every store has at every size (haar_bench::scale::COLUMNS).
const COLUMNS: [&str; 11] = [
    "archive_fields_per_s",
    "archive_seconds",
    "open_ms",
    "list_ms",
    "retrieve_ms",
    "list_cli_ms",
    "list_cli_rss_mb",
    "retrieve_cli_ms",
    "retrieve_cli_rss_mb",
    "store_mb",
    "listed",
];

fn check_side(row: &Value, side: &str) {
    let s = &row[side];
    assert!(
        s.is_object(),
        "no {side} figures at {}: {row}",
        row["fields"]
    );
    for c in COLUMNS {
        let v = s[c]
            .as_f64()
            .unwrap_or_else(|| panic!("{side}.{c} missing at {}: {s}", row["fields"]));
        assert!(v.is_finite() && v > 0.0, "{side}.{c} = {v}");
    }
    assert_eq!(s["listed"], 1644, "{side} listed one member-step");
    assert_eq!(s["runs"]["retrieve_cli_ms"].as_array().unwrap().len(), 1);
}

#[test]
fn scale_mode_measures_both_stores_at_every_size_and_saves_json_markdown_and_plot() {
    let root = tempfile::tempdir_in("/dev/shm").unwrap();
    let out = tempfile::tempdir().unwrap();
    let stdout = haar_ok([
        "bench".as_ref(),
        "--scale".as_ref(),
        "--sizes".as_ref(),
        "1000,3000".as_ref(),
        "--field-bytes".as_ref(),
        "32".as_ref(),
        "--runs".as_ref(),
        "1".as_ref(),
        "--root".as_ref(),
        root.path().as_os_str(),
        "--out".as_ref(),
        out.path().as_os_str(),
        "--quiet".as_ref(),
    ]);
    print!("{stdout}");
    assert!(
        stdout.contains("| fields | store | archive fields/s"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| target | haar | FDB5 (same run) | verdict |"),
        "{stdout}"
    );
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("scale.json")).unwrap())
            .unwrap();
    let rows = r["sizes"].as_array().unwrap();
    // Rounded up to whole member-steps of 1,644 fields.
    let fields: Vec<u64> = rows.iter().map(|x| x["fields"].as_u64().unwrap()).collect();
    assert_eq!(fields, [1644, 3288]);
    let fdb5 = if r["fdb5"]["version"].is_string() {
        assert!(r["fdb5"]["version"].as_str().unwrap().starts_with("5."));
        true
    } else {
        let why = r["fdb5"]["skipped"].as_str().unwrap_or("").to_string();
        assert!(
            !why.is_empty(),
            "FDB5 neither run nor skipped: {}",
            r["fdb5"]
        );
        assert!(
            !wheel_installed(),
            "the fdb5lib wheel is installed but FDB5 was skipped: {why}"
        );
        assert!(
            std::env::var(REQUIRE_WHEEL).as_deref() != Ok("1"),
            "{why} ({REQUIRE_WHEEL}=1)"
        );
        eprintln!("SKIPPED (FDB5 part): {why}");
        false
    };
    for row in rows {
        check_side(row, "haar");
        if fdb5 {
            check_side(row, "fdb5");
        } else {
            assert!(row["fdb5"].is_null());
        }
    }
    let verdicts = r["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 13, "{verdicts:?}");
    assert!(
        verdicts
            .iter()
            .all(|v| ["PASS", "FAIL", "n/a"].contains(&v["verdict"].as_str().unwrap()))
    );
    let md = std::fs::read_to_string(out.path().join("benchmarks-scale.md")).unwrap();
    assert!(md.contains("![cost against size](scale.png)"), "{md}");
    assert_eq!(
        &std::fs::read(out.path().join("scale.png")).unwrap()[1..4],
        b"PNG"
    );
    assert!(empty(root.path()), "the run's stores were left behind");
}

#[test]
fn scale_mode_runs_on_the_posix_backend_too() {
    let root = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("posix.json");
    let stdout = haar_ok([
        "bench".as_ref(),
        "--scale".as_ref(),
        "--backend".as_ref(),
        "posix".as_ref(),
        "--sizes".as_ref(),
        "1000,3000".as_ref(),
        "--field-bytes".as_ref(),
        "16".as_ref(),
        "--runs".as_ref(),
        "1".as_ref(),
        "--no-fdb5".as_ref(),
        "--root".as_ref(),
        root.path().as_os_str(),
        "--out".as_ref(),
        out.path().as_os_str(),
        "--json".as_ref(),
        json.as_os_str(),
        "--quiet".as_ref(),
    ]);
    assert!(stdout.contains("FDB5 not run: --no-fdb5 given"), "{stdout}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["backend"], "posix");
    assert!(
        r["haar"].as_str().unwrap().contains("posix"),
        "{}",
        r["haar"]
    );
    for row in r["sizes"].as_array().unwrap() {
        check_side(row, "haar");
        assert!(row["fdb5"].is_null());
    }
    assert!(
        !out.path().join("scale.json").exists(),
        "--json names the file"
    );
    assert!(out.path().join("scale.png").exists());
    assert!(empty(root.path()));
}

fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn scale_mode_refuses_bad_parameters_before_starting() {
    for (args, why) in [
        (
            vec!["bench", "--scale", "--sizes", "5000,2000"],
            "ascending",
        ),
        (vec!["bench", "--scale", "--sizes", "1e5x"], "not a number"),
        (
            vec!["bench", "--scale", "--field-bytes", "8"],
            "at least 16",
        ),
        (
            vec!["bench", "--scale", "--backend", "memory"],
            "invalid value",
        ),
        (vec!["bench", "--sizes", "1e5"], "--scale"),
        (vec!["bench", "--scale", "--quick"], "cannot be used with"),
    ] {
        let o = haar(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}
