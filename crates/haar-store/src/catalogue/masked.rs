//! Masked copies (FDB5's duplicates): the fields of a database that a later archive of the same
//! key replaced but whose bytes are still stored, because nothing has purged them yet.
//!
//! Runs keep only the live entry of each key (§3.1), so the masked ones are found by replaying
//! the commit log from its start, which keeps every entry until a purge's snapshot or a wipe
//! starts the log again. O(entries in the log): for listings that ask for duplicates, never
//! for reads. Reads only; owns nothing on disk.

use std::collections::HashMap;

use haar_core::Key;

use crate::backend::{Backend, Committed};
use crate::error::Result;
use crate::format::{self, DataRef, Entry};

/// Every masked copy in `db`, as (index, datum, where), each key's copies newest first; keys in
/// no particular order. A copy a partial wipe removed (its key tombstoned) is not masked but
/// gone, and is left out, as is everything before a wipe or a purge's snapshot. Segments the
/// reader cannot decode are skipped: the ordinary listing reports them.
pub(crate) fn masked(backend: &dyn Backend, db: &Key) -> Result<Vec<(Key, Key, DataRef)>> {
    let Some(mut reader) = backend.open_reader(db)? else {
        return Ok(Vec::new());
    };
    // Key → every copy archived under it, oldest first (the last is the live one).
    let mut copies: HashMap<(Key, Key), Vec<DataRef>> = HashMap::new();
    loop {
        let commits = reader.poll()?;
        if commits.is_empty() {
            break;
        }
        for c in commits {
            match c {
                Committed::Wiped => copies.clear(),
                Committed::Unreadable { .. } => {}
                Committed::Segment { bytes, .. } => {
                    let Ok(seg) = format::decode_segment(&bytes) else {
                        continue;
                    };
                    if &seg.db != db {
                        continue;
                    }
                    if seg.is_snapshot() {
                        copies.clear();
                    }
                    for e in seg.entries {
                        match e {
                            Entry::Field { index, datum, data } => {
                                copies.entry((index, datum)).or_default().push(data)
                            }
                            Entry::Tombstone { index, datum } => {
                                copies.remove(&(index, datum));
                            }
                        }
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for ((index, datum), mut refs) in copies {
        refs.pop(); // the live copy
        out.extend(
            refs.into_iter()
                .rev()
                .map(|r| (index.clone(), datum.clone(), r)),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use haar_core::Key;
    use haar_core::request::Request;

    use crate::{MemoryBackend, Store};

    const DB: &str =
        "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc";

    fn key(step: u32) -> Key {
        Key::parse(&format!("{DB},step={step},param=167")).unwrap()
    }

    /// (step, bytes) of every field listed with masked copies, in listing order.
    fn listed(store: &Store) -> Vec<(String, Vec<u8>)> {
        let req = Request::parse("class=od,expver=1").unwrap();
        store
            .list_with_masked(&req)
            .unwrap()
            .into_iter()
            .map(|f| {
                let bytes = store
                    .with_field_ranges(&f, |read| read(0, f.data.length).unwrap().to_vec())
                    .unwrap()
                    .unwrap();
                (f.datum.get("step").unwrap().to_string(), bytes)
            })
            .collect()
    }

    #[test]
    fn re_archived_keys_list_every_stored_copy_newest_first_until_purge() {
        let mut s = Store::new(MemoryBackend::new());
        for (step, bytes) in [(0, "a"), (6, "b"), (0, "c")] {
            s.archive(&key(step), bytes.as_bytes()).unwrap();
            s.flush().unwrap();
        }
        s.archive(&key(0), b"d").unwrap();
        s.flush().unwrap();
        let step = |v: &str, b: &str| (v.to_string(), b.as_bytes().to_vec());
        assert_eq!(
            listed(&s),
            [
                step("0", "d"),
                step("0", "c"),
                step("0", "a"),
                step("6", "b")
            ]
        );
        // The ordinary listing is unchanged.
        let all = Request::parse("class=od").unwrap();
        assert_eq!(s.list(&all).unwrap().len(), 2);
        // A partial wipe removes every copy of its key; a purge drops the masked ones.
        s.wipe(
            &Request::parse(&format!("{DB},step=6,param=167")).unwrap(),
            true,
        )
        .unwrap();
        assert_eq!(listed(&s), [step("0", "d"), step("0", "c"), step("0", "a")]);
        s.purge(&all, true).unwrap();
        assert_eq!(listed(&s), [step("0", "d")]);
    }
}
