//! The store usage gauges a local store's server reports at each `/metrics` scrape.

use std::sync::{Arc, Mutex};

use haar_core::request::Request;
use haar_store::{Backend, Store, StoreOptions};

/// What the store usage gauges of a local store's server are found with at a scrape: the
/// figures `haar info` reports (every database's live and dead bytes, a pmem pool's heap)
/// and `statvfs` of each root or pool file. One store is kept between scrapes so that its
/// catalogues are not reopened each time.
pub(super) fn usage_probe(
    backend: Arc<dyn Backend>,
    options: StoreOptions,
) -> crate::metrics::UsageProbe {
    use crate::metrics::{PoolUsage, Usage};
    let store = Mutex::new(Store::with_options(backend, options));
    Box::new(move || {
        let store = store.lock().unwrap_or_else(|p| p.into_inner());
        let dbs = match store.stats(&Request::default()) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: cannot add up the store's usage");
                return None;
            }
        };
        let info = store.backend().info();
        let pool = info["heap_used_bytes"]
            .as_u64()
            .map(|heap_used_bytes| PoolUsage {
                size_bytes: info["pool_bytes"].as_u64().unwrap_or(0),
                heap_used_bytes,
                free_bytes: info["free_bytes"].as_u64().unwrap_or(0),
            });
        let paths: Vec<String> = match (&info["roots"], &info["pool"]) {
            (serde_json::Value::Array(roots), _) => roots
                .iter()
                .filter_map(|r| r.as_str().map(String::from))
                .collect(),
            (_, serde_json::Value::String(pool)) => vec![pool.clone()],
            _ => Vec::new(),
        };
        let disks = paths
            .into_iter()
            .filter_map(|p| {
                let (size, free) = statvfs_bytes(&p)?;
                Some((p, size, free))
            })
            .collect();
        Some(Usage {
            databases: dbs.len() as u64,
            fields: dbs.iter().map(|d| d.fields).sum(),
            live_bytes: dbs.iter().map(|d| d.bytes).sum(),
            dead_bytes: dbs.iter().map(|d| d.dead_bytes).sum(),
            pool,
            disks,
        })
    })
}

/// Size and bytes free to unprivileged writers of the file system holding `path`.
fn statvfs_bytes(path: &str) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: a valid C string and a zeroed struct of the right type.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some((st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize))
}
