//! Wipe and purge (dry runs unless asked), and the consumer's side: `haar_wait` (blocks until
//! a step's fields are flushed) and `haar_watch` (a callback per flushed field), both through
//! `haar::watch` with the options the handle was opened with (servers' WATCH streams, or
//! polling a local store).

use std::ffi::{CString, c_char, c_int, c_void};
use std::time::{Duration, Instant};

use haar::WaitOutcome;

use super::handles;
use super::store::haar_t;
use super::{HAAR_END, HAAR_ERR_TIMEOUT, HAAR_OK, put, requests_arg, run};
use crate::ffi::{self, Failure, FfiResult};

/// What `haar_wipe` removed (or, in a dry run, would remove).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Default, Clone, Copy)]
pub struct haar_wipe_report_t {
    /// Databases removed entirely.
    pub databases: usize,
    /// Fields removed from databases that stay.
    pub fields: usize,
    /// Bytes of those fields.
    pub bytes: u64,
}

/// What `haar_purge` dropped (or, in a dry run, would drop).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Default, Clone, Copy)]
pub struct haar_purge_report_t {
    /// Databases examined.
    pub databases: usize,
    /// Masked or wiped fields dropped.
    pub dropped_fields: u64,
    /// Bytes those held.
    pub dropped_bytes: u64,
    /// Bytes returned to the system.
    pub freed_bytes: u64,
}

/// What `haar_stats` counts over the databases a request selects.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Default, Clone, Copy)]
pub struct haar_stats_t {
    /// Databases selected (each counted once, also when several servers hold parts of it).
    pub databases: usize,
    /// Live fields.
    pub fields: u64,
    /// Bytes of the live fields.
    pub bytes: u64,
    /// Masked or wiped fields still occupying storage (what `haar_purge` drops).
    pub dead_fields: u64,
    /// Bytes of those.
    pub dead_bytes: u64,
    /// Damaged segments found while counting (their messages are not kept here: `haar info`
    /// names them).
    pub problems: usize,
}

/// A request that must be given (wipe, wait, watch): NULL is refused rather than meaning
/// "everything".
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn required(p: *const c_char, op: &str) -> FfiResult<Vec<haar::request::Request>> {
    if p.is_null() {
        return Err(Failure::input(format!(
            "request is NULL: {op} needs a request naming the fields (e.g. \"class=od,expver=1\")"
        )));
    }
    // SAFETY: per the caller's contract.
    unsafe { requests_arg(p) }
}

/// Removes the flushed fields matching `request` — only if `doit` is nonzero; otherwise a dry
/// run that reports what would go. `*report` (may be NULL) receives the totals. `request`
/// must not be NULL (no implicit "wipe everything").
///
/// Errors: `HAAR_ERR_INPUT` (bad handle or request), `HAAR_ERR_STORAGE`.
///
/// # Safety
/// `h` is a live handle; `request` is NUL-terminated; `report` is NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_wipe(
    h: *mut haar_t,
    request: *const c_char,
    doit: c_int,
    report: *mut haar_wipe_report_t,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        unsafe { put(report, haar_wipe_report_t::default()) };
        let opened = unsafe { handles::get(h, "h") }?;
        let reqs = unsafe { required(request, "wipe") }?;
        let mut total = haar_wipe_report_t::default();
        let mut store = opened.lock()?;
        for req in &reqs {
            let r = store.wipe(req, doit != 0)?;
            total.databases += r.databases.len();
            total.fields += r.fields;
            total.bytes += r.bytes;
        }
        // SAFETY: per the caller's contract.
        unsafe { put(report, total) };
        Ok(HAAR_OK)
    })
}

