//! Framing an input into GRIB messages and keying them: the jobs the key workers share, in
//! input and message order.
//!
//! Owns the work queue, each message's outcome (its split key, "filtered out", or the fault
//! with message number and byte offset) and the rule that messages after a file's first fault
//! are not keyed. It must not touch the store: it splits keys with a copy of the store's
//! schema and context, so the store stays free for the thread that archives.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use haar_core::Key;
use haar_core::request::Request;
use haar_core::schema::SplitKey;
use haar_store::StoreOptions;

use super::input::{Bytes, changed_while_read};

/// What every message is filtered and keyed with.
pub(crate) struct Keying<'a> {
    /// The store's schema and context (a copy: the store stays free for the archiving thread).
    pub options: &'a StoreOptions,
    /// Keys set on every field (over the GRIB keys); the whole key of a raw input.
    pub overrides: &'a Key,
    /// Resolved filters: only fields matching `include`, none matching `exclude`.
    pub include: &'a Option<Request>,
    pub exclude: &'a Option<Request>,
}

/// Outcome of one message: its split key, `None` when a filter leaves it out, or the fault.
pub(crate) type Outcome = Result<Option<SplitKey>, String>;

impl Keying<'_> {
    fn message(&self, name: &str, msg: &[u8], number: usize, offset: usize) -> Outcome {
        let at = || format!("{name}: message {number} (1-based) at byte offset {offset}");
        let pairs = haar_grib::mars_keys(msg).map_err(|e| format!("{}: {e}", at()))?;
        let mut key: Key = pairs.into_iter().collect();
        for (k, v) in self.overrides.iter() {
            key.push(k, v);
        }
        let split = (self.options.split(&key)).map_err(|e| format!("{}: {e}", at()))?;
        let full = split.full();
        let keep = self.include.as_ref().is_none_or(|r| r.matches(&full))
            && !self.exclude.as_ref().is_some_and(|r| r.matches(&full));
        Ok(keep.then_some(split))
    }
}

/// One opened input: its framed messages and, as the workers produce them, their outcomes.
/// A raw input (no GRIB in it, a key given) is one message keyed from the start.
pub(crate) struct Job<'a> {
    pub name: String,
    pub bytes: Bytes<'a>,
    /// (0-based message number, byte offset, length) of every framed message.
    pub msgs: Vec<(usize, usize, usize)>,
    /// Next message to claim.
    next: AtomicUsize,
    /// Messages finished (keyed, filtered out, failed or skipped after a fault).
    done: AtomicUsize,
    /// Lowest message position that failed; messages after it are skipped, not keyed.
    first_fault: AtomicUsize,
    outcomes: Vec<OnceLock<Outcome>>,
}

impl<'a> Job<'a> {
    /// Opens `bytes` as the input `name`: frames its GRIB messages, or, when it holds none
    /// and `keying` has keys to give, makes it one raw field under them.
    pub(super) fn open(
        name: String,
        bytes: Bytes<'a>,
        keying: &Keying<'_>,
    ) -> Result<Job<'a>, String> {
        match frame(&name, &bytes, keying) {
            // Zeros where a truncated mapping was are no fault of the file's format.
            Err(_) if bytes.changed() => Err(changed_while_read(&name)),
            Err(e) => Err(e),
            Ok(Framed::Grib(msgs)) => {
                let n = msgs.len();
                Ok(Job {
                    name,
                    bytes,
                    first_fault: AtomicUsize::new(n),
                    msgs,
                    next: AtomicUsize::new(0),
                    done: AtomicUsize::new(0),
                    outcomes: (0..n).map(|_| OnceLock::new()).collect(),
                })
            }
            Ok(Framed::Raw(split)) => Ok(Job {
                name,
                msgs: vec![(0, 0, bytes.len())],
                bytes,
                first_fault: AtomicUsize::new(1),
                next: AtomicUsize::new(1),
                done: AtomicUsize::new(1),
                outcomes: vec![OnceLock::from(Ok(Some(split)))],
            }),
        }
    }

    /// True once every message has been claimed by a worker (nothing left to queue).
    pub(super) fn all_claimed(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.msgs.len()
    }

    fn complete(&self) -> bool {
        self.done.load(Ordering::Acquire) == self.msgs.len()
    }

    /// Claims and keys one message; false when none is left to claim.
    pub(super) fn work_one(&self, keying: &Keying<'_>, shared: &Shared<'_>) -> bool {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(&(index, offset, len)) = self.msgs.get(i) else {
            return false;
        };
        if i < self.first_fault.load(Ordering::Acquire) {
            let r = keying.message(
                &self.name,
                &self.bytes[offset..offset + len],
                index + 1,
                offset,
            );
            let failed = r.is_err();
            let _ = self.outcomes[i].set(r);
            if failed {
                // After the outcome is set (Release): a reader that sees the fault's position
                // (Acquire) sees its outcome too, never "skipped" for the fault itself.
                self.first_fault.fetch_min(i, Ordering::Release);
            }
        }
        self.done.fetch_add(1, Ordering::AcqRel);
        // Every message, not only the last: the archiving thread stores a file's fields in
        // message order as they come. Under the lock, so a waiter that checked cannot miss the
        // wake-up.
        let _guard = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        shared.wake.notify_all();
        true
    }

    /// The outcome of message position `i`, keying this input's messages while it is not
    /// ready; `None` if it was skipped after an earlier fault.
    pub(super) fn outcome(
        &self,
        i: usize,
        keying: &Keying<'_>,
        shared: &Shared<'_>,
    ) -> Option<&Outcome> {
        loop {
            if let Some(o) = self.outcomes[i].get() {
                return Some(o);
            }
            if i >= self.first_fault.load(Ordering::Acquire) {
                // Skipped after an earlier fault, or the fault itself, whose outcome was set
                // before its position was published: look once more.
                return self.outcomes[i].get();
            }
            if !self.work_one(keying, shared) {
                // Every message is claimed: wait for the worker keying this one.
                let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
                while self.outcomes[i].get().is_none() && !self.complete() {
                    q = shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
                }
                return self.outcomes[i].get();
            }
        }
    }

    /// Helps key this input's messages, then waits for the workers' last ones; the first
    /// fault, if any.
    pub(super) fn finish(&self, keying: &Keying<'_>, shared: &Shared<'_>) -> Option<&str> {
        while self.work_one(keying, shared) {}
        let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        while !self.complete() {
            q = shared.wake.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        drop(q);
        let first = self.first_fault.load(Ordering::Acquire);
        match self.outcomes.get(first).and_then(OnceLock::get) {
            Some(Err(e)) => Some(e),
            _ => None,
        }
    }
}

