//! The FDB5 schema rule language, and the split of a field's key into database / index / datum
//! keys.
//!
//! Owns the parser (existing FDB5 schema files parse unchanged), value typing per keyword, and
//! rule matching for archive ([`Schema::split`]). It knows nothing of storage layout: turning a
//! [`SplitKey`] into paths or records is the storage layer's job.
//!
//! Grammar, as FDB5's `fdb5/rules/SchemaParser.cc` reads it:
//!
//! ```text
//! schema    := ( name ':' Type ';' )* rule*
//! rule      := '[' predicate ( ',' predicate )* rule* ']'      (three levels deep)
//! predicate := keyword [ ':' Type ] ( '?' [default] | '-' [default] | '=' v ( '/' v )* )?
//! ```
//!
//! `#` starts a comment. Meaning of a predicate when archiving:
//!
//! * `k` — the key must have `k`;
//! * `k=a/b` — the key must have `k` with value `a` or `b` (compared after normalisation);
//! * `k?` / `k?d` — optional: absent means the empty value (or `d`);
//! * `k-` — the keyword is consumed but left out of the keys (its type becomes `Ignore`);
//! * `k:Type` — `k` is normalised with `Type` within this rule and its sub-rules.
//!
//! Like FDB5, the first rule (depth first) whose three levels all match is used, and every
//! keyword of the field must be used by that rule.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::key::Key;
use crate::text::{closest, line_col, or_list};
use crate::value::{Context, TYPE_NAMES, ValueError, ValueType};

/// How a predicate matches a keyword.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Matcher {
    /// `k`: required, any value.
    Always,
    /// `k=a/b`: required, one of these values (as written in the schema).
    Values(Vec<String>),
    /// `k?default`: optional; absent keys take the default (often empty).
    Optional(String),
    /// `k-default`: consumed but not part of the keys.
    Hidden(String),
}

/// One `keyword…` entry of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Predicate {
    /// The keyword (lower-case as written; FDB5 schemas use lower case).
    pub keyword: String,
    /// How it matches.
    pub matcher: Matcher,
}

/// One `[ … ]` rule: predicates of its level, types declared in it, and sub-rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Predicates of this level, in order (the order of keys produced by the rule).
    pub predicates: Vec<Predicate>,
    /// Types declared inline (`k:Type`), visible in this rule and its sub-rules.
    pub types: Vec<(String, ValueType)>,
    /// Sub-rules (index rules of a database rule, datum rules of an index rule).
    pub rules: Vec<Rule>,
    /// 1-based line of the opening `[`.
    pub line: usize,
}

/// Text of the built-in schema (`crates/haar-core/schema/default.schema`): FDB5's rules with
/// `domain?` everywhere and a catch-all rule last.
pub const BUILTIN_SCHEMA: &str = include_str!("../schema/default.schema");

/// A parsed schema: global types and database-level rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    /// Global `name: Type;` declarations.
    pub types: Vec<(String, ValueType)>,
    /// Database-level rules, in order.
    pub rules: Vec<Rule>,
}

/// The three keys of an archived field.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SplitKey {
    /// First level: names the database.
    pub db: Key,
    /// Second level: names the index within the database.
    pub index: Key,
    /// Third level: names the field within the index.
    pub datum: Key,
}

impl SplitKey {
    /// The three levels joined, in order.
    pub fn full(&self) -> Key {
        self.db.joined(&self.index).joined(&self.datum)
    }
}

impl fmt::Display for SplitKey {
    /// FDB5's `fdb-list` form: `{class=od,...}{type=fc,...}{step=0,...}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}",
            self.db.braced(),
            self.index.braced(),
            self.datum.braced()
        )
    }
}

/// Why a schema could not be parsed, or a key could not be split.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The text does not follow the schema grammar.
    #[error("line {line}, column {column}: expected {expected}, found {found}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// A type name FDB5 does not define.
    #[error(
        "line {line}, column {column}: unknown type {name:?}{}",
        suggest(suggestions, TYPE_NAMES)
    )]
    UnknownType {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The name as written.
        name: String,
        /// The closest known type names.
        suggestions: Vec<String>,
    },
    /// A keyword typed twice in the same scope.
    #[error("line {line}, column {column}: {keyword:?} is already given a type in this scope")]
    DuplicateType {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The keyword.
        keyword: String,
    },
    /// No rule matches the key.
    #[error("no schema rule matches {key}: {closest}")]
    NoRule {
        /// The (normalised) key.
        key: String,
        /// The rule that came closest and why it failed.
        closest: String,
    },
    /// The first matching rule does not use every keyword of the key.
    #[error(
        "the key has {} that the matching rule (line {line}) does not use: {}; every keyword of \
         an archived field must appear in its rule (add it, or mark it ignored with 'keyword-')",
        if keywords.len() == 1 { "a keyword" } else { "keywords" },
        keywords.join(", ")
    )]
    UnusedKeywords {
        /// Keywords present in the key but absent from the rule.
        keywords: Vec<String>,
        /// Line of the matching database rule.
        line: usize,
    },
    /// A value its keyword's type rejects.
    #[error(transparent)]
    Value(#[from] ValueError),
}

