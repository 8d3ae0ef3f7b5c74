//! Persisted data (NORNS's `persist store|delete|share|unshare`): a location in a directory
//! dataspace that stays on the node after its job, owned by one user and readable only by
//! the users it is shared with.
//!
//! Enforcement is the kernel's, not this code's: persisting makes the location owner-only
//! (files 0600, directories 0700, no ACL entries); sharing adds a POSIX ACL entry
//! `user:UID:r-x` (directories) / `user:UID:r--` (files) to every object below it, written
//! as the `system.posix_acl_access` extended attribute (format: design §13.4); unsharing
//! removes it. The registry (`.haar-persist/` in the dataspace's root, a sticky
//! world-writable directory, one record per location owned by its user) lists what is
//! persisted and for whom; the sticky bit keeps users from replacing each other's records.
//!
//! Owns the registry's files and the permissions of persisted locations. Only the owner of a
//! location (or root) may persist, share, unshare or delete it.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataspace::{Dataspaces, Object};
use crate::error::{Error, Result};
use crate::journal::{self, Journal};

/// Magic word of a persist record.
pub const PERSIST_MAGIC: &str = "haar-stage-persist";

/// One persisted location.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Persisted {
    /// The endpoint as given (`local:run1/out`).
    pub endpoint: String,
    /// Its path.
    pub path: PathBuf,
    /// The owner's uid.
    pub owner: u32,
    /// Users it is shared with (uids), sorted.
    pub shared_with: Vec<u32>,
    /// Unix seconds it was persisted.
    pub created: f64,
    /// The node it was persisted on (short host name, Slurm's node name); `None` in records
    /// written before nodes were recorded.
    #[serde(default)]
    pub node: Option<String>,
}

/// This node's short host name (up to the first '.').
pub fn node_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: a buffer and its length; gethostname NUL-terminates within it on success.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]);
    let short = name.split('.').next().unwrap_or("");
    (!short.is_empty()).then(|| short.to_string())
}

/// What to do with a location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Keep it after the job; owner-only.
    Store,
    /// Remove it and its record.
    Delete,
    /// Let a user read it.
    Share,
    /// Stop letting a user read it.
    Unshare,
}

fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// A user name or numeric uid as a uid.
pub fn user_id(user: &str) -> Result<u32> {
    if let Ok(n) = user.parse() {
        return Ok(n);
    }
    let c = std::ffi::CString::new(user).map_err(|_| Error::Usage(format!("user {user:?}")))?;
    // SAFETY: getpwnam with a NUL-terminated name; the result is read at once.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return Err(Error::Usage(format!("no user {user:?} on this node")));
    }
    // SAFETY: non-null pointer returned by getpwnam.
    Ok(unsafe { (*pw).pw_uid })
}

/// The registry directory of the dataspace holding `endpoint`, and the location's path.
fn locate(spaces: &Dataspaces, endpoint: &str) -> Result<(PathBuf, PathBuf)> {
    let e = spaces.endpoint(endpoint)?;
    let root = spaces
        .spaces
        .get(&e.space)
        .and_then(|d| d.dir())
        .ok_or_else(|| {
            Error::Usage(format!(
                "{endpoint}: persist needs a location in a posix or shared dataspace"
            ))
        })?;
    let Object::Path(path) = e.object else {
        unreachable!("directory dataspaces resolve to paths")
    };
    if path == root {
        return Err(Error::Usage(format!(
            "{endpoint}: name a location inside the dataspace, not its root"
        )));
    }
    Ok((root.join(".haar-persist"), path))
}

/// The record file of `path` in registry `reg`: named by the CRC-32C of the path and its
/// length (collisions are told apart by the path inside).
fn record_file(reg: &Path, path: &Path) -> PathBuf {
    let bytes = path.as_os_str().as_encoded_bytes();
    reg.join(format!(
        "{:08x}-{}",
        haar_persist::crc32c(bytes),
        bytes.len()
    ))
}

