//! The network section of `haar bench`: remote archive of 800 KiB fields through a `haar serve`
//! child process, beside raw loopback TCP and FDB5's own remote path (`fdb-server` driven by
//! the C-API peer with `FDB5_PEER_REMOTE`), all on the same workload and in the same run;
//! and flush → notification latency to another process.
//!
//! This host is shared, so the three are measured as adjacent triples, several times, and the
//! ratios are taken within each triple (their median is reported). Owns nothing but its child
//! processes; the measurements themselves live in [`measure`].

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use haar_net::ClientConfig;
use serde_json::{Value, json};

use crate::error::{Error, io};
use crate::stats::median;

pub mod measure;

use measure as nb;

/// What the issue asks of the network path (figures in the report say met or not met).
const TARGET_VS_RAW: f64 = 0.70;
const TARGET_VS_FDB5: f64 = 3.0;

/// `fdb-server` in its own process group (it forks per client); the group is killed on drop.
struct FdbServer {
    child: Child,
    port: u16,
}

impl Drop for FdbServer {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this struct created.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts FDB5's `fdb-server` over a local TOC root under `root`; `Err` says why not.
fn start_fdb_server(root: &Path) -> Result<FdbServer, String> {
    use std::os::unix::process::CommandExt;
    let exe = ["/usr/bin/fdb-server", "/usr/local/bin/fdb-server"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or("fdb-server not installed (Debian: apt-get install fdb5)")?;
    let io = |e: std::io::Error| format!("fdb-server set-up under {}: {e}", root.display());
    std::fs::create_dir_all(root.join("db")).map_err(io)?;
    std::fs::copy("/etc/fdb/schema", root.join("schema")).map_err(io)?;
    std::fs::write(root.join("dbnames"), "").map_err(io)?;
    let port = free_port().map_err(io)?;
    // Data connections use ports from this range (FDB5 opens one per client).
    let data = free_port().map_err(io)?;
    let cfg = format!(
        "---\ntype: local\nengine: toc\nschema: {r}/schema\nserverPort: {port}\n\
         dataPortStart: {data}\ndataPortCount: 20\n\
         spaces:\n  - handler: Default\n    roots:\n      - path: {r}/db\n",
        r = root.display()
    );
    std::fs::write(root.join("server.yaml"), cfg).map_err(io)?;
    let log = std::fs::File::create(root.join("server.log")).map_err(io)?;
    let child = Command::new(&exe)
        .current_dir(root)
        .env("FDB5_CONFIG_FILE", root.join("server.yaml"))
        .env("FDB_DBNAMES_FILE", root.join("dbnames"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io)?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let server = FdbServer { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!(
                "fdb-server did not listen on port {port} within 10 s; see {}",
                root.join("server.log").display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(server)
}

/// One write run of the FDB5 peer through `fdb-server`: GB/s (10^9 bytes/s).
fn fdb5_remote_gbps(
    peer: &Path,
    server: &FdbServer,
    client_root: &Path,
    fields: usize,
    size: usize,
    flush_every: usize,
) -> Result<f64, String> {
    let out = Command::new(peer)
        .args(["write"])
        .arg(client_root)
        .args([
            fields.to_string(),
            size.to_string(),
            flush_every.to_string(),
        ])
        .env("FDB5_PEER_REMOTE", format!("127.0.0.1:{}", server.port))
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", peer.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} write through fdb-server failed: {}",
            peer.display(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(line.lines().last().unwrap_or(""))
        .map_err(|e| format!("peer printed {line:?}: {e}"))?;
    let secs = v["seconds"].as_f64().ok_or("peer reported no seconds")?;
    Ok((fields * size) as f64 / secs / 1e9)
}

/// Fields archived per run, their size, and the flush interval.
#[derive(Clone, Copy)]
struct Workload {
    fields: usize,
    size: usize,
    flush_every: usize,
}

/// Archive GB/s through a `dist` front-end (one replica, placement by field so the one
/// database spreads) over `n` fresh `haar serve` children.
fn dist_gbps(
    exe: &Path,
    dir: &Path,
    token: &str,
    cfg: &ClientConfig,
    n: usize,
    w: Workload,
) -> Result<f64, String> {
    use haar_store::FieldStore;
    let Workload {
        fields,
        size,
        flush_every,
    } = w;
    let roots: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("dist{n}-{i}"))).collect();
    let run = || -> Result<f64, String> {
        let servers = roots
            .iter()
            .map(|r| nb::spawn_server(exe, r, "pmem", token).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut lanes: Vec<(String, Box<dyn FieldStore>)> = Vec::new();
        for s in &servers {
            let r = haar_net::RemoteStore::connect(&s.addr, cfg).map_err(|e| e.to_string())?;
            lanes.push((s.addr.clone(), Box::new(r)));
        }
        let opts = haar_store::StoreOptions::default();
        let mut d = haar_store::dist::DistStore::new(
            lanes,
            1,
            haar_store::dist::Placement::Field,
            opts.schema.clone(),
            opts.context.clone(),
        )
        .map_err(|e| e.to_string())?;
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
        let keys: Vec<_> = (0..fields).map(nb::bench_key).collect();
        let every = flush_every.max(1);
        let start = Instant::now();
        for (i, k) in keys.iter().enumerate() {
            d.archive(k, &data).map_err(|e| e.to_string())?;
            if (i + 1) % every == 0 {
                d.flush().map_err(|e| e.to_string())?;
            }
        }
        d.flush().map_err(|e| e.to_string())?;
        Ok((fields * size) as f64 / start.elapsed().as_secs_f64() / 1e9)
    };
    let r = run();
    for root in &roots {
        let _ = std::fs::remove_dir_all(root);
    }
    r
}

/// Measures everything; `peer` is the FDB5 C-API harness (bench/build-peer.sh), if built.
pub fn run(
    dir: &Path,
    fields: usize,
    flush_every: usize,
    peer: Option<&Path>,
    quick: bool,
) -> Result<Value, Error> {
    let size = 800 << 10;
    let repeats = if quick { 2 } else { 3 };
    let exe = std::env::current_exe().map_err(io("cannot find haar"))?;
    let token = haar_net::auth::nonce();
    // The wire is what this section measures: no same-host reads (design §8).
    let cfg = ClientConfig {
        token: Some(token.clone()),
        local_reads: false,
        ..ClientConfig::default()
    };
    let fail = |what: &str, e: String| Error::Failed(format!("bench: {what}: {e}"));
    let mut fdb5_note: Option<String> = match peer {
        None => Some("no FDB5 peer harness (build it with bench/build-peer.sh)".into()),
        Some(_) => None,
    };
    let mut triples = Vec::new();
    // The previous run's server and pool are removed before the next run starts.
    let mut current: Option<(nb::ChildServer, PathBuf)> = None;
    for r in 0..repeats {
        eprintln!("haar bench: network {}/{repeats}", r + 1);
        let raw = nb::raw_loopback_gbps((fields * size).max(256 << 20))
            .map_err(|e| fail("raw loopback TCP", e.to_string()))?;
        if let Some((server, root)) = current.take() {
            drop(server);
            let _ = std::fs::remove_dir_all(root);
        }
        let root = dir.join(format!("net-{r}"));
        let server = nb::spawn_server(&exe, &root, "pmem", &token)
            .map_err(|e| fail("haar serve", e.to_string()))?;
        let haar = nb::remote_archive_flushing_gbps(&server.addr, &cfg, fields, size, flush_every)
            .map_err(|e| fail("remote archive", e.to_string()))?;
        current = Some((server, root));
        let mut fdb5 = None;
        if let (Some(p), None) = (peer, &fdb5_note) {
            let froot = dir.join(format!("fdb-server-{r}"));
            let measured = start_fdb_server(&froot).and_then(|s| {
                fdb5_remote_gbps(p, &s, &dir.join("fdb-client"), fields, size, flush_every)
            });
            let _ = std::fs::remove_dir_all(&froot);
            let _ = std::fs::remove_dir_all(dir.join("fdb-client"));
            match measured {
                Ok(g) => fdb5 = Some(g),
                Err(e) => fdb5_note = Some(e),
            }
        }
        triples.push(json!({
            "raw_tcp_gbps": raw, "haar_remote_gbps": haar, "fdb5_remote_gbps": fdb5,
            "haar_vs_raw": haar / raw, "haar_vs_fdb5": fdb5.map(|f| haar / f),
        }));
    }
    // dist over 4 servers against dist over 1, adjacent pairs: the front-end must add no
    // bottleneck (2 cores cannot show scaling).
    let mut pairs = Vec::new();
    for r in 0..repeats.min(2) {
        eprintln!(
            "haar bench: dist 1 vs 4 servers {}/{}",
            r + 1,
            repeats.min(2)
        );
        let w = Workload {
            fields,
            size,
            flush_every,
        };
        let one =
            dist_gbps(&exe, dir, &token, &cfg, 1, w).map_err(|e| fail("dist over 1 server", e))?;
        let four =
            dist_gbps(&exe, dir, &token, &cfg, 4, w).map_err(|e| fail("dist over 4 servers", e))?;
        pairs.push(json!({"one_gbps": one, "four_gbps": four, "four_vs_one": four / one}));
    }
    let (server, root) = current.expect("at least one run");
    let lat = nb::notify_latency(&server.addr, &cfg, 200);
    drop(server);
    let _ = std::fs::remove_dir_all(root);
    let mut lat = lat.map_err(|e| fail("notification latency", e.to_string()))?;
    lat.sort();
    let us = |p: f64| {
        let i = ((lat.len() - 1) as f64 * p).round() as usize;
        lat[i].as_secs_f64() * 1e6
    };
    let col = |k: &str| -> Vec<f64> { triples.iter().filter_map(|t| t[k].as_f64()).collect() };
    let vs_raw = median(col("haar_vs_raw"));
    let vs_fdb5 = median(col("haar_vs_fdb5"));
    Ok(json!({
        "field_bytes": size, "fields": fields, "flush_every": flush_every,
        "runs": triples,
        "median": {
            "raw_tcp_gbps": median(col("raw_tcp_gbps")),
            "haar_remote_gbps": median(col("haar_remote_gbps")),
            "fdb5_remote_gbps": median(col("fdb5_remote_gbps")),
            "haar_vs_raw": vs_raw, "haar_vs_fdb5": vs_fdb5,
        },
        "targets": {"haar_vs_raw": TARGET_VS_RAW, "haar_vs_fdb5": TARGET_VS_FDB5},
        "notify_us": {"n": lat.len(), "p50": us(0.5), "p90": us(0.9), "max": us(1.0)},
        "dist": {
            "runs": pairs,
            "four_vs_one": median(pairs.iter().filter_map(|p| p["four_vs_one"].as_f64()).collect()),
        },
        "fdb5_note": fdb5_note,
    }))
}

/// Nodes the scaling model predicts for (NEXTGenIO's prototype had 32 nodes).
const MODEL_NODES: [f64; 4] = [1.0, 4.0, 16.0, 32.0];
/// Assumed per node: 100 Gb/s fabric (NEXTGenIO's Omni-Path) and 4 cores given to I/O.
const MODEL_NIC_GBPS: f64 = 12.5;
const MODEL_IO_CORES: f64 = 4.0;

/// A scaling model calibrated from this run. Every node runs a server over its pmem and
/// writers that spread fields over all N servers by rendezvous hashing (`placement: field`),
/// so a node sends and receives (N−1)/N of what its writers produce. Per node the write rate
/// W is bounded by the store (the local pmem archive rate measured here), by the fabric
/// (W·(N−1)/N ≤ NIC) and by CPU (W·c ≤ I/O cores, with c the core-seconds per GB of the
/// remote path: both ends and the kernel's TCP, measured here as all of this machine's cores
/// over the loopback rate — an upper bound). The 4-vs-1-server run shows the front-end adds no
/// shared bottleneck, so the aggregate is N·W.
pub fn scaling_model(n: &Value, store_gbps: Option<f64>) -> Value {
    let remote = n["median"]["haar_remote_gbps"].as_f64().unwrap_or(f64::NAN);
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as f64;
    let c = cores / remote;
    let store = store_gbps.unwrap_or(f64::NAN);
    let predict = |nodes: f64| {
        let fabric = if nodes > 1.0 {
            MODEL_NIC_GBPS * nodes / (nodes - 1.0)
        } else {
            f64::INFINITY
        };
        let per_node = store.min(fabric).min(MODEL_IO_CORES / c);
        json!({"nodes": nodes as u32, "per_node_gbps": per_node, "aggregate_gbps": per_node * nodes,
               "aggregate_gib_per_s": per_node * nodes * 1e9 / (1u64 << 30) as f64})
    };
    json!({
        "calibration": {"store_gbps": store, "remote_core_s_per_gb": c,
                        "cores_measured": cores, "remote_gbps_measured": remote},
        "assumed": {"nic_gbps": MODEL_NIC_GBPS, "io_cores_per_node": MODEL_IO_CORES},
        "four_vs_one_servers": n["dist"]["four_vs_one"],
        "predictions": MODEL_NODES.iter().map(|&k| predict(k)).collect::<Vec<_>>(),
        "paper": "NEXTGenIO FDB5 over 32 nodes: about 40 GiB/s (SC'19)",
    })
}

fn met(v: f64, target: f64) -> &'static str {
    if !v.is_finite() {
        "not measured"
    } else if v >= target {
        "met"
    } else {
        "NOT met"
    }
}

/// The section as text (also the Markdown report's body: it is a Markdown table).
pub fn render(n: &Value) -> String {
    if n.is_null() {
        return String::new();
    }
    let g = |v: &Value| v.as_f64().map_or("—".to_string(), |x| format!("{x:.2}"));
    let mut s = format!(
        "\n## Network: remote archive of {} × {} KiB fields over loopback (flush every {})\n\n\
         | run | raw TCP GB/s | haar remote GB/s | FDB5 fdb-server GB/s | haar ÷ raw | haar ÷ FDB5 |\n\
         |---|---|---|---|---|---|\n",
        n["fields"],
        n["field_bytes"].as_u64().unwrap_or(0) / 1024,
        n["flush_every"]
    );
    for (i, t) in n["runs"].as_array().into_iter().flatten().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            i + 1,
            g(&t["raw_tcp_gbps"]),
            g(&t["haar_remote_gbps"]),
            g(&t["fdb5_remote_gbps"]),
            g(&t["haar_vs_raw"]),
            g(&t["haar_vs_fdb5"])
        ));
    }
    let m = &n["median"];
    s.push_str(&format!(
        "| median | {} | {} | {} | {} | {} |\n\n",
        g(&m["raw_tcp_gbps"]),
        g(&m["haar_remote_gbps"]),
        g(&m["fdb5_remote_gbps"]),
        g(&m["haar_vs_raw"]),
        g(&m["haar_vs_fdb5"])
    ));
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    s.push_str(&format!(
        "- haar ÷ raw loopback TCP: {:.2} (target ≥ {:.2}: {})\n\
         - haar ÷ FDB5 `fdb-server` remote: {:.2} (target ≥ {:.1}: {})\n\
         - flush → notification in another process: p50 {:.0} µs, p90 {:.0} µs ({} samples; target p50 < 2000 µs: {})\n",
        f(&m["haar_vs_raw"]),
        TARGET_VS_RAW,
        met(f(&m["haar_vs_raw"]), TARGET_VS_RAW),
        f(&m["haar_vs_fdb5"]),
        TARGET_VS_FDB5,
        met(f(&m["haar_vs_fdb5"]), TARGET_VS_FDB5),
        f(&n["notify_us"]["p50"]),
        f(&n["notify_us"]["p90"]),
        n["notify_us"]["n"],
        met(2000.0 / f(&n["notify_us"]["p50"]), 1.0),
    ));
    let dist: Vec<String> = n["dist"]["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| format!("{} → {} GB/s", g(&p["one_gbps"]), g(&p["four_gbps"])))
        .collect();
    let four = f(&n["dist"]["four_vs_one"]);
    s.push_str(&format!(
        "- dist over 4 servers ÷ dist over 1 (placement by field, same fields): {:.2} (runs: {}; target ≥ 0.90: {})\n",
        four,
        dist.join(", "),
        met(four, 0.9)
    ));
    if let Some(note) = n["fdb5_note"].as_str() {
        s.push_str(&format!("- FDB5 remote not measured: {note}\n"));
    }
    s.push_str(
        "- Each run is an adjacent triple (raw TCP: one stream, 1 MiB writes; haar: `haar serve` \
         child on a fresh pmem pool; FDB5: `bench/fdb5_peer write` with `FDB5_PEER_REMOTE` \
         through `fdb-server` over a TOC root in the same directory), so the ratios compare \
         figures taken under the same load.\n",
    );
    let m = &n["scaling_model"];
    if let Some(preds) = m["predictions"].as_array() {
        let cal = &m["calibration"];
        s.push_str(&format!(
            "\n### Scaling model, calibrated from this run\n\n\
             Every node runs a server over its pmem and writers spreading fields over all N \
             servers (`placement: field`), so a node sends and receives (N−1)/N of what it \
             writes. Per node W ≤ store rate (local pmem archive measured here: {:.2} GB/s), \
             W·(N−1)/N ≤ fabric (assumed {:.1} GB/s, 100 Gb/s Omni-Path as on NEXTGenIO), \
             W·c ≤ I/O cores (assumed {:.0}; c = {:.2} core-s/GB, all {} cores of this machine \
             over the loopback remote rate {:.2} GB/s, an upper bound); the 4-vs-1-server \
             ratio shows no shared bottleneck, so the aggregate is N·W.\n\n\
             | nodes | per node GB/s | aggregate GB/s | aggregate GiB/s |\n|---|---|---|---|\n",
            f(&cal["store_gbps"]),
            f(&m["assumed"]["nic_gbps"]),
            f(&m["assumed"]["io_cores_per_node"]),
            f(&cal["remote_core_s_per_gb"]),
            cal["cores_measured"],
            f(&cal["remote_gbps_measured"]),
        ));
        for p in preds {
            s.push_str(&format!(
                "| {} | {:.2} | {:.1} | {:.1} |\n",
                p["nodes"],
                f(&p["per_node_gbps"]),
                f(&p["aggregate_gbps"]),
                f(&p["aggregate_gib_per_s"])
            ));
        }
        s.push_str(
            "\nFor comparison: NEXTGenIO's FDB5 over 32 nodes wrote about 40 GiB/s (SC'19).\n",
        );
    }
    s
}
