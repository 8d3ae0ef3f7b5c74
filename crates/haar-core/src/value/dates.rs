//! Calendar arithmetic and the date forms MARS accepts: `YYYYMMDD`, `YYYY-MM-DD`, days relative
//! to today (`0`, `-1`), climatological dates (`aug-01`) and the month/day derivations of the
//! climate types.
//!
//! Owns parsing and printing of dates as day numbers. It must not read the clock: today comes
//! from the [`Context`] handed in.

use super::Context;

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
pub fn days_from_civil(y: i32, m: u32, d: u32) -> i64 {
    let y = i64::from(y) - i64::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (days since 1970-01-01), as (year, month, day).
pub fn civil_from_days(z: i64) -> (i32, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = y + i64::from(m <= 2);
    (i32::try_from(y).unwrap_or(i32::MAX), m, d)
}

pub(super) fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn ymd_days(y: i32, m: u32, d: u32) -> Option<i64> {
    ((1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m)).then(|| days_from_civil(y, m, d))
}

/// Day number of a MARS date: `YYYYMMDD`, `YYYY-MM-DD` or a relative day (`0`, `-1`, ...).
pub(crate) fn parse_date(v: &str, ctx: &Context) -> Option<i64> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = v.strip_prefix('-') {
        if digits(rest) && rest.len() <= 6 {
            return Some(ctx.today_days() - rest.parse::<i64>().ok()?);
        }
        return None;
    }
    if digits(v) && v.len() <= 6 && v.parse::<i64>().ok()? == 0 {
        return Some(ctx.today_days());
    }
    if v.len() == 8 && digits(v) {
        return ymd_days(
            v[..4].parse().ok()?,
            v[4..6].parse().ok()?,
            v[6..].parse().ok()?,
        );
    }
    let parts: Vec<&str> = v.split('-').collect();
    if let [y, m, d] = parts[..]
        && y.len() == 4
        && digits(y)
        && (1..=2).contains(&m.len())
        && digits(m)
        && (1..=2).contains(&d.len())
        && digits(d)
    {
        return ymd_days(y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    }
    None
}

/// A climatological date (month and day, no year), as ecCodes writes the MARS `date` of a
/// message whose year is missing (`aug-01`): canonical `mmm-dd`, lower case, two-digit day.
///
/// FDB5 5.10's `Date` type (`TypeDate::tidy`) keeps any value that does not start with `0` or
/// `-` as it is, so it archives and lists such fields under ecCodes' text `aug-01`; haar does
/// the same, and also accepts `Aug-1` in requests. (FDB5's `fdb-read` then fails on it with
/// "Invalid date"; haar retrieves it.)
pub(super) fn climatological_date(v: &str) -> Option<String> {
    let (name, day) = v.split_once('-')?;
    let m = MONTHS.iter().position(|x| x.eq_ignore_ascii_case(name))? as u32 + 1;
    if day.is_empty() || day.len() > 2 || !day.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let d: u32 = day.parse().ok()?;
    // Any year: 29 February is a valid climatological day.
    (d >= 1 && d <= days_in_month(2000, m)).then(|| format!("{}-{d:02}", MONTHS[m as usize - 1]))
}

/// `YYYYMMDD` of a day number.
pub(crate) fn format_date(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}{m:02}{d:02}")
}

pub(super) fn climate_daily(v: &str, ctx: &Context) -> Option<u32> {
    if let Some(days) = parse_date(v, ctx) {
        let (_, m, d) = civil_from_days(days);
        return Some(m * 100 + d);
    }
    if v.len() == 4 && v.bytes().all(|b| b.is_ascii_digit()) {
        let n: u32 = v.parse().ok()?;
        let (m, d) = (n / 100, n % 100);
        return ((1..=12).contains(&m) && d >= 1 && d <= days_in_month(2000, m)).then_some(n);
    }
    let (name, day) = v.split_once('-')?;
    let m = MONTHS.iter().position(|x| x.eq_ignore_ascii_case(name))? as u32 + 1;
    let d: u32 = day.parse().ok()?;
    (d >= 1 && d <= days_in_month(2000, m)).then_some(m * 100 + d)
}

pub(super) fn climate_monthly(v: &str, ctx: &Context) -> Option<u32> {
    if v.len() <= 2 && v.bytes().all(|b| b.is_ascii_digit()) {
        let n: u32 = v.parse().ok()?;
        return (1..=12).contains(&n).then_some(n);
    }
    if let Some(i) = MONTHS.iter().position(|x| x.eq_ignore_ascii_case(v)) {
        return Some(i as u32 + 1);
    }
    parse_date(v, ctx).map(|days| civil_from_days(days).1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::ValueType;
    use crate::value::test_support::n;
    use proptest::prelude::*;

    #[test]
    fn dates() {
        assert_eq!(n(ValueType::Date, "20240105").unwrap(), "20240105");
        assert_eq!(n(ValueType::Date, "2024-01-05").unwrap(), "20240105");
        assert_eq!(n(ValueType::Date, "2024-1-5").unwrap(), "20240105");
        assert_eq!(n(ValueType::Date, "0").unwrap(), "20240301");
        assert_eq!(n(ValueType::Date, "-1").unwrap(), "20240229");
        assert_eq!(n(ValueType::Date, "-366").unwrap(), "20230301");
        for bad in ["20240230", "2024013", "x", "2024-13-01", "--1", "+1", "1"] {
            let e = n(ValueType::Date, bad).unwrap_err();
            assert!(e.to_string().contains("YYYYMMDD"), "{e}");
        }
    }

    /// ecCodes' `date` of a GRIB message without a year (earthkit-data's
    /// `t_year_missing.grib`: `aug-01`), which FDB5 archives as it is.
    #[test]
    fn climatological_dates_are_kept_as_eccodes_writes_them() {
        for (given, want) in [
            ("aug-01", "aug-01"),
            ("Aug-1", "aug-01"),
            ("FEB-29", "feb-29"),
            ("dec-31", "dec-31"),
        ] {
            assert_eq!(n(ValueType::Date, given).unwrap(), want, "{given}");
            // A fixed point, as every canonical value must be.
            assert_eq!(n(ValueType::Date, want).unwrap(), want);
        }
        for bad in [
            "aug-32", "feb-30", "aug-", "aug-001", "au-01", "aug-x1", "aug",
        ] {
            let e = n(ValueType::Date, bad).unwrap_err();
            assert!(e.to_string().contains("aug-01"), "{bad}: {e}");
        }
    }

    #[test]
    fn civil_round_trip_known_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    proptest! {
        #[test]
        fn civil_round_trip(days in -1_000_000i64..1_000_000) {
            let (y, m, d) = civil_from_days(days);
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
