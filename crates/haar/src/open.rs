//! Opening stores: one configuration — a YAML file, a YAML string or the built-in defaults,
//! plus the overrides a face offers (root, backend, servers) — becomes a [`FieldStore`]: the
//! local [`Store`], one server, `dist` over several (rendezvous hashing, replicas) or the
//! `select`/`remote`/`dist` front-end a configuration file describes.
//!
//! Owns the rules for which source wins (overrides over the file over the defaults) and the
//! messages that name the file or server at fault. It must not know how any store works
//! inside: it only composes what `haar_store` and `haar_net` build.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use haar_core::Key;
use haar_core::request::{Request, VERBS, parse_requests};
use haar_core::schema::{Schema, SplitKey};
use haar_store::{
    Checkpoint, Config, DbStats, Error, Field, FieldBytes, FieldStore, FrontendConfig, PurgeReport,
    Result, RetrieveReport, Sink, Store, StoreOptions, WipeReport,
};

/// Where the configuration comes from.
#[derive(Debug, Clone, Default)]
pub enum ConfigSource {
    /// The built-in defaults: the posix backend under `$XDG_DATA_HOME/haar`.
    #[default]
    Defaults,
    /// A YAML file (what `--config FILE` and `$HAAR_CONFIG` name).
    File(PathBuf),
    /// YAML text; `origin` names it in messages.
    Yaml {
        /// The YAML document.
        text: String,
        /// What to call it in messages (e.g. "HAAR_CONFIG_YAML").
        origin: String,
    },
}

impl ConfigSource {
    /// Where the environment points: `$HAAR_CONFIG` (haar's own file) first; where it is
    /// unset, FDB5's own variables, so that an FDB5 job needs no new setting: `$FDB5_CONFIG`
    /// (YAML text), `$FDB5_CONFIG_FILE`, then `$FDB_HOME/etc/fdb/config.yaml` if it exists
    /// (a local TOC configuration maps onto a posix root and its schema); else the defaults.
    pub fn from_env() -> ConfigSource {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(p) = var("HAAR_CONFIG") {
            return ConfigSource::File(p.into());
        }
        if let Some(text) = var("FDB5_CONFIG") {
            return ConfigSource::Yaml {
                text: text.to_string_lossy().into_owned(),
                origin: "$FDB5_CONFIG".into(),
            };
        }
        if let Some(p) = var("FDB5_CONFIG_FILE") {
            return ConfigSource::File(p.into());
        }
        if let Some(home) = var("FDB_HOME") {
            let p = PathBuf::from(home).join("etc/fdb/config.yaml");
            if p.is_file() {
                return ConfigSource::File(p);
            }
        }
        ConfigSource::Defaults
    }

    /// The YAML text and its name for messages; `None` for the defaults. Other parts of haar
    /// read their own sections of the one file through this (the data mover's `dataspaces`).
    pub fn text(&self) -> Result<Option<(String, String)>> {
        match self {
            ConfigSource::Defaults => Ok(None),
            ConfigSource::File(path) => std::fs::read_to_string(path)
                .map(|t| Some((t, path.display().to_string())))
                .map_err(|e| {
                    Error::Config(format!("cannot read configuration {}: {e}", path.display()))
                }),
            ConfigSource::Yaml { text, origin } => Ok(Some((text.clone(), origin.clone()))),
        }
    }
}

/// Everything that selects a store: the configuration and the overrides every face offers.
///
/// With nothing set it opens the default local store. The fields mirror the CLI's store and
/// server options (`--config`, `--root`, `--backend`, `--servers`, `--replicas`,
/// `--token-file`, `--tls-ca`).
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// The configuration.
    pub config: ConfigSource,
    /// Store root directory; overrides the configuration's roots.
    pub root: Option<PathBuf>,
    /// Backend (`posix`, `pmem`, `memory`); overrides the configuration's.
    pub backend: Option<String>,
    /// Servers to use instead of a local store (`HOST:PORT`); several are combined by
    /// rendezvous hashing on the database key.
    pub servers: Option<Vec<String>>,
    /// With several servers: copies of every field.
    pub replicas: usize,
    /// File holding the shared-secret token (default: `$HAAR_TOKEN`).
    pub token_file: Option<PathBuf>,
    /// Connect to servers over TLS, trusting the CA certificate(s) in this PEM file.
    pub tls_ca: Option<PathBuf>,
    /// Open for reading only: a local store that does not exist is an error
    /// ([`haar_store::Error::NoStore`]) instead of being created.
    pub read_only: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            config: ConfigSource::Defaults,
            root: None,
            backend: None,
            servers: None,
            replicas: 1,
            token_file: None,
            tls_ca: None,
            read_only: false,
        }
    }
}

