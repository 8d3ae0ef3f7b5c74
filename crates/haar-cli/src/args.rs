//! Command-line grammar. The forms here are a contract other tools call: change with care.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

const AFTER_HELP: &str = "\
REQUESTS
    A REQUEST is `keyword=value/value,keyword=value` (MARS language: `step=0/to/24/by/6`,
    `param=t/130/2t`, `date=-1`, `levelist=all`; keywords case-insensitive, unique prefixes
    accepted) or `@FILE` naming a file of one or more MARS requests (`#` comments).

CONFIGURATION
    With no configuration haar uses the posix backend under $XDG_DATA_HOME/haar (else
    ~/.local/share/haar). One YAML file, given by --config or $HAAR_CONFIG, selects the backend,
    roots, fsync policy, pool size and schema:
        backend: pmem            # posix | pmem | memory
        roots: [/dev/shm/haar]
        pool_size: 1073741824    # pmem: initial pool bytes (grows on demand)
        pool_chunk: 16777216     # pmem: heap a writing process reserves and maps at a time
        pool_prefault: create    # pmem: map the first chunk at the first write | open
        pool_huge_pages: false   # pmem: provisioning backs the pool with 2 MiB pages
        fsync: always            # posix: always | never
        schema: /etc/fdb/schema  # FDB5 rule language; built-in schema when absent
    --root and --backend override the file.

EXIT STATUS
    0 success; 1 bad usage, request or input; 2 requested data missing; 3 I/O error or
    corruption in the store.

See docs/design.md for formats and the durability contract.";

/// haar: a crash-safe semantic field store for weather and climate data.
///
/// Fields (usually GRIB messages) are archived and retrieved by their scientific metadata
/// (MARS keys), split into database / index / datum levels by an FDB5-compatible schema.
/// Archived fields become visible to every process at `flush`, atomically per database.
#[derive(Debug, Parser)]
#[command(name = "haar", version, after_long_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    /// Configuration file (YAML). Default: $HAAR_CONFIG, else built-in defaults.
    #[arg(long, global = true, value_name = "FILE", env = "HAAR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Store root directory (overrides the configuration's roots).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Backend: posix (files) or pmem (a persistent-memory pool file in the root).
    #[arg(long, global = true, value_name = "posix|pmem")]
    pub backend: Option<String>,
    /// Use these servers (`haar serve`) instead of the local store: `HOST:PORT,HOST:PORT,...`
    /// (several are combined by rendezvous hashing). For `cluster`: how many to start.
    #[arg(long, global = true, value_name = "HOST:PORT,...")]
    pub servers: Option<String>,
    /// With several --servers: copies of every field (on the top R servers of its ranking).
    #[arg(long, global = true, value_name = "R", default_value_t = 1)]
    pub replicas: usize,
    /// File holding the shared-secret token (default: $HAAR_TOKEN), for servers and clients.
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Connect to servers over TLS, trusting the CA certificate(s) in this PEM file.
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Archive GRIB files (every message, keys read with ecCodes) or raw files with --key,
    /// then flush once at the end.
    ///
    /// A file with any fault (not GRIB, truncated or corrupt message, keys the schema does not
    /// accept, changed while being read) archives nothing and is reported with its message
    /// number and byte offset; the other files are archived. Nothing flushed before is ever
    /// touched.
    Archive(ArchiveArgs),
    /// List flushed fields matching a request (all fields when none is given).
    List(ListArgs),
    /// Write the fields of a request, in request order, to a file or stdout.
    ///
    /// Missing fields are listed on stderr and make the exit status 2 unless --allow-missing.
    Retrieve(RetrieveArgs),
    /// Show the values present for each keyword among the fields matching a request.
    Axes(AxesArgs),
    /// Remove fields (a dry run unless --doit). A request naming whole databases removes them
    /// with their files; a narrower one hides the matching fields until `purge`.
    Wipe(ModifyArgs),
    /// Drop fields masked by a re-archive or hidden by a wipe, freeing storage (a dry run
    /// unless --doit). Refused while a writer holds the database.
    Purge(ModifyArgs),
    /// Show the backend, the databases and their fields, live and dead bytes, and problems.
    Info(InfoArgs),
    /// Print the schema in use, or check a schema file.
    Schema(SchemaArgs),
    /// Measure archive/retrieve throughput and latency against raw limits measured in the
    /// same run; print and save the figures (JSON, Markdown).
    Bench(crate::commands::workloads::BenchArgs),
    /// Serve the local store to the network (one server per node); prints `listening on
    /// HOST:PORT` first. Every connection authenticates with the token ($HAAR_TOKEN or
    /// --token-file); --read-token-file adds a read-only token.
    Serve(crate::commands::net::ServeArgs),
    /// Print one line per flushed field matching a request: first those already flushed, then
    /// each new flush; once per field even with replicas, and across a server's restart (needs
    /// --servers).
    Watch(crate::commands::net::WatchArgs),
    /// Return when every field a request names is flushed (exit 0), or exit 2 after --timeout
    /// naming what is missing (needs --servers).
    Wait(crate::commands::net::WaitArgs),
    /// Start --servers N local servers under --root DIR for development; prints the --servers
    /// string and a config; stops them when stdin closes or on Ctrl-C.
    Cluster(crate::commands::net::ClusterArgs),
    /// STREAM memory bandwidth (copy/scale/add/triad, the reference's rules) on DRAM or on a
    /// mapped file persisted after each kernel (App Direct); --sweep plots the cache cliff.
    Stream(crate::commands::stream::StreamArgs),
    /// Which persistent-memory configuration suits an application (the JCST paper's decision
    /// trees), by flags, an answer file or questions; --probe inspects this machine.
    Advise(crate::commands::advise::AdviseArgs),
    /// Import the fields of an existing FDB5 database (through FDB5's fdb-list and fdb-read),
    /// archive them under the keys FDB5 reports, flush, and verify every field's bytes.
    ///
    /// Exit 3 if any field fails to import or verify (each is named); fields verified before
    /// stay flushed.
    #[command(name = "import-fdb5")]
    ImportFdb5(ImportFdb5Args),
    /// Synthetic write / read / list load (FDB5's fdb-hammer, done right): N processes,
    /// members x steps x levels x params fields, a flush per step, reads verified by checksum;
    /// prints and saves GiB/s, fields/s and p50/p99 latency per operation.
    Hammer(crate::commands::workloads::HammerArgs),
    /// The forecast workflow in miniature (SC'19 Table 9): ensemble producers flushing per
    /// step, product generation triggered by step completion, on a shared POSIX directory, on
    /// haar servers over pmem pools and on the real FDB5; prints the producers' slowdown and
    /// each step's delivery latency, checks every product, saves JSON and a PNG plot.
    ///
    /// With no options it starts its own local servers on temporary pmem pools, runs about
    /// 1 GiB per run, and removes everything afterwards.
    Workflow(crate::commands::workloads::WorkflowArgs),
    /// Internal: one worker process of `hammer` or `workflow`.
    #[command(name = "workload-worker", hide = true)]
    WorkloadWorker(crate::commands::workloads::WorkerArgs),
    /// Internal: man pages and shell completions generated from these definitions, for
    /// `make install-docs` and packagers.
    #[command(hide = true)]
    Generate(GenerateArgs),
}

