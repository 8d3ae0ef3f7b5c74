//! The B-APM configuration advisor: the two decision trees of Weiland & Homölle, "Usage
//! Scenarios for Byte-Addressable Persistent Memory in High-Performance and Data Intensive
//! Computing" (JCST 2021), Figs. 9 and 10, encoded as data.
//!
//! This module is pure: answers in, advice out. It owns the trees, the consistency rules for
//! answers and the set-up text of each outcome; it reads no files and asks no questions (the
//! CLI does both and feeds [`Answers`] in, asking for whatever [`Walk::Missing`] names).
//!
//! Fig. 9 chooses the platform mode from two questions (memory intensive? I/O intensive?).
//! Whenever an AppDirect space exists (pure AppDirect, or Memory mode with an AppDirect space),
//! Fig. 10 chooses how to use it from the I/O pattern (local I/O? global I/O?), whether the
//! application can be modified and whether I/O performance is critical.

use serde::{Deserialize, Serialize};

/// A yes/no question of either tree, worded as in the figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Question {
    /// Fig. 9: "Memory intensive?"
    MemoryIntensive,
    /// Fig. 9: "I/O intensive?"
    IoIntensive,
    /// Fig. 10: "Local I/O?" (each process reads and writes only its own data).
    LocalIo,
    /// Fig. 10: "Global I/O?" (processes on different sockets or nodes share files).
    GlobalIo,
    /// Fig. 10: "Application modifiable?"
    Modifiable,
    /// Fig. 10: "Performance critical?" (Table 3: "I/O perf. critical?").
    PerformanceCritical,
}

impl Question {
    /// The wording used in the paper's figure.
    pub fn text(self) -> &'static str {
        match self {
            Question::MemoryIntensive => "Memory intensive?",
            Question::IoIntensive => "I/O intensive?",
            Question::LocalIo => "Local I/O?",
            Question::GlobalIo => "Global I/O?",
            Question::Modifiable => "Application modifiable?",
            Question::PerformanceCritical => "Performance critical?",
        }
    }

    /// The command-line flag (and answer-file key) that answers it. `LocalIo` and `GlobalIo`
    /// are both answered by `--io-pattern`.
    pub fn flag(self) -> &'static str {
        match self {
            Question::MemoryIntensive => "--memory-intensive",
            Question::IoIntensive => "--io-intensive",
            Question::LocalIo | Question::GlobalIo => "--io-pattern",
            Question::Modifiable => "--modifiable",
            Question::PerformanceCritical => "--performance-critical",
        }
    }
}

/// Where the application's I/O goes (answers both "Local I/O?" and "Global I/O?").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoPattern {
    /// Each process reads and writes only its own files (e.g. OpenFOAM's uncollated output).
    Local,
    /// Processes on different sockets or nodes read or write the same files (e.g. FDB5).
    Global,
    /// Both (e.g. IO500: IOR easy is file-per-process, IOR hard a single shared file).
    Both,
}

impl IoPattern {
    /// Parses `local`, `global` or `both` (also `local+global`, as Table 3 writes it).
    pub fn parse(s: &str) -> Option<IoPattern> {
        match s.trim().to_ascii_lowercase().as_str() {
            "local" => Some(IoPattern::Local),
            "global" => Some(IoPattern::Global),
            "both" | "local+global" | "local + global" => Some(IoPattern::Both),
            _ => None,
        }
    }
}

/// Whether the application can be changed. Table 3 answers simpleFoam with "yes in principle,
/// but undesirable", which the tree follows as "no".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Modifiable {
    /// Code changes are possible and acceptable.
    Yes,
    /// Code changes are impossible.
    No,
    /// Possible in principle but undesirable: treated as "no".
    Undesirable,
}

impl Modifiable {
    /// Parses `yes`, `no` or `undesirable`.
    pub fn parse(s: &str) -> Option<Modifiable> {
        match s.trim().to_ascii_lowercase().as_str() {
            "undesirable" => Some(Modifiable::Undesirable),
            other => parse_yes_no(other).map(|b| if b { Modifiable::Yes } else { Modifiable::No }),
        }
    }
}

/// Parses `yes`/`no` (also `y`/`n`, `true`/`false`), case-insensitive.
pub fn parse_yes_no(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "yes" | "y" | "true" => Some(true),
        "no" | "n" | "false" => Some(false),
        _ => None,
    }
}

