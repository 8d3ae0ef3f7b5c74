//! Where the CPU went during one run of `haar workflow`, over its producers' span (the start
//! barrier's `go` → the last member's last flush, what the slowdown compares): each CPU's busy,
//! idle and stolen time, and the CPU time of each role's processes. On the virtual cluster
//! (`--pin`) the members' nodes have CPUs of their own, shared with those nodes' haar servers
//! and GlusterFS clients; the work that is not the producers' on those CPUs is the share of
//! them product generation can take away from the members.
//!
//! Roles, from one `/proc` snapshot at each end of the span (a process's CPU time is its
//! utime + stime, over all its threads; its role is told at the start, where every worker is
//! alive, since an exiting process shows no command line):
//! - producers: each member's own figure from go to its last flush, which it reports itself
//!   (members end with the span, too late for the closing snapshot);
//! - consumers, haar servers: this run's worker and `haar serve` processes (descendants of
//!   this process, told apart by their arguments);
//! - GlusterFS: `gluster*` processes of the cluster's nodes (clients on every compute node,
//!   the server on the storage node); node daemons: the nodes' other processes (init, munged,
//!   slurmd);
//! - harness: this process and its other descendants (`nsenter`, `taskset` wrappers);
//! - rest of the host: everything else, kernel threads included.
//!
//! Processes that start and end inside the span are seen by neither snapshot: their time shows
//! only in the CPUs' busy time, as does interrupt work no process is charged for.
//!
//! Owns attributing CPU time to the run's roles; must not run or place processes.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use super::topology::Site;
use crate::cpu::{self, CpuTicks, Process};
use crate::error::Error;
use crate::stats::monotonic_ns;

/// A process's part in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Producer,
    Consumer,
    HaarServer,
    GlusterFs,
    NodeDaemon,
    Harness,
    RestOfHost,
}

/// CPU seconds by role.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub(super) struct Roles {
    pub(super) producers_s: f64,
    pub(super) consumers_s: f64,
    pub(super) haar_servers_s: f64,
    pub(super) glusterfs_s: f64,
    pub(super) node_daemons_s: f64,
    pub(super) harness_s: f64,
    pub(super) rest_of_host_s: f64,
}

impl Roles {
    fn add(&mut self, role: Role, s: f64) {
        let slot = match role {
            Role::Producer => &mut self.producers_s,
            Role::Consumer => &mut self.consumers_s,
            Role::HaarServer => &mut self.haar_servers_s,
            Role::GlusterFs => &mut self.glusterfs_s,
            Role::NodeDaemon => &mut self.node_daemons_s,
            Role::Harness => &mut self.harness_s,
            Role::RestOfHost => &mut self.rest_of_host_s,
        };
        *slot += s;
    }

    fn total(&self) -> f64 {
        self.producers_s
            + self.consumers_s
            + self.haar_servers_s
            + self.glusterfs_s
            + self.node_daemons_s
            + self.harness_s
            + self.rest_of_host_s
    }

    fn line(&self) -> String {
        format!(
            "producers {:.2}, consumers {:.2}, haar servers {:.2}, GlusterFS {:.2}, node daemons {:.2}, harness {:.2}, rest of host {:.2}",
            self.producers_s,
            self.consumers_s,
            self.haar_servers_s,
            self.glusterfs_s,
            self.node_daemons_s,
            self.harness_s,
            self.rest_of_host_s
        )
    }
}

/// The members' CPUs over the span: how busy, and with whose work.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub(super) struct MembersCpus {
    /// The members' nodes' CPUs (every CPU where the nodes are not pinned).
    pub(super) cpus: Vec<usize>,
    pub(super) busy_s: f64,
    pub(super) idle_s: f64,
    /// The producers' own CPU time (on these CPUs: they may run nowhere else).
    pub(super) producers_s: f64,
    /// `busy_s - producers_s`: everything else these CPUs did during the span.
    pub(super) non_producer_s: f64,
    /// `non_producer_s` over (span × number of these CPUs).
    pub(super) non_producer_share: f64,
    /// The roles' time of processes that may run on these CPUs only (the producers' too).
    pub(super) confined_here: Roles,
    /// `busy_s` less `confined_here`: processes free to run on other CPUs too (the storage
    /// node, this harness, the rest of the host) that ran here, processes that started and
    /// ended inside the span, and interrupt work no process is charged for.
    pub(super) unattributed_s: f64,
}

