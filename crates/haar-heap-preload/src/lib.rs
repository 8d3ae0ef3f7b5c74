//! `libhaar_heap_preload.so`: preloaded by `haar run --heap`, it serves every `malloc` of an
//! unmodified program from a file mapped from a (DAX) directory, with mimalloc managing the
//! mapping as its only arena (docs/design.md §14 is the contract this file implements).
//!
//! Owns: the exported C allocation functions, the pool's mapping, the bootstrap buffer that
//! serves allocations made while the pool is being set up, and the fork handlers. Must not
//! allocate through Rust's allocator on any path (that allocator is `malloc`, i.e. this
//! library), and must not panic: no indexing, no `unwrap`; a panic would abort anyway, since
//! Rust aborts instead of unwinding out of an `extern "C"` function.
//!
//! Without `HAAR_HEAP_FILE` in the environment every call goes to the next allocator (the C
//! library's), so the library is inert when preloaded by anything else.

#![allow(clippy::missing_safety_doc)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod boot;
mod next;
mod pool;
mod say;

use std::ffi::c_void;
use std::ptr;

use libmimalloc_sys as mi;

use pool::{Mode, mode};

/// Largest alignment mimalloc's arenas serve by themselves (its 64 KiB slice); larger ones go
/// through [`pool::big_aligned`].
pub(crate) const ARENA_ALIGN: usize = 64 << 10;

fn set_errno(e: i32) {
    // SAFETY: errno is thread-local; the pointer is valid for this thread.
    unsafe { *libc::__errno_location() = e };
}

/// Allocation in the pool, reporting a full pool once and setting `ENOMEM`.
fn pool_result(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        pool::report_full(size);
        set_errno(libc::ENOMEM);
    }
    p
}

/// Allocates `size` bytes: from the pool, from the next allocator when no pool is configured,
/// or from the bootstrap buffer while the pool is being set up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    match mode() {
        Mode::Pool => pool_result(unsafe { mi::mi_malloc(size) }, size),
        Mode::Pass => unsafe { next::malloc(size) },
        Mode::Boot => boot::alloc(size, 16),
    }
}

/// Frees a block from any source: the pool (mimalloc), the bootstrap buffer (nothing to do),
/// or another allocator (handed to the next `free`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if p.is_null() || boot::owns(p) {
        return;
    }
    if pool::owns(p) {
        let raw = pool::big_aligned_release(p);
        unsafe { mi::mi_free(raw) };
    } else {
        unsafe { next::free(p) };
    }
}

/// Allocates `n * size` zeroed bytes; `ENOMEM` and NULL when the product overflows.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    match mode() {
        Mode::Pool => pool_result(unsafe { mi::mi_calloc(n, size) }, total),
        Mode::Pass => unsafe { next::calloc(n, size) },
        // The bootstrap buffer is static memory never handed out twice: already zero.
        Mode::Boot => boot::alloc(total, 16),
    }
}

/// Usable size of a block from any source (0 for NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        0
    } else if let Some(n) = boot::size_of(p) {
        n
    } else if pool::owns(p) {
        match pool::big_aligned_usable(p) {
            Some(n) => n,
            None => unsafe { mi::mi_usable_size(p) },
        }
    } else {
        unsafe { next::usable_size(p) }
    }
}

/// Resizes a block; a block not from the pool (bootstrap buffer, another allocator) moves
/// into the pool. `realloc(p, 0)` frees `p` and returns NULL, as the C library does.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return unsafe { malloc(size) };
    }
    if size == 0 {
        unsafe { free(p) };
        return ptr::null_mut();
    }
    if pool::owns(p) && pool::big_aligned_usable(p).is_none() {
        return pool_result(unsafe { mi::mi_realloc(p, size) }, size);
    }
    if !boot::owns(p) && !pool::owns(p) && mode() == Mode::Pass {
        return unsafe { next::realloc(p, size) };
    }
    // Move: the old block's size is what its owner reports.
    let old = unsafe { malloc_usable_size(p) };
    let q = unsafe { malloc(size) };
    if !q.is_null() {
        unsafe { ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), old.min(size)) };
        unsafe { free(p) };
    }
    q
}

/// `realloc(p, n * size)`, refusing an overflowing product with `ENOMEM`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        Some(total) => unsafe { realloc(p, total) },
        None => {
            set_errno(libc::ENOMEM);
            ptr::null_mut()
        }
    }
}

/// `size` bytes aligned to `align` (a power of two), or NULL with errno set.
fn aligned(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    match mode() {
        Mode::Pool if align <= ARENA_ALIGN => {
            pool_result(unsafe { mi::mi_malloc_aligned(size, align) }, size)
        }
        Mode::Pool => pool_result(pool::big_aligned(align, size), size),
        Mode::Pass => unsafe { next::memalign(align, size) },
        Mode::Boot => boot::alloc(size, align),
    }
}

/// POSIX aligned allocation: `EINVAL` unless `align` is a power of two multiple of
/// `sizeof(void*)`, `ENOMEM` when the pool is full; `*out` is set only on success.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let saved = unsafe { *libc::__errno_location() };
    let p = aligned(align, size);
    if p.is_null() {
        let e = unsafe { *libc::__errno_location() };
        set_errno(saved);
        return e;
    }
    unsafe { *out = p };
    0
}

/// C11 `aligned_alloc` (any power-of-two alignment, as the C library accepts).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    aligned(align, size)
}

/// Obsolete `memalign`, still used (e.g. by ld.so's TLS blocks and old Fortran runtimes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    aligned(align, size)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// Page-aligned allocation.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(page_size(), size)
}

/// Page-aligned allocation of whole pages.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let page = page_size();
    match size.checked_add(page - 1) {
        Some(s) => aligned(page, s & !(page - 1)),
        None => {
            set_errno(libc::ENOMEM);
            ptr::null_mut()
        }
    }
}
