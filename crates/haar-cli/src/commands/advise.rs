//! `haar advise`: the B-APM configuration advisor (JCST usage-scenarios paper, Figs. 9 and 10)
//! from flags, an answer file or questions on the terminal; `--probe` inspects the machine.
//! The trees and their wording live in `haar_mem::advise`; this file gathers answers and
//! formats the advice.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use haar_mem::advise::{
    self, Advice, AdviceError, Answers, IoPattern, Modifiable, Question, parse_yes_no,
};
use haar_mem::machine;
use serde_json::json;

use crate::Failure;

/// Options of `haar advise`.
#[derive(Debug, Args)]
pub(crate) struct AdviseArgs {
    /// Does the application need more memory than DRAM offers? (yes|no)
    #[arg(long, value_name = "yes|no", value_parser = yes_no)]
    pub memory_intensive: Option<bool>,
    /// Is I/O a significant part of its run time or variability? (yes|no)
    #[arg(long, value_name = "yes|no", value_parser = yes_no)]
    pub io_intensive: Option<bool>,
    /// Local (each process its own files), global (shared across nodes) or both.
    #[arg(long, value_name = "local|global|both", value_parser = io_pattern)]
    pub io_pattern: Option<IoPattern>,
    /// Can the application be changed? `undesirable` (possible but unwanted) counts as no.
    #[arg(long, value_name = "yes|no|undesirable", value_parser = modifiable)]
    pub modifiable: Option<Modifiable>,
    /// Is I/O performance critical (rather than, say, less variability)? (yes|no)
    #[arg(long, value_name = "yes|no", value_parser = yes_no)]
    pub performance_critical: Option<bool>,
    /// JSON answer file, e.g. {"memory_intensive": false, "io_intensive": true,
    /// "io_pattern": "global", "modifiable": "yes", "performance_critical": "yes"}.
    /// Flags given as well must agree with it.
    #[arg(long, value_name = "FILE")]
    pub answers: Option<PathBuf>,
    /// Inspect this machine: memory, persistent-memory and CXL devices, DAX mounts, Memory
    /// mode; and say what that implies.
    #[arg(long)]
    pub probe: bool,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

fn yes_no(s: &str) -> Result<bool, String> {
    parse_yes_no(s).ok_or_else(|| format!("{s:?}: answer yes or no"))
}

fn io_pattern(s: &str) -> Result<IoPattern, String> {
    IoPattern::parse(s).ok_or_else(|| format!("{s:?}: answer local, global or both"))
}

fn modifiable(s: &str) -> Result<Modifiable, String> {
    Modifiable::parse(s).ok_or_else(|| format!("{s:?}: answer yes, no or undesirable"))
}

/// Runs `haar advise`.
pub(crate) fn run(a: &AdviseArgs) -> Result<(), Failure> {
    let mut answers = Answers {
        memory_intensive: a.memory_intensive,
        io_intensive: a.io_intensive,
        io_pattern: a.io_pattern,
        modifiable: a.modifiable,
        performance_critical: a.performance_critical,
    };
    if let Some(path) = &a.answers {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Failure::usage(format!("cannot read answer file {}: {e}", path.display()))
        })?;
        let from_file = advise::answers_from_json(&text)
            .map_err(|e| Failure::usage(format!("answer file {}: {e}", path.display())))?;
        let conflicts = answers.merge(&from_file, "the flags", &path.display().to_string());
        if !conflicts.is_empty() {
            return Err(Failure::usage(format!(
                "contradictory answers: {}",
                conflicts.join("; ")
            )));
        }
    }
    let probe = a.probe.then(|| machine::probe(Path::new("/")));
    let any_answer = answers != Answers::default();
    // `--probe` alone only probes; otherwise walk the trees, asking when a terminal is there.
    let advice = if probe.is_some() && !any_answer {
        None
    } else {
        Some(decide(&mut answers)?)
    };
    if a.json {
        let v = json!({
            "answers": answers,
            "advice": advice,
            "probe": probe,
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return Ok(());
    }
    let mut out = String::new();
    if let Some(p) = &probe {
        out.push_str(&p.to_string());
    }
    if let Some(adv) = &advice {
        if probe.is_some() {
            out.push('\n');
        }
        out.push_str(&adv.to_string());
    }
    out!("{out}")?;
    Ok(())
}

/// Walks the trees; asks for each missing answer on the terminal, or fails naming the flag.
fn decide(answers: &mut Answers) -> Result<Advice, Failure> {
    let interactive = std::io::stdin().is_terminal();
    loop {
        match advise::advise(answers) {
            Ok(adv) => return Ok(adv),
            Err(AdviceError::Contradictory(c)) => {
                return Err(Failure::usage(format!(
                    "contradictory answers: {}",
                    c.join("; ")
                )));
            }
            Err(AdviceError::Missing(q)) if interactive => ask(q, answers)?,
            Err(e @ AdviceError::Missing(_)) => {
                return Err(Failure::usage(format!(
                    "{e} (or run on a terminal to be asked, or give --answers FILE)"
                )));
            }
        }
    }
}

fn ask(q: Question, answers: &mut Answers) -> Result<(), Failure> {
    let (prompt, choices) = match q {
        Question::LocalIo | Question::GlobalIo => ("I/O pattern?", "local/global/both"),
        Question::Modifiable => (q.text(), "yes/no/undesirable"),
        _ => (q.text(), "yes/no"),
    };
    let stdin = std::io::stdin();
    loop {
        eprint!("{prompt} [{choices}] ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        let n = stdin
            .lock()
            .read_line(&mut line)
            .map_err(|e| Failure::io(format!("cannot read the answer: {e}")))?;
        if n == 0 {
            return Err(Failure::usage(format!(
                "no answer to \"{}\" (end of input): give {}",
                q.text(),
                q.flag()
            )));
        }
        let ok = match q {
            Question::MemoryIntensive => {
                parse_yes_no(&line).map(|b| answers.memory_intensive = Some(b))
            }
            Question::IoIntensive => parse_yes_no(&line).map(|b| answers.io_intensive = Some(b)),
            Question::LocalIo | Question::GlobalIo => {
                IoPattern::parse(&line).map(|p| answers.io_pattern = Some(p))
            }
            Question::Modifiable => Modifiable::parse(&line).map(|m| answers.modifiable = Some(m)),
            Question::PerformanceCritical => {
                parse_yes_no(&line).map(|b| answers.performance_critical = Some(b))
            }
        };
        if ok.is_some() {
            return Ok(());
        }
        eprintln!("please answer {choices}");
    }
}
