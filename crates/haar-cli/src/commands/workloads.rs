//! `haar hammer`, `haar workflow`, `haar bench` (with `--scale`) and the hidden `haar workload-worker`: their
//! command-line grammar, mapped onto the plain option structs of `haar_bench` (where the
//! workloads and benchmarks live), and the library's errors mapped onto exit codes.
//!
//! Owns no measurement: every figure, table and plot is made by `haar_bench`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use haar_bench::{bench, hammer, scale, workflow};
use haar_mem::units::parse_size;

use crate::Failure;
use crate::args::{Cli, ClientArgs, OpenArgs};
use crate::open::open_options;

impl From<haar_bench::Error> for Failure {
    fn from(e: haar_bench::Error) -> Failure {
        use haar_bench::Error as E;
        match e {
            E::Store(e) => Failure::from(e),
            E::Usage(_) | E::Interrupted => Failure::usage(e.to_string()),
            E::Missing(_) => Failure::missing(e.to_string()),
            _ => Failure::io(e.to_string()),
        }
    }
}

/// What the hammer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ModeArg {
    /// Archive every field, flush at the end of each step.
    Write,
    /// Retrieve every field one at a time and verify it.
    Read,
    /// List each member's fields per step and check the count.
    List,
}

/// Options of `haar hammer`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
EXAMPLES
    haar --backend pmem --root /dev/shm/h hammer --members 4 --steps 10 --levels 20 --params 5
    haar --backend pmem --root /dev/shm/h hammer --mode read --members 4 --steps 10 --levels 20 --params 5
    haar --servers n1:7000,n2:7000 hammer --procs 2 --field-size 3.2MiB --json hammer.json
    haar hammer --fdb5 /dev/shm/fdb --members 4 --steps 10    # the same load through the real FDB5
    scripts/vcluster.sh up 4 && haar hammer --vcluster 4 --json t8.json   # 1..4 nodes, haar vs FDB5

KEYS
    class=CLASS,expver=EXPVER,stream=enfo,date=DATE,time=TIME,domain=g,type=pf,levtype=ml,
    step=0/6/12/…,number=1/to/MEMBERS,levelist=1/to/LEVELS,param=130/131/… (PARAMS of
    t u v q w vo d z o3 clwc ciwc cc). Writer process p of N takes members p+1, p+1+N, …

FIELDS
    A 64-byte header (member, step, param, level, checksums) and a body of 16-bit values
    (docs/design.md §10); with --grib, the messages of a real GRIB file instead, in turn.
    Reads check the header against the key and the body checksum (or the bytes of the
    GRIB message).

TIMING
    From the workers' start barrier until every worker has exited. Before the barrier,
    templates are built and stores opened; a local pmem pool is provisioned for the
    whole run (grown, its pages allocated; 2 MiB pages with pool_huge_pages: true)
    and each writer reserves and maps its share of the pool's heap (pool_chunk,
    pool_prefault: open), as a real pmem namespace is created and mapped (with 2 MiB
    pages) before use. Archive and flush do all their work (copy, checksum, persist with
    flush + fence semantics, commit) inside the timed region. The provisioning's own time is
    printed and saved (provision_s), with the throughput counting it.")]
