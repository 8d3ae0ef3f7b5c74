//! `haar workflow`: the IFS ensemble and its product generation, in miniature (the SC'19
//! paper's Table 9 experiment). M producer processes (members) write S steps of F fields,
//! flushing per step; C consumer processes wait for each step to be complete — a notification
//! from the servers for haar, polling where the store has none — read every member's fields,
//! compute the ensemble mean and standard deviation point by point and archive them. Each
//! backend runs twice, producers alone and with consumers, and the run reports the producers'
//! slowdown and each step's delivery latency (last member's flush → products flushed), then
//! checks every product against values recomputed from the members' seeds.

//!
//! Modules, one concern each: `topology` prepares each backend's stores and servers,
//! `producer` and `consumer` are the worker processes, `check` the independent product
//! checker, `runs` runs one configuration and collects its figures, `report` prints the
//! table, saves the JSON and draws the plot. This module holds the options, the run's order
//! and the in-memory floor; none of them knows a store's insides (every store is a
//! `dyn FieldStore`, see [`crate::target`]).

mod check;
mod consumer;
mod cpu_use;
mod producer;
mod report;
mod runs;
mod topology;

use std::path::PathBuf;

use haar::OpenOptions;

use crate::error::{Error, io};
use crate::field::{self, Header, Kind};
use crate::layout::Layout;
use crate::stats::monotonic_ns;

pub use consumer::{ConsumerSpec, consumer};
pub use producer::{ProducerSpec, producer};

use report::Row;
use topology::{Backend, Site};

pub(crate) const SALT: u64 = 0x0077_666c_6f77; // "wflow"
pub(crate) const GIB: f64 = (1u64 << 30) as f64;

/// What `haar workflow` runs (the command line's options; `haar workflow --help` explains
/// each and what runs).
#[derive(Debug, Clone)]
pub struct Options {
    /// Ensemble members (producer processes).
    pub members: u32,
    /// Output steps per member.
    pub steps: u32,
    /// Model levels per step.
    pub levels: u32,
    /// Parameters per level (fields per step = levels x params).
    pub params: u32,
    /// Bytes per field.
    pub field_size: usize,
    /// Product-generation processes.
    pub consumers: u32,
    /// Milliseconds each producer waits before each step (model time between outputs).
    pub compute_ms: u64,
    /// Backends to compare, in order: `shared-posix`, `haar`, `fdb5` (skipped with a note
    /// where FDB5 is not installed).
    pub backends: Vec<String>,
    /// Local servers to start for `haar` (ignored when the store options name servers, and
    /// with `vcluster`: one server per node).
    pub nodes: usize,
    /// Where the servers' pmem pools go (default `/dev/shm`; `/mnt/pmem0` on the virtual
    /// cluster).
    pub pmem_dir: Option<PathBuf>,
    /// Where the shared POSIX directory and FDB5's root go (default `/var/tmp`; `/shared`, the
    /// GlusterFS volume, on the virtual cluster).
    pub shared_dir: Option<PathBuf>,
    /// Run across the first N nodes of the virtual cluster (`scripts/vcluster.sh up N`):
    /// members on the first half of them, product generation on the rest, one haar server per
    /// node over its own tier, the shared file system at `/shared` (SC'19 Table 9 where the
    /// contention happens).
    pub vcluster: Option<usize>,
    /// Consumers read each member's field as soon as it is flushed (per-field notifications,
    /// haar only) instead of waiting for the whole step.
    pub streaming: bool,
    /// Skip the producers-alone runs (no slowdown figure).
    pub only_with_consumers: bool,
    /// Seconds a consumer waits for a step before failing.
    pub timeout: u64,
    /// Save every figure as JSON.
    pub json: Option<PathBuf>,
    /// Save the plot (PNG).
    pub plot: PathBuf,
    /// No progress bars.
    pub quiet: bool,
}

/// Member `m`'s reference value for field `f` at step `s`: what differs between members
/// besides their bodies, like GRIB's reference value.
pub(crate) fn reference(m: u32, s: u32, f: u32) -> f64 {
    let delta = (haar_core::rendezvous::splitmix64(u64::from(m)) % 2001) as f64 / 100.0 - 10.0;
    250.0 + 2.0 * f64::from(s) + 0.5 * f64::from(f) + delta
}

pub(crate) const SCALE: f64 = 0.001;

