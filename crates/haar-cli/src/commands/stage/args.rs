//! The grammar of `haar stage`: its arguments, subcommands and help, and the command line of
//! its hidden runner entry point (`haar stage run`), written once beside it.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use haar_stage::Mapping;
use haar_stage::daemon;
use haar_stage::launch::RunnerCall;

const STAGE_HELP: &str = "\
ENDPOINTS
    NAME:PATH       a file or directory below the root of the posix or shared dataspace NAME
    NAME:REQUEST    the fields of a MARS request in the store dataspace NAME (empty: all)
    /ABS/PATH       a file or directory outside any dataspace

    Dataspaces are named in the configuration file (--config or $HAAR_CONFIG):
        dataspaces:
          shared: {kind: shared, path: /lustre/project}      # the parallel file system
          local:  {kind: posix,  path: /local/scratch}       # node-local disk or tmpfs
          nvram:  {kind: store,  backend: pmem, root: /dev/shm/haar}   # a node-local store
          fdb:    {kind: store,  config: /etc/haar/cluster.yaml}       # remote or dist servers

    Files and directories go to files and directories; a request goes to one GRIB file; a
    GRIB file (or a directory of them) goes into a store through the ingestion `haar
    archive` uses; a request goes from one store into another.

GUARANTEES
    Every object is written under a temporary name, fsynced, read back and compared with the
    CRC-32C of the source as it was read, then renamed into place: a task killed at any
    point never leaves a half-copied object under the destination's name. Run it again
    (`haar stage resume TASK`) and verified objects are kept, the rest redone.

STAGE SERVICE
    `haar stage daemon` (root, one per node) runs tasks under each caller's uid; `in`, `out`,
    `copy`, `status`, `wait` and `cancel` go through it when it answers on --socket (default
    /run/haar/stage.sock), in-process otherwise (or with --no-daemon or --journal). Admin
    operations (`haar stage admin ...`) need root or the admin token. docs/design.md §13.5.

JOURNAL
    Task records live in --journal DIR (default $XDG_STATE_HOME/haar/stage, else
    ~/.local/state/haar/stage): DIR/TASK/task (state, progress, ETA, objects done) and
    DIR/rates (bandwidth per dataspace pair, used for the first ETA). docs/design.md §13.

EXIT STATUS
    0 done; 1 bad usage or endpoint; 2 the source is missing; 3 I/O error, checksum mismatch,
    cancelled or interrupted; 4 wait timed out.";

/// `haar stage`.
#[derive(Debug, Args)]
#[command(after_long_help = STAGE_HELP)]
pub(crate) struct StageArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: StageAction,
    /// Configuration file naming the dataspaces (its `dataspaces:` section) and the default
    /// store. Default: $HAAR_CONFIG.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// Task journal directory. Default: $XDG_STATE_HOME/haar/stage, else
    /// ~/.local/state/haar/stage.
    #[arg(long, value_name = "DIR", global = true)]
    pub journal: Option<PathBuf>,
    /// Print task records as JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// The per-node stage service's socket (default /run/haar/stage.sock): used when it
    /// answers there; given explicitly, it must.
    #[arg(long, value_name = "PATH", global = true)]
    pub socket: Option<PathBuf>,
    /// Run tasks in this process even when a stage service answers.
    #[arg(long, global = true)]
    pub no_daemon: bool,
    /// File whose first line is the stage service's admin token (admin operations by a
    /// non-root user).
    #[arg(long, value_name = "FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// Internal: the stage service's registered dataspaces, for its runners.
    #[arg(long, value_name = "FILE", global = true, hide = true)]
    pub registered: Option<PathBuf>,
}

impl StageArgs {
    /// The daemon's `--log-format`; text for every other action.
    pub(crate) fn log_format(&self) -> crate::commands::net::LogFormat {
        match &self.action {
            StageAction::Daemon(d) => d.log_format,
            _ => crate::commands::net::LogFormat::Text,
        }
    }
}