pub(crate) struct HammerArgs {
    /// write, read (verified) or list.
    #[arg(long, value_enum, default_value = "write")]
    pub mode: ModeArg,
    /// MARS class.
    #[arg(long, default_value = "rd")]
    pub class: String,
    /// Experiment version (4 characters).
    #[arg(long, default_value = "xxxx")]
    pub expver: String,
    /// Forecast date (YYYYMMDD).
    #[arg(long, default_value = "20261121")]
    pub date: String,
    /// Ensemble members.
    #[arg(long, default_value_t = 2)]
    pub members: u32,
    /// Output steps (6 hours apart); a flush after each.
    #[arg(long, default_value_t = 4)]
    pub steps: u32,
    /// Model levels.
    #[arg(long, default_value_t = 10)]
    pub levels: u32,
    /// Parameters per level (at most 12).
    #[arg(long, default_value_t = 5)]
    pub params: u32,
    /// Bytes per field (`65536`, `800KiB`, `3.2MiB`).
    #[arg(long, default_value = "800KiB", value_parser = parse_size)]
    pub field_size: u64,
    /// Worker processes (members are dealt out to them).
    #[arg(long, default_value_t = 1)]
    pub procs: u32,
    /// Use the messages of this GRIB file as the fields' bytes (in turn) instead of templates.
    #[arg(long, value_name = "FILE")]
    pub grib: Option<PathBuf>,
    /// Run against the real FDB5 (C API) with a store under DIR instead of haar.
    #[arg(long, value_name = "DIR")]
    pub fdb5: Option<PathBuf>,
    /// Save every figure as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also measure the raw limits in this run, with scratch files in DIR (memcpy and
    /// non-temporal copy into a mapping, write(2) in 1 MiB chunks, loopback TCP), and report
    /// the hammer's throughput as a ratio to each.
    #[arg(long, value_name = "DIR")]
    pub limits: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// SC'19 Table 8 on the virtual cluster (root; `scripts/vcluster.sh up N` first): for
    /// K = 1..N client nodes, writes with haar (one server per client node over its
    /// /mnt/pmem0) and with FDB5 (its TOC on /shared), beside one node's link limit and the
    /// host's memcpy measured in the same run. --members and --procs are then per node.
    #[arg(long, value_name = "N")]
    pub vcluster: Option<usize>,
    #[command(flatten)]
    pub open: OpenArgs,
}

impl HammerArgs {
    fn options(&self) -> hammer::Options {
        hammer::Options {
            mode: match self.mode {
                ModeArg::Write => hammer::Mode::Write,
                ModeArg::Read => hammer::Mode::Read,
                ModeArg::List => hammer::Mode::List,
            },
            class: self.class.clone(),
            expver: self.expver.clone(),
            date: self.date.clone(),
            members: self.members,
            steps: self.steps,
            levels: self.levels,
            params: self.params,
            field_size: self.field_size as usize,
            procs: self.procs,
            grib: self.grib.clone(),
            fdb5: self.fdb5.clone(),
            json: self.json.clone(),
            limits: self.limits.clone(),
            quiet: self.quiet,
            vcluster: self.vcluster,
        }
    }
}

/// Runs `haar hammer`.
pub(crate) fn hammer(cli: &Cli, a: &HammerArgs) -> Result<(), Failure> {
    Ok(hammer::run(&open_options(cli), &a.options())?)
}

/// Options of `haar workflow`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
WHAT RUNS
    For each backend, twice (producers alone, then with consumers), on fresh stores:
      shared-posix  one POSIX directory shared by every process (the parallel-file-system
                    baseline); consumers poll it for complete steps every 10 ms
      haar          haar `dist` over --nodes local `haar serve` processes with pmem pools
                    (or the servers of --servers); fields spread by rendezvous hashing,
                    consumers woken by step-complete notifications
      fdb5          the real FDB5 (POSIX TOC, C API) where installed; consumers poll
    Producers sleep --compute-ms before each step (the model's computation, on cores this
    machine does not have), archive their F fields and flush. Consumers share the fields of
    each step, read all members of each, and archive the mean (type=em) and standard
    deviation (type=es). Afterwards every product is checked against values recomputed from
    the members' seeds, and every member field must have been delivered exactly once.

OUTPUT
    A table shaped like SC'19 Table 9, a PNG plot (--plot), and with --json every figure:
    producer wall and I/O times alone and with consumers, slowdowns, each step's delivery
    latency, volumes, polls. Delivery latency is also given as a ratio to an in-memory floor
    measured first in the same run: the consumers' computation alone for one step (every
    member of every field reduced, both products packed, on --consumers threads) with the
    fields already in memory and no store. No store can deliver a step faster than that on
    this machine; the ratio is what storage and transport add.

EXAMPLES
    haar workflow                                        # the embedded default, ~1 GiB per run
    haar workflow --members 10 --levels 20 --params 5 --steps 4   # 10 x 100 fields per step
    haar --servers n1:7000,n2:7000 --token-file t workflow --backends haar
    scripts/vcluster.sh up 4 && haar workflow --vcluster 4 --json t9.json   # across 4 nodes")]