fn suggest(suggestions: &[String], all: &[&str]) -> String {
    if suggestions.is_empty() {
        format!("; known types: {}", all.join(", "))
    } else {
        format!("; did you mean {}?", or_list(suggestions))
    }
}

// ----------------------------------------------------------------------------------------------
// Parser

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

/// Characters that end an identifier (FDB5's `parseIdent`), besides whitespace and `#`.
const STOP: &[char] = &['/', '=', ',', ';', ':', '[', ']', '?', '\0'];

impl Parser<'_> {
    fn skip(&mut self) {
        let bytes = self.text.as_bytes();
        while self.pos < bytes.len() {
            let c = bytes[self.pos];
            if c == b'#' {
                while self.pos < bytes.len() && bytes[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else if c.is_ascii_whitespace() {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip();
        self.text[self.pos..].chars().next()
    }

    fn found(&mut self) -> String {
        match self.peek() {
            None => "end of input".to_string(),
            Some(c) if STOP.contains(&c) || c == '-' => format!("'{}'", c.escape_debug()),
            Some(_) => {
                let save = self.pos;
                let word = self.ident(true);
                self.pos = save;
                let word: String = word.chars().take(40).collect();
                format!("{word:?}")
            }
        }
    }

    fn error(&mut self, expected: &str) -> SchemaError {
        let found = self.found();
        let (line, column) = line_col(self.text, self.pos);
        SchemaError::Syntax {
            line,
            column,
            expected: expected.to_string(),
            found,
        }
    }

    fn eat(&mut self, c: char, expected: &str) -> Result<(), SchemaError> {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            Ok(())
        } else {
            Err(self.error(expected))
        }
    }

    /// An identifier; `-` ends keywords but may appear in values.
    fn ident(&mut self, value: bool) -> String {
        self.skip();
        let start = self.pos;
        for (i, c) in self.text[start..].char_indices() {
            if c.is_whitespace() || c == '#' || STOP.contains(&c) || (!value && c == '-') {
                self.pos = start + i;
                return self.text[start..self.pos].to_string();
            }
        }
        self.pos = self.text.len();
        self.text[start..].to_string()
    }

    fn type_name(&mut self) -> Result<ValueType, SchemaError> {
        self.skip();
        let at = self.pos;
        let name = self.ident(false);
        if name.is_empty() {
            return Err(self.error("a type name"));
        }
        name.parse().map_err(|()| {
            let (line, column) = line_col(self.text, at);
            SchemaError::UnknownType {
                line,
                column,
                suggestions: closest(&name, TYPE_NAMES.iter().copied(), 3),
                name,
            }
        })
    }

    fn declare(
        &mut self,
        types: &mut Vec<(String, ValueType)>,
        keyword: &str,
        ty: ValueType,
        at: usize,
    ) -> Result<(), SchemaError> {
        if types.iter().any(|(k, _)| k == keyword) {
            let (line, column) = line_col(self.text, at);
            return Err(SchemaError::DuplicateType {
                line,
                column,
                keyword: keyword.to_string(),
            });
        }
        types.push((keyword.to_string(), ty));
        Ok(())
    }

    fn schema(&mut self) -> Result<Schema, SchemaError> {
        let mut types = Vec::new();
        loop {
            match self.peek() {
                None | Some('[') => break,
                _ => {}
            }
            let at = self.pos;
            let name = self.ident(false);
            if name.is_empty() {
                return Err(self.error("a type declaration 'keyword: Type;' or a rule '['"));
            }
            self.eat(':', "':' in a type declaration 'keyword: Type;'")?;
            let ty = self.type_name()?;
            self.eat(';', "';' after the type declaration")?;
            self.declare(&mut types, &name, ty, at)?;
        }
        let mut rules = Vec::new();
        while self.peek() == Some('[') {
            rules.push(self.rule(0)?);
        }
        if self.peek().is_some() {
            return Err(self.error("'[' starting a rule, or end of input"));
        }
        Ok(Schema { types, rules })
    }

    fn rule(&mut self, depth: usize) -> Result<Rule, SchemaError> {
        self.skip();
        let (line, _) = line_col(self.text, self.pos);
        self.eat('[', "'['")?;
        let mut rule = Rule {
            predicates: Vec::new(),
            types: Vec::new(),
            rules: Vec::new(),
            line,
        };
        let nested = if depth < 2 {
            " or '[' starting a sub-rule"
        } else {
            ""
        };
        loop {
            match self.peek() {
                Some(']') => {
                    self.pos += 1;
                    return Ok(rule);
                }
                Some('[') if depth < 2 => rule.rules.push(self.rule(depth + 1)?),
                Some('[') => {
                    return Err(self.error("',' or ']': rules nest three levels deep at most"));
                }
                _ if !rule.rules.is_empty() => {
                    return Err(self.error("']' or '[': keywords come before sub-rules"));
                }
                _ => {
                    rule.predicates.push(self.predicate(&mut rule.types)?);
                    match self.peek() {
                        Some(',') => {
                            self.pos += 1;
                            if matches!(self.peek(), Some('[' | ']')) {
                                return Err(self.error("a keyword after ','"));
                            }
                        }
                        Some(']' | '[') => {}
                        _ => return Err(self.error(&format!("',' or ']'{nested}"))),
                    }
                }
            }
        }
    }

    fn predicate(
        &mut self,
        types: &mut Vec<(String, ValueType)>,
    ) -> Result<Predicate, SchemaError> {
        self.skip();
        let at = self.pos;
        let keyword = self.ident(false);
        if keyword.is_empty() {
            return Err(self.error("a keyword"));
        }
        if self.peek() == Some(':') {
            self.pos += 1;
            let ty = self.type_name()?;
            self.declare(types, &keyword, ty, at)?;
        }
        let matcher = match self.peek() {
            Some('?') => {
                self.pos += 1;
                Matcher::Optional(self.ident(true))
            }
            Some('-') => {
                self.pos += 1;
                if !types.iter().any(|(k, _)| *k == keyword) {
                    types.push((keyword.clone(), ValueType::Ignore));
                }
                Matcher::Hidden(self.ident(true))
            }
            Some('=') => {
                self.pos += 1;
                let mut values = Vec::new();
                loop {
                    let v = self.ident(true);
                    if v.is_empty() {
                        return Err(self.error(&format!("a value for {keyword:?}")));
                    }
                    values.push(v);
                    if self.peek() != Some('/') {
                        break;
                    }
                    self.pos += 1;
                }
                Matcher::Values(values)
            }
            _ => Matcher::Always,
        };
        Ok(Predicate { keyword, matcher })
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.keyword)?;
        match &self.matcher {
            Matcher::Always => Ok(()),
            Matcher::Values(v) => write!(f, "={}", v.join("/")),
            Matcher::Optional(d) => write!(f, "?{d}"),
            Matcher::Hidden(d) => write!(f, "-{d}"),
        }
    }
}

impl fmt::Display for Rule {
    /// This level's predicates: `[class, expver, stream=enfo/efov, …]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let preds: Vec<String> = self.predicates.iter().map(ToString::to_string).collect();
        write!(f, "[{}]", preds.join(", "))
    }
}

