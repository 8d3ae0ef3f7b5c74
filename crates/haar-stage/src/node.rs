//! Per-node staging of a Slurm job (docs/staging.md, "Per-node staging"): the part of a
//! job's `#HAAR` staging that must happen on each compute node of the job, not on the
//! controller where Slurm's `burst_buffer/lua` hook runs. The hook checks the directives at
//! submission and writes the job's node-local ones into a **plan** on a file system the nodes
//! share; on each node of the job the node Prolog (at allocation, `PrologFlags=Alloc`) runs [`stage_in`] as the job's
//! owner, the TaskProlog runs [`environment`] before every task (where the staged data is, or
//! why the task must not start), and the Epilog runs [`stage_out`].
//!
//! Owns: the plan's grammar ([`Plan::parse`]), Slurm host lists ([`hostlist`]), which node
//! gets which file of a `spread=GLOB` directive ([`spread`]), and the per-node reports in the
//! job's shared directory. Must not touch: Slurm (no command is run, nothing is asked of
//! `slurmctld`: a Prolog must stay off it) and anything outside the directories it is handed
//! and the dataspaces the plan names.
//!
//! Plan grammar, one directive a line (blank-separated words, `#` starts a comment):
//!
//! ```text
//! stage_in  SRC DST [same|into] [spread=GLOB]
//! stage_out SRC DST [same|into]
//! persist   store|delete LOCATION
//! persist   share|unshare LOCATION USER
//! ```
//!
//! - `stage_in` lands on every node of the job; with `spread=GLOB`, the regular files of the
//!   directory SRC whose names match GLOB are dealt out round-robin over the job's nodes in
//!   Slurm's node order (the k-th match, by name, to node k mod N), each into the directory
//!   DST under its own name (NEXTGenIO's mapping file, as a rule).
//! - `stage_out` gathers from every node: node NODE's copy goes to `DST/NODE` (a per-node
//!   subdirectory; with `into`, SRC goes into `DST/NODE/` under its own name).
//! - `persist` runs on every node, before the stage-outs and the teardown.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorClass, Result};
use crate::persist::{self, Op};
use crate::task::{Direction, Mapping, Stager, State, TaskRecord, TaskSpec, Teardown};
use crate::{Dataspaces, Journal, Object};

/// The environment variable naming the job's node-local staging directory on each node.
pub const LOCAL_VAR: &str = "HAAR_STAGE_LOCAL";

/// One directive of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Stage SRC in to DST on every node (or, with `spread`, some files on each).
    In {
        /// Source endpoint.
        src: String,
        /// Node-local destination endpoint.
        dst: String,
        /// How SRC maps onto DST.
        mapping: Mapping,
        /// Deal the matching files of SRC out over the nodes.
        spread: Option<String>,
    },
    /// Stage SRC out of every node to `DST/NODE`.
    Out {
        /// Node-local source endpoint.
        src: String,
        /// Destination endpoint (one subdirectory per node below it).
        dst: String,
        /// How SRC maps onto `DST/NODE`.
        mapping: Mapping,
    },
    /// Persist (or share, …) a node-local location on every node.
    Persist {
        /// What to do.
        op: Op,
        /// The location.
        location: String,
        /// The user, for share and unshare.
        user: Option<String>,
    },
}

impl Step {
    /// The directive as a job script says it (for messages).
    pub fn text(&self) -> String {
        let m = |m: &Mapping| match m {
            Mapping::Same => "",
            Mapping::Into => " into",
        };
        match self {
            Step::In {
                src,
                dst,
                mapping,
                spread,
            } => format!(
                "#HAAR stage_in {src} {dst}{}{}",
                m(mapping),
                spread
                    .as_ref()
                    .map(|g| format!(" spread={g}"))
                    .unwrap_or_default()
            ),
            Step::Out { src, dst, mapping } => {
                format!("#HAAR stage_out {src} {dst}{}", m(mapping))
            }
            Step::Persist { op, location, user } => format!(
                "#HAAR persist {} {location}{}",
                op_name(*op),
                user.as_ref().map(|u| format!(" {u}")).unwrap_or_default()
            ),
        }
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Store => "store",
        Op::Delete => "delete",
        Op::Share => "share",
        Op::Unshare => "unshare",
    }
}

/// A job's node-local directives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// In the job script's order.
    pub steps: Vec<Step>,
}

