//! From answers to advice: [`advise`] walks Fig. 9 and, where an AppDirect space exists,
//! Fig. 10, and turns the outcomes into an [`Advice`] with the reason, the set-up commands
//! (ipmctl / ndctl / mkfs / mount) and, where haar has a role, a haar configuration.
//!
//! Owns the wording of every recommendation and its set-up text. Must not change the trees
//! (the `tree` module) or the answers' meaning (the `questions` module).

use serde::Serialize;

use super::questions::{Answers, Modifiable, Question};
use super::tree::{FIG9, FIG10, Outcome, Step, Walk, walk};

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
    /// Where the tree says Memory mode (memory intensive): the App Direct alternative that
    /// needs no reboot, libvmmalloc's role, as a `haar run --heap` command.
    pub heap: Option<String>,
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
    let heap = heap_alternative(platform);
    Ok(Advice {
        platform,
        storage,
        configuration,
        path,
        reason,
        setup,
        haar_config,
        heap,
        unused,
    })
}

/// The heap on persistent memory without Memory mode (SC'19 §2.3, PMDK's libvmmalloc, here
/// `haar run --heap`), offered wherever Fig. 9 chooses Memory mode.
fn heap_alternative(platform: Outcome) -> Option<String> {
    matches!(
        platform,
        Outcome::PureMemoryMode | Outcome::MemoryModeWithAppDirect
    )
    .then(|| {
        "haar run --heap /mnt/pmem_fsdax0:SIZE -- ./app ARGS   # on an fsdax mount in App \
         Direct mode; SIZE per process"
            .to_string()
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
                "scripts/slurm-serve.sh --root /mnt/pmem_fsdax0/haar --backend pmem --replicas 2 \
                 -- scripts/slurm-mount.sh --mountpoint /mnt/haarfs -- srun ./app ARGS   # \
                 haar mount on every node over the nodes' haar servers (GekkoFS's role): one \
                 namespace, file chunks spread over the nodes' persistent memory, stage data in \
                 and out with haar stage"
                    .into(),
            );
            (
                format!("{mode_prefix} (GekkoFS)"),
                format!(
                    "processes on different nodes share files (global I/O) and the application \
                     is used unmodified or performance is not the goal{undesirable}: a \
                     distributed file system over the nodes' persistent memory gives one \
                     namespace without code changes (`haar mount` over a server per node, as \
                     GekkoFS does)"
                ),
                setup,
                Some(posix_config("/mnt/haarfs/haar")),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::{IoPattern, table3};

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
        assert!(
            adv.heap
                .unwrap()
                .starts_with("haar run --heap /mnt/pmem_fsdax0:SIZE -- ")
        );
        // The distributed file system is haar's own, one mount per node over its servers.
        assert!(
            adv.setup
                .iter()
                .any(|l| l.contains("scripts/slurm-mount.sh --mountpoint")),
            "{:?}",
            adv.setup
        );
    }

    #[test]
    fn the_heap_command_is_offered_exactly_where_the_tree_says_memory_mode() {
        for m in [true, false] {
            for i in [true, false] {
                let a = Answers {
                    memory_intensive: Some(m),
                    io_intensive: Some(i),
                    io_pattern: i.then_some(IoPattern::Local),
                    modifiable: i.then_some(Modifiable::No),
                    ..Answers::default()
                };
                let adv = advise(&a).unwrap();
                assert_eq!(adv.heap.is_some(), m, "memory intensive {m}, io {i}");
                assert_eq!(
                    adv.heap.is_some(),
                    adv.configuration.starts_with("Memory mode"),
                    "{}",
                    adv.configuration
                );
            }
        }
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
}