// ----------------------------------------------------------------------------------------------
// Matching

/// Why one level of a rule did not match (the message is only built if it is reported).
#[derive(Clone, Copy)]
enum Failure<'a> {
    /// A required keyword is absent (or empty).
    Missing(&'a str),
    /// The normalised value of `keyword` is not one of `wanted`.
    NotOneOf {
        keyword: &'a str,
        value: Norm,
        wanted: &'a [String],
    },
}

/// How far a rule got before failing, for the "closest rule" message.
struct Attempt<'a> {
    matched: usize,
    /// The rules of the levels tried, the failing one last.
    path: [Option<&'a Rule>; 3],
    /// Why the last rule of `path` failed; `None`: a database rule without index rules.
    why: Option<Failure<'a>>,
}

/// Keeps the attempt that matched most predicates (the first one on a tie).
fn consider<'a>(best: &mut Option<Attempt<'a>>, attempt: Attempt<'a>) {
    if best.as_ref().is_none_or(|b| attempt.matched > b.matched) {
        *best = Some(attempt);
    }
}

/// The value of one predicate in an output key.
enum Val<'a> {
    /// A normalised value of the key.
    Cached(Norm),
    /// The (normalised) default of an absent optional keyword.
    Default(Cow<'a, str>),
}

/// One predicate matched by a level: its keyword, the key entry of that keyword (if any) and
/// the value it contributes (`None` for `-` predicates).
struct Slot<'a> {
    keyword: &'a str,
    entry: Option<usize>,
    value: Option<Val<'a>>,
}

static DEFAULT_TYPE: ValueType = ValueType::Default;

/// A value normalised by its type, or why the type rejects it.
type Normalised<'a> = Result<Cow<'a, str>, ValueError>;

/// One `keyword=value` of the key being split, with what has been computed about it.
struct Entry<'a> {
    keyword: &'a str,
    value: &'a str,
    /// Global type, looked up on first use.
    global: Option<&'a ValueType>,
    /// The value normalised with its first type used (almost always its only one).
    normalised: Option<(&'a ValueType, Normalised<'a>)>,
}

/// State of one [`Schema::split`]: the key's entries, their global types and their normalised
/// values, each computed at most once however many rules are tried.
struct Matching<'a> {
    schema: &'a Schema,
    ctx: &'a Context,
    entries: Vec<Entry<'a>>,
    /// Values normalised with a second type (rules typing a keyword locally): (entry, type,
    /// result).
    other: Vec<(usize, &'a ValueType, Normalised<'a>)>,
}

/// A normalised value: entry `n` with its first type (`Entry::normalised`), or slot `n` of
/// `Matching::other`.
#[derive(Clone, Copy)]
enum Norm {
    Entry(usize),
    Other(usize),
}

fn find_type<'a>(scope: &'a [(String, ValueType)], keyword: &str) -> Option<&'a ValueType> {
    scope.iter().find(|(k, _)| same(k, keyword)).map(|(_, t)| t)
}

/// `a == b` for short strings such as keywords: a byte loop, cheaper than a `memcmp` call.
#[inline]
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| x == y)
}

