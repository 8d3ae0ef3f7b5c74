//! The MARS keyword and verb tables, and the resolution of abbreviations and aliases.
//!
//! Owns which words are MARS keywords and verbs and what a prefix or alias stands for. It must
//! not parse request text nor know value types (that is the schema's job).

/// MARS keywords (metkit's `language.yaml`, verb `retrieve`), plus `refdate` used by FDB5
/// schemas. Abbreviations are resolved against these and [`ALIASES`].
pub const KEYWORDS: &[&str] = &[
    "accuracy",
    "activity",
    "anoffset",
    "area",
    "bcmodel",
    "bitmap",
    "channel",
    "chem",
    "class",
    "coeffindex",
    "configuration",
    "country",
    "database",
    "dataset",
    "date",
    "day",
    "diagnostic",
    "direction",
    "domain",
    "duplicates",
    "expect",
    "experiment",
    "expver",
    "fcmonth",
    "fcperiod",
    "fieldset",
    "filter",
    "forcing",
    "format",
    "frame",
    "frequency",
    "gaussian",
    "generation",
    "georef",
    "grib",
    "grid",
    "hdate",
    "icmodel",
    "ident",
    "instrument",
    "interpolation",
    "intgrid",
    "iteration",
    "latitude",
    "leadtime",
    "levelist",
    "levtype",
    "longitude",
    "method",
    "model",
    "month",
    "number",
    "obscutoff",
    "obsgroup",
    "obstype",
    "offsetdate",
    "offsettime",
    "optimise",
    "opttime",
    "origin",
    "packing",
    "padding",
    "param",
    "paramtype",
    "process",
    "product",
    "quantile",
    "range",
    "realization",
    "refdate",
    "reference",
    "reportype",
    "repres",
    "resol",
    "resolution",
    "rotation",
    "section",
    "source",
    "stattype",
    "step",
    "stream",
    "style",
    "system",
    "target",
    "tile",
    "tileattribute",
    "tilescheme",
    "time",
    "timespan",
    "truncation",
    "type",
    "units",
    "use",
    "wavelength",
    "year",
];

/// Alternative spellings of keywords, as (alias, keyword) (metkit's `language.yaml`).
pub const ALIASES: &[(&str, &str)] = &[
    ("dbase", "database"),
    ("field", "fieldset"),
    ("leve", "levelist"),
    ("level", "levelist"),
    ("levellist", "levelist"),
    ("levtyp", "levtype"),
    ("parameter", "param"),
    ("parameters", "param"),
];

/// MARS verbs; a unique prefix stands for the verb (`ret` → `retrieve`), others are kept as is.
pub const VERBS: &[&str] = &[
    "retrieve",
    "archive",
    "list",
    "read",
    "get",
    "compute",
    "write",
    "flush",
    "pointdb",
    "disseminate",
    "stage",
    "purge",
    "wipe",
    "remove",
];

/// The full keyword for `word`: exact keyword, alias, or unique prefix of the keywords in
/// [`KEYWORDS`] and [`ALIASES`]. A word that abbreviates nothing is returned as is (schemas may
/// define keywords MARS does not know). Errors list the candidates of an ambiguous prefix.
pub fn canonical_keyword(word: &str) -> Result<String, Vec<String>> {
    let lower = word.to_ascii_lowercase();
    if KEYWORDS.contains(&lower.as_str()) {
        return Ok(lower);
    }
    if let Some((_, k)) = ALIASES.iter().find(|(a, _)| *a == lower) {
        return Ok((*k).to_string());
    }
    let mut found: Vec<String> = Vec::new();
    let names = KEYWORDS
        .iter()
        .map(|k| (*k, *k))
        .chain(ALIASES.iter().copied());
    for (name, keyword) in names {
        if !lower.is_empty() && name.starts_with(&lower) && !found.iter().any(|f| f == keyword) {
            found.push(keyword.to_string());
        }
    }
    match found.len() {
        0 => Ok(lower),
        1 => Ok(found.remove(0)),
        _ => Err(found),
    }
}

/// True when `keyword` is a MARS keyword (after abbreviation).
pub fn is_mars_keyword(keyword: &str) -> bool {
    // KEYWORDS is sorted (checked by a test).
    KEYWORDS.binary_search(&keyword).is_ok()
}

pub(super) fn canonical_verb(word: &str) -> String {
    let lower = word.to_ascii_lowercase();
    if matches!(lower.as_str(), "r" | "ret" | "retr") {
        return "retrieve".into();
    }
    let found: Vec<&&str> = VERBS.iter().filter(|v| v.starts_with(&lower)).collect();
    match found[..] {
        [one] => (*one).to_string(),
        _ => lower,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyword_table_is_sorted() {
        assert!(KEYWORDS.windows(2).all(|w| w[0] < w[1]));
        for k in KEYWORDS {
            assert!(is_mars_keyword(k));
        }
        assert!(!is_mars_keyword("frobnicate"));
    }
}
