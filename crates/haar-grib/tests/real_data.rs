//! Conformance on real GRIB files that no one here wrote (cfgrib and
//! earthkit-data sample data from their PyPI sdists, and ecCodes' own samples),
//! with ecCodes' command-line tools as the oracle:
//!
//! - framing: our message count equals `grib_count`'s, the slice and stream
//!   framers agree, and the corrupted cfgrib file fails naming message and offset;
//! - keys: `mars_keys` equals `grib_ls -m -j` (the tool's MARS key listing) for
//!   every message, after FDB5's documented normalisation (`param` := `paramId`
//!   as printed by `grib_get -p paramId`, integer `levelist`, 4-character `expver`).
//!
//! The data is fetched by `tests/fetch-testdata.sh` into `$HAAR_TESTDATA`
//! (default `<repo>/.testdata`). If it is missing the tests run the script; if
//! that fails they fail and say so — they never pass without data.

use haar_grib::{FrameError, MessageReader, mars_keys, messages};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn testdata() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = std::env::var_os("HAAR_TESTDATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest.join("../../.testdata"));
        let grib = root.join("grib");
        let script = manifest.join("tests/fetch-testdata.sh");
        // The script is idempotent and returns at once when the data is there.
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
        grib
    })
}

/// Every real GRIB file: fetched sample data plus ecCodes' GRIB samples.
fn real_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for pkg in ["cfgrib", "earthkit-data"] {
        let dir = testdata().join(pkg);
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            files.push(e.unwrap().path());
        }
    }
    for e in std::fs::read_dir("/usr/share/eccodes/samples").expect("ecCodes samples installed") {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.contains("grib") || name.starts_with("GRIB") {
            files.push(p);
        }
    }
    files.sort();
    assert!(
        files.len() > 100,
        "expected over 100 real GRIB files, found {}",
        files.len()
    );
    files
}

fn tool(cmd: &str, args: &[&str], file: &Path) -> Option<String> {
    let out = Command::new(cmd)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} (ecCodes tools, Debian libeccodes-tools): {e}"));
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn grib_count(file: &Path) -> Option<usize> {
    tool("grib_count", &[], file).map(|s| s.trim().parse().expect("grib_count prints a number"))
}

const CORRUPTED: &str = "era5-levels-corrupted.grib";

#[test]
fn message_counts_match_grib_count() {
    let mut checked = 0;
    for file in real_files() {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let data = std::fs::read(&file).unwrap();
        let framed: Vec<_> = messages(&data).collect();
        let streamed: Vec<_> = MessageReader::new(std::fs::File::open(&file).unwrap()).collect();
        assert_eq!(framed.len(), streamed.len(), "{name}");
        for (a, b) in framed.iter().zip(&streamed) {
            match (a, b) {
                (Ok(a), Ok(b)) => assert_eq!(a.bytes, &b.bytes[..], "{name}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}"),
                _ => panic!("{name}: slice and stream framers disagree: {a:?} vs {b:?}"),
            }
        }
        if name == CORRUPTED {
            assert_eq!(grib_count(&file), None, "grib_count should reject {name}");
            continue;
        }
        let want = grib_count(&file).unwrap_or_else(|| panic!("grib_count failed on {name}"));
        if want == 0 {
            assert!(
                matches!(framed[..], [Err(FrameError::NotGrib { .. })]),
                "{name}: {framed:?}"
            );
        } else {
            let ok = framed.iter().filter(|r| r.is_ok()).count();
            assert_eq!(
                ok, want,
                "{name}: haar frames {ok} messages, grib_count {want}"
            );
            assert_eq!(
                ok,
                framed.len(),
                "{name}: unexpected framing errors {framed:?}"
            );
        }
        checked += 1;
    }
    assert!(checked > 100);
}

