//! The opaque objects of the C API (`fdb_handle_t`, `fdb_key_t`, …): each is a Rust value
//! behind a magic number, so that a NULL pointer, a pointer to another kind of object, and a
//! freed one are refused with a message instead of a crash.
//!
//! Owns allocation, checking and freeing of those objects; not what they do.
//!
//! An object's block is never returned to the allocator: freeing drops the value, marks the
//! block dead and keeps it on its kind's free list, from which the next object of that kind is
//! made (as `haar_api::handles` does for haar's own handles). So checking a stale pointer reads
//! memory that is still this library's, and a freed object is always refused. The limit: once
//! a freed block is reused by a new object of the same kind, the stale pointer reaches that
//! new object. Blocks cost a few dozen bytes each; their number is the peak of live objects of
//! each kind.

use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ffi::{Failure, FfiResult};

/// A kind of object handed to C: its magic number and its C name.
pub trait Kind: Sized + 'static {
    /// Marks a live object of this kind (distinct per kind).
    const MAGIC: u64;
    /// The C type name, for messages (`fdb_handle_t`).
    const NAME: &'static str;
    /// The function that makes one, for messages (`fdb_new_handle`).
    const MADE_BY: &'static str;
    /// The freed blocks of this kind (addresses), reused by [`new`].
    fn pool() -> &'static Mutex<Vec<usize>>;
}

/// Written over the magic number as an object is freed.
const DEAD: u64 = 0xdead_dead_dead_dead;

/// An object handed to C: the magic number first (the same offset for every kind, so a pointer
/// to another kind is told by it), then the value (`None` once freed).
#[repr(C)]
pub struct Obj<T: Kind> {
    magic: AtomicU64,
    inner: Option<T>,
}

/// Moves `value` into a block (a freed one of its kind, else a new one) and hands out its
/// pointer (freed by [`free`]).
pub fn new<T: Kind>(value: T) -> *mut Obj<T> {
    let reused = T::pool().lock().unwrap_or_else(|p| p.into_inner()).pop();
    match reused {
        Some(addr) => {
            let p = addr as *mut Obj<T>;
            // SAFETY: blocks on the free list are never deallocated and are dead: nobody holds
            // a reference into them.
            unsafe { (*p).inner = Some(value) };
            // SAFETY: as above.
            unsafe { &(*p).magic }.store(T::MAGIC, Ordering::Release);
            p
        }
        None => Box::into_raw(Box::new(Obj {
            magic: AtomicU64::new(T::MAGIC),
            inner: Some(value),
        })),
    }
}

/// The live object behind `p`, or a failure naming its kind and what went wrong.
///
/// # Safety
/// `p` is null, or points to an object this library handed out (live or freed: blocks are
/// never deallocated); no other thread uses the object now.
pub unsafe fn live<'a, T: Kind>(p: *mut Obj<T>) -> FfiResult<&'a mut T> {
    if p.is_null() {
        return Err(Failure::input(format!(
            "{} is NULL: pass one made by {}",
            T::NAME,
            T::MADE_BY
        )));
    }
    if !(p as usize).is_multiple_of(align_of::<Obj<T>>()) {
        return Err(not_live::<T>(p));
    }
    // SAFETY: aligned and, per the caller's contract, a block of this library's, never freed;
    // every kind's block starts with its magic.
    let magic = unsafe { &*ptr::addr_of!((*p).magic) }.load(Ordering::Acquire);
    if magic != T::MAGIC {
        return Err(not_live::<T>(p));
    }
    // SAFETY: a live object of this kind (it holds its value), used by this thread only.
    match unsafe { (*p).inner.as_mut() } {
        Some(v) => Ok(v),
        None => Err(not_live::<T>(p)),
    }
}

/// As [`live`] for an optional argument: NULL is `None`.
///
/// # Safety
/// As [`live`].
pub unsafe fn optional<'a, T: Kind>(p: *mut Obj<T>) -> FfiResult<Option<&'a mut T>> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: per the caller's contract.
        unsafe { live(p) }.map(Some)
    }
}

/// Frees the object behind `p` after checking it is live: drops its value and puts its block
/// on its kind's free list.
///
/// # Safety
/// As [`live`]; `p` is not used again.
pub unsafe fn free<T: Kind>(p: *mut Obj<T>) -> FfiResult<()> {
    // SAFETY: per the caller's contract.
    unsafe { live(p) }?;
    // SAFETY: live, so a block of this kind; the magic is overwritten first so that a second
    // free is refused.
    let won = unsafe { &(*p).magic }
        .compare_exchange(T::MAGIC, DEAD, Ordering::AcqRel, Ordering::Acquire)
        .is_ok();
    if !won {
        return Err(not_live::<T>(p));
    }
    // SAFETY: this thread marked it dead: nobody else frees or uses it.
    drop(unsafe { (*p).inner.take() });
    T::pool()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(p as usize);
    Ok(())
}

fn not_live<T: Kind>(p: *mut Obj<T>) -> Failure {
    Failure::input(format!(
        "{p:p} is not a live {}: it was freed already, or was not made by {}",
        T::NAME,
        T::MADE_BY
    ))
}

/// Declares an object kind: `kind!(Type, 0xMAGIC, "fdb_x_t", "fdb_new_x")`.
macro_rules! kind {
    ($t:ty, $magic:expr, $name:expr, $made_by:expr) => {
        impl $crate::fdb_api::object::Kind for $t {
            const MAGIC: u64 = $magic;
            const NAME: &'static str = $name;
            const MADE_BY: &'static str = $made_by;
            fn pool() -> &'static std::sync::Mutex<Vec<usize>> {
                static POOL: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
                &POOL
            }
        }
    };
}
pub(crate) use kind;

#[cfg(test)]
mod tests {
    use super::*;

    struct A(u32);
    kind!(A, 0xa, "a_t", "new_a");
    struct B(u32);
    kind!(B, 0xb, "b_t", "new_b");

    #[test]
    fn null_foreign_and_freed_objects_are_refused_by_name() {
        let null = unsafe { live::<A>(ptr::null_mut()) }.err().unwrap();
        assert!(
            null.message.contains("a_t is NULL: pass one made by new_a"),
            "{}",
            null.message
        );

        let b = new(B(7));
        let foreign = unsafe { live::<A>(b.cast()) }.err().unwrap();
        assert!(
            foreign.message.contains("is not a live a_t"),
            "{}",
            foreign.message
        );
        assert_eq!(unsafe { live(b) }.unwrap().0, 7);

        let a = new(A(1));
        unsafe { live(a) }.unwrap().0 = 2;
        assert_eq!(unsafe { live(a) }.unwrap().0, 2);
        unsafe { free(a) }.unwrap();
        // The block is kept and marked dead: the second free and any use are refused.
        let again = unsafe { free(a) }.err().unwrap();
        assert!(again.message.contains("freed already"), "{}", again.message);
        assert!(unsafe { live(a) }.is_err());
        // The next object of that kind reuses the block (the documented limit).
        let a2 = new(A(3));
        assert_eq!(a2, a);
        assert_eq!(unsafe { live(a2) }.unwrap().0, 3);
        unsafe { free(a2) }.unwrap();
        unsafe { free(b) }.unwrap();
    }
}
