//! The ingestion loop: opens inputs a few ahead, hands them to the key workers, and archives
//! each input's fields in message order into the store, keeping the policy that an input with
//! a fault archives nothing.
//!
//! Owns the one branch on the store's capability: with checkpoints, fields are stored as their
//! keys arrive and taken back on a fault; without, an input is archived only once every
//! message has keys. It must not know how inputs are read ([`super::input`]) or keyed
//! ([`super::keying`]), nor how the store keeps bytes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use haar_core::request::Request;
use haar_store::{FieldStore, Result};

use super::input::{self, Buffers, changed_while_read, source_vanished};
use super::keying::{Job, Keying, Shared, StopWorkers};
use super::{FileReport, IngestOptions, IngestReport, Input, Progress};

/// Inputs opened (read and framed) ahead of the one being archived, so key workers never wait
/// for the archiving thread while it copies.
const LOOKAHEAD: usize = 4;

/// Archives `inputs` into `store`, keyed by ecCodes (GRIB) or by `opts.key` (raw bytes), and
/// flushes once at the end (unless `opts.flush` is off); `progress` hears of every field and
/// every input archived.
///
/// An input with any fault archives nothing and is listed in [`IngestReport::failed`]; that is
/// not an error. An error is what stops the whole ingestion: a filter the schema cannot
/// resolve, or the store failing (fields of the inputs archived before it are then pending,
/// unflushed; those of the input being archived were taken back where the store can).
pub fn ingest<'a>(
    store: &mut dyn FieldStore,
    inputs: Vec<Input<'a>>,
    opts: &IngestOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<IngestReport> {
    let start = Instant::now();
    // The workers key with their own copy of the schema and context, so the store stays free
    // for this thread to archive into.
    let options = store.options().clone();
    // Resolved like any request: keywords no schema rule uses are dropped, so they do not
    // make every field fail to match.
    let resolve = |r: &Option<Request>| r.as_ref().map(|r| options.resolve(r).map(|r| r.0));
    let include = resolve(&opts.include).transpose()?;
    let exclude = resolve(&opts.exclude).transpose()?;
    let keying = Keying {
        options: &options,
        overrides: &opts.key,
        include: &include,
        exclude: &exclude,
    };
    // The one question asked of the store: can it take fields back before the flush?
    let streaming = store.checkpoint().is_some();
    let mut state = State {
        report: IngestReport::default(),
        progress: Progress {
            total_bytes: inputs.iter().map(input::size_hint).sum(),
            ..Progress::default()
        },
        start,
        on_progress: progress,
    };
    (state.on_progress)(&state.progress);

    let shared = Shared::new();
    let pool = Arc::new(Buffers::default());
    // One core is this thread's, which archives (copies, checksums, writes) while the workers
    // key: a worker on every core oversubscribed a 2-core host, and 800 GRIB messages
    // (644 MiB) took 0.61-0.98 s with two workers against 0.57-0.59 s with one (posix, tmpfs).
    let workers = opts.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get().saturating_sub(1).max(1))
            .unwrap_or(1)
    });
    std::thread::scope(|s| -> Result<()> {
        for _ in 0..workers {
            s.spawn(|| shared.work(&keying));
        }
        // However this closure ends (a store error returns early), the workers stop.
        let _stop = StopWorkers(&shared);
        let mut opened: VecDeque<std::result::Result<Arc<Job<'_>>, String>> = VecDeque::new();
        let mut to_open = inputs.into_iter();
        loop {
            while opened.len() < LOOKAHEAD {
                let Some(input) = to_open.next() else { break };
                let name = input::name(&input);
                let job = input::load(input, &name, &pool, streaming)
                    .and_then(|bytes| Job::open(name, bytes, &keying))
                    .map(Arc::new);
                if let Ok(job) = &job
                    && !job.all_claimed()
                {
                    shared.push(job.clone());
                }
                opened.push_back(job);
            }
            match opened.pop_front() {
                None => return Ok(()),
                Some(Err(msg)) => state.report.failed.push(msg),
                Some(Ok(job)) if streaming => state.stream(store, &job, &keying, &shared)?,
                Some(Ok(job)) => match job.finish(&keying, &shared) {
                    Some(fault) => state.report.failed.push(fault.to_string()),
                    None => state.stream(store, &job, &keying, &shared)?,
                },
            }
        }
    })?;
    if opts.flush {
        store.flush()?;
    }
    let mut report = state.report;
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

/// The report so far and the progress callback.
struct State<'p> {
    report: IngestReport,
    progress: Progress,
    start: Instant,
    on_progress: &'p mut dyn FnMut(&Progress),
}

impl State<'_> {
    /// Archives `job`'s fields in message order, each as soon as it and every message before
    /// it have keys. Into a store without checkpoints only a job whose messages are all keyed
    /// without fault comes here, so nothing is ever sent that must be taken back.
    fn stream(
        &mut self,
        store: &mut dyn FieldStore,
        job: &Job<'_>,
        keying: &Keying<'_>,
        shared: &Shared<'_>,
    ) -> Result<()> {
        let checkpoint = store.checkpoint();
        let (mut fields, mut skipped, mut bytes) = (0usize, 0usize, 0u64);
        let mut fault = None;
        let mut scratch = Vec::new();
        for (i, &(_, offset, len)) in job.msgs.iter().enumerate() {
            match job.outcome(i, keying, shared) {
                Some(Ok(Some(split))) => {
                    let Ok(message) = job.bytes.range(offset, len, &mut scratch) else {
                        fault = Some(changed_while_read(&job.name));
                        break;
                    };
                    match store.archive_split(split, message, None) {
                        Ok(()) => {}
                        Err(e) if source_vanished(&e) => {
                            fault = Some(changed_while_read(&job.name));
                            break;
                        }
                        Err(e) => {
                            // Whatever the caller does next, this input's fields stay out.
                            if let Some(cp) = &checkpoint {
                                store.discard_since(cp);
                            }
                            return Err(e);
                        }
                    }
                    fields += 1;
                    bytes += len as u64;
                    self.progress.fields += 1;
                    self.tell();
                }
                Some(Ok(None)) => skipped += 1,
                Some(Err(e)) => {
                    fault = Some(e.clone());
                    break;
                }
                // Messages before the first fault are all keyed (keying.rs publishes a fault's
                // position only after its outcome), so this is a bug: the input is refused
                // whole rather than the process brought down.
                None => {
                    fault = Some(format!(
                        "{}: message {} was not keyed (an internal error of haar's ingest; \
                         nothing of this input was archived): please report it",
                        job.name,
                        i + 1
                    ));
                    break;
                }
            }
        }
        // Checked last: a truncation may have shown up as zeros, or not at all.
        if job.bytes.changed() {
            fault = Some(changed_while_read(&job.name));
        }
        if let Some(e) = fault {
            // Only a store with checkpoints streams a job that can fail here (mapped bytes,
            // messages keyed as they are stored).
            if let Some(cp) = &checkpoint {
                store.discard_since(cp);
            }
            self.progress.fields -= fields;
            self.report.failed.push(e);
            return Ok(());
        }
        self.report.fields += fields;
        self.report.bytes += bytes;
        self.report.files.push(FileReport {
            name: job.name.clone(),
            fields,
            skipped,
            bytes,
        });
        self.progress.bytes += job.bytes.len() as u64;
        self.tell();
        Ok(())
    }

    fn tell(&mut self) {
        self.progress.elapsed = self.start.elapsed();
        (self.on_progress)(&self.progress);
    }
}
