//! The opaque objects of the C API (`fdb_handle_t`, `fdb_key_t`, …): each kind is a row of
//! [`crate::table`], so that a NULL pointer, a pointer to another kind of object, a freed one
//! and one in use by another thread are refused with a message instead of a crash.
//!
//! Owns allocation, checking and freeing of those objects, and the wording of refusals; not
//! what the objects do.
//!
//! A `*mut fdb_x_t` handed to C is a tagged slot index with a generation, never an address
//! (FDB5's header declares the types opaque, so no program looks inside): a freed object is
//! refused even after its slot holds a new object, and freeing an object (say
//! `fdb_delete_handle`) while another thread is inside a call on it waits for that call to
//! return. FDB5 objects are used by one thread at a time; a call on an object that another
//! thread is using is refused ("in use by another thread") instead of racing.

use std::marker::PhantomData;

use crate::ffi::{Failure, FfiResult};
use crate::table::{Exclusive, Refusal, Table};

/// A kind of object handed to C: its handle tag and its C name.
pub trait Kind: Sized + Send + 'static {
    /// The C type name, for messages (`fdb_handle_t`).
    const NAME: &'static str;
    /// The function that makes one, for messages (`fdb_new_handle`).
    const MADE_BY: &'static str;
    /// The table of this kind's objects.
    fn table() -> &'static Table<Self>;
}

/// What a C pointer to an object of kind `T` points at: nothing (the pointer is a handle of
/// `T`'s table).
pub struct Obj<T: Kind>(PhantomData<T>);

/// Moves `value` into its kind's table and hands out its handle (freed by [`free`]).
pub fn new<T: Kind>(value: T) -> FfiResult<*mut Obj<T>> {
    T::table()
        .insert(value)
        .map(|h| h as *mut Obj<T>)
        .map_err(|r| refused::<T>(r, std::ptr::null_mut()))
}

/// The live object behind `p`, held by this call alone, or a failure naming its kind and what
/// went wrong.
///
/// # Safety
/// None needed (`p` is checked, never dereferenced); `unsafe` for the callers' uniformity
/// with C pointers.
pub unsafe fn live<T: Kind>(p: *mut Obj<T>) -> FfiResult<Exclusive<T>> {
    T::table()
        .exclusive(p as usize)
        .map_err(|r| refused::<T>(r, p))
}

/// As [`live`] for an optional argument: NULL is `None`.
///
/// # Safety
/// As [`live`].
pub unsafe fn optional<T: Kind>(p: *mut Obj<T>) -> FfiResult<Option<Exclusive<T>>> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: per the caller's contract.
        unsafe { live(p) }.map(Some)
    }
}

/// Frees the object behind `p`: later calls with it are refused, a call in flight on another
/// thread is waited for, then its value is dropped.
///
/// # Safety
/// As [`live`]; the calling thread holds no guard on `p`.
pub unsafe fn free<T: Kind>(p: *mut Obj<T>) -> FfiResult<()> {
    let value = T::table()
        .remove(p as usize)
        .map_err(|r| refused::<T>(r, p))?;
    drop(value);
    Ok(())
}

fn refused<T: Kind>(r: Refusal, p: *mut Obj<T>) -> Failure {
    let (name, made_by) = (T::NAME, T::MADE_BY);
    Failure::input(match r {
        Refusal::Null => format!("{name} is NULL: pass one made by {made_by}"),
        Refusal::Foreign | Refusal::Closed => format!(
            "{p:p} is not a live {name}: it was freed already, or was not made by {made_by}"
        ),
        Refusal::Busy => format!(
            "{p:p} is a {name} in use by another thread right now: FDB5 objects are used by one thread at a time"
        ),
        Refusal::Full => format!("too many live {name} objects (16M): free those not needed"),
    })
}

/// Declares an object kind: `kind!(Type, TAG, "fdb_x_t", "fdb_new_x")` (`TAG` nonzero and
/// distinct per kind, here and in `haar_api`).
macro_rules! kind {
    ($t:ty, $tag:expr, $name:expr, $made_by:expr) => {
        impl $crate::fdb_api::object::Kind for $t {
            const NAME: &'static str = $name;
            const MADE_BY: &'static str = $made_by;
            fn table() -> &'static $crate::table::Table<$t> {
                static TABLE: $crate::table::Table<$t> = $crate::table::Table::new($tag);
                &TABLE
            }
        }
    };
}
pub(crate) use kind;

#[cfg(test)]
mod tests {
    use super::*;

    struct A(u32);
    kind!(A, 0x7a, "a_t", "new_a");
    struct B(u32);
    kind!(B, 0x7b, "b_t", "new_b");

    #[test]
    fn null_foreign_and_freed_objects_are_refused_by_name() {
        let null = unsafe { live::<A>(std::ptr::null_mut()) }.err().unwrap();
        assert!(
            null.message.contains("a_t is NULL: pass one made by new_a"),
            "{}",
            null.message
        );

        let b = new(B(7)).unwrap();
        let foreign = unsafe { live::<A>(b.cast()) }.err().unwrap();
        assert!(
            foreign.message.contains("is not a live a_t"),
            "{}",
            foreign.message
        );
        assert_eq!(unsafe { live(b) }.unwrap().0, 7);

        let a = new(A(1)).unwrap();
        unsafe { live(a) }.unwrap().0 = 2;
        assert_eq!(unsafe { live(a) }.unwrap().0, 2);
        unsafe { free(a) }.unwrap();
        // The second free and any use are refused.
        let again = unsafe { free(a) }.err().unwrap();
        assert!(again.message.contains("freed already"), "{}", again.message);
        assert!(unsafe { live(a) }.is_err());
        // The next object of that kind reuses the slot under a new generation: the stale
        // pointer still does not reach it.
        let a2 = new(A(3)).unwrap();
        assert_ne!(a2, a);
        assert!(unsafe { live(a) }.is_err());
        assert_eq!(unsafe { live(a2) }.unwrap().0, 3);
        // In use: a second user is refused.
        let held = unsafe { live(a2) }.unwrap();
        let busy = unsafe { live(a2) }.err().unwrap();
        assert!(
            busy.message.contains("in use by another thread"),
            "{}",
            busy.message
        );
        drop(held);
        unsafe { free(a2) }.unwrap();
        unsafe { free(b) }.unwrap();
    }
}
