//! The nodes of the virtual cluster (`scripts/vcluster.sh`, docs/cluster.md) as places to run
//! a workload's processes: each compute node `nK` is a set of namespaces (network, UTS, mount,
//! IPC, PID) held by an init process whose host pid the script records in `RUN/pid/nK`. A
//! process is placed on a node by entering those namespaces with `nsenter`, which forks to
//! enter the PID namespace (so `/proc/self` works there, as FDB5's eckit needs) and waits for
//! its child without passing signals on: stop such a process with
//! [`crate::procs::kill_with_children`]. A node's private files (`/shared` as
//! its GlusterFS client sees it, its own `/mnt/pmem0`) are reached from here through
//! `/proc/PID/root`.
//!
//! Owns finding the cluster and placing commands and paths on it; must not decide what runs
//! where (the workloads do).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::error::{Error, io};

/// Where `scripts/vcluster.sh` keeps its state (`HAAR_VCLUSTER_DIR` overrides, as for it).
pub fn run_dir() -> PathBuf {
    std::env::var_os("HAAR_VCLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/haar-vcluster"))
}

/// The marker the script puts last on each node init's command line (`MARK:NAME`).
const MARK: &str = "haar-vcluster";

/// One compute node of the virtual cluster.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its name and hostname, `n1` … `n8`.
    pub name: String,
    /// Its address on the cluster's bridge.
    pub ip: String,
    /// Its own CPUs (`vcluster.sh up --pin`: a `taskset -c` list), or every CPU.
    pub cpus: Option<String>,
    pid: u32,
    /// This executable where the nodes see it, when they do not see it where it is (a node's
    /// `/tmp` and `/run` are its own: a haar under a clone in `/tmp` is not on any node).
    exe: Option<Arc<ExeCopy>>,
}

/// A copy of this executable in the host's `/var/tmp`, which every node sees; removed when
/// the last node holding it is dropped.
#[derive(Debug)]
struct ExeCopy {
    from: PathBuf,
    to: PathBuf,
}

impl Drop for ExeCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.to);
    }
}

/// `None` when node `pid` sees this executable at its own path; else a copy every node sees.
fn node_visible_exe(pid: u32) -> Result<Option<Arc<ExeCopy>>, Error> {
    let exe = std::env::current_exe().map_err(io("cannot find the haar executable"))?;
    let rel = exe.strip_prefix("/").unwrap_or(&exe);
    let seen = PathBuf::from(format!("/proc/{pid}/root")).join(rel);
    let same = |a: &Path, b: &Path| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    };
    if same(&exe, &seen) {
        return Ok(None);
    }
    let to = PathBuf::from(format!(
        "/var/tmp/haar-vcluster-exe-{}-{:x}",
        std::process::id(),
        haar_core::rendezvous::splitmix64(crate::stats::monotonic_ns() as u64)
    ));
    std::fs::copy(&exe, &to).map_err(io(format!(
        "cannot copy {} to {} for the nodes to run",
        exe.display(),
        to.display()
    )))?;
    Ok(Some(Arc::new(ExeCopy { from: exe, to })))
}

/// A running virtual cluster of at least the nodes asked for.
#[derive(Debug, Clone)]
pub struct VCluster {
    /// The compute nodes used, `n1..nN` in order.
    pub nodes: Vec<Node>,
    /// The storage node's link rate (`--shared-bw` of `vcluster.sh up`; with
    /// `--shared-total`, one budget for both directions).
    pub shared_bw: String,
    /// Every compute node's link rate (`--node-bw`; `none` when not limited).
    pub node_bw: String,
    /// Size of each node's `/mnt/pmem0` tmpfs.
    pub pmem_size: String,
    /// Host pid of the storage node's init (it runs the GlusterFS server), when it runs.
    pub storage_pid: Option<u32>,
}

impl VCluster {
    /// The first `n` compute nodes of the running virtual cluster; an error that says how to
    /// bring it up when it is not running or has fewer nodes.
    pub fn open(n: usize) -> Result<VCluster, Error> {
        VCluster::open_in(&run_dir(), n)
    }

