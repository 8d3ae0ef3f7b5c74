//! Durability in a posix database (design §4.4): the fsync policy and the calls it governs.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

/// When the posix backend calls `fdatasync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// Data, index and commit record are synced at every flush (survives power loss).
    Always,
    /// Never sync (survives kill -9, not power loss).
    Never,
}

pub(super) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub(super) fn sync(file: &File, path: &Path, policy: FsyncPolicy) -> Result<()> {
    if policy == FsyncPolicy::Always {
        file.sync_data()
            .map_err(|e| Error::io("fdatasync", path, e))?;
    }
    Ok(())
}

/// Makes the entries of directory `dir` durable (files created, renamed or removed in it):
/// `fsync` of a file does not make its name durable (fsync(2)), so every name a commit relies
/// on is synced before the commit. A file system that cannot sync a directory (EINVAL) has
/// nothing to sync.
pub(super) fn sync_dir(dir: &Path, policy: FsyncPolicy) -> Result<()> {
    if policy != FsyncPolicy::Always {
        return Ok(());
    }
    match File::open(dir).and_then(|d| d.sync_all()) {
        Err(e) if e.raw_os_error() != Some(libc::EINVAL) => Err(Error::io("fsync", dir, e)),
        _ => Ok(()),
    }
}
