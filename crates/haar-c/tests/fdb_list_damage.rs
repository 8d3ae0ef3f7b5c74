//! `fdb_list` on a store with a damaged index fails (issue 27: damage is never a clean
//! listing), naming the damaged file, even when other fields can be listed.

// FDB5 5.25's `fdb_list`; with `fdb5-5_10` the library exports 5.10's under that name.
#![cfg(not(feature = "fdb5-5_10"))]

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr;

use haar_c::fdb_api::handle::{fdb_delete_handle, fdb_new_handle_from_yaml};
use haar_c::fdb_api::list::fdb_list;
use haar_c::fdb_api::{FDB_ERROR_GENERAL_EXCEPTION, FDB_SUCCESS, fdb_error_string};
use haar_core::Key;
use haar_store::{FsyncPolicy, PosixBackend, Store};

fn index_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            index_files(&p, out);
        } else if p.to_string_lossy().ends_with(".index") {
            out.push(p);
        }
    }
}

fn archive(root: &Path, step: u32) {
    let backend = PosixBackend::new(vec![root.to_path_buf()], FsyncPolicy::Never).unwrap();
    let mut store = Store::new(backend);
    let key = Key::parse(&format!(
        "class=od,expver=0001,stream=oper,date=20261121,time=1200,domain=g,type=fc,levtype=sfc,step={step},param=167"
    ))
    .unwrap();
    store.archive(&key, b"GRIB7777").unwrap();
    store.flush().unwrap();
}

#[test]
fn fdb_list_fails_on_a_damaged_index_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    archive(&root, 0);
    let mut first = Vec::new();
    index_files(&root, &mut first);
    assert_eq!(first.len(), 1, "{first:?}");
    archive(&root, 1);
    let mut bytes = std::fs::read(&first[0]).unwrap();
    bytes[40] ^= 0xff; // inside the segment of step 0; step 1's stays listable
    std::fs::write(&first[0], &bytes).unwrap();

    let yaml = CString::new(format!("backend: posix\nroots: [{}]\n", root.display())).unwrap();
    let mut fdb = ptr::null_mut();
    unsafe {
        assert_eq!(
            fdb_new_handle_from_yaml(&mut fdb, yaml.as_ptr(), ptr::null()),
            FDB_SUCCESS
        );
        let mut it = ptr::null_mut();
        assert_eq!(
            fdb_list(fdb, ptr::null(), &mut it, true, 3),
            FDB_ERROR_GENERAL_EXCEPTION
        );
        let m = CStr::from_ptr(fdb_error_string(FDB_ERROR_GENERAL_EXCEPTION))
            .to_string_lossy()
            .into_owned();
        assert!(m.contains(&first[0].display().to_string()), "{m}");
        assert!(m.contains("damaged"), "{m}");
        assert_eq!(fdb_delete_handle(fdb), FDB_SUCCESS);
    }
}