#[test]
fn corrupted_file_names_message_and_offset() {
    let file = testdata().join("cfgrib").join(CORRUPTED);
    let data = std::fs::read(&file).unwrap();
    let got: Vec<_> = messages(&data).collect();
    // cfgrib's file: message 0 declares 1588 bytes but is 22068 long.
    let err = got[0].as_ref().unwrap_err();
    assert!(
        matches!(
            err,
            FrameError::BadEndMarker {
                index: 0,
                offset: 0
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("message 1 (1-based) at byte offset 0"),
        "{err}"
    );
    // The scan resumes and finds the intact second message.
    let second = got[1].as_ref().unwrap();
    assert_eq!((second.index, second.offset), (1, 22068));
    assert_eq!(got.len(), 2);
    // And a truncated copy of a good file names the cut message.
    let good = std::fs::read(testdata().join("cfgrib/era5-levels-members.grib")).unwrap();
    let intact = messages(&good).last().unwrap().unwrap();
    let end = intact.offset as usize + intact.bytes.len();
    let cut = &good[..end - 1000];
    let last = messages(cut).last().unwrap();
    match last {
        Err(FrameError::Truncated {
            index,
            offset,
            declared_len,
            available,
        }) => {
            assert_eq!(index, 159);
            assert_eq!(offset, intact.offset);
            assert_eq!(declared_len, intact.bytes.len() as u64);
            assert_eq!(available, declared_len - 1000);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn mixed_editions_and_padding_frame_correctly() {
    let g1 = std::fs::read(testdata().join("cfgrib/era5-levels-members.grib")).unwrap();
    let g2 = std::fs::read(testdata().join("cfgrib/regular_gg_ml_g2.grib")).unwrap();
    let n1 = grib_count(&testdata().join("cfgrib/era5-levels-members.grib")).unwrap();
    let n2 = grib_count(&testdata().join("cfgrib/regular_gg_ml_g2.grib")).unwrap();
    let mut mixed = b"\0\0\0\0junk".to_vec();
    let mut expect = Vec::new();
    for (i, (a, b)) in messages(&g1).zip(messages(&g2)).enumerate() {
        let (a, b) = (a.unwrap(), b.unwrap());
        for m in [a, b] {
            expect.push((mixed.len() as u64, m.edition, mars_keys(m.bytes).unwrap()));
            mixed.extend_from_slice(m.bytes);
            mixed.extend(std::iter::repeat_n(0u8, i % 5)); // uneven padding
        }
    }
    assert_eq!(expect.len(), 2 * n1.min(n2));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.grib");
    std::fs::write(&path, &mixed).unwrap();
    assert_eq!(grib_count(&path), Some(expect.len()));
    let got: Vec<_> = messages(&mixed)
        .map(|m| {
            let m = m.unwrap();
            (m.offset, m.edition, mars_keys(m.bytes).unwrap())
        })
        .collect();
    assert_eq!(got, expect);
    assert!(got.iter().any(|g| g.1 == 1) && got.iter().any(|g| g.1 == 2));
}

/// Our key list for one message, rendered like grib_ls's JSON for comparison.
fn expected_from_tool(
    ls: &serde_json::Map<String, serde_json::Value>,
    param_id: Option<&str>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in ls {
        if k.starts_with('_') {
            continue; // FDB5 skips them; grib_ls prints them
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
        out.push((k.clone(), text));
    }
    if let Some(pid) = param_id {
        match out.iter_mut().find(|(k, _)| k == "param") {
            Some((_, v)) => *v = pid.to_owned(),
            None => out.push(("param".into(), pid.to_owned())),
        }
    }
    out
}

#[test]
fn mars_keys_match_grib_ls() {
    let mut compared = 0usize;
    let mut undecodable = Vec::new();
    for file in real_files() {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        if name == CORRUPTED {
            continue;
        }
        let data = std::fs::read(&file).unwrap();
        let msgs: Vec<_> = messages(&data).filter_map(Result::ok).collect();
        if msgs.is_empty() {
            continue;
        }
        let ls = tool("grib_ls", &["-m", "-j"], &file)
            .unwrap_or_else(|| panic!("grib_ls -m -j failed on {name}"));
        // grib_ls writes raw control characters (e.g. expver "\x01") into JSON strings.
        let ls: String = ls
            .chars()
            .map(|c| {
                if c.is_control() && c != '\n' {
                    format!("\\u{:04x}", c as u32)
                } else {
                    c.to_string()
                }
            })
            .collect();
        let ls: serde_json::Value =
            serde_json::from_str(&ls).unwrap_or_else(|e| panic!("{name}: grib_ls JSON: {e}"));
        let ls = ls["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no messages array"));
        let pids = tool("grib_get", &["-f", "-p", "paramId"], &file).unwrap_or_default();
        let pids: Vec<&str> = pids.lines().map(str::trim).collect();
        assert_eq!(
            ls.len(),
            msgs.len(),
            "{name}: grib_ls lists {} messages",
            ls.len()
        );
        for (i, m) in msgs.iter().enumerate() {
            let ours = match mars_keys(m.bytes) {
                Ok(k) => k,
                Err(e) => {
                    undecodable.push(format!("{name}#{i}: {e}"));
                    continue;
                }
            };
            let pid = pids
                .get(i)
                .copied()
                .filter(|p| !p.is_empty() && *p != "not_found");
            let want = expected_from_tool(ls[i].as_object().unwrap(), pid);
            // serde_json's map is sorted: compare as sets here (no key may
            // repeat) and check the order against grib_ls's text header below.
            let ours_set: BTreeMap<_, _> = ours.iter().cloned().collect();
            assert_eq!(
                ours_set.len(),
                ours.len(),
                "{name}: repeated key in {ours:?}"
            );
            let want_set: BTreeMap<_, _> = want.into_iter().collect();
            assert_eq!(
                ours_set, want_set,
                "{name} message {i} at offset {}",
                m.offset
            );
            if i == 0 {
                let text = tool("grib_ls", &["-m", "-w", "count=1"], &file).unwrap();
                let header: Vec<&str> = text
                    .lines()
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .filter(|k| !k.starts_with('_'))
                    .collect();
                let mut names: Vec<&str> = ours.iter().map(|(k, _)| k.as_str()).collect();
                if !header.contains(&"param") {
                    names.retain(|k| *k != "param"); // appended from paramId
                }
                assert_eq!(names, header, "{name}: key order differs from grib_ls -m");
            }
            compared += 1;
        }
    }
    eprintln!(
        "compared {compared} messages with grib_ls (ecCodes {}); ecCodes could not decode {}: {:?}",
        haar_grib::eccodes_version(),
        undecodable.len(),
        undecodable
    );
    assert!(compared > 400, "only {compared} messages compared");
    // Only messages newer than this ecCodes (e.g. HEALPix grids) may fail.
    assert!(undecodable.len() < 20, "{undecodable:?}");
}

#[test]
fn mars_keys_in_parallel_threads_agree() {
    let data = std::fs::read(testdata().join("cfgrib/era5-levels-members.grib")).unwrap();
    let msgs: Vec<_> = messages(&data).map(Result::unwrap).collect();
    let serial: Vec<_> = msgs.iter().map(|m| mars_keys(m.bytes).unwrap()).collect();
    let parallel: Vec<Vec<_>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let msgs = &msgs;
                s.spawn(move || {
                    msgs.iter()
                        .enumerate()
                        .filter(|(i, _)| i % 4 == t)
                        .map(|(i, m)| (i, mars_keys(m.bytes).unwrap()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut merged: Vec<_> = parallel.into_iter().flatten().collect();
    merged.sort_by_key(|(i, _)| *i);
    assert_eq!(
        merged.into_iter().map(|(_, k)| k).collect::<Vec<_>>(),
        serial
    );
}

/// The `paramId` cache changes nothing: for every message of every real file, read in file
/// order and then again in reverse (so most second reads hit the cache with a signature some
/// other file stored), `mars_keys` equals `mars_keys_uncached`, which has ecCodes evaluate the
/// parameter tables every time. Errors must agree too.
#[test]
fn param_id_cache_changes_no_key() {
    let mut all = Vec::new();
    for file in real_files() {
        let data = std::fs::read(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        for m in messages(&data).filter_map(Result::ok) {
            all.push((format!("{name}@{}", m.offset), m.bytes.to_vec()));
        }
    }
    // The synthetic ensemble: many messages per parameter, the cache's best case.
    let mut synth = Vec::new();
    haar_grib::generate(&haar_grib::EnsembleSpec::tiny(), &mut synth).unwrap();
    for m in messages(&synth).map(Result::unwrap) {
        all.push((format!("synthetic@{}", m.offset), m.bytes.to_vec()));
    }
    let mut compared = 0;
    for (where_, msg) in all.iter().chain(all.iter().rev()) {
        let fmt = |r: Result<Vec<(String, String)>, haar_grib::KeyError>| match r {
            Ok(k) => Ok(k),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(
            fmt(mars_keys(msg)),
            fmt(haar_grib::mars_keys_uncached(msg)),
            "{where_}"
        );
        compared += 1;
    }
    assert!(compared > 2000, "{compared}");
}