pub(crate) fn member_header(l: &Layout, m: u32, s: u32, f: u32, seed: u64, crc: u32) -> Header {
    l.member_header(m, s, f, reference(m, s, f), SCALE, seed, crc)
}

/// Bytes of a product field for `l` (16-bit packed, as the members).
pub(crate) fn product_size(l: &Layout) -> usize {
    field::HEADER + 2 * field::nvalues16(l.field_size) as usize
}

/// Runs `haar workflow`.
pub fn run(opts: &OpenOptions, a: &Options) -> Result<(), Error> {
    let l = Layout {
        class: "rd".into(),
        expver: "wflw".into(),
        date: "20261121".into(),
        time: "0000".into(),
        members: a.members,
        steps: a.steps,
        step_hours: 6,
        levels: a.levels,
        params: a.params,
        field_size: a.field_size,
    };
    l.check()?;
    if a.consumers == 0 {
        return Err(Error::Usage(
            "--consumers must be at least 1 (product generation is the point)".into(),
        ));
    }
    if a.vcluster.is_some() && opts.servers.is_some() {
        return Err(Error::Usage(
            "--vcluster starts one server per node itself: drop --servers".into(),
        ));
    }
    let nodes = a.vcluster.unwrap_or(a.nodes);
    if nodes == 0 && opts.servers.is_none() {
        return Err(Error::Usage("--nodes must be at least 1".into()));
    }
    if opts.replicas == 0 || (opts.servers.is_none() && opts.replicas > nodes) {
        return Err(Error::Usage(format!(
            "--replicas {} must be between 1 and the number of servers ({nodes}: --nodes, or --vcluster)",
            opts.replicas
        )));
    }
    let mut backends = Vec::new();
    for b in &a.backends {
        let b = Backend::parse(b)?;
        if b == Backend::Fdb5 && !crate::fdb5::available() {
            eprintln!(
                "haar workflow: FDB5 is not installed here (apt-get install fdb5 libfdb5-dev); its row is skipped"
            );
            continue;
        }
        if !backends.contains(&b) {
            backends.push(b);
        }
    }
    if backends.is_empty() {
        return Err(Error::Usage("no backend to run (see --backends)".into()));
    }
    let site = Site::new(a)?;
    // The figure is drawn at the end: a missing font must not cost the whole run.
    haar_mem::plot::prepare_fonts().map_err(Error::Usage)?;
    crate::procs::install_interrupt_handler();
    eprintln!(
        "haar workflow: {} members x {} steps x {} fields of {} bytes = {:.2} GiB per run; {} consumers; {} ms model time per step",
        l.members,
        l.steps,
        l.fields_per_step(),
        l.field_size,
        l.total_bytes() as f64 / GIB,
        a.consumers,
        a.compute_ms
    );
    if site.cluster.is_some() {
        eprintln!("haar workflow: {}", site.describe());
    }
    let floor_ms = product_floor(&l, a.consumers);
    eprintln!(
        "haar workflow: in-memory floor of a step's products (no store, {} threads): {floor_ms:.1} ms",
        a.consumers
    );
    let mut rows = Vec::new();
    let mut failed: Vec<(String, String)> = Vec::new();
    for b in backends {
        match run_backend(opts, a, &site, b, &l) {
            Ok(row) => {
                eprintln!("haar workflow: {}", row.line());
                for line in row.cpu_lines() {
                    eprintln!("haar workflow: {line}");
                }
                rows.push(row);
            }
            // The peer failing is a result of the comparison, not the end of it: FDB5 over
            // GlusterFS crashed once in TocHandler::read (EFAULT, then SIGSEGV) on the
            // virtual cluster. haar's own failures, and an interrupt, still end the run.
            Err(e) if b == Backend::Fdb5 && !matches!(e, Error::Interrupted) => {
                eprintln!("haar workflow: fdb5 FAILED, its row is left out: {e}");
                failed.push((b.id().into(), e.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
    let mut report = report::report(a, &site, &l, opts.replicas, floor_ms, &rows);
    report["failed"] = serde_json::json!(
        failed
            .iter()
            .map(|(b, e)| serde_json::json!({"backend": b, "error": e}))
            .collect::<Vec<_>>()
    );
    report::print_table(&l, a, &site, floor_ms, &rows);
    for (b, e) in &failed {
        println!("{b} FAILED (left out): {}", e.lines().next().unwrap_or(""));
    }
    report::plot(&a.plot, &rows)?;
    println!("plot: {}", a.plot.display());
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report).expect("json"))
            .map_err(io(format!("cannot write {}", p.display())))?;
        println!("figures: {}", p.display());
    }
    Ok(())
}

/// One backend's two runs (producers alone, then with consumers) as a row of the table.
fn run_backend(
    opts: &OpenOptions,
    a: &Options,
    site: &Site,
    b: Backend,
    l: &Layout,
) -> Result<Row, Error> {
    let mut alone = None;
    let mut describe = String::new();
    if !a.only_with_consumers {
        let p = topology::prepare(opts, a, site, b, l, "alone")?;
        describe = p.describe.clone();
        alone = Some(runs::run_once(
            a,
            site,
            &p,
            l,
            0,
            &format!("{} alone", b.id()),
        )?);
    }
    let p = topology::prepare(opts, a, site, b, l, "with")?;
    if describe.is_empty() {
        describe = p.describe.clone();
    }
    let before = server_counters(&p)?;
    let with = runs::run_once(
        a,
        site,
        &p,
        l,
        a.consumers,
        &format!("{} + consumers", b.id()),
    )?;
    let metrics = match (before, server_counters(&p)?) {
        (Some(b), Some(after)) => Some(serde_json::json!({
            "endpoints": p.servers.as_ref().map(|s| s.metrics.clone()),
            "before": b,
            "after": after,
        })),
        _ => None,
    };
    Ok(Row {
        backend: b.id().into(),
        describe,
        alone,
        with,
        metrics,
    })
}

/// The servers' own counters, read from their metrics endpoints as Prometheus would (the
/// run started them with `--metrics`): requests and field bytes in and out, summed over the
/// servers. `None` where the run started no servers with endpoints.
fn server_counters(p: &topology::Prepared) -> Result<Option<serde_json::Value>, Error> {
    let Some(s) = p.servers.as_ref().filter(|s| !s.metrics.is_empty()) else {
        return Ok(None);
    };
    Ok(Some(serde_json::json!({
        "haar_requests_total": s.scrape_sum("haar_requests_total")?,
        "haar_field_bytes_received_total": s.scrape_sum("haar_field_bytes_received_total")?,
        "haar_field_bytes_sent_total": s.scrape_sum("haar_field_bytes_sent_total")?,
    })))
}

/// The in-memory floor of one step's product generation: the consumers' computation alone —
/// every member of every field reduced and both products packed, on `consumers` threads, the
/// fields shared as the consumers share them — with the member fields already in memory and no
/// store at all. Bodies rotate over at least 64 MiB of distinct buffers (more than this
/// machine's caches) so they come from memory, as received fields would. Best of 3, in ms.
fn product_floor(l: &Layout, consumers: u32) -> f64 {
    let n = field::nvalues16(l.field_size) as usize;
    let per_set = l.members as usize * l.field_size;
    let sets = (64usize << 20)
        .div_ceil(per_set)
        .clamp(1, l.fields_per_step() as usize);
    let bodies: Vec<Vec<(Vec<u8>, Header)>> = (0..sets as u32)
        .map(|f| {
            (1..=l.members)
                .map(|m| {
                    let seed = field::seed(SALT, m, f);
                    let mut t = field::template(l.field_size, seed);
                    let h = member_header(l, m, 0, f, seed, field::body_crc(&t));
                    field::stamp(&mut t, &h);
                    (t, h)
                })
                .collect()
        })
        .collect();
    let psize = product_size(l);
    let once = || {
        let t0 = monotonic_ns();
        std::thread::scope(|sc| {
            for c in 0..consumers {
                let bodies = &bodies;
                sc.spawn(move || {
                    for f in (0..l.fields_per_step()).filter(|f| f % consumers == c) {
                        let set = &bodies[f as usize % bodies.len()];
                        let members: Vec<(&[u8], Header)> =
                            set.iter().map(|(b, h)| (&b[..], *h)).collect();
                        let (mean, sd) = field::ensemble_stats(&members, n);
                        let h = Header {
                            kind: Kind::Mean,
                            ..members[0].1
                        };
                        std::hint::black_box(field::product(psize, h, &mean));
                        std::hint::black_box(field::product(psize, h, &sd));
                    }
                });
            }
        });
        (monotonic_ns() - t0) as f64 / 1e6
    };
    (0..3).map(|_| once()).fold(f64::INFINITY, f64::min)
}
