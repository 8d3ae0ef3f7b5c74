//! The next allocator in the search order (the C library's), found with
//! `dlsym(RTLD_NEXT, …)` once, during set-up: it keeps the blocks it handed out before this
//! library took over, and serves everything when no pool is configured.

use std::ffi::{CStr, c_void};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

static MALLOC: AtomicUsize = AtomicUsize::new(0);
static FREE: AtomicUsize = AtomicUsize::new(0);
static CALLOC: AtomicUsize = AtomicUsize::new(0);
static REALLOC: AtomicUsize = AtomicUsize::new(0);
static MEMALIGN: AtomicUsize = AtomicUsize::new(0);
static USABLE: AtomicUsize = AtomicUsize::new(0);

fn lookup(slot: &AtomicUsize, name: &CStr) {
    // SAFETY: dlsym with a valid NUL-terminated name; a NULL result stays 0 ("absent").
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    slot.store(f as usize, Ordering::Release);
}

/// Resolves the next allocator's functions (may allocate: call only in the set-up state).
pub(crate) fn resolve() {
    lookup(&MALLOC, c"malloc");
    lookup(&FREE, c"free");
    lookup(&CALLOC, c"calloc");
    lookup(&REALLOC, c"realloc");
    lookup(&MEMALIGN, c"memalign");
    lookup(&USABLE, c"malloc_usable_size");
}

macro_rules! call {
    ($slot:expr, $ty:ty, $missing:expr, $($arg:expr),*) => {{
        let f = $slot.load(Ordering::Acquire);
        if f == 0 {
            $missing
        } else {
            // SAFETY: the slot holds the address of the C function of this signature.
            let f: $ty = unsafe { std::mem::transmute::<usize, $ty>(f) };
            unsafe { f($($arg),*) }
        }
    }};
}

/// The next `malloc`.
pub(crate) unsafe fn malloc(size: usize) -> *mut c_void {
    call!(
        MALLOC,
        unsafe extern "C" fn(usize) -> *mut c_void,
        ptr::null_mut(),
        size
    )
}

/// The next `free`; a block from an allocator that cannot be found is left alone.
pub(crate) unsafe fn free(p: *mut c_void) {
    call!(FREE, unsafe extern "C" fn(*mut c_void), (), p)
}

/// The next `calloc`.
pub(crate) unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    call!(
        CALLOC,
        unsafe extern "C" fn(usize, usize) -> *mut c_void,
        ptr::null_mut(),
        n,
        size
    )
}

/// The next `realloc`.
pub(crate) unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    call!(
        REALLOC,
        unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
        ptr::null_mut(),
        p,
        size
    )
}

/// The next `memalign`.
pub(crate) unsafe fn memalign(align: usize, size: usize) -> *mut c_void {
    call!(
        MEMALIGN,
        unsafe extern "C" fn(usize, usize) -> *mut c_void,
        ptr::null_mut(),
        align,
        size
    )
}

/// The next `malloc_usable_size` (0 when it cannot be found: a move then copies nothing).
pub(crate) unsafe fn usable_size(p: *mut c_void) -> usize {
    call!(USABLE, unsafe extern "C" fn(*mut c_void) -> usize, 0, p)
}