/// `a,b,c` as a list of servers (blanks dropped).
pub fn parse_servers(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Loads a schema file with errors naming it.
pub fn load_schema(path: &Path) -> Result<Schema> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("cannot read schema {}: {e}", path.display())))?;
    Schema::parse(&text).map_err(|e| Error::Config(format!("schema {}: {e}", path.display())))
}

/// Parses a request argument: `k=v/v,k=v` or `@FILE` (one or more requests); `None` is the
/// request that selects everything. A leading word that is not a MARS verb is refused, so
/// that a typo does not select everything.
pub fn requests(arg: Option<&str>) -> Result<Vec<Request>> {
    let bad = |m: String| Error::Config(m);
    let Some(arg) = arg else {
        return Ok(vec![Request::default()]);
    };
    let reqs = if let Some(path) = arg.strip_prefix('@') {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("cannot read request file {path}: {e}")))?;
        let reqs = parse_requests(&text).map_err(|e| bad(format!("request file {path}: {e}")))?;
        if reqs.is_empty() {
            return Err(bad(format!("request file {path} holds no request")));
        }
        reqs
    } else {
        vec![Request::parse(arg).map_err(|e| bad(format!("request {arg:?}: {e}")))?]
    };
    for r in &reqs {
        if let Some(verb) = r.verb.as_deref().filter(|v| !VERBS.contains(v)) {
            return Err(bad(format!(
                "request {arg:?}: {verb:?} is neither a MARS verb ({}) nor keyword=value; to select everything give no request",
                VERBS.join(", ")
            )));
        }
    }
    Ok(reqs)
}

impl OpenOptions {
    /// Options with the configuration from `$HAAR_CONFIG` (else the defaults) and no overrides.
    pub fn from_env() -> OpenOptions {
        OpenOptions {
            config: ConfigSource::from_env(),
            ..OpenOptions::default()
        }
    }

    /// The configuration as a front-end, when it describes one (`type: remote | dist |
    /// select`); `None` for the defaults or a local store.
    pub fn frontend(&self) -> Result<Option<FrontendConfig>> {
        let Some((text, origin)) = self.config.text()? else {
            return Ok(None);
        };
        match FrontendConfig::from_yaml(&text, &origin)? {
            FrontendConfig::Local { .. } => Ok(None),
            f => Ok(Some(f)),
        }
    }

    /// The effective local configuration: the file (if any), then the overrides.
    pub fn config(&self) -> Result<Config> {
        // The file is read and parsed once.
        let mut cfg = match self.config.text()? {
            Some((text, origin)) => match FrontendConfig::from_yaml(&text, &origin)? {
                FrontendConfig::Local { .. } => Config::from_yaml(&text, &origin)?,
                // Servers described by the file, and a local root given as an override (e.g.
                // `haar serve --root` sharing the cluster's configuration).
                _ if self.root.is_none() => {
                    return Err(Error::Config(format!(
                        "{origin} describes servers (a front-end), and this command needs a local store: give --root DIR"
                    )));
                }
                _ => Config::default(),
            },
            None => Config::default(),
        };
        if let Some(root) = &self.root {
            cfg.roots = vec![root.clone()];
        }
        if let Some(b) = &self.backend {
            cfg.backend = b.parse().map_err(Error::Config)?;
        }
        Ok(cfg)
    }

    /// Schema and normalisation context from the configuration (the built-in schema for a
    /// front-end configuration).
    pub fn store_options(&self) -> Result<StoreOptions> {
        if self.frontend()?.is_some() {
            return Ok(StoreOptions::default());
        }
        store_options_of(&self.config()?)
    }

    /// Opens the local store the configuration describes (with [`OpenOptions::read_only`],
    /// only if it exists).
    pub fn local(&self) -> Result<Store> {
        let cfg = self.config()?;
        if self.read_only {
            let opts = store_options_of(&cfg)?;
            return Ok(Store::with_options(cfg.open_backend_for_reading()?, opts));
        }
        store_of(cfg)
    }

