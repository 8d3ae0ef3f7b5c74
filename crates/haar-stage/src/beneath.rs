//! Paths inside a dataspace, resolved without leaving it: every open goes through
//! `openat2(2)` relative to a descriptor of the dataspace's root (or of a directory already
//! opened below it) with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, so
//! neither a `..` nor a symbolic link a user planted anywhere on the way leads out of it, and
//! what is then changed (mode, ACL, removal) is the very object that was opened (through
//! `/proc/self/fd/N`, which names the descriptor's inode, not a path looked up again).
//!
//! Owns path resolution only; what is done with the objects is [`crate::persist`]'s.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Opens `rel` below the directory `dir` with `flags` (plus `O_NOFOLLOW | O_CLOEXEC`),
/// refusing any symbolic link on the way (`ELOOP`) and any way out of `dir` (`EXDEV`).
/// `rel` must be relative, made of plain names only.
pub fn open_at(dir: &impl AsRawFd, rel: &Path, flags: i32) -> std::io::Result<File> {
    if rel.as_os_str().is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a plain relative path", rel.display()),
        ));
    }
    let c = CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: open_how is a plain C struct; all-zero is its valid empty value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: a valid directory descriptor, a NUL-terminated path and an open_how of the size
    // passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor openat2 just returned, owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd as RawFd) })
}

/// Opens the directory `path` (a dataspace's root, named by the configuration: followed as
/// given) as an `O_PATH` descriptor to resolve below.
pub fn open_root(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(path)
}

/// The name of the object `fd` refers to for path-taking calls (chmod, setxattr, unlink of a
/// child): `/proc/self/fd/N`, a link to the inode itself, never resolved again by name.
pub fn fd_path(fd: &impl AsRawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Removes `rel` (a file, or a directory and everything below it) below `dir`: its parent is
/// opened beneath `dir` without following links, and the removal below the parent follows
/// none either (std's `remove_dir_all` opens each level `O_NOFOLLOW`).
pub fn remove_at(dir: &impl AsRawFd, rel: &Path) -> std::io::Result<()> {
    let name = rel.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no name to remove")
    })?;
    let parent_rel = rel.parent().unwrap_or(Path::new(""));
    let parent = if parent_rel.as_os_str().is_empty() {
        None
    } else {
        Some(open_at(dir, parent_rel, libc::O_PATH | libc::O_DIRECTORY)?)
    };
    let parent_path = match &parent {
        Some(p) => fd_path(p),
        None => fd_path(dir),
    };
    let target = parent_path.join(name);
    let meta = std::fs::symlink_metadata(&target)?;
    if meta.is_dir() {
        std::fs::remove_dir_all(&target)
    } else {
        std::fs::remove_file(&target)
    }
}

/// What `err` from [`open_at`] means to a user (empty when it says it itself).
pub fn explain(err: &std::io::Error) -> &'static str {
    match err.raw_os_error() {
        Some(libc::ELOOP) => "a symbolic link is on the way (links are not followed here)",
        Some(libc::EXDEV) => "it leads out of the dataspace",
        Some(libc::ENOSYS) => "this kernel lacks openat2 (Linux 5.6 or later is needed)",
        _ => "",
    }
}
