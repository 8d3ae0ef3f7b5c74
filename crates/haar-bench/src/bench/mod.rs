//! `haar bench`: the core store's performance figures, each beside a limit or peer measured in
//! the same run (raw copy bandwidth into a mapping; the real FDB5 through its C API when the
//! peer harness `bench/fdb5_peer` is built). Prints a table, saves JSON and, on request, a
//! Markdown report. Never a pass/fail test: targets are printed as ratios.
//!
//! This module owns the local store measurements (archive, retrieve, flush → visible) and the
//! report; the network section is [`net`], the GRIB section [`grib`]. None of them touches
//! the workloads ([`crate::hammer`], [`crate::workflow`]).

pub mod grib;
pub mod heap;
pub mod net;
pub mod reuse;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use haar_core::Key;
use haar_store::pmem::PmemOptions;
use haar_store::{Backend, FsyncPolicy, PmemBackend, PosixBackend, Store, StoreOptions};
use serde_json::{Value, json};

use crate::error::{Error, io};
use crate::stats::{monotonic_ns, quantile as pct};

/// What `haar bench` runs (the command line's options; `haar bench --help` explains each).
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory for the temporary stores (default: a new directory under /dev/shm, removed
    /// afterwards).
    pub dir: Option<PathBuf>,
    /// Fields per run at 800 KiB; the 64 KiB runs use 8 times as many.
    pub fields: usize,
    /// Flush after this many fields (and at the end).
    pub flush_every: usize,
    /// FDB5 C-API peer harness (built by bench/build-peer.sh). Default: target/fdb5_peer if it
    /// exists; `none` to skip the peer.
    pub fdb5_peer: Option<PathBuf>,
    /// Where to save every figure as JSON.
    pub json: PathBuf,
    /// Also write a Markdown report.
    pub markdown: Option<PathBuf>,
    /// A smaller run (a quarter of the fields, smaller raw-limit buffers).
    pub quick: bool,
    /// Only the GRIB section (`haar archive` beside `fdb-write`).
    pub grib_only: bool,
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The bench workload's key for field `i` (the FDB5 peer uses the same formula).
fn bench_key(i: usize) -> Key {
    Key::new()
        .with("class", "od")
        .with("expver", "0001")
        .with("stream", "oper")
        .with("date", "20261121")
        .with("time", "1200")
        .with("domain", "g")
        .with("type", "fc")
        .with("levtype", "pl")
        .with("levelist", (i % 100 + 1).to_string())
        .with("step", (i / 100).to_string())
        .with("param", "130")
}

/// Field `i`'s bytes: a shared body with the field number stamped after the `GRIB` magic.
fn stamp(body: &mut [u8], i: usize) {
    body[4..12].copy_from_slice(&(i as u64).to_le_bytes());
}

fn body(size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in v.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    v[..4].copy_from_slice(b"GRIB");
    let n = v.len();
    v[n - 4..].copy_from_slice(b"7777");
    v
}

fn fail(what: &str) -> impl Fn(haar_store::Error) -> Error + '_ {
    move |e| Error::Failed(format!("bench {what}: {e}"))
}

fn pmem_store(root: &Path, bytes: u64) -> Result<Store, Error> {
    let b = PmemBackend::open(
        root,
        PmemOptions {
            // Provisioned: the whole run fits without growth.
            initial_size: bytes + bytes / 8 + (64 << 20),
            ..PmemOptions::default()
        },
    )
    .map_err(fail("open pool"))?;
    Ok(Store::with_options(Arc::new(b), StoreOptions::default()))
}

fn posix_store(root: &Path) -> Result<Store, Error> {
    let b: Arc<dyn Backend> = Arc::new(
        PosixBackend::new(vec![root.to_path_buf()], FsyncPolicy::Always)
            .map_err(fail("open posix"))?,
    );
    Ok(Store::with_options(b, StoreOptions::default()))
}

