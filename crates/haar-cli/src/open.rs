//! The CLI's global options as `haar::OpenOptions`: every store is opened by the library
//! (`haar::open`); this module only maps arguments onto it.

use haar::open::OpenOptions;
use haar::{ConfigSource, FieldStore, Store, StoreOptions};
use haar_core::request::Request;
use haar_store::Config;

use crate::Failure;
use crate::args::Cli;

pub use haar::open::{load_schema, parse_servers};

/// The library's options for the global arguments.
pub fn open_options(cli: &Cli) -> OpenOptions {
    OpenOptions {
        config: match &cli.config {
            Some(p) => ConfigSource::File(p.clone()),
            None => ConfigSource::Defaults,
        },
        root: cli.root.clone(),
        backend: cli.backend.clone(),
        servers: cli.servers.as_deref().map(parse_servers),
        replicas: cli.replicas,
        token_file: cli.token_file.clone(),
        tls_ca: cli.tls_ca.clone(),
    }
}

/// The effective configuration: file (if any), then command-line overrides.
pub fn config(cli: &Cli) -> Result<Config, Failure> {
    Ok(open_options(cli).config()?)
}

/// Opens the local store the options describe.
pub fn store(cli: &Cli) -> Result<Store, Failure> {
    Ok(open_options(cli).local()?)
}

/// Parses a REQUEST argument: `k=v/v,k=v` or `@FILE` (one or more requests).
pub fn requests(arg: Option<&str>) -> Result<Vec<Request>, Failure> {
    Ok(haar::open::requests(arg)?)
}

/// Schema and normalisation context from the configuration.
pub fn options(cli: &Cli) -> Result<StoreOptions, Failure> {
    Ok(open_options(cli).store_options()?)
}

/// Token and TLS trust for connecting to servers.
pub fn client_config(cli: &Cli) -> Result<haar_net::ClientConfig, Failure> {
    Ok(open_options(cli).client_config()?)
}

/// The servers `--servers` or the configuration's front-end names (for notifications), if any.
pub fn servers(cli: &Cli) -> Result<Option<Vec<String>>, Failure> {
    Ok(open_options(cli).server_names()?)
}

/// The front-end data commands use: the servers of `--servers`, else the local store.
pub fn field_store(cli: &Cli) -> Result<Box<dyn FieldStore>, Failure> {
    Ok(open_options(cli).field_store()?)
}
