//! `haar stage`: the data mover's face. Every decision is `haar_stage`'s; this module maps
//! arguments onto a `Stager`, draws the progress bar and prints records.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use haar_stage::daemon::{self, Client, Daemon, DaemonConfig, Request};
use haar_stage::launch::{Runner, RunnerCall};
use haar_stage::persist::{self, Op};
use haar_stage::tasks::{self, Connect, Local};
use haar_stage::{
    Dataspace, Dataspaces, Direction, ErrorClass, Journal, Mapping, Stager, State, TaskRecord,
    TaskSpec,
};

use crate::Failure;
use crate::args::Cli;

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
pub struct StageArgs {
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

/// How to start a task.
#[derive(Debug, Args)]
pub struct MoveArgs {
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
pub struct TaskArg {
    /// The task's id.
    pub task: String,
}

/// `haar stage` actions.
#[derive(Debug, Subcommand)]
pub enum StageAction {
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
    /// Measure staging against `cp` between two directories in the same run (files, and
    /// fields by request out of a haar store), with the ETA error at 10%; prints JSON.
    Bench(BenchArgs),
    /// Internal: the background runner of `--detach` and of the stage service; called as
    /// [`runner_argv`] says.
    #[command(hide = true)]
    Run(TaskArg),
}

/// The command line of the hidden `haar stage run` for a call: the one place it is written,
/// handed to `haar_stage`'s launcher (`--detach`, the stage service's runners).
pub fn runner_argv(call: &RunnerCall<'_>) -> Vec<OsString> {
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

/// This program as the runner of tasks.
fn runner() -> Result<Runner, Failure> {
    Runner::this_program(runner_argv).map_err(|e| Failure::io(format!("haar's path: {e}")))
}

/// `haar stage daemon` options.
#[derive(Debug, Args)]
pub struct DaemonArgs {
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
}

/// `haar stage submit` options.
#[derive(Debug, Args)]
pub struct SubmitArgs {
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

/// `haar stage bench` options.
#[derive(Debug, Args)]
pub struct BenchArgs {
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
pub enum AdminOp {
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
pub struct MoveQuiet {
    /// The task's id.
    pub task: String,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `haar stage persist` operations.
#[derive(Debug, Subcommand)]
pub enum PersistOp {
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

fn spaces(cli: &Cli, a: &StageArgs) -> haar_stage::Result<Dataspaces> {
    let mut opts = crate::open::open_options(cli);
    if let Some(c) = &a.config {
        opts.config = haar::ConfigSource::File(c.clone());
    }
    let mut spaces = Dataspaces::load(opts.config)?;
    if let Some(r) = &a.registered {
        daemon::add_registered(&mut spaces, r)?;
    }
    Ok(spaces)
}

fn stager(cli: &Cli, a: &StageArgs) -> haar_stage::Result<Stager> {
    let spaces = spaces(cli, a)?;
    let dir = a.journal.clone().unwrap_or_else(Journal::default_dir);
    Ok(Stager {
        spaces,
        journal: Journal::open(&dir)?,
    })
}

fn fail(e: haar_stage::Error) -> Failure {
    by_class(e.class(), e.to_string())
}

/// The CLI's failure for an error class (exit 2 missing, 1 input or denied, 3 the rest).
fn by_class(class: ErrorClass, message: String) -> Failure {
    match class {
        ErrorClass::Missing => Failure::missing(message),
        ErrorClass::Input | ErrorClass::Denied => Failure::usage(message),
        _ => Failure::io(message),
    }
}

/// The stage service's socket: --socket, else the default.
fn socket_of(a: &StageArgs) -> std::path::PathBuf {
    a.socket
        .clone()
        .unwrap_or_else(|| daemon::DEFAULT_SOCKET.into())
}

/// Runs `haar stage`.
pub fn run(cli: &Cli, a: &StageArgs) -> Result<(), Failure> {
    match &a.action {
        StageAction::Daemon(d) => return serve(cli, a, d),
        StageAction::Admin { op } => return admin(a, op),
        StageAction::Submit(s) => return submit_after(s),
        StageAction::Bench(b) => return bench(b),
        StageAction::In(_)
        | StageAction::Out(_)
        | StageAction::Copy(_)
        | StageAction::Status { .. }
        | StageAction::Wait { .. }
        | StageAction::Cancel(_) => return task_verb(cli, a),
        _ => {}
    }
    let st = stager(cli, a).map_err(fail)?;
    match &a.action {
        StageAction::Resume(r) => execute(&st, a, &r.task, r.quiet),
        StageAction::Run(t) => execute(&st, a, &t.task, true),
        StageAction::Teardown { tasks } => teardown(&st, a, tasks),
        StageAction::Rates => {
            let rates = st.journal.rates();
            if a.json {
                return outln!(
                    "{}",
                    serde_json::to_string_pretty(&rates).expect("serialise")
                );
            }
            for (pair, r) in &rates.pairs {
                outln!(
                    "{pair}: {} task(s), {:.1} MiB in {:.2} s, mean {:.1} MiB/s, last {:.1} MiB/s",
                    r.tasks,
                    r.bytes as f64 / (1 << 20) as f64,
                    r.seconds,
                    r.mean().unwrap_or(0.0) / (1 << 20) as f64,
                    r.last_rate / (1 << 20) as f64
                )?;
            }
            Ok(())
        }
        StageAction::Persist { op } => persist_cmd(&st, a, op),
        _ => {
            unreachable!("handled above")
        }
    }
}

/// `haar stage submit --after JOBID -- SBATCH_ARGS`: sbatch with the placement
/// `haar_stage::placement` decides.
fn submit_after(s: &SubmitArgs) -> Result<(), Failure> {
    use haar_stage::placement;
    let place = placement::producer_nodes(
        &s.scontrol,
        &s.after,
        Duration::from_secs_f64(s.wait_node.max(0.0)),
    )
    .map_err(fail)?;
    match &place.nodes {
        Some(n) => eprintln!(
            "haar stage submit: after job {} ({}), on its nodes {n}",
            s.after, place.state
        ),
        None => eprintln!(
            "haar stage submit: after job {} ({}), which has no nodes yet: not placed; the              consumer must stage its inputs in",
            s.after, place.state
        ),
    }
    let (stdout, stderr) =
        placement::submit_consumer(&s.sbatch, &s.after, place.nodes.as_deref(), &s.sbatch_args)
            .map_err(fail)?;
    eprint!("{stderr}");
    out!("{stdout}")
}

/// `haar stage bench`: `haar_stage::bench` between two directories, with the host and its load.
fn bench(b: &BenchArgs) -> Result<(), Failure> {
    let v = haar_stage::bench::report(&haar_stage::bench::Plan {
        from: b.from.clone(),
        to: b.to.clone(),
        bytes: b.mib << 20,
        file_bytes: b.file_mib << 20,
        field_bytes: b.field_kib << 10,
        rounds: b.rounds,
        files: ["files", "both", "all"].contains(&b.what.as_str()),
        fields: ["fields", "both", "all"].contains(&b.what.as_str()),
        store: ["store", "all"].contains(&b.what.as_str()),
        nt_limit: b.nt_limit,
    })
    .map_err(fail)?;
    let text = serde_json::to_string_pretty(&v).expect("serialise");
    if let Some(o) = &b.out {
        std::fs::write(o, format!("{text}\n"))
            .map_err(|e| Failure::io(format!("{}: {e}", o.display())))?;
    }
    outln!("{text}")
}

/// `haar stage daemon`: binds the socket, resumes what a previous daemon left, serves.
fn serve(cli: &Cli, a: &StageArgs, d: &DaemonArgs) -> Result<(), Failure> {
    let socket = socket_of(a);
    let admin_token = d
        .admin_token_file
        .as_deref()
        .map(daemon::read_token_file)
        .transpose()
        .map_err(fail)?;
    let runner = runner()?;
    let service = Daemon::open_with(
        DaemonConfig {
            socket: socket.clone(),
            state: d.state.clone(),
            spaces: spaces(cli, a).map_err(fail)?,
            runner: runner.exe,
            admin_token,
            limits: daemon::Limits {
                connections: d.max_connections.max(1),
                per_user: d.max_connections_per_user.max(1),
                request_deadline: Duration::try_from_secs_f64(d.request_timeout)
                    .ok()
                    .filter(|t| !t.is_zero())
                    .ok_or_else(|| {
                        Failure::usage("--request-timeout takes a positive number of seconds")
                    })?,
                ..daemon::Limits::default()
            },
        },
        runner.argv,
    )
    .map_err(fail)?;
    let listener = daemon::bind(&socket).map_err(fail)?;
    let resumed = service.recover().map_err(fail)?;
    outln!(
        "haar stage daemon: listening on {}, state {}, {} task(s) resumed{}",
        socket.display(),
        d.state.display(),
        resumed.len(),
        resumed
            .iter()
            .map(|(uid, id)| format!(" {id} (uid {uid})"))
            .collect::<String>()
    )?;
    service.serve(listener).map_err(fail)
}

/// `haar stage admin …`: always through the service.
fn admin(a: &StageArgs, op: &AdminOp) -> Result<(), Failure> {
    let socket = socket_of(a);
    let mut c = Client::connect(&socket).map_err(|e| {
        Failure::io(format!(
            "{e}: is `haar stage daemon --socket {}` running?",
            socket.display()
        ))
    })?;
    c.token = a
        .token_file
        .as_deref()
        .map(tasks::read_token)
        .transpose()
        .map_err(fail)?;
    let req = match op {
        AdminOp::Register { name, kind, path } => Request::Register {
            name: name.clone(),
            space: Dataspace::of_kind(kind, path.clone()).map_err(fail)?,
            token: None,
        },
        AdminOp::Unregister { name } => Request::Unregister {
            name: name.clone(),
            token: None,
        },
        AdminOp::Drain { .. } => Request::Drain { token: None },
        AdminOp::Undrain => Request::Undrain { token: None },
        AdminOp::Purge { user } => Request::Purge {
            user: user.clone(),
            token: None,
        },
        AdminOp::Tasks { user } => {
            let all = c.list(Some(user)).map_err(fail)?;
            return print_records(&all, a.json);
        }
    };
    let mut v = c.call(req).map_err(fail)?;
    if let AdminOp::Drain { wait: true } = op {
        while v["running"].as_u64().unwrap_or(0) > 0 {
            std::thread::sleep(Duration::from_millis(200));
            v = c.call(Request::Hello { token: None }).map_err(fail)?;
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("ok");
    }
    outln!("{v}")
}

/// in/out/copy/status/wait/cancel: the same verbs wherever the tasks run (the library
/// picks: the stage service when it answers, else this process).
fn task_verb(cli: &Cli, a: &StageArgs) -> Result<(), Failure> {
    let to = Connect {
        in_process: a.no_daemon || a.journal.is_some(),
        socket: a.socket.clone(),
        token_file: a.token_file.clone(),
    };
    let mut tasks = tasks::connect(&to, || {
        Ok(Local {
            stager: stager(cli, a)?,
            argv: runner_argv,
        })
    })
    .map_err(fail)?;
    let (m, direction) = match &a.action {
        StageAction::In(m) => (m, Direction::In),
        StageAction::Out(m) => (m, Direction::Out),
        StageAction::Copy(m) => (m, Direction::Copy),
        StageAction::Status { task: Some(t) } => {
            return print_record(&tasks.status(t).map_err(fail)?, a.json);
        }
        StageAction::Status { task: None } => {
            return print_records(&tasks.list().map_err(fail)?, a.json);
        }
        StageAction::Wait { task, timeout } => {
            let rec = tasks
                .wait(task, timeout.map(Duration::from_secs_f64))
                .map_err(fail)?;
            print_record(&rec, a.json)?;
            if !rec.state.is_final() {
                return Err(Failure {
                    code: 4,
                    message: format!("task {task} is still {:?} after the timeout", rec.state),
                });
            }
            return outcome(&rec);
        }
        StageAction::Cancel(t) => {
            return print_record(&tasks.cancel(&t.task).map_err(fail)?, a.json);
        }
        _ => unreachable!("not a task verb"),
    };
    let spec = TaskSpec {
        id: m.id.clone(),
        direction,
        src: m.src.clone(),
        dst: m.dst.clone(),
        mapping: m.mapping,
    };
    if m.detach {
        let rec = tasks.submit(&spec).map_err(fail)?;
        return if a.json {
            outln!("{}", serde_json::json!({"id": rec.id, "state": "queued"}))
        } else {
            outln!("{}", rec.id)
        };
    }
    let bar = progress_bar(m.quiet);
    let rec = tasks
        .run(&spec, &mut |r| show_progress(&bar, r))
        .map_err(fail)?;
    bar.finish_and_clear();
    print_record(&rec, a.json)?;
    outcome(&rec)
}

fn print_records(all: &[TaskRecord], json: bool) -> Result<(), Failure> {
    if json {
        return outln!(
            "{}",
            serde_json::to_string_pretty(all).expect("records serialise")
        );
    }
    for r in all {
        outln!("{}", summary(r))?;
    }
    Ok(())
}

fn progress_bar(quiet: bool) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    use std::io::IsTerminal;
    let bar = ProgressBar::with_draw_target(
        Some(0),
        if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        },
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {prefix} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {msg}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    bar
}

fn show_progress(bar: &indicatif::ProgressBar, r: &TaskRecord) {
    bar.set_prefix(r.id.clone());
    bar.set_length(r.bytes_total);
    bar.set_position(r.bytes_done);
    bar.set_message(match r.eta_seconds {
        Some(s) => format!("{s:.1}s"),
        None => "?".into(),
    });
}

fn execute(st: &Stager, a: &StageArgs, id: &str, quiet: bool) -> Result<(), Failure> {
    let bar = progress_bar(quiet);
    let rec = st.run(id, &mut |r| show_progress(&bar, r)).map_err(fail)?;
    bar.finish_and_clear();
    print_record(&rec, a.json)?;
    outcome(&rec)
}

/// The exit status a task's final state calls for.
fn outcome(rec: &TaskRecord) -> Result<(), Failure> {
    let msg = || {
        format!(
            "task {}: {}",
            rec.id,
            rec.error
                .clone()
                .unwrap_or_else(|| format!("{:?}", rec.state).to_lowercase())
        )
    };
    match rec.state {
        State::Done => Ok(()),
        State::Failed => Err(by_class(
            ErrorClass::of_name(rec.error_class.as_deref().unwrap_or_default()),
            msg(),
        )),
        State::Interrupted => Err(Failure::io(format!(
            "task {} was interrupted (its runner died): `haar stage resume {}`",
            rec.id, rec.id
        ))),
        _ => Err(Failure::io(msg())),
    }
}

fn summary(r: &TaskRecord) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut s = format!(
        "{} {} {:?} {} -> {}: {:.1}/{:.1} MiB, {}/{} objects, {:.1} MiB/s",
        r.id,
        format!("{:?}", r.state).to_lowercase(),
        r.direction,
        r.src,
        r.dst,
        mib(r.bytes_done),
        mib(r.bytes_total),
        r.objects_done,
        r.objects_total,
        r.rate / (1 << 20) as f64,
    );
    if r.state == State::Running
        && let Some(eta) = r.eta_seconds
    {
        s.push_str(&format!(", ETA {eta:.1} s"));
    }
    if let Some(e) = &r.error {
        s.push_str(&format!(": {e}"));
    }
    s
}

fn print_record(r: &TaskRecord, json: bool) -> Result<(), Failure> {
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(r).expect("records serialise")
        )
    } else {
        outln!("{}", summary(r))
    }
}

fn teardown(st: &Stager, a: &StageArgs, prefix: &str) -> Result<(), Failure> {
    let haar_stage::Teardown {
        removed,
        kept_persisted: kept,
    } = st.teardown_of(prefix).map_err(fail)?;
    if a.json {
        outln!(
            "{}",
            serde_json::json!({"removed": removed, "kept_persisted": kept})
        )
    } else {
        for p in &removed {
            outln!("removed {}", p.display())?;
        }
        for p in &kept {
            outln!("kept {} (persisted)", p.display())?;
        }
        Ok(())
    }
}

fn persist_cmd(st: &Stager, a: &StageArgs, op: &PersistOp) -> Result<(), Failure> {
    let (op, loc, user) = match op {
        PersistOp::List => {
            let all = persist::list(&st.spaces).map_err(fail)?;
            if a.json {
                return outln!("{}", serde_json::to_string_pretty(&all).expect("serialise"));
            }
            for p in &all {
                outln!(
                    "{} {} owner={} node={} shared_with={:?}",
                    p.endpoint,
                    p.path.display(),
                    p.owner,
                    p.node.as_deref().unwrap_or("?"),
                    p.shared_with
                )?;
            }
            return Ok(());
        }
        PersistOp::Init => {
            for dir in persist::init(&st.spaces).map_err(fail)? {
                outln!("{}", dir.display())?;
            }
            return Ok(());
        }
        PersistOp::Store { location } => (Op::Store, location, None),
        PersistOp::Delete { location } => (Op::Delete, location, None),
        PersistOp::Share { location, user } => (Op::Share, location, Some(user.as_str())),
        PersistOp::Unshare { location, user } => (Op::Unshare, location, Some(user.as_str())),
    };
    let rec = persist::apply(&st.spaces, op, loc, user).map_err(fail)?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rec).expect("serialise"))
    } else {
        match rec {
            Some(p) => outln!(
                "{} persisted, owner {}, shared with {:?}",
                p.endpoint,
                p.owner,
                p.shared_with
            ),
            None => outln!("{loc} deleted"),
        }
    }
}
