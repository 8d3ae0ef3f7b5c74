//! What to run and whether it can run: the [`Config`] (array size, iterations, workers, CPUs,
//! [`Placement`] and [`Persist`] step), the static split of the elements between workers, and
//! [`preflight`], which checks sizes, the target directory and free memory first.
//!
//! Owns the run's description and its input errors ([`StreamError`]). Must not allocate or
//! run anything: the `arrays` and `runner` modules do that once preflight has passed.

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::machine;

/// How stores into a mapped file are persisted after each kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Persist {
    /// CLWB + SFENCE on a DAX mapping, `msync` otherwise (`HAAR_PMEM_FORCE` may override).
    Auto,
    /// Cache-line write-back + fence, whatever the file system (no durability off pmem).
    Cpu,
    /// `msync(MS_SYNC)`.
    Msync,
    /// No persist step: the mapping's raw bandwidth.
    None,
}

/// Where the arrays live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Anonymous memory (DRAM, or whatever the OS gives: Memory mode makes it PMem).
    Dram,
    /// A file created in `dir`, mapped shared, removed at the end.
    File {
        /// Directory (a DAX mount, /dev/shm, a disk file system).
        dir: PathBuf,
        /// Persist step.
        persist: Persist,
    },
}

/// Threads or processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workers {
    /// Threads of this process, each pinned to one CPU (OpenMP-style static split).
    Threads,
    /// One forked process per CPU, each with its own arrays (MPI-style, as the papers ran).
    Processes,
}

/// A STREAM run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Elements per array, over all workers (stream.c's `STREAM_ARRAY_SIZE`).
    pub elements: usize,
    /// Iterations (stream.c's `NTIMES`), at least 2.
    pub ntimes: usize,
    /// Threads or processes.
    pub workers: Workers,
    /// CPUs, one worker on each.
    pub cpus: Vec<usize>,
    /// Array placement.
    pub placement: Placement,
    /// Kernel repetitions per timed sample (1 = the reference's rule; the sweep raises it for
    /// arrays so small that one pass is too short to time).
    pub inner_reps: usize,
}

impl Config {
    /// Elements of each worker's share: a static split in 8-element (64-byte) blocks.
    pub(super) fn split(&self) -> Vec<(usize, usize)> {
        let w = self.cpus.len().max(1);
        let blocks = self.elements.div_ceil(8) as u128;
        let at = |i: usize| ((blocks * i as u128 / w as u128 * 8) as usize).min(self.elements);
        (0..w)
            .map(|i| {
                let (lo, hi) = (at(i), at(i + 1));
                (lo, hi)
            })
            .collect()
    }

    /// Bytes that will be allocated (three arrays; per process in processes mode).
    pub fn footprint(&self) -> u64 {
        match self.workers {
            Workers::Threads => 3u64.saturating_mul(stride_bytes(self.elements) as u64),
            Workers::Processes => self
                .split()
                .iter()
                .map(|(lo, hi)| 3u64.saturating_mul(stride_bytes(hi - lo) as u64))
                .fold(0u64, u64::saturating_add),
        }
    }
}

pub(super) fn stride_bytes(elements: usize) -> usize {
    elements
        .saturating_mul(8)
        .checked_next_multiple_of(64)
        .unwrap_or(usize::MAX)
        .max(64)
}

/// Why a run did not happen or did not finish.
#[derive(Debug)]
pub enum StreamError {
    /// Bad input, found before allocating (exit 1).
    Input(String),
    /// A system failure during the run (exit 3).
    Io(String),
    /// Results did not validate (exit 3).
    Validation(String),
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::Input(s) | StreamError::Io(s) | StreamError::Validation(s) => {
                f.write_str(s)
            }
        }
    }
}

/// Headroom left in `MemAvailable` so the run does not push the machine into swap.
const MEM_HEADROOM: u64 = 256 << 20;