impl Plan {
    /// Parses a plan (the grammar is in the module's documentation). Pure.
    ///
    /// # Errors
    /// [`Error::Usage`] naming the line at fault.
    pub fn parse(text: &str) -> Result<Plan> {
        let mut steps = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("");
            let w: Vec<&str> = line.split_whitespace().collect();
            if w.is_empty() {
                continue;
            }
            let bad = |what: &str| Error::Usage(format!("plan line {}: {what}: {line}", n + 1));
            let step = match w[0] {
                "stage_in" | "stage_out" if w.len() >= 3 => {
                    let (mut mapping, mut spread) = (Mapping::Same, None);
                    for opt in &w[3..] {
                        if let Some(g) = opt.strip_prefix("spread=") {
                            if g.is_empty() || g.contains('/') || w[0] == "stage_out" {
                                return Err(bad(
                                    "spread=GLOB takes a file name pattern, on stage_in only",
                                ));
                            }
                            spread = Some(g.to_string());
                        } else {
                            mapping = opt.parse().map_err(|e: String| bad(&e))?;
                        }
                    }
                    let (src, dst) = (w[1].to_string(), w[2].to_string());
                    if w[0] == "stage_in" {
                        Step::In {
                            src,
                            dst,
                            mapping,
                            spread,
                        }
                    } else {
                        Step::Out { src, dst, mapping }
                    }
                }
                "persist" if w.len() >= 3 => {
                    let (op, users) = match w[1] {
                        "store" => (Op::Store, 0),
                        "delete" => (Op::Delete, 0),
                        "share" => (Op::Share, 1),
                        "unshare" => (Op::Unshare, 1),
                        _ => return Err(bad("persist takes store, delete, share or unshare")),
                    };
                    if w.len() != 3 + users {
                        return Err(bad("wrong number of words"));
                    }
                    Step::Persist {
                        op,
                        location: w[2].to_string(),
                        user: w.get(3).map(|u| u.to_string()),
                    }
                }
                _ => return Err(bad("not a stage_in, stage_out or persist directive")),
            };
            steps.push(step);
        }
        Ok(Plan { steps })
    }

    /// Reads and parses the plan in `path`.
    pub fn read(path: &Path) -> Result<Plan> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))?;
        Plan::parse(&text).map_err(|e| Error::Usage(format!("{}: {e}", path.display())))
    }
}

/// Expands a Slurm host list (`n[1-4,7],login[01-02]`) into host names, in its order. Pure.
///
/// # Errors
/// [`Error::Usage`] for an unbalanced bracket or a range that is not `A-B` with A ≤ B.
pub fn hostlist(text: &str) -> Result<Vec<String>> {
    let bad = || Error::Usage(format!("host list {text:?}: write NAME or PREFIX[A-B,C]"));
    // Split at commas outside brackets.
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(bad());
        }
    }
    if depth != 0 {
        return Err(bad());
    }
    parts.push(&text[start..]);
    let mut out = Vec::new();
    for p in parts.into_iter().filter(|p| !p.is_empty()) {
        let Some(open) = p.find('[') else {
            out.push(p.to_string());
            continue;
        };
        let close = p.find(']').ok_or_else(bad)?;
        let (prefix, ranges, suffix) = (&p[..open], &p[open + 1..close], &p[close + 1..]);
        if suffix.contains('[') {
            return Err(bad());
        }
        for r in ranges.split(',') {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            let (x, y): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            if x > y {
                return Err(bad());
            }
            for k in x..=y {
                out.push(format!("{prefix}{k:0width$}{suffix}", width = a.len()));
            }
        }
    }
    Ok(out)
}

/// Whether `name` matches the shell pattern `pat` (`*` any run, `?` one character, anything
/// else itself). Pure.
pub fn glob_match(pat: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pat.chars().collect(), name.chars().collect());
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

/// The files node `me` of `nodes` gets from `names` under `spread=GLOB`: those matching
/// `glob`, sorted, the k-th to node k mod `nodes`. Pure.
pub fn spread<'a>(names: &'a [String], glob: &str, me: usize, nodes: usize) -> Vec<&'a String> {
    let mut matching: Vec<&String> = names.iter().filter(|n| glob_match(glob, n)).collect();
    matching.sort();
    matching
        .into_iter()
        .enumerate()
        .filter(|(k, _)| nodes > 0 && k % nodes == me)
        .map(|(_, n)| n)
        .collect()
}

