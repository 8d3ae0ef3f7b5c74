//! What both C APIs share: the thread-local last error, panics caught at the boundary, and
//! C strings read with errors that name the argument. Owns no API of its own.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Why a call failed, in the classes both APIs report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A bad argument, key, request or configuration (null handles included).
    Input,
    /// The requested data is not there.
    Missing,
    /// Storage, a server or the network.
    Storage,
    /// A bug in haar caught at the boundary (a panic).
    Internal,
}

/// A failure on its way to the C caller.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Its class.
    pub kind: Kind,
    /// The message `haar_last_error()` / `fdb_error_string()` return.
    pub message: String,
}

impl Failure {
    /// A bad argument: `message` says which and what to pass.
    pub fn input(message: impl Into<String>) -> Failure {
        Failure {
            kind: Kind::Input,
            message: message.into(),
        }
    }

    /// Data that is not there.
    pub fn missing(message: impl Into<String>) -> Failure {
        Failure {
            kind: Kind::Missing,
            message: message.into(),
        }
    }

    /// The same failure with `prefix: ` before its message (what the caller was doing).
    pub fn with_prefix(mut self, prefix: &str) -> Failure {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
}

impl From<haar::Error> for Failure {
    fn from(e: haar::Error) -> Failure {
        let kind = match e.class() {
            haar::Class::Input => Kind::Input,
            haar::Class::Missing => Kind::Missing,
            _ => Kind::Storage,
        };
        Failure {
            kind,
            message: e.to_string(),
        }
    }
}

/// Result of the body of an exported function.
pub type FfiResult<T> = Result<T, Failure>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error (interior NULs replaced).
pub fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).expect("NULs replaced");
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// This thread's last error message; valid until this thread's next failing call.
pub fn last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// Runs the body of an exported function: a panic becomes [`Kind::Internal`] with its message,
/// and a failure's message becomes this thread's last error. Nothing unwinds into C.
pub fn guard<T>(body: impl FnOnce() -> FfiResult<T>) -> FfiResult<T> {
    let r = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Failure {
                kind: Kind::Internal,
                message: format!("internal error in haar (a bug: please report it): {what}"),
            })
        }
    };
    if let Err(f) = &r {
        set_last_error(&f.message);
    }
    r
}

/// A C string argument as UTF-8; the error names `what`.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that outlives `'a`.
pub unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> FfiResult<&'a str> {
    if p.is_null() {
        return Err(Failure::input(format!("{what} is NULL: pass a string")));
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Failure::input(format!("{what} is not UTF-8")))
}

/// A mutable reference to the object behind a handle; the error names `what`.
///
/// # Safety
/// `p` is null or a live pointer this library handed out, not used by another thread now.
pub unsafe fn handle<'a, T>(p: *mut T, what: &str) -> FfiResult<&'a mut T> {
    // SAFETY: per the caller's contract.
    unsafe { p.as_mut() }.ok_or_else(|| {
        Failure::input(format!(
            "{what} is NULL: pass a handle this library created"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_internal_failure_with_its_message() {
        let r: FfiResult<()> = guard(|| panic!("boom"));
        let f = r.unwrap_err();
        assert_eq!(f.kind, Kind::Internal);
        assert!(f.message.contains("boom"));
        let last = unsafe { CStr::from_ptr(last_error()) }.to_str().unwrap();
        assert!(last.contains("boom"), "{last}");
    }
}
