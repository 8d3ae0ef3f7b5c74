//! The normalisers of the value types ([`ValueType::normalise`]), and MARS's lower-casing of
//! untyped enumerations (`class`, `stream`, `type`, ...).
//!
//! Owns the choice of canonical text per type and the fast path for values that are already
//! canonical. It must not know which keyword has which type (the schema's job) and delegates
//! the reading of dates, times, steps and numbers to the sibling modules.

use std::borrow::Cow;

use super::dates::{
    civil_from_days, climate_daily, climate_monthly, climatological_date, days_in_month,
    format_date, parse_date,
};
use super::numbers::{format_double, parse_double, parse_integer};
use super::times::{format_step_range, format_time, parse_step_range, parse_time};
use super::{Context, ValueError, ValueType};

/// MARS keywords whose values are enumerations: MARS lower-cases them, so haar does too even
/// when the schema leaves them untyped (`Default`). Taken from metkit's `language.yaml`.
const LOWERCASE_KEYWORDS: &[&str] = &[
    "class",
    "stream",
    "type",
    "levtype",
    "domain",
    "origin",
    "product",
    "section",
    "obsgroup",
    "packing",
    "repres",
    "resolution",
    "paramtype",
    "tile",
    "units",
    "use",
    "stattype",
    "timespan",
    "activity",
    "experiment",
    "generation",
    "model",
    "realization",
    "dataset",
    "georef",
];

/// `LOWERCASE_KEYWORDS.contains(&keyword)`, as a `match` (compiled to length + byte compares).
fn is_lowercase_keyword(keyword: &str) -> bool {
    let found = matches!(
        keyword,
        "class"
            | "stream"
            | "type"
            | "levtype"
            | "domain"
            | "origin"
            | "product"
            | "section"
            | "obsgroup"
            | "packing"
            | "repres"
            | "resolution"
            | "paramtype"
            | "tile"
            | "units"
            | "use"
            | "stattype"
            | "timespan"
            | "activity"
            | "experiment"
            | "generation"
            | "model"
            | "realization"
            | "dataset"
            | "georef"
    );
    debug_assert_eq!(found, LOWERCASE_KEYWORDS.contains(&keyword));
    found
}

impl ValueType {
    /// Canonical text of `value` for `keyword` (the keyword only names the value in errors and
    /// selects MARS's lower-casing for untyped enumerations).
    pub fn normalise(
        &self,
        keyword: &str,
        value: &str,
        ctx: &Context,
    ) -> Result<String, ValueError> {
        self.normalise_cow(keyword, value, ctx).map(Cow::into_owned)
    }

