//! `haar hammer --vcluster N`: SC'19 Table 8 on the virtual cluster (docs/cluster.md). For
//! K = 1..N client nodes, each of `--procs` processes per node writes `--members` members per
//! node (weak scaling: the volume grows with K), flushing at the end of every step, into
//! - haar: one `haar serve` on each of the K client nodes over its own `/mnt/pmem0`, the
//!   fields spread over them by the rendezvous hash (servers scale with the clients, as
//!   NEXTGenIO's node-local FDB5 did);
//! - FDB5 (its C API, the real library) with its TOC root on `/shared`, the GlusterFS volume
//!   behind the storage node's one shaped link (the shared parallel file system).
//!
//! Beside them, in the same run: the per-node link limit (one TCP stream from n1 to n2,
//! through each node's link and the bridge) and this host's memory bandwidth (memcpy), which
//! bounds every node at once since all nodes share the host's memory.
//!
//! Owns the sweep, its limits and its report; workers are [`crate::hammer`]'s, placed by
//! [`crate::vcluster`].

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use haar::OpenOptions;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{Error, io};
use crate::hammer::{Mode, Options, Spec};
use crate::layout::Layout;
use crate::procs::{Group, Reporter, ServerPlace, Servers};
use crate::vcluster::{Node, VCluster};
use crate::worker::{self, WorkerSpec};

const GIB: f64 = (1u64 << 30) as f64;

/// Bytes of the link measurement's stream.
const LINK_BYTES: u64 = 1 << 30;

/// A port every node has free (each node is its own network namespace).
const LINK_PORT: u16 = 7399;

/// One end of the link measurement.
#[derive(Debug, Serialize, Deserialize)]
pub enum LinkSpec {
    /// Accepts one connection on this address and reads it to the end.
    Sink(String),
    /// Connects to this address and sends this many bytes.
    Source(String, u64),
}

/// Runs one end of the link measurement (a worker process on a node).
pub fn link_worker(spec: LinkSpec, mut rep: Reporter) -> Result<(), Error> {
    match spec {
        LinkSpec::Sink(addr) => {
            let l = TcpListener::bind(&addr).map_err(io(format!("link sink: bind {addr}")))?;
            rep.ready_then_wait()?;
            let (mut s, _) = l.accept().map_err(io("link sink: accept"))?;
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => n += k as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io("link sink: read")(e)),
                }
            }
            rep.say(&format!("result {}", json!({ "bytes": n })))
        }
        LinkSpec::Source(addr, bytes) => {
            rep.ready_then_wait()?;
            let mut s = connect(&addr)?;
            let buf = vec![0x5au8; 1 << 20];
            let mut left = bytes;
            while left > 0 {
                let k = left.min(buf.len() as u64) as usize;
                s.write_all(&buf[..k])
                    .map_err(io(format!("link source: send to {addr}")))?;
                left -= k as u64;
            }
            s.shutdown(std::net::Shutdown::Write)
                .map_err(io("link source: shutdown"))?;
            rep.say(&format!("result {}", json!({ "bytes": bytes })))
        }
    }
}

