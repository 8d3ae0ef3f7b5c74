//! Where the C and Fortran tests find the library they link: shared by `c_api.rs` and
//! `fortran.rs`.

use std::path::PathBuf;

/// The target profile directory (`.../release`) the test runs from.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// The directory holding the newest `libhaar_c.so`: `deps/`, where `cargo test` leaves the
/// cdylib it builds for these tests, or the profile directory after a later `cargo build`.
pub fn lib_dir() -> PathBuf {
    let dir = profile_dir();
    [dir.clone(), dir.join("deps")]
        .into_iter()
        .filter(|d| d.join("libhaar_c.so").is_file())
        .max_by_key(|d| {
            d.join("libhaar_c.so")
                .metadata()
                .and_then(|m| m.modified())
                .ok()
        })
        .unwrap_or_else(|| {
            panic!(
                "{}/libhaar_c.so is missing: run `cargo build --release -p haar-c` first",
                dir.display()
            )
        })
}