    /// The configured local backend and store options, opened once, for a face that builds
    /// more than one [`Store`] over the same backend (the FUSE mount: the configured schema
    /// for its `fields/` view, its own schema for the files it stores). With
    /// [`OpenOptions::read_only`], only if the store exists.
    pub fn local_backend(&self) -> Result<(Arc<dyn haar_store::Backend>, StoreOptions)> {
        let cfg = self.config()?;
        let opts = store_options_of(&cfg)?;
        let backend = if self.read_only {
            cfg.open_backend_for_reading()?
        } else {
            cfg.open_backend()?
        };
        Ok((backend, opts))
    }

    /// Token (`$HAAR_TOKEN` or the token file) and TLS trust for connecting to servers.
    pub fn client_config(&self) -> Result<haar_net::ClientConfig> {
        Ok(haar_net::ClientConfig {
            token: haar_net::auth::load_token(self.token_file.as_deref()).map_err(Error::Config)?,
            tls: match &self.tls_ca {
                Some(ca) => Some(haar_net::transport::tls_client(ca).map_err(Error::Config)?),
                None => None,
            },
            ..haar_net::ClientConfig::default()
        })
    }

    /// The servers given, or those the configuration's front-end names (for notifications).
    pub fn server_names(&self) -> Result<Option<Vec<String>>> {
        if let Some(s) = &self.servers {
            return Ok(Some(s.clone()));
        }
        Ok(self
            .frontend()?
            .map(|f| config_servers(&f))
            .filter(|v| !v.is_empty()))
    }

    /// The servers, if any were given or the configuration describes a front-end: one server
    /// directly, several through `dist`; `None` for a local store.
    pub fn remote(&self) -> Result<Option<Box<dyn FieldStore>>> {
        self.remote_with(None, None)
    }

    /// As [`OpenOptions::remote`], splitting keys with `options` instead of the configured
    /// schema, and with every `dist` placing by `placement` instead of what the configuration
    /// says (`haar mount`'s file systems: their own schema, placed by full key; design §15.6).
    pub fn remote_with(
        &self,
        options: Option<StoreOptions>,
        placement: Option<haar_store::dist::Placement>,
    ) -> Result<Option<Box<dyn FieldStore>>> {
        let Some(servers) = &self.servers else {
            // A configuration that describes a front-end (e.g. written by `haar cluster` or
            // scripts/slurm-serve.sh).
            let Some(f) = self.frontend()? else {
                return Ok(None);
            };
            let cfg = self.client_config()?;
            let connect = |s: &str| lane(s, &cfg);
            let f = match placement {
                Some(p) => with_placement(f, p),
                None => f,
            };
            return Ok(Some(f.open(&options.unwrap_or_default(), &connect)?));
        };
        let cfg = self.client_config()?;
        if servers.is_empty() {
            return Err(Error::Config(
                "--servers is empty: give HOST:PORT,...".into(),
            ));
        }
        if servers.len() == 1 {
            if self.replicas > 1 {
                return Err(Error::Config(format!(
                    "--replicas {} needs at least that many --servers",
                    self.replicas
                )));
            }
            // Keys are split (checked, filtered) with the configured schema, as through dist.
            let remote = haar_net::RemoteStore::connect(&servers[0], &cfg)?;
            let opts = match options {
                Some(o) => o,
                None => self.store_options()?,
            };
            return Ok(Some(Box::new(remote.with_options(opts))));
        }
        let opts = match options {
            Some(o) => o,
            None => self.store_options()?,
        };
        let mut lanes: Vec<(String, Box<dyn FieldStore>)> = Vec::new();
        for s in servers {
            lanes.push((s.clone(), lane(s, &cfg)?));
        }
        Ok(Some(Box::new(haar_store::dist::DistStore::new(
            lanes,
            self.replicas,
            placement.unwrap_or_default(),
            opts.schema.clone(),
            opts.context.clone(),
        )?)))
    }

    /// The store data commands use: the servers, else the local store.
    pub fn field_store(&self) -> Result<Box<dyn FieldStore>> {
        match self.remote()? {
            Some(r) => Ok(r),
            None => Ok(Box::new(self.local()?)),
        }
    }

    /// As [`OpenOptions::field_store`], for a process that copies fields into the store in
    /// bulk (`haar stage`): a local pmem pool maps none of its pages ahead, not even when it
    /// creates the pool, and takes fields of 64 KiB or more through the file
    /// (`pool_prefault: never`, design §5.1).
    pub fn field_store_for_copy(&self) -> Result<Box<dyn FieldStore>> {
        match self.remote()? {
            Some(r) => Ok(r),
            None => {
                let mut cfg = self.config()?;
                cfg.pool_prefault = haar_store::pmem::Prefault::Never;
                Ok(Box::new(store_of(cfg)?))
            }
        }
    }

