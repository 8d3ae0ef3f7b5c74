//! Synthetic ensemble generator: real GRIB2 messages made by ecCodes, byte for
//! byte reproducible, in the sizes operational centres archive (an O320 field
//! at 16 bits per value is about 824 KiB, O640 about 3.2 MiB).
//!
//! This module owns only message *production* for tests and benchmarks; it
//! never reads or frames input.
//!
//! # How a message is made
//!
//! 1. For each (param, level) a *template* is encoded once: ecCodes sample
//!    `reduced_gg_pl_grib2` with an octahedral `pl` (or `regular_ll_pl_grib2` for a lat/lon grid),
//!    the ECMWF MARS local section (`localDefinitionNumber` 1: class, type,
//!    stream, expver), an ensemble product template (4.1: `number`), date,
//!    time, level, `paramId`, 16 bits per value and values from a deterministic
//!    PRNG seeded by (param, level). Packing the values is the expensive part.
//! 2. Each message is a clone of its template with only `step` and `number`
//!    set (`codes_set_long`, header-only, no repacking) and taken out with
//!    `codes_get_message`. So the data section is the same for every member and
//!    step of a (param, level); the MARS keys are all different.
//!
//! Octahedral grids (`O<N>`: `4i + 16` points on latitude row `i` = 1..N from
//! each pole, `4N(N + 9)` points) are written as reduced Gaussian grids whose
//! `pl` array is the octahedral one, exactly as ECMWF encodes them.
//!
//! Messages are written step by step, then member, level and param, the order
//! a model run emits them.

use std::io::Write;

use crate::ffi::{CodesError, Handle};
use crate::keys::KeyError;

/// A horizontal grid for synthetic fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Grid {
    /// Octahedral reduced Gaussian `O<N>`: N latitudes per hemisphere, N in 2..=8000.
    Octahedral(u32),
    /// Regular latitude/longitude with `ni` × `nj` points, global.
    RegularLatLon {
        /// Points along a parallel.
        ni: u32,
        /// Points along a meridian.
        nj: u32,
    },
}

impl Grid {
    /// O320: 421,120 points, about 824 KiB per message at 16 bits.
    pub const O320: Grid = Grid::Octahedral(320);
    /// O640: 1,661,440 points, about 3.2 MiB per message at 16 bits.
    pub const O640: Grid = Grid::Octahedral(640);

    /// Number of grid points.
    pub fn points(&self) -> u64 {
        match *self {
            Grid::Octahedral(n) => 4 * u64::from(n) * (u64::from(n) + 9),
            Grid::RegularLatLon { ni, nj } => u64::from(ni) * u64::from(nj),
        }
    }

    /// The `pl` array of an octahedral grid: points per latitude, north to south.
    fn octahedral_pl(n: u32) -> Vec<i64> {
        let north: Vec<i64> = (1..=i64::from(n)).map(|i| 4 * i + 16).collect();
        north.iter().chain(north.iter().rev()).copied().collect()
    }
}

/// What to generate: every combination of member × step × level × param.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsembleSpec {
    /// Ensemble members; messages get `number` 1..=members (type `pf`).
    pub members: u32,
    /// Forecast steps in hours.
    pub steps: Vec<u32>,
    /// Pressure levels in hPa (`levtype=pl`); empty means surface fields (`levtype=sfc`).
    pub levels: Vec<u32>,
    /// Parameters as ECMWF paramIds (e.g. 130 temperature, 131 u, 132 v, 133 q).
    pub params: Vec<u32>,
    /// Horizontal grid; [`Grid::O320`] gives about 824 KiB per message.
    pub grid: Grid,
    /// Base date as `YYYYMMDD`.
    pub date: u32,
    /// Base time as `HHMM`.
    pub time: u32,
    /// Experiment version, 4 characters (e.g. `"0001"`).
    pub expver: String,
    /// MARS class (e.g. `"od"`).
    pub class: String,
}

impl EnsembleSpec {
    /// Number of messages [`generate`] writes.
    pub fn message_count(&self) -> u64 {
        u64::from(self.members)
            * self.steps.len() as u64
            * self.levels.len().max(1) as u64
            * self.params.len() as u64
    }

    /// A small spec for tests: 2 members × 2 steps × 2 levels × 2 params on an 8×4 grid.
    pub fn tiny() -> Self {
        Self {
            members: 2,
            steps: vec![0, 6],
            levels: vec![500, 850],
            params: vec![130, 131],
            grid: Grid::RegularLatLon { ni: 8, nj: 4 },
            date: 20240101,
            time: 1200,
            expver: "0001".into(),
            class: "od".into(),
        }
    }
}

/// Totals of one [`generate`] run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Messages written.
    pub messages: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// Why generation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SynthError {
    /// ecCodes refused a key or value.
    #[error("ecCodes: {0}")]
    Codes(KeyError),
    /// The spec cannot be encoded (e.g. no params, or a field too large for GRIB2).
    #[error("invalid ensemble spec: {0}")]
    Spec(String),
    /// Writing the output failed.
    #[error("writing synthetic GRIB: {0}")]
    Io(#[from] std::io::Error),
}

impl From<CodesError> for SynthError {
    fn from(e: CodesError) -> Self {
        SynthError::Codes(e.into())
    }
}

