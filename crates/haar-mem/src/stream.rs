//! STREAM: the four kernels of McCalpin's benchmark with its rules, on pinned threads or one
//! process per core, with arrays in ordinary memory or in a memory-mapped file that is
//! persisted after every kernel (EPCC's App Direct STREAM).
//!
//! Rules kept from the reference `stream.c` (version 5.10):
//! * kernels, in this order per iteration: copy `c = a`, scale `b = s*c`, add `c = a + b`,
//!   triad `a = b + s*c`, with `s = 3.0`, on `f64`;
//! * arrays initialised to `a = 1, b = 2, c = 0`, then `a = 2a` once (the timer test);
//! * `ntimes` iterations (default 10), the first not counted; min, average and max time per
//!   kernel; best rate = bytes / min time;
//! * bytes counted as 2 words per element for copy and scale, 3 for add and triad (no
//!   write-allocate traffic);
//! * results validated against the same recurrence run on scalars, with relative average
//!   error below 1e-13.
//!
//! Added: median and worst rates (EPCC reports min / median / max), the persist step of the
//! App Direct variant (inside the timed region, as in EPCC's code), and optional inner
//! repetitions for the array-size sweep (idempotent kernels, so validation still holds).
//!
//! This module owns the kernels, their timing and validation, and the array placement. It
//! prints nothing; the CLI formats the [`Report`].

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use haar_persist::{PersistMode, PoolMapping, persist};
use serde::Serialize;

use crate::cleanup::TempFile;
use crate::machine;

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
unsafe fn run_kernel(kernel: Kernel, p: Ptrs, lo: usize, hi: usize, reps: usize) {
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
    fn split(&self) -> Vec<(usize, usize)> {
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

fn stride_bytes(elements: usize) -> usize {
    elements
        .saturating_mul(8)
        .checked_next_multiple_of(64)
        .unwrap_or(usize::MAX)
        .max(64)
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

/// Raw pointers to the three arrays (copied into every worker).
#[derive(Debug, Clone, Copy)]
struct Ptrs {
    a: *mut f64,
    b: *mut f64,
    c: *mut f64,
}
// SAFETY: workers write disjoint element ranges; the pointers outlive the workers (scoped
// threads, or a child process that owns its own arrays).
unsafe impl Send for Ptrs {}
unsafe impl Sync for Ptrs {}

/// Three arrays, in anonymous memory or in a mapped file.
struct Arrays {
    ptrs: Ptrs,
    elements: usize,
    backing: Backing,
}

enum Backing {
    Anon {
        base: *mut u8,
        len: usize,
    },
    File {
        pool: PoolMapping,
        persist: Option<PersistMode>,
        _guard: TempFile,
    },
}

// SAFETY: the raw base pointer is only unmapped in `Drop` (after the scoped workers end);
// workers share `&Arrays` to read pointers and persist disjoint ranges.
unsafe impl Sync for Arrays {}

impl Arrays {
    fn layout(elements: usize, base: *mut u8) -> Ptrs {
        let s = stride_bytes(elements);
        // SAFETY: the callers map at least 3 * s bytes at `base`.
        unsafe {
            Ptrs {
                a: base.cast(),
                b: base.add(s).cast(),
                c: base.add(2 * s).cast(),
            }
        }
    }

    fn dram(elements: usize) -> io::Result<Arrays> {
        let len = 3 * stride_bytes(elements);
        // SAFETY: a fresh private anonymous mapping aliases nothing. Pages are not touched
        // here, so first touch happens in the workers' initialisation (NUMA placement as with
        // stream.c's static arrays).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Arrays {
            ptrs: Self::layout(elements, p.cast()),
            elements,
            backing: Backing::Anon {
                base: p.cast(),
                len,
            },
        })
    }

    fn file(guard: TempFile, elements: usize, persist: Persist) -> io::Result<Arrays> {
        let len = 3 * stride_bytes(elements);
        let force = match persist {
            Persist::Cpu => Some(PersistMode::CpuCache),
            Persist::Msync => Some(PersistMode::Msync),
            Persist::Auto | Persist::None => None,
        };
        if guard.path().exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already exists", guard.path().display()),
            ));
        }
        let pool = PoolMapping::open_with_mode(guard.path(), len, force)?;
        pool.grow(len)?;
        pool.populate(0, len)?;
        let mode = (persist != Persist::None).then(|| pool.mode());
        Ok(Arrays {
            ptrs: Self::layout(elements, pool.base()),
            elements,
            backing: Backing::File {
                pool,
                persist: mode,
                _guard: guard,
            },
        })
    }

    /// Persists elements `lo..hi` of the array at `p`.
    fn persist(&self, p: *mut f64, lo: usize, hi: usize) -> io::Result<()> {
        if let Backing::File {
            persist: Some(mode),
            ..
        } = &self.backing
        {
            // SAFETY: the range lies inside the live file mapping.
            unsafe { persist(p.add(lo).cast(), (hi - lo) * 8, *mode) }
        } else {
            Ok(())
        }
    }

    fn report(&self) -> (bool, Option<String>) {
        match &self.backing {
            Backing::Anon { .. } => (false, None),
            Backing::File { pool, persist, .. } => (
                pool.is_dax(),
                Some(match persist {
                    Some(PersistMode::CpuCache) => "cpu-cache".into(),
                    Some(PersistMode::Msync) => "msync".into(),
                    None => "none".into(),
                }),
            ),
        }
    }

    /// Error sums over `lo..hi`.
    fn errors(&self, lo: usize, hi: usize, ntimes: usize) -> [f64; 3] {
        let e = expected_values(ntimes);
        // SAFETY: the workers have finished; the arrays hold `elements` initialised values.
        unsafe {
            let s = |x: *mut f64| std::slice::from_raw_parts(x.add(lo), hi - lo);
            error_sums(s(self.ptrs.a), s(self.ptrs.b), s(self.ptrs.c), e)
        }
    }
}

