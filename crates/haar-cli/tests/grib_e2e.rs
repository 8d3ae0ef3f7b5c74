//! End to end through the `haar` binary on real GRIB files that no one here wrote (cfgrib and
//! earthkit-data sample data from their PyPI sdists, ecCodes' samples), checked with tools that
//! share no code with haar: `grib_ls`/`grib_count` (ecCodes), and when importable
//! xarray + cfgrib and earthkit-data.
//!
//! Python readers: the checks need `pip install cfgrib xarray earthkit-data`. When a module is
//! missing they are skipped with a warning, unless `HAAR_REQUIRE_PYTHON_GRIB` is set (CI sets
//! it), in which case the test fails.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// An ordered key with its three schema levels, from one `haar list --fdb` line; keywords the
/// field lacks (optional schema keywords, printed with an empty value) are dropped.
type Levels = [Vec<(String, String)>; 3];

fn fdb_levels(line: &str) -> Levels {
    let mut levels = parse_fdb_line(line).unwrap_or_else(|| panic!("not fdb layout: {line:?}"));
    for l in &mut levels {
        l.retain(|(_, v)| !v.is_empty());
    }
    levels
}

fn flat(levels: &Levels) -> Vec<(String, String)> {
    levels.iter().flatten().cloned().collect()
}

fn root_args(root: &Path) -> Vec<std::ffi::OsString> {
    vec!["--root".into(), root.as_os_str().to_owned()]
}

fn list_fdb(root: &Path) -> Vec<Levels> {
    let mut args = root_args(root);
    args.extend(["list".into(), "--fdb".into()]);
    haar_ok(&args).lines().map(fdb_levels).collect()
}

fn list_entries(root: &Path) -> Vec<Vec<(String, String)>> {
    list_fdb(root).iter().map(flat).collect()
}

/// A MARS request file covering every listed field: one request per (database key, index key,
/// datum keywords), datum values in first-appearance order; returns the text and the expected
/// output (request order, first keyword slowest).
fn covering_requests(fields: &[(Levels, Vec<u8>)]) -> (String, Vec<u8>) {
    type Group = (Vec<(String, String)>, Vec<String>);
    let mut groups: BTreeMap<Group, Vec<usize>> = BTreeMap::new();
    for (i, (l, _)) in fields.iter().enumerate() {
        let fixed: Vec<_> = l[0].iter().chain(&l[1]).cloned().collect();
        let names = l[2].iter().map(|(k, _)| k.clone()).collect();
        groups.entry((fixed, names)).or_default().push(i);
    }
    let mut text = String::from("# written by grib_e2e: one request per index and datum shape\n");
    let mut out = Vec::new();
    for ((fixed, names), members) in &groups {
        let mut values: Vec<Vec<String>> = vec![Vec::new(); names.len()];
        for &i in members {
            for (n, (_, v)) in fields[i].0[2].iter().enumerate() {
                if !values[n].contains(v) {
                    values[n].push(v.clone());
                }
            }
        }
        let mut body: Vec<String> = fixed.iter().map(|(k, v)| format!("{k}={v}")).collect();
        body.extend(
            names
                .iter()
                .zip(&values)
                .map(|(k, vs)| format!("{k}={}", vs.join("/"))),
        );
        text.push_str("retrieve,\n    ");
        text.push_str(&body.join(",\n    "));
        text.push_str("   # end of request\n\n");
        let mut order: Vec<(Vec<usize>, usize)> = members
            .iter()
            .map(|&i| {
                let pos = fields[i].0[2]
                    .iter()
                    .enumerate()
                    .map(|(n, (_, v))| values[n].iter().position(|x| x == v).unwrap())
                    .collect();
                (pos, i)
            })
            .collect();
        order.sort();
        for (_, i) in order {
            out.extend_from_slice(&fields[i].1);
        }
    }
    (text, out)
}

/// Keywords the FDB5 default schema (`/etc/fdb/schema`, haar's built-in) indexes for the
/// sample files' rules: a message's value for one of these must survive into haar's key.
const SCHEMA_KEYWORDS: &[&str] = &[
    "class", "expver", "stream", "date", "time", "domain", "type", "levtype", "step", "number",
    "levelist", "param",
];

