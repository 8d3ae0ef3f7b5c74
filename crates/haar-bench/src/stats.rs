//! Clocks and order statistics shared by every workload and benchmark: one monotonic clock for
//! all the processes of a run, quantiles by nearest rank, medians of repeated rounds.
//!
//! Pure functions over numbers; must not touch stores, processes or output.

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of a run on this machine.
pub fn monotonic_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// The `p` quantile (0..=1) of sorted values, nearest rank; NaN when empty.
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Sorts latencies and returns `(p50, p99, max)`.
pub fn summary(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (
        quantile(v, 0.5),
        quantile(v, 0.99),
        v.last().copied().unwrap_or(f64::NAN),
    )
}

/// The median of the finite values (the mean of the middle two for an even count); NaN when
/// there is none. Rounds that failed to measure (NaN, infinite) are left out.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_medians() {
        assert!(quantile(&[], 0.5).is_nan());
        assert_eq!(quantile(&[1.0, 2.0, 3.0], 0.5), 2.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0], 1.0), 3.0);
        let mut v = vec![3.0, 1.0, 2.0];
        assert_eq!(summary(&mut v), (2.0, 3.0, 3.0));
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![f64::NAN, 5.0]), 5.0);
        assert!(median(Vec::new()).is_nan());
        let a = monotonic_ns();
        assert!(monotonic_ns() >= a);
    }
}
