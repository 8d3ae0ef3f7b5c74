//! The `posix` backend (design §4): a directory per database under one or more roots,
//! append-only data files per writer and index, index files per writer, and a `toc` of fixed
//! 64-byte commit records.
//!
//! Owns file layout, locking and the fsync policy; knows nothing of schemas or requests. This
//! file holds the backend (databases found, created, wiped); `names` which files in a database
//! directory are haar's and where a data object lives, `writer` the writers and the exclusive
//! hold, `reader` the readers, `sync` the fsync policy.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use haar_core::Key;

use crate::backend::{Backend, Capabilities, DbReader, DbWriter, Exclusive};
use crate::error::{Error, Result};
use crate::format::{self, DataRef, TOC_VERSION};
use crate::sys::{flock, flock_exclusive_patiently, random_u64};

mod names;
mod reader;
mod sync;
mod writer;

pub(crate) use names::unowned_in_catalogue;
use names::{DataFileNames, is_database_file};
use reader::PosixReader;
pub use sync::FsyncPolicy;
use sync::sync_dir;
use writer::{PosixExclusive, PosixWriter};

/// Directory-per-database backend over one or more roots.
pub struct PosixBackend {
    roots: Vec<PathBuf>,
    fsync: FsyncPolicy,
    names: DataFileNames,
}

/// The catalogue directory of a database (design §3.1), inside its directory (posix) or
/// under the root (pmem).
pub const CATALOGUE_DIR: &str = "catalogue";

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
            match retry_stale(|| fs::read(dir.join("db.key"))) {
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

/// How many times [`retry_stale`] tries an operation that fails with `ESTALE`.
const STALE_TRIES: u32 = 6;

/// `op`, tried again while it fails with `ESTALE`, up to [`STALE_TRIES`] times with a short
/// growing pause (1, 2, 4, 8, 16 ms).
///
/// On a network file system (the cluster's shared `/shared`, GlusterFS here, NFS elsewhere)
/// a process that resolved a path just as another node renamed a new database directory over
/// it can get `ESTALE` for a file that exists: its handle names the object the path meant a
/// moment before. Looking the path up again resolves it afresh (the Linux NFS client retries
/// such lookups once itself). Seen in CI on the virtual cluster: four members creating one
/// database at once from two nodes, one failed reading `db.key` with "Stale file handle".
pub(crate) fn retry_stale<T>(mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut pause = Duration::from_millis(1);
    for _ in 1..STALE_TRIES {
        match op() {
            Err(e) if e.raw_os_error() == Some(libc::ESTALE) => {
                std::thread::sleep(pause);
                pause *= 2;
            }
            done => return done,
        }
    }
    op()
}

/// Reads the `db.key` of the directory `dir`.
pub(crate) fn read_db_dir(dir: &Path) -> DbDir {
    let path = dir.join("db.key");
    match retry_stale(|| fs::read(&path)) {
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
        Ok(Box::new(PosixExclusive::new(dir, lock, self.fsync)))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stale() -> io::Error {
        io::Error::from_raw_os_error(libc::ESTALE)
    }

    #[test]
    fn a_stale_handle_is_looked_up_again_and_other_errors_are_not() {
        // ESTALE twice, then the bytes: read on the third try.
        let mut tries = 0;
        let got = retry_stale(|| {
            tries += 1;
            if tries < 3 { Err(stale()) } else { Ok(7) }
        });
        assert_eq!((got.unwrap(), tries), (7, 3));
        // Always stale: given up after STALE_TRIES, the error kept.
        let mut tries = 0;
        let got: io::Result<()> = retry_stale(|| {
            tries += 1;
            Err(stale())
        });
        assert_eq!(got.unwrap_err().raw_os_error(), Some(libc::ESTALE));
        assert_eq!(tries, STALE_TRIES);
        // Any other error at once: NotFound is an answer (no database there).
        let mut tries = 0;
        let got: io::Result<()> = retry_stale(|| {
            tries += 1;
            Err(io::ErrorKind::NotFound.into())
        });
        assert_eq!(got.unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(tries, 1);
    }
}
