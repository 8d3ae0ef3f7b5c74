//! `include/haar.h` is what cbindgen generates from `src/haar_api/` with `cbindgen.toml`:
//! this test regenerates it and fails when the checked-in header is stale (with
//! `HAAR_BLESS=1` it rewrites the header instead).

use std::path::Path;

#[test]
fn the_checked_in_header_is_what_cbindgen_generates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let api = dir.join("src/haar_api");
    // cbindgen follows the `mod` declarations of mod.rs, in their order.
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(api.join("mod.rs"))
        .generate()
        .expect("cbindgen generates haar.h");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = dir.join("include/haar.h");
    if std::env::var_os("HAAR_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/haar.h");
        return;
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(
        current == fresh,
        "include/haar.h is stale (the C API in src/haar_api/ changed): run `HAAR_BLESS=1 cargo test -p haar-c --test header` and commit the header"
    );
}
