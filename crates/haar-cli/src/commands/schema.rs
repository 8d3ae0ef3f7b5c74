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
    match &cfg.schema {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(format!("cannot read schema {}: {e}", path.display()))
            })?;
            out!("{text}")?;
        }
        None => out!("{}", haar::schema::BUILTIN_SCHEMA)?,
    }
    Ok(())
}
