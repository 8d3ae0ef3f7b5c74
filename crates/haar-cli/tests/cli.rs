//! The CLI contract of issue 2, exercised through the real binary: command forms, exit codes
//! (0 ok, 1 usage/request, 2 missing, 3 I/O or corruption), dry runs, JSON output.

use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;
use common::haar_at as haar;

#[path = "common/small_fs.rs"]
mod small_fs;
use small_fs::SmallFs;

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const DB: &str = "class=od,expver=1,stream=oper,date=20260901,time=12,domain=g";

fn archive_raw(root: &Path, backend: &str, dir: &Path, step: u32, param: &str, body: &[u8]) {
    let f = dir.join(format!("raw-{step}-{param}.bin"));
    std::fs::write(&f, body).unwrap();
    let key = format!("{DB},type=fc,levtype=sfc,step={step},param={param}");
    ok(&haar(
        root,
        backend,
        &["archive", "--key", &key, f.to_str().unwrap()],
    ));
}

fn contract(backend: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let files = tmp.path();
    for step in [0u32, 6, 12] {
        for param in ["167", "2t", "msl"] {
            if param == "2t" {
                continue; // 2t is 167: archived once under its number
            }
            archive_raw(
                &root,
                backend,
                files,
                step,
                param,
                format!("GRIB{step}{param}7777").as_bytes(),
            );
        }
    }
    // list: all six, JSON and FDB5 layout.
    let out = ok(&haar(&root, backend, &["list", "date=20260901", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 6);
    let fdb = ok(&haar(
        &root,
        backend,
        &["list", "date=20260901,param=2t", "--fdb"],
    ));
    assert_eq!(fdb.lines().count(), 3, "{fdb}");
    assert!(fdb.lines().all(|l| l.starts_with("{class=od,expver=0001,stream=oper,date=20260901,time=1200,domain=g}{type=fc,levtype=sfc}{step=")), "{fdb}");
    // retrieve in request order, name form and number form of param agree.
    let out = tmp.path().join("out.bin");
    ok(&haar(
        &root,
        backend,
        &[
            "retrieve",
            &format!("{DB},type=fc,levtype=sfc,step=12/0,param=msl/2t"),
            "-o",
            out.to_str().unwrap(),
        ],
    ));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        b"GRIB12msl7777GRIB121677777GRIB0msl7777GRIB01677777"
    );
    // Missing fields: exit 2, no output file left behind; --allow-missing writes what exists.
    let out2 = tmp.path().join("out2.bin");
    let o = haar(
        &root,
        backend,
        &[
            "retrieve",
            &format!("{DB},type=fc,levtype=sfc,step=0/18,param=167"),
            "-o",
            out2.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("step=18"),
        "missing key not named: {}",
        stderr(&o)
    );
    assert!(!out2.exists(), "partial output left for a failed retrieve");
    ok(&haar(
        &root,
        backend,
        &[
            "retrieve",
            &format!("{DB},type=fc,levtype=sfc,step=0/18,param=167"),
            "-o",
            out2.to_str().unwrap(),
            "--allow-missing",
        ],
    ));
    assert_eq!(std::fs::read(&out2).unwrap(), b"GRIB01677777");
    // Bad requests: exit 1 with the nearest keyword.
    let o = haar(&root, backend, &["list", "parma=167"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("param"), "{}", stderr(&o));
    let o = haar(&root, backend, &["list", "step=0/to"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    // A request file with several requests and comments.
    let req = tmp.path().join("req.mars");
    std::fs::write(&req, format!("# two requests\nretrieve, {DB}, type=fc, levtype=sfc, step=0, param=msl\nretrieve, {DB}, type=fc, levtype=sfc, step=6, param=167 # trailing\n")).unwrap();
    let out3 = tmp.path().join("out3.bin");
    ok(&haar(
        &root,
        backend,
        &[
            "retrieve",
            &format!("@{}", req.display()),
            "-o",
            out3.to_str().unwrap(),
        ],
    ));
    assert_eq!(std::fs::read(&out3).unwrap(), b"GRIB0msl7777GRIB61677777");
    // axes
    let axes: serde_json::Value = serde_json::from_str(&ok(&haar(
        &root,
        backend,
        &["axes", "date=20260901", "--json"],
    )))
    .unwrap();
    assert_eq!(axes["step"], serde_json::json!(["0", "12", "6"]));
    assert_eq!(axes["param"], serde_json::json!(["151", "167"]));
    // Re-archive masks; purge is a dry run unless --doit.
    archive_raw(&root, backend, files, 0, "167", b"GRIBnew7777");
    let dry = ok(&haar(&root, backend, &["purge", "date=20260901", "--json"]));
    assert!(dry.contains("\"dropped_fields\":1"), "{dry}");
    let info: serde_json::Value =
        serde_json::from_str(&ok(&haar(&root, backend, &["info", "--json"]))).unwrap();
    assert_eq!(info["fields"], 6);
    assert_eq!(info["databases"][0]["dead_fields"], 1);
    ok(&haar(&root, backend, &["purge", "date=20260901", "--doit"]));
    let info: serde_json::Value =
        serde_json::from_str(&ok(&haar(&root, backend, &["info", "--json"]))).unwrap();
    assert_eq!(info["databases"][0]["dead_fields"], 0);
    ok(&haar(
        &root,
        backend,
        &[
            "retrieve",
            &format!("{DB},type=fc,levtype=sfc,step=0,param=167"),
            "-o",
            out.to_str().unwrap(),
        ],
    ));
    assert_eq!(std::fs::read(&out).unwrap(), b"GRIBnew7777");
    // Wipe: dry run changes nothing; narrow wipe hides fields; database wipe removes it.
    let o = ok(&haar(&root, backend, &["wipe", "date=20260901,step=12"]));
    assert!(o.contains("would wipe 2 field(s)"), "{o}");
    assert_eq!(
        ok(&haar(&root, backend, &["list", "date=20260901"]))
            .lines()
            .count(),
        6
    );
    ok(&haar(
        &root,
        backend,
        &["wipe", "date=20260901,step=12", "--doit"],
    ));
    assert_eq!(
        ok(&haar(&root, backend, &["list", "date=20260901"]))
            .lines()
            .count(),
        4
    );
    ok(&haar(&root, backend, &["wipe", DB, "--doit"]));
    assert_eq!(ok(&haar(&root, backend, &["list"])).lines().count(), 0);
}

#[test]
fn cli_contract_posix() {
    contract("posix");
}

/// Issue 26's data-safety bug: `haar wipe --doit` of a database whose directory holds a file
/// haar did not write deleted it. Now it exits 1 naming the file and deletes nothing; a dry
/// run names it; `--unsafe-wipe-all` deletes it with the database.
#[test]
fn wipe_refuses_a_database_holding_a_foreign_file_unless_unsafe_wipe_all() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    archive_raw(&root, "posix", tmp.path(), 0, "167", b"GRIBkeep7777");
    let db_dir = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("db.key").exists())
        .expect("the database directory");
    let foreign = db_dir.join("README.txt");
    std::fs::write(&foreign, b"someone else's").unwrap();
    let dry = ok(&haar(&root, "posix", &["wipe", DB]));
    assert!(dry.contains(&foreign.display().to_string()), "{dry}");
    let o = haar(&root, "posix", &["wipe", DB, "--doit"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unclean") && stderr(&o).contains(&foreign.display().to_string()),
        "{}",
        stderr(&o)
    );
    assert!(foreign.exists());
    assert_eq!(ok(&haar(&root, "posix", &["list"])).lines().count(), 1);
    ok(&haar(
        &root,
        "posix",
        &["wipe", DB, "--doit", "--unsafe-wipe-all"],
    ));
    assert!(!foreign.exists() && !db_dir.exists());
    assert_eq!(ok(&haar(&root, "posix", &["list"])).lines().count(), 0);
}

#[test]
fn cli_contract_pmem() {
    contract("pmem");
}

#[test]
fn usage_errors_exit_1_and_help_exits_0() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(code(&haar(tmp.path(), "posix", &["frobnicate"])), 1);
    assert_eq!(code(&haar(tmp.path(), "posix", &["--help"])), 0);
    assert_eq!(code(&haar(tmp.path(), "lustre", &["list"])), 1);
    let o = haar(tmp.path(), "posix", &["archive", "/nonexistent/file.grib"]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("/nonexistent/file.grib"),
        "{}",
        stderr(&o)
    );
    // Raw bytes without --key: the message says what to do.
    let f = tmp.path().join("x.bin");
    std::fs::write(&f, b"not grib at all").unwrap();
    let o = haar(tmp.path(), "posix", &["archive", f.to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("--key"), "{}", stderr(&o));
    // A key the schema cannot place names the key.
    let o = haar(
        tmp.path(),
        "posix",
        &["archive", "--key", "foo=bar", f.to_str().unwrap()],
    );
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("foo=bar"), "{}", stderr(&o));
}

#[test]
fn schema_check_accepts_fdb5_schema_and_rejects_bad_files() {
    let tmp = tempfile::tempdir().unwrap();
    if Path::new("/etc/fdb/schema").exists() {
        ok(&haar(
            tmp.path(),
            "posix",
            &["schema", "--check", "/etc/fdb/schema"],
        ));
    }
    let bad = tmp.path().join("bad.schema");
    std::fs::write(&bad, "[ class, expver\n  [ type [ step ]\n").unwrap();
    let o = haar(
        tmp.path(),
        "posix",
        &["schema", "--check", bad.to_str().unwrap()],
    );
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("bad.schema") && stderr(&o).contains("line"),
        "{}",
        stderr(&o)
    );
    let text = ok(&haar(tmp.path(), "posix", &["schema"]));
    assert!(text.contains("stream=enfo"), "built-in schema printed");
    // For FDB5: the same rules but haar's fallback, which FDB5 would read every field through
    // a second time.
    let fdb5 = ok(&haar(tmp.path(), "posix", &["schema", "--fdb5"]));
    assert!(text.contains("# haar: fallback"), "{text}");
    assert!(!fdb5.contains("# haar: fallback"), "{fdb5}");
    assert!(text.starts_with(fdb5.trim_end()));
    let checked = tmp.path().join("fdb5.schema");
    std::fs::write(&checked, &fdb5).unwrap();
    let arg = checked.to_str().unwrap();
    ok(&haar(tmp.path(), "posix", &["schema", "--check", arg]));
}

#[test]
fn corruption_in_the_store_exits_3_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    archive_raw(&root, "posix", tmp.path(), 0, "167", &[7u8; 4096]);
    let data: Vec<_> = walk(&root)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .collect();
    let mut bytes = std::fs::read(&data[0]).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&data[0], bytes).unwrap();
    let out = tmp.path().join("o.bin");
    let o = haar(
        &root,
        "posix",
        &[
            "retrieve",
            &format!("{DB},type=fc,levtype=sfc,step=0,param=167"),
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&data[0].display().to_string()),
        "{}",
        stderr(&o)
    );
}

