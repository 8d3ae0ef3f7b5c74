//! Small text helpers shared by the parsers: edit distance for "did you mean" suggestions and
//! byte-offset to line/column conversion. Owns nothing else.

/// Levenshtein distance over chars, capped so that huge fuzz inputs stay cheap.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    const CAP: usize = 64;
    let a: Vec<char> = a.chars().take(CAP).collect();
    let b: Vec<char> = b.chars().take(CAP).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Up to `limit` candidates closest to `word` (case-insensitive), nearest first, ties in the
/// candidates' order. Candidates further than half the word's length (plus 2) are dropped.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    limit: usize,
) -> Vec<String> {
    let word = word.to_ascii_lowercase();
    let max = word.chars().count() / 2 + 2;
    let mut scored: Vec<(usize, usize, &str)> = candidates
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let lc = c.to_ascii_lowercase();
            // A candidate that starts with the word is a likely intent even when much longer.
            let d = if lc.starts_with(&word) && !word.is_empty() {
                1
            } else {
                edit_distance(&word, &lc)
            };
            (d, i, c)
        })
        .filter(|(d, _, _)| *d <= max)
        .collect();
    scored.sort();
    let mut out: Vec<String> = Vec::new();
    for (_, _, c) in scored {
        if !out.iter().any(|o| o == c) {
            out.push(c.to_string());
        }
        if out.len() == limit {
            break;
        }
    }
    out
}

/// 1-based line and column (in chars) of byte `offset` in `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let mut line = 1;
    let mut col = 1;
    for (i, c) in text.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
    }
    (line, col)
}

/// Formats a list for error messages: `a, b or c`.
pub(crate) fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_basics() {
        assert_eq!(edit_distance("step", "step"), 0);
        assert_eq!(edit_distance("stpe", "step"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("levelist", "levlist"), 1);
    }

    #[test]
    fn closest_orders_by_distance() {
        let c = closest("stram", ["step", "stream", "class"], 2);
        assert_eq!(c, vec!["stream".to_string(), "step".to_string()]);
        assert!(closest("zzzzzzzz", ["step"], 3).is_empty());
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("ab", 99), (1, 3));
    }
}
