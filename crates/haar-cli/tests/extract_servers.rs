//! Extraction through a real `haar serve` (design §8 EXTRACT, issue 29): the server extracts and
//! only the values travel. Ranges and `--points` from a client with the read-only token give
//! exactly the values of a local extraction of the server's own store and of ecCodes' decoding
//! (`grib_get_data`, printed exactly); a server without an extractor answers "unsupported" and
//! the library falls back to retrieving whole fields, with the same values.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use haar::extract::{Method, Selection};
use haar_core::request::Request;
use haar_net::auth::Tokens;
use haar_net::{ClientConfig, RemoteStore, Server, ServerConfig, Target};
use haar_testkit::{Announce, ServerProcess};

const TOKEN: &str = "extract-test-token";
const RO_TOKEN: &str = "extract-test-read-only";
const HAAR: &str = env!("CARGO_BIN_EXE_haar");

fn serve(root: &Path, ro_token: &Path) -> ServerProcess {
    ServerProcess::spawn(
        Command::new(HAAR)
            .arg("--root")
            .arg(root)
            .args(["--backend", "pmem", "serve", "--listen", "127.0.0.1:0"])
            .arg("--read-token-file")
            .arg(ro_token)
            .env("HAAR_TOKEN", TOKEN)
            .env_remove("HAAR_CONFIG")
            .stderr(Stdio::null()),
        Announce::FirstLine,
    )
}

