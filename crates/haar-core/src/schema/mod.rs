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
//!
//! Layout: the types and the schema's queries live here; `parse` reads schema text, `matching`
//! finds the rule of a key ([`Schema::split`]), `splitter` reuses the last split for a stream
//! of keys ([`Splitter`]).

use std::fmt;
use std::sync::OnceLock;

use crate::key::Key;
use crate::text::or_list;
use crate::value::{Context, TYPE_NAMES, ValueError, ValueType};

mod matching;
mod parse;
mod splitter;

use matching::find_type;
pub use splitter::Splitter;

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
pub const BUILTIN_SCHEMA: &str = include_str!("../../schema/default.schema");

/// The last rule of [`BUILTIN_SCHEMA`], with its comment: haar's fallback for streams that no
/// rule above lists.
const FALLBACK_RULE: &str = "# haar: fallback for streams that no rule above lists. Keep it last: \
the first matching rule wins.
[ class, expver, stream, date, time?, domain?
       [ type, levtype?, origin?
               [ step?, number?, levelist?, param ]]]";

/// `schema` (a schema's text) as FDB5 should be given it beside haar: without haar's fallback
/// rule when the text ends with it, and otherwise unchanged.
///
/// haar archives with the first matching rule only, and so does FDB5; but FDB5 5.25 retrieves
/// and lists through *every* rule a request matches, and a request that matches a rule of the
/// ECMWF schema matches the fallback rule too, reaching the same database and index, so FDB5
/// handed the built-in schema retrieves every field twice (design §17). Without the fallback,
/// FDB5 splits every field it can archive as haar does: the fallback only takes fields that no
/// other rule takes, which FDB5 then refuses to archive.
///
/// ```
/// use haar_core::schema::{for_fdb5, BUILTIN_SCHEMA};
/// let fdb5 = for_fdb5(BUILTIN_SCHEMA);
/// assert!(fdb5.len() < BUILTIN_SCHEMA.len() && !fdb5.contains("haar: fallback"));
/// assert_eq!(for_fdb5("[ a [ b [ c ]]]\n"), "[ a [ b [ c ]]]\n");
/// ```
pub fn for_fdb5(schema: &str) -> std::borrow::Cow<'_, str> {
    match schema.trim_end().strip_suffix(FALLBACK_RULE) {
        Some(rest) => format!("{}\n", rest.trim_end()).into(),
        None => schema.into(),
    }
}

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
        let mut out = self.db.clone();
        for (k, v) in self.index.iter().chain(self.datum.iter()) {
            out.push(k, v);
        }
        out
    }

    /// Whether `key` is exactly [`SplitKey::full`] (same entries, same order), without
    /// building it: a reader that asked with the stored form gets its own key back.
    pub fn is_full(&self, key: &Key) -> bool {
        key.len() == self.db.len() + self.index.len() + self.datum.len()
            && key.iter().eq(self
                .db
                .iter()
                .chain(self.index.iter())
                .chain(self.datum.iter()))
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

/// The rule of `haar mount`'s file systems (docs/design.md §15.2): `[ haarfs [ kind, ino [ part
/// ]]]`. Servers know it whatever their configured schema (§15.6).
pub const FILES_RULE: &str = "[ haarfs [ kind, ino [ part ]]]\n";

impl Schema {
    /// This schema with the file system rule ([`FILES_RULE`]) first, unless it already has a
    /// rule of its own for `haarfs`: a server then stores the records and chunks of `haar
    /// mount` under the same keys as a local store does (design §15.6). Put first, it takes
    /// only keys with `haarfs`, which no FDB5 rule names.
    pub fn with_files_rule(&self) -> Schema {
        let mut out = self.clone();
        if !self.mentions("haarfs") {
            let files = Schema::parse(FILES_RULE).expect("the file system rule parses (tested)");
            out.rules.splice(0..0, files.rules);
        }
        out
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_for_fdb5_is_the_builtin_one_without_its_fallback_rule() {
        assert!(BUILTIN_SCHEMA.trim_end().ends_with(FALLBACK_RULE));
        let full = Schema::parse(BUILTIN_SCHEMA).unwrap();
        let fdb5 = Schema::parse(&for_fdb5(BUILTIN_SCHEMA)).unwrap();
        assert_eq!(fdb5.rules.len() + 1, full.rules.len());
        assert_eq!(fdb5.rules[..], full.rules[..fdb5.rules.len()]);
        assert_eq!(fdb5.types, full.types);
        // A schema without haar's fallback rule is given as it is.
        let own = "[ class, expver [ type [ step, param ]]]\n";
        assert!(matches!(for_fdb5(own), std::borrow::Cow::Borrowed(s) if s == own));
    }

    #[test]
    fn the_files_rule_splits_file_system_keys_and_leaves_fields_alone() {
        let schema = Schema::builtin().with_files_rule();
        let k = Key::parse("haarfs=main,kind=data,ino=5,part=3").unwrap();
        let split = schema.split(&k, &ctx()).unwrap();
        assert_eq!(split.db.to_string(), "haarfs=main");
        assert_eq!(split.full(), k);
        let field = Key::parse(
            "class=od,expver=1,stream=oper,date=20240301,time=12,domain=g,type=fc,levtype=sfc,step=0,param=167",
        )
        .unwrap();
        assert_eq!(
            schema.split(&field, &ctx()).unwrap(),
            Schema::builtin().split(&field, &ctx()).unwrap()
        );
        // Added once.
        assert_eq!(schema.with_files_rule().rules.len(), schema.rules.len());
    }

    #[test]
    fn is_full_recognises_the_stored_form_without_building_it() {
        let schema = Schema::builtin();
        let asked = Key::parse(
            "class=od,expver=1,stream=oper,date=20240301,time=12,domain=g,type=fc,levtype=sfc,step=0,param=167",
        )
        .unwrap();
        let split = schema.split(&asked, &ctx()).unwrap();
        let full = split.full();
        assert!(split.is_full(&full));
        // Same field, not the stored form (expver and time not normalised).
        assert!(!split.is_full(&asked));
        let mut longer = full.clone();
        longer.push("extra", "1");
        assert!(!split.is_full(&longer));
    }

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

    /// FDB5's own test schema types `param` as `ParamID` (FDB5's strict Param): accepted, and
    /// normalised as `Param` (`t` and `130.128` are 130).
    #[test]
    fn param_id_is_fdb5s_strict_param() {
        let s = Schema::parse(
            "[ class, expver, stream, date, time, domain?g
                [ type, levtype, timespan?none
                    [ step, levelist?, param:ParamID ]]]",
        )
        .unwrap();
        let mut table = crate::param::ParamTable::new();
        table.insert("t", 130);
        let ctx = Context::at(2024, 3, 1).with_params(std::sync::Arc::new(table));
        for p in ["t", "130.128", "130"] {
            let key = Key::parse(&format!(
                "class=od,expver=1,stream=oper,date=20240101,time=12,type=fc,levtype=sfc,step=6,param={p}"
            ))
            .unwrap();
            assert_eq!(
                s.split(&key, &ctx).unwrap().datum.get("param"),
                Some("130"),
                "{p}"
            );
        }
        assert!(err("a: ParamId;").contains("unknown type"));
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
