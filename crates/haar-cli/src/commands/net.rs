//! The network subcommands: `serve`, `watch`, `wait`, `cluster`, and `info` against servers.
//! Protocol and semantics live in haar-net; this module only parses, prints and sets exit codes.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use haar::{ServerLimits, WaitOutcome, WatchAll};
use haar_mem::units::parse_size;
use serde_json::json;

use super::info::InfoArgs;
use crate::Failure;
use crate::args::{Cli, ClientArgs, StoreArgs, TokenArg};
use crate::open;
#[cfg(feature = "tools")]
use haar_bench::procs::Servers;

/// `haar serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (`HOST:PORT`; port 0 picks a free one). The first line on stdout is
    /// `listening on HOST:PORT`.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7070")]
    pub listen: String,
    /// File holding a token that grants reads only (the read-write token comes from
    /// $HAAR_TOKEN or --token-file).
    #[arg(long, value_name = "FILE")]
    pub read_token_file: Option<PathBuf>,
    /// TLS certificate chain (PEM): serve TLS 1.3 only.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Connections served at once (one thread each); more are refused at once.
    #[arg(long, value_name = "N", default_value_t = ServerLimits::MAX_CONNECTIONS,
          value_parser = at_least_one)]
    pub max_connections: usize,
    /// Connections that have not logged in yet, at once; when all are taken, a new one drops
    /// the oldest of the source address that holds the most.
    #[arg(long, value_name = "N", default_value_t = ServerLimits::MAX_UNAUTHENTICATED,
          value_parser = at_least_one)]
    pub max_unauthenticated: usize,
    /// Connections from one source address that have not logged in yet, at once; a new one
    /// from that address drops its oldest (so a peer that reconnects without end cannot keep
    /// others from logging in).
    #[arg(long, value_name = "N", default_value_t = ServerLimits::MAX_UNAUTHENTICATED_PER_SOURCE,
          value_parser = at_least_one)]
    pub max_unauthenticated_per_source: usize,
    /// Bytes of incoming frames the server holds at once, over every connection (default: a
    /// quarter of this machine's memory). The read-only token's connections get
    /// --max-buffered-read-only of it, the read-write token's the rest; a frame over its
    /// token's share waits up to --write-timeout, then is refused.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_buffered: Option<u64>,
    /// Of --max-buffered, what the read-only token's connections may hold together (default:
    /// a quarter of it).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_buffered_read_only: Option<u64>,
    /// Seconds a connection has for the whole handshake (TLS included) before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = ServerLimits::HANDSHAKE_DEADLINE.as_secs_f64(),
          value_parser = positive_secs)]
    pub handshake_timeout: f64,
    /// Seconds a logged-in connection may stay silent before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = ServerLimits::IDLE_TIMEOUT.as_secs_f64(),
          value_parser = positive_secs)]
    pub idle_timeout: f64,
    /// Seconds a reply may make no progress (a client that stopped reading) before the
    /// connection is closed.
    #[arg(long, value_name = "SECS", default_value_t = ServerLimits::WRITE_TIMEOUT.as_secs_f64(),
          value_parser = positive_secs)]
    pub write_timeout: f64,
    /// When plain-TCP connections carry a keyed tag on every frame after the login (design
    /// §8): `auto` (default) tags a connection whose client is not on a loopback address, or
    /// that asks; `always` tags loopback connections too. TLS connections never carry tags
    /// (TLS authenticates its records).
    #[arg(long, value_name = "auto|always", default_value = "auto",
          value_parser = parse_frame_tags)]
    pub frame_tags: haar::protocol::FrameTags,
    /// Serve metrics over HTTP at `http://ADDR/metrics` (`HOST:PORT`; port 0 picks a free
    /// one, named by a second stdout line `metrics on HOST:PORT`): requests, field bytes in and
    /// out and latency by operation, connections, refused logins by cause, and the store's
    /// usage (live, dead and free bytes, a pmem pool's heap, the disk), in the OpenMetrics
    /// text format that Prometheus scrapes (names: docs/operations.md). Off by default. The
    /// endpoint has no authentication: bind it to a loopback or management address.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Form of the log on stderr: `text` (default), one line per event with its fields
    /// (`peer=… reason=…`), or `json`, one JSON object per line (`timestamp`, `level`,
    /// `message`, the event's fields, and `span` with the connection's `peer` and `token`).
    /// What is logged is chosen by `-v` or `HAAR_LOG` either way.
    #[arg(long, value_name = "text|json", default_value = "text")]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub token: TokenArg,
}

/// `haar serve --log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// One line per event: time, level, message, `name=value` fields.
    Text,
    /// One JSON object per line.
    Json,
}

/// A count of at least 1 (0 would refuse every connection).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s:?}: give a whole number of at least 1")),
    }
}

/// A number of seconds: positive, finite, and at most a year (a socket timeout).
fn positive_secs(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v > 0.0 && v <= 365.0 * 86400.0) {
        return Err(format!(
            "{s}: give a number of seconds above 0 (at most a year)"
        ));
    }
    Ok(v)
}

