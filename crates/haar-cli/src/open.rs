//! Turning global options and the configuration file into a `Store`.

use std::path::Path;
use std::sync::Arc;

use haar_core::request::{Request, parse_requests};
use haar_core::schema::Schema;
use haar_store::{Config, FrontendConfig, Store, StoreOptions};

use crate::Failure;
use crate::args::Cli;

/// The configuration file as a front-end, when it describes one (`type: remote | dist |
/// select`); `None` for no file or a local store.
pub fn frontend(cli: &Cli) -> Result<Option<FrontendConfig>, Failure> {
    let Some(path) = &cli.config else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::usage(format!("cannot read configuration {}: {e}", path.display()))
    })?;
    match FrontendConfig::from_yaml(&text, &path.display().to_string())? {
        FrontendConfig::Local { .. } => Ok(None),
        f => Ok(Some(f)),
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

/// The effective configuration: file (if any), then command-line overrides.
pub fn config(cli: &Cli) -> Result<Config, Failure> {
    let mut cfg = match &cli.config {
        // Servers described by the file, and a local root given on the command line (e.g.
        // `haar serve --root` sharing the cluster's configuration).
        Some(path) if frontend(cli)?.is_some() => {
            if cli.root.is_none() {
                return Err(Failure::usage(format!(
                    "{} describes servers (a front-end), and this command needs a local store: give --root DIR",
                    path.display()
                )));
            }
            Config::default()
        }
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::usage(format!("cannot read configuration {}: {e}", path.display()))
            })?;
            Config::from_yaml(&text, &path.display().to_string())?
        }
        None => Config::default(),
    };
    if let Some(root) = &cli.root {
        cfg.roots = vec![root.clone()];
    }
    if let Some(b) = &cli.backend {
        cfg.backend = b.parse().map_err(Failure::usage)?;
    }
    Ok(cfg)
}

/// Loads a schema file with errors naming it.
pub fn load_schema(path: &Path) -> Result<Schema, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("cannot read schema {}: {e}", path.display())))?;
    Schema::parse(&text).map_err(|e| Failure::usage(format!("schema {}: {e}", path.display())))
}

/// Opens the store the options describe.
pub fn store(cli: &Cli) -> Result<Store, Failure> {
    store_of(config(cli)?)
}

fn store_of(cfg: Config) -> Result<Store, Failure> {
    let mut opts = StoreOptions::default();
    if let Some(path) = &cfg.schema {
        opts.schema = Arc::new(load_schema(path)?);
    }
    let backend = cfg.open_backend()?;
    Ok(Store::with_options(backend, opts))
}

/// Parses a REQUEST argument: `k=v/v,k=v` or `@FILE` (one or more requests).
pub fn requests(arg: Option<&str>) -> Result<Vec<Request>, Failure> {
    let Some(arg) = arg else {
        return Ok(vec![Request::default()]);
    };
    if let Some(path) = arg.strip_prefix('@') {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::usage(format!("cannot read request file {path}: {e}")))?;
        let reqs = parse_requests(&text)
            .map_err(|e| Failure::usage(format!("request file {path}: {e}")))?;
        if reqs.is_empty() {
            return Err(Failure::usage(format!(
                "request file {path} holds no request"
            )));
        }
        return Ok(reqs);
    }
    Request::parse(arg)
        .map(|r| vec![r])
        .map_err(|e| Failure::usage(format!("request {arg:?}: {e}")))
}

/// Schema and normalisation context from the configuration (the default schema for a
/// front-end file).
pub fn options(cli: &Cli) -> Result<StoreOptions, Failure> {
    if frontend(cli)?.is_some() {
        return Ok(StoreOptions::default());
    }
    let cfg = config(cli)?;
    let mut opts = StoreOptions::default();
    if let Some(path) = &cfg.schema {
        opts.schema = Arc::new(load_schema(path)?);
    }
    Ok(opts)
}

/// A store in memory with the configured schema: splits and resolves keys for commands whose
/// fields go to servers.
pub fn normaliser(cli: &Cli) -> Result<Store, Failure> {
    Ok(Store::with_options(
        Arc::new(haar_store::MemoryBackend::new()),
        options(cli)?,
    ))
}

