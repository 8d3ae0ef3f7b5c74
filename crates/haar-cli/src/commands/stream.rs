//! `haar stream`: McCalpin's STREAM with the reference rules, on DRAM or a mapped file (EPCC's
//! App Direct variant), threads or processes, one size or a sweep with a PNG plot. Formats the
//! reports of `haar_mem::stream`; the benchmark itself lives there.

use std::path::{Path, PathBuf};

use clap::Args;
use haar_mem::machine;
use haar_mem::plot::sweep_png;
use haar_mem::stream::{self, Config, Kernel, Persist, Placement, StreamError, Workers};
use serde_json::json;

use crate::Failure;

/// Options of `haar stream`.
#[derive(Debug, Args)]
pub(crate) struct StreamArgs {
    /// MiB per array (default: 4 x the sum of all last-level caches, STREAM's rule).
    #[arg(long, value_name = "MIB", conflicts_with = "elements")]
    pub array_mib: Option<u64>,
    /// Elements (f64) per array, as stream.c's STREAM_ARRAY_SIZE.
    #[arg(long, value_name = "N")]
    pub elements: Option<usize>,
    /// Iterations; the first is not counted (default 10, 5 for --sweep).
    #[arg(long, value_name = "N")]
    pub ntimes: Option<usize>,
    /// Workers, each pinned to one CPU (default: every CPU this process may use).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// One process per worker, each with its own arrays (as the papers' MPI runs), instead
    /// of threads.
    #[arg(long)]
    pub processes: bool,
    /// Map the arrays from a file created in this directory (a DAX mount, /dev/shm, a disk)
    /// and persist after each kernel; the file is removed afterwards, also on Ctrl-C.
    #[arg(long, value_name = "DIR")]
    pub path: Option<PathBuf>,
    /// Persist step with --path: auto (CLWB+SFENCE on a DAX mapping, msync otherwise), cpu,
    /// msync or none.
    #[arg(long, value_name = "MODE", default_value = "auto", requires = "path")]
    pub persist: String,
    /// Sweep array sizes (doubling) to show the cache cliff; saves a PNG plot.
    #[arg(long)]
    pub sweep: bool,
    /// Smallest array of the sweep, KiB.
    #[arg(long, value_name = "KIB", default_value_t = 16)]
    pub sweep_min_kib: u64,
    /// Largest array of the sweep, MiB (default: 8 x the last-level caches, at most a
    /// quarter of the available memory).
    #[arg(long, value_name = "MIB")]
    pub sweep_max_mib: Option<u64>,
    /// The sweep's plot.
    #[arg(long, value_name = "FILE", default_value = "stream-sweep.png")]
    pub plot: PathBuf,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also save the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
}

fn failure(e: StreamError) -> Failure {
    match e {
        StreamError::Input(m) => Failure::usage(m),
        StreamError::Io(m) | StreamError::Validation(m) => Failure::io(m),
    }
}

/// Runs `haar stream`.
pub(crate) fn run(a: &StreamArgs) -> Result<(), Failure> {
    let root = Path::new("/");
    let llc = machine::last_level_cache(root);
    let llc_total = llc.as_ref().map_or(32 << 20, |c| c.total());
    let allowed = machine::allowed_cpus();
    let workers = a.threads.unwrap_or(allowed.len());
    if workers == 0 {
        return Err(Failure::usage("--threads must be at least 1"));
    }
    if workers > allowed.len() {
        eprintln!(
            "haar: warning: {workers} workers on {} CPUs: some share a CPU, which STREAM's \
             rules do not intend",
            allowed.len()
        );
    }
    let cpus: Vec<usize> = (0..workers).map(|i| allowed[i % allowed.len()]).collect();
    let persist = match a.persist.as_str() {
        "auto" => Persist::Auto,
        "cpu" => Persist::Cpu,
        "msync" => Persist::Msync,
        "none" => Persist::None,
        other => {
            return Err(Failure::usage(format!(
                "--persist {other:?}: use auto, cpu, msync or none"
            )));
        }
    };
    let placement = match &a.path {
        None => Placement::Dram,
        Some(dir) => Placement::File {
            dir: dir.clone(),
            persist,
        },
    };
    let mode = if a.processes {
        Workers::Processes
    } else {
        Workers::Threads
    };
    let elements = match (a.elements, a.array_mib) {
        (Some(n), _) => n,
        (None, Some(mib)) => (mib.saturating_mul(1 << 20) / 8) as usize,
        (None, None) => (4 * llc_total / 8) as usize,
    };
    let base = Config {
        elements,
        ntimes: a.ntimes.unwrap_or(if a.sweep { 5 } else { 10 }),
        workers: mode,
        cpus,
        placement,
        inner_reps: 1,
    };
    if a.sweep {
        return sweep(a, base, llc_total, llc.as_ref().map_or(3, |c| c.level));
    }
    let report = stream::run(&base).map_err(failure)?;
    let value = json!({
        "machine": machine_json(),
        "llc_bytes": llc_total,
        "report": report,
    });
    save(a, &value)?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&value).expect("json"))?;
    } else {
        out!("{}", report.table(llc_total))?;
    }
    Ok(())
}