/// Drops masked and wiped fields from the databases matching `request` (NULL: all) and gives
/// their space back — only if `doit` is nonzero; otherwise a dry run. `*report` (may be
/// NULL) receives the totals.
///
/// Errors: `HAAR_ERR_INPUT` (bad handle or request), `HAAR_ERR_STORAGE`.
///
/// # Safety
/// `h` is a live handle; `request` is NULL or NUL-terminated; `report` is NULL or valid for
/// writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_purge(
    h: *mut haar_t,
    request: *const c_char,
    doit: c_int,
    report: *mut haar_purge_report_t,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        unsafe { put(report, haar_purge_report_t::default()) };
        let opened = unsafe { handles::get(h, "h") }?;
        let reqs = unsafe { requests_arg(request) }?;
        let mut total = haar_purge_report_t::default();
        let mut store = opened.lock()?;
        for req in &reqs {
            let r = store.purge(req, doit != 0)?;
            total.databases += r.databases;
            total.dropped_fields += r.dropped_fields;
            total.dropped_bytes += r.dropped_bytes;
            total.freed_bytes += r.freed_bytes;
        }
        // SAFETY: per the caller's contract.
        unsafe { put(report, total) };
        Ok(HAAR_OK)
    })
}

/// Counts the databases matching `request` (NULL: all): live fields and bytes, and the dead
/// ones `haar_purge` would drop, summed into `*stats` (set to zeros first; must not be NULL).
///
/// Errors: `HAAR_ERR_INPUT` (bad handle, request or NULL `stats`), `HAAR_ERR_STORAGE`.
///
/// # Safety
/// `h` is a live handle; `request` is NULL or NUL-terminated; `stats` is valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_stats(
    h: *mut haar_t,
    request: *const c_char,
    stats: *mut haar_stats_t,
) -> c_int {
    run(|| {
        if stats.is_null() {
            return Err(Failure::input("stats is NULL: pass a haar_stats_t to fill"));
        }
        // SAFETY: per the caller's contract.
        unsafe { put(stats, haar_stats_t::default()) };
        let opened = unsafe { handles::get(h, "h") }?;
        let reqs = unsafe { requests_arg(request) }?;
        let mut total = haar_stats_t::default();
        let mut databases = std::collections::HashSet::new();
        let store = opened.lock()?;
        for req in &reqs {
            for db in store.stats(req)? {
                databases.insert(db.db);
                total.fields += db.fields;
                total.bytes += db.bytes;
                total.dead_fields += db.dead_fields;
                total.dead_bytes += db.dead_bytes;
                total.problems += db.problems.len();
            }
        }
        total.databases = databases.len();
        // SAFETY: per the caller's contract.
        unsafe { put(stats, total) };
        Ok(HAAR_OK)
    })
}

/// A timeout in seconds as a duration; the error names the argument.
fn timeout_arg(s: f64) -> FfiResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        Failure::input(format!(
            "timeout_s = {s}: give a finite number of seconds, 0 or more"
        ))
    })
}

/// The one request of a wait or watch.
///
/// # Safety
/// As [`required`].
unsafe fn one_request(p: *const c_char, op: &str) -> FfiResult<haar::request::Request> {
    // SAFETY: per the caller's contract.
    let mut reqs = unsafe { required(p, op) }?;
    if reqs.len() != 1 {
        return Err(Failure::input(format!(
            "{op} takes one request, and {} were given",
            reqs.len()
        )));
    }
    Ok(reqs.remove(0))
}