/// Files of the pinned packages that carry no complete MARS key (no `class`, a non-ECMWF
/// local section, unknown level type...) or are not GRIB: haar refuses them, and so does
/// FDB5's `fdb-write` (see fdb5_differential.rs). (`t_year_missing.grib`, `date=aug-01` with
/// no year, is archived by both: see fdb5_differential::climatological_date_archives_like_fdb5.)
const REFUSED: &[&str] = &[
    "cfrzr_and_cprat.grib",
    "cfrzr_and_cprat_0s.grib",
    "ds.waveh.5.grib",
    "era5-levels-corrupted.grib",
    "lambert_grid.grib",
    "regular_gg_wrong_increment.grib",
    "regular_ll_msl.grib",
    "regular_ll_wrong_increment.grib",
    "step_60m.grib",
    "empty_file.grib",
    "ens_none.grib",
    "healpix_H8.grib2",
    "mercator.grib",
    "test_icon.grib",
];

/// Every real file (cfgrib, earthkit-data, ecCodes samples) archived by one `haar archive`
/// into one store: the refused files are exactly the ones without MARS keys; every message of
/// the others is listed with the keys `grib_ls -m -j` gives; a request file covering all
/// returns every visible message byte-identical in request order (a later message with the same
/// key masks an earlier one, as in FDB5); the output is valid GRIB for ecCodes.
#[test]
fn every_real_file_round_trips_byte_identical() {
    let _t = Timer::start("every_real_file_round_trips_byte_identical");
    let files = all_real_files();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    let mut args = root_args(&root);
    args.extend(["archive".into(), "--json".into()]);
    args.extend(files.iter().map(|f| f.as_os_str().to_owned()));
    let out = haar(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "some files must be refused: {stderr}"
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("archive --json: {e}: {stderr}"));
    let failed: Vec<String> = summary["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    let refused: BTreeSet<PathBuf> = files
        .iter()
        .filter(|f| {
            failed
                .iter()
                .any(|m| m.starts_with(&format!("{}:", f.display())))
        })
        .cloned()
        .collect();
    assert_eq!(
        refused.len(),
        failed.len(),
        "unattributed failures: {failed:#?}"
    );
    for f in &refused {
        let sample = f.starts_with("/usr/share/eccodes/samples");
        assert!(
            sample || REFUSED.contains(&file_name(f).as_str()),
            "haar refused {}: {failed:#?}",
            f.display()
        );
        assert!(stderr.contains(&f.display().to_string()), "{stderr}");
    }
    for name in REFUSED {
        assert!(
            refused.iter().any(|f| file_name(f) == *name),
            "{name} was expected to be refused"
        );
    }

    let listed = list_fdb(&root);
    let entries: Vec<Vec<(String, String)>> = listed.iter().map(flat).collect();
    let mut visible: Vec<Option<Vec<u8>>> = vec![None; entries.len()];
    let (mut messages, mut accepted) = (0usize, 0usize);
    for file in files.iter().filter(|f| !refused.contains(*f)) {
        let name = file_name(file);
        let bytes = std::fs::read(file).unwrap();
        let msgs = split_messages(&bytes);
        assert_eq!(msgs.len(), grib_count(file), "{name}: message count");
        let gl = grib_ls_keys(file);
        assert_eq!(gl.len(), msgs.len(), "{name}: grib_ls message count");
        for (i, keys) in gl.iter().enumerate() {
            let hits: Vec<usize> = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.iter().all(|(k, v)| keys.get(k) == Some(v)))
                .map(|(j, _)| j)
                .collect();
            assert_eq!(
                hits.len(),
                1,
                "{name}: message {} (grib_ls keys {keys:?}) matches {} haar entries: {:?}",
                i + 1,
                hits.len(),
                hits.iter().map(|&j| &entries[j]).collect::<Vec<_>>()
            );
            let entry = &entries[hits[0]];
            for (k, v) in keys {
                let kept = entry.iter().any(|(ek, _)| ek == k);
                assert!(
                    kept || v.is_empty() || !SCHEMA_KEYWORDS.contains(&k.as_str()),
                    "{name}: message {}: haar dropped {k}={v} from {entry:?}",
                    i + 1
                );
            }
            visible[hits[0]] = Some(msgs[i].clone());
        }
        messages += msgs.len();
        accepted += 1;
    }
    assert_eq!(summary["fields"].as_u64(), Some(messages as u64));
    let fields: Vec<(Levels, Vec<u8>)> = listed
        .into_iter()
        .zip(visible)
        .map(|(l, m)| {
            let m = m.unwrap_or_else(|| panic!("haar lists {l:?}, no message has that key"));
            (l, m)
        })
        .collect();

    // `list --json` agrees with the FDB layout.
    let mut args = root_args(&root);
    args.extend(["list".into(), "--json".into()]);
    let json: serde_json::Value = serde_json::from_str(&haar_ok(&args)).unwrap();
    let json_keys: BTreeSet<Keys> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            ["db", "index", "datum"]
                .iter()
                .flat_map(|l| f[l].as_object().unwrap().clone())
                .filter(|(_, v)| v.as_str() != Some(""))
                .map(|(k, v)| (k, v.as_str().unwrap().to_string()))
                .collect()
        })
        .collect();
    let fdb_keys: BTreeSet<Keys> = entries
        .iter()
        .map(|e| e.iter().cloned().collect())
        .collect();
    assert_eq!(json_keys, fdb_keys, "list --json vs list --fdb");

    // Everything back through a request file: the exact bytes, in request order.
    let (req, want) = covering_requests(&fields);
    let req_path = work.path().join("all.req");
    std::fs::write(&req_path, &req).unwrap();
    let got_path = work.path().join("out.grib");
    let mut args = root_args(&root);
    args.extend([
        "retrieve".into(),
        "--allow-missing".into(), // a covering request's product may have holes
        format!("@{}", req_path.display()).into(),
        "-o".into(),
        got_path.as_os_str().to_owned(),
    ]);
    haar_ok(&args);
    let got = std::fs::read(&got_path).unwrap();
    if got != want {
        assert_eq!(
            multiset(split_messages(&got)).len(),
            multiset(split_messages(&want)).len(),
            "retrieve returned a different number of messages"
        );
        assert!(
            multiset(split_messages(&got)) == multiset(split_messages(&want)),
            "retrieve returned different messages (request file {})",
            req_path.display()
        );
        panic!("retrieve returned the right messages in the wrong order");
    }
    assert_eq!(grib_count(&got_path), fields.len());
    let ls = Command::new("grib_ls").arg(&got_path).output().unwrap();
    assert!(ls.status.success(), "grib_ls rejects the output");
    eprintln!(
        "round-tripped {} visible fields ({messages} messages) from {accepted} files; \
         refused {} files",
        fields.len(),
        refused.len()
    );
    for must in [
        "era5-levels-members.grib",
        "t_pl.grib",
        "ens_50.grib",
        "ml_data.grib",
        "forecast_monthly_ukmo.grib",
        "regular_gg_ml_g2.grib",
        "reduced_gg_pl_320_grib2.tmpl",
    ] {
        assert!(
            !refused.iter().any(|f| file_name(f) == must),
            "{must} refused"
        );
    }
    assert!(accepted >= 140, "only {accepted} files accepted");
    assert!(fields.len() >= 700, "only {} fields", fields.len());
}

