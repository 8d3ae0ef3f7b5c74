//! Gaussian grids for nearest-point lookup (`docs/design.md` §16, "Points"): the Gaussian
//! latitudes of a truncation `N`, and a global Gaussian grid, reduced (a number of points per
//! row: the octahedral O320, O1280, ... and the classic N grids) or regular, as far as finding
//! the grid index nearest to a latitude and longitude needs it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The `2N` Gaussian latitudes of `N` in degrees, north to south: the arcsines of the roots
/// of the Legendre polynomial of degree `2N`, found by Newton's method from the usual first
/// guess. Computed once per `N` (O1280 takes some milliseconds) and shared.
pub fn latitudes(n: u32) -> Arc<[f64]> {
    static CACHE: OnceLock<Mutex<HashMap<u32, Arc<[f64]>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some(l) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&n) {
        return Arc::clone(l);
    }
    let l: Arc<[f64]> = compute(n).into();
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(n, Arc::clone(&l));
    l
}

fn compute(n: u32) -> Vec<f64> {
    let rows = 2 * n as usize;
    let degree = rows as f64;
    let mut lat = vec![0.0; rows];
    for i in 0..n as usize {
        let mut z = (std::f64::consts::PI * (i as f64 + 0.75) / (degree + 0.5)).cos();
        for _ in 0..100 {
            // P_degree(z) and P_(degree-1)(z) by the three-term recurrence.
            let (mut p1, mut p2) = (1.0f64, 0.0f64);
            for j in 1..=rows {
                let p3 = p2;
                p2 = p1;
                p1 = ((2 * j - 1) as f64 * z * p2 - (j - 1) as f64 * p3) / j as f64;
            }
            let dp = degree * (z * p1 - p2) / (z * z - 1.0);
            let step = p1 / dp;
            z -= step;
            if step.abs() < 1e-15 {
                break;
            }
        }
        let d = z.asin().to_degrees();
        lat[i] = d;
        lat[rows - 1 - i] = -d;
    }
    lat
}

/// A global Gaussian grid scanned row by row from north to south, each row's points equally
/// spaced around the whole circle from `lon1`.
#[derive(Debug, Clone, PartialEq)]
pub struct GaussianGrid {
    /// Parallels between a pole and the equator.
    pub n: u32,
    /// Latitude of the first row, degrees (the grid may start below the first Gaussian row).
    pub lat1: f64,
    /// Longitude of each row's first point, degrees.
    pub lon1: f64,
    /// GRIB scanning mode flags (only north-to-south rows, west-to-east, row-major here).
    pub scanning_mode: u8,
    /// Points of each row, north to south (all `Ni` on a regular Gaussian grid).
    pub pl: Vec<u32>,
}

/// Distance between two points on the unit sphere, as an angle (radians).
fn angle(lat1: f64, lon1: f64, lat2: f64, lon2: f64) -> f64 {
    let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
    let dp = p2 - p1;
    let dl = (lon2 - lon1).to_radians();
    let h = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
    2.0 * h.sqrt().min(1.0).asin()
}

impl GaussianGrid {
    /// The grid index nearest to (`lat`, `lon`) in degrees on the sphere, or `None` when the
    /// grid is one this lookup does not know (scanning other than north to south and west to
    /// east row by row, a first latitude that is not a Gaussian latitude of `n`, more rows
    /// than `2n`, an empty row).
    pub fn nearest(&self, lat: f64, lon: f64) -> Option<u64> {
        if self.scanning_mode & 0xe0 != 0 || self.pl.is_empty() || self.pl.contains(&0) {
            return None;
        }
        let all = latitudes(self.n);
        // GRIB1 writes latitudes in millidegrees: within 0.5e-3 of the row's.
        let first = all.iter().position(|l| (l - self.lat1).abs() < 1e-3)?;
        let lats = all.get(first..first + self.pl.len())?;
        // Rows are north to south: the first row at or south of `lat`, and the one before.
        let south = lats.partition_point(|&l| l > lat);
        let candidates = [south.checked_sub(1), (south < lats.len()).then_some(south)];
        let mut best: Option<(f64, usize, u64)> = None;
        for row in candidates.into_iter().flatten() {
            let points = self.pl[row];
            let step = 360.0 / f64::from(points);
            let col =
                ((lon - self.lon1).rem_euclid(360.0) / step).round() as u64 % u64::from(points);
            let d = angle(lat, lon, lats[row], self.lon1 + col as f64 * step);
            if best.is_none_or(|(b, _, _)| d < b) {
                best = Some((d, row, col));
            }
        }
        let (_, row, col) = best?;
        let before: u64 = self.pl[..row].iter().map(|&p| u64::from(p)).sum();
        Some(before + col)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latitudes_are_symmetric_decreasing_and_inside_the_poles() {
        for n in [1, 2, 32, 320] {
            let l = latitudes(n);
            assert_eq!(l.len(), 2 * n as usize);
            assert!(l.windows(2).all(|w| w[0] > w[1]), "N{n} decreasing");
            assert!(l[0] < 90.0 && l[l.len() - 1] > -90.0);
            for i in 0..l.len() {
                assert_eq!(l[i], -l[l.len() - 1 - i]);
            }
        }
        // N1: the roots of P2 are ±1/sqrt(3).
        assert!((latitudes(1)[0] - (1.0f64 / 3.0f64.sqrt()).asin().to_degrees()).abs() < 1e-12);
    }

    #[test]
    fn nearest_on_a_small_reduced_grid() {
        // N1: two rows of 4 and 8 points from longitude 0.
        let g = GaussianGrid {
            n: 1,
            lat1: latitudes(1)[0],
            lon1: 0.0,
            scanning_mode: 0,
            pl: vec![4, 8],
        };
        assert_eq!(g.nearest(80.0, 0.0), Some(0));
        assert_eq!(g.nearest(30.0, 95.0), Some(1));
        assert_eq!(g.nearest(30.0, 359.0), Some(0)); // wraps to the row's first point
        assert_eq!(g.nearest(-80.0, 44.0), Some(4 + 1));
        assert_eq!(g.nearest(-30.0, -45.0), Some(4 + 7));
        let south_first = GaussianGrid {
            scanning_mode: 0x40,
            ..g.clone()
        };
        assert_eq!(south_first.nearest(0.0, 0.0), None);
        let not_gaussian = GaussianGrid { lat1: 10.0, ..g };
        assert_eq!(not_gaussian.nearest(0.0, 0.0), None);
    }
}
