//! The MARS request language: `retrieve, class=od, date=-1, step=0/to/24/by/6, param=t/2t`.
//!
//! Owns parsing (keyword abbreviations, quotes, comments, several requests per file), range
//! expansion (`to`/`by`), value normalisation through a [`Schema`]'s types, and the cartesian
//! expansion of a request into [`Key`]s. It does not decide where fields live (that is the
//! schema's split, [`crate::schema`]) and performs no I/O.
//!
//! Parsing keeps values as typed (ranges included); [`Request::resolve`] turns them into
//! canonical values, after which [`Request::expand`] and [`Request::matches`] compare byte for
//! byte with keys produced by [`Schema::split`](crate::schema::Schema::split).

use std::fmt;

use crate::key::Key;
use crate::schema::Schema;
use crate::text::{closest, line_col, or_list};
use crate::value::{
    Context, ValueError, ValueType, format_date, format_double, format_duration, format_time,
    parse_date, parse_double, parse_duration, parse_integer, parse_time,
};

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

/// The values of one keyword.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Values {
    /// `all`: any value.
    All,
    /// Explicit values (before [`Request::resolve`], possibly with `to`/`by` ranges).
    List(Vec<String>),
}

/// One `keyword=values` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Param {
    /// The full keyword, lower-case (abbreviations already resolved).
    pub keyword: String,
    /// Its values.
    pub values: Values,
}

/// A MARS request: an optional verb and keyword=values entries in the order given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Request {
    /// `retrieve`, `list`, … (lower-case), if given.
    pub verb: Option<String>,
    /// Entries in order; a keyword appears at most once (a repeated keyword replaces the
    /// earlier values, as in MARS).
    pub params: Vec<Param>,
}

/// Why a request could not be parsed or resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The text does not follow the request grammar.
    #[error("line {line}, column {column}: expected {expected}, found {found}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column (characters).
        column: usize,
        /// Byte offset in the text.
        offset: usize,
        /// What the parser expected.
        expected: String,
        /// What it found.
        found: String,
    },
    /// An abbreviation matching several keywords.
    #[error(
        "line {line}, column {column}: ambiguous keyword {keyword:?}: could be {}; write more letters",
        or_list(candidates)
    )]
    AmbiguousKeyword {
        /// As written.
        keyword: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The keywords it abbreviates.
        candidates: Vec<String>,
    },
    /// A keyword neither MARS nor the schema knows (found by [`Request::resolve`]).
    #[error("unknown keyword {keyword:?}{}", did_you_mean(suggestions))]
    UnknownKeyword {
        /// The keyword.
        keyword: String,
        /// The nearest known keywords.
        suggestions: Vec<String>,
    },
    /// [`Request::parse`] was given several requests.
    #[error("expected one request, found {count}; use parse_requests for files of requests")]
    NotOneRequest {
        /// How many were found.
        count: usize,
    },
    /// A value the keyword's type rejects.
    #[error(transparent)]
    Value(#[from] ValueError),
    /// A `to`/`by` range that cannot be expanded.
    #[error("{keyword}: cannot expand {range:?}: {reason}")]
    Range {
        /// The keyword.
        keyword: String,
        /// The range as written.
        range: String,
        /// Why.
        reason: String,
    },
}

fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", or_list(suggestions))
    }
}

// ----------------------------------------------------------------------------------------------
// Lexer

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(String),
    Quoted(String),
    Comma,
    Eq,
    Slash,
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Word(w) | Tok::Quoted(w) => format!("{w:?}"),
            Tok::Comma => "','".into(),
            Tok::Eq => "'='".into(),
            Tok::Slash => "'/'".into(),
            Tok::Eof => "end of input".into(),
        }
    }
}

fn syntax(text: &str, offset: usize, expected: &str, found: &Tok) -> RequestError {
    let (line, column) = line_col(text, offset);
    RequestError::Syntax {
        line,
        column,
        offset,
        expected: expected.to_string(),
        found: found.describe(),
    }
}