fn connect(addr: &str) -> Result<TcpStream, Error> {
    let t = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return Ok(s),
            Err(e) if t.elapsed() > Duration::from_secs(5) => {
                return Err(io(format!("link source: connect {addr}"))(e));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// GiB/s of one TCP stream from `from` to `to`, best of 3.
fn link_limit(from: &Node, to: &Node) -> Result<f64, Error> {
    let addr = format!("{}:{LINK_PORT}", to.ip);
    let mut best: f64 = 0.0;
    for _ in 0..3 {
        let mut g = Group::new();
        let sink = worker::command(&[], &WorkerSpec::Link(LinkSpec::Sink(addr.clone())))?;
        g.spawn(format!("link sink on {}", to.name), to.command(&sink))?;
        // The sink binds before it says ready, and the source connects only after go.
        let src = worker::command(
            &[],
            &WorkerSpec::Link(LinkSpec::Source(addr.clone(), LINK_BYTES)),
        )?;
        g.spawn(format!("link source on {}", from.name), from.command(&src))?;
        g.wait_ready(Duration::from_secs(30))?;
        let t = Instant::now();
        g.go()?;
        let r = g.results(Duration::from_secs(300), |_, _| {})?;
        let secs = t.elapsed().as_secs_f64();
        let got = r.first().and_then(|v| v["bytes"].as_u64()).unwrap_or(0);
        if got != LINK_BYTES {
            return Err(Error::Failed(format!(
                "link {} -> {}: {got} of {LINK_BYTES} bytes arrived",
                from.name, to.name
            )));
        }
        best = best.max(LINK_BYTES as f64 / secs / GIB);
    }
    Ok(best)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Haar,
    Fdb5,
}

/// One write run on the first `k` nodes; returns its figures.
fn one(
    opts: &OpenOptions,
    a: &Options,
    vc: &VCluster,
    base: &Layout,
    k: usize,
    target: Target,
) -> Result<Value, Error> {
    let nodes = &vc.nodes[..k];
    let layout = Layout {
        members: a.members * k as u32,
        ..base.clone()
    };
    let prefix = format!("haar-table8-{k}-");
    // Kept alive to the end of the run; dropped in order: servers, node dirs, control dir.
    let mut _servers = None;
    let mut node_dirs = Vec::new();
    let control = tempfile::Builder::new()
        .prefix(&prefix)
        .tempdir_in("/var/tmp")
        .map_err(io("cannot create a directory in /var/tmp"))?;
    let mut shared_dir = None;
    let (globals, env, describe) = match target {
        Target::Haar => {
            let name = control.path().file_name().expect("named").to_owned();
            let data = std::path::Path::new("/mnt/pmem0").join(&name);
            let places: Vec<ServerPlace> = nodes
                .iter()
                .map(|n| ServerPlace {
                    data: data.clone(),
                    listen: format!("{}:0", n.ip),
                    node: Some(n.clone()),
                    metrics: false,
                })
                .collect();
            node_dirs = nodes.iter().map(|n| n.here(&data)).collect();
            let per_node = layout.total_bytes() * opts.replicas as u64 / k as u64;
            let pool = per_node + per_node / 3 + (64 << 20);
            let servers = Servers::start_placed(&places, control.path(), "pmem", Some(pool), None)?;
            let config = control.path().join("dist.yaml");
            std::fs::write(&config, servers.dist_config(opts.replicas, "field"))
                .map_err(io(format!("cannot write {}", config.display())))?;
            let g = vec![
                "--config".into(),
                config.into_os_string(),
                "--token-file".into(),
                servers.token_file.clone().into_os_string(),
            ];
            _servers = Some(servers);
            (
                g,
                Vec::new(),
                format!("haar, {k} server(s), one per client node (/mnt/pmem0)"),
            )
        }
        Target::Fdb5 => {
            let here = nodes[0].here(std::path::Path::new("/shared"));
            let dir = tempfile::Builder::new()
                .prefix(&prefix)
                .tempdir_in(&here)
                .map_err(io("cannot create a directory in /shared"))?;
            let env = crate::fdb5::setup_root_at(dir.path(), &nodes[0].there(dir.path()))?;
            shared_dir = Some(dir);
            (
                Vec::new(),
                env,
                "FDB5 TOC on /shared (GlusterFS)".to_string(),
            )
        }
    };
    let mut group = Group::new();
    for (i, node) in nodes.iter().enumerate() {
        let first = i as u32 * a.members + 1;
        for p in 0..a.procs {
            let members: Vec<u32> = (first..first + a.members)
                .filter(|m| (m - first) % a.procs == p)
                .collect();
            let spec = Spec {
                layout: layout.clone(),
                mode: Mode::Write,
                members,
                grib: None,
                fdb5: target == Target::Fdb5,
            };
            let mut cmd = worker::command(&globals, &WorkerSpec::Hammer(spec))?;
            cmd.envs(env.iter().map(|(k, v)| (k, v)));
            group.spawn(
                format!("hammer worker {p} on {}", node.name),
                node.command(&cmd),
            )?;
        }
    }
    group.wait_ready(Duration::from_secs(300))?;
    let title = format!(
        "{} x{k}",
        if target == Target::Haar {
            "haar"
        } else {
            "fdb5"
        }
    );
    let (results, wall) =
        crate::hammer::go_and_collect(&mut group, layout.total_fields(), &title, a.quiet)?;
    drop(group);
    drop(_servers);
    for d in &node_dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    drop(shared_dir);
    let bytes: u64 = results.iter().filter_map(|r| r["bytes"].as_u64()).sum();
    let fields: u64 = results.iter().filter_map(|r| r["fields"].as_u64()).sum();
    if fields != layout.total_fields() {
        return Err(Error::Failed(format!(
            "{title}: {fields} fields written, expected {}",
            layout.total_fields()
        )));
    }
    Ok(json!({
        "target": if target == Target::Haar { "haar" } else { "fdb5" },
        "describe": describe,
        "client_nodes": k,
        "procs": k as u32 * a.procs,
        "fields": fields,
        "bytes": bytes,
        "seconds": wall,
        "gib_per_s": bytes as f64 / wall / GIB,
    }))
}

/// Runs `haar hammer --vcluster N` (write mode).
pub fn run(opts: &OpenOptions, a: &Options, n: usize, base: &Layout) -> Result<(), Error> {
    if a.mode != Mode::Write {
        return Err(Error::Usage(
            "--vcluster runs the write sweep of SC'19 Table 8: drop --mode".into(),
        ));
    }
    if a.grib.is_some() || a.fdb5.is_some() || opts.servers.is_some() {
        return Err(Error::Usage(
            "--vcluster starts its own servers and FDB5 root: drop --grib, --fdb5 and --servers"
                .into(),
        ));
    }
    if a.procs > a.members {
        return Err(Error::Usage(format!(
            "--procs {} (per node) must be at most --members ({}, per node)",
            a.procs, a.members
        )));
    }
    let vc = VCluster::open(n)?;
    for node in &vc.nodes {
        node.check_nsenter()?;
    }
    let fdb5 = crate::fdb5::available();
    crate::procs::install_interrupt_handler();
    eprintln!(
        "haar hammer --vcluster {n}: per client node {} members x {} steps x {} fields of {} bytes = {:.2} GiB, {} process(es); /shared at {}, node links {}",
        a.members,
        base.steps,
        base.fields_per_step(),
        base.field_size,
        (Layout {
            members: a.members,
            ..base.clone()
        })
        .total_bytes() as f64
            / GIB,
        a.procs,
        vc.shared_bw,
        vc.node_bw
    );
    let link = link_limit(&vc.nodes[0], &vc.nodes[1])?;
    let mem = haar_persist::measure_raw_limits(std::path::Path::new("/dev/shm"), 512 << 20)
        .map_err(io("memory bandwidth (memcpy) in /dev/shm"))?;
    let memcpy = mem.memcpy_gbs * 1e9 / GIB;
    eprintln!(
        "haar hammer --vcluster {n}: limits measured now: one node's link (TCP n1 -> n2) {link:.2} GiB/s; this host's memcpy {memcpy:.2} GiB/s (shared by every node)"
    );
    let mut rows = Vec::new();
    for k in 1..=n {
        let h = one(opts, a, &vc, base, k, Target::Haar)?;
        let f = if fdb5 {
            Some(one(opts, a, &vc, base, k, Target::Fdb5)?)
        } else {
            None
        };
        let hg = h["gib_per_s"].as_f64().unwrap_or(0.0);
        let fg = f.as_ref().and_then(|f| f["gib_per_s"].as_f64());
        let bound = (k as f64 * link).min(memcpy);
        eprintln!(
            "haar hammer --vcluster {n}: {k} client node(s): haar {hg:.2} GiB/s ({:.2}x of {k} x link), FDB5 on /shared {}",
            hg / (k as f64 * link),
            fg.map(|g| format!("{g:.2} GiB/s (haar {:.1}x)", hg / g))
                .unwrap_or_else(|| "not installed".into())
        );
        rows.push(json!({
            "client_nodes": k,
            "servers": k,
            "haar": h,
            "fdb5": f,
            "haar_over_fdb5": fg.map(|g| hg / g),
            "k_links_gib_per_s": k as f64 * link,
            "haar_over_k_links": hg / (k as f64 * link),
            "bound_gib_per_s": bound,
            "haar_over_bound": hg / bound,
        }));
    }
    let report = json!({
        "tool": "haar hammer --vcluster",
        "version": env!("CARGO_PKG_VERSION"),
        "nodes": n,
        "layout_per_node": Layout { members: a.members, ..base.clone() },
        "procs_per_node": a.procs,
        "replicas": opts.replicas,
        "shared_bw": vc.shared_bw,
        "node_bw": vc.node_bw,
        "cpus": vc.nodes.iter().map(|n| (n.name.clone(), n.cpus.clone())).collect::<std::collections::BTreeMap<_, _>>(),
        "link_gib_per_s": link,
        "memcpy_gib_per_s": memcpy,
        "machine": crate::bench::machine_description(),
        "rows": rows,
    });
    print_table(&report);
    let png = a.json.as_ref().map_or_else(
        || std::path::PathBuf::from("haar-hammer-vcluster.png"),
        |j| j.with_extension("png"),
    );
    plot(&png, &report).map_err(Error::Failed)?;
    println!("plot: {}", png.display());
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report).expect("json"))
            .map_err(io(format!("cannot write {}", p.display())))?;
        eprintln!("haar: figures saved to {}", p.display());
    }
    Ok(())
}

