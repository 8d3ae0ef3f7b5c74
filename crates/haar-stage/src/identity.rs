//! Whose rights a file-system operation runs with: the file-system identity a root service
//! takes to act for a user (per thread), and the user's primary group.
//!
//! Owns only credentials; what is done under them is the caller's.

use crate::error::{Error, Result};

/// The effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Runs `f` in a thread whose file-system identity is `uid`/`gid` with no supplementary
/// groups (setfsuid, setfsgid and setgroups, which Linux keeps per thread; the fs-related
/// capabilities go with a non-zero fsuid): whatever it opens, creates or removes in a user's
/// journal or data, the kernel checks as that user, and a symbolic link the user planted leads
/// nowhere the user could not go. Files it creates are the user's. A process not running as
/// root runs `f` as it is.
pub fn as_user<T: Send>(uid: u32, gid: u32, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    if euid() != 0 {
        return f();
    }
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                // SAFETY: raw system calls that change this thread's credentials only (glibc's
                // setgroups wrapper would change every thread's); -1 reads the fsuid back.
                let now = unsafe {
                    libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>());
                    libc::syscall(libc::SYS_setfsgid, gid);
                    libc::syscall(libc::SYS_setfsuid, uid);
                    libc::syscall(libc::SYS_setfsuid, u32::MAX)
                };
                if now != i64::from(uid) {
                    return Err(Error::Service(format!(
                        "cannot take uid {uid}'s file-system identity (fsuid is {now})"
                    )));
                }
                f()
            })
            .join()
            .unwrap_or_else(|_| Err(Error::Service("a stage service worker panicked".into())))
    })
}

/// The primary gid of `uid` (its own uid as gid if it has no passwd entry).
pub fn primary_gid(uid: u32) -> u32 {
    // SAFETY: getpwuid's result is read at once.
    let pw = unsafe { libc::getpwuid(uid) };
    if pw.is_null() {
        uid
    } else {
        // SAFETY: non-null pointer from getpwuid.
        unsafe { (*pw).pw_gid }
    }
}

/// The home directory and login name of `uid` from the passwd database, if it has an entry.
pub fn home_and_name(uid: u32) -> Option<(std::ffi::OsString, std::ffi::OsString)> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: getpwuid's result is read at once; its strings are NUL-terminated.
    unsafe {
        let pw = libc::getpwuid(uid);
        if pw.is_null() {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr((*pw).pw_dir);
        let name = std::ffi::CStr::from_ptr((*pw).pw_name);
        Some((
            std::ffi::OsStr::from_bytes(dir.to_bytes()).to_os_string(),
            std::ffi::OsStr::from_bytes(name.to_bytes()).to_os_string(),
        ))
    }
}
