//! One function per subcommand; each parses nothing itself and formats the store's answers.

pub mod net;
// The workloads, benchmarks and memory tools: the `tools` feature (default on; off for a lean
// `haar` on production nodes).
#[cfg(feature = "tools")]
pub mod workloads;

#[cfg(feature = "tools")]
pub mod advise;
pub mod archive;
pub mod extract;
pub mod import;
pub mod mount;
pub mod run;
pub mod stage;
#[cfg(feature = "tools")]
pub mod stream;

use std::io::{IsTerminal, Write};

use haar_core::Key;
use serde_json::json;

use crate::Failure;
use crate::args::{
    AxesArgs, Cli, Command, CompactArgs, Generate, GenerateArgs, InfoArgs, ListArgs, ModifyArgs,
    RetrieveArgs, SchemaArgs, WipeArgs,
};
use crate::open;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<(), Failure> {
    match &cli.command {
        Command::Archive(a) => archive::run(&cli, a),
        Command::List(a) => list(&cli, a),
        Command::Retrieve(a) => retrieve(&cli, a),
        Command::Extract(a) => extract::run(&cli, a),
        Command::Axes(a) => axes(&cli, a),
        Command::Wipe(a) => wipe(&cli, a),
        Command::Purge(a) => purge(&cli, a),
        Command::Info(a) => info(&cli, a),
        Command::Compact(a) => compact(&cli, a),
        Command::Schema(a) => schema(&cli, a),
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
        Command::Generate(a) => generate(a),
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

/// A JSON value as a person reads it in `haar info`: strings and paths bare, lists joined by
/// commas, maps as `key=value`, null as `none` (`--json` keeps the JSON).
fn plain(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".into(),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(", "),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", plain(v)))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Bool(_) | Value::Number(_) => v.to_string(),
    }
}

