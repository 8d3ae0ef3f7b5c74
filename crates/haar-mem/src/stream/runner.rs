//! Running STREAM: the workers (threads pinned to CPUs, or one forked process per CPU with
//! its own arrays), the barrier between kernels, the timing of each kernel and the assembly
//! of the [`Report`].
//!
//! Owns threads, `fork`/`waitpid`, the shared memory between processes and the array files'
//! names. Must not do arithmetic on the arrays (the kernels), compute rates (the report) or
//! print anything: the CLI formats the report.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use super::arrays::Arrays;
use super::config::{Config, Placement, StreamError, Workers, preflight};
use super::kernels::{Kernel, run_kernel, verdict};
use super::report::{PlacementReport, Report, summarise};
use crate::cleanup::TempFile;
use crate::machine;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Persist;

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
}
