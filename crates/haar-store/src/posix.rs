//! The `posix` backend (design §4): a directory per database under one or more roots,
//! append-only data files per writer and index, index files per writer, and a `toc` of fixed
//! 64-byte commit records.
//!
//! Owns file layout, locking and the fsync policy; knows nothing of schemas or requests.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use haar_core::Key;

use crate::backend::{Backend, Capabilities, Committed, DbReader, DbWriter, Exclusive};
use crate::error::{Error, Result};
use crate::format::{
    self, CommitRecord, DataRef, RECORD_SEGMENT, RECORD_WIPED, TOC_RECORD, TOC_VERSION,
};
use crate::sys::{flock, flock_exclusive_patiently, random_u64};

/// When the posix backend calls `fdatasync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FsyncPolicy {
    /// Data, index and commit record are synced at every flush (survives power loss).
    Always,
    /// Never sync (survives kill -9, not power loss).
    Never,
}

/// Directory-per-database backend over one or more roots.
pub struct PosixBackend {
    roots: Vec<PathBuf>,
    fsync: FsyncPolicy,
    names: DataFileNames,
}

/// The catalogue directory of a database (design §3.1), inside its directory (posix) or
/// under the root (pmem).
pub const CATALOGUE_DIR: &str = "catalogue";

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn sync(file: &File, path: &Path, policy: FsyncPolicy) -> Result<()> {
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
fn sync_dir(dir: &Path, policy: FsyncPolicy) -> Result<()> {
    if policy != FsyncPolicy::Always {
        return Ok(());
    }
    match File::open(dir).and_then(|d| d.sync_all()) {
        Err(e) if e.raw_os_error() != Some(libc::EINVAL) => Err(Error::io("fsync", dir, e)),
        _ => Ok(()),
    }
}

fn busy(db: &Key, dir: &Path, what: &str) -> Error {
    Error::Busy {
        db: db.to_string(),
        detail: format!(
            "{what} ({}); retry when they have finished (see `fuser {}`)",
            dir.display(),
            dir.join("lock").display()
        ),
    }
}

impl PosixBackend {
    /// A backend over `roots` (created if missing).
    pub fn new(roots: Vec<PathBuf>, fsync: FsyncPolicy) -> Result<Self> {
        if roots.is_empty() {
            return Err(Error::Config(
                "posix backend needs at least one root".into(),
            ));
        }
        for r in &roots {
            // The directories this creates, deepest first: each one's name is synced in its
            // parent, or a power cut could take a whole store whose flushes were acknowledged.
            let missing: Vec<&Path> = r
                .ancestors()
                .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
                .collect();
            crate::perm::create_dir_all(r).map_err(|e| Error::io("create root", r, e))?;
            for d in missing.iter().rev() {
                let parent = d.parent().filter(|p| !p.as_os_str().is_empty());
                sync_dir(parent.unwrap_or(Path::new(".")), fsync)?;
            }
        }
        Ok(PosixBackend {
            roots,
            fsync,
            names: DataFileNames::default(),
        })
    }

    /// Roots ranked by rendezvous hash for this database name (highest first).
    fn ranked_roots(&self, name: &str) -> Vec<&PathBuf> {
        let mut ranked: Vec<(u64, &PathBuf)> = self
            .roots
            .iter()
            .map(|r| {
                let mut b = r.as_os_str().as_encoded_bytes().to_vec();
                b.push(0);
                b.extend_from_slice(name.as_bytes());
                (format::fnv1a64(&b), r)
            })
            .collect();
        ranked.sort_by_key(|r| std::cmp::Reverse(r.0));
        ranked.into_iter().map(|(_, r)| r).collect()
    }

    /// The existing directory of `db`, checked against its `db.key`.
    fn find(&self, db: &Key) -> Result<Option<PathBuf>> {
        let name = format::db_dir_name(db);
        for root in self.ranked_roots(&name) {
            let dir = root.join(&name);
            match fs::read(dir.join("db.key")) {
                Ok(bytes) => {
                    let stored =
                        format::decode_db_key_file(&bytes).map_err(|e| Error::Corrupt {
                            what: "database key",
                            path: dir.join("db.key"),
                            detail: e.to_string(),
                        })?;
                    if &stored != db {
                        return Err(Error::Corrupt {
                            what: "database key",
                            path: dir.join("db.key"),
                            detail: format!("holds {stored}, expected {db} (name collision)"),
                        });
                    }
                    return Ok(Some(dir));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("read", dir.join("db.key"), e)),
            }
        }
        Ok(None)
    }

    /// Creates the database directory atomically (design §4.1) or returns the existing one.
    fn create(&self, db: &Key) -> Result<PathBuf> {
        if let Some(dir) = self.find(db)? {
            return Ok(dir);
        }
        let name = format::db_dir_name(db);
        let root = self.ranked_roots(&name)[0];
        // FDB5 names a database's directory as haar does: one it wrote is not haar's to use.
        if is_fdb5_database(&root.join(&name)) {
            return Err(Error::Config(fdb5_database_message(&root.join(&name))));
        }
        let tmp = root.join(format!(".tmp-{:016x}", random_u64()));
        let key_bytes = format::encode_db_key_file(db).map_err(|reason| Error::BadKey {
            key: db.to_string(),
            reason: reason.into(),
        })?;
        let build = || -> io::Result<()> {
            crate::perm::create_dir(&tmp)?;
            let mut f = crate::perm::create_file(&tmp.join("db.key"))?;
            f.write_all(&key_bytes)?;
            let mut t = crate::perm::create_file(&tmp.join("toc"))?;
            t.write_all(&format::encode_toc_header(TOC_VERSION))?;
            crate::perm::create_file(&tmp.join("lock"))?;
            if self.fsync == FsyncPolicy::Always {
                f.sync_all()?;
                t.sync_all()?;
                File::open(&tmp)?.sync_all()?;
            }
            Ok(())
        };
        build().map_err(|e| {
            let _ = fs::remove_dir_all(&tmp);
            Error::io("create database", &tmp, e)
        })?;
        let dir = root.join(&name);
        match fs::rename(&tmp, &dir) {
            Ok(()) => sync_dir(root, self.fsync)?,
            // Another process created it first: use theirs.
            Err(e)
                if e.kind() == io::ErrorKind::DirectoryNotEmpty
                    || e.raw_os_error() == Some(libc::EEXIST)
                    || e.raw_os_error() == Some(libc::ENOTEMPTY) =>
            {
                let _ = fs::remove_dir_all(&tmp);
            }
            Err(e) => {
                let _ = fs::remove_dir_all(&tmp);
                return Err(Error::io("rename", &dir, e));
            }
        }
        self.find(db)?.ok_or_else(|| {
            Error::io(
                "create database",
                &dir,
                io::Error::other("directory vanished right after creation (concurrent wipe?)"),
            )
        })
    }
}

/// What a database directory (posix root entry or pmem catalogue entry) holds.
pub(crate) enum DbDir {
    /// A database, by the key its `db.key` names.
    Database(Key),
    /// Not a database: no `db.key` (not haar's, or being created or wiped).
    Other,
    /// A `db.key` that cannot be read or decoded: "PATH: reason".
    Damaged(String),
}

/// Whether `dir` is a database FDB5 wrote (its TOC layout: a `toc` and no `db.key`; haar
/// creates `db.key` before a database directory gets its name, §4.1).
pub(crate) fn is_fdb5_database(dir: &Path) -> bool {
    dir.join("toc").is_file() && !dir.join("db.key").exists()
}

/// The words that mark a listing's problem as a database FDB5 wrote under a haar root: a
/// note, not damage ([`crate::frontend::is_damage`]).
pub(crate) const FDB5_DATABASE: &str = "is a database FDB5 wrote";

/// What to say of a database FDB5 wrote under a haar root.
pub(crate) fn fdb5_database_message(dir: &Path) -> String {
    format!(
        "{} {FDB5_DATABASE} (its TOC layout), not haar's: haar neither reads nor \
         writes it; copy it into a haar store with `haar import-fdb5`, or give haar (or FDB5) \
         another root",
        dir.display()
    )
}

/// Reads the `db.key` of the directory `dir`.
pub(crate) fn read_db_dir(dir: &Path) -> DbDir {
    let path = dir.join("db.key");
    match fs::read(&path) {
        Ok(bytes) => match format::decode_db_key_file(&bytes) {
            Ok(key) => DbDir::Database(key),
            Err(e) => DbDir::Damaged(format!(
                "{}: damaged ({e}); the database there cannot be read or listed: restore the \
                 file (its key is the directory's name, design §4.2) or move the directory away",
                path.display()
            )),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound || !dir.is_dir() => DbDir::Other,
        Err(e) => DbDir::Damaged(format!("{}: cannot read: {e}", path.display())),
    }
}

/// Whether `name` is a file haar writes directly in a posix database directory (§4.1):
/// `db.key`, `toc`, `lock`, a writer's `.data` and `.index`, a purge's temporary `toc`.
fn is_database_file(name: &str) -> bool {
    if ["db.key", "toc", "lock"].contains(&name) {
        return true;
    }
    if name
        .strip_prefix(".toc-")
        .is_some_and(crate::catalogue::manifest::is_id)
    {
        return true;
    }
    data_object(name).is_some()
        || name
            .strip_suffix(".index")
            .is_some_and(crate::catalogue::manifest::is_id)
}

/// The stem of the name of a writer's data file for `index` (design §4.1, "Data files per
/// index"): the index values joined by `:`, percent-encoded with `.` always encoded, so that
/// the file's name has exactly two dots.
fn index_stem(index: &Key) -> String {
    let mut stem = String::new();
    for (i, (_, v)) in index.iter().enumerate() {
        if i > 0 {
            stem.push(':');
        }
        if v.is_empty() {
            stem.push('%');
            continue;
        }
        for b in v.bytes() {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'+' {
                stem.push(b as char);
            } else {
                stem.push_str(&format!("%{b:02X}"));
            }
        }
    }
    if stem.is_empty() {
        stem.push('%');
    }
    if stem.len() > 160 {
        let h = format::fnv1a64(stem.as_bytes());
        // ASCII only: any byte is a character boundary.
        stem.truncate(140);
        stem.push_str(&format!("~{h:016x}"));
    }
    stem
}

/// The data object a file name holds, in either layout (design §4.1): `<object>.data`
/// (version 1) or `<index>.<object>.data` (version 2, `<index>` without a dot). FDB5's data
/// files (`<index>.<time>.<host>.<pid>….data`) are neither.
fn data_object(name: &str) -> Option<u64> {
    let base = name.strip_suffix(".data")?;
    let id = match base.rsplit_once('.') {
        None => base,
        Some((stem, id)) if !stem.is_empty() && !stem.contains('.') => id,
        Some(_) => return None,
    };
    crate::catalogue::manifest::is_id(id)
        .then(|| u64::from_str_radix(id, 16).ok())
        .flatten()
}

/// Every data file in `dir`, by object.
fn data_files(dir: &Path) -> io::Result<HashMap<u64, PathBuf>> {
    let mut out = HashMap::new();
    for ent in fs::read_dir(dir)? {
        let ent = ent?;
        if let Some(id) = data_object(&ent.file_name().to_string_lossy()) {
            out.insert(id, ent.path());
        }
    }
    Ok(out)
}

/// The file holding `object` in the database directory `dir`: its version 1 name if that
/// exists, else found by one listing of the directory (design §4.1).
fn find_data_file(dir: &Path, object: u64) -> io::Result<PathBuf> {
    let v1 = dir.join(format!("{object:016x}.data"));
    if fs::symlink_metadata(&v1).is_ok() {
        return Ok(v1);
    }
    data_files(dir)?.remove(&object).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no data file of object {object:016x} in {}", dir.display()),
        )
    })
}

