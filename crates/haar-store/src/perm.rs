//! Permissions of the files and directories the store creates (design §6.1): owner-only by
//! default (files 0600, directories 0700), or what the configuration's `file_mode` says
//! (e.g. `"0640"`: files 0640, directories 0750, for a group of readers). The mode is set
//! once per process, from the configuration the process opens its store with; the umask
//! still applies on top.
//!
//! Owns the mode and the creation calls; every file or directory haar-store creates goes
//! through [`create_options`], [`create_file`] or [`create_dir`] / [`create_dir_all`].

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Result};

/// The default mode of created files: read and write for the owner only.
pub const DEFAULT_FILE_MODE: u32 = 0o600;

static FILE_MODE: AtomicU32 = AtomicU32::new(DEFAULT_FILE_MODE);

/// Parses a `file_mode` setting: an octal string of read/write bits (`"0600"`, `"0640"`,
/// `"660"`), which must let the owner read and write and may not make files executable.
pub fn parse_file_mode(s: &str) -> Result<u32> {
    let bad = |why: &str| {
        Error::Config(format!(
            "file_mode {s:?}: {why}; give octal read/write bits such as \"0600\" (the default) or \"0640\""
        ))
    };
    let m = u32::from_str_radix(s.trim(), 8).map_err(|_| bad("not an octal number"))?;
    if m & !0o666 != 0 {
        return Err(bad("only read and write bits are allowed"));
    }
    if m & 0o600 != 0o600 {
        return Err(bad("the owner must be able to read and write"));
    }
    Ok(m)
}

/// Sets the mode of files created from now on in this process (directories get the matching
/// execute bits).
pub fn set_file_mode(mode: u32) {
    FILE_MODE.store(mode, Ordering::Relaxed);
}

/// The mode of created files.
pub fn file_mode() -> u32 {
    FILE_MODE.load(Ordering::Relaxed)
}

/// The mode of created directories: the file mode plus execute wherever it can read.
pub fn dir_mode() -> u32 {
    let m = file_mode();
    m | ((m & 0o444) >> 2)
}

/// `OpenOptions` that create files with [`file_mode`] (add the access flags).
pub fn create_options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(file_mode());
    o
}

/// As `File::create`, with [`file_mode`].
pub fn create_file(path: &Path) -> io::Result<File> {
    create_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

/// As `fs::create_dir`, with [`dir_mode`].
pub fn create_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().mode(dir_mode()).create(path)
}

/// As `fs::create_dir_all`, with [`dir_mode`] for every directory it creates.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(dir_mode())
        .create(path)
}
