//! Turning global options and the configuration file into a `Store`.

use std::path::Path;
use std::sync::Arc;

use haar_core::request::{Request, parse_requests};
use haar_core::schema::Schema;
use haar_store::{Config, Store, StoreOptions};

use crate::Failure;
use crate::args::Cli;

/// The effective configuration: file (if any), then command-line overrides.
pub fn config(cli: &Cli) -> Result<Config, Failure> {
    let mut cfg = match &cli.config {
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
    let cfg = config(cli)?;
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
