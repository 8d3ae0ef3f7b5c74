//! Rule matching for archive: [`Schema::split`] finds the first rule whose three levels match a
//! field's key and builds the database / index / datum keys.
//!
//! Owns the matching state (each value normalised at most once however many rules are tried)
//! and the "closest rule" explanation of a failure. It must not parse schema text nor keep
//! state between keys (reusing a previous split is [`super::splitter`]'s job).

use std::borrow::Cow;

use crate::key::Key;
use crate::value::{Context, ValueError, ValueType};

#[cfg(doc)]
use super::Splitter;
use super::{Matcher, Rule, Schema, SchemaError, SplitKey};

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

pub(super) fn find_type<'a>(
    scope: &'a [(String, ValueType)],
    keyword: &str,
) -> Option<&'a ValueType> {
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
    pub(super) fn split_traced(
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
