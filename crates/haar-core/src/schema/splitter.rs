//! [`Splitter`]: [`Schema::split`] for a stream of keys, reusing the previous split when only
//! values that cannot change the choice of rule differ (the archive hot path).
//!
//! Owns the reuse decision and the in-place update of the last split. It must not match rules
//! itself: anything it cannot prove unchanged goes through [`Schema::split`] (in
//! [`super::matching`]), so both always give the same result.

use std::sync::Arc;

use crate::key::Key;
use crate::value::Context;

use super::{Matcher, Rule, Schema, SchemaError, SplitKey};

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