fn tokenise(text: &str) -> Result<Vec<(Tok, usize)>, RequestError> {
    let mut toks = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(i, c)) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '#' => {
                while chars.peek().is_some_and(|&(_, c)| c != '\n') {
                    chars.next();
                }
            }
            ',' | '=' | '/' => {
                chars.next();
                let t = match c {
                    ',' => Tok::Comma,
                    '=' => Tok::Eq,
                    _ => Tok::Slash,
                };
                toks.push((t, i));
            }
            '"' | '\'' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some((_, q)) if q == c => break,
                        Some((_, x)) => s.push(x),
                        None => {
                            return Err(syntax(
                                text,
                                i,
                                &format!("a closing {c} for the quote opened here"),
                                &Tok::Eof,
                            ));
                        }
                    }
                }
                toks.push((Tok::Quoted(s), i));
            }
            _ => {
                let mut s = String::new();
                while let Some(&(_, x)) = chars.peek() {
                    if x.is_whitespace() || matches!(x, ',' | '=' | '/' | '#' | '"' | '\'') {
                        break;
                    }
                    s.push(x);
                    chars.next();
                }
                toks.push((Tok::Word(s), i));
            }
        }
    }
    toks.push((Tok::Eof, text.len()));
    Ok(toks)
}

// ----------------------------------------------------------------------------------------------
// Keywords

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

fn canonical_verb(word: &str) -> String {
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

// ----------------------------------------------------------------------------------------------
// Parser

struct Parser<'a> {
    text: &'a str,
    toks: Vec<(Tok, usize)>,
    i: usize,
}

impl Parser<'_> {
    fn peek(&self, n: usize) -> &Tok {
        self.toks.get(self.i + n).map_or(&Tok::Eof, |(t, _)| t)
    }

    fn offset(&self) -> usize {
        self.toks.get(self.i).map_or(self.text.len(), |(_, o)| *o)
    }

    fn error(&self, expected: &str) -> RequestError {
        syntax(self.text, self.offset(), expected, self.peek(0))
    }

    fn requests(&mut self) -> Result<Vec<Request>, RequestError> {
        let mut out = Vec::new();
        loop {
            while *self.peek(0) == Tok::Comma {
                self.i += 1;
            }
            if *self.peek(0) == Tok::Eof {
                return Ok(out);
            }
            out.push(self.request()?);
        }
    }

    fn request(&mut self) -> Result<Request, RequestError> {
        let mut req = Request::default();
        match (self.peek(0).clone(), self.peek(1)) {
            (Tok::Word(w), t) if *t != Tok::Eq => {
                req.verb = Some(canonical_verb(&w));
                self.i += 1;
                match self.peek(0) {
                    Tok::Comma => self.i += 1,
                    Tok::Eof | Tok::Word(_) => return Ok(req),
                    _ => return Err(self.error("',' after the verb")),
                }
            }
            (Tok::Word(_), _) => {}
            _ => return Err(self.error("a verb (e.g. retrieve) or keyword=value")),
        }
        loop {
            let (word, at) = match (self.peek(0).clone(), self.peek(1)) {
                (Tok::Word(w), Tok::Eq) => (w, self.offset()),
                // A word not followed by '=' starts the next request.
                (Tok::Word(_), _) | (Tok::Eof, _) => return Ok(req),
                _ => return Err(self.error("keyword=value")),
            };
            let keyword = canonical_keyword(&word).map_err(|candidates| {
                let (line, column) = line_col(self.text, at);
                RequestError::AmbiguousKeyword {
                    keyword: word.clone(),
                    line,
                    column,
                    candidates,
                }
            })?;
            self.i += 2;
            let (first, quoted) = self.value()?;
            let mut values = vec![first];
            while *self.peek(0) == Tok::Slash {
                self.i += 1;
                values.push(self.value()?.0);
            }
            // Only a bare `all` means "any value"; a quoted "all" is the literal text.
            let values = if values.len() == 1 && !quoted && values[0].eq_ignore_ascii_case("all") {
                Values::All
            } else {
                Values::List(values)
            };
            req.set(keyword, values);
            match (self.peek(0), self.peek(1)) {
                (Tok::Comma, _) => self.i += 1,
                (Tok::Eof, _) => return Ok(req),
                (Tok::Word(_), Tok::Eq) => {
                    return Err(self.error("',' between keyword=value entries"));
                }
                (Tok::Word(_), _) => return Ok(req),
                _ => return Err(self.error("',' or '/' after a value")),
            }
        }
    }

    /// The next value and whether it was quoted.
    fn value(&mut self) -> Result<(String, bool), RequestError> {
        match self.peek(0).clone() {
            Tok::Word(w) => {
                self.i += 1;
                Ok((w, false))
            }
            Tok::Quoted(w) => {
                self.i += 1;
                Ok((w, true))
            }
            _ => Err(self.error("a value")),
        }
    }
}

