//! The files of a catalogue directory (design §3.1) and the manifest's format: their names and
//! the test of what haar wrote there, the locks, atomic writes, and the sweep of files the
//! manifest no longer names.
//!
//! The bottom of the catalogue: it knows no run's contents and imports no other catalogue file.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::{self, Cursor};

const MANIFEST_MAGIC: &[u8; 4] = b"HMAN";
/// The version of both catalogue formats, runs and the manifest.
pub(super) const VERSION: u16 = 1;

/// One run as the manifest names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunRef {
    pub(crate) id: u64,
    pub(crate) len: u64,
    pub(crate) header_crc: u32,
    pub(crate) level: u32,
}

/// The manifest (design §3.1): which runs hold the log up to which position.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub(crate) log_id: u64,
    pub(crate) position: u64,
    pub(crate) generation: u64,
    /// Oldest first.
    pub(crate) runs: Vec<RunRef>,
    pub(crate) problems: Vec<String>,
}

pub(crate) const MANIFEST_FILE: &str = "manifest";
pub(crate) const LOCK_FILE: &str = "merge.lock";
/// Held by the one merger compacting runs (design §3.1).
pub(crate) const COMPACT_LOCK_FILE: &str = "compact.lock";

/// Whether `s` is 16 lowercase hex digits, haar's spelling of a writer, run or temporary id.
pub(crate) fn is_id(s: &str) -> bool {
    s.len() == 16
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` is a file haar writes in a catalogue directory (design §3.1): the manifest,
/// the two merge locks, runs, the part files of compactions, and the temporaries that
/// [`write_atomic`] and the run writer leave while they write (manifest, runs, and the
/// `db.key` of pmem databases). A wipe refuses to delete anything else unless told to
/// (FDB5's "unclean database").
pub(crate) fn is_catalogue_file(name: &str) -> bool {
    // `jumps`: the extraction's cache of jump records (design §16).
    if [
        MANIFEST_FILE,
        LOCK_FILE,
        COMPACT_LOCK_FILE,
        "db.key",
        "jumps",
    ]
    .contains(&name)
    {
        return true;
    }
    for suffix in [".run", ".run.tmp", ".run.part"] {
        if name.strip_suffix(suffix).is_some_and(is_id) {
            return true;
        }
    }
    // `write_atomic`'s temporaries: `{name}.{id}.tmp`.
    name.strip_suffix(".tmp")
        .and_then(|n| n.rsplit_once('.'))
        .is_some_and(|(base, id)| (base == MANIFEST_FILE || base == "db.key") && is_id(id))
}

impl Manifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + 24 * self.runs.len());
        b.extend_from_slice(MANIFEST_MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&self.log_id.to_le_bytes());
        b.extend_from_slice(&self.position.to_le_bytes());
        b.extend_from_slice(&self.generation.to_le_bytes());
        b.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.problems.len() as u32).to_le_bytes());
        for r in &self.runs {
            b.extend_from_slice(&r.id.to_le_bytes());
            b.extend_from_slice(&r.len.to_le_bytes());
            b.extend_from_slice(&r.header_crc.to_le_bytes());
            b.extend_from_slice(&r.level.to_le_bytes());
        }
        for p in &self.problems {
            b.extend_from_slice(&(p.len() as u32).to_le_bytes());
            b.extend_from_slice(p.as_bytes());
        }
        let crc = haar_persist::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    pub(crate) fn decode(buf: &[u8]) -> std::result::Result<Manifest, String> {
        if buf.len() < 44 {
            return Err(format!("{} bytes, shorter than a manifest", buf.len()));
        }
        let (body, crc) = buf.split_at(buf.len() - 4);
        let crc = u32::from_le_bytes(crc.try_into().unwrap());
        let computed = haar_persist::crc32c(body);
        if crc != computed {
            return Err(format!("crc {computed:#010x}, stored {crc:#010x}"));
        }
        let mut c = Cursor::new(body);
        let err = |e: format::DecodeError| e.to_string();
        if c.take(4).map_err(err)? != MANIFEST_MAGIC {
            return Err("bad magic (not a haar manifest)".into());
        }
        let version = c.u16().map_err(err)?;
        if version != VERSION {
            return Err(format!(
                "version {version}, this haar reads {VERSION}: it is ignored and rebuilt"
            ));
        }
        c.u16().map_err(err)?;
        let log_id = c.u64().map_err(err)?;
        let position = c.u64().map_err(err)?;
        let generation = c.u64().map_err(err)?;
        let n_runs = c.u32().map_err(err)? as usize;
        let n_problems = c.u32().map_err(err)? as usize;
        if n_runs > c.remaining() / 24 {
            return Err("run count past the end".into());
        }
        let mut runs = Vec::with_capacity(n_runs);
        for _ in 0..n_runs {
            runs.push(RunRef {
                id: c.u64().map_err(err)?,
                len: c.u64().map_err(err)?,
                header_crc: c.u32().map_err(err)?,
                level: c.u32().map_err(err)?,
            });
        }
        let mut problems = Vec::new();
        for _ in 0..n_problems {
            let n = c.u32().map_err(err)? as usize;
            let t = c.take(n).map_err(err)?;
            problems.push(String::from_utf8_lossy(t).into_owned());
        }
        if c.remaining() != 0 {
            return Err("trailing bytes".into());
        }
        Ok(Manifest {
            log_id,
            position,
            generation,
            runs,
            problems,
        })
    }
}

/// The file of run `id` in a catalogue directory.
pub(crate) fn run_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016x}.run"))
}

/// Writes `bytes` to `dir/name` atomically: a temporary file, `fdatasync`, rename, then an
/// `fsync` of the directory.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    // A name of its own, so that concurrent writers of the same file never share one.
    let tmp = dir.join(format!("{name}.{:016x}.tmp", crate::sys::random_u64()));
    let path = dir.join(name);
    let mut f = crate::perm::create_file(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_data())
        .map_err(|e| Error::io("write", &tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, e))?;
    sync_dir(dir)
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync", dir, e))
}

/// The file a compaction writes run `id` to until it is published ([`install`]).
pub(crate) fn part_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016x}.run.part"))
}

/// Opens (creating) the lock file at `path` and takes `flock(op)` on it; `None` when `op`
/// has `LOCK_NB` and the lock cannot be taken now. The lock lasts as long as the file.
pub(super) fn lock_file(path: &Path, op: libc::c_int) -> Result<Option<File>> {
    let f = crate::perm::create_options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| Error::io("open", path, e))?;
    match crate::sys::flock(&f, op) {
        Ok(()) => Ok(Some(f)),
        Err(_) if op & libc::LOCK_NB != 0 => Ok(None),
        Err(e) => Err(Error::io("lock", path, e)),
    }
}

/// Removes `*.tmp` files and the runs `keep` does not name, and with `parts` the part files
/// of compactions (only when none is running). Call with the merge lock held.
pub(crate) fn remove_unreferenced(dir: &Path, keep: &HashSet<u64>, parts: bool) -> io::Result<()> {
    for ent in fs::read_dir(dir)? {
        let ent = ent?;
        let name = ent.file_name();
        let name = name.to_string_lossy();
        // Only the merger's own temporaries (runs, manifests): another file's temporary may
        // be in use by a process that holds no merge lock (db.key of pmem databases).
        let stale = if name.ends_with(".run.tmp")
            || (name.starts_with(MANIFEST_FILE) && name.ends_with(".tmp"))
        {
            true
        } else if name.ends_with(".part") {
            parts
        } else if let Some(id) = name.strip_suffix(".run") {
            u64::from_str_radix(id, 16).is_ok_and(|id| !keep.contains(&id))
        } else {
            false
        };
        if stale {
            let _ = fs::remove_file(ent.path());
        }
    }
    Ok(())
}