/// Checks the configuration against the machine before anything is allocated: sizes, the
/// target directory (exists, is a directory, writable), free space there and free memory.
///
/// # Errors
/// [`StreamError::Input`] with what to change.
pub fn preflight(cfg: &Config) -> Result<(), StreamError> {
    let bad = |s: String| Err(StreamError::Input(s));
    if cfg.ntimes < 2 {
        return bad(format!(
            "--ntimes {} is too small: the first iteration is not counted, so at least 2 are needed",
            cfg.ntimes
        ));
    }
    if cfg.cpus.is_empty() {
        return bad("no CPUs to run on".into());
    }
    if cfg.elements < 8 * cfg.cpus.len() {
        return bad(format!(
            "{} elements per array are too few for {} workers (at least 8 each)",
            cfg.elements,
            cfg.cpus.len()
        ));
    }
    let need = cfg.footprint();
    let (_, avail) = machine::memory(Path::new("/"));
    let avail = avail.unwrap_or(u64::MAX);
    match &cfg.placement {
        Placement::Dram => {
            if need.saturating_add(MEM_HEADROOM) > avail {
                return bad(format!(
                    "the arrays need {} of memory but only {} is available (MemAvailable, less \
                     {} headroom): use a smaller --array-mib",
                    machine::human(need),
                    machine::human(avail),
                    machine::human(MEM_HEADROOM)
                ));
            }
        }
        Placement::File { dir, .. } => {
            let meta = std::fs::metadata(dir)
                .map_err(|e| StreamError::Input(format!("--path {}: {e}", dir.display())))?;
            if !meta.is_dir() {
                return bad(format!("--path {}: not a directory", dir.display()));
            }
            use std::os::unix::ffi::OsStrExt;
            let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
                .map_err(|_| StreamError::Input("--path contains a NUL byte".into()))?;
            // SAFETY: `c` is a NUL-terminated path; access only reads.
            if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
                return bad(format!(
                    "--path {}: not writable ({})",
                    dir.display(),
                    io::Error::last_os_error()
                ));
            }
            let fs = machine::fs_info(dir).map_err(|e| {
                StreamError::Input(format!("--path {}: cannot stat: {e}", dir.display()))
            })?;
            if need > fs.available {
                return bad(format!(
                    "the arrays need {} but the file system at {} has only {} free: use a \
                     smaller --array-mib or another --path",
                    machine::human(need),
                    dir.display(),
                    machine::human(fs.available)
                ));
            }
            if fs.tmpfs && need.saturating_add(MEM_HEADROOM) > avail {
                return bad(format!(
                    "{} is tmpfs, whose pages are memory: the arrays need {} but only {} is \
                     available: use a smaller --array-mib",
                    dir.display(),
                    machine::human(need),
                    machine::human(avail)
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_every_element_in_aligned_blocks() {
        for (elements, w) in [(1000, 3), (8, 1), (17, 2), (1 << 20, 7)] {
            let cfg = Config {
                elements,
                ntimes: 2,
                workers: Workers::Threads,
                cpus: (0..w).collect(),
                placement: Placement::Dram,
                inner_reps: 1,
            };
            let r = cfg.split();
            assert_eq!(r[0].0, 0);
            assert_eq!(r[w - 1].1, elements);
            for pair in r.windows(2) {
                assert_eq!(pair[0].1, pair[1].0);
                assert_eq!(pair[1].0 % 8, 0);
            }
        }
    }
    #[test]
    fn preflight_refuses_bad_input_before_allocating() {
        let base = Config {
            elements: 1 << 20,
            ntimes: 10,
            workers: Workers::Threads,
            cpus: vec![0],
            placement: Placement::Dram,
            inner_reps: 1,
        };
        let msg = |c: &Config| match preflight(c) {
            Err(StreamError::Input(m)) => m,
            other => panic!("expected an input error, got {other:?}"),
        };
        assert!(
            msg(&Config {
                ntimes: 1,
                ..base.clone()
            })
            .contains("--ntimes")
        );
        assert!(
            msg(&Config {
                elements: 1 << 60,
                ..base.clone()
            })
            .contains("available")
        );
        let missing = Config {
            placement: Placement::File {
                dir: "/no/such/dir".into(),
                persist: Persist::Auto,
            },
            ..base.clone()
        };
        assert!(msg(&missing).contains("/no/such/dir"));
        let file = tempfile::NamedTempFile::new().unwrap();
        let not_dir = Config {
            placement: Placement::File {
                dir: file.path().to_path_buf(),
                persist: Persist::Auto,
            },
            ..base.clone()
        };
        assert!(msg(&not_dir).contains("not a directory"));
        let huge_on_disk = Config {
            elements: 1 << 50,
            placement: Placement::File {
                dir: std::env::temp_dir(),
                persist: Persist::Auto,
            },
            ..base
        };
        assert!(msg(&huge_on_disk).contains("free") || msg(&huge_on_disk).contains("available"));
    }
}