impl<'a> Matching<'a> {
    fn new(schema: &'a Schema, key: &'a Key, ctx: &'a Context) -> Matching<'a> {
        Matching {
            schema,
            ctx,
            entries: key
                .iter()
                .map(|(keyword, value)| Entry {
                    keyword,
                    value,
                    global: None,
                    normalised: None,
                })
                .collect(),
            other: Vec::new(),
        }
    }

    fn entry(&self, keyword: &str) -> Option<usize> {
        self.entries.iter().position(|e| same(e.keyword, keyword))
    }

    /// The type of `keyword` in `scopes` (innermost first), then globally.
    fn type_of(
        &mut self,
        scopes: &[&'a [(String, ValueType)]],
        keyword: &str,
        entry: Option<usize>,
    ) -> &'a ValueType {
        for scope in scopes {
            if let Some(t) = find_type(scope, keyword) {
                return t;
            }
        }
        let schema = self.schema;
        let global = || find_type(&schema.types, keyword).unwrap_or(&DEFAULT_TYPE);
        match entry {
            Some(e) => self.entries[e].global.get_or_insert_with(global),
            None => global(),
        }
    }

    /// The value of `entry` normalised with `ty` (computed once per entry and type).
    fn normalised(&mut self, entry: usize, ty: &'a ValueType) -> Result<Norm, ValueError> {
        let ctx = self.ctx;
        let e = &mut self.entries[entry];
        let (norm, result) = match &e.normalised {
            None => {
                let r = ty.normalise_cow(e.keyword, e.value, ctx);
                (Norm::Entry(entry), &e.normalised.insert((ty, r)).1)
            }
            Some((t, r)) if *t == ty => (Norm::Entry(entry), r),
            Some(_) => {
                let slot = match self
                    .other
                    .iter()
                    .position(|(n, t, _)| *n == entry && *t == ty)
                {
                    Some(slot) => slot,
                    None => {
                        let (k, v) = (e.keyword, e.value);
                        self.other.push((entry, ty, ty.normalise_cow(k, v, ctx)));
                        self.other.len() - 1
                    }
                };
                (Norm::Other(slot), &self.other[slot].2)
            }
        };
        match result {
            Ok(_) => Ok(norm),
            Err(e) => Err(e.clone()),
        }
    }

    fn value(&self, norm: Norm) -> &str {
        let result = match norm {
            Norm::Entry(n) => self.entries[n].normalised.as_ref().map(|(_, r)| r),
            Norm::Other(n) => self.other.get(n).map(|(_, _, r)| r),
        };
        match result {
            Some(Ok(v)) => v,
            _ => unreachable!("only successful normalisations are referenced"),
        }
    }

    /// Matches one level of a rule, filling `out`. `Ok(Err((n, why)))`: failed after `n`
    /// predicates matched. Errors are values the keyword's type rejects (as FDB5, this stops
    /// the search).
    fn level(
        &mut self,
        rule: &'a Rule,
        scopes: &[&'a [(String, ValueType)]],
        out: &mut Vec<Slot<'a>>,
    ) -> Result<Result<(), (usize, Failure<'a>)>, ValueError> {
        out.clear();
        for (n, p) in rule.predicates.iter().enumerate() {
            let keyword = p.keyword.as_str();
            let entry = self.entry(keyword);
            let present = entry.filter(|&e| !self.entries[e].value.is_empty());
            let value = match (&p.matcher, present) {
                (Matcher::Hidden(_), _) => None,
                (Matcher::Optional(default), None) => {
                    let v = if default.is_empty() {
                        Cow::Borrowed("")
                    } else {
                        let ty = self.type_of(scopes, keyword, entry);
                        ty.normalise_cow(keyword, default, self.ctx)
                            .unwrap_or(Cow::Borrowed(default.as_str()))
                    };
                    Some(Val::Default(v))
                }
                (_, None) => return Ok(Err((n, Failure::Missing(keyword)))),
                (Matcher::Values(wanted), Some(e)) => {
                    let ty = self.type_of(scopes, keyword, entry);
                    let slot = self.normalised(e, ty)?;
                    let v = self.value(slot);
                    // `w == v` needs no normalisation: normalising is idempotent (and a
                    // value its type rejects is compared as written).
                    let ok = wanted.iter().any(|w| {
                        same(w, v)
                            || ty
                                .normalise_cow(keyword, w, self.ctx)
                                .unwrap_or(Cow::Borrowed(w.as_str()))
                                == v
                    });
                    if !ok {
                        return Ok(Err((
                            n,
                            Failure::NotOneOf {
                                keyword,
                                value: slot,
                                wanted,
                            },
                        )));
                    }
                    Some(Val::Cached(slot))
                }
                (Matcher::Always | Matcher::Optional(_), Some(e)) => {
                    let ty = self.type_of(scopes, keyword, entry);
                    Some(Val::Cached(self.normalised(e, ty)?))
                }
            };
            out.push(Slot {
                keyword,
                entry,
                value,
            });
        }
        Ok(Ok(()))
    }

    fn key(&self, slots: &[Slot<'a>]) -> Key {
        let mut key = Key::new();
        for s in slots {
            match &s.value {
                None => {}
                Some(Val::Cached(slot)) => key.push(s.keyword, self.value(*slot)),
                Some(Val::Default(v)) => key.push(s.keyword, v.as_ref()),
            }
        }
        key
    }

    fn why(&self, failure: Failure<'a>) -> String {
        match failure {
            Failure::Missing(keyword) => format!("the key has no {keyword:?}"),
            Failure::NotOneOf {
                keyword,
                value,
                wanted,
            } => format!(
                "{keyword}={} is not one of {}",
                self.value(value),
                wanted.join("/")
            ),
        }
    }

    fn describe(&self, attempt: &Attempt<'a>) -> String {
        let path: Vec<&Rule> = attempt.path.iter().flatten().copied().collect();
        let last = path.last().expect("an attempt names at least one rule");
        let rules: Vec<String> = path.iter().map(ToString::to_string).collect();
        let rules = rules.join(" ");
        match attempt.why {
            None => format!("rule {rules} at line {} has no index rules", last.line),
            Some(why) => format!("rule {rules} at line {}: {}", last.line, self.why(why)),
        }
    }
}

impl Schema {
    /// Parses a schema. Errors name the line and column and what was expected there.
    pub fn parse(text: &str) -> Result<Schema, SchemaError> {
        Parser { text, pos: 0 }.schema()
    }

    /// The schema embedded in haar (`schema/default.schema`): FDB5's ECMWF schema with a
    /// fallback rule for streams it does not list.
    pub fn builtin() -> &'static Schema {
        static BUILTIN: OnceLock<Schema> = OnceLock::new();
        BUILTIN.get_or_init(|| {
            Schema::parse(BUILTIN_SCHEMA)
                .expect("the embedded default schema parses (checked by tests)")
        })
    }

    /// The global type of `keyword` (`Default` when undeclared).
    pub fn type_of(&self, keyword: &str) -> ValueType {
        find_type(&self.types, keyword)
            .cloned()
            .unwrap_or(ValueType::Default)
    }

    /// `value` normalised with the global type of `keyword`.
    pub fn normalise(
        &self,
        keyword: &str,
        value: &str,
        ctx: &Context,
    ) -> Result<String, ValueError> {
        self.type_of(keyword).normalise(keyword, value, ctx)
    }

    /// True when `keyword` is typed or used in a rule (`keywords().contains(&keyword)`,
    /// without building the list).
    pub fn mentions(&self, keyword: &str) -> bool {
        fn walk(rule: &Rule, keyword: &str) -> bool {
            rule.predicates.iter().any(|p| p.keyword == keyword)
                || rule.rules.iter().any(|r| walk(r, keyword))
        }
        self.types.iter().any(|(k, _)| k == keyword) || self.rules.iter().any(|r| walk(r, keyword))
    }

    /// Every keyword the schema mentions (typed or in a rule), in first-seen order.
    pub fn keywords(&self) -> Vec<&str> {
        fn walk<'a>(rule: &'a Rule, out: &mut Vec<&'a str>) {
            for k in rule.predicates.iter().map(|p| p.keyword.as_str()) {
                if !out.contains(&k) {
                    out.push(k);
                }
            }
            rule.rules.iter().for_each(|r| walk(r, out));
        }
        let mut out: Vec<&str> = self.types.iter().map(|(k, _)| k.as_str()).collect();
        self.rules.iter().for_each(|r| walk(r, &mut out));
        out
    }

    /// Splits a field's key (from GRIB) into database / index / datum keys with the first rule
    /// that matches on all three levels. Values are normalised with their types; optional
    /// keywords missing from the key take their default (usually empty); `-` keywords are
    /// consumed and dropped. Every non-empty keyword of `key` must be used by the rule.
    pub fn split(&self, key: &Key, ctx: &Context) -> Result<SplitKey, SchemaError> {
        self.split_traced(key, ctx, None)
    }

    /// [`Schema::split`], also saying on success where each entry of `key` went (see
    /// [`Splitter`]): `uses[i]` is 1, 2 or 3 when entry `i` gave its normalised value to
    /// exactly one predicate, of the database, index or datum level; 0 when it gave none;
    /// [`USED_OTHERWISE`] when it was used more than once or consumed by a `-` predicate.
    fn split_traced(
        &self,
        key: &Key,
        ctx: &Context,
        uses: Option<&mut Vec<u8>>,
    ) -> Result<SplitKey, SchemaError> {
        let mut m = Matching::new(self, key, ctx);
        let mut best: Option<Attempt<'_>> = None;
        let mut db_slots = Vec::with_capacity(8);
        let mut index_slots = Vec::with_capacity(8);
        let mut datum_slots = Vec::with_capacity(8);
        for db in &self.rules {
            if let Err((n, why)) = m.level(db, &[&db.types], &mut db_slots)? {
                consider(
                    &mut best,
                    Attempt {
                        matched: n,
                        path: [Some(db), None, None],
                        why: Some(why),
                    },
                );
                continue;
            }
            let base = db.predicates.len();
            if db.rules.is_empty() {
                consider(
                    &mut best,
                    Attempt {
                        matched: base,
                        path: [Some(db), None, None],
                        why: None,
                    },
                );
            }
            for index in &db.rules {
                let scopes1 = [&index.types[..], &db.types];
                if let Err((n, why)) = m.level(index, &scopes1, &mut index_slots)? {
                    consider(
                        &mut best,
                        Attempt {
                            matched: base + n,
                            path: [Some(db), Some(index), None],
                            why: Some(why),
                        },
                    );
                    continue;
                }
                let base = base + index.predicates.len();
                for datum in &index.rules {
                    let scopes2 = [&datum.types[..], &index.types, &db.types];
                    if let Err((n, why)) = m.level(datum, &scopes2, &mut datum_slots)? {
                        consider(
                            &mut best,
                            Attempt {
                                matched: base + n,
                                path: [Some(db), Some(index), Some(datum)],
                                why: Some(why),
                            },
                        );
                        continue;
                    }
                    let mut used = vec![false; m.entries.len()];
                    for s in db_slots.iter().chain(&index_slots).chain(&datum_slots) {
                        if let Some(e) = s.entry {
                            used[e] = true;
                        }
                    }
                    let unused: Vec<String> = m
                        .entries
                        .iter()
                        .zip(used)
                        .filter(|(e, used)| !e.value.is_empty() && !used)
                        .map(|(e, _)| e.keyword.to_string())
                        .collect();
                    if !unused.is_empty() {
                        return Err(SchemaError::UnusedKeywords {
                            keywords: unused,
                            line: db.line,
                        });
                    }
                    if let Some(uses) = uses {
                        uses.clear();
                        uses.resize(m.entries.len(), 0);
                        let levels = [&db_slots, &index_slots, &datum_slots];
                        for (level, slots) in (1u8..).zip(levels) {
                            for s in slots.iter() {
                                let Some(e) = s.entry else { continue };
                                uses[e] = match (&s.value, uses[e]) {
                                    (Some(Val::Cached(_)), 0) => level,
                                    _ => USED_OTHERWISE,
                                };
                            }
                        }
                    }
                    return Ok(SplitKey {
                        db: m.key(&db_slots),
                        index: m.key(&index_slots),
                        datum: m.key(&datum_slots),
                    });
                }
            }
        }
        Err(SchemaError::NoRule {
            key: key.to_string(),
            closest: best.map_or_else(
                || "the schema has no rules".to_string(),
                |b| format!("closest is {}", m.describe(&b)),
            ),
        })
    }
}

/// In [`Schema::split_traced`]: an entry used by several predicates, or by a `-` predicate.
const USED_OTHERWISE: u8 = u8::MAX;

/// Keywords whose value can change which rule matches or how a value is normalised: those
/// filtered by value (`k=a/b`) and those typed inside a rule (`k:Type`, and `k-`, which types
/// `k` as `Ignore`) anywhere in the schema.
fn pinned_keywords(schema: &Schema) -> Vec<String> {
    fn walk(rule: &Rule, out: &mut Vec<String>) {
        let filtered = rule.predicates.iter().filter_map(|p| match p.matcher {
            Matcher::Values(_) => Some(&p.keyword),
            _ => None,
        });
        for k in rule.types.iter().map(|(k, _)| k).chain(filtered) {
            if !out.contains(k) {
                out.push(k.clone());
            }
        }
        rule.rules.iter().for_each(|r| walk(r, out));
    }
    let mut out = Vec::new();
    schema.rules.iter().for_each(|r| walk(r, &mut out));
    out
}

/// The last key a [`Splitter`] split, its split, and where each of its entries went.
#[derive(Clone, Debug)]
struct LastSplit {
    key: Key,
    split: SplitKey,
    /// Per entry of `key`: (level 0/1/2, position in that level's key) when a new value can
    /// replace the old one in place; `None` when it cannot.
    places: Vec<Option<(u8, usize)>>,
}

/// [`Schema::split`] for a stream of keys, with the same results, faster when consecutive keys
/// differ only in the values of keywords that cannot change the choice of rule (the archive
/// hot path: `step`, `levelist`, `param` vary while the database and index repeat).
///
/// Why reuse is exact: whether a rule matches a key depends on which keywords the key has
/// with a non-empty value, on the values of keywords filtered by value, and on whether a
/// value's type accepts it. A keyword that is never filtered by value nor typed inside a rule
/// ("free") is normalised with its global type wherever it is used, so a new non-empty value
/// that this type accepts leads every rule to the same verdict; only the output value changes,
/// and it is the new value normalised with the global type. Anything else (a different keyword
/// list or order, an empty value, a pinned keyword, a rejected value) takes the full
/// [`Schema::split`].
#[derive(Clone, Debug)]
pub struct Splitter {
    schema: Arc<Schema>,
    ctx: Context,
    pinned: Vec<String>,
    uses: Vec<u8>,
    last: Option<LastSplit>,
    reused: u64,
}

impl Splitter {
    /// A splitter for `schema` normalising with `ctx`.
    pub fn new(schema: Arc<Schema>, ctx: Context) -> Splitter {
        Splitter {
            pinned: pinned_keywords(&schema),
            schema,
            ctx,
            uses: Vec::new(),
            last: None,
            reused: 0,
        }
    }