fn list(cli: &Cli, a: &ListArgs) -> Result<(), Failure> {
    let store = open::field_store_for_reading(cli)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut json_items = Vec::new();
    let mut problems = Vec::new();
    for req in open::requests(a.request.as_deref())? {
        problems.extend(store.problems(&req)?);
        for f in store.list(&req)? {
            if a.json {
                let mut item = json!({
                    "db": key_json(&f.db.without_empty()), "index": key_json(&f.index.without_empty()),
                    "datum": key_json(&f.datum.without_empty()),
                    "length": f.data.length,
                });
                if a.location {
                    item["location"] = json!({"object": format!("{:016x}", f.data.object), "offset": f.data.offset});
                }
                json_items.push(item);
                continue;
            }
            let mut line = if a.fdb {
                // Absent optional keywords are left out, as fdb-list does.
                format!(
                    "{}{}{}",
                    f.db.without_empty().braced(),
                    f.index.without_empty().braced(),
                    f.datum.without_empty().braced()
                )
            } else {
                f.key().without_empty().to_string()
            };
            if a.location {
                line.push_str(&format!(
                    " object={:016x} offset={} length={}",
                    f.data.object, f.data.offset, f.data.length
                ));
            }
            writeln!(out, "{line}").map_err(out_err)?;
        }
    }
    if a.json {
        serde_json::to_writer_pretty(&mut out, &json_items).map_err(|e| out_err(e.into()))?;
        writeln!(out).map_err(out_err)?;
    }
    out.flush().map_err(out_err)?;
    for p in &problems {
        eprintln!("haar: warning: {p}");
    }
    damage_is_failure(problems.iter(), "the listing above")
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
fn note_fdb5_databases(store: &dyn haar_store::FieldStore, reqs: &[haar_core::Request]) {
    let mut seen = std::collections::BTreeSet::new();
    for req in reqs {
        for p in store.problems(req).unwrap_or_default() {
            if !haar_store::frontend::is_damage(&p) && seen.insert(p.clone()) {
                eprintln!("haar: note: {p}");
            }
        }
    }
}

fn retrieve(cli: &Cli, a: &RetrieveArgs) -> Result<(), Failure> {
    let store = open::field_store_for_reading(cli)?;
    let reqs = open::requests(Some(&a.request))?;
    // A regular file (or a new one) is written whole beside it, then renamed into place; a
    // device, FIFO or socket (`-o /dev/null`, a named pipe) is written directly: renaming over
    // it would replace the device node with a regular file.
    let special = a
        .output
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .is_some_and(|m| !m.is_file());
    let tmp = a.output.as_ref().map(|p| {
        if special {
            return p.clone();
        }
        let mut t = p.clone().into_os_string();
        t.push(format!(".haar-tmp-{}", std::process::id()));
        std::path::PathBuf::from(t)
    });
    if tmp.is_none() && std::io::stdout().is_terminal() {
        return Err(Failure::usage(
            "refusing to write GRIB bytes to a terminal: use -o FILE or redirect stdout",
        ));
    }
    let mut sink: Box<dyn Write> = match &tmp {
        Some(t) => Box::new(std::io::BufWriter::with_capacity(
            1 << 20,
            std::fs::OpenOptions::new()
                .write(true)
                .create(!special)
                .truncate(!special)
                .open(t)
                .map_err(|e| Failure::io(format!("cannot create {}: {e}", t.display())))?,
        )),
        None => Box::new(std::io::BufWriter::with_capacity(
            1 << 20,
            std::io::stdout().lock(),
        )),
    };
    // Set when stdout's reader went away mid-field: the store reports the write as an I/O
    // error, but haar then ends quietly (`out_err`).
    let mut output_closed = false;
    let result = (|| -> Result<haar::read::Retrieved, Failure> {
        let got = haar::read::retrieve_into(&*store, &reqs, &mut |_, data, _| {
            sink.write_all(data).map_err(|e| {
                output_closed |= e.kind() == std::io::ErrorKind::BrokenPipe;
                haar_store::Error::io("write", "output", e)
            })
        });
        let got = match got {
            Err(_) if output_closed => return Err(Failure::output_closed()),
            got => got?,
        };
        for p in &got.problems {
            eprintln!("haar: warning: {p}");
        }
        if !got.ignored.is_empty() {
            eprintln!(
                "haar: note: keywords not used by the schema were ignored: {}",
                got.ignored.join(", ")
            );
        }
        sink.flush().map_err(out_err)?;
        Ok(got)
    })();
    drop(sink);
    let got = match result {
        Ok(got) => got,
        Err(e) => {
            if let Some(t) = tmp.as_ref().filter(|_| !special) {
                let _ = std::fs::remove_file(t);
            }
            return Err(e);
        }
    };
    let (found, bytes, missing) = (got.found, got.bytes, got.missing);
    eprintln!("haar: retrieved {found} field(s), {bytes} bytes");
    if !missing.is_empty() {
        note_fdb5_databases(&*store, &reqs);
    }
    let damaged = !missing.problems.is_empty();
    let refuse = !missing.is_empty() && !a.allow_missing;
    if let (Some(t), Some(out)) = (tmp.as_ref().filter(|_| !special), &a.output) {
        if refuse {
            // A partial result is not left where a script would take it for a complete one.
            let _ = std::fs::remove_file(t);
        } else {
            std::fs::rename(t, out).map_err(|e| {
                Failure::io(format!(
                    "cannot rename {} to {}: {e}",
                    t.display(),
                    out.display()
                ))
            })?;
        }
    }
    // A request naming no keyword asks for every field; with none in the store the store
    // reports one empty key as missing, which would print as a bare `missing:`.
    let (unnamed, named): (Vec<&Key>, Vec<&Key>) = missing.keys.iter().partition(|k| k.is_empty());
    if !unnamed.is_empty() {
        eprintln!(
            "haar: nothing to retrieve: the request names no keyword and the store holds no \
             flushed field (check --root or --config; `haar list` shows what is there)"
        );
    }
    for m in named.iter().take(20) {
        eprintln!("haar: missing: {m}");
    }
    if named.len() > 20 {
        eprintln!("haar: … and {} more missing", named.len() - 20);
    }
    for r in &missing.requests {
        eprintln!("haar: missing: no flushed field matches {r}");
    }
    if refuse {
        let no_file = if a.output.is_some() && !special {
            "; no output file written"
        } else {
            ""
        };
        if damaged {
            // Corruption is never reported as absence: a missing field may be in the damage.
            return Err(Failure::io(format!(
                "{} requested field(s) missing and the database(s) they belong to are damaged \
                 (the warnings above name the files): they may have been among the damaged \
                 bytes{no_file}",
                missing.keys.len()
            )));
        }
        return Err(Failure::missing(if named.is_empty() {
            format!("no field retrieved{no_file} (use --allow-missing to accept an empty result)")
        } else {
            format!(
                "{} requested field(s) missing{no_file} (use --allow-missing to accept a partial \
                 result)",
                named.len()
            )
        }));
    }
    Ok(())
}

fn axes(cli: &Cli, a: &AxesArgs) -> Result<(), Failure> {
    let store = open::field_store_for_reading(cli)?;
    let mut all = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    let reqs = open::requests(a.request.as_deref())?;
    for req in &reqs {
        for (k, v) in store.axes(req)? {
            all.entry(k).or_default().extend(v);
        }
    }
    if all.is_empty() {
        note_fdb5_databases(&*store, &reqs);
    }
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&all).expect("strings serialise")
        )?;
    } else {
        for (k, v) in &all {
            outln!("{k}: {}", v.iter().cloned().collect::<Vec<_>>().join(", "))?;
        }
    }
    Ok(())
}

