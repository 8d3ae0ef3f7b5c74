//! Link the system ecCodes library (C API; Debian/Ubuntu `libeccodes-dev`,
//! tested with 2.28). No bindgen: the few declarations live in `src/ffi.rs`.
//!
//! `ECCODES_DIR` may point at a non-system install (its `lib/` or `lib64/` is
//! added to the search path); otherwise the linker's default paths are used.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ECCODES_DIR");
    if let Ok(dir) = std::env::var("ECCODES_DIR") {
        for sub in ["lib", "lib64"] {
            let p = std::path::Path::new(&dir).join(sub);
            if p.is_dir() {
                println!("cargo:rustc-link-search=native={}", p.display());
            }
        }
    }
    println!("cargo:rustc-link-lib=dylib=eccodes");
}
