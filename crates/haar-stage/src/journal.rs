//! The task journal: one directory per task under the journal directory, each holding the
//! task's record (`task`), an optional cancel request (`cancel`) and a detached runner's log
//! (`log`); and `rates`, the bandwidth measured per dataspace pair. Formats: design §13.2.
//!
//! Owns the bytes of those files and their atomic replacement. It must not know how objects
//! are copied: [`crate::task`] decides what a record says.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::error::{Error, Result};

/// The journal's directory.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
}

/// Magic word of a task record.
pub const TASK_MAGIC: &str = "haar-stage-task";
/// Magic word of the rates file.
pub const RATES_MAGIC: &str = "haar-stage-rates";
/// Format version of both files.
pub const VERSION: u32 = 1;

impl Journal {
    /// The journal in `dir` (created 0700 if missing: task records name the user's files).
    pub fn open(dir: &Path) -> Result<Journal> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| Error::io("create journal directory", dir, e))?;
        Ok(Journal { dir: dir.into() })
    }

    /// The journal in the existing directory `dir`, without creating or checking it (a
    /// journal another process created).
    pub fn new_unchecked(dir: &Path) -> Journal {
        Journal { dir: dir.into() }
    }

    /// The default journal of this user: `$XDG_STATE_HOME/haar/stage`, else
    /// `~/.local/state/haar/stage`, else `/tmp/haar-stage-UID`.
    pub fn default_dir() -> PathBuf {
        let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty());
        if let Some(d) = var("XDG_STATE_HOME") {
            return PathBuf::from(d).join("haar/stage");
        }
        if let Some(h) = var("HOME") {
            return PathBuf::from(h).join(".local/state/haar/stage");
        }
        // SAFETY: getuid cannot fail.
        PathBuf::from(format!("/tmp/haar-stage-{}", unsafe { libc::getuid() }))
    }

    /// The journal's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of task `id`.
    pub fn task_dir(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// Every task id present, sorted.
    pub fn task_ids(&self) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        let rd = std::fs::read_dir(&self.dir).map_err(|e| Error::io("list", &self.dir, e))?;
        for entry in rd.flatten() {
            if entry.path().join("task").is_file() {
                ids.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Creates the directory of a new task; an id in use is refused.
    pub fn create_task_dir(&self, id: &str) -> Result<PathBuf> {
        let d = self.task_dir(id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&d)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Error::Usage(format!(
                    "task {id} exists already in {}",
                    self.dir.display()
                )),
                _ => Error::io("create task directory", &d, e),
            })?;
        Ok(d)
    }

    /// Reads a record written by [`write_record`] at `path`: a regular file (a symbolic link
    /// or a device is refused, not followed: journals may lie in directories their readers
    /// do not own) of at most [`MAX_RECORD`] bytes.
    pub fn read<T: DeserializeOwned>(path: &Path, magic: &str) -> Result<T> {
        use std::io::Read;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::Missing(format!("no {}", path.display())),
                _ => Error::io("read", path, e),
            })?;
        let meta = f.metadata().map_err(|e| Error::io("stat", path, e))?;
        if !meta.is_file() || meta.len() > MAX_RECORD {
            return Err(Error::Journal {
                path: path.into(),
                detail: format!("not a regular file of at most {MAX_RECORD} bytes"),
            });
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        f.take(MAX_RECORD)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("read", path, e))?;
        decode(&bytes, magic).map_err(|detail| Error::Journal {
            path: path.into(),
            detail,
        })
    }

    /// The rates file's path.
    pub fn rates_path(&self) -> PathBuf {
        self.dir.join("rates")
    }

    /// Bandwidth measured per dataspace pair (empty when none was recorded yet; a damaged
    /// file counts as empty: it is a hint for ETAs, not data).
    pub fn rates(&self) -> Rates {
        Journal::read(&self.rates_path(), RATES_MAGIC).unwrap_or_default()
    }

    /// Adds a finished task's bytes and seconds to its pair's record. Concurrent finishers
    /// serialise on a lock file, so no measurement is lost.
    pub fn record_rate(&self, pair: &str, bytes: u64, seconds: f64) -> Result<()> {
        let lock_path = self.dir.join("rates.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| Error::io("open", &lock_path, e))?;
        // SAFETY: flock on a file descriptor we own; released when `lock` closes.
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
        let mut rates = self.rates();
        let r = rates.pairs.entry(pair.to_string()).or_default();
        r.bytes += bytes;
        r.seconds += seconds;
        r.tasks += 1;
        r.last_rate = if seconds > 0.0 {
            bytes as f64 / seconds
        } else {
            0.0
        };
        write_record(&self.rates_path(), RATES_MAGIC, &rates)
    }
}