impl Drop for Arrays {
    fn drop(&mut self) {
        if let Backing::Anon { base, len } = self.backing {
            // SAFETY: our own mapping, no longer used by any worker.
            unsafe { libc::munmap(base.cast(), len) };
        }
    }
}

/// A barrier for workers pinned to distinct CPUs: spins (as OpenMP runtimes do by default) and
/// yields after a while; gives up when `abort` is set. Lives in shared memory in processes mode.
#[repr(C)]
struct SpinBarrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
    abort: AtomicBool,
}

impl SpinBarrier {
    fn wait(&self, n: usize) -> Result<(), ()> {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == n {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return Ok(());
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if self.abort.load(Ordering::Relaxed) {
                return Err(());
            }
            spins = spins.saturating_add(1);
            if spins < 1 << 14 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

/// One worker's part of the benchmark: initialise its range, run `ntimes` iterations of the
/// four kernels between barriers, record times (worker 0) into `times[kernel][iter]`.
#[allow(clippy::too_many_arguments)]
fn work(
    id: usize,
    n: usize,
    arrays: &Arrays,
    lo: usize,
    hi: usize,
    barrier: &SpinBarrier,
    times: &[AtomicU64],
    ntimes: usize,
    reps: usize,
) -> Result<(), String> {
    let p = arrays.ptrs;
    let sync = || {
        barrier
            .wait(n)
            .map_err(|_| "another worker failed".to_string())
    };
    // SAFETY (whole function): this worker alone touches lo..hi of each array between
    // barriers, and the arrays hold at least `hi` elements.
    unsafe {
        for j in lo..hi {
            *p.a.add(j) = 1.0;
            *p.b.add(j) = 2.0;
            *p.c.add(j) = 0.0;
        }
        sync()?;
        for j in lo..hi {
            *p.a.add(j) *= 2.0;
        }
    }
    for iter in 0..ntimes {
        for (ki, k) in Kernel::ALL.into_iter().enumerate() {
            sync()?;
            let t0 = Instant::now();
            // SAFETY: as above.
            unsafe { run_kernel(k, p, lo, hi, reps) };
            let dst = match k {
                Kernel::Copy | Kernel::Add => p.c,
                Kernel::Scale => p.b,
                Kernel::Triad => p.a,
            };
            if let Err(e) = arrays.persist(dst, lo, hi) {
                barrier.abort.store(true, Ordering::Relaxed);
                return Err(format!("persist failed: {e}"));
            }
            sync()?;
            if id == 0 {
                times[ki * ntimes + iter]
                    .store(t0.elapsed().as_secs_f64().to_bits(), Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// Path of worker `rank`'s array file in `dir`.
fn array_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("haar-stream-{}-{rank}.arrays", std::process::id()))
}

/// Runs STREAM.
///
/// In [`Workers::Processes`] mode this forks: call it only from a single-threaded process
/// (it checks `/proc/self/status` and refuses otherwise).
///
/// # Errors
/// [`StreamError::Input`] from [`preflight`]; [`StreamError::Io`] if allocation, mapping,
/// pinning or persisting fails; [`StreamError::Validation`] if the results are wrong.
pub fn run(cfg: &Config) -> Result<Report, StreamError> {
    preflight(cfg)?;
    let ntimes = cfg.ntimes;
    let reps = cfg.inner_reps.max(1);
    let ranges = cfg.split();
    let n = ranges.len();
    let times: Vec<AtomicU64> = (0..4 * ntimes).map(|_| AtomicU64::new(0)).collect();
    let (sums, dax, persist_name) = match cfg.workers {
        Workers::Threads => {
            let arrays = match &cfg.placement {
                Placement::Dram => Arrays::dram(cfg.elements),
                Placement::File { dir, persist } => Arrays::file(
                    TempFile::register(array_file(dir, 0)),
                    cfg.elements,
                    *persist,
                ),
            }
            .map_err(|e| StreamError::Io(format!("cannot allocate the arrays: {e}")))?;
            let barrier = SpinBarrier {
                arrived: AtomicUsize::new(0),
                generation: AtomicUsize::new(0),
                abort: AtomicBool::new(false),
            };
            let results: Vec<Result<(), String>> = std::thread::scope(|s| {
                let handles: Vec<_> = ranges
                    .iter()
                    .enumerate()
                    .map(|(id, &(lo, hi))| {
                        let (arrays, barrier, times, cpu) =
                            (&arrays, &barrier, &times, cfg.cpus[id]);
                        s.spawn(move || {
                            if let Err(e) = machine::pin_to_cpu(cpu) {
                                barrier.abort.store(true, Ordering::Relaxed);
                                return Err(format!("cannot pin a thread to CPU {cpu}: {e}"));
                            }
                            work(id, n, arrays, lo, hi, barrier, times, ntimes, reps)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err("worker panicked".into())))
                    .collect()
            });
            if let Some(e) = results.into_iter().find_map(Result::err) {
                return Err(StreamError::Io(e));
            }
            let sums = arrays.errors(0, cfg.elements, ntimes);
            let (dax, p) = arrays.report();
            (sums, dax, p)
        }
        Workers::Processes => run_processes(cfg, &ranges, &times)?,
    };
    let validation = verdict(sums, cfg.elements, ntimes).map_err(StreamError::Validation)?;
    let kernels = Kernel::ALL
        .into_iter()
        .enumerate()
        .map(|(ki, k)| {
            let samples: Vec<f64> = (0..ntimes)
                .map(|i| f64::from_bits(times[ki * ntimes + i].load(Ordering::Relaxed)))
                .collect();
            let bytes = k.words() * 8 * cfg.elements as u64 * reps as u64;
            summarise(k, bytes, &samples)
        })
        .collect();
    let placement = match &cfg.placement {
        Placement::Dram => PlacementReport {
            kind: "dram",
            dir: None,
            fs_type: None,
            dax: false,
            persist: None,
        },
        Placement::File { dir, .. } => PlacementReport {
            kind: "file",
            dir: Some(dir.clone()),
            fs_type: machine::fs_info(dir).ok().and_then(|f| f.fs_type),
            dax,
            persist: persist_name,
        },
    };
    Ok(Report {
        elements: cfg.elements,
        bytes_per_array: 8 * cfg.elements as u64,
        total_bytes: 24 * cfg.elements as u64,
        ntimes,
        inner_reps: reps,
        workers: cfg.workers,
        cpus: cfg.cpus.clone(),
        placement,
        kernels,
        validation,
    })
}

fn threads_in_process() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Threads:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(1)
}

/// Shared memory between the parent and the forked workers.
struct Shared {
    base: *mut u8,
    len: usize,
}

impl Shared {
    fn new(len: usize) -> io::Result<Shared> {
        // SAFETY: a fresh shared anonymous mapping, zero-filled by the kernel, which is a
        // valid initial state for every atomic placed in it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Shared {
            base: p.cast(),
            len,
        })
    }
    fn barrier(&self) -> &SpinBarrier {
        // SAFETY: offset 0 is 64-byte aligned (page), zeroed, inside the mapping, and only
        // accessed atomically.
        unsafe { &*self.base.cast::<SpinBarrier>() }
    }
    fn words(&self, first: usize, count: usize) -> &[AtomicU64] {
        // SAFETY: callers keep `(first + count) * 8 + 64 <= len`; 8-aligned; atomics only.
        unsafe { std::slice::from_raw_parts(self.base.add(64 + first * 8).cast(), count) }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: our own mapping; children have exited.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn run_processes(
    cfg: &Config,
    ranges: &[(usize, usize)],
    times: &[AtomicU64],
) -> Result<([f64; 3], bool, Option<String>), StreamError> {
    let threads = threads_in_process();
    if threads != 1 {
        return Err(StreamError::Io(format!(
            "processes mode forks and needs a single-threaded process, but this one has {threads} threads"
        )));
    }
    let n = ranges.len();
    let ntimes = cfg.ntimes;
    // Layout after the 64-byte barrier: times (4 * ntimes), error sums (3 * n), status (n),
    // dax+persist code (n).
    let words = 4 * ntimes + 3 * n + 2 * n;
    let shared = Shared::new(64 + words * 8)
        .map_err(|e| StreamError::Io(format!("cannot map shared memory: {e}")))?;
    let (t_off, e_off, s_off, p_off) = (0, 4 * ntimes, 4 * ntimes + 3 * n, 4 * ntimes + 4 * n);
    // Registered before forking, so an interrupt in any process removes every file.
    let guards: Vec<Option<TempFile>> = (0..n)
        .map(|rank| match &cfg.placement {
            Placement::Dram => None,
            Placement::File { dir, .. } => Some(TempFile::register(array_file(dir, rank))),
        })
        .collect();
    let mut children = Vec::new();
    for (rank, &(lo, hi)) in ranges.iter().enumerate() {
        // SAFETY: the process is single-threaded (checked above), so the child may run
        // arbitrary code; it leaves only through `_exit`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            shared.barrier().abort.store(true, Ordering::Relaxed);
            break;
        }
        if pid == 0 {
            let code = child(cfg, rank, n, hi - lo, &shared, (t_off, e_off, s_off, p_off));
            // SAFETY: ends the child without running the parent's destructors (which would
            // remove the other workers' files).
            unsafe { libc::_exit(code) };
        }
        children.push(pid);
    }
    let mut failed = children.len() < n;
    for _ in 0..children.len() {
        let mut status = 0;
        // SAFETY: waits for our own children.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid < 0 {
            break;
        }
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            failed = true;
            shared.barrier().abort.store(true, Ordering::Relaxed);
        }
    }
    drop(guards);
    if failed {
        return Err(StreamError::Io(
            "a worker process failed (see its message above)".into(),
        ));
    }
    for (i, t) in shared.words(t_off, 4 * ntimes).iter().enumerate() {
        times[i].store(t.load(Ordering::Relaxed), Ordering::Relaxed);
    }
    let mut sums = [0.0; 3];
    for (i, s) in shared.words(e_off, 3 * n).iter().enumerate() {
        sums[i % 3] += f64::from_bits(s.load(Ordering::Relaxed));
    }
    let code = shared.words(p_off, 1)[0].load(Ordering::Relaxed);
    let dax = code & 1 != 0;
    let persist = match code >> 1 {
        1 => Some("cpu-cache".to_string()),
        2 => Some("msync".to_string()),
        3 => Some("none".to_string()),
        _ => None,
    };
    let _ = shared.words(s_off, n);
    Ok((sums, dax, persist))
}

/// Body of one forked worker; returns its exit code.
fn child(
    cfg: &Config,
    rank: usize,
    n: usize,
    elements: usize,
    shared: &Shared,
    (t_off, e_off, s_off, p_off): (usize, usize, usize, usize),
) -> i32 {
    let barrier = shared.barrier();
    let fail = |msg: String| {
        barrier.abort.store(true, Ordering::Relaxed);
        eprintln!("haar: stream worker {rank}: {msg}");
        1
    };
    if let Err(e) = machine::pin_to_cpu(cfg.cpus[rank]) {
        return fail(format!("cannot pin to CPU {}: {e}", cfg.cpus[rank]));
    }
    let arrays = match &cfg.placement {
        Placement::Dram => Arrays::dram(elements),
        // The parent's guard is registered for this path; this one removes it on the way out.
        Placement::File { dir, persist } => Arrays::file(
            TempFile::register(array_file_of_parent(dir, rank)),
            elements,
            *persist,
        ),
    };
    let arrays = match arrays {
        Ok(a) => a,
        Err(e) => return fail(format!("cannot allocate the arrays: {e}")),
    };
    let times = shared.words(t_off, 4 * cfg.ntimes);
    let r = work(
        rank,
        n,
        &arrays,
        0,
        elements,
        barrier,
        times,
        cfg.ntimes,
        cfg.inner_reps.max(1),
    );
    if let Err(e) = r {
        return fail(e);
    }
    let sums = arrays.errors(0, arrays.elements, cfg.ntimes);
    for (i, s) in sums.iter().enumerate() {
        shared.words(e_off + 3 * rank + i, 1)[0].store(s.to_bits(), Ordering::Relaxed);
    }
    let (dax, persist) = arrays.report();
    let code = dax as u64
        | match persist.as_deref() {
            Some("cpu-cache") => 1 << 1,
            Some("msync") => 2 << 1,
            Some("none") => 3 << 1,
            _ => 0,
        };
    shared.words(p_off + rank, 1)[0].store(code, Ordering::Relaxed);
    shared.words(s_off + rank, 1)[0].store(1, Ordering::Relaxed);
    drop(arrays);
    0
}

/// The array file of `rank` named with the parent's pid (children have their own pids).
fn array_file_of_parent(dir: &Path, rank: usize) -> PathBuf {
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() };
    dir.join(format!("haar-stream-{ppid}-{rank}.arrays"))
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
    fn threads_run_validates_on_dram_and_on_a_mapped_file() {
        let cpus = machine::allowed_cpus();
        let dir = tempfile::tempdir().unwrap();
        for placement in [
            Placement::Dram,
            Placement::File {
                dir: dir.path().to_path_buf(),
                persist: Persist::Cpu,
            },
            Placement::File {
                dir: dir.path().to_path_buf(),
                persist: Persist::Msync,
            },
        ] {
            let cfg = Config {
                elements: 100_003,
                ntimes: 3,
                workers: Workers::Threads,
                cpus: cpus.clone(),
                placement: placement.clone(),
                inner_reps: 2,
            };
            let r = run(&cfg).unwrap_or_else(|e| panic!("{placement:?}: {e}"));
            assert_eq!(r.kernels.len(), 4);
            assert!(r.kernel(Kernel::Triad).best_rate_mb_s > 0.0);
            assert_eq!(r.kernel(Kernel::Copy).bytes, 16 * 100_003 * 2);
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
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

    #[test]
    fn sweep_helpers() {
        assert_eq!(sweep_sizes(1024, 8192), vec![128, 256, 512, 1024]);
        assert_eq!(sweep_reps(1 << 20, 1 << 20), 1);
        assert_eq!(sweep_reps(1024, 1 << 20), 64);
    }
}
