//! The merge (design §3.1): when and how runs are written from a database's newest commits
//! and merged into fewer, and the manifest that publishes them. The only writer of a
//! catalogue directory; it runs under the directory's merge lock and never changes the commit
//! log.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use haar_core::Key;

use super::manifest::{
    self, COMPACT_LOCK_FILE, LOCK_FILE, MANIFEST_FILE, Manifest, RunRef, lock_file,
};
use super::overlay::{Overlay, Positions};
use super::run::{FLAG_BASE, Run};
use super::state::Dead;
use super::view::load;
use super::writer::{self, Stopped};
use crate::backend::{Backend, Committed};
use crate::error::{Error, Result};
use crate::format;

/// When and how runs are merged (design §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergePolicy {
    /// Entries committed after the manifest's position that make a merge worth it; a
    /// reader's overlay holds at most about this many (twice, before it reloads).
    pub threshold: usize,
    /// Runs of one level that are merged into one run of the next level.
    pub fanout: usize,
    /// Merge in a background thread of the writing process after flushes.
    pub background: bool,
}

impl Default for MergePolicy {
    /// Threshold 8,192 and fanout 8, merging in the background; `HAAR_MERGE_THRESHOLD`
    /// overrides the threshold, and `HAAR_MERGE_THRESHOLD=0` turns background merging off
    /// (for measurements; `haar compact` still merges).
    fn default() -> Self {
        let env = std::env::var("HAAR_MERGE_THRESHOLD")
            .ok()
            .and_then(|v| v.parse::<usize>().ok());
        MergePolicy {
            threshold: env.filter(|&t| t > 0).unwrap_or(8192),
            fanout: 8,
            background: env != Some(0),
        }
    }
}

/// Writes manifest `m` into place and removes what it no longer names (part files of
/// compactions only with `parts`: when no compaction can be running).
fn publish(dir: &Path, m: &Manifest, parts: bool) -> Result<()> {
    manifest::write_atomic(dir, MANIFEST_FILE, &m.encode())?;
    let keep: HashSet<u64> = m.runs.iter().map(|r| r.id).collect();
    let _ = manifest::remove_unreferenced(dir, &keep, parts);
    Ok(())
}

/// What a [`merge`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum MergeOutcome {
    /// The backend keeps no catalogue runs (memory).
    Unsupported,
    /// Another process is merging this database.
    Busy,
    /// The database does not exist.
    Gone,
    /// Too few new entries to be worth a merge.
    Nothing {
        /// Entries after the manifest's position.
        tail: usize,
    },
    /// Stopped on request (the store is closing); nothing was published.
    Stopped,
    /// A manifest was published.
    Published {
        /// Entries of the tail written as a new run.
        tail: usize,
        /// Runs the manifest names now.
        runs: usize,
        /// Entries in them.
        entries: u64,
    },
}

