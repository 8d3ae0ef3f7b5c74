//! The synthetic ensemble generator: byte-for-byte determinism, the requested
//! MARS keys (read back through `mars_keys` and ecCodes' own `grib_ls`), and the
//! message sizes the benchmarks rely on.

use haar_grib::{EnsembleSpec, Grid, generate, mars_keys, messages};

fn keys_map(k: Vec<(String, String)>) -> std::collections::BTreeMap<String, String> {
    k.into_iter().collect()
}

#[test]
fn same_spec_same_bytes() {
    let spec = EnsembleSpec::tiny();
    let mut a = Vec::new();
    let mut b = Vec::new();
    let sa = generate(&spec, &mut a).unwrap();
    generate(&spec, &mut b).unwrap();
    assert_eq!(a, b);
    assert_eq!(sa.messages, spec.message_count());
    assert_eq!(sa.bytes, a.len() as u64);
    let mut other = spec.clone();
    other.date = 20240102;
    let mut c = Vec::new();
    generate(&other, &mut c).unwrap();
    assert_ne!(a, c);
}

#[test]
fn keys_are_the_requested_ones() {
    let spec = EnsembleSpec::tiny();
    let mut out = Vec::new();
    generate(&spec, &mut out).unwrap();
    let mut seen = Vec::new();
    for m in messages(&out) {
        let m = m.unwrap();
        assert_eq!(m.edition, 2);
        let k = keys_map(mars_keys(m.bytes).unwrap());
        assert_eq!(k["class"], "od");
        assert_eq!(k["stream"], "enfo");
        assert_eq!(k["type"], "pf");
        assert_eq!(k["expver"], "0001");
        assert_eq!(k["date"], "20240101");
        assert_eq!(k["time"], "1200");
        assert_eq!(k["levtype"], "pl");
        seen.push((
            k["step"].clone(),
            k["number"].clone(),
            k["levelist"].clone(),
            k["param"].clone(),
        ));
    }
    let mut want = Vec::new();
    for step in &spec.steps {
        for number in 1..=spec.members {
            for level in &spec.levels {
                for param in &spec.params {
                    want.push((
                        step.to_string(),
                        number.to_string(),
                        level.to_string(),
                        param.to_string(),
                    ));
                }
            }
        }
    }
    assert_eq!(seen, want);
}

#[test]
fn surface_fields_and_grib_ls_agree() {
    let mut spec = EnsembleSpec::tiny();
    spec.levels.clear();
    spec.params = vec![167];
    spec.expver = "abcd".into();
    spec.class = "rd".into();
    let mut out = Vec::new();
    generate(&spec, &mut out).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sfc.grib");
    std::fs::write(&path, &out).unwrap();
    let ls = std::process::Command::new("grib_get")
        .args(["-p", "class,stream,type,expver,levtype,paramId,step,number"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(ls.status.success());
    let text = String::from_utf8(ls.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["rd", "enfo", "pf", "abcd", "sfc", "167", "0", "1"]
    );
    assert_eq!(
        lines[3].split_whitespace().collect::<Vec<_>>(),
        ["rd", "enfo", "pf", "abcd", "sfc", "167", "6", "2"]
    );
    let k = keys_map(mars_keys(messages(&out).next().unwrap().unwrap().bytes).unwrap());
    assert!(!k.contains_key("levelist"));
}

#[test]
fn o320_messages_are_about_824_kib() {
    let spec = EnsembleSpec {
        members: 1,
        steps: vec![0, 6],
        levels: vec![850],
        params: vec![130],
        grid: Grid::O320,
        ..EnsembleSpec::tiny()
    };
    let mut out = Vec::new();
    let s = generate(&spec, &mut out).unwrap();
    assert_eq!(s.messages, 2);
    let m = messages(&out).next().unwrap().unwrap();
    let kib = m.bytes.len() as f64 / 1024.0;
    assert!(
        (820.0..840.0).contains(&kib),
        "O320 message is {kib:.1} KiB"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o320.grib");
    std::fs::write(&path, &out).unwrap();
    let got = std::process::Command::new("grib_get")
        .args([
            "-p",
            "gridType,isOctahedral,numberOfDataPoints,bitsPerValue",
        ])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8(got.stdout).unwrap();
    assert_eq!(
        text.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["reduced_gg", "1", "421120", "16"]
    );
}
