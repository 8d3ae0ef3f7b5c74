//! A field's grid as far as nearest-point lookup needs it (`docs/design.md` §16, "Points"):
//! regular latitude/longitude and global Gaussian geometry, read from a GRIB message's grid
//! section (GRIB2 templates 3.0 and 3.40, GRIB1 GDS types 0 and 4), and the nearest grid index
//! to a latitude and longitude. Owns the grid sections' byte layout; the jump record
//! (`jump`) stores what is read here, and Gaussian latitudes are `gaussian`'s.

use crate::gaussian::GaussianGrid;

/// A regular latitude/longitude grid, as far as nearest-point lookup needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RegularLatLon {
    /// Points along a parallel.
    pub ni: u32,
    /// Points along a meridian.
    pub nj: u32,
    /// Latitude of the first point, degrees.
    pub lat1: f64,
    /// Longitude of the first point, degrees.
    pub lon1: f64,
    /// Longitude step from one point to the next along a row (negative scanning west).
    pub di: f64,
    /// Latitude step from one row to the next (negative scanning south).
    pub dj: f64,
    /// GRIB scanning mode flags (bit 0x20: columns consecutive, unsupported here).
    pub scanning_mode: u8,
}

impl RegularLatLon {
    /// The grid index nearest to (`lat`, `lon`) in degrees, or `None` when the latitude is
    /// outside the grid or the points are stored column by column.
    pub fn nearest(&self, lat: f64, lon: f64) -> Option<u64> {
        if self.scanning_mode & 0x20 != 0 || self.di == 0.0 || self.dj == 0.0 {
            return None;
        }
        let row = ((lat - self.lat1) / self.dj).round();
        if !(0.0..f64::from(self.nj)).contains(&row) {
            return None;
        }
        let span = 360.0 / self.di.abs();
        let mut col = ((lon - self.lon1) / self.di).rem_euclid(span).round();
        // A global grid wraps: the nearest point past the last column is the first one.
        if col >= span.round() {
            col = 0.0;
        }
        if col >= f64::from(self.ni) {
            // Beyond a limited area: the nearer edge.
            let past_end = col - f64::from(self.ni - 1);
            let before_start = span - col;
            col = if past_end <= before_start {
                f64::from(self.ni - 1)
            } else {
                0.0
            };
        }
        Some(row as u64 * u64::from(self.ni) + col as u64)
    }
}

/// A field's grid, as far as nearest-point lookup needs it.
#[derive(Debug, Clone, PartialEq)]
pub enum Geometry {
    /// A regular latitude/longitude grid.
    Regular(RegularLatLon),
    /// A global Gaussian grid, reduced or regular.
    Gaussian(GaussianGrid),
}

impl Geometry {
    /// The grid index nearest to (`lat`, `lon`) in degrees, or `None` when the point is outside
    /// the grid or the grid is one the lookup does not know (see each kind's `nearest`).
    pub fn nearest(&self, lat: f64, lon: f64) -> Option<u64> {
        match self {
            Geometry::Regular(g) => g.nearest(lat, lon),
            Geometry::Gaussian(g) => g.nearest(lat, lon),
        }
    }
}

/// GRIB's big-endian unsigned integers.
pub(crate) fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x))
}

/// GRIB's sign-and-magnitude integers (high bit is the sign).
pub(crate) fn signed(b: &[u8]) -> i64 {
    let bits = 8 * b.len() as u32;
    let v = be(b);
    let mag = (v & ((1u64 << (bits - 1)) - 1)) as i64;
    if v >> (bits - 1) == 1 { -mag } else { mag }
}

/// GRIB2 template 3.0 (section 3 bytes from its start, at least 72).
pub(crate) fn geometry2(s: &[u8]) -> RegularLatLon {
    let micro = |o: usize| signed(&s[o..o + 4]) as f64 / 1e6;
    let scan = s[71];
    let di = micro(63).abs();
    let dj = micro(67).abs();
    RegularLatLon {
        ni: be(&s[30..34]) as u32,
        nj: be(&s[34..38]) as u32,
        lat1: micro(46),
        lon1: micro(50),
        di: if scan & 0x80 != 0 { -di } else { di },
        dj: if scan & 0x40 != 0 { dj } else { -dj },
        scanning_mode: scan,
    }
}

