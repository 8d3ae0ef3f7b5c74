//! Reading the files of a `root` that stands for `/`: every reader of this module goes
//! through these two, which is what lets the tests point it at a fake `/sys` and `/proc`.
//!
//! Read only; parses nothing.

use std::path::Path;

pub(super) fn read(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel.trim_start_matches('/'))).ok()
}

pub(super) fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
