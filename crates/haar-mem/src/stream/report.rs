//! What a run reports: per-kernel timing statistics ([`KernelResult`], [`summarise`]) and the
//! whole [`Report`], which `haar stream --json` prints field for field.
//!
//! Owns the statistics (first sample dropped, best / median / worst rates) and the report's
//! shape. Must not run, time or print anything.

use std::path::PathBuf;

use serde::Serialize;

use super::config::Workers;
use super::kernels::Kernel;
use crate::machine;

/// Timing statistics of one kernel, over iterations 2..ntimes.
#[derive(Debug, Clone, Serialize)]
pub struct KernelResult {
    /// Kernel name.
    pub kernel: Kernel,
    /// Bytes counted per timed sample (stream.c's rule, times inner repetitions).
    pub bytes: u64,
    /// bytes / min time, in MB/s (10^6), as stream.c's "Best Rate MB/s".
    pub best_rate_mb_s: f64,
    /// bytes / median time, MB/s.
    pub median_rate_mb_s: f64,
    /// bytes / max time, MB/s.
    pub worst_rate_mb_s: f64,
    /// Average time, seconds.
    pub avg_time_s: f64,
    /// Minimum time, seconds.
    pub min_time_s: f64,
    /// Maximum time, seconds.
    pub max_time_s: f64,
}

/// Summarises the samples of one kernel (the first is dropped, as in stream.c).
pub fn summarise(kernel: Kernel, bytes: u64, samples: &[f64]) -> KernelResult {
    let mut t: Vec<f64> = samples.iter().skip(1).copied().collect();
    if t.is_empty() {
        t = samples.to_vec();
    }
    t.sort_by(f64::total_cmp);
    let min = t[0];
    let max = t[t.len() - 1];
    let median = if t.len() % 2 == 1 {
        t[t.len() / 2]
    } else {
        (t[t.len() / 2 - 1] + t[t.len() / 2]) / 2.0
    };
    let avg = t.iter().sum::<f64>() / t.len() as f64;
    let rate = |s: f64| 1.0e-6 * bytes as f64 / s;
    KernelResult {
        kernel,
        bytes,
        best_rate_mb_s: rate(min),
        median_rate_mb_s: rate(median),
        worst_rate_mb_s: rate(max),
        avg_time_s: avg,
        min_time_s: min,
        max_time_s: max,
    }
}

/// The placement as reported.
#[derive(Debug, Clone, Serialize)]
pub struct PlacementReport {
    /// `dram` or `file`.
    pub kind: &'static str,
    /// Directory of the mapped file(s).
    pub dir: Option<PathBuf>,
    /// File-system type of that directory.
    pub fs_type: Option<String>,
    /// Whether the mapping accepted `MAP_SYNC` (real persistent memory).
    pub dax: bool,
    /// Persist step used: `cpu-cache` (CLWB+SFENCE), `msync` or `none`.
    pub persist: Option<String>,
}

/// The outcome of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Elements per array (total).
    pub elements: usize,
    /// Bytes per array (total).
    pub bytes_per_array: u64,
    /// Bytes of all three arrays.
    pub total_bytes: u64,
    /// Iterations, of which the first is not counted.
    pub ntimes: usize,
    /// Kernel repetitions per timed sample.
    pub inner_reps: usize,
    /// Threads or processes.
    pub workers: Workers,
    /// CPUs used, one worker each.
    pub cpus: Vec<usize>,
    /// Array placement.
    pub placement: PlacementReport,
    /// Per-kernel figures, in stream.c's order.
    pub kernels: Vec<KernelResult>,
    /// Validation message.
    pub validation: String,
}

impl Report {
    /// The figures of one kernel.
    pub fn kernel(&self, k: Kernel) -> &KernelResult {
        self.kernels
            .iter()
            .find(|r| r.kernel == k)
            .expect("all four kernels are reported")
    }
}

impl Report {
    /// Where the arrays were and how they were persisted, for the report's first line.
    fn where_text(&self) -> String {
        match &self.placement.dir {
            None => "arrays in memory (anonymous mapping)".into(),
            Some(d) => format!(
                "arrays in a file mapped from {} ({}{}), persist after each kernel: {}",
                d.display(),
                self.placement.fs_type.as_deref().unwrap_or("?"),
                if self.placement.dax { ", DAX" } else { "" },
                self.placement.persist.as_deref().unwrap_or("none")
            ),
        }
    }

    /// The report as `stream.c` prints it (best, median and worst rate per kernel, times,
    /// the validation verdict), with a warning when the arrays are smaller than 4 x the
    /// last-level caches (`llc_total` bytes).
    pub fn table(&self, llc_total: u64) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let what = match self.workers {
            Workers::Threads => "threads",
            Workers::Processes => "processes",
        };
        let cpus: Vec<String> = self.cpus.iter().map(|c| c.to_string()).collect();
        writeln!(
            s,
            "haar stream: {} {what} pinned to CPUs {}; {}",
            self.cpus.len(),
            cpus.join(","),
            self.where_text()
        )
        .expect("a String");
        writeln!(
            s,
            "Array size = {} elements, {} per array, {} in total",
            self.elements,
            machine::human(self.bytes_per_array),
            machine::human(self.total_bytes)
        )
        .expect("a String");
        if self.bytes_per_array < 4 * llc_total {
            writeln!(
                s,
                "WARNING: arrays are smaller than 4 x the last-level caches ({}): figures include \
             cache effects",
                machine::human(4 * llc_total)
            )
            .expect("a String");
        }
        writeln!(
            s,
            "Each kernel was run {} times; the first is not counted{}.",
            self.ntimes,
            if self.inner_reps > 1 {
                format!(" ({} passes per timed sample)", self.inner_reps)
            } else {
                String::new()
            }
        )
        .expect("a String");
        writeln!(
            s,
            "{:<10}{:>16}{:>14}{:>14}{:>12}{:>12}{:>12}",
            "Function",
            "Best Rate MB/s",
            "Median MB/s",
            "Worst MB/s",
            "Avg time",
            "Min time",
            "Max time"
        )
        .expect("a String");
        for k in &self.kernels {
            let name = format!("{}:", capitalise(k.kernel.name()));
            writeln!(
                s,
                "{:<10}{:>16.1}{:>14.1}{:>14.1}{:>12.6}{:>12.6}{:>12.6}",
                name,
                k.best_rate_mb_s,
                k.median_rate_mb_s,
                k.worst_rate_mb_s,
                k.avg_time_s,
                k.min_time_s,
                k.max_time_s
            )
            .expect("a String");
        }
        writeln!(s, "{}", capitalise(&self.validation)).expect("a String");
        s
    }
}

/// `s` with its first letter upper-cased (the validation verdict starts a sentence).
pub fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_drops_the_first_sample_and_counts_bytes_as_stream_c() {
        let r = summarise(Kernel::Triad, 24_000_000, &[100.0, 0.004, 0.002, 0.003]);
        assert_eq!(r.min_time_s, 0.002);
        assert_eq!(r.max_time_s, 0.004);
        assert!((r.best_rate_mb_s - 12_000.0).abs() < 1e-6);
        assert!((r.median_rate_mb_s - 8_000.0).abs() < 1e-6);
        assert!((r.worst_rate_mb_s - 6_000.0).abs() < 1e-6);
        assert!((r.avg_time_s - 0.003).abs() < 1e-12);
        assert_eq!(Kernel::Copy.words() * 8, 16);
        assert_eq!(Kernel::Add.words() * 8, 24);
    }
}