#[test]
fn era5_members_keys_equal_grib_ls_exactly() {
    let file = data("cfgrib/era5-levels-members.grib");
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    let mut args = root_args(&root);
    args.extend(["archive".into(), file.as_os_str().to_owned()]);
    haar_ok(&args);
    let mut args = root_args(&root);
    args.extend(["list".into(), "--json".into()]);
    let json: serde_json::Value = serde_json::from_str(&haar_ok(&args)).unwrap();
    let ours: Vec<Keys> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            ["db", "index", "datum"]
                .iter()
                .flat_map(|l| f[l].as_object().unwrap().clone())
                .map(|(k, v)| (k, v.as_str().unwrap().to_string()))
                .collect()
        })
        .collect();
    assert_eq!(ours.len(), 160);
    let theirs = grib_ls_keys(&file);
    assert_eq!(
        ours.iter().collect::<BTreeSet<_>>(),
        theirs.iter().collect::<BTreeSet<_>>(),
        "haar list --json keys differ from grib_ls -m -j (normalised)"
    );
    // FDB5's layout, with the schema's three levels.
    let mut args = root_args(&root);
    args.extend(["list".into(), "--fdb".into()]);
    let fdb = haar_ok(&args);
    assert_eq!(
        fdb.lines().next().unwrap(),
        "{class=ea,expver=0001,stream=enda,date=20170101,time=0000,domain=g}\
         {type=an,levtype=pl}{step=0,number=0,levelist=500,param=129}"
    );
    for line in fdb.lines() {
        let levels = parse_fdb_line(line).unwrap_or_else(|| panic!("{line:?}"));
        let names: Vec<Vec<&str>> = levels
            .iter()
            .map(|l| l.iter().map(|(k, _)| k.as_str()).collect())
            .collect();
        assert_eq!(
            names,
            [
                vec!["class", "expver", "stream", "date", "time", "domain"],
                vec!["type", "levtype"],
                vec!["step", "number", "levelist", "param"]
            ],
            "{line}"
        );
    }
    assert_eq!(fdb.lines().count(), 160);
}

