//! `haar stage`: the data mover's face. Every decision is `haar_stage`'s: this module parses
//! (its grammar is `stage/args.rs`), calls the library — the task verbs through the one
//! `haar_stage::tasks::Tasks`, whichever process runs them — and prints (`stage/show.rs`).

mod args;
mod show;

use std::time::Duration;

use haar_stage::daemon::{self, Daemon, DaemonConfig, Request};
use haar_stage::launch::Runner;
use haar_stage::persist::{self, Op};
use haar_stage::tasks::{self, Connect, Local};
use haar_stage::{Dataspace, Dataspaces, Direction, ErrorClass, Journal, Stager, TaskSpec};

pub(crate) use self::args::StageArgs;
use self::args::{
    AdminOp, DaemonArgs, JobNodeArgs, NodeOp, PersistOp, StageAction, SubmitArgs, runner_argv,
};
use self::show::{
    outcome, print_persist_outcome, print_persisted, print_rates, print_record, print_records,
    print_reply, print_teardown, progress_bar, show_progress,
};
use crate::Failure;
use crate::args::Cli;

/// This program as the runner of tasks.
fn runner() -> Result<Runner, Failure> {
    Runner::this_program(runner_argv).map_err(|e| Failure::io(format!("haar's path: {e}")))
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
pub(super) fn by_class(class: ErrorClass, message: String) -> Failure {
    match class {
        ErrorClass::Missing => Failure::missing(message),
        ErrorClass::Input | ErrorClass::Denied => Failure::usage(message),
        _ => Failure::io(message),
    }
}

/// Where tasks and admin operations go, as the options say; the library picks the way.
fn connect_to(a: &StageArgs) -> Connect {
    Connect {
        in_process: a.no_daemon || a.journal.is_some(),
        socket: a.socket.clone(),
        token_file: a.token_file.clone(),
    }
}

/// Runs `haar stage`.
pub(crate) fn run(cli: &Cli, a: &StageArgs) -> Result<(), Failure> {
    match &a.action {
        StageAction::Daemon(d) => return serve(cli, a, d),
        StageAction::Admin { op } => return admin(a, op),
        StageAction::Submit(s) => return submit_after(s),
        #[cfg(feature = "tools")]
        StageAction::Bench(b) => return bench(b),
        StageAction::Node { op } => return node(cli, a, op),
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
        StageAction::Rates => print_rates(&st.journal.rates(), a.json),
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

fn job_node(j: &JobNodeArgs) -> Result<haar_stage::node::JobNode, Failure> {
    Ok(haar_stage::node::JobNode {
        node: j.node.clone(),
        nodes: haar_stage::node::hostlist(&j.nodes).map_err(fail)?,
        dir: j.dir.clone(),
        reports: j.reports.clone(),
    })
}

/// `haar stage node in|env|out`: one library call each (`haar_stage::node`).
fn node(cli: &Cli, a: &StageArgs, op: &NodeOp) -> Result<(), Failure> {
    use haar_stage::node;
    match op {
        NodeOp::In { plan, job } => {
            let job = job_node(job)?;
            let done = node::stage_in(spaces(cli, a).map_err(fail)?, plan, &job).map_err(fail)?;
            outln!(
                "haar stage node in: {}: {} task(s) staged into {}",
                job.node,
                done.tasks.len(),
                done.local.display()
            )
        }
        NodeOp::Env { plan, job, wait } => {
            let job = job_node(job)?;
            match node::environment(&job, plan, Duration::from_secs_f64(wait.max(0.0))) {
                Ok(vars) => {
                    for (k, v) in vars {
                        outln!("export {k}={v}")?;
                    }
                    Ok(())
                }
                Err(e) => {
                    // TaskProlog's `print` reaches the task's output: the job's log says why.
                    outln!("print haar: stage-in failed {e}")?;
                    Err(fail(e))
                }
            }
        }
        NodeOp::Out { job } => {
            let job = job_node(job)?;
            let done = node::stage_out(spaces(cli, a).map_err(fail)?, &job).map_err(fail)?;
            outln!(
                "haar stage node out: {}: {} task(s) staged out, {} path(s) torn down, {} kept (persisted)",
                job.node,
                done.tasks.len(),
                done.teardown.removed.len(),
                done.teardown.kept_persisted.len()
            )
        }
    }
}

/// `haar stage bench`: `haar_bench::stage` between two directories, with the host and its load.
#[cfg(feature = "tools")]
fn bench(b: &self::args::BenchArgs) -> Result<(), Failure> {
    let v = haar_bench::stage::report(&haar_bench::stage::Plan {
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
    let socket = connect_to(a).socket();
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
    // Bound before the first line is printed, so that a caller who reads it can scrape.
    let metrics = (d.metrics.as_deref())
        .map(|m| service.serve_metrics(m).map_err(fail))
        .transpose()?;
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
    if let Some(at) = metrics {
        outln!("metrics on {at}")?;
    }
    service.serve(listener).map_err(fail)
}

/// `haar stage admin …`: always through the service.
fn admin(a: &StageArgs, op: &AdminOp) -> Result<(), Failure> {
    let mut c = tasks::service(&connect_to(a)).map_err(fail)?;
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
        AdminOp::Drain { wait } => return print_reply(c.drain(*wait).map_err(fail)?),
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
    print_reply(c.call(req).map_err(fail)?)
}

/// in/out/copy/status/wait/cancel: the same verbs wherever the tasks run (the library
/// picks: the stage service when it answers, else this process).
fn task_verb(cli: &Cli, a: &StageArgs) -> Result<(), Failure> {
    let mut tasks = tasks::connect(&connect_to(a), || {
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

fn execute(st: &Stager, a: &StageArgs, id: &str, quiet: bool) -> Result<(), Failure> {
    let bar = progress_bar(quiet);
    let rec = st.run(id, &mut |r| show_progress(&bar, r)).map_err(fail)?;
    bar.finish_and_clear();
    print_record(&rec, a.json)?;
    outcome(&rec)
}

fn teardown(st: &Stager, a: &StageArgs, prefix: &str) -> Result<(), Failure> {
    print_teardown(&st.teardown_of(prefix).map_err(fail)?, a.json)
}

fn persist_cmd(st: &Stager, a: &StageArgs, op: &PersistOp) -> Result<(), Failure> {
    let (op, loc, user) = match op {
        PersistOp::List => {
            return print_persisted(&persist::list(&st.spaces).map_err(fail)?, a.json);
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
    print_persist_outcome(rec.as_ref(), loc, a.json)
}
