//! The real FDB5 as one more store for the workloads: the adapter over FDB5's C API is
//! [`haar::fdb5`] (the same one `haar import-fdb5` reads through), re-exported here; this module
//! adds what only the benchmarks need, a self-contained FDB5 root ([`setup_root`]).
//! Owns that set-up; must not know any workload.

use std::path::Path;

pub use haar::fdb5::{Fdb5Store, LIB_ENV};

use crate::error::{Error, io};

/// True if the FDB5 library can be loaded here.
pub fn available() -> bool {
    haar::fdb5::load_error().is_none() && Path::new("/etc/fdb/schema").exists()
}

/// Prepares a self-contained FDB5 under `root` (config, schema, empty dbnames, `db/`)
/// and returns the environment its processes need.
pub fn setup_root(root: &Path) -> Result<Vec<(String, String)>, Error> {
    setup_root_at(root, root)
}

/// [`setup_root`] for processes that name the directory `root` reaches as `there` (another
/// mount namespace's view of it, e.g. a virtual-cluster node's `/shared/…` reached from here
/// through `/proc/PID/root`): files are written through `root`, and the configuration and
/// environment name paths under `there`.
pub fn setup_root_at(root: &Path, there: &Path) -> Result<Vec<(String, String)>, Error> {
    let io = |what: &str, p: &Path| io(format!("FDB5 set-up: cannot {what} {}", p.display()));
    let db = root.join("db");
    std::fs::create_dir_all(&db).map_err(io("create", &db))?;
    let schema = root.join("schema");
    // FDB5's default schema where FDB5 is installed system-wide; else (PyPI's wheel ships
    // none) haar's built-in schema as FDB5 takes it (FDB5's default: without haar's fallback
    // rule, through which FDB5 would read every field twice).
    if Path::new("/etc/fdb/schema").exists() {
        std::fs::copy("/etc/fdb/schema", &schema)
            .map_err(io("copy /etc/fdb/schema to", &schema))?;
    } else {
        let text = haar_core::schema::for_fdb5(haar_core::schema::BUILTIN_SCHEMA);
        std::fs::write(&schema, text.as_bytes()).map_err(io("write", &schema))?;
    }
    let dbnames = root.join("dbnames");
    std::fs::write(&dbnames, "").map_err(io("write", &dbnames))?;
    let config = root.join("fdb5-config.yaml");
    let text = format!(
        "---\ntype: local\nengine: toc\nschema: {}\nspaces:\n  - handler: Default\n    roots:\n      - path: {}\n",
        there.join("schema").display(),
        there.join("db").display()
    );
    std::fs::write(&config, text).map_err(io("write", &config))?;
    Ok(vec![
        (
            "FDB5_CONFIG_FILE".into(),
            there.join("fdb5-config.yaml").display().to_string(),
        ),
        (
            "FDB_DBNAMES_FILE".into(),
            there.join("dbnames").display().to_string(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use haar_core::Key;
    use haar_core::request::Request;
    use haar_store::{FieldStore, FieldStoreExt};

    /// The FDB5 behaviours the workloads rely on, through the adapter: a reader made before a
    /// flush does not see it until `list` renews it; missing data is reported missing, not an
    /// error; what the C API does not offer fails by name. Skipped where FDB5 is not installed.
    #[test]
    fn fdb5_as_a_field_store() {
        if !available() {
            eprintln!("FDB5 not installed: skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let env = setup_root(dir.path()).unwrap();
        // SAFETY (test): FDB5 reads its configuration from the environment; this test is the
        // only one in this crate that opens FDB5.
        for (k, v) in &env {
            unsafe { std::env::set_var(k, v) };
        }
        let key = |step: u32| {
            Key::parse(&format!(
                "class=rd,expver=xxxx,stream=enfo,date=20261121,time=0000,domain=g,type=pf,\
                 levtype=ml,step={step},number=1,levelist=1,param=130"
            ))
            .unwrap()
        };
        let mut w = Fdb5Store::open().unwrap();
        let r = Fdb5Store::open().unwrap();
        assert!(w.describe().starts_with("FDB5 "));
        w.archive(&key(0), b"first").unwrap();
        w.flush().unwrap();
        let mut got = Vec::new();
        let rep = r
            .retrieve_keys(&[key(0), key(6)], &mut |k, d, crc| {
                assert_eq!(crc, None, "FDB5 keeps no checksum: {}", d.len());
                got.push((k.clone(), d.to_vec()));
                Ok(())
            })
            .unwrap();
        assert_eq!(got, vec![(key(0), b"first".to_vec())]);
        assert_eq!((rep.found, rep.missing.clone()), (1, vec![key(6)]));
        // Flushed after the reader read the database: invisible to it until a list.
        w.archive(&key(6), b"second").unwrap();
        w.flush().unwrap();
        let seen = |r: &Fdb5Store| {
            let mut n = 0;
            r.retrieve_keys(&[key(6)], &mut |_, _, _| {
                n += 1;
                Ok(())
            })
            .unwrap();
            n
        };
        assert_eq!(seen(&r), 0);
        let req = Request::parse(
            "class=rd,expver=xxxx,stream=enfo,date=20261121,time=0000,domain=g,type=pf,\
             levtype=ml,step=0/6/12,number=1,levelist=1,param=130",
        )
        .unwrap();
        let listed = r.list(&req).unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1].data.length, 6);
        assert_eq!(seen(&r), 1);
        let e = r
            .list(&Request::parse("class=rd,step=all").unwrap())
            .unwrap_err();
        assert!(
            e.to_string().contains("list of a request with step=all"),
            "{e}"
        );
        let e = w.wipe(&req, true).unwrap_err().to_string();
        assert!(e.contains("does not offer wipe"), "{e}");
        assert!(r.stats(&req).is_err());
        let split = w.split(&key(12)).unwrap();
        let e = w.archive_split(&split, b"x", Some(1)).unwrap_err();
        assert!(e.to_string().contains("not archived"), "{e}");
    }
}
