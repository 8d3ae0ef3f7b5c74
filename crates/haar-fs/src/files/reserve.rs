//! The space reserve of a mount (issue 27): a file of its own on the store's file system,
//! allocated, given back so that removals succeed when that file system is full.

/// Space held on the store's file system (a file of its own, allocated) so that removals
/// through the mount still succeed when that file system is full: a removal's records need a
/// little room, and on a full file system every other way to free space would fail
/// (issue 27). Given back for a removal once the store has said it is full; taken again by
/// the first barrier that finds the room.
#[derive(Debug)]
pub struct Reserve {
    path: std::path::PathBuf,
    size: u64,
    held: bool,
}

impl Reserve {
    /// Bytes a mount keeps by default: room for the records of many removals.
    pub const SIZE: u64 = 1 << 20;

    /// A reserve of `size` bytes in file `path` (not taken yet: [`Reserve::take`]).
    pub fn new(path: std::path::PathBuf, size: u64) -> Reserve {
        Reserve {
            path,
            size,
            held: false,
        }
    }

    /// The file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Allocates the file's bytes (again); false when there is no room (or the file cannot
    /// be made): the reserve is then not held.
    pub fn take(&mut self) -> bool {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        if self.held {
            return true;
        }
        let Ok(f) = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&self.path)
        else {
            return false;
        };
        // SAFETY: fallocate on a descriptor we own.
        let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, self.size as libc::off_t) };
        self.held = r == 0;
        if !self.held {
            let _ = std::fs::remove_file(&self.path);
        }
        self.held
    }

    /// Gives the bytes back to the file system.
    pub fn give_back(&mut self) {
        if std::mem::take(&mut self.held) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// True while the bytes are held.
    pub fn held(&self) -> bool {
        self.held
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        self.give_back();
    }
}
