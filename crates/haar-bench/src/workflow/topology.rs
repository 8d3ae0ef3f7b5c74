//! The stores and servers of each backend `haar workflow` compares, made fresh for every run
//! and removed afterwards: one shared POSIX directory, `haar serve` processes over pmem pools
//! combined by `dist` (or the servers the store options name), or a self-contained FDB5 root;
//! the global options and environment its workers are started with; and, with `--vcluster N`,
//! which node of the virtual cluster each process runs on ([`Site`]).
//!
//! Owns set-up, placement and tear-down; must not run workers.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use haar::OpenOptions;

use super::{Options, product_size};
use crate::error::{Error, io};
use crate::layout::Layout;
use crate::procs::{ServerPlace, Servers};
use crate::vcluster::{Node, VCluster};

/// Where a run happens: the directories as the workers name them and, on the virtual
/// cluster, the nodes of each role.
#[derive(Debug, Clone)]
pub(super) struct Site {
    /// The shared file system's directory (shared POSIX directory, FDB5's root).
    pub(super) shared_dir: PathBuf,
    /// The node-local tier (the servers' pmem pools).
    pub(super) pmem_dir: PathBuf,
    /// On the virtual cluster: its nodes, and which of them run members and product
    /// generation. One server runs on every node.
    pub(super) cluster: Option<Cluster>,
}

/// The virtual cluster's nodes by role.
#[derive(Debug, Clone)]
pub(super) struct Cluster {
    pub(super) vc: VCluster,
    /// Indices into `vc.nodes` of the members' nodes (the first half, rounded up).
    pub(super) producers: Vec<usize>,
    /// … and of product generation's (the others).
    pub(super) consumers: Vec<usize>,
}

impl Site {
    /// The site of `a`: this host, or the first `--vcluster N` nodes of the running virtual
    /// cluster (members on the first half, product generation on the rest).
    pub(super) fn new(a: &Options) -> Result<Site, Error> {
        let Some(n) = a.vcluster else {
            let site = Site {
                shared_dir: a.shared_dir.clone().unwrap_or_else(|| "/var/tmp".into()),
                pmem_dir: a.pmem_dir.clone().unwrap_or_else(|| "/dev/shm".into()),
                cluster: None,
            };
            for dir in [&site.shared_dir, &site.pmem_dir] {
                if !dir.is_dir() {
                    return Err(Error::Usage(format!(
                        "{} is not a directory (see --shared-dir, --pmem-dir)",
                        dir.display()
                    )));
                }
            }
            return Ok(site);
        };
        let vc = VCluster::open(n)?;
        let p = n.div_ceil(2);
        let site = Site {
            shared_dir: a.shared_dir.clone().unwrap_or_else(|| "/shared".into()),
            pmem_dir: a.pmem_dir.clone().unwrap_or_else(|| "/mnt/pmem0".into()),
            cluster: Some(Cluster {
                producers: (0..p).collect(),
                consumers: (p..n).collect(),
                vc,
            }),
        };
        for node in site.nodes() {
            node.check_nsenter()?;
            for dir in [&site.shared_dir, &site.pmem_dir] {
                if !node.here(dir).is_dir() {
                    return Err(Error::Usage(format!(
                        "{} is not a directory on node {} (see --shared-dir, --pmem-dir)",
                        dir.display(),
                        node.name
                    )));
                }
            }
        }
        Ok(site)
    }

    /// Every node of the cluster (none on this host).
    pub(super) fn nodes(&self) -> &[Node] {
        self.cluster.as_ref().map_or(&[], |c| &c.vc.nodes)
    }

    /// The node member `m` (1-based) runs on: round-robin over the members' nodes.
    pub(super) fn producer_node(&self, m: u32) -> Option<&Node> {
        let c = self.cluster.as_ref()?;
        Some(&c.vc.nodes[c.producers[(m as usize - 1) % c.producers.len()]])
    }

    /// The node consumer `i` (0-based) runs on: round-robin over product generation's nodes.
    pub(super) fn consumer_node(&self, i: u32) -> Option<&Node> {
        let c = self.cluster.as_ref()?;
        Some(&c.vc.nodes[c.consumers[i as usize % c.consumers.len()]])
    }

    /// `cmd` placed on `node` (as it is on this host).
    pub(super) fn place(node: Option<&Node>, cmd: Command) -> Command {
        match node {
            Some(n) => n.command(&cmd),
            None => cmd,
        }
    }

    /// A new directory under `base` (a directory of the site, as workers name it), removed
    /// when the result is dropped; the path returned is the workers'.
    fn tempdir(&self, base: &Path, prefix: &str) -> Result<(tempfile::TempDir, PathBuf), Error> {
        let here = match self.nodes().first() {
            Some(n) => n.here(base),
            None => base.to_path_buf(),
        };
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(&here)
            .map_err(io(format!(
                "cannot create a directory in {}",
                base.display()
            )))?;
        let there = match self.nodes().first() {
            Some(n) => n.there(dir.path()),
            None => dir.path().to_path_buf(),
        };
        Ok((dir, there))
    }

