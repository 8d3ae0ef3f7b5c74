//! Listing (`fdb_list` and `fdb_listiterator_t`): the fields matching a request, with their
//! location (`attrs`) and their key level by level (`splitkey`).
//!
//! Owns the iterator over what `FieldStore::list` returned and the depth FDB5 lists to.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{CString, c_char, c_int};

use haar::FieldStoreExt;
use haar::request::Request;
use haar::schema::SplitKey;

use super::call_ok;
use super::keys::{c_string, fdb_split_key_t};
use super::object::{self, Obj, kind};
use crate::ffi::{Failure, FfiResult};

/// One listed element: the key by level, where its bytes are, how many.
pub struct Element {
    /// The key, split into database, index and datum levels (the levels beyond the listing
    /// depth empty).
    pub split: SplitKey,
    /// Where the bytes are: the file's path (posix: the writer's data file in the
    /// database's directory; pmem: the pool), else (through servers) `haar:{DATABASE}/OBJECT`.
    pub uri: CString,
    /// Byte offset in that object.
    pub offset: usize,
    /// Length in bytes.
    pub length: usize,
}

/// A list iterator (`fdb_listiterator_t`).
pub struct ListObj {
    elements: Vec<Element>,
    /// Elements moved to so far; the current one is `next - 1`.
    next: usize,
    depth: usize,
    /// The current element as FDB5 5.10 prints it (`fdb_listiterator_next`'s string).
    #[cfg(feature = "fdb5-5_10")]
    pub(crate) text: std::ffi::CString,
}
kind!(ListObj, 0x15, "fdb_listiterator_t", "fdb_list");

/// FDB5's `fdb_listiterator_t`.
pub type fdb_listiterator_t = Obj<ListObj>;

impl ListObj {
    /// An iterator over `elements`, listed to `depth` levels (1 to 3).
    pub fn new(elements: Vec<Element>, depth: usize) -> ListObj {
        ListObj {
            elements,
            next: 0,
            depth,
            #[cfg(feature = "fdb5-5_10")]
            text: Default::default(),
        }
    }

    /// The element moved to by the last successful `next`.
    pub fn current(&self) -> FfiResult<&Element> {
        match self.next {
            0 => Err(Failure::input(
                "the list iterator is before its first element: call fdb_listiterator_next first",
            )),
            n => self.elements.get(n - 1).ok_or_else(|| {
                Failure::input("the list iterator is past its last element (it returned FDB_ITERATION_COMPLETE)")
            }),
        }
    }

    /// Moves to the next element: false at the end.
    pub fn advance(&mut self) -> bool {
        if self.next <= self.elements.len() {
            self.next += 1;
        }
        self.next <= self.elements.len()
    }
}

/// The elements of a listing of `req` (`None`: everything) to `depth` levels: every field at
/// depth 3, every distinct database (and index, at depth 2) above. With `masked`, each field
/// is followed by the masked copies of its key the store still holds (newest first), as FDB5
/// lists them until a purge, through servers too.
pub fn elements(
    store: &dyn haar::FieldStore,
    req: Option<&Request>,
    depth: usize,
    masked: bool,
) -> FfiResult<Vec<Element>> {
    let all = Request::default();
    let req = req.unwrap_or(&all);
    let fields = store.list_maybe_masked(req, masked && depth >= 3)?;
    let problems = store.problems(req)?;
    // Damage is never a clean listing (issue 27): what it hides may be any field.
    let damage: Vec<&str> = problems
        .iter()
        .filter(|p| haar::frontend::is_damage(p))
        .map(String::as_str)
        .collect();
    if !damage.is_empty() {
        return Err(Failure {
            kind: crate::ffi::Kind::Storage,
            message: format!(
                "fdb_list: {} is damaged, so a listing would be incomplete: {}; restore the \
                 named files from a copy, or move the damaged database away",
                store.describe(),
                damage.join("; ")
            ),
        });
    }
    if fields.is_empty() {
        // Nothing listed where the store knows of databases it cannot read (one FDB5 wrote
        // under the same root): say so rather than list nothing.
        if !problems.is_empty() {
            return Err(Failure::input(format!(
                "fdb_list: nothing listed in {}, which reports: {}",
                store.describe(),
                problems.join("; ")
            )));
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    // One look-up per data object, not per field (posix finds the database's directory).
    let mut uris: HashMap<(haar::Key, u64), CString> = HashMap::new();
    for f in fields {
        let uri = if depth >= 3 {
            // As FDB5 ("URI describing the resource (i.e. file path)"): the file the bytes are
            // in, where the store has one (posix data file, pmem pool); through servers,
            // which hold it elsewhere, haar's name for it.
            let id = (f.db.clone(), f.data.object);
            match uris.get(&id) {
                Some(u) => u.clone(),
                None => {
                    let u = c_string(&match store.data_path(&f)? {
                        Some(path) => path.display().to_string(),
                        None => format!("haar:{{{}}}/{:016x}", f.db, f.data.object),
                    });
                    uris.insert(id, u.clone());
                    u
                }
            }
        } else {
            c_string(&format!("haar:{{{}}}", f.db))
        };
        let split = SplitKey {
            db: f.db,
            index: if depth >= 2 {
                f.index
            } else {
                Default::default()
            },
            datum: if depth >= 3 {
                f.datum
            } else {
                Default::default()
            },
        };
        if depth < 3 && !seen.insert((split.db.clone(), split.index.clone())) {
            continue;
        }
        let (offset, length) = if depth >= 3 {
            (f.data.offset as usize, f.data.length as usize)
        } else {
            (0, 0)
        };
        out.push(Element {
            split,
            uri,
            offset,
            length,
        });
    }
    Ok(out)
}

/// Stores where the current element's bytes are: `*uri` (valid until the iterator is
/// deleted), `*off` and `*len` in bytes.
///
/// # Safety
/// `it` is null or a live list iterator; the out-parameters are null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_listiterator_attrs(
    it: *mut fdb_listiterator_t,
    uri: *mut *const c_char,
    off: *mut usize,
    len: *mut usize,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let l = unsafe { object::live(it)? };
        if uri.is_null() || off.is_null() || len.is_null() {
            return Err(Failure::input(
                "uri, off or len is NULL: pass where to store the attributes",
            ));
        }
        let e = l.current()?;
        // SAFETY: checked non-null; valid per the caller's contract.
        unsafe {
            *uri = e.uri.as_ptr();
            *off = e.offset;
            *len = e.length;
        }
        Ok(())
    })
}