/// What is known about the application. Every answer is optional: the walk stops at the first
/// question that is needed and not answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answers {
    /// Does the application need more memory than DRAM offers (or would it run on fewer nodes
    /// with more memory)?
    pub memory_intensive: Option<bool>,
    /// Is I/O a significant part of its run time or a source of variability?
    pub io_intensive: Option<bool>,
    /// Local, global or both.
    pub io_pattern: Option<IoPattern>,
    /// Can the application be changed?
    pub modifiable: Option<Modifiable>,
    /// Is I/O performance critical (rather than, say, reducing variability)?
    pub performance_critical: Option<bool>,
}

impl Answers {
    /// The answer to one yes/no question, if known.
    pub fn get(&self, q: Question) -> Option<bool> {
        match q {
            Question::MemoryIntensive => self.memory_intensive,
            Question::IoIntensive => self.io_intensive,
            Question::LocalIo => self
                .io_pattern
                .map(|p| matches!(p, IoPattern::Local | IoPattern::Both)),
            Question::GlobalIo => self
                .io_pattern
                .map(|p| matches!(p, IoPattern::Global | IoPattern::Both)),
            Question::Modifiable => self.modifiable.map(|m| m == Modifiable::Yes),
            Question::PerformanceCritical => self.performance_critical,
        }
    }

    /// Answers that contradict each other, each as a sentence naming the flags involved.
    pub fn contradictions(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.io_intensive == Some(false) {
            if let Some(p) = self.io_pattern {
                out.push(format!(
                    "--io-intensive no contradicts --io-pattern {}: an application without \
                     significant I/O has no I/O pattern to place on persistent memory \
                     (drop --io-pattern, or answer --io-intensive yes)",
                    pattern_word(p)
                ));
            }
            if self.performance_critical == Some(true) {
                out.push(
                    "--io-intensive no contradicts --performance-critical yes: the question is \
                     whether I/O performance is critical (Table 3: \"I/O perf. critical?\"), \
                     which cannot be for an application that is not I/O intensive"
                        .to_string(),
                );
            }
        }
        out
    }

    /// Merges `other` into `self`: answers given in only one are taken; answers given in both
    /// must agree. Returns the disagreements, naming `self_src` and `other_src`.
    pub fn merge(&mut self, other: &Answers, self_src: &str, other_src: &str) -> Vec<String> {
        let mut conflicts = Vec::new();
        fn take<T: PartialEq + Copy + std::fmt::Debug>(
            mine: &mut Option<T>,
            theirs: Option<T>,
            name: &str,
            a: &str,
            b: &str,
            conflicts: &mut Vec<String>,
        ) {
            match (*mine, theirs) {
                (Some(x), Some(y)) if x != y => conflicts.push(format!(
                    "{name}: {a} says {}, {b} says {}",
                    show(x),
                    show(y)
                )),
                (None, Some(y)) => *mine = Some(y),
                _ => {}
            }
        }
        fn show<T: std::fmt::Debug>(v: T) -> String {
            let s = format!("{v:?}").to_ascii_lowercase();
            match s.as_str() {
                "true" => "yes".into(),
                "false" => "no".into(),
                _ => s,
            }
        }
        let (a, b) = (self_src, other_src);
        take(
            &mut self.memory_intensive,
            other.memory_intensive,
            "memory_intensive",
            a,
            b,
            &mut conflicts,
        );
        take(
            &mut self.io_intensive,
            other.io_intensive,
            "io_intensive",
            a,
            b,
            &mut conflicts,
        );
        take(
            &mut self.io_pattern,
            other.io_pattern,
            "io_pattern",
            a,
            b,
            &mut conflicts,
        );
        take(
            &mut self.modifiable,
            other.modifiable,
            "modifiable",
            a,
            b,
            &mut conflicts,
        );
        take(
            &mut self.performance_critical,
            other.performance_critical,
            "performance_critical",
            a,
            b,
            &mut conflicts,
        );
        conflicts
    }
}

