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
use crate::pmem::{DEFAULT_CHUNK, PmemBackend, PmemOptions, Prefault};
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
    /// pmem: heap a writing process reserves (and maps) at a time, in bytes.
    pub pool_chunk: u64,
    /// pmem: when a process reserves and maps its first chunk: `create` (at its first write),
    /// `open` (when it opens the pool) or `never` (a bulk copier: large fields go through the
    /// file, design §5.1).
    pub pool_prefault: Prefault,
    /// pmem: provisioning (`haar hammer`'s) backs the pool with 2 MiB pages where the kernel
    /// can, as a DAX namespace is mapped: fewer page-table entries per process, slower
    /// provisioning on tmpfs (the kernel copies each page in).
    pub pool_huge_pages: bool,
    /// Schema file (FDB5 rule language); the built-in schema when absent.
    pub schema: Option<PathBuf>,
    /// Mode of the files the store creates, octal (`"0600"`, the default: owner only;
    /// `"0640"` for a group of readers); directories get the matching execute bits.
    pub file_mode: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backend: BackendKind::Posix,
            roots: vec![default_root()],
            fsync: FsyncPolicy::Always,
            pool_size: PmemOptions::default().initial_size,
            pool_max: 0,
            pool_chunk: DEFAULT_CHUNK,
            pool_prefault: Prefault::Create,
            pool_huge_pages: false,
            schema: None,
            file_mode: None,
        }
    }
}

/// Top-level sections of the one configuration file that belong to other parts of haar and
/// are read there (`dataspaces`: the data mover, `haar_stage::Dataspaces`, design §13;
/// `fdb5_missing`: FDB5's C API face, `haar_c::fdb_api`, design §12); the store's own parsing
/// sets them aside so that its unknown-field check still catches typos.
pub const OTHER_SECTIONS: &[&str] = &["dataspaces", "fdb5_missing"];

/// The configuration text as YAML, without the [`OTHER_SECTIONS`].
fn parse_store_sections(text: &str, origin: &str) -> Result<serde_yaml_ng::Value> {
    let mut value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(text).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
    if let Some(map) = value.as_mapping_mut() {
        for section in OTHER_SECTIONS {
            map.remove(*section);
        }
    }
    Ok(value)
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
        let value = parse_store_sections(text, origin)?;
        if let Some(cfg) = from_fdb5(&value, origin) {
            return cfg;
        }
        serde_yaml_ng::from_value(value).map_err(|e| Error::Config(format!("{origin}: {e}")))
    }

    /// The pool options of the `pmem` backend.
    pub fn pmem_options(&self) -> PmemOptions {
        PmemOptions {
            initial_size: self.pool_size,
            max_size: self.pool_max,
            chunk: self.pool_chunk,
            prefault: self.pool_prefault,
            huge_pages: self.pool_huge_pages,
            ..PmemOptions::default()
        }
    }

    /// Opens the configured backend for reading: a store that does not exist is
    /// [`Error::NoStore`], never created (no pool file made, no root directory).
    pub fn open_backend_for_reading(&self) -> Result<Arc<dyn Backend>> {
        self.apply_file_mode()?;
        match self.backend {
            BackendKind::Posix
                if !self.roots.is_empty() && !self.roots.iter().any(|r| r.is_dir()) =>
            {
                Err(Error::NoStore {
                    path: self.roots[0].clone(),
                    detail: "no such directory: nothing was archived there; check --root, \
                             --backend or the configuration"
                        .into(),
                })
            }
            BackendKind::Pmem if !self.roots.is_empty() => Ok(Arc::new(PmemBackend::open(
                &self.roots[0],
                PmemOptions {
                    create: false,
                    ..self.pmem_options()
                },
            )?)),
            _ => self.open_backend(),
        }
    }

    /// Sets this process's mode for created files from `file_mode` (design §6.1).
    pub fn apply_file_mode(&self) -> Result<()> {
        if let Some(m) = &self.file_mode {
            crate::perm::set_file_mode(crate::perm::parse_file_mode(m)?);
        }
        Ok(())
    }

    /// Opens the configured backend.
    pub fn open_backend(&self) -> Result<Arc<dyn Backend>> {
        self.apply_file_mode()?;
        if self.roots.is_empty() {
            return Err(Error::Config(
                "`roots` is empty: give at least one directory".into(),
            ));
        }
        Ok(match self.backend {
            BackendKind::Posix => Arc::new(PosixBackend::new(self.roots.clone(), self.fsync)?),
            BackendKind::Pmem => Arc::new(PmemBackend::open(&self.roots[0], self.pmem_options())?),
            BackendKind::Memory => Arc::new(MemoryBackend::new()),
        })
    }
}