/// One node of a job, as its Prolog, TaskProlog and Epilog know it.
#[derive(Debug, Clone)]
pub struct JobNode {
    /// This node's name (Slurm's).
    pub node: String,
    /// The job's nodes, in Slurm's order ([`hostlist`] of `SLURM_JOB_NODELIST`).
    pub nodes: Vec<String>,
    /// This node's directory of the job, node-local and the owner's: the journal, a copy of
    /// the plan, the staging directory and this node's result.
    pub dir: PathBuf,
    /// The job's directory every node reports into (on a shared file system); `None`: this
    /// node's result only.
    pub reports: Option<PathBuf>,
}

impl JobNode {
    fn index(&self) -> Result<usize> {
        self.nodes
            .iter()
            .position(|n| *n == self.node)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "node {} is not one of the job's nodes {:?}",
                    self.node, self.nodes
                ))
            })
    }

    fn stager(&self, spaces: Dataspaces) -> Result<Stager> {
        Ok(Stager {
            spaces,
            journal: Journal::open(&self.dir.join("journal"))?,
        })
    }

    /// `e` as a failure on this node (unchanged when it already names one).
    fn on_node(&self, e: Error) -> Error {
        match e {
            Error::OnNode { .. } => e,
            e => Error::OnNode {
                node: self.node.clone(),
                message: e.to_string(),
                class: e.class(),
            },
        }
    }
}

/// What [`stage_in`] did on this node.
#[derive(Debug)]
pub struct StagedIn {
    /// The job's staging directory on this node (what [`LOCAL_VAR`] says).
    pub local: PathBuf,
    /// The tasks that ran, done.
    pub tasks: Vec<TaskRecord>,
}

/// The node-local path of an endpoint that must be one.
fn local_path(spaces: &Dataspaces, endpoint: &str) -> Result<PathBuf> {
    match spaces.endpoint(endpoint)?.object {
        Object::Path(p) => Ok(p),
        Object::Fields(_) => Err(Error::Usage(format!(
            "{endpoint}: a per-node endpoint must be a path in a posix dataspace"
        ))),
    }
}

/// The job's staging directory on a node: the deepest directory holding every node-local
/// location of the plan (a `same` destination's parent, an `into` or `spread` destination
/// itself, a stage-out source's parent).
pub fn local_dir(spaces: &Dataspaces, plan: &Plan) -> Result<Option<PathBuf>> {
    let mut dirs = Vec::new();
    for s in &plan.steps {
        let d = match s {
            Step::In {
                dst,
                mapping,
                spread,
                ..
            } => {
                let p = local_path(spaces, dst)?;
                if *mapping == Mapping::Into || spread.is_some() {
                    p
                } else {
                    p.parent().map(Path::to_path_buf).unwrap_or(p)
                }
            }
            Step::Out { src, .. } => {
                let p = local_path(spaces, src)?;
                p.parent().map(Path::to_path_buf).unwrap_or(p)
            }
            Step::Persist { .. } => continue,
        };
        dirs.push(d);
    }
    let Some(first) = dirs.first() else {
        return Ok(None);
    };
    let mut common: Vec<_> = first.components().collect();
    for d in &dirs[1..] {
        let n = common
            .iter()
            .zip(d.components())
            .take_while(|(a, b)| **a == *b)
            .count();
        common.truncate(n);
    }
    Ok(Some(common.iter().collect()))
}

/// A task's end as a result: done, or the error its record names.
fn finished(rec: TaskRecord) -> Result<TaskRecord> {
    if rec.state == State::Done {
        return Ok(rec);
    }
    let msg = rec
        .error
        .clone()
        .unwrap_or_else(|| format!("task {} ended {:?}", rec.id, rec.state));
    Err(rec.error_class.unwrap_or(ErrorClass::Io).error(msg, |msg| {
        Error::io("stage", Path::new(&rec.dst), std::io::Error::other(msg))
    }))
}

fn run_task(st: &Stager, spec: &TaskSpec) -> Result<TaskRecord> {
    let rec = st.submit(spec)?;
    finished(st.run(&rec.id, &mut |_| {})?)
}

/// Writes `text` to `path` whole (a temporary name, then a rename): a node polling for it
/// never reads half of it.
fn write_whole(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| Error::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("rename", path, e))
}

