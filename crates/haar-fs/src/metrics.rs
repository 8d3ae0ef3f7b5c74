//! What a mount counts (docs/operations.md, "Metrics"): the kernel's requests by operation,
//! their latency, the bytes read and written, and failures by errno (ENOSPC among them);
//! shown in the OpenMetrics text format by haar-net's endpoint (`haar mount --metrics ADDR`).
//! Also who made the request being answered on this thread ([`requester`]), so that the
//! events of the layers below name the uid and pid without a span per request (a span costs
//! about as much as a small request's answer).
//!
//! Owns the metric names and labels; the FUSE glue ([`crate::fuse`]) decides when to count.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The operations a mount answers, as the `op` label names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // each is the FUSE request of its name
pub enum Op {
    Lookup,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Symlink,
    Unlink,
    Rmdir,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Readdir,
    Statfs,
    Create,
    Xattr,
}

impl Op {
    const ALL: [Op; 21] = [
        Op::Lookup,
        Op::Getattr,
        Op::Setattr,
        Op::Readlink,
        Op::Mknod,
        Op::Mkdir,
        Op::Symlink,
        Op::Unlink,
        Op::Rmdir,
        Op::Rename,
        Op::Link,
        Op::Open,
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Release,
        Op::Fsync,
        Op::Readdir,
        Op::Statfs,
        Op::Create,
        Op::Xattr,
    ];

    /// The `op` label.
    pub fn name(self) -> &'static str {
        match self {
            Op::Lookup => "lookup",
            Op::Getattr => "getattr",
            Op::Setattr => "setattr",
            Op::Readlink => "readlink",
            Op::Mknod => "mknod",
            Op::Mkdir => "mkdir",
            Op::Symlink => "symlink",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Rename => "rename",
            Op::Link => "link",
            Op::Open => "open",
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Release => "release",
            Op::Fsync => "fsync",
            Op::Readdir => "readdir",
            Op::Statfs => "statfs",
            Op::Create => "create",
            Op::Xattr => "xattr",
        }
    }
}

/// The symbolic name of an errno (the `errno` label); `other` for one not listed.
pub fn errno_name(e: i32) -> &'static str {
    match e {
        libc::ENOENT => "ENOENT",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::EROFS => "EROFS",
        libc::EXDEV => "EXDEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::EDQUOT => "EDQUOT",
        libc::EIO => "EIO",
        libc::ESTALE => "ESTALE",
        libc::EBADF => "EBADF",
        libc::ENOTSUP => "ENOTSUP",
        libc::ENODATA => "ENODATA",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::EFBIG => "EFBIG",
        libc::ENOMEM => "ENOMEM",
        libc::ERANGE => "ERANGE",
        _ => "other",
    }
}

/// A mount's counters.
pub struct MountMetrics {
    registry: Registry,
    /// Per [`Op`], in [`Op::ALL`]'s order: made once, so that counting takes no lock.
    ops: Vec<(Counter, Histogram)>,
    read_bytes: Counter,
    written_bytes: Counter,
    errors: Family<[(&'static str, &'static str); 2], Counter>,
    full: Gauge,
    /// The writable part's "storage is full" state, read at each scrape.
    full_flag: OnceLock<Arc<AtomicBool>>,
}

impl Default for MountMetrics {
    fn default() -> MountMetrics {
        let mut registry = Registry::with_prefix("haar_mount");
        let count = Family::<[(&'static str, &'static str); 1], Counter>::default();
        let latency = Family::<[(&'static str, &'static str); 1], Histogram, fn() -> Histogram>::new_with_constructor(
            haar::metrics::latency_histogram,
        );
        let bytes = Family::<[(&'static str, &'static str); 1], Counter>::default();
        let ops = Op::ALL
            .iter()
            .map(|op| {
                let l = [("op", op.name())];
                (
                    count.get_or_create(&l).clone(),
                    latency.get_or_create(&l).clone(),
                )
            })
            .collect();
        let read_bytes = bytes.get_or_create(&[("op", "read")]).clone();
        let written_bytes = bytes.get_or_create(&[("op", "write")]).clone();
        let errors = Family::default();
        let full = Gauge::default();
        // The client appends `_total` to counters.
        registry.register(
            "operations",
            "Requests of the kernel answered, by operation (failed ones too)",
            count,
        );
        registry.register(
            "operation_duration_seconds",
            "Time from a request's arrival in haar to its answer, by operation",
            latency,
        );
        registry.register(
            "bytes",
            "Bytes read and written through the mount (fields/ and the writable part), by operation",
            bytes,
        );
        registry.register(
            "errors",
            "Requests answered with an error, by operation and errno (ENOENT of a lookup is a name that is not there)",
            errors.clone(),
        );
        registry.register(
            "storage_full",
            "1 while the store's storage is full (writes and creations fail with ENOSPC or EDQUOT; removals work), else 0",
            full.clone(),
        );
        MountMetrics {
            registry,
            ops,
            read_bytes,
            written_bytes,
            errors,
            full,
            full_flag: OnceLock::new(),
        }
    }
}

