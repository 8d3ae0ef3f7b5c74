//! `haar generate` (hidden): man pages and shell completions from the grammar itself.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::out_err;
use crate::Failure;
use crate::args::Cli;

/// `haar generate` (hidden): documentation generated from this grammar, so it cannot drift.
#[derive(Debug, Args)]
pub(crate) struct GenerateArgs {
    /// What to generate.
    #[command(subcommand)]
    pub what: Generate,
}

/// What `haar generate` writes.
#[derive(Debug, Subcommand)]
pub(crate) enum Generate {
    /// Man pages: `haar.1` and one `haar-SUBCOMMAND.1` per visible subcommand, into DIR
    /// (created if missing).
    Man {
        /// Directory to write the pages into.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// The completion script for SHELL, on stdout.
    Completions {
        /// Shell to complete for.
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

/// `haar generate`: man pages or a completion script from the same clap definitions that parse
/// the command line (clap_mangen, clap_complete), so the installed docs match the binary.
pub(crate) fn run(a: &GenerateArgs) -> Result<(), Failure> {
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
