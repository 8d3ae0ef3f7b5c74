//! Decimal and integer values as MARS accepts them (no `inf` or `nan`), and their canonical
//! text (integral decimals without a fraction).
//!
//! Owns parsing and printing of numbers only; it must not know keywords or types.

pub(crate) fn parse_double(v: &str) -> Option<f64> {
    // Rust accepts "inf", "nan", "infinity": MARS does not.
    if !v
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'))
    {
        return None;
    }
    v.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// Integral values without a fraction, others in Rust's shortest round-trip form (`0.5`).
pub(crate) fn format_double(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        // Integral and small enough to be exact as i64.
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

pub(crate) fn parse_integer(v: &str) -> Option<i64> {
    let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<i64>().ok()
}

#[cfg(test)]
mod tests {
    use crate::value::ValueType;
    use crate::value::test_support::n;

    #[test]
    fn numbers() {
        assert_eq!(n(ValueType::Double, "1000.0").unwrap(), "1000");
        assert_eq!(n(ValueType::Double, "0.5").unwrap(), "0.5");
        assert_eq!(n(ValueType::Double, ".5").unwrap(), "0.5");
        assert_eq!(n(ValueType::Double, "-0").unwrap(), "0");
        assert_eq!(n(ValueType::Double, "1e3").unwrap(), "1000");
        assert!(n(ValueType::Double, "nan").is_err());
        assert!(n(ValueType::Double, "inf").is_err());
        assert_eq!(n(ValueType::Integer, "01").unwrap(), "1");
        assert_eq!(n(ValueType::Integer, "+3").unwrap(), "3");
        assert_eq!(n(ValueType::Integer, "-03").unwrap(), "-3");
        assert!(n(ValueType::Integer, "1.0").is_err());
        assert!(n(ValueType::Integer, "-").is_err());
    }
}
