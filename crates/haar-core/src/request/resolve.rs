//! [`Request::resolve`]: `to`/`by` range expansion in each keyword type's units, value
//! normalisation with the schema's types, and removal of duplicate values.
//!
//! Owns turning values as typed into canonical values. It must not build keys from a request
//! (that is `expand`'s job) nor decide where fields live (the schema's split).

use crate::schema::Schema;
use crate::text::closest;
use crate::value::{
    Context, ValueType, format_date, format_double, format_duration, format_time, parse_date,
    parse_double, parse_duration, parse_integer, parse_time,
};

use super::keywords::{KEYWORDS, is_mars_keyword};
use super::{Param, Request, RequestError, Values};

impl Request {
    /// Expands `to`/`by` ranges and normalises every value with the schema's type for its
    /// keyword, removing duplicates (first occurrence kept). Keywords unknown to both MARS and
    /// the schema are errors, with suggestions.
    pub fn resolve(&self, schema: &Schema, ctx: &Context) -> Result<Request, RequestError> {
        let mut out = Request {
            verb: self.verb.clone(),
            params: Vec::with_capacity(self.params.len()),
        };
        for p in &self.params {
            if !is_mars_keyword(&p.keyword) && !schema.mentions(&p.keyword) {
                let schema_keywords = schema.keywords();
                return Err(RequestError::UnknownKeyword {
                    keyword: p.keyword.clone(),
                    suggestions: closest(
                        &p.keyword,
                        schema_keywords
                            .iter()
                            .copied()
                            .chain(KEYWORDS.iter().copied()),
                        3,
                    ),
                });
            }
            let values = match &p.values {
                Values::All => Values::All,
                Values::List(raw) => {
                    let ty = schema.type_of(&p.keyword);
                    Values::List(expand_values(&p.keyword, &ty, raw, ctx)?)
                }
            };
            out.params.push(Param {
                keyword: p.keyword.clone(),
                values,
            });
        }
        Ok(out)
    }
}

/// Longest range expanded; beyond this a request is surely a mistake (and would exhaust memory).
pub const MAX_RANGE: usize = 100_000;

fn is_word(v: &str, w: &str) -> bool {
    v.eq_ignore_ascii_case(w)
}

fn expand_values(
    keyword: &str,
    ty: &ValueType,
    raw: &[String],
    ctx: &Context,
) -> Result<Vec<String>, RequestError> {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    let range_err = |range: String, reason: &str| RequestError::Range {
        keyword: keyword.to_string(),
        range,
        reason: reason.to_string(),
    };
    while i < raw.len() {
        let v = &raw[i];
        if is_word(v, "to") || is_word(v, "by") {
            return Err(range_err(
                raw.join("/"),
                &format!("'{v}' must follow a value: write start/to/end[/by/increment]"),
            ));
        }
        if raw.get(i + 1).is_some_and(|t| is_word(t, "to")) {
            let end = raw
                .get(i + 2)
                .filter(|e| !is_word(e, "to") && !is_word(e, "by"))
                .ok_or_else(|| range_err(raw[i..].join("/"), "'to' needs an end value"))?;
            let (by, used) = if raw.get(i + 3).is_some_and(|b| is_word(b, "by")) {
                let by = raw
                    .get(i + 4)
                    .ok_or_else(|| range_err(raw[i..].join("/"), "'by' needs an increment"))?;
                (Some(by.as_str()), 5)
            } else {
                (None, 3)
            };
            let text = raw[i..i + used.min(raw.len() - i)].join("/");
            let values = range(keyword, ty, v, end, by, ctx)
                .map_err(|reason| range_err(text.clone(), &reason))?;
            for x in values {
                out.push(ty.normalise(keyword, &x, ctx)?);
            }
            i += used;
        } else {
            out.push(ty.normalise(keyword, v, ctx)?);
            i += 1;
        }
    }
    dedup_keep_first(&mut out);
    Ok(out)
}

/// Removes repeated values, keeping the first occurrence of each.
fn dedup_keep_first(values: &mut Vec<String>) {
    if values.len() <= 32 {
        // Quadratic but allocation-free: requests name few values per keyword.
        let mut i = 1;
        while i < values.len() {
            if values[..i].contains(&values[i]) {
                values.remove(i);
            } else {
                i += 1;
            }
        }
    } else {
        let mut seen = std::collections::HashSet::with_capacity(values.len());
        values.retain(|v| seen.insert(v.clone()));
    }
}