/// Runs haar with stdout a pipe whose read end is closed before haar starts, so its first write
/// to stdout fails with EPIPE every time (a reader that leaves after one line, like `head -1`,
/// only does so once the output outgrows the 64 KiB pipe buffer).
fn haar_into_closed_pipe(root: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_haar"))
        .arg("--root")
        .arg(root)
        .args(args)
        .env_remove("HAAR_CONFIG")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run haar")
}

#[test]
fn closed_stdout_ends_quietly_with_exit_0() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    archive_raw(&root, "posix", tmp.path(), 0, "167", b"GRIB0167777");
    let field = format!("{DB},type=fc,levtype=sfc,step=0,param=167");
    for args in [
        &["list"][..],
        &["list", "--json"],
        &["list", "--fdb", "--location"],
        &["axes"],
        &["axes", "--json"],
        &["info"],
        &["info", "--json"],
        &["schema"],
        &["wipe", &field],
        &["purge", DB],
        &["retrieve", &field],
        &["generate", "completions", "bash"],
    ] {
        let o = haar_into_closed_pipe(&root, args);
        assert_eq!(
            (o.status.code(), stderr(&o).as_str()),
            (Some(0), ""),
            "haar {args:?} with stdout closed"
        );
    }
    // archive prints its summary with println! after flushing: it too ends quietly, and the
    // field it acknowledged by flushing is there.
    let f = tmp.path().join("six.bin");
    std::fs::write(&f, b"GRIB6167777").unwrap();
    let key = format!("{DB},type=fc,levtype=sfc,step=6,param=167");
    let o = haar_into_closed_pipe(&root, &["archive", "--key", &key, f.to_str().unwrap()]);
    assert_eq!((o.status.code(), stderr(&o).as_str()), (Some(0), ""));
    assert_eq!(
        ok(&haar(&root, "posix", &["list", "step=6"]))
            .lines()
            .count(),
        1
    );
    // Any other write error still fails as I/O (exit 3), naming it.
    let o = Command::new(env!("CARGO_BIN_EXE_haar"))
        .arg("--root")
        .arg(&root)
        .arg("list")
        .env_remove("HAAR_CONFIG")
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot write output"), "{}", stderr(&o));
}