/// Object → data file per database directory, for listings that give each field's path
/// (`Backend::data_path`): one directory listing per miss, not one per field.
#[derive(Debug, Default)]
struct DataFileNames(Mutex<HashMap<PathBuf, HashMap<u64, PathBuf>>>);

impl DataFileNames {
    fn path(&self, dir: &Path, object: u64) -> io::Result<PathBuf> {
        if let Some(p) = self.0.lock().unwrap().get(dir).and_then(|m| m.get(&object)) {
            return Ok(p.clone());
        }
        let v1 = dir.join(format!("{object:016x}.data"));
        if fs::symlink_metadata(&v1).is_ok() {
            return Ok(v1);
        }
        let files = data_files(dir)?;
        let found = files.get(&object).cloned();
        self.0.lock().unwrap().insert(dir.to_path_buf(), files);
        found.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no data file of object {object:016x} in {}", dir.display()),
            )
        })
    }
}

/// The entries of a catalogue directory (§3.1) that haar did not write.
pub(crate) fn unowned_in_catalogue(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| Error::io("list", dir, e))?;
        let name = ent.file_name();
        if ent.file_type().is_ok_and(|t| t.is_dir())
            || !crate::catalogue::manifest::is_catalogue_file(&name.to_string_lossy())
        {
            out.push(ent.path());
        }
    }
    Ok(out)
}

