//! Parameter names and numbers: `t`, `2t`, `130`, `130.128`, `167.228` → paramId.
//!
//! ecCodes' own definition files are the source of truth for names: `paramId.def` and
//! `shortName.def` list the same blocks (same GRIB key conditions, same order), one giving the
//! paramId and the other the shortName, so zipping them block by block yields the name → paramId
//! map ([`ParamTable::add_definitions`] checks that the blocks really agree). The parsing is pure;
//! [`load_default`] is the one function of this crate that reads files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::value::{Context, ValueError};

/// Name ↔ paramId map built from ecCodes definitions. Names are case-insensitive; when a name
/// maps to several paramIds, the first definition added wins (ECMWF's local concepts are added
/// first by [`load_default`], so `tp` is 228 and not WMO's 228228).
#[derive(Clone, Debug, Default)]
pub struct ParamTable {
    by_name: BTreeMap<String, u64>,
    by_id: BTreeMap<u64, String>,
}

/// Why the definition files could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParamTableError {
    /// `paramId.def` and `shortName.def` do not list the same blocks.
    #[error(
        "{source_name}: paramId.def has {ids} blocks and shortName.def {names}, or block {block} \
         differs; the two files must come from the same ecCodes release"
    )]
    Mismatch {
        /// Which pair of files (e.g. `grib2/localConcepts/ecmf`).
        source_name: String,
        /// Blocks in paramId.def.
        ids: usize,
        /// Blocks in shortName.def.
        names: usize,
        /// Index of the first differing block.
        block: usize,
    },
    /// A definition file could not be read.
    #[error("cannot read ecCodes definition file {path}: {source}; set ECCODES_DEFINITION_PATH")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No definition file was found at all.
    #[error(
        "no ecCodes parameter definitions under {0}: install ecCodes (libeccodes-data) or set \
         ECCODES_DEFINITION_PATH"
    )]
    NotFound(PathBuf),
}

/// One `'name' = { body }` block of a concept file.
fn blocks(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('\'') {
        // Blocks start at the beginning of a line; quotes inside comments are skipped.
        let line_start = rest[..start].rfind('\n').map_or(0, |i| i + 1);
        if !rest[line_start..start].trim().is_empty() {
            rest = &rest[start + 1..];
            continue;
        }
        let after = &rest[start + 1..];
        let Some(end) = after.find('\'') else { break };
        let name = &after[..end];
        let tail = &after[end + 1..];
        let Some(open) = tail.find('{') else { break };
        if !tail[..open].trim().starts_with('=') {
            rest = tail;
            continue;
        }
        let Some(close) = tail[open..].find('}') else {
            break;
        };
        out.push((name, tail[open + 1..open + close].trim()));
        rest = &tail[open + close + 1..];
    }
    out
}

impl ParamTable {
    /// An empty table.
    pub fn new() -> ParamTable {
        ParamTable::default()
    }

    /// Adds one pair of ecCodes concept files given as text (`paramId.def`, `shortName.def`).
    /// `source_name` only labels errors.
    pub fn add_definitions(
        &mut self,
        source_name: &str,
        param_id_def: &str,
        short_name_def: &str,
    ) -> Result<(), ParamTableError> {
        let ids = blocks(param_id_def);
        let names = blocks(short_name_def);
        let mismatch = |block| ParamTableError::Mismatch {
            source_name: source_name.to_string(),
            ids: ids.len(),
            names: names.len(),
            block,
        };
        if ids.len() != names.len() {
            return Err(mismatch(ids.len().min(names.len())));
        }
        for (i, ((id, id_body), (name, name_body))) in ids.iter().zip(&names).enumerate() {
            if id_body != name_body {
                return Err(mismatch(i));
            }
            let Ok(id) = id.trim().parse::<u64>() else {
                continue;
            };
            let name = name.trim();
            if name.is_empty() || name == "~" {
                continue; // ecCodes' placeholder for "no short name"
            }
            self.insert(name, id);
        }
        Ok(())
    }

