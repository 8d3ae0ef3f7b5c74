//! `haar extract`: parses the ranges or points, calls `haar::extract::extract`, prints.

use std::io::Write;

use haar::extract::{Extracted, Selection};

use crate::args::{Cli, ExtractArgs};
use crate::{Failure, open};

/// `I-J` or `I` items, comma-separated.
fn parse_ranges(text: &str) -> Result<Vec<(u64, u64)>, Failure> {
    let bad = |item: &str| {
        Failure::usage(format!(
            "--ranges: '{item}' is not I-J (a half-open range of grid indices, I <= J) or I"
        ))
    };
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|item| {
            let item = item.trim();
            let (i, j) = match item.split_once('-') {
                Some((i, j)) => (i.parse::<u64>(), j.parse::<u64>()),
                None => (item.parse::<u64>(), item.parse::<u64>().map(|i| i + 1)),
            };
            match (i, j) {
                (Ok(i), Ok(j)) if i <= j => Ok((i, j)),
                _ => Err(bad(item)),
            }
        })
        .collect()
}

/// `LAT,LON,LAT,LON,...`.
fn parse_points(text: &str) -> Result<Vec<(f64, f64)>, Failure> {
    let nums: Vec<f64> = text
        .split(',')
        .map(|s| s.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| Failure::usage(format!("--points: '{text}' is not LAT,LON,... in degrees")))?;
    if nums.is_empty() || !nums.len().is_multiple_of(2) {
        return Err(Failure::usage(
            "--points: give pairs LAT,LON (an even number of numbers)",
        ));
    }
    Ok(nums.chunks(2).map(|p| (p[0], p[1])).collect())
}

fn json_line(e: &Extracted) -> serde_json::Value {
    serde_json::json!({
        "key": e.key.to_string(),
        "method": e.method.as_str(),
        "ranges": e.ranges.iter().map(|&(i, j)| [i, j]).collect::<Vec<_>>(),
        // NaN (missing) has no JSON number: null.
        "values": e.values,
    })
}

pub fn run(cli: &Cli, a: &ExtractArgs) -> Result<(), Failure> {
    let sel = match (&a.ranges, &a.points) {
        (Some(r), _) => Selection::Ranges(parse_ranges(r)?),
        (None, Some(p)) => Selection::Points(parse_points(p)?),
        (None, None) => return Err(Failure::usage("give --ranges or --points")),
    };
    let store = open::field_store_for_reading(cli)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let out_err = |e: std::io::Error| Failure::io(format!("writing the values: {e}"));
    // A request that matches no stored field is requested data missing (exit 2, naming it),
    // as for `haar retrieve`; fields a request names that are not stored are left out.
    let mut unmatched = Vec::new();
    for req in open::requests(Some(&a.request))? {
        let extracted = haar::extract::extract(&*store, &req, &sel)?;
        if extracted.is_empty() {
            unmatched.push(req.to_string());
        }
        for e in extracted {
            if a.json {
                writeln!(out, "{}", json_line(&e)).map_err(out_err)?;
            } else {
                write!(out, "{} {}", e.key, e.method.as_str()).map_err(out_err)?;
                for v in e.values.iter().flatten() {
                    write!(out, " {v}").map_err(out_err)?;
                }
                writeln!(out).map_err(out_err)?;
            }
        }
    }
    out.flush().map_err(out_err)?;
    if unmatched.is_empty() {
        Ok(())
    } else {
        Err(Failure::missing(format!(
            "no stored field matches {}",
            unmatched.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_points_parse() {
        assert_eq!(
            parse_ranges("0-10,5,7-7").unwrap(),
            vec![(0, 10), (5, 6), (7, 7)]
        );
        assert!(parse_ranges("5-3").is_err());
        assert!(parse_ranges("a-b").is_err());
        assert_eq!(
            parse_points("51.5,-0.1,-33,151").unwrap(),
            vec![(51.5, -0.1), (-33.0, 151.0)]
        );
        assert!(parse_points("1,2,3").is_err());
    }
}
