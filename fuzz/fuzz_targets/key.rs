//! `Key::parse` on arbitrary (lossy UTF-8) text: no panic; printing a parsed key does not
//! panic either, and parsing is idempotent on keys whose values hold no ','.
#![no_main]

use haar_core::Key;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(key) = Key::parse(&text) else {
        return;
    };
    let printed = key.to_string();
    let _ = key.braced();
    let _ = key.sorted();
    if key.iter().all(|(_, v)| !v.contains(',')) {
        let back = Key::parse(&printed)
            .unwrap_or_else(|e| panic!("printed key {printed:?} does not parse: {e}"));
        assert_eq!(back, key, "key does not round-trip through {printed:?}");
    }
});
