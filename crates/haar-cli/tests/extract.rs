//! `haar extract` as a user runs it: archive real ERA5 GRIB, extract ranges and points with
//! `--json`, compare with ecCodes (`grib_get_data`, printed exactly) for the same field.

use std::path::Path;
use std::process::Command;

fn haar(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_haar"))
        .arg("--root")
        .arg(root)
        .args(args)
        .env_remove("HAAR_CONFIG")
        .env_remove("FDB5_CONFIG")
        .env_remove("FDB5_CONFIG_FILE")
        .output()
        .unwrap()
}

#[test]
fn extract_json_matches_eccodes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let grib = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python/tests/data/era5-levels-members.grib");
    let out = haar(&root, &["archive", grib.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The first message of the file is this field.
    let req = "class=ea,date=20170101,time=0,number=0,levelist=500,param=129";
    let bytes = std::fs::read(&grib).unwrap();
    let len = u32::from_be_bytes([0, bytes[4], bytes[5], bytes[6]]) as usize;
    let one = dir.path().join("one.grib");
    std::fs::write(&one, &bytes[..len]).unwrap();
    let data = Command::new("grib_get_data")
        .args(["-F", "%.17g"])
        .arg(&one)
        .output()
        .unwrap();
    let want: Vec<f64> = String::from_utf8(data.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();

    let out = haar(
        &root,
        &["extract", req, "--ranges", "0-3,7317-7320,100", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["method"], "jump");
    assert!(v["key"].as_str().unwrap().contains("param=129"));
    let got: Vec<Vec<f64>> = serde_json::from_value(v["values"].clone()).unwrap();
    assert_eq!(got[0], want[0..3]);
    assert_eq!(got[1], want[7317..7320]);
    assert_eq!(got[2], want[100..101]);

    // Points: the 3-degree grid's first point and the last one.
    let out = haar(
        &root,
        &["extract", req, "--points", "90,0,-90,357", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
    assert_eq!(v["ranges"], serde_json::json!([[0, 1], [7319, 7320]]));

    // A range beyond the field: an error naming it, exit status not 0.
    let out = haar(&root, &["extract", req, "--ranges", "0-7321"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("7321") && err.contains("param=129"), "{err}");
    // Neither --ranges nor --points: a usage error.
    assert!(!haar(&root, &["extract", req]).status.success());
}