    /// [`ValueType::normalise`] without allocating when the (trimmed) value is already
    /// canonical, which is the common case for values coming from GRIB (`1200`, `0001`, `130`,
    /// `20260101`): the result then borrows from `value`. Same results as `normalise`.
    pub fn normalise_cow<'v>(
        &self,
        keyword: &str,
        value: &'v str,
        ctx: &Context,
    ) -> Result<Cow<'v, str>, ValueError> {
        // `trim` scans for Unicode whitespace; values from GRIB start and end with ASCII
        // letters or digits, which need no trimming.
        let bytes = value.as_bytes();
        let untrimmed = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
        let v = if untrimmed(bytes.first()) && untrimmed(bytes.last()) {
            value
        } else {
            value.trim()
        };
        if v.is_empty() {
            return Ok(Cow::Borrowed(""));
        }
        if self.is_canonical(keyword, v) {
            return Ok(Cow::Borrowed(v));
        }
        self.normalise_slow(keyword, value, v, ctx).map(Cow::Owned)
    }

    /// True when normalising the non-empty trimmed value `v` would return `v` itself. Only
    /// cheap, sure cases answer true; `false` means "compute it".
    fn is_canonical(&self, keyword: &str, v: &str) -> bool {
        let b = v.as_bytes();
        let digits = b.iter().all(u8::is_ascii_digit);
        // Decimal digits without a leading zero (or "0"), short enough not to overflow.
        let plain_number = |max: usize| digits && b.len() <= max && (b[0] != b'0' || b.len() == 1);
        let lower = || b.iter().all(|c| c.is_ascii() && !c.is_ascii_uppercase());
        match self {
            ValueType::Default | ValueType::Ignore => !is_lowercase_keyword(keyword) || lower(),
            ValueType::Lowercase => lower(),
            ValueType::First(n) => b.len() <= *n,
            ValueType::Grid => !b.contains(&b'/'),
            ValueType::Date => {
                digits && b.len() == 8 && {
                    let num = |r: std::ops::Range<usize>| {
                        b[r].iter().fold(0u32, |a, d| a * 10 + u32::from(d - b'0'))
                    };
                    let (y, m, d) = (num(0..4), num(4..6), num(6..8));
                    // Years 0..=9999 round-trip through day numbers and `{y:04}`.
                    (1..=12).contains(&m) && d >= 1 && d <= days_in_month(y as i32, m)
                }
            }
            ValueType::Time => {
                digits && b.len() == 4 && {
                    let h = u32::from(b[0] - b'0') * 10 + u32::from(b[1] - b'0');
                    let m = u32::from(b[2] - b'0') * 10 + u32::from(b[3] - b'0');
                    h < 24 && m < 60
                }
            }
            ValueType::Step | ValueType::Double => plain_number(15),
            ValueType::Integer => plain_number(18),
            ValueType::Param => plain_number(9),
            ValueType::Expver => b.len() == 4 && b.iter().all(u8::is_ascii_alphanumeric),
            ValueType::MonthOfDate | ValueType::Month | ValueType::Year | ValueType::YearMonth => {
                already_canonical(self, v)
            }
            ValueType::ClimateDaily | ValueType::ClimateMonthly => false,
        }
    }

    /// The general normaliser: `value` as given, `v` trimmed and non-empty.
    fn normalise_slow(
        &self,
        keyword: &str,
        value: &str,
        v: &str,
        ctx: &Context,
    ) -> Result<String, ValueError> {
        let err = |expected: &str| ValueError {
            keyword: keyword.to_string(),
            value: value.to_string(),
            expected: expected.to_string(),
        };
        match self {
            ValueType::Default | ValueType::Ignore => {
                if is_lowercase_keyword(keyword) {
                    Ok(v.to_lowercase())
                } else {
                    Ok(v.to_string())
                }
            }
            ValueType::Lowercase => Ok(v.to_lowercase()),
            ValueType::First(n) => {
                // Trimmed again so that a cut ending in a space stays a fixed point.
                Ok(v.chars()
                    .take(*n)
                    .collect::<String>()
                    .trim_end()
                    .to_string())
            }
            ValueType::Grid => Ok(v.replace('/', "+")),
            ValueType::Date => match parse_date(v, ctx) {
                Some(days) => Ok(format_date(days)),
                None => climatological_date(v).ok_or_else(|| err(DATE_EXPECTED)),
            },
            ValueType::Time => {
                let minutes = parse_time(v).ok_or_else(|| err(TIME_EXPECTED))?;
                Ok(format_time(minutes))
            }
            ValueType::Step => {
                let (from, to) = parse_step_range(v).ok_or_else(|| err(STEP_EXPECTED))?;
                Ok(format_step_range(from, to))
            }
            ValueType::Expver => {
                if v.chars().count() > 4 || !v.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return Err(err("1 to 4 letters or digits (e.g. 1 → 0001, abcd)"));
                }
                Ok(format!("{v:0>4}"))
            }
            ValueType::Double => {
                let x = parse_double(v)
                    .ok_or_else(|| err("a finite decimal number (e.g. 1000, 0.5)"))?;
                Ok(format_double(x))
            }
            ValueType::Integer => {
                let n = parse_integer(v).ok_or_else(|| err("an integer (e.g. 1, 01, -3)"))?;
                Ok(n.to_string())
            }
            ValueType::Param => crate::param::normalise(keyword, value, ctx),
            ValueType::ClimateDaily => {
                let mmdd = climate_daily(v, ctx).ok_or_else(|| {
                    err("a date (20240415, 2024-04-15) or month-day (apr-15, 0415)")
                })?;
                Ok(format!("{mmdd:04}"))
            }
            ValueType::ClimateMonthly => {
                let m = climate_monthly(v, ctx)
                    .ok_or_else(|| err("a date (20240415), a month number (1-12) or name (apr)"))?;
                Ok(m.to_string())
            }
            ValueType::MonthOfDate | ValueType::Month | ValueType::Year | ValueType::YearMonth => {
                // Canonical values are accepted as they are, so normalising twice is harmless.
                if already_canonical(self, v) {
                    return Ok(v.to_string());
                }
                let days = parse_date(v, ctx).ok_or_else(|| err(DATE_EXPECTED))?;
                let (y, m, _) = civil_from_days(days);
                Ok(match self {
                    ValueType::MonthOfDate => format!("{m:02}"),
                    ValueType::Year => format!("{y:04}"),
                    _ => format!("{y:04}{m:02}"),
                })
            }
        }
    }
}

