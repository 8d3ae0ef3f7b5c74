//! The array-size sweep: sizes doubling between two bounds, inner repetitions so that small
//! arrays still take long enough to time, and [`run_sweep`], which runs every size through
//! [`super::run`] and gathers what the plot shows (series per kernel, cache-size markers).
//!
//! Prints and draws nothing: the caller prints each point as it comes and draws the plot.

use std::path::Path;

use super::config::{Config, StreamError, preflight};
use super::kernels::Kernel;
use super::report::Report;
use crate::machine;
use crate::plot::{Marker, Series, short_bytes};

/// What a sweep ran and what its plot shows.
pub struct Sweep {
    /// One report per size, smallest first.
    pub reports: Vec<Report>,
    /// Best rate per kernel, GB/s, against the three arrays' total bytes.
    pub series: Vec<Series>,
    /// Every cache level (all instances together), and MemTotal when the sweep passes it.
    pub markers: Vec<Marker>,
    /// The plot's title.
    pub title: String,
}

/// The default largest array of a sweep: 8 x the last-level caches (`llc_total` bytes), at
/// most a quarter of the available memory per array.
pub fn default_sweep_max(llc_total: u64) -> u64 {
    let avail = machine::memory(Path::new("/")).1.unwrap_or(1 << 30);
    (8 * llc_total).min(avail / 4 / 3)
}

/// Runs STREAM with `base`'s workers and placement at every size of `sizes` (elements per
/// array, from [`sweep_sizes`]), the largest checked before anything is allocated; calls
/// `point` with each size's report as it is measured.
pub fn run_sweep(
    base: &Config,
    sizes: &[usize],
    llc_total: u64,
    llc_level: u32,
    point: &mut dyn FnMut(&Report),
) -> Result<Sweep, StreamError> {
    let Some(&largest) = sizes.last() else {
        return Err(StreamError::Input("a sweep needs at least one size".into()));
    };
    preflight(&Config {
        elements: largest,
        ..base.clone()
    })?;
    let mut reports = Vec::new();
    for &elements in sizes {
        let cfg = Config {
            elements: elements.max(8 * base.cpus.len()),
            inner_reps: sweep_reps(elements, 128 << 20),
            ..base.clone()
        };
        let r = super::run(&cfg)?;
        point(&r);
        reports.push(r);
    }
    let series: Vec<Series> = Kernel::ALL
        .into_iter()
        .map(|k| Series {
            name: k.name().to_string(),
            points: reports
                .iter()
                .map(|r| (r.total_bytes as f64, r.kernel(k).best_rate_mb_s / 1000.0))
                .collect(),
        })
        .collect();
    // Every cache level (all instances together): the cliffs sit at these sizes.
    let mut markers: Vec<Marker> = machine::caches(Path::new("/"))
        .iter()
        .map(|c| Marker {
            x: c.total() as f64,
            label: format!("L{} {}", c.level, short_bytes(c.total() as f64)),
        })
        .collect();
    if markers.is_empty() {
        markers.push(Marker {
            x: llc_total as f64,
            label: format!("L{llc_level} {}", short_bytes(llc_total as f64)),
        });
    }
    // In Memory mode the memory behind DRAM is persistent memory: mark where DRAM ends.
    if let Some(total) = machine::memory(Path::new("/")).0
        && (total as f64) < reports.last().map_or(0.0, |r| r.total_bytes as f64)
    {
        markers.push(Marker {
            x: total as f64,
            label: "MemTotal".into(),
        });
    }
    let first = &reports[0];
    let title = format!(
        "haar stream sweep: {} {}, {}",
        first.cpus.len(),
        match first.workers {
            super::config::Workers::Processes => "processes",
            super::config::Workers::Threads => "threads",
        },
        match &first.placement.dir {
            None => "DRAM".to_string(),
            Some(d) => format!("file in {}", d.display()),
        }
    );
    Ok(Sweep {
        reports,
        series,
        markers,
        title,
    })
}

/// Inner repetitions for a sweep point so that one timed sample moves at least
/// `target_bytes` (small arrays finish too fast to time in one pass).
pub fn sweep_reps(elements: usize, target_bytes: u64) -> usize {
    let per_pass = 16 * elements as u64; // the lightest kernels move 2 words per element
    target_bytes.div_ceil(per_pass.max(1)).max(1) as usize
}

/// Array sizes (elements per array) of a sweep: doubling from `min_bytes` to `max_bytes`
/// per array.
pub fn sweep_sizes(min_bytes: u64, max_bytes: u64) -> Vec<usize> {
    let mut v = Vec::new();
    let mut b = min_bytes.max(64);
    while b <= max_bytes {
        v.push((b / 8) as usize);
        b *= 2;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_helpers() {
        assert_eq!(sweep_sizes(1024, 8192), vec![128, 256, 512, 1024]);
        assert_eq!(sweep_reps(1 << 20, 1 << 20), 1);
        assert_eq!(sweep_reps(1024, 1 << 20), 64);
    }
}
