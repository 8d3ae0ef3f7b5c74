//! `haar hammer`: the synthetic load of FDB5's `fdb-hammer`, done right. N processes write (or
//! read, or list) members × steps × levels × params fields, flushing at the end of every step,
//! through any front-end; pre-built templates keep encoding out of the timed path; reads are
//! verified by checksum, so a fast wrong answer fails.
//!
//! Owns the hammer's load, its timing and its report (docs/design.md §10.3); stores are opened
//! by [`crate::target`], workers run by [`crate::procs`]; must not know any store's insides.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use haar::OpenOptions;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{Error, io};
use crate::field::{self, Header};
use crate::layout::Layout;
use crate::procs::{Group, Reporter};
use crate::stats::{monotonic_ns, summary};
use crate::target;
use crate::worker::{self, WorkerSpec};

/// What the hammer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Archive every field, flush at the end of each step.
    Write,
    /// Retrieve every field one at a time and verify it.
    Read,
    /// List each member's fields per step and check the count.
    List,
}

/// What `haar hammer` runs (the command line's options; `haar hammer --help` explains each).
#[derive(Debug, Clone)]
pub struct Options {
    /// Write, read (verified) or list.
    pub mode: Mode,
    /// MARS class.
    pub class: String,
    /// Experiment version (4 characters).
    pub expver: String,
    /// Forecast date (YYYYMMDD).
    pub date: String,
    /// Ensemble members.
    pub members: u32,
    /// Output steps (6 hours apart); a flush after each.
    pub steps: u32,
    /// Model levels.
    pub levels: u32,
    /// Parameters per level (at most 12).
    pub params: u32,
    /// Bytes per field.
    pub field_size: usize,
    /// Worker processes (members are dealt out to them).
    pub procs: u32,
    /// Use the messages of this GRIB file as the fields' bytes (in turn) instead of templates.
    pub grib: Option<PathBuf>,
    /// Run against the real FDB5 (C API) with a store under this directory instead of haar.
    pub fdb5: Option<PathBuf>,
    /// Save every figure as JSON.
    pub json: Option<PathBuf>,
    /// Also measure the raw limits in this run, with scratch files in this directory, and
    /// report the hammer's throughput as a ratio to each.
    pub limits: Option<PathBuf>,
    /// No progress bar.
    pub quiet: bool,
    /// Write across 1..=N nodes of the virtual cluster, haar beside FDB5 on `/shared`
    /// (SC'19 Table 8, [`crate::table8`]); `members` and `procs` are then per node.
    pub vcluster: Option<usize>,
}

/// Raw limits measured beside a hammer run, GB/s (10^9 bytes/s).
fn raw_limits(dir: &std::path::Path) -> Result<Value, Error> {
    const BYTES: usize = 512 << 20;
    let io = |what: &str| io(format!("raw limits ({what}) in {}", dir.display()));
    let copy = haar_persist::measure_raw_limits(dir, BYTES).map_err(io("copy"))?;
    // write(2) of 1 MiB chunks into a new file, as a store's data file would be written.
    let path = dir.join(format!("haar-raw-write-{}", std::process::id()));
    let chunk = vec![0x5au8; 1 << 20];
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        let mut f = std::fs::File::create(&path).map_err(io("write"))?;
        for _ in 0..BYTES / chunk.len() {
            std::io::Write::write_all(&mut f, &chunk).map_err(io("write"))?;
        }
        drop(f);
        best = best.min(t.elapsed().as_secs_f64());
        std::fs::remove_file(&path).map_err(io("write"))?;
    }
    let tcp = (0..3)
        .filter_map(|_| crate::bench::net::measure::raw_loopback_gbps(BYTES).ok())
        .fold(0.0, f64::max);
    Ok(json!({
        "dir": dir.display().to_string(),
        "memcpy_gbs": copy.memcpy_gbs,
        "nt_copy_gbs": copy.nt_copy_gbs,
        "write_gbs": BYTES as f64 / best / 1e9,
        "loopback_tcp_gbs": tcp,
    }))
}

/// A hammer worker's instructions.
#[derive(Debug, Serialize, Deserialize)]
pub struct Spec {
    pub(crate) layout: Layout,
    pub(crate) mode: Mode,
    pub(crate) members: Vec<u32>,
    pub(crate) grib: Option<PathBuf>,
    pub(crate) fdb5: bool,
}

