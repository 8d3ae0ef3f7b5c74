//! `haar import-fdb5`: its arguments as `haar::import::ImportOptions`, the report printed, and
//! the exit code (1 FDB5's library, the database or the request not usable, 2 nothing listed, 3 a field failed).

use std::path::PathBuf;

use clap::Args;
use haar::import::{self, Fdb5Source, ImportError, ImportOptions};

use crate::Failure;
use crate::args::{Cli, StoreArgs};
use crate::open;

/// `haar import-fdb5`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("fdb5").required(true).args(["fdb_config", "fdb_root"])))]
pub(crate) struct ImportFdb5Args {
    /// FDB5 configuration file (what FDB5_CONFIG_FILE would name).
    #[arg(long, value_name = "FILE")]
    pub fdb_config: Option<PathBuf>,
    /// FDB5 root directory (a local TOC store), used with --fdb-schema.
    #[arg(long, value_name = "DIR")]
    pub fdb_root: Option<PathBuf>,
    /// Schema of the FDB5 database given by --fdb-root.
    #[arg(long, value_name = "FILE", default_value = "/etc/fdb/schema")]
    pub fdb_schema: PathBuf,
    /// MARS request selecting what to import (whole database when omitted), e.g.
    /// class=od,expver=1,param=t.
    pub request: Option<String>,
    /// Give the request's values to FDB5 as written, not canonicalised by haar; they must
    /// then be canonical (expver=0001, param=130).
    #[arg(long)]
    pub raw: bool,
    /// Fields fetched per flush and verification pass.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub batch: usize,
    /// Print a JSON summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Runs `haar import-fdb5`.
pub(crate) fn run(cli: &Cli, a: &ImportFdb5Args) -> Result<(), Failure> {
    let source = match (&a.fdb_config, &a.fdb_root) {
        (Some(c), _) => Fdb5Source::Config(c.clone()),
        (None, Some(root)) => Fdb5Source::Root {
            root: root.clone(),
            schema: a.fdb_schema.clone(),
        },
        (None, None) => {
            return Err(Failure::usage(
                "give the FDB5 database with --fdb-config FILE or --fdb-root DIR",
            ));
        }
    };
    let opts = ImportOptions {
        source,
        request: a.request.clone(),
        raw: a.raw,
        batch: a.batch,
    };
    let mut store = open::open_options(cli).local()?;
    let r = import::import_fdb5(&mut store, &opts).map_err(failure)?;
    if a.json {
        // Through a JSON value: its keys come out sorted, as they always have.
        println!("{}", serde_json::to_value(&r).expect("a report serialises"));
    } else {
        let p = &r.phases;
        println!(
            "imported and verified {} of {} field(s), {:.1} MiB in {:.2} s \
             (FDB5 list {:.2} s, FDB5 read {:.2} s, archive+flush {:.2} s, verify {:.2} s)",
            r.fields,
            r.listed,
            r.bytes as f64 / 1048576.0,
            r.seconds,
            p.list,
            p.fdb_read,
            p.archive_flush,
            p.verify
        );
    }
    if !r.failed.is_empty() {
        for f in r.failed.iter().take(20) {
            eprintln!("haar: import failed: {f}");
        }
        if r.failed.len() > 20 {
            eprintln!("haar: … and {} more", r.failed.len() - 20);
        }
        return Err(Failure::io(format!(
            "{} field(s) failed to import or verify; the {} verified field(s) are flushed",
            r.failed.len(),
            r.fields
        )));
    }
    Ok(())
}

fn failure(e: ImportError) -> Failure {
    match e {
        ImportError::Store(e) => e.into(),
        e @ (ImportError::Fdb5Unavailable { .. }
        | ImportError::BadSource { .. }
        | ImportError::BadRequest { .. }) => Failure::usage(e.to_string()),
        e @ ImportError::NothingListed { .. } => Failure::missing(e.to_string()),
        e => Failure::io(e.to_string()),
    }
}