/// True when `v` already has the canonical shape of a date-derived type (`MM`, `YYYY`,
/// `YYYYMM`).
fn already_canonical(ty: &ValueType, v: &str) -> bool {
    let digits = v.bytes().all(|b| b.is_ascii_digit());
    let month_ok = |m: &str| m.parse::<u32>().is_ok_and(|m| (1..=12).contains(&m));
    match ty {
        ValueType::MonthOfDate => digits && v.len() == 2 && month_ok(v),
        ValueType::Year => digits && v.len() == 4,
        ValueType::Month | ValueType::YearMonth => digits && v.len() == 6 && month_ok(&v[4..]),
        _ => false,
    }
}

const DATE_EXPECTED: &str = "a date as YYYYMMDD or YYYY-MM-DD, 0, -1, -2 ... for today and the days before, \
     or a month and day without a year (aug-01)";
const TIME_EXPECTED: &str =
    "a time of day as H, HH, HHMM, HH:MM or HHMMSS (e.g. 0, 6, 12, 1230, 12:30)";
const STEP_EXPECTED: &str =
    "a step in hours, optionally with units and as a range (e.g. 12, 30m, 1h30m, 2d, 0-24)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::TYPE_NAMES;
    use crate::value::test_support::{ctx, n};
    use proptest::prelude::*;

    #[test]
    fn expvers() {
        assert_eq!(n(ValueType::Expver, "1").unwrap(), "0001");
        assert_eq!(n(ValueType::Expver, "abcd").unwrap(), "abcd");
        assert_eq!(n(ValueType::Expver, "ABCD").unwrap(), "ABCD");
        assert_eq!(n(ValueType::Expver, "1x").unwrap(), "001x");
        assert!(n(ValueType::Expver, "abcde").is_err());
        assert!(n(ValueType::Expver, "a/b").is_err());
    }

    #[test]
    fn calendar_types() {
        assert_eq!(n(ValueType::ClimateDaily, "20100415").unwrap(), "0415");
        assert_eq!(n(ValueType::ClimateDaily, "apr-15").unwrap(), "0415");
        assert_eq!(n(ValueType::ClimateDaily, "0415").unwrap(), "0415");
        assert_eq!(n(ValueType::ClimateMonthly, "20100415").unwrap(), "4");
        assert_eq!(n(ValueType::ClimateMonthly, "apr").unwrap(), "4");
        assert_eq!(n(ValueType::ClimateMonthly, "12").unwrap(), "12");
        assert!(n(ValueType::ClimateMonthly, "13").is_err());
        assert_eq!(n(ValueType::MonthOfDate, "20100415").unwrap(), "04");
        assert_eq!(n(ValueType::Month, "20100415").unwrap(), "201004");
        assert_eq!(n(ValueType::YearMonth, "2010-04-15").unwrap(), "201004");
        assert_eq!(n(ValueType::Year, "20100415").unwrap(), "2010");
        assert_eq!(n(ValueType::Year, "2010").unwrap(), "2010");
        assert_eq!(n(ValueType::MonthOfDate, "04").unwrap(), "04");
        assert_eq!(n(ValueType::Month, "201004").unwrap(), "201004");
        assert!(n(ValueType::Month, "201013").is_err());
    }

    #[test]
    fn strings() {
        assert_eq!(
            ValueType::Default.normalise("class", "OD", &ctx()).unwrap(),
            "od"
        );
        assert_eq!(
            ValueType::Default
                .normalise("ident", "AbC", &ctx())
                .unwrap(),
            "AbC"
        );
        assert_eq!(n(ValueType::Lowercase, "AbC").unwrap(), "abc");
        assert_eq!(n(ValueType::First(3), "nudging").unwrap(), "nud");
        assert_eq!(n(ValueType::Grid, "1/1").unwrap(), "1+1");
        assert_eq!(n(ValueType::Date, "").unwrap(), "");
        assert_eq!(n(ValueType::Date, "  20240101 ").unwrap(), "20240101");
    }

    proptest! {
        #[test]
        fn normalisation_is_idempotent(v in "\\PC{0,12}", t in 0usize..TYPE_NAMES.len()) {
            let ty: ValueType = TYPE_NAMES[t].parse().unwrap();
            if let Ok(once) = ty.normalise("levelist", &v, &ctx()) {
                let twice = ty.normalise("levelist", &once, &ctx());
                // Param names need a table; everything else must be a fixed point.
                if ty != ValueType::Param {
                    prop_assert_eq!(Ok(once.clone()), twice);
                }
            }
        }
    }
}