/// `haar watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// Request (every field when omitted).
    pub request: Option<String>,
    /// One JSON object per line: key, length, seq, replay, server.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `haar wait`.
#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    /// Request naming every field to wait for (explicit values, no `all`).
    pub request: String,
    /// Give up after this many seconds (exit 2, naming what is missing).
    #[arg(long, value_name = "SECS", default_value_t = 3600.0)]
    pub timeout: f64,
    #[command(flatten)]
    pub client: ClientArgs,
}

// Development servers started with the workloads' process launcher (`haar_bench::procs`), so
// `haar cluster` comes with the `tools` feature.
/// `haar cluster`.
#[cfg(feature = "tools")]
#[derive(Debug, Args)]
#[command(mut_arg("root", |a| a.help(
    "Directory for the servers' stores (DIR/nodeI), their configurations and cluster.yaml"
)))]
#[command(mut_arg("token_file", |a| a.help(
    "File holding the servers' token (default: DIR/token, created when missing)"
)))]
pub(crate) struct ClusterArgs {
    /// How many local servers to start (server I under --root DIR/nodeI).
    #[arg(long, value_name = "N")]
    pub servers: Option<usize>,
    #[command(flatten)]
    pub local: crate::args::LocalArgs,
    #[command(flatten)]
    pub token: TokenArg,
}

fn servers(cli: &Cli) -> Result<Vec<String>, Failure> {
    open::servers(cli)?.ok_or_else(|| {
        Failure::usage(
            "notifications come from servers: give --servers HOST:PORT,... or a --config that names them (start them with `haar serve` or `haar cluster`)",
        )
    })
}

fn parse_frame_tags(s: &str) -> Result<haar::protocol::FrameTags, String> {
    s.parse()
}

/// `haar serve`: binds, prints `listening on ADDR`, serves until SIGINT/SIGTERM, then stops
/// cleanly and exits 0.
pub(crate) fn serve(cli: &Cli, a: &ServeArgs) -> Result<(), Failure> {
    let opts = open::open_options(cli);
    let max_buffered = a
        .max_buffered
        .unwrap_or_else(ServerLimits::default_max_buffered);
    let max_buffered_read_only = a
        .max_buffered_read_only
        .unwrap_or_else(|| ServerLimits::default_max_buffered_read_only(max_buffered));
    if max_buffered_read_only > max_buffered {
        return Err(Failure::usage(format!(
            "--max-buffered-read-only {max_buffered_read_only} is more than --max-buffered {max_buffered}: the read-only share is part of the whole"
        )));
    }
    let server = haar::serve::bind(
        &opts,
        &haar::serve::ServeOptions {
            listen: a.listen.clone(),
            read_token_file: a.read_token_file.clone(),
            tls: a.tls_cert.clone().zip(a.tls_key.clone()),
            limits: ServerLimits {
                max_connections: a.max_connections,
                max_unauthenticated: a.max_unauthenticated,
                max_unauthenticated_per_source: a.max_unauthenticated_per_source,
                handshake_deadline: Duration::from_secs_f64(a.handshake_timeout),
                idle_timeout: Duration::from_secs_f64(a.idle_timeout),
                write_timeout: Duration::from_secs_f64(a.write_timeout),
                max_buffered,
                max_buffered_read_only,
            },
            frame_tags: a.frame_tags,
        },
    )?;
    // The backend as `haar bench` and the scripts have always seen it (no "local " prefix).
    let described = server.describe().trim_start_matches("local ").to_string();
    let addr = server
        .local_addr()
        .map_err(|e| Failure::io(e.to_string()))?;
    // Bound before the first line is printed, so that a caller who reads `listening on` can
    // scrape at once.
    let metrics = (a.metrics.as_deref())
        .map(|m| {
            haar::metrics::listen(m, server.metrics())
                .map_err(|e| Failure::io(format!("--metrics {m}: cannot listen: {e}")))
        })
        .transpose()?;
    let mut out = std::io::stdout();
    writeln!(out, "listening on {addr}")
        .and_then(|_| match metrics {
            Some(at) => writeln!(out, "metrics on {at}"),
            None => Ok(()),
        })
        .and_then(|_| out.flush())
        .ok();
    match a.log_format {
        // Every stderr line of a JSON log is a JSON object, the start line too.
        LogFormat::Json => eprintln!(
            "{}",
            serde_json::json!({
                "level": "INFO",
                "message": "haar serve started",
                "store": described,
                "listen": addr.to_string(),
                "tls": a.tls_cert.is_some(),
                "metrics": metrics.map(|m| m.to_string()),
            })
        ),
        LogFormat::Text => eprintln!(
            "haar serve: {described} on {addr}{}",
            if a.tls_cert.is_some() { " (TLS)" } else { "" }
        ),
    }
    haar::serve::run_until_signalled(server)?;
    Ok(())
}

