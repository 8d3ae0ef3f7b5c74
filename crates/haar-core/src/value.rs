//! Normalisation of MARS values: one canonical text per value, applied identically when a field
//! is archived (values from GRIB) and when it is retrieved (values typed by a user).
//!
//! Owns the value types of FDB5 schemas ([`ValueType`]) and their canonical forms. It does not
//! know which keyword has which type (that is the schema's job, [`crate::schema`]) and it performs
//! no I/O: relative dates and parameter names come from the [`Context`] handed in.
//!
//! Canonical forms (FDB5's `fdb5/types/Type*.cc` and metkit's `StepRange` are the references):
//!
//! | type | accepted | canonical |
//! |------|----------|-----------|
//! | `Date` | `20240105`, `2024-01-05`, `0`, `-1` (today minus N days); a climatological month-day `aug-01`, `Aug-1` | `20240105`; `aug-01` |
//! | `Time` | `0`, `6`, `12`, `123`, `1200`, `12:00`, `120000`, `12:00:00` | `HHMM`: `0000`, `0600`, `1200`, `0123` |
//! | `Step` | `12`, `12h`, `30m`, `1h30m`, `90m`, `2d`, ranges `0-24` | metkit's `StepRange` text: `12`, `30m`, `1h30m`, `0-24` |
//! | `Expver` | 1 to 4 characters | left-padded with `0` to 4: `1` → `0001`, `abcd` kept |
//! | `Double` | any decimal | integral values without fraction: `1000.0` → `1000`; `0.5` |
//! | `Integer` | any integer | decimal without leading zeros or `+`: `01` → `1` |
//! | `Param` | `t`, `2T`, `130`, `130.128`, `167.228` | paramId: `130`, `228167` |
//! | `Grid` | any | `/` replaced by `+` |
//! | `ClimateDaily` | a date, or `apr-15` | `MMDD`: `0415` |
//! | `ClimateMonthly` | a date, a month number, or `apr` | month number: `4` |
//! | `MonthOfDate` | a date | `MM`: `04` |
//! | `Month`, `YearMonth` | a date | `YYYYMM` |
//! | `Year` | a date | `YYYY` |
//! | `Lowercase` | any | lower-cased |
//! | `First3` (`FirstN`) | any | the first N characters |
//! | `Default`, `Ignore` | any | as given (trimmed); MARS enumerations (`class`, `stream`, `type`, `levtype`, `domain`, …) lower-cased |
//!
//! The empty string is the value of an absent optional keyword and is canonical for every type.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::param::ParamTable;

/// What a normaliser needs from the outside world: today's date (for relative dates such as
/// `date=-1`) and, optionally, the ecCodes parameter table (for parameter names such as `2t`).
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// Today as (year, month, day), in UTC.
    pub today: (i32, u32, u32),
    /// Parameter table used to turn names into paramIds; numeric params need none.
    pub params: Option<Arc<ParamTable>>,
}

impl Context {
    /// A context for a fixed day, without a parameter table (pure; what tests use).
    pub fn at(year: i32, month: u32, day: u32) -> Context {
        Context {
            today: (year, month, day),
            params: None,
        }
    }

    /// Today from the system clock (UTC), with the default ecCodes parameter table when it can be
    /// loaded ([`crate::param::load_default`]). This is the one constructor that touches the
    /// environment.
    pub fn now() -> Context {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let days = i64::try_from(secs / 86_400).unwrap_or(0);
        Context {
            today: civil_from_days(days),
            params: crate::param::load_default().ok(),
        }
    }

    /// This context with `table` as its parameter table.
    pub fn with_params(mut self, table: Arc<ParamTable>) -> Context {
        self.params = Some(table);
        self
    }

    /// Today as a day number (days since 1970-01-01).
    fn today_days(&self) -> i64 {
        let (y, m, d) = self.today;
        days_from_civil(y, m, d)
    }
}

/// A value that could not be normalised.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?} for {keyword}: expected {expected}")]
pub struct ValueError {
    /// The keyword the value was given for.
    pub keyword: String,
    /// The offending value, as given.
    pub value: String,
    /// What the keyword's type accepts (and, for parameters, the closest known names).
    pub expected: String,
}

