//! `haar list`: the flushed fields matching a request, in haar's, FDB5's `fdb-list` or JSON
//! layout, and the store's problems as warnings (exit 3 when they are damage).

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::{damage_is_failure, key_json, out_err};
use crate::Failure;
use crate::args::{Cli, OpenArgs};
use crate::open;

/// `haar list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Request (all fields when omitted).
    pub request: Option<String>,
    /// Also print where each field's bytes are and their length.
    #[arg(long)]
    pub location: bool,
    /// One JSON object per field, as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// FDB5's `fdb-list` layout: `{db keys}{index keys}{datum keys}`.
    #[arg(long, conflicts_with = "json")]
    pub fdb: bool,
    #[command(flatten)]
    pub open: OpenArgs,
}

/// Runs `haar list`.
pub(crate) fn run(cli: &Cli, a: &ListArgs) -> Result<(), Failure> {
    let store = open::field_store_for_reading(cli)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut json_items = Vec::new();
    let mut problems = Vec::new();
    for req in open::requests(a.request.as_deref())? {
        problems.extend(store.problems(&req)?);
        for f in store.list(&req)? {
            if a.json {
                let mut item = json!({
                    "db": key_json(&f.db.without_empty()), "index": key_json(&f.index.without_empty()),
                    "datum": key_json(&f.datum.without_empty()),
                    "length": f.data.length,
                });
                if a.location {
                    item["location"] = json!({"object": format!("{:016x}", f.data.object), "offset": f.data.offset});
                }
                json_items.push(item);
                continue;
            }
            let mut line = if a.fdb {
                // Absent optional keywords are left out, as fdb-list does.
                format!(
                    "{}{}{}",
                    f.db.without_empty().braced(),
                    f.index.without_empty().braced(),
                    f.datum.without_empty().braced()
                )
            } else {
                f.key().without_empty().to_string()
            };
            if a.location {
                line.push_str(&format!(
                    " object={:016x} offset={} length={}",
                    f.data.object, f.data.offset, f.data.length
                ));
            }
            writeln!(out, "{line}").map_err(out_err)?;
        }
    }
    if a.json {
        serde_json::to_writer_pretty(&mut out, &json_items).map_err(|e| out_err(e.into()))?;
        writeln!(out).map_err(out_err)?;
    }
    out.flush().map_err(out_err)?;
    for p in &problems {
        eprintln!("haar: warning: {p}");
    }
    damage_is_failure(problems.iter(), "the listing above")
}
