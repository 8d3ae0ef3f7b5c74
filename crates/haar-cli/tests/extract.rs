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

/// `--points` on a reduced Gaussian grid (ecCodes' N320 sample, 542,080 points): each point
/// resolves to the grid point nearest to it on the sphere by `grib_get_data`'s own coordinates,
/// and the value printed is ecCodes' value there.
#[test]
fn points_on_a_reduced_gaussian_grid_are_the_nearest_grid_points() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let grib = dir.path().join("n320.grib");
    let set = Command::new("grib_set")
        .args([
            "-s",
            "class=od,stream=oper,type=fc,expver=0001,date=20261128,time=0000,step=6,levtype=sfc,paramId=167",
            "/usr/share/eccodes/samples/reduced_gg_pl_320_grib2.tmpl",
        ])
        .arg(&grib)
        .status()
        .unwrap();
    assert!(set.success());
    let out = haar(&root, &["archive", grib.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = Command::new("grib_get_data")
        .args(["-F", "%.17g"])
        .arg(&grib)
        .output()
        .unwrap();
    let grid: Vec<[f64; 3]> = String::from_utf8(data.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let mut f = l.split_whitespace().map(|x| x.parse::<f64>().unwrap());
            [f.next().unwrap(), f.next().unwrap(), f.next().unwrap()]
        })
        .collect();
    assert_eq!(grid.len(), 542_080);
    let angle = |lat1: f64, lon1: f64, lat2: f64, lon2: f64| {
        let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
        let h = ((p2 - p1) / 2.0).sin().powi(2)
            + p1.cos() * p2.cos() * ((lon2 - lon1).to_radians() / 2.0).sin().powi(2);
        2.0 * h.sqrt().min(1.0).asin()
    };
    let points = [
        (45.3, 10.2),
        (-33.0, 200.0),
        (89.9, -170.0),
        (0.1, 359.9),
        (-60.5, -0.3),
    ];
    let arg: Vec<String> = points.iter().map(|(a, b)| format!("{a},{b}")).collect();
    let req = "class=od,date=20261128,time=0000,step=6,param=167";
    let out = haar(
        &root,
        &["extract", req, "--points", &arg.join(","), "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
    let ranges: Vec<(usize, usize)> = serde_json::from_value(v["ranges"].clone()).unwrap();
    let values: Vec<Vec<f64>> = serde_json::from_value(v["values"].clone()).unwrap();
    for (k, &(lat, lon)) in points.iter().enumerate() {
        let i = ranges[k].0;
        assert_eq!(ranges[k].1, i + 1);
        let best = (grid.iter())
            .map(|g| angle(lat, lon, g[0], g[1]))
            .fold(f64::INFINITY, f64::min);
        let got = angle(lat, lon, grid[i][0], grid[i][1]);
        assert!(
            got <= best + 1e-9,
            "({lat}, {lon}): index {i} is {got} away, the nearest {best}"
        );
        assert_eq!(values[k], [grid[i][2]], "value at {i}");
    }
}