/// `--servers a,b,c` as a list.
pub fn parse_servers(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Token ($HAAR_TOKEN or --token-file) and TLS trust (--tls-ca) for connecting to servers.
pub fn client_config(cli: &Cli) -> Result<haar_net::ClientConfig, Failure> {
    Ok(haar_net::ClientConfig {
        token: haar_net::auth::load_token(cli.token_file.as_deref()).map_err(Failure::usage)?,
        tls: match &cli.tls_ca {
            Some(ca) => Some(haar_net::transport::tls_client(ca).map_err(Failure::usage)?),
            None => None,
        },
        ..haar_net::ClientConfig::default()
    })
}

/// The servers of `--servers`, if given: one server directly, several through `dist`
/// (rendezvous hashing on the database key, `--replicas` copies).
pub fn remote(cli: &Cli) -> Result<Option<Box<dyn haar_store::FieldStore>>, Failure> {
    let Some(list) = &cli.servers else {
        // A configuration file that describes a front-end (e.g. written by `haar cluster` or
        // scripts/slurm-serve.sh).
        let Some(f) = frontend(cli)? else {
            return Ok(None);
        };
        let cfg = client_config(cli)?;
        let connect = |s: &str| lane(s, &cfg);
        return Ok(Some(f.open(&StoreOptions::default(), &connect)?));
    };
    let servers = parse_servers(list);
    let cfg = client_config(cli)?;
    if servers.is_empty() {
        return Err(Failure::usage("--servers is empty: give HOST:PORT,..."));
    }
    if servers.len() == 1 {
        if cli.replicas > 1 {
            return Err(Failure::usage(format!(
                "--replicas {} needs at least that many --servers",
                cli.replicas
            )));
        }
        return Ok(Some(Box::new(haar_net::RemoteStore::connect(
            &servers[0],
            &cfg,
        )?)));
    }
    let opts = options(cli)?;
    let mut lanes: Vec<(String, Box<dyn haar_store::FieldStore>)> = Vec::new();
    for s in &servers {
        lanes.push((s.clone(), lane(s, &cfg)?));
    }
    Ok(Some(Box::new(haar_store::dist::DistStore::new(
        lanes,
        cli.replicas,
        haar_store::dist::Placement::default(),
        opts.schema.clone(),
        opts.context.clone(),
    )?)))
}

/// A connection to one server as a `dist` lane: a server that is down now is a lane that
/// fails over, not a refusal to start.
fn lane(
    addr: &str,
    cfg: &haar_net::ClientConfig,
) -> haar_store::Result<Box<dyn haar_store::FieldStore>> {
    Ok(match haar_net::RemoteStore::connect(addr, cfg) {
        Ok(r) => Box::new(r),
        Err(e @ haar_store::Error::Io { .. }) => {
            Box::new(DownLane(addr.to_string(), e.to_string()))
        }
        Err(e) => return Err(e),
    })
}

/// The servers `--servers` or the configuration's front-end names (for notifications), if any.
pub fn servers(cli: &Cli) -> Result<Option<Vec<String>>, Failure> {
    if let Some(s) = &cli.servers {
        return Ok(Some(parse_servers(s)));
    }
    Ok(frontend(cli)?
        .map(|f| config_servers(&f))
        .filter(|v| !v.is_empty()))
}

/// A lane whose server could not be reached when the command started: every operation fails
/// with the connect error, so `dist` skips it (archive) or falls back (reads).
struct DownLane(String, String);

impl DownLane {
    fn err(&self) -> haar_store::Error {
        haar_store::Error::Io {
            op: "server",
            path: self.0.clone().into(),
            source: std::io::Error::other(self.1.clone()),
        }
    }
}

impl haar_store::FieldStore for DownLane {
    fn describe(&self) -> String {
        format!("remote {} (down)", self.0)
    }
    fn archive(&mut self, _: &haar_core::Key, _: &[u8]) -> haar_store::Result<()> {
        Err(self.err())
    }
    fn flush(&mut self) -> haar_store::Result<()> {
        Ok(())
    }
    fn retrieve(
        &self,
        _: &Request,
        _: &mut haar_store::Sink<'_>,
    ) -> haar_store::Result<haar_store::RetrieveReport> {
        Err(self.err())
    }
    fn list(&self, _: &Request) -> haar_store::Result<Vec<haar_store::Field>> {
        Err(self.err())
    }
    fn wipe(&mut self, _: &Request, _: bool) -> haar_store::Result<haar_store::WipeReport> {
        Err(self.err())
    }
    fn purge(&mut self, _: &Request, _: bool) -> haar_store::Result<haar_store::PurgeReport> {
        Err(self.err())
    }
    fn stats(&self, _: &Request) -> haar_store::Result<Vec<haar_store::DbStats>> {
        Err(self.err())
    }
}

/// The front-end data commands use: the servers of `--servers`, else the local store.
pub fn field_store(cli: &Cli) -> Result<Box<dyn haar_store::FieldStore>, Failure> {
    match remote(cli)? {
        Some(r) => Ok(r),
        None => Ok(Box::new(store(cli)?)),
    }
}

/// As [`field_store`], for a process about to write about `bytes`: a local pmem pool
/// reserves and maps that much heap for it as it is opened (`pool_chunk: BYTES`,
/// `pool_prefault: open`), so `haar hammer`'s workers do it before their start barrier.
pub fn field_store_for_writes(
    cli: &Cli,
    bytes: u64,
) -> Result<Box<dyn haar_store::FieldStore>, Failure> {
    match remote(cli)? {
        Some(r) => Ok(r),
        None => {
            let mut cfg = config(cli)?;
            // Exactly its share: a larger chunk would leave a tail that only the last writer
            // to reserve can give back.
            cfg.pool_chunk = bytes;
            cfg.pool_prefault = haar_store::pmem::Prefault::Open;
            Ok(Box::new(store_of(cfg)?))
        }
    }
}
