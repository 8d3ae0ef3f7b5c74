//! The array-size sweep's arithmetic: sizes doubling between two bounds, and inner
//! repetitions so that small arrays still take long enough to time.
//!
//! Pure. Must not run anything: the CLI runs each point through [`super::run`] and plots them.

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