/// Blocks until every field `request` names is flushed (the "step complete" trigger) or
/// `timeout_s` seconds pass. `request` must name every keyword's values explicitly (no
/// `all`). Works for the store or servers `h` was opened on (servers push flush events; a
/// local store is polled every 10 ms), including fields flushed by other processes.
/// `*fields_out` (may be NULL) receives the number of fields the request names. Does not lock
/// `h`: other threads may archive through it meanwhile. It opens the store again from `h`'s
/// configuration, so a `backend: memory` store (tests only, not shared) is seen empty.
///
/// Errors: `HAAR_ERR_TIMEOUT` (the message names the first missing keys),
/// `HAAR_ERR_INPUT` (bad handle, request or timeout), `HAAR_ERR_STORAGE` (e.g. a server
/// cannot be reached).
///
/// # Safety
/// `h` is a live handle; `request` is NUL-terminated; `fields_out` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_wait(
    h: *mut haar_t,
    request: *const c_char,
    timeout_s: f64,
    fields_out: *mut usize,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        unsafe { put(fields_out, 0) };
        // Only the configuration is needed: the handle is not held while waiting, so that
        // closing it meanwhile does not wait for the timeout.
        let opts = unsafe { handles::get(h, "h") }?.opts.clone();
        let req = unsafe { one_request(request, "wait") }?;
        let timeout = timeout_arg(timeout_s)?;
        match haar::watch::wait(&opts, &req, timeout)? {
            WaitOutcome::Complete { fields } => {
                // SAFETY: per the caller's contract.
                unsafe { put(fields_out, fields) };
                Ok(HAAR_OK)
            }
            WaitOutcome::TimedOut { missing } => {
                // The library's message without its error class ("configuration: ").
                let message = match haar::watch::timed_out(&req, &missing) {
                    haar::Error::Config(m) => m,
                    e => e.to_string(),
                };
                ffi::set_last_error(&message);
                Ok(HAAR_ERR_TIMEOUT)
            }
        }
    })
}

/// Called by `haar_watch` once per flushed field: `ctx` as given, the field's full key as
/// text, its length in bytes, and where it was flushed (server address or store). The strings
/// are valid during the call only. Return 0 to go on, nonzero to stop the watch.
#[allow(non_camel_case_types)]
pub type haar_watch_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        key: *const c_char,
        length: u64,
        origin: *const c_char,
    ) -> c_int,
>;

/// Calls `callback` once for every flushed field matching `request` (those already flushed
/// first, then each as it is flushed, by any process) until the callback returns nonzero
/// (`HAAR_OK`) or `timeout_s` seconds pass (`HAAR_END`, not an error). `*events_out` (may be
/// NULL) receives the number of callbacks made. The callback runs on the calling thread; it
/// may call libhaar (even with `h`: the watch does not lock it). Like `haar_wait`, it opens
/// the store again from `h`'s configuration (a `backend: memory` store is seen empty).
///
/// Errors: `HAAR_ERR_INPUT` (bad handle, request, callback or timeout),
/// `HAAR_ERR_STORAGE` (a server failed: the message names it; call again to resubscribe).
///
/// # Safety
/// `h` is a live handle; `request` is NUL-terminated; `callback` is a valid function that
/// does not unwind; `events_out` is NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn haar_watch(
    h: *mut haar_t,
    request: *const c_char,
    callback: haar_watch_fn,
    ctx: *mut c_void,
    timeout_s: f64,
    events_out: *mut usize,
) -> c_int {
    run(|| {
        // SAFETY: per the caller's contract.
        unsafe { put(events_out, 0) };
        // Not held while watching: a callback may close `h` (or another thread may), and a
        // close must not wait for the watch's deadline.
        let opts = unsafe { handles::get(h, "h") }?.opts.clone();
        let req = unsafe { one_request(request, "watch") }?;
        let timeout = timeout_arg(timeout_s)?;
        let Some(cb) = callback else {
            return Err(Failure::input(
                "callback is NULL: pass a function to call per flushed field",
            ));
        };
        let deadline = Instant::now() + timeout;
        let mut watcher = haar::watch::Watcher::open(&opts, &req)?;
        let mut events = 0usize;
        let end = loop {
            let Some(ev) = watcher.next_before(deadline) else {
                break HAAR_END;
            };
            let ev = ev?;
            let key = CString::new(ev.key.to_string()).unwrap_or_default();
            let origin = CString::new(ev.origin).unwrap_or_default();
            events += 1;
            // SAFETY: per the caller's contract; the strings live through the call.
            let stop = unsafe { cb(ctx, key.as_ptr(), ev.length, origin.as_ptr()) };
            // SAFETY: per the caller's contract.
            unsafe { put(events_out, events) };
            if stop != 0 {
                break HAAR_OK;
            }
        };
        Ok(end)
    })
}
