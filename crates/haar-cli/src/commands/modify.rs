//! `haar wipe` and `haar purge`: the two commands that remove fields (dry runs unless
//! --doit), with the grammar they share.

use clap::Args;
use serde_json::json;

use super::note_fdb5_databases;
use crate::Failure;
use crate::args::{Cli, OpenArgs};
use crate::open;

/// `haar wipe` / `haar purge`.
#[derive(Debug, Args)]
pub(crate) struct ModifyArgs {
    /// Request selecting what to act on.
    pub request: String,
    /// Really do it (otherwise only report what would be done).
    #[arg(long)]
    pub doit: bool,
    /// JSON report.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub open: OpenArgs,
}

/// `haar wipe`.
#[derive(Debug, Args)]
pub(crate) struct WipeArgs {
    #[command(flatten)]
    pub modify: ModifyArgs,
    /// Also delete the files haar did not write in the databases removed whole (FDB5's
    /// `fdb-wipe --unsafe-wipe-all`); without it such a wipe is refused, naming them.
    #[arg(long)]
    pub unsafe_wipe_all: bool,
}

/// Runs `haar wipe`.
pub(crate) fn wipe(cli: &Cli, w: &WipeArgs) -> Result<(), Failure> {
    let a = &w.modify;
    let mut store = open::field_store(cli)?;
    for req in open::requests(Some(&a.request))? {
        // A dry run names the files a wipe with --doit would refuse (or, with
        // --unsafe-wipe-all, delete).
        let unowned = if a.doit {
            Vec::new()
        } else {
            store.unowned_files(&req)?
        };
        let rep = if w.unsafe_wipe_all {
            store.wipe_unsafe_all(&req, a.doit)?
        } else {
            store.wipe(&req, a.doit)?
        };
        if a.json {
            outln!(
                "{}",
                json!({"doit": a.doit, "report": rep, "unowned": unowned})
            )?;
            continue;
        }
        let verb = if a.doit { "wiped" } else { "would wipe" };
        for db in &rep.databases {
            outln!("{verb} database {db}")?;
        }
        outln!("{verb} {} field(s), {} bytes", rep.fields, rep.bytes)?;
        if rep.fields == 0 {
            note_fdb5_databases(&*store, std::slice::from_ref(&req));
        }
        for f in &unowned {
            outln!(
                "not written by haar: {} ({})",
                f.display(),
                if w.unsafe_wipe_all {
                    "deleted with the database by --unsafe-wipe-all"
                } else {
                    "--doit refuses to wipe its database; --unsafe-wipe-all deletes it"
                }
            )?;
        }
        if !a.doit {
            outln!("(dry run: add --doit to wipe)")?;
        }
    }
    Ok(())
}

/// Runs `haar purge`.
pub(crate) fn purge(cli: &Cli, a: &ModifyArgs) -> Result<(), Failure> {
    let mut store = open::field_store(cli)?;
    for req in open::requests(Some(&a.request))? {
        let rep = store.purge(&req, a.doit)?;
        if a.json {
            outln!("{}", json!({"doit": a.doit, "report": rep}))?;
            continue;
        }
        let verb = if a.doit { "dropped" } else { "would drop" };
        outln!(
            "{verb} {} masked or wiped field(s) ({} bytes) in {} database(s); freed {} bytes",
            rep.dropped_fields,
            rep.dropped_bytes,
            rep.databases,
            rep.freed_bytes
        )?;
        if !a.doit {
            outln!("(dry run: add --doit to purge)")?;
        }
    }
    Ok(())
}