/// Reads an answer file: a JSON object with any of `memory_intensive`, `io_intensive`,
/// `io_pattern`, `modifiable`, `performance_critical` (dashes accepted for underscores; yes/no
/// as JSON booleans or strings), plus optional free-text `application` and `comment`.
///
/// # Errors
/// A message naming the key and the value that is not understood, or the unknown key.
pub fn answers_from_json(text: &str) -> Result<Answers, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or("the answer file must hold one JSON object")?;
    let mut a = Answers::default();
    for (key, val) in obj {
        let key_norm = key.replace('-', "_");
        let word = match val {
            serde_json::Value::Bool(b) => (if *b { "yes" } else { "no" }).to_string(),
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => continue,
            other => other.to_string(),
        };
        let bad = |expected: &str| format!("{key}: {word:?} is not understood ({expected})");
        match key_norm.as_str() {
            "application" | "comment" | "name" => {}
            "memory_intensive" => {
                a.memory_intensive = Some(parse_yes_no(&word).ok_or_else(|| bad("yes or no"))?)
            }
            "io_intensive" => {
                a.io_intensive = Some(parse_yes_no(&word).ok_or_else(|| bad("yes or no"))?)
            }
            "performance_critical" => {
                a.performance_critical = Some(parse_yes_no(&word).ok_or_else(|| bad("yes or no"))?)
            }
            "io_pattern" => {
                a.io_pattern =
                    Some(IoPattern::parse(&word).ok_or_else(|| bad("local, global or both"))?)
            }
            "modifiable" => {
                a.modifiable =
                    Some(Modifiable::parse(&word).ok_or_else(|| bad("yes, no or undesirable"))?)
            }
            _ => {
                return Err(format!(
                    "unknown key {key:?}: use memory_intensive, io_intensive, io_pattern, \
                     modifiable, performance_critical (and optionally application, comment)"
                ));
            }
        }
    }
    Ok(a)
}

fn pattern_word(p: IoPattern) -> &'static str {
    match p {
        IoPattern::Local => "local",
        IoPattern::Global => "global",
        IoPattern::Both => "both",
    }
}

/// An outcome of either tree, worded as in the figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Fig. 9: "Use pure Memory mode".
    PureMemoryMode,
    /// Fig. 9: "Use Memory mode with AppDirect space".
    MemoryModeWithAppDirect,
    /// Fig. 9: "Use pure AppDirect mode".
    PureAppDirect,
    /// Fig. 9: "B-APM not needed".
    NotNeeded,
    /// Fig. 10: "Use fsdax".
    Fsdax,
    /// Fig. 10: "Use distributed FS (e.g. GekkoFS)".
    DistributedFs,
    /// Fig. 10: "Use PMDK".
    Pmdk,
    /// Fig. 10: "Use PMDK and/or separate namespaces".
    PmdkOrSeparateNamespaces,
    /// Fig. 10: "No need for B-APM".
    NoNeedForStorage,
}

impl Outcome {
    /// The wording of the figure's leaf.
    pub fn text(self) -> &'static str {
        match self {
            Outcome::PureMemoryMode => "Use pure Memory mode",
            Outcome::MemoryModeWithAppDirect => "Use Memory mode with AppDirect space",
            Outcome::PureAppDirect => "Use pure AppDirect mode",
            Outcome::NotNeeded => "B-APM not needed",
            Outcome::Fsdax => "Use fsdax",
            Outcome::DistributedFs => "Use distributed FS (e.g. GekkoFS)",
            Outcome::Pmdk => "Use PMDK",
            Outcome::PmdkOrSeparateNamespaces => "Use PMDK and/or separate namespaces",
            Outcome::NoNeedForStorage => "No need for B-APM",
        }
    }

    /// Whether this Fig. 9 outcome creates an AppDirect space, so that Fig. 10 applies.
    pub fn has_app_direct(self) -> bool {
        matches!(
            self,
            Outcome::PureAppDirect | Outcome::MemoryModeWithAppDirect
        )
    }
}

/// A node of a decision tree: a yes/no question or a leaf.
#[derive(Debug)]
pub enum Node {
    /// Ask `question`; follow `yes` or `no`.
    Ask {
        /// The question.
        question: Question,
        /// Subtree for "yes".
        yes: &'static Node,
        /// Subtree for "no".
        no: &'static Node,
    },
    /// A recommendation.
    Leaf(Outcome),
}

/// Fig. 9: "Decision tree to choose the configuration of the B-APM based on the needs of an
/// application".
pub static FIG9: Node = Node::Ask {
    question: Question::MemoryIntensive,
    yes: &Node::Ask {
        question: Question::IoIntensive,
        yes: &Node::Leaf(Outcome::MemoryModeWithAppDirect),
        no: &Node::Leaf(Outcome::PureMemoryMode),
    },
    no: &Node::Ask {
        question: Question::IoIntensive,
        yes: &Node::Leaf(Outcome::PureAppDirect),
        no: &Node::Leaf(Outcome::NotNeeded),
    },
};

/// The part of Fig. 10 below an I/O pattern: modifiable? then performance critical?
/// `best` is the leaf for "modifiable and performance critical"; every other answer keeps the
/// unmodified application on a file system (`unmodified`).
macro_rules! fig10_subtree {
    ($unmodified:expr, $best:expr) => {
        &Node::Ask {
            question: Question::Modifiable,
            no: &Node::Leaf($unmodified),
            yes: &Node::Ask {
                question: Question::PerformanceCritical,
                no: &Node::Leaf($unmodified),
                yes: &Node::Leaf($best),
            },
        }
    };
}

