//! MARS request language: `Request::parse` and `parse_requests` on arbitrary (lossy UTF-8) text.
//!
//! Properties: no panic; a parsed request resolves against the built-in schema without
//! panicking, and expands (when it names at most 10 000 keys) to exactly `count()` keys;
//! the Display form of a request (parsed or resolved) parses back to the same request.
#![no_main]

use haar_core::{Context, Request, Schema, parse_requests};
use libfuzzer_sys::fuzz_target;

/// Larger expansions are skipped: they are correct but slow, and the fuzzer looks for panics.
const MAX_EXPAND: usize = 10_000;

fn reparses(r: &Request, what: &str) {
    let text = r.to_string();
    match Request::parse(&text) {
        Ok(back) => assert_eq!(
            &back, r,
            "{what} request does not round-trip through its Display form {text:?}"
        ),
        Err(e) => panic!("Display form {text:?} of a {what} request does not parse: {e}"),
    }
}

fn check(r: &Request, ctx: &Context) {
    reparses(r, "parsed");
    let Ok(resolved) = r.resolve(Schema::builtin(), ctx) else {
        return;
    };
    reparses(&resolved, "resolved");
    let n = resolved.count();
    if n <= MAX_EXPAND {
        let keys = resolved.expand();
        assert_eq!(keys.len(), n, "expand() and count() disagree");
        for k in keys.iter().take(16) {
            assert!(resolved.matches(k), "resolved request rejects its own key {k}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let ctx = Context::at(2026, 11, 21);
    if let Ok(r) = Request::parse(&text) {
        check(&r, &ctx);
    }
    if let Ok(all) = parse_requests(&text) {
        for r in all.iter().take(8) {
            check(r, &ctx);
        }
    }
});
