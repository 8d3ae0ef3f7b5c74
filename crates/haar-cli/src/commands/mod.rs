//! One module per subcommand (a module may hold a family: `net`, `workloads`, `modify`), each
//! owning its arguments (clap's `Args`, beside the function that runs it; `args.rs` keeps only
//! the top-level `Cli`, the store and server options every command shares, and the `Command`
//! enum naming each command's arguments). A command parses nothing itself beyond its own
//! options and formats the store's answers.

pub(crate) mod net;
// The workloads, benchmarks and memory tools: the `tools` feature (default on; off for a lean
// `haar` on production nodes).
#[cfg(feature = "tools")]
pub(crate) mod workloads;

#[cfg(feature = "tools")]
pub(crate) mod advise;
pub(crate) mod archive;
pub(crate) mod axes;
pub(crate) mod compact;
pub(crate) mod extract;
pub(crate) mod generate;
pub(crate) mod import;
pub(crate) mod info;
pub(crate) mod list;
pub(crate) mod modify;
pub(crate) mod mount;
pub(crate) mod retrieve;
pub(crate) mod run;
pub(crate) mod schema;
pub(crate) mod stage;
#[cfg(feature = "tools")]
pub(crate) mod stream;

use std::io::Write;

use haar::Key;

use crate::Failure;
use crate::args::{Cli, Command};

/// Runs the parsed command line.
pub(crate) fn run(cli: Cli) -> Result<(), Failure> {
    match &cli.command {
        Command::Archive(a) => archive::run(&cli, a),
        Command::List(a) => list::run(&cli, a),
        Command::Retrieve(a) => retrieve::run(&cli, a),
        Command::Extract(a) => extract::run(&cli, a),
        Command::Axes(a) => axes::run(&cli, a),
        Command::Wipe(a) => modify::wipe(&cli, a),
        Command::Purge(a) => modify::purge(&cli, a),
        Command::Info(a) => info::run(&cli, a),
        Command::Compact(a) => compact::run(&cli, a),
        Command::Schema(a) => schema::run(&cli, a),
        #[cfg(feature = "tools")]
        Command::Bench(a) => workloads::bench(a),
        Command::ImportFdb5(a) => import::run(&cli, a),
        Command::Serve(a) => net::serve(&cli, a),
        Command::Watch(a) => net::watch(&cli, a),
        Command::Wait(a) => net::wait(&cli, a),
        #[cfg(feature = "tools")]
        Command::Cluster(_) => net::cluster(&cli),
        #[cfg(feature = "tools")]
        Command::Stream(a) => stream::run(a),
        #[cfg(feature = "tools")]
        Command::Advise(a) => advise::run(a),
        Command::Run(a) => run::run(a),
        Command::Mount(a) => mount::run(&cli, a),
        #[cfg(feature = "tools")]
        Command::Hammer(a) => workloads::hammer(&cli, a),
        #[cfg(feature = "tools")]
        Command::Workflow(a) => workloads::workflow(&cli, a),
        #[cfg(feature = "tools")]
        Command::WorkloadWorker(a) => workloads::worker(&cli, a),
        Command::Stage(a) => stage::run(&cli, a),
        Command::Generate(a) => generate::run(a),
    }
}

fn key_json(k: &Key) -> serde_json::Value {
    serde_json::Value::Object(
        k.iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
            .collect(),
    )
}

/// A failed write to stdout: a closed pipe (the reader, e.g. `head`, has all it wants) ends the
/// command quietly with exit 0; anything else (a full disk behind a redirection) is exit 3.
pub(crate) fn out_err(e: std::io::Error) -> Failure {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Failure::output_closed()
    } else {
        Failure::io(format!("cannot write output: {e}"))
    }
}

/// What `outln!` and `out!` call: one formatted write to stdout, errors through `out_err`.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) -> Result<(), Failure> {
    std::io::stdout().write_fmt(args).map_err(out_err)
}

/// Corruption is never a clean exit (design §9): when a store reports damage, the command
/// fails (exit 3) after printing what it could, saying what to do; notes on databases another
/// program wrote (FDB5's) stay warnings.
fn damage_is_failure<'a>(
    problems: impl Iterator<Item = &'a String>,
    what: &str,
) -> Result<(), Failure> {
    let problems: Vec<String> = problems.cloned().collect();
    match haar::read::damage_of(&problems, what) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// When a command found less than it was asked for, names the databases FDB5 wrote under the
/// store's roots (haar neither reads nor writes them): an empty answer must not hide that the
/// fields may be there in FDB5's layout, which `haar import-fdb5` copies in. Best effort: a
/// failure to look does not replace the command's own outcome.
fn note_fdb5_databases(store: &dyn haar::FieldStore, reqs: &[haar::Request]) {
    let mut seen = std::collections::BTreeSet::new();
    for req in reqs {
        for p in store.problems(req).unwrap_or_default() {
            if !haar::frontend::is_damage(&p) && seen.insert(p.clone()) {
                eprintln!("haar: note: {p}");
            }
        }
    }
}
