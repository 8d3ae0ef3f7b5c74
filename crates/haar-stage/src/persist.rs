//! Persisted data (NORNS's `persist store|delete|share|unshare`): a location in a directory
//! dataspace that stays on the node after its job, owned by one user and readable only by
//! the users it is shared with.
//!
//! Enforcement is the kernel's, not this code's: persisting makes the location owner-only
//! (files 0600, directories 0700, no ACL entries); sharing adds a POSIX ACL entry
//! `user:UID:r-x` (directories) / `user:UID:r--` (files) to every object below it, written
//! as the `system.posix_acl_access` extended attribute (format: design §13.4); unsharing
//! removes it.
//!
//! The registry (`.haar-persist/` in the dataspace's root, design §13.4) lists what is
//! persisted and for whom. It is safe by construction, not by what its records say:
//! - the directory belongs to root or to the dataspace root's owner (who may rename anything
//!   in the root anyway), is made by them alone (`haar stage persist init`, the stage
//!   service's start, or their first persist), and is sticky when others may write in it;
//!   a registry of anyone else is refused, never used;
//! - a record is its owner's file (`uUID-…`, mode 0644), authenticated by the file's owner
//!   as `fstat` states it on a descriptor opened without following links, and by the owner
//!   of the location it names; its body is never trusted for either;
//! - every location is resolved below the dataspace's root without following any link
//!   ([`crate::beneath`]), and every change to it and to its record is made with its owner's
//!   file-system identity ([`crate::identity::as_user`]), so root acting for a user reaches
//!   nothing the user could not.
//!
//! Owns the registry's files and the permissions of persisted locations. Only the owner of a
//! location (or root) may persist, share, unshare or delete it.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::beneath::{self, fd_path, open_at};
use crate::dataspace::{Dataspaces, Object};
use crate::error::{Error, Result};
use crate::identity::{as_user, euid, primary_gid};
use crate::journal;

/// Magic word of a persist record.
pub const PERSIST_MAGIC: &str = "haar-stage-persist";

/// The registry's directory name in a dataspace's root.
pub const REGISTRY: &str = ".haar-persist";

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

/// The dataspace root of `endpoint` and the location's path (inside it, not the root).
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
    Ok((root.to_path_buf(), path))
}

/// `path` relative to `root`, if it lies strictly inside it by plain names only.
fn inside(root: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(root).ok()?;
    (!rel.as_os_str().is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_))))
        .then(|| rel.to_path_buf())
}

/// A dataspace's root and its trusted registry, both open (`fd`: `None` while the registry
/// does not exist).
struct Registry {
    root: PathBuf,
    root_fd: File,
    dir: PathBuf,
    fd: Option<File>,
}

/// Opens the registry of the dataspace rooted at `root` (creating it when `create` and this
/// process is root or the root's owner); without a registry `fd` is `None`.
/// A registry that is not root's or the root's owner's, or that others may write in without
/// the sticky bit, is refused: its owner could replace anyone's records.
fn registry(root: &Path, create: bool) -> Result<Registry> {
    let root_fd =
        beneath::open_root(root).map_err(|e| Error::io("open dataspace root", root, e))?;
    let keeper = root_fd
        .metadata()
        .map_err(|e| Error::io("stat", root, e))?
        .uid();
    let dir = root.join(REGISTRY);
    let open = || {
        open_at(
            &root_fd,
            Path::new(REGISTRY),
            libc::O_PATH | libc::O_DIRECTORY,
        )
    };
    let fd = match open() {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !create {
                return Ok(Registry {
                    root: root.to_path_buf(),
                    root_fd,
                    dir,
                    fd: None,
                });
            }
            let me = euid();
            if me != 0 && me != keeper {
                return Err(Error::Denied(format!(
                    "the persist registry {} does not exist, and only root or uid {keeper} (the \
                     owner of {}) may create it: ask root to run `haar stage persist init` (the \
                     stage service creates it when it starts)",
                    dir.display(),
                    root.display()
                )));
            }
            let made = fd_path(&root_fd).join(REGISTRY);
            match std::fs::DirBuilder::new().mode(0o700).create(&made) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io("create", &dir, e)),
            }
            let fd = open().map_err(|e| Error::io("open", &dir, e))?;
            let m = fd.metadata().map_err(|e| Error::io("stat", &dir, e))?;
            // Made here just now (ours, mode 0700 so far): sticky and world-writable, as
            // /tmp, so that each user adds records of their own and removes only those.
            if m.uid() == me && m.mode() & 0o7777 == 0o700 {
                std::fs::set_permissions(fd_path(&fd), std::fs::Permissions::from_mode(0o1777))
                    .map_err(|e| Error::io("chmod", &dir, e))?;
                tracing::info!(registry = %dir.display(), "created the persist registry");
            }
            fd
        }
        Err(e) => {
            return Err(Error::Denied(format!(
                "the persist registry {} cannot be opened: {e} {}; root moves it aside and runs \
                 `haar stage persist init`",
                dir.display(),
                beneath::explain(&e)
            )));
        }
    };
    let m = fd.metadata().map_err(|e| Error::io("stat", &dir, e))?;
    let mode = m.mode() & 0o7777;
    if (m.uid() != 0 && m.uid() != keeper) || (mode & 0o022 != 0 && mode & 0o1000 == 0) {
        return Err(Error::Denied(format!(
            "the persist registry {} belongs to uid {} with mode {mode:04o}: only a registry of \
             root's or of uid {keeper} (the owner of {}), sticky when others may write in it, \
             is trusted, since its owner can replace anyone's records (an older haar let the \
             first user to persist create it): root moves it aside and runs `haar stage \
             persist init`, then users persist their data again",
            dir.display(),
            m.uid(),
            root.display()
        )));
    }
    Ok(Registry {
        root: root.to_path_buf(),
        root_fd,
        dir,
        fd: Some(fd),
    })
}

