//! Differential test against the real ECMWF FDB5 (Debian `fdb5` 5.10.x tools): the same real
//! GRIB files are archived into FDB5 with `fdb-write` and into haar with `haar archive`, both
//! with the schema `/etc/fdb/schema`; then
//!
//! - both accept and refuse the same files;
//! - for the whole database and a set of requests (one param, a step range, a level list,
//!   ensemble members), `fdb-list` and `haar list --fdb` give the same keys;
//! - `fdb-read` and `haar retrieve`, given the same request file, return the same messages
//!   (same bytes; as a multiset, and for one-field-per-request files in the same order).
//!
//! If `fdb-write` is not installed the test fails and says to install `fdb5`, unless
//! `HAAR_SKIP_FDB5=1`.
//!
//! # How FDB5 5.10.8 prints and reads keys (checked by running the tools)
//!
//! - `fdb-list --porcelain REQUEST` prints one line per field,
//!   `{class=..,expver=..,stream=..,date=..,time=..,domain=..}{type=..,levtype=..}{step=..,..}`,
//!   levels and keywords in schema order, values canonical: `expver=0001`, `time=1200`,
//!   `param` as a paramId (`param=130`, `param=228082`), `levelist` an integer (`850`),
//!   `step` an integer (`78`). The whole store: `--minimum-keys= --all` (plain `--all` is
//!   refused while `class,expver` are the minimum keys).
//! - Optional schema keywords a field lacks (`levelist?` for surface fields, `number?` for a
//!   control forecast, `quantile?`, `direction?`, `frequency?`) are OMITTED: `{step=0,param=167}`.
//!   `haar list --fdb` omits them too (`fdb_layout_matches_fdb_list_line_for_line`); the key
//!   comparisons below still drop empty values, so they compare keys, not layout.
//! - `date=aug-01` (a climatological date with no year, earthkit-data's `t_year_missing.grib`)
//!   is archived and listed by FDB5 as is (its schema types `date` as `Date`, whose
//!   `TypeDate::tidy` keeps values not starting with `0` or `-`), but `fdb-read` of it fails
//!   ("BadValue: Invalid date aug-01"). haar archives and lists it the same way and can also
//!   retrieve it: see `climatological_date_archives_like_fdb5`. The byte comparisons with
//!   `fdb-read` leave that one field out.
//! - FDB5 5.10's request expansion (metkit) fails with "TypeParam: cannot find a context to
//!   expand 'param'" for any `param` in a request with `class=ea` (ERA5): requests on ERA5 data
//!   are given to `fdb-list`/`fdb-read` with `--raw` (no expansion), so they use explicit value
//!   lists and canonical values.
//! - `fdb-read` reads every request of a request file and writes the fields request after
//!   request.

mod common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::*;

/// A private FDB5 under a temporary directory: `config.yaml`, an empty `dbnames`, `db/`.
pub struct Fdb5 {
    pub dir: PathBuf,
}

impl Fdb5 {
    fn new(dir: PathBuf) -> Fdb5 {
        std::fs::create_dir_all(dir.join("db")).unwrap();
        std::fs::write(dir.join("dbnames"), "").unwrap();
        std::fs::write(
            dir.join("config.yaml"),
            format!(
                "{{type: local, engine: toc, schema: /etc/fdb/schema, spaces: [{{handler: Default, roots: [{{path: {}}}]}}]}}\n",
                dir.join("db").display()
            ),
        )
        .unwrap();
        Fdb5 { dir }
    }

    fn config(&self) -> PathBuf {
        self.dir.join("config.yaml")
    }

    fn cmd(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.env("FDB5_CONFIG_FILE", self.config())
            .env("FDB_DBNAMES_FILE", self.dir.join("dbnames"));
        c
    }

    fn run(&self, tool: &str, args: &[&OsStr]) -> Output {
        self.cmd(tool)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
    }

