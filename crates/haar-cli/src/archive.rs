//! `haar archive`: GRIB files (keys from ecCodes) or raw files with `--key`.
//!
//! Policy (documented in `haar archive --help`): a file with any fault archives nothing; the
//! other files are archived; one flush at the end. Key extraction runs on every core while the
//! previous file is copied into the store.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use haar_core::Key;
use haar_core::request::Request;
use haar_core::schema::SplitKey;
use haar_store::Store;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use crate::Failure;
use crate::args::{ArchiveArgs, Cli};
use crate::open;

/// A file ready to archive: every field's split key and byte range.
struct Prepared {
    fields: Vec<(SplitKey, Range<usize>)>,
    skipped: usize,
}

fn resolve_filter(store: &Store, text: &Option<String>) -> Result<Option<Request>, Failure> {
    let Some(text) = text else { return Ok(None) };
    let req = Request::parse(text).map_err(|e| Failure::usage(format!("request {text:?}: {e}")))?;
    Ok(Some(store.resolve(&req)?.0))
}

fn prepare(
    store: &Store,
    path: &Path,
    bytes: &[u8],
    overrides: &Key,
    include: &Option<Request>,
    exclude: &Option<Request>,
) -> Result<Prepared, String> {
    let name = path.display();
    let mut msgs = Vec::new();
    for m in haar_grib::messages(bytes) {
        match m {
            Ok(m) => msgs.push((m.index, m.offset as usize, m.bytes.len())),
            // No GRIB message at all: raw bytes, archived whole under --key.
            Err(haar_grib::FrameError::NotGrib { .. }) if msgs.is_empty() => {
                if overrides.is_empty() {
                    return Err(format!(
                        "{name}: not a GRIB file (no GRIB message found); to archive raw bytes give their key with --key k=v,..."
                    ));
                }
                let split = store.split(overrides).map_err(|e| format!("{name}: {e}"))?;
                return Ok(Prepared {
                    fields: vec![(split, 0..bytes.len())],
                    skipped: 0,
                });
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    }
    if msgs.is_empty() {
        return Err(format!("{name}: no complete GRIB message"));
    }
    // Key extraction (≈1.7 ms per message in ecCodes) on every core.
    let (schema, ctx) = (store.schema(), store.context());
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(msgs.len());
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<Result<Option<SplitKey>, String>>> = Vec::new();
    results.resize_with(msgs.len(), || None);
    type Outcome = (usize, Result<Option<SplitKey>, String>);
    let chunks: Vec<Vec<Outcome>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(index, offset, len)) = msgs.get(i) else { break };
                        let msg = &bytes[offset..offset + len];
                        let r = haar_grib::mars_keys(msg)
                            .map_err(|e| format!("{name}: message {} (1-based) at byte offset {offset}: {e}", index + 1))
                            .and_then(|pairs| {
                                let mut key: Key = pairs.into_iter().collect();
                                for (k, v) in overrides.iter() {
                                    key.push(k, v);
                                }
                                let split = schema.split(&key, ctx).map_err(|e| {
                                    format!("{name}: message {} (1-based) at byte offset {offset}: key {key}: {e}", index + 1)
                                })?;
                                let full = split.full();
                                let keep = include.as_ref().is_none_or(|r| r.matches(&full))
                                    && !exclude.as_ref().is_some_and(|r| r.matches(&full));
                                Ok(keep.then_some(split))
                            });
                        out.push((i, r));
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("key worker panicked"))
            .collect()
    });
    for (i, r) in chunks.into_iter().flatten() {
        results[i] = Some(r);
    }
    let mut fields = Vec::with_capacity(msgs.len());
    let mut skipped = 0;
    for (r, &(_, offset, len)) in results.into_iter().zip(&msgs) {
        match r.expect("every message processed")? {
            Some(split) => fields.push((split, offset..offset + len)),
            None => skipped += 1,
        }
    }
    Ok(Prepared { fields, skipped })
}

/// Runs `haar archive`.
pub fn run(cli: &Cli, a: &ArchiveArgs) -> Result<(), Failure> {
    // With --servers the local store only splits keys (in memory); fields go to the servers.
    let mut remote = open::remote(cli)?;
    let mut store = match remote {
        Some(_) => open::normaliser(cli)?,
        None => open::store(cli)?,
    };
    let overrides = match &a.key {
        Some(k) => Key::parse(k).map_err(|e| Failure::usage(format!("--key {k:?}: {e}")))?,
        None => Key::new(),
    };
    let include = resolve_filter(&store, &a.include)?;
    let exclude = resolve_filter(&store, &a.exclude)?;
    let total: u64 = a
        .files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {msg}",
        )
        .expect("valid template"),
    );
    let start = Instant::now();
    let mut summary = Vec::new();
    let mut failed = Vec::new();
    let (mut n_fields, mut n_bytes) = (0usize, 0u64);
    for path in &a.files {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                failed.push(format!("{}: cannot read: {e}", path.display()));
                continue;
            }
        };
        match prepare(&store, path, &bytes, &overrides, &include, &exclude) {
            Err(msg) => failed.push(msg),
            Ok(p) => {
                let mut fbytes = 0u64;
                for (split, range) in &p.fields {
                    match &mut remote {
                        Some(r) => r.archive(&split.full(), &bytes[range.clone()])?,
                        None => store.archive_split(split.clone(), &bytes[range.clone()])?,
                    }
                    fbytes += range.len() as u64;
                    n_fields += 1;
                    let secs = start.elapsed().as_secs_f64().max(1e-9);
                    bar.set_message(format!(
                        "{n_fields} fields, {:.0} fields/s",
                        n_fields as f64 / secs
                    ));
                }
                n_bytes += fbytes;
                summary.push(json!({
                    "file": path.display().to_string(), "fields": p.fields.len(),
                    "skipped": p.skipped, "bytes": fbytes,
                }));
            }
        }
        bar.inc(bytes.len() as u64);
    }
    match &mut remote {
        Some(r) => r.flush()?,
        None => store.flush()?,
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            json!({"files": summary, "failed": failed, "fields": n_fields, "bytes": n_bytes, "seconds": secs})
        );
    } else {
        for s in &summary {
            println!(
                "{}: {} field(s), {:.1} MiB{}",
                s["file"].as_str().unwrap_or(""),
                s["fields"],
                s["bytes"].as_u64().unwrap_or(0) as f64 / 1048576.0,
                match s["skipped"].as_u64() {
                    Some(0) | None => String::new(),
                    Some(n) => format!(" ({n} filtered out)"),
                }
            );
        }
        println!(
            "archived and flushed {n_fields} field(s), {:.1} MiB in {secs:.2} s ({:.0} fields/s, {:.0} MiB/s)",
            n_bytes as f64 / 1048576.0,
            n_fields as f64 / secs.max(1e-9),
            n_bytes as f64 / 1048576.0 / secs.max(1e-9)
        );
    }
    if !failed.is_empty() {
        for f in &failed {
            eprintln!("haar: {f}");
        }
        return Err(Failure::usage(format!(
            "{} file(s) not archived (nothing from them was stored; the other files were archived and flushed)",
            failed.len()
        )));
    }
    Ok(())
}