/// Expands start/to/end/by/step in the keyword type's units. Returns the reason on failure.
fn range(
    keyword: &str,
    ty: &ValueType,
    start: &str,
    end: &str,
    by: Option<&str>,
    ctx: &Context,
) -> Result<Vec<String>, String> {
    match ty {
        ValueType::Date => {
            let bad = |v: &str| format!("{v:?} is not a date (YYYYMMDD, YYYY-MM-DD or -N)");
            let s = parse_date(start.trim(), ctx).ok_or_else(|| bad(start))?;
            let e = parse_date(end.trim(), ctx).ok_or_else(|| bad(end))?;
            let by = match by {
                None => toward(s, e, 1),
                Some(b) => parse_integer(b.trim())
                    .ok_or_else(|| format!("increment {b:?} is not a number of days"))?,
            };
            Ok(steps_i64(s, e, by)?.into_iter().map(format_date).collect())
        }
        ValueType::Time => {
            let bad = |v: &str| format!("{v:?} is not a time (HHMM, HH:MM, H)");
            let s = parse_time(start.trim()).ok_or_else(|| bad(start))?;
            let e = parse_time(end.trim()).ok_or_else(|| bad(end))?;
            let by = match by {
                None => toward(i64::from(s), i64::from(e), 360),
                Some(b) => duration_minutes(b.trim())
                    .ok_or_else(|| format!("increment {b:?} is not a duration (6, 6h, 30m)"))?,
            };
            let values = steps_i64(i64::from(s), i64::from(e), by)?;
            Ok(values
                .into_iter()
                .map(|m| format_time(u32::try_from(m).unwrap_or(0)))
                .collect())
        }
        ValueType::Step => {
            let bad = |v: &str| format!("{v:?} is not a single step (12, 30m, 1h30m)");
            let s = parse_duration(start.trim()).ok_or_else(|| bad(start))?;
            let e = parse_duration(end.trim()).ok_or_else(|| bad(end))?;
            let by = match by {
                None => toward(s, e, 12 * 3600),
                Some(b) => parse_duration(b.trim())
                    .or_else(|| {
                        let n = parse_integer(b.trim())?;
                        n.checked_mul(3600)
                    })
                    .ok_or_else(|| format!("increment {b:?} is not a step (6, 30m)"))?,
            };
            Ok(steps_i64(s, e, by)?
                .into_iter()
                .map(format_duration)
                .collect())
        }
        ValueType::Double => {
            let bad = |v: &str| format!("{v:?} is not a number");
            let s = parse_double(start.trim()).ok_or_else(|| bad(start))?;
            let e = parse_double(end.trim()).ok_or_else(|| bad(end))?;
            let by = match by {
                None if e < s => -1.0,
                None => 1.0,
                Some(b) => parse_double(b.trim()).ok_or_else(|| bad(b))?,
            };
            if by == 0.0 {
                return Err("the increment is zero".into());
            }
            let n = ((e - s) / by + 1e-9).floor();
            if n < 0.0 {
                return Err(wrong_direction(&format_double(by)));
            }
            if n >= MAX_RANGE as f64 {
                return Err(too_long());
            }
            Ok((0..=n as usize)
                .map(|k| format_double(((s + k as f64 * by) * 1e9).round() / 1e9))
                .collect())
        }
        _ => {
            let bad = |v: &str| {
                format!(
                    "{v:?} is not an integer; {keyword} ranges need integers \
                     (dates, times, steps and levels need their schema type)"
                )
            };
            let s = parse_integer(start.trim()).ok_or_else(|| bad(start))?;
            let e = parse_integer(end.trim()).ok_or_else(|| bad(end))?;
            let by = match by {
                None => toward(s, e, 1),
                Some(b) => parse_integer(b.trim()).ok_or_else(|| bad(b))?,
            };
            Ok(steps_i64(s, e, by)?
                .into_iter()
                .map(|n| n.to_string())
                .collect())
        }
    }
}

/// The default increment counts down when the range does (MARS: `24/to/0` is 24/12/0); an
/// explicit increment of the wrong sign is an error instead.
fn toward(start: i64, end: i64, by: i64) -> i64 {
    if end < start { -by } else { by }
}

