//! `haar extract`: parses the ranges or points, calls `haar::extract::extract`, prints.

use std::io::Write;

use clap::Args;
use haar::extract::{Extracted, Selection};

use crate::args::{Cli, OpenArgs};
use crate::{Failure, open};

/// `haar extract`.
#[derive(Debug, Args)]
pub(crate) struct ExtractArgs {
    /// Request (MARS syntax, e.g. class=od,param=167,step=0/to/24/by/6).
    pub request: String,
    /// Half-open index ranges I-J ([I, J)), comma-separated, e.g. 0-10,5000-5004; a single
    /// index I means I-(I+1).
    #[arg(
        long,
        value_name = "I-J,...",
        required_unless_present = "points",
        conflicts_with = "points"
    )]
    pub ranges: Option<String>,
    /// Points LAT,LON,LAT,LON,... in degrees, each resolved per field to its nearest grid
    /// point on the sphere (regular lat/lon grids and global Gaussian grids, reduced such as
    /// O1280 or regular; other grids are refused: use --ranges).
    #[arg(long, value_name = "LAT,LON,...", allow_hyphen_values = true)]
    pub points: Option<String>,
    /// One JSON object per line per field: {"key", "method", "ranges", "values"} with the
    /// values of each range in order (missing: null).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub open: OpenArgs,
}

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

pub(crate) fn run(cli: &Cli, a: &ExtractArgs) -> Result<(), Failure> {
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