/// Fig. 10: "Options for using the AppDirect space for I/O intensive applications, depending on
/// the I/O patterns, whether the application can be modified, and whether optimal performance
/// is desired".
pub static FIG10: Node = Node::Ask {
    question: Question::LocalIo,
    yes: &Node::Ask {
        question: Question::GlobalIo,
        no: fig10_subtree!(Outcome::Fsdax, Outcome::Pmdk),
        yes: fig10_subtree!(Outcome::DistributedFs, Outcome::PmdkOrSeparateNamespaces),
    },
    no: &Node::Ask {
        question: Question::GlobalIo,
        no: &Node::Leaf(Outcome::NoNeedForStorage),
        yes: fig10_subtree!(Outcome::DistributedFs, Outcome::Pmdk),
    },
};

/// One step of a walk: which tree, the question and the answer taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// "Fig. 9" or "Fig. 10".
    pub figure: &'static str,
    /// The question.
    pub question: Question,
    /// Its wording.
    pub text: &'static str,
    /// The answer followed.
    pub answer: bool,
}

/// The result of walking one tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walk {
    /// Reached a leaf.
    Done(Vec<Step>, Outcome),
    /// Stopped at a question with no answer (the steps taken so far are included).
    Missing(Vec<Step>, Question),
}

/// Walks `tree` with `answers`.
pub fn walk(tree: &'static Node, figure: &'static str, answers: &Answers) -> Walk {
    let mut steps = Vec::new();
    let mut node = tree;
    loop {
        match node {
            Node::Leaf(o) => return Walk::Done(steps, *o),
            Node::Ask { question, yes, no } => match answers.get(*question) {
                None => return Walk::Missing(steps, *question),
                Some(a) => {
                    steps.push(Step {
                        figure,
                        question: *question,
                        text: question.text(),
                        answer: a,
                    });
                    node = if a { yes } else { no };
                }
            },
        }
    }
}

/// Why advice could not be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdviceError {
    /// The answers contradict each other (each entry says how).
    Contradictory(Vec<String>),
    /// A question on the path is unanswered.
    Missing(Question),
}

impl std::fmt::Display for AdviceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdviceError::Contradictory(c) => {
                write!(f, "contradictory answers: {}", c.join("; "))
            }
            AdviceError::Missing(q) => write!(
                f,
                "the question \"{}\" is not answered: give {}",
                q.text(),
                q.flag()
            ),
        }
    }
}

/// The recommendation, with the path through both trees and how to set it up.
#[derive(Debug, Clone, Serialize)]
pub struct Advice {
    /// Fig. 9's outcome.
    pub platform: Outcome,
    /// Fig. 10's outcome, when an AppDirect space exists.
    pub storage: Option<Outcome>,
    /// The configuration in Table 3's words, e.g. "AppDirect (fsdax)".
    pub configuration: String,
    /// Every question asked and the answer taken, Fig. 9 first.
    pub path: Vec<Step>,
    /// Why this configuration.
    pub reason: String,
    /// Commands to set the machine up (ipmctl / ndctl / mkfs / mount).
    pub setup: Vec<String>,
    /// A haar configuration file for this setup, when haar has a role in it.
    pub haar_config: Option<String>,
    /// Answers given that the path did not use.
    pub unused: Vec<Question>,
}

/// Walks Fig. 9 and, when it yields an AppDirect space, Fig. 10.
///
/// # Errors
/// [`AdviceError::Contradictory`] before anything else; [`AdviceError::Missing`] naming the
/// first unanswered question on the path.
pub fn advise(answers: &Answers) -> Result<Advice, AdviceError> {
    let c = answers.contradictions();
    if !c.is_empty() {
        return Err(AdviceError::Contradictory(c));
    }
    let (mut path, platform) = match walk(&FIG9, "Fig. 9", answers) {
        Walk::Done(s, o) => (s, o),
        Walk::Missing(_, q) => return Err(AdviceError::Missing(q)),
    };
    let storage = if platform.has_app_direct() {
        match walk(&FIG10, "Fig. 10", answers) {
            Walk::Done(s, o) => {
                path.extend(s);
                Some(o)
            }
            Walk::Missing(_, q) => return Err(AdviceError::Missing(q)),
        }
    } else {
        None
    };
    let asked = |q: Question| path.iter().any(|s| s.question == q);
    let mut unused = Vec::new();
    if answers.io_pattern.is_some() && !asked(Question::LocalIo) {
        unused.push(Question::LocalIo);
    }
    for (q, given) in [
        (Question::Modifiable, answers.modifiable.is_some()),
        (
            Question::PerformanceCritical,
            answers.performance_critical.is_some(),
        ),
    ] {
        if given && !asked(q) {
            unused.push(q);
        }
    }
    let (configuration, reason, setup, haar_config) = describe(platform, storage, answers);
    Ok(Advice {
        platform,
        storage,
        configuration,
        path,
        reason,
        setup,
        haar_config,
        unused,
    })
}