pub(crate) struct WorkflowArgs {
    /// Ensemble members (producer processes).
    #[arg(long, default_value_t = 10)]
    pub members: u32,
    /// Output steps per member.
    #[arg(long, default_value_t = 3)]
    pub steps: u32,
    /// Model levels per step.
    #[arg(long, default_value_t = 8)]
    pub levels: u32,
    /// Parameters per level (fields per step = levels x params).
    #[arg(long, default_value_t = 5)]
    pub params: u32,
    /// Bytes per field (ENS: 804KiB; HRES: 3.2MiB).
    #[arg(long, default_value = "804KiB", value_parser = parse_size)]
    pub field_size: u64,
    /// Product-generation processes.
    #[arg(long, default_value_t = 2)]
    pub consumers: u32,
    /// Milliseconds each producer waits before each step (model time between outputs).
    #[arg(long, default_value_t = 300)]
    pub compute_ms: u64,
    /// Backends to compare, in order: shared-posix, haar, fdb5 (skipped with a note where
    /// FDB5 is not installed).
    #[arg(long, value_delimiter = ',', default_value = "shared-posix,haar,fdb5")]
    pub backends: Vec<String>,
    /// Local servers to start for `haar` (ignored with --servers).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Where the servers' pmem pools go (a DAX mount on real persistent memory) [default:
    /// /dev/shm; /mnt/pmem0 of every node with --vcluster].
    #[arg(long, value_name = "DIR")]
    pub pmem_dir: Option<PathBuf>,
    /// Where the shared POSIX directory and FDB5's root go (the parallel file system)
    /// [default: /var/tmp; /shared, the virtual cluster's GlusterFS, with --vcluster].
    #[arg(long, value_name = "DIR")]
    pub shared_dir: Option<PathBuf>,
    /// Run across the first N nodes of the virtual cluster (root; bring it up first with
    /// `scripts/vcluster.sh up N`): members on the first half of the nodes, product
    /// generation on the others, one haar server per node over its /mnt/pmem0, the shared
    /// POSIX directory and FDB5's root on /shared (GlusterFS behind the storage node's shaped
    /// link). The JSON's `nodes` is N.
    #[arg(long, value_name = "N")]
    pub vcluster: Option<usize>,
    /// Consumers read each member's field as soon as it is flushed (per-field notifications,
    /// haar only) instead of waiting for the whole step; products still complete per step.
    #[arg(long)]
    pub streaming: bool,
    /// Skip the producers-alone runs (no slowdown figure).
    #[arg(long)]
    pub only_with_consumers: bool,
    /// Seconds a consumer waits for a step before failing.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Save every figure as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Save the plot (PNG).
    #[arg(long, value_name = "FILE", default_value = "haar-workflow.png")]
    pub plot: PathBuf,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

impl WorkflowArgs {
    fn options(&self) -> workflow::Options {
        workflow::Options {
            members: self.members,
            steps: self.steps,
            levels: self.levels,
            params: self.params,
            field_size: self.field_size as usize,
            consumers: self.consumers,
            compute_ms: self.compute_ms,
            backends: self.backends.clone(),
            nodes: self.nodes,
            pmem_dir: self.pmem_dir.clone(),
            shared_dir: self.shared_dir.clone(),
            vcluster: self.vcluster,
            streaming: self.streaming,
            only_with_consumers: self.only_with_consumers,
            timeout: self.timeout,
            json: self.json.clone(),
            plot: self.plot.clone(),
            quiet: self.quiet,
        }
    }
}

/// Runs `haar workflow`.
pub(crate) fn workflow(cli: &Cli, a: &WorkflowArgs) -> Result<(), Failure> {
    Ok(workflow::run(&open_options(cli), &a.options())?)
}

/// Options of `haar bench`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
SCALE MODE (--scale)
    How the cost of archive, open, list and retrieve grows with the number of fields in ONE
    database, for haar and for the real FDB5 in the same run. The database is filled
    incrementally to each of --sizes (rounded up to whole member-steps of 1,644 fields) and
    measured at each, haar and FDB5 in turn, each store in a worker process of its own.

