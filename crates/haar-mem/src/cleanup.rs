//! Temporary files that must disappear even when the user presses Ctrl-C.
//!
//! A [`TempFile`] registers its path in a fixed table that a SIGINT / SIGTERM / SIGHUP handler
//! walks, unlinking every registered path before the process exits with 128 + the signal. The
//! handler uses only `unlink` and `_exit`, both async-signal-safe. Registration happens before
//! the file is created and before any `fork`, so child processes inherit the table and clean
//! up the same way. Ordinary exits remove the file in [`Drop`].

use std::ffi::{CString, c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicPtr, Ordering};

const SLOTS: usize = 512;

static PATHS: [AtomicPtr<c_char>; SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];

extern "C" fn on_signal(sig: c_int) {
    for slot in &PATHS {
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: registered pointers are NUL-terminated strings that stay allocated until
            // unregistered (which swaps them out before freeing). unlink is async-signal-safe.
            unsafe { libc::unlink(p) };
        }
    }
    // SAFETY: _exit is async-signal-safe and ends the process without running destructors.
    unsafe { libc::_exit(128 + sig) };
}

/// Installs the SIGINT / SIGTERM / SIGHUP handler (once per process).
pub fn install_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: a zeroed sigaction with a valid handler and an empty mask is well formed;
            // the handler only calls async-signal-safe functions.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
}

/// A path removed when dropped or when the process is interrupted.
#[derive(Debug)]
pub struct TempFile {
    path: PathBuf,
    slot: Option<usize>,
}

impl TempFile {
    /// Registers `path` for removal. The file itself is created by the caller afterwards.
    pub fn register(path: PathBuf) -> TempFile {
        install_handlers();
        let slot = CString::new(path.as_os_str().as_bytes())
            .ok()
            .and_then(|c| {
                let raw = c.into_raw();
                for (i, s) in PATHS.iter().enumerate() {
                    if s.compare_exchange(
                        std::ptr::null_mut(),
                        raw,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
                    {
                        return Some(i);
                    }
                }
                // SAFETY: `raw` came from `into_raw` just above and was not stored.
                drop(unsafe { CString::from_raw(raw) });
                None
            });
        TempFile { path, slot }
    }

    /// The registered path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(i) = self.slot {
            let raw = PATHS[i].swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !raw.is_null() {
                // SAFETY: the pointer came from `CString::into_raw` in `register` and has just
                // been removed from the table, so the handler can no longer see it.
                drop(unsafe { CString::from_raw(raw) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_removes_the_file_and_frees_the_slot() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        let t = TempFile::register(p.clone());
        std::fs::write(&p, b"1").unwrap();
        assert!(PATHS.iter().any(|s| !s.load(Ordering::Acquire).is_null()));
        drop(t);
        assert!(!p.exists());
    }
}