    /// How the site is described in the table.
    pub(super) fn describe(&self) -> String {
        match &self.cluster {
            None => "this host".into(),
            Some(c) => {
                let names = |ix: &[usize]| {
                    ix.iter()
                        .map(|&i| c.vc.nodes[i].name.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                };
                let pinned = if c.vc.nodes.iter().all(|n| n.cpus.is_some()) {
                    let cpus = |ix: &[usize]| {
                        let mut v: Vec<&str> = ix
                            .iter()
                            .filter_map(|&i| c.vc.nodes[i].cpus.as_deref())
                            .collect();
                        v.dedup();
                        v.join(",")
                    };
                    format!(
                        "; members' nodes on CPU {}, product generation's on CPU {}",
                        cpus(&c.producers),
                        cpus(&c.consumers)
                    )
                } else {
                    "; nodes not pinned (they share every CPU)".into()
                };
                format!(
                    "virtual cluster: members on {}, product generation on {}; /shared at {}, node links {}{pinned}",
                    names(&c.producers),
                    names(&c.consumers),
                    c.vc.shared_bw,
                    c.vc.node_bw
                )
            }
        }
    }
}

/// Per-node directories of the servers on the virtual cluster, removed after the servers.
struct NodeDirs(Vec<PathBuf>);

impl Drop for NodeDirs {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

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
    /// The servers this run started (none for the other backends or given servers).
    pub(super) servers: Option<Servers>,
    _node_dirs: Option<NodeDirs>,
    _dir: tempfile::TempDir,
}

pub(super) fn prepare(
    opts: &OpenOptions,
    a: &Options,
    site: &Site,
    b: Backend,
    l: &Layout,
    label: &str,
) -> Result<Prepared, Error> {
    let prefix = format!("haar-workflow-{}-{label}-", b.id());
    let on = |what: &str, dir: &Path| match site.cluster {
        None => format!("{what} ({})", dir.display()),
        Some(_) => format!("{what} ({} of every node)", dir.display()),
    };
    match b {
        Backend::SharedPosix => {
            let (dir, there) = site.tempdir(&site.shared_dir, &prefix)?;
            Ok(Prepared {
                globals: vec![
                    "--backend".into(),
                    "posix".into(),
                    "--root".into(),
                    there.into(),
                ],
                env: Vec::new(),
                fdb5: false,
                describe: on("one shared POSIX directory", &site.shared_dir),
                servers: None,
                _node_dirs: None,
                _dir: dir,
            })
        }
        Backend::Fdb5 => {
            let (dir, there) = site.tempdir(&site.shared_dir, &prefix)?;
            let env = crate::fdb5::setup_root_at(dir.path(), &there)?;
            Ok(Prepared {
                globals: Vec::new(),
                env,
                fdb5: true,
                describe: on("FDB5 POSIX TOC", &site.shared_dir),
                servers: None,
                _node_dirs: None,
                _dir: dir,
            })
        }
        Backend::Haar => {
            if let Some(s) = &opts.servers {
                let (dir, _) = site.tempdir(&site.pmem_dir, &prefix)?;
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
                    servers: None,
                    _node_dirs: None,
                    _dir: dir,
                });
            }
            let servers_n = match &site.cluster {
                Some(c) => c.vc.nodes.len(),
                None => a.nodes,
            };
            let volume = l.total_bytes()
                + 2 * u64::from(l.steps) * u64::from(l.fields_per_step()) * product_size(l) as u64;
            let per_node = volume * opts.replicas as u64 / servers_n as u64;
            let pool = per_node + per_node / 3 + (64 << 20);
            let (dir, servers, node_dirs, describe) = match &site.cluster {
                None => {
                    let (dir, _) = site.tempdir(&site.pmem_dir, &prefix)?;
                    // With metrics endpoints, so the run can show their counters move.
                    let places: Vec<ServerPlace> = (0..servers_n)
                        .map(|i| ServerPlace {
                            data: dir.path().join(format!("node{i}")),
                            listen: "127.0.0.1:0".into(),
                            node: None,
                            metrics: true,
                        })
                        .collect();
                    let servers =
                        Servers::start_placed(&places, dir.path(), "pmem", Some(pool), None)?;
                    let describe = format!(
                        "haar dist, {servers_n} local servers, pmem pools ({})",
                        site.pmem_dir.display()
                    );
                    (dir, servers, None, describe)
                }
                Some(c) => {
                    // Configurations and the token where every node sees them (the host's
                    // /var/tmp); each server's pool in its own node's tier.
                    let dir = tempfile::Builder::new()
                        .prefix(&prefix)
                        .tempdir_in("/var/tmp")
                        .map_err(io("cannot create a directory in /var/tmp"))?;
                    let name = dir.path().file_name().expect("a tempdir has a name");
                    let places: Vec<ServerPlace> =
                        c.vc.nodes
                            .iter()
                            .map(|n| ServerPlace {
                                data: site.pmem_dir.join(name),
                                listen: format!("{}:0", n.ip),
                                node: Some(n.clone()),
                                metrics: false,
                            })
                            .collect();
                    let node_dirs = NodeDirs(
                        c.vc.nodes
                            .iter()
                            .map(|n| n.here(&site.pmem_dir.join(name)))
                            .collect(),
                    );
                    let servers =
                        Servers::start_placed(&places, dir.path(), "pmem", Some(pool), None)?;
                    let describe = format!(
                        "haar dist, {servers_n} servers, 1 per node ({})",
                        site.pmem_dir.display()
                    );
                    (dir, servers, Some(node_dirs), describe)
                }
            };
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
                describe,
                servers: Some(servers),
                _node_dirs: node_dirs,
                _dir: dir,
            })
        }
    }
}