    /// The schema.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// How many splits reused the previous one (for tests and profiles).
    pub fn reused(&self) -> u64 {
        self.reused
    }

    /// Exactly `self.schema().split(key, ctx)`, borrowed until the next call.
    pub fn split(&mut self, key: &Key) -> Result<&SplitKey, SchemaError> {
        if self.reuse(key) {
            self.reused += 1;
            return Ok(&self.last.as_ref().expect("reuse needs a last split").split);
        }
        self.last = None;
        let split = self
            .schema
            .split_traced(key, &self.ctx, Some(&mut self.uses))?;
        let places = key
            .iter()
            .zip(&self.uses)
            .map(|((keyword, _), &used)| {
                let level = match used {
                    1..=3 => used - 1,
                    _ => return None,
                };
                if self.pinned.iter().any(|p| p == keyword) {
                    return None;
                }
                let out = [&split.db, &split.index, &split.datum][usize::from(level)];
                out.position(keyword).map(|pos| (level, pos))
            })
            .collect();
        let last = self.last.insert(LastSplit {
            key: key.clone(),
            split,
            places,
        });
        Ok(&last.split)
    }

    /// Turns the last split into the split of `key` in place when `key` differs from the last
    /// key only in non-empty values of free keywords that their global type accepts (see
    /// [`Splitter`]). `false`: not possible (the last split may then be half updated).
    fn reuse(&mut self, key: &Key) -> bool {
        let Some(last) = &mut self.last else {
            return false;
        };
        if key.len() != last.key.len() {
            return false;
        }
        for (i, (keyword, value)) in key.iter().enumerate() {
            let (last_keyword, last_value) = last.key.entry_at(i);
            if keyword != last_keyword {
                return false;
            }
            if value == last_value {
                continue;
            }
            let Some((level, pos)) = last.places[i].filter(|_| !value.is_empty()) else {
                return false;
            };
            let Ok(norm) = self
                .schema
                .type_of(keyword)
                .normalise_cow(keyword, value, &self.ctx)
            else {
                return false;
            };
            let out = match level {
                0 => &mut last.split.db,
                1 => &mut last.split.index,
                _ => &mut last.split.datum,
            };
            out.set_value_at(pos, &norm);
            last.key.set_value_at(i, value);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context::at(2024, 3, 1)
    }

    fn err(text: &str) -> String {
        Schema::parse(text).unwrap_err().to_string()
    }

    const SMALL: &str = "
        # types
        step: Step;
        date: Date;
        levelist: Double;
        [ class, expver, stream=enfo/efov, date, time, domain?g
            [ type, levtype
                [ step, number, levelist?, param ]]]
        [ class, expver, stream, date, time
            [ type=cl, levtype, grid-
                [ date: ClimateMonthly, param ]]
            [ type, levtype
                [ step, levelist?, param ]]]
    ";

    #[test]
    fn parses_grammar() {
        let s = Schema::parse(SMALL).unwrap();
        assert_eq!(s.types.len(), 3);
        assert_eq!(s.rules.len(), 2);
        let r = &s.rules[0];
        assert_eq!(r.line, 6);
        assert_eq!(
            r.to_string(),
            "[class, expver, stream=enfo/efov, date, time, domain?g]"
        );
        assert_eq!(
            s.rules[1].rules[0].types,
            [("grid".to_string(), ValueType::Ignore)]
        );
        assert_eq!(
            s.rules[1].rules[0].rules[0].types,
            [("date".to_string(), ValueType::ClimateMonthly)]
        );
        assert_eq!(s.type_of("levelist"), ValueType::Double);
        assert_eq!(s.type_of("class"), ValueType::Default);
        assert_eq!(
            s.keywords()[..6],
            ["step", "date", "levelist", "class", "expver", "stream"]
        );
        assert!(Schema::parse("").unwrap().rules.is_empty());
    }

    #[test]
    fn syntax_errors_are_precise() {
        assert_eq!(
            err("a: Date"),
            "line 1, column 8: expected ';' after the type declaration, found end of input"
        );
        assert_eq!(
            err("a: Dat;"),
            "line 1, column 4: unknown type \"Dat\"; did you mean Date or Year?"
        );
        assert_eq!(
            err("[a b]"),
            "line 1, column 4: expected ',' or ']' or '[' starting a sub-rule, found \"b\""
        );
        assert_eq!(
            err("[a, [b]]"),
            "line 1, column 5: expected a keyword after ',', found '['"
        );
        assert_eq!(
            err("[a=]"),
            "line 1, column 4: expected a value for \"a\", found ']'"
        );
        assert_eq!(
            err("[a [b [c [d]]]]"),
            "line 1, column 10: expected ',' or ']': rules nest three levels deep at most, found '['"
        );
        assert_eq!(
            err("[a\n"),
            "line 2, column 1: expected ',' or ']' or '[' starting a sub-rule, found end of input"
        );
        assert_eq!(
            err("[a] x"),
            "line 1, column 5: expected '[' starting a rule, or end of input, found \"x\""
        );
        assert_eq!(
            err("a: Date; a: Time;"),
            "line 1, column 10: \"a\" is already given a type in this scope"
        );
        assert_eq!(
            err("[a [b] c]"),
            "line 1, column 8: expected ']' or '[': keywords come before sub-rules, found \"c\""
        );
    }

    #[test]
    fn split_picks_first_matching_rule() {
        let s = Schema::parse(SMALL).unwrap();
        let key = Key::parse(
            "class=od,expver=1,stream=enfo,date=20240101,time=12,type=pf,levtype=pl,step=6,number=3,levelist=500.0,param=130",
        )
        .unwrap();
        let split = s.split(&key, &ctx()).unwrap();
        assert_eq!(
            split.to_string(),
            "{class=od,expver=1,stream=enfo,date=20240101,time=12,domain=g}{type=pf,levtype=pl}{step=6,number=3,levelist=500,param=130}"
        );
        assert_eq!(split.full().len(), 12);
        // Optional keyword absent: empty value, position kept.
        let key = key.clone();
        let mut k2 = key.clone();
        k2.remove("levelist");
        assert_eq!(
            s.split(&k2, &ctx()).unwrap().datum.to_string(),
            "step=6,number=3,levelist=,param=130"
        );
    }

    #[test]
    fn split_uses_rule_types_and_drops_ignored() {
        let s = Schema::parse(SMALL).unwrap();
        let key = Key::parse(
            "class=od,expver=1,stream=moda,date=20100415,time=0,type=cl,levtype=sfc,grid=1/1,param=167",
        )
        .unwrap();
        let split = s.split(&key, &ctx()).unwrap();
        // The db level types date globally (Date); the datum level as ClimateMonthly.
        assert_eq!(split.db.get("date"), Some("20100415"));
        assert_eq!(split.datum.to_string(), "date=4,param=167");
        assert_eq!(split.index.to_string(), "type=cl,levtype=sfc");
    }

    #[test]
    fn split_errors_explain() {
        let s = Schema::parse(SMALL).unwrap();
        let key = Key::parse(
            "class=od,expver=1,stream=enfo,date=20240101,time=12,type=pf,levtype=pl,step=6,levelist=500,param=130",
        )
        .unwrap();
        // Rule 1 lacks 'number'; rule 2 takes any stream and needs none.
        assert_eq!(
            s.split(&key, &ctx()).unwrap().index.to_string(),
            "type=pf,levtype=pl"
        );
        let key = Key::parse("class=od,expver=1,stream=enfo,date=20240101,time=12,type=pf,levtype=pl,step=6,param=130,number=1,frequency=3").unwrap();
        let e = s.split(&key, &ctx()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the key has a keyword that the matching rule (line 6) does not use: frequency; every keyword of an archived field must appear in its rule (add it, or mark it ignored with 'keyword-')"
        );
        let key = Key::parse("class=od,stream=oper,date=20240101,time=12").unwrap();
        let e = s.split(&key, &ctx()).unwrap_err().to_string();
        assert!(e.contains("closest is rule [class, expver,"), "{e}");
        assert!(e.contains("the key has no \"expver\""), "{e}");
        let key = Key::parse("class=od,expver=1,stream=oper,date=2024,time=12").unwrap();
        let e = s.split(&key, &ctx()).unwrap_err().to_string();
        assert!(e.contains("invalid value \"2024\" for date"), "{e}");
    }

    #[test]
    fn value_filters_compare_normalised() {
        let s = Schema::parse("time: Time; [ time=12 [ a [ b ]]]").unwrap();
        let k = Key::parse("time=1200,a=1,b=2").unwrap();
        assert!(s.split(&k, &ctx()).is_ok());
        let k = Key::parse("time=0600,a=1,b=2").unwrap();
        let e = s.split(&k, &ctx()).unwrap_err().to_string();
        assert!(e.contains("time=0600 is not one of 12"), "{e}");
    }

    #[test]
    fn builtin_parses_and_splits_common_streams() {
        let s = Schema::builtin();
        let base = "class=od,expver=0001,date=20240101,time=0000,domain=g";
        for (extra, want) in [
            (
                "stream=oper,type=fc,levtype=pl,step=6,levelist=500,param=130",
                "{step=6,levelist=500,param=130}",
            ),
            (
                "stream=enfo,type=pf,levtype=sfc,step=6,number=5,param=167",
                "{step=6,quantile=,number=5,levelist=,param=167}",
            ),
            (
                "stream=wave,type=fc,levtype=sfc,step=6,param=140229",
                "{step=6,param=140229,frequency=,direction=}",
            ),
            (
                "stream=waef,type=pf,levtype=sfc,step=6,number=1,param=140229",
                "{step=6,number=1,param=140229,frequency=,direction=}",
            ),
            (
                "stream=scda,type=fc,levtype=sfc,step=6,param=167",
                "{step=6,levelist=,param=167}",
            ),
            (
                "stream=mmsf,type=fc,levtype=sfc,origin=ecmf,system=5,method=1,step=24,number=0,param=167",
                "{step=24,number=0,levelist=,param=167}",
            ),
            (
                "stream=zzzz,type=fc,levtype=sfc,step=6,param=167",
                "{step=6,number=,levelist=,param=167}",
            ),
        ] {
            let key = Key::parse(&format!("{base},{extra}")).unwrap();
            let split = s
                .split(&key, &ctx())
                .unwrap_or_else(|e| panic!("{extra}: {e}"));
            assert_eq!(split.datum.braced(), want, "{extra}");
        }
    }
}