/// Parses a file of requests: each starts with a verb (`retrieve, class=od, ...`), entries are
/// separated by commas, requests by their verbs; `#` starts a comment; values may be quoted
/// with `"` or `'`. The first request may omit the verb.
pub fn parse_requests(text: &str) -> Result<Vec<Request>, RequestError> {
    Parser {
        text,
        toks: tokenise(text)?,
        i: 0,
    }
    .requests()
}

// ----------------------------------------------------------------------------------------------
// Requests

impl Request {
    /// A request with `verb` and no entries.
    pub fn new(verb: impl Into<String>) -> Request {
        Request {
            verb: Some(verb.into()),
            params: Vec::new(),
        }
    }

    /// Parses one request in CLI form: `class=od,date=-1,param=t/2t`, optionally preceded by a
    /// verb (`retrieve,`). Empty text is the empty request.
    pub fn parse(text: &str) -> Result<Request, RequestError> {
        let mut all = parse_requests(text)?;
        match all.len() {
            0 => Ok(Request::default()),
            1 => Ok(all.remove(0)),
            count => Err(RequestError::NotOneRequest { count }),
        }
    }

    /// Sets `keyword` (replacing earlier values, keeping its position).
    pub fn set(&mut self, keyword: impl Into<String>, values: Values) {
        let keyword = keyword.into();
        match self.params.iter_mut().find(|p| p.keyword == keyword) {
            Some(p) => p.values = values,
            None => self.params.push(Param { keyword, values }),
        }
    }

    /// Builder form of [`Request::set`] with a list of values.
    pub fn with(mut self, keyword: &str, values: &[&str]) -> Request {
        self.set(
            keyword,
            Values::List(values.iter().map(|v| (*v).to_string()).collect()),
        );
        self
    }

    /// The values of `keyword`.
    pub fn get(&self, keyword: &str) -> Option<&Values> {
        self.params
            .iter()
            .find(|p| p.keyword == keyword)
            .map(|p| &p.values)
    }

    /// Expands `to`/`by` ranges and normalises every value with the schema's type for its
    /// keyword, removing duplicates (first occurrence kept). Keywords unknown to both MARS and
    /// the schema are errors, with suggestions.
    pub fn resolve(&self, schema: &Schema, ctx: &Context) -> Result<Request, RequestError> {
        let mut out = Request {
            verb: self.verb.clone(),
            params: Vec::with_capacity(self.params.len()),
        };
        for p in &self.params {
            if !is_mars_keyword(&p.keyword) && !schema.mentions(&p.keyword) {
                let schema_keywords = schema.keywords();
                return Err(RequestError::UnknownKeyword {
                    keyword: p.keyword.clone(),
                    suggestions: closest(
                        &p.keyword,
                        schema_keywords
                            .iter()
                            .copied()
                            .chain(KEYWORDS.iter().copied()),
                        3,
                    ),
                });
            }
            let values = match &p.values {
                Values::All => Values::All,
                Values::List(raw) => {
                    let ty = schema.type_of(&p.keyword);
                    Values::List(expand_values(&p.keyword, &ty, raw, ctx)?)
                }
            };
            out.params.push(Param {
                keyword: p.keyword.clone(),
                values,
            });
        }
        Ok(out)
    }

    /// The keys this request names: the cartesian product of the value lists, first entry
    /// varying slowest. Meant for resolved requests; `all` entries are left out of the keys.
    pub fn expand(&self) -> Vec<Key> {
        let mut keys = vec![Key::new()];
        for p in &self.params {
            let Values::List(values) = &p.values else {
                continue;
            };
            let mut next = Vec::with_capacity(keys.len().saturating_mul(values.len()));
            for key in &keys {
                for v in values {
                    next.push(key.clone().with(p.keyword.clone(), v.clone()));
                }
            }
            keys = next;
        }
        keys
    }

    /// Number of keys [`Request::expand`] yields, without building them.
    pub fn count(&self) -> usize {
        self.params
            .iter()
            .filter_map(|p| match &p.values {
                Values::List(v) => Some(v.len()),
                Values::All => None,
            })
            .fold(1usize, usize::saturating_mul)
    }