/// Archives era5-levels-members (160 messages) and returns (workdir, root, original bytes).
fn era5_store() -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let file = data("cfgrib/era5-levels-members.grib");
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    let mut args = root_args(&root);
    args.extend(["archive".into(), file.as_os_str().to_owned()]);
    haar_ok(&args);
    (work, root, std::fs::read(&file).unwrap())
}

const ERA5_ALL: &str = "class=ea,expver=1,stream=enda,date=20170101/20170102,time=0/12,\
                        domain=g,type=an,levtype=pl,step=0,number=0/to/9,levelist=500/850,\
                        param=z/t";

#[test]
fn retrieve_request_file_with_comments_and_several_requests() {
    let (work, root, original) = era5_store();
    let gl = grib_ls_keys(&data("cfgrib/era5-levels-members.grib"));
    let msgs = split_messages(&original);
    let pick = |f: &dyn Fn(&Keys) -> bool| -> Vec<usize> {
        (0..msgs.len()).filter(|&i| f(&gl[i])).collect()
    };
    let req = "\
# two requests, MARS syntax: verb, continuation lines, comments, short names and ranges
RETRIEVE,
    class   = ea,          # ERA5
    expver  = 1,
    stream  = enda, date = 20170102, time = 12,
    domain  = g, type = an, levtype = pl, step = 0,
    number  = 3/to/5,
    levelist= 850,
    param   = t

retrieve, class=ea, expver=0001, stream=enda, date=20170101, time=0000, domain=g,
    type=an, levtype=pl, step=0, number=9, levelist=500/850, param=129
";
    let req_path = work.path().join("req.mars");
    std::fs::write(&req_path, req).unwrap();
    let out = work.path().join("out.grib");
    let mut args = root_args(&root);
    args.extend([
        "retrieve".into(),
        format!("@{}", req_path.display()).into(),
        "-o".into(),
        out.as_os_str().to_owned(),
    ]);
    haar_ok(&args);
    let mut want = Vec::new();
    for n in ["3", "4", "5"] {
        want.extend(pick(&|k| {
            k["date"] == "20170102"
                && k["time"] == "1200"
                && k["number"] == n
                && k["levelist"] == "850"
                && k["param"] == "130"
        }));
    }
    for l in ["500", "850"] {
        want.extend(pick(&|k| {
            k["date"] == "20170101"
                && k["time"] == "0000"
                && k["number"] == "9"
                && k["levelist"] == l
                && k["param"] == "129"
        }));
    }
    assert_eq!(want.len(), 5);
    let want: Vec<u8> = want.iter().flat_map(|&i| msgs[i].clone()).collect();
    assert_eq!(std::fs::read(&out).unwrap(), want);
    assert_eq!(grib_count(&out), 5);
}