fn open_lock(dir: &Path) -> Result<File> {
    let path = dir.join("lock");
    crate::perm::create_options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| Error::io("open", &path, e))
}

impl Backend for PosixBackend {
    fn describe(&self) -> String {
        let roots: Vec<String> = self.roots.iter().map(|r| r.display().to_string()).collect();
        format!("posix:{}", roots.join(","))
    }

    fn open_writer(&self, db: &Key) -> Result<Box<dyn DbWriter>> {
        let dir = self.create(db)?;
        let lock = open_lock(&dir)?;
        flock(&lock, libc::LOCK_SH | libc::LOCK_NB)
            .map_err(|_| busy(db, &dir, "a wipe or purge holds it"))?;
        Ok(Box::new(PosixWriter::new(
            dir,
            Some(lock),
            self.fsync,
            false,
        )?))
    }

    fn catalogue_dir(&self, db: &Key) -> Result<Option<PathBuf>> {
        Ok(self.find(db)?.map(|d| d.join(CATALOGUE_DIR)))
    }

    fn open_reader(&self, db: &Key) -> Result<Option<Box<dyn DbReader>>> {
        let Some(dir) = self.find(db)? else {
            return Ok(None);
        };
        match PosixReader::open(dir) {
            Ok(r) => Ok(Some(Box::new(r))),
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn databases(&self) -> Result<Vec<Key>> {
        let mut out = Vec::new();
        for root in &self.roots {
            let rd = match fs::read_dir(root) {
                Ok(rd) => rd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("list", root, e)),
            };
            for ent in rd {
                let ent = ent.map_err(|e| Error::io("list", root, e))?;
                if ent.file_name().as_encoded_bytes().starts_with(b".") {
                    continue;
                }
                if let DbDir::Database(key) = read_db_dir(&ent.path()) {
                    out.push(key);
                }
            }
        }
        Ok(out)
    }

    fn damaged_databases(&self) -> Vec<String> {
        let mut out = Vec::new();
        for root in &self.roots {
            for ent in fs::read_dir(root).into_iter().flatten().flatten() {
                match read_db_dir(&ent.path()) {
                    DbDir::Damaged(why) => out.push(why),
                    // Not damage, but never silently absent either: FDB5's databases under
                    // haar's root are named, with what to do.
                    DbDir::Other if is_fdb5_database(&ent.path()) => {
                        out.push(fdb5_database_message(&ent.path()))
                    }
                    _ => {}
                }
            }
        }
        out
    }

    fn wipe_database(&self, db: &Key) -> Result<()> {
        let Some(dir) = self.find(db)? else {
            return Ok(());
        };
        let lock = open_lock(&dir)?;
        flock_exclusive_patiently(&lock).map_err(|_| busy(db, &dir, "writers hold it"))?;
        // The rename is the commit point (design §4.6): it writes no byte, so a full file
        // system cannot stop it; readers find the `toc` path gone and drop the database.
        let parent = dir.parent().unwrap_or(Path::new("/"));
        let grave = parent.join(format!("{GRAVE_PREFIX}{:016x}", random_u64()));
        fs::rename(&dir, &grave).map_err(|e| Error::io("rename", &dir, e))?;
        sync_dir(parent, self.fsync)?;
        drop(lock);
        remove_grave(&grave)?;
        self.clear_wiped();
        Ok(())
    }

    /// What a crash between an earlier wipe's rename and its removal left, in every root
    /// (best effort: another wipe may be removing it right now).
    fn clear_wiped(&self) {
        for root in &self.roots {
            for ent in fs::read_dir(root).into_iter().flatten().flatten() {
                if ent
                    .file_name()
                    .as_encoded_bytes()
                    .starts_with(GRAVE_PREFIX.as_bytes())
                {
                    let _ = remove_grave(&ent.path());
                }
            }
        }
    }

    fn release_reserve(&self, db: &Key) -> bool {
        let root = match self.find(db) {
            Ok(Some(dir)) => dir.parent().map(Path::to_path_buf),
            _ => None,
        };
        let root = root.unwrap_or_else(|| self.ranked_roots(&format::db_dir_name(db))[0].clone());
        crate::reserve::release(&root)
    }

    fn data_path(&self, db: &Key, data: &DataRef) -> Result<Option<PathBuf>> {
        let Some(dir) = self.find(db)? else {
            return Ok(None);
        };
        match self.names.path(&dir, data.object) {
            Ok(path) => Ok(Some(path)),
            // Wiped or purged since it was listed: there is no file to name.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("list", &dir, e)),
        }
    }

    fn unowned_files(&self, db: &Key) -> Result<Vec<PathBuf>> {
        let Some(dir) = self.find(db)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for ent in fs::read_dir(&dir).map_err(|e| Error::io("list", &dir, e))? {
            let ent = ent.map_err(|e| Error::io("list", &dir, e))?;
            let name = ent.file_name();
            let name = name.to_string_lossy();
            let is_dir = ent.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && name == CATALOGUE_DIR {
                out.extend(unowned_in_catalogue(&ent.path())?);
            } else if is_dir || !is_database_file(&name) {
                out.push(ent.path());
            }
        }
        out.sort();
        Ok(out)
    }

    fn exclusive(&self, db: &Key) -> Result<Box<dyn Exclusive>> {
        let dir = self.find(db)?.ok_or_else(|| Error::BadRequest {
            request: db.to_string(),
            reason: "no such database".into(),
        })?;
        let lock = open_lock(&dir)?;
        flock_exclusive_patiently(&lock).map_err(|_| busy(db, &dir, "writers hold it"))?;
        Ok(Box::new(PosixExclusive {
            dir,
            _lock: lock,
            fsync: self.fsync,
            snapshot_writer: None,
        }))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reclaims_space: true,
            persistent: true,
        }
    }