/// A front-end described by the configuration file (design §7). A file without `type` is a
/// local store ([`Config`]).
///
/// ```yaml
/// type: select
/// routes:
///   - match: stream=enfo
///     store: {type: dist, replicas: 2, lanes: [{type: remote, server: "n1:7000"}, {type: remote, server: "n2:7000"}]}
///   - match: ""
///     store: {type: local, backend: posix, roots: [/data/haar]}
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum FrontendConfig {
    /// A local store.
    Local {
        /// Its configuration.
        #[serde(flatten)]
        store: Config,
    },
    /// One `haar serve` server.
    Remote {
        /// `host:port`.
        server: String,
    },
    /// Rendezvous hashing over lanes.
    Dist {
        /// The lanes (usually `remote`).
        lanes: Vec<FrontendConfig>,
        /// Copies of every field.
        #[serde(default = "one")]
        replicas: usize,
        /// What the hash places.
        #[serde(default)]
        placement: crate::dist::Placement,
    },
    /// Routing by key patterns; first match wins on archive.
    Select {
        /// Pattern → front-end.
        routes: Vec<Route>,
    },
}

fn one() -> usize {
    1
}

/// One `select` route.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// A request pattern (`stream=enfo/efov`); empty matches everything.
    #[serde(rename = "match")]
    pub pattern: String,
    /// Where matching fields go.
    pub store: FrontendConfig,
}

/// Opens a remote front-end for `host:port` (provided by the network layer).
pub type RemoteFactory<'a> = &'a dyn Fn(&str) -> Result<Box<dyn crate::FieldStore>>;

impl FrontendConfig {
    /// Parses a configuration file's text: a front-end if it has `type`, else a local store.
    pub fn from_yaml(text: &str, origin: &str) -> Result<FrontendConfig> {
        let value = parse_store_sections(text, origin)?;
        let typed = value
            .as_mapping()
            .is_some_and(|m| m.contains_key(serde_yaml_ng::Value::from("type")));
        if let Some(cfg) = from_fdb5(&value, origin) {
            return Ok(FrontendConfig::Local { store: cfg? });
        }
        if typed {
            serde_yaml_ng::from_value(value).map_err(|e| Error::Config(format!("{origin}: {e}")))
        } else {
            Ok(FrontendConfig::Local {
                store: Config::from_yaml(text, origin)?,
            })
        }
    }

    /// A short name (lane names in `dist` are these).
    pub fn name(&self) -> String {
        match self {
            FrontendConfig::Local { store } => {
                let roots: Vec<String> = store
                    .roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect();
                roots.join(",")
            }
            FrontendConfig::Remote { server } => server.clone(),
            FrontendConfig::Dist { lanes, .. } => {
                format!(
                    "dist[{}]",
                    lanes.iter().map(|l| l.name()).collect::<Vec<_>>().join(",")
                )
            }
            FrontendConfig::Select { .. } => "select".into(),
        }
    }

