//! The answer file of `haar advise --answers`: one JSON object whose keys are the questions'
//! flags, parsed into [`Answers`].
//!
//! Owns the file's accepted keys and spellings (dashes or underscores, yes/no as booleans or
//! words, free-text `application` and `comment`). Must not open files: the CLI reads the text
//! and passes it in.

use super::questions::{Answers, IoPattern, Modifiable, parse_yes_no};

/// Reads an answer file: a JSON object with any of `memory_intensive`, `io_intensive`,
/// `io_pattern`, `modifiable`, `performance_critical` (dashes accepted for underscores; yes/no
/// as JSON booleans or strings), plus optional free-text `application` and `comment`.
///
/// # Errors
/// A message naming the key and the value that is not understood, or the unknown key.
pub fn answers_from_json(text: &str) -> Result<Answers, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or("the answer file must hold one JSON object")?;
    let mut a = Answers::default();
    for (key, val) in obj {
        let key_norm = key.replace('-', "_");
        let word = match val {
            serde_json::Value::Bool(b) => (if *b { "yes" } else { "no" }).to_string(),
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => continue,
            other => other.to_string(),
        };
        let bad = |expected: &str| format!("{key}: {word:?} is not understood ({expected})");
        match key_norm.as_str() {
            "application" | "comment" | "name" => {}
            "memory_intensive" => {
                a.memory_intensive = Some(parse_yes_no(&word).ok_or_else(|| bad("yes or no"))?)
            }
            "io_intensive" => {
                a.io_intensive = Some(parse_yes_no(&word).ok_or_else(|| bad("yes or no"))?)
            }
            "performance_critical" => {
                a.performance_critical = Some(parse_yes_no(&word).ok_or_else(|| bad("yes or no"))?)
            }
            "io_pattern" => {
                a.io_pattern =
                    Some(IoPattern::parse(&word).ok_or_else(|| bad("local, global or both"))?)
            }
            "modifiable" => {
                a.modifiable =
                    Some(Modifiable::parse(&word).ok_or_else(|| bad("yes, no or undesirable"))?)
            }
            _ => {
                return Err(format!(
                    "unknown key {key:?}: use memory_intensive, io_intensive, io_pattern, \
                     modifiable, performance_critical (and optionally application, comment)"
                ));
            }
        }
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::advise;

    #[test]
    fn answer_files_accept_booleans_words_and_dashes() {
        let a = answers_from_json(
            r#"{"application": "FDB5", "memory-intensive": false, "io_intensive": "yes",
                "io_pattern": "global", "modifiable": true, "performance_critical": "yes"}"#,
        )
        .unwrap();
        assert_eq!(advise(&a).unwrap().configuration, "AppDirect (PMDK)");
        assert!(
            answers_from_json(r#"{"io_pattern": "sideways"}"#)
                .unwrap_err()
                .contains("io_pattern")
        );
        assert!(
            answers_from_json(r#"{"colour": "red"}"#)
                .unwrap_err()
                .contains("colour")
        );
        assert!(answers_from_json("[1]").is_err());
        assert!(answers_from_json("{").unwrap_err().contains("JSON"));
    }
}
