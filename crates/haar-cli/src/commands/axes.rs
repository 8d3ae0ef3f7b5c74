//! `haar axes`: the values present for each keyword among the fields matching a request.

use clap::Args;

use super::note_fdb5_databases;
use crate::Failure;
use crate::args::{Cli, OpenArgs};
use crate::open;

/// `haar axes`.
#[derive(Debug, Args)]
pub(crate) struct AxesArgs {
    /// Request (all fields when omitted).
    pub request: Option<String>,
    /// JSON object keyword → values.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub open: OpenArgs,
}

/// Runs `haar axes`.
pub(crate) fn run(cli: &Cli, a: &AxesArgs) -> Result<(), Failure> {
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
