//! Regression: `Store::archive` (which reuses the last split when only free values change)
//! stores every field under exactly the keys `Store::split` gives, and rejects exactly the
//! keys `Store::split` rejects, with the same message, whatever came before.

use std::collections::BTreeSet;

use haar_core::{Key, Request};
use haar_store::{MemoryBackend, Store};

fn key(levelist: &str, step: &str, param: &str, levtype: &str) -> Key {
    Key::parse(&format!(
        "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,\
         levtype={levtype},levelist={levelist},step={step},param={param}"
    ))
    .unwrap()
}

#[test]
fn archive_splits_as_split_does() {
    let mut store = Store::new(MemoryBackend::new());
    let mut want = BTreeSet::new();
    let mut n = 0;
    for i in 0..400usize {
        // Mostly datum values changing; sometimes a rejected value, an empty one, a changed
        // index keyword (levtype) or a different keyword set.
        let levelist = match i % 37 {
            5 => "x".to_string(),
            9 => String::new(),
            _ => (i % 50 + 1).to_string(),
        };
        let levtype = if i % 23 == 0 { "sfc" } else { "pl" };
        let mut k = key(
            &levelist,
            &(i / 50).to_string(),
            ["130", "0130", "t"][i % 3],
            levtype,
        );
        if i % 41 == 0 {
            k.push("number", "1");
        }
        let split = store.split(&k);
        let got = store.archive(&k, format!("field {i}").as_bytes());
        match (&split, &got) {
            (Ok(s), Ok(())) => {
                if want.insert(s.full()) {
                    n += 1;
                }
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{k}"),
            _ => panic!("{k}: split {split:?}, archive {got:?}"),
        }
        if i % 100 == 99 {
            store.flush().unwrap();
        }
    }
    store.flush().unwrap();
    let listed: BTreeSet<Key> = store
        .list(&Request::parse("class=od").unwrap())
        .unwrap()
        .iter()
        .map(|f| f.key())
        .collect();
    assert_eq!(listed, want);
    assert!(n > 200, "{n}");
}
