//! `haar bench --scale`: how the cost of the everyday operations grows with the number of
//! fields in ONE database, for haar and for the real FDB5 in the same run.
//!
//! One IFS-like ensemble database (`class=od,expver=0001,stream=enfo,date,time,domain=g`) is
//! filled incrementally to each size (10^5, 10^6, optionally 10^7 fields): member-steps of
//! 1,644 fields (137 model levels × 12 parameters, `type=pf,levtype=ml`), 50 members per step,
//! a flush after each member-step as a forecast model does. At each size, for each store:
//!
//! - archive rate of the segment that reached the size (fields/s, archive + flushes);
//! - open: a fresh handle opening the database and doing its first lookup (one field read);
//! - list of one member-step (1,644 fields), in-process on an open handle and as a one-off
//!   CLI (`haar list`, FDB5's `fdb-list --porcelain`) in a fresh process, wall;
//! - retrieve of one field in-process on an open handle, and as a one-off CLI (`haar
//!   retrieve`, FDB5's `fdb-read`): wall and peak resident memory (`ru_maxrss` from `wait4`).
//!
//! Each store runs in a worker process of its own (this executable again, `haar
//! workload-worker`), told over a line protocol to fill to a size or to measure, so that
//! neither store's libraries, caches or mappings are in the other's process. The FDB5 worker
//! loads FDB5 5.25 from PyPI's `fdb5lib` wheel (`HAAR_FDB5_LIB`, [`crate::fdb5`]) and its CLI
//! figures come from the wheel's own `fdb-list` and `fdb-read`. Which member-steps and fields
//! are measured is drawn at random among those filled, the same draws for both stores.
//! Figures are medians (p50) over `--runs` runs after one untimed warm-up; the peak RSS is the
//! largest of the runs. Targets are printed as verdicts, never asserted.
//!
//! Owns this benchmark's load, measurements and report; the plot is [`crate::plot`]'s.
//!
//! The module's parts: the load (keys, requests, field bytes) and the command line's entry
//! points here; `worker` is the child process that fills and measures one store; `sweep` is
//! the parent, driving the workers size by size; `oneoff` runs each store's CLI tools as fresh
//! processes (wall, peak RSS); `report` judges the targets and writes the tables and the plot.

use std::path::{Path, PathBuf};
use std::time::Instant;

use haar_core::Key;
use serde::{Deserialize, Serialize};

use crate::error::{Error, io};
use crate::layout::PARAMS;

mod oneoff;
mod report;
mod sweep;
mod worker;

pub use oneoff::{Wheel, wheel};
pub use report::thousands;
pub use worker::worker;

/// Model levels per member-step.
pub const LEVELS: u64 = 137;
/// Ensemble members per step (`number=1..=50`).
pub const MEMBERS: u64 = 50;
/// Fields per member-step: 137 levels × 12 parameters.
pub const PER_MEMBER_STEP: u64 = LEVELS * PARAMS.len() as u64;
/// Smallest field: `GRIB`, the field number, `7777`.
pub const MIN_FIELD_BYTES: usize = 16;
/// Forecast base date and time of the database.
pub(super) const DATE: &str = "20261121";
pub(super) const TIME: &str = "0000";

/// The figures every size has for each store (the JSON's keys; `haar bench --scale`'s table).
pub const COLUMNS: [&str; 11] = [
    "archive_fields_per_s",
    "archive_seconds",
    "open_ms",
    "list_ms",
    "retrieve_ms",
    "list_cli_ms",
    "list_cli_rss_mb",
    "retrieve_cli_ms",
    "retrieve_cli_rss_mb",
    "store_mb",
    "listed",
];

