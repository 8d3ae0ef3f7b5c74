//! Damage is never a clean exit (issue 27): a damaged index, commit slot or pool makes `list`
//! and `info` fail with exit 3 (as `retrieve` does), naming the damaged file and what to do,
//! after showing what they could; a pool truncated under a catalogue that names databases is
//! damage, never "no store", and archiving does not re-create it over them.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::haar_at as haar;

const DB: &str = "class=od,expver=1,stream=oper,date=20260901,time=12,domain=g";

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn archive(root: &Path, backend: &str, step: u32) -> Output {
    let f = root.with_extension(format!("{step}.bin"));
    std::fs::write(&f, format!("GRIB{step}7777")).unwrap();
    let key = format!("{DB},type=fc,levtype=sfc,step={step},param=167");
    haar(
        root,
        backend,
        &["archive", "--key", &key, f.to_str().unwrap()],
    )
}

fn files_ending(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files_ending(&p, suffix, out);
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
}

/// `list` and `info` on a store with damage at `file`: exit 3, the file named, the advice
/// given; `list` still prints the fields it could read (`intact` of them).
fn fails_naming(root: &Path, backend: &str, file: &Path, intact: usize) {
    let o = haar(root, backend, &["list", "class=od"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 3, "{backend} list: {err}");
    assert!(
        err.contains(&file.display().to_string()),
        "{backend}: {err}"
    );
    assert!(
        err.contains("incomplete") && err.contains("restore"),
        "{err}"
    );
    let listed = String::from_utf8_lossy(&o.stdout).lines().count();
    assert_eq!(
        listed,
        intact,
        "{backend}: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    for args in [vec!["info"], vec!["info", "--json"]] {
        let o = haar(root, backend, &args);
        assert_eq!(code(&o), 3, "{backend} {args:?}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&file.display().to_string()),
            "{backend}: {out}"
        );
        assert!(stderr(&o).contains("incomplete"), "{}", stderr(&o));
    }
}

/// Archives steps 0 and 1 into a posix store at `root` and damages the index segment of
/// step 0; returns the index file.
fn damaged_posix_index(root: &Path) -> PathBuf {
    assert_eq!(code(&archive(root, "posix", 0)), 0);
    let mut index = Vec::new();
    files_ending(root, ".index", &mut index);
    assert_eq!(index.len(), 1, "{index:?}");
    assert_eq!(code(&archive(root, "posix", 1)), 0);
    let mut bytes = std::fs::read(&index[0]).unwrap();
    bytes[40] ^= 0xff; // inside the segment of step 0
    std::fs::write(&index[0], &bytes).unwrap();
    index.remove(0)
}

/// Archives steps 0 and 1 into a pmem store at `root` and damages the first flush's commit
/// record; returns the pool file.
fn damaged_pmem_commit_record(root: &Path) -> PathBuf {
    assert_eq!(code(&archive(root, "pmem", 0)), 0);
    assert_eq!(code(&archive(root, "pmem", 1)), 0);
    // Commit slot 0 (the header is 4096 bytes, the primary slot array follows) names the
    // first flush's segment record (design §5.3); its magic is damaged.
    let pool = root.join("haar.pool");
    let mut bytes = std::fs::read(&pool).unwrap();
    let rec = u64::from_le_bytes(bytes[4096..4104].try_into().unwrap()) as usize;
    assert!(rec > 4096 && rec < bytes.len(), "slot 0 holds {rec}");
    bytes[rec] ^= 0xff;
    std::fs::write(&pool, &bytes).unwrap();
    pool
}

#[test]
fn a_damaged_posix_index_fails_list_and_info() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let index = damaged_posix_index(&root);
    fails_naming(&root, "posix", &index, 1);
}

#[test]
fn a_damaged_pmem_commit_record_fails_list_and_info() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let pool = damaged_pmem_commit_record(&root);
    fails_naming(&root, "pmem", &pool, 1);
}

const TOKEN: &str = "damage-test-token";

/// `haar --servers ADDR ARGS` with the test's token.
fn remote(addr: &str, args: &[&str]) -> Output {
    let mut all = vec!["--servers", addr];
    all.extend_from_slice(args);
    std::process::Command::new(common::haar_bin())
        .args(&all)
        .env("HAAR_TOKEN", TOKEN)
        .env_remove("HAAR_CONFIG")
        .output()
        .expect("run haar")
}

/// Remote `list` and `info` (text and JSON) over a server whose store has damage at `file`:
/// exit 3, naming the server and the file, saying the answer is incomplete; `list` prints the
/// `intact` fields it could read.
fn fails_remotely_naming(addr: &str, file: &str, intact: usize) {
    let server = format!("server {addr}");
    for args in [
        vec!["list", "class=od"],
        vec!["info"],
        vec!["info", "--json"],
    ] {
        let o = remote(addr, &args);
        let err = stderr(&o);
        assert_eq!(code(&o), 3, "remote {args:?}: {err}");
        assert!(
            err.contains(&server) && err.contains(file),
            "{args:?}: {err}"
        );
        assert!(err.contains("incomplete"), "{err}");
        if args[0] == "list" {
            let out = String::from_utf8_lossy(&o.stdout);
            assert_eq!(out.lines().count(), intact, "{out}");
        }
    }
}

/// A real `haar serve` over `root`; killed when dropped.
fn serve(root: &Path, backend: &str) -> haar_testkit::ServerProcess {
    haar_testkit::ServerProcess::spawn(
        std::process::Command::new(common::haar_bin())
            .arg("--root")
            .arg(root)
            .args(["--backend", backend, "serve", "--listen", "127.0.0.1:0"])
            .env("HAAR_TOKEN", TOKEN)
            .env_remove("HAAR_CONFIG")
            .stderr(std::process::Stdio::null()),
        haar_testkit::Announce::FirstLine,
    )
}