    fn info(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": "posix",
            "roots": self.roots,
            "fsync": self.fsync,
        })
    }
}

/// What a wiped database directory is renamed to before it is deleted (design §4.6).
const GRAVE_PREFIX: &str = ".wiped-";

/// Deletes a wiped database's directory; another process deleting it at the same time (a
/// wipe clearing leftovers) is no error.
fn remove_grave(grave: &Path) -> Result<()> {
    match fs::remove_dir_all(grave) {
        Err(e) if grave.exists() && e.kind() != io::ErrorKind::NotFound => {
            // Entries vanishing under us: once more, then it is an error.
            fs::remove_dir_all(grave).or_else(|e| match grave.exists() {
                false => Ok(()),
                true => Err(Error::io("remove", grave, e)),
            })
        }
        _ => Ok(()),
    }
}

struct PosixExclusive {
    dir: PathBuf,
    _lock: File,
    fsync: FsyncPolicy,
    snapshot_writer: Option<u64>,
}

impl Exclusive for PosixExclusive {
    fn snapshot_writer(&mut self) -> Result<Box<dyn DbWriter>> {
        let w = PosixWriter::new(self.dir.clone(), None, self.fsync, true)?;
        self.snapshot_writer = Some(w.id);
        Ok(Box::new(w))
    }

