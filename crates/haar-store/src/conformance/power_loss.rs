//! The power-loss workload and the check of its crash images, shared by the simulations of
//! both backends (docs/design.md §6.2): pmem pools under `haar_persist::powerfail`, POSIX
//! directories on `haar_fs::powerfail`'s recording file system.
//!
//! The writer archives a database it later wipes, then six flushes of ten fields, re-archives
//! one flush and purges the superseded fields, and wipes. After each call returns it *says* so
//! (a line through the caller's `say`), so a crash image can be checked against exactly what
//! was acknowledged before the power went: every acknowledged flush whole and byte-identical,
//! each flush, wipe and re-archive all-or-nothing, nothing from a later step without the
//! earlier one, and a store that archives on without changing what it held.

use std::collections::BTreeMap;

use haar_core::Key;
use haar_core::request::Request;

use super::{payload, reuse_key};
use crate::store::Store;

/// Flushes of the main database.
pub const STEPS: u32 = 6;
/// Fields per flush.
pub const PER_STEP: u32 = 10;
const KEEP: &str = "keep";
const GONE: &str = "gone";
const MORE: &str = "more";

/// Field sizes: `size(i)` bytes for field `i` of a flush (`i` = step + index in the step).
#[derive(Clone, Copy)]
pub struct Shape {
    /// Length of the field with number `i`.
    pub size: fn(u32) -> usize,
    /// Length of each field archived after the power loss.
    pub more: usize,
}

fn key(db: &str, step: u32, j: u32) -> Key {
    reuse_key(db, step * PER_STEP + j)
}

fn db_request(db: &str) -> Request {
    Request::parse(&format!("expver={db}")).expect("valid request")
}

/// Runs the workload on `store`, calling `say` after each acknowledged step.
///
/// # Panics
/// When the store fails (the workload runs on a healthy store).
pub fn run_workload(store: &mut Store, shape: Shape, say: &mut dyn FnMut(&str)) {
    say("opened");
    // A database that will be wiped, so its space is reused by later steps.
    for j in 0..PER_STEP {
        let k = key(GONE, 0, j);
        store.archive(&k, &payload(&k, 0, (shape.size)(j))).unwrap();
    }
    store.flush().unwrap();
    say("flushed gone");
    for step in 0..STEPS {
        for j in 0..PER_STEP {
            let k = key(KEEP, step, j);
            store
                .archive(&k, &payload(&k, 0, (shape.size)(step + j)))
                .unwrap();
        }
        store.flush().unwrap();
        say(&format!("flushed {step}"));
        if step == 2 {
            // Re-archive step 1 (new bytes), then purge the superseded ones.
            for j in 0..PER_STEP {
                let k = key(KEEP, 1, j);
                store
                    .archive(&k, &payload(&k, 1, (shape.size)(1 + j)))
                    .unwrap();
            }
            store.flush().unwrap();
            say("reflushed 1");
            store.purge(&db_request(KEEP), true).unwrap();
            say("purged");
        }
        if step == 3 {
            store.wipe(&db_request(GONE), true).unwrap();
            say("wiped");
        }
    }
}

/// The lines of `text` that are the workload's acknowledgements.
pub fn said(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            ["opened", "flushed", "reflushed", "purged", "wiped"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(str::to_string)
        .collect()
}

/// Checks the store of a crash image after a run that said `said`; `extra` runs backend
/// checks (pmem: no free space over live fields) before the store is written to again.
///
/// # Panics
/// With a message starting with `what` when the image breaks the contract.
pub fn check_image(
    store: &mut Store,
    said: &[String],
    shape: Shape,
    what: &str,
    extra: &dyn Fn(&Store),
) {
    let has = |s: &str| said.iter().any(|l| l == s);
    let listed: BTreeMap<String, u32> = store
        .list(&Request::default())
        .unwrap_or_else(|e| panic!("{what}: list after power loss: {e}"))
        .iter()
        .map(|f| (f.key().to_string(), f.data.crc))
        .collect();
    let field = |store: &Store, k: &Key| -> Option<Vec<u8>> {
        store
            .retrieve_lent(k)
            .unwrap_or_else(|e| panic!("{what}: retrieve {k}: {e}"))
            .map(|(_, v)| v.to_vec())
    };
    // Each flush is all-or-nothing; an acknowledged one is whole.
    let check_flush = |db: &str, step: u32, acked: bool, gens: &[u8], first: u32| {
        let got: Vec<Option<u8>> = (0..PER_STEP)
            .map(|j| {
                let k = key(db, step, j);
                field(store, &k).map(|bytes| {
                    *gens
                        .iter()
                        .find(|g| bytes == payload(&k, **g, (shape.size)(first + j)))
                        .unwrap_or_else(|| panic!("{what}: {k} holds bytes of no generation"))
                })
            })
            .collect();
        if acked {
            assert!(
                got.iter().all(Option::is_some),
                "{what}: {db} step {step} acknowledged but {got:?}"
            );
        }
        let present = got.iter().filter(|g| g.is_some()).count();
        assert!(
            present == 0 || present == got.len(),
            "{what}: {db} step {step} half there: {got:?}"
        );
        got
    };
    // The database that is wiped: present for sure only until the wipe (which follows
    // "flushed 3") may have started.
    let gone = check_flush(GONE, 0, has("flushed gone") && !has("flushed 3"), &[0], 0);
    if has("wiped") {
        assert!(
            gone.iter().all(Option::is_none),
            "{what}: wiped but visible"
        );
    }
    for step in 0..STEPS {
        let acked = has(&format!("flushed {step}"));
        let gens: &[u8] = if step == 1 { &[0, 1] } else { &[0] };
        let got = check_flush(KEEP, step, acked, gens, step);
        if step == 1 && has("reflushed 1") {
            assert!(
                got.iter().all(|g| *g == Some(1)),
                "{what}: re-archive acknowledged but {got:?}"
            );
        }
        if !acked && step > 0 && !has(&format!("flushed {}", step - 1)) {
            assert!(
                got.iter().all(Option::is_none),
                "{what}: step {step} before step {}",
                step - 1
            );
        }
    }
    extra(store);
    // The store archives on, and what it held stays intact.
    for j in 0..PER_STEP {
        let k = key(MORE, 0, j);
        store.archive(&k, &payload(&k, 0, shape.more)).unwrap();
    }
    store
        .flush()
        .unwrap_or_else(|e| panic!("{what}: flush after power loss: {e}"));
    let after: BTreeMap<String, u32> = store
        .list(&Request::default())
        .unwrap()
        .iter()
        .filter(|f| !f.key().to_string().contains(&format!("expver={MORE}")))
        .map(|f| (f.key().to_string(), f.data.crc))
        .collect();
    assert_eq!(after, listed, "{what}: fields changed by a later archive");
    for j in 0..PER_STEP {
        let k = key(MORE, 0, j);
        assert_eq!(
            field(store, &k),
            Some(payload(&k, 0, shape.more)),
            "{what}: {k}"
        );
    }
}