/// A node's result, as written into its report: `ok`, or `failed CLASS` and the message.
fn report_text(failure: Option<&Error>) -> String {
    match failure {
        None => "ok\n".to_string(),
        Some(Error::OnNode { message, class, .. }) => {
            format!("failed {}\n{message}\n", class.name())
        }
        Some(e) => format!("failed {}\n{e}\n", e.class().name()),
    }
}

fn parse_report(node: &str, text: &str) -> Result<()> {
    let (head, message) = text.split_once('\n').unwrap_or((text, ""));
    match head.split_whitespace().collect::<Vec<_>>()[..] {
        ["ok"] => Ok(()),
        ["failed", class] => Err(Error::OnNode {
            node: node.to_string(),
            message: message.trim().to_string(),
            class: ErrorClass::of_name(class),
        }),
        _ => Err(Error::OnNode {
            node: node.to_string(),
            message: format!("unreadable stage-in report {text:?}"),
            class: ErrorClass::Io,
        }),
    }
}

/// The Prolog's part, on one node, as the job's owner: reads the plan in `plan_file`, keeps
/// a copy in the node's directory (for the Epilog), stages in every `stage_in` of the plan
/// that lands on this node, and reports the result in the node's directory and in the job's
/// shared one. A failure names this node and the directive.
pub fn stage_in(spaces: Dataspaces, plan_file: &Path, job: &JobNode) -> Result<StagedIn> {
    std::fs::create_dir_all(&job.dir).map_err(|e| Error::io("create", &job.dir, e))?;
    let r = stage_in_here(spaces, plan_file, job).map_err(|e| job.on_node(e));
    let text = report_text(r.as_ref().err());
    write_whole(&job.dir.join("result"), &text)?;
    if let Some(reports) = &job.reports {
        write_whole(&reports.join(&job.node), &text)?;
    }
    r
}

fn stage_in_here(spaces: Dataspaces, plan_file: &Path, job: &JobNode) -> Result<StagedIn> {
    let me = job.index()?;
    let plan = Plan::read(plan_file)?;
    let text = std::fs::read_to_string(plan_file).map_err(|e| Error::io("read", plan_file, e))?;
    write_whole(&job.dir.join("plan"), &text)?;
    let local = local_dir(&spaces, &plan)?.unwrap_or_else(|| job.dir.clone());
    std::fs::create_dir_all(&local).map_err(|e| Error::io("create", &local, e))?;
    write_whole(&job.dir.join("local"), &format!("{}\n", local.display()))?;
    let st = job.stager(spaces)?;
    let mut tasks = Vec::new();
    let ins = plan.steps.iter().filter(|s| matches!(s, Step::In { .. }));
    for (k, step) in ins.enumerate() {
        let Step::In {
            src,
            dst,
            mapping,
            spread: glob,
        } = step
        else {
            continue;
        };
        let fail = |e: Error| in_step(e, step, job);
        let Some(glob) = glob else {
            let spec = TaskSpec {
                id: Some(format!("in-{}", k + 1)),
                direction: Direction::In,
                src: src.clone(),
                dst: dst.clone(),
                mapping: *mapping,
            };
            tasks.push(run_task(&st, &spec).map_err(fail)?);
            continue;
        };
        let dir = local_path(&st.spaces, src).map_err(fail)?;
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| fail(Error::io("list", &dir, e)))? {
            let entry = entry.map_err(|e| fail(Error::io("list", &dir, e)))?;
            if entry.file_type().is_ok_and(|t| t.is_file())
                && let Some(n) = entry.file_name().to_str()
            {
                names.push(n.to_string());
            }
        }
        let into = local_path(&st.spaces, dst).map_err(fail)?;
        std::fs::create_dir_all(&into).map_err(|e| fail(Error::io("create", &into, e)))?;
        for (i, name) in spread(&names, glob, me, job.nodes.len())
            .into_iter()
            .enumerate()
        {
            let spec = TaskSpec {
                id: Some(format!("in-{}-{}", k + 1, i + 1)),
                direction: Direction::In,
                src: format!("{}/{name}", src.trim_end_matches('/')),
                dst: dst.clone(),
                mapping: Mapping::Into,
            };
            tasks.push(run_task(&st, &spec).map_err(fail)?);
        }
    }
    Ok(StagedIn { local, tasks })
}

/// `e` on this node, with the directive named in front; of `e`'s class.
fn in_step(e: Error, step: &Step, job: &JobNode) -> Error {
    Error::OnNode {
        node: job.node.clone(),
        message: format!("{}: {e}", step.text()),
        class: e.class(),
    }
}

