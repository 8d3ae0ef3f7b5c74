//! `haar::extract` against ecCodes on both local backends (posix, pmem): every value at every
//! range equals ecCodes' whole-field decode of the same stored field (bit for bit; NaN where
//! the bitmap says missing), on the real ERA5 GRIB1 fields (cfgrib) and synthetic GRIB2 fields
//! with and without bitmap; a CCSDS field falls back to ecCodes and says so; the second
//! extraction takes the records from the `jumps` sidecar; simple-packed fields are read by
//! range, not whole.

use std::path::Path;

use haar::extract::{Selection, extract};
use haar::{ConfigSource, FieldStore, FieldStoreExt, OpenOptions};
use haar_core::Key;
use haar_core::request::Request;
use haar_grib::jump::{self, Method};

fn open(backend: &str, root: &Path) -> Box<dyn FieldStore> {
    OpenOptions {
        config: ConfigSource::Yaml {
            text: format!("backend: {backend}\n"),
            origin: "test".into(),
        },
        root: Some(root.into()),
        ..OpenOptions::default()
    }
    .field_store()
    .unwrap()
}

fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

fn synthetic_key(step: u32) -> Key {
    Key::parse(&format!(
        "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc,\
         step={step},param=167"
    ))
    .unwrap()
}

/// Stores the real and synthetic fields; returns each stored message by key.
fn fill(store: &mut dyn FieldStore) -> Vec<(Key, Vec<u8>)> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python/tests/data/era5-levels-members.grib");
    let bytes = std::fs::read(file).unwrap();
    let mut fields = Vec::new();
    for m in haar_grib::messages(&bytes) {
        let m = m.unwrap();
        let key: Key = haar_grib::mars_keys(m.bytes).unwrap().into_iter().collect();
        fields.push((key, m.bytes.to_vec()));
    }
    for (step, missing) in [(0, false), (6, true), (12, true)] {
        let values: Vec<f64> = (0..200_000)
            .map(|i| {
                if missing && (i % (5 + step)) == 2 {
                    f64::NAN
                } else {
                    280.0 + ((i as f64) * 0.001).sin() * 30.0
                }
            })
            .collect();
        let msg = jump::tests_support::field("regular_ll_sfc_grib2", &values, 16, 500, 400);
        fields.push((synthetic_key(step), msg));
    }
    let ccsds = std::fs::read("/usr/share/eccodes/samples/ccsds_grib2.tmpl").unwrap();
    fields.push((synthetic_key(24), ccsds));
    for (k, m) in &fields {
        store.archive(k, m).unwrap();
    }
    store.flush().unwrap();
    fields
}

fn check_backend(backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(backend, dir.path());
    let fields = fill(&mut *store);
    let ranges = vec![(0, 3), (400, 496), (123, 124), (5, 5)];
    let all = Request::parse("class=ea/od").unwrap();
    for round in 0..2 {
        let out = extract(&*store, &all, &Selection::Ranges(ranges.clone())).unwrap();
        assert_eq!(out.len(), fields.len(), "{backend}: one result per field");
        let (mut by_jump, mut whole) = (0, 0);
        for e in &out {
            let (_, msg) = fields
                .iter()
                .find(|(k, _)| store.split(k).unwrap().full() == e.key)
                .unwrap_or_else(|| panic!("{backend}: {} not archived", e.key));
            let want = jump::decode_values(msg).unwrap();
            for (&(i, j), v) in e.ranges.iter().zip(&e.values) {
                assert!(
                    same(v, &want[i as usize..j as usize]),
                    "{backend} round {round}: {} [{i},{j})",
                    e.key
                );
            }
            match e.method {
                Method::Jump => {
                    by_jump += 1;
                    assert!(
                        e.bytes_read < msg.len() as u64 / 4 || msg.len() < 20_000,
                        "{backend}: {} read {} of {} bytes",
                        e.key,
                        e.bytes_read,
                        msg.len()
                    );
                }
                Method::WholeField => whole += 1,
            }
        }
        assert_eq!((by_jump, whole), (fields.len() - 1, 1), "{backend}");
        let sidecars = walk(dir.path())
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "jumps"))
            .count();
        assert!(sidecars >= 1, "{backend}: no jumps sidecar written");
    }
    // Points: the nearest grid index of the ERA5 lat/lon grid (3 degrees, 90N..90S, 0..357E).
    let req = Request::parse("class=ea,param=130,levelist=500").unwrap();
    let out = extract(
        &*store,
        &req,
        &Selection::Points(vec![(90.0, 0.0), (-89.0, 358.0)]),
    )
    .unwrap();
    assert!(!out.is_empty());
    for e in &out {
        assert_eq!(e.ranges, vec![(0, 1), (7319, 7320)], "{}", e.key);
    }
    // Outside the field: an error naming it.
    let err = extract(&*store, &req, &Selection::Ranges(vec![(0, 7321)])).unwrap_err();
    assert!(err.to_string().contains("7321"), "{err}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn posix_extracts_what_eccodes_decodes() {
    check_backend("posix");
}

#[test]
fn pmem_extracts_what_eccodes_decodes() {
    check_backend("pmem");
}