    /// As [`OpenOptions::field_store`], for a process about to write about `bytes`: a local
    /// pmem pool reserves and maps that much heap for it as it is opened (`pool_chunk:
    /// BYTES`, `pool_prefault: open`), so a benchmark's writers do it before their start
    /// barrier.
    pub fn field_store_for_writes(&self, bytes: u64) -> Result<Box<dyn FieldStore>> {
        match self.remote()? {
            Some(r) => Ok(r),
            None => {
                let mut cfg = self.config()?;
                // Exactly its share: a larger chunk would leave a tail that only the last
                // writer to reserve can give back.
                cfg.pool_chunk = bytes;
                cfg.pool_prefault = haar_store::pmem::Prefault::Open;
                Ok(Box::new(store_of(cfg)?))
            }
        }
    }
}

/// `f` with every `dist` in it placing by `placement`.
fn with_placement(f: FrontendConfig, placement: haar_store::dist::Placement) -> FrontendConfig {
    match f {
        FrontendConfig::Dist {
            lanes, replicas, ..
        } => FrontendConfig::Dist {
            lanes: (lanes.into_iter())
                .map(|l| with_placement(l, placement))
                .collect(),
            replicas,
            placement,
        },
        FrontendConfig::Select { mut routes } => {
            for r in &mut routes {
                r.store = with_placement(r.store.clone(), placement);
            }
            FrontendConfig::Select { routes }
        }
        other => other,
    }
}

/// The `host:port` of every `remote` in a front-end configuration.
pub fn config_servers(f: &FrontendConfig) -> Vec<String> {
    match f {
        FrontendConfig::Local { .. } => Vec::new(),
        FrontendConfig::Remote { server } => vec![server.clone()],
        FrontendConfig::Dist { lanes, .. } => lanes.iter().flat_map(config_servers).collect(),
        FrontendConfig::Select { routes } => routes
            .iter()
            .flat_map(|r| config_servers(&r.store))
            .collect(),
    }
}

fn store_options_of(cfg: &Config) -> Result<StoreOptions> {
    let mut opts = StoreOptions::default();
    if let Some(path) = &cfg.schema {
        opts.schema = Arc::new(load_schema(path)?);
    }
    Ok(opts)
}

fn store_of(cfg: Config) -> Result<Store> {
    let opts = store_options_of(&cfg)?;
    let backend = cfg.open_backend()?;
    Ok(Store::with_options(backend, opts))
}

/// A connection to one server as a `dist` lane: a server that is down now is a lane that
/// fails over, not a refusal to start.
fn lane(addr: &str, cfg: &haar_net::ClientConfig) -> Result<Box<dyn FieldStore>> {
    Ok(match haar_net::RemoteStore::connect(addr, cfg) {
        Ok(r) => Box::new(r),
        Err(e @ Error::Net { .. }) => Box::new(DownLane {
            addr: addr.to_string(),
            error: e.to_string(),
            opts: StoreOptions::default(),
        }),
        Err(e) => return Err(e),
    })
}

/// A lane whose server could not be reached when the store was opened: every operation fails
/// with the connect error, so `dist` skips it (archive) or falls back (reads).
struct DownLane {
    addr: String,
    error: String,
    opts: StoreOptions,
}

impl DownLane {
    fn err(&self) -> Error {
        Error::net(
            "server",
            &self.addr,
            std::io::Error::other(self.error.clone()),
        )
    }
}

