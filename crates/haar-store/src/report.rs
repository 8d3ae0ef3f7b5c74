//! Answers every front-end words the same way, shared by the local store, `dist` and
//! `select`: the request naming one key, whether a reported problem is damage, and the refusal
//! of a wipe over files haar did not write. A leaf below the store and the front-end trait.

use haar_core::Key;
use haar_core::request::{Request, Values};

use crate::error::{Error, Result};

/// The request that names exactly one key.
pub fn single_key_request(key: &Key) -> Request {
    let mut r = Request::default();
    for (k, v) in key.iter() {
        r.set(k, Values::List(vec![v.to_string()]));
    }
    r
}

/// Whether a problem that [`FieldStore::problems`](crate::FieldStore::problems) or
/// [`FieldStore::stats`](crate::FieldStore::stats) reports is damage
/// (an unreadable index, `toc`, commit slot or `db.key`: what it hides may be any field), as
/// against a note on a database another program wrote under the store's roots (FDB5's), which
/// haar never reads. A listing with damage is incomplete and faces fail with it (exit 3).
pub fn is_damage(problem: &str) -> bool {
    !problem.contains(crate::posix::FDB5_DATABASE)
}

/// Refuses a wipe with `doit` of databases holding `unowned` files (FDB5's "Cannot fully
/// wipe unclean FDB database"), naming them; called before anything is removed.
pub(crate) fn refuse_unowned(req: &Request, unowned: &[std::path::PathBuf]) -> Result<()> {
    if unowned.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = unowned.iter().map(|p| p.display().to_string()).collect();
    Err(Error::BadRequest {
        request: req.to_string(),
        reason: format!(
            "cannot fully wipe an unclean database: haar did not write {}; nothing was \
             wiped. Move them away, or wipe with --unsafe-wipe-all (fdb_wipe's \
             unsafeWipeAll) to delete them with the database",
            list.join(", ")
        )
        .into(),
    })
}