    fn discard(&mut self, dead: &HashSet<u64>) -> Result<u64> {
        let mut freed = 0;
        let files = data_files(&self.dir).map_err(|e| Error::io("list", &self.dir, e))?;
        for id in dead {
            let Some(path) = files.get(id) else {
                continue;
            };
            let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            match fs::remove_file(path) {
                Ok(()) => freed += len,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove", path, e)),
            }
        }
        Ok(freed)
    }

    fn reclaim(&mut self, live: &HashSet<u64>) -> Result<u64> {
        let mut freed = 0;
        let rd = fs::read_dir(&self.dir).map_err(|e| Error::io("list", &self.dir, e))?;
        for ent in rd {
            let ent = ent.map_err(|e| Error::io("list", &self.dir, e))?;
            let name = ent.file_name();
            let name = name.to_string_lossy();
            let index = name
                .strip_suffix(".index")
                .filter(|id| crate::catalogue::manifest::is_id(id))
                .and_then(|id| u64::from_str_radix(id, 16).ok());
            let dead = match (data_object(&name), index) {
                (Some(object), _) => !live.contains(&object),
                (None, Some(writer)) => Some(writer) != self.snapshot_writer,
                (None, None) => false,
            };
            if dead {
                let len = ent.metadata().map(|m| m.len()).unwrap_or(0);
                fs::remove_file(ent.path()).map_err(|e| Error::io("remove", ent.path(), e))?;
                freed += len;
            }
        }
        Ok(freed)
    }
}