/// What `haar bench --scale` runs (the command line's options; `haar bench --help` explains
/// each).
#[derive(Debug, Clone)]
pub struct Options {
    /// Database sizes in fields, ascending; each is rounded up to whole member-steps.
    pub sizes: Vec<u64>,
    /// Bytes per field.
    pub field_bytes: usize,
    /// haar's backend: `pmem` or `posix`.
    pub backend: String,
    /// Where the run's directory (both stores) is made; default /dev/shm.
    pub root: Option<PathBuf>,
    /// Directory for `scale.json`, `benchmarks-scale.md` and `scale.png`.
    pub out: PathBuf,
    /// Where to save the JSON instead of `OUT/scale.json`.
    pub json: Option<PathBuf>,
    /// Timed runs per figure (after one untimed warm-up).
    pub runs: usize,
    /// Run FDB5 beside haar (where its wheel is installed).
    pub fdb5: bool,
    /// Keep the stores afterwards.
    pub keep: bool,
    /// No progress bars.
    pub quiet: bool,
}

/// Which store a worker fills and measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// haar, opened with the worker's store options.
    Haar,
    /// FDB5 through its C API, configured by the environment.
    Fdb5,
}

impl Side {
    pub(super) fn name(self) -> &'static str {
        match self {
            Side::Haar => "haar",
            Side::Fdb5 => "fdb5",
        }
    }
}

/// What a scale worker is told at its start (JSON on its command line).
#[derive(Debug, Serialize, Deserialize)]
pub struct Spec {
    /// The store it works on.
    pub side: Side,
    /// Bytes per field.
    pub field_bytes: usize,
}

/// What to measure, drawn by the parent (the same for both stores).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Picks {
    /// Fields read by a fresh handle, by field number.
    pub(super) opens: Vec<u64>,
    /// Member-steps listed.
    pub(super) lists: Vec<u64>,
    /// Fields read through an open handle.
    pub(super) reads: Vec<u64>,
}

/// What a worker measured in its own process.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct InProcess {
    pub(super) open_ms: Vec<f64>,
    pub(super) list_ms: Vec<f64>,
    pub(super) read_ms: Vec<f64>,
    pub(super) listed: u64,
}

/// `(number, step)` of member-step `j`: steps outermost, as an ensemble advances.
pub fn member_step(j: u64) -> (u64, u64) {
    (j % MEMBERS + 1, j / MEMBERS)
}

/// The database and index part every field shares.
pub(super) fn base() -> Key {
    Key::new()
        .with("class", "od")
        .with("expver", "0001")
        .with("stream", "enfo")
        .with("date", DATE)
        .with("time", TIME)
        .with("domain", "g")
        .with("type", "pf")
        .with("levtype", "ml")
}

/// The key of field number `g` (member-step `g / 1644`; level-major within it).
pub fn key(g: u64) -> Key {
    let (number, step) = member_step(g / PER_MEMBER_STEP);
    let f = g % PER_MEMBER_STEP;
    base()
        .with("step", step.to_string())
        .with("number", number.to_string())
        .with("levelist", (f / PARAMS.len() as u64 + 1).to_string())
        .with(
            "param",
            PARAMS[(f % PARAMS.len() as u64) as usize].to_string(),
        )
}

/// The request of member-step `j`'s 1,644 fields, keyword → values.
pub(super) fn list_request(j: u64) -> Vec<(String, Vec<String>)> {
    let (number, step) = member_step(j);
    let mut r: Vec<(String, Vec<String>)> = base()
        .iter()
        .map(|(k, v)| (k.to_string(), vec![v.to_string()]))
        .collect();
    r.push(("step".into(), vec![step.to_string()]));
    r.push(("number".into(), vec![number.to_string()]));
    r.push((
        "levelist".into(),
        (1..=LEVELS).map(|l| l.to_string()).collect(),
    ));
    r.push(("param".into(), PARAMS.iter().map(u32::to_string).collect()));
    r
}

/// A request as MARS text (`k=v/v,k=v`), as `haar list` and `fdb-list` take it.
pub(super) fn request_text(r: &[(String, Vec<String>)]) -> String {
    r.iter()
        .map(|(k, vs)| format!("{k}={}", vs.join("/")))
        .collect::<Vec<_>>()
        .join(",")
}

