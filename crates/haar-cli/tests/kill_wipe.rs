//! kill -9 mid-wipe and mid-purge (issue 27): a real `haar wipe` / `haar purge` process on a
//! store of many fields (posix and pmem backends) is killed with SIGKILL at random moments of
//! its run, several times from the same starting store; after each kill the store must be
//! consistent:
//!
//! - every field the operation does not touch is listed and retrieved byte-identical;
//! - every field it targets is either still there byte-identical or gone (a purge never
//!   changes what a reader sees: the latest version of every field not wiped);
//! - `haar list`, `haar retrieve` and `haar info` report no damage (exit 0);
//! - running the operation again completes, and then the store is exactly what an
//!   uninterrupted run leaves.
//!
//! The random moments come from a seed printed on failure (`HAAR_KILL_SEED` replays one).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use haar::{ConfigSource, OpenOptions};
use haar_core::Key;

/// Databases (one per date) and fields per database.
const DATES: [&str; 6] = [
    "20261101", "20261102", "20261103", "20261104", "20261105", "20261106",
];
const STEPS: u32 = 100;
/// Bytes per field: each field's bytes name its key and version, so any mix-up shows.
const FIELD_BYTES: usize = 4096;
/// Kills per operation and backend.
const KILLS: usize = 12;

/// The key of one field, as `haar list` prints it.
fn key(date: &str, step: u32) -> String {
    format!(
        "class=od,expver=0001,stream=oper,date={date},time=1200,domain=g,type=fc,levtype=sfc,step={step},param=167"
    )
}

/// The bytes of version `version` of the field `key`.
fn body(key: &str, version: u32) -> Vec<u8> {
    let head = format!("{key}|v{version}|");
    let mut b: Vec<u8> = head.bytes().collect();
    let mut x = b
        .iter()
        .fold(version, |a, &c| a.wrapping_mul(31).wrapping_add(c as u32));
    while b.len() < FIELD_BYTES {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b.push(x as u8);
    }
    b
}

/// A xorshift generator: the kill moments, reproducible from the printed seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn seed() -> u64 {
    std::env::var("HAAR_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        })
}

/// A store directory with its configuration file (a small pool for pmem, so that copies are
/// cheap).
struct Store {
    dir: PathBuf,
    config: PathBuf,
}

impl Store {
    fn new(dir: &Path, backend: &str) -> Store {
        std::fs::create_dir_all(dir).unwrap();
        let config = dir.join("haar.yaml");
        std::fs::write(
            &config,
            format!(
                "backend: {backend}\nroots: [{}]\npool_size: 25165824\npool_chunk: 1048576\n",
                dir.join("root").display()
            ),
        )
        .unwrap();
        Store {
            dir: dir.to_path_buf(),
            config,
        }
    }

    /// A copy of this store (files and pool) under `dir`, its configuration naming the copy.
    fn copy_to(&self, dir: &Path, backend: &str) -> Store {
        let _ = std::fs::remove_dir_all(dir);
        let copy = Store::new(dir, backend);
        let o = Command::new("cp")
            .args(["-a", "--sparse=always"])
            .arg(self.dir.join("root"))
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "cp: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        copy
    }