/// Runs `haar hammer`.
pub fn run(opts: &OpenOptions, a: &Options) -> Result<(), Error> {
    let layout = Layout {
        class: a.class.clone(),
        expver: a.expver.clone(),
        date: a.date.clone(),
        time: "0000".into(),
        members: a.members,
        steps: a.steps,
        step_hours: 6,
        levels: a.levels,
        params: a.params,
        field_size: a.field_size,
    };
    layout.check()?;
    if let Some(n) = a.vcluster {
        return crate::table8::run(opts, a, n, &layout);
    }
    if a.procs == 0 || a.procs > a.members {
        return Err(Error::Usage(format!(
            "--procs {} must be between 1 and --members ({})",
            a.procs, a.members
        )));
    }
    let (grib_sizes, grib_max) = match &a.grib {
        Some(p) => {
            let msgs = grib_messages(p)?;
            let mean = msgs.iter().map(Vec::len).sum::<usize>() as f64 / msgs.len() as f64;
            (Some(mean), msgs.iter().map(Vec::len).max().unwrap_or(0))
        }
        None => (None, 0),
    };
    crate::procs::install_interrupt_handler();
    let env = match &a.fdb5 {
        Some(dir) => crate::fdb5::setup_root(dir)?,
        None => Vec::new(),
    };
    let provisioned = if a.mode == Mode::Write && a.fdb5.is_none() {
        let t = Instant::now();
        provision_pool(opts, &layout, a.grib.as_ref().map(|_| grib_max))?
            .then(|| t.elapsed().as_secs_f64())
    } else {
        None
    };
    let globals = worker::globals(opts)?;
    let mut group = Group::new();
    for p in 0..a.procs {
        let members: Vec<u32> = (1..=a.members).filter(|m| (m - 1) % a.procs == p).collect();
        let spec = Spec {
            layout: layout.clone(),
            mode: a.mode,
            members,
            grib: a.grib.clone(),
            fdb5: a.fdb5.is_some(),
        };
        let mut cmd = worker::command(&globals, &WorkerSpec::Hammer(spec))?;
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        group.spawn(format!("hammer worker {p}"), cmd)?;
    }
    group.wait_ready(Duration::from_secs(300))?;
    let (results, wall) = go_and_collect(
        &mut group,
        layout.total_fields(),
        &format!("hammer {:?}", a.mode).to_lowercase(),
        a.quiet,
    )?;
    let mut report = aggregate(&layout, a, wall, &results, grib_sizes);
    if let Some(p) = provisioned {
        // Outside the timed region, but a cost all the same: say it, and what counting it gives.
        let bytes = report["bytes"].as_f64().unwrap_or(0.0);
        report["provision_s"] = json!(p);
        report["gib_per_s_with_provision"] = json!(bytes / (wall + p) / (1u64 << 30) as f64);
    }
    if let Some(dir) = &a.limits {
        let limits = raw_limits(dir)?;
        let gbs = report["bytes"].as_f64().unwrap_or(0.0) / wall / 1e9;
        let ratio = |k: &str| gbs / limits[k].as_f64().unwrap_or(f64::NAN);
        report["gb_per_s"] = json!(gbs);
        report["ratio_to"] = json!({
            "memcpy": ratio("memcpy_gbs"), "nt_copy": ratio("nt_copy_gbs"),
            "write": ratio("write_gbs"), "loopback_tcp": ratio("loopback_tcp_gbs"),
        });
        report["raw_limits"] = limits;
    }
    print_report(&report);
    if let Some(p) = provisioned {
        println!(
            "  pool provisioned before the barrier in {p:.2} s (not timed); counting it: {:.2} GiB/s",
            report["gib_per_s_with_provision"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report).expect("json"))
            .map_err(io(format!("cannot write {}", p.display())))?;
        eprintln!("haar: figures saved to {}", p.display());
    }
    Ok(())
}

/// Releases hammer workers that are ready, shows their `progress` lines on a bar of `fields`
/// and returns their results with the wall time from `go` to the last result, in seconds.
pub(crate) fn go_and_collect(
    group: &mut Group,
    fields: u64,
    title: &str,
    quiet: bool,
) -> Result<(Vec<Value>, f64), Error> {
    let bar = crate::progress::bar(fields, title, quiet);
    let t0 = Instant::now();
    group.go()?;
    let results = group.results(Duration::from_secs(3600), |_, line| {
        if let Some(n) = line.strip_prefix("progress ") {
            bar.inc(n.parse().unwrap_or(0));
        }
    })?;
    let wall = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    Ok((results, wall))
}