fn open_registry(reg: &Path) -> Result<()> {
    if !reg.exists() {
        std::fs::DirBuilder::new()
            .mode(0o777)
            .create(reg)
            .or_else(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .map_err(|e| Error::io("create", reg, e))?;
        // Sticky and world-writable, as /tmp: anyone may add a record, only its owner
        // may replace or remove it.
        let _ = std::fs::set_permissions(reg, std::fs::Permissions::from_mode(0o1777));
    }
    Ok(())
}

/// Applies `op` to `endpoint` (`user` for share and unshare); returns the record after it
/// (`None` after delete).
pub fn apply(
    spaces: &Dataspaces,
    op: Op,
    endpoint: &str,
    user: Option<&str>,
) -> Result<Option<Persisted>> {
    let (reg, path) = locate(spaces, endpoint)?;
    let meta = std::fs::symlink_metadata(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::Missing(format!("{endpoint} ({}) does not exist", path.display()))
        }
        _ => Error::io("stat", &path, e),
    })?;
    let me = uid();
    if me != 0 && meta.uid() != me {
        return Err(Error::Denied(format!(
            "{endpoint} belongs to uid {}: only its owner persists, shares or deletes it",
            meta.uid()
        )));
    }
    open_registry(&reg)?;
    let file = record_file(&reg, &path);
    let existing: Option<Persisted> = match Journal::read(&file, PERSIST_MAGIC) {
        Ok(p) => Some(p),
        Err(Error::Missing(_)) => None,
        Err(e) => return Err(e),
    };
    let target = |u: Option<&str>| -> Result<u32> {
        user_id(u.ok_or_else(|| Error::Usage("share and unshare name a USER".into()))?)
    };
    let mut rec = existing.clone().unwrap_or(Persisted {
        endpoint: endpoint.into(),
        path: path.clone(),
        owner: meta.uid(),
        shared_with: Vec::new(),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
        node: None,
    });
    if rec.node.is_none() {
        rec.node = node_name();
    }
    match op {
        Op::Delete => {
            if meta.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            }
            .map_err(|e| Error::io("remove", &path, e))?;
            if existing.is_some() {
                std::fs::remove_file(&file).map_err(|e| Error::io("remove", &file, e))?;
            }
            return Ok(None);
        }
        Op::Store => {}
        Op::Share => {
            if existing.is_none() {
                return Err(Error::Usage(format!(
                    "{endpoint} is not persisted: `persist store` it first"
                )));
            }
            let u = target(user)?;
            if !rec.shared_with.contains(&u) {
                rec.shared_with.push(u);
                rec.shared_with.sort_unstable();
            }
        }
        Op::Unshare => {
            let u = target(user)?;
            rec.shared_with.retain(|&x| x != u);
        }
    }
    apply_permissions(&path, &rec.shared_with)?;
    journal::write_record(&file, PERSIST_MAGIC, &rec)?;
    Ok(Some(rec))
}

