//! A cache of ecCodes' `paramId`, exact by construction.
//!
//! `paramId` is an ecCodes *concept*: to read it, ecCodes compares the message with every entry
//! of its parameter tables (`paramId.def` files, tens of thousands of conditions such as
//! `discipline = 0 ; parameterNumber = 0 ;`) and returns the best match. That is most of the
//! cost of [`crate::mars_keys`], while the answer repeats: every member and step of an
//! ensemble has the same parameter.
//!
//! The answer of a concept depends only on which table files ecCodes reads (chosen by the
//! edition, the `centre` and `preferLocalConcepts`) and on the values of the keys its
//! conditions name. At first use this module reads every `paramId*.def` file under ecCodes'
//! definition path (`codes_definition_path`) and collects, per edition, the names of all keys
//! that appear in a condition (about 40 per edition) and how ecCodes compares them (as an
//! integer or as text). A message's *signature* is its edition, centre, `preferLocalConcepts`
//! and the value (or error code) of each of those keys, read the way ecCodes compares them;
//! two messages with the same signature get the same `paramId`, so a hit returns the stored
//! answer and a miss asks ecCodes and stores it. Reading the signature costs one key lookup
//! per key instead of one per condition.
//!
//! Anything this module cannot read with certainty turns the cache off for that edition (no
//! definition files found, a condition whose right-hand side is neither an integer,
//! `missing()` nor a quoted string): then every call asks ecCodes, as before. Errors are never
//! cached. This module must not decide anything else about keys.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::ffi::{CodesError, Handle};

/// Signatures kept at most; the map is cleared when full (a run rarely has more than a few
/// hundred parameter and level combinations).
const CAPACITY: usize = 8192;

/// How ecCodes compares a key in a concept condition: `grib_get_long` against an integer
/// (also `missing()`), `grib_get_string` against a quoted string.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compare {
    pub(crate) long: bool,
    pub(crate) text: bool,
}

/// The condition keys of one edition's parameter tables, in name order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Conditions {
    pub(crate) keys: Vec<(String, Compare)>,
}

/// Why a table cannot be used for the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsupported(pub(crate) String);

/// Adds the condition keys of one concept file's text to `into`.
///
/// The format (`definitions/grib2/paramId.def`): `'130' = { discipline = 0 ; ... }` entries,
/// `#` comments. A condition whose right-hand side is not an integer, `missing()` or a quoted
/// string is [`Unsupported`].
pub(crate) fn parse_conditions(
    text: &str,
    into: &mut BTreeMap<String, Compare>,
) -> Result<(), Unsupported> {
    // One condition per line (a condition split over lines is reported, turning the cache
    // off); comments start at '#', which no value here contains.
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        for piece in line.split([';', '{', '}']) {
            let Some((lhs, rhs)) = piece.split_once('=') else {
                if piece.trim().is_empty() {
                    continue;
                }
                return Err(Unsupported(format!("unexpected text {:?}", piece.trim())));
            };
            let (lhs, rhs) = (lhs.trim(), rhs.trim());
            if lhs.starts_with('\'') || lhs.starts_with('"') {
                continue; // an entry's name: `'130' =`
            }
            if lhs.is_empty() || !lhs.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(Unsupported(format!("condition key {lhs:?}")));
            }
            let integer = {
                let digits = rhs.strip_prefix('-').unwrap_or(rhs);
                !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
            };
            let c = match into.get_mut(lhs) {
                Some(c) => c,
                None => into.entry(lhs.to_owned()).or_default(),
            };
            if integer || rhs == "missing()" || rhs.replace(' ', "") == "missing()" {
                c.long = true;
            } else if rhs.len() >= 2 && rhs.starts_with('"') && rhs.ends_with('"') {
                c.text = true;
            } else {
                return Err(Unsupported(format!("condition {lhs} = {rhs}")));
            }
        }
    }
    Ok(())
}

/// The `paramId*.def` files of one edition's tree: `grib<N>/` itself and each
/// `grib<N>/localConcepts/<centre>/`, the only places ecCodes' `paramId` concepts read from
/// (`conceptsMasterDir`, `conceptsLocalDirAll`, `conceptsLocalDirECMF` in `section.1.def`).
fn concept_files(edition_dir: &Path, out: &mut Vec<PathBuf>) {
    let is_table = |p: &Path| {
        p.file_name().is_some_and(|n| {
            let n = n.to_string_lossy();
            n.starts_with("paramId") && n.ends_with(".def")
        })
    };
    let files_in = |dir: &Path, out: &mut Vec<PathBuf>| {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| !t.is_dir()) && is_table(&e.path()) {
                out.push(e.path());
            }
        }
    };
    files_in(edition_dir, out);
    for e in std::fs::read_dir(edition_dir.join("localConcepts"))
        .into_iter()
        .flatten()
        .flatten()
    {
        files_in(&e.path(), out);
    }
}

/// The condition keys of every `paramId*.def` under `<root>/grib<edition>/` of each root, or
/// why there are none usable.
pub(crate) fn edition_conditions(
    roots: &[PathBuf],
    edition: u8,
) -> Result<Conditions, Unsupported> {
    let mut files = Vec::new();
    for root in roots {
        concept_files(&root.join(format!("grib{edition}")), &mut files);
    }
    if files.is_empty() {
        return Err(Unsupported(format!(
            "no grib{edition} paramId tables found"
        )));
    }
    let mut keys = BTreeMap::new();
    for f in &files {
        let text =
            std::fs::read_to_string(f).map_err(|e| Unsupported(format!("{}: {e}", f.display())))?;
        parse_conditions(&text, &mut keys)
            .map_err(|Unsupported(why)| Unsupported(format!("{}: {why}", f.display())))?;
    }
    Ok(Conditions {
        keys: keys.into_iter().collect(),
    })
}

