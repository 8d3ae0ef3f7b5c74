//! Reading for the faces that hand bytes out beyond a callback (the C library, FDB5's C API):
//! the one field a request names, lent by the store without a copy where it can.
//!
//! Owns only the choice of the zero-copy path; every other read goes through
//! [`FieldStore::retrieve`], which also reports what is missing.

use haar_core::request::{Request, Values};
use haar_store::{FieldBytes, FieldStore};

/// The one field `req` names, lent by the store (pmem: the pool mapping), when the store can
/// lend and the request, resolved with the store's schema, names exactly one complete key
/// that is flushed. `None` sends the caller the general way (which also reports what is
/// missing).
pub fn lent_one(store: &dyn FieldStore, req: &Request) -> Option<FieldBytes> {
    if req.params.iter().any(|p| matches!(p.values, Values::All)) {
        return None;
    }
    let (resolved, _ignored) = store.options().resolve(req).ok()?;
    if resolved.count() != 1 {
        return None;
    }
    let key = resolved.expand().pop()?;
    match store.retrieve_lent(&key)? {
        Ok(Some((_, bytes))) => Some(bytes),
        _ => None,
    }
}
