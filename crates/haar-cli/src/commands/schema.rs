//! `haar schema`: prints the schema in use, or checks a schema file.

use std::path::PathBuf;

use clap::Args;

use crate::Failure;
use crate::args::{Cli, StoreArgs};
use crate::open;

/// `haar schema`.
#[derive(Debug, Args)]
pub(crate) struct SchemaArgs {
    /// Check this schema file and report errors with line and column.
    #[arg(long, value_name = "FILE")]
    pub check: Option<PathBuf>,
    /// Print the schema as FDB5 5.x should be given it beside this store (the FDB5 store
    /// plugin, an FDB5 peer on the same fields): without haar's final fallback rule, which
    /// FDB5 would match beside each field's own rule and so retrieve and list every field
    /// twice. Every field FDB5 can archive is split as haar splits it.
    #[arg(long, conflicts_with = "check")]
    pub fdb5: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Runs `haar schema`.
pub(crate) fn run(cli: &Cli, a: &SchemaArgs) -> Result<(), Failure> {
    if let Some(path) = &a.check {
        let s = open::load_schema(path)?;
        outln!("{}: ok ({} keywords)", path.display(), s.keywords().len())?;
        return Ok(());
    }
    let cfg = open::config(cli)?;
    let text = match &cfg.schema {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure::usage(format!("cannot read schema {}: {e}", path.display())))?,
        None => haar::schema::BUILTIN_SCHEMA.to_owned(),
    };
    if a.fdb5 {
        out!("{}", haar::schema::for_fdb5(&text))?;
    } else {
        out!("{text}")?;
    }
    Ok(())
}