/// `haar archive`.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// Keys to set on every field (`k=v,k=v`): overrides GRIB keys; required for non-GRIB files.
    #[arg(long, value_name = "k=v,...")]
    pub key: Option<String>,
    /// Archive only messages matching this request.
    #[arg(long, value_name = "REQUEST")]
    pub include: Option<String>,
    /// Skip messages matching this request.
    #[arg(long, value_name = "REQUEST")]
    pub exclude: Option<String>,
    /// Print a JSON summary.
    #[arg(long)]
    pub json: bool,
    /// Input files.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// `haar list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Request (all fields when omitted).
    pub request: Option<String>,
    /// Also print where each field's bytes are and their length.
    #[arg(long)]
    pub location: bool,
    /// One JSON object per field, as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// FDB5's `fdb-list` layout: `{db keys}{index keys}{datum keys}`.
    #[arg(long, conflicts_with = "json")]
    pub fdb: bool,
}

/// `haar retrieve`.
#[derive(Debug, Args)]
pub struct RetrieveArgs {
    /// Request.
    pub request: String,
    /// Output file (written whole, then renamed into place). Default: stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Succeed even if some requested fields are missing (they are still listed on stderr).
    #[arg(long)]
    pub allow_missing: bool,
}

/// `haar axes`.
#[derive(Debug, Args)]
pub struct AxesArgs {
    /// Request (all fields when omitted).
    pub request: Option<String>,
    /// JSON object keyword → values.
    #[arg(long)]
    pub json: bool,
}

/// `haar wipe` / `haar purge`.
#[derive(Debug, Args)]
pub struct ModifyArgs {
    /// Request selecting what to act on.
    pub request: String,
    /// Really do it (otherwise only report what would be done).
    #[arg(long)]
    pub doit: bool,
    /// JSON report.
    #[arg(long)]
    pub json: bool,
}

/// `haar info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Restrict to databases matching this request.
    pub request: Option<String>,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// `haar schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Check this schema file and report errors with line and column.
    #[arg(long, value_name = "FILE")]
    pub check: Option<PathBuf>,
}

/// `haar import-fdb5`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("fdb5").required(true).args(["fdb_config", "fdb_root"])))]
pub struct ImportFdb5Args {
    /// FDB5 configuration file (what FDB5_CONFIG_FILE would name).
    #[arg(long, value_name = "FILE")]
    pub fdb_config: Option<PathBuf>,
    /// FDB5 root directory (a local TOC store), used with --fdb-schema.
    #[arg(long, value_name = "DIR")]
    pub fdb_root: Option<PathBuf>,
    /// Schema of the FDB5 database given by --fdb-root.
    #[arg(long, value_name = "FILE", default_value = "/etc/fdb/schema")]
    pub fdb_schema: PathBuf,
    /// FDB5 request selecting what to import (whole database when omitted), as fdb-list takes it.
    pub request: Option<String>,
    /// Pass the request to fdb-list unexpanded (FDB5 5.10 cannot expand `param` for some
    /// classes, e.g. class=ea); values must then be canonical.
    #[arg(long)]
    pub raw: bool,
    /// Fields fetched per fdb-read call (and per flush and verification pass).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub batch: usize,
    /// Print a JSON summary.
    #[arg(long)]
    pub json: bool,
}

/// `haar generate` (hidden): documentation generated from this grammar, so it cannot drift.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// What to generate.
    #[command(subcommand)]
    pub what: Generate,
}

/// What `haar generate` writes.
#[derive(Debug, Subcommand)]
pub enum Generate {
    /// Man pages: `haar.1` and one `haar-SUBCOMMAND.1` per visible subcommand, into DIR
    /// (created if missing).
    Man {
        /// Directory to write the pages into.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// The completion script for SHELL, on stdout.
    Completions {
        /// Shell to complete for.
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}
