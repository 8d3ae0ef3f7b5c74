//! The one typed configuration: which backend, where, with what policy.
//!
//! Read from one file (`--config FILE` or `HAAR_CONFIG`) by the CLI; every field has a default
//! so that haar works with no configuration at all.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::memory::MemoryBackend;
use crate::pmem::{PmemBackend, PmemOptions};
use crate::posix::{FsyncPolicy, PosixBackend};

/// Which backend a store uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Directories of append-only files.
    #[default]
    Posix,
    /// A persistent-memory pool file mapped into memory.
    Pmem,
    /// Process memory (tests).
    Memory,
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "posix" => Ok(BackendKind::Posix),
            "pmem" => Ok(BackendKind::Pmem),
            "memory" => Ok(BackendKind::Memory),
            _ => Err(format!("unknown backend {s:?}: use posix, pmem or memory")),
        }
    }
}

/// The store configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Backend kind.
    pub backend: BackendKind,
    /// Root directories (posix: one or more; pmem: the first holds the pool).
    pub roots: Vec<PathBuf>,
    /// posix fsync policy.
    pub fsync: FsyncPolicy,
    /// pmem: initial pool size in bytes.
    pub pool_size: u64,
    /// pmem: largest size the pool may grow to (0 = as large as the device allows).
    pub pool_max: u64,
    /// Schema file (FDB5 rule language); the built-in schema when absent.
    pub schema: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backend: BackendKind::Posix,
            roots: vec![default_root()],
            fsync: FsyncPolicy::Always,
            pool_size: PmemOptions::default().initial_size,
            pool_max: 0,
            schema: None,
        }
    }
}

/// `$XDG_DATA_HOME/haar`, else `~/.local/share/haar`, else `/tmp/haar`.
pub fn default_root() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("haar");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".local/share/haar");
    }
    PathBuf::from("/tmp/haar")
}

impl Config {
    /// Parses a configuration file's text (YAML; JSON is valid YAML too). `origin` names the
    /// file in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config> {
        serde_yaml_ng::from_str(text).map_err(|e| Error::Config(format!("{origin}: {e}")))
    }

    /// Opens the configured backend.
    pub fn open_backend(&self) -> Result<Arc<dyn Backend>> {
        if self.roots.is_empty() {
            return Err(Error::Config(
                "`roots` is empty: give at least one directory".into(),
            ));
        }
        Ok(match self.backend {
            BackendKind::Posix => Arc::new(PosixBackend::new(self.roots.clone(), self.fsync)?),
            BackendKind::Pmem => Arc::new(PmemBackend::open(
                &self.roots[0],
                PmemOptions {
                    initial_size: self.pool_size,
                    max_size: self.pool_max,
                    ..PmemOptions::default()
                },
            )?),
            BackendKind::Memory => Arc::new(MemoryBackend::new()),
        })
    }
}