/// Every persisted location of the directory dataspaces (every user's: the registry is
/// readable by all; the data is not).
pub fn list(spaces: &Dataspaces) -> Result<Vec<Persisted>> {
    let mut out = Vec::new();
    for d in spaces.spaces.values() {
        let Some(root) = d.dir() else { continue };
        let reg = root.join(".haar-persist");
        let Ok(rd) = std::fs::read_dir(&reg) else {
            continue;
        };
        for e in rd.flatten() {
            if let Ok(p) = Journal::read::<Persisted>(&e.path(), PERSIST_MAGIC) {
                out.push(p);
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Removes every persisted location `owner` owns, data and record (an admin's purge; the
/// caller needs the right to remove them: root). Returns the records removed.
pub fn purge(spaces: &Dataspaces, owner: u32) -> Result<Vec<Persisted>> {
    let mut removed = Vec::new();
    for d in spaces.spaces.values() {
        let Some(root) = d.dir() else { continue };
        let reg = root.join(".haar-persist");
        let Ok(rd) = std::fs::read_dir(&reg) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(p) = Journal::read::<Persisted>(&e.path(), PERSIST_MAGIC) else {
                continue;
            };
            // A record names its owner's path, but the owner wrote it: only a path inside
            // this dataspace is removed (and the caller runs this with the owner's rights).
            let inside = p.path.starts_with(root)
                && p.path != root
                && p.path
                    .components()
                    .all(|c| !matches!(c, std::path::Component::ParentDir));
            if p.owner != owner || !inside {
                continue;
            }
            let r = match std::fs::symlink_metadata(&p.path) {
                // Not the owner's (any more): not the owner's to purge.
                Ok(m) if m.uid() != owner => continue,
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p.path),
                Ok(_) => std::fs::remove_file(&p.path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            r.map_err(|er| Error::io("remove", &p.path, er))?;
            std::fs::remove_file(e.path()).map_err(|er| Error::io("remove", &e.path(), er))?;
            removed.push(p);
        }
    }
    removed.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(removed)
}

/// Whether `path` is, or is inside, or contains a persisted location (a teardown must not
/// remove it).
pub fn is_persisted(persisted: &[Persisted], path: &Path) -> bool {
    persisted
        .iter()
        .any(|p| path.starts_with(&p.path) || p.path.starts_with(path))
}

/// Owner-only modes and exactly the ACL entries of `readers`, on every object below `path`.
fn apply_permissions(path: &Path, readers: &[u32]) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| Error::io("stat", path, e))?;
    let is_dir = meta.is_dir();
    let owner_mode = if is_dir { 0o700 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(owner_mode))
        .map_err(|e| Error::io("chmod", path, e))?;
    set_acl(path, owner_mode, readers, is_dir)?;
    if is_dir {
        for e in std::fs::read_dir(path).map_err(|e| Error::io("list", path, e))? {
            let e = e.map_err(|er| Error::io("list", path, er))?;
            if e.file_type().is_ok_and(|t| t.is_symlink()) {
                continue;
            }
            apply_permissions(&e.path(), readers)?;
        }
    }
    Ok(())
}

const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;
const ACL_UNDEFINED_ID: u32 = u32::MAX;

/// The `system.posix_acl_access` value for owner bits `owner_mode` and read access for
/// `readers` (design §13.4): version 2, then (tag, perm, id) entries sorted by tag and id,
/// all little-endian.
pub fn acl_xattr(owner_mode: u32, readers: &[u32], is_dir: bool) -> Vec<u8> {
    let read: u16 = if is_dir { 5 } else { 4 };
    let mut out = 2u32.to_le_bytes().to_vec();
    let mut entry = |tag: u16, perm: u16, id: u32| {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    };
    entry(
        ACL_USER_OBJ,
        ((owner_mode >> 6) & 7) as u16,
        ACL_UNDEFINED_ID,
    );
    let mut sorted = readers.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    for &u in &sorted {
        entry(ACL_USER, read, u);
    }
    entry(ACL_GROUP_OBJ, 0, ACL_UNDEFINED_ID);
    if !sorted.is_empty() {
        entry(ACL_MASK, read, ACL_UNDEFINED_ID);
    }
    entry(ACL_OTHER, 0, ACL_UNDEFINED_ID);
    out
}

fn set_acl(path: &Path, owner_mode: u32, readers: &[u32], is_dir: bool) -> Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Usage(format!("{}: NUL in path", path.display())))?;
    let name = c"system.posix_acl_access";
    if readers.is_empty() {
        // No named users: the mode says it all; drop any ACL left by an earlier share.
        // SAFETY: valid NUL-terminated strings.
        let r = unsafe { libc::removexattr(c.as_ptr(), name.as_ptr()) };
        let err = std::io::Error::last_os_error();
        if r != 0 && err.raw_os_error() != Some(libc::ENODATA) {
            return Err(Error::io("remove ACL of", path, err));
        }
        return Ok(());
    }
    let value = acl_xattr(owner_mode, readers, is_dir);
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let r = unsafe {
        libc::setxattr(
            c.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r != 0 {
        let err = std::io::Error::last_os_error();
        return Err(Error::Io {
            op: "set ACL (the file system must support POSIX ACLs) on",
            path: path.into(),
            source: err,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acl_value_is_sorted_little_endian_with_a_mask() {
        let v = acl_xattr(0o700, &[1002, 1001], true);
        assert_eq!(&v[..4], &[2, 0, 0, 0]);
        let entries: Vec<(u16, u16, u32)> = v[4..]
            .chunks(8)
            .map(|c| {
                (
                    u16::from_le_bytes([c[0], c[1]]),
                    u16::from_le_bytes([c[2], c[3]]),
                    u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            .collect();
        assert_eq!(
            entries,
            vec![
                (1, 7, u32::MAX),
                (2, 5, 1001),
                (2, 5, 1002),
                (4, 0, u32::MAX),
                (0x10, 5, u32::MAX),
                (0x20, 0, u32::MAX)
            ]
        );
    }
}
