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
//!
//! One submodule per concern, everything public re-exported here:
//! * `questions`: the questions, the answers to them ([`Answers`]) and how answers are parsed,
//!   checked for contradictions and merged;
//! * `answers_file`: the JSON answer file ([`answers_from_json`]);
//! * `tree`: the two trees as data ([`FIG9`], [`FIG10`]) and the [`walk`] through one;
//! * `advice`: walking both trees into an [`Advice`] with its set-up commands and haar
//!   configuration;
//! * `worked_cases`: the paper's worked cases, Table 3 ([`table3`]).

mod advice;
mod answers_file;
mod questions;
mod tree;
mod worked_cases;

pub use advice::{Advice, AdviceError, advise};
pub use answers_file::answers_from_json;
pub use questions::{Answers, IoPattern, Modifiable, Question, parse_yes_no};
pub use tree::{FIG9, FIG10, Node, Outcome, Step, Walk, walk};
pub use worked_cases::{WorkedCase, table3};
