//! Exit status 2 ("requested data missing", design §9) for a request that matches nothing,
//! through the real binary on both backends: `haar retrieve` and `haar extract` exit 2 and
//! their stderr names what was asked for; `haar list` answers with an empty listing (exit 0:
//! neither §9 nor its `--help` makes an empty listing an error, as FDB5's `fdb-list` does
//! not). The store exists and holds another field, so this is absence, not "no store at"
//! (`reads_never_create_a_store` in `cli.rs`).

use std::process::Output;

mod common;
use common::haar_at as haar;

const DB: &str = "class=od,expver=1,stream=oper,date=20260901,time=12,domain=g";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit 2, and stderr names the request (its step and param).
fn exits_2_naming_it(o: &Output, what: &str) {
    assert_eq!(o.status.code(), Some(2), "{what}: {}", stderr(o));
    let err = stderr(o);
    assert!(
        err.contains("step=6") && err.contains("param=167"),
        "{what} does not name the request: {err}"
    );
}

#[test]
fn a_request_matching_nothing_exits_2_from_retrieve_and_extract_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    for backend in ["posix", "pmem"] {
        let root = tmp.path().join(backend);
        let body = tmp.path().join("field.bin");
        std::fs::write(&body, b"GRIB0167-7777").unwrap();
        let stored = format!("{DB},type=fc,levtype=sfc,step=0,param=167");
        let o = haar(
            &root,
            backend,
            &["archive", "--key", &stored, body.to_str().unwrap()],
        );
        assert!(o.status.success(), "{backend} archive: {}", stderr(&o));

        let absent = format!("{DB},type=fc,levtype=sfc,step=6,param=167");
        let out = tmp.path().join(format!("{backend}.out"));
        let o = haar(
            &root,
            backend,
            &["retrieve", &absent, "-o", out.to_str().unwrap()],
        );
        exits_2_naming_it(&o, &format!("{backend} retrieve"));
        assert!(
            !out.exists(),
            "{backend}: a failed retrieve left its output"
        );

        let o = haar(&root, backend, &["extract", &absent, "--ranges", "0-1"]);
        exits_2_naming_it(&o, &format!("{backend} extract"));
        assert!(o.stdout.is_empty(), "{backend} extract printed values");

        let o = haar(&root, backend, &["list", &absent]);
        assert_eq!(o.status.code(), Some(0), "{backend} list: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{backend} list printed fields");
    }
}
