//! `haar info`: the backend, the databases and their fields, live and dead bytes, and problems
//! of the local store (of servers: `net::info`).

use clap::Args;
use serde_json::json;

use super::{damage_is_failure, net};
use crate::Failure;
use crate::args::{Cli, OpenArgs};
use crate::open;

/// `haar info`.
#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    /// Restrict to databases matching this request.
    pub request: Option<String>,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub open: OpenArgs,
}

/// Runs `haar info`.
pub(crate) fn run(cli: &Cli, a: &InfoArgs) -> Result<(), Failure> {
    if open::open_options(cli).servers.is_some() {
        return net::info(cli, a);
    }
    let cfg = open::config(cli)?;
    let store = open::store_for_reading(cli)?;
    let mut dbs = Vec::new();
    for req in open::requests(a.request.as_deref())? {
        dbs.extend(store.stats(&req)?);
    }
    let backend = store.backend().info();
    let total_fields: u64 = dbs.iter().map(|d| d.fields).sum();
    let total_bytes: u64 = dbs.iter().map(|d| d.bytes).sum();
    let dead_bytes: u64 = dbs.iter().map(|d| d.dead_bytes).sum();
    // A pmem pool's heap, whole store only (design §5.4).
    let space = a
        .request
        .is_none()
        .then(|| haar::frontend::pool_space(&backend, &dbs))
        .flatten();
    let mut v = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "config": cfg,
        "backend": backend,
        "databases": dbs,
        "fields": total_fields,
        "bytes": total_bytes,
        "dead_bytes": dead_bytes,
        "eccodes": haar_grib::eccodes_version(),
    });
    if let Some(sp) = &space {
        v["space"] = sp.clone();
    }
    let damage = || damage_is_failure(dbs.iter().flat_map(|d| &d.problems), "this report");
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return damage();
    }
    outln!(
        "haar {}  (ecCodes {})",
        env!("CARGO_PKG_VERSION"),
        haar_grib::eccodes_version()
    )?;
    outln!("backend: {}", store.backend().describe())?;
    for (k, val) in backend.as_object().into_iter().flatten() {
        if k != "backend" {
            outln!("  {k}: {}", plain(val))?;
        }
    }
    outln!(
        "schema: {}",
        cfg.schema
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "built-in".into())
    )?;
    outln!(
        "databases: {}  fields: {total_fields}  bytes: {total_bytes}  dead bytes: {dead_bytes}",
        dbs.len()
    )?;
    if let Some(sp) = &space {
        outln!(
            "pool heap: {} bytes = live {} + dead {} (a purge frees them) + free {} ({} waiting \
             for readers' views) + other {} (segment records, tables, space of killed writers)",
            sp["heap_used_bytes"],
            sp["live_bytes"],
            sp["dead_bytes"],
            sp["free_bytes"],
            sp["free_waiting_bytes"],
            sp["other_bytes"]
        )?;
    }
    print_databases(&dbs)?;
    damage()
}

/// One line per database of `info` (live and dead fields and bytes), then its problems.
pub(crate) fn print_databases(dbs: &[haar::DbStats]) -> Result<(), Failure> {
    for d in dbs {
        outln!(
            "  {}: {} field(s), {} bytes; {} dead ({} bytes)",
            d.db,
            d.fields,
            d.bytes,
            d.dead_fields,
            d.dead_bytes
        )?;
        for p in &d.problems {
            outln!("    problem: {p}")?;
        }
    }
    Ok(())
}

/// A JSON value as a person reads it in `haar info`: strings and paths bare, lists joined by
/// commas, maps as `key=value`, null as `none` (`--json` keeps the JSON).
fn plain(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".into(),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(", "),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", plain(v)))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Bool(_) | Value::Number(_) => v.to_string(),
    }
}
