//! FDB5's C API as haar loads it at run time (`dlopen` of `libfdb5.so`, or the library
//! [`LIB_ENV`] names): the table of the functions haar calls, the two `fdb_list` signatures
//! (5.10 and 5.11+), and why loading fails where it does. No call into FDB5 is made here but
//! its initialisation; [`super::Fdb5Store`] makes them.

use std::ffi::{CStr, CString, c_char, c_int, c_long, c_void};

pub(super) type H = *mut c_void;

pub(super) struct Api {
    pub(super) initialise: unsafe extern "C" fn() -> c_int,
    pub(super) version: unsafe extern "C" fn(*mut *const c_char) -> c_int,
    pub(super) error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    pub(super) new_handle: unsafe extern "C" fn(*mut H) -> c_int,
    pub(super) delete_handle: unsafe extern "C" fn(H) -> c_int,
    pub(super) archive: unsafe extern "C" fn(H, H, *const c_char, usize) -> c_int,
    pub(super) flush: unsafe extern "C" fn(H) -> c_int,
    pub(super) new_key: unsafe extern "C" fn(*mut H) -> c_int,
    pub(super) key_add: unsafe extern "C" fn(H, *const c_char, *const c_char) -> c_int,
    pub(super) delete_key: unsafe extern "C" fn(H) -> c_int,
    pub(super) new_request: unsafe extern "C" fn(*mut H) -> c_int,
    pub(super) request_add:
        unsafe extern "C" fn(H, *const c_char, *const *const c_char, c_int) -> c_int,
    pub(super) delete_request: unsafe extern "C" fn(H) -> c_int,
    pub(super) retrieve: unsafe extern "C" fn(H, H, H) -> c_int,
    pub(super) new_datareader: unsafe extern "C" fn(*mut H) -> c_int,
    pub(super) datareader_open: unsafe extern "C" fn(H, *mut c_long) -> c_int,
    pub(super) datareader_read: unsafe extern "C" fn(H, *mut c_void, c_long, *mut c_long) -> c_int,
    pub(super) datareader_close: unsafe extern "C" fn(H) -> c_int,
    pub(super) delete_datareader: unsafe extern "C" fn(H) -> c_int,
    /// `fdb_list` and its iterator as FDB5 5.11 and later declare them; `None` where the
    /// library lacks them.
    pub(super) list: Option<ListApi>,
    /// `fdb_list` and its iterator as FDB5 5.10 declares them; `None` on 5.11 and later.
    pub(super) list510: Option<List510Api>,
    /// Split keys (5.11+), to read a listed field's key level by level.
    pub(super) splitkey: Option<SplitKeyApi>,
}

/// FDB5 5.10's listing: `fdb_list(fdb, req, it)` into an iterator made by
/// `fdb_new_listiterator`, whose `next` yields each field as FDB5's key string
/// (`{class=..,..}{type=..,..}{step=..,..}`).
pub(super) struct List510Api {
    pub(super) list: unsafe extern "C" fn(H, H, H) -> c_int,
    pub(super) new_iterator: unsafe extern "C" fn(*mut H) -> c_int,
    pub(super) next: unsafe extern "C" fn(H, *mut bool, *mut *const c_char) -> c_int,
    pub(super) delete: unsafe extern "C" fn(H) -> c_int,
}

/// FDB5 5.11+'s split keys: `fdb_listiterator_splitkey` fills one, `next_metadata` walks its
/// keyword, value and level.
pub(super) struct SplitKeyApi {
    pub(super) new: unsafe extern "C" fn(*mut H) -> c_int,
    pub(super) fill: unsafe extern "C" fn(H, H) -> c_int,
    pub(super) next:
        unsafe extern "C" fn(H, *mut *const c_char, *mut *const c_char, *mut usize) -> c_int,
    pub(super) delete: unsafe extern "C" fn(H) -> c_int,
}

/// FDB5's listing (5.11+: `fdb_list(fdb, req, &it, duplicates, depth)`). FDB5 5.10 declares
/// `fdb_list` with other arguments under the same name, so
/// [`Fdb5Store::open`](super::Fdb5Store::open) drops this where the library reports a version
/// before 5.11.
pub(super) struct ListApi {
    pub(super) list: unsafe extern "C" fn(H, H, *mut H, bool, c_int) -> c_int,
    pub(super) next: unsafe extern "C" fn(H) -> c_int,
    pub(super) attrs: unsafe extern "C" fn(H, *mut *const c_char, *mut usize, *mut usize) -> c_int,
    pub(super) delete: unsafe extern "C" fn(H) -> c_int,
}

/// `fdb_listiterator_next`'s return at the end of a listing (`FDB_ITERATION_COMPLETE`).
pub(super) const ITERATION_COMPLETE: c_int = 3;

const LIBS: [&str; 2] = ["libfdb5.so.0d", "libfdb5.so"];

/// Names the FDB5 library to load instead of the system's (a path, e.g. the `fdb5lib`
/// wheel's `lib64/libfdb5.so`; its companions must be on `LD_LIBRARY_PATH`).
pub const LIB_ENV: &str = "HAAR_FDB5_LIB";

/// Why the FDB5 library cannot be loaded here (not installed, or too old), or `None` if it can.
pub fn load_error() -> Option<String> {
    load().err()
}

