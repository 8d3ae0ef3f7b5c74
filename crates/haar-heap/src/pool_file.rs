//! The pool file: checked, created sparse with mode 0600 under a name unique to the run, and
//! removed when dropped. Owns the checks on DIR; knows nothing of the command or the library.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::HeapError;
use crate::spec::{HeapSpec, MAX_SIZE, MIN_SIZE};

/// The environment variable that names the pool file to the preloaded library.
pub const FILE_ENV: &str = "HAAR_HEAP_FILE";

/// A pool file created for one run; dropping it removes it.
#[derive(Debug)]
pub struct PoolFile {
    path: PathBuf,
    size: u64,
}

impl PoolFile {
    /// Checks `spec.dir` (exists, is a directory, has `size` bytes available) and creates
    /// `DIR/haar-heap.<pid>.<n>.pool`, mode 0600, sparse, `size` bytes long (`spec.size`, or
    /// all the space available in DIR).
    ///
    /// # Errors
    /// [`HeapError::DirMissing`], [`HeapError::NotADirectory`], [`HeapError::NoSpace`],
    /// [`HeapError::TooSmall`] or [`HeapError::NotWritable`], each naming DIR.
    pub fn create(spec: &HeapSpec) -> Result<PoolFile, HeapError> {
        let dir = &spec.dir;
        match std::fs::metadata(dir) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(HeapError::DirMissing { dir: dir.clone() });
            }
            Err(source) => {
                return Err(HeapError::NotWritable {
                    dir: dir.clone(),
                    source,
                });
            }
            Ok(m) if !m.is_dir() => return Err(HeapError::NotADirectory { dir: dir.clone() }),
            Ok(_) => {}
        }
        let available =
            haar_persist::available_bytes(dir).map_err(|source| HeapError::NotWritable {
                dir: dir.clone(),
                source,
            })?;
        let size = match spec.size {
            Some(s) => s,
            // All that is available, in whole MiB, up to mimalloc's largest arena.
            None => (available & !((1 << 20) - 1)).min(MAX_SIZE),
        };
        if size < MIN_SIZE && spec.size.is_some() {
            return Err(HeapError::TooSmall { size });
        }
        if size > available || size < MIN_SIZE {
            return Err(HeapError::NoSpace {
                dir: dir.clone(),
                size: size.max(MIN_SIZE),
                available,
            });
        }
        if size > MAX_SIZE {
            return Err(HeapError::TooLarge { size });
        }
        static RUN: AtomicU32 = AtomicU32::new(0);
        let (path, file) = loop {
            let n = RUN.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("haar-heap.{}.{n}.pool", std::process::id()));
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(f) => break (path, f),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(source) => {
                    return Err(HeapError::NotWritable {
                        dir: dir.clone(),
                        source,
                    });
                }
            }
        };
        let pool = PoolFile { path, size };
        set_len(&file, size).map_err(|source| HeapError::NotWritable {
            dir: dir.clone(),
            source,
        })?;
        Ok(pool)
    }

    /// The file's path (what [`FILE_ENV`] is set to).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pool's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Drop for PoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sparse: `ftruncate` allocates nothing.
fn set_len(file: &File, size: u64) -> std::io::Result<()> {
    file.set_len(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn the_file_is_sparse_private_unique_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let spec = HeapSpec {
            dir: dir.path().into(),
            size: Some(256 << 20),
        };
        let a = PoolFile::create(&spec).unwrap();
        let b = PoolFile::create(&spec).unwrap();
        assert_ne!(a.path(), b.path());
        let m = std::fs::metadata(a.path()).unwrap();
        assert_eq!(m.len(), 256 << 20);
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert!(
            m.blocks() * 512 < 1 << 20,
            "not sparse: {} blocks",
            m.blocks()
        );
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists());
        assert!(b.path().exists());
    }

    #[test]
    fn unusable_directories_are_named_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let e = PoolFile::create(&HeapSpec {
            dir: missing.clone(),
            size: None,
        })
        .unwrap_err();
        assert!(matches!(e, HeapError::DirMissing { .. }));
        let text = e.to_string();
        assert!(text.contains(&missing.display().to_string()) && text.contains("create it"));

        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = PoolFile::create(&HeapSpec {
            dir: file,
            size: None,
        })
        .unwrap_err();
        assert!(matches!(e, HeapError::NotADirectory { .. }), "{e}");

        let e = PoolFile::create(&HeapSpec {
            dir: dir.path().into(),
            size: Some(1 << 60),
        })
        .unwrap_err();
        assert!(matches!(e, HeapError::NoSpace { .. }), "{e}");
        assert!(e.to_string().contains("smaller SIZE"), "{e}");
        // Above mimalloc's largest arena (where the directory has room for it: the file is
        // sparse), refused saying what to give.
        if haar_persist::available_bytes(dir.path()).unwrap() > MAX_SIZE + (32 << 20) {
            let e = PoolFile::create(&HeapSpec {
                dir: dir.path().into(),
                size: Some(MAX_SIZE + (32 << 20)),
            })
            .unwrap_err();
            assert!(matches!(e, HeapError::TooLarge { .. }), "{e}");
            assert!(e.to_string().contains("largest arena"), "{e}");
            assert!(e.to_string().contains("DIR:16064M"), "{e}");
        }
        // Nothing was left behind by the refusals.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn without_a_size_the_pool_is_what_the_directory_has_available() {
        let dir = tempfile::tempdir().unwrap();
        let p = PoolFile::create(&HeapSpec {
            dir: dir.path().into(),
            size: None,
        })
        .unwrap();
        let avail = haar_persist::available_bytes(dir.path())
            .unwrap()
            .min(MAX_SIZE);
        // Other writers on the file system may move `available` a little between the two looks.
        assert!(p.size() <= avail + (16 << 20) && avail - p.size().min(avail) < 16 << 20);
        assert_eq!(p.size() % (1 << 20), 0);
        assert!(p.size() <= MAX_SIZE);
    }
}