    fn run_ok(&self, tool: &str, args: &[&OsStr]) -> Vec<u8> {
        let out = self.run(tool, args);
        assert!(
            out.status.success(),
            "{tool} {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// `fdb-list --porcelain` lines for a request (`None`: the whole store).
    fn list(&self, request: Option<&str>, raw: bool) -> Vec<String> {
        let mut args: Vec<&OsStr> = vec![OsStr::new("--porcelain")];
        if raw {
            args.push(OsStr::new("--raw"));
        }
        match request {
            Some(r) => args.push(OsStr::new(r)),
            None => args.extend([OsStr::new("--minimum-keys="), OsStr::new("--all")]),
        }
        String::from_utf8(self.run_ok("fdb-list", &args))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(String::from)
            .collect()
    }

    /// `fdb-read [--raw] REQFILE OUT`, returning OUT's bytes.
    fn read(&self, request_file: &Path, raw: bool, work: &Path) -> Vec<u8> {
        let out = work.join(format!(
            "{}.fdb.grib",
            request_file.file_name().unwrap().to_string_lossy()
        ));
        let mut args: Vec<&OsStr> = Vec::new();
        if raw {
            args.push(OsStr::new("--raw"));
        }
        args.extend([request_file.as_os_str(), out.as_os_str()]);
        self.run_ok("fdb-read", &args);
        std::fs::read(&out).unwrap()
    }
}

/// Whether the FDB5 tools are there; fails with what to install unless `HAAR_SKIP_FDB5=1`.
fn fdb5_available() -> bool {
    let found = Command::new("fdb-write")
        .output()
        .map(|_| true)
        .unwrap_or(false);
    if !found {
        assert!(
            std::env::var("HAAR_SKIP_FDB5").as_deref() == Ok("1"),
            "fdb-write not found: install the real FDB5 (Debian/Ubuntu: `apt-get install fdb5`, \
             or `pip install pyfdb`, whose fdb5lib wheel brings the fdb-* tools), or set \
             HAAR_SKIP_FDB5=1 to skip the differential test"
        );
        eprintln!(
            "WARNING: fdb-write not found and HAAR_SKIP_FDB5=1: FDB5 differential test skipped"
        );
    }
    found
}

/// `haar ARGS` with FDB5's command-line tools out of reach (`PATH` an empty directory), so an
/// import that succeeds read FDB5 through its C API; `envs` are set on top.
fn haar_without_fdb5_tools(args: &[&OsStr], envs: &[(&str, &OsStr)]) -> Output {
    static EMPTY: OnceLock<tempfile::TempDir> = OnceLock::new();
    let empty = EMPTY.get_or_init(|| tempfile::tempdir().unwrap());
    Command::new(env!("CARGO_BIN_EXE_haar"))
        .args(args)
        .env("PATH", empty.path())
        .env_remove("HAAR_CONFIG")
        .env_remove("FDB5_CONFIG")
        .env_remove("FDB5_CONFIG_FILE")
        .env_remove("FDB_HOME")
        .env_remove("FDB_DBNAMES_FILE")
        .env_remove("HAAR_FDB5_LIB")
        .envs(envs.iter().copied())
        .output()
        .expect("run haar")
}

/// [`haar_without_fdb5_tools`] of an `import-fdb5 --json`, which must succeed: its summary.
fn import_summary(args: &[&OsStr], envs: &[(&str, &OsStr)]) -> serde_json::Value {
    let out = haar_without_fdb5_tools(args, envs);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Both stores holding the same files, built once per test binary.
struct World {
    _tmp: tempfile::TempDir,
    work: PathBuf,
    fdb: Fdb5,
    haar_root: PathBuf,
    haar_config: PathBuf,
    /// Files `fdb-write` accepted, in archive order.
    accepted: Vec<PathBuf>,
    /// Files `fdb-write` refused.
    refused: Vec<PathBuf>,
    /// What haar refused of `accepted` (by file), from `archive --json`.
    haar_failed: Vec<String>,
}

/// Files FDB5 archives and haar refuses (reported disagreements, each with its own test).
const KNOWN_DISAGREEMENTS: &[&str] = &[];

fn world() -> Option<&'static World> {
    static W: OnceLock<Option<World>> = OnceLock::new();
    W.get_or_init(|| {
        if !fdb5_available() {
            return None;
        }
        let _t = Timer::start("differential set-up (fdb-write and haar archive of every file)");
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().to_path_buf();
        let files = all_real_files();

        // Which files does FDB5 accept? Each file alone into a scratch FDB (a failing
        // fdb-write must not leave half a file in the FDB under comparison), in parallel.
        let threads = 3;
        let verdicts: Vec<(usize, bool)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let (files, work) = (&files, &work);
                    s.spawn(move || {
                        let mut out = Vec::new();
                        for (i, f) in files.iter().enumerate().filter(|(i, _)| i % threads == t) {
                            let scratch = Fdb5::new(work.join(format!("scratch{i}")));
                            let ok = scratch.run("fdb-write", &[f.as_os_str()]).status.success();
                            std::fs::remove_dir_all(&scratch.dir).unwrap();
                            out.push((i, ok));
                        }
                        out
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let mut accepted = Vec::new();
        let mut refused = Vec::new();
        let mut verdicts = verdicts;
        verdicts.sort();
        for (i, ok) in verdicts {
            if ok {
                accepted.push(files[i].clone());
            } else {
                refused.push(files[i].clone());
            }
        }

        // The FDB under comparison: every accepted file, in order, one fdb-write.
        let fdb = Fdb5::new(work.join("fdb5"));
        let args: Vec<&OsStr> = accepted.iter().map(|f| f.as_os_str()).collect();
        fdb.run_ok("fdb-write", &args);

        // haar, same files, same order, same schema file.
        let haar_config = work.join("haar.yaml");
        std::fs::write(&haar_config, "schema: /etc/fdb/schema\n").unwrap();
        let haar_root = work.join("haar");
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("--config"),
            haar_config.as_os_str(),
            OsStr::new("--root"),
            haar_root.as_os_str(),
            OsStr::new("archive"),
            OsStr::new("--json"),
        ];
        args.extend(accepted.iter().map(|f| f.as_os_str()));
        let out = haar(&args);
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "haar archive --json: {e}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let haar_failed = summary["failed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .collect();
        Some(World {
            _tmp: tmp,
            work,
            fdb,
            haar_root,
            haar_config,
            accepted,
            refused,
            haar_failed,
        })
    })
    .as_ref()
}

impl World {
    fn haar(&self, args: &[&OsStr]) -> String {
        let mut all: Vec<&OsStr> = vec![
            OsStr::new("--config"),
            self.haar_config.as_os_str(),
            OsStr::new("--root"),
            self.haar_root.as_os_str(),
        ];
        all.extend(args);
        haar_ok(&all)
    }

    fn haar_list(&self, request: Option<&str>) -> Vec<String> {
        let mut args = vec![OsStr::new("list"), OsStr::new("--fdb")];
        if let Some(r) = request {
            args.push(OsStr::new(r));
        }
        self.haar(&args).lines().map(String::from).collect()
    }

    fn haar_retrieve(&self, request_file: &Path) -> Vec<u8> {
        let out = self.work.join(format!(
            "{}.haar.grib",
            request_file.file_name().unwrap().to_string_lossy()
        ));
        let at = format!("@{}", request_file.display());
        // FDB5 returns nothing, silently, for a combination it lacks (`step=18` of
        // `0/to/24/by/6`); haar lists it and exits 2 unless told the gaps are expected.
        self.haar(&[
            OsStr::new("retrieve"),
            OsStr::new("--allow-missing"),
            OsStr::new(&at),
            OsStr::new("-o"),
            out.as_os_str(),
        ]);
        std::fs::read(&out).unwrap()
    }
}

/// The keys of `fdb-list`/`haar list --fdb` lines, empty values dropped (the layout itself is
/// tested strictly in `fdb_layout_matches_fdb_list_line_for_line`).
fn key_set(lines: &[String]) -> BTreeSet<Keys> {
    lines
        .iter()
        .map(|l| {
            fdb_line_keys(l)
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .collect()
        })
        .collect()
}

fn is_known_disagreement(f: &Path) -> bool {
    KNOWN_DISAGREEMENTS.contains(&file_name(f).as_str())
}

#[test]
fn both_accept_the_same_files_and_list_the_same_keys() {
    let Some(w) = world() else { return };
    // Every file FDB5 refused, haar refuses too.
    let mut args: Vec<std::ffi::OsString> = vec!["--root".into(), w.work.join("refused").into()];
    args.push("archive".into());
    args.push("--json".into());
    args.extend(w.refused.iter().map(|f| f.as_os_str().to_owned()));
    let out = haar(&args);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary["fields"].as_u64(),
        Some(0),
        "haar archived fields from files FDB5 refuses: {summary}"
    );
    assert_eq!(
        summary["failed"].as_array().unwrap().len(),
        w.refused.len(),
        "{summary}"
    );
    // Every file FDB5 accepted, haar accepts, except the reported disagreements.
    let haar_refused: Vec<&PathBuf> = w
        .accepted
        .iter()
        .filter(|f| {
            w.haar_failed
                .iter()
                .any(|m| m.starts_with(&format!("{}:", f.display())))
        })
        .collect();
    for f in &haar_refused {
        assert!(
            is_known_disagreement(f),
            "FDB5 archives {} but haar refuses it: {:?}",
            f.display(),
            w.haar_failed
        );
    }
    assert_eq!(haar_refused.len(), w.haar_failed.len());
    eprintln!(
        "FDB5 accepted {} files, refused {}; haar refused {} of FDB5's: {:?}",
        w.accepted.len(),
        w.refused.len(),
        haar_refused.len(),
        w.haar_failed
    );
    assert!(w.accepted.len() >= 140, "{}", w.accepted.len());

    // The whole store: the same keys (the climatological date included).
    let fdb = w.fdb.list(None, false);
    let ours = w.haar_list(None);
    let fdb_keys = key_set(&fdb);
    let haar_keys = key_set(&ours);
    assert_eq!(
        fdb_keys.difference(&haar_keys).collect::<Vec<_>>(),
        Vec::<&Keys>::new(),
        "fields FDB5 lists and haar does not"
    );
    assert_eq!(
        haar_keys.difference(&fdb_keys).collect::<Vec<_>>(),
        Vec::<&Keys>::new(),
        "fields haar lists and FDB5 does not"
    );
    assert!(fdb_keys.iter().any(|k| k["date"] == "aug-01"));
    assert_eq!(fdb.len(), fdb_keys.len(), "fdb-list repeats a key");
    assert_eq!(ours.len(), haar_keys.len(), "haar list repeats a key");
    assert!(haar_keys.len() >= 1000, "{}", haar_keys.len());
}

/// The requests both tools are asked: (name, request, raw). `raw` requests (ERA5, see the
/// module documentation) use explicit canonical values.
const REQUESTS: &[(&str, &str, bool)] = &[
    (
        "one_param",
        "class=od,expver=0001,stream=oper,date=20200922,time=1200,domain=g,type=fc,levtype=pl,\
         step=0/6/12/24,levelist=1000/850/700/500/400/300,param=t",
        false,
    ),
    (
        "step_range",
        "class=od,expver=1,stream=oper,date=20200922,time=12,domain=g,type=fc,levtype=pl,\
         step=0/to/24/by/6,levelist=500,param=z/t/r",
        false,
    ),
    (
        "level_list",
        "class=od,expver=0001,stream=oper,date=20180404,time=1200,domain=g,type=fc,levtype=pl,\
         step=0/12/24/36,levelist=1000/500/850,param=129/130",
        false,
    ),
    (
        "members",
        "class=od,expver=0001,stream=enfo,date=20131025,time=0000,domain=g,type=pf,levtype=pl,\
         step=78,number=1/to/10,levelist=850,param=z",
        false,
    ),
    (
        "era5_members",
        "class=ea,expver=0001,stream=enda,date=20170101/20170102,time=0000/1200,domain=g,\
         type=an,levtype=pl,step=0,number=0/3/7/9,levelist=500/850,param=129/130",
        true,
    ),
    (
        "surface",
        "class=od,expver=0001,stream=oper,date=20171018,time=1200,domain=g,type=an,\
         levtype=sfc,step=0,param=165/166/167",
        false,
    ),
];

#[test]
fn requests_list_and_read_the_same_fields() {
    let Some(w) = world() else { return };
    let _t = Timer::start("differential requests");
    for (name, req, raw) in REQUESTS {
        let fdb = w.fdb.list(Some(req), *raw);
        let ours = w.haar_list(Some(req));
        assert!(!fdb.is_empty(), "{name}: fdb-list found nothing for {req}");
        assert_eq!(key_set(&ours), key_set(&fdb), "{name}: {req}");

        let file = w.work.join(format!("{name}.req"));
        std::fs::write(
            &file,
            format!("# {name}\nretrieve,\n    {}\n", req.replace(',', ",\n    ")),
        )
        .unwrap();
        let theirs = w.fdb.read(&file, *raw, &w.work);
        let got = w.haar_retrieve(&file);
        let (t, g) = (split_messages(&theirs), split_messages(&got));
        assert_eq!(t.len(), fdb.len(), "{name}: fdb-read vs fdb-list");
        assert_eq!(g.len(), t.len(), "{name}: haar retrieve vs fdb-read count");
        assert!(
            multiset(g.clone()) == multiset(t.clone()),
            "{name}: haar retrieve and fdb-read return different bytes"
        );
        eprintln!(
            "{name}: {} fields, {} bytes identical{}",
            t.len(),
            theirs.len(),
            if got == theirs {
                ", same order"
            } else {
                ", different order"
            }
        );
    }
}

/// One request per field FDB5 lists (`fdb-read --raw` takes them verbatim), the same file to
/// both: every field of the store, byte-identical and in the same order.
#[test]
fn whole_store_reads_the_same_bytes_in_the_same_order() {
    let Some(w) = world() else { return };
    let _t = Timer::start("differential whole-store read");
    let lines: Vec<String> = w
        .fdb
        .list(None, false)
        .into_iter()
        // fdb-read cannot read this date back (see climatological_date_archives_like_fdb5).
        .filter(|l| !l.contains("date=aug-01"))
        .collect();
    let mut text = String::from("# every field fdb-list lists, one request each\n");
    for l in &lines {
        let levels = parse_fdb_line(l).unwrap();
        let kv: Vec<String> = levels
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        text.push_str(&format!("retrieve,{}\n", kv.join(",")));
    }
    let file = w.work.join("whole.req");
    std::fs::write(&file, text).unwrap();
    let theirs = w.fdb.read(&file, true, &w.work);
    let got = w.haar_retrieve(&file);
    assert_eq!(split_messages(&theirs).len(), lines.len());
    assert_eq!(split_messages(&got).len(), lines.len());
    assert!(
        got == theirs,
        "haar retrieve and fdb-read differ on the whole store ({} vs {} bytes)",
        got.len(),
        theirs.len()
    );
    eprintln!(
        "whole store: {} fields, {} bytes identical",
        lines.len(),
        got.len()
    );
}

/// haar's `list --fdb` prints exactly FDB5's lines: optional schema keywords a field lacks
/// (`levelist`, `number`, `quantile`, `direction`, `frequency`) are omitted, as FDB5 5.10.8
/// does (`{step=0,param=167}`), and the climatological date is listed as `date=aug-01`.
#[test]
fn fdb_layout_matches_fdb_list_line_for_line() {
    let Some(w) = world() else { return };
    let fdb: BTreeSet<String> = w.fdb.list(None, false).into_iter().collect();
    let ours: BTreeSet<String> = w.haar_list(None).into_iter().collect();
    let differ: Vec<_> = ours.difference(&fdb).take(5).collect();
    assert!(
        differ.is_empty(),
        "{} of {} haar lines are not fdb-list lines, e.g. {differ:#?}",
        ours.difference(&fdb).count(),
        ours.len()
    );
}

/// earthkit-data's `t_year_missing.grib` has `date=aug-01` (a climatological date: month and
/// day, no year). FDB5 5.10.8 archives and lists it under `date=aug-01` (its `Date` type keeps
/// the value as ecCodes gives it) but its `fdb-read` fails on it ("Invalid date aug-01"). haar
/// archives and lists it with the same key, and retrieves it byte-identical, also when the
/// request spells the date `Aug-1`.
#[test]
fn climatological_date_archives_like_fdb5() {
    let Some(w) = world() else { return };
    let file = data("earthkit-data/t_year_missing.grib");
    let fdb = w.fdb.list(Some("class=od,expver=0001,date=aug-01"), false);
    assert_eq!(fdb.len(), 1, "FDB5 lists the climatological field");
    let ours = w.haar_list(Some("class=od,expver=0001,date=aug-01"));
    assert_eq!(key_set(&ours), key_set(&fdb), "haar list vs fdb-list");
    // fdb-read cannot, haar can: the message comes back byte-identical.
    let req = w.work.join("aug.req");
    let body: Vec<String> = parse_fdb_line(&fdb[0])
        .unwrap()
        .iter()
        .flatten()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| {
            if k == "date" {
                "date=Aug-1".to_string()
            } else {
                format!("{k}={v}")
            }
        })
        .collect();
    std::fs::write(&req, format!("retrieve,{}\n", body.join(","))).unwrap();
    assert_eq!(w.haar_retrieve(&req), std::fs::read(&file).unwrap());
}

/// `haar import-fdb5` of the whole FDB5 store written by `fdb-write`: every field FDB5 can read
/// arrives in haar under FDB5's keys with FDB5's bytes; the one field FDB5 lists but cannot
/// read (`date=aug-01`, see the module documentation) is named and makes the exit status 3,
/// without stopping the others.
#[test]
fn import_fdb5_brings_every_field_over_verified() {
    let Some(w) = world() else { return };
    let _t = Timer::start("import-fdb5 of the whole differential store");
    let root = w.work.join("imported");
    let out = haar_without_fdb5_tools(
        &[
            OsStr::new("--config"),
            w.haar_config.as_os_str(),
            OsStr::new("--root"),
            root.as_os_str(),
            OsStr::new("import-fdb5"),
            OsStr::new("--fdb-config"),
            w.fdb.config().as_os_str(),
            OsStr::new("--batch"),
            OsStr::new("300"),
            OsStr::new("--json"),
        ],
        // No FDB_DBNAMES_FILE: haar sees the databases FDB5's default names made (directly
        // under the root) and gives FDB5 an empty dbnames file itself.
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("date=aug-01") && stderr.contains("Invalid date"),
        "{stderr}"
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fdb = w.fdb.list(None, false);
    assert_eq!(summary["listed"].as_u64(), Some(fdb.len() as u64));
    assert_eq!(summary["fields"].as_u64(), Some(fdb.len() as u64 - 1));
    assert_eq!(summary["failed"].as_array().unwrap().len(), 1);
    eprintln!("import-fdb5: {summary}");

    // Same keys as FDB5 lists (the unreadable field aside)...
    let readable: Vec<String> = fdb
        .into_iter()
        .filter(|l| !l.contains("date=aug-01"))
        .collect();
    let imported = haar_ok([
        OsStr::new("--config"),
        w.haar_config.as_os_str(),
        OsStr::new("--root"),
        root.as_os_str(),
        OsStr::new("list"),
        OsStr::new("--fdb"),
    ]);
    let imported: Vec<String> = imported.lines().map(String::from).collect();
    assert_eq!(key_set(&imported), key_set(&readable));
    // ... and the same bytes as fdb-read, read back by an independent haar process.
    let mut text = String::new();
    for l in &readable {
        let kv: Vec<String> = parse_fdb_line(l)
            .unwrap()
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        text.push_str(&format!("retrieve,{}\n", kv.join(",")));
    }
    let file = w.work.join("import.req");
    std::fs::write(&file, text).unwrap();
    let theirs = w.fdb.read(&file, true, &w.work);
    let got_path = w.work.join("import.haar.grib");
    haar_ok([
        OsStr::new("--config"),
        w.haar_config.as_os_str(),
        OsStr::new("--root"),
        root.as_os_str(),
        OsStr::new("retrieve"),
        OsStr::new(&format!("@{}", file.display())),
        OsStr::new("-o"),
        got_path.as_os_str(),
    ]);
    assert!(std::fs::read(&got_path).unwrap() == theirs);
}

/// A request selects part of the FDB5 database; `--fdb-root` with the schema instead of a
/// configuration file; `--raw` hands FDB5 the canonical values as written.
#[test]
fn import_fdb5_of_a_request_by_root() {
    let Some(w) = world() else { return };
    let root = w.work.join("imported-era5");
    let fdb_db = w.fdb.dir.join("db");
    let summary = import_summary(
        &[
            OsStr::new("--config"),
            w.haar_config.as_os_str(),
            OsStr::new("--root"),
            root.as_os_str(),
            OsStr::new("import-fdb5"),
            OsStr::new("--fdb-root"),
            fdb_db.as_os_str(),
            OsStr::new("--fdb-schema"),
            OsStr::new("/etc/fdb/schema"),
            OsStr::new("--raw"),
            OsStr::new("--json"),
            OsStr::new("class=ea,expver=0001,stream=enda,param=130"),
        ],
        &[],
    );
    assert_eq!(summary["fields"].as_u64(), Some(80), "{summary}");
    assert_eq!(summary["failed"].as_array().unwrap().len(), 0);
    let members = std::fs::read(data("cfgrib/era5-levels-members.grib")).unwrap();
    let want: Vec<Vec<u8>> = split_messages(&members)
        .into_iter()
        .zip(grib_ls_keys(&data("cfgrib/era5-levels-members.grib")))
        .filter(|(_, k)| k["param"] == "130")
        .map(|(m, _)| m)
        .collect();
    let got_path = w.work.join("era5-import.grib");
    haar_ok([
        OsStr::new("--config"),
        w.haar_config.as_os_str(),
        OsStr::new("--root"),
        root.as_os_str(),
        OsStr::new("retrieve"),
        OsStr::new(
            "class=ea,expver=1,stream=enda,date=20170101/20170102,time=0/12,domain=g,type=an,levtype=pl,step=0,number=0/to/9,levelist=500/850,param=t",
        ),
        OsStr::new("-o"),
        got_path.as_os_str(),
    ]);
    assert_eq!(
        multiset(split_messages(&std::fs::read(&got_path).unwrap())),
        multiset(want)
    );
    // A missing database is a usage error naming it.
    let out = haar([
        OsStr::new("--root"),
        root.as_os_str(),
        OsStr::new("import-fdb5"),
        OsStr::new("--fdb-root"),
        w.work.join("no-such-fdb").as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-fdb"));
}

/// A GRIB1 message from ecCodes' `GRIB1` sample with local definition 191 whose `freeFormData`
/// holds an embedded MARS request (eckit `Stream` bytes: `int` 1, `string` verb, `int` n, then
/// per keyword `string` name, `int` number of values, `string` values), made by `grib_filter`.
fn embedded_request_message(path: &Path, pairs: &[(&str, &[&str])]) {
    let int = |n: i32| [&[5u8][..], &n.to_be_bytes()].concat();
    let string = |t: &str| [&[15u8][..], &(t.len() as u32).to_be_bytes(), t.as_bytes()].concat();
    let mut bytes = int(1);
    bytes.extend(string("retrieve"));
    bytes.extend(int(pairs.len() as i32));
    for (k, vals) in pairs {
        bytes.extend(string(k));
        bytes.extend(int(vals.len() as i32));
        for v in *vals {
            bytes.extend(string(v));
        }
    }
    let list: Vec<String> = bytes.iter().map(u8::to_string).collect();
    let rules = path.with_extension("rules");
    std::fs::write(
        &rules,
        format!(
            "set localDefinitionNumber=191;\nset numberOfBytesOfFreeFormatData={};\n\
             set freeFormData={{{}}};\nwrite \"{}\";\n",
            bytes.len(),
            list.join(","),
            path.display()
        ),
    )
    .unwrap();
    let out = Command::new("grib_filter")
        .arg(&rules)
        .arg("/usr/share/eccodes/samples/GRIB1.tmpl")
        .output()
        .expect("grib_filter (libeccodes-tools)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Messages with `localDefinitionNumber` 191 carry a MARS request in `freeFormData`, which FDB5
/// (metkit) applies over the GRIB keys: haar archives such a message under the same keys as
/// `fdb-write`, and both refuse an embedded request with a keyword of several values (metkit
/// asserts one value), haar with an error naming file, message and the reason.
#[test]
fn embedded_request_keys_like_fdb5() {
    if !fdb5_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("l191.grib");
    embedded_request_message(&good, &[("TYPE", &["FC"]), ("STEP", &["24"])]);
    let fdb = Fdb5::new(tmp.path().join("fdb"));
    fdb.run_ok("fdb-write", &[good.as_os_str()]);
    let theirs = fdb.list(None, false);
    let root = tmp.path().join("haar");
    haar_ok([
        OsStr::new("--root"),
        root.as_os_str(),
        OsStr::new("archive"),
        good.as_os_str(),
    ]);
    let ours: Vec<String> = haar_ok([
        OsStr::new("--root"),
        root.as_os_str(),
        OsStr::new("list"),
        OsStr::new("--fdb"),
    ])
    .lines()
    .map(String::from)
    .collect();
    assert_eq!(theirs.len(), 1, "{theirs:?}");
    assert_eq!(key_set(&ours), key_set(&theirs));
    let keys = fdb_line_keys(&theirs[0]);
    // The sample says type=an, step=0; the embedded request wins.
    assert_eq!((keys["type"].as_str(), keys["step"].as_str()), ("fc", "24"));

    let bad = tmp.path().join("l191-two-values.grib");
    embedded_request_message(&bad, &[("STEP", &["24", "48"])]);
    let scratch = Fdb5::new(tmp.path().join("fdb-bad"));
    assert!(
        !scratch
            .run("fdb-write", &[bad.as_os_str()])
            .status
            .success()
    );
    let out = haar([
        OsStr::new("--root"),
        root.as_os_str(),
        OsStr::new("archive"),
        bad.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("message 1 (1-based) at byte offset 0")
            && stderr.contains("localDefinitionNumber 191")
            && stderr.contains("step has 2 values"),
        "{stderr}"
    );
}

/// A database written by stock `fdb-write` with nothing but `FDB5_CONFIG_FILE` set (so with
/// the system's dbnames, Debian's `/etc/fdb/dbnames`) is found and imported through FDB5's C
/// API (Debian's 5.10 library, no FDB5 tool on `PATH`); so is the same
/// FDB5 configuration file handed to haar itself, which maps it onto a posix root of its own.
#[test]
fn import_fdb5_of_a_database_written_by_stock_fdb_write() {
    if !fdb5_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    let config = tmp.path().join("fdb5.yaml");
    std::fs::write(
        &config,
        format!(
            "---\ntype: local\nengine: toc\nschema: /etc/fdb/schema\nspaces:\n  - handler: Default\n    roots:\n      - path: {}\n",
            db.display()
        ),
    )
    .unwrap();
    let grib = data("cfgrib/era5-levels-members.grib");
    // Twice: 5.10's fdb_list then reports every field twice (320 elements); each is
    // imported once.
    for _ in 0..2 {
        let out = Command::new("fdb-write")
            .env("FDB5_CONFIG_FILE", &config)
            .env_remove("FDB_DBNAMES_FILE")
            .arg(&grib)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let root = tmp.path().join("haar");
    // FDB_DBNAMES_FILE unset, as for fdb-write: the system's dbnames, which haar keeps.
    let summary = import_summary(
        &[
            OsStr::new("--root"),
            root.as_os_str(),
            OsStr::new("import-fdb5"),
            OsStr::new("--fdb-config"),
            config.as_os_str(),
            OsStr::new("--json"),
        ],
        &[],
    );
    assert_eq!(summary["listed"].as_u64(), Some(160), "{summary}");
    assert_eq!(summary["fields"].as_u64(), Some(160), "{summary}");
    assert!(
        summary["fdb5_version"]
            .as_str()
            .unwrap()
            .starts_with("5.10"),
        "Debian's FDB5, through its C API: {summary}"
    );
    assert_eq!(summary["failed"].as_array().unwrap().len(), 0, "{summary}");
    let listed = haar_ok([
        OsStr::new("--root"),
        root.as_os_str(),
        OsStr::new("list"),
        OsStr::new("class=ea"),
    ]);
    assert_eq!(
        listed.lines().filter(|l| l.contains("class=ea")).count(),
        160,
        "{listed}"
    );

    // The FDB5 configuration file as haar's own: `--config` and `$FDB5_CONFIG_FILE` open a
    // haar store under FDB5's root with FDB5's schema.
    let archived = Command::new(env!("CARGO_BIN_EXE_haar"))
        .env("FDB5_CONFIG_FILE", &config)
        .env_remove("HAAR_CONFIG")
        .args([OsStr::new("archive"), grib.as_os_str()])
        .output()
        .unwrap();
    assert!(
        archived.status.success(),
        "{}",
        String::from_utf8_lossy(&archived.stderr)
    );
    let info = haar_ok([
        OsStr::new("--config"),
        config.as_os_str(),
        OsStr::new("info"),
    ]);
    assert!(
        info.contains(&db.display().to_string()) && info.contains("/etc/fdb/schema"),
        "{info}"
    );
    let listed = haar_ok([
        OsStr::new("--config"),
        config.as_os_str(),
        OsStr::new("list"),
        OsStr::new("class=ea"),
    ]);
    assert_eq!(
        listed.lines().filter(|l| l.contains("class=ea")).count(),
        160,
        "{listed}"
    );
}

/// Set to `1` (as `make test` does) to make a missing FDB5 wheel a failure instead of a skip.
const REQUIRE_WHEEL: &str = "HAAR_REQUIRE_FDB5_WHEEL";

/// The same import through FDB5 5.25's library (PyPI's `fdb5lib` wheel, named by
/// `$HAAR_FDB5_LIB`), whose `fdb_list` has the 5.11+ signature (iterator out-parameter,
/// duplicates, depth) and reports each field's length: a database of FDB5's default names
/// (written by `fdb-write` with an empty dbnames file; 5.25 must not read Debian's) arrives
/// whole, 160 of 160 fields, byte-checked, with no FDB5 tool on `PATH`. Skipped with a message
/// where the wheel is absent, unless `HAAR_REQUIRE_FDB5_WHEEL=1`.
#[test]
fn import_fdb5_through_fdb5_5_25s_library() {
    let wheel = match haar_bench::scale::wheel() {
        Ok(w) => w,
        Err(why) => {
            assert!(
                std::env::var(REQUIRE_WHEEL).as_deref() != Ok("1"),
                "{why} (and {REQUIRE_WHEEL}=1)"
            );
            eprintln!("WARNING: {why}: import through FDB5 5.25 skipped");
            return;
        }
    };
    if !fdb5_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let fdb = Fdb5::new(tmp.path().join("fdb5"));
    let grib = data("cfgrib/era5-levels-members.grib");
    fdb.run_ok("fdb-write", &[grib.as_os_str()]);
    let root = tmp.path().join("haar");
    let run = |request: Option<&str>| {
        let mut args = vec![
            OsStr::new("--root"),
            root.as_os_str(),
            OsStr::new("import-fdb5"),
            OsStr::new("--fdb-config"),
            fdb.config().into_os_string().leak() as &OsStr,
            OsStr::new("--json"),
        ];
        args.extend(request.map(OsStr::new));
        import_summary(
            &args,
            &[
                ("HAAR_FDB5_LIB", wheel.lib.as_os_str()),
                ("LD_LIBRARY_PATH", OsStr::new(&wheel.lib_path)),
                ("FDB_DBNAMES_FILE", fdb.dir.join("dbnames").as_os_str()),
            ],
        )
    };
    let summary = run(None);
    assert_eq!(
        summary["fdb5_version"].as_str(),
        Some("5.25.0"),
        "{summary}"
    );
    assert_eq!(summary["listed"].as_u64(), Some(160), "{summary}");
    assert_eq!(summary["fields"].as_u64(), Some(160), "{summary}");
    assert_eq!(
        summary["bytes"].as_u64(),
        Some(
            split_messages(&std::fs::read(&grib).unwrap())
                .iter()
                .map(|m| m.len() as u64)
                .sum::<u64>()
        ),
        "every byte of every message, one message per field: {summary}"
    );
    // A request, canonicalised by haar (5.25's C API expands nothing either).
    let summary = run(Some("class=ea,expver=1,stream=enda,param=t"));
    assert_eq!(summary["listed"].as_u64(), Some(80), "{summary}");
    assert_eq!(summary["fields"].as_u64(), Some(80), "{summary}");
    let listed = haar_ok([
        OsStr::new("--root"),
        root.as_os_str(),
        OsStr::new("list"),
        OsStr::new("class=ea"),
    ]);
    assert_eq!(
        listed.lines().filter(|l| l.contains("class=ea")).count(),
        160,
        "{listed}"
    );
}

/// Without FDB5's library (here: `$HAAR_FDB5_LIB` naming none) the import stops before
/// touching the store, exit 1, saying what to install or set; nothing reaches stdout.
#[test]
fn import_fdb5_without_fdb5s_library_says_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-libfdb5.so");
    let out = haar_without_fdb5_tools(
        &[
            OsStr::new("--root"),
            tmp.path().join("haar").as_os_str(),
            OsStr::new("import-fdb5"),
            OsStr::new("--fdb-root"),
            tmp.path().as_os_str(),
            OsStr::new("--json"),
        ],
        &[("HAAR_FDB5_LIB", missing.as_os_str())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no-libfdb5.so")
            && stderr.contains("apt-get install")
            && stderr.contains("HAAR_FDB5_LIB"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}