/// An FDB5 schema value type: selects the normaliser of a keyword.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// Kept as given (MARS enumerations are lower-cased).
    Default,
    /// Kept as given; the schema drops the keyword from keys (`key-`).
    Ignore,
    /// paramId.
    Param,
    /// Forecast step or step range.
    Step,
    /// `YYYYMMDD`.
    Date,
    /// `HHMM`.
    Time,
    /// Experiment version, 4 characters.
    Expver,
    /// Floating point number, printed without a fraction when integral.
    Double,
    /// Integer.
    Integer,
    /// Grid description, `/` replaced by `+`.
    Grid,
    /// Month and day of a date, `MMDD`.
    ClimateDaily,
    /// Month number of a date.
    ClimateMonthly,
    /// Month of a date, `MM`.
    MonthOfDate,
    /// Year and month of a date, `YYYYMM` (FDB5's `Month`).
    Month,
    /// Year of a date, `YYYY`.
    Year,
    /// Year and month of a date, `YYYYMM`.
    YearMonth,
    /// Lower-cased.
    Lowercase,
    /// The first N characters (FDB5's `First3`).
    First(usize),
}

/// The type names accepted in schemas, for error messages.
pub const TYPE_NAMES: &[&str] = &[
    "Default",
    "Ignore",
    "Param",
    "Step",
    "Date",
    "Time",
    "Expver",
    "Double",
    "Integer",
    "Grid",
    "ClimateDaily",
    "ClimateMonthly",
    "MonthOfDate",
    "Month",
    "Year",
    "YearMonth",
    "Lowercase",
    "First3",
];

impl FromStr for ValueType {
    type Err = ();

    /// Parses an FDB5 type name (case-sensitive, as FDB5 does).
    fn from_str(name: &str) -> Result<ValueType, ()> {
        Ok(match name {
            "Default" => ValueType::Default,
            "Ignore" => ValueType::Ignore,
            "Param" => ValueType::Param,
            "Step" => ValueType::Step,
            "Date" => ValueType::Date,
            "Time" => ValueType::Time,
            "Expver" => ValueType::Expver,
            "Double" => ValueType::Double,
            "Integer" => ValueType::Integer,
            "Grid" => ValueType::Grid,
            "ClimateDaily" => ValueType::ClimateDaily,
            "ClimateMonthly" => ValueType::ClimateMonthly,
            "MonthOfDate" => ValueType::MonthOfDate,
            "Month" => ValueType::Month,
            "Year" => ValueType::Year,
            "YearMonth" => ValueType::YearMonth,
            "Lowercase" => ValueType::Lowercase,
            _ => {
                // FDB5's TypeAbbreviation takes the count from the last character of the name.
                let n = name.strip_prefix("First").ok_or(())?;
                let n: usize = n.parse().map_err(|_| ())?;
                if n == 0 || n > 9 {
                    return Err(());
                }
                ValueType::First(n)
            }
        })
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueType::First(n) => write!(f, "First{n}"),
            other => write!(f, "{other:?}"),
        }
    }
}

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

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

// ----------------------------------------------------------------------------------------------
// Dates

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

fn days_in_month(y: i32, m: u32) -> u32 {
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
fn climatological_date(v: &str) -> Option<String> {
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

fn climate_daily(v: &str, ctx: &Context) -> Option<u32> {
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

fn climate_monthly(v: &str, ctx: &Context) -> Option<u32> {
    if v.len() <= 2 && v.bytes().all(|b| b.is_ascii_digit()) {
        let n: u32 = v.parse().ok()?;
        return (1..=12).contains(&n).then_some(n);
    }
    if let Some(i) = MONTHS.iter().position(|x| x.eq_ignore_ascii_case(v)) {
        return Some(i as u32 + 1);
    }
    parse_date(v, ctx).map(|days| civil_from_days(days).1)
}

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

// ----------------------------------------------------------------------------------------------
// Numbers

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
    use super::*;
    use proptest::prelude::*;

    fn ctx() -> Context {
        Context::at(2024, 3, 1)
    }

    fn n(ty: ValueType, v: &str) -> Result<String, ValueError> {
        ty.normalise("k", v, &ctx())
    }

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

    #[test]
    fn now_is_plausible() {
        let (y, m, d) = Context::now().today;
        assert!(y >= 2024 && (1..=12).contains(&m) && (1..=31).contains(&d));
    }

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

    #[test]
    fn type_names_parse() {
        for name in TYPE_NAMES {
            let t: ValueType = name.parse().unwrap();
            assert_eq!(t.to_string(), *name);
        }
        assert!("Frobnicate".parse::<ValueType>().is_err());
        assert!("First0".parse::<ValueType>().is_err());
    }

    proptest! {
        #[test]
        fn civil_round_trip(days in -1_000_000i64..1_000_000) {
            let (y, m, d) = civil_from_days(days);
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }

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