#[test]
fn retrieve_everything_returns_every_message_in_request_order() {
    let (work, root, original) = era5_store();
    let out = work.path().join("all.grib");
    let mut args = root_args(&root);
    args.extend([
        "retrieve".into(),
        ERA5_ALL.into(),
        "-o".into(),
        out.as_os_str().to_owned(),
    ]);
    haar_ok(&args);
    let got = std::fs::read(&out).unwrap();
    let msgs = split_messages(&original);
    assert_eq!(
        multiset(split_messages(&got)),
        multiset(msgs.clone()),
        "not the same messages"
    );
    // Request order: date, time, number, levelist, param (first slowest); step has one value.
    let gl = grib_ls_keys(&data("cfgrib/era5-levels-members.grib"));
    let mut order: Vec<usize> = (0..msgs.len()).collect();
    order.sort_by_key(|&i| {
        let k = &gl[i];
        (
            k["date"].clone(),
            k["time"].clone(),
            k["number"].parse::<u32>().unwrap(),
            k["levelist"].parse::<u32>().unwrap(),
            k["param"].parse::<u32>().unwrap(),
        )
    });
    let want: Vec<u8> = order.iter().flat_map(|&i| msgs[i].clone()).collect();
    assert!(got == want, "messages not in request-expansion order");
    python_readers_agree(&data("cfgrib/era5-levels-members.grib"), &out);
}

/// Whether a Python module set is importable; panics if not and `HAAR_REQUIRE_PYTHON_GRIB` is
/// set, else warns and returns false.
fn python_has(imports: &str, pip: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {imports}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var_os("HAAR_REQUIRE_PYTHON_GRIB").is_none(),
            "python3 cannot import {imports} and HAAR_REQUIRE_PYTHON_GRIB is set: \
             run `pip install {pip}`"
        );
        eprintln!(
            "WARNING: python3 cannot import {imports}: skipping that reader check \
             (pip install {pip}; set HAAR_REQUIRE_PYTHON_GRIB=1 to make this an error)"
        );
    }
    ok
}

fn run_python(script: &str, args: &[&Path]) {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stdout));
}

/// The retrieved file decodes, with the real Python readers, to the same data as the original.
fn python_readers_agree(original: &Path, retrieved: &Path) {
    if python_has("cfgrib, xarray", "cfgrib xarray") {
        run_python(
            r#"
import sys, xarray as xr
kw = dict(engine="cfgrib", backend_kwargs={"indexpath": ""})
a = xr.open_dataset(sys.argv[1], **kw).load()
b = xr.open_dataset(sys.argv[2], **kw).load()
assert a.equals(b), (a, b)
assert dict(b.sizes) == {"number": 10, "time": 4, "isobaricInhPa": 2, "latitude": 61, "longitude": 120}, dict(b.sizes)
assert set(b.data_vars) == {"z", "t"}, list(b.data_vars)
print("cfgrib+xarray: retrieved file equals the original:", dict(b.sizes))
"#,
            &[original, retrieved],
        );
    }
    if python_has("earthkit.data", "earthkit-data") {
        run_python(
            r#"
import sys, numpy as np, earthkit.data as ekd
def fields(path):
    d = ekd.from_source("file", path)
    # earthkit-data >= 1.0 returns a data object; older versions a field list.
    return d.to_fieldlist() if hasattr(d, "to_fieldlist") else d
a, b = fields(sys.argv[1]), fields(sys.argv[2])
assert len(a) == len(b) == 160, (len(a), len(b))
keys = ("param", "level", "number", "date", "time")
fa = sorted((tuple(f.metadata(k) for k in keys), f.to_numpy().tobytes()) for f in a)
fb = sorted((tuple(f.metadata(k) for k in keys), f.to_numpy().tobytes()) for f in b)
assert fa == fb
print("earthkit-data: 160 fields, same metadata and values as the original")
"#,
            &[original, retrieved],
        );
    }
}

fn list_lines(root: &Path) -> Vec<String> {
    let mut args = root_args(root);
    args.extend(["list".into(), "--location".into()]);
    haar_ok(&args).lines().map(String::from).collect()
}