/// Two log-log panels: write throughput against client nodes (haar, FDB5, K x link), and
/// haar over FDB5 with the 3x target.
fn plot(path: &std::path::Path, r: &Value) -> Result<(), String> {
    use crate::plot::LogPanel;
    use haar_mem::plot::Series;
    let rows = r["rows"].as_array().cloned().unwrap_or_default();
    let pts = |f: &dyn Fn(&Value) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|row| Some((row["client_nodes"].as_f64()?, f(row)?)))
            .collect()
    };
    let panels = [
        LogPanel {
            title: "write throughput against client nodes".into(),
            ylabel: "GiB/s".into(),
            series: vec![
                Series {
                    name: "haar (a server per node)".into(),
                    points: pts(&|row| row["haar"]["gib_per_s"].as_f64()),
                },
                Series {
                    name: "FDB5 TOC on /shared".into(),
                    points: pts(&|row| row["fdb5"]["gib_per_s"].as_f64()),
                },
                Series {
                    name: "K x one node's link".into(),
                    points: pts(&|row| row["k_links_gib_per_s"].as_f64()),
                },
            ],
            target: None,
        },
        LogPanel {
            title: "haar over FDB5 on the shared file system".into(),
            ylabel: "x".into(),
            series: vec![Series {
                name: "haar / FDB5".into(),
                points: pts(&|row| row["haar_over_fdb5"].as_f64()),
            }],
            target: Some((3.0, ">= 3x at 4 nodes".into())),
        },
    ];
    crate::plot::scale_png(
        path,
        "haar hammer --vcluster: write throughput (SC'19 Table 8 shape)",
        "Client nodes (servers for haar: one per client node)",
        &panels,
    )
}