    /// Adds one name → paramId pair (kept only if the name is new).
    pub fn insert(&mut self, name: &str, id: u64) {
        self.by_name.entry(name.to_ascii_lowercase()).or_insert(id);
        self.by_id.entry(id).or_insert_with(|| name.to_string());
    }

    /// paramId of `name` (case-insensitive).
    pub fn id(&self, name: &str) -> Option<u64> {
        self.by_name.get(&name.to_ascii_lowercase()).copied()
    }

    /// The first short name defined for `id`.
    pub fn name(&self, id: u64) -> Option<&str> {
        self.by_id.get(&id).map(String::as_str)
    }

    /// Number of names.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True when no name is known.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Up to `limit` known names closest to `name`.
    pub fn closest(&self, name: &str, limit: usize) -> Vec<String> {
        crate::text::closest(name, self.by_name.keys().map(String::as_str), limit)
    }
}

/// Sub-directories of an ecCodes definition tree read by [`load_default`], in priority order.
pub const DEFINITION_DIRS: &[&str] = &[
    "grib2/localConcepts/ecmf",
    "grib1/localConcepts/ecmf",
    "grib2",
    "grib1",
];

/// Builds the table from an ecCodes definition tree (the directory holding `grib1/`, `grib2/`).
pub fn load_from(root: &Path) -> Result<ParamTable, ParamTableError> {
    let mut table = ParamTable::new();
    let mut found = false;
    for dir in DEFINITION_DIRS {
        let ids = root.join(dir).join("paramId.def");
        let names = root.join(dir).join("shortName.def");
        if !ids.exists() || !names.exists() {
            continue;
        }
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| ParamTableError::Io {
                path: path.to_path_buf(),
                source,
            })
        };
        table.add_definitions(dir, &read(&ids)?, &read(&names)?)?;
        found = true;
    }
    if found {
        Ok(table)
    } else {
        Err(ParamTableError::NotFound(root.to_path_buf()))
    }
}

/// The table of the installed ecCodes: `$ECCODES_DEFINITION_PATH` (first entry of a `:` list)
/// or `/usr/share/eccodes/definitions`. Read once per process and cached.
pub fn load_default() -> Result<Arc<ParamTable>, Arc<ParamTableError>> {
    static CACHE: OnceLock<Result<Arc<ParamTable>, Arc<ParamTableError>>> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            let root = std::env::var_os("ECCODES_DEFINITION_PATH")
                .and_then(|p| std::env::split_paths(&p).next())
                .unwrap_or_else(|| PathBuf::from("/usr/share/eccodes/definitions"));
            load_from(&root).map(Arc::new).map_err(Arc::new)
        })
        .clone()
}