    /// Builds the front-end; `remote` opens `remote` lanes.
    pub fn open(
        &self,
        opts: &crate::StoreOptions,
        remote: RemoteFactory<'_>,
    ) -> Result<Box<dyn crate::FieldStore>> {
        Ok(match self {
            FrontendConfig::Local { store } => {
                let mut opts = opts.clone();
                if let Some(path) = &store.schema {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        Error::Config(format!("cannot read schema {}: {e}", path.display()))
                    })?;
                    opts.schema =
                        Arc::new(haar_core::Schema::parse(&text).map_err(|e| {
                            Error::Config(format!("schema {}: {e}", path.display()))
                        })?);
                }
                Box::new(crate::Store::with_options(store.open_backend()?, opts))
            }
            FrontendConfig::Remote { server } => remote(server)?,
            FrontendConfig::Dist {
                lanes,
                replicas,
                placement,
            } => {
                let mut opened = Vec::new();
                for l in lanes {
                    opened.push((l.name(), l.open(opts, remote)?));
                }
                Box::new(crate::dist::DistStore::new(
                    opened,
                    *replicas,
                    *placement,
                    opts.schema.clone(),
                    opts.context.clone(),
                )?)
            }
            FrontendConfig::Select { routes } => {
                let mut opened = Vec::new();
                for r in routes {
                    let pattern = haar_core::Request::parse(&r.pattern).map_err(|e| {
                        Error::Config(format!("select pattern {:?}: {e}", r.pattern))
                    })?;
                    opened.push((pattern, r.store.open(opts, remote)?));
                }
                Box::new(crate::dist::SelectStore::new(
                    opened,
                    opts.schema.clone(),
                    opts.context.clone(),
                )?)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dataspaces_section_is_set_aside_and_typos_are_still_refused() {
        let text = "backend: posix\nroots: [/d]\ndataspaces: {shared: {kind: shared, path: /s}}\n";
        assert_eq!(
            Config::from_yaml(text, "t").unwrap().roots,
            vec![PathBuf::from("/d")]
        );
        let text = "type: remote\nserver: 'a:1'\ndataspaces: {}\n";
        assert!(matches!(
            FrontendConfig::from_yaml(text, "t").unwrap(),
            FrontendConfig::Remote { .. }
        ));
        assert!(Config::from_yaml("dataspace: {}\n", "t").is_err());
    }

    #[test]
    fn untyped_file_is_a_local_store() {
        let c = FrontendConfig::from_yaml("backend: pmem\nroots: [/dev/shm/x]\n", "t").unwrap();
        assert!(matches!(c, FrontendConfig::Local { store } if store.backend == BackendKind::Pmem));
    }

    #[test]
    fn nested_front_ends_parse_and_unknown_fields_are_refused() {
        let text = "type: select\nroutes:\n  - match: stream=enfo\n    store: {type: dist, replicas: 2, lanes: [{type: remote, server: 'a:1'}, {type: remote, server: 'b:1'}]}\n  - match: ''\n    store: {type: local, backend: memory}\n";
        let c = FrontendConfig::from_yaml(text, "t").unwrap();
        let FrontendConfig::Select { routes } = &c else {
            panic!("{c:?}")
        };
        assert_eq!(routes.len(), 2);
        assert!(
            matches!(&routes[0].store, FrontendConfig::Dist { replicas: 2, lanes, .. } if lanes.len() == 2)
        );
        let e = FrontendConfig::from_yaml("type: dist\nlanes: []\nreplica: 2\n", "cfg.yaml")
            .unwrap_err();
        assert!(
            e.to_string().contains("cfg.yaml") && e.to_string().contains("replica"),
            "{e}"
        );
    }

    #[test]
    fn opens_select_over_local_memory_stores() {
        let text = "type: select\nroutes:\n  - match: stream=enfo\n    store: {type: local, backend: memory}\n  - match: ''\n    store: {type: local, backend: memory}\n";
        let c = FrontendConfig::from_yaml(text, "t").unwrap();
        let no_remote = |s: &str| -> Result<Box<dyn crate::FieldStore>> {
            Err(Error::Config(format!("no remote {s}")))
        };
        let f = c.open(&crate::StoreOptions::default(), &no_remote).unwrap();
        assert!(f.describe().starts_with("select("));
    }
}

/// FDB5's own configuration (`FDB5_CONFIG`, `FDB5_CONFIG_FILE`, `~fdb/etc/fdb/config.yaml`) as
/// a haar one, so that an FDB5 job needs no new setting: a local TOC configuration
/// (`type: local, engine: toc, schema: FILE, spaces: [{roots: [{path: DIR}]}]`) becomes the
/// posix backend over the same roots with the same schema (design §9). haar keeps its own
/// files under those roots and does not read FDB5's TOC databases there (`haar import-fdb5`
/// does). `None` when `value` is not an FDB5 configuration (it has neither `engine` nor
/// `spaces`); other FDB5 front-ends are refused with what to write instead.
pub fn from_fdb5(value: &serde_yaml_ng::Value, origin: &str) -> Option<Result<Config>> {
    let map = value.as_mapping()?;
    let get = |k: &str| map.get(serde_yaml_ng::Value::from(k));
    if get("engine").is_none() && get("spaces").is_none() {
        return None;
    }
    let bad = |m: String| {
        Some(Err(Error::Config(format!(
            "{origin}: FDB5 configuration: {m}"
        ))))
    };
    let kind = get("type").and_then(|v| v.as_str()).unwrap_or("local");
    if kind != "local" {
        return bad(format!(
            "type {kind:?} is not mapped onto haar; only a local TOC configuration is: write a haar configuration (docs/design.md §7) for remote, dist and select"
        ));
    }
    let engine = get("engine").and_then(|v| v.as_str()).unwrap_or("toc");
    if engine != "toc" {
        return bad(format!(
            "engine {engine:?} is not mapped onto haar; use `engine: toc` or a haar configuration"
        ));
    }
    let mut roots = Vec::new();
    for space in get("spaces")
        .and_then(|v| v.as_sequence())
        .into_iter()
        .flatten()
    {
        for root in space
            .get("roots")
            .and_then(|v| v.as_sequence())
            .into_iter()
            .flatten()
        {
            match root.get("path").and_then(|p| p.as_str()) {
                Some(p) => roots.push(PathBuf::from(p)),
                None => return bad("a root without `path`".into()),
            }
        }
    }
    if roots.is_empty() {
        return bad("no `spaces: [{roots: [{path: DIR}]}]`: name at least one root".into());
    }
    let schema = match get("schema") {
        Some(s) => match s.as_str() {
            Some(p) => Some(PathBuf::from(p)),
            None => return bad("`schema` is not a file name".into()),
        },
        // FDB5's default: ~fdb/etc/fdb/schema.
        None => std::env::var_os("FDB_HOME")
            .map(|h| PathBuf::from(h).join("etc/fdb/schema"))
            .filter(|p| p.is_file()),
    };
    Some(Ok(Config {
        backend: BackendKind::Posix,
        roots,
        schema,
        ..Config::default()
    }))
}

#[cfg(test)]
mod fdb5_tests {
    use super::*;

    #[test]
    fn an_fdb5_local_toc_configuration_maps_onto_posix_roots_and_its_schema() {
        let text = "---\ntype: local\nengine: toc\nschema: /etc/fdb/schema\nspaces:\n  - handler: Default\n    roots:\n      - path: /data/a\n      - path: /data/b\n";
        let cfg = Config::from_yaml(text, "fdb5.yaml").unwrap();
        assert_eq!(cfg.backend, BackendKind::Posix);
        assert_eq!(
            cfg.roots,
            vec![PathBuf::from("/data/a"), PathBuf::from("/data/b")]
        );
        assert_eq!(cfg.schema, Some(PathBuf::from("/etc/fdb/schema")));
        match FrontendConfig::from_yaml(text, "fdb5.yaml").unwrap() {
            FrontendConfig::Local { store } => assert_eq!(store.roots.len(), 2),
            f => panic!("{f:?}"),
        }
    }

    #[test]
    fn other_fdb5_configurations_are_refused_with_what_to_do() {
        let e = Config::from_yaml("type: remote\nengine: remote\nspaces: []\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f.yaml") && e.contains("only a local TOC"),
            "{e}"
        );
        let e = Config::from_yaml("engine: toc\nspaces: []\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("name at least one root"), "{e}");
        // A haar configuration is not taken for an FDB5 one.
        assert!(from_fdb5(&serde_yaml_ng::from_str("backend: pmem").unwrap(), "x").is_none());
    }
}