const GOAL_APP_DIRECT: &str = "ipmctl create -goal PersistentMemoryType=AppDirect   # then reboot";
const GOAL_MEMORY: &str = "ipmctl create -goal MemoryMode=100   # then reboot";
const GOAL_MIXED: &str = "ipmctl create -goal MemoryMode=33 PersistentMemoryType=AppDirect   # e.g. 1 of 3 TB as memory; then reboot";
const SHOW: &str = "ipmctl show -memoryresources   # check the capacities after the reboot";

fn fsdax_setup() -> Vec<String> {
    [
        "ndctl create-namespace --mode=fsdax --region=region0   # socket 0; repeat with region1",
        "mkfs.ext4 /dev/pmem0   # or mkfs.xfs -m reflink=0 /dev/pmem0",
        "mkdir -p /mnt/pmem_fsdax0 && mount -o dax /dev/pmem0 /mnt/pmem_fsdax0   # xfs: -o dax=always",
        "haar advise --probe   # should now list the DAX mount",
    ]
    .map(String::from)
    .to_vec()
}

fn pmem_config(roots: &str) -> String {
    format!("backend: pmem\nroots: [{roots}]\npool_size: 1073741824   # grows on demand\n")
}

fn posix_config(root: &str) -> String {
    format!("backend: posix\nroots: [{root}]\nfsync: always\n")
}

/// Configuration name, reason, set-up commands and haar configuration of an outcome.
fn describe(
    platform: Outcome,
    storage: Option<Outcome>,
    a: &Answers,
) -> (String, String, Vec<String>, Option<String>) {
    let undesirable = if a.modifiable == Some(Modifiable::Undesirable) {
        " (code changes are possible in principle but undesirable, so the tree follows \"no\")"
    } else {
        ""
    };
    let mode_prefix = match platform {
        Outcome::MemoryModeWithAppDirect => "Memory mode with AppDirect space",
        _ => "AppDirect",
    };
    let mut setup = vec![
        match platform {
            Outcome::PureMemoryMode => GOAL_MEMORY,
            Outcome::MemoryModeWithAppDirect => GOAL_MIXED,
            _ => GOAL_APP_DIRECT,
        }
        .to_string(),
    ];
    setup.push(SHOW.into());
    match (platform, storage) {
        (Outcome::PureMemoryMode, _) => (
            "Memory mode".into(),
            "memory intensive but not I/O intensive: Memory mode makes the persistent memory \
             main memory (DRAM becomes a direct-mapped cache in front of it), transparently, \
             with no change to the application; run on fewer nodes for better parallel \
             efficiency, and expect the STREAM cache cliff once the working set exceeds DRAM \
             (check with `haar stream --sweep`)"
                .into(),
            {
                setup.push(
                    "haar advise --probe   # MemTotal should now be about the PMem capacity".into(),
                );
                setup
            },
            None,
        ),
        (Outcome::NotNeeded, _) => (
            "no B-APM".into(),
            "neither memory nor I/O intensive: persistent memory brings this application \
             nothing; run it on ordinary DRAM nodes"
                .into(),
            Vec::new(),
            None,
        ),
        (_, Some(Outcome::Fsdax)) => {
            setup.extend(fsdax_setup());
            setup.push(
                "cp -r /path/to/input /mnt/pmem_fsdax0/   # input on every node; write output \
                 there and copy it back to the parallel file system at the end"
                    .into(),
            );
            (
                format!("{mode_prefix} (fsdax)"),
                format!(
                    "I/O stays on the node (local I/O) and the application is used unmodified \
                     or performance is not the goal{undesirable}: write to an fsdax file system \
                     on each node's persistent memory and copy results back at the end; no \
                     code changes, and node-local writes avoid network contention"
                ),
                setup,
                Some(posix_config("/mnt/pmem_fsdax0/haar")),
            )
        }
        (_, Some(Outcome::DistributedFs)) => {
            setup.extend(fsdax_setup());
            setup.push(
                "# start an ad-hoc distributed file system over the nodes' fsdax mounts for the \
                 job (e.g. GekkoFS: gkfs_daemon per node, LD_PRELOAD=libgkfs_intercept.so), \
                 stage data in and out"
                    .into(),
            );
            (
                format!("{mode_prefix} (GekkoFS)"),
                format!(
                    "processes on different nodes share files (global I/O) and the application \
                     is used unmodified or performance is not the goal{undesirable}: a \
                     distributed file system over the nodes' persistent memory gives one \
                     namespace without code changes"
                ),
                setup,
                Some(posix_config("/mnt/gekkofs/haar")),
            )
        }
        (_, Some(Outcome::Pmdk)) => {
            setup.extend(fsdax_setup());
            (
                format!("{mode_prefix} (PMDK)"),
                "the application can be changed and I/O performance is critical: access the \
                 persistent memory directly with loads, stores and cache flushes (as FDB5's \
                 PMDK backend did, and haar's pmem backend does), distributing data across \
                 nodes with the application's own knowledge of its access pattern"
                    .into(),
                setup,
                Some(pmem_config("/mnt/pmem_fsdax0/haar")),
            )
        }
        (_, Some(Outcome::PmdkOrSeparateNamespaces)) => {
            setup.extend(fsdax_setup());
            (
                format!("{mode_prefix} (PMDK and/or separate namespaces)"),
                "both local and global I/O, the application can be changed and performance is \
                 critical: give each pattern its own namespace (one per socket keeps NUMA \
                 locality) and access them directly through PMDK-style loads and stores"
                    .into(),
                setup,
                Some(pmem_config("/mnt/pmem_fsdax0/haar, /mnt/pmem_fsdax1/haar")),
            )
        }
        (_, other) => (
            "no B-APM".into(),
            format!(
                "the AppDirect space is not needed: {}",
                other.map_or("no I/O pattern", |o| o.text())
            ),
            Vec::new(),
            None,
        ),
    }
}