// Each transmute's target type is the `Api` field it initialises, spelled out there.
#[allow(clippy::missing_transmute_annotations)]
pub(super) fn load() -> Result<Api, String> {
    let open = |name: &str| {
        let c = CString::new(name).expect("no NUL");
        // SAFETY: dlopen with a valid C string; the library stays loaded for the process.
        unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) }
    };
    let lib = match std::env::var(LIB_ENV).ok().filter(|v| !v.is_empty()) {
        Some(path) => {
            let lib = open(&path);
            if lib.is_null() {
                // SAFETY: dlerror returns a thread-local C string or NULL.
                let why = unsafe {
                    let e = libc::dlerror();
                    if e.is_null() {
                        String::new()
                    } else {
                        CStr::from_ptr(e).to_string_lossy().into_owned()
                    }
                };
                return Err(format!("cannot load {path} (${LIB_ENV}): {why}"));
            }
            lib
        }
        None => LIBS
            .iter()
            .map(|name| open(name))
            .find(|l| !l.is_null())
            .unwrap_or(std::ptr::null_mut()),
    };
    if lib.is_null() {
        return Err(
            "the FDB5 library (libfdb5.so) is not installed: apt-get install fdb5 libfdb5-dev"
                .into(),
        );
    }
    let optional = |name: &str| {
        let c = CString::new(name).expect("no NUL");
        // SAFETY: dlsym on a handle from dlopen.
        unsafe { libc::dlsym(lib, c.as_ptr()) }
    };
    // Four symbols of one signature family, or `None` if the library lacks any of them.
    let family = |names: [&str; 4]| {
        let p = names.map(optional);
        (!p.iter().any(|s| s.is_null())).then_some(p)
    };
    // SAFETY (all three): the symbols' C signatures are the fields' types (5.11+'s
    // fdb5/api/fdb_c.h for `ListApi` and `SplitKeyApi`, 5.10's for `List510Api`); `open` keeps
    // only the list family the library's version declares.
    let list = family([
        "fdb_list",
        "fdb_listiterator_next",
        "fdb_listiterator_attrs",
        "fdb_delete_listiterator",
    ])
    .map(|p| unsafe {
        ListApi {
            list: std::mem::transmute::<*mut c_void, _>(p[0]),
            next: std::mem::transmute::<*mut c_void, _>(p[1]),
            attrs: std::mem::transmute::<*mut c_void, _>(p[2]),
            delete: std::mem::transmute::<*mut c_void, _>(p[3]),
        }
    });
    let list510 = family([
        "fdb_list",
        "fdb_new_listiterator",
        "fdb_listiterator_next",
        "fdb_delete_listiterator",
    ])
    .map(|p| unsafe {
        List510Api {
            list: std::mem::transmute::<*mut c_void, _>(p[0]),
            new_iterator: std::mem::transmute::<*mut c_void, _>(p[1]),
            next: std::mem::transmute::<*mut c_void, _>(p[2]),
            delete: std::mem::transmute::<*mut c_void, _>(p[3]),
        }
    });
    let splitkey = family([
        "fdb_new_splitkey",
        "fdb_listiterator_splitkey",
        "fdb_splitkey_next_metadata",
        "fdb_delete_splitkey",
    ])
    .map(|p| unsafe {
        SplitKeyApi {
            new: std::mem::transmute::<*mut c_void, _>(p[0]),
            fill: std::mem::transmute::<*mut c_void, _>(p[1]),
            next: std::mem::transmute::<*mut c_void, _>(p[2]),
            delete: std::mem::transmute::<*mut c_void, _>(p[3]),
        }
    });
    macro_rules! sym {
        ($name:literal) => {{
            let c = CString::new($name).expect("no NUL");
            // SAFETY: dlsym on a handle from dlopen; the symbol's C signature is the field's
            // type, as declared in fdb5/api/fdb_c.h (5.10).
            let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
            if p.is_null() {
                return Err(format!("libfdb5 lacks {} (FDB5 too old?)", $name));
            }
            // SAFETY: see above.
            unsafe { std::mem::transmute::<*mut c_void, _>(p) }
        }};
    }
    Ok(Api {
        initialise: sym!("fdb_initialise"),
        version: sym!("fdb_version"),
        error_string: sym!("fdb_error_string"),
        new_handle: sym!("fdb_new_handle"),
        delete_handle: sym!("fdb_delete_handle"),
        archive: sym!("fdb_archive"),
        flush: sym!("fdb_flush"),
        new_key: sym!("fdb_new_key"),
        key_add: sym!("fdb_key_add"),
        delete_key: sym!("fdb_delete_key"),
        new_request: sym!("fdb_new_request"),
        request_add: sym!("fdb_request_add"),
        delete_request: sym!("fdb_delete_request"),
        retrieve: sym!("fdb_retrieve"),
        new_datareader: sym!("fdb_new_datareader"),
        datareader_open: sym!("fdb_datareader_open"),
        datareader_read: sym!("fdb_datareader_read"),
        datareader_close: sym!("fdb_datareader_close"),
        delete_datareader: sym!("fdb_delete_datareader"),
        list,
        list510,
        splitkey,
    })
}
