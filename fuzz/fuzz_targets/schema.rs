//! FDB5 schema language: `Schema::parse` on arbitrary (lossy UTF-8) text; a schema that parses
//! must split a fixed field key (and an empty key) without panicking.
#![no_main]

use std::sync::OnceLock;

use haar_core::{Context, Key, Schema};
use libfuzzer_sys::fuzz_target;

fn field() -> &'static Key {
    static FIELD: OnceLock<Key> = OnceLock::new();
    FIELD.get_or_init(|| {
        Key::parse(
            "class=od,expver=1,stream=oper,date=20240229,time=12,domain=g,\
             type=fc,levtype=pl,step=6,levelist=500.0,param=130",
        )
        .expect("fixed key parses")
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(schema) = Schema::parse(&text) else {
        return;
    };
    let ctx = Context::at(2026, 11, 21);
    let _ = schema.keywords();
    if let Ok(split) = schema.split(field(), &ctx) {
        let _ = split.to_string();
        let _ = split.full();
    }
    let _ = schema.split(&Key::new(), &ctx);
});
