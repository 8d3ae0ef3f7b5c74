//! Reading a posix database (design §4.3): the `toc` followed from a position, segments from
//! the writers' index files, field bytes from the data files.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::Mutex;

use super::names::find_data_file;
use crate::backend::{Committed, DbReader};
use crate::error::{Error, Result};
use crate::format::{self, CommitRecord, DataRef, RECORD_WIPED, TOC_RECORD};

pub(super) struct PosixReader {
    dir: PathBuf,
    toc_path: PathBuf,
    toc: File,
    ino: u64,
    pos: u64,
    indexes: HashMap<u64, File>,
    data: Mutex<HashMap<u64, (File, PathBuf)>>,
}

impl PosixReader {
    pub(super) fn open(dir: PathBuf) -> Result<Self> {
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
