//! Differential test: haar's request parsing and expansion against pymetkit (metkit, the MARS
//! language reference implementation).
//!
//! `tests/pymetkit/expand.py` expands `tests/pymetkit/corpus.txt` with pymetkit and prints JSON;
//! this test expands the same cases with haar and compares every keyword haar resolves.
//! pymetkit must be importable (`pip install pymetkit`); set `HAAR_SKIP_PYMETKIT=1` to skip.
//!
//! Intentional differences, normalised away below:
//! * levels below 1: pymetkit prints `.5`, haar `0.5` (FDB5's TypeDouble prints `0.5`, and
//!   that is what FDB5 stores in its indexes);
//! * duplicates: pymetkit keeps `param=2t/167` as `167/167`, haar removes the repeat (a key can
//!   only be archived or retrieved once);
//! * pymetkit adds defaults (`domain=g`, `expver=0001`, …); haar adds nothing, so only keywords
//!   of the request are compared.
//!
//! Cases marked `~` in the corpus are accepted by haar and rejected by pymetkit (see comments
//! there); cases marked `!` must be rejected by both.

use std::path::Path;
use std::process::Command;

use haar_core::request::{Values, parse_requests};
use haar_core::{Context, Schema};
use serde_json::Value;

/// Per request, (keyword, values) in request order.
type Expanded = Vec<Vec<(String, Vec<String>)>>;

fn haar_expand(text: &str, ctx: &Context) -> Result<Expanded, String> {
    let requests = parse_requests(text).map_err(|e| e.to_string())?;
    requests
        .iter()
        .map(|r| {
            let r = r
                .resolve(Schema::builtin(), ctx)
                .map_err(|e| e.to_string())?;
            Ok(r.params
                .iter()
                .map(|p| {
                    let values = match &p.values {
                        Values::All => vec!["all".to_string()],
                        Values::List(v) => v.clone(),
                    };
                    (p.keyword.clone(), values)
                })
                .collect())
        })
        .collect()
}

/// pymetkit's values with the documented differences normalised away.
fn pymetkit_values(values: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in values.as_array().expect("values are a list") {
        let mut v = v.as_str().expect("values are strings").to_string();
        if v.starts_with('.') {
            v.insert(0, '0');
        }
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

#[test]
fn expansion_matches_pymetkit() {
    if std::env::var("HAAR_SKIP_PYMETKIT").as_deref() == Ok("1") {
        eprintln!("HAAR_SKIP_PYMETKIT=1: skipping the pymetkit differential test");
        return;
    }
    let importable = Command::new("python3")
        .args(["-c", "import pymetkit"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        importable,
        "pymetkit is not importable by python3: run `pip install pymetkit` \
         (or set HAAR_SKIP_PYMETKIT=1 to skip this differential test)"
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pymetkit");
    let output = Command::new("python3")
        .arg(dir.join("expand.py"))
        .arg(dir.join("corpus.txt"))
        .output()
        .expect("run python3 expand.py");
    assert!(
        output.status.success(),
        "expand.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let cases: Vec<Value> = serde_json::from_slice(&output.stdout).expect("expand.py prints JSON");
    assert!(
        cases.len() >= 40,
        "the corpus should hold at least 40 cases"
    );

    let ctx = Context::now();
    let mut failures = Vec::new();
    let mut compared = 0;
    for case in &cases {
        let text = case["case"].as_str().unwrap();
        let (kind, source) = match text.chars().next() {
            Some(c @ ('!' | '~')) => (c, &text[1..]),
            _ => (' ', text),
        };
        let theirs_ok = case["ok"].as_bool().unwrap();
        let ours = haar_expand(source, &ctx);
        match (kind, theirs_ok, &ours) {
            ('!', false, Err(_)) | ('~', false, Ok(_)) => continue,
            ('!', _, _) | ('~', _, _) => {
                failures.push(format!(
                    "{text}\n  expected {}; pymetkit ok={theirs_ok} ({}), haar: {ours:?}",
                    if kind == '!' {
                        "both to fail"
                    } else {
                        "pymetkit to fail and haar to succeed"
                    },
                    case["error"]
                ));
                continue;
            }
            (_, false, _) | (_, _, Err(_)) => {
                failures.push(format!(
                    "{text}\n  pymetkit: {}\n  haar: {ours:?}",
                    case["error"]
                ));
                continue;
            }
            _ => {}
        }
        let ours = ours.unwrap();
        let theirs = case["requests"].as_array().unwrap();
        if ours.len() != theirs.len() {
            failures.push(format!(
                "{text}\n  {} requests in haar, {} in pymetkit",
                ours.len(),
                theirs.len()
            ));
            continue;
        }
        for (mine, their) in ours.iter().zip(theirs) {
            for (keyword, values) in mine {
                let Some(expected) = their["values"].get(keyword) else {
                    failures.push(format!("{text}\n  pymetkit has no {keyword}"));
                    continue;
                };
                let expected = pymetkit_values(expected);
                compared += 1;
                if &expected != values {
                    failures.push(format!(
                        "{text}\n  {keyword}: haar {values:?}, pymetkit {expected:?}"
                    ));
                }
            }
        }
    }
    assert!(
        compared > 250,
        "only {compared} keywords compared: is the corpus read?"
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