/// The uid a record's file name claims (`uUID-CRC-LEN` or `uUID-CRC-LEN.N`).
fn name_uid(name: &OsStr) -> Option<u32> {
    let rest = name.as_bytes().strip_prefix(b"u")?;
    let end = rest.iter().position(|&b| b == b'-')?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// The preferred record name of `path` for `owner`: `uUID-CRC-LEN`, CRC-32C and length of the
/// path's bytes (another record of the same owner is told apart by the path inside).
fn record_name(owner: u32, path: &Path) -> String {
    let bytes = path.as_os_str().as_encoded_bytes();
    format!("u{owner}-{:08x}-{}", haar::crc32c(bytes), bytes.len())
}

impl Registry {
    /// The authentic records (of `only` if given): regular files named for a uid, owned by
    /// that uid as `fstat` on an `O_NOFOLLOW` descriptor says, whose body names the same
    /// owner and a path inside this dataspace. Anything else is skipped, with a warning.
    fn records(&self, only: Option<u32>) -> Result<Vec<(OsString, Persisted)>> {
        let Some(fd) = &self.fd else {
            return Ok(Vec::new());
        };
        let rd = std::fs::read_dir(fd_path(fd)).map_err(|e| Error::io("list", &self.dir, e))?;
        let mut out = Vec::new();
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(uid) = name_uid(&name) else { continue };
            if only.is_some_and(|o| o != uid) {
                continue;
            }
            match self.read_record(fd, &name, uid) {
                Ok(Some(p)) => out.push((name, p)),
                Ok(None) => {}
                Err(why) => tracing::warn!(
                    record = %self.dir.join(&name).display(),
                    "persist record ignored: {why}"
                ),
            }
        }
        Ok(out)
    }

    fn read_record(
        &self,
        fd: &File,
        name: &OsStr,
        uid: u32,
    ) -> std::result::Result<Option<Persisted>, String> {
        let mut f = match open_at(fd, Path::new(name), libc::O_RDONLY | libc::O_NONBLOCK) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("open: {e} {}", beneath::explain(&e))),
        };
        let m = f.metadata().map_err(|e| format!("fstat: {e}"))?;
        if !m.is_file() || m.len() > journal::MAX_RECORD {
            return Err("not a regular file of a sane size".into());
        }
        if m.uid() != uid {
            return Err(format!("named for uid {uid} but owned by uid {}", m.uid()));
        }
        let mut bytes = Vec::new();
        (&mut f)
            .take(journal::MAX_RECORD)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("read: {e}"))?;
        let p: Persisted = journal::decode(&bytes, PERSIST_MAGIC)?;
        if p.owner != uid {
            return Err(format!("names owner {} in a file of uid {uid}", p.owner));
        }
        if inside(&self.root, &p.path).is_none() {
            return Err(format!(
                "names {}, not a path inside {}",
                p.path.display(),
                self.root.display()
            ));
        }
        Ok(Some(p))
    }

    /// Opens the location `path` (inside the root) without following links; the error names
    /// `endpoint` and says why.
    fn open_location(&self, endpoint: &str, path: &Path) -> Result<File> {
        let rel = inside(&self.root, path).ok_or_else(|| {
            Error::Usage(format!(
                "{endpoint}: {} is not inside {}",
                path.display(),
                self.root.display()
            ))
        })?;
        open_at(&self.root_fd, &rel, libc::O_PATH).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::Missing(format!("{endpoint} ({}) does not exist", path.display()))
            }
            _ if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::EXDEV)) => {
                Error::Denied(format!(
                    "{endpoint} ({}): {}: persist acts on real files and directories inside \
                     the dataspace only",
                    path.display(),
                    beneath::explain(&e)
                ))
            }
            _ => Error::io("open", path, e),
        })
    }

    /// Writes `rec` as its owner's record: over `existing` (the owner's own file), else
    /// under the first free name of the owner's for its path (a name another user squats is
    /// skipped, never adopted). Written whole under a temporary name, fsynced, then renamed
    /// (or linked, for a new name) into place.
    fn write(&self, existing: Option<&OsStr>, rec: &Persisted) -> Result<()> {
        let fd = self.fd.as_ref().expect("a registry opened to be written");
        let dir = fd_path(fd);
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".u{}-", rec.owner))
            .tempfile_in(&dir)
            .map_err(|e| Error::io("create a record in", &self.dir, e))?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .and_then(|()| tmp.write_all(&journal::encode(PERSIST_MAGIC, rec)))
            .and_then(|()| tmp.as_file().sync_data())
            .map_err(|e| Error::io("write a record in", &self.dir, e))?;
        if let Some(name) = existing {
            tmp.persist(dir.join(name))
                .map_err(|e| Error::io("rename", &self.dir.join(name), e.error))?;
            return Ok(());
        }
        let base = record_name(rec.owner, &rec.path);
        for n in 0..64 {
            let name = if n == 0 {
                base.clone()
            } else {
                format!("{base}.{n}")
            };
            match tmp.persist_noclobber(dir.join(&name)) {
                Ok(_) => return Ok(()),
                Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => tmp = e.file,
                Err(e) => return Err(Error::io("link", &self.dir.join(&name), e.error)),
            }
        }
        Err(Error::Service(format!(
            "64 record names for {} are taken in {}: root removes the ones it does not know",
            rec.path.display(),
            self.dir.display()
        )))
    }

    fn remove_record(&self, name: &OsStr) -> Result<()> {
        let fd = self
            .fd
            .as_ref()
            .expect("records come from an open registry");
        std::fs::remove_file(fd_path(fd).join(name))
            .map_err(|e| Error::io("remove", &self.dir.join(name), e))
    }
}