/// A run's CPU figures (the JSON's `cpu` object of each run).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub(super) struct CpuFigures {
    /// go → the last member's last flush, as this process saw them.
    pub(super) span_s: f64,
    /// Per CPU (`cpus[i]`): user+nice+system+irq+softirq, idle+iowait, steal, from /proc/stat.
    pub(super) cpus: Vec<usize>,
    pub(super) per_cpu_busy_s: Vec<f64>,
    pub(super) per_cpu_idle_s: Vec<f64>,
    pub(super) per_cpu_steal_s: Vec<f64>,
    /// Every role's CPU time, wherever it ran.
    pub(super) roles: Roles,
    pub(super) members: MembersCpus,
}

impl CpuFigures {
    /// One line for the run's log.
    pub(super) fn line(&self) -> String {
        let cpus: Vec<String> = self
            .cpus
            .iter()
            .enumerate()
            .map(|(i, c)| {
                format!(
                    "cpu{c} busy {:.2} idle {:.2} steal {:.2}",
                    self.per_cpu_busy_s[i], self.per_cpu_idle_s[i], self.per_cpu_steal_s[i]
                )
            })
            .collect();
        let m = &self.members;
        let c = &m.confined_here;
        format!(
            "CPU s over {:.2} s (go -> last member flush): {}; {}; members' CPU {:?}: {:.2} s not the producers' ({:.1}% of it): haar servers {:.2}, GlusterFS {:.2}, consumers {:.2}, node daemons {:.2}, kernel and rest {:.2}, unpinned or unseen {:.2}",
            self.span_s,
            cpus.join(", "),
            self.roles.line(),
            m.cpus,
            m.non_producer_s,
            100.0 * m.non_producer_share,
            c.haar_servers_s,
            c.glusterfs_s,
            c.consumers_s,
            c.node_daemons_s,
            c.harness_s + c.rest_of_host_s,
            m.unattributed_s
        )
    }
}

/// The run's processes and CPUs at the start of its span.
pub(super) struct CpuWatch {
    me: u32,
    /// PID namespace → node name, for the cluster's nodes (storage included).
    nodes: HashMap<String, String>,
    /// The members' CPUs.
    members_cpus: BTreeSet<usize>,
    /// pid → (start time, CPU ticks, role). Roles are told here, where every worker is alive
    /// and waits for go: a process that is exiting shows an empty command line.
    procs: HashMap<u32, (u64, u64, Role)>,
    cpus: Vec<(usize, CpuTicks)>,
    t0: i128,
}

/// The same at the end of the span.
pub(super) struct CpuEnd {
    procs: Vec<Process>,
    cpus: Vec<(usize, CpuTicks)>,
    t1: i128,
}

impl CpuWatch {
    /// Snapshots the processes, then the CPUs (so the snapshot's own cost falls outside).
    pub(super) fn start(site: &Site) -> Result<CpuWatch, Error> {
        let mut nodes = HashMap::new();
        if let Some(c) = &site.cluster {
            for n in &c.vc.nodes {
                if let Some(ns) = cpu::pid_namespace(n.init_pid()) {
                    nodes.insert(ns, n.name.clone());
                }
            }
            if let Some(ns) = c.vc.storage_pid.and_then(cpu::pid_namespace) {
                nodes.insert(ns, "storage".into());
            }
        }
        let me = std::process::id();
        let all = cpu::processes()?;
        let parents: HashMap<u32, u32> = all.iter().map(|p| (p.pid, p.stat.ppid)).collect();
        let procs = all
            .iter()
            .map(|p| {
                let role = role(p, me, &parents, &nodes);
                (p.pid, (p.stat.starttime, p.stat.cpu_ticks, role))
            })
            .collect();
        let cpus = cpu::read_cpus()?;
        let all: BTreeSet<usize> = cpus.iter().map(|c| c.0).collect();
        let pinned: Option<BTreeSet<usize>> = match &site.cluster {
            Some(c) => c
                .producers
                .iter()
                .map(|&i| c.vc.nodes[i].cpus.as_deref().and_then(cpu::parse_cpu_list))
                .collect::<Option<Vec<_>>>()
                .map(|v| v.into_iter().flatten().collect()),
            None => None,
        };
        Ok(CpuWatch {
            me,
            nodes,
            members_cpus: pinned.unwrap_or(all),
            procs,
            cpus,
            t0: monotonic_ns(),
        })
    }

