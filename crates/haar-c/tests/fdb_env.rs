//! `fdb_new_handle()` opens what the environment names, called in-process through the Rust
//! side of the C functions: FDB5's variables where `HAAR_CONFIG` is unset (a local TOC
//! configuration opens a haar store under its root), and a clear error for a configuration
//! that cannot be read. One test, so that nothing else in this process reads the environment
//! while it changes.

#![cfg(not(feature = "fdb5-5_10"))]

use std::ffi::{CStr, c_char};
use std::ptr;

use haar_c::fdb_api::handle::{fdb_delete_handle, fdb_flush, fdb_handle_t, fdb_new_handle};
use haar_c::fdb_api::keys::{fdb_delete_key, fdb_key_add, fdb_key_t, fdb_new_key};
use haar_c::fdb_api::{FDB_ERROR_GENERAL_EXCEPTION, FDB_SUCCESS, fdb_error_string};

fn message() -> String {
    unsafe { CStr::from_ptr(fdb_error_string(FDB_ERROR_GENERAL_EXCEPTION)) }
        .to_string_lossy()
        .into_owned()
}

fn c(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap()
}

#[test]
fn fdb_new_handle_follows_fdb5s_variables_where_haar_config_is_unset() {
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: the only test in this binary; nothing else reads the environment meanwhile.
    unsafe {
        for v in ["HAAR_CONFIG", "FDB5_CONFIG", "FDB5_CONFIG_FILE", "FDB_HOME"] {
            std::env::remove_var(v);
        }
        std::env::set_var("FDB5_CONFIG_FILE", dir.path().join("missing.yaml"));
    }
    let mut fdb: *mut fdb_handle_t = ptr::null_mut();
    assert_eq!(
        unsafe { fdb_new_handle(&mut fdb) },
        FDB_ERROR_GENERAL_EXCEPTION
    );
    assert!(fdb.is_null());
    let m = message();
    assert!(
        m.contains("cannot read configuration") && m.contains("missing.yaml"),
        "{m}"
    );

    // FDB5_CONFIG (YAML text) comes before FDB5_CONFIG_FILE (ConfigSource::from_env).
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let yaml = format!(
        "type: local\nengine: toc\nspaces: [{{handler: Default, roots: [{{path: {}}}]}}]\n",
        root.display()
    );
    unsafe { std::env::set_var("FDB5_CONFIG", &yaml) };
    assert_eq!(
        unsafe { fdb_new_handle(&mut fdb) },
        FDB_SUCCESS,
        "{}",
        message()
    );
    let mut key: *mut fdb_key_t = ptr::null_mut();
    assert_eq!(unsafe { fdb_new_key(&mut key) }, FDB_SUCCESS);
    for (k, v) in [
        ("class", "od"),
        ("expver", "1"),
        ("stream", "oper"),
        ("date", "20261121"),
        ("time", "12"),
        ("domain", "g"),
        ("type", "fc"),
        ("levtype", "sfc"),
        ("step", "0"),
        ("param", "167"),
    ] {
        let (k, v) = (c(k), c(v));
        assert_eq!(
            unsafe { fdb_key_add(key, k.as_ptr(), v.as_ptr()) },
            FDB_SUCCESS
        );
    }
    let data = b"GRIB env 7777";
    assert_eq!(
        unsafe {
            haar_c::fdb_api::handle::fdb_archive(
                fdb,
                key,
                data.as_ptr().cast::<c_char>(),
                data.len(),
            )
        },
        FDB_SUCCESS,
        "{}",
        message()
    );
    assert_eq!(unsafe { fdb_flush(fdb) }, FDB_SUCCESS);
    assert_eq!(unsafe { fdb_delete_key(key) }, FDB_SUCCESS);
    assert_eq!(unsafe { fdb_delete_handle(fdb) }, FDB_SUCCESS);

    // The field is in a haar posix store under FDB5's root, read without the C API.
    let store = haar::OpenOptions {
        config: haar::ConfigSource::Yaml {
            text: format!("backend: posix\nroots: [{}]\n", root.display()),
            origin: "test".into(),
        },
        ..haar::OpenOptions::default()
    }
    .field_store()
    .unwrap();
    let fields = store.list(&haar_core::Request::default()).unwrap();
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].key().get("expver"), Some("0001"));

    // HAAR_CONFIG comes first.
    unsafe { std::env::set_var("HAAR_CONFIG", dir.path().join("haar-missing.yaml")) };
    assert_eq!(
        unsafe { fdb_new_handle(&mut fdb) },
        FDB_ERROR_GENERAL_EXCEPTION
    );
    assert!(message().contains("haar-missing.yaml"), "{}", message());
}