/// Archive + flush every `flush_every`; returns seconds.
fn write_run(
    store: &mut Store,
    keys: &[Key],
    size: usize,
    flush_every: usize,
    label: &str,
) -> Result<f64, Error> {
    let mut data = body(size);
    let pb = crate::progress::bar(keys.len() as u64, label, false);
    let t = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        stamp(&mut data, i);
        store.archive(k, &data).map_err(fail("archive"))?;
        if (i + 1) % flush_every == 0 {
            store.flush().map_err(fail("flush"))?;
            pb.set_position(i as u64 + 1);
        }
    }
    store.flush().map_err(fail("flush"))?;
    let secs = t.elapsed().as_secs_f64();
    pb.finish_and_clear();
    Ok(secs)
}

/// Retrieve one field at a time with a fresh store handle, through the zero-copy
/// `retrieve_keys` (the store checks every byte's CRC-32C before lending them). Inside the
/// timing each field gets the checks the FDB5 peer makes (length, `GRIB`, field number,
/// `7777`); afterwards, untimed, every field is compared byte for byte. Returns (seconds,
/// per-field latencies in µs, sorted).
fn read_run(
    store: &Store,
    keys: &[Key],
    size: usize,
    label: &str,
) -> Result<(f64, Vec<f64>), Error> {
    let mut lat = Vec::with_capacity(keys.len());
    let pb = crate::progress::bar(keys.len() as u64, label, false);
    let mut total = 0.0;
    for (i, k) in keys.iter().enumerate() {
        let t = Instant::now();
        let mut ok = None;
        store
            .retrieve_keys(std::slice::from_ref(k), |_, b, _| {
                ok = Some(
                    b.len() == size
                        && b.starts_with(b"GRIB")
                        && b[4..12] == (i as u64).to_le_bytes()
                        && b.ends_with(b"7777"),
                );
                Ok(())
            })
            .map_err(fail("retrieve"))?;
        let dt = t.elapsed().as_secs_f64();
        total += dt;
        lat.push(dt * 1e6);
        if ok != Some(true) {
            return Err(Error::Failed(format!(
                "bench: field {k} read back wrong ({})",
                if ok.is_some() {
                    "bytes differ"
                } else {
                    "missing"
                }
            )));
        }
        if i % 64 == 0 {
            pb.set_position(i as u64);
        }
    }
    pb.finish_and_clear();
    let mut expect = body(size);
    let mut buf = Vec::with_capacity(size);
    for (i, k) in keys.iter().enumerate() {
        buf.clear();
        let found = read_into(store, k, &mut buf).map_err(fail("retrieve"))?;
        stamp(&mut expect, i);
        if !found || buf != expect {
            return Err(Error::Failed(format!(
                "bench: field {k} read back wrong on verification ({})",
                if found { "bytes differ" } else { "missing" }
            )));
        }
    }
    lat.sort_by(f64::total_cmp);
    Ok((total, lat))
}

fn run_peer(
    peer: &Path,
    mode: &str,
    root: &Path,
    n: usize,
    size: usize,
    flush_every: usize,
) -> Option<Value> {
    let out = Command::new(peer)
        .args([
            mode,
            &root.display().to_string(),
            &n.to_string(),
            &size.to_string(),
            &flush_every.to_string(),
        ])
        .stderr(Stdio::piped())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            serde_json::from_str(text.lines().last().unwrap_or("")).ok()
        }
        Ok(o) => {
            eprintln!(
                "haar bench: FDB5 peer {mode} failed: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            None
        }
        Err(e) => {
            eprintln!("haar bench: cannot run FDB5 peer {}: {e}", peer.display());
            None
        }
    }
}

/// Child side of the visibility measurement (`haar bench --visibility-reader ROOT N`, started
/// by the parent's measurement): spin on each key until it is visible, report the
/// monotonic time it was first seen.
pub fn visibility_reader(root: &Path, n: usize) -> Result<(), Error> {
    let b = PmemBackend::open(root, PmemOptions::default()).map_err(fail("open pool"))?;
    let store = Store::with_options(Arc::new(b), StoreOptions::default());
    let mut out = std::io::stdout().lock();
    let mut buf = Vec::new();
    writeln!(out, "ready").map_err(|e| Error::Failed(e.to_string()))?;
    out.flush().map_err(|e| Error::Failed(e.to_string()))?;
    for i in 0..n {
        let k = bench_key(1_000_000 + i);
        loop {
            buf.clear();
            if read_into(&store, &k, &mut buf).map_err(fail("retrieve"))? {
                break;
            }
            std::hint::spin_loop();
        }
        writeln!(out, "{i} {}", monotonic_ns()).map_err(|e| Error::Failed(e.to_string()))?;
        out.flush().map_err(|e| Error::Failed(e.to_string()))?;
    }
    Ok(())
}

