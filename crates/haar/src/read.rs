//! Reading for the faces (the CLI, the C library, FDB5's C API, Python): every field of some
//! requests with what they did not find ([`retrieve_all`] into memory, [`retrieve_into`] into
//! a sink), the one field a request names lent by the store without a copy where it can
//! ([`lent_one`]), and the one rule every face applies to a listing of a damaged store
//! ([`damage`]).
//!
//! Owns the choice of the zero-copy path, what counts as missing and the damage rule; a face
//! only words the [`Missing`] it is given. Every read goes through [`FieldStore::retrieve`].

use std::fmt;

use haar_core::Key;
use haar_core::request::{Request, Values};
use haar_store::frontend::FieldStoreExt;
use haar_store::{Error, FieldBytes, FieldStore};

/// What a retrieve of some requests found nothing for. Empty when every request delivered
/// every field it names.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Missing {
    /// Request combinations no flushed field matches, in request order. A request naming no
    /// keyword on a store holding nothing reports one empty key.
    pub keys: Vec<Key>,
    /// Requests that delivered no field though they name no missing combination (a keyword
    /// given as `all`, or a range, that matches nothing).
    pub requests: Vec<Request>,
    /// Damage the store found in the databases of missing fields: a missing field may have
    /// been among the damaged bytes, so corruption is never reported as mere absence.
    pub problems: Vec<String>,
}

impl Missing {
    /// Whether every request delivered every field it names.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.requests.is_empty()
    }

    /// Adds what one request's report says is missing.
    fn add(&mut self, req: &Request, report: &haar_store::RetrieveReport) {
        if !report.missing.is_empty() {
            self.keys.extend(report.missing.iter().cloned());
            self.problems.extend(report.problems.iter().cloned());
        } else if report.found == 0 {
            self.requests.push(req.clone());
        }
    }
}

/// `N field(s) not found (first three keys; ...)`, `no flushed field matches REQUEST`, and the
/// damage found, for a face to put its own context and advice around.
impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.keys.is_empty() {
            let shown: Vec<String> = self.keys.iter().take(3).map(|k| k.to_string()).collect();
            parts.push(format!(
                "{} field(s) not found ({}{})",
                self.keys.len(),
                shown.join("; "),
                if self.keys.len() > 3 { "; ..." } else { "" }
            ));
        }
        for r in &self.requests {
            parts.push(format!("no flushed field matches {r}"));
        }
        write!(f, "{}", parts.join("; "))?;
        if !self.problems.is_empty() {
            write!(f, " (damage found: {})", self.problems.join("; "))?;
        }
        Ok(())
    }
}

/// What [`retrieve_into`] delivered.
#[derive(Debug, Default, Clone)]
pub struct Retrieved {
    /// Fields delivered.
    pub found: usize,
    /// Bytes delivered.
    pub bytes: u64,
    /// What the requests found nothing for.
    pub missing: Missing,
    /// Request keywords ignored because no schema rule uses them, over every request.
    pub ignored: Vec<String>,
    /// Every problem the store reported, including those of requests that missed nothing.
    pub problems: Vec<String>,
}

/// Delivers the fields of every request in `reqs` to `sink`, in request order, and says what
/// they found nothing for; a missing field is not an error here (the face decides).
pub fn retrieve_into(
    store: &dyn FieldStore,
    reqs: &[Request],
    sink: &mut haar_store::Sink<'_>,
) -> Result<Retrieved, Error> {
    let mut out = Retrieved::default();
    for req in reqs {
        let report = store.retrieve(req, sink)?;
        out.found += report.found;
        out.bytes += report.bytes;
        out.missing.add(req, &report);
        out.ignored.extend(report.ignored);
        out.problems.extend(report.problems);
    }
    Ok(out)
}

/// Every field of `reqs` as one run of bytes, in request order, with what they found nothing
/// for. One request naming exactly one flushed field is lent by the store where it can
/// ([`lent_one`]: pmem, no copy); anything else is copied out of [`FieldStore::retrieve`].
pub fn retrieve_all(
    store: &dyn FieldStore,
    reqs: &[Request],
) -> Result<(FieldBytes, Missing), Error> {
    if let [req] = reqs
        && let Some(bytes) = lent_one(store, req)
    {
        return Ok((bytes, Missing::default()));
    }
    let mut buf = Vec::new();
    let got = retrieve_into(store, reqs, &mut |_, d, _| {
        buf.extend_from_slice(d);
        Ok(())
    })?;
    Ok((FieldBytes::Owned(buf), got.missing))
}

/// Damage is never a clean answer (design §9): when the store reports a damaged file or
/// database under `req` (an unreadable index, TOC, commit slot, `db.key` or pool: what it hides
/// may be any field), the error a face fails a listing with (the CLI: exit 3, after printing
/// what it could; Python: a `StorageError`), naming every damaged file and what to do. Notes on
/// databases another program wrote (FDB5's) are not damage. `what` names the answer
/// ("the listing above").
pub fn damage(store: &dyn FieldStore, req: &Request, what: &str) -> Result<Option<Error>, Error> {
    Ok(damage_of(&store.damage(req)?, what))
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
/// lend and the request names exactly one complete key that is flushed (`one_key`). `None`
/// sends the caller the general way (which also reports what is missing). The one rule for
/// every face: C's `haar_retrieve` and `fdb_retrieve` and Python's `retrieve` lend the same
/// requests.
pub fn lent_one(store: &dyn FieldStore, req: &Request) -> Option<FieldBytes> {
    let key = one_key(store, req)?;
    match store.retrieve_lent(&key)? {
        Ok(Some((_, bytes))) => Some(bytes),
        _ => None,
    }
}

/// The one key `req` names: resolved with the store's schema (ranges, abbreviations and
/// spellings normalised) to exactly one combination; or, where the request language refuses
/// a value, every keyword's one value as given (an optional keyword with an empty value,
/// `levelist=`, as a listing shows a field that lacks it: the language has no spelling for
/// it, the store's split does).
fn one_key(store: &dyn FieldStore, req: &Request) -> Option<Key> {
    if req.params.iter().any(|p| matches!(p.values, Values::All)) {
        return None;
    }
    match store.options().resolve(req) {
        Ok((resolved, _ignored)) if resolved.count() == 1 => resolved.expand().pop(),
        Ok(_) => None,
        Err(_) => {
            let mut key = Key::new();
            for p in &req.params {
                match &p.values {
                    Values::List(v) if v.len() == 1 => key.push(p.keyword.clone(), v[0].clone()),
                    _ => return None,
                }
            }
            (!key.is_empty()).then_some(key)
        }
    }
}
