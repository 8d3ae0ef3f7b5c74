//! The jump record against ecCodes: every value extracted at index ranges equals ecCodes'
//! whole-field decode of the same message, bit for bit (NaN where the bitmap says missing), on
//! every real GRIB message the other tests use (cfgrib and earthkit-data sample data, ecCodes'
//! samples: simple packing with and without bitmap in GRIB1 and GRIB2, CCSDS, complex,
//! spectral) and on synthetic fields; and a range reads only the bytes that hold its values.

use std::borrow::Cow;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;

use haar_grib::jump::{self, ByteSource, JumpError, JumpInfo, Method};

fn testdata() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = std::env::var_os("HAAR_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../.testdata"));
    let out = Command::new("bash")
        .arg(manifest.join("tests/fetch-testdata.sh"))
        .env("HAAR_TESTDATA", &root)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "real GRIB test data missing and fetching it failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    root.join("grib")
}

fn real_messages() -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for pkg in ["cfgrib", "earthkit-data"] {
        for e in std::fs::read_dir(testdata().join(pkg)).unwrap() {
            files.push(e.unwrap().path());
        }
    }
    for e in std::fs::read_dir("/usr/share/eccodes/samples").unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().contains("grib") {
            files.push(p);
        }
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        for m in haar_grib::messages(&bytes).flatten() {
            out.push((format!("{}#{}", f.display(), m.index), m.bytes.to_vec()));
        }
    }
    out
}

fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// Ranges spread over a field of `n` points: the start, the end, single points, empty ones,
/// block boundaries of the bitmap summary.
fn ranges_for(n: u64) -> Vec<(u64, u64)> {
    let mut r = vec![(0, n.min(7)), (n / 2, n / 2), (n.saturating_sub(5), n)];
    for k in [1, 3, 4095, 4096, 4097, 9000, 70_001] {
        if k < n {
            r.push((k, (k + 13).min(n)));
            r.push((k - 1, k));
        }
    }
    r.push((0, n));
    r
}

#[test]
fn every_real_message_extracts_what_eccodes_decodes() {
    let msgs = real_messages();
    assert!(msgs.len() > 1000, "only {} real messages", msgs.len());
    let (mut jumped, mut jumped_bitmap, mut whole) = (0, 0, 0);
    for (name, msg) in &msgs {
        let Ok(all) = jump::decode_values(msg) else {
            continue; // ecCodes cannot decode it either (no values).
        };
        let n = all.len() as u64;
        let ranges = ranges_for(n);
        let (got, method) =
            jump::extract_from_message(msg, &ranges).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (&(i, j), v) in ranges.iter().zip(&got) {
            assert!(
                same(v, &all[i as usize..j as usize]),
                "{name}: range [{i}, {j}) differs from ecCodes ({method:?})"
            );
        }
        match method {
            Method::Jump => {
                jumped += 1;
                let info = JumpInfo::parse(&msg[..]).unwrap();
                jumped_bitmap += usize::from(info.bitmap.is_some());
                assert_eq!(info.points, n, "{name}");
                // The record survives its bytes.
                assert_eq!(
                    JumpInfo::from_bytes(&info.to_bytes()).unwrap(),
                    info,
                    "{name}"
                );
            }
            Method::WholeField => whole += 1,
        }
    }
    // grib_ls: 1,042 grid_simple without bitmap, 95 with, 12 other packings.
    assert!(jumped > 1000, "{jumped} by jump");
    assert!(jumped_bitmap >= 90, "{jumped_bitmap} by jump with a bitmap");
    assert!(whole >= 10, "{whole} by ecCodes");
}

/// Counts the bytes read through it.
struct Counting<'a> {
    msg: &'a [u8],
    read: RefCell<Vec<(u64, usize)>>,
}

impl ByteSource for Counting<'_> {
    fn len(&self) -> u64 {
        self.msg.len() as u64
    }
    fn bytes_at(&self, off: u64, len: usize) -> Result<Cow<'_, [u8]>, JumpError> {
        self.read.borrow_mut().push((off, len));
        self.msg.bytes_at(off, len)
    }
}