/// splitmix64: tiny, fast, and the same on every platform.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Deterministic values for one (param, level): a smooth wave plus noise,
/// around a plausible magnitude, so packing sees realistic entropy.
fn field_values(points: usize, param: u32, level: u32) -> Vec<f64> {
    let mut rng = SplitMix64((u64::from(param) << 32) ^ u64::from(level) ^ 0x4841_4152);
    let base = 200.0 + f64::from(param % 100);
    (0..points)
        .map(|i| {
            let x = i as f64 / points as f64;
            base + 20.0 * (x * 40.0 * std::f64::consts::PI).sin() + 5.0 * rng.unit()
        })
        .collect()
}

fn template(
    spec: &EnsembleSpec,
    param: u32,
    level: Option<u32>,
) -> Result<Handle<'static>, SynthError> {
    let points = usize::try_from(spec.grid.points())
        .map_err(|_| SynthError::Spec("grid too large".into()))?;
    let mut h = match spec.grid {
        Grid::Octahedral(n) => {
            if !(2..=8000).contains(&n) {
                return Err(SynthError::Spec(format!("octahedral N={n} out of range")));
            }
            let mut h = Handle::from_sample("reduced_gg_pl_grib2")?;
            h.set_long("N", i64::from(n))?;
            h.set_long("Nj", 2 * i64::from(n))?;
            h.set_long_array("pl", &Grid::octahedral_pl(n))?;
            h.set_long("numberOfDataPoints", points as i64)?;
            h
        }
        Grid::RegularLatLon { ni, nj } => {
            if ni < 2 || nj < 2 {
                return Err(SynthError::Spec(format!(
                    "lat/lon grid {ni}x{nj} too small"
                )));
            }
            let mut h = Handle::from_sample("regular_ll_pl_grib2")?;
            h.set_long("Ni", i64::from(ni))?;
            h.set_long("Nj", i64::from(nj))?;
            // Global: 90N..90S, 0..360-dx, in millionths of a degree.
            let di = 360_000_000 / i64::from(ni);
            let dj = 180_000_000 / i64::from(nj - 1);
            h.set_long("latitudeOfFirstGridPoint", 90_000_000)?;
            h.set_long("latitudeOfLastGridPoint", -90_000_000)?;
            h.set_long("longitudeOfFirstGridPoint", 0)?;
            h.set_long("longitudeOfLastGridPoint", 360_000_000 - di)?;
            h.set_long("iDirectionIncrement", di)?;
            h.set_long("jDirectionIncrement", dj)?;
            h
        }
    };
    h.set_long("setLocalDefinition", 1)?;
    h.set_long("localDefinitionNumber", 1)?;
    h.set_string("class", &spec.class)?;
    h.set_string("stream", "enfo")?;
    h.set_string("type", "pf")?;
    h.set_string("expver", &spec.expver)?;
    h.set_long("productDefinitionTemplateNumber", 1)?;
    h.set_long(
        "numberOfForecastsInEnsemble",
        i64::from(spec.members.max(1)),
    )?;
    h.set_long("number", 1)?;
    h.set_long("date", i64::from(spec.date))?;
    h.set_long("time", i64::from(spec.time))?;
    h.set_long("step", 0)?;
    match level {
        Some(l) => {
            h.set_string("typeOfLevel", "isobaricInhPa")?;
            h.set_long("level", i64::from(l))?;
        }
        None => h.set_string("typeOfLevel", "surface")?,
    }
    h.set_long("paramId", i64::from(param))?;
    h.set_long("bitsPerValue", 16)?;
    h.set_double_array("values", &field_values(points, param, level.unwrap_or(0)))?;
    Ok(h)
}

/// Write every message of `spec` to `out` (see the [module docs](self) for
/// how and in which order). Same spec, same bytes, on every run and machine
/// with the same ecCodes version.
pub fn generate(spec: &EnsembleSpec, out: &mut dyn Write) -> Result<Summary, SynthError> {
    if spec.params.is_empty() || spec.steps.is_empty() || spec.members == 0 {
        return Err(SynthError::Spec(
            "members, steps and params must not be empty".into(),
        ));
    }
    let levels: Vec<Option<u32>> = if spec.levels.is_empty() {
        vec![None]
    } else {
        spec.levels.iter().copied().map(Some).collect()
    };
    let mut templates = Vec::with_capacity(levels.len() * spec.params.len());
    for &level in &levels {
        for &param in &spec.params {
            templates.push(template(spec, param, level)?);
        }
    }
    let mut summary = Summary::default();
    for &step in &spec.steps {
        for number in 1..=spec.members {
            for t in &templates {
                let mut h = t.try_clone()?;
                h.set_long("step", i64::from(step))?;
                h.set_long("number", i64::from(number))?;
                let bytes = h.message()?;
                out.write_all(bytes)?;
                summary.messages += 1;
                summary.bytes += bytes.len() as u64;
            }
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octahedral_point_counts() {
        assert_eq!(Grid::O320.points(), 421_120);
        assert_eq!(Grid::O640.points(), 1_661_440);
        let pl = Grid::octahedral_pl(320);
        assert_eq!(pl.iter().sum::<i64>(), 421_120);
        assert_eq!((pl[0], pl[319], pl[320], pl[639]), (20, 1296, 1296, 20));
    }
}