    fn open_in(run: &Path, n: usize) -> Result<VCluster, Error> {
        let up = |why: String| {
            Error::Usage(format!(
                "--vcluster {n}: {why}; bring the cluster up first, as root: scripts/vcluster.sh up {}",
                n.max(2)
            ))
        };
        if n < 2 {
            return Err(Error::Usage(
                "--vcluster needs at least 2 nodes (members on some, product generation on others)"
                    .into(),
            ));
        }
        let have: usize = std::fs::read_to_string(run.join("nodes"))
            .map_err(|_| {
                up(format!(
                    "no virtual cluster is up ({} is missing)",
                    run.join("nodes").display()
                ))
            })?
            .trim()
            .parse()
            .map_err(|_| {
                up(format!(
                    "{} is not a node count",
                    run.join("nodes").display()
                ))
            })?;
        if have < n {
            return Err(up(format!("the virtual cluster has {have} compute nodes")));
        }
        let read = |f: &str, default: &str| {
            std::fs::read_to_string(run.join(f))
                .map(|s| s.trim().to_string())
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| default.to_string())
        };
        let mut nodes = Vec::new();
        let mut exe = None;
        for k in 1..=n {
            let name = format!("n{k}");
            let pid = node_pid(run, &name).ok_or_else(|| {
                up(format!(
                    "node {name} is not up (scripts/vcluster.sh status; revive it with scripts/vcluster.sh revive {name})"
                ))
            })?;
            let cpus = std::fs::read_to_string(run.join("cpus").join(&name))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty());
            if k == 1 {
                exe = node_visible_exe(pid)?;
            }
            nodes.push(Node {
                ip: format!("10.77.0.{}", 10 + k),
                name,
                cpus,
                pid,
                exe: exe.clone(),
            });
        }
        let mut shared_bw = read("shared-bw", "1gbit");
        if run.join("shared-total").exists() {
            shared_bw.push_str(" for reads and writes together");
        }
        Ok(VCluster {
            nodes,
            shared_bw,
            node_bw: read("node-bw", "none"),
            pmem_size: read("pmem-size", "2g"),
            storage_pid: node_pid(run, "storage"),
        })
    }
}

/// The host pid of node `name`'s init, if it runs and is still the script's.
fn node_pid(run: &Path, name: &str) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(run.join("pid").join(name))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let last = cmdline.split(|&b| b == 0).rfind(|a| !a.is_empty())?;
    (last == format!("{MARK}:{name}").as_bytes()).then_some(pid)
}

impl Node {
    /// Host pid of this node's init: every process of the node is in its PID namespace
    /// (`/proc/PID/ns/pid`), nested in the host's, where each has a host pid too.
    pub fn init_pid(&self) -> u32 {
        self.pid
    }

    /// `inner` to be run on this node: in its network, UTS, mount, IPC and PID namespaces (on
    /// its own CPUs when it has them), with the same program, arguments, environment changes
    /// and working directory.
    pub fn command(&self, inner: &Command) -> Command {
        let mut cmd = match &self.cpus {
            Some(c) => {
                let mut t = Command::new("taskset");
                t.args(["-c", c, "nsenter"]);
                t
            }
            None => Command::new("nsenter"),
        };
        let program = match &self.exe {
            Some(c) if Path::new(inner.get_program()) == c.from => c.to.as_os_str(),
            _ => inner.get_program(),
        };
        cmd.arg("--target")
            .arg(self.pid.to_string())
            .args(["--mount", "--uts", "--net", "--ipc", "--pid", "--"])
            .arg(program)
            .args(inner.get_args());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        if let Some(d) = inner.get_current_dir() {
            cmd.current_dir(d);
        }
        cmd
    }

    /// Path `p` of this node's file system (e.g. `/shared/x`, `/mnt/pmem0/y`) as this process
    /// reaches it.
    pub fn here(&self, p: &Path) -> PathBuf {
        let rel = p.strip_prefix("/").unwrap_or(p);
        PathBuf::from(format!("/proc/{}/root", self.pid)).join(rel)
    }