#[test]
fn retrieve_of_nothing_prints_no_empty_missing_line() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("empty");
    std::fs::create_dir_all(&root).unwrap();
    let out = tmp.path().join("out.bin");
    // A request naming no keyword on a store holding nothing: the store's one "missing" key is
    // empty and used to print as a bare `haar: missing:`.
    let o = haar(
        &root,
        "posix",
        &["retrieve", "retrieve", "-o", out.to_str().unwrap()],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.lines().all(|l| l.trim_end() != "haar: missing:"),
        "{err}"
    );
    assert!(err.contains("names no keyword"), "{err}");
    assert!(err.contains("no field retrieved"), "{err}");
    assert!(!out.exists());
    // Accepting an empty result succeeds, still saying why it is empty.
    let o = haar(
        &root,
        "posix",
        &[
            "retrieve",
            "retrieve",
            "-o",
            out.to_str().unwrap(),
            "--allow-missing",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("names no keyword"), "{}", stderr(&o));
    // A request that is not one (the issue's `haar retrieve foo`) is a usage error.
    let o = haar(
        &root,
        "posix",
        &["retrieve", "foo", "-o", out.to_str().unwrap()],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(!stderr(&o).contains("missing:"), "{}", stderr(&o));
}

#[test]
fn info_prints_values_without_json_quoting() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    archive_raw(&root, "posix", tmp.path(), 0, "167", b"GRIB0167777");
    let text = ok(&haar(&root, "posix", &["info"]));
    assert!(!text.contains('"'), "{text}");
    assert!(text.contains("  fsync: always\n"), "{text}");
    assert!(
        text.contains(&format!("  roots: {}\n", root.display())),
        "{text}"
    );
    let pool = tmp.path().join("pool");
    archive_raw(&pool, "pmem", tmp.path(), 0, "167", b"GRIB0167777");
    let text = ok(&haar(&pool, "pmem", &["info"]));
    assert!(!text.contains('"'), "{text}");
    assert!(
        text.contains(&format!("  pool: {}\n", pool.join("haar.pool").display())),
        "{text}"
    );
    // --json keeps its JSON.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&haar(&root, "posix", &["info", "--json"]))).unwrap();
    assert_eq!(v["backend"]["fsync"], "always");
}

