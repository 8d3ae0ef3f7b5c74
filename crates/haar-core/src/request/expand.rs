//! The keys a resolved request names ([`Request::expand`], [`Request::count`]) and the test of
//! a key against a request ([`Request::matches`]).
//!
//! Owns the cartesian product and the comparison, byte for byte, with canonical values. It must
//! not normalise values: it expects a request already resolved ([`Request::resolve`]).

use crate::key::Key;

use super::{Request, Values};

impl Request {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::test_support::resolved;

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
}