#[test]
fn bad_input_is_refused_and_never_touches_flushed_data() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    let good = data("earthkit-data/t_pl.grib");
    let other_good = data("earthkit-data/u_pl.grib");
    let mut args = root_args(&root);
    args.extend(["archive".into(), good.as_os_str().to_owned()]);
    haar_ok(&args);
    let before = list_lines(&root);
    assert_eq!(before.len(), 6);

    // Not GRIB: exit 1, names the file, tells the user about --key.
    let text = work.path().join("notes.txt");
    std::fs::write(&text, "plain text, no weather here\n".repeat(100)).unwrap();
    let mut args = root_args(&root);
    args.extend(["archive".into(), text.as_os_str().to_owned()]);
    let out = haar(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&text.display().to_string()), "{err}");
    assert!(err.contains("--key"), "{err}");
    assert_eq!(
        list_lines(&root),
        before,
        "a refused file changed the store"
    );

    // cfgrib's corrupted file: its first message's length field is wrong.
    let corrupt = data("cfgrib/era5-levels-corrupted.grib");
    let mut args = root_args(&root);
    args.extend(["archive".into(), corrupt.as_os_str().to_owned()]);
    let out = haar(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&corrupt.display().to_string()), "{err}");
    assert!(err.contains("byte offset 0"), "{err}");
    assert!(
        err.contains("message 0 ") || err.contains("message 1 "),
        "names no message number: {err}"
    );
    assert_eq!(list_lines(&root), before);

    // Corrupted + valid in one command: nothing from the corrupted file, all of the valid one.
    let mut args = root_args(&root);
    args.extend([
        "archive".into(),
        corrupt.as_os_str().to_owned(),
        other_good.as_os_str().to_owned(),
    ]);
    let out = haar(&args);
    assert!(!out.status.success());
    let after = list_lines(&root);
    assert_eq!(after.len(), 12, "{after:#?}");
    for line in &before {
        assert!(after.contains(line), "flushed field changed: {line}");
    }
    assert!(
        after.iter().all(|l| !l.contains("class=ea")),
        "something from the corrupted file (class=ea) was archived"
    );

    // A truncated copy of a good file names the cut message and its offset.
    let members = std::fs::read(data("cfgrib/era5-levels-members.grib")).unwrap();
    let last = haar_grib::messages(&members).last().unwrap().unwrap();
    let cut = work.path().join("cut.grib");
    std::fs::write(&cut, &members[..members.len() - 1000]).unwrap();
    let mut args = root_args(&root);
    args.extend(["archive".into(), cut.as_os_str().to_owned()]);
    let out = haar(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("cut.grib"), "{err}");
    assert!(
        err.contains(&format!("byte offset {}", last.offset)),
        "{err}"
    );
    assert!(err.contains("159") || err.contains("160"), "{err}");

    // Keys the schema does not accept (no class): file, message number, offset.
    let lambert = data("cfgrib/lambert_grid.grib");
    let mut args = root_args(&root);
    args.extend(["archive".into(), lambert.as_os_str().to_owned()]);
    let out = haar(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("lambert_grid.grib") && err.contains("byte offset 0"),
        "{err}"
    );
    assert_eq!(list_lines(&root).len(), 12);
}

