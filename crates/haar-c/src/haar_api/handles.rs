//! Handle shells: how a C pointer becomes a checked reference, and how a freed handle is
//! told from a live one without reading freed memory.
//!
//! Every handle is a *shell* (a magic word and the object) that is never returned to the
//! allocator: freeing a handle drops the object, writes the dead magic and puts the shell on
//! its type's free list, from which the next handle of that type is made. So a stale pointer
//! always points at a shell of its type: a freed one is refused ("already freed"), and one
//! passed where another type is expected is refused by its magic. The limit, documented in
//! `haar.h`: once a freed shell is reused by a new handle of the same type, the stale pointer
//! reaches that new handle. Shells cost a few dozen bytes each; their number is the peak of
//! live handles of each type.
//!
//! Owns nothing of the store: only the lifetime of the objects behind C pointers.

use std::cell::UnsafeCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ffi::{Failure, FfiResult};

/// The magic of a freed shell.
const DEAD: u64 = 0x6861_6172_6465_6164; // "haardead"

/// A handle's storage: its magic word and the object.
pub struct Shell<T> {
    magic: AtomicU64,
    value: UnsafeCell<Option<T>>,
}

/// A handle type of the C API: an opaque C struct wrapping one [`Shell`].
pub trait Handle: Sized + 'static {
    /// The object behind the handle.
    type Inner;
    /// What the C API calls this type, for messages (`haar_t`).
    const NAME: &'static str;
    /// The magic of a live handle of this type (distinct per type).
    const LIVE: u64;
    /// The free shells of this type (addresses).
    fn pool() -> &'static Mutex<Vec<usize>>;
    /// A handle around a new shell.
    fn wrap(shell: Shell<Self::Inner>) -> Self;
    /// The shell of a handle.
    fn shell(&self) -> &Shell<Self::Inner>;
}

/// Implements [`Handle`] for the opaque C type `$name` (a tuple struct around one
/// `Shell<$inner>`, declared in plain Rust so cbindgen sees it).
macro_rules! impl_handle {
    ($name:ident, $inner:ty, $magic:expr) => {
        impl $crate::haar_api::handles::Handle for $name {
            type Inner = $inner;
            const NAME: &'static str = stringify!($name);
            const LIVE: u64 = $magic;
            fn pool() -> &'static std::sync::Mutex<Vec<usize>> {
                static POOL: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
                &POOL
            }
            fn wrap(shell: $crate::haar_api::handles::Shell<$inner>) -> Self {
                $name(shell)
            }
            fn shell(&self) -> &$crate::haar_api::handles::Shell<$inner> {
                &self.0
            }
        }
    };
}
pub(crate) use impl_handle;

/// A new handle holding `inner`: a free shell of its type reused, else a new one.
pub fn alloc<H: Handle>(inner: H::Inner) -> *mut H {
    let reused = H::pool().lock().unwrap_or_else(|p| p.into_inner()).pop();
    match reused {
        Some(addr) => {
            let h = addr as *mut H;
            // SAFETY: shells on the free list are never deallocated and are dead: nobody else
            // holds a reference into them.
            let shell = unsafe { (*h).shell() };
            unsafe { *shell.value.get() = Some(inner) };
            shell.magic.store(H::LIVE, Ordering::Release);
            h
        }
        None => Box::into_raw(Box::new(H::wrap(Shell {
            magic: AtomicU64::new(H::LIVE),
            value: UnsafeCell::new(Some(inner)),
        }))),
    }
}

/// The live shell behind `p`, or an input failure naming `what`.
///
/// # Safety
/// `p` is NULL or a pointer this library returned as an `H` (shells are never deallocated, so
/// reading a freed one's magic is defined).
unsafe fn live<'a, H: Handle>(p: *const H, what: &str) -> FfiResult<&'a Shell<H::Inner>> {
    // SAFETY: per the caller's contract.
    let Some(h) = (unsafe { p.as_ref() }) else {
        return Err(Failure::input(format!(
            "{what} is NULL: pass a {} this library created",
            H::NAME
        )));
    };
    let shell = h.shell();
    match shell.magic.load(Ordering::Acquire) {
        m if m == H::LIVE => Ok(shell),
        DEAD => Err(Failure::input(format!(
            "{what} is a {} that was already freed: use a live handle",
            H::NAME
        ))),
        _ => Err(Failure::input(format!(
            "{what} is not a {}: pass a handle this library created",
            H::NAME
        ))),
    }
}

