//! `haar archive`: its arguments as `haar::ingest::IngestOptions`, a progress bar drawn from
//! the library's progress callback, the report printed, and the exit code (1 when any file was
//! refused). The pipeline itself is `haar::ingest`'s.

use std::path::PathBuf;

use clap::Args;
use haar::Key;
use haar::ingest::{self, IngestOptions, Input, Progress};
use haar::request::Request;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::Failure;
use crate::args::{Cli, OpenArgs};
use crate::open;

/// `haar archive`.
#[derive(Debug, Args)]
pub(crate) struct ArchiveArgs {
    /// Keys to set on every field (`k=v,k=v`): overrides GRIB keys; required for non-GRIB files.
    #[arg(long, value_name = "k=v,...")]
    pub key: Option<String>,
    /// Archive only messages matching this request.
    #[arg(long, value_name = "REQUEST")]
    pub include: Option<String>,
    /// Skip messages matching this request.
    #[arg(long, value_name = "REQUEST")]
    pub exclude: Option<String>,
    /// Print a JSON summary.
    #[arg(long)]
    pub json: bool,
    /// Input files.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub open: OpenArgs,
}

fn filter(text: &Option<String>) -> Result<Option<Request>, Failure> {
    let Some(text) = text else { return Ok(None) };
    Request::parse(text)
        .map(Some)
        .map_err(|e| Failure::usage(format!("request {text:?}: {e}")))
}

/// Runs `haar archive`.
pub(crate) fn run(cli: &Cli, a: &ArchiveArgs) -> Result<(), Failure> {
    let mut store = open::open_options(cli).field_store()?;
    let opts = IngestOptions {
        key: match &a.key {
            Some(k) => Key::parse(k).map_err(|e| Failure::usage(format!("--key {k:?}: {e}")))?,
            None => Key::new(),
        },
        include: filter(&a.include)?,
        exclude: filter(&a.exclude)?,
        ..IngestOptions::default()
    };
    let inputs: Vec<Input<'_>> = a.files.iter().cloned().map(Input::File).collect();
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {msg}",
        )
        .expect("valid template"),
    );
    let mut last_fields = 0;
    let mut draw = |p: &Progress| {
        bar.set_length(p.total_bytes);
        bar.set_position(p.bytes);
        if p.fields != last_fields {
            last_fields = p.fields;
            let secs = p.elapsed.as_secs_f64().max(1e-9);
            bar.set_message(format!(
                "{} fields, {:.0} fields/s",
                p.fields,
                p.fields as f64 / secs
            ));
        }
    };
    let r = ingest::ingest(&mut *store, inputs, &opts, &mut draw)?;
    bar.finish_and_clear();
    if a.json {
        // Through a JSON value: its keys come out sorted, as they always have.
        println!("{}", serde_json::to_value(&r).expect("a report serialises"));
    } else {
        for f in &r.files {
            println!(
                "{}: {} field(s), {:.1} MiB{}",
                f.name,
                f.fields,
                f.bytes as f64 / 1048576.0,
                match f.skipped {
                    0 => String::new(),
                    n => format!(" ({n} filtered out)"),
                }
            );
        }
        let secs = r.seconds;
        println!(
            "archived and flushed {} field(s), {:.1} MiB in {secs:.2} s ({:.0} fields/s, {:.0} MiB/s)",
            r.fields,
            r.bytes as f64 / 1048576.0,
            r.fields as f64 / secs.max(1e-9),
            r.bytes as f64 / 1048576.0 / secs.max(1e-9)
        );
    }
    if !r.failed.is_empty() {
        for f in &r.failed {
            eprintln!("haar: {f}");
        }
        return Err(Failure::usage(format!(
            "{} file(s) not archived (nothing from them was stored; the other files were archived and flushed)",
            r.failed.len()
        )));
    }
    Ok(())
}