#[test]
fn man_pages_and_completions_come_from_the_clap_definitions() {
    let tmp = tempfile::tempdir().unwrap();
    let man = tmp.path().join("man1");
    ok(&haar(
        tmp.path(),
        "posix",
        &["generate", "man", man.to_str().unwrap()],
    ));
    let top = std::fs::read_to_string(man.join("haar.1")).unwrap();
    assert!(
        top.contains(".TH haar 1"),
        "not a section 1 man page: {top:.200}"
    );
    assert!(top.contains("retrieve"), "{top}");
    let page = std::fs::read_to_string(man.join("haar-retrieve.1")).unwrap();
    assert!(page.contains("allow\\-missing"), "{page}");
    // Internal subcommands get no page.
    assert!(!man.join("haar-workload-worker.1").exists());
    assert!(!man.join("haar-generate.1").exists());

    let bash = ok(&haar(
        tmp.path(),
        "posix",
        &["generate", "completions", "bash"],
    ));
    assert!(bash.contains("retrieve"), "{bash}");
    assert!(!bash.contains("workload-worker") && !bash.contains("generate"));
    let script = tmp.path().join("haar.bash");
    std::fs::write(&script, &bash).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(syntax.status.success(), "{}", stderr(&syntax));
    for shell in ["zsh", "fish"] {
        let text = ok(&haar(
            tmp.path(),
            "posix",
            &["generate", "completions", shell],
        ));
        assert!(text.contains("retrieve"), "{shell}: {text}");
    }
}

/// Runs haar with exactly `args` (no store options added) and `HAAR_CONFIG` as given.
fn haar_exactly(args: &[&str], haar_config: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_haar"));
    cmd.args(args).env_remove("HAAR_CONFIG");
    if let Some(c) = haar_config {
        cmd.env("HAAR_CONFIG", c);
    }
    cmd.output().expect("run haar")
}

const STORE_OPTIONS: [&str; 3] = ["--config", "--root", "--backend"];
const SERVER_OPTIONS: [&str; 4] = ["--servers", "--replicas", "--tls-ca", "--token-file"];

#[test]
fn each_subcommand_shows_only_the_options_it_uses() {
    let help = |sub: &str| ok(&haar_exactly(&[sub, "--help"], None));
    let stream = help("stream");
    for opt in SERVER_OPTIONS.iter().chain(&STORE_OPTIONS) {
        assert!(
            !stream.contains(opt),
            "{opt} in `haar stream --help`:\n{stream}"
        );
    }
    let list = help("list");
    for opt in SERVER_OPTIONS.iter().chain(&STORE_OPTIONS) {
        assert!(
            list.contains(opt),
            "{opt} not in `haar list --help`:\n{list}"
        );
    }
    // A server is given its store and its token, and reaches no other server.
    let serve = help("serve");
    assert!(
        serve.contains("--root") && serve.contains("--token-file"),
        "{serve}"
    );
    assert!(
        !serve.contains("--servers") && !serve.contains("--tls-ca"),
        "{serve}"
    );
    // Notifications come from servers: no local store to name.
    let wait = help("wait");
    assert!(
        wait.contains("--servers") && wait.contains("--tls-ca"),
        "{wait}"
    );
    assert!(
        !wait.contains("--root") && !wait.contains("--backend"),
        "{wait}"
    );
    // The top level still lists every option, which is accepted there as it always was.
    let top = help("--help");
    for opt in SERVER_OPTIONS.iter().chain(&STORE_OPTIONS) {
        assert!(top.contains(opt), "{opt} not in `haar --help`:\n{top}");
    }

    // The man pages come from the same definitions.
    let tmp = tempfile::tempdir().unwrap();
    let man = tmp.path().join("man1");
    ok(&haar_exactly(
        &["generate", "man", man.to_str().unwrap()],
        None,
    ));
    let page = |sub: &str| std::fs::read_to_string(man.join(format!("haar-{sub}.1"))).unwrap();
    let stream = page("stream");
    for word in ["servers", "replicas", "tls\\-ca", "token\\-file"] {
        assert!(!stream.contains(word), "{word} in haar-stream.1:\n{stream}");
    }
    let list = page("list");
    for word in ["servers", "replicas", "tls\\-ca", "token\\-file", "root"] {
        assert!(list.contains(word), "{word} not in haar-list.1:\n{list}");
    }
}