/// The request of field `g` alone, as MARS text.
pub(super) fn field_request(g: u64) -> String {
    key(g)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Field `g`'s bytes: a fixed pattern with `GRIB` first, the field number after it and `7777`
/// last, so that every read can be checked.
pub(super) fn template(size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in v.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    v[..4].copy_from_slice(b"GRIB");
    v[size - 4..].copy_from_slice(b"7777");
    v
}

pub(super) fn stamp(data: &mut [u8], g: u64) {
    data[4..12].copy_from_slice(&g.to_le_bytes());
}

/// Whether `data` is field `g` of `size` bytes.
pub(super) fn is_field(data: &[u8], g: u64, size: usize) -> bool {
    data.len() == size
        && data.starts_with(b"GRIB")
        && data[4..12] == g.to_le_bytes()
        && data.ends_with(b"7777")
}

pub(super) fn failed(what: &str) -> impl Fn(haar_store::Error) -> Error + '_ {
    move |e| Error::Failed(format!("scale {what}: {e}"))
}

pub(super) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Parses `1e5,1e6,2000` into field counts.
///
/// # Errors
/// [`Error::Usage`] naming a value that is not a positive whole number of fields.
pub fn parse_sizes(text: &str) -> Result<Vec<u64>, Error> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let v: f64 = s
                .parse()
                .map_err(|_| Error::Usage(format!("--sizes: {s:?} is not a number (e.g. 1e5)")))?;
            if !(v >= 1.0 && v.fract() == 0.0 && v <= 1e12) {
                return Err(Error::Usage(format!(
                    "--sizes: {s:?} is not a whole number of fields between 1 and 1e12"
                )));
            }
            Ok(v as u64)
        })
        .collect()
}

/// Runs the benchmark.
pub fn run(o: &Options) -> Result<(), Error> {
    if o.sizes.is_empty() || o.sizes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::Usage(
            "--sizes must be one or more sizes in ascending order (e.g. 1e5,1e6)".into(),
        ));
    }
    if o.field_bytes < MIN_FIELD_BYTES {
        return Err(Error::Usage(format!(
            "--field-bytes must be at least {MIN_FIELD_BYTES} (GRIB, the field number, 7777)"
        )));
    }
    if !matches!(o.backend.as_str(), "pmem" | "posix") {
        return Err(Error::Usage(format!(
            "--backend {:?}: the scale benchmark runs on pmem or posix",
            o.backend
        )));
    }
    if o.runs == 0 {
        return Err(Error::Usage("--runs must be at least 1".into()));
    }
    let base = match &o.root {
        Some(d) => d.clone(),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    };
    let dir = base.join(format!("haar-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    std::fs::create_dir_all(&o.out).map_err(io(format!("cannot create {}", o.out.display())))?;
    crate::procs::install_interrupt_handler();
    let result = sweep::run_in(o, &dir);
    if o.keep {
        eprintln!("haar bench --scale: stores kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if crate::procs::interrupted() {
        return Err(Error::Interrupted);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_requests_and_sizes() {
        assert_eq!(PER_MEMBER_STEP, 1644);
        assert_eq!(member_step(0), (1, 0));
        assert_eq!(member_step(51), (2, 1));
        let k = key(PER_MEMBER_STEP + 13);
        assert_eq!(k.get("number"), Some("2"));
        assert_eq!(k.get("step"), Some("0"));
        assert_eq!(k.get("levelist"), Some("2"));
        assert_eq!(k.get("param"), Some("131"));
        assert_eq!(k.get("stream"), Some("enfo"));
        let r = request_text(&list_request(50));
        assert!(r.contains("step=1,number=1,levelist=1/2/3/"), "{r}");
        assert!(
            r.ends_with("param=130/131/132/133/135/138/155/129/203/246/247/248"),
            "{r}"
        );
        assert!(field_request(0).ends_with("step=0,number=1,levelist=1,param=130"));
        assert_eq!(
            parse_sizes("1e5, 1e6,2000").unwrap(),
            vec![100_000, 1_000_000, 2000]
        );
        assert!(parse_sizes("1.5").is_err());
        assert!(parse_sizes("x").is_err());
        assert_eq!(thousands(1_000_188), "1,000,188");
        assert_eq!(thousands(999), "999");
        let mut d = template(32);
        stamp(&mut d, 7);
        assert!(is_field(&d, 7, 32));
        assert!(!is_field(&d, 8, 32));
    }
}