/// Fills the split key `key` (made by `fdb_new_splitkey`) with the current element's key,
/// for `fdb_splitkey_next_metadata`.
///
/// # Safety
/// `it` is null or a live list iterator; `key` is null or a live split key.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_listiterator_splitkey(
    it: *mut fdb_listiterator_t,
    key: *mut fdb_split_key_t,
) -> c_int {
    call_ok(|| {
        // SAFETY: per the caller's contract.
        let (l, mut k) = unsafe { (object::live(it)?, object::live(key)?) };
        k.fill(&l.current()?.split, l.depth);
        Ok(())
    })
}

/// Deletes a list iterator made by `fdb_list`.
///
/// # Safety
/// `it` is null or a live list iterator, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdb_delete_listiterator(it: *mut fdb_listiterator_t) -> c_int {
    // SAFETY: per the caller's contract.
    call_ok(|| unsafe { object::free(it) })
}

/// FDB5 5.25's `fdb_list` and `fdb_listiterator_next` (replaced by `v5_10`'s with the
/// feature `fdb5-5_10`: same names, other signatures).
#[cfg(not(feature = "fdb5-5_10"))]
pub use api_5_25::{fdb_list, fdb_listiterator_next};

#[cfg(not(feature = "fdb5-5_10"))]
mod api_5_25 {
    use std::ffi::c_int;

    use super::super::handle::fdb_handle_t;
    use super::super::keys::fdb_request_t;
    use super::super::{FDB_ITERATION_COMPLETE, FDB_SUCCESS, call, call_ok};
    use super::{ListObj, elements, fdb_listiterator_t, object};
    use crate::ffi::Failure;

    /// Lists the fields matching `req` (NULL: every field) into a new iterator in `*it`; delete
    /// it with `fdb_delete_listiterator`. `depth` 1 lists databases, 2 databases and indexes, 3
    /// (and any value outside 1..3, as in FDB5) fields. As FDB5 5.25, which hands `duplicates`
    /// to `FDB::list` as its `deduplicate` (measured: the header's words say the opposite),
    /// `true` lists each key once and `false` also the masked copies of re-archived keys that
    /// a local store still holds, until `fdb_purge` drops them.
    ///
    /// # Safety
    /// `fdb` is null or a live handle; `req` is null or a live request; `it` is null or valid for
    /// a write.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn fdb_list(
        fdb: *mut fdb_handle_t,
        req: *const fdb_request_t,
        it: *mut *mut fdb_listiterator_t,
        duplicates: bool,
        depth: c_int,
    ) -> c_int {
        call_ok(|| {
            // SAFETY: per the caller's contract.
            let (h, r) = unsafe { (object::live(fdb)?, object::optional(req.cast_mut())?) };
            if it.is_null() {
                return Err(Failure::input(
                    "it is NULL: pass where to store the iterator",
                ));
            }
            let depth = if (1..=3).contains(&depth) {
                depth as usize
            } else {
                3
            };
            let elements = elements(
                &*h.store,
                r.as_deref().map(|r| &r.request),
                depth,
                !duplicates,
            )?;
            // SAFETY: checked non-null; valid per the caller's contract.
            unsafe { *it = object::new(ListObj::new(elements, depth))? };
            Ok(())
        })
    }

    /// Moves to the next listed element; `FDB_ITERATION_COMPLETE` after the last.
    ///
    /// # Safety
    /// `it` is null or a live list iterator.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn fdb_listiterator_next(it: *mut fdb_listiterator_t) -> c_int {
        call(|| {
            // SAFETY: per the caller's contract.
            let mut l = unsafe { object::live(it)? };
            Ok(if l.advance() {
                FDB_SUCCESS
            } else {
                FDB_ITERATION_COMPLETE
            })
        })
    }
}