/// Flush → visible in another process, in µs (sorted): writer here, reader a child process.
fn visibility(root: &Path, n: usize) -> Result<Vec<f64>, Error> {
    let exe = std::env::current_exe().map_err(io("bench: current_exe"))?;
    let mut store = pmem_store(root, (n * 65536) as u64)?;
    // The database must exist before the reader starts, so it does not race creation.
    store
        .archive(&bench_key(999_999), &body(4096))
        .map_err(fail("archive"))?;
    store.flush().map_err(fail("flush"))?;
    let mut child = Command::new(exe)
        .args([
            "bench",
            "--visibility-reader",
            &root.display().to_string(),
            &n.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(io("bench: spawn reader"))?;
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut next = || -> Result<String, Error> {
        lines
            .next()
            .ok_or_else(|| Error::Failed("bench: visibility reader exited early".to_string()))?
            .map_err(|e| Error::Failed(e.to_string()))
    };
    next()?; // ready
    let data = body(65536);
    let mut lat = Vec::with_capacity(n);
    let pb = crate::progress::bar(n as u64, "flush → visible (other process)", false);
    for i in 0..n {
        store
            .archive(&bench_key(1_000_000 + i), &data)
            .map_err(fail("archive"))?;
        store.flush().map_err(fail("flush"))?;
        let returned = monotonic_ns();
        let line = next()?;
        let seen: i128 = line
            .split(' ')
            .nth(1)
            .and_then(|t| t.parse().ok())
            .unwrap_or(returned);
        lat.push(((seen - returned).max(0) as f64) / 1000.0);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let _ = child.wait();
    lat.sort_by(f64::total_cmp);
    Ok(lat)
}

/// Runs the benchmark.
pub fn run(a: &Options) -> Result<(), Error> {
    if a.fields == 0 || a.flush_every == 0 {
        return Err(Error::Usage(
            "--fields and --flush-every must be at least 1".into(),
        ));
    }
    let base = match &a.dir {
        Some(d) => d.clone(),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    };
    let dir = base.join(format!("haar-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let result = run_in(a, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(a: &Options, dir: &Path) -> Result<(), Error> {
    let with_fdb5 = a.fdb5_peer != Some("none".into());
    if a.grib_only {
        return grib::alone(dir, a.quick, with_fdb5, &a.json, &machine_description());
    }
    let scale = if a.quick { 4 } else { 1 };
    let n_large = (a.fields / scale).max(1);
    let peer = match &a.fdb5_peer {
        Some(p) if p.as_os_str() == "none" => None,
        Some(p) => Some(p.clone()),
        None => Some(PathBuf::from("target/fdb5_peer")).filter(|p| p.exists()),
    };
    eprintln!(
        "haar bench: stores in {} (removed afterwards)",
        dir.display()
    );

    // 1. Raw limits on the same device, in the same run.
    let raw_bytes = if a.quick { 256 << 20 } else { 1 << 30 };
    let pb = crate::progress::bar(1, "raw copy limits", false);
    let raw = haar_persist::measure_raw_limits(dir, raw_bytes).map_err(io("bench: raw limits"))?;
    pb.finish_and_clear();

    let mut results = Vec::new();
    for (size, n) in [(800 * 1024usize, n_large), (64 * 1024, n_large * 8)] {
        let keys: Vec<Key> = (0..n).map(bench_key).collect();
        let bytes = (size * n) as f64;
        for backend in ["pmem", "posix"] {
            let root = dir.join(format!("{backend}-{size}"));
            let mut store = match backend {
                "pmem" => pmem_store(&root, (size * n) as u64)?,
                _ => posix_store(&root)?,
            };
            let label = format!("{backend} archive {} KiB", size / 1024);
            let w = write_run(&mut store, &keys, size, a.flush_every, &label)?;
            drop(store);
            let reader = match backend {
                "pmem" => pmem_store(&root, 0)?,
                _ => posix_store(&root)?,
            };
            let label = format!("{backend} retrieve {} KiB", size / 1024);
            let (r, lat) = read_run(&reader, &keys, size, &label)?;
            drop(reader);
            let _ = std::fs::remove_dir_all(&root);
            results.push(json!({
                "system": format!("haar-{backend}"), "size": size, "fields": n,
                "write": {"seconds": w, "gib_per_s": bytes / GIB / w, "fields_per_s": n as f64 / w},
                "read": {"seconds": r, "gib_per_s": bytes / GIB / r, "fields_per_s": n as f64 / r,
                         "p50_us": pct(&lat, 0.5), "p99_us": pct(&lat, 0.99)},
            }));
        }
        if let Some(peer) = &peer {
            let root = dir.join(format!("fdb5-{size}"));
            let pb = crate::progress::bar(1, &format!("FDB5 C API {} KiB", size / 1024), false);
            let w = run_peer(peer, "write", &root, n, size, a.flush_every);
            let r = w
                .as_ref()
                .and_then(|_| run_peer(peer, "read", &root, n, size, a.flush_every));
            pb.finish_and_clear();
            let _ = std::fs::remove_dir_all(&root);
            if let (Some(w), Some(r)) = (w, r) {
                results.push(json!({"system": "fdb5-c-api", "size": size, "fields": n, "write": w, "read": r}));
            }
        }
    }
    let vis_n = if a.quick { 200 } else { 1000 };
    let vis = visibility(&dir.join("visibility"), vis_n)?;
    let mut network = net::run(dir, n_large, a.flush_every, peer.as_deref(), a.quick)?;
    // The local pmem archive rate at 800 KiB calibrates the scaling model's store term.
    let store_gbps = results
        .iter()
        .find(|r| r["system"] == "haar-pmem" && r["size"] == 800 * 1024)
        .and_then(|r| r["write"]["gib_per_s"].as_f64())
        .map(|g| g * GIB / 1e9);
    network["scaling_model"] = net::scaling_model(&network, store_gbps);
    let grib = grib::run(dir, a.quick, with_fdb5)?;
    let space = reuse::run(dir, if a.quick { 256 << 20 } else { 1 << 30 })?;

    let machine = machine_description();
    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "machine": machine,
        "dir": dir.display().to_string(),
        "raw_limits": {
            "memcpy_gbs": raw.memcpy_gbs, "nt_copy_gbs": raw.nt_copy_gbs,
            "clwb_copy_gbs": raw.clwb_copy_gbs, "first_touch_gbs": raw.first_touch_gbs,
            "bytes": raw.bytes, "chunk": raw.chunk,
        },
        "results": results,
        "visibility_us": {"n": vis.len(), "p50": pct(&vis, 0.5), "p99": pct(&vis, 0.99), "max": pct(&vis, 1.0)},
        "flush_every": a.flush_every,
        "network": network,
        "grib_archive": grib,
        "space_reuse": space,
    });
    let text = render(&report) + &net::render(&report["network"]);
    print!("{text}");
    std::fs::write(
        &a.json,
        serde_json::to_string_pretty(&report).expect("json") + "\n",
    )
    .map_err(io(format!("cannot write {}", a.json.display())))?;
    eprintln!("haar bench: figures saved to {}", a.json.display());
    if let Some(md) = &a.markdown {
        std::fs::write(md, markdown(&report, &text))
            .map_err(io(format!("cannot write {}", md.display())))?;
        eprintln!("haar bench: report written to {}", md.display());
    }
    Ok(())
}

/// This machine in one line (CPU model, cores, memory, kernel), for reports.
pub fn machine_description() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string())
        })
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpu}, {cores} cores, {mem:.0} GiB RAM, Linux {}",
        kernel.trim()
    )
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// The human-readable table (also embedded in the Markdown report).
fn render(r: &Value) -> String {
    let raw = &r["raw_limits"];
    let nt = f(&raw["nt_copy_gbs"]) * 1e9 / GIB; // GiB/s
    let mut s = String::new();
    s.push_str(&format!(
        "machine: {}\n",
        r["machine"].as_str().unwrap_or("")
    ));
    s.push_str(&format!(
        "raw limits (same run, same device): memcpy {:.2} GB/s, non-temporal copy {:.2} GB/s, memcpy+CLWB {:.2} GB/s, first touch {:.2} GB/s\n\n",
        f(&raw["memcpy_gbs"]), f(&raw["nt_copy_gbs"]), f(&raw["clwb_copy_gbs"]), f(&raw["first_touch_gbs"])
    ));
    s.push_str("| system | field | fields | archive+flush GiB/s | fields/s | ÷ NT copy | ÷ FDB5 | retrieve GiB/s | fields/s | p50 µs | p99 µs | ÷ FDB5 |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let results = r["results"].as_array().cloned().unwrap_or_default();
    for x in &results {
        let size = x["size"].as_u64().unwrap_or(0);
        let peer = results
            .iter()
            .find(|p| p["system"] == "fdb5-c-api" && p["size"].as_u64() == Some(size));
        let ratio = |path: &str, what: &str| -> String {
            match peer {
                Some(p) if x["system"] != "fdb5-c-api" => {
                    format!("{:.1}×", f(&x[path][what]) / f(&p[path][what]))
                }
                _ => "–".into(),
            }
        };
        let wg = f(&x["write"]["gib_per_s"]);
        s.push_str(&format!(
            "| {} | {} KiB | {} | {:.2} | {:.0} | {} | {} | {:.2} | {:.0} | {:.0} | {:.0} | {} |\n",
            x["system"].as_str().unwrap_or(""),
            size / 1024,
            x["fields"],
            wg,
            f(&x["write"]["fields_per_s"]),
            if x["system"] == "fdb5-c-api" {
                "–".to_string()
            } else {
                format!("{:.0}%", 100.0 * wg / nt)
            },
            ratio("write", "fields_per_s"),
            f(&x["read"]["gib_per_s"]),
            f(&x["read"]["fields_per_s"]),
            f(&x["read"]["p50_us"]),
            f(&x["read"]["p99_us"]),
            ratio("read", "fields_per_s"),
        ));
    }
    if !results.iter().any(|p| p["system"] == "fdb5-c-api") {
        s.push_str("\n(FDB5 peer not run: build it with bench/build-peer.sh)\n");
    }
    let v = &r["visibility_us"];
    s.push_str(&format!(
        "\nflush returned → visible to a reader in another process (pmem, {} fields): p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs\n",
        v["n"], f(&v["p50"]), f(&v["p99"]), f(&v["max"])
    ));
    s.push_str(&grib::render(&r["grib_archive"]));
    s.push_str(&reuse::render(&r["space_reuse"]));
    s
}

fn markdown(r: &Value, table: &str) -> String {
    format!(
        "# haar benchmarks\n\nProduced by `{}` (flush every {} fields) on {}.\n\
         Every figure is measured in the same run as the limits and the peer beside it; runs on\n\
         this shared host vary by up to 2×, so compare ratios, not absolute numbers.\n\n\
         - *÷ NT copy*: archive+flush bandwidth into the pool as a share of the raw non-temporal copy\n\
           bandwidth into a pre-faulted mapping of the same directory.\n\
         - *÷ FDB5*: fields per second relative to the real FDB5 (Debian 5.10.8) through its C API\n\
           (`bench/fdb5_peer.c`), same keys, sizes, flush interval and directory.\n\
         - retrieve: one field per call (`Store::retrieve_keys`, zero-copy where the backend\n\
           lends its bytes, CRC-32C of every byte checked), a fresh store handle, the peer's\n\
           checks inside the timing; every field compared byte for byte after timing.\n\n{}\n",
        r["command"].as_str().unwrap_or("haar bench"),
        r["flush_every"],
        r["machine"].as_str().unwrap_or(""),
        table
    )
}

/// Appends the field of `key` to `out`; false when it is not flushed.
fn read_into(store: &Store, key: &Key, out: &mut Vec<u8>) -> haar_store::Result<bool> {
    let r = store.retrieve_keys(std::slice::from_ref(key), |_, b, _| {
        out.extend_from_slice(b);
        Ok(())
    })?;
    Ok(r.found == 1)
}