    /// Snapshots the CPUs, then the processes.
    pub(super) fn end(&self) -> Result<CpuEnd, Error> {
        let t1 = monotonic_ns();
        let cpus = cpu::read_cpus()?;
        Ok(CpuEnd {
            procs: cpu::processes()?,
            cpus,
            t1,
        })
    }

    /// The figures between `self` and `end`, with the producers' own CPU time (`producers_s`,
    /// summed over members).
    pub(super) fn figures(&self, end: &CpuEnd, producers_s: f64) -> CpuFigures {
        let hz = cpu::ticks_per_s();
        let span_s = (end.t1 - self.t0) as f64 / 1e9;
        let before: HashMap<usize, CpuTicks> = self.cpus.iter().copied().collect();
        let mut f = CpuFigures {
            span_s,
            ..CpuFigures::default()
        };
        let mut members = MembersCpus {
            cpus: self.members_cpus.iter().copied().collect(),
            producers_s,
            ..MembersCpus::default()
        };
        for (c, now) in &end.cpus {
            let d = now.since(&before.get(c).copied().unwrap_or_default());
            f.cpus.push(*c);
            f.per_cpu_busy_s.push(d.busy as f64 / hz);
            f.per_cpu_idle_s.push(d.idle as f64 / hz);
            f.per_cpu_steal_s.push(d.steal as f64 / hz);
            if self.members_cpus.contains(c) {
                members.busy_s += d.busy as f64 / hz;
                members.idle_s += d.idle as f64 / hz;
            }
        }
        let parents: HashMap<u32, u32> = end.procs.iter().map(|p| (p.pid, p.stat.ppid)).collect();
        f.roles.producers_s = producers_s;
        members.confined_here.producers_s = producers_s;
        for p in &end.procs {
            let (role, ticks) = match self.procs.get(&p.pid) {
                Some(&(start, t, role)) if start == p.stat.starttime => {
                    (role, p.stat.cpu_ticks.saturating_sub(t))
                }
                // Started during the span: all its time is the span's.
                _ => (role(p, self.me, &parents, &self.nodes), p.stat.cpu_ticks),
            };
            if role == Role::Producer {
                continue;
            }
            if ticks == 0 {
                continue;
            }
            let s = ticks as f64 / hz;
            f.roles.add(role, s);
            if !p.cpus_allowed.is_empty()
                && p.cpus_allowed.iter().all(|c| self.members_cpus.contains(c))
            {
                members.confined_here.add(role, s);
            }
        }
        members.non_producer_s = members.busy_s - producers_s;
        members.non_producer_share =
            members.non_producer_s / (span_s * members.cpus.len().max(1) as f64);
        members.unattributed_s = members.busy_s - members.confined_here.total();
        f.members = members;
        f
    }
}