/// GRIB2 template 3.40 (the whole section 3): a Gaussian grid, reduced (a `pl` list of points
/// per row) or regular (`Ni` on every row); `None` for a limited area in longitude, a list
/// that is not points per row, or a short section.
pub(crate) fn gaussian2(s: &[u8]) -> Option<GaussianGrid> {
    let octets = usize::from(s[10]);
    let micro = |o: usize| signed(&s[o..o + 4]) as f64 / 1e6;
    let nj = be(&s[34..38]) as usize;
    let pl: Vec<u32> = if octets == 0 {
        let ni = be(&s[30..34]) as u32;
        vec![ni; nj]
    } else {
        // Octet 12: 1 = the list holds the points of each parallel.
        if s[11] != 1 || s.len() < 72 + octets * nj {
            return None;
        }
        (0..nj)
            .map(|r| be(&s[72 + octets * r..72 + octets * (r + 1)]) as u32)
            .collect()
    };
    gaussian_global(
        GaussianGrid {
            n: be(&s[67..71]) as u32,
            lat1: micro(46),
            lon1: micro(50),
            scanning_mode: s[71],
            pl,
        },
        micro(59),
    )
}

/// GRIB1 GDS data representation type 4 (the whole GDS): as [`gaussian2`].
pub(crate) fn gaussian1(s: &[u8]) -> Option<GaussianGrid> {
    let milli = |o: usize| signed(&s[o..o + 3]) as f64 / 1e3;
    let ni = be(&s[6..8]) as u32;
    let nj = be(&s[8..10]) as usize;
    let (nv, pvl) = (usize::from(s[3]), usize::from(s[4]));
    let pl: Vec<u32> = if ni != 0xffff {
        vec![ni; nj]
    } else {
        // The list starts at octet PVL (1-based), after NV vertical coordinates of 4 octets.
        let start = (pvl + 4 * nv).checked_sub(1)?;
        if pvl == 0 || pvl == 255 || s.len() < start + 2 * nj {
            return None;
        }
        (0..nj)
            .map(|r| be(&s[start + 2 * r..start + 2 * r + 2]) as u32)
            .collect()
    };
    gaussian_global(
        GaussianGrid {
            n: be(&s[25..27]) as u32,
            lat1: milli(10),
            lon1: milli(13),
            scanning_mode: s[27],
            pl,
        },
        milli(20),
    )
}

/// `g` if each row goes round the whole circle: its last longitude `lon2` is within two steps
/// of the widest row short of `lon1` + 360 (encoders write the step of one row or another:
/// ecCodes' own O320 has N320's 359.71875), else a limited area, not handled.
fn gaussian_global(g: GaussianGrid, lon2: f64) -> Option<GaussianGrid> {
    let widest = f64::from(*g.pl.iter().max()?);
    let span = (lon2 - g.lon1).rem_euclid(360.0);
    (span >= 360.0 - 2.0 * 360.0 / widest && g.n > 0).then_some(g)
}

/// GRIB1 GDS data representation type 0 (GDS bytes from its start, at least 28).
pub(crate) fn geometry1(s: &[u8]) -> RegularLatLon {
    let milli = |o: usize| signed(&s[o..o + 3]) as f64 / 1e3;
    let scan = s[27];
    let di = be(&s[23..25]) as f64 / 1e3;
    let dj = be(&s[25..27]) as f64 / 1e3;
    RegularLatLon {
        ni: be(&s[6..8]) as u32,
        nj: be(&s[8..10]) as u32,
        lat1: milli(10),
        lon1: milli(13),
        di: if scan & 0x80 != 0 { -di } else { di },
        dj: if scan & 0x40 != 0 { dj } else { -dj },
        scanning_mode: scan,
    }
}
