//! The two decision trees as data: [`FIG9`] (platform mode) and [`FIG10`] (use of the
//! AppDirect space), their leaves ([`Outcome`]) in the figures' words, and [`walk`], which
//! follows one tree with the given answers.
//!
//! Owns the trees' shape, exactly as printed in the paper. Must not word advice or set-up
//! commands (the `advice` module does) nor parse answers.

use serde::{Deserialize, Serialize};

use super::questions::{Answers, Question};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
