//! File systems: the mount table (`/proc/mounts`, with its `dax` option) and the space and kind
//! of the file system holding a directory (`statvfs`/`statfs`).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::sysfs::read;

/// Space and kind of the file system holding `dir`.
#[derive(Debug, Clone, Serialize)]
pub struct FsInfo {
    /// Bytes an unprivileged writer may still allocate (`f_bavail * f_frsize`).
    pub available: u64,
    /// Whether it is tmpfs (its pages are memory, so `MemAvailable` bounds it too).
    pub tmpfs: bool,
    /// The file-system type name from the mount table, when found.
    pub fs_type: Option<String>,
    /// Whether the mount has a `dax` option.
    pub dax: bool,
    /// The mount point holding `dir`.
    pub mount_point: Option<PathBuf>,
}

/// `statvfs`/`statfs` of `dir`, plus its mount-table entry.
///
/// # Errors
/// The system call's error (for example, `dir` does not exist).
pub fn fs_info(dir: &Path) -> std::io::Result<FsInfo> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("path contains a NUL byte"))?;
    // SAFETY: zeroed statvfs/statfs are valid out-parameters; `c` is NUL-terminated.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut vfs) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = read(Path::new("/"), "proc/mounts")
        .map(|t| parse_mounts(&t))
        .unwrap_or_default();
    let mount = mounts
        .iter()
        .filter(|m| canon.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len());
    Ok(FsInfo {
        available: vfs.f_bavail as u64 * vfs.f_frsize as u64,
        tmpfs: fs.f_type as i64 == TMPFS_MAGIC,
        fs_type: mount.map(|m| m.fs_type.clone()),
        dax: mount.is_some_and(|m| m.dax),
        mount_point: mount.map(|m| m.mount_point.clone()),
    })
}

/// One line of `/proc/mounts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// Device (e.g. `/dev/pmem0`).
    pub device: String,
    /// Mount point.
    pub mount_point: PathBuf,
    /// File-system type.
    pub fs_type: String,
    /// Whether the options include `dax` (or `dax=always`); `dax=never` does not count.
    pub dax: bool,
}

/// Parses `/proc/mounts` (octal escapes such as `\040` in paths are decoded).
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    fn unescape(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\'
                && i + 3 < b.len()
                && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
            {
                out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
                i += 4;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 4 {
                return None;
            }
            let dax = f[3]
                .split(',')
                .any(|o| o == "dax" || o == "dax=always" || o == "dax=inode");
            Some(Mount {
                device: unescape(f[0]),
                mount_point: PathBuf::from(unescape(f[1])),
                fs_type: f[2].to_string(),
                dax,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_with_dax_are_recognised_and_escapes_decoded() {
        let m = parse_mounts(
            "/dev/pmem0 /mnt/pmem_fsdax0 ext4 rw,relatime,dax 0 0\n\
             /dev/pmem1 /mnt/pmem\\040x xfs rw,dax=always 0 0\n\
             /dev/vda / ext4 rw,relatime 0 0\n\
             /dev/pmem2 /mnt/n xfs rw,dax=never 0 0\n",
        );
        assert_eq!(m.len(), 4);
        assert!(m[0].dax && m[1].dax && !m[2].dax && !m[3].dax);
        assert_eq!(m[1].mount_point, PathBuf::from("/mnt/pmem x"));
    }
}
