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
//!
//! Layout: the types live here; `normalise` holds the per-type normalisers and the MARS
//! lower-casing of untyped enumerations, `dates` the calendar (day numbers, relative and
//! climatological dates), `times` times of day and steps, `numbers` decimals and integers.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::param::ParamTable;

mod dates;
mod normalise;
mod numbers;
mod times;

pub use dates::{civil_from_days, days_from_civil};
pub(crate) use dates::{format_date, parse_date};
pub(crate) use numbers::{format_double, parse_double, parse_integer};
pub(crate) use times::{format_duration, format_time, parse_duration, parse_time};

/// What a normaliser needs from the outside world: today's date (for relative dates such as
/// `date=-1`) and, optionally, the ecCodes parameter table (for parameter names such as `2t`).
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// Today as (year, month, day), in UTC.
    pub today: (i32, u32, u32),
    /// Parameter table used to turn names into paramIds; numeric params need none.
    pub params: Option<Arc<ParamTable>>,
    /// Without `params`, load the default ecCodes table ([`crate::param::load_default`]) when
    /// a parameter name first needs it: reading the definitions costs about 8 ms, which a
    /// process that only meets numeric parameters (a one-off retrieve) never pays.
    pub lazy_params: bool,
}

impl Context {
    /// A context for a fixed day, without a parameter table (pure; what tests use).
    pub fn at(year: i32, month: u32, day: u32) -> Context {
        Context {
            today: (year, month, day),
            params: None,
            lazy_params: false,
        }
    }

    /// Today from the system clock (UTC), with the default ecCodes parameter table when it can be
    /// loaded ([`crate::param::load_default`], at the first parameter name). This is the one
    /// constructor that touches the environment.
    pub fn now() -> Context {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let days = i64::try_from(secs / 86_400).unwrap_or(0);
        Context {
            today: civil_from_days(days),
            params: None,
            lazy_params: true,
        }
    }

    /// The parameter table: the one given, else (with `lazy_params`) the default one.
    pub fn param_table(&self) -> Option<Arc<ParamTable>> {
        self.params.clone().or_else(|| {
            self.lazy_params
                .then(|| crate::param::load_default().ok())
                .flatten()
        })
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
    "ParamID",
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
            // FDB5's strict variant of Param (metkit's ParamID normalisation without its
            // fuzzy fall-backs, used by FDB5's own test schema): haar's Param matching has
            // no such fall-backs, so both are one type.
            "Param" | "ParamID" => ValueType::Param,
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

/// Helpers shared by the unit tests of the submodules.
#[cfg(test)]
mod test_support {
    use super::*;

    pub(super) fn ctx() -> Context {
        Context::at(2024, 3, 1)
    }

    pub(super) fn n(ty: ValueType, v: &str) -> Result<String, ValueError> {
        ty.normalise("k", v, &ctx())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_plausible() {
        let (y, m, d) = Context::now().today;
        assert!(y >= 2024 && (1..=12).contains(&m) && (1..=31).contains(&d));
    }

    #[test]
    fn type_names_parse() {
        for name in TYPE_NAMES {
            let t: ValueType = name.parse().unwrap();
            // FDB5's ParamID is an alias of Param (see `from_str`); every other name is its
            // own type's.
            let canonical = if *name == "ParamID" { "Param" } else { name };
            assert_eq!(t.to_string(), canonical);
        }
        assert!("Frobnicate".parse::<ValueType>().is_err());
        assert!("First0".parse::<ValueType>().is_err());
    }
}
