//! The CLI's store and server options as `haar::OpenOptions`: every store is opened by the
//! library (`haar::open`); this module only maps arguments onto it, wherever on the command line
//! they were given (before the subcommand's name or after it).

use haar::Config;
use haar::open::OpenOptions;
use haar::request::Request;
use haar::{ConfigSource, FieldStore, Store, StoreOptions};

use crate::Failure;
use crate::args::{Cli, OpenArgs};

pub(crate) use haar::open::{load_schema, parse_servers};

/// The store and server options in effect: those given after the subcommand's name over those
/// given before it (and `$HAAR_CONFIG`, which clap reads into the latter). The rest of the CLI
/// does not care where an option was given; the grammar (`args::parse`) has already refused
/// any the subcommand does not take.
pub(crate) fn given(cli: &Cli) -> OpenArgs {
    let mut o = cli.before.clone();
    cli.command.options_onto(&mut o);
    o
}

/// The library's options for the store and server options given.
pub(crate) fn open_options(cli: &Cli) -> OpenOptions {
    let o = given(cli);
    OpenOptions {
        config: match o.config.config {
            Some(p) => ConfigSource::File(p),
            // FDB5's variables where neither --config nor $HAAR_CONFIG is given.
            None => ConfigSource::from_env(),
        },
        root: o.local.root,
        backend: o.local.backend,
        servers: o.servers.servers.as_deref().map(parse_servers),
        replicas: o.servers.replicas.unwrap_or(1),
        token_file: o.token.token_file,
        tls_ca: o.servers.tls_ca,
        read_only: false,
    }
}

/// The effective configuration: file (if any), then command-line overrides.
pub(crate) fn config(cli: &Cli) -> Result<Config, Failure> {
    Ok(open_options(cli).config()?)
}

/// Opens the local store the options describe.
pub(crate) fn store(cli: &Cli) -> Result<Store, Failure> {
    Ok(open_options(cli).local()?)
}

/// Opens the local store the options describe for a command that only reads: a store that
/// does not exist is an error (exit 2), never created.
pub(crate) fn store_for_reading(cli: &Cli) -> Result<Store, Failure> {
    let mut o = open_options(cli);
    o.read_only = true;
    Ok(o.local()?)
}

/// As [`field_store`], for a command that only reads (see [`store_for_reading`]).
pub(crate) fn field_store_for_reading(cli: &Cli) -> Result<Box<dyn FieldStore>, Failure> {
    let mut o = open_options(cli);
    o.read_only = true;
    Ok(o.field_store()?)
}

/// Parses a REQUEST argument: `k=v/v,k=v` or `@FILE` (one or more requests).
pub(crate) fn requests(arg: Option<&str>) -> Result<Vec<Request>, Failure> {
    Ok(haar::open::requests(arg)?)
}

/// Schema and normalisation context from the configuration.
pub(crate) fn options(cli: &Cli) -> Result<StoreOptions, Failure> {
    Ok(open_options(cli).store_options()?)
}

/// Token and TLS trust for connecting to servers.
pub(crate) fn client_config(cli: &Cli) -> Result<haar::ClientConfig, Failure> {
    Ok(open_options(cli).client_config()?)
}

/// The servers `--servers` or the configuration's front-end names (for notifications), if any.
pub(crate) fn servers(cli: &Cli) -> Result<Option<Vec<String>>, Failure> {
    Ok(open_options(cli).server_names()?)
}

/// The front-end data commands use: the servers of `--servers`, else the local store.
pub(crate) fn field_store(cli: &Cli) -> Result<Box<dyn FieldStore>, Failure> {
    Ok(open_options(cli).field_store()?)
}
