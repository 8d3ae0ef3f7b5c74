//! Times of day (`HHMM`) and forecast steps (`12`, `30m`, `1h30m`, ranges `0-24`), as minutes
//! and seconds.
//!
//! Owns parsing and printing of times and durations. It must not know keywords or types: the
//! normalisers in `normalise` and range expansion in [`crate::request`] call it.

// ----------------------------------------------------------------------------------------------
// Times

/// Minutes after midnight of a MARS time.
pub(crate) fn parse_time(v: &str) -> Option<u32> {
    let all_digits = v.bytes().all(|b| b.is_ascii_digit());
    let (h, m, s): (u32, u32, u32) = if v.contains(':') {
        let parts: Vec<&str> = v.split(':').collect();
        let num = |p: &str| {
            (!p.is_empty() && p.len() <= 2 && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse::<u32>().ok())
                .flatten()
        };
        match parts[..] {
            [h, m] => (num(h)?, num(m)?, 0),
            [h, m, s] => (num(h)?, num(m)?, num(s)?),
            _ => return None,
        }
    } else if all_digits && !v.is_empty() {
        let n: u32 = v.parse().ok()?;
        match v.len() {
            1 | 2 => (n, 0, 0),
            3 | 4 => (n / 100, n % 100, 0),
            6 => (n / 10_000, n / 100 % 100, n % 100),
            _ => return None,
        }
    } else {
        return None;
    };
    (h < 24 && m < 60 && s == 0).then_some(h * 60 + m)
}

/// `HHMM` of minutes after midnight.
pub(crate) fn format_time(minutes: u32) -> String {
    format!("{:02}{:02}", minutes / 60, minutes % 60)
}

// ----------------------------------------------------------------------------------------------
// Steps

/// Seconds of one step: `12`, `12h`, `30m`, `45s`, `2d`, `1h30m`, `1d6h`.
pub(crate) fn parse_duration(v: &str) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    if v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<i64>().ok()?.checked_mul(3600);
    }
    let mut total: i64 = 0;
    let mut number = String::new();
    let mut last_unit = 5; // units must appear in decreasing order: d h m s
    for c in v.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let (rank, secs) = match c.to_ascii_lowercase() {
            'd' => (4, 86_400),
            'h' => (3, 3600),
            'm' => (2, 60),
            's' => (1, 1),
            _ => return None,
        };
        if number.is_empty() || rank >= last_unit {
            return None;
        }
        last_unit = rank;
        let n: i64 = number.parse().ok()?;
        total = total.checked_add(n.checked_mul(secs)?)?;
        number.clear();
    }
    if !number.is_empty() {
        return None;
    }
    Some(total)
}

/// (from, to) in seconds of a step or step range (`0-24`).
pub(crate) fn parse_step_range(v: &str) -> Option<(i64, i64)> {
    match v.split('-').collect::<Vec<_>>()[..] {
        [one] => {
            let s = parse_duration(one)?;
            Some((s, s))
        }
        [a, b] => Some((parse_duration(a)?, parse_duration(b)?)),
        _ => None,
    }
}

/// metkit's canonical step text (`StepRange::print` without days): whole hours as a bare number,
/// otherwise `XhYmZs` with zero components left out (`30m`, `1h30m`).
pub(crate) fn format_duration(secs: i64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h != 0 || (m == 0 && s == 0) {
        out += &h.to_string();
        if m != 0 || s != 0 {
            out.push('h');
        }
    }
    if m != 0 {
        out += &format!("{m}m");
    }
    if s != 0 {
        out += &format!("{s}s");
    }
    out
}

/// A step range's text: one duration when from == to, else `from-to`.
pub(crate) fn format_step_range(from: i64, to: i64) -> String {
    if from == to {
        format_duration(from)
    } else {
        format!("{}-{}", format_duration(from), format_duration(to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::ValueType;
    use crate::value::test_support::n;
    use proptest::prelude::*;

    #[test]
    fn times() {
        for (i, o) in [
            ("0", "0000"),
            ("6", "0600"),
            ("12", "1200"),
            ("00", "0000"),
            ("123", "0123"),
            ("1200", "1200"),
            ("0030", "0030"),
            ("12:00", "1200"),
            ("6:30", "0630"),
            ("120000", "1200"),
            ("12:30:00", "1230"),
        ] {
            assert_eq!(n(ValueType::Time, i).unwrap(), o, "{i}");
        }
        for bad in ["24", "1260", "12:60", "120001", "12345", "a", "1:2:3:4"] {
            assert!(n(ValueType::Time, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn steps() {
        for (i, o) in [
            ("0", "0"),
            ("12", "12"),
            ("012", "12"),
            ("12h", "12"),
            ("30m", "30m"),
            ("90m", "1h30m"),
            ("1h30m", "1h30m"),
            ("1H", "1"),
            ("2d", "48"),
            ("0-24", "0-24"),
            ("24-24", "24"),
            ("0h-1h30m", "0-1h30m"),
            ("45s", "45s"),
        ] {
            assert_eq!(n(ValueType::Step, i).unwrap(), o, "{i}");
        }
        for bad in ["-1", "1-2-3", "h", "30mh", "1.5", "m30", "1m1h"] {
            assert!(n(ValueType::Step, bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn steps_round_trip(a in 0i64..200_000, b in 0i64..200_000) {
            let text = format_step_range(a, b);
            prop_assert_eq!(parse_step_range(&text), Some(if a == b { (a, a) } else { (a, b) }));
        }


        #[test]
        fn times_round_trip(h in 0u32..24, m in 0u32..60) {
            let t = format_time(h * 60 + m);
            prop_assert_eq!(parse_time(&t), Some(h * 60 + m));
        }
    }
}
