//! Mappings that survive their file being truncated: one process-wide SIGBUS handler.
//!
//! Touching a page of a `MAP_SHARED` file mapping past the end of the file raises SIGBUS, which
//! kills the process by default — a server because something outside haar truncated one pool
//! file, an ingest because an input file shrank while it was read. Ranges registered here are
//! handled instead: the handler maps anonymous zero pages over the rest of the range
//! (`MAP_FIXED`, readable, and writable if the range was), marks it faulted and returns, so the
//! access completes on zeros and the program runs on. The owner of a range asks
//! [`Guard::faulted`] and turns what it read or wrote there into an error (checksums of the
//! zeros fail anyway). A fault anywhere else goes to the handler that was installed before
//! (Rust's stack-overflow handler) or to the default action, as if this module did not exist.
//!
//! Used by [`crate::PoolMapping`] for pool files and by haar's GRIB ingestion for mapped input.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once, OnceLock};

/// Ranges guarded at once; [`guard`] refuses more.
const SLOTS: usize = 128;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    writable: AtomicBool,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    writable: AtomicBool::new(false),
    faulted: AtomicBool::new(false),
};

static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
/// Serialises registration (the handler only reads the table, with atomics).
static REGISTER: Mutex<()> = Mutex::new(());
static INSTALL: Once = Once::new();
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static PAGE: AtomicUsize = AtomicUsize::new(4096);

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for slot in &TABLE {
        let start = slot.start.load(Ordering::Acquire);
        let end = slot.end.load(Ordering::Acquire);
        if start != 0 && start <= addr && addr < end {
            let from = addr & !(page - 1);
            let prot = if slot.writable.load(Ordering::Acquire) {
                libc::PROT_READ | libc::PROT_WRITE
            } else {
                libc::PROT_READ
            };
            // SAFETY: replaces pages of a registered range, which its owner keeps reserved
            // until it is unregistered; mmap is async-signal-safe (a plain system call).
            let r = unsafe {
                libc::mmap(
                    from as *mut c_void,
                    end - from,
                    prot,
                    // NORESERVE: a pool's range is a reservation of many GiB, more than
                    // the kernel would commit for a private writable mapping.
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if r != libc::MAP_FAILED {
                slot.faulted.store(true, Ordering::Release);
                return;
            }
        }
    }
    // Not ours: what would have happened without this module.
    match PREVIOUS.get() {
        Some(prev) if prev.sa_sigaction > libc::SIG_IGN => {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: an SA_SIGINFO handler has this signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(prev.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: a plain handler has this signature.
                let f: extern "C" fn(libc::c_int) =
                    unsafe { std::mem::transmute(prev.sa_sigaction) };
                f(sig);
            }
        }
        // Default action: restore it; returning re-runs the access, which faults again.
        _ => unsafe {
            libc::signal(libc::SIGBUS, libc::SIG_DFL);
        },
    }
}

fn install() -> bool {
    INSTALL.call_once(|| {
        // SAFETY: sysconf and sigaction with valid, zero-initialised structures.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, Ordering::Relaxed);
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigbus as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &new, &mut old) == 0 {
                let _ = PREVIOUS.set(old);
            }
        }
    });
    PREVIOUS.get().is_some()
}

/// A registered range; unregistered when dropped.
#[derive(Debug)]
pub struct Guard {
    slot: usize,
}

/// Registers `start..start + len` (rounded up to whole pages) with the handler, installing it
/// on first use. `writable`: the zero pages that replace a truncated part may be written (a
/// read-write mapping), else they are read-only. `None` when the handler cannot be installed
/// or every slot is taken (the caller then works without the guard).
///
/// # Safety
/// The range must be a mapping the caller owns and keeps mapped (or reserved) until the
/// [`Guard`] is dropped: the handler may map over any part of it.
pub unsafe fn guard(start: *const u8, len: usize, writable: bool) -> Option<Guard> {
    if !install() {
        return None;
    }
    let page = PAGE.load(Ordering::Relaxed);
    let start = start as usize;
    let end = start + len.div_ceil(page) * page;
    let _lock = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
    let slot = TABLE
        .iter()
        .position(|s| s.start.load(Ordering::Acquire) == 0)?;
    let s = &TABLE[slot];
    s.faulted.store(false, Ordering::Release);
    s.writable.store(writable, Ordering::Release);
    s.end.store(end, Ordering::Release);
    s.start.store(start, Ordering::Release);
    Some(Guard { slot })
}

impl Guard {
    /// True once an access past the end of the file was caught in the range: from the
    /// faulting page on, the range holds zeros that are not the file's.
    pub fn faulted(&self) -> bool {
        TABLE[self.slot].faulted.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _lock = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
        let s = &TABLE[self.slot];
        s.start.store(0, Ordering::Release);
        s.end.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A read of a mapped page cut off by a truncation reads zeros and is reported, instead of
    /// killing the test process.
    #[test]
    fn a_truncated_mapping_reads_zeros_and_says_so() {
        let dir = std::env::temp_dir().join(format!("haar-sigbus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&vec![7u8; 4 * 4096]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of a file we own.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4 * 4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: our mapping, kept until after the guard is dropped.
        let g = unsafe { guard(p.cast(), 4 * 4096, true) }.expect("guard");
        file.set_len(4096).unwrap();
        // SAFETY: inside the mapping; the page past the file's end is what the guard handles.
        let (first, last) = unsafe {
            let b = p.cast::<u8>();
            std::ptr::write_volatile(b.add(3 * 4096), 9); // a write past the end, too
            (
                std::ptr::read_volatile(b),
                std::ptr::read_volatile(b.add(2 * 4096)),
            )
        };
        assert_eq!(first, 7, "bytes inside the file are the file's");
        assert_eq!(last, 0, "bytes past the end read as zeros");
        assert!(g.faulted());
        drop(g);
        // SAFETY: our mapping.
        unsafe { libc::munmap(p, 4 * 4096) };
        let _ = std::fs::remove_dir_all(&dir);
    }
}