/// One data file a writer appends to.
struct DataFile {
    object: u64,
    file: File,
    path: PathBuf,
    len: u64,
    dirty: bool,
}

impl DataFile {
    fn create(dir: &Path, object: u64, stem: Option<&str>) -> Result<Self> {
        let path = match stem {
            None => dir.join(format!("{object:016x}.data")),
            Some(stem) => dir.join(format!("{stem}.{object:016x}.data")),
        };
        Ok(DataFile {
            object,
            file: create_excl(&path)?,
            path,
            len: 0,
            dirty: false,
        })
    }
}

struct PosixWriter {
    dir: PathBuf,
    id: u64,
    _lock: Option<File>,
    fsync: FsyncPolicy,
    /// The database's `toc` version: 1, one data file (`data[0]`, named by the writer's id);
    /// 2, one per index (design §4.1).
    version: u16,
    /// The data files created, in order of creation.
    data: Vec<DataFile>,
    /// Version 2: the data file of each index appended to (position in `data`).
    by_index: HashMap<Key, usize>,
    index: Option<(File, PathBuf, u64)>,
    /// Files created in `dir` whose names are not yet synced.
    names_dirty: bool,
    toc: File,
    toc_path: PathBuf,
    /// Replace the whole toc on commit (purge snapshot).
    replace_toc: bool,
    /// A commit record was (or may have been) written: its files may be named, and stay.
    toc_attempted: bool,
}

impl Drop for PosixWriter {
    /// A writer that never reached `toc` leaves files nothing names (its process failed before
    /// its first flush, e.g. on a full file system): they are deleted, giving the space back.
    fn drop(&mut self) {
        if !self.toc_attempted {
            for d in &self.data {
                let _ = fs::remove_file(&d.path);
            }
            if let Some((_, path, _)) = &self.index {
                let _ = fs::remove_file(path);
            }
        }
    }
}

fn create_excl(path: &Path) -> Result<File> {
    crate::perm::create_options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io("create", path, e))
}

impl PosixWriter {
    fn new(
        dir: PathBuf,
        lock: Option<File>,
        fsync: FsyncPolicy,
        replace_toc: bool,
    ) -> Result<Self> {
        let id = random_u64();
        let toc_path = dir.join("toc");
        let toc = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&toc_path)
            .map_err(|e| Error::io("open", &toc_path, e))?;
        let mut header = [0u8; TOC_RECORD];
        toc.read_exact_at(&mut header, 0)
            .map_err(|e| Error::io("read", &toc_path, e))?;
        let version = format::check_toc_header(&header).map_err(|e| Error::Corrupt {
            what: "toc header",
            path: toc_path.clone(),
            detail: e.to_string(),
        })?;
        // Version 1: the writer's one data file, created at once as it always was.
        let data = match version {
            1 => vec![DataFile::create(&dir, id, None)?],
            _ => Vec::new(),
        };
        Ok(PosixWriter {
            dir,
            id,
            _lock: lock,
            fsync,
            version,
            data,
            by_index: HashMap::new(),
            index: None,
            names_dirty: true,
            toc,
            toc_path,
            replace_toc,
            toc_attempted: false,
        })
    }

    fn write_toc_record(&mut self, rec: &CommitRecord) -> Result<()> {
        let bytes = rec.encode();
        if self.replace_toc {
            let tmp = self.dir.join(format!(".toc-{:016x}", self.id));
            let mut f = create_excl(&tmp)?;
            let mut all = format::encode_toc_header(self.version).to_vec();
            all.extend_from_slice(&bytes);
            let written = f
                .write_all(&all)
                .map_err(|e| Error::io("write", &tmp, e))
                .and_then(|_| sync(&f, &tmp, self.fsync));
            if let Err(e) = written {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
            self.toc_attempted = true;
            fs::rename(&tmp, &self.toc_path).map_err(|e| Error::io("rename", &self.toc_path, e))?;
            self.toc = OpenOptions::new()
                .append(true)
                .open(&self.toc_path)
                .map_err(|e| Error::io("open", &self.toc_path, e))?;
            return sync_dir(&self.dir, self.fsync);
        }
        // One write(2) of 64 bytes on an O_APPEND descriptor: all or nothing (design §4.3).
        // A failed write(2) wrote nothing; a short one may have written part of a record.
        let n = self
            .toc
            .write(&bytes)
            .map_err(|e| Error::io("write", &self.toc_path, e))?;
        self.toc_attempted = true;
        if n != TOC_RECORD {
            return Err(Error::io(
                "write",
                &self.toc_path,
                io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("short write of commit record ({n} of 64 bytes)"),
                ),
            ));
        }
        sync(&self.toc, &self.toc_path, self.fsync)
    }
}