/// Issue 27: damage on a server crossed the wire as text, but remote `info` exited 0 and
/// remote `list` named neither the server nor, for the reader, where to look.
#[test]
fn damage_on_a_server_fails_remote_list_and_info_naming_the_server_and_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let posix = tmp.path().join("posix");
    let index = damaged_posix_index(&posix);
    let s = serve(&posix, "posix");
    fails_remotely_naming(&s.addr, &index.display().to_string(), 1);
    drop(s);

    let pmem = tmp.path().join("pmem");
    let pool = damaged_pmem_commit_record(&pmem);
    let s = serve(&pmem, "pmem");
    fails_remotely_naming(&s.addr, &pool.display().to_string(), 1);
}

/// A server older than PROBLEMS (issue 13) answers ERROR for the kind; the client asks STATS
/// instead, and damage in that reply fails `list` the same way. The older server is a
/// scripted peer: it logs any token in, answers PROBLEMS as an unknown kind, STATS with one
/// damaged database and LIST with nothing.
#[test]
fn damage_reported_by_a_server_older_than_problems_still_fails_remote_list() {
    use haar_net::protocol::{self, Kind, Limits};
    use std::io::Write;
    const FILE: &str = "/srv/haar/od:0001:oper:20260901:1200:g/57cb.index";
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            std::thread::spawn(move || {
                let mut f = protocol::Frame::default();
                let send = |s: &mut std::net::TcpStream, kind, id, meta: serde_json::Value| {
                    let frame = protocol::encode(
                        kind,
                        protocol::FLAG_END,
                        id,
                        &protocol::to_meta(&meta),
                        &[],
                    );
                    s.write_all(&frame.unwrap())
                };
                protocol::read_frame(&mut s, Limits::HANDSHAKE, &mut f).unwrap();
                let hello: protocol::Hello = f.meta().unwrap();
                let nonce = haar_net::auth::nonce();
                let challenge = serde_json::json!({"version": protocol::VERSION,
                    "server": "haar (before PROBLEMS)", "nonce": nonce, "tags": false});
                send(&mut s, Kind::Challenge, 0, challenge).unwrap();
                protocol::read_frame(&mut s, Limits::HANDSHAKE, &mut f).unwrap();
                let tags = haar_net::auth::TagsAgreed::default();
                let proof = haar_net::auth::server_proof(TOKEN, &hello.nonce, &nonce, tags);
                let welcome = serde_json::json!({"access": "read-write", "proof": proof});
                send(&mut s, Kind::Welcome, 0, welcome).unwrap();
                while protocol::read_frame(&mut s, Limits::SESSION, &mut f).is_ok() {
                    let (kind, reply) = match f.kind() {
                        Some(Kind::Stats) => (
                            Kind::End,
                            serde_json::json!({"databases": [{
                            "db": "class=od,expver=0001", "fields": 1, "bytes": 10,
                            "dead_fields": 0, "dead_bytes": 0,
                            "problems": [format!("{FILE} @ 0: index segment: checksum mismatch")]}]}),
                        ),
                        Some(Kind::List) => (Kind::End, serde_json::json!({"fields": []})),
                        _ => (
                            Kind::Error,
                            serde_json::json!({"exit_code": 1,
                            "message": format!("unknown or unexpected request kind {} (unknown)", f.kind)}),
                        ),
                    };
                    if send(&mut s, kind, f.id, reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let o = remote(&addr, &["list", "class=od"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 3, "{err}");
    assert!(
        err.contains(&format!("server {addr}")) && err.contains(FILE),
        "{err}"
    );
    assert!(err.contains("incomplete"), "{err}");
}

#[test]
fn a_truncated_pmem_pool_is_damage_naming_its_sizes_never_no_store() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    assert_eq!(code(&archive(&root, "pmem", 0)), 0);
    let pool = root.join("haar.pool");
    let full = std::fs::metadata(&pool).unwrap().len();

    // Cut short: the header records the length the file had.
    let f = std::fs::OpenOptions::new().write(true).open(&pool).unwrap();
    f.set_len(8 << 20).unwrap();
    for args in [
        vec!["list", "class=od"],
        vec!["info"],
        vec!["retrieve", "class=od,param=167", "-o", "/dev/null"],
    ] {
        let o = haar(&root, "pmem", &args);
        let err = stderr(&o);
        assert_eq!(code(&o), 3, "{args:?}: {err}");
        assert!(err.contains(&pool.display().to_string()), "{err}");
        assert!(
            err.contains(&format!(
                "is {} bytes but its header records {full}",
                8 << 20
            )),
            "{err}"
        );
        assert!(err.contains("restore"), "{err}");
    }

    // Cut to nothing: the catalogue still names the database.
    f.set_len(0).unwrap();
    for args in [
        vec!["list", "class=od"],
        vec!["info"],
        vec!["retrieve", "class=od,param=167", "-o", "/dev/null"],
    ] {
        let o = haar(&root, "pmem", &args);
        let err = stderr(&o);
        assert_eq!(code(&o), 3, "{args:?}: {err}");
        assert!(!err.contains("no store"), "{err}");
        assert!(err.contains(&pool.display().to_string()), "{err}");
        assert!(err.contains("is 0 bytes"), "{err}");
        assert!(err.contains("names 1 database"), "{err}");
        assert!(
            err.contains(&root.join("catalogue").display().to_string()),
            "{err}"
        );
    }
    // Archiving (what the old message advised) does not create an empty pool over them.
    let o = archive(&root, "pmem", 1);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    assert_eq!(std::fs::metadata(&pool).unwrap().len(), 0);
}