    /// True when `key` satisfies every entry: the key has the keyword with one of the values
    /// (`all` accepts any value). A keyword missing from the key is accepted only by `all` or by
    /// a list holding the empty string (the value of an absent optional keyword).
    pub fn matches(&self, key: &Key) -> bool {
        self.params
            .iter()
            .all(|p| match (&p.values, key.get(&p.keyword)) {
                (Values::All, _) => true,
                (Values::List(values), Some(v)) => values.iter().any(|x| x == v),
                (Values::List(values), None) => values.iter().any(String::is_empty),
            })
    }
}

/// Quotes a value when printing it bare would not parse back to the same value.
fn quoted(v: &str) -> String {
    let plain = !v.is_empty()
        && !v.eq_ignore_ascii_case("all")
        && !v
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, ',' | '=' | '/' | '#' | '"' | '\''));
    if plain {
        v.to_string()
    } else if v.contains('"') {
        format!("'{v}'")
    } else {
        format!("\"{v}\"")
    }
}

impl fmt::Display for Request {
    /// The CLI form: `retrieve,class=od,param=130/167`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        if let Some(verb) = &self.verb {
            f.write_str(verb)?;
            first = false;
        }
        for p in &self.params {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{}=", p.keyword)?;
            match &p.values {
                Values::All => f.write_str("all")?,
                Values::List(values) => {
                    for (i, v) in values.iter().enumerate() {
                        if i > 0 {
                            f.write_str("/")?;
                        }
                        f.write_str(&quoted(v))?;
                    }
                }
            }
        }
        Ok(())
    }
}

// ----------------------------------------------------------------------------------------------
// Ranges

/// Longest range expanded; beyond this a request is surely a mistake (and would exhaust memory).
pub const MAX_RANGE: usize = 100_000;

fn is_word(v: &str, w: &str) -> bool {
    v.eq_ignore_ascii_case(w)
}

fn expand_values(
    keyword: &str,
    ty: &ValueType,
    raw: &[String],
    ctx: &Context,
) -> Result<Vec<String>, RequestError> {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    let range_err = |range: String, reason: &str| RequestError::Range {
        keyword: keyword.to_string(),
        range,
        reason: reason.to_string(),
    };
    while i < raw.len() {
        let v = &raw[i];
        if is_word(v, "to") || is_word(v, "by") {
            return Err(range_err(
                raw.join("/"),
                &format!("'{v}' must follow a value: write start/to/end[/by/increment]"),
            ));
        }
        if raw.get(i + 1).is_some_and(|t| is_word(t, "to")) {
            let end = raw
                .get(i + 2)
                .filter(|e| !is_word(e, "to") && !is_word(e, "by"))
                .ok_or_else(|| range_err(raw[i..].join("/"), "'to' needs an end value"))?;
            let (by, used) = if raw.get(i + 3).is_some_and(|b| is_word(b, "by")) {
                let by = raw
                    .get(i + 4)
                    .ok_or_else(|| range_err(raw[i..].join("/"), "'by' needs an increment"))?;
                (Some(by.as_str()), 5)
            } else {
                (None, 3)
            };
            let text = raw[i..i + used.min(raw.len() - i)].join("/");
            let values = range(keyword, ty, v, end, by, ctx)
                .map_err(|reason| range_err(text.clone(), &reason))?;
            for x in values {
                out.push(ty.normalise(keyword, &x, ctx)?);
            }
            i += used;
        } else {
            out.push(ty.normalise(keyword, v, ctx)?);
            i += 1;
        }
    }
    dedup_keep_first(&mut out);
    Ok(out)
}

/// Removes repeated values, keeping the first occurrence of each.
fn dedup_keep_first(values: &mut Vec<String>) {
    if values.len() <= 32 {
        // Quadratic but allocation-free: requests name few values per keyword.
        let mut i = 1;
        while i < values.len() {
            if values[..i].contains(&values[i]) {
                values.remove(i);
            } else {
                i += 1;
            }
        }
    } else {
        let mut seen = std::collections::HashSet::with_capacity(values.len());
        values.retain(|v| seen.insert(v.clone()));
    }
}