/// Shared access to the object behind a live handle (for objects that are `Sync`, like the
/// store behind its mutex).
///
/// # Safety
/// `p` is NULL or a pointer this library returned as an `H`; the handle is not freed while the reference is used.
pub unsafe fn get<'a, H: Handle>(p: *const H, what: &str) -> FfiResult<&'a H::Inner> {
    // SAFETY: per the caller's contract; a live shell holds `Some`.
    let shell = unsafe { live::<H>(p, what) }?;
    Ok(unsafe { &*shell.value.get() }
        .as_ref()
        .expect("a live shell holds its object"))
}

/// Exclusive access to the object behind a live handle.
///
/// # Safety
/// As [`get`], and no other thread uses the handle meanwhile (the documented contract of
/// every handle but `haar_t`).
pub unsafe fn get_mut<'a, H: Handle>(p: *mut H, what: &str) -> FfiResult<&'a mut H::Inner> {
    // SAFETY: per the caller's contract.
    let shell = unsafe { live::<H>(p, what) }?;
    Ok(unsafe { &mut *shell.value.get() }
        .as_mut()
        .expect("a live shell holds its object"))
}

/// Frees the handle: drops the object and returns the shell to its type's free list. NULL is
/// accepted (nothing to do); a freed handle is an input failure.
///
/// # Safety
/// As [`get_mut`].
pub unsafe fn free<H: Handle>(p: *mut H, what: &str) -> FfiResult<()> {
    if p.is_null() {
        return Ok(());
    }
    // SAFETY: per the caller's contract.
    let shell = unsafe { live::<H>(p, what) }?;
    if shell
        .magic
        .compare_exchange(H::LIVE, DEAD, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Err(Failure::input(format!(
            "{what} is a {} that was already freed",
            H::NAME
        )));
    }
    // SAFETY: this thread won the exchange: nobody else frees it; users must not overlap.
    let inner = unsafe { (*shell.value.get()).take() };
    drop(inner);
    H::pool()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(p as usize);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Probe(Shell<String>);
    impl_handle!(Probe, String, 0x7072_6f62_6570_726f);

    struct Other(Shell<String>);
    impl_handle!(Other, String, 0x6f74_6865_726f_7468);

    #[test]
    fn a_freed_handle_is_refused_until_its_shell_is_reused_by_the_same_type() {
        let p = alloc::<Probe>("first".into());
        assert_eq!(unsafe { get_mut(p, "p") }.unwrap(), "first");
        unsafe { free(p, "p") }.unwrap();
        let e = unsafe { get_mut(p, "p") }.unwrap_err();
        assert!(e.message.contains("already freed"), "{}", e.message);
        let e = unsafe { free(p, "p") }.unwrap_err();
        assert!(e.message.contains("already freed"), "{}", e.message);
        // The documented limit: the next handle of the type reuses the shell.
        let q = alloc::<Probe>("second".into());
        assert_eq!(q, p);
        assert_eq!(unsafe { get_mut(p, "p") }.unwrap(), "second");
        unsafe { free(q, "q") }.unwrap();
    }

    #[test]
    fn a_handle_of_another_type_and_null_are_refused() {
        let o = alloc::<Other>("other".into());
        let e = unsafe { get_mut(o.cast::<Probe>(), "p") }.unwrap_err();
        assert!(e.message.contains("is not a Probe"), "{}", e.message);
        let e = unsafe { get_mut(std::ptr::null_mut::<Probe>(), "p") }.unwrap_err();
        assert!(e.message.contains("NULL"), "{}", e.message);
        unsafe { free(std::ptr::null_mut::<Probe>(), "p") }.unwrap();
        unsafe { free(o, "o") }.unwrap();
    }
}
