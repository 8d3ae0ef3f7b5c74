//! Reading for the faces that hand bytes out beyond a callback (the C library, FDB5's C API):
//! the one field a request names, lent by the store without a copy where it can; and the one
//! rule every face applies to a listing of a damaged store ([`damage`]).
//!
//! Owns the choice of the zero-copy path and the damage rule; every other read goes through
//! [`FieldStore::retrieve`], which also reports what is missing.

use haar_core::request::{Request, Values};
use haar_store::{Error, FieldBytes, FieldStore};

/// Damage is never a clean answer (design §9): when the store reports a damaged file or
/// database under `req` (an unreadable index, TOC, commit slot, `db.key` or pool: what it hides
/// may be any field), the error a face fails a listing with (the CLI: exit 3, after printing
/// what it could; Python: a `StorageError`), naming every damaged file and what to do. Notes on
/// databases another program wrote (FDB5's) are not damage. `what` names the answer
/// ("the listing above").
pub fn damage(store: &dyn FieldStore, req: &Request, what: &str) -> Result<Option<Error>, Error> {
    let damaged: Vec<String> = store
        .problems(req)?
        .into_iter()
        .filter(|p| haar_store::frontend::is_damage(p))
        .collect();
    Ok(damage_of(&damaged, what))
}

/// [`damage`] for problems already gathered (a face that also prints them).
pub fn damage_of(damaged: &[String], what: &str) -> Option<Error> {
    let damaged: Vec<&String> = damaged
        .iter()
        .filter(|p| haar_store::frontend::is_damage(p))
        .collect();
    if damaged.is_empty() {
        return None;
    }
    Some(Error::Corrupt {
        what: "catalogue",
        path: std::path::PathBuf::from(format!("{} damaged file(s) or database(s)", damaged.len())),
        detail: format!(
            "{what} is incomplete: {}; they may hold fields it does not show: restore the named \
             files from a copy, or move the damaged database away (then wipe it and archive its \
             fields again)",
            damaged
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    })
}

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