/// Provisions a local pmem pool for every byte the run will write (its file grown and its
/// pages allocated), as a real pmem namespace is created before use, so that the timed run
/// never grows the pool. Other targets need nothing.
/// Returns whether there was a pool to provision.
fn provision_pool(
    opts: &OpenOptions,
    layout: &Layout,
    grib_max: Option<usize>,
) -> Result<bool, Error> {
    if opts.servers.is_some() || opts.frontend()?.is_some() {
        return Ok(false);
    }
    let cfg = opts.config()?;
    if cfg.backend != haar_store::BackendKind::Pmem {
        return Ok(false);
    }
    let field = grib_max.unwrap_or(layout.field_size) as u64;
    let fields = layout.total_fields() * field.next_multiple_of(64);
    // Segment records: one per writer and step, a few hundred bytes per entry.
    let records = layout.total_fields() * 512 + (16 << 20);
    let root = cfg
        .roots
        .first()
        .ok_or_else(|| Error::Usage("no root for the pmem pool".into()))?;
    let pool = haar_store::PmemBackend::open(root, cfg.pmem_options())?;
    pool.provision(fields + records)?;
    Ok(true)
}

fn lat_summary(mut v: Vec<f64>) -> Value {
    let n = v.len();
    let (p50, p99, max) = summary(&mut v);
    json!({"count": n, "p50_us": p50, "p99_us": p99, "max_us": max})
}

fn collect(results: &[Value], what: &str) -> Vec<f64> {
    results
        .iter()
        .flat_map(|r| {
            r[what]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|x| x.as_f64())
        })
        .collect()
}

fn aggregate(
    layout: &Layout,
    a: &Options,
    wall: f64,
    results: &[Value],
    grib_mean_size: Option<f64>,
) -> Value {
    let fields: u64 = results.iter().filter_map(|r| r["fields"].as_u64()).sum();
    let bytes: u64 = results.iter().filter_map(|r| r["bytes"].as_u64()).sum();
    let verified: u64 = results.iter().filter_map(|r| r["verified"].as_u64()).sum();
    let target = results
        .first()
        .and_then(|r| r["target"].as_str())
        .unwrap_or("")
        .to_string();
    json!({
        "tool": "haar hammer",
        "version": env!("CARGO_PKG_VERSION"),
        "mode": a.mode,
        "target": target,
        "layout": layout,
        "grib": a.grib,
        "grib_mean_message_bytes": grib_mean_size,
        "procs": a.procs,
        "fields": fields,
        "bytes": bytes,
        "verified": verified,
        "seconds": wall,
        // From each worker's `go` to its last operation: the wall time above also holds the
        // start and the workers' exits (unmapping a pool, closing files).
        "worker_seconds": results.iter().map(|r| r["seconds"].as_f64()).collect::<Vec<_>>(),
        "gib_per_s": bytes as f64 / wall / (1u64 << 30) as f64,
        "fields_per_s": fields as f64 / wall,
        "op_latency": lat_summary(collect(results, "op_us")),
        "flush_latency": lat_summary(collect(results, "flush_us")),
    })
}

