//! Writing a posix database (design §4.1, §4.4): a writer's data files (one per index in a
//! version 2 database), its index file and its commit records; and the exclusive hold a wipe
//! or purge takes.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use haar_core::Key;

use super::names::{data_files, data_object, index_stem};
use super::sync::{FsyncPolicy, now_ns, sync, sync_dir};
use crate::backend::{DbWriter, Exclusive};
use crate::error::{Error, Result};
use crate::format::{self, CommitRecord, DataRef, RECORD_SEGMENT, TOC_RECORD};
use crate::sys::random_u64;

pub(super) struct PosixExclusive {
    dir: PathBuf,
    _lock: File,
    fsync: FsyncPolicy,
    snapshot_writer: Option<u64>,
}

impl PosixExclusive {
    /// The exclusive hold of `dir`, whose `lock` the caller holds exclusively.
    pub(super) fn new(dir: PathBuf, lock: File, fsync: FsyncPolicy) -> Self {
        PosixExclusive {
            dir,
            _lock: lock,
            fsync,
            snapshot_writer: None,
        }
    }
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
pub(super) struct DataFile {
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

pub(super) struct PosixWriter {
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

pub(super) fn create_excl(path: &Path) -> Result<File> {
    crate::perm::create_options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io("create", path, e))
}

impl PosixWriter {
    pub(super) fn new(
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
