//! Command-line grammar: the top-level `Cli` (with the store and server options every command
//! shares, given before or after its name) and the `Command` enum naming each command's
//! arguments, which its module under `commands/` owns beside the function that runs it. The
//! forms here and there are a contract other tools call: change with care.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::commands::archive::ArchiveArgs;
use crate::commands::axes::AxesArgs;
use crate::commands::compact::CompactArgs;
use crate::commands::extract::ExtractArgs;
use crate::commands::generate::GenerateArgs;
use crate::commands::import::ImportFdb5Args;
use crate::commands::info::InfoArgs;
use crate::commands::list::ListArgs;
use crate::commands::modify::{ModifyArgs, WipeArgs};
use crate::commands::mount::MountArgs;
use crate::commands::net::{ServeArgs, WaitArgs, WatchArgs};
use crate::commands::retrieve::RetrieveArgs;
use crate::commands::run::RunArgs;
use crate::commands::schema::SchemaArgs;
use crate::commands::stage::StageArgs;
#[cfg(feature = "tools")]
use crate::commands::workloads::{BenchArgs, HammerArgs, WorkerArgs, WorkflowArgs};
#[cfg(feature = "tools")]
use crate::commands::{advise::AdviseArgs, net::ClusterArgs, stream::StreamArgs};

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
        pool_prefault: create    # pmem: map the first chunk at the first write | open | never
        pool_huge_pages: false   # pmem: provisioning backs the pool with 2 MiB pages
        fsync: always            # posix: always | never
        schema: /etc/fdb/schema  # FDB5 rule language; built-in schema when absent
    --root and --backend override the file.