/// The process-wide cache (ecCodes' definitions do not change while it runs).
pub(crate) struct ParamIdCache {
    /// Editions 1 and 2; `None`: not cached.
    editions: [Option<Conditions>; 2],
    seen: Mutex<HashMap<String, String>>,
}

impl ParamIdCache {
    pub(crate) fn global() -> &'static ParamIdCache {
        static CACHE: OnceLock<ParamIdCache> = OnceLock::new();
        CACHE.get_or_init(|| {
            let roots = crate::ffi::definition_path();
            ParamIdCache {
                editions: [1, 2].map(|e| edition_conditions(&roots, e).ok()),
                seen: Mutex::new(HashMap::new()),
            }
        })
    }

    /// Whether messages of `edition` are cached (false: every call asks ecCodes).
    #[cfg(test)]
    pub(crate) fn enabled(&self, edition: u8) -> bool {
        self.conditions(edition).is_some()
    }

    fn conditions(&self, edition: u8) -> Option<&Conditions> {
        match edition {
            1 | 2 => self.editions[usize::from(edition - 1)].as_ref(),
            _ => None,
        }
    }

    /// `paramId` of the message in `h` (of GRIB `edition`) as ecCodes' string, from the cache
    /// when a message with the same signature was seen.
    pub(crate) fn param_id(&self, h: &Handle<'_>, edition: u8) -> Result<String, CodesError> {
        let Some(conditions) = self.conditions(edition) else {
            return h.get_string("paramId");
        };
        let signature = signature(h, edition, conditions);
        if let Some(v) = self.seen.lock().unwrap().get(&signature) {
            return Ok(v.clone());
        }
        let v = h.get_string("paramId")?;
        let mut seen = self.seen.lock().unwrap();
        if seen.len() >= CAPACITY {
            seen.clear();
        }
        seen.insert(signature, v.clone());
        Ok(v)
    }
}

/// Everything a `paramId` concept evaluation reads, as text: values, or `!code` for errors.
fn signature(h: &Handle<'_>, edition: u8, conditions: &Conditions) -> String {
    use std::fmt::Write;
    const SEP: char = '\u{1f}';
    let mut s = String::with_capacity(16 * conditions.keys.len());
    let _ = write!(s, "{edition}");
    let text = |s: &mut String, key: &str| {
        s.push(SEP);
        match h.get_string(key) {
            Ok(v) => s.push_str(&v),
            Err(e) => {
                let _ = write!(s, "!{}", e.code);
            }
        }
    };
    text(&mut s, "centre");
    for (key, how) in &conditions.keys {
        if how.long {
            s.push(SEP);
            match h.get_long(key) {
                Ok(v) => {
                    let _ = write!(s, "{v}");
                }
                Err(e) => {
                    let _ = write!(s, "!{}", e.code);
                }
            }
        }
        if how.text {
            text(&mut s, key);
        }
    }
    s.push(SEP);
    match h.get_long("preferLocalConcepts") {
        Ok(v) => {
            let _ = write!(s, "{v}");
        }
        Err(e) => {
            let _ = write!(s, "!{}", e.code);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_collected_with_their_comparison() {
        let text = "# Temperature\n'130' = {\n\t discipline = 0 ;\n\t parameterNumber = 0 ;\n}\n\
                    #Total precipitation\n'228' = {\n discipline = 0 ; stepType = \"accum\" ;\n\
                    scaledValueOfSecondFixedSurface = missing() ; level = -1 ;\n}\n";
        let mut keys = BTreeMap::new();
        parse_conditions(text, &mut keys).unwrap();
        let long = Compare {
            long: true,
            text: false,
        };
        assert_eq!(keys["discipline"], long);
        assert_eq!(keys["parameterNumber"], long);
        assert_eq!(keys["scaledValueOfSecondFixedSurface"], long);
        assert_eq!(keys["level"], long);
        assert_eq!(
            keys["stepType"],
            Compare {
                long: false,
                text: true
            }
        );
        assert_eq!(keys.len(), 5);
    }

    #[test]
    fn anything_else_turns_the_cache_off() {
        for text in [
            "'1' = { level = 0.5 ; }",
            "'1' = { level = [1, 2] ; }",
            "'1' = { level = other ; }",
            "'1' = { a b = 1 ; }",
            "'1' = { stray ; }",
        ] {
            assert!(
                parse_conditions(text, &mut BTreeMap::new()).is_err(),
                "{text}"
            );
        }
    }

    #[test]
    fn installed_tables_are_usable() {
        // Debian's ecCodes 2.28 definitions: both editions cached, the usual keys present.
        let cache = ParamIdCache::global();
        for edition in [1, 2] {
            assert!(cache.enabled(edition), "edition {edition} not cached");
        }
        let g2 = cache.conditions(2).unwrap();
        for key in [
            "discipline",
            "parameterCategory",
            "parameterNumber",
            "stepType",
        ] {
            assert!(g2.keys.iter().any(|(k, _)| k == key), "{key}");
        }
        let g1 = cache.conditions(1).unwrap();
        for key in ["table2Version", "indicatorOfParameter"] {
            assert!(g1.keys.iter().any(|(k, _)| k == key), "{key}");
        }
    }
}