    /// Path `here` (from [`Node::here`]) as the node's own processes name it.
    pub fn there(&self, here: &Path) -> PathBuf {
        let base = PathBuf::from(format!("/proc/{}/root", self.pid));
        here.strip_prefix(&base)
            .map(|r| Path::new("/").join(r))
            .unwrap_or_else(|_| here.to_path_buf())
    }

    /// Checks that `nsenter` can place a process here (it is util-linux's, on every Debian).
    pub fn check_nsenter(&self) -> Result<(), Error> {
        let st = self
            .command(&Command::new("true"))
            .status()
            .map_err(io("cannot run nsenter (apt-get install util-linux)"))?;
        if st.success() {
            Ok(())
        } else {
            Err(Error::Failed(format!(
                "cannot enter node {}'s namespaces (nsenter --target {} exited with {st}); run as root",
                self.name, self.pid
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_between_the_host_and_a_node() {
        let n = Node {
            name: "n1".into(),
            ip: "10.77.0.11".into(),
            cpus: None,
            pid: 4242,
            exe: None,
        };
        let h = n.here(Path::new("/shared/haar-x"));
        assert_eq!(h, Path::new("/proc/4242/root/shared/haar-x"));
        assert_eq!(n.there(&h), Path::new("/shared/haar-x"));
        assert_eq!(n.there(Path::new("/var/tmp/a")), Path::new("/var/tmp/a"));
    }

    #[test]
    fn a_command_is_wrapped_with_its_arguments_and_environment() {
        let mut n = Node {
            name: "n2".into(),
            ip: "10.77.0.12".into(),
            cpus: None,
            pid: 7,
            exe: None,
        };
        let mut inner = Command::new("/bin/haar");
        inner.args(["serve", "--listen", "10.77.0.12:0"]);
        inner.env("A", "1").env_remove("HAAR_CONFIG");
        let c = n.command(&inner);
        assert_eq!(c.get_program(), "nsenter");
        let args: Vec<_> = c.get_args().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [
                "--target",
                "7",
                "--mount",
                "--uts",
                "--net",
                "--ipc",
                "--pid",
                "--",
                "/bin/haar",
                "serve",
                "--listen",
                "10.77.0.12:0"
            ]
        );
        let envs: Vec<_> = c.get_envs().collect();
        assert!(envs.contains(&("A".as_ref(), Some("1".as_ref()))));
        assert!(envs.contains(&("HAAR_CONFIG".as_ref(), None)));
        // A pinned node's processes run on its CPUs.
        n.cpus = Some("1".into());
        let c = n.command(&inner);
        assert_eq!(c.get_program(), "taskset");
        let args: Vec<_> = c.get_args().take(5).map(|a| a.to_str().unwrap()).collect();
        assert_eq!(args, ["-c", "1", "nsenter", "--target", "7"]);
        // An executable the nodes cannot see is run from its copy where they can.
        n.exe = Some(Arc::new(ExeCopy {
            from: "/bin/haar".into(),
            to: "/var/tmp/haar-vcluster-exe-test-never-created".into(),
        }));
        let c = n.command(&inner);
        let args: Vec<_> = c.get_args().map(|a| a.to_str().unwrap()).collect();
        assert!(
            args.contains(&"/var/tmp/haar-vcluster-exe-test-never-created"),
            "{args:?}"
        );
        assert!(!args.contains(&"/bin/haar"), "{args:?}");
    }

    #[test]
    fn a_missing_cluster_says_how_to_bring_it_up() {
        let dir = tempfile::tempdir().unwrap();
        let e = VCluster::open_in(dir.path(), 4).unwrap_err().to_string();
        assert!(e.contains("scripts/vcluster.sh up 4"), "{e}");
        std::fs::write(dir.path().join("nodes"), "2\n").unwrap();
        let e = VCluster::open_in(dir.path(), 4).unwrap_err().to_string();
        assert!(e.contains("has 2 compute nodes"), "{e}");
        let e = VCluster::open_in(dir.path(), 2).unwrap_err().to_string();
        assert!(e.contains("node n1 is not up"), "{e}");
    }
}
