//! Keys: an ordered list of MARS `keyword=value` pairs.
//!
//! Owns only the in-memory representation and its text form; normalisation of values lives in
//! [`crate::value`] and the split into database / index / datum levels in [`crate::schema`].

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// An ordered set of `keyword=value` pairs. Order is meaningful: a key produced by the schema
/// keeps the schema's order, so two keys of the same rule compare and print identically.
///
/// The pairs are shared between clones (copied on the first change of a shared key): a listing
/// hands every field its database and index keys, and cloning them pair by pair was half the
/// allocations of listing 1,644 fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    entries: Arc<Vec<(String, String)>>,
}

/// Error from [`Key::parse`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyParseError {
    /// A pair without `=`.
    #[error("key entry {entry:?} has no '=': write keyword=value")]
    MissingEquals {
        /// The offending text.
        entry: String,
    },
    /// An empty keyword.
    #[error("key entry {entry:?} has an empty keyword")]
    EmptyKeyword {
        /// The offending text.
        entry: String,
    },
    /// The same keyword twice.
    #[error("keyword {keyword:?} given twice in key")]
    Duplicate {
        /// The repeated keyword.
        keyword: String,
    },
}

impl Key {
    /// An empty key.
    pub fn new() -> Key {
        Key::default()
    }

    /// Parses `k=v,k=v` (no value lists; see [`crate::request`] for requests). Keywords are
    /// lower-cased; values are kept as given.
    pub fn parse(text: &str) -> Result<Key, KeyParseError> {
        let mut key = Key::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (k, v) = entry
                .split_once('=')
                .ok_or_else(|| KeyParseError::MissingEquals {
                    entry: entry.to_string(),
                })?;
            let k = k.trim().to_ascii_lowercase();
            if k.is_empty() {
                return Err(KeyParseError::EmptyKeyword {
                    entry: entry.to_string(),
                });
            }
            if key.get(&k).is_some() {
                return Err(KeyParseError::Duplicate { keyword: k });
            }
            key.push(k, v.trim());
        }
        Ok(key)
    }

    /// Appends a pair, or replaces the value if the keyword is present (keeping its position).
    pub fn push(&mut self, keyword: impl Into<String>, value: impl Into<String>) {
        let keyword = keyword.into();
        let value = value.into();
        let entries = Arc::make_mut(&mut self.entries);
        match entries.iter_mut().find(|(k, _)| *k == keyword) {
            Some(slot) => slot.1 = value,
            None => entries.push((keyword, value)),
        }
    }

    /// Builder form of [`Key::push`].
    pub fn with(mut self, keyword: impl Into<String>, value: impl Into<String>) -> Key {
        self.push(keyword, value);
        self
    }

    /// The value of `keyword`, if present.
    pub fn get(&self, keyword: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == keyword)
            .map(|(_, v)| v.as_str())
    }

    /// The position of `keyword` among the pairs, if present.
    pub fn position(&self, keyword: &str) -> Option<usize> {
        self.entries.iter().position(|(k, _)| k == keyword)
    }

    /// Replaces the value of the pair at `position` (panics if out of range), reusing the
    /// value's allocation: the hot path of [`crate::schema::Splitter`].
    pub fn set_value_at(&mut self, position: usize, value: &str) {
        let slot = &mut Arc::make_mut(&mut self.entries)[position].1;
        slot.clear();
        slot.push_str(value);
    }

    /// The pair at `position` (panics if out of range).
    pub(crate) fn entry_at(&self, position: usize) -> (&str, &str) {
        let (k, v) = &self.entries[position];
        (k, v)
    }

    /// Removes `keyword`, returning its value.
    pub fn remove(&mut self, keyword: &str) -> Option<String> {
        let pos = self.entries.iter().position(|(k, _)| k == keyword)?;
        Some(Arc::make_mut(&mut self.entries).remove(pos).1)
    }

    /// Pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Keywords in order.
    pub fn keywords(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the key has no pairs.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// This key followed by the pairs of `other` (other's values win on a clash).
    pub fn joined(&self, other: &Key) -> Key {
        let mut out = self.clone();
        for (k, v) in other.iter() {
            out.push(k, v);
        }
        out
    }

    /// The same pairs sorted by keyword: the form used to compare keys from different sources.
    pub fn sorted(&self) -> Key {
        let mut entries = (*self.entries).clone();
        entries.sort();
        Key {
            entries: Arc::new(entries),
        }
    }

    /// The same pairs without those whose value is empty (absent optional keywords), as FDB5
    /// prints keys.
    pub fn without_empty(&self) -> Key {
        Key {
            entries: Arc::new(
                self.entries
                    .iter()
                    .filter(|(_, v)| !v.is_empty())
                    .cloned()
                    .collect(),
            ),
        }
    }

    /// FDB5's `fdb-list` form of one level: `{k=v,k=v}`.
    pub fn braced(&self) -> String {
        format!("{{{self}}}")
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Key {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Key {
        let mut key = Key::new();
        for (k, v) in iter {
            key.push(k, v);
        }
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_shares_its_pairs_until_one_side_changes() {
        let a = Key::parse("class=od,stream=oper,step=0").unwrap();
        let mut b = a.clone();
        assert!(Arc::ptr_eq(&a.entries, &b.entries));
        b.push("step", "6");
        b.set_value_at(0, "rd");
        assert_eq!(b.remove("stream").as_deref(), Some("oper"));
        assert_eq!(a.to_string(), "class=od,stream=oper,step=0");
        assert_eq!(b.to_string(), "class=rd,step=6");
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Key>(&json).unwrap(), a);
    }

    #[test]
    fn parse_and_print_round_trip() {
        let key = Key::parse("Class=od, stream=oper,step=12").unwrap();
        assert_eq!(key.to_string(), "class=od,stream=oper,step=12");
        assert_eq!(key.get("stream"), Some("oper"));
        assert_eq!(Key::parse(&key.to_string()).unwrap(), key);
    }

    #[test]
    fn parse_rejects_bad_entries() {
        assert!(matches!(
            Key::parse("class"),
            Err(KeyParseError::MissingEquals { .. })
        ));
        assert!(matches!(
            Key::parse("=od"),
            Err(KeyParseError::EmptyKeyword { .. })
        ));
        assert!(matches!(
            Key::parse("a=1,a=2"),
            Err(KeyParseError::Duplicate { .. })
        ));
    }

    #[test]
    fn push_replaces_in_place() {
        let mut key = Key::new().with("a", "1").with("b", "2");
        key.push("a", "3");
        assert_eq!(key.to_string(), "a=3,b=2");
        assert_eq!(
            key.joined(&Key::new().with("c", "4")).to_string(),
            "a=3,b=2,c=4"
        );
    }
}