// Every method is stated: a down lane has nothing to forward to, so each one either fails
// with the connect error (what dist fails over on) or gives the answer of a store that holds
// nothing, and says which.
#[deny(clippy::missing_trait_methods)]
impl FieldStore for DownLane {
    fn describe(&self) -> String {
        format!("remote {} (down)", self.addr)
    }
    /// Splits as any store does (no server needed): the archive then fails.
    fn options(&self) -> &StoreOptions {
        &self.opts
    }
    /// Fails with the connect error, as `archive_split` does (dist skips the lane).
    fn archive(&mut self, _: &Key, _: &[u8]) -> Result<()> {
        Err(self.err())
    }
    fn archive_split(&mut self, _: &SplitKey, _: &[u8], _: Option<u32>) -> Result<()> {
        Err(self.err())
    }
    /// Nothing was archived through it: nothing to flush.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    /// None: a server's fields cannot be taken back (as a live remote lane).
    fn checkpoint(&self) -> Option<Checkpoint> {
        None
    }
    /// Nothing to forget: it never has a checkpoint.
    fn discard_since(&mut self, _: &Checkpoint) -> usize {
        0
    }
    /// A hint: no room to make here; the archive itself fails.
    fn provision(&self, _: u64) -> Result<()> {
        Ok(())
    }
    fn retrieve(&self, _: &Request, _: &mut Sink<'_>) -> Result<RetrieveReport> {
        Err(self.err())
    }
    /// None: a server does not lend; `retrieve` fails with the connect error.
    fn retrieve_lent(&self, _: &Key) -> Option<Result<Option<(Key, FieldBytes)>>> {
        None
    }
    /// None: no field bytes here.
    fn as_local(&self) -> Option<&Store> {
        None
    }
    /// None: nothing to extract from; `retrieve` fails with the connect error.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
    /// Fails with the connect error, as `retrieve` does (dist falls back to the next lane).
    fn retrieve_keys(&self, keys: &[Key], sink: &mut Sink<'_>) -> Result<RetrieveReport> {
        haar_store::frontend::retrieve_keys_one_by_one(self, keys, sink)
    }
    fn list(&self, _: &Request) -> Result<Vec<Field>> {
        Err(self.err())
    }
    /// Fails with the connect error, as `list` does (dist covers the lane with replicas).
    fn list_with_masked(&self, _: &Request) -> Option<Result<Vec<Field>>> {
        Some(Err(self.err()))
    }
    /// Fails with the connect error (dist asks the next lane).
    fn read_located(&self, _: &Field, _: Option<u32>) -> Option<Result<Vec<u8>>> {
        Some(Err(self.err()))
    }
    /// Fails with the connect error, as `list` does.
    fn axes(&self, _: &Request) -> Result<BTreeMap<String, BTreeSet<String>>> {
        Err(self.err())
    }
    fn wipe(&mut self, _: &Request, _: bool) -> Result<WipeReport> {
        Err(self.err())
    }
    fn purge(&mut self, _: &Request, _: bool) -> Result<PurgeReport> {
        Err(self.err())
    }
    /// None seen (a server checks its own when it wipes); the wipe itself fails with the
    /// connect error.
    fn unowned_files(&self, _: &Request) -> Result<Vec<std::path::PathBuf>> {
        Ok(Vec::new())
    }
    /// None: no file of a server is visible here.
    fn data_path(&self, _: &Field) -> Result<Option<std::path::PathBuf>> {
        Ok(None)
    }
    /// As any store that cannot see a server's files: a dry run is the plain wipe's (the
    /// connect error), `doit` is refused.
    fn wipe_unsafe_all(&mut self, req: &Request, doit: bool) -> Result<WipeReport> {
        haar_store::frontend::refuse_unsafe_wipe(self, req, doit)
    }
    fn stats(&self, _: &Request) -> Result<Vec<DbStats>> {
        Err(self.err())
    }
    /// Fails with the connect error, as `stats` does.
    fn problems(&self, _: &Request) -> Result<Vec<String>> {
        Err(self.err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_that_is_not_a_verb_is_refused() {
        let e = requests(Some("foo")).unwrap_err().to_string();
        assert!(e.contains("\"foo\" is neither a MARS verb"), "{e}");
        assert!(requests(Some("retrieve,class=od")).is_ok());
        assert!(requests(Some("class=od")).is_ok());
        assert_eq!(requests(None).unwrap(), vec![Request::default()]);
    }

    #[test]
    fn yaml_text_and_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let o = OpenOptions {
            config: ConfigSource::Yaml {
                text: "backend: pmem\nroots: [/nonexistent]\n".into(),
                origin: "test".into(),
            },
            root: Some(dir.path().into()),
            backend: Some("posix".into()),
            ..OpenOptions::default()
        };
        let cfg = o.config().unwrap();
        assert_eq!(cfg.roots, vec![dir.path().to_path_buf()]);
        assert_eq!(cfg.backend, haar_store::BackendKind::Posix);
        let missing = OpenOptions {
            config: ConfigSource::File("/nonexistent/haar.yaml".into()),
            ..OpenOptions::default()
        };
        let e = missing.config().unwrap_err().to_string();
        assert!(
            e.contains("cannot read configuration /nonexistent/haar.yaml"),
            "{e}"
        );
    }
}