fn duration_minutes(v: &str) -> Option<i64> {
    if v.len() <= 2 {
        return parse_integer(v)?.checked_mul(60);
    }
    if let Some(secs) = parse_duration(v) {
        return Some(secs / 60);
    }
    parse_time(v).map(i64::from)
}

fn wrong_direction(by: &str) -> String {
    format!("the increment {by} moves away from the end; use a negative 'by' to count down")
}

fn too_long() -> String {
    format!("more than {MAX_RANGE} values")
}

fn steps_i64(s: i64, e: i64, by: i64) -> Result<Vec<i64>, String> {
    if by == 0 {
        return Err("the increment is zero".into());
    }
    let span = i128::from(e) - i128::from(s);
    if span != 0 && (span < 0) != (by < 0) {
        return Err(wrong_direction(&by.to_string()));
    }
    let count = span / i128::from(by) + 1;
    if count > MAX_RANGE as i128 {
        return Err(too_long());
    }
    Ok((0..count as i64).map(|k| s + k * by).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::test_support::{ctx, list, resolved};

    #[test]
    fn ranges() {
        let r =
            resolved("step=0/to/24,date=20240227/to/20240302,time=0/to/18,levelist=1000/to/998");
        assert_eq!(list(&r, "step"), ["0", "12", "24"]);
        assert_eq!(
            list(&r, "date"),
            ["20240227", "20240228", "20240229", "20240301", "20240302"]
        );
        assert_eq!(list(&r, "time"), ["0000", "0600", "1200", "1800"]);
        assert_eq!(list(&r, "levelist"), ["1000", "999", "998"]);
        let r = resolved("step=24/to/0/by/-6,number=1/to/9/by/4,date=-2/to/0,step=0/to/2/by/30m");
        assert_eq!(list(&r, "step"), ["0", "30m", "1", "1h30m", "2"]);
        assert_eq!(list(&r, "number"), ["1", "5", "9"]);
        assert_eq!(list(&r, "date"), ["20240228", "20240229", "20240301"]);
        let r = resolved("levelist=0.1/to/0.5/by/0.1,time=2/1/0/to/12");
        assert_eq!(list(&r, "levelist"), ["0.1", "0.2", "0.3", "0.4", "0.5"]);
        assert_eq!(list(&r, "time"), ["0200", "0100", "0000", "0600", "1200"]);
    }

    #[test]
    fn range_errors() {
        let s = Schema::builtin();
        for (text, needle) in [
            ("step=0/to/24/by/-6", "moves away"),
            ("step=0/to", "needs an end"),
            ("step=to/6", "must follow a value"),
            ("number=1/to/2/by/0", "zero"),
            ("number=1/to/10000000", "more than"),
            ("class=a/to/b", "not an integer"),
        ] {
            let e = Request::parse(text)
                .unwrap()
                .resolve(s, &ctx())
                .unwrap_err();
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn resolve_normalises_and_dedups() {
        let r = resolved(
            "class=OD,expver=1,time=12/1200/12:00,param=130.128/130,levelist=1000.0/0.5,step=30m/0-24",
        );
        assert_eq!(list(&r, "class"), ["od"]);
        assert_eq!(list(&r, "expver"), ["0001"]);
        assert_eq!(list(&r, "time"), ["1200"]);
        assert_eq!(list(&r, "param"), ["130"]);
        assert_eq!(list(&r, "levelist"), ["1000", "0.5"]);
        assert_eq!(list(&r, "step"), ["30m", "0-24"]);
        let e = Request::parse("stram=oper")
            .unwrap()
            .resolve(Schema::builtin(), &ctx())
            .unwrap_err();
        assert!(e.to_string().contains("did you mean stream"), "{e}");
        let e = Request::parse("date=2024-02-30")
            .unwrap()
            .resolve(Schema::builtin(), &ctx());
        assert!(e.unwrap_err().to_string().contains("YYYYMMDD"));
    }

    #[test]
    fn dedup_keeps_first_occurrence() {
        let mut small: Vec<String> = ["b", "a", "b", "c", "a"].map(String::from).to_vec();
        dedup_keep_first(&mut small);
        assert_eq!(small, ["b", "a", "c"]);
        let mut big: Vec<String> = (0..100).map(|i| (i % 40).to_string()).collect();
        dedup_keep_first(&mut big);
        assert_eq!(big, (0..40).map(|i| i.to_string()).collect::<Vec<_>>());
    }
}