/// Expands start/to/end/by/step in the keyword type's units. Returns the reason on failure.
fn range(
    keyword: &str,
    ty: &ValueType,
    start: &str,
    end: &str,
    by: Option<&str>,
    ctx: &Context,
) -> Result<Vec<String>, String> {
    match ty {
        ValueType::Date => {
            let bad = |v: &str| format!("{v:?} is not a date (YYYYMMDD, YYYY-MM-DD or -N)");
            let s = parse_date(start.trim(), ctx).ok_or_else(|| bad(start))?;
            let e = parse_date(end.trim(), ctx).ok_or_else(|| bad(end))?;
            let by = match by {
                None => toward(s, e, 1),
                Some(b) => parse_integer(b.trim())
                    .ok_or_else(|| format!("increment {b:?} is not a number of days"))?,
            };
            Ok(steps_i64(s, e, by)?.into_iter().map(format_date).collect())
        }
        ValueType::Time => {
            let bad = |v: &str| format!("{v:?} is not a time (HHMM, HH:MM, H)");
            let s = parse_time(start.trim()).ok_or_else(|| bad(start))?;
            let e = parse_time(end.trim()).ok_or_else(|| bad(end))?;
            let by = match by {
                None => toward(i64::from(s), i64::from(e), 360),
                Some(b) => duration_minutes(b.trim())
                    .ok_or_else(|| format!("increment {b:?} is not a duration (6, 6h, 30m)"))?,
            };
            let values = steps_i64(i64::from(s), i64::from(e), by)?;
            Ok(values
                .into_iter()
                .map(|m| format_time(u32::try_from(m).unwrap_or(0)))
                .collect())
        }
        ValueType::Step => {
            let bad = |v: &str| format!("{v:?} is not a single step (12, 30m, 1h30m)");
            let s = parse_duration(start.trim()).ok_or_else(|| bad(start))?;
            let e = parse_duration(end.trim()).ok_or_else(|| bad(end))?;
            let by = match by {
                None => toward(s, e, 12 * 3600),
                Some(b) => parse_duration(b.trim())
                    .or_else(|| {
                        let n = parse_integer(b.trim())?;
                        n.checked_mul(3600)
                    })
                    .ok_or_else(|| format!("increment {b:?} is not a step (6, 30m)"))?,
            };
            Ok(steps_i64(s, e, by)?
                .into_iter()
                .map(format_duration)
                .collect())
        }
        ValueType::Double => {
            let bad = |v: &str| format!("{v:?} is not a number");
            let s = parse_double(start.trim()).ok_or_else(|| bad(start))?;
            let e = parse_double(end.trim()).ok_or_else(|| bad(end))?;
            let by = match by {
                None if e < s => -1.0,
                None => 1.0,
                Some(b) => parse_double(b.trim()).ok_or_else(|| bad(b))?,
            };
            if by == 0.0 {
                return Err("the increment is zero".into());
            }
            let n = ((e - s) / by + 1e-9).floor();
            if n < 0.0 {
                return Err(wrong_direction(&format_double(by)));
            }
            if n >= MAX_RANGE as f64 {
                return Err(too_long());
            }
            Ok((0..=n as usize)
                .map(|k| format_double(((s + k as f64 * by) * 1e9).round() / 1e9))
                .collect())
        }
        _ => {
            let bad = |v: &str| {
                format!(
                    "{v:?} is not an integer; {keyword} ranges need integers \
                     (dates, times, steps and levels need their schema type)"
                )
            };
            let s = parse_integer(start.trim()).ok_or_else(|| bad(start))?;
            let e = parse_integer(end.trim()).ok_or_else(|| bad(end))?;
            let by = match by {
                None => toward(s, e, 1),
                Some(b) => parse_integer(b.trim()).ok_or_else(|| bad(b))?,
            };
            Ok(steps_i64(s, e, by)?
                .into_iter()
                .map(|n| n.to_string())
                .collect())
        }
    }
}

/// The default increment counts down when the range does (MARS: `24/to/0` is 24/12/0); an
/// explicit increment of the wrong sign is an error instead.
fn toward(start: i64, end: i64, by: i64) -> i64 {
    if end < start { -by } else { by }
}

fn duration_minutes(v: &str) -> Option<i64> {
    if v.len() <= 2 {
        return parse_integer(v)?.checked_mul(60);
    }
    if let Some(secs) = parse_duration(v) {
        return Some(secs / 60);
    }
    parse_time(v).map(i64::from)
}

fn wrong_direction(by: &str) -> String {
    format!("the increment {by} moves away from the end; use a negative 'by' to count down")
}

fn too_long() -> String {
    format!("more than {MAX_RANGE} values")
}

