//! `haar compact`: merges the catalogue runs of the local databases matching a request now.

use clap::Args;
use serde_json::json;

use crate::Failure;
use crate::args::{Cli, StoreArgs};
use crate::open;

/// `haar compact`.
#[derive(Debug, Args)]
pub(crate) struct CompactArgs {
    /// Restrict to databases matching this request.
    pub request: Option<String>,
    /// Merge everything into one run per database, whatever the merge policy says.
    #[arg(long)]
    pub full: bool,
    /// JSON output: one object per database with its outcome.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Runs `haar compact`.
pub(crate) fn run(cli: &Cli, a: &CompactArgs) -> Result<(), Failure> {
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
                haar::MergeOutcome::Published {
                    tail,
                    runs,
                    entries,
                } => format!(
                    "merged {tail} new entr{}; {runs} run(s) hold {entries} entr{}",
                    if tail == 1 { "y" } else { "ies" },
                    if entries == 1 { "y" } else { "ies" }
                ),
                haar::MergeOutcome::Nothing { tail } => {
                    format!("up to date ({tail} entries since the last merge)")
                }
                haar::MergeOutcome::Busy => "busy: another process is merging it".into(),
                haar::MergeOutcome::Gone => "gone: wiped meanwhile".into(),
                haar::MergeOutcome::Stopped => "stopped".into(),
                haar::MergeOutcome::Unsupported => "this backend keeps no catalogue runs".into(),
            };
            outln!("{db}: {what}")?;
        }
    }
    Ok(())
}