/// What `p` is in this run (`me`: this process; `parents`: pid → parent pid, from the same
/// snapshot; `nodes`: the cluster's PID namespaces).
fn role(
    p: &Process,
    me: u32,
    parents: &HashMap<u32, u32>,
    nodes: &HashMap<String, String>,
) -> Role {
    if p.pid == me {
        return Role::Harness;
    }
    let ours = {
        let (mut at, mut hops) = (p.stat.ppid, 0);
        while at != me && at > 1 && hops < 64 {
            at = parents.get(&at).copied().unwrap_or(0);
            hops += 1;
        }
        at == me
    };
    if ours {
        // The wrappers that place a process on a node carry its arguments too.
        if matches!(p.stat.comm.as_str(), "nsenter" | "taskset") {
            return Role::Harness;
        }
        let args = &p.cmdline;
        match worker_kind(args).as_deref() {
            Some("producer") => return Role::Producer,
            Some("consumer") => return Role::Consumer,
            _ => {}
        }
        if args.iter().skip(1).any(|a| a == "serve") {
            return Role::HaarServer;
        }
        return Role::Harness;
    }
    if nodes.contains_key(&p.pid_ns) {
        if p.stat.comm.starts_with("gluster") {
            return Role::GlusterFs;
        }
        return Role::NodeDaemon;
    }
    Role::RestOfHost
}