    fn haar(&self, args: &[&str]) -> Output {
        let mut all = vec!["--config", self.config.to_str().unwrap()];
        all.extend_from_slice(args);
        common::haar(all)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(common::haar_bin());
        c.arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("HAAR_CONFIG")
            .env_remove("FDB5_CONFIG")
            .env_remove("FDB5_CONFIG_FILE")
            .env_remove("FDB_HOME")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Archives `fields` (key → version) through the library, flushing every 25 fields.
    fn archive(&self, fields: &[(String, u32)]) {
        let opts = OpenOptions {
            config: ConfigSource::File(self.config.clone()),
            ..OpenOptions::default()
        };
        let mut store = opts.field_store().expect("open the store");
        for (i, (k, version)) in fields.iter().enumerate() {
            store
                .archive(&Key::parse(k).unwrap(), &body(k, *version))
                .unwrap();
            if i % 25 == 24 {
                store.flush().unwrap();
            }
        }
        store.flush().unwrap();
    }

    /// `haar list`'s keys; fails the test unless it exits 0.
    fn list(&self, what: &str) -> BTreeSet<String> {
        let o = self.haar(&["list"]);
        assert_eq!(o.status.code(), Some(0), "{what}: haar list: {}", text(&o));
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Retrieves `request` with `haar retrieve`; fails the test unless it exits 0 with
    /// exactly `expected` (key → version) as its fields.
    fn retrieve_exactly(&self, request: &str, expected: &BTreeMap<String, u32>, what: &str) {
        let out = self.dir.join("out.bin");
        let o = self.haar(&["retrieve", request, "-o", out.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{what}: haar retrieve {request}: {}",
            text(&o)
        );
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(
            bytes.len() % FIELD_BYTES,
            0,
            "{what}: {request}: torn output"
        );
        let mut got: Vec<Vec<u8>> = bytes.chunks(FIELD_BYTES).map(<[u8]>::to_vec).collect();
        let mut want: Vec<Vec<u8>> = expected.iter().map(|(k, v)| body(k, *v)).collect();
        got.sort();
        want.sort();
        if got != want {
            let name = |b: &Vec<u8>| {
                String::from_utf8_lossy(&b[..b.iter().position(|&c| c == b'|').unwrap_or(0) + 4])
                    .into_owned()
            };
            let got: BTreeSet<String> = got.iter().map(name).collect();
            let want: BTreeSet<String> = want.iter().map(name).collect();
            panic!(
                "{what}: {request}: bytes differ; unexpected {:?}; missing {:?}",
                got.difference(&want).take(5).collect::<Vec<_>>(),
                want.difference(&got).take(5).collect::<Vec<_>>()
            );
        }
    }

    fn info_ok(&self, what: &str) {
        let o = self.haar(&["info"]);
        assert_eq!(o.status.code(), Some(0), "{what}: haar info: {}", text(&o));
    }
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs the operation to completion; its wall time.
fn run_to_end(store: &Store, args: &[&str], what: &str) -> Duration {
    let t = Instant::now();
    let o = store.command(args).output().unwrap();
    let took = t.elapsed();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{what}: haar {args:?}: {}",
        text(&o)
    );
    took
}

/// Starts the operation and kills it with SIGKILL after `after`; whether it was still
/// running then.
fn kill_after(store: &Store, args: &[&str], after: Duration) -> bool {
    let mut child = store.command(args).spawn().unwrap();
    std::thread::sleep(after);
    let running = child.try_wait().unwrap().is_none();
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let out = child.wait_with_output().unwrap();
    if !running {
        // It finished first: it must have succeeded.
        assert_eq!(out.status.code(), Some(0), "haar {args:?}: {}", text(&out));
    }
    running
}

/// One scenario: what the operation targets and what it must leave.
struct Scenario {
    name: &'static str,
    /// The operation's arguments.
    args: Vec<String>,
    /// Every field before the operation: key → latest version (masked versions are older).
    before: BTreeMap<String, u32>,
    /// Every field after an uninterrupted run: key → version.
    after: BTreeMap<String, u32>,
    /// Requests covering exactly `after`, retrieved byte for byte.
    kept_requests: Vec<String>,
}

fn every_date() -> String {
    DATES.join("/")
}

fn all_fields(version: u32) -> Vec<(String, u32)> {
    DATES
        .iter()
        .flat_map(|d| (0..STEPS).map(move |s| (key(d, s), version)))
        .collect()
}

/// A request for `dates` (`a/b/c`) and `steps` (`A/to/B`, by 1: MARS's default `by` for
/// steps is 12).
fn request(dates: &str, steps: &str) -> String {
    let steps = if steps.contains("/to/") {
        format!("{steps}/by/1")
    } else {
        steps.to_string()
    };
    format!(
        "class=od,expver=0001,stream=oper,date={dates},time=1200,domain=g,type=fc,levtype=sfc,step={steps},param=167"
    )
}

/// Checks the store after a kill (or after the re-run, with `done`).
fn check(store: &Store, s: &Scenario, what: &str, done: bool) {
    let listed = store.list(what);
    let kept: BTreeSet<&String> = s.after.keys().collect();
    for k in &kept {
        assert!(listed.contains(*k), "{what}: kept field {k} is not listed");
    }
    for k in &listed {
        assert!(
            s.before.contains_key(k),
            "{what}: listed field {k} was never archived"
        );
        if done {
            assert!(
                kept.contains(k),
                "{what}: {k} is still listed after the re-run"
            );
        }
    }
    for r in &s.kept_requests {
        let expected: BTreeMap<String, u32> = s
            .after
            .iter()
            .filter(|(k, _)| in_request(k, r))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        store.retrieve_exactly(r, &expected, what);
    }
    // Targeted fields still listed are whole and of their latest version.
    let targeted: BTreeMap<String, u32> = listed
        .iter()
        .filter(|k| !kept.contains(k))
        .map(|k| (k.clone(), s.before[k]))
        .collect();
    for (k, v) in targeted.iter().take(20) {
        let one: BTreeMap<String, u32> = [(k.clone(), *v)].into();
        store.retrieve_exactly(k, &one, what);
    }
    store.info_ok(what);
    if done {
        // Nothing a killed run left behind survives the re-run: no renamed-away database
        // directory (posix), nothing more to purge.
        let leftovers = find_named(&store.dir.join("root"), ".wiped-");
        assert!(leftovers.is_empty(), "{what}: left behind: {leftovers:?}");
        if s.args[0] == "purge" {
            let o = store.haar(&["purge", "class=od"]);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success() && out.contains("would drop 0 "),
                "{what}: {}",
                text(&o)
            );
        }
    }
}

/// Paths under `dir` whose name starts with `prefix`.
fn find_named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_name().to_string_lossy().starts_with(prefix) {
            found.push(p.clone());
        }
        if p.is_dir() {
            found.extend(find_named(&p, prefix));
        }
    }
    found
}

