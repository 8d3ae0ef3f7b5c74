//! `haar run --heap`'s cost (issue 16's target: ≥ 0.9 of the DRAM heap when DIR is tmpfs):
//! the STREAM-shaped triad of `haar_heap::TRIAD_C` (dynamic arrays, one thread; not the
//! reference STREAM), compiled once with `cc -O2`, run alternately on the C library's DRAM
//! heap and with its heap in a pool file under DIR, in the same run. The best pass of each
//! side is compared, as STREAM reports its best.
//!
//! Owns the measurement and its figures; wiring into `haar bench`'s report is the caller's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::error::{Error, io};

/// What [`triad`] runs.
#[derive(Debug, Clone)]
pub struct HeapOptions {
    /// Where the pool goes (default `/dev/shm`: tmpfs, the emulated DAX mount).
    pub dir: PathBuf,
    /// Elements of each of the three arrays of doubles (default 20,000,000: 160 MB each, far
    /// beyond any cache here).
    pub elements: usize,
    /// Timed passes per run; the best counts.
    pub reps: u32,
    /// Runs of each side, alternating DRAM and pool, so that drift on a shared host hits both.
    pub rounds: u32,
    /// The preload library (`None`: `haar_heap::find_library`).
    pub library: Option<PathBuf>,
}

impl Default for HeapOptions {
    fn default() -> HeapOptions {
        HeapOptions {
            dir: PathBuf::from("/dev/shm"),
            elements: 20_000_000,
            reps: 10,
            rounds: 3,
            library: None,
        }
    }
}

/// The figures of one [`triad`] measurement.
#[derive(Debug, Clone, Serialize)]
pub struct HeapTriad {
    /// What was measured, in words.
    pub what: String,
    /// The pool's directory.
    pub dir: PathBuf,
    /// Elements per array.
    pub elements: usize,
    /// Bytes of each array.
    pub array_bytes: u64,
    /// The pool's size.
    pub pool_bytes: u64,
    /// Best GB/s (10^9 bytes) of each DRAM-heap run, in run order.
    pub dram_gbs: Vec<f64>,
    /// Best GB/s of each pool-heap run, in run order.
    pub heap_gbs: Vec<f64>,
    /// Best of `dram_gbs`.
    pub dram_best_gbs: f64,
    /// Best of `heap_gbs`.
    pub heap_best_gbs: f64,
    /// `heap_best_gbs / dram_best_gbs`.
    pub ratio: f64,
    /// The target for `ratio` on tmpfs.
    pub target: f64,
    /// Whether `ratio >= target`.
    pub meets_target: bool,
}

/// Compiles the triad, runs it `rounds` times on each heap, alternating, and returns the
/// figures. Every run must validate its result.
///
/// # Errors
/// [`Error::Failed`] when `cc` is missing, a run fails or validates wrong; [`Error::Usage`]
/// when DIR cannot hold the pool or the library is missing.
pub fn triad(o: &HeapOptions) -> Result<HeapTriad, Error> {
    let work = tempfile::tempdir().map_err(io("cannot make a temporary directory"))?;
    let prog = compile(work.path())?;
    let array_bytes = (o.elements * 8) as u64;
    // Three arrays, mimalloc's page rounding, room to spare.
    let pool_bytes = (3 * array_bytes + (256 << 20)).next_multiple_of(64 << 20);
    let spec = haar_heap::HeapSpec {
        dir: o.dir.clone(),
        size: Some(pool_bytes),
    };
    let (mut dram, mut heap) = (Vec::new(), Vec::new());
    let n = o.elements.to_string();
    let reps = o.reps.to_string();
    for round in 0..o.rounds.max(1) {
        let out = work.path().join(format!("dram.{round}"));
        let status = Command::new(&prog)
            .args([n.as_str(), reps.as_str()])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(io(format!("cannot run {}", prog.display())))?;
        dram.push(rate(status.success(), &out, "DRAM heap")?);

        let out = work.path().join(format!("heap.{round}"));
        let argv: Vec<OsString> = vec![
            prog.clone().into(),
            n.clone().into(),
            reps.clone().into(),
            out.clone().into(),
        ];
        let ran = haar_heap::run(&spec, o.library.as_deref(), &argv)
            .map_err(|e| Error::Usage(e.to_string()))?;
        heap.push(rate(ran.shell_status() == 0, &out, "pool heap")?);
    }
    let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let (dram_best_gbs, heap_best_gbs) = (best(&dram), best(&heap));
    let ratio = heap_best_gbs / dram_best_gbs;
    Ok(HeapTriad {
        what: format!(
            "STREAM-shaped triad a[i] = b[i] + q*c[i] (one thread, {} doubles per array, best of \
             {} passes per run), the same binary on the DRAM heap and under haar run --heap {}",
            o.elements,
            o.reps,
            o.dir.display()
        ),
        dir: o.dir.clone(),
        elements: o.elements,
        array_bytes,
        pool_bytes,
        dram_gbs: dram,
        heap_gbs: heap,
        dram_best_gbs,
        heap_best_gbs,
        ratio,
        target: 0.9,
        meets_target: ratio >= 0.9,
    })
}

fn compile(dir: &Path) -> Result<PathBuf, Error> {
    let src = dir.join("triad.c");
    std::fs::write(&src, haar_heap::TRIAD_C)
        .map_err(io(format!("cannot write {}", src.display())))?;
    let exe = dir.join("triad");
    let out = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| Error::Failed(format!("cannot run cc to build the triad: {e}")))?;
    if !out.status.success() {
        return Err(Error::Failed(format!(
            "cc failed on the triad: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(exe)
}

/// The rate a run wrote into `out`, if it succeeded and validated.
fn rate(ok: bool, out: &Path, side: &str) -> Result<f64, Error> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let field = |k: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse::<f64>().ok())
    };
    match (ok, field("triad_best_gbs="), field("bad=")) {
        (true, Some(gbs), Some(0.0)) => Ok(gbs),
        _ => Err(Error::Failed(format!(
            "the triad on the {side} failed or computed wrong values: {text:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_counts_only_if_it_succeeded_and_validated() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o");
        std::fs::write(&out, "triad_best_gbs=12.5 n=10 reps=3 bad=0\n").unwrap();
        assert_eq!(rate(true, &out, "x").unwrap(), 12.5);
        assert!(rate(false, &out, "x").is_err());
        std::fs::write(&out, "triad_best_gbs=12.5 n=10 reps=3 bad=7\n").unwrap();
        assert!(
            rate(true, &out, "x")
                .unwrap_err()
                .to_string()
                .contains("wrong values")
        );
        assert!(rate(true, &dir.path().join("none"), "x").is_err());
    }
}
