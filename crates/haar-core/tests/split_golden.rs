//! Regression: `Schema::split` and `Request::resolve`/`matches` give byte-identical results
//! (successes and error messages) for a deterministic corpus, against fixtures recorded with the
//! original implementation. Regenerate (only when a change of behaviour is intended) with
//! `HAAR_BLESS=1 cargo test -p haar-core --test split_golden`.

use std::fmt::Write as _;

use haar_core::schema::{Matcher, Rule};
use std::sync::Arc;

use haar_core::{Context, Key, Request, Schema, Splitter};

const FDB5: &str = include_str!("fixtures/fdb5.schema");

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a>(&mut self, pool: &[&'a str]) -> &'a str {
        pool[self.below(pool.len())]
    }
    /// A value for `keyword`: usually from its pool, sometimes one its type may reject.
    fn value(&mut self, keyword: &str) -> &'static str {
        if self.chance(3) {
            self.pick(&[
                "x", "abcde", "apr", "20240230", "25", "2t", "1:2:3", " ", "-", "ÄB",
            ])
        } else {
            self.pick(pool(keyword))
        }
    }
}

/// Plausible (and some implausible) values per keyword.
fn pool(keyword: &str) -> &'static [&'static str] {
    match keyword {
        "class" => &[
            "od", "OD", "ti", "s2", "ms", "el", "ea", "cs", "mc", "rd", "e2", "rd",
        ],
        "expver" => &["1", "0001", "abcd", "x", "01"],
        "stream" => &[
            "oper", "OPER", "dcda", "scda", "enfo", "efov", "wave", "waef", "enda", "elda", "lwda",
            "mmsf", "mnth", "moda", "supd", "dacl", "gfas", "zzzz", "efhc", "mnfh", "wamo", "msdc",
            "espd", "seap", "ewla", "mfam", "sens", "ehmm", "kwbc",
        ],
        "date" => &["20240101", "2024-01-05", "-1", "0", "20100415"],
        "refdate" | "hdate" => &["20240101", "20230601", "-3"],
        "time" => &["0", "12", "1200", "12:00", "0600", "6"],
        "domain" => &["g", "G", "", "m"],
        "type" => &[
            "fc", "an", "pf", "cf", "cl", "im", "ssd", "4i", "me", "ef", "ofb", "tu", "em", "es",
            "pb", "ga", "gsd", "sv", "FC",
        ],
        "levtype" => &["pl", "sfc", "ml", "dp", "PL", "pt"],
        "levelist" => &["500", "500.0", "1000", "0.5", ""],
        "step" => &["0", "6", "12h", "30m", "0-24", "90m"],
        "param" => &["130", "130.128", "167.228", "0130", "140229"],
        "number" | "system" | "method" | "iteration" | "channel" | "frequency" | "direction"
        | "fcmonth" | "ident" | "instrument" | "diagnostic" => &["1", "01", "0", "+3"],
        "grid" => &["1/1", "0.25/0.25", "O1280"],
        "icmodel" => &["nudging", "ab"],
        "country" => &["de", "it", "fr"],
        "latitude" | "longitude" => &["10.0", "-5.5", "0"],
        _ => &["1", "a", "ecmf", "X"],
    }
}

/// Every keyword the schemas mention, plus one no rule knows.
const EXTRA: &[&str] = &[
    "origin",
    "system",
    "method",
    "hdate",
    "refdate",
    "fcmonth",
    "fcperiod",
    "quantile",
    "product",
    "section",
    "ident",
    "instrument",
    "channel",
    "iteration",
    "obsgroup",
    "reportype",
    "anoffset",
    "frequency",
    "direction",
    "model",
    "country",
    "dbase",
    "rki",
    "rty",
    "ty",
    "bcmodel",
    "icmodel",
    "reference",
    "grid",
    "diagnostic",
    "leadtime",
    "opttime",
    "latitude",
    "longitude",
    "range",
    "number",
    "frobnicate",
];

const CORE: &[&str] = &[
    "class", "expver", "stream", "date", "time", "domain", "type", "levtype", "levelist", "step",
    "param",
];

fn random_key(rng: &mut Rng) -> Key {
    let mut key = Key::new();
    let mut order: Vec<&str> = CORE.to_vec();
    for e in EXTRA {
        if rng.chance(3) {
            order.push(e);
        }
    }
    // Shuffle so that key order varies too.
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    for k in order {
        let keep = if CORE.contains(&k) { 96 } else { 100 };
        if rng.chance(keep) {
            key.push(k, rng.value(k));
        }
    }
    key
}

