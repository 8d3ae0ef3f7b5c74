//! The bootstrap buffer: allocations made while the pool is being set up (by `dlsym`, or by
//! another thread meanwhile) come from this static buffer by bumping a pointer. Blocks carry
//! their size in a 16-byte header (for `realloc` and `malloc_usable_size`) and are never
//! reused: freeing one does nothing. Set-up allocates a few hundred bytes at most.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

const SIZE: usize = 1 << 20;
const HEADER: usize = 16;

#[repr(C, align(4096))]
struct Buffer(UnsafeCell<[u8; SIZE]>);

// SAFETY: disjoint ranges are handed out by an atomic bump; nothing else touches the bytes.
unsafe impl Sync for Buffer {}

static BUFFER: Buffer = Buffer(UnsafeCell::new([0; SIZE]));
static USED: AtomicUsize = AtomicUsize::new(0);

fn base() -> usize {
    BUFFER.0.get() as usize
}

/// Whether `p` points into the bootstrap buffer.
pub(crate) fn owns(p: *mut c_void) -> bool {
    let a = p as usize;
    a >= base() && a < base() + SIZE
}

/// The size a bootstrap block was allocated with, or `None` if `p` is not one.
pub(crate) fn size_of(p: *mut c_void) -> Option<usize> {
    if !owns(p) {
        return None;
    }
    // SAFETY: every block handed out has its header in the HEADER bytes before it.
    Some(unsafe { ptr::read((p as usize - HEADER) as *const usize) })
}

/// `size` bytes aligned to `align` (a power of two), or NULL with `ENOMEM` when the buffer
/// is exhausted.
pub(crate) fn alloc(size: usize, align: usize) -> *mut c_void {
    let align = align.max(HEADER);
    let mut used = USED.load(Ordering::Relaxed);
    loop {
        let start = (base() + used + HEADER + align - 1) & !(align - 1);
        let end = match start.checked_add(size) {
            Some(e) if e <= base() + SIZE => e,
            _ => {
                // SAFETY: errno is thread-local.
                unsafe { *libc::__errno_location() = libc::ENOMEM };
                return ptr::null_mut();
            }
        };
        match USED.compare_exchange_weak(used, end - base(), Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => {
                // SAFETY: [start - HEADER, end) is ours alone now.
                unsafe { ptr::write((start - HEADER) as *mut usize, size) };
                return start as *mut c_void;
            }
            Err(now) => used = now,
        }
    }
}