/// Creates the registry of every directory dataspace that lacks one (root, or each root's
/// owner); returns the registries, each checked. The stage service calls it when it starts.
pub fn init(spaces: &Dataspaces) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for d in spaces.spaces.values() {
        let Some(root) = d.dir() else { continue };
        out.push(registry(root, true)?.dir);
    }
    Ok(out)
}

/// Applies `op` to `endpoint` (`user` for share and unshare); returns the record after it
/// (`None` after delete). The caller must own the location, or be root; either way the work
/// is done with the location owner's file-system identity.
pub fn apply(
    spaces: &Dataspaces,
    op: Op,
    endpoint: &str,
    user: Option<&str>,
) -> Result<Option<Persisted>> {
    let (root, path) = locate(spaces, endpoint)?;
    // Delete needs no registry (without one, nothing is recorded and only the data goes).
    let reg = registry(&root, op != Op::Delete)?;
    let obj = reg.open_location(endpoint, &path)?;
    let meta = obj.metadata().map_err(|e| Error::io("stat", &path, e))?;
    if !meta.is_dir() && !meta.is_file() {
        return Err(Error::Usage(format!(
            "{endpoint} ({}) is neither a file nor a directory",
            path.display()
        )));
    }
    let owner = meta.uid();
    let me = euid();
    if me != 0 && owner != me {
        return Err(Error::Denied(format!(
            "{endpoint} belongs to uid {owner}: only its owner persists, shares or deletes it"
        )));
    }
    let target = |u: Option<&str>| -> Result<u32> {
        user_id(u.ok_or_else(|| Error::Usage("share and unshare name a USER".into()))?)
    };
    let reader = match op {
        Op::Share | Op::Unshare => Some(target(user)?),
        _ => None,
    };
    as_user(owner, primary_gid(owner), || {
        let existing = reg
            .records(Some(owner))?
            .into_iter()
            .find(|(_, p)| p.path == path);
        if op == Op::Delete {
            let rel = inside(&root, &path).expect("located inside");
            beneath::remove_at(&reg.root_fd, &rel).map_err(|e| Error::io("remove", &path, e))?;
            if let Some((name, _)) = &existing {
                reg.remove_record(name)?;
            }
            return Ok(None);
        }
        let mut rec = existing.as_ref().map(|e| e.1.clone()).unwrap_or(Persisted {
            endpoint: endpoint.into(),
            path: path.clone(),
            owner,
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
        match (op, reader) {
            (Op::Share, Some(u)) => {
                if existing.is_none() {
                    return Err(Error::Usage(format!(
                        "{endpoint} is not persisted: `persist store` it first"
                    )));
                }
                if !rec.shared_with.contains(&u) {
                    rec.shared_with.push(u);
                    rec.shared_with.sort_unstable();
                }
            }
            (Op::Unshare, Some(u)) => rec.shared_with.retain(|&x| x != u),
            _ => {}
        }
        apply_permissions(&obj, &path, &rec.shared_with)?;
        reg.write(existing.as_ref().map(|e| e.0.as_os_str()), &rec)?;
        Ok(Some(rec))
    })
}

/// Every persisted location of the directory dataspaces (every user's: the registry is
/// readable by all; the data is not): the authentic records whose location is still its
/// owner's (or cannot be looked at by this caller: kept, so that a teardown errs on the side
/// of keeping). A registry that cannot be trusted is an error.
pub fn list(spaces: &Dataspaces) -> Result<Vec<Persisted>> {
    let mut out = Vec::new();
    for d in spaces.spaces.values() {
        let Some(root) = d.dir() else { continue };
        let reg = registry(root, false)?;
        for (_, p) in reg.records(None)? {
            let rel = inside(root, &p.path).expect("records name paths inside");
            match open_at(&reg.root_fd, &rel, libc::O_PATH) {
                Ok(f) if f.metadata().is_ok_and(|m| m.uid() == p.owner) => out.push(p),
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => out.push(p),
                _ => {}
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Removes every persisted location `owner` owns, data and record (an admin's purge, run by
/// root): only the records that are `owner`'s own files, only locations `owner` still owns,
/// found below the dataspace's root without following links and removed with `owner`'s
/// file-system identity. Returns the records removed.
pub fn purge(spaces: &Dataspaces, owner: u32) -> Result<Vec<Persisted>> {
    let mut removed = Vec::new();
    for d in spaces.spaces.values() {
        let Some(root) = d.dir() else { continue };
        let reg = registry(root, false)?;
        let mut gone = as_user(owner, primary_gid(owner), || {
            let mut gone = Vec::new();
            for (name, p) in reg.records(Some(owner))? {
                let rel = inside(root, &p.path).expect("records name paths inside");
                match open_at(&reg.root_fd, &rel, libc::O_PATH) {
                    Ok(f) => {
                        let m = f.metadata().map_err(|e| Error::io("stat", &p.path, e))?;
                        // Not the owner's (any more): not the owner's to purge.
                        if m.uid() != owner {
                            continue;
                        }
                        beneath::remove_at(&reg.root_fd, &rel)
                            .map_err(|e| Error::io("remove", &p.path, e))?;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    // A link on the way now: the record's location is not there any more.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::EXDEV)) => {}
                    Err(e) => return Err(Error::io("open", &p.path, e)),
                }
                reg.remove_record(&name)?;
                gone.push(p);
            }
            Ok(gone)
        })?;
        removed.append(&mut gone);
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

/// Owner-only modes and exactly the ACL entries of `readers`, on every object below the
/// opened location `obj` (`shown`: its path, for errors): each object is opened below its
/// parent without following links (links and special files are left alone) and changed
/// through its descriptor.
fn apply_permissions(obj: &File, shown: &Path, readers: &[u32]) -> Result<()> {
    let meta = obj.metadata().map_err(|e| Error::io("stat", shown, e))?;
    let is_dir = meta.is_dir();
    let owner_mode = if is_dir { 0o700 } else { 0o600 };
    let at = fd_path(obj);
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(owner_mode))
        .map_err(|e| Error::io("chmod", shown, e))?;
    set_acl(&at, shown, owner_mode, readers, is_dir)?;
    if is_dir {
        for e in std::fs::read_dir(&at).map_err(|e| Error::io("list", shown, e))? {
            let e = e.map_err(|er| Error::io("list", shown, er))?;
            let child_shown = shown.join(e.file_name());
            let child = match open_at(obj, Path::new(&e.file_name()), libc::O_PATH) {
                Ok(c) => c,
                Err(er) if er.raw_os_error() == Some(libc::ELOOP) => continue,
                Err(er) if er.kind() == std::io::ErrorKind::NotFound => continue,
                Err(er) => return Err(Error::io("open", &child_shown, er)),
            };
            let m = child
                .metadata()
                .map_err(|er| Error::io("stat", &child_shown, er))?;
            if m.is_dir() || m.is_file() {
                apply_permissions(&child, &child_shown, readers)?;
            }
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

fn set_acl(at: &Path, path: &Path, owner_mode: u32, readers: &[u32], is_dir: bool) -> Result<()> {
    let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())
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