/// The TaskProlog's part, before each task of the job on a node: the variables the task gets
/// ([`LOCAL_VAR`]), or the failure of the stage-in on a node of the job, named. Every node's
/// report is waited for (at most `wait`): a job whose data is not on every node must not
/// start. A node without the job's directory gives no variables when the job has no `plan`
/// (no per-node staging), and fails when it has one (the Prolog did not stage here).
pub fn environment(job: &JobNode, plan: &Path, wait: Duration) -> Result<Vec<(String, String)>> {
    if !job.dir.is_dir() {
        if !plan.exists() {
            return Ok(Vec::new());
        }
        return Err(Error::OnNode {
            node: job.node.clone(),
            message: format!(
                "the job has a plan ({}) but no staging directory {} here: did the Prolog run \
                 (slurm.conf: PrologFlags=Alloc, Prolog=haar-prolog.sh)?",
                plan.display(),
                job.dir.display()
            ),
            class: ErrorClass::Io,
        });
    }
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    match read(&job.dir.join("result")) {
        Some(t) => parse_report(&job.node, &t)?,
        None => {
            return Err(Error::OnNode {
                node: job.node.clone(),
                message: "the Prolog left no stage-in result (did it run haar-node.sh?)".into(),
                class: ErrorClass::Io,
            });
        }
    }
    if let Some(reports) = &job.reports {
        let start = Instant::now();
        for node in &job.nodes {
            let path = reports.join(node);
            loop {
                if let Some(t) = read(&path) {
                    parse_report(node, &t)?;
                    break;
                }
                if start.elapsed() >= wait {
                    return Err(Error::OnNode {
                        node: node.clone(),
                        message: format!(
                            "no stage-in report in {} after {:.0} s",
                            reports.display(),
                            wait.as_secs_f64()
                        ),
                        class: ErrorClass::Io,
                    });
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    let local = read(&job.dir.join("local")).unwrap_or_default();
    Ok(vec![(LOCAL_VAR.to_string(), local.trim_end().to_string())])
}

/// What [`stage_out`] did on this node.
#[derive(Debug)]
pub struct StagedOut {
    /// The stage-out tasks, done.
    pub tasks: Vec<TaskRecord>,
    /// What the teardown removed and kept.
    pub teardown: Teardown,
}

/// `DST/NODE`: where a node's copy of a stage-out goes.
pub fn per_node_endpoint(dst: &str, node: &str) -> String {
    if dst.ends_with(':') {
        format!("{dst}{node}")
    } else {
        format!("{}/{node}", dst.trim_end_matches('/'))
    }
}

/// The Epilog's part, on one node, as the job's owner: the plan's `persist` directives, then
/// each `stage_out` to `DST/NODE`, then the teardown of what this node staged in and the
/// stage-out sources, except persisted locations. A failed stage-out leaves everything on
/// the node (nothing is torn down) and is returned, naming the node. After a failed stage-in
/// (the job did not run) only the teardown runs.
pub fn stage_out(spaces: Dataspaces, job: &JobNode) -> Result<StagedOut> {
    let st = job.stager(spaces)?;
    let staged = std::fs::read_to_string(job.dir.join("result"))
        .is_ok_and(|t| parse_report(&job.node, &t).is_ok());
    if !staged {
        let teardown = st.teardown().map_err(|e| job.on_node(e))?;
        remove_empty_dirs(&st.spaces, job);
        return Ok(StagedOut {
            tasks: Vec::new(),
            teardown,
        });
    }
    let plan = Plan::read(&job.dir.join("plan")).map_err(|e| job.on_node(e))?;
    let mut errors = Vec::new();
    for step in &plan.steps {
        if let Step::Persist { op, location, user } = step
            && let Err(e) = persist::apply(&st.spaces, *op, location, user.as_deref())
        {
            errors.push(format!("{}: {e}", step.text()));
        }
    }
    let mut tasks = Vec::new();
    let outs = plan.steps.iter().filter(|s| matches!(s, Step::Out { .. }));
    for (k, step) in outs.enumerate() {
        let Step::Out { src, dst, mapping } = step else {
            continue;
        };
        let spec = TaskSpec {
            id: Some(format!("out-{}", k + 1)),
            direction: Direction::Out,
            src: src.clone(),
            dst: per_node_endpoint(dst, &job.node),
            mapping: *mapping,
        };
        match run_task(&st, &spec) {
            Ok(r) => tasks.push(r),
            Err(e) => errors.push(format!("{}: {e}", step.text())),
        }
    }
    if !errors.is_empty() {
        return Err(Error::OnNode {
            node: job.node.clone(),
            message: format!(
                "{}; nothing torn down: the job's data stays in {}",
                errors.join("; "),
                job.dir.display()
            ),
            class: ErrorClass::Io,
        });
    }
    let teardown = st.teardown().map_err(|e| job.on_node(e))?;
    remove_empty_dirs(&st.spaces, job);
    Ok(StagedOut { tasks, teardown })
}

/// After the teardown: the job's staging directory and the directories below it that are
/// now empty (never a file, never a dataspace's root; what cannot go stays).
fn remove_empty_dirs(spaces: &Dataspaces, job: &JobNode) {
    fn below(dir: &Path) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    below(&e.path());
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
    }
    let Ok(local) = std::fs::read_to_string(job.dir.join("local")) else {
        return;
    };
    let local = PathBuf::from(local.trim_end());
    below(&local);
    let is_root = spaces
        .spaces
        .values()
        .any(|d| d.dir() == Some(local.as_path()));
    if !is_root {
        let _ = std::fs::remove_dir(&local);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_parses_and_says_which_line_is_wrong() {
        let p = Plan::parse(
            "# job 7\nstage_in shared:in local:job7/in into spread=*.grib\n\
             stage_out local:job7/out shared:out/7\npersist share local:job7/s alice\n",
        )
        .unwrap();
        assert_eq!(
            p.steps[0],
            Step::In {
                src: "shared:in".into(),
                dst: "local:job7/in".into(),
                mapping: Mapping::Into,
                spread: Some("*.grib".into())
            }
        );
        assert_eq!(
            p.steps[0].text(),
            "#HAAR stage_in shared:in local:job7/in into spread=*.grib"
        );
        assert!(matches!(p.steps[2], Step::Persist { op: Op::Share, .. }));
        let e = Plan::parse("stage_in a\n").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        let e = Plan::parse("\nstage_out local:a shared:b spread=*\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("stage_in only"), "{e}");
        assert!(Plan::parse("stage_in a b sideways\n").is_err());
        assert!(Plan::parse("persist share local:x\n").is_err());
    }

    #[test]
    fn host_lists_expand_in_order_with_their_widths() {
        assert_eq!(hostlist("n[1-4]").unwrap(), ["n1", "n2", "n3", "n4"]);
        assert_eq!(
            hostlist("n[08-10,3],login1").unwrap(),
            ["n08", "n09", "n10", "n3", "login1"]
        );
        assert_eq!(hostlist("c[1-2]-ib").unwrap(), ["c1-ib", "c2-ib"]);
        assert!(hostlist("n[1-").is_err() && hostlist("n[3-1]").is_err());
        assert!(hostlist("n[1-2]]").is_err());
    }

    #[test]
    fn globs_and_spreading_deal_every_match_to_exactly_one_node() {
        assert!(glob_match("*.grib", "a.grib") && !glob_match("*.grib", "a.grib2"));
        assert!(glob_match("m??_*", "m01_x") && !glob_match("m??_*", "m1_x"));
        assert!(glob_match("*", "") && glob_match("a*b*c", "aXbYbc"));
        let names: Vec<String> = ["c.grib", "a.grib", "x.txt", "b.grib", "d.grib", "e.grib"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let got: Vec<Vec<&String>> = (0..3).map(|me| spread(&names, "*.grib", me, 3)).collect();
        assert_eq!(got[0], ["a.grib", "d.grib"]);
        assert_eq!(got[1], ["b.grib", "e.grib"]);
        assert_eq!(got[2], ["c.grib"]);
    }

    #[test]
    fn per_node_destinations_and_reports() {
        assert_eq!(per_node_endpoint("shared:out/7", "n2"), "shared:out/7/n2");
        assert_eq!(per_node_endpoint("shared:out/7/", "n2"), "shared:out/7/n2");
        assert_eq!(per_node_endpoint("shared:", "n2"), "shared:n2");
        assert!(parse_report("n1", "ok\n").is_ok());
        let e = parse_report("n3", "failed denied\n#HAAR stage_in a b: no\n").unwrap_err();
        assert_eq!(e.class(), ErrorClass::Denied);
        assert_eq!(e.to_string(), "on node n3: #HAAR stage_in a b: no");
    }
}