fn haar(args: &[&str], token: Option<&str>) -> Output {
    let mut cmd = Command::new(HAAR);
    cmd.args(args)
        .env_remove("HAAR_CONFIG")
        .env_remove("HAAR_TOKEN")
        .env("HAAR_LOCAL_READS", "0");
    if let Some(t) = token {
        cmd.env("HAAR_TOKEN", t);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "haar {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `haar extract … --json`'s objects.
fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    (String::from_utf8_lossy(&out.stdout).lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// ecCodes' values of the one message in `file`, printed exactly.
fn eccodes_values(file: &Path) -> Vec<f64> {
    let data = Command::new("grib_get_data")
        .args(["-F", "%.17g"])
        .arg(file)
        .output()
        .unwrap();
    (String::from_utf8(data.stdout).unwrap().lines().skip(1))
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect()
}

fn client(token: &str) -> ClientConfig {
    ClientConfig {
        token: Some(token.into()),
        local_reads: false,
        ..ClientConfig::default()
    }
}

#[test]
fn the_server_extracts_ranges_and_points_and_only_values_travel() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let ro = dir.path().join("ro-token");
    std::fs::write(&ro, RO_TOKEN).unwrap();
    let server = serve(&root, &ro);
    let addr = server.addr.as_str();

    let grib = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python/tests/data/era5-levels-members.grib");
    haar(
        &["--servers", addr, "archive", grib.to_str().unwrap()],
        Some(TOKEN),
    );
    // The first message of the file is this field; ecCodes decodes it alone.
    let req = "class=ea,date=20170101,time=0,number=0,levelist=500,param=129";
    let bytes = std::fs::read(&grib).unwrap();
    let len = u32::from_be_bytes([0, bytes[4], bytes[5], bytes[6]]) as usize;
    let one = dir.path().join("one.grib");
    std::fs::write(&one, &bytes[..len]).unwrap();
    let want = eccodes_values(&one);

    for sel in [
        ["--ranges", "0-3,7317-7320,100"],
        ["--points", "90,0,-90,357,45.3,10.2"],
    ] {
        let args = ["extract", req, sel[0], sel[1], "--json"];
        let remote = json_lines(&haar(
            &[&["--servers", addr][..], &args[..]].concat(),
            Some(RO_TOKEN),
        ));
        // The server's own store, read here directly: the local path (pmem, by range).
        let local = json_lines(&haar(
            &[
                &["--root", root.to_str().unwrap(), "--backend", "pmem"][..],
                &args[..],
            ]
            .concat(),
            None,
        ));
        assert_eq!(remote, local, "{sel:?}");
        assert_eq!(remote.len(), 1, "{sel:?}");
        assert_eq!(remote[0]["method"], "jump");
        let ranges: Vec<(usize, usize)> =
            serde_json::from_value(remote[0]["ranges"].clone()).unwrap();
        let values: Vec<Vec<f64>> = serde_json::from_value(remote[0]["values"].clone()).unwrap();
        for ((i, j), v) in ranges.iter().zip(&values) {
            assert_eq!(v[..], want[*i..*j], "{sel:?} [{i}, {j})");
        }
    }

    // It was the server that extracted: the client's EXTRACT was answered, one field, six values.
    let remote = RemoteStore::connect(addr, &client(RO_TOKEN)).unwrap();
    let req = Request::parse(req).unwrap();
    let mut got = Vec::new();
    let end = remote
        .extract(
            &req,
            &Selection::Ranges(vec![(0, 3), (7317, 7320)]),
            &mut |v| {
                got.push(v);
                Ok(())
            },
        )
        .unwrap()
        .expect("a server of this build extracts");
    assert_eq!((end.found, end.values), (1, 6));
    assert_eq!(got[0].values[1], want[7317..7320]);
    assert_eq!(got[0].method, Method::Jump.as_str());
    // Every field of the request (all levels and members of one parameter), through the library.
    let all = Request::parse("class=ea,date=20170101,time=0,param=129").unwrap();
    let via_server =
        haar::extract::extract(&remote, &all, &Selection::Ranges(vec![(5, 9)])).unwrap();
    assert!(via_server.len() > 1);
    // A range past the grid is the server's input error, naming the field.
    let e = haar::extract::extract(&remote, &req, &Selection::Ranges(vec![(0, 7321)]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("7321") && e.contains("param=129"), "{e}");
}

/// A server that does not extract (here: embedded without an extractor; one that predates
/// EXTRACT answers with the same words) is asked, says so, and the library fetches the fields
/// whole instead: the same values.
#[test]
fn a_server_that_does_not_extract_is_answered_by_fetching_whole_fields() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = haar::OpenOptions {
        config: haar::ConfigSource::Yaml {
            text: "backend: posix\n".into(),
            origin: "test".into(),
        },
        root: Some(dir.path().join("store")),
        ..haar::OpenOptions::default()
    }
    .local()
    .unwrap();
    let msg = haar_grib::jump::tests_support::simple_field(&[1.0, 2.0, f64::NAN, 4.0, 5.0], 16);
    let key = haar_core::Key::parse(
        "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc,\
         step=0,param=167",
    )
    .unwrap();
    haar_store::FieldStore::archive(&mut store, &key, &msg).unwrap();
    haar_store::FieldStore::flush(&mut store).unwrap();
    let config = ServerConfig {
        tokens: Tokens {
            read_write: Some(TOKEN.into()),
            read_only: None,
        },
        extractor: None,
        ..ServerConfig::default()
    };
    let addr = Server::bind("127.0.0.1:0", Target::from_store(&store), config)
        .unwrap()
        .spawn()
        .unwrap()
        .to_string();
    let remote = RemoteStore::connect(&addr, &client(TOKEN)).unwrap();
    let req = Request::parse("param=167").unwrap();
    let sel = Selection::Ranges(vec![(1, 3), (4, 5)]);
    let asked = remote.extract(&req, &sel, &mut |_| panic!("no values from this server"));
    assert!(asked.unwrap().is_none(), "unsupported, not an error");
    let got = haar::extract::extract(&remote, &req, &sel).unwrap();
    let local = haar::extract::extract(&store, &req, &sel).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].values[0][0], 2.0);
    assert!(got[0].values[0][1].is_nan());
    assert_eq!(got[0].values[1], [5.0]);
    assert_eq!(got[0].method, Method::Jump);
    // Fetched whole: what was read is the whole field.
    assert_eq!(got[0].bytes_read, msg.len() as u64);
    assert_eq!(
        format!("{:?}", got[0].values),
        format!("{:?}", local[0].values)
    );
    // The connection is still up after the refusal: the next request is answered.
    assert_eq!(
        haar_store::FieldStore::list(&remote, &req).unwrap().len(),
        1
    );
}
