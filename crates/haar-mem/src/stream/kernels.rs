//! The four STREAM kernels and stream.c's validation: the loops ([`Kernel`]), the values every
//! element must hold after `ntimes` iterations, and the verdict on the error sums.
//!
//! Owns the arithmetic only. Must not allocate, time, pin or persist: the runner drives these
//! loops over arrays that the `arrays` module placed.

use serde::Serialize;

/// The scalar of scale and triad.
pub const SCALAR: f64 = 3.0;

/// stream.c's tolerance for `double` (relative average error).
pub const EPSILON: f64 = 1.0e-13;

/// One STREAM kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kernel {
    /// `c[j] = a[j]`
    Copy,
    /// `b[j] = s * c[j]`
    Scale,
    /// `c[j] = a[j] + b[j]`
    Add,
    /// `a[j] = b[j] + s * c[j]`
    Triad,
}

impl Kernel {
    /// The four kernels in the order stream.c runs them.
    pub const ALL: [Kernel; 4] = [Kernel::Copy, Kernel::Scale, Kernel::Add, Kernel::Triad];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Copy => "copy",
            Kernel::Scale => "scale",
            Kernel::Add => "add",
            Kernel::Triad => "triad",
        }
    }

    /// Words moved per element, as stream.c counts them.
    pub fn words(self) -> u64 {
        match self {
            Kernel::Copy | Kernel::Scale => 2,
            Kernel::Add | Kernel::Triad => 3,
        }
    }
}

/// Runs `kernel` on elements `lo..hi` of the three arrays, `reps` times.
///
/// # Safety
/// `a`, `b`, `c` are valid for `hi` elements each, do not overlap, and no other thread
/// accesses `lo..hi` of them during the call.
pub(super) unsafe fn run_kernel(kernel: Kernel, p: Ptrs, lo: usize, hi: usize, reps: usize) {
    let len = hi - lo;
    // SAFETY (all slices): the caller's contract; each slice covers lo..hi of one array, and
    // the written array is never also read as a slice in the same arm.
    unsafe {
        let rd = |x: *mut f64| std::slice::from_raw_parts(x.add(lo), len);
        let wr = |x: *mut f64| std::slice::from_raw_parts_mut(x.add(lo), len);
        for _ in 0..reps {
            match kernel {
                Kernel::Copy => {
                    let (a, c) = (rd(p.a), wr(p.c));
                    for (c, a) in c.iter_mut().zip(a) {
                        *c = *a;
                    }
                }
                Kernel::Scale => {
                    let (c, b) = (rd(p.c), wr(p.b));
                    for (b, c) in b.iter_mut().zip(c) {
                        *b = SCALAR * *c;
                    }
                }
                Kernel::Add => {
                    let (a, b, c) = (rd(p.a), rd(p.b), wr(p.c));
                    for ((c, a), b) in c.iter_mut().zip(a).zip(b) {
                        *c = *a + *b;
                    }
                }
                Kernel::Triad => {
                    let (b, c, a) = (rd(p.b), rd(p.c), wr(p.a));
                    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
                        *a = *b + SCALAR * *c;
                    }
                }
            }
            // Keeps the compiler from merging repetitions of an idempotent loop.
            std::hint::black_box(p);
        }
    }
}

/// The values every element should hold after `ntimes` iterations (stream.c's
/// `checkSTREAMresults` recurrence, including the initial `a = 2a`).
pub fn expected_values(ntimes: usize) -> [f64; 3] {
    let (mut aj, mut bj, mut cj) = (1.0f64, 2.0f64, 0.0f64);
    aj *= 2.0;
    for _ in 0..ntimes {
        cj = aj;
        bj = SCALAR * cj;
        cj = aj + bj;
        aj = bj + SCALAR * cj;
    }
    [aj, bj, cj]
}

/// Sums of absolute errors of `a`, `b`, `c` against `expected`.
pub fn error_sums(a: &[f64], b: &[f64], c: &[f64], expected: [f64; 3]) -> [f64; 3] {
    let sum = |x: &[f64], e: f64| x.iter().map(|v| (v - e).abs()).sum::<f64>();
    [
        sum(a, expected[0]),
        sum(b, expected[1]),
        sum(c, expected[2]),
    ]
}

/// stream.c's verdict: the average absolute error of each array, relative to its expected
/// value, must stay below [`EPSILON`].
///
/// # Errors
/// A message naming each failing array with its error, as stream.c prints it.
pub fn verdict(sums: [f64; 3], elements: usize, ntimes: usize) -> Result<String, String> {
    let expected = expected_values(ntimes);
    let mut failures = Vec::new();
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let avg = sums[i] / elements as f64;
        let rel = (avg / expected[i]).abs();
        // NaN (a corrupted array) must fail too, hence not `rel > EPSILON`.
        if rel.is_nan() || rel > EPSILON {
            failures.push(format!(
                "array {name}: expected {:e}, average error {avg:e}, relative {rel:e} > {EPSILON:e}",
                expected[i]
            ));
        }
    }
    if failures.is_empty() {
        Ok(format!(
            "solution validates: average error less than {EPSILON:e} on all three arrays"
        ))
    } else {
        Err(format!("failed validation: {}", failures.join("; ")))
    }
}

/// Raw pointers to the three arrays (copied into every worker).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ptrs {
    pub(super) a: *mut f64,
    pub(super) b: *mut f64,
    pub(super) c: *mut f64,
}
// SAFETY: workers write disjoint element ranges; the pointers outlive the workers (scoped
// threads, or a child process that owns its own arrays).
unsafe impl Send for Ptrs {}
unsafe impl Sync for Ptrs {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_values_follow_the_reference_recurrence() {
        // With ntimes = 10 stream.c's scalars end at these values (the recurrence multiplies
        // by a constant factor each iteration).
        let [a, b, c] = expected_values(10);
        let [a1, b1, c1] = expected_values(1);
        assert_eq!([a1, b1, c1], [2.0 * 3.0 + 3.0 * (2.0 + 6.0), 6.0, 8.0]);
        assert!(a > b && c > b && a.is_finite());
    }

    #[test]
    fn kernels_on_a_small_array_validate_and_corruption_is_caught() {
        let n = 1003;
        let mut mem = vec![0.0f64; 3 * n];
        let base = mem.as_mut_ptr();
        // SAFETY: three disjoint n-element ranges of `mem`.
        let p = unsafe {
            Ptrs {
                a: base,
                b: base.add(n),
                c: base.add(2 * n),
            }
        };
        mem[..n].fill(2.0); // a = 1 then a = 2a
        mem[n..2 * n].fill(2.0);
        let ntimes = 7;
        for _ in 0..ntimes {
            for k in Kernel::ALL {
                // SAFETY: as above; single thread.
                unsafe { run_kernel(k, p, 0, n, 3) };
            }
        }
        let e = expected_values(ntimes);
        let sums = error_sums(&mem[..n], &mem[n..2 * n], &mem[2 * n..], e);
        assert_eq!(sums, [0.0; 3]);
        assert!(verdict(sums, n, ntimes).unwrap().contains("validates"));
        mem[5] += 1.0;
        let sums = error_sums(&mem[..n], &mem[n..2 * n], &mem[2 * n..], e);
        let err = verdict(sums, n, ntimes).unwrap_err();
        assert!(err.contains("array a"), "{err}");
        assert!(verdict([f64::NAN, 0.0, 0.0], n, ntimes).is_err());
    }
}