/// Whether the key `k` matches the request `r` (`a/b/c` lists and `a/to/b` of integers).
fn in_request(k: &str, r: &str) -> bool {
    let key: BTreeMap<&str, &str> = k.split(',').filter_map(|e| e.split_once('=')).collect();
    r.split(',')
        .filter_map(|e| e.split_once('='))
        .all(|(kw, vals)| {
            let Some(v) = key.get(kw) else { return false };
            let parts: Vec<&str> = vals.split('/').collect();
            if parts.len() >= 3 && parts[1] == "to" {
                let (lo, hi, v): (i64, i64, i64) = (
                    parts[0].parse().unwrap(),
                    parts[2].parse().unwrap(),
                    v.parse().unwrap(),
                );
                (lo..=hi).contains(&v)
            } else {
                parts.contains(v)
            }
        })
}

fn scenarios(backend: &str, base: &Path) -> Vec<(Store, Scenario)> {
    let all = all_fields(1);
    let mut out = Vec::new();

    // Whole databases: three of the six dates, with their files (posix) or records (pmem).
    let whole = Store::new(&base.join("whole"), backend);
    whole.archive(&all);
    let before: BTreeMap<String, u32> = all.iter().cloned().collect();
    let wiped_dates = &DATES[..3];
    let after = before
        .iter()
        .filter(|(k, _)| {
            !wiped_dates
                .iter()
                .any(|d| k.contains(&format!("date={d},")))
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    out.push((
        whole,
        Scenario {
            name: "wipe of whole databases",
            args: vec![
                "wipe".into(),
                format!(
                    "class=od,expver=0001,stream=oper,date={},time=1200,domain=g",
                    wiped_dates.join("/")
                ),
                "--doit".into(),
            ],
            before: before.clone(),
            after,
            kept_requests: vec![request(
                &DATES[3..].join("/"),
                &format!("0/to/{}", STEPS - 1),
            )],
        },
    ));

    // Part of every database: steps 0-49 hidden (tombstones) until a purge.
    let partial = Store::new(&base.join("partial"), backend);
    partial.archive(&all);
    let after = before
        .iter()
        .filter(|(k, _)| !in_request(k, &request(&every_date(), "0/to/49")))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    out.push((
        partial,
        Scenario {
            name: "wipe of part of every database",
            args: vec![
                "wipe".into(),
                request(&every_date(), "0/to/49"),
                "--doit".into(),
            ],
            before: before.clone(),
            after,
            kept_requests: vec![request(&every_date(), &format!("50/to/{}", STEPS - 1))],
        },
    ));

    // A purge of masked versions (steps 0-29 of every date archived again) and of fields a
    // wipe hid (steps 90-99 of the first date).
    let purge = Store::new(&base.join("purge"), backend);
    purge.archive(&all);
    let again: Vec<(String, u32)> = DATES
        .iter()
        .flat_map(|d| (0..30).map(move |s| (key(d, s), 2)))
        .collect();
    purge.archive(&again);
    let hidden = request(DATES[0], "90/to/99");
    let o = purge.haar(&["wipe", &hidden, "--doit"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let mut visible: BTreeMap<String, u32> = before.clone();
    visible.extend(again.iter().cloned());
    visible.retain(|k, _| !in_request(k, &hidden));
    out.push((
        purge,
        Scenario {
            name: "purge of masked and wiped fields",
            args: vec!["purge".into(), "class=od".into(), "--doit".into()],
            before: visible.clone(),
            after: visible,
            kept_requests: vec![
                request(&DATES[1..].join("/"), &format!("0/to/{}", STEPS - 1)),
                request(DATES[0], "0/to/89"),
            ],
        },
    ));
    out
}

fn kill_mid_operations(backend: &str) {
    let seed = seed();
    let mut rng = Rng(seed);
    eprintln!("{backend}: HAAR_KILL_SEED={seed}");
    let tmp = tempfile::tempdir().unwrap();
    for (pristine, s) in scenarios(backend, &tmp.path().join("pristine")) {
        let args: Vec<&str> = s.args.iter().map(String::as_str).collect();
        let what = |i: usize| format!("{backend}, {}, seed {seed}, kill {i}", s.name);
        // The kills fall between the end of a dry run's time (start-up and reading the
        // store: nothing is changed before) and the end of an uninterrupted run, on copies.
        let dry_args: Vec<&str> = args.iter().copied().filter(|a| *a != "--doit").collect();
        let timed = pristine.copy_to(&tmp.path().join("timed"), backend);
        check(&timed, &s, &what(0), false);
        let dry = run_to_end(&timed, &dry_args, &what(0));
        let full = run_to_end(&timed, &args, &what(0));
        check(&timed, &s, &format!("{} (uninterrupted)", what(0)), true);
        let from = dry.min(full) * 3 / 4;
        let mut mid = 0;
        for i in 1..=KILLS {
            let store = pristine.copy_to(&tmp.path().join("work"), backend);
            let after = from + Duration::from_micros(rng.below((full - from).as_micros() as u64));
            mid += usize::from(kill_after(&store, &args, after));
            check(&store, &s, &format!("{} after {after:?}", what(i)), false);
            run_to_end(&store, &args, &format!("{} (re-run)", what(i)));
            check(&store, &s, &format!("{} (re-run)", what(i)), true);
        }
        eprintln!(
            "{backend}: {}: {KILLS} kills from {from:?} to {full:?} (dry run {dry:?}), {mid} while running",
            s.name
        );
        assert!(mid > 0, "{}: no kill hit a running process", what(0));
    }
}

#[test]
fn kill_9_mid_wipe_and_purge_leaves_a_consistent_posix_store() {
    kill_mid_operations("posix");
}

#[test]
fn kill_9_mid_wipe_and_purge_leaves_a_consistent_pmem_pool() {
    kill_mid_operations("pmem");
}
