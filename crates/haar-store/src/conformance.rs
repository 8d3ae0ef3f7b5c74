//! The conformance suite every backend's tests run (`tests/conformance.rs`).
//!
//! Each check takes a factory that returns a *new handle* onto the same storage each time it
//! is called, so a check can play writer and reader with independent handles, as separate
//! processes would. Checks panic with a message on failure.
//!
//! Compiled only with the `testing` feature, as object_store gates its `integration` suite:
//! this crate's tests turn it on through their dev-dependency, as do haar-fs's power-loss test
//! and the fuzz targets; no shipped artifact carries it.

use std::sync::Arc;

use haar_core::Key;
use haar_core::request::Request;

use crate::backend::Backend;
use crate::store::{Store, StoreOptions};

pub mod power_loss;

/// Returns a fresh handle onto the storage under test.
pub type Factory<'a> = &'a dyn Fn() -> Arc<dyn Backend>;

/// A complete field key of the built-in schema (operational HRES-like, pressure levels).
pub fn field_key(date: &str, step: u32, level: u32, param: &str) -> Key {
    Key::parse(&format!(
        "class=od,expver=0001,stream=oper,date={date},time=1200,domain=g,type=fc,levtype=pl,\
         levelist={level},step={step},param={param}"
    ))
    .expect("valid key")
}

/// The database of round `r` of `writer` in trial `trial` of the space-reuse torture
/// (`haar-torture reuse`): its `expver`, 4 characters of base 36.
pub fn reuse_expver(trial: u32, writer: u32, r: u32) -> String {
    let mut n = (trial * 16 + writer) * 64 + r;
    let mut s = [b'0'; 4];
    for c in s.iter_mut().rev() {
        *c = b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize];
        n /= 36;
    }
    String::from_utf8(s.to_vec()).expect("ascii")
}

/// Field `i` of the space-reuse torture's database `expver`.
pub fn reuse_key(expver: &str, i: u32) -> Key {
    Key::parse(&format!(
        "class=od,expver={expver},stream=oper,date=20250101,time=1200,domain=g,type=fc,\
         levtype=pl,levelist={i},step=0,param=130"
    ))
    .expect("valid key")
}

/// Panics unless no free region of the pmem pool behind `b` overlaps another or any field
/// `store` still lists (the space-reuse invariant of design §5.4); `what` prefixes the message.
pub fn assert_no_free_space_over_live_fields(b: &crate::PmemBackend, store: &Store, what: &str) {
    let mut spans: Vec<(u64, u64, String)> = b
        .free_regions()
        .into_iter()
        .map(|(off, len, e)| (off, len, format!("free region (epoch {e})")))
        .collect();
    for f in store
        .list(&Request::default())
        .unwrap_or_else(|e| panic!("{what}: list: {e}"))
    {
        spans.push((f.data.offset, f.data.length, format!("field {}", f.key())));
    }
    spans.sort();
    for w in spans.windows(2) {
        assert!(
            w[0].0 + w[0].1 <= w[1].0,
            "{what}: {} at {}+{} overlaps {} at {}",
            w[0].2,
            w[0].0,
            w[0].1,
            w[1].2,
            w[1].0
        );
    }
}

/// Rewrites the header of the pool file at `pool` as layout `version` (1 or 2: written
/// before slot-array extensions, before space reuse), with the header checksum those versions
/// use, to test that older pools are still read and written.
pub fn set_pool_version(pool: &std::path::Path, version: u32) {
    let mut bytes = std::fs::read(pool).expect("read pool");
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    let mut covered = bytes[0..16].to_vec();
    covered.extend_from_slice(&bytes[24..32]);
    covered.extend_from_slice(&bytes[40..48]);
    let crc = haar_persist::crc32c(&covered);
    bytes[56..60].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(pool, &bytes).expect("write pool");
}

/// Deterministic field bytes for a key (distinct per key and generation).
pub fn payload(key: &Key, generation: u8, len: usize) -> Vec<u8> {
    // Seeded by the sorted key, so the schema's reordering of keywords does not matter.
    // The generation goes above bit 0, which `| 1` would erase (generations 0 and 1 once
    // gave the same bytes).
    let seed =
        crate::format::fnv1a64(key.sorted().to_string().as_bytes()) ^ (u64::from(generation) << 40);
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(b"GRIB");
    while v.len() < len.saturating_sub(4) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v.extend_from_slice(b"7777");
    v.truncate(len.max(8));
    v
}