/// Merges the commits of `db` since its manifest's position into runs and publishes a new
/// manifest (design §3.1). With `full`, everything is merged into one run whatever the
/// policy says. Never changes the commit log; a merger killed at any point leaves the
/// previous manifest intact.
pub fn merge(
    backend: &dyn Backend,
    db: &Key,
    policy: &MergePolicy,
    stop: &AtomicBool,
    full: bool,
) -> Result<MergeOutcome> {
    let Some(dir) = backend.catalogue_dir(db)? else {
        return Ok(MergeOutcome::Unsupported);
    };
    match crate::perm::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(MergeOutcome::Gone),
        Err(e) => return Err(Error::io("create", &dir, e)),
    }
    let lock_path = dir.join(LOCK_FILE);
    let Some(lock) = lock_file(&lock_path, libc::LOCK_EX | libc::LOCK_NB)? else {
        return Ok(MergeOutcome::Busy);
    };
    let Some(mut reader) = backend.open_reader(db)? else {
        return Ok(MergeOutcome::Gone);
    };
    let (mut manifest, mut runs) = match load(&dir, reader.log_id()) {
        Ok(Some((m, r))) => {
            reader.seek(m.position);
            (m, r)
        }
        // No usable manifest: everything is tail.
        Ok(None) | Err(_) => (Manifest::default(), Vec::new()),
    };
    let mut tail = Overlay::default();
    let mut tail_dead = Dead::default();
    let mut tail_n = 0usize;
    let mut reset = false;
    let mut problems = std::mem::take(&mut manifest.problems);
    let commits = reader.poll()?;
    for c in commits {
        // (is a snapshot, entry positions) of a segment of this database; None for a wipe.
        let seg = match &c {
            Committed::Wiped => None,
            Committed::Unreadable { origin, detail } => {
                problems.push(format!("{origin}: {detail}"));
                continue;
            }
            Committed::Segment { bytes, origin } => match format::decode_segment_raw(bytes) {
                Ok(seg) if &seg.db == db => Some((seg.is_snapshot(), Positions::of(bytes, &seg))),
                Ok(seg) => {
                    problems.push(format!(
                        "{origin}: index segment names database {}, expected {db}",
                        seg.db
                    ));
                    continue;
                }
                Err(e) => {
                    problems.push(format!("{origin}: index segment: {e}"));
                    continue;
                }
            },
        };
        if seg.as_ref().is_none_or(|(snapshot, _)| *snapshot) {
            reset = true;
            tail.clear();
            tail_dead = Dead::default();
            problems.clear();
            runs.clear();
            manifest.runs.clear();
        }
        if let (Some((_, at)), Committed::Segment { bytes, .. }) = (seg, c) {
            tail_n += at.len();
            tail.apply(&mut tail_dead, bytes, &at);
        }
    }
    if !full && !reset && tail_n < policy.threshold {
        return Ok(MergeOutcome::Nothing { tail: tail_n });
    }
    // Phase 1, under the merge lock: the tail becomes a level-0 run, published at once.
    let mut refs: Vec<RunRef> = manifest.runs.clone();
    if !tail.is_empty() || tail_dead.fields > 0 {
        let flags = if refs.is_empty() { FLAG_BASE } else { 0 };
        let rr = writer::write_map(&dir, &tail, flags, 0, &tail_dead)?;
        runs.push(Run::open(&dir, &rr)?);
        refs.push(rr);
    }
    drop(tail);
    let log_id = reader.log_id();
    let mut current = Manifest {
        log_id,
        position: reader.position(),
        generation: manifest.generation + 1,
        runs: refs,
        problems,
    };
    // One compaction at a time; a merger that cannot take it leaves compaction to the one
    // that holds it (and must not remove its part files).
    let compact = lock_file(&dir.join(COMPACT_LOCK_FILE), libc::LOCK_EX | libc::LOCK_NB)?;
    let compacting = compact.is_some();
    publish(&dir, &current, compacting)?;
    drop(lock);
    // Phase 2, without the merge lock (level-0 runs keep being published meanwhile, so the
    // tail stays short): compactions, each published under the lock after re-reading the
    // manifest.
    if compacting {
        for pass in 0.. {
            let n = current.runs.len();
            let k = if full {
                if n <= 1 || pass > 0 { 0 } else { n }
            } else {
                let level = current.runs.last().map_or(0, |r| r.level);
                let same = (current.runs.iter().rev())
                    .take_while(|r| r.level == level)
                    .count();
                if same >= policy.fanout.max(2) {
                    same
                } else {
                    0
                }
            };
            if k == 0 {
                break;
            }
            let level = current.runs[n - k..]
                .iter()
                .map(|r| r.level)
                .max()
                .unwrap_or(0)
                + 1;
            let ids: Vec<u64> = current.runs[n - k..].iter().map(|r| r.id).collect();
            let inputs: Vec<&Run> = runs[n - k..].iter().collect();
            let rr = match writer::merge_runs(&dir, &inputs, k == n, level, stop)? {
                Ok(rr) => rr,
                Err(Stopped) => return Ok(MergeOutcome::Stopped),
            };
            drop(inputs);
            let lock =
                lock_file(&lock_path, libc::LOCK_EX)?.expect("a blocking lock is always taken");
            // The manifest as it is now: level-0 runs may have been added after the inputs.
            let fresh = match load(&dir, log_id) {
                Ok(Some(m)) => m,
                _ => {
                    let _ = fs::remove_file(manifest::part_path(&dir, rr.id));
                    break;
                }
            };
            let (mut m, _) = fresh;
            let at = m
                .runs
                .windows(k)
                .position(|w| w.iter().map(|r| r.id).eq(ids.iter().copied()));
            let Some(at) = at.filter(|&at| k != n || at == 0) else {
                // Replaced meanwhile (a wipe or purge started a new base): drop the result.
                let _ = fs::remove_file(manifest::part_path(&dir, rr.id));
                break;
            };
            writer::install(&dir, rr.id)?;
            m.runs.splice(at..at + k, [rr]);
            m.generation += 1;
            publish(&dir, &m, true)?;
            // Reopen what the new manifest names, for the next pass.
            runs = m
                .runs
                .iter()
                .map(|r| Run::open(&dir, r))
                .collect::<Result<Vec<_>>>()?;
            current = m;
            drop(lock);
        }
    }
    let entries = runs.iter().map(|r| r.n_entries).sum();
    let new = current;
    Ok(MergeOutcome::Published {
        tail: tail_n,
        runs: new.runs.len(),
        entries,
    })
}
