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
//!
//! Layout: the request types and their builder live here; `keywords` holds the MARS keyword
//! and verb tables and abbreviations, `parse` the lexer and parser ([`parse_requests`]),
//! `display` the CLI form, `resolve` range expansion and normalisation ([`Request::resolve`]),
//! `expand` the keys a resolved request names ([`Request::expand`], [`Request::matches`]).

use crate::text::or_list;
use crate::value::ValueError;
#[cfg(doc)]
use crate::{key::Key, schema::Schema};

mod display;
mod expand;
mod keywords;
mod parse;
mod resolve;

pub use keywords::{ALIASES, KEYWORDS, VERBS, canonical_keyword, is_mars_keyword};
pub use parse::parse_requests;
pub use resolve::MAX_RANGE;

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
}

/// Helpers shared by the unit tests of the submodules.
#[cfg(test)]
mod test_support {
    use super::*;
    use crate::schema::Schema;
    use crate::value::Context;

    pub(super) fn ctx() -> Context {
        Context::at(2024, 3, 1)
    }

    pub(super) fn resolved(text: &str) -> Request {
        Request::parse(text)
            .unwrap()
            .resolve(Schema::builtin(), &ctx())
            .unwrap()
    }

    pub(super) fn list(r: &Request, k: &str) -> Vec<String> {
        match r.get(k) {
            Some(Values::List(v)) => v.clone(),
            other => panic!("{k}: {other:?}"),
        }
    }
}
