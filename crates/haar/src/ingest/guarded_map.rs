//! Input files mapped so that a truncation while they are read cannot kill the process.
//!
//! Reading a mapped page past the end of its file raises SIGBUS. One process-wide handler
//! looks the faulting address up among the mappings registered here: if it lies in one, the
//! handler maps zero pages over the rest of that mapping (anonymous, read-only, `MAP_FIXED`),
//! marks the mapping faulted and returns, so the access reads zeros and the program runs on.
//! Whoever uses a mapping's bytes must ask [`GuardedMap::changed`] afterwards and throw away
//! everything derived from them if it says so (it also notices in-place rewrites and
//! truncations that did not fault, by the file's length and modification time). A fault
//! anywhere else goes to the handler that was there before (Rust's stack-overflow handler) or
//! to the default action, as if this module did not exist.
//!
//! This module owns only the mapping, the table and the handler; it does not know GRIB.

use std::ffi::c_void;
use std::fs::File;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::SystemTime;

/// Mappings guarded at once; more are refused (the caller reads the file instead).
const SLOTS: usize = 64;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
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
            // SAFETY: replaces pages of a registered mapping, which stays reserved for this
            // range until it is unregistered and unmapped; mmap is a plain system call.
            let r = unsafe {
                libc::mmap(
                    from as *mut c_void,
                    end - from,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
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

fn install() {
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
}

/// A read-only mapping of a whole file, registered with the SIGBUS handler.
pub struct GuardedMap {
    // Declared before `map`: unregistered (in `drop`) before it is unmapped.
    slot: usize,
    map: memmap2::Mmap,
    file: File,
    len: u64,
    modified: Option<SystemTime>,
}

impl GuardedMap {
    /// Maps `file` (a regular, non-empty file whose metadata is `meta`); `None` when it cannot
    /// be mapped or every slot is taken (read the file instead).
    pub fn new(file: File, meta: &std::fs::Metadata) -> Option<GuardedMap> {
        install();
        PREVIOUS.get()?;
        // SAFETY: read-only and private; a truncation while mapped is what this module
        // handles, and rewrites are noticed by `changed` (length, modification time).
        let map = unsafe { memmap2::MmapOptions::new().map(&file) }.ok()?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        let page = PAGE.load(Ordering::Relaxed);
        let start = map.as_ptr() as usize;
        let end = start + map.len().div_ceil(page) * page;
        let _guard = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
        let slot = TABLE
            .iter()
            .position(|s| s.start.load(Ordering::Acquire) == 0)?;
        let s = &TABLE[slot];
        s.faulted.store(false, Ordering::Release);
        s.end.store(end, Ordering::Release);
        s.start.store(start, Ordering::Release);
        Some(GuardedMap {
            slot,
            map,
            file,
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }

    /// True if the file was truncated, extended or rewritten since it was mapped (so the
    /// bytes read may be zeros or mix two versions), as far as can be told now.
    pub fn changed(&self) -> bool {
        TABLE[self.slot].faulted.load(Ordering::Acquire)
            || self.file.metadata().map_or(true, |m| {
                m.len() != self.len || m.modified().ok() != self.modified
            })
    }
}

impl Deref for GuardedMap {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for GuardedMap {
    fn drop(&mut self) {
        let _guard = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
        let s = &TABLE[self.slot];
        s.start.store(0, Ordering::Release);
        s.end.store(0, Ordering::Release);
    }
}
