//! libhaar's handles: each C handle type is a row of [`crate::table`], and this module words
//! its refusals for `haar_last_error()`.
//!
//! A handle is a tagged slot index with a generation, never an address (see
//! [`crate::table`]): a NULL, foreign, freed or closed handle is refused with
//! `HAAR_ERR_INPUT` and a message naming the argument, a stale handle never reaches the handle
//! made after it in the same slot, and closing a handle another thread is using waits for
//! that call to return. Handles used by one thread at a time (every type but `haar_t`) are
//! refused as busy when a second thread calls on one meanwhile.
//!
//! Owns nothing of the store: only the lifetime of the objects behind C handles.

use std::marker::PhantomData;

use crate::ffi::{Failure, FfiResult};
use crate::table::{Exclusive, Refusal, Shared, Table};

/// What a handle type's opaque C struct holds: nothing (the handle is a number; cbindgen
/// sees an opaque struct).
pub struct Shell<T>(PhantomData<T>);

/// A handle type of the C API: an opaque C struct whose pointers are handles of one table.
pub trait Handle: Sized + 'static {
    /// The object behind the handle.
    type Inner: Send + 'static;
    /// What the C API calls this type, for messages (`haar_t`).
    const NAME: &'static str;
    /// The table of this type's handles.
    fn table() -> &'static Table<Self::Inner>;
}

/// Implements [`Handle`] for the opaque C type `$name` (a tuple struct around one
/// `Shell<$inner>`, declared in plain Rust so cbindgen sees it), its handles tagged `$tag`
/// (distinct per type, nonzero).
macro_rules! impl_handle {
    ($name:ident, $inner:ty, $tag:expr) => {
        impl $crate::haar_api::handles::Handle for $name {
            type Inner = $inner;
            const NAME: &'static str = stringify!($name);
            fn table() -> &'static $crate::table::Table<$inner> {
                static TABLE: $crate::table::Table<$inner> = $crate::table::Table::new($tag);
                &TABLE
            }
        }
    };
}
pub(crate) use impl_handle;

/// The message of a refused handle argument `what`.
fn refused<H: Handle>(r: Refusal, what: &str) -> Failure {
    let name = H::NAME;
    Failure::input(match r {
        Refusal::Null => format!("{what} is NULL: pass a {name} this library created"),
        Refusal::Foreign => {
            format!("{what} is not a {name}: pass a handle this library created")
        }
        Refusal::Closed => format!(
            "{what} is a {name} that was already freed (closed): use a live handle; a freed handle stays invalid even after new handles are made"
        ),
        Refusal::Busy => format!(
            "{what} is a {name} in use by another thread right now: use each {name} from one thread at a time"
        ),
        Refusal::Full => format!("too many live {name} handles (16M): free those not needed"),
    })
}

/// A new handle holding `inner`.
pub fn alloc<H: Handle>(inner: H::Inner) -> FfiResult<*mut H> {
    H::table()
        .insert(inner)
        .map(|h| h as *mut H)
        .map_err(|r| refused::<H>(r, "the new handle"))
}

/// Shared access to the object behind a live handle for one call (objects that are `Sync`,
/// like the store behind its mutex); a close waits until the guard is dropped.
///
/// # Safety
/// None needed (the handle is checked, never dereferenced); `unsafe` only for the callers'
/// uniformity with C pointers.
pub unsafe fn get<H: Handle>(p: *const H, what: &str) -> FfiResult<Shared<H::Inner>>
where
    H::Inner: Sync,
{
    H::table()
        .shared(p as usize)
        .map_err(|r| refused::<H>(r, what))
}

/// Exclusive access to the object behind a live handle for one call: a second thread's call
/// meanwhile is refused as busy.
///
/// # Safety
/// As [`get`].
pub unsafe fn get_mut<H: Handle>(p: *mut H, what: &str) -> FfiResult<Exclusive<H::Inner>> {
    H::table()
        .exclusive(p as usize)
        .map_err(|r| refused::<H>(r, what))
}

/// Frees the handle: later calls with it are refused, calls in flight on other threads are
/// waited for, then the object is dropped. NULL is accepted (nothing to do); a freed handle is
/// an input failure.
///
/// # Safety
/// As [`get`]; the calling thread holds no guard on `p`.
pub unsafe fn free<H: Handle>(p: *mut H, what: &str) -> FfiResult<()> {
    if p.is_null() {
        return Ok(());
    }
    let inner = H::table()
        .remove(p as usize)
        .map_err(|r| refused::<H>(r, what))?;
    drop(inner);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Probe(Shell<String>);
    impl_handle!(Probe, String, 0x7e);

    struct Other(Shell<String>);
    impl_handle!(Other, String, 0x7f);

    #[test]
    fn a_freed_handle_is_refused_even_once_its_slot_is_reused() {
        let p = alloc::<Probe>("first".into()).unwrap();
        assert_eq!(&*unsafe { get_mut(p, "p") }.unwrap(), "first");
        unsafe { free(p, "p") }.unwrap();
        let e = unsafe { get_mut(p, "p") }.err().unwrap();
        assert!(e.message.contains("already freed"), "{}", e.message);
        let e = unsafe { free(p, "p") }.err().unwrap();
        assert!(e.message.contains("already freed"), "{}", e.message);
        // The next handle of the type reuses the slot, under a new generation.
        let q = alloc::<Probe>("second".into()).unwrap();
        assert_ne!(q, p);
        let e = unsafe { get_mut(p, "p") }.err().unwrap();
        assert!(e.message.contains("already freed"), "{}", e.message);
        assert_eq!(&*unsafe { get_mut(q, "q") }.unwrap(), "second");
        unsafe { free(q, "q") }.unwrap();
    }

    #[test]
    fn a_handle_of_another_type_and_null_are_refused() {
        let o = alloc::<Other>("other".into()).unwrap();
        let e = unsafe { get_mut(o.cast::<Probe>(), "p") }.err().unwrap();
        assert!(e.message.contains("is not a Probe"), "{}", e.message);
        let e = unsafe { get_mut(std::ptr::null_mut::<Probe>(), "p") }
            .err()
            .unwrap();
        assert!(e.message.contains("NULL"), "{}", e.message);
        unsafe { free(std::ptr::null_mut::<Probe>(), "p") }.unwrap();
        unsafe { free(o, "o") }.unwrap();
    }
}
