//! `fdb_retrieve` of fields that are not there, through the Rust side of the C functions:
//! success with the fields that are (FDB5's documented semantics, the default), or, with
//! `fdb5_missing: error` in the configuration, a failure naming the absent key; a bad value
//! of that setting is refused when the handle is opened.

#![cfg(not(feature = "fdb5-5_10"))]

use std::ffi::{CStr, CString, c_char, c_long};
use std::ptr;

use haar_c::fdb_api::handle::{
    fdb_archive, fdb_delete_handle, fdb_flush, fdb_handle_t, fdb_new_handle_from_yaml, fdb_retrieve,
};
use haar_c::fdb_api::keys::{
    fdb_delete_key, fdb_delete_request, fdb_key_add, fdb_key_t, fdb_new_key, fdb_new_request,
    fdb_request_add, fdb_request_t,
};
use haar_c::fdb_api::reader::{
    fdb_datareader_open, fdb_datareader_t, fdb_delete_datareader, fdb_new_datareader,
};
use haar_c::fdb_api::{FDB_ERROR_GENERAL_EXCEPTION, FDB_SUCCESS, fdb_error_string};

const FIELD: [(&str, &str); 10] = [
    ("class", "od"),
    ("expver", "0001"),
    ("stream", "oper"),
    ("date", "20261121"),
    ("time", "1200"),
    ("domain", "g"),
    ("type", "fc"),
    ("levtype", "sfc"),
    ("step", "0"),
    ("param", "167"),
];

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn message() -> String {
    unsafe { CStr::from_ptr(fdb_error_string(FDB_ERROR_GENERAL_EXCEPTION)) }
        .to_string_lossy()
        .into_owned()
}

fn open(yaml: &str) -> (i32, *mut fdb_handle_t) {
    let mut fdb = ptr::null_mut();
    let y = c(yaml);
    let rc = unsafe { fdb_new_handle_from_yaml(&mut fdb, y.as_ptr(), ptr::null()) };
    (rc, fdb)
}

/// The request for the field with `steps` (`/`-separated).
fn request(steps: &str) -> *mut fdb_request_t {
    let mut req = ptr::null_mut();
    assert_eq!(unsafe { fdb_new_request(&mut req) }, FDB_SUCCESS);
    for (k, v) in FIELD {
        let values: Vec<CString> = if k == "step" {
            steps.split('/').map(c).collect()
        } else {
            vec![c(v)]
        };
        let ptrs: Vec<*const c_char> = values.iter().map(|v| v.as_ptr()).collect();
        let k = c(k);
        assert_eq!(
            unsafe { fdb_request_add(req, k.as_ptr(), ptrs.as_ptr(), ptrs.len() as i32) },
            FDB_SUCCESS
        );
    }
    req
}

/// `fdb_retrieve`'s code and, on success, the size the reader holds.
fn retrieve(fdb: *mut fdb_handle_t, steps: &str) -> (i32, c_long) {
    let req = request(steps);
    let mut dr: *mut fdb_datareader_t = ptr::null_mut();
    assert_eq!(unsafe { fdb_new_datareader(&mut dr) }, FDB_SUCCESS);
    let rc = unsafe { fdb_retrieve(fdb, req, dr) };
    let mut size: c_long = -1;
    if rc == FDB_SUCCESS {
        assert_eq!(unsafe { fdb_datareader_open(dr, &mut size) }, FDB_SUCCESS);
    }
    assert_eq!(unsafe { fdb_delete_datareader(dr) }, FDB_SUCCESS);
    assert_eq!(unsafe { fdb_delete_request(req) }, FDB_SUCCESS);
    (rc, size)
}

#[test]
fn absent_fields_are_left_out_unless_the_configuration_asks_for_errors() {
    let dir = tempfile::tempdir().unwrap();
    let base = format!("backend: posix\nroots: [{}]\n", dir.path().display());
    let (rc, fdb) = open(&base);
    assert_eq!(rc, FDB_SUCCESS, "{}", message());
    let mut key: *mut fdb_key_t = ptr::null_mut();
    assert_eq!(unsafe { fdb_new_key(&mut key) }, FDB_SUCCESS);
    for (k, v) in FIELD {
        let (k, v) = (c(k), c(v));
        assert_eq!(
            unsafe { fdb_key_add(key, k.as_ptr(), v.as_ptr()) },
            FDB_SUCCESS
        );
    }
    let data = b"GRIB missing 7777";
    assert_eq!(
        unsafe { fdb_archive(fdb, key, data.as_ptr().cast(), data.len()) },
        FDB_SUCCESS
    );
    assert_eq!(unsafe { fdb_flush(fdb) }, FDB_SUCCESS);
    assert_eq!(unsafe { fdb_delete_key(key) }, FDB_SUCCESS);

    // FDB5's semantics: what is there, and success.
    assert_eq!(retrieve(fdb, "0/6"), (FDB_SUCCESS, data.len() as c_long));
    assert_eq!(retrieve(fdb, "6"), (FDB_SUCCESS, 0));
    assert_eq!(unsafe { fdb_delete_handle(fdb) }, FDB_SUCCESS);

    // The opt-in strict mode: a failure naming the absent key, also when others are there.
    let (rc, strict) = open(&format!("{base}fdb5_missing: error\n"));
    assert_eq!(rc, FDB_SUCCESS, "{}", message());
    assert_eq!(retrieve(strict, "0").0, FDB_SUCCESS);
    for steps in ["0/6", "6"] {
        assert_eq!(retrieve(strict, steps).0, FDB_ERROR_GENERAL_EXCEPTION);
        let m = message();
        assert!(m.contains("step=6") && m.contains("fdb5_missing"), "{m}");
    }
    assert_eq!(unsafe { fdb_delete_handle(strict) }, FDB_SUCCESS);

    // Explicit `skip` is the default; anything else is refused at open.
    let (rc, skip) = open(&format!("{base}fdb5_missing: skip\n"));
    assert_eq!(rc, FDB_SUCCESS, "{}", message());
    assert_eq!(retrieve(skip, "6"), (FDB_SUCCESS, 0));
    assert_eq!(unsafe { fdb_delete_handle(skip) }, FDB_SUCCESS);
    let (rc, none) = open(&format!("{base}fdb5_missing: maybe\n"));
    assert_eq!(rc, FDB_ERROR_GENERAL_EXCEPTION);
    assert!(none.is_null());
    assert!(message().contains("fdb5_missing"), "{}", message());
}