/// A key shaped after one rule path (db, index, datum), so that every rule gets exercised.
fn rule_key(rng: &mut Rng, path: [&Rule; 3]) -> Key {
    let mut key = Key::new();
    for rule in path {
        for p in &rule.predicates {
            let v = match &p.matcher {
                Matcher::Values(vs) if rng.chance(90) => vs[rng.below(vs.len())].clone(),
                Matcher::Optional(_) | Matcher::Hidden(_) if rng.chance(50) => continue,
                _ => rng.value(&p.keyword).to_string(),
            };
            key.push(p.keyword.clone(), v);
        }
    }
    if rng.chance(10) {
        key.push(rng.pick(EXTRA), "1");
    }
    key
}

fn corpus(schema: &Schema, seed: u64) -> Vec<Key> {
    let mut rng = Rng(seed);
    let mut keys = Vec::new();
    for db in &schema.rules {
        for index in &db.rules {
            for datum in &index.rules {
                for _ in 0..8 {
                    keys.push(rule_key(&mut rng, [db, index, datum]));
                }
            }
        }
    }
    for _ in 0..3000 {
        keys.push(random_key(&mut rng));
    }
    keys
}

fn split_report(schema: &Schema, keys: &[Key]) -> String {
    let ctx = Context::at(2024, 3, 1);
    split_report_by(keys, |key| match schema.split(key, &ctx) {
        Ok(s) => format!("ok {s}"),
        Err(e) => format!("err {e}"),
    })
}

/// The same report through a [`Splitter`] (which reuses the last split when it can).
/// Also returns how many splits reused the previous one.
fn splitter_report(schema: &Schema, keys: &[Key]) -> (String, u64) {
    let mut splitter = Splitter::new(Arc::new(schema.clone()), Context::at(2024, 3, 1));
    let report = split_report_by(keys, |key| match splitter.split(key) {
        Ok(s) => format!("ok {s}"),
        Err(e) => format!("err {e}"),
    });
    (report, splitter.reused())
}

fn split_report_by(keys: &[Key], mut split: impl FnMut(&Key) -> String) -> String {
    let mut out = String::new();
    for key in keys {
        let got = split(key);
        writeln!(out, "{key}\n  {got}").unwrap();
    }
    out
}

/// Each key of `keys` followed by `n` variants, each changing one to three values of the one
/// before (sometimes to an empty or a rejected value): runs of keys like an archive stream's.
fn with_variants(keys: &[Key], seed: u64, n: usize) -> Vec<Key> {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    for key in keys {
        out.push(key.clone());
        let mut k = key.clone();
        for _ in 0..n {
            let keywords: Vec<String> = k.keywords().map(str::to_string).collect();
            if keywords.is_empty() {
                break;
            }
            for _ in 0..1 + rng.below(3) {
                let kw = &keywords[rng.below(keywords.len())];
                let v = rng.value(kw);
                k.push(kw.clone(), v);
            }
            out.push(k.clone());
        }
    }
    out
}

fn requests(rng: &mut Rng) -> Vec<String> {
    let mut out = vec![
        "retrieve,class=od,expver=1,stream=oper,date=20260101,time=1200,domain=g,type=fc,\
         levtype=pl,levelist=500,step=6,param=130"
            .to_string(),
        "retrieve,class=od,date=-2/to/0,time=0/to/18,step=0/to/24/by/6,levelist=1000/to/998"
            .to_string(),
        "retrieve,stram=oper".to_string(),
        "retrieve,frobnicate=1".to_string(),
        "retrieve,reportype=1,anoffset=9,rki=1".to_string(),
        "retrieve,param=t".to_string(),
        "retrieve,number=1/to/2/by/0".to_string(),
        "retrieve,class=a/to/b".to_string(),
        "retrieve,step=to/6".to_string(),
        "retrieve,levelist=all,step=0/6/0/12h,time=12/1200/12:00".to_string(),
    ];
    for _ in 0..600 {
        let mut parts = vec!["retrieve".to_string()];
        for k in CORE.iter().chain(EXTRA) {
            if !rng.chance(if CORE.contains(k) { 70 } else { 6 }) {
                continue;
            }
            let n = 1 + rng.below(3);
            let vals: Vec<String> = (0..n)
                .map(|_| {
                    let v = rng.value(k);
                    if v.is_empty() || v.contains('/') {
                        format!("\"{v}\"")
                    } else {
                        v.to_string()
                    }
                })
                .collect();
            let vals = if rng.chance(5) {
                "all".to_string()
            } else {
                vals.join("/")
            };
            parts.push(format!("{k}={vals}"));
        }
        out.push(parts.join(","));
    }
    out
}