thread_local! {
    static REQUESTER: Cell<(&'static str, u32, u32)> = const { Cell::new(("", 0, 0)) };
}

/// The operation, uid and pid of the request this thread is answering (`("", 0, 0)` outside
/// one): the fields of the events the layers below log.
pub fn requester() -> (&'static str, u32, u32) {
    REQUESTER.with(Cell::get)
}

/// One request being answered; [`Call::done`] counts it.
pub struct Call<'a> {
    metrics: &'a MountMetrics,
    op: Op,
    start: Instant,
}

impl MountMetrics {
    /// Starts counting a request of `op` by `uid`/`pid`.
    pub fn call(&self, op: Op, uid: u32, pid: u32) -> Call<'_> {
        REQUESTER.with(|r| r.set((op.name(), uid, pid)));
        Call {
            metrics: self,
            op,
            start: Instant::now(),
        }
    }

    /// Shows the writable part's full state (`haar_mount_storage_full`) from `flag`.
    pub fn watch_full(&self, flag: Arc<AtomicBool>) {
        let _ = self.full_flag.set(flag);
    }

    fn done(&self, op: Op, seconds: f64, errno: Option<i32>, bytes: u64) {
        let (count, latency) = &self.ops[op as usize];
        count.inc();
        latency.observe(seconds);
        match op {
            Op::Read => {
                self.read_bytes.inc_by(bytes);
            }
            Op::Write => {
                self.written_bytes.inc_by(bytes);
            }
            _ => {}
        }
        if let Some(e) = errno {
            self.errors
                .get_or_create(&[("op", op.name()), ("errno", errno_name(e))])
                .inc();
            let (_, uid, pid) = requester();
            tracing::debug!(
                op = op.name(),
                uid,
                pid,
                errno = errno_name(e),
                "answered with an error"
            );
        }
        REQUESTER.with(|r| r.set(("", 0, 0)));
    }
}

impl Call<'_> {
    /// Counts the request: answered with `errno`, or well having moved `bytes` (reads and
    /// writes).
    pub fn done(self, errno: Option<i32>, bytes: u64) {
        let seconds = self.start.elapsed().as_secs_f64();
        self.metrics.done(self.op, seconds, errno, bytes);
    }

    /// Counts the request by its result (no bytes).
    pub fn result<T>(self, r: &Result<T, i32>) {
        self.done(r.as_ref().err().copied(), 0)
    }
}

impl haar::metrics::Exposition for MountMetrics {
    fn render(&self) -> String {
        if let Some(f) = self.full_flag.get() {
            self.full.set(i64::from(f.load(Ordering::Relaxed)));
        }
        haar::metrics::encode_registry(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_are_counted_by_name_with_bytes_errnos_and_the_full_state() {
        let m = MountMetrics::default();
        let flag = Arc::new(AtomicBool::new(false));
        m.watch_full(flag.clone());
        m.call(Op::Write, 1000, 42).done(None, 4096);
        let c = m.call(Op::Create, 1000, 42);
        assert_eq!(requester(), ("create", 1000, 42));
        c.done(Some(libc::ENOSPC), 0);
        assert_eq!(requester(), ("", 0, 0));
        flag.store(true, Ordering::Relaxed);
        let text = haar::metrics::Exposition::render(&m);
        for line in [
            "haar_mount_operations_total{op=\"write\"} 1",
            "haar_mount_operations_total{op=\"create\"} 1",
            "haar_mount_operations_total{op=\"lookup\"} 0",
            "haar_mount_bytes_total{op=\"write\"} 4096",
            "haar_mount_errors_total{op=\"create\",errno=\"ENOSPC\"} 1",
            "haar_mount_operation_duration_seconds_count{op=\"write\"} 1",
            "haar_mount_storage_full 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in {text}");
        }
        assert_eq!(Op::ALL.len(), m.ops.len());
        assert!(Op::ALL.iter().enumerate().all(|(i, op)| *op as usize == i));
    }
}