#[test]
fn key_override_and_filters() {
    let file = data("cfgrib/era5-levels-members.grib");
    let gl = grib_ls_keys(&file);
    let work = tempfile::tempdir().unwrap();

    // --include: only the matching messages.
    let root = work.path().join("inc");
    let mut args = root_args(&root);
    args.extend([
        "archive".into(),
        "--include".into(),
        "param=t,number=0/1/2".into(),
        file.as_os_str().to_owned(),
    ]);
    haar_ok(&args);
    let want = gl
        .iter()
        .filter(|k| k["param"] == "130" && ["0", "1", "2"].contains(&k["number"].as_str()))
        .count();
    assert_eq!(want, 24);
    let got = list_entries(&root);
    assert_eq!(got.len(), want);
    assert!(
        got.iter()
            .all(|e| e.contains(&("param".into(), "130".into())))
    );

    // --exclude: everything else.
    let root = work.path().join("exc");
    let mut args = root_args(&root);
    args.extend([
        "archive".into(),
        "--exclude".into(),
        "levelist=500".into(),
        file.as_os_str().to_owned(),
    ]);
    haar_ok(&args);
    let got = list_entries(&root);
    assert_eq!(got.len(), 80);
    assert!(
        got.iter()
            .all(|e| e.contains(&("levelist".into(), "850".into())))
    );

    // --key overrides the GRIB keys (and is normalised like them: expver 4 characters).
    let root = work.path().join("key");
    let mut args = root_args(&root);
    args.extend([
        "archive".into(),
        "--key".into(),
        "expver=x1,class=rd".into(),
        file.as_os_str().to_owned(),
    ]);
    haar_ok(&args);
    let got = list_entries(&root);
    assert_eq!(got.len(), 160);
    for e in &got {
        assert!(e.contains(&("class".into(), "rd".into())), "{e:?}");
        assert!(e.contains(&("expver".into(), "00x1".into())), "{e:?}");
    }
    // The overridden fields are retrievable under the new keys, bytes intact.
    let out = work.path().join("out.grib");
    let mut args = root_args(&root);
    args.extend([
        "retrieve".into(),
        ERA5_ALL
            .replace("class=ea,expver=1", "class=rd,expver=x1")
            .into(),
        "-o".into(),
        out.as_os_str().to_owned(),
    ]);
    haar_ok(&args);
    assert_eq!(
        multiset(split_messages(&std::fs::read(&out).unwrap())),
        multiset(split_messages(&std::fs::read(&file).unwrap()))
    );
}

/// True if process `pid` uses `path`: maps it (/proc/PID/maps) or has read part of it
/// (the file position in /proc/PID/fdinfo is past the start and before `len`).
fn using_file(pid: u32, path: &Path, len: u64) -> bool {
    let shown = path.display().to_string();
    if std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|m| m.lines().any(|l| l.ends_with(&shown)))
    {
        return true;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).ok().as_deref() == Some(path)
            && std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().display()))
                .ok()
                .and_then(|i| {
                    let p = i.lines().find_map(|l| l.strip_prefix("pos:"))?;
                    p.trim().parse::<u64>().ok()
                })
                .is_some_and(|p| p > 0 && p < len)
    })
}

