//! Operating-system helpers shared by the backends, the catalogue and the store: random ids,
//! `flock(2)`, and the OS error number behind an I/O error however it was annotated.
//!
//! A leaf: it imports nothing of this crate but [`crate::format`]'s hash, so any module may
//! use it without tying itself to a backend or to the store.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

use crate::format;

/// A random id (`getrandom(2)`) for writers, runs, temporaries and pools.
pub(crate) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most b.len() bytes into the buffer we own.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        // getrandom cannot fail for 8 bytes once the pool is initialised; fall back to a mix
        // of time, pid and an address rather than aborting.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        return format::fnv1a64(
            &[t.to_le_bytes(), (std::process::id() as u64).to_le_bytes()].concat(),
        ) ^ (&b as *const _ as u64);
    }
    u64::from_le_bytes(b).max(1)
}

/// `flock(2)` on a descriptor we own (`op` as given: add `LOCK_NB` to fail instead of wait).
pub(crate) fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How long a wipe or purge waits for a database's writers to let go before it reports the
/// database busy (design §4.6): a writer that is just finishing, or a descriptor of the lock
/// briefly inherited by a child process between its fork and exec, is not worth an error.
pub(crate) const EXCLUSIVE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// An exclusive `flock(2)` on `file`, retried for up to [`EXCLUSIVE_GRACE`].
pub(crate) fn flock_exclusive_patiently(file: &File) -> io::Result<()> {
    let until = std::time::Instant::now() + EXCLUSIVE_GRACE;
    loop {
        match flock(file, libc::LOCK_EX | libc::LOCK_NB) {
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock && std::time::Instant::now() < until =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => return r,
        }
    }
}

/// An OS error with a note; the original stays reachable (`io::Error::get_ref`), so callers
/// can still tell e.g. EFAULT from ENOSPC.
#[derive(Debug)]
pub(crate) struct Noted {
    pub(crate) source: io::Error,
    pub(crate) note: String,
}

impl std::fmt::Display for Noted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.source, self.note)
    }
}

impl std::error::Error for Noted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The OS error number behind `e`, looking through notes added on the way up.
pub fn os_error(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<Noted>())
            .and_then(|n| os_error(&n.source))
    })
}