    KEYS: class=od,expver=0001,stream=enfo,date=20261121,time=0000,domain=g,type=pf,
    levtype=ml, number=1..50, step=0,1,2,... (steps outermost: all 50 members of a step, then
    the next step), levelist=1..137, param=130/131/132/133/135/138/155/129/203/246/247/248:
    1,644 fields per member-step, a flush after each member-step as a forecast model does. haar
    splits them with its built-in schema (FDB5's default); FDB5 with its default schema.

    AT EACH SIZE, FOR EACH STORE:
      archive fields/s     fields added since the previous size / the time to archive and
                           flush them
      open + 1st read      a new handle (haar: the store opened from its root; FDB5:
                           fdb_new_handle) reading one field, in-process
      list                 one member-step (1,644 fields) on an open handle (FDB5: fdb_list,
                           every element's attributes read)
      retrieve             one field on an open handle
      list CLI             `haar list REQUEST` / FDB5's `fdb-list --porcelain REQUEST` in a
                           fresh process, wall from spawn to reap with its output read
      retrieve CLI         `haar retrieve REQUEST` (stdout) / `fdb-read REQFILE FILE`, wall
                           and peak RSS (ru_maxrss from wait4, MB = 10^6 bytes)
    Member-steps and fields are drawn at random among those filled, the same for both stores;
    every read and listing is checked. Figures are the median of --runs runs after one untimed
    warm-up; RSS is the largest of the runs.

    FDB5 is FDB5 5.25 from PyPI's fdb5lib wheel (`pip install pyfdb==5.25.0.33`): its
    libfdb5.so through the C API in the worker, its fdb-list and fdb-read for the CLI
    figures, on a root beside haar's. Where the wheel is absent (or with --no-fdb5) FDB5 is
    skipped with a message and its columns are empty.

    TARGETS (printed as verdicts, judged on haar, FDB5's figure beside): at 10^6 fields (the
    size nearest to it) a one-off CLI retrieve <= 20 ms wall and <= 50 MB RSS, a list of 1,644
    fields <= 10 ms; those flat within 2x from the smallest size to the largest; list >= 5x and
    retrieve >= 3x FDB5 at every size; the archive rate at the largest size within 20% of the
    rate at the smallest.

    OUTPUT: the tables on stdout; OUT/scale.json (every figure and every run, or --json FILE),
    OUT/benchmarks-scale.md (the tables with their definitions) and OUT/scale.png (log-log:
    list, retrieve and RSS against size, both stores). A progress bar while filling (stderr).

    SPACE: about (field bytes + ~130 B) per field per store in --root (measured: FDB5 at 10^5
    and 10^6, haar's posix backend at 10^5; a pmem pool grows 1 GiB at a time): 10^7 fields
    of 256 B take ~4 GB per store, and /dev/shm is memory.

EXAMPLES
    haar bench --fields 1000 --json bench.json --markdown report.md
    haar bench --scale                                     # 10^5 and 10^6 fields, pmem on /dev/shm
    haar bench --scale --sizes 1e5,1e6,1e7 --out bench/results
    haar bench --scale --backend posix --root /var/tmp --field-bytes 512 --runs 11")]
pub(crate) struct BenchArgs {
    /// Directory for the temporary stores (default: a new directory under /dev/shm, removed
    /// afterwards). Use a DAX mount to measure real persistent memory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Fields per run at 800 KiB; the 64 KiB runs use 8 times as many.
    #[arg(long, default_value_t = 1000)]
    pub fields: usize,
    /// Flush after this many fields (and at the end).
    #[arg(long, default_value_t = 100)]
    pub flush_every: usize,
    /// FDB5 C-API peer harness (built by bench/build-peer.sh). Default: target/fdb5_peer if it
    /// exists; `none` to skip the peer.
    #[arg(long, value_name = "PATH")]
    pub fdb5_peer: Option<PathBuf>,
    /// Where to save every figure as JSON. Default: bench-results.json; with --scale,
    /// OUT/scale.json.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write a Markdown report (e.g. docs/benchmarks.md).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// A smaller run (a quarter of the fields, smaller raw-limit buffers).
    #[arg(long)]
    pub quick: bool,
    /// Only the GRIB section (`haar archive` beside `fdb-write`, see haar-bench's bench/grib.rs).
    #[arg(long)]
    pub grib_only: bool,
    /// Scale mode: fill ONE database to each of --sizes fields and measure archive rate, open,
    /// list and retrieve (in-process and as one-off CLI processes, with peak RSS) at each,
    /// beside FDB5 5.25 in the same run (see SCALE MODE below).
    #[arg(long, conflicts_with_all = ["dir", "fields", "flush_every", "fdb5_peer", "markdown", "quick", "grib_only"])]
    pub scale: bool,
    /// Database sizes in fields, ascending (`1e5,1e6,1e7` or plain numbers); each is rounded
    /// up to whole member-steps of 1,644 fields.
    #[arg(
        long,
        value_name = "N,N,...",
        default_value = "1e5,1e6",
        requires = "scale"
    )]
    pub sizes: String,
    /// Bytes per field (`256`, `1KiB`; at least 16).
    #[arg(long, value_name = "BYTES", default_value = "256", value_parser = parse_size, requires = "scale")]
    pub field_bytes: u64,
    /// haar's backend: pmem (a pool file in the root) or posix (files).
    #[arg(long = "backend", id = "scale_backend", value_name = "pmem|posix", default_value = "pmem",
          value_parser = ["pmem", "posix"], requires = "scale")]
    pub scale_backend: String,
    /// Where the run makes its directory (haar's store and FDB5's root side by side, removed
    /// afterwards unless --keep). Default: /dev/shm.
    #[arg(
        long = "root",
        id = "scale_root",
        value_name = "DIR",
        requires = "scale"
    )]
    pub scale_root: Option<PathBuf>,
    /// Directory for scale.json, benchmarks-scale.md and scale.png (created if missing).
    #[arg(long, value_name = "DIR", default_value = ".", requires = "scale")]
    pub out: PathBuf,
    /// Timed runs of each figure (after one untimed warm-up); the median is reported.
    #[arg(long, value_name = "N", default_value_t = 7, requires = "scale")]
    pub runs: usize,
    /// Measure haar only (FDB5's columns stay empty).
    #[arg(long, requires = "scale")]
    pub no_fdb5: bool,
    /// Keep the stores afterwards (their directory is printed).
    #[arg(long, requires = "scale")]
    pub keep: bool,
    /// No progress bars.
    #[arg(long, requires = "scale")]
    pub quiet: bool,
    /// Internal: run as the visibility reader of ROOT (pmem) for N fields.
    #[arg(long, hide = true, num_args = 2, value_names = ["ROOT", "N"])]
    pub visibility_reader: Option<Vec<String>>,
}