impl DbWriter for PosixWriter {
    fn id(&self) -> u64 {
        self.id
    }

    fn append(&mut self, index: &Key, bytes: &[u8]) -> Result<DataRef> {
        let at = match (self.version, self.by_index.get(index)) {
            (1, _) => 0,
            (_, Some(&at)) => at,
            (_, None) => {
                let d = DataFile::create(&self.dir, random_u64(), Some(&index_stem(index)))?;
                self.data.push(d);
                self.names_dirty = true;
                self.by_index.insert(index.clone(), self.data.len() - 1);
                self.data.len() - 1
            }
        };
        let d = &mut self.data[at];
        // pwrite at our own offset: a failed or short write is simply overwritten by the next
        // append, so an error never leaves a hole that later entries point past.
        d.file
            .write_all_at(bytes, d.len)
            .map_err(|e| Error::io("write", &d.path, e))?;
        let r = DataRef {
            object: d.object,
            offset: d.len,
            length: bytes.len() as u64,
            crc: haar_persist::crc32c(bytes),
        };
        d.len += bytes.len() as u64;
        d.dirty = true;
        Ok(r)
    }

    fn commit(&mut self, segment: &[u8]) -> Result<()> {
        for d in self.data.iter_mut().filter(|d| d.dirty) {
            sync(&d.file, &d.path, self.fsync)?;
            d.dirty = false;
        }
        if self.index.is_none() {
            let path = self.dir.join(format!("{:016x}.index", self.id));
            let f = create_excl(&path)?;
            self.index = Some((f, path, 0));
            self.names_dirty = true;
        }
        let (index, index_path, index_len) = self.index.as_mut().unwrap();
        index
            .write_all_at(segment, *index_len)
            .map_err(|e| Error::io("write", &*index_path, e))?;
        sync(index, index_path, self.fsync)?;
        let rec = CommitRecord {
            kind: RECORD_SEGMENT,
            writer: self.id,
            offset: *index_len,
            length: segment.len() as u32,
            segment_crc: format::segment_crc(segment),
            time_ns: now_ns(),
        };
        *index_len += segment.len() as u64;
        // The record names this writer's data and index files: their names first.
        if self.names_dirty {
            sync_dir(&self.dir, self.fsync)?;
            self.names_dirty = false;
        }
        self.write_toc_record(&rec)?;
        // After the commit, not before: a wipe that gave the reserve back to write its
        // tombstones must not have it taken again first (design §4.7).
        crate::reserve::keep(self.dir.parent().unwrap_or(Path::new("/")));
        Ok(())
    }
}

struct PosixReader {
    dir: PathBuf,
    toc_path: PathBuf,
    toc: File,
    ino: u64,
    pos: u64,
    indexes: HashMap<u64, File>,
    data: Mutex<HashMap<u64, (File, PathBuf)>>,
}

impl PosixReader {
    fn open(dir: PathBuf) -> Result<Self> {
        let toc_path = dir.join("toc");
        let toc = File::open(&toc_path).map_err(|e| Error::io("open", &toc_path, e))?;
        let ino = toc
            .metadata()
            .map_err(|e| Error::io("stat", &toc_path, e))?
            .ino();
        let mut header = [0u8; TOC_RECORD];
        toc.read_exact_at(&mut header, 0)
            .map_err(|e| Error::io("read", &toc_path, e))?;
        format::check_toc_header(&header).map_err(|e| Error::Corrupt {
            what: "toc header",
            path: toc_path.clone(),
            detail: e.to_string(),
        })?;
        Ok(PosixReader {
            dir,
            toc_path,
            toc,
            ino,
            pos: TOC_RECORD as u64,
            indexes: HashMap::new(),
            data: Mutex::new(HashMap::new()),
        })
    }

    fn index_file(&mut self, writer: u64) -> io::Result<&File> {
        if !self.indexes.contains_key(&writer) {
            let f = File::open(self.dir.join(format!("{writer:016x}.index")))?;
            self.indexes.insert(writer, f);
        }
        Ok(&self.indexes[&writer])
    }