/// Bandwidth per dataspace pair (`SRC->DST`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Rates {
    /// Pair → totals.
    pub pairs: BTreeMap<String, PairRate>,
}

/// What was measured for one dataspace pair.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PairRate {
    /// Bytes staged by finished tasks.
    pub bytes: u64,
    /// Seconds those tasks ran.
    pub seconds: f64,
    /// How many tasks.
    pub tasks: u64,
    /// Bytes per second of the last task.
    pub last_rate: f64,
}

impl PairRate {
    /// Mean bytes per second over every task, if any ran for a measurable time.
    pub fn mean(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.bytes as f64 / self.seconds)
    }
}

/// Encodes `value` as a record: `MAGIC v1 crc32c=XXXXXXXX len=N\n` then N bytes of JSON,
/// the CRC-32C being over those N bytes.
pub fn encode<T: Serialize>(magic: &str, value: &T) -> Vec<u8> {
    let body = serde_json::to_vec_pretty(value).expect("journal records serialise");
    let mut out = format!(
        "{magic} v{VERSION} crc32c={:08x} len={}\n",
        haar::crc32c(&body),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out.push(b'\n');
    out
}

/// Decodes a record written by [`encode`]; the error says what is wrong.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], magic: &str) -> std::result::Result<T, String> {
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line")?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| "header is not UTF-8")?;
    let mut words = header.split(' ');
    if words.next() != Some(magic) {
        return Err(format!("not a {magic} record"));
    }
    let version = words.next().unwrap_or("");
    if version != format!("v{VERSION}") {
        return Err(format!("version {version:?}: this haar reads v{VERSION}"));
    }
    let field = |w: Option<&str>, name: &str| -> std::result::Result<String, String> {
        w.and_then(|w| w.strip_prefix(name))
            .map(str::to_string)
            .ok_or_else(|| format!("header lacks {name}"))
    };
    // Strict spellings (eight lower-case hex digits, a plain decimal), so that the header
    // has one form and any altered byte of it is noticed.
    let crc_text = field(words.next(), "crc32c=")?;
    let crc = u32::from_str_radix(&crc_text, 16)
        .ok()
        .filter(|c| format!("{c:08x}") == crc_text)
        .ok_or("bad crc32c in header")?;
    let len_text = field(words.next(), "len=")?;
    let len: usize = len_text
        .parse()
        .ok()
        .filter(|l: &usize| l.to_string() == len_text)
        .ok_or("bad len in header")?;
    if words.next().is_some() {
        return Err("unexpected words in header".into());
    }
    let body = bytes
        .get(nl + 1..nl + 1 + len)
        .ok_or_else(|| format!("truncated: {len} body bytes announced"))?;
    let actual = haar::crc32c(body);
    if actual != crc {
        return Err(format!(
            "checksum mismatch (header {crc:08x}, body {actual:08x}): the file is damaged"
        ));
    }
    serde_json::from_slice(body).map_err(|e| format!("body: {e}"))
}

/// Largest record [`Journal::read`] accepts.
pub const MAX_RECORD: u64 = 64 << 20;

/// Replaces the record at `path` atomically: written whole beside it, fsynced, renamed over
/// it. A reader sees the old record or the new one, never a mixture.
pub fn write_record<T: Serialize>(path: &Path, magic: &str, value: &T) -> Result<()> {
    let bytes = encode(magic, value);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("rename", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_any_flipped_byte_is_caught() {
        let mut v = BTreeMap::new();
        v.insert("a".to_string(), 7u64);
        let bytes = encode("m", &v);
        assert_eq!(decode::<BTreeMap<String, u64>>(&bytes, "m").unwrap(), v);
        for i in 0..bytes.len() - 1 {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            assert!(
                decode::<BTreeMap<String, u64>>(&b, "m").is_err(),
                "flip at {i} went unnoticed"
            );
        }
        assert!(decode::<BTreeMap<String, u64>>(&bytes[..bytes.len() - 3], "m").is_err());
        let e = decode::<BTreeMap<String, u64>>(&bytes, "other").unwrap_err();
        assert!(e.contains("not a other"), "{e}");
    }
}