STORE AND SERVER OPTIONS
    --config, --root, --backend, --servers, --replicas, --tls-ca and --token-file may be given
    before the command (`haar --root DIR list`) or after it (`haar list --root DIR`; given in
    both places, the value after the command wins). Each command takes only those it uses, in
    either place: `haar COMMAND --help` lists them.

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
// Before the subcommand's name every store and server option is accepted (the form scripts and
// the workload re-exec use); `$HAAR_CONFIG` is read here only, so that a `--config` given after
// the name still wins over it. `parse` refuses the ones the subcommand does not take.
#[command(mut_arg("config", |a| a.env("HAAR_CONFIG")))]
#[command(mut_arg("servers", |a| a.help(
    "Use these servers (`haar serve`) instead of the local store: `HOST:PORT,HOST:PORT,...` \
     (several are combined by rendezvous hashing). For `cluster`: how many to start"
)))]
pub(crate) struct Cli {
    // The store and server options given before the subcommand's name.
    #[command(flatten)]
    pub before: OpenArgs,
    /// More log on stderr: `-v` adds logins, `-vv` debugging, `-vvv` everything (refusals,
    /// failed logins and closed connections are logged without it). `HAAR_LOG` (a filter such
    /// as `info` or `haar_net=debug`) replaces it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Parses the command line: clap's grammar, then the one rule it cannot express. An option
/// given before the subcommand's name must be one the subcommand takes after it (`haar
/// --servers x stream` is an error naming `--servers`, not an option silently ignored).
pub(crate) fn parse() -> Result<Cli, clap::Error> {
    parse_from(std::env::args_os())
}

/// [`parse`] of the given arguments (the first is the program's name).
pub(crate) fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::error::ErrorKind;
    use clap::parser::ValueSource;
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = Cli::command();
    let matches = cmd.try_get_matches_from_mut(args)?;
    if let Some(name) = matches.subcommand_name() {
        let sub = cmd
            .find_subcommand(name)
            .expect("clap parsed this subcommand");
        let takes = |id: &str| {
            sub.get_arguments().any(|a| a.get_id() == id)
                || IGNORED_BEFORE
                    .iter()
                    .any(|(s, ids)| *s == name && ids.contains(&id))
        };
        // Only what was typed: `$HAAR_CONFIG` names the configuration of the commands that
        // read one and means nothing to the others, as any environment variable.
        let misplaced = cmd
            .get_arguments()
            .filter(|a| {
                let id = a.get_id().as_str();
                matches.value_source(id) == Some(ValueSource::CommandLine) && !takes(id)
            })
            .find_map(|a| a.get_long())
            .map(str::to_string);
        if let Some(flag) = misplaced {
            let message = format!(
                "--{flag} is not an option of `haar {name}`, which would not use it; \
                 `haar {name} --help` lists the options it takes"
            );
            let sub = cmd
                .find_subcommand_mut(name)
                .expect("clap parsed this subcommand");
            return Err(sub.error(ErrorKind::ArgumentConflict, message));
        }
    }
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

/// Options a subcommand takes before its name although it does not use them. `generate` (the
/// packagers' command) writes the same pages whatever store is named, and callers that name
/// their store on every call (`haar --root DIR --backend posix generate man DIR`, as the test
/// suite does) have always been able to.
const IGNORED_BEFORE: &[(&str, &[&str])] = &[("generate", &["config", "root", "backend"])];

/// `--config`: the configuration file (flattened into the subcommands that read one).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Store options")]
pub(crate) struct ConfigArg {
    /// Configuration file (YAML): haar's own, or FDB5's (a local TOC configuration maps onto
    /// a posix root and its schema). Default: $HAAR_CONFIG, else FDB5's $FDB5_CONFIG,
    /// $FDB5_CONFIG_FILE or $FDB_HOME/etc/fdb/config.yaml, else built-in defaults.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `--root`, `--backend`: the local store, over the configuration's.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Store options")]
pub(crate) struct LocalArgs {
    /// Store root directory (overrides the configuration's roots).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Backend: posix (files) or pmem (a persistent-memory pool file in the root).
    #[arg(long, value_name = "posix|pmem")]
    pub backend: Option<String>,
}

/// `--servers`, `--replicas`, `--tls-ca`: servers to reach instead of a local store.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Server options")]
pub(crate) struct ServerArgs {
    /// Use these servers (`haar serve`) instead of the local store: `HOST:PORT,HOST:PORT,...`
    /// (several are combined by rendezvous hashing).
    #[arg(long, value_name = "HOST:PORT,...")]
    pub servers: Option<String>,
    /// With several --servers: copies of every field (on the top R servers of its ranking).
    /// Default: 1.
    #[arg(long, value_name = "R")]
    pub replicas: Option<usize>,
    /// Connect to servers over TLS, trusting the CA certificate(s) in this PEM file.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

/// `--token-file`: the shared secret, for servers and clients alike.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Server options")]
pub(crate) struct TokenArg {
    /// File holding the shared-secret token (default: $HAAR_TOKEN), for servers and clients.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// Every store and server option: the commands that work on the local store or on servers
/// (and the place before any subcommand's name).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct OpenArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub local: LocalArgs,
    #[command(flatten)]
    pub servers: ServerArgs,
    #[command(flatten)]
    pub token: TokenArg,
}

/// The local store only (`schema`, `import-fdb5`).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct StoreArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub local: LocalArgs,
}

/// Servers only, never a local store (`watch`, `wait`, `workflow`).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct ClientArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    #[command(flatten)]
    pub servers: ServerArgs,
    #[command(flatten)]
    pub token: TokenArg,
}

impl ConfigArg {
    /// Sets what this group was given over `o`.
    fn onto(&self, o: &mut OpenArgs) {
        if self.config.is_some() {
            o.config.config.clone_from(&self.config);
        }
    }
}

impl LocalArgs {
    /// Sets what this group was given over `o`.
    fn onto(&self, o: &mut OpenArgs) {
        if self.root.is_some() {
            o.local.root.clone_from(&self.root);
        }
        if self.backend.is_some() {
            o.local.backend.clone_from(&self.backend);
        }
    }
}

impl ServerArgs {
    /// Sets what this group was given over `o`.
    fn onto(&self, o: &mut OpenArgs) {
        if self.servers.is_some() {
            o.servers.servers.clone_from(&self.servers);
        }
        if self.replicas.is_some() {
            o.servers.replicas = self.replicas;
        }
        if self.tls_ca.is_some() {
            o.servers.tls_ca.clone_from(&self.tls_ca);
        }
    }
}

impl TokenArg {
    /// Sets what this group was given over `o`.
    fn onto(&self, o: &mut OpenArgs) {
        if self.token_file.is_some() {
            o.token.token_file.clone_from(&self.token_file);
        }
    }
}

impl OpenArgs {
    /// Sets what this group was given over `o`.
    pub(crate) fn onto(&self, o: &mut OpenArgs) {
        self.config.onto(o);
        self.local.onto(o);
        self.servers.onto(o);
        self.token.onto(o);
    }
}

impl StoreArgs {
    /// Sets what this group was given over `o`.
    fn onto(&self, o: &mut OpenArgs) {
        self.config.onto(o);
        self.local.onto(o);
    }
}

impl ClientArgs {
    /// Sets what this group was given over `o`.
    fn onto(&self, o: &mut OpenArgs) {
        self.config.onto(o);
        self.servers.onto(o);
        self.token.onto(o);
    }
}

impl Command {
    /// Sets the store and server options given after the subcommand's name over `o` (those
    /// given before it): the value after the name wins.
    pub(crate) fn options_onto(&self, o: &mut OpenArgs) {
        match self {
            Command::Archive(ArchiveArgs { open, .. })
            | Command::List(ListArgs { open, .. })
            | Command::Retrieve(RetrieveArgs { open, .. })
            | Command::Extract(ExtractArgs { open, .. })
            | Command::Axes(AxesArgs { open, .. })
            | Command::Wipe(WipeArgs {
                modify: ModifyArgs { open, .. },
                ..
            })
            | Command::Purge(ModifyArgs { open, .. })
            | Command::Info(InfoArgs { open, .. })
            | Command::Mount(MountArgs { open, .. }) => open.onto(o),
            #[cfg(feature = "tools")]
            Command::Hammer(HammerArgs { open, .. })
            | Command::WorkloadWorker(WorkerArgs { open, .. }) => open.onto(o),
            Command::Schema(SchemaArgs { store, .. })
            | Command::Compact(CompactArgs { store, .. })
            | Command::ImportFdb5(ImportFdb5Args { store, .. }) => store.onto(o),
            Command::Serve(a) => {
                a.store.onto(o);
                a.token.onto(o);
            }
            Command::Watch(WatchArgs { client, .. }) | Command::Wait(WaitArgs { client, .. }) => {
                client.onto(o)
            }
            #[cfg(feature = "tools")]
            Command::Workflow(WorkflowArgs { client, .. }) => client.onto(o),
            #[cfg(feature = "tools")]
            Command::Cluster(a) => {
                // `--servers N` is a count here; it reaches `cluster` in the same field.
                if let Some(n) = a.servers {
                    o.servers.servers = Some(n.to_string());
                }
                a.local.onto(o);
                a.token.onto(o);
            }
            Command::Stage(a) => {
                if a.config.is_some() {
                    o.config.config.clone_from(&a.config);
                }
            }
            #[cfg(feature = "tools")]
            Command::Bench(_) | Command::Stream(_) | Command::Advise(_) => {}
            Command::Run(_) | Command::Generate(_) => {}
        }
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// Print the values of each field of a request at index ranges or points, reading only
    /// the bytes that hold them.
    ///
    /// Ranges are half-open `I-J` ([I, J), as pygribjump counts), over the field's grid in
    /// its scanning order. Simple-packed fields (grid_simple, with or without bitmap) are read
    /// by range, from a jump record cached beside the database (docs/design.md §16); other
    /// packings (CCSDS, complex) are decoded whole with ecCodes and say so. Missing points
    /// (bitmap) print as NaN (JSON: null). Text output: one line per field, its key, the
    /// method, then the values in range order. Fields the request names that are not stored
    /// are left out; a request that matches no stored field exits 2, naming it.
    ///
    /// Examples:
    ///   haar extract class=od,param=167,step=0/6 --ranges 0-10,5000-5004
    ///   haar extract param=167 --points 51.5,-0.1,48.9,2.3 --json
    #[command(verbatim_doc_comment)]
    Extract(ExtractArgs),
    /// Show the values present for each keyword among the fields matching a request.
    Axes(AxesArgs),
    /// Remove fields (a dry run unless --doit). A request naming whole databases removes them
    /// with their files; a narrower one hides the matching fields until `purge`. A database
    /// holding files haar did not write is not removed (FDB5's unclean database): the wipe
    /// names them and removes nothing, unless --unsafe-wipe-all.
    Wipe(WipeArgs),
    /// Drop fields masked by a re-archive or hidden by a wipe, freeing storage (a dry run
    /// unless --doit). Refused while a writer holds the database.
    Purge(ModifyArgs),
    /// Show the backend, the databases and their fields, live and dead bytes, and problems.
    Info(InfoArgs),
    /// Merge the catalogue runs of the local databases matching a request now (all when none
    /// is given).
    ///
    /// Each database keeps its index as sorted runs named by a manifest, so that opening it,
    /// retrieving a key and listing a request cost O(log N) and O(result) (design §3.1).
    /// Writers merge in the background after their flushes; run this after a store was
    /// written by an older haar (it upgrades nothing else: old stores stay readable as they
    /// are), or with --full to leave one run per database. Readers and writers may run
    /// meanwhile. Exit 0 also when another process is merging a database (reported as
    /// busy).
    Compact(CompactArgs),
    /// Print the schema in use, or check a schema file.
    Schema(SchemaArgs),
    /// Measure archive/retrieve throughput and latency against raw limits measured in the
    /// same run; print and save the figures (JSON, Markdown). With --scale: the cost of
    /// archive, open, list and retrieve against the size of one database (10^5 to 10^7
    /// fields), beside the real FDB5 in the same run (JSON, Markdown, PNG).
    #[cfg(feature = "tools")]
    Bench(BenchArgs),
    /// Serve the local store to the network (one server per node); prints `listening on
    /// HOST:PORT` first. Every connection authenticates with the token ($HAAR_TOKEN or
    /// --token-file); --read-token-file adds a read-only token. SIGINT or SIGTERM stops it
    /// cleanly: requests in progress are answered (within 5 s), unflushed archives of its
    /// clients are dropped, the store gives back what it reserved, and it exits 0.
    Serve(ServeArgs),
    /// Print one line per flushed field matching a request: first those already flushed, then
    /// each new flush; once per field even with replicas, and across a server's restart (needs
    /// --servers).
    Watch(WatchArgs),
    /// Return when every field a request names is flushed (exit 0), or exit 2 after --timeout
    /// naming what is missing (needs --servers).
    Wait(WaitArgs),
    /// Start --servers N local servers under --root DIR for development; prints the --servers
    /// string and a config; stops them when stdin closes or on Ctrl-C.
    #[cfg(feature = "tools")]
    Cluster(ClusterArgs),
    /// STREAM memory bandwidth (copy/scale/add/triad, the reference's rules) on DRAM or on a
    /// mapped file persisted after each kernel (App Direct); --sweep plots the cache cliff.
    #[cfg(feature = "tools")]
    Stream(StreamArgs),
    /// Which persistent-memory configuration suits an application (the JCST paper's decision
    /// trees), by flags, an answer file or questions; --probe inspects this machine.
    #[cfg(feature = "tools")]
    Advise(AdviseArgs),
    /// Run an unmodified program with its heap in a file mapped from a directory (a DAX
    /// mount on persistent memory), as libvmmalloc did: `haar run --heap DIR[:SIZE] --
    /// COMMAND [ARGS...]`.
    ///
    /// Every malloc of COMMAND comes from the file; static data and stacks stay in DRAM. The
    /// file is removed when COMMAND ends; haar exits with COMMAND's status.
    Run(RunArgs),
    /// Mount a file system over the store (FUSE): MOUNTPOINT/fields/ shows every field
    /// read-only, one directory per schema level and one file per field; everything else is a
    /// writable file system whose files are stored in the same backend, or spread over the
    /// servers (with their replicas) when the configuration names servers.
    ///
    /// Prints `mounted MOUNTPOINT` when ready and serves in the foreground until unmounted or
    /// until SIGINT/SIGTERM (which unmount it); --daemon returns once mounted. fsync and close
    /// are the durability barrier.
    Mount(MountArgs),
    /// Import the fields of an existing FDB5 database (through FDB5's C API, libfdb5),
    /// archive them under the keys FDB5 reports, flush, and verify every field's bytes.
    ///
    /// Exit 3 if any field fails to import or verify (each is named); fields verified before
    /// stay flushed.
    #[command(name = "import-fdb5")]
    ImportFdb5(ImportFdb5Args),
    /// Synthetic write / read / list load (FDB5's fdb-hammer, done right): N processes,
    /// members x steps x levels x params fields, a flush per step, reads verified by checksum;
    /// prints and saves GiB/s, fields/s and p50/p99 latency per operation.
    #[cfg(feature = "tools")]
    Hammer(HammerArgs),
    /// The forecast workflow in miniature (SC'19 Table 9): ensemble producers flushing per
    /// step, product generation triggered by step completion, on a shared POSIX directory, on
    /// haar servers over pmem pools and on the real FDB5; prints the producers' slowdown and
    /// each step's delivery latency, checks every product, saves JSON and a PNG plot.
    ///
    /// With no options it starts its own local servers on temporary pmem pools, runs about
    /// 1 GiB per run, and removes everything afterwards.
    #[cfg(feature = "tools")]
    Workflow(WorkflowArgs),
    /// Stage files, directories and fields between dataspaces (node-local directories and
    /// stores, the shared file system, haar servers): checksummed end to end, restartable
    /// after kill -9, with progress and ETA; the engine of the Slurm burst-buffer
    /// integration (slurm/burst_buffer.lua). Tasks run in this process, or in a background
    /// one with --detach.
    Stage(StageArgs),
    /// Internal: one worker process of `hammer` or `workflow`.
    #[cfg(feature = "tools")]
    #[command(name = "workload-worker", hide = true)]
    WorkloadWorker(WorkerArgs),
    /// Internal: man pages and shell completions generated from these definitions, for
    /// `make install-docs` and packagers.
    #[command(hide = true)]
    Generate(GenerateArgs),
}

#[cfg(test)]
#[path = "../tests/unit/args.rs"]
mod tests;