    fn read_segment(&mut self, rec: &CommitRecord) -> Committed {
        let path = self.dir.join(format!("{:016x}.index", rec.writer));
        let origin = format!("{} @ {}", path.display(), rec.offset);
        let mut buf = vec![0u8; rec.length as usize];
        let res = self
            .index_file(rec.writer)
            .and_then(|f| f.read_exact_at(&mut buf, rec.offset));
        match res {
            Ok(()) if buf.len() >= 4 && format::segment_crc(&buf) == rec.segment_crc => {
                Committed::Segment { bytes: buf, origin }
            }
            Ok(()) => Committed::Unreadable {
                origin,
                detail: "segment checksum differs from its commit record".into(),
            },
            Err(e) => Committed::Unreadable {
                origin,
                detail: e.to_string(),
            },
        }
    }
}

impl DbReader for PosixReader {
    fn poll(&mut self) -> Result<Vec<Committed>> {
        let mut out = Vec::new();
        let meta = match fs::metadata(&self.toc_path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Wiped (and not re-created yet): forget what we had.
                if self.pos > TOC_RECORD as u64 {
                    out.push(Committed::Wiped);
                    self.pos = TOC_RECORD as u64;
                }
                return Ok(out);
            }
            Err(e) => return Err(Error::io("stat", &self.toc_path, e)),
        };
        if meta.ino() != self.ino {
            // Re-created (wipe) or replaced (purge snapshot): start over on the new file.
            let fresh = PosixReader::open(self.dir.clone())?;
            self.toc = fresh.toc;
            self.ino = fresh.ino;
            self.pos = TOC_RECORD as u64;
            self.indexes.clear();
            self.data.lock().unwrap().clear();
            out.push(Committed::Wiped);
            return self.poll().map(|mut more| {
                out.append(&mut more);
                out
            });
        }
        let end = meta.len() - (meta.len() - TOC_RECORD as u64) % TOC_RECORD as u64;
        if end <= self.pos {
            return Ok(out);
        }
        let mut buf = vec![0u8; (end - self.pos) as usize];
        self.toc
            .read_exact_at(&mut buf, self.pos)
            .map_err(|e| Error::io("read", &self.toc_path, e))?;
        for (i, chunk) in buf.chunks_exact(TOC_RECORD).enumerate() {
            let at = self.pos + (i * TOC_RECORD) as u64;
            match CommitRecord::decode(chunk) {
                Ok(rec) if rec.kind == RECORD_WIPED => {
                    out.push(Committed::Wiped);
                }
                Ok(rec) => out.push(self.read_segment(&rec)),
                Err(e) => out.push(Committed::Unreadable {
                    origin: format!("{} @ {at}", self.toc_path.display()),
                    detail: format!("commit record: {e}"),
                }),
            }
        }
        self.pos = end;
        Ok(out)
    }

    fn position(&self) -> u64 {
        self.pos
    }

    fn seek(&mut self, position: u64) {
        self.pos = position.max(TOC_RECORD as u64);
    }

    fn log_id(&self) -> u64 {
        self.ino
    }

    fn read(&self, data: &DataRef, out: &mut Vec<u8>) -> Result<()> {
        let mut files = self.data.lock().unwrap();
        let (f, path) = match files.entry(data.object) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let v1 = || self.dir.join(format!("{:016x}.data", data.object));
                let path = find_data_file(&self.dir, data.object)
                    .map_err(|e| Error::io("open", v1(), e))?;
                let f = File::open(&path).map_err(|e| Error::io("open", &path, e))?;
                e.insert((f, path))
            }
        };
        let start = out.len();
        out.resize(start + data.length as usize, 0);
        f.read_exact_at(&mut out[start..], data.offset)
            .map_err(|e| {
                out.truncate(start);
                Error::io("read", &*path, e)
            })
    }

    fn locate(&self, data: &DataRef) -> String {
        let known = self
            .data
            .lock()
            .unwrap()
            .get(&data.object)
            .map(|(_, p)| p.clone());
        let path = known
            .or_else(|| find_data_file(&self.dir, data.object).ok())
            .unwrap_or_else(|| self.dir.join(format!("{:016x}.data", data.object)));
        format!("{} @ {}", path.display(), data.offset)
    }
}