fn print_table(r: &Value) {
    println!();
    println!(
        "Write throughput against client nodes (SC'19 Table 8 shape), virtual cluster: /shared at {}, node links {}",
        r["shared_bw"].as_str().unwrap_or("?"),
        r["node_bw"].as_str().unwrap_or("?")
    );
    println!(
        "limits measured in this run: one node's link {:.2} GiB/s; host memcpy {:.2} GiB/s (all nodes share it)",
        r["link_gib_per_s"].as_f64().unwrap_or(0.0),
        r["memcpy_gib_per_s"].as_f64().unwrap_or(0.0)
    );
    println!();
    println!(
        "{:>6} {:>14} {:>15} {:>12} {:>14} {:>12}",
        "nodes", "haar GiB/s", "FDB5 GiB/s", "haar/FDB5", "K x link", "haar/(K x link)"
    );
    for row in r["rows"].as_array().into_iter().flatten() {
        let f = row["fdb5"]["gib_per_s"].as_f64();
        println!(
            "{:>6} {:>14.3} {:>15} {:>12} {:>14.3} {:>12.2}",
            row["client_nodes"].as_u64().unwrap_or(0),
            row["haar"]["gib_per_s"].as_f64().unwrap_or(0.0),
            f.map(|g| format!("{g:.3}")).unwrap_or_else(|| "-".into()),
            row["haar_over_fdb5"]
                .as_f64()
                .map(|x| format!("{x:.1}x"))
                .unwrap_or_else(|| "-".into()),
            row["k_links_gib_per_s"].as_f64().unwrap_or(0.0),
            row["haar_over_k_links"].as_f64().unwrap_or(0.0),
        );
    }
    println!();
    println!(
        "haar: K servers, one per client node, fields spread by the rendezvous hash; FDB5: its TOC on the shared GlusterFS; every process flushes at the end of each step."
    );
}