/// State shared by the archiving thread and the key workers.
pub(crate) struct Shared<'a> {
    /// Opened inputs whose messages are not all claimed yet, oldest first; `None` when no more
    /// will come.
    queue: Mutex<Option<VecDeque<Arc<Job<'a>>>>>,
    wake: Condvar,
}

impl<'a> Shared<'a> {
    pub(super) fn new() -> Self {
        Shared {
            queue: Mutex::new(Some(VecDeque::new())),
            wake: Condvar::new(),
        }
    }

    /// Hands `job` to the workers.
    pub(super) fn push(&self, job: Arc<Job<'a>>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(q) = q.as_mut() {
            q.push_back(job);
        }
        self.wake.notify_all();
    }

    /// A key worker: keys messages of the oldest inputs until the queue is closed.
    pub(super) fn work(&self, keying: &Keying<'_>) {
        while let Some(job) = self.next_job() {
            job.work_one(keying, self);
        }
    }

    /// The oldest job with a message left to claim, or `None` once no more will come.
    fn next_job(&self) -> Option<Arc<Job<'a>>> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let jobs = q.as_mut()?;
            while jobs.front().is_some_and(|j| j.all_claimed()) {
                jobs.pop_front();
            }
            if let Some(j) = jobs.front() {
                return Some(j.clone());
            }
            q = self.wake.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Closes the work queue when dropped: the key workers finish their message and return.
pub(crate) struct StopWorkers<'s, 'a>(pub &'s Shared<'a>);

impl Drop for StopWorkers<'_, '_> {
    fn drop(&mut self) {
        let mut q = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
        *q = None;
        self.0.wake.notify_all();
    }
}

/// What framing found: GRIB messages (number, offset, length), or raw bytes to store whole.
enum Framed {
    Grib(Vec<(usize, usize, usize)>),
    Raw(SplitKey),
}

fn frame(name: &str, bytes: &[u8], keying: &Keying<'_>) -> Result<Framed, String> {
    let mut msgs = Vec::new();
    for m in haar_grib::messages(bytes) {
        match m {
            Ok(m) => msgs.push((m.index, m.offset as usize, m.bytes.len())),
            // No GRIB message at all: raw bytes, archived whole under the given key.
            Err(haar_grib::FrameError::NotGrib { .. }) if msgs.is_empty() => {
                let key = keying.overrides;
                if key.is_empty() {
                    return Err(format!(
                        "{name}: not a GRIB file (no GRIB message found); to archive raw bytes give their key with --key k=v,..."
                    ));
                }
                return match keying.options.split(key) {
                    Ok(split) => Ok(Framed::Raw(split)),
                    Err(e) => Err(format!("{name}: {e}")),
                };
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    }
    if msgs.is_empty() {
        return Err(format!("{name}: no complete GRIB message"));
    }
    Ok(Framed::Grib(msgs))
}