/// The kind of worker a `haar … workload-worker --spec JSON` command line starts: the spec's
/// one key as [`crate::worker::WorkerSpec`] is serialised (`producer`, `consumer`, …).
fn worker_kind(args: &[String]) -> Option<String> {
    let at = args.iter().position(|a| a == "workload-worker")?;
    let mut rest = args[at + 1..].iter();
    rest.find(|a| *a == "--spec")?;
    let spec: serde_json::Value = serde_json::from_str(rest.next()?).ok()?;
    spec.as_object()?.keys().next().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::PidStat;
    use crate::worker::WorkerSpec;

    fn proc(pid: u32, ppid: u32, comm: &str, args: &[&str], ns: &str) -> Process {
        Process {
            pid,
            stat: PidStat {
                comm: comm.into(),
                ppid,
                cpu_ticks: 0,
                starttime: 0,
            },
            cmdline: args.iter().map(|a| a.to_string()).collect(),
            cpus_allowed: vec![0],
            pid_ns: ns.into(),
        }
    }

    #[test]
    fn processes_get_their_roles_from_ancestry_arguments_and_namespace() {
        let me = 100;
        let host = "pid:[1]";
        let n1 = "pid:[2]";
        // The workers' command lines as the run makes them.
        let layout = crate::layout::Layout {
            class: "rd".into(),
            expver: "wflw".into(),
            date: "20261121".into(),
            time: "0000".into(),
            members: 2,
            steps: 1,
            step_hours: 6,
            levels: 1,
            params: 1,
            field_size: 4096,
        };
        let argv = |spec: WorkerSpec| -> Vec<String> {
            let c = crate::worker::command(&["--config".into(), "c".into()], &spec).unwrap();
            std::iter::once(c.get_program())
                .chain(c.get_args())
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let consumer = argv(WorkerSpec::Consumer(super::super::ConsumerSpec {
            layout: layout.clone(),
            index: 0,
            consumers: 1,
            timeout: 1,
            fdb5: false,
            verify: false,
            streaming: false,
        }));
        let producer = argv(WorkerSpec::Producer(super::super::ProducerSpec {
            layout,
            member: 1,
            compute_ms: 0,
            fdb5: false,
            create_only: false,
        }));
        fn strs(v: &[String]) -> Vec<&str> {
            v.iter().map(String::as_str).collect()
        }
        let all = [
            proc(100, 1, "haar", &["haar", "workflow"], host),
            // nsenter (our child) → the worker in node n1's namespace.
            proc(
                101,
                100,
                "nsenter",
                &["nsenter", "--target", "7", "--", "/x/haar", "serve"],
                host,
            ),
            proc(102, 101, "haar", &strs(&consumer), n1),
            proc(103, 101, "haar", &strs(&producer), n1),
            proc(
                104,
                101,
                "haar",
                &["/x/haar", "--config", "c", "serve", "--listen", "a"],
                n1,
            ),
            proc(
                105,
                7,
                "glusterfs",
                &["glusterfs", "--volfile-server=storage"],
                n1,
            ),
            proc(106, 7, "slurmd", &["slurmd"], n1),
            // Someone else's haar server on the host is not ours.
            proc(107, 1, "haar", &["haar", "serve"], host),
            proc(108, 2, "kworker/0:1", &[], host),
        ];
        let parents: HashMap<u32, u32> = all.iter().map(|p| (p.pid, p.stat.ppid)).collect();
        let nodes: HashMap<String, String> = [(n1.to_string(), "n1".to_string())].into();
        let roles: Vec<Role> = all.iter().map(|p| role(p, me, &parents, &nodes)).collect();
        assert_eq!(
            roles,
            [
                Role::Harness,
                Role::Harness,
                Role::Consumer,
                Role::Producer,
                Role::HaarServer,
                Role::GlusterFs,
                Role::NodeDaemon,
                Role::RestOfHost,
                Role::RestOfHost
            ]
        );
    }

    #[test]
    fn the_members_cpu_figures_add_up() {
        let w = CpuWatch {
            me: 1,
            nodes: HashMap::new(),
            members_cpus: [0].into(),
            procs: [
                (50, (7, 100, Role::RestOfHost)),
                (51, (8, 10, Role::Producer)),
                // A consumer seen at the start keeps its role while it exits (its command
                // line is empty by then).
                (52, (9, 40, Role::Consumer)),
            ]
            .into(),
            cpus: vec![
                (
                    0,
                    CpuTicks {
                        busy: 1000,
                        idle: 500,
                        steal: 0,
                    },
                ),
                (
                    1,
                    CpuTicks {
                        busy: 2000,
                        idle: 100,
                        steal: 5,
                    },
                ),
            ],
            t0: 0,
        };
        let hz = cpu::ticks_per_s();
        let mut on0 = proc(50, 9, "kworker/0:1", &[], "pid:[1]");
        on0.stat.starttime = 7;
        on0.stat.cpu_ticks = 100 + 20;
        // pid 51 was reused by a new process: all of its time is the span's.
        let mut reused = proc(51, 9, "cc1", &["cc1"], "pid:[1]");
        reused.stat.starttime = 99;
        reused.stat.cpu_ticks = 30;
        reused.cpus_allowed = vec![0, 1];
        let mut exiting = proc(52, 1, "haar", &[], "pid:[1]");
        exiting.stat.starttime = 9;
        exiting.stat.cpu_ticks = 40 + 5;
        exiting.cpus_allowed = vec![1];
        let end = CpuEnd {
            procs: vec![on0, reused, exiting],
            cpus: vec![
                (
                    0,
                    CpuTicks {
                        busy: 1000 + 180,
                        idle: 500 + 20,
                        steal: 0,
                    },
                ),
                (
                    1,
                    CpuTicks {
                        busy: 2000 + 50,
                        idle: 100 + 150,
                        steal: 5,
                    },
                ),
            ],
            t1: 2_000_000_000,
        };
        let producers_s = 100.0 / hz;
        let f = w.figures(&end, producers_s);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(f.span_s, 2.0));
        assert_eq!(f.cpus, [0, 1]);
        assert!(close(f.per_cpu_busy_s[0], 180.0 / hz));
        assert!(close(f.per_cpu_idle_s[1], 150.0 / hz));
        assert!(close(f.roles.rest_of_host_s, 50.0 / hz));
        assert!(close(f.roles.consumers_s, 5.0 / hz));
        assert!(close(f.roles.harness_s, 0.0));
        let m = &f.members;
        assert_eq!(m.cpus, [0]);
        assert!(close(m.busy_s, 180.0 / hz));
        assert!(close(m.non_producer_s, 80.0 / hz));
        assert!(close(m.non_producer_share, 80.0 / hz / 2.0));
        // Only the kernel thread confined to CPU 0 is counted as CPU 0's; the compiler that
        // may run on either CPU is left unattributed.
        assert!(close(m.confined_here.rest_of_host_s, 20.0 / hz));
        assert!(close(m.unattributed_s, 60.0 / hz));
    }
}