#[test]
fn an_option_the_subcommand_does_not_use_is_an_error_naming_it() {
    let o = haar_exactly(&["--servers", "x:1", "stream"], None);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("--servers"), "{}", stderr(&o));
    assert!(stderr(&o).contains("haar stream"), "{}", stderr(&o));
    // After the subcommand's name, clap itself refuses it.
    let o = haar_exactly(&["stream", "--servers", "x:1"], None);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("--servers"), "{}", stderr(&o));
    for (args, flag) in [
        (&["--tls-ca", "ca.pem", "serve"][..], "--tls-ca"),
        (&["--root", "/tmp", "wait", "step=0"], "--root"),
        (&["--token-file", "t", "schema"], "--token-file"),
        (&["--config", "c.yaml", "advise", "--probe"], "--config"),
        (
            &["--replicas", "2", "import-fdb5", "--fdb-root", "/tmp"],
            "--replicas",
        ),
    ] {
        let o = haar_exactly(args, None);
        assert_eq!(code(&o), 1, "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("{flag} is not an option")),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    // $HAAR_CONFIG is not an option: a command that reads no configuration ignores it.
    let o = haar_exactly(&["advise", "--probe"], Some(Path::new("/nonexistent.yaml")));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn store_options_work_before_and_after_the_subcommand() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let field = tmp.path().join("field.bin");
    std::fs::write(&field, b"GRIB-before-after-7777").unwrap();
    let field = field.to_str().unwrap();
    let key = |step: u32| format!("{DB},type=fc,levtype=sfc,step={step},param=167");
    let steps = |o: &Output| -> Vec<String> {
        ok(o)
            .lines()
            .map(|l| {
                l.split(",step=")
                    .nth(1)
                    .unwrap()
                    .split(',')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    // Before the name (A, step 0) and after it (B, step 6), each read back both ways.
    ok(&haar_exactly(
        &[
            "--root",
            a,
            "--backend",
            "posix",
            "archive",
            "--key",
            &key(0),
            field,
        ],
        None,
    ));
    ok(&haar_exactly(
        &[
            "archive",
            "--key",
            &key(6),
            field,
            "--root",
            b,
            "--backend",
            "posix",
        ],
        None,
    ));
    for root in [a, b] {
        let before = steps(&haar_exactly(&["--root", root, "list"], None));
        let after = steps(&haar_exactly(&["list", "--root", root], None));
        assert_eq!(before, after, "{root}");
        assert_eq!(before, [if root == a { "0" } else { "6" }], "{root}");
    }
    // Given in both places, the value after the name wins.
    assert_eq!(
        steps(&haar_exactly(&["--root", a, "list", "--root", b], None)),
        ["6"]
    );
    // $HAAR_CONFIG, and --config on either side over it.
    let config = tmp.path().join("a.yaml");
    std::fs::write(&config, format!("backend: posix\nroots: [\"{a}\"]\n")).unwrap();
    let config_b = tmp.path().join("b.yaml");
    std::fs::write(&config_b, format!("backend: posix\nroots: [\"{b}\"]\n")).unwrap();
    let cb = config_b.to_str().unwrap();
    assert_eq!(steps(&haar_exactly(&["list"], Some(&config))), ["0"]);
    assert_eq!(
        steps(&haar_exactly(&["--config", cb, "list"], Some(&config))),
        ["6"]
    );
    assert_eq!(
        steps(&haar_exactly(&["list", "--config", cb], Some(&config))),
        ["6"]
    );
    assert_eq!(
        steps(&haar_exactly(&["list", "--root", b], Some(&config))),
        ["6"]
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `haar compact`: merging changes no answer, reports what it did (text and JSON), and a
/// second run finds nothing new; on both persistent backends.
#[test]
fn compact_merges_without_changing_any_answer() {
    for backend in ["posix", "pmem"] {
        let tmp = if backend == "pmem" {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let root = tmp.path().join("store");
        for step in [0u32, 6, 12, 18] {
            archive_raw(
                &root,
                backend,
                tmp.path(),
                step,
                "167",
                format!("b{step}").as_bytes(),
            );
        }
        let before = ok(&haar(&root, backend, &["list", DB]));
        assert_eq!(before.lines().count(), 4, "{before}");
        // Below the merge threshold: the policy leaves it, --full merges anyway.
        let o = ok(&haar(&root, backend, &["compact", DB, "--json"]));
        let v: serde_json::Value = serde_json::from_str(o.trim()).unwrap();
        assert_eq!(v["result"]["outcome"], "nothing", "{o}");
        assert_eq!(v["result"]["tail"], 4, "{o}");
        let o = ok(&haar(&root, backend, &["compact", "--full"]));
        assert!(
            o.contains("merged 4 new entries; 1 run(s) hold 4 entries"),
            "{backend}: {o}"
        );
        assert_eq!(
            ok(&haar(&root, backend, &["list", DB])),
            before,
            "{backend}"
        );
        let out = tmp.path().join("out.bin");
        ok(&haar(
            &root,
            backend,
            &[
                "retrieve",
                &format!("{DB},type=fc,levtype=sfc,step=12,param=167"),
                "-o",
                out.to_str().unwrap(),
            ],
        ));
        assert_eq!(std::fs::read(&out).unwrap(), b"b12", "{backend}");
        let o = ok(&haar(&root, backend, &["compact", "--json"]));
        let v: serde_json::Value = serde_json::from_str(o.trim()).unwrap();
        assert_eq!(v["result"]["tail"], 0, "{backend}: {o}");
        // A server's store is compacted on its node: compact takes no server options.
        let o = haar(&root, backend, &["--servers", "127.0.0.1:1", "compact"]);
        assert_eq!(code(&o), 1, "{}", stderr(&o));
        assert!(
            stderr(&o).contains("--servers is not an option of `haar compact`"),
            "{}",
            stderr(&o)
        );
    }
}

/// Reads never create or re-create a store (issue 14): list, retrieve, axes and info on a
/// root where nothing was archived exit 2 naming it, and leave no pool file or directory; a
/// pool file cut to 0 bytes under a catalogue that names a database is damage (exit 3, issue
/// 27), not re-created by a retrieve.
#[test]
fn reads_never_create_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    for backend in ["pmem", "posix"] {
        let root = tmp.path().join(format!("new-{backend}"));
        for cmd in [
            vec!["list", "class=od"],
            vec!["retrieve", "class=od,param=167", "-o", "/dev/null"],
            vec!["axes", "class=od"],
            vec!["info"],
        ] {
            let o = haar(&root, backend, &cmd);
            assert_eq!(code(&o), 2, "{backend} {cmd:?}: {}", stderr(&o));
            assert!(stderr(&o).contains("no store at"), "{}", stderr(&o));
            assert!(
                !root.exists(),
                "{backend} {cmd:?} created {}",
                root.display()
            );
        }
    }
    let pool = tmp.path().join("cut");
    archive_raw(&pool, "pmem", tmp.path(), 0, "167", b"GRIB0167777");
    std::fs::File::create(pool.join("haar.pool")).unwrap(); // truncated to 0 bytes
    let o = haar(
        &pool,
        "pmem",
        &["retrieve", "class=od,param=167", "-o", "/dev/null"],
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    assert_eq!(std::fs::metadata(pool.join("haar.pool")).unwrap().len(), 0);
}

/// Corruption is never reported as absence (issue 14): a field missing from a database whose
/// index is damaged makes `retrieve` exit 3 naming the damaged file and the key, not exit 2.
#[test]
fn retrieve_of_a_field_in_damaged_bytes_exits_3_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    archive_raw(&root, "posix", tmp.path(), 0, "167", b"GRIB0167777");
    fn find(dir: &Path, prefix: &str, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                find(&p, prefix, out);
            } else if p.file_name().unwrap().to_string_lossy().ends_with(prefix) {
                out.push(p);
            }
        }
    }
    let mut index = Vec::new();
    find(&root, ".index", &mut index);
    assert_eq!(index.len(), 1, "{index:?}"); // the archiving process's index: step 0
    archive_raw(&root, "posix", tmp.path(), 1, "167", b"GRIB1167777");
    let mut bytes = std::fs::read(&index[0]).unwrap();
    bytes[40] ^= 0xff; // inside the first segment (the flush of step 0)
    std::fs::write(&index[0], &bytes).unwrap();
    let req = format!("{DB},type=fc,levtype=sfc,step=0,param=167");
    let o = haar(&root, "posix", &["retrieve", &req, "-o", "/dev/null"]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&index[0].display().to_string()), "{err}");
    assert!(err.contains("damaged"), "{err}");
    assert!(err.contains("step=0"), "{err}");
    // The undamaged flush still reads.
    let req = format!("{DB},type=fc,levtype=sfc,step=1,param=167");
    ok(&haar(
        &root,
        "posix",
        &["retrieve", &req, "-o", "/dev/null"],
    ));
}

/// A damaged `db.key` does not make its database vanish (issue 14): `list` and `info` name
/// the file and fail with exit 3 (issue 27: damage is never a clean exit), on both backends.
#[test]
fn a_damaged_db_key_is_reported_not_hidden() {
    let tmp = tempfile::tempdir().unwrap();
    for backend in ["posix", "pmem"] {
        let root = tmp.path().join(backend);
        archive_raw(&root, backend, tmp.path(), 0, "167", b"GRIB0167777");
        let dbs = if backend == "pmem" {
            root.join("catalogue")
        } else {
            root.clone()
        };
        let dir = std::fs::read_dir(&dbs)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.join("db.key").exists())
            .expect("a database directory");
        let key = dir.join("db.key");
        std::fs::write(&key, b"garbage").unwrap();
        let o = haar(&root, backend, &["list", "class=od"]);
        let err = stderr(&o);
        assert_eq!(code(&o), 3, "{backend}: {err}");
        assert!(err.contains(&key.display().to_string()), "{backend}: {err}");
        assert!(err.contains("damaged"), "{backend}: {err}");
        let o = haar(&root, backend, &["info"]);
        assert_eq!(code(&o), 3, "{backend}: {}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains(&key.display().to_string()),
            "{backend}: {text}"
        );
        assert!(text.contains("problem:"), "{backend}: {text}");
    }
}

/// Every file and directory the store creates is owner-only by default (0600 / 0700), or what
/// `file_mode` configures (0640 / 0750); a server refuses a root others can write (issue 14).
#[test]
fn store_files_are_private_by_default_and_as_configured() {
    use std::os::unix::fs::PermissionsExt;
    fn walk(p: &Path, out: &mut Vec<(std::path::PathBuf, u32)>) {
        let m = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        out.push((p.to_path_buf(), m));
        if p.is_dir() {
            for e in std::fs::read_dir(p).unwrap().flatten() {
                walk(&e.path(), out);
            }
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    for (mode, file, dir) in [(None, 0o600, 0o700), (Some("0640"), 0o640, 0o750)] {
        for backend in ["posix", "pmem"] {
            let root = tmp
                .path()
                .join(format!("{backend}-{}", mode.unwrap_or("default")));
            let cfg = tmp
                .path()
                .join(format!("{backend}-{}.yaml", mode.unwrap_or("default")));
            let mut yaml = format!("backend: {backend}\nroots: [{}]\n", root.display());
            if let Some(m) = mode {
                yaml.push_str(&format!("file_mode: \"{m}\"\n"));
            }
            std::fs::write(&cfg, yaml).unwrap();
            let f = tmp.path().join("field.bin");
            std::fs::write(&f, b"GRIB0167777").unwrap();
            let key = format!("{DB},type=fc,levtype=sfc,step=0,param=167");
            let o = Command::new(env!("CARGO_BIN_EXE_haar"))
                .args(["--config", cfg.to_str().unwrap(), "archive", "--key", &key])
                .arg(&f)
                .output()
                .unwrap();
            ok(&o);
            let mut all = Vec::new();
            walk(&root, &mut all);
            assert!(all.len() > 3, "{all:?}");
            for (p, m) in all {
                let want = if p.is_dir() { dir } else { file };
                assert_eq!(m, want, "{backend} {mode:?}: {} is {m:04o}", p.display());
            }
        }
    }
    // A bad mode is refused with the setting named.
    let cfg = tmp.path().join("bad.yaml");
    std::fs::write(&cfg, "file_mode: \"0755\"\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_haar"))
        .args(["--config", cfg.to_str().unwrap(), "info"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("file_mode"), "{}", stderr(&o));
    // A server will not serve a root others can write.
    let open = tmp.path().join("open-root");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_haar"))
        .args([
            "--root",
            open.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("HAAR_TOKEN", "secret-token-for-the-test")
        .output()
        .unwrap();
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("writable by others"), "{}", stderr(&o));
}

/// `retrieve -o` onto a device or a FIFO writes through it: the write-beside-then-rename of
/// regular files would replace `/dev/null` itself with a regular file (as root it did, and
/// every later reader of /dev/null got the text written there).
#[test]
fn retrieve_onto_a_device_or_fifo_writes_through_it() {
    use std::os::unix::fs::FileTypeExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    archive_raw(&root, "posix", tmp.path(), 0, "167", b"GRIB0167777");
    let req = format!("{DB},type=fc,levtype=sfc,step=0,param=167");
    let fifo = tmp.path().join("fifo");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    ok(&haar(
        &root,
        "posix",
        &["retrieve", &req, "-o", fifo.to_str().unwrap()],
    ));
    assert_eq!(reader.join().unwrap(), b"GRIB0167777");
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 3); // store, raw file, fifo
    ok(&haar(
        &root,
        "posix",
        &["retrieve", &req, "-o", "/dev/null"],
    ));
    let null = std::fs::metadata("/dev/null").unwrap();
    assert!(
        null.file_type().is_char_device(),
        "/dev/null replaced: {null:?}"
    );
    let leftovers: Vec<_> = std::fs::read_dir("/dev")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".haar-tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Full storage (issue 14): archiving into a store whose file system fills gives exit 3 with
/// a message naming the store's file and the key, and saying that what was flushed before is
/// intact; it is; after a wipe frees space the store archives again. Both backends, on a real
/// small tmpfs.
#[test]
fn a_full_file_system_fails_clearly_and_the_store_recovers_after_a_wipe() {
    for (backend, size) in [("posix", "24m"), ("pmem", "48m")] {
        let Some(fs) = SmallFs::mount(size) else {
            return;
        };
        let root = fs.path().join("store");
        let tmp = tempfile::tempdir().unwrap();
        let body: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 1) as u8).collect();
        let file = tmp.path().join("field.bin");
        std::fs::write(&file, &body).unwrap();
        let key = |expver: &str, step: u32| {
            format!(
                "class=od,expver={expver},stream=oper,date=20260901,time=12,domain=g,type=fc,levtype=sfc,step={step},param=167"
            )
        };
        // A pool that starts small (20 MiB) and grows by 1 MiB chunks into the file system.
        let config = tmp.path().join("haar.yaml");
        std::fs::write(
            &config,
            format!(
                "backend: {backend}\nroots: [{}]\npool_size: 20971520\npool_chunk: 1048576\n",
                root.display()
            ),
        )
        .unwrap();
        let haar = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_haar"))
                .arg("--config")
                .arg(&config)
                .args(args)
                .env_remove("HAAR_CONFIG")
                .output()
                .expect("run haar")
        };
        let archive = |expver: &str, step: u32| {
            haar(&[
                "archive",
                "--key",
                &key(expver, step),
                file.to_str().unwrap(),
            ])
        };
        // Fill: fields of 1 MiB in two databases until the file system is full.
        let mut stored = Vec::new();
        let failed = loop {
            let step = stored.len() as u32;
            let expver = if step.is_multiple_of(2) {
                "0001"
            } else {
                "0002"
            };
            let o = archive(expver, step);
            if !o.status.success() {
                break o;
            }
            stored.push((expver, step));
            assert!(stored.len() < 100, "{backend}: {size} never filled");
        };
        // The device is used to its end (pmem: a growth step too large for what is left
        // falls back to what the allocation needs): at least 20 of the 24 MiB, 30 of the 48
        // MiB (the pool's first 17 MiB hold its tables and commit slots).
        let least = if backend == "posix" { 20 } else { 30 };
        assert!(
            stored.len() >= least,
            "{backend}: full after {} fields",
            stored.len()
        );
        let err = stderr(&failed);
        eprintln!(
            "{backend}: full after {} fields of 1 MiB: {err}",
            stored.len()
        );
        assert_eq!(code(&failed), 3, "{backend}: {err}");
        let names_store = err.contains(&root.display().to_string());
        assert!(
            names_store,
            "{backend}: the message names no store file: {err}"
        );
        assert!(
            err.contains("No space left") || err.contains("ENOSPC") || err.contains("full"),
            "{backend}: {err}"
        );
        let intact = |expver: &str, step: u32| {
            let out = tmp.path().join("out.bin");
            let out_arg = out.to_str().unwrap();
            ok(&haar(&["retrieve", &key(expver, step), "-o", out_arg]));
            let got = std::fs::read(&out).unwrap();
            assert_eq!(got, body, "{backend}: {expver} step {step}");
        };
        // Everything flushed before is intact.
        for (expver, step) in &stored {
            intact(expver, *step);
        }
        // A wipe frees space (pmem: for reuse inside the pool) and archiving works again.
        let db = "class=od,expver=0002,stream=oper,date=20260901,time=12,domain=g";
        ok(&haar(&["wipe", db, "--doit"]));
        for step in 1000..1003 {
            ok(&archive("0003", step));
        }
        for (expver, step) in stored.iter().filter(|(e, _)| *e == "0001") {
            intact(expver, *step);
        }
    }
}

/// Issue 26 (point 7): a root FDB5 wrote (its TOC databases) is named as such by every command
/// that finds nothing there, with `haar import-fdb5` suggested, never as damage and never as a
/// silent absence; archiving into one of its databases is refused.
#[test]
fn a_root_fdb5_wrote_is_named_with_import_fdb5_suggested() {
    let tmp = tempfile::tempdir().unwrap();
    // The directory name haar (and FDB5) give this database, taken from a haar root.
    let ours = tmp.path().join("ours");
    archive_raw(&ours, "posix", tmp.path(), 0, "167", b"GRIB-ish");
    let name = std::fs::read_dir(&ours)
        .unwrap()
        .flatten()
        .find(|e| e.path().join("db.key").is_file())
        .expect("haar's database directory")
        .file_name();
    // FDB5's layout of the same database: a `toc` and no `db.key`.
    let root = tmp.path().join("fdb5-root");
    std::fs::create_dir_all(root.join(&name)).unwrap();
    std::fs::write(root.join(&name).join("toc"), b"").unwrap();
    let named = |err: &str| {
        err.contains("is a database FDB5 wrote")
            && err.contains("haar import-fdb5")
            && !err.contains("unreadable database")
    };

    let req = format!("{DB},type=fc,levtype=sfc,step=0,param=167");
    let o = haar(&root, "posix", &["retrieve", &req, "-o", "/dev/null"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(named(&stderr(&o)), "retrieve: {}", stderr(&o));
    for args in [&["axes", DB][..], &["list", DB], &["wipe", DB]] {
        let o = haar(&root, "posix", args);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        assert!(named(&stderr(&o)), "{args:?}: {}", stderr(&o));
    }
    let info = ok(&haar(&root, "posix", &["info"]));
    assert!(
        info.contains("(FDB5's database)") && named(&info),
        "info: {info}"
    );
    let f = tmp.path().join("field.bin");
    std::fs::write(&f, b"GRIB-ish").unwrap();
    let o = haar(
        &root,
        "posix",
        &["archive", "--key", &req, f.to_str().unwrap()],
    );
    assert_ne!(code(&o), 0);
    assert!(named(&stderr(&o)), "archive: {}", stderr(&o));
    assert!(
        !root.join(&name).join("db.key").exists(),
        "FDB5's database left as it was"
    );
}
