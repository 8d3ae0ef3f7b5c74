//! The space reserve (design §4.7): a file of [`RESERVE_BYTES`] beside a store's databases
//! (posix: in each root; pmem: beside the pool), taken by writers when there is room and given
//! back by a wipe or purge that finds the file system full, so that haar can always free what
//! it filled.
//!
//! Owns only the reserve file; must not touch a database's files or the pool.

use std::fs;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The reserve's file name in a root (a dot file: no backend takes it for a database).
pub const RESERVE_FILE: &str = ".haar-reserve";

/// The reserve's size: a tombstone segment or snapshot of some 20,000 fields, a new `toc`
/// page, or the 1 MiB step a nearly full pmem pool grows by (design §5.1), with room to spare.
pub const RESERVE_BYTES: u64 = 2 << 20;

/// Takes the reserve in `dir` if it is missing or short: best effort, one `stat(2)` when it
/// is there; nothing is left behind when the file system has no room for it.
pub(crate) fn keep(dir: &Path) {
    // At most every 100 ms per process: commits of a pmem pool take microseconds, and a
    // `stat(2)` each would show.
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::UNIX_EPOCH
        .elapsed()
        .map_or(0, |d| d.as_millis() as u64);
    let last = LAST.load(Ordering::Relaxed);
    if now < last + 100
        || LAST
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let path = dir.join(RESERVE_FILE);
    if fs::metadata(&path).is_ok_and(|m| m.len() >= RESERVE_BYTES) {
        return;
    }
    let made = crate::perm::create_options()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .and_then(|f| {
            // SAFETY: fallocate on a descriptor we own; allocates real blocks (tmpfs pages),
            // unlike a sparse `set_len`.
            let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, RESERVE_BYTES as i64) };
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    if made.is_err() {
        // No room (or no fallocate): a reserve that is not whole reserves nothing sure.
        let _ = fs::remove_file(&path);
    }
}

/// Gives the reserve in `dir` back to the file system; whether there was one.
pub(crate) fn release(dir: &Path) -> bool {
    fs::remove_file(dir.join(RESERVE_FILE)).is_ok()
}

/// Whether `e` says the storage is full: ENOSPC or EDQUOT anywhere in an I/O error, or a pmem
/// pool that cannot grow.
pub(crate) fn is_full(e: &crate::Error) -> bool {
    match e {
        crate::Error::PoolFull { .. } => true,
        crate::Error::Io { source, .. } => matches!(
            crate::sys::os_error(source),
            Some(libc::ENOSPC) | Some(libc::EDQUOT)
        ),
        _ => false,
    }
}