/// Truncating an input file while `haar archive` reads, keys or stores it (regression: a
/// truncated mapped input killed haar with SIGBUS) gives a clean error naming the file and
/// archives nothing from it; the other file of the same command and everything flushed before
/// are intact. Real truncations, repeated: some as soon as haar is seen using the file (mapped
/// or part way through reading it), some at delays that land anywhere in keying and storing,
/// where ecCodes and the copy read zeros in place of the truncated pages.
#[test]
fn truncating_an_input_while_it_is_archived_never_crashes() {
    let shm = Path::new("/dev/shm");
    let work = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    // About 100 MB: one O320 message (824 KiB) repeated; a date nothing else has.
    let spec = haar_grib::EnsembleSpec {
        members: 1,
        steps: vec![0],
        levels: vec![500],
        params: vec![130],
        grid: haar_grib::Grid::O320,
        date: 20261122,
        time: 0,
        expver: "0001".into(),
        class: "od".into(),
    };
    let mut one = Vec::new();
    haar_grib::generate(&spec, &mut one).unwrap();
    let big_bytes = one.repeat(120);
    let big = work.path().join("big.grib");
    let good = data("earthkit-data/t_pl.grib");
    let other_good = data("earthkit-data/u_pl.grib");
    let (mut watched, mut changed, mut refused, mut archived) = (0, 0, 0, 0);
    for round in 0..16 {
        let root = work.path().join(format!("root{round}"));
        let mut args = root_args(&root);
        args.extend(["archive".into(), good.as_os_str().to_owned()]);
        haar_ok(&args);
        let before = list_lines(&root);
        std::fs::write(&big, &big_bytes).unwrap();

        let mut args = root_args(&root);
        args.extend([
            "archive".into(),
            other_good.as_os_str().to_owned(),
            big.as_os_str().to_owned(),
        ]);
        let mut child = Command::new(haar_bin())
            .args(&args)
            .env_remove("HAAR_CONFIG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Even rounds: truncate as soon as haar is seen using the file.
        // Odd rounds: truncate after a delay, to land anywhere from start-up to the copy.
        let seen_reading = if round % 2 == 0 {
            let t = std::time::Instant::now();
            let mut seen = false;
            while t.elapsed().as_secs() < 10 && !seen {
                seen = using_file(child.id(), &big, big_bytes.len() as u64);
                if child.try_wait().unwrap().is_some() {
                    break;
                }
            }
            seen
        } else {
            std::thread::sleep(std::time::Duration::from_millis(40 * round as u64));
            false
        };
        let cut = (big_bytes.len() / 3 + 12345 * round) as u64;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&big)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            None,
            "round {round}: haar was killed by a signal ({}): {err}",
            out.status
        );
        let after = list_lines(&root);
        for line in &before {
            assert!(after.contains(line), "round {round}: flushed field changed");
        }
        let from_big = after.iter().filter(|l| l.contains("20261122")).count();
        let other = after.len() - before.len() - from_big;
        assert_eq!(other, 6, "round {round}: the other file: {after:#?}\n{err}");
        if out.status.success() {
            // The truncation came after haar had finished with the file: all of it is
            // archived (120 messages under one key: one field).
            assert_eq!(from_big, 1, "round {round}");
            archived += 1;
        } else {
            assert_eq!(out.status.code(), Some(1), "round {round}: {err}");
            assert!(err.contains("big.grib"), "round {round}: {err}");
            assert_eq!(from_big, 0, "round {round}: a refused file stored fields");
            if err.contains("changed while being read") {
                changed += 1;
            }
            if seen_reading && err.contains("changed while being read") {
                watched += 1;
            }
            refused += 1;
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
    eprintln!(
        "16 rounds: {refused} refused ({changed} as changed while being read, {watched} of them truncated while seen using it), {archived} archived whole"
    );
    assert!(
        watched > 0,
        "never saw haar part way through reading the file"
    );
}

/// A fault in the last message of a file, found by ecCodes or the schema after haar has
/// already stored the file's earlier fields (each field is stored as soon as it has keys):
/// nothing from the file is archived, the other file of the command and everything flushed
/// before are, and the store goes on archiving.
#[test]
fn a_fault_in_a_late_message_archives_nothing_from_its_file() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    let good = data("earthkit-data/t_pl.grib");
    let other_good = data("earthkit-data/u_pl.grib");
    let mut args = root_args(&root);
    args.extend(["archive".into(), good.as_os_str().to_owned()]);
    haar_ok(&args);
    let before = list_lines(&root);
    assert_eq!(before.len(), 6);

    // 160 good messages (class=ea), then one the schema refuses (no class).
    let mut bytes = std::fs::read(data("cfgrib/era5-levels-members.grib")).unwrap();
    let bad_offset = bytes.len();
    bytes.extend(std::fs::read(data("cfgrib/lambert_grid.grib")).unwrap());
    let late = work.path().join("late-fault.grib");
    std::fs::write(&late, &bytes).unwrap();
    let mut args = root_args(&root);
    args.extend([
        "archive".into(),
        late.as_os_str().to_owned(),
        other_good.as_os_str().to_owned(),
    ]);
    let out = haar(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("late-fault.grib"), "{err}");
    assert!(err.contains("message 161 "), "{err}");
    assert!(err.contains(&format!("byte offset {bad_offset}")), "{err}");
    let after = list_lines(&root);
    assert_eq!(after.len(), 12, "{after:#?}");
    for line in &before {
        assert!(after.contains(line), "flushed field changed: {line}");
    }
    assert!(
        after.iter().all(|l| !l.contains("class=ea")),
        "a field of the faulty file was archived"
    );

    // The same 160 messages without the bad one archive whole afterwards.
    std::fs::write(&late, &bytes[..bad_offset]).unwrap();
    let mut args = root_args(&root);
    args.extend(["archive".into(), late.as_os_str().to_owned()]);
    haar_ok(&args);
    assert_eq!(list_lines(&root).len(), 172);
}
