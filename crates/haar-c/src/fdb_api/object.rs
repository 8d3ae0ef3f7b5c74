//! The opaque objects of the C API (`fdb_handle_t`, `fdb_key_t`, …): each is a Rust value
//! behind a magic number, so that a NULL pointer, a pointer to another kind of object, and
//! (usually) a freed one are refused with a message instead of a crash.
//!
//! Owns allocation, checking and freeing of those objects; not what they do.
//!
//! The limit: a freed object is detected because freeing overwrites the magic number and the
//! allocator reuses the first bytes of a freed block for its own lists; once that memory is
//! handed out again to an object of the same kind, the stale pointer looks live. No C API can
//! do better without tracking every pointer it handed out.

use std::ptr;

use crate::ffi::{Failure, FfiResult};

/// A kind of object handed to C: its magic number and its C name.
pub trait Kind {
    /// Marks a live object of this kind (distinct per kind).
    const MAGIC: u64;
    /// The C type name, for messages (`fdb_handle_t`).
    const NAME: &'static str;
    /// The function that makes one, for messages (`fdb_new_handle`).
    const MADE_BY: &'static str;
}

/// Written over the magic number as an object is freed.
const DEAD: u64 = 0xdead_dead_dead_dead;

/// An object handed to C: the magic number first (so a freed block's allocator bookkeeping
/// overwrites it), then the value.
#[repr(C)]
pub struct Obj<T: Kind> {
    magic: u64,
    /// The value.
    pub inner: T,
}

/// Moves `value` to the heap and hands out its pointer (freed by [`free`]).
pub fn new<T: Kind>(value: T) -> *mut Obj<T> {
    Box::into_raw(Box::new(Obj {
        magic: T::MAGIC,
        inner: value,
    }))
}

/// The live object behind `p`, or a failure naming its kind and what went wrong.
///
/// # Safety
/// `p` is null, or points to memory this library handed out (live or freed); no other thread
/// uses the object now.
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
    // SAFETY: aligned and, per the caller's contract, memory this library handed out; read
    // volatile because a freed block may have been rewritten behind the compiler's back.
    let magic = unsafe { ptr::read_volatile(ptr::addr_of!((*p).magic)) };
    if magic != T::MAGIC {
        return Err(not_live::<T>(p));
    }
    // SAFETY: a live object of this kind, used by this thread only.
    Ok(unsafe { &mut (*p).inner })
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

/// Frees the object behind `p` after checking it is live.
///
/// # Safety
/// As [`live`]; `p` is not used again.
pub unsafe fn free<T: Kind>(p: *mut Obj<T>) -> FfiResult<()> {
    // SAFETY: per the caller's contract.
    unsafe { live(p) }?;
    // SAFETY: live, so this library's Box; the magic is overwritten first so that a second
    // free is refused even before the allocator reuses the block.
    unsafe {
        ptr::write_volatile(ptr::addr_of_mut!((*p).magic), DEAD);
        drop(Box::from_raw(p));
    }
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
        // The block is freed; its magic was overwritten first, and the allocator's
        // bookkeeping reuses the same bytes: either way the second free is refused.
        let again = unsafe { free(a) }.err().unwrap();
        assert!(again.message.contains("freed already"), "{}", again.message);
        unsafe { free(b) }.unwrap();
    }
}