fn wipe(cli: &Cli, w: &WipeArgs) -> Result<(), Failure> {
    let a = &w.modify;
    let mut store = open::field_store(cli)?;
    for req in open::requests(Some(&a.request))? {
        // A dry run names the files a wipe with --doit would refuse (or, with
        // --unsafe-wipe-all, delete).
        let unowned = if a.doit {
            Vec::new()
        } else {
            store.unowned_files(&req)?
        };
        let rep = if w.unsafe_wipe_all {
            store.wipe_unsafe_all(&req, a.doit)?
        } else {
            store.wipe(&req, a.doit)?
        };
        if a.json {
            outln!(
                "{}",
                json!({"doit": a.doit, "report": rep, "unowned": unowned})
            )?;
            continue;
        }
        let verb = if a.doit { "wiped" } else { "would wipe" };
        for db in &rep.databases {
            outln!("{verb} database {db}")?;
        }
        outln!("{verb} {} field(s), {} bytes", rep.fields, rep.bytes)?;
        if rep.fields == 0 {
            note_fdb5_databases(&*store, std::slice::from_ref(&req));
        }
        for f in &unowned {
            outln!(
                "not written by haar: {} ({})",
                f.display(),
                if w.unsafe_wipe_all {
                    "deleted with the database by --unsafe-wipe-all"
                } else {
                    "--doit refuses to wipe its database; --unsafe-wipe-all deletes it"
                }
            )?;
        }
        if !a.doit {
            outln!("(dry run: add --doit to wipe)")?;
        }
    }
    Ok(())
}

fn purge(cli: &Cli, a: &ModifyArgs) -> Result<(), Failure> {
    let mut store = open::field_store(cli)?;
    for req in open::requests(Some(&a.request))? {
        let rep = store.purge(&req, a.doit)?;
        if a.json {
            outln!("{}", json!({"doit": a.doit, "report": rep}))?;
            continue;
        }
        let verb = if a.doit { "dropped" } else { "would drop" };
        outln!(
            "{verb} {} masked or wiped field(s) ({} bytes) in {} database(s); freed {} bytes",
            rep.dropped_fields,
            rep.dropped_bytes,
            rep.databases,
            rep.freed_bytes
        )?;
        if !a.doit {
            outln!("(dry run: add --doit to purge)")?;
        }
    }
    Ok(())
}

fn compact(cli: &Cli, a: &CompactArgs) -> Result<(), Failure> {
    if open::open_options(cli).servers.is_some() {
        return Err(Failure::usage(
            "haar compact works on a local store: run it on the server's node with its --root (servers also merge in the background after flushes)",
        ));
    }
    let store = open::store(cli)?;
    for req in open::requests(a.request.as_deref())? {
        for (db, outcome) in store.compact(&req, a.full)? {
            if a.json {
                outln!("{}", json!({"db": db.to_string(), "result": outcome}))?;
                continue;
            }
            let what = match outcome {
                haar_store::MergeOutcome::Published {
                    tail,
                    runs,
                    entries,
                } => format!(
                    "merged {tail} new entr{}; {runs} run(s) hold {entries} entr{}",
                    if tail == 1 { "y" } else { "ies" },
                    if entries == 1 { "y" } else { "ies" }
                ),
                haar_store::MergeOutcome::Nothing { tail } => {
                    format!("up to date ({tail} entries since the last merge)")
                }
                haar_store::MergeOutcome::Busy => "busy: another process is merging it".into(),
                haar_store::MergeOutcome::Gone => "gone: wiped meanwhile".into(),
                haar_store::MergeOutcome::Stopped => "stopped".into(),
                haar_store::MergeOutcome::Unsupported => {
                    "this backend keeps no catalogue runs".into()
                }
            };
            outln!("{db}: {what}")?;
        }
    }
    Ok(())
}

