//! `haar hammer --vcluster N`: SC'19 Table 8 on the virtual cluster (docs/cluster.md). For
//! K = 1..N client nodes, each of `--procs` processes per node writes `--members` members per
//! node (weak scaling: the volume grows with K), flushing at the end of every step, into
//! - haar: one `haar serve` on each of the K client nodes over its own `/mnt/pmem0`, the
//!   fields spread over them by the rendezvous hash (servers scale with the clients, as
//!   NEXTGenIO's node-local FDB5 did);
//! - FDB5 (its C API, the real library) with its TOC root on `/shared`, the GlusterFS volume
//!   behind the storage node's one shaped link (the shared parallel file system).
//! - FDB5 5.25's own `fdb-hammer` (the `fdb5lib` wheel's) in its distributed mode, writing the
//!   same fields per node into an FDB5 TOC on `/shared`, then reading them back
//!   (module `fdb_hammer` below; it needs an `LD_AUDIT` shim to start at all).
//!
//! A failed FDB5 or fdb-hammer run is its row's `"failed"`, not the end of the sweep.
//!
//! Beside them, in the same run: the per-node link limit (one TCP stream from n1 to n2,
//! through each node's link and the bridge) and this host's memory bandwidth (memcpy), which
//! bounds every node at once since all nodes share the host's memory.
//!
//! Owns the sweep, its limits and its report; workers are [`crate::hammer`]'s, placed by
//! [`crate::vcluster`].
//!
//! Its parts: the sweep here; `link` measures one node's link; `report` prints the table and
//! draws the plot; `fdb_hammer` runs FDB5's own `fdb-hammer`.

use std::time::Duration;

use haar::OpenOptions;
use serde_json::{Value, json};

use crate::error::{Error, io};
use crate::hammer::{Mode, Options, Spec};
use crate::layout::Layout;
use crate::procs::{Group, ServerPlace, Servers};
use crate::vcluster::VCluster;
use crate::worker::{self, WorkerSpec};

mod fdb_hammer;
mod link;
mod report;

pub use link::{LinkSpec, link_worker};

use link::link_limit;
use report::{plot, print_table};

const GIB: f64 = (1u64 << 30) as f64;

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

/// One `fdb-hammer` row: FDB5 5.25's tool writing, then reading, from the first `k` nodes
/// into a fresh FDB5 TOC root on `/shared`, the same fields per node as haar's writers.
fn fdb_hammer_row(
    kit: &fdb_hammer::Kit,
    a: &Options,
    vc: &VCluster,
    base: &Layout,
    k: usize,
) -> Result<Value, String> {
    let nodes = &vc.nodes[..k];
    let layout = Layout {
        members: a.members * k as u32,
        ..base.clone()
    };
    let here = nodes[0].here(std::path::Path::new("/shared"));
    let dir = tempfile::Builder::new()
        .prefix(&format!("haar-table8-fdb-hammer-{k}-"))
        .tempdir_in(&here)
        .map_err(|e| format!("cannot create a directory in /shared: {e}"))?;
    let env = crate::fdb5::setup_root_at(dir.path(), &nodes[0].there(dir.path()))
        .map_err(|e| e.to_string())?;
    if !a.quiet {
        eprintln!("haar hammer --vcluster: fdb-hammer x{k}: writing, then reading");
    }
    let hosts: Vec<fdb_hammer::Host<'_>> = nodes
        .iter()
        .map(|n| fdb_hammer::Host {
            name: n.name.clone(),
            place: Box::new(move |c: &std::process::Command| n.command(c)),
        })
        .collect();
    fdb_hammer::write_then_read(kit, &env, &hosts, &layout, a.members, a.procs)
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
    // FDB5 5.25's own fdb-hammer: prepared once (its audit shim and template GRIB); a
    // failure here or in a run is that column's row, not the end of the sweep.
    let kit = fdb_hammer::prepare(base).map_err(|e| format!("fdb-hammer: {e}"));
    if let Err(e) = &kit {
        eprintln!("haar hammer --vcluster {n}: no fdb-hammer column: {e}");
    }
    let mut rows = Vec::new();
    for k in 1..=n {
        let h = one(opts, a, &vc, base, k, Target::Haar)?;
        let f = if fdb5 {
            Some(
                one(opts, a, &vc, base, k, Target::Fdb5).unwrap_or_else(|e| {
                    eprintln!("haar hammer --vcluster {n}: FDB5 x{k} failed: {e}");
                    json!({ "failed": e.to_string() })
                }),
            )
        } else {
            None
        };
        let fh = match &kit {
            Ok(kit) => fdb_hammer_row(kit, a, &vc, base, k).unwrap_or_else(|e| {
                eprintln!("haar hammer --vcluster {n}: fdb-hammer x{k} failed: {e}");
                json!({ "failed": e })
            }),
            Err(e) => json!({ "failed": e }),
        };
        let hg = h["gib_per_s"].as_f64().unwrap_or(0.0);
        let fg = f.as_ref().and_then(|f| f["gib_per_s"].as_f64());
        let hmg = fh["write"]["gib_per_s"].as_f64();
        let bound = (k as f64 * link).min(memcpy);
        eprintln!(
            "haar hammer --vcluster {n}: {k} client node(s): haar {hg:.2} GiB/s ({:.2}x of {k} x link), FDB5 on /shared {}, fdb-hammer on /shared {}",
            hg / (k as f64 * link),
            fg.map(|g| format!("{g:.2} GiB/s (haar {:.1}x)", hg / g))
                .unwrap_or_else(|| if fdb5 { "failed" } else { "not installed" }.into()),
            hmg.map(|g| format!(
                "write {g:.2} GiB/s (haar {:.1}x), read {:.2} GiB/s",
                hg / g,
                fh["read"]["gib_per_s"].as_f64().unwrap_or(0.0)
            ))
            .unwrap_or_else(|| "failed".into())
        );
        rows.push(json!({
            "client_nodes": k,
            "servers": k,
            "haar": h,
            "fdb5": f,
            "haar_over_fdb5": fg.map(|g| hg / g),
            "fdb_hammer": fh,
            "haar_over_fdb_hammer": hmg.map(|g| hg / g),
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