fn steps_i64(s: i64, e: i64, by: i64) -> Result<Vec<i64>, String> {
    if by == 0 {
        return Err("the increment is zero".into());
    }
    let span = i128::from(e) - i128::from(s);
    if span != 0 && (span < 0) != (by < 0) {
        return Err(wrong_direction(&by.to_string()));
    }
    let count = span / i128::from(by) + 1;
    if count > MAX_RANGE as i128 {
        return Err(too_long());
    }
    Ok((0..count as i64).map(|k| s + k * by).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context::at(2024, 3, 1)
    }

    fn resolved(text: &str) -> Request {
        Request::parse(text)
            .unwrap()
            .resolve(Schema::builtin(), &ctx())
            .unwrap()
    }

    fn list(r: &Request, k: &str) -> Vec<String> {
        match r.get(k) {
            Some(Values::List(v)) => v.clone(),
            other => panic!("{k}: {other:?}"),
        }
    }

    #[test]
    fn parses_cli_form() {
        let r = Request::parse("retrieve,class=od,param=t/2t,date=-1").unwrap();
        assert_eq!(r.verb.as_deref(), Some("retrieve"));
        assert_eq!(r.to_string(), "retrieve,class=od,param=t/2t,date=-1");
        let r = Request::parse("class=od, step = 0 / 6").unwrap();
        assert_eq!(r.verb, None);
        assert_eq!(r.to_string(), "class=od,step=0/6");
    }

    #[test]
    fn abbreviations_and_case() {
        let r = Request::parse("RET,CLAS=OD,ste=0,levtyp=pl,leve=500,parameter=t").unwrap();
        assert_eq!(r.verb.as_deref(), Some("retrieve"));
        let kws: Vec<&str> = r.params.iter().map(|p| p.keyword.as_str()).collect();
        assert_eq!(kws, ["class", "step", "levtype", "levelist", "param"]);
        assert_eq!(list(&r, "class"), ["OD"]);
        let e = Request::parse("retrieve,\n  lev=1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2, column 3: ambiguous keyword \"lev\": could be levelist or levtype; write more letters"
        );
        // A keyword MARS does not know is kept (schemas may define it).
        let r = Request::parse("myfancykey=1").unwrap();
        assert_eq!(r.params[0].keyword, "myfancykey");
    }

    #[test]
    fn files_of_requests() {
        let text = "# two requests\nretrieve,\n  class = od, # comment\n  target = \"out, file.grib\"\n\
                    retrieve, class='rd', expver=\"x/y\"\nlist,class=od,\nlist";
        let rs = parse_requests(text).unwrap();
        assert_eq!(rs.len(), 4);
        assert_eq!(list(&rs[0], "target"), ["out, file.grib"]);
        assert_eq!(list(&rs[1], "expver"), ["x/y"]);
        assert_eq!(rs[2].verb.as_deref(), Some("list"));
        assert!(rs[3].params.is_empty());
        // Printing quotes what needs quoting, and reparses to the same request.
        for r in &rs {
            assert_eq!(&Request::parse(&r.to_string()).unwrap(), r);
        }
        assert!(matches!(
            Request::parse(text),
            Err(RequestError::NotOneRequest { count: 4 })
        ));
    }

    #[test]
    fn syntax_errors_point_at_the_problem() {
        let e = Request::parse("retrieve,class=od,\nstep=").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2, column 6: expected a value, found end of input"
        );
        let e = Request::parse("class=od stream=oper").unwrap_err();
        assert!(
            e.to_string().contains("column 10: expected ',' between"),
            "{e}"
        );
        let e = Request::parse("class=\"od").unwrap_err();
        assert!(e.to_string().contains("closing \""), "{e}");
        let e = Request::parse("=od").unwrap_err();
        assert!(matches!(e, RequestError::Syntax { offset: 0, .. }), "{e}");
    }

    #[test]
    fn ranges() {
        let r =
            resolved("step=0/to/24,date=20240227/to/20240302,time=0/to/18,levelist=1000/to/998");
        assert_eq!(list(&r, "step"), ["0", "12", "24"]);
        assert_eq!(
            list(&r, "date"),
            ["20240227", "20240228", "20240229", "20240301", "20240302"]
        );
        assert_eq!(list(&r, "time"), ["0000", "0600", "1200", "1800"]);
        assert_eq!(list(&r, "levelist"), ["1000", "999", "998"]);
        let r = resolved("step=24/to/0/by/-6,number=1/to/9/by/4,date=-2/to/0,step=0/to/2/by/30m");
        assert_eq!(list(&r, "step"), ["0", "30m", "1", "1h30m", "2"]);
        assert_eq!(list(&r, "number"), ["1", "5", "9"]);
        assert_eq!(list(&r, "date"), ["20240228", "20240229", "20240301"]);
        let r = resolved("levelist=0.1/to/0.5/by/0.1,time=2/1/0/to/12");
        assert_eq!(list(&r, "levelist"), ["0.1", "0.2", "0.3", "0.4", "0.5"]);
        assert_eq!(list(&r, "time"), ["0200", "0100", "0000", "0600", "1200"]);
    }

    #[test]
    fn range_errors() {
        let s = Schema::builtin();
        for (text, needle) in [
            ("step=0/to/24/by/-6", "moves away"),
            ("step=0/to", "needs an end"),
            ("step=to/6", "must follow a value"),
            ("number=1/to/2/by/0", "zero"),
            ("number=1/to/10000000", "more than"),
            ("class=a/to/b", "not an integer"),
        ] {
            let e = Request::parse(text)
                .unwrap()
                .resolve(s, &ctx())
                .unwrap_err();
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn resolve_normalises_and_dedups() {
        let r = resolved(
            "class=OD,expver=1,time=12/1200/12:00,param=130.128/130,levelist=1000.0/0.5,step=30m/0-24",
        );
        assert_eq!(list(&r, "class"), ["od"]);
        assert_eq!(list(&r, "expver"), ["0001"]);
        assert_eq!(list(&r, "time"), ["1200"]);
        assert_eq!(list(&r, "param"), ["130"]);
        assert_eq!(list(&r, "levelist"), ["1000", "0.5"]);
        assert_eq!(list(&r, "step"), ["30m", "0-24"]);
        let e = Request::parse("stram=oper")
            .unwrap()
            .resolve(Schema::builtin(), &ctx())
            .unwrap_err();
        assert!(e.to_string().contains("did you mean stream"), "{e}");
        let e = Request::parse("date=2024-02-30")
            .unwrap()
            .resolve(Schema::builtin(), &ctx());
        assert!(e.unwrap_err().to_string().contains("YYYYMMDD"));
    }

    #[test]
    fn expand_and_match() {
        let r = resolved("class=od,step=0/6,param=130/167,levelist=all");
        assert_eq!(r.count(), 4);
        let keys: Vec<String> = r.expand().iter().map(Key::to_string).collect();
        assert_eq!(
            keys,
            [
                "class=od,step=0,param=130",
                "class=od,step=0,param=167",
                "class=od,step=6,param=130",
                "class=od,step=6,param=167"
            ]
        );
        let key = Key::parse("class=od,step=6,param=167,levelist=500").unwrap();
        assert!(r.matches(&key));
        assert!(!r.matches(&key.clone().with("step", "12")));
        // levelist=all accepts a key without levelist; a list needs the empty value for that.
        assert!(r.matches(&Key::parse("class=od,step=6,param=167").unwrap()));
        let opt = Request::new("list").with("levelist", &["", "500"]);
        assert!(opt.matches(&Key::new()));
        assert!(
            !Request::new("list")
                .with("levelist", &["500"])
                .matches(&Key::new())
        );
        assert_eq!(r.get("levelist"), Some(&Values::All));
    }

    #[test]
    fn keyword_table_is_sorted() {
        assert!(KEYWORDS.windows(2).all(|w| w[0] < w[1]));
        for k in KEYWORDS {
            assert!(is_mars_keyword(k));
        }
        assert!(!is_mars_keyword("frobnicate"));
    }

    #[test]
    fn dedup_keeps_first_occurrence() {
        let mut small: Vec<String> = ["b", "a", "b", "c", "a"].map(String::from).to_vec();
        dedup_keep_first(&mut small);
        assert_eq!(small, ["b", "a", "c"]);
        let mut big: Vec<String> = (0..100).map(|i| (i % 40).to_string()).collect();
        dedup_keep_first(&mut big);
        assert_eq!(big, (0..40).map(|i| i.to_string()).collect::<Vec<_>>());
    }

    #[test]
    fn awkward_values_survive() {
        let long = "x".repeat(10_000);
        let r = Request::new("list").with("ident", &["a/b", "..", "\0", &long, "", "all"]);
        let text = r.to_string();
        assert_eq!(Request::parse(&text).unwrap(), r);
        assert_eq!(r.expand().len(), 6);
    }
}
