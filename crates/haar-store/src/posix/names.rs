//! Names in a posix database directory (design §4.1): which files are haar's, the data file
//! of each index, and the file that holds a data object in either layout.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use haar_core::Key;

use crate::error::{Error, Result};
use crate::format;

/// Whether `name` is a file haar writes directly in a posix database directory (§4.1):
/// `db.key`, `toc`, `lock`, a writer's `.data` and `.index`, a purge's temporary `toc`.
pub(super) fn is_database_file(name: &str) -> bool {
    if ["db.key", "toc", "lock"].contains(&name) {
        return true;
    }
    if name
        .strip_prefix(".toc-")
        .is_some_and(crate::catalogue::manifest::is_id)
    {
        return true;
    }
    data_object(name).is_some()
        || name
            .strip_suffix(".index")
            .is_some_and(crate::catalogue::manifest::is_id)
}

/// The stem of the name of a writer's data file for `index` (design §4.1, "Data files per
/// index"): the index values percent-encoded as a database's directory name is, but with `.`
/// always encoded, so that the file's name has exactly two dots, and cut shorter.
pub(super) fn index_stem(index: &Key) -> String {
    format::key_values_name(index, &format::INDEX_STEM)
}

/// The data object a file name holds, in either layout (design §4.1): `<object>.data`
/// (version 1) or `<index>.<object>.data` (version 2, `<index>` without a dot). FDB5's data
/// files (`<index>.<time>.<host>.<pid>….data`) are neither.
pub(super) fn data_object(name: &str) -> Option<u64> {
    let base = name.strip_suffix(".data")?;
    let id = match base.rsplit_once('.') {
        None => base,
        Some((stem, id)) if !stem.is_empty() && !stem.contains('.') => id,
        Some(_) => return None,
    };
    crate::catalogue::manifest::is_id(id)
        .then(|| u64::from_str_radix(id, 16).ok())
        .flatten()
}

/// Every data file in `dir`, by object.
pub(super) fn data_files(dir: &Path) -> io::Result<HashMap<u64, PathBuf>> {
    let mut out = HashMap::new();
    for ent in fs::read_dir(dir)? {
        let ent = ent?;
        if let Some(id) = data_object(&ent.file_name().to_string_lossy()) {
            out.insert(id, ent.path());
        }
    }
    Ok(out)
}

/// The file holding `object` in the database directory `dir`: its version 1 name if that
/// exists, else found by one listing of the directory (design §4.1).
pub(super) fn find_data_file(dir: &Path, object: u64) -> io::Result<PathBuf> {
    let v1 = dir.join(format!("{object:016x}.data"));
    if fs::symlink_metadata(&v1).is_ok() {
        return Ok(v1);
    }
    data_files(dir)?.remove(&object).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no data file of object {object:016x} in {}", dir.display()),
        )
    })
}

/// Object → data file per database directory, for listings that give each field's path
/// (`Backend::data_path`): one directory listing per miss, not one per field.
#[derive(Debug, Default)]
pub(super) struct DataFileNames(Mutex<HashMap<PathBuf, HashMap<u64, PathBuf>>>);

impl DataFileNames {
    pub(super) fn path(&self, dir: &Path, object: u64) -> io::Result<PathBuf> {
        if let Some(p) = self.0.lock().unwrap().get(dir).and_then(|m| m.get(&object)) {
            return Ok(p.clone());
        }
        let v1 = dir.join(format!("{object:016x}.data"));
        if fs::symlink_metadata(&v1).is_ok() {
            return Ok(v1);
        }
        let files = data_files(dir)?;
        let found = files.get(&object).cloned();
        self.0.lock().unwrap().insert(dir.to_path_buf(), files);
        found.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no data file of object {object:016x} in {}", dir.display()),
            )
        })
    }
}

