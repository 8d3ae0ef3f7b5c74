//! The errnos of the writable part: what every operation fails with, and the errno a store
//! error stands for (ENOSPC, EDQUOT, else EIO, logged).

/// An errno (positive), what every operation fails with.
pub type Errno = i32;

/// Logs a failure of the store that the mount answers with EIO, naming the request's
/// process, and returns EIO.
pub(super) fn io_err(what: &str, e: impl std::fmt::Display) -> Errno {
    let (op, uid, pid) = crate::metrics::requester();
    tracing::error!(op, uid, pid, errno = "EIO", "{what}: {e}");
    libc::EIO
}

/// The errno a store error stands for: ENOSPC for full storage (the file system's, or a pmem
/// pool that cannot grow), EDQUOT for a quota, else EIO.
pub fn errno_of(e: &haar::Error) -> Errno {
    use haar::Error;
    let of_io = |io: &std::io::Error| {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(io);
        while let Some(c) = cur {
            if let Some(code) = c
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::raw_os_error)
                .filter(|c| [libc::ENOSPC, libc::EDQUOT].contains(c))
            {
                return Some(code);
            }
            cur = c.source();
        }
        None
    };
    let found = match e {
        Error::PoolFull { .. } => Some(libc::ENOSPC),
        Error::Io { source, .. } | Error::Net { source, .. } => of_io(source),
        Error::Lanes { failures, .. } => failures.0.first().map(|(_, e)| errno_of(e)),
        _ => None,
    };
    // A server's own full storage arrives as its message.
    let text = e.to_string();
    found.unwrap_or(
        if text.contains("No space left on device") || text.contains("is full") {
            libc::ENOSPC
        } else if text.contains("Disk quota exceeded") {
            libc::EDQUOT
        } else {
            libc::EIO
        },
    )
}
