//! Serving the local store to the network: what `haar serve` sets up, and any service that
//! embeds a server would (tokens, TLS, the same-host offer of design §8). Owns the checks that
//! a server never starts unauthenticated; the protocol itself is `haar_net`'s.

use std::path::PathBuf;
use std::sync::Arc;

use haar_net::auth::{self, Tokens};
use haar_net::{Server, ServerConfig, ServerLimits, Target};
use haar_store::{Error, Result};

use crate::open::OpenOptions;

/// How to serve, beyond what [`OpenOptions`] says about the store and the read-write token.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address to listen on (`HOST:PORT`; port 0 picks a free one).
    pub listen: String,
    /// File holding a token that grants reads only.
    pub read_token_file: Option<PathBuf>,
    /// TLS certificate chain and private key (PEM): serve TLS 1.3 only.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Bounds on connections, handshakes and idle peers (design §8).
    pub limits: ServerLimits,
    /// When plain-TCP connections tag their frames (design §8).
    pub frame_tags: haar_net::protocol::FrameTags,
}

/// Binds a server over the local store `opts` configures, with the read-write token from
/// `$HAAR_TOKEN` or the token file and the read-only token of `serve`; refuses to start
/// without any token. Offers same-host reads of its store to clients on this machine.
pub fn bind(opts: &OpenOptions, serve: &ServeOptions) -> Result<Server> {
    let cfg = opts.config()?;
    let mut options = opts.store_options()?;
    // Clients' `haar mount` keeps its file systems here under their own rule (design §15.6).
    options.schema = Arc::new(options.schema.with_files_rule());
    let tokens = Tokens {
        read_write: auth::load_token(opts.token_file.as_deref()).map_err(Error::Config)?,
        read_only: match &serve.read_token_file {
            Some(f) => auth::load_token(Some(f)).map_err(Error::Config)?,
            None => None,
        },
    };
    if tokens.read_write.is_none() && tokens.read_only.is_none() {
        return Err(Error::Config(
            "every connection is authenticated: set HAAR_TOKEN or give --token-file (and/or --read-token-file)".into(),
        ));
    }
    let tls = match &serve.tls {
        Some((cert, key)) => {
            Some(haar_net::transport::tls_server(cert, key).map_err(Error::Config)?)
        }
        None => None,
    };
    let schema_text = match &cfg.schema {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| Error::Config(format!("cannot read schema {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let local = haar_net::server::local_offer(&cfg, schema_text);
    refuse_open_roots(&cfg.roots)?;
    let backend = cfg.open_backend()?;
    Server::bind(
        &serve.listen,
        Target::Local { backend, options },
        ServerConfig {
            tokens,
            tls,
            local,
            limits: serve.limits,
            frame_tags: serve.frame_tags,
            extractor: Some(Arc::new(crate::extract::ServerExtractor)),
        },
    )
    .map_err(|e| Error::net("cannot listen on", &serve.listen, e))
}

/// Runs `server` until SIGINT or SIGTERM, then stops it cleanly ([`haar_net::Stopper`]:
/// connections end after the request in progress, the store gives back what it reserved)
/// and returns. A second signal while it stops ends the process at once (exit 130 or 143).
pub fn run_until_signalled(server: Server) -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| Error::Config(format!("cannot catch SIGINT/SIGTERM: {e}")))?;
    let stopper = server.stopper();
    std::thread::Builder::new()
        .name("haar-signals".into())
        .spawn(move || {
            let mut got = signals.forever();
            if got.next().is_some() {
                stopper.stop();
            }
            if let Some(sig) = got.next() {
                tracing::warn!(signal = sig, "second signal while stopping: exiting now");
                std::process::exit(128 + sig);
            }
        })
        .map_err(|e| Error::Config(format!("cannot start the signal thread: {e}")))?;
    let name = server
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    server
        .run()
        .map_err(|e| Error::net("cannot run the server on", &name, e))
}

/// A server refuses to serve a root that others can write (design §6.1): anyone on the
/// machine could then replace its files under the server. Roots that do not exist yet are
/// created by the store with the configured (owner-only by default) mode.
fn refuse_open_roots(roots: &[std::path::PathBuf]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for r in roots {
        if let Ok(m) = std::fs::metadata(r) {
            let mode = m.permissions().mode() & 0o7777;
            // Writable by others (sticky or not): anyone could plant a database there.
            if mode & 0o002 != 0 {
                return Err(Error::Config(format!(
                    "store root {} is writable by others (mode {mode:04o}): a server will not \
                     serve it; restrict it (chmod o-w {}) or use another root",
                    r.display(),
                    r.display()
                )));
            }
        }
    }
    Ok(())
}