/// How to start a task.
#[derive(Debug, Args)]
pub(crate) struct MoveArgs {
    /// Source endpoint: NAME:PATH, NAME:REQUEST or /ABS/PATH.
    pub src: String,
    /// Destination endpoint.
    pub dst: String,
    /// `same`: DST becomes the copy of SRC; `into`: SRC goes into the directory DST under its
    /// own name (a request as DST/fields.grib).
    #[arg(long, value_name = "same|into", default_value = "same")]
    pub mapping: Mapping,
    /// Task id (letters, digits, '_', '-', '.'); default: made up and printed.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Run in a background process and return at once, printing the task id; follow it with
    /// `haar stage status|wait|cancel ID`.
    #[arg(long)]
    pub detach: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A task named by its id.
#[derive(Debug, Args)]
pub(crate) struct TaskArg {
    /// The task's id.
    pub task: String,
}

/// `haar stage` actions.
#[derive(Debug, Subcommand)]
pub(crate) enum StageAction {
    /// Stage SRC into the job's tier at DST (a task recorded as `in`: a job's teardown
    /// removes what it staged in unless persisted).
    In(MoveArgs),
    /// Stage SRC out of the job's tier to DST.
    Out(MoveArgs),
    /// Copy SRC to DST (neither in nor out).
    Copy(MoveArgs),
    /// Show a task (or every task of the journal): state, bytes, rate, ETA, error.
    Status {
        /// The task's id; none: every task.
        task: Option<String>,
    },
    /// Wait until a task ends; exit status as the task's (4 on timeout).
    Wait {
        /// The task's id.
        task: String,
        /// Give up after this many seconds.
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<f64>,
    },
    /// Cancel a task: its runner stops between chunks and removes its temporary files.
    Cancel(TaskArg),
    /// Run an interrupted or failed task again: verified objects are kept, the rest redone.
    Resume(MoveQuiet),
    /// Remove what the journal's `in` tasks staged in and its `out` tasks' sources, from
    /// posix (node-local) dataspaces only, except persisted locations (a job's teardown).
    Teardown {
        /// Only the tasks whose id starts with PREFIX (a job's, in a shared journal).
        #[arg(long, value_name = "PREFIX", default_value = "")]
        tasks: String,
    },
    /// Bandwidth measured per dataspace pair by the journal's finished tasks (what the first
    /// ETA of a new task between them starts from).
    Rates,
    /// Keep data on the node after its job, for its owner and the users it is shared with.
    Persist {
        /// What to do.
        #[command(subcommand)]
        op: PersistOp,
    },
    /// Run the per-node stage service in the foreground (normally as root): users' tasks
    /// under their own uid, admin operations for root or the admin token.
    Daemon(DaemonArgs),
    /// Admin operations of the stage service (root, or --token-file).
    Admin {
        /// What to do.
        #[command(subcommand)]
        op: AdminOp,
    },
    /// Submit a workflow's consumer job after its producer, on the producer's nodes (where
    /// its persisted data is): `sbatch --dependency=afterok:JOBID --kill-on-invalid-dep=yes
    /// --nodelist=NODES SBATCH_ARGS…`; prints sbatch's output.
    Submit(SubmitArgs),
    /// A Slurm job's staging on one of its compute nodes, as the job's owner: called by
    /// `slurm/haar-node.sh` from the node's Prolog, TaskProlog and Epilog (docs/staging.md,
    /// "Per-node staging").
    Node {
        /// Which part.
        #[command(subcommand)]
        op: NodeOp,
    },
    /// Measure staging against `cp` between two directories in the same run (files, and
    /// fields by request out of a haar store), with the ETA error at 10%; prints JSON.
    #[cfg(feature = "tools")]
    Bench(BenchArgs),
    /// Internal: the background runner of `--detach` and of the stage service; called as
    /// [`runner_argv`] says.
    #[command(hide = true)]
    Run(TaskArg),
}

/// The command line of the hidden `haar stage run` for a call: the one place it is written,
/// handed to `haar_stage`'s launcher (`--detach`, the stage service's runners).
pub(super) fn runner_argv(call: &RunnerCall<'_>) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["stage".into(), "run".into(), call.task.into()];
    v.extend(["--journal".into(), call.journal.into()]);
    if let Some(c) = call.config {
        v.extend(["--config".into(), c.into()]);
    }
    if let Some(r) = call.registered {
        v.extend(["--registered".into(), r.into()]);
    }
    v
}

/// The parts of per-node staging.
#[derive(Debug, Subcommand)]
pub(crate) enum NodeOp {
    /// Prolog: stage in this node's share of the plan; report to the node's directory and
    /// to --reports.
    In {
        /// The job's plan (written by burst_buffer.lua).
        #[arg(long, value_name = "FILE")]
        plan: PathBuf,
        #[command(flatten)]
        job: JobNodeArgs,
    },
    /// TaskProlog: print `export HAAR_STAGE_LOCAL=DIR`, or, when the stage-in failed on a
    /// node of the job, `print` why (naming the node) and exit non-zero.
    Env {
        /// The job's plan: when it exists, this node must have staged.
        #[arg(long, value_name = "FILE")]
        plan: PathBuf,
        #[command(flatten)]
        job: JobNodeArgs,
        /// Seconds to wait for every node's report.
        #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
        wait: f64,
    },
    /// Epilog: persist, stage out to DST/NODE, tear down.
    Out {
        #[command(flatten)]
        job: JobNodeArgs,
    },
}

/// One node of a job.
#[derive(Debug, Args)]
pub(crate) struct JobNodeArgs {
    /// This node's directory of the job (node-local, the owner's).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// This node's name.
    #[arg(long, value_name = "NAME")]
    pub node: String,
    /// The job's nodes (a Slurm host list: $SLURM_JOB_NODELIST).
    #[arg(long, value_name = "HOSTLIST")]
    pub nodes: String,
    /// The job's shared directory every node reports into.
    #[arg(long, value_name = "DIR")]
    pub reports: Option<PathBuf>,
}

/// `haar stage daemon` options.
#[derive(Debug, Args)]
pub(crate) struct DaemonArgs {
    /// State directory: per-user journals, registered dataspaces, the drain mark.
    #[arg(long, value_name = "DIR", default_value = daemon::DEFAULT_STATE)]
    pub state: PathBuf,
    /// File whose first line is the admin token (mode 0600, the daemon's user's); without
    /// it only root is admin.
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Connections open at once, every user's.
    #[arg(long, value_name = "N", default_value_t = daemon::Limits::default().connections)]
    pub max_connections: usize,
    /// Connections one user may hold open at once (root's are not counted).
    #[arg(long, value_name = "N", default_value_t = daemon::Limits::default().per_user)]
    pub max_connections_per_user: usize,
    /// Seconds a request line may take to arrive whole (an idle connection is closed then).
    #[arg(long, value_name = "SECONDS", default_value_t = daemon::Limits::default().request_deadline.as_secs_f64())]
    pub request_timeout: f64,
    /// Serve metrics over HTTP at `http://ADDR/metrics` (`HOST:PORT`; port 0 picks a free
    /// one, named by a second stdout line `metrics on HOST:PORT`): requests by operation and
    /// result (denied ones too), connections and refusals, runners started and ended, bytes
    /// staged, every user's tasks by state, in the OpenMetrics text format Prometheus scrapes
    /// (names: docs/operations.md). Off by default. No authentication: bind it to a loopback
    /// or management address.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Form of the log on stderr: `text` (default), one line per event with its fields, or
    /// `json`, one JSON object per line (`timestamp`, `level`, `message`, the event's fields
    /// such as `op`, `task`, `cause`, and `span` with the connection's `uid`, `pid` and `conn`).
    /// What is logged is chosen by `-v` or `HAAR_LOG` either way: denied requests, refused
    /// connections and tasks failed for the service's own reasons are warnings; submits,
    /// cancels and each runner's start and end are `info`; the other requests `debug`.
    #[arg(long, value_name = "text|json", default_value = "text")]
    pub log_format: crate::commands::net::LogFormat,
}

/// `haar stage submit` options.
#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// The producer's job id.
    #[arg(long, value_name = "JOBID")]
    pub after: String,
    /// Seconds to wait for a pending producer to get nodes (then: no placement, the consumer
    /// stages its inputs in).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub wait_node: f64,
    /// The sbatch to run.
    #[arg(long, value_name = "PATH", default_value = "sbatch")]
    pub sbatch: PathBuf,
    /// The scontrol to ask.
    #[arg(long, value_name = "PATH", default_value = "scontrol")]
    pub scontrol: PathBuf,
    /// sbatch's own arguments: options, the job script, its arguments.
    #[arg(last = true, required = true, value_name = "SBATCH_ARGS")]
    pub sbatch_args: Vec<String>,
}