#[test]
fn a_range_reads_only_its_bytes() {
    let n = 100_000usize;
    for missing in [false, true] {
        let values: Vec<f64> = (0..n)
            .map(|i| {
                if missing && i % 7 == 3 {
                    f64::NAN
                } else {
                    (i as f64 * 0.37).sin() * 40.0 + 250.0
                }
            })
            .collect();
        for sample in ["regular_ll_sfc_grib2", "regular_ll_sfc_grib1"] {
            let msg = jump::tests_support::field(sample, &values, 16, 1000, 100);
            let info = JumpInfo::parse(&msg[..]).unwrap();
            assert_eq!(info.method, Method::Jump);
            assert_eq!(info.bitmap.is_some(), missing);
            let all = jump::decode_values(&msg).unwrap();
            let src = Counting {
                msg: &msg,
                read: RefCell::default(),
            };
            let ranges = [(50_000, 50_010), (99_990, 100_000), (5, 6)];
            let got = info.extract(&src, &ranges).unwrap();
            for (&(i, j), v) in ranges.iter().zip(&got) {
                assert!(same(v, &all[i as usize..j as usize]), "{sample} [{i},{j})");
                for (k, x) in v.iter().enumerate() {
                    assert_eq!(x.is_nan(), values[i as usize + k].is_nan());
                }
            }
            let total: usize = src.read.borrow().iter().map(|r| r.1).sum();
            // Packed: 2 bytes a value; bitmap: at most one 512-byte block before each range.
            assert!(
                total < 3 * (512 + 2 * 10 + 2),
                "{sample}: {total} bytes read for 21 values: {:?}",
                src.read.borrow()
            );
        }
    }
}

#[test]
fn synthetic_fields_match_eccodes_at_every_width() {
    for bits in [0, 1, 7, 8, 12, 16, 24, 31, 32] {
        let values: Vec<f64> = (0..5000)
            .map(|i| {
                if i % 11 == 0 {
                    f64::NAN
                } else {
                    -3.5 + (i % 97) as f64 * 0.125
                }
            })
            .collect();
        let values = if bits == 0 {
            vec![273.15; 5000]
        } else {
            values
        };
        let msg = jump::tests_support::field("regular_ll_sfc_grib2", &values, bits, 100, 50);
        let all = jump::decode_values(&msg).unwrap();
        let ranges = ranges_for(5000);
        let (got, method) = jump::extract_from_message(&msg, &ranges).unwrap();
        assert_eq!(method, Method::Jump, "bits {bits}");
        for (&(i, j), v) in ranges.iter().zip(&got) {
            assert!(
                same(v, &all[i as usize..j as usize]),
                "bits {bits} [{i},{j})"
            );
        }
    }
}

#[test]
fn out_of_range_and_damaged_records_are_refused() {
    let msg = jump::tests_support::simple_field(&[1.0, 2.0, 3.0], 16);
    let info = JumpInfo::parse(&msg[..]).unwrap();
    assert!(matches!(
        info.extract(&msg[..], &[(2, 4)]),
        Err(JumpError::OutOfRange { points: 3, .. })
    ));
    assert!(matches!(
        jump::extract_from_message(&msg, &[(3, 2)]),
        Err(JumpError::OutOfRange { .. })
    ));
    let mut rec = info.to_bytes();
    rec[20] ^= 1;
    assert!(matches!(
        JumpInfo::from_bytes(&rec),
        Err(JumpError::Record(_))
    ));
    assert!(JumpInfo::parse(&b"GRIB\0\0\0\x02"[..]).is_err());
}

#[test]
fn nearest_point_on_a_regular_grid() {
    // The synthetic global 1-degree-ish grid: 90N..90S, 0..360-dx.
    let mut out = Vec::new();
    let spec = haar_grib::EnsembleSpec {
        grid: haar_grib::Grid::RegularLatLon { ni: 360, nj: 181 },
        members: 1,
        steps: vec![0],
        levels: vec![],
        params: vec![167],
        ..haar_grib::EnsembleSpec::tiny()
    };
    haar_grib::generate(&spec, &mut out).unwrap();
    let info = JumpInfo::parse(&out[..]).unwrap();
    let g = info.grid.expect("regular lat/lon geometry");
    assert_eq!(g.nearest(90.0, 0.0), Some(0));
    assert_eq!(g.nearest(89.0, 1.2), Some(361));
    assert_eq!(g.nearest(-90.0, 359.0), Some(180 * 360 + 359));
    assert_eq!(g.nearest(0.0, -1.0), Some(90 * 360 + 359));
    assert_eq!(g.nearest(0.0, 359.7), Some(90 * 360));
}