/// `haar watch`: one line per flushed field, forever (or until a server fails).
pub(crate) fn watch(cli: &Cli, a: &WatchArgs) -> Result<(), Failure> {
    let servers = servers(cli)?;
    let cfg = open::client_config(cli)?;
    let reqs = open::requests(a.request.as_deref())?;
    if reqs.len() != 1 {
        return Err(Failure::usage("watch takes one request"));
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for ev in WatchAll::open(&servers, &cfg, &reqs[0])? {
        let (ev, m) = match ev {
            Ok(x) => x,
            // A server went away: it is resubscribed when it returns, and its replay (minus
            // what was already printed) covers what it flushed meanwhile.
            Err(e @ haar::Error::Net { .. }) => {
                eprintln!("haar watch: {e}; watching the other servers and retrying it");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let line = if a.json {
            json!({"key": super::key_json(&ev.key), "length": ev.length, "seq": m.seq,
                   "replay": m.replay, "server": ev.origin})
            .to_string()
        } else {
            format!(
                "{} length={} seq={} server={}{}",
                ev.key,
                ev.length,
                m.seq,
                ev.origin,
                if m.replay { " replay" } else { "" }
            )
        };
        // Flushed per line: consumers act on each event as it arrives.
        writeln!(out, "{line}")
            .and_then(|_| out.flush())
            .map_err(super::out_err)?;
    }
    Ok(())
}

/// `haar wait`: exit 0 once every field of the request is flushed, 2 on timeout.
pub(crate) fn wait(cli: &Cli, a: &WaitArgs) -> Result<(), Failure> {
    let servers = servers(cli)?;
    let cfg = open::client_config(cli)?;
    let reqs = open::requests(Some(&a.request))?;
    if reqs.len() != 1 {
        return Err(Failure::usage("wait takes one request"));
    }
    let options = open::options(cli)?;
    let timeout = Duration::try_from_secs_f64(a.timeout)
        .map_err(|e| Failure::usage(format!("--timeout {}: {e}", a.timeout)))?;
    match haar::wait(&servers, &cfg, &reqs[0], &options, timeout)? {
        WaitOutcome::Complete { fields } => {
            eprintln!("haar: complete: {fields} field(s) flushed");
            Ok(())
        }
        WaitOutcome::TimedOut { missing } => {
            for m in missing.iter().take(20) {
                eprintln!("haar: missing: {m}");
            }
            if missing.len() > 20 {
                eprintln!("haar: … and {} more missing", missing.len() - 20);
            }
            Err(Failure::missing(format!(
                "timed out after {} s: {} field(s) not yet flushed",
                a.timeout,
                missing.len()
            )))
        }
    }
}

/// `haar info` with --servers: the front-end and per-database statistics from the servers.
pub(crate) fn info(cli: &Cli, a: &InfoArgs) -> Result<(), Failure> {
    let store = open::field_store(cli)?;
    let mut dbs = Vec::new();
    for req in open::requests(a.request.as_deref())? {
        dbs.extend(store.stats(&req)?);
    }
    // Damage on a server is never a clean exit either (design §8, "Damage in replies").
    let damage = || super::damage_is_failure(dbs.iter().flat_map(|d| &d.problems), "this report");
    if a.json {
        let v = json!({"version": env!("CARGO_PKG_VERSION"), "frontend": store.describe(), "databases": dbs});
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return damage();
    }
    outln!("haar {}", env!("CARGO_PKG_VERSION"))?;
    outln!("front-end: {}", store.describe())?;
    outln!("databases: {}", dbs.len())?;
    super::info::print_databases(&dbs)?;
    damage()
}

/// `haar cluster --servers N --root DIR`: N local servers for development, stopped when stdin
/// closes or on Ctrl-C.
#[cfg(feature = "tools")]
pub(crate) fn cluster(cli: &Cli) -> Result<(), Failure> {
    use std::io::Read;
    let given = open::given(cli);
    let n: usize = given
        .servers
        .servers
        .as_deref()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| Failure::usage("cluster needs --servers N (how many servers to start)"))?;
    let root =
        given.local.root.clone().ok_or_else(|| {
            Failure::usage("cluster needs --root DIR (each server gets DIR/nodeI)")
        })?;
    let servers = Servers::start(
        n,
        &root,
        given.local.backend.as_deref().unwrap_or("posix"),
        None,
        given.token.token_file.as_deref(),
    )?;
    let list = servers.addrs.join(",");
    let config = servers.dist_config(1, "database");
    let config_path = root.join("cluster.yaml");
    std::fs::write(&config_path, &config)
        .map_err(|e| Failure::io(format!("cannot write {}: {e}", config_path.display())))?;
    let token_file = servers.token_file.display();
    outln!("servers: {list}")?;
    outln!("token file: {token_file}")?;
    outln!("config: {}", config_path.display())?;
    outln!("try: haar --servers {list} --token-file {token_file} list")?;
    out!("{config}")?;
    outln!("(close stdin or press Ctrl-C to stop the cluster)")?;
    std::io::stdout().flush().ok();
    // Runs until stdin closes; Ctrl-C reaches the servers too (same process group), and a
    // killed `haar cluster` takes them down through PR_SET_PDEATHSIG.
    let mut sink = [0u8; 4096];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(k) if k > 0) {}
    drop(servers);
    Ok(())
}
