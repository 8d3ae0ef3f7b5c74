//! Handles that cannot alias (issue 27), through the exported C functions of both APIs:
//! a handle used after its close is refused with a message, even once a new handle took its
//! place, and never acts on that new handle; a close from one thread while another thread
//! archives or retrieves through the handle never crashes: each call of the other thread
//! either completes or is refused as closed.

use std::ffi::{CStr, CString, c_int, c_long};
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use haar_c::haar_api::list::{haar_list, haar_list_count, haar_list_free, haar_list_t};
use haar_c::haar_api::read::{haar_reader_free, haar_reader_size, haar_reader_t, haar_retrieve};
use haar_c::haar_api::store::{
    haar_archive_str, haar_close, haar_flush, haar_key_add, haar_key_free, haar_key_new,
    haar_key_t, haar_open_yaml, haar_t,
};
use haar_c::haar_api::{HAAR_ERR_INPUT, HAAR_OK, haar_last_error};

const FIELD: &str =
    "class=od,expver=0001,stream=oper,date=20261121,time=1200,domain=g,type=fc,levtype=sfc";

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn last_error() -> String {
    unsafe { CStr::from_ptr(haar_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn open(root: &Path) -> *mut haar_t {
    let yaml = c(&format!("backend: posix\nroots: [{}]\n", root.display()));
    let mut h = ptr::null_mut();
    assert_eq!(
        unsafe { haar_open_yaml(yaml.as_ptr(), &mut h) },
        HAAR_OK,
        "{}",
        last_error()
    );
    h
}

fn archive(h: *mut haar_t, step: usize) -> c_int {
    let key = c(&format!("{FIELD},step={step},param=167"));
    let data = format!("GRIB field {step} 7777");
    unsafe { haar_archive_str(h, key.as_ptr(), data.as_ptr().cast(), data.len()) }
}

fn count(h: *mut haar_t) -> usize {
    let mut it: *mut haar_list_t = ptr::null_mut();
    assert_eq!(unsafe { haar_list(h, ptr::null(), &mut it) }, HAAR_OK);
    let mut n = 0;
    assert_eq!(unsafe { haar_list_count(it, &mut n) }, HAAR_OK);
    assert_eq!(unsafe { haar_list_free(it) }, HAAR_OK);
    n
}

fn assert_closed(rc: c_int) {
    assert_eq!(rc, HAAR_ERR_INPUT);
    let m = last_error();
    assert!(m.contains("already freed"), "{m}");
}

#[test]
fn a_closed_haar_t_is_refused_and_never_reaches_the_handle_opened_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (first_root, second_root) = (dir.path().join("first"), dir.path().join("second"));
    let first = open(&first_root);
    assert_eq!(archive(first, 0), HAAR_OK);
    assert_eq!(unsafe { haar_flush(first) }, HAAR_OK);
    assert_eq!(unsafe { haar_close(first) }, HAAR_OK);

    // Several new handles, so that one of them takes the closed one's slot.
    let later: Vec<*mut haar_t> = (0..8).map(|_| open(&second_root)).collect();
    assert!(later.iter().all(|&h| h != first));
    assert_closed(archive(first, 6));
    assert_closed(unsafe { haar_flush(first) });
    let mut it: *mut haar_list_t = ptr::null_mut();
    assert_closed(unsafe { haar_list(first, ptr::null(), &mut it) });
    assert!(it.is_null());
    assert_closed(unsafe { haar_close(first) });
    // Nothing reached the second store; the first kept its field.
    for &h in &later {
        assert_eq!(count(h), 0);
        assert_eq!(unsafe { haar_close(h) }, HAAR_OK);
    }
    let again = open(&first_root);
    assert_eq!(count(again), 1);
    assert_eq!(unsafe { haar_close(again) }, HAAR_OK);
}

#[test]
fn a_freed_key_is_refused_and_never_reaches_the_key_made_after_it() {
    let mut old: *mut haar_key_t = ptr::null_mut();
    assert_eq!(unsafe { haar_key_new(&mut old) }, HAAR_OK);
    assert_eq!(unsafe { haar_key_free(old) }, HAAR_OK);
    let mut new: *mut haar_key_t = ptr::null_mut();
    assert_eq!(unsafe { haar_key_new(&mut new) }, HAAR_OK);
    let (k, v) = (c("param"), c("167"));
    assert_closed(unsafe { haar_key_add(old, k.as_ptr(), v.as_ptr()) });
    assert_eq!(
        unsafe { haar_key_add(new, k.as_ptr(), v.as_ptr()) },
        HAAR_OK
    );
    assert_closed(unsafe { haar_key_free(old) });
    assert_eq!(unsafe { haar_key_free(new) }, HAAR_OK);
}

/// A handle number that can cross threads (the C caller's pointer).
struct Sent<T>(*mut T);
impl<T> Clone for Sent<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Sent<T> {}
unsafe impl<T> Send for Sent<T> {}
unsafe impl<T> Sync for Sent<T> {}

#[test]
fn closing_a_haar_t_while_other_threads_archive_and_retrieve_through_it_never_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let refused = Arc::new(AtomicUsize::new(0));
    let completed = Arc::new(AtomicUsize::new(0));
    for round in 0..30 {
        let root = dir.path().join(format!("r{round}"));
        let h = Sent(open(&root));
        assert_eq!(archive(h.0, 0), HAAR_OK);
        assert_eq!(unsafe { haar_flush(h.0) }, HAAR_OK);
        let start = Arc::new(Barrier::new(3));
        let users: Vec<_> = (0..2)
            .map(|t| {
                let (start, refused, completed) =
                    (start.clone(), refused.clone(), completed.clone());
                std::thread::spawn(move || {
                    let h = h; // the whole `Sent`, not its pointer field
                    start.wait();
                    for i in 1..200 {
                        let rc = if t == 0 {
                            let rc = archive(h.0, i);
                            if rc == HAAR_OK {
                                unsafe { haar_flush(h.0) }
                            } else {
                                rc
                            }
                        } else {
                            let req = c(&format!("{FIELD},step=0,param=167"));
                            let mut r: *mut haar_reader_t = ptr::null_mut();
                            let rc = unsafe { haar_retrieve(h.0, req.as_ptr(), &mut r) };
                            if rc == HAAR_OK {
                                let mut size = 0u64;
                                assert_eq!(unsafe { haar_reader_size(r, &mut size) }, HAAR_OK);
                                assert_eq!(size, "GRIB field 0 7777".len() as u64);
                                assert_eq!(unsafe { haar_reader_free(r) }, HAAR_OK);
                            }
                            rc
                        };
                        if rc == HAAR_OK {
                            completed.fetch_add(1, Ordering::Relaxed);
                        } else {
                            assert_closed(rc);
                            refused.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(Duration::from_micros(200 * (round % 10)));
        assert_eq!(unsafe { haar_close(h.0) }, HAAR_OK);
        // A new handle may take the slot at once: the users must not reach it.
        let other_root = dir.path().join(format!("o{round}"));
        let other = open(&other_root);
        for u in users {
            u.join().expect("a user thread failed");
        }
        assert_eq!(count(other), 0, "a stale handle archived into the new one");
        assert_eq!(unsafe { haar_close(other) }, HAAR_OK);
    }
    let (refused, completed) = (
        refused.load(Ordering::Relaxed),
        completed.load(Ordering::Relaxed),
    );
    assert!(refused > 0, "no call was refused: the close never raced");
    assert!(completed > 0);
}

mod fdb {
    //! The same for FDB5's C API: `fdb_handle_t`, keys, requests and data readers.

    use super::*;
    use haar_c::fdb_api::handle::{
        fdb_archive, fdb_delete_handle, fdb_flush, fdb_handle_t, fdb_new_handle_from_yaml,
        fdb_retrieve,
    };
    use haar_c::fdb_api::keys::{
        fdb_delete_key, fdb_delete_request, fdb_key_add, fdb_key_t, fdb_new_key, fdb_new_request,
        fdb_request_add, fdb_request_t,
    };
    use haar_c::fdb_api::reader::{
        fdb_datareader_open, fdb_datareader_t, fdb_delete_datareader, fdb_new_datareader,
    };
    use haar_c::fdb_api::{FDB_ERROR_GENERAL_EXCEPTION, FDB_SUCCESS, fdb_error_string};
    use std::ffi::c_char;

    const KEY: [(&str, &str); 9] = [
        ("class", "od"),
        ("expver", "0001"),
        ("stream", "oper"),
        ("date", "20261121"),
        ("time", "1200"),
        ("domain", "g"),
        ("type", "fc"),
        ("levtype", "sfc"),
        ("param", "167"),
    ];

    fn message() -> String {
        unsafe { CStr::from_ptr(fdb_error_string(FDB_ERROR_GENERAL_EXCEPTION)) }
            .to_string_lossy()
            .into_owned()
    }

    fn open(root: &Path) -> *mut fdb_handle_t {
        let y = c(&format!("backend: posix\nroots: [{}]\n", root.display()));
        let mut fdb = ptr::null_mut();
        assert_eq!(
            unsafe { fdb_new_handle_from_yaml(&mut fdb, y.as_ptr(), ptr::null()) },
            FDB_SUCCESS,
            "{}",
            message()
        );
        fdb
    }

    fn key(step: usize) -> *mut fdb_key_t {
        let mut key = ptr::null_mut();
        assert_eq!(unsafe { fdb_new_key(&mut key) }, FDB_SUCCESS);
        let step = step.to_string();
        for (k, v) in KEY.iter().copied().chain([("step", step.as_str())]) {
            let (k, v) = (c(k), c(v));
            assert_eq!(
                unsafe { fdb_key_add(key, k.as_ptr(), v.as_ptr()) },
                FDB_SUCCESS
            );
        }
        key
    }

    fn archive(fdb: *mut fdb_handle_t, step: usize) -> c_int {
        let k = key(step);
        let data = format!("GRIB fdb {step} 7777");
        let rc = unsafe { fdb_archive(fdb, k, data.as_ptr().cast(), data.len()) };
        assert_eq!(unsafe { fdb_delete_key(k) }, FDB_SUCCESS);
        rc
    }

    fn request(step: usize) -> *mut fdb_request_t {
        let mut req = ptr::null_mut();
        assert_eq!(unsafe { fdb_new_request(&mut req) }, FDB_SUCCESS);
        let step = step.to_string();
        for (k, v) in KEY.iter().copied().chain([("step", step.as_str())]) {
            let (k, v) = (c(k), c(v));
            let values: [*const c_char; 1] = [v.as_ptr()];
            assert_eq!(
                unsafe { fdb_request_add(req, k.as_ptr(), values.as_ptr(), 1) },
                FDB_SUCCESS
            );
        }
        req
    }

    /// `fdb_retrieve`'s code and the size read (0 if it failed).
    fn retrieve(fdb: *mut fdb_handle_t, step: usize) -> (c_int, c_long) {
        let req = request(step);
        let mut dr: *mut fdb_datareader_t = ptr::null_mut();
        assert_eq!(unsafe { fdb_new_datareader(&mut dr) }, FDB_SUCCESS);
        let rc = unsafe { fdb_retrieve(fdb, req, dr) };
        let mut size: c_long = 0;
        if rc == FDB_SUCCESS {
            assert_eq!(unsafe { fdb_datareader_open(dr, &mut size) }, FDB_SUCCESS);
        }
        assert_eq!(unsafe { fdb_delete_datareader(dr) }, FDB_SUCCESS);
        assert_eq!(unsafe { fdb_delete_request(req) }, FDB_SUCCESS);
        (rc, size)
    }

    fn assert_gone(rc: c_int) {
        assert_eq!(rc, FDB_ERROR_GENERAL_EXCEPTION);
        let m = message();
        assert!(m.contains("is not a live") && m.contains("freed"), "{m}");
    }

    #[test]
    fn a_deleted_fdb_handle_or_reader_is_refused_and_never_reaches_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let first = open(&dir.path().join("first"));
        assert_eq!(archive(first, 0), FDB_SUCCESS);
        assert_eq!(unsafe { fdb_delete_handle(first) }, FDB_SUCCESS);
        let later: Vec<_> = (0..8).map(|_| open(&dir.path().join("second"))).collect();
        assert_gone(archive(first, 6));
        assert_gone(unsafe { fdb_flush(first) });
        assert_gone(unsafe { fdb_delete_handle(first) });
        for &h in &later {
            assert_eq!(retrieve(h, 6), (FDB_SUCCESS, 0), "{}", message());
            assert_eq!(unsafe { fdb_delete_handle(h) }, FDB_SUCCESS);
        }
        // The first handle's field was flushed when it was deleted.
        let again = open(&dir.path().join("first"));
        assert_eq!(retrieve(again, 0).1, "GRIB fdb 0 7777".len() as c_long);

        let mut old: *mut fdb_datareader_t = ptr::null_mut();
        assert_eq!(unsafe { fdb_new_datareader(&mut old) }, FDB_SUCCESS);
        assert_eq!(unsafe { fdb_delete_datareader(old) }, FDB_SUCCESS);
        let mut new: *mut fdb_datareader_t = ptr::null_mut();
        assert_eq!(unsafe { fdb_new_datareader(&mut new) }, FDB_SUCCESS);
        let req = request(0);
        assert_gone(unsafe { fdb_retrieve(again, req, old) });
        assert_eq!(unsafe { fdb_retrieve(again, req, new) }, FDB_SUCCESS);
        let mut size: c_long = 0;
        assert_gone(unsafe { fdb_datareader_open(old, &mut size) });
        assert_eq!(unsafe { fdb_datareader_open(new, &mut size) }, FDB_SUCCESS);
        assert_eq!(size, "GRIB fdb 0 7777".len() as c_long);
        assert_gone(unsafe { fdb_delete_datareader(old) });
        assert_eq!(unsafe { fdb_delete_datareader(new) }, FDB_SUCCESS);
        assert_eq!(unsafe { fdb_delete_request(req) }, FDB_SUCCESS);
        assert_eq!(unsafe { fdb_delete_handle(again) }, FDB_SUCCESS);
    }

    #[test]
    fn deleting_an_fdb_handle_while_another_thread_uses_it_never_crashes() {
        let dir = tempfile::tempdir().unwrap();
        let mut refused = 0;
        let mut busy_or_done = 0;
        for round in 0..30 {
            let h = Sent(open(&dir.path().join(format!("r{round}"))));
            assert_eq!(archive(h.0, 0), FDB_SUCCESS);
            assert_eq!(unsafe { fdb_flush(h.0) }, FDB_SUCCESS);
            let start = Arc::new(Barrier::new(2));
            let stop = Arc::new(AtomicBool::new(false));
            let user = {
                let (start, stop) = (start.clone(), stop.clone());
                std::thread::spawn(move || {
                    let h = h; // the whole `Sent`, not its pointer field
                    start.wait();
                    let mut done = 0;
                    for i in 1..400 {
                        let rc = if i % 2 == 0 {
                            archive(h.0, i)
                        } else {
                            retrieve(h.0, 0).0
                        };
                        if rc == FDB_SUCCESS {
                            done += 1;
                            continue;
                        }
                        // Refused: deleted, or (one thread at a time) in use by the deleting
                        // thread, which holds it for its last flush.
                        let m = message();
                        assert!(
                            m.contains("freed already") || m.contains("in use by another thread"),
                            "{m}"
                        );
                        if m.contains("freed already") {
                            return (done, true);
                        }
                        if stop.load(Ordering::Relaxed) {
                            return (done, false);
                        }
                    }
                    (done, false)
                })
            };
            start.wait();
            std::thread::sleep(Duration::from_micros(300 * (round % 10)));
            // One thread at a time: the delete may find the user inside a call (refused as
            // busy, FDB5's contract broken by the caller), then it is retried.
            loop {
                let rc = unsafe { fdb_delete_handle(h.0) };
                if rc == FDB_SUCCESS {
                    break;
                }
                let m = message();
                assert!(m.contains("in use by another thread"), "{m}");
            }
            stop.store(true, Ordering::Relaxed);
            let other = open(&dir.path().join(format!("o{round}")));
            let (done, was_refused) = user.join().expect("the user thread failed");
            refused += usize::from(was_refused);
            busy_or_done += done;
            // The user never reached the handle opened after the delete.
            assert_eq!(retrieve(other, 0), (FDB_SUCCESS, 0));
            assert_eq!(unsafe { fdb_delete_handle(other) }, FDB_SUCCESS);
        }
        assert!(refused > 0, "no call was refused: the delete never raced");
        assert!(busy_or_done > 0);
    }
}