fn print_report(r: &Value) {
    let op = match r["mode"].as_str() {
        Some("write") => "archive",
        Some("read") => "retrieve",
        _ => "list",
    };
    println!(
        "hammer {} through {}: {} fields, {:.1} MiB in {:.3} s ({} process(es))",
        r["mode"].as_str().unwrap_or(""),
        r["target"].as_str().unwrap_or(""),
        r["fields"],
        r["bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
        r["seconds"].as_f64().unwrap_or(0.0),
        r["procs"],
    );
    println!(
        "  {:.3} GiB/s, {:.0} fields/s",
        r["gib_per_s"].as_f64().unwrap_or(0.0),
        r["fields_per_s"].as_f64().unwrap_or(0.0)
    );
    let l = &r["op_latency"];
    println!(
        "  {op:8} p50 {:>9.1} µs  p99 {:>9.1} µs  max {:>9.1} µs  ({} calls)",
        l["p50_us"].as_f64().unwrap_or(f64::NAN),
        l["p99_us"].as_f64().unwrap_or(f64::NAN),
        l["max_us"].as_f64().unwrap_or(f64::NAN),
        l["count"]
    );
    let l = &r["flush_latency"];
    if l["count"].as_u64().unwrap_or(0) > 0 {
        println!(
            "  flush    p50 {:>9.1} µs  p99 {:>9.1} µs  max {:>9.1} µs  ({} calls)",
            l["p50_us"].as_f64().unwrap_or(f64::NAN),
            l["p99_us"].as_f64().unwrap_or(f64::NAN),
            l["max_us"].as_f64().unwrap_or(f64::NAN),
            l["count"]
        );
    }
    if r["mode"] != "write" {
        println!(
            "  verified {} field(s): header, key and checksum",
            r["verified"]
        );
    }
    if let Some(l) = r["raw_limits"].as_object() {
        let g = |k: &str| l.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
        let q = |k: &str| r["ratio_to"][k].as_f64().unwrap_or(f64::NAN);
        println!(
            "  {:.2} GB/s = {:.0}% of memcpy ({:.2} GB/s), {:.0}% of NT copy ({:.2}), {:.0}% of write(2) ({:.2}), {:.0}% of loopback TCP ({:.2}), all measured now",
            r["gb_per_s"].as_f64().unwrap_or(0.0),
            100.0 * q("memcpy"),
            g("memcpy_gbs"),
            100.0 * q("nt_copy"),
            g("nt_copy_gbs"),
            100.0 * q("write"),
            g("write_gbs"),
            100.0 * q("loopback_tcp"),
            g("loopback_tcp_gbs")
        );
    }
}

fn grib_messages(path: &std::path::Path) -> Result<Vec<Vec<u8>>, Error> {
    let data = std::fs::read(path)
        .map_err(|e| Error::Usage(format!("cannot read {}: {e}", path.display())))?;
    let mut out = Vec::new();
    for m in haar_grib::messages(&data) {
        let m = m.map_err(|e| Error::Usage(format!("{}: {e}", path.display())))?;
        out.push(m.bytes.to_vec());
    }
    if out.is_empty() {
        return Err(Error::Usage(format!(
            "{} holds no GRIB message",
            path.display()
        )));
    }
    Ok(out)
}

/// The bytes fields are made of.
enum Source {
    /// Templates with a header stamped per field.
    Synthetic(Vec<(Vec<u8>, u64, u32)>),
    /// Real GRIB messages, used in turn.
    Grib(Vec<Vec<u8>>),
}

const SALT: u64 = 0x6861_6d6d_6572; // "hammer"
const MAX_TEMPLATES: u32 = 64;

impl Source {
    fn new(spec: &Spec) -> Result<Source, Error> {
        if let Some(p) = &spec.grib {
            return Ok(Source::Grib(grib_messages(p)?));
        }
        let n = spec.layout.fields_per_step().min(MAX_TEMPLATES);
        Ok(Source::Synthetic(
            (0..n)
                .map(|t| {
                    let seed = field::seed(SALT, 0, t);
                    let body = field::template(spec.layout.field_size, seed);
                    let crc = field::body_crc(&body);
                    (body, seed, crc)
                })
                .collect(),
        ))
    }

    /// Bytes of pool heap worker `spec` will use: its fields, 64-aligned as the pool
    /// allocates them, and a segment record per step (a few hundred bytes per entry).
    fn bytes_to_write(&self, spec: &Spec) -> u64 {
        let l = &spec.layout;
        let fields = (0..l.fields_per_step()).map(|f| match self {
            Source::Grib(msgs) => msgs[f as usize % msgs.len()].len(),
            Source::Synthetic(_) => l.field_size,
        });
        let per_step: u64 = fields.map(|n| (n as u64).next_multiple_of(64) + 512).sum();
        per_step * u64::from(l.steps) * spec.members.len() as u64
    }

    fn header(layout: &Layout, m: u32, s: u32, f: u32, seed: u64, crc: u32) -> Header {
        layout.member_header(m, s, f, 0.0, 1.0, seed, crc)
    }

    /// The bytes of member `m`'s field `f` at step `s`.
    fn field(&mut self, layout: &Layout, m: u32, s: u32, f: u32) -> &[u8] {
        match self {
            Source::Grib(msgs) => {
                let n = msgs.len();
                &msgs[f as usize % n]
            }
            Source::Synthetic(t) => {
                let n = t.len();
                let (body, seed, crc) = &mut t[f as usize % n];
                field::stamp(body, &Self::header(layout, m, s, f, *seed, *crc));
                body
            }
        }
    }

    /// Checks what a read returned for member `m`'s field `f` at step `s`.
    /// `crc`: the CRC-32C of `got` its store verified, if it keeps one.
    fn verify(
        &self,
        layout: &Layout,
        m: u32,
        s: u32,
        f: u32,
        got: &[u8],
        crc: Option<u32>,
    ) -> Result<(), String> {
        match self {
            Source::Grib(msgs) => {
                if got == msgs[f as usize % msgs.len()] {
                    Ok(())
                } else {
                    Err("bytes differ from the GRIB message archived".into())
                }
            }
            Source::Synthetic(t) => {
                let h = field::verify_with(got, crc)?;
                let (_, seed, crc) = &t[f as usize % t.len()];
                let want = Self::header(layout, m, s, f, *seed, *crc);
                if h != want {
                    return Err(format!(
                        "holds member {} step {} param {} level {}, not the field asked for",
                        h.member, h.step, h.param, h.level
                    ));
                }
                if got.len() != layout.field_size {
                    return Err(format!(
                        "{} bytes, expected {}",
                        got.len(),
                        layout.field_size
                    ));
                }
                Ok(())
            }
        }
    }
}

/// The worker side of `haar hammer`.
pub fn worker(opts: &OpenOptions, spec: Spec, mut rep: Reporter) -> Result<(), Error> {
    let mut source = Source::new(&spec)?;
    // Reserving and mapping pool space is set-up, like opening connections: before the
    // barrier. Reads and lists write nothing.
    let writes = (spec.mode == Mode::Write).then(|| source.bytes_to_write(&spec));
    let (mut store, _) = target::open(opts, spec.fdb5, writes)?;
    let l = spec.layout.clone();
    let per_step = l.fields_per_step();
    let (mut op_us, mut flush_us) = (Vec::new(), Vec::new());
    let (mut fields, mut bytes, mut verified) = (0u64, 0u64, 0u64);
    rep.ready_then_wait()?;
    let t0 = monotonic_ns();
    for s in 0..l.steps {
        let mut done = 0u64;
        for &m in &spec.members {
            match spec.mode {
                Mode::Write => {
                    for f in 0..per_step {
                        let key = l.key(m, s, f);
                        let data = source.field(&l, m, s, f);
                        let t = monotonic_ns();
                        store.archive(&key, data)?;
                        op_us.push((monotonic_ns() - t) as f64 / 1e3);
                        bytes += data.len() as u64;
                        fields += 1;
                        done += 1;
                    }
                }
                Mode::Read => {
                    for f in 0..per_step {
                        let key = l.key(m, s, f);
                        let t = monotonic_ns();
                        let mut got = 0usize;
                        let n =
                            target::retrieve(&*store, std::slice::from_ref(&key), |_, d, crc| {
                                got = d.len();
                                source
                                    .verify(&l, m, s, f, d, crc)
                                    .map_err(|e| Error::Failed(format!("field {key}: {e}")))
                            })?;
                        op_us.push((monotonic_ns() - t) as f64 / 1e3);
                        if n != 1 {
                            return Err(Error::Missing(format!(
                                "field {key} is missing from {} (was it written with the same --members/--steps/--levels/--params?)",
                                store.describe()
                            )));
                        }
                        bytes += got as u64;
                        fields += 1;
                        verified += 1;
                        done += 1;
                    }
                }
                Mode::List => {
                    let req = l.request("pf", s, None).replace(
                        &format!("number=1/to/{}", l.members),
                        &format!("number={m}"),
                    );
                    let t = monotonic_ns();
                    let n = store.list(&target::request(&req)?)?.len();
                    op_us.push((monotonic_ns() - t) as f64 / 1e3);
                    if n != per_step as usize {
                        return Err(Error::Missing(format!(
                            "list {req}: {n} fields, expected {per_step}"
                        )));
                    }
                    fields += n as u64;
                    verified += n as u64;
                    done += n as u64;
                }
            }
        }
        if spec.mode == Mode::Write {
            let t = monotonic_ns();
            store.flush()?;
            flush_us.push((monotonic_ns() - t) as f64 / 1e3);
        }
        rep.say(&format!("progress {done}"))?;
    }
    let secs = (monotonic_ns() - t0) as f64 / 1e9;
    let result = json!({
        "target": store.describe(), "fields": fields, "bytes": bytes, "verified": verified,
        "seconds": secs, "op_us": op_us, "flush_us": flush_us,
    });
    rep.say(&format!("result {result}"))
}