/// Angle between two points on the unit sphere (radians), as the tests' own nearest oracle.
fn angle(lat1: f64, lon1: f64, lat2: f64, lon2: f64) -> f64 {
    let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
    let h = ((p2 - p1) / 2.0).sin().powi(2)
        + p1.cos() * p2.cos() * ((lon2 - lon1).to_radians() / 2.0).sin().powi(2);
    2.0 * h.sqrt().min(1.0).asin()
}

/// Issue 29: `--points` on Gaussian grids. On synthetic octahedral O32, O320 and O1280 fields
/// (GRIB2 and GRIB1), on ecCodes' classic reduced N48 and its regular Gaussian sample, the
/// index found for scattered points (and for the poles, the equator and the date line) is a
/// grid point at the least distance of any point of the field, by ecCodes' own coordinates
/// and a brute-force search; the extracted value there is ecCodes' value; the record keeps
/// the geometry through its bytes.
#[test]
fn nearest_point_on_gaussian_grids_is_the_nearest_grid_point() {
    use haar_grib::jump::{Geometry, tests_support};
    let value = |i: usize| (i % 997) as f64;
    let cases: Vec<(&str, Vec<u8>, usize)> = vec![
        (
            "O32 GRIB2",
            tests_support::octahedral("reduced_gg_pl_32_grib2", 32, value),
            300,
        ),
        (
            "O32 GRIB1",
            tests_support::octahedral("reduced_gg_pl_32_grib1", 32, value),
            300,
        ),
        (
            "O320 GRIB2",
            tests_support::octahedral("reduced_gg_pl_320_grib2", 320, value),
            60,
        ),
        (
            "O320 GRIB1",
            tests_support::octahedral("reduced_gg_pl_320_grib1", 320, value),
            30,
        ),
        (
            "O1280 GRIB2",
            tests_support::octahedral("reduced_gg_pl_1280_grib2", 1280, value),
            8,
        ),
        ("N48 GRIB2", sample("reduced_gg_pl_48_grib2"), 200),
        ("regular Gaussian GRIB2", sample("gg_sfc_grib2"), 200),
    ];
    let mut seed = 0x2545f4914f6cdd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    for (name, msg, scattered) in cases {
        let info = JumpInfo::parse(&msg[..]).unwrap();
        let Some(Geometry::Gaussian(g)) = &info.grid else {
            panic!("{name}: no Gaussian geometry: {:?}", info.grid);
        };
        let again = JumpInfo::from_bytes(&info.to_bytes()).unwrap();
        assert_eq!(again, info, "{name}: the record keeps the geometry");
        assert_eq!(
            g.pl.iter().map(|&p| u64::from(p)).sum::<u64>(),
            info.points,
            "{name}"
        );
        let (lats, lons) = tests_support::coordinates(&msg);
        assert_eq!(lats.len() as u64, info.points, "{name}");
        let values = jump::decode_values(&msg).unwrap();
        let mut points = vec![
            (90.0, 0.0),
            (-90.0, 180.0),
            (0.0, 0.0),
            (0.0, 180.0),
            (10.0, -0.01),
        ];
        points.extend((0..scattered).map(|_| (next() * 180.0 - 90.0, next() * 720.0 - 360.0)));
        for (lat, lon) in points {
            let i = info.grid.as_ref().unwrap().nearest(lat, lon).unwrap() as usize;
            let got = angle(lat, lon, lats[i], lons[i]);
            let best = (0..lats.len())
                .map(|k| angle(lat, lon, lats[k], lons[k]))
                .fold(f64::INFINITY, f64::min);
            assert!(
                got <= best + 1e-9,
                "{name}: ({lat}, {lon}) gave index {i} at ({}, {}), {got} rad away; the nearest is {best} rad away",
                lats[i],
                lons[i]
            );
            let (v, _) = jump::extract_from_message(&msg, &[(i as u64, i as u64 + 1)]).unwrap();
            assert!(same(&v[0], &values[i..=i]), "{name}: value at {i}");
        }
    }
}

fn sample(name: &str) -> Vec<u8> {
    std::fs::read(format!("/usr/share/eccodes/samples/{name}.tmpl")).unwrap()
}