/// The entries of a catalogue directory (§3.1) that haar did not write.
pub(crate) fn unowned_in_catalogue(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| Error::io("list", dir, e))?;
        let name = ent.file_name();
        if ent.file_type().is_ok_and(|t| t.is_dir())
            || !crate::catalogue::manifest::is_catalogue_file(&name.to_string_lossy())
        {
            out.push(ent.path());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(values: &[&str]) -> Key {
        values
            .iter()
            .enumerate()
            .fold(Key::new(), |k, (i, v)| k.with(format!("k{i}"), *v))
    }

    /// Both names built from key values are on-disk formats (design §4.1): a database
    /// directory a later haar cannot find, or a data file a wipe takes for FDB5's, loses data.
    /// Every byte is pinned here, each row side by side so the rules where the two differ (a
    /// `.`, the length at which a name is cut) show.
    #[test]
    fn db_dir_name_and_index_stem_are_pinned() {
        let rows: &[(&[&str], &str, &str)] = &[
            // Empty key, empty values.
            (&[], "%", "%"),
            (&[""], "%", "%"),
            (&["", ""], "%:%", "%:%"),
            // `.`: a directory keeps one that is not the name's first byte; a stem never does.
            (&["."], "%2E", "%2E"),
            (&[".."], "%2E.", "%2E%2E"),
            (&[".x"], "%2Ex", "%2Ex"),
            (&["a.b"], "a.b", "a%2Eb"),
            (&["", ".x"], "%:.x", "%:%2Ex"),
            (&["od", ".."], "od:..", "od:%2E%2E"),
            (&["..", "x"], "%2E.:x", "%2E%2E:x"),
            // Separators and the escape character itself.
            (&["/"], "%2F", "%2F"),
            (&["a/b"], "a%2Fb", "a%2Fb"),
            (&["a:b"], "a%3Ab", "a%3Ab"),
            (&["%"], "%25", "%25"),
            (&["100%"], "100%25", "100%25"),
            (&["%41"], "%2541", "%2541"),
            (&["A~z"], "A%7Ez", "A%7Ez"),
            (&[" ", "\0"], "%20:%00", "%20:%00"),
            // Kept as they are.
            (&["-_+"], "-_+", "-_+"),
            (&["od", "0001"], "od:0001", "od:0001"),
            // Non-ASCII: each UTF-8 byte, upper-case hex.
            (&["é"], "%C3%A9", "%C3%A9"),
            (
                &["naïve", "\u{1F600}"],
                "na%C3%AFve:%F0%9F%98%80",
                "na%C3%AFve:%F0%9F%98%80",
            ),
        ];
        for (values, dir, stem) in rows {
            let k = key(values);
            assert_eq!(format::db_dir_name(&k), *dir, "db_dir_name of {values:?}");
            assert_eq!(index_stem(&k), *stem, "index_stem of {values:?}");
        }
    }

    /// At and around each cut: a directory name over 180 bytes keeps 160, a stem over 160
    /// keeps 140, both then `~` and the FNV-1a hash of the whole uncut name; a cut may split a
    /// `%XX`.
    #[test]
    fn long_names_are_cut_as_pinned() {
        let a = |n| "a".repeat(n);
        let b = |n| "b".repeat(n);
        let e_dir = format!("{}%~283e198ab1d2629f", "%C3%A9".repeat(26) + "%C3");
        let e_stem = format!("{}%C~283e198ab1d2629f", "%C3%A9".repeat(23));
        let rows: Vec<(Vec<String>, String, String)> = vec![
            (vec![a(180)], a(180), format!("{}~ea76a98e81701c49", a(140))),
            (
                vec![a(181)],
                format!("{}~d7be4525f17fd7f8", a(160)),
                format!("{}~d7be4525f17fd7f8", a(140)),
            ),
            (vec![b(160)], b(160), b(160)),
            (vec![b(161)], b(161), format!("{}~1a9bc60f139551a5", b(140))),
            (vec!["é".repeat(31)], e_dir, e_stem),
            (
                vec![".".repeat(70)],
                format!("%2E{}", ".".repeat(69)),
                format!("{}%2~adfcc7df021b58c5", "%2E".repeat(46)),
            ),
            (
                vec!["x".repeat(100), "y".repeat(100)],
                format!("{}:{}~644f784f2afe4a21", "x".repeat(100), "y".repeat(59)),
                format!("{}:{}~644f784f2afe4a21", "x".repeat(100), "y".repeat(39)),
            ),
        ];
        for (values, dir, stem) in rows {
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            let k = key(&values);
            assert_eq!(format::db_dir_name(&k), dir, "db_dir_name of {values:?}");
            assert_eq!(index_stem(&k), stem, "index_stem of {values:?}");
        }
    }
}
