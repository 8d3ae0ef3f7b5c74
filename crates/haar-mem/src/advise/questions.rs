//! The questions of both trees and what is known about the application: [`Question`] (with
//! the figures' wording and the flag that answers it), the typed answers ([`IoPattern`],
//! [`Modifiable`], yes/no) and [`Answers`], which finds contradictions and merges answers from
//! two sources.
//!
//! Owns the answers' meaning and their parsing from words. Must not walk the trees or read
//! files: the `tree` and `answers_file` modules do that.

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

fn pattern_word(p: IoPattern) -> &'static str {
    match p {
        IoPattern::Local => "local",
        IoPattern::Global => "global",
        IoPattern::Both => "both",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
