//! How `haar stage` shows what the library answers: task records as text or JSON, the
//! progress bar, the exit status a final record calls for, the rates, teardowns, persisted
//! data and the stage service's admin replies.

use haar_stage::journal::Rates;
use haar_stage::persist::Persisted;
use haar_stage::{ErrorClass, State, TaskRecord, Teardown};

use super::by_class;
use crate::Failure;

pub(super) fn print_records(all: &[TaskRecord], json: bool) -> Result<(), Failure> {
    if json {
        return outln!(
            "{}",
            serde_json::to_string_pretty(all).expect("records serialise")
        );
    }
    for r in all {
        outln!("{}", summary(r))?;
    }
    Ok(())
}

pub(super) fn progress_bar(quiet: bool) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    use std::io::IsTerminal;
    let bar = ProgressBar::with_draw_target(
        Some(0),
        if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        },
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {prefix} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {msg}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    bar
}

pub(super) fn show_progress(bar: &indicatif::ProgressBar, r: &TaskRecord) {
    bar.set_prefix(r.id.clone());
    bar.set_length(r.bytes_total);
    bar.set_position(r.bytes_done);
    bar.set_message(match r.eta_seconds {
        Some(s) => format!("{s:.1}s"),
        None => "?".into(),
    });
}

/// The exit status a task's final state calls for.
pub(super) fn outcome(rec: &TaskRecord) -> Result<(), Failure> {
    let msg = || {
        format!(
            "task {}: {}",
            rec.id,
            rec.error
                .clone()
                .unwrap_or_else(|| format!("{:?}", rec.state).to_lowercase())
        )
    };
    match rec.state {
        State::Done => Ok(()),
        State::Failed => Err(by_class(rec.error_class.unwrap_or(ErrorClass::Io), msg())),
        State::Interrupted => Err(Failure::io(format!(
            "task {} was interrupted (its runner died): `haar stage resume {}`",
            rec.id, rec.id
        ))),
        _ => Err(Failure::io(msg())),
    }
}

pub(super) fn summary(r: &TaskRecord) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut s = format!(
        "{} {} {:?} {} -> {}: {:.1}/{:.1} MiB, {}/{} objects, {:.1} MiB/s",
        r.id,
        format!("{:?}", r.state).to_lowercase(),
        r.direction,
        r.src,
        r.dst,
        mib(r.bytes_done),
        mib(r.bytes_total),
        r.objects_done,
        r.objects_total,
        r.rate / (1 << 20) as f64,
    );
    if r.state == State::Running
        && let Some(eta) = r.eta_seconds
    {
        s.push_str(&format!(", ETA {eta:.1} s"));
    }
    if let Some(e) = &r.error {
        s.push_str(&format!(": {e}"));
    }
    s
}

pub(super) fn print_record(r: &TaskRecord, json: bool) -> Result<(), Failure> {
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(r).expect("records serialise")
        )
    } else {
        outln!("{}", summary(r))
    }
}

pub(super) fn print_rates(rates: &Rates, json: bool) -> Result<(), Failure> {
    if json {
        return outln!(
            "{}",
            serde_json::to_string_pretty(rates).expect("serialise")
        );
    }
    for (pair, r) in &rates.pairs {
        outln!(
            "{pair}: {} task(s), {:.1} MiB in {:.2} s, mean {:.1} MiB/s, last {:.1} MiB/s",
            r.tasks,
            r.bytes as f64 / (1 << 20) as f64,
            r.seconds,
            r.mean().unwrap_or(0.0) / (1 << 20) as f64,
            r.last_rate / (1 << 20) as f64
        )?;
    }
    Ok(())
}

pub(super) fn print_teardown(t: &Teardown, json: bool) -> Result<(), Failure> {
    let Teardown {
        removed,
        kept_persisted: kept,
    } = t;
    if json {
        return outln!(
            "{}",
            serde_json::json!({"removed": removed, "kept_persisted": kept})
        );
    }
    for p in removed {
        outln!("removed {}", p.display())?;
    }
    for p in kept {
        outln!("kept {} (persisted)", p.display())?;
    }
    Ok(())
}

pub(super) fn print_persisted(all: &[Persisted], json: bool) -> Result<(), Failure> {
    if json {
        return outln!("{}", serde_json::to_string_pretty(all).expect("serialise"));
    }
    for p in all {
        outln!(
            "{} {} owner={} node={} shared_with={:?}",
            p.endpoint,
            p.path.display(),
            p.owner,
            p.node.as_deref().unwrap_or("?"),
            p.shared_with
        )?;
    }
    Ok(())
}

/// What `persist store|share|unshare|delete` left: the record, or none (`loc` deleted).
pub(super) fn print_persist_outcome(
    rec: Option<&Persisted>,
    loc: &str,
    json: bool,
) -> Result<(), Failure> {
    if json {
        return outln!("{}", serde_json::to_string_pretty(&rec).expect("serialise"));
    }
    match rec {
        Some(p) => outln!(
            "{} persisted, owner {}, shared with {:?}",
            p.endpoint,
            p.owner,
            p.shared_with
        ),
        None => outln!("{loc} deleted"),
    }
}

/// A stage service's admin reply, without its `ok`.
pub(super) fn print_reply(mut v: serde_json::Value) -> Result<(), Failure> {
    if let Some(o) = v.as_object_mut() {
        o.remove("ok");
    }
    outln!("{v}")
}