/// One of the paper's worked cases (Table 3), with the paper's chosen configuration.
#[derive(Debug, Clone)]
pub struct WorkedCase {
    /// Application name.
    pub application: &'static str,
    /// The answers of Table 3's row.
    pub answers: Answers,
    /// Table 3's "Chosen configuration" column, verbatim.
    pub paper_answer: &'static str,
}

/// Table 3 of the paper: "Summary of the applications and related usage scenarios showcased in
/// this paper". Answers "n/a" are left unanswered.
pub fn table3() -> Vec<WorkedCase> {
    let memory_only = Answers {
        memory_intensive: Some(true),
        io_intensive: Some(false),
        ..Answers::default()
    };
    let io = |pattern, modifiable, critical| Answers {
        memory_intensive: Some(false),
        io_intensive: Some(true),
        io_pattern: Some(pattern),
        modifiable: Some(modifiable),
        performance_critical: Some(critical),
    };
    vec![
        WorkedCase {
            application: "CASTEP",
            answers: memory_only.clone(),
            paper_answer: "Memory mode",
        },
        WorkedCase {
            application: "snappyHexMesh",
            answers: memory_only,
            paper_answer: "Memory mode",
        },
        WorkedCase {
            application: "simpleFoam",
            answers: io(IoPattern::Local, Modifiable::Undesirable, true),
            // The paper's table says "fstdax", a typo for fsdax (its text: "write to fsdax").
            paper_answer: "AppDirect (fstdax)",
        },
        WorkedCase {
            application: "IO500",
            answers: io(IoPattern::Both, Modifiable::No, true),
            paper_answer: "AppDirect (GekkoFS)",
        },
        WorkedCase {
            application: "MONC ensemble",
            answers: io(IoPattern::Local, Modifiable::Yes, false),
            paper_answer: "AppDirect (fstdax)",
        },
        WorkedCase {
            application: "FDB5",
            answers: io(IoPattern::Global, Modifiable::Yes, true),
            paper_answer: "AppDirect (PMDK)",
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Table 3 of the paper, quoted:
    ///
    /// ```text
    /// Application    Memory    I/O        I/O access      Code changes        I/O perf.  Chosen
    ///                intensive intensive  pattern         possible?           critical?  configuration
    /// CASTEP         yes       no         n/a             n/a                 n/a        Memory mode
    /// snappyHexMesh  yes       no         n/a             n/a                 n/a        Memory mode
    /// simpleFoam     no        yes        local           yes in principle,   yes        AppDirect (fstdax)
    ///                                                     but undesirable
    /// IO500          no        yes        local + global  no                  yes        AppDirect (GekkoFS)
    /// MONC ensemble  no        yes        local           yes                 no         AppDirect (fstdax)
    /// FDB5           no        yes        global          yes                 yes        AppDirect (PMDK)
    /// ```
    #[test]
    fn table3_worked_cases_give_the_papers_answers() {
        let cases = table3();
        assert_eq!(cases.len(), 6);
        for case in cases {
            let advice =
                advise(&case.answers).unwrap_or_else(|e| panic!("{}: {e}", case.application));
            // The paper's "fstdax" is a typo for fsdax.
            let expected = case.paper_answer.replace("fstdax", "fsdax");
            assert_eq!(advice.configuration, expected, "{}", case.application);
        }
    }

    #[test]
    fn worked_cases_follow_the_papers_paths() {
        let by_name = |n: &str| table3().into_iter().find(|c| c.application == n).unwrap();
        // Section 5.2, MONC: "a pure AppDirect configuration should be chosen. Next, Figure 10
        // ... we therefore choose to simply write the output data to fsdax".
        let monc = advise(&by_name("MONC ensemble").answers).unwrap();
        assert_eq!(monc.platform, Outcome::PureAppDirect);
        assert_eq!(monc.storage, Some(Outcome::Fsdax));
        let qs: Vec<_> = monc
            .path
            .iter()
            .map(|s| (s.figure, s.question, s.answer))
            .collect();
        assert_eq!(
            qs,
            vec![
                ("Fig. 9", Question::MemoryIntensive, false),
                ("Fig. 9", Question::IoIntensive, true),
                ("Fig. 10", Question::LocalIo, true),
                ("Fig. 10", Question::GlobalIo, false),
                ("Fig. 10", Question::Modifiable, true),
                ("Fig. 10", Question::PerformanceCritical, false),
            ]
        );
        // Section 5.1, snappyHexMesh: "memory intensive, but not I/O intensive, using a pure
        // Memory mode setup".
        let shm = advise(&by_name("snappyHexMesh").answers).unwrap();
        assert_eq!(shm.platform, Outcome::PureMemoryMode);
        assert_eq!(shm.storage, None);
        assert_eq!(shm.path.len(), 2);
        // simpleFoam: unmodifiable in practice, so "Performance critical?" is never asked.
        let sf = advise(&by_name("simpleFoam").answers).unwrap();
        assert!(
            sf.path
                .iter()
                .all(|s| s.question != Question::PerformanceCritical)
        );
        assert!(sf.reason.contains("undesirable"), "{}", sf.reason);
        assert_eq!(sf.unused, vec![Question::PerformanceCritical]);
    }

    /// Fig. 10's printed leaves, in the figure's order, are: fsdax, fsdax, GekkoFS ×4, PMDK,
    /// PMDK and/or separate namespaces, PMDK, "No need for B-APM": the encoded tree has exactly
    /// that multiset of leaves.
    #[test]
    fn fig10_has_the_figures_leaves() {
        fn leaves(n: &Node, out: &mut Vec<Outcome>) {
            match n {
                Node::Leaf(o) => out.push(*o),
                Node::Ask { yes, no, .. } => {
                    leaves(yes, out);
                    leaves(no, out);
                }
            }
        }
        let mut got = Vec::new();
        leaves(&FIG10, &mut got);
        let count = |o| got.iter().filter(|&&x| x == o).count();
        assert_eq!(got.len(), 10);
        assert_eq!(count(Outcome::Fsdax), 2);
        assert_eq!(count(Outcome::DistributedFs), 4);
        assert_eq!(count(Outcome::Pmdk), 2);
        assert_eq!(count(Outcome::PmdkOrSeparateNamespaces), 1);
        assert_eq!(count(Outcome::NoNeedForStorage), 1);
        let mut fig9 = Vec::new();
        leaves(&FIG9, &mut fig9);
        assert_eq!(fig9.len(), 4);
    }

    #[test]
    fn every_complete_answer_set_gets_advice_or_a_contradiction() {
        let bools = [Some(true), Some(false), None];
        let patterns = [
            Some(IoPattern::Local),
            Some(IoPattern::Global),
            Some(IoPattern::Both),
            None,
        ];
        let mods = [
            Some(Modifiable::Yes),
            Some(Modifiable::No),
            Some(Modifiable::Undesirable),
            None,
        ];
        for m in bools {
            for i in bools {
                for p in patterns {
                    for md in mods {
                        for c in bools {
                            let a = Answers {
                                memory_intensive: m,
                                io_intensive: i,
                                io_pattern: p,
                                modifiable: md,
                                performance_critical: c,
                            };
                            match advise(&a) {
                                Ok(adv) => {
                                    assert!(!adv.configuration.is_empty());
                                    assert!(!adv.path.is_empty());
                                    if adv.storage.is_some() {
                                        assert_eq!(i, Some(true));
                                    }
                                }
                                Err(AdviceError::Missing(q)) => assert!(a.get(q).is_none()),
                                Err(AdviceError::Contradictory(c)) => {
                                    assert_eq!(i, Some(false));
                                    assert!(!c.is_empty());
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn contradictions_are_named() {
        let a = Answers {
            memory_intensive: Some(false),
            io_intensive: Some(false),
            io_pattern: Some(IoPattern::Global),
            performance_critical: Some(true),
            ..Answers::default()
        };
        let Err(AdviceError::Contradictory(c)) = advise(&a) else {
            panic!("not contradictory")
        };
        assert_eq!(c.len(), 2);
        assert!(c[0].contains("--io-pattern global"), "{}", c[0]);
        assert!(c[1].contains("--performance-critical yes"), "{}", c[1]);
    }

    #[test]
    fn missing_answers_name_the_next_question_on_the_path() {
        let mut a = Answers::default();
        assert_eq!(
            advise(&a).unwrap_err(),
            AdviceError::Missing(Question::MemoryIntensive)
        );
        a.memory_intensive = Some(true);
        assert_eq!(
            advise(&a).unwrap_err(),
            AdviceError::Missing(Question::IoIntensive)
        );
        a.io_intensive = Some(true);
        assert_eq!(
            advise(&a).unwrap_err(),
            AdviceError::Missing(Question::LocalIo)
        );
        a.io_pattern = Some(IoPattern::Global);
        assert_eq!(
            advise(&a).unwrap_err(),
            AdviceError::Missing(Question::Modifiable)
        );
        a.modifiable = Some(Modifiable::No);
        let adv = advise(&a).unwrap();
        assert_eq!(adv.platform, Outcome::MemoryModeWithAppDirect);
        assert_eq!(
            adv.configuration,
            "Memory mode with AppDirect space (GekkoFS)"
        );
        assert!(adv.setup[0].contains("MemoryMode=33"));
    }

    #[test]
    fn merge_takes_missing_answers_and_reports_disagreements() {
        let mut flags = Answers {
            memory_intensive: Some(true),
            ..Answers::default()
        };
        let file = Answers {
            memory_intensive: Some(false),
            io_intensive: Some(false),
            ..Answers::default()
        };
        let c = flags.merge(&file, "the flags", "answers.json");
        assert_eq!(flags.io_intensive, Some(false));
        assert_eq!(
            c,
            vec!["memory_intensive: the flags says yes, answers.json says no"]
        );
    }

    #[test]
    fn haar_config_snippets_parse_as_haar_configurations() {
        for case in table3() {
            let adv = advise(&case.answers).unwrap();
            if let Some(cfg) = adv.haar_config {
                let parsed: haar_store::Config = serde_yaml_ng::from_str(&cfg)
                    .unwrap_or_else(|e| panic!("{}: {e}\n{cfg}", case.application));
                assert!(!parsed.roots.is_empty());
            }
        }
    }

    #[test]
    fn answer_files_accept_booleans_words_and_dashes() {
        let a = answers_from_json(
            r#"{"application": "FDB5", "memory-intensive": false, "io_intensive": "yes",
                "io_pattern": "global", "modifiable": true, "performance_critical": "yes"}"#,
        )
        .unwrap();
        assert_eq!(advise(&a).unwrap().configuration, "AppDirect (PMDK)");
        assert!(
            answers_from_json(r#"{"io_pattern": "sideways"}"#)
                .unwrap_err()
                .contains("io_pattern")
        );
        assert!(
            answers_from_json(r#"{"colour": "red"}"#)
                .unwrap_err()
                .contains("colour")
        );
        assert!(answers_from_json("[1]").is_err());
        assert!(answers_from_json("{").unwrap_err().contains("JSON"));
    }

    #[test]
    fn parsers_accept_the_documented_words() {
        assert_eq!(IoPattern::parse("Local + Global"), Some(IoPattern::Both));
        assert_eq!(IoPattern::parse("nowhere"), None);
        assert_eq!(
            Modifiable::parse("undesirable"),
            Some(Modifiable::Undesirable)
        );
        assert_eq!(Modifiable::parse("YES"), Some(Modifiable::Yes));
        assert_eq!(parse_yes_no("n"), Some(false));
        assert_eq!(parse_yes_no("maybe"), None);
    }
}