/// `haar stage bench` options (a tool: the `tools` feature).
#[cfg(feature = "tools")]
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Where the sources are written (the tier staged from).
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// Where the copies go (the tier staged to).
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
    /// MiB per round.
    #[arg(long, default_value_t = 4096)]
    pub mib: u64,
    /// MiB per file (files).
    #[arg(long, default_value_t = 16)]
    pub file_mib: u64,
    /// KiB per field (fields).
    #[arg(long, default_value_t = 1024)]
    pub field_kib: u64,
    /// Rounds (medians are reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// files, fields (a request into one GRIB file), both of them, store (a request into a
    /// new pmem store on --to, a node-local store) or all three.
    #[arg(long, default_value = "both", value_parser = ["files", "fields", "both", "store", "all"])]
    pub what: String,
    /// Also measure the non-temporal copy limit into --to (a pmem or tmpfs target) and
    /// report the stage rate against it.
    #[arg(long)]
    pub nt_limit: bool,
    /// Also save the JSON here.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `haar stage admin` operations.
#[derive(Debug, Subcommand)]
pub(crate) enum AdminOp {
    /// Add a dataspace to the service (beside the configuration's).
    Register {
        /// Its name.
        name: String,
        /// posix (node-local directory), shared (parallel file system) or store (a haar
        /// store root).
        kind: String,
        /// Its directory (store: the store's root).
        path: PathBuf,
    },
    /// Remove a registered dataspace.
    Unregister {
        /// Its name.
        name: String,
    },
    /// Refuse new tasks; running ones finish.
    Drain {
        /// Return when no task runs any more.
        #[arg(long)]
        wait: bool,
    },
    /// Accept tasks again.
    Undrain,
    /// Remove every persisted location USER owns, data and record.
    Purge {
        /// User name or uid.
        user: String,
    },
    /// Another user's tasks.
    Tasks {
        /// User name or uid.
        user: String,
    },
}

/// `resume` options.
#[derive(Debug, Args)]
pub(crate) struct MoveQuiet {
    /// The task's id.
    pub task: String,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `haar stage persist` operations.
#[derive(Debug, Subcommand)]
pub(crate) enum PersistOp {
    /// Keep LOCATION (NAME:PATH) after the job: owner-only permissions, recorded.
    Store {
        /// The location.
        location: String,
    },
    /// Remove LOCATION and its record.
    Delete {
        /// The location.
        location: String,
    },
    /// Let USER read LOCATION (a POSIX ACL entry on everything below it).
    Share {
        /// The location.
        location: String,
        /// User name or uid.
        user: String,
    },
    /// Stop letting USER read LOCATION.
    Unshare {
        /// The location.
        location: String,
        /// User name or uid.
        user: String,
    },
    /// List persisted locations (every user's).
    List,
    /// Create the persist registry of every posix and shared dataspace (root, or the owner
    /// of a dataspace's root; the stage service does it when it starts).
    Init,
}
