//! The CLI form of a request (`retrieve,class=od,param=130/167`), quoting values so that the
//! text parses back to the same request.
//!
//! Owns printing only; it must not change the request it prints.

use std::fmt;

use super::{Request, Values};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn awkward_values_survive() {
        let long = "x".repeat(10_000);
        let r = Request::new("list").with("ident", &["a/b", "..", "\0", &long, "", "all"]);
        let text = r.to_string();
        assert_eq!(Request::parse(&text).unwrap(), r);
        assert_eq!(r.expand().len(), 6);
    }
}