fn machine_json() -> serde_json::Value {
    let root = Path::new("/");
    let (total, avail) = machine::memory(root);
    json!({
        "cpu": machine::cpu_model(root),
        "cpus_allowed": machine::allowed_cpus().len(),
        "mem_total": total,
        "mem_available": avail,
        "caches": machine::caches(root),
        "virtual_machine": machine::is_virtual(root),
    })
}

fn save(a: &StreamArgs, value: &serde_json::Value) -> Result<(), Failure> {
    if let Some(p) = &a.save {
        let text = serde_json::to_string_pretty(value).expect("json") + "\n";
        std::fs::write(p, text)
            .map_err(|e| Failure::io(format!("cannot write {}: {e}", p.display())))?;
    }
    Ok(())
}

fn sweep(a: &StreamArgs, base: Config, llc_total: u64, llc_level: u32) -> Result<(), Failure> {
    let max_bytes = match a.sweep_max_mib {
        Some(m) => m.saturating_mul(1 << 20),
        None => stream::default_sweep_max(llc_total),
    };
    let min_bytes = a.sweep_min_kib.saturating_mul(1024);
    let sizes = stream::sweep_sizes(min_bytes, max_bytes);
    if sizes.is_empty() {
        return Err(Failure::usage(format!(
            "--sweep-min-kib {} is above the largest size {}: nothing to sweep",
            a.sweep_min_kib,
            machine::human(max_bytes)
        )));
    }
    // The largest point is checked before anything runs (or is printed).
    stream::preflight(&Config {
        elements: *sizes.last().expect("non-empty"),
        ..base.clone()
    })
    .map_err(failure)?;
    if !a.json {
        outln!(
            "haar stream --sweep: {} sizes from {} to {} per array, {} workers; best rate MB/s",
            sizes.len(),
            machine::human(min_bytes),
            machine::human(max_bytes),
            base.cpus.len()
        )?;
        outln!(
            "{:>12}{:>12}{:>8}{:>12}{:>12}{:>12}{:>12}",
            "per array",
            "total",
            "passes",
            "copy",
            "scale",
            "add",
            "triad"
        )?;
    }
    let mut printed = Ok(());
    let sw = stream::run_sweep(&base, &sizes, llc_total, llc_level, &mut |r| {
        if !a.json && printed.is_ok() {
            printed = outln!(
                "{:>12}{:>12}{:>8}{:>12.0}{:>12.0}{:>12.0}{:>12.0}",
                machine::human(r.bytes_per_array),
                machine::human(r.total_bytes),
                r.inner_reps,
                r.kernel(Kernel::Copy).best_rate_mb_s,
                r.kernel(Kernel::Scale).best_rate_mb_s,
                r.kernel(Kernel::Add).best_rate_mb_s,
                r.kernel(Kernel::Triad).best_rate_mb_s
            );
        }
    })
    .map_err(failure)?;
    printed?;
    sweep_png(&a.plot, &sw.title, &sw.series, &sw.markers).map_err(Failure::io)?;
    let value = json!({
        "machine": machine_json(),
        "llc_bytes": llc_total,
        "plot": a.plot,
        "sweep": sw.reports,
    });
    save(a, &value)?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&value).expect("json"))?;
    } else {
        outln!(
            "{}; plot saved to {}",
            stream::capitalise(&sw.reports[0].validation),
            a.plot.display()
        )?;
    }
    Ok(())
}