/// Runs `haar bench` (or, hidden, its visibility reader).
pub(crate) fn bench(a: &BenchArgs) -> Result<(), Failure> {
    if let Some(v) = &a.visibility_reader {
        let n = v[1].parse().map_err(|_| Failure::usage("bad N"))?;
        return Ok(bench::visibility_reader(std::path::Path::new(&v[0]), n)?);
    }
    if a.scale {
        let o = scale::Options {
            sizes: scale::parse_sizes(&a.sizes)?,
            field_bytes: a.field_bytes as usize,
            backend: a.scale_backend.clone(),
            root: a.scale_root.clone(),
            out: a.out.clone(),
            json: a.json.clone(),
            runs: a.runs,
            fdb5: !a.no_fdb5,
            keep: a.keep,
            quiet: a.quiet,
        };
        return Ok(scale::run(&o)?);
    }
    let o = bench::Options {
        dir: a.dir.clone(),
        fields: a.fields,
        flush_every: a.flush_every,
        fdb5_peer: a.fdb5_peer.clone(),
        json: a
            .json
            .clone()
            .unwrap_or_else(|| "bench-results.json".into()),
        markdown: a.markdown.clone(),
        quick: a.quick,
        grib_only: a.grib_only,
    };
    Ok(bench::run(&o)?)
}

/// Options of the hidden `haar workload-worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// The worker's instructions (JSON).
    #[arg(long)]
    pub spec: String,
    #[command(flatten)]
    pub open: OpenArgs,
}

/// Runs one worker process of `haar hammer` or `haar workflow` (docs/design.md §10).
pub(crate) fn worker(cli: &Cli, a: &WorkerArgs) -> Result<(), Failure> {
    Ok(haar_bench::worker::run(&open_options(cli), &a.spec)?)
}