fn info(cli: &Cli, a: &InfoArgs) -> Result<(), Failure> {
    if open::open_options(cli).servers.is_some() {
        return net::info(cli, a);
    }
    let cfg = open::config(cli)?;
    let store = open::store_for_reading(cli)?;
    let mut dbs = Vec::new();
    for req in open::requests(a.request.as_deref())? {
        dbs.extend(store.stats(&req)?);
    }
    let backend = store.backend().info();
    let total_fields: u64 = dbs.iter().map(|d| d.fields).sum();
    let total_bytes: u64 = dbs.iter().map(|d| d.bytes).sum();
    let dead_bytes: u64 = dbs.iter().map(|d| d.dead_bytes).sum();
    // A pmem pool's heap, whole store only (design §5.4).
    let space = a
        .request
        .is_none()
        .then(|| haar_store::frontend::pool_space(&backend, &dbs))
        .flatten();
    let mut v = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "config": cfg,
        "backend": backend,
        "databases": dbs,
        "fields": total_fields,
        "bytes": total_bytes,
        "dead_bytes": dead_bytes,
        "eccodes": haar_grib::eccodes_version(),
    });
    if let Some(sp) = &space {
        v["space"] = sp.clone();
    }
    let damage = || damage_is_failure(dbs.iter().flat_map(|d| &d.problems), "this report");
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return damage();
    }
    outln!(
        "haar {}  (ecCodes {})",
        env!("CARGO_PKG_VERSION"),
        haar_grib::eccodes_version()
    )?;
    outln!("backend: {}", store.backend().describe())?;
    for (k, val) in backend.as_object().into_iter().flatten() {
        if k != "backend" {
            outln!("  {k}: {}", plain(val))?;
        }
    }
    outln!(
        "schema: {}",
        cfg.schema
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "built-in".into())
    )?;
    outln!(
        "databases: {}  fields: {total_fields}  bytes: {total_bytes}  dead bytes: {dead_bytes}",
        dbs.len()
    )?;
    if let Some(sp) = &space {
        outln!(
            "pool heap: {} bytes = live {} + dead {} (a purge frees them) + free {} ({} waiting \
             for readers' views) + other {} (segment records, tables, space of killed writers)",
            sp["heap_used_bytes"],
            sp["live_bytes"],
            sp["dead_bytes"],
            sp["free_bytes"],
            sp["free_waiting_bytes"],
            sp["other_bytes"]
        )?;
    }
    print_databases(&dbs)?;
    damage()
}

/// One line per database of `info` (live and dead fields and bytes), then its problems.
pub(crate) fn print_databases(dbs: &[haar_store::DbStats]) -> Result<(), Failure> {
    for d in dbs {
        outln!(
            "  {}: {} field(s), {} bytes; {} dead ({} bytes)",
            d.db,
            d.fields,
            d.bytes,
            d.dead_fields,
            d.dead_bytes
        )?;
        for p in &d.problems {
            outln!("    problem: {p}")?;
        }
    }
    Ok(())
}

fn schema(cli: &Cli, a: &SchemaArgs) -> Result<(), Failure> {
    if let Some(path) = &a.check {
        let s = open::load_schema(path)?;
        outln!("{}: ok ({} keywords)", path.display(), s.keywords().len())?;
        return Ok(());
    }
    let cfg = open::config(cli)?;
    match &cfg.schema {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(format!("cannot read schema {}: {e}", path.display()))
            })?;
            out!("{text}")?;
        }
        None => out!("{}", haar_core::schema::BUILTIN_SCHEMA)?,
    }
    Ok(())
}

/// `haar generate`: man pages or a completion script from the same clap definitions that parse
/// the command line (clap_mangen, clap_complete), so the installed docs match the binary.
fn generate(a: &GenerateArgs) -> Result<(), Failure> {
    use clap::CommandFactory;
    match &a.what {
        Generate::Man { dir } => {
            let cannot = |e: std::io::Error| {
                Failure::io(format!("cannot write man pages to {}: {e}", dir.display()))
            };
            std::fs::create_dir_all(dir).map_err(cannot)?;
            // Skips hidden subcommands (workload-worker, generate) itself.
            clap_mangen::generate_to(Cli::command(), dir).map_err(cannot)
        }
        Generate::Completions { shell } => {
            // clap_complete panics on a failed write: generate in memory, then write.
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut completion_command(), "haar", &mut script);
            std::io::stdout().write_all(&script).map_err(out_err)
        }
    }
}

/// The command line as completions offer it. clap_complete walks hidden subcommands too
/// (clap issue 1335) and clap has no way to remove one, so the root is re-assembled from
/// `Cli`'s own arguments and its visible subcommands: nothing of the grammar is restated.
fn completion_command() -> clap::Command {
    use clap::CommandFactory;
    let full = Cli::command();
    clap::Command::new("haar")
        .version(env!("CARGO_PKG_VERSION"))
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}