fn request_report(schema: &Schema, keys: &[Key]) -> String {
    let ctx = Context::at(2024, 3, 1);
    let mut rng = Rng(77);
    let full: Vec<Key> = keys
        .iter()
        .filter_map(|k| schema.split(k, &ctx).ok())
        .map(|s| s.full())
        .collect();
    let mut out = String::new();
    for text in requests(&mut rng) {
        let req = match Request::parse(&text) {
            Ok(r) => r,
            Err(e) => {
                writeln!(out, "{text}\n  parse-err {e}").unwrap();
                continue;
            }
        };
        match req.resolve(schema, &ctx) {
            Ok(r) => {
                let hits: Vec<usize> = (0..full.len()).filter(|&i| r.matches(&full[i])).collect();
                writeln!(
                    out,
                    "{text}\n  ok {r}\n  count {} matches {hits:?}",
                    r.count()
                )
                .unwrap();
            }
            Err(e) => writeln!(out, "{text}\n  err {e}").unwrap(),
        }
    }
    out
}

fn check(name: &str, got: &str) {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("HAAR_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    if want != got {
        let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
        let i = w
            .iter()
            .zip(&g)
            .position(|(a, b)| a != b)
            .unwrap_or(w.len().min(g.len()));
        panic!(
            "{name} differs at line {}:\n  want {:?}\n  got  {:?}\n  (context {:?})",
            i + 1,
            w.get(i),
            g.get(i),
            w.get(i.saturating_sub(1))
        );
    }
}

#[test]
fn builtin_split_unchanged() {
    let s = Schema::builtin();
    let report = split_report(s, &corpus(s, 0x9e37_79b9_7f4a_7c15));
    check("split_builtin.golden", &report);
}

#[test]
fn fdb5_split_unchanged() {
    let s = Schema::parse(FDB5).unwrap();
    let report = split_report(&s, &corpus(&s, 0x2545_f491_4f6c_dd1d));
    check("split_fdb5.golden", &report);
}

#[test]
fn splitter_gives_the_golden_splits() {
    let s = Schema::builtin();
    let keys = corpus(s, 0x9e37_79b9_7f4a_7c15);
    check("split_builtin.golden", &splitter_report(s, &keys).0);
    let s = Schema::parse(FDB5).unwrap();
    let keys = corpus(&s, 0x2545_f491_4f6c_dd1d);
    check("split_fdb5.golden", &splitter_report(&s, &keys).0);
}

#[test]
fn splitter_equals_split_on_runs_of_similar_keys() {
    let fdb5 = Schema::parse(FDB5).unwrap();
    for (s, seed) in [(Schema::builtin(), 11), (&fdb5, 12)] {
        let keys = with_variants(&corpus(s, seed), seed ^ 0x5555, 6);
        let want = split_report(s, &keys);
        let (got, reused) = splitter_report(s, &keys);
        // Many variants take the fast path (else this test proves little).
        assert!(reused > 500, "{reused} of {}", keys.len());
        assert_eq!(want.len(), got.len());
        for (w, g) in want.lines().zip(got.lines()) {
            assert_eq!(w, g);
        }
    }
    // The archive stream's shape: only datum values change, the rule stays the same.
    let s = Schema::builtin();
    let mut keys = Vec::new();
    for i in 0..300 {
        keys.push(
            Key::parse(&format!(
                "class=od,expver=0001,stream=oper,date=20261121,time=1200,domain=g,type=fc,\
                 levtype=pl,levelist={},step={},param={}",
                i % 100 + 1,
                i / 100,
                ["130", "130.128", "0130", "167"][i % 4]
            ))
            .unwrap(),
        );
    }
    let (got, reused) = splitter_report(s, &keys);
    assert_eq!(split_report(s, &keys), got);
    assert_eq!(reused, 299);
}

#[test]
fn resolve_and_matches_unchanged() {
    let s = Schema::builtin();
    let keys = corpus(s, 0x1234_5678_9abc_def1);
    check("requests_builtin.golden", &request_report(s, &keys));
}
