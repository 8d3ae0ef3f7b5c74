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

#[test]
fn a_damaged_posix_index_fails_list_and_info() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    assert_eq!(code(&archive(&root, "posix", 0)), 0);
    let mut index = Vec::new();
    files_ending(&root, ".index", &mut index);
    assert_eq!(index.len(), 1, "{index:?}");
    assert_eq!(code(&archive(&root, "posix", 1)), 0);
    let mut bytes = std::fs::read(&index[0]).unwrap();
    bytes[40] ^= 0xff; // inside the segment of step 0
    std::fs::write(&index[0], &bytes).unwrap();
    fails_naming(&root, "posix", &index[0], 1);
}

#[test]
fn a_damaged_pmem_commit_record_fails_list_and_info() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    assert_eq!(code(&archive(&root, "pmem", 0)), 0);
    assert_eq!(code(&archive(&root, "pmem", 1)), 0);
    // Commit slot 0 (the header is 4096 bytes, the primary slot array follows) names the
    // first flush's segment record (design §5.3); its magic is damaged.
    let pool = root.join("haar.pool");
    let mut bytes = std::fs::read(&pool).unwrap();
    let rec = u64::from_le_bytes(bytes[4096..4104].try_into().unwrap()) as usize;
    assert!(rec > 4096 && rec < bytes.len(), "slot 0 holds {rec}");
    bytes[rec] ^= 0xff;
    std::fs::write(&pool, &bytes).unwrap();
    fails_naming(&root, "pmem", &pool, 1);
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
