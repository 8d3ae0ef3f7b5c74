//! The stores and servers of each backend `haar workflow` compares, made fresh for every run
//! and removed afterwards: one shared POSIX directory, local `haar serve` processes over pmem
//! pools combined by `dist` (or the servers the store options name), or a self-contained FDB5
//! root; and the global options and environment its workers are started with.
//!
//! Owns set-up and tear-down; must not run workers.

use std::ffi::OsString;
use std::path::Path;

use haar::OpenOptions;

use super::{Options, product_size};
use crate::error::{Error, io};
use crate::layout::Layout;
use crate::procs::Servers;

/// A backend of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Backend {
    SharedPosix,
    Haar,
    Fdb5,
}

impl Backend {
    pub(super) fn parse(s: &str) -> Result<Backend, Error> {
        match s.trim() {
            "shared-posix" | "posix" => Ok(Backend::SharedPosix),
            "haar" | "dist" | "pmem" => Ok(Backend::Haar),
            "fdb5" => Ok(Backend::Fdb5),
            other => Err(Error::Usage(format!(
                "unknown backend {other:?} in --backends: use shared-posix, haar, fdb5"
            ))),
        }
    }
    pub(super) fn id(self) -> &'static str {
        match self {
            Backend::SharedPosix => "shared-posix",
            Backend::Haar => "haar",
            Backend::Fdb5 => "fdb5",
        }
    }
}

/// A backend made ready for one run: what its workers are started with.
pub(super) struct Prepared {
    pub(super) globals: Vec<OsString>,
    pub(super) env: Vec<(String, String)>,
    pub(super) fdb5: bool,
    pub(super) describe: String,
    _servers: Option<Servers>,
    _dir: tempfile::TempDir,
}

pub(super) fn prepare(
    opts: &OpenOptions,
    a: &Options,
    b: Backend,
    l: &Layout,
    label: &str,
) -> Result<Prepared, Error> {
    let mk = |base: &Path| {
        tempfile::Builder::new()
            .prefix(&format!("haar-workflow-{}-{label}-", b.id()))
            .tempdir_in(base)
            .map_err(io(format!(
                "cannot create a directory in {}",
                base.display()
            )))
    };
    match b {
        Backend::SharedPosix => {
            let dir = mk(&a.shared_dir)?;
            Ok(Prepared {
                globals: vec![
                    "--backend".into(),
                    "posix".into(),
                    "--root".into(),
                    dir.path().into(),
                ],
                env: Vec::new(),
                fdb5: false,
                describe: format!("one shared POSIX directory ({})", a.shared_dir.display()),
                _servers: None,
                _dir: dir,
            })
        }
        Backend::Fdb5 => {
            let dir = mk(&a.shared_dir)?;
            let env = crate::fdb5::setup_root(dir.path())?;
            Ok(Prepared {
                globals: Vec::new(),
                env,
                fdb5: true,
                describe: format!("FDB5 POSIX TOC ({})", a.shared_dir.display()),
                _servers: None,
                _dir: dir,
            })
        }
        Backend::Haar => {
            let dir = mk(&a.pmem_dir)?;
            if let Some(s) = &opts.servers {
                // The servers given, without a local root or backend to open instead.
                let remote = OpenOptions {
                    root: None,
                    backend: None,
                    ..opts.clone()
                };
                return Ok(Prepared {
                    globals: crate::worker::globals(&remote)?,
                    env: Vec::new(),
                    fdb5: false,
                    describe: format!("haar dist over {}", s.join(",")),
                    _servers: None,
                    _dir: dir,
                });
            }
            let volume = l.total_bytes()
                + 2 * u64::from(l.steps) * u64::from(l.fields_per_step()) * product_size(l) as u64;
            let per_node = volume * opts.replicas as u64 / a.nodes as u64;
            let pool = per_node + per_node / 3 + (64 << 20);
            let servers = Servers::start(a.nodes, dir.path(), "pmem", Some(pool), None)?;
            let config = dir.path().join("dist.yaml");
            std::fs::write(&config, servers.dist_config(opts.replicas, "field"))
                .map_err(io(format!("cannot write {}", config.display())))?;
            Ok(Prepared {
                globals: vec![
                    "--config".into(),
                    config.into(),
                    "--token-file".into(),
                    servers.token_file.clone().into(),
                ],
                env: Vec::new(),
                fdb5: false,
                describe: format!(
                    "haar dist, {} local servers, pmem pools ({})",
                    a.nodes,
                    a.pmem_dir.display()
                ),
                _servers: Some(servers),
                _dir: dir,
            })
        }
    }
}