fn store(f: Factory<'_>) -> Store {
    Store::with_options(f(), StoreOptions::default())
}

fn get(s: &Store, req: &str) -> (Vec<(Key, Vec<u8>)>, Vec<Key>) {
    let req = Request::parse(req).expect("valid request");
    let mut got = Vec::new();
    let rep = s
        .retrieve(&req, |k, b, _| {
            got.push((k.clone(), b.to_vec()));
            Ok(())
        })
        .expect("retrieve");
    (got, rep.missing)
}

fn req_for(key: &Key) -> String {
    key.to_string()
}

/// Runs every check.
pub fn run_all(f: Factory<'_>) {
    invisible_until_flush_then_visible_without_reopen(f);
    retrieve_order_and_missing(f);
    partial_combinations_get_every_agreeing_field(f);
    rearchive_masks_older(f);
    list_and_axes(f);
    wipe_partial_and_whole(f);
    wipe_refuses_unowned_files(f);
    purge_keeps_live_fields(f);
    concurrent_writers_same_database(f);
    hostile_values_round_trip(f);
    many_databases_and_sizes(f);
    retrieve_keys_lends_verified_bytes(f);
    discarded_fields_are_never_visible(f);
}

/// Nothing is visible before flush; after flush a reader that already looked sees it.
pub fn invisible_until_flush_then_visible_without_reopen(f: Factory<'_>) {
    let mut w = store(f);
    let r = store(f);
    let key = field_key("20260101", 0, 500, "130");
    let (got, missing) = get(&r, &req_for(&key));
    assert!(
        got.is_empty() && missing.len() == 1,
        "empty store returned data"
    );
    let data = payload(&key, 0, 1000);
    w.archive(&key, &data).unwrap();
    let (got, _) = get(&r, &req_for(&key));
    assert!(got.is_empty(), "field visible before flush");
    w.flush().unwrap();
    let (got, missing) = get(&r, &req_for(&key));
    assert!(
        missing.is_empty(),
        "flushed field missing for an existing reader"
    );
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, data, "bytes differ");
    let fresh = store(f);
    let (got, _) = get(&fresh, &req_for(&key));
    assert_eq!(got[0].1, data, "bytes differ for a new reader");
}