/// paramId text of a MARS parameter value (see the module documentation).
pub(crate) fn normalise(keyword: &str, value: &str, ctx: &Context) -> Result<String, ValueError> {
    let v = value.trim();
    let err = |expected: String| ValueError {
        keyword: keyword.to_string(),
        value: value.to_string(),
        expected,
    };
    let digits = |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
    if digits(v) {
        return Ok(v
            .parse::<u64>()
            .map_err(|e| err(e.to_string()))?
            .to_string());
    }
    if let Some((num, table)) = v.split_once('.')
        && digits(num)
        && digits(table)
    {
        let (num, table): (u64, u64) = (num.parse().unwrap_or(0), table.parse().unwrap_or(0));
        if num > 999 {
            return Err(err(
                "a parameter number below 1000 before the table (e.g. 167.228)".into(),
            ));
        }
        // ECMWF's convention: table 128 is the default table, other tables give table*1000+num.
        return Ok(match table {
            0 | 128 => num,
            t => t * 1000 + num,
        }
        .to_string());
    }
    let Some(params) = ctx.param_table() else {
        return Err(err(
            "a paramId; parameter names need the ecCodes parameter table, which is not loaded \
             (install ecCodes definitions or set ECCODES_DEFINITION_PATH)"
                .into(),
        ));
    };
    match params.id(v) {
        Some(id) => Ok(id.to_string()),
        None => {
            let near = params.closest(v, 5);
            let hint = if near.is_empty() {
                String::new()
            } else {
                format!("; closest names: {}", near.join(", "))
            };
            Err(err(format!(
                "a paramId (e.g. 130, 130.128) or an ecCodes short name (e.g. t, 2t, msl){hint}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::ValueType;

    const IDS: &str = "# Automatically generated\n#Temperature\n'130' = {\n\t discipline = 0 ;\n\t parameterNumber = 0 ;\n\t}\n#2 metre temperature\n'167' = {\n\t discipline = 0 ;\n\t typeOfFirstFixedSurface = 103 ;\n\t}\n";
    const NAMES: &str = "# Automatically generated\n#Temperature\n't' = {\n\t discipline = 0 ;\n\t parameterNumber = 0 ;\n\t}\n#2 metre temperature\n'2t' = {\n\t discipline = 0 ;\n\t typeOfFirstFixedSurface = 103 ;\n\t}\n";

    fn table() -> Arc<ParamTable> {
        let mut t = ParamTable::new();
        t.add_definitions("test", IDS, NAMES).unwrap();
        Arc::new(t)
    }

    fn n(v: &str) -> Result<String, ValueError> {
        ValueType::Param.normalise("param", v, &Context::at(2024, 1, 1).with_params(table()))
    }

    #[test]
    fn parses_blocks_in_order() {
        let t = table();
        assert_eq!(t.id("t"), Some(130));
        assert_eq!(t.id("2T"), Some(167));
        assert_eq!(t.name(167), Some("2t"));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn rejects_mismatched_files() {
        let mut t = ParamTable::new();
        let e = t
            .add_definitions("x", IDS, "'t' = { a = 1 ; }")
            .unwrap_err();
        assert!(e.to_string().contains("same ecCodes release"));
        let swapped = NAMES.replace("parameterNumber = 0", "parameterNumber = 9");
        assert!(matches!(
            t.add_definitions("x", IDS, &swapped),
            Err(ParamTableError::Mismatch { block: 0, .. })
        ));
    }

    #[test]
    fn numbers_and_tables() {
        assert_eq!(n("130").unwrap(), "130");
        assert_eq!(n("0130").unwrap(), "130");
        assert_eq!(n("130.128").unwrap(), "130");
        assert_eq!(n("167.228").unwrap(), "228167");
        assert_eq!(n("1.200").unwrap(), "200001");
        assert_eq!(n("47.210").unwrap(), "210047");
        assert!(n("1000.128").is_err());
    }

    #[test]
    fn names_and_suggestions() {
        assert_eq!(n("t").unwrap(), "130");
        assert_eq!(n("2T").unwrap(), "167");
        let e = n("2tt").unwrap_err();
        assert!(e.to_string().contains("closest names: 2t"), "{e}");
        let no_table = ValueType::Param.normalise("param", "t", &Context::at(2024, 1, 1));
        assert!(
            no_table
                .unwrap_err()
                .to_string()
                .contains("ECCODES_DEFINITION_PATH")
        );
    }

    #[test]
    fn installed_eccodes_agrees_with_codes_info() {
        // Runs where ecCodes definitions are installed (CI and the dev machine have them).
        let Ok(table) = load_default() else {
            eprintln!("ecCodes definitions not installed; skipping");
            return;
        };
        for (name, id) in [
            ("t", 130),
            ("2t", 167),
            ("msl", 151),
            ("u", 131),
            ("v", 132),
            ("z", 129),
            ("tp", 228),
            ("10u", 165),
            ("10v", 166),
            ("q", 133),
            ("lsm", 172),
        ] {
            assert_eq!(table.id(name), Some(id), "{name}");
        }
    }
}
