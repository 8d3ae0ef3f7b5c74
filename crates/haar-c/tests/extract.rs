//! `haar_extract` through the C ABI (called from Rust): the values at ranges equal ecCodes'
//! (`grib_get_data`, printed exactly) for a real ERA5 field, on a posix and a pmem store;
//! errors name the field; results free cleanly.

use std::ffi::{CStr, CString, c_char};
use std::path::Path;
use std::process::Command;

use haar_c::haar_api::extract::{
    haar_extract, haar_extract_count, haar_extract_field, haar_extract_free, haar_extract_t,
};
use haar_c::haar_api::store::{haar_archive_str, haar_close, haar_flush, haar_open_yaml, haar_t};
use haar_c::haar_api::{HAAR_ERR_INPUT, HAAR_OK};

fn first_era5_message() -> Vec<u8> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python/tests/data/era5-levels-members.grib");
    let bytes = std::fs::read(file).unwrap();
    let len = u32::from_be_bytes([0, bytes[4], bytes[5], bytes[6]]) as usize;
    bytes[..len].to_vec()
}

fn eccodes_values(msg: &[u8], dir: &Path) -> Vec<f64> {
    let path = dir.join("one.grib");
    std::fs::write(&path, msg).unwrap();
    let out = Command::new("grib_get_data")
        .args(["-F", "%.17g"])
        .arg(&path)
        .output()
        .expect("grib_get_data (libeccodes-tools)");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect()
}

fn check(backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let msg = first_era5_message();
    let want = eccodes_values(&msg, dir.path());
    assert_eq!(want.len(), 7320);
    let yaml = CString::new(format!(
        "backend: {backend}\nroots: [{}]\n",
        dir.path().join("store").display()
    ))
    .unwrap();
    let key = CString::new(
        "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc,\
         step=0,param=167",
    )
    .unwrap();
    let mut h: *mut haar_t = std::ptr::null_mut();
    unsafe {
        assert_eq!(haar_open_yaml(yaml.as_ptr(), &mut h), HAAR_OK);
        assert_eq!(
            haar_archive_str(h, key.as_ptr(), msg.as_ptr().cast(), msg.len()),
            HAAR_OK
        );
        assert_eq!(haar_flush(h), HAAR_OK);
        let req = CString::new("param=167").unwrap();
        let ranges: [u64; 6] = [0, 4, 7000, 7320, 10, 10];
        let mut r: *mut haar_extract_t = std::ptr::null_mut();
        assert_eq!(
            haar_extract(h, req.as_ptr(), ranges.as_ptr(), 3, &mut r),
            HAAR_OK
        );
        let mut n = 0usize;
        assert_eq!(haar_extract_count(r, &mut n), HAAR_OK);
        assert_eq!(n, 1);
        let (mut k, mut v, mut nv, mut whole): (*const c_char, *const f64, usize, i32) =
            (std::ptr::null(), std::ptr::null(), 0, -1);
        assert_eq!(
            haar_extract_field(r, 0, &mut k, &mut v, &mut nv, &mut whole),
            HAAR_OK
        );
        let got = std::slice::from_raw_parts(v, nv);
        let mut expect = want[0..4].to_vec();
        expect.extend_from_slice(&want[7000..7320]);
        assert_eq!(got, &expect[..], "{backend}");
        assert_eq!(whole, 0, "simple packing is read by range");
        assert!(CStr::from_ptr(k).to_str().unwrap().contains("param=167"));
        assert_eq!(
            haar_extract_field(r, 1, &mut k, &mut v, &mut nv, std::ptr::null_mut()),
            HAAR_ERR_INPUT
        );
        assert_eq!(haar_extract_free(r), HAAR_OK);
        // A range beyond the field: an input error, no result.
        let bad: [u64; 2] = [0, 7321];
        let mut r2: *mut haar_extract_t = std::ptr::null_mut();
        assert_eq!(
            haar_extract(h, req.as_ptr(), bad.as_ptr(), 1, &mut r2),
            HAAR_ERR_INPUT
        );
        assert!(r2.is_null());
        assert_eq!(haar_close(h), HAAR_OK);
    }
}

#[test]
fn posix_extract_through_the_c_abi_matches_eccodes() {
    check("posix");
}

#[test]
fn pmem_extract_through_the_c_abi_matches_eccodes() {
    check("pmem");
}