/// Fields come back in request-expansion order; missing combinations are listed.
pub fn retrieve_order_and_missing(f: Factory<'_>) {
    let mut w = store(f);
    let mut expect = Vec::new();
    for step in [0u32, 6, 12] {
        for param in ["130", "131"] {
            let k = field_key("20260102", step, 850, param);
            let d = payload(&k, 0, 300);
            w.archive(&k, &d).unwrap();
            expect.push((step, param, d));
        }
    }
    w.flush().unwrap();
    let r = store(f);
    let (got, missing) = get(
        &r,
        "class=od,expver=1,stream=oper,date=20260102,time=12,type=fc,levtype=pl,levelist=850,step=12/0/18,param=131/130",
    );
    let order: Vec<(String, String)> = got
        .iter()
        .map(|(k, _)| {
            (
                k.get("step").unwrap().to_string(),
                k.get("param").unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [("12", "131"), ("12", "130"), ("0", "131"), ("0", "130")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .to_vec(),
        "not in request order"
    );
    assert_eq!(
        missing.len(),
        2,
        "step 18 should be missing for both params: {missing:?}"
    );
    for (k, bytes) in &got {
        let step: u32 = k.get("step").unwrap().parse().unwrap();
        let param = k.get("param").unwrap();
        let want = &expect
            .iter()
            .find(|(s, p, _)| *s == step && *p == param)
            .unwrap()
            .2;
        assert_eq!(bytes, want, "bytes of {k}");
    }
}

/// A request that leaves keywords out (here `domain` and `levelist`) gets, for each of its
/// combinations in request order, every field that agrees with it, in key order; many
/// combinations over many fields (the indexed path) give the same as a few.
pub fn partial_combinations_get_every_agreeing_field(f: Factory<'_>) {
    let mut w = store(f);
    let steps: Vec<u32> = (0..300).collect();
    for &step in &steps {
        for level in [500, 850] {
            let k = field_key("20260109", step, level, "130");
            w.archive(&k, &payload(&k, 0, 64)).unwrap();
        }
    }
    w.flush().unwrap();
    let r = store(f);
    let (got, missing) = get(
        &r,
        "class=od,expver=1,stream=oper,date=20260109,time=12,type=fc,levtype=pl,step=6/0/400,param=130",
    );
    let order: Vec<(String, String)> = got
        .iter()
        .map(|(k, _)| {
            (
                k.get("step").unwrap().to_string(),
                k.get("levelist").unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [("6", "500"), ("6", "850"), ("0", "500"), ("0", "850")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .to_vec(),
        "not every agreeing field, or not in request then key order"
    );
    assert_eq!(missing.len(), 1, "step 400 is missing: {missing:?}");
    for (k, bytes) in &got {
        assert_eq!(bytes, &payload(k, 0, 64), "bytes of {k}");
    }
    let all = steps
        .iter()
        .rev()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join("/");
    let (got, missing) = get(
        &r,
        &format!(
            "class=od,expver=1,stream=oper,date=20260109,time=12,type=fc,levtype=pl,step={all},param=130"
        ),
    );
    assert!(missing.is_empty(), "{missing:?}");
    assert_eq!(got.len(), 600);
    for (i, (k, _)) in got.iter().enumerate() {
        let step = steps[steps.len() - 1 - i / 2].to_string();
        assert_eq!(k.get("step"), Some(step.as_str()), "field {i}: {k}");
        let level = if i % 2 == 0 { "500" } else { "850" };
        assert_eq!(k.get("levelist"), Some(level), "field {i}: {k}");
    }
}

/// Re-archiving a key masks the older field, across handles.
pub fn rearchive_masks_older(f: Factory<'_>) {
    let key = field_key("20260103", 0, 500, "130");
    let mut w1 = store(f);
    w1.archive(&key, &payload(&key, 1, 500)).unwrap();
    w1.flush().unwrap();
    let mut w2 = store(f);
    w2.archive(&key, &payload(&key, 2, 700)).unwrap();
    w2.flush().unwrap();
    let r = store(f);
    let (got, _) = get(&r, &req_for(&key));
    assert_eq!(got.len(), 1, "masked field returned too");
    assert_eq!(got[0].1, payload(&key, 2, 700), "older field not masked");
    let listed = r.list(&Request::parse(&req_for(&key)).unwrap()).unwrap();
    assert_eq!(listed.len(), 1);
    let stats = r.stats(&Request::parse("date=20260103").unwrap()).unwrap();
    assert_eq!(stats.iter().map(|s| s.dead_fields).sum::<u64>(), 1);
}

/// list filters by request; axes reports values per keyword.
pub fn list_and_axes(f: Factory<'_>) {
    let mut w = store(f);
    for level in [500u32, 850, 1000] {
        for param in ["130", "157"] {
            let k = field_key("20260104", 24, level, param);
            w.archive(&k, &payload(&k, 0, 100)).unwrap();
        }
    }
    w.flush().unwrap();
    let r = store(f);
    let all = r.list(&Request::parse("date=20260104").unwrap()).unwrap();
    assert_eq!(all.len(), 6);
    let some = r
        .list(&Request::parse("date=20260104,levelist=500/1000,param=157").unwrap())
        .unwrap();
    assert_eq!(some.len(), 2);
    let axes = r.axes(&Request::parse("date=20260104").unwrap()).unwrap();
    let levels: Vec<&str> = axes["levelist"].iter().map(String::as_str).collect();
    assert_eq!(levels, ["1000", "500", "850"]);
    assert_eq!(axes["param"].len(), 2);
}

/// A narrow wipe hides fields; a database-wide wipe removes the database.
pub fn wipe_partial_and_whole(f: Factory<'_>) {
    let mut w = store(f);
    for step in [0u32, 6] {
        let k = field_key("20260105", step, 500, "130");
        w.archive(&k, &payload(&k, 0, 100)).unwrap();
    }
    w.flush().unwrap();
    w.close_writers();
    let r = store(f);
    let dry = w
        .wipe(&Request::parse("date=20260105,step=6").unwrap(), false)
        .unwrap();
    assert_eq!(dry.fields, 1);
    assert_eq!(
        r.list(&Request::parse("date=20260105").unwrap())
            .unwrap()
            .len(),
        2,
        "dry run changed data"
    );
    w.wipe(&Request::parse("date=20260105,step=6").unwrap(), true)
        .unwrap();
    assert_eq!(
        r.list(&Request::parse("date=20260105").unwrap())
            .unwrap()
            .len(),
        1
    );
    let rep = w
        .wipe(
            &Request::parse("class=od,expver=1,stream=oper,date=20260105,time=12").unwrap(),
            true,
        )
        .unwrap();
    assert_eq!(rep.databases.len(), 1, "{rep:?}");
    assert_eq!(
        r.list(&Request::parse("date=20260105").unwrap())
            .unwrap()
            .len(),
        0
    );
    // The database can be used again after a wipe.
    let k = field_key("20260105", 0, 500, "130");
    w.archive(&k, &payload(&k, 9, 64)).unwrap();
    w.flush().unwrap();
    let (got, _) = get(&r, &req_for(&k));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, payload(&k, 9, 64));
}

/// A file haar did not write beside a database's catalogue makes a whole-database wipe with
/// `doit` fail naming it, removing nothing (FDB5's "Cannot fully wipe unclean FDB
/// database"); a narrow wipe and a dry run are unaffected; `wipe_unsafe_all` removes the
/// database and the file. Backends without a catalogue directory (memory) have no such file.
pub fn wipe_refuses_unowned_files(f: Factory<'_>) {
    let mut w = store(f);
    let k = field_key("20260106", 0, 500, "130");
    w.archive(&k, &payload(&k, 0, 100)).unwrap();
    w.flush().unwrap();
    w.close_writers();
    let db = Request::parse("class=od,expver=1,stream=oper,date=20260106,time=12").unwrap();
    let split = w.options().schema.split(&k, &w.options().context).unwrap();
    let Some(cat) = w.backend().catalogue_dir(&split.db).unwrap() else {
        assert!(w.unowned_files(&db).unwrap().is_empty());
        w.wipe(&db, true).unwrap();
        return;
    };
    std::fs::create_dir_all(&cat).unwrap();
    let foreign = cat.join("notes.txt");
    std::fs::write(&foreign, b"not haar's").unwrap();
    assert_eq!(w.unowned_files(&db).unwrap(), vec![foreign.clone()]);
    let dry = w.wipe(&db, false).unwrap();
    assert_eq!(dry.databases.len(), 1, "{dry:?}");
    let err = w.wipe(&db, true).unwrap_err().to_string();
    assert!(
        err.contains("unclean") && err.contains(&foreign.display().to_string()),
        "{err}"
    );
    assert!(foreign.exists(), "a refused wipe deleted the foreign file");
    let (got, _) = get(&store(f), &req_for(&k));
    assert_eq!(got.len(), 1, "a refused wipe removed the field");
    // A wipe narrower than the database deletes no file: not refused.
    let narrow = Request::parse("date=20260106,step=0,param=130,levelist=500").unwrap();
    assert_eq!(w.wipe(&narrow, true).unwrap().fields, 1);
    let rep = w.wipe_unsafe_all(&db, true).unwrap();
    assert_eq!(rep.databases.len(), 1, "{rep:?}");
    assert!(!foreign.exists(), "unsafe wipe-all left the foreign file");
    assert!(w.list(&db).unwrap().is_empty());
}

/// Purge drops masked fields and keeps every live field readable, for old and new readers.
pub fn purge_keeps_live_fields(f: Factory<'_>) {
    let mut w = store(f);
    let keys: Vec<Key> = (0..10)
        .map(|s| field_key("20260106", s, 500, "130"))
        .collect();
    for k in &keys {
        w.archive(k, &payload(k, 0, 2000)).unwrap();
    }
    w.flush().unwrap();
    for k in keys.iter().step_by(2) {
        w.archive(k, &payload(k, 1, 3000)).unwrap();
    }
    w.flush().unwrap();
    w.close_writers();
    let old_reader = store(f);
    let _ = get(&old_reader, &req_for(&keys[0]));
    let rep = w
        .purge(&Request::parse("date=20260106").unwrap(), true)
        .unwrap();
    assert_eq!(rep.dropped_fields, 5, "{rep:?}");
    for (i, k) in keys.iter().enumerate() {
        let want = if i % 2 == 0 {
            payload(k, 1, 3000)
        } else {
            payload(k, 0, 2000)
        };
        for r in [&old_reader, &store(f)] {
            let (got, missing) = get(r, &req_for(k));
            assert!(missing.is_empty(), "{k} missing after purge");
            assert_eq!(got[0].1, want, "{k} wrong after purge");
        }
    }
    let stats = store(f)
        .stats(&Request::parse("date=20260106").unwrap())
        .unwrap();
    assert_eq!(stats.iter().map(|s| s.dead_fields).sum::<u64>(), 0);
}

/// Several writers (threads with their own handles) into one database lose nothing.
pub fn concurrent_writers_same_database(f: Factory<'_>) {
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let b = f();
            s.spawn(move || {
                let mut w = Store::with_options(b, StoreOptions::default());
                for i in 0..25u32 {
                    let k = field_key("20260107", i, 100 + t, "130");
                    w.archive(&k, &payload(&k, 0, 257)).unwrap();
                    if i % 5 == 4 {
                        w.flush().unwrap();
                    }
                }
            });
        }
    });
    let r = store(f);
    let listed = r.list(&Request::parse("date=20260107").unwrap()).unwrap();
    assert_eq!(listed.len(), 100);
    let mut n = 0;
    r.retrieve(
        &Request::parse("date=20260107,param=130,step=all").unwrap(),
        |k, b, _| {
            assert!(b == payload(k, 0, 257), "bytes of {k} differ");
            n += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(n, 100);
}

/// Key values with `/`, `..`, NUL or 10 KB of text are stored and found again.
pub fn hostile_values_round_trip(f: Factory<'_>) {
    let long = "x".repeat(10_000);
    for class in ["../../etc", "/", "..", "a\0b", long.as_str(), ".hidden"] {
        let mut k = field_key("20260108", 0, 500, "130");
        k.push("class", class);
        let mut w = store(f);
        let data = payload(&k, 0, 99);
        w.archive(&k, &data).unwrap();
        w.flush().unwrap();
        let r = store(f);
        let listed = r.list(&Request::parse("date=20260108").unwrap()).unwrap();
        let hit: Vec<_> = listed
            .iter()
            .filter(|x| x.db.get("class") == Some(class))
            .collect();
        assert_eq!(
            hit.len(),
            1,
            "class {:?} not listed back",
            &class[..class.len().min(20)]
        );
    }
}

/// Many databases, sizes from 1 byte to 3 MiB.
pub fn many_databases_and_sizes(f: Factory<'_>) {
    let mut w = store(f);
    let sizes = [
        1usize,
        63,
        64,
        65,
        4095,
        4097,
        65_536,
        824 * 1024,
        3 * 1024 * 1024 + 7,
    ];
    let mut keys = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let k = field_key(&format!("202602{:02}", i + 1), 0, 500, "130");
        w.archive(&k, &payload(&k, 3, n)).unwrap();
        keys.push((k, n));
    }
    w.flush().unwrap();
    let r = store(f);
    for (k, n) in keys {
        let (got, _) = get(&r, &req_for(&k));
        assert_eq!(got.len(), 1, "{k}");
        assert_eq!(got[0].1, payload(&k, 3, n), "{k} ({n} bytes)");
    }
}

/// `retrieve_keys` hands the sink exactly the flushed bytes (lent or owned) with their
/// CRC-32C, in the order of the keys, reports missing keys, and the sink may call back into
/// the store.
pub fn retrieve_keys_lends_verified_bytes(f: Factory<'_>) {
    let mut w = store(f);
    let keys: Vec<Key> = (0..3)
        .map(|i| field_key("20260505", i, 850, "130"))
        .collect();
    for (i, k) in keys.iter().enumerate() {
        w.archive(k, &payload(k, 0, 1 << (10 + 4 * i))).unwrap();
    }
    w.flush().unwrap();
    let r = store(f);
    let missing = field_key("20260505", 99, 850, "130");
    let mut asked = keys.clone();
    asked.insert(1, missing.clone());
    let mut got = Vec::new();
    let report = r
        .retrieve_keys(&asked, |k, b, crc| {
            assert_eq!(
                crc,
                crc32c::crc32c(b),
                "crc handed with {k} is not the bytes'"
            );
            got.push((k.clone(), b.to_vec()));
            Ok(())
        })
        .unwrap();
    assert_eq!(report.found, keys.len());
    assert_eq!(report.missing, vec![missing]);
    assert_eq!(got.len(), keys.len());
    for (i, (k, (gk, gb))) in keys.iter().zip(&got).enumerate() {
        assert_eq!(gk, &r.split(k).unwrap().full(), "order or key differs");
        assert_eq!(
            gb,
            &payload(k, 0, 1 << (10 + 4 * i)),
            "bytes differ for {k}"
        );
    }
    // The sink runs outside the store's locks: calling back in must not deadlock.
    let mut listed = 0;
    r.retrieve_keys(&keys[..1], |_, _, _| {
        listed = r.list(&Request::parse("date=20260505").unwrap())?.len();
        Ok(())
    })
    .unwrap();
    assert_eq!(listed, keys.len());
}

/// Fields archived after a checkpoint and discarded never become visible, in a database that
/// also holds fields from before the checkpoint (they flush as usual), in one first written
/// after it, and in one flushed in between (its flushed fields stay). A reader that looked
/// before reads the same as a fresh one.
pub fn discarded_fields_are_never_visible(f: Factory<'_>) {
    let mut w = store(f);
    let r = store(f);
    let kept = field_key("20260301", 0, 500, "130");
    let flushed = field_key("20260302", 0, 500, "130");
    w.archive(&kept, &payload(&kept, 0, 3000)).unwrap();
    w.archive(&flushed, &payload(&flushed, 0, 3000)).unwrap();
    w.flush().unwrap();
    let kept2 = field_key("20260301", 6, 500, "130");
    w.archive(&kept2, &payload(&kept2, 0, 2000)).unwrap();
    let _ = get(&r, &req_for(&kept2));
    let cp = w.checkpoint();
    let same_db = field_key("20260301", 12, 500, "130");
    let masking = kept.clone();
    let new_db = field_key("20260303", 0, 500, "130");
    let after_flush = field_key("20260302", 6, 500, "130");
    w.archive(&same_db, &payload(&same_db, 1, 2500)).unwrap();
    w.archive(&masking, &payload(&masking, 1, 2500)).unwrap();
    w.archive(&new_db, &payload(&new_db, 1, 2500)).unwrap();
    w.archive(&after_flush, &payload(&after_flush, 1, 2500))
        .unwrap();
    assert_eq!(w.discard_since(&cp), 4, "fields discarded");
    assert_eq!(w.unflushed(), 1, "the field archived before the checkpoint");
    w.flush().unwrap();
    for reader in [&r, &store(f)] {
        for (key, generation) in [(&kept, 0), (&kept2, 0), (&flushed, 0)] {
            let (got, missing) = get(reader, &req_for(key));
            assert!(missing.is_empty(), "{key} missing");
            assert_eq!(
                got[0].1,
                payload(key, generation, got[0].1.len()),
                "{key} bytes"
            );
        }
        for key in [&same_db, &new_db, &after_flush] {
            let (got, _) = get(reader, &req_for(key));
            assert!(got.is_empty(), "discarded field {key} is visible");
        }
    }
    // The store goes on archiving after a discard.
    w.archive(&same_db, &payload(&same_db, 2, 1000)).unwrap();
    w.flush().unwrap();
    let (got, _) = get(&store(f), &req_for(&same_db));
    assert_eq!(got[0].1, payload(&same_db, 2, 1000));
}
