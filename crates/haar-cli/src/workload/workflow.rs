//! `haar workflow`: the IFS ensemble and its product generation, in miniature (the SC'19
//! paper's Table 9 experiment). M producer processes (members) write S steps of F fields,
//! flushing per step; C consumer processes wait for each step to be complete — a notification
//! from the servers for haar, polling where the store has none — read every member's fields,
//! compute the ensemble mean and standard deviation point by point and archive them. Each
//! backend runs twice, producers alone and with consumers, and the run reports the producers'
//! slowdown and each step's delivery latency (last member's flush → products flushed), then
//! checks every product against values recomputed from the members' seeds.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::field::{self, Header, Kind};
use super::hammer::{open_target, worker_command};
use super::procs::{Group, Reporter, Servers};
use super::{Layout, WorkerSpec, monotonic_ns, parse_size, quantile};
use crate::Failure;
use crate::args::Cli;

const SALT: u64 = 0x0077_666c_6f77; // "wflow"
const GIB: f64 = (1u64 << 30) as f64;

/// Options of `haar workflow`.
#[derive(Debug, Args)]
#[command(after_long_help = "\
WHAT RUNS
    For each backend, twice (producers alone, then with consumers), on fresh stores:
      shared-posix  one POSIX directory shared by every process (the parallel-file-system
                    baseline); consumers poll it for complete steps every 10 ms
      haar          haar `dist` over --nodes local `haar serve` processes with pmem pools
                    (or the servers of --servers); fields spread by rendezvous hashing,
                    consumers woken by step-complete notifications
      fdb5          the real FDB5 (POSIX TOC, C API) where installed; consumers poll
    Producers sleep --compute-ms before each step (the model's computation, on cores this
    machine does not have), archive their F fields and flush. Consumers share the fields of
    each step, read all members of each, and archive the mean (type=em) and standard
    deviation (type=es). Afterwards every product is checked against values recomputed from
    the members' seeds, and every member field must have been delivered exactly once.

OUTPUT
    A table shaped like SC'19 Table 9, a PNG plot (--plot), and with --json every figure:
    producer wall and I/O times alone and with consumers, slowdowns, each step's delivery
    latency, volumes, polls. Delivery latency is also given as a ratio to an in-memory floor
    measured first in the same run: the consumers' computation alone for one step (every
    member of every field reduced, both products packed, on --consumers threads) with the
    fields already in memory and no store. No store can deliver a step faster than that on
    this machine; the ratio is what storage and transport add.

EXAMPLES
    haar workflow                                        # the embedded default, ~1 GiB per run
    haar workflow --members 10 --levels 20 --params 5 --steps 4   # 10 x 100 fields per step
    haar --servers n1:7000,n2:7000 --token-file t workflow --backends haar")]
pub struct WorkflowArgs {
    /// Ensemble members (producer processes).
    #[arg(long, default_value_t = 10)]
    pub members: u32,
    /// Output steps per member.
    #[arg(long, default_value_t = 3)]
    pub steps: u32,
    /// Model levels per step.
    #[arg(long, default_value_t = 8)]
    pub levels: u32,
    /// Parameters per level (fields per step = levels x params).
    #[arg(long, default_value_t = 5)]
    pub params: u32,
    /// Bytes per field (ENS: 804KiB; HRES: 3.2MiB).
    #[arg(long, default_value = "804KiB", value_parser = parse_size)]
    pub field_size: usize,
    /// Product-generation processes.
    #[arg(long, default_value_t = 2)]
    pub consumers: u32,
    /// Milliseconds each producer waits before each step (model time between outputs).
    #[arg(long, default_value_t = 300)]
    pub compute_ms: u64,
    /// Backends to compare, in order: shared-posix, haar, fdb5 (skipped with a note where
    /// FDB5 is not installed).
    #[arg(long, value_delimiter = ',', default_value = "shared-posix,haar,fdb5")]
    pub backends: Vec<String>,
    /// Local servers to start for `haar` (ignored with --servers).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Where the servers' pmem pools go (a DAX mount on real persistent memory).
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub pmem_dir: PathBuf,
    /// Where the shared POSIX directory and FDB5's root go (the parallel file system).
    #[arg(long, value_name = "DIR", default_value = "/var/tmp")]
    pub shared_dir: PathBuf,
    /// Consumers read each member's field as soon as it is flushed (per-field notifications,
    /// haar only) instead of waiting for the whole step; products still complete per step.
    #[arg(long)]
    pub streaming: bool,
    /// Skip the producers-alone runs (no slowdown figure).
    #[arg(long)]
    pub only_with_consumers: bool,
    /// Seconds a consumer waits for a step before failing.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Save every figure as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Save the plot (PNG).
    #[arg(long, value_name = "FILE", default_value = "haar-workflow.png")]
    pub plot: PathBuf,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
}

/// A producer's instructions.
#[derive(Debug, Serialize, Deserialize)]
pub struct ProducerSpec {
    layout: Layout,
    member: u32,
    compute_ms: u64,
    fdb5: bool,
}

/// A consumer's (or, with `verify`, the product checker's) instructions.
#[derive(Debug, Serialize, Deserialize)]
pub struct ConsumerSpec {
    layout: Layout,
    index: u32,
    consumers: u32,
    timeout: u64,
    fdb5: bool,
    verify: bool,
    /// Read each member field as soon as it is flushed (haar's notifications).
    #[serde(default)]
    streaming: bool,
}

/// Member `m`'s reference value for field `f` at step `s`: what differs between members
/// besides their bodies, like GRIB's reference value.
fn reference(m: u32, s: u32, f: u32) -> f64 {
    let delta = (haar_core::rendezvous::splitmix64(u64::from(m)) % 2001) as f64 / 100.0 - 10.0;
    250.0 + 2.0 * f64::from(s) + 0.5 * f64::from(f) + delta
}

const SCALE: f64 = 0.001;

fn member_header(l: &Layout, m: u32, s: u32, f: u32, seed: u64, crc: u32) -> Header {
    l.member_header(m, s, f, reference(m, s, f), SCALE, seed, crc)
}

/// Bytes of a product field for `l` (16-bit packed, as the members).
fn product_size(l: &Layout) -> usize {
    field::HEADER + 2 * field::nvalues16(l.field_size) as usize
}

/// The producer process.
pub fn producer(cli: &Cli, spec: ProducerSpec, mut rep: Reporter) -> Result<(), Failure> {
    let l = &spec.layout;
    let mut target = open_target(cli, spec.fdb5, None)?;
    let mut templates: Vec<(Vec<u8>, u64, u32)> = (0..l.fields_per_step())
        .map(|f| {
            let seed = field::seed(SALT, spec.member, f);
            let t = field::template(l.field_size, seed);
            let crc = field::body_crc(&t);
            (t, seed, crc)
        })
        .collect();
    rep.ready_then_wait()?;
    let t0 = monotonic_ns();
    let mut io_ns = 0i128;
    let mut bytes = 0u64;
    for s in 0..l.steps {
        if spec.compute_ms > 0 {
            std::thread::sleep(Duration::from_millis(spec.compute_ms));
        }
        let t = monotonic_ns();
        for (f, (buf, seed, crc)) in templates.iter_mut().enumerate() {
            let f = f as u32;
            field::stamp(buf, &member_header(l, spec.member, s, f, *seed, *crc));
            target.archive(&l.key(spec.member, s, f), buf)?;
            bytes += buf.len() as u64;
        }
        target.flush()?;
        let done = monotonic_ns();
        io_ns += done - t;
        rep.say(&format!("flushed {s} {done}"))?;
    }
    let wall = (monotonic_ns() - t0) as f64 / 1e9;
    let r = json!({"wall_s": wall, "io_s": io_ns as f64 / 1e9, "bytes": bytes,
                   "fields": l.steps * l.fields_per_step()});
    rep.say(&format!("result {r}"))
}

/// The consumer process: per step, wait for completion, then for each of its fields read all
/// members, verify them, and archive mean and standard deviation. With `verify`, the checker:
/// reads every product and compares it with values recomputed from the seeds.
pub fn consumer(cli: &Cli, spec: ConsumerSpec, mut rep: Reporter) -> Result<(), Failure> {
    let l = &spec.layout;
    let mut target = open_target(cli, spec.fdb5, None)?;
    if spec.verify {
        return verify_products(l, target.as_mut(), rep);
    }
    let n = field::nvalues16(l.field_size) as usize;
    if spec.streaming
        && let Some(stream) = target.watch(&l.request_all_steps())?
    {
        return consumer_streaming(l, &spec, target.as_mut(), stream, rep);
    }
    let mut bufs: Vec<(Vec<u8>, Header)> = Vec::new();
    rep.ready_then_wait()?;
    let mut delivered = 0u64;
    let mut polls_total = 0u64;
    let mine: Vec<u32> = (0..l.fields_per_step())
        .filter(|f| f % spec.consumers == spec.index)
        .collect();
    // Where a consumer's time goes, in ns: waiting, reading (+checking), computing, writing.
    let mut spent = [0i128; 4];
    for s in 0..l.steps {
        let t_wait = monotonic_ns();
        let all_keys: Vec<_> = (1..=l.members)
            .flat_map(|m| (0..l.fields_per_step()).map(move |f| (m, f)))
            .map(|(m, f)| l.key(m, s, f))
            .collect();
        let polls = target.wait(
            &l.request("pf", s, None),
            &all_keys,
            Duration::from_secs(spec.timeout),
        )?;
        polls_total += polls;
        let triggered = monotonic_ns();
        spent[0] += triggered - t_wait;
        rep.say(&format!("triggered {s} {triggered}"))?;
        let mut step_delivered = 0u64;
        for &f in &mine {
            let t_read = monotonic_ns();
            let keys: Vec<_> = (1..=l.members).map(|m| l.key(m, s, f)).collect();
            let mut seen = vec![false; l.members as usize + 1];
            let req = l.request("pf", s, Some(f));
            let mut got_fields = 0;
            target.retrieve(&req, &keys, &mut |key, d| {
                let h = check_member(l, key, d, s, f, &mut seen)?;
                if bufs.len() == got_fields {
                    bufs.push((Vec::new(), h));
                }
                let b = &mut bufs[got_fields];
                b.0.clear();
                b.0.extend_from_slice(d);
                b.1 = h;
                got_fields += 1;
                Ok(())
            })?;
            let t_compute = monotonic_ns();
            spent[1] += t_compute - t_read;
            let got = seen.iter().filter(|x| **x).count() as u64;
            if got != u64::from(l.members) {
                return Err(Failure::missing(format!(
                    "step {s} said complete, but {req} gave {got} of {} members",
                    l.members
                )));
            }
            step_delivered += got;
            let members: Vec<(&[u8], Header)> = bufs[..got_fields]
                .iter()
                .map(|(b, h)| (&b[..], *h))
                .collect();
            let stats = field::ensemble_stats(&members, n);
            let t_write = monotonic_ns();
            spent[2] += t_write - t_compute;
            write_products(target.as_mut(), l, s, f, stats)?;
            spent[3] += monotonic_ns() - t_write;
        }
        let t_flush = monotonic_ns();
        target.flush()?;
        spent[3] += monotonic_ns() - t_flush;
        delivered += step_delivered;
        rep.say(&format!(
            "product {s} {} {step_delivered} {polls}",
            monotonic_ns()
        ))?;
    }
    let secs = |ns: i128| ns as f64 / 1e9;
    let r = json!({"delivered": delivered, "products": 2 * mine.len() as u64 * u64::from(l.steps),
                   "polls": polls_total, "wait_s": secs(spent[0]), "read_s": secs(spent[1]),
                   "compute_s": secs(spent[2]), "write_s": secs(spent[3])});
    rep.say(&format!("result {r}"))
}

/// Checks a retrieved member field against the key it came under (member `number` of step
/// `s`, field `f`), once per member; returns its header.
fn check_member(
    l: &Layout,
    key: &haar_core::Key,
    d: &[u8],
    s: u32,
    f: u32,
    seen: &mut [bool],
) -> Result<Header, Failure> {
    let h = field::verify(d).map_err(|e| Failure::io(format!("field {key}: {e}")))?;
    let number: u32 = key.get("number").and_then(|v| v.parse().ok()).unwrap_or(0);
    if h.kind != Kind::Member
        || h.member != number
        || h.step != s
        || (h.param, h.level) != l.field(f)
    {
        return Err(Failure::io(format!(
            "field {key} holds member {} step {} param {} level {}",
            h.member, h.step, h.param, h.level
        )));
    }
    if number == 0 || number > l.members || seen[number as usize] {
        return Err(Failure::io(format!(
            "field {key} delivered twice or not asked for"
        )));
    }
    seen[number as usize] = true;
    Ok(h)
}

/// Archives the ensemble mean and standard deviation of field `f` at step `s`.
fn write_products(
    target: &mut dyn super::target::Target,
    l: &Layout,
    s: u32,
    f: u32,
    (mean, sd): (Vec<f32>, Vec<f32>),
) -> Result<(), Failure> {
    let psize = product_size(l);
    let (param, level) = l.field(f);
    let base = Header {
        bits: 32,
        member: 0,
        step: s,
        param,
        level,
        reference: 0.0,
        scale: 1.0,
        nvalues: 0,
        kind: Kind::Mean,
        seed: 0,
        body_crc: 0,
    };
    let mean = field::product(psize, base, &mean);
    let spread = field::product(
        psize,
        Header {
            kind: Kind::Spread,
            ..base
        },
        &sd,
    );
    target.archive(&l.product_key("em", s, f), &mean)?;
    target.archive(&l.product_key("es", s, f), &spread)
}

/// A field's members read so far (bytes and header) and which numbers they are.
type Arrived = (Vec<(Vec<u8>, Header)>, Vec<bool>);

/// One step's state in a streaming consumer.
struct StepState {
    /// Member fields of the step notified so far (all fields, not only this consumer's).
    notified: Vec<bool>,
    left: usize,
    /// This consumer's fields: running sums and which members arrived.
    acc: std::collections::HashMap<u32, Arrived>,
    mine_left: usize,
    triggered: Option<i128>,
}

/// The streaming consumer: fed by per-field flush notifications, it reads and accumulates each
/// member's field as soon as it is flushed, so when a step completes only the last member's
/// fields remain to be read. Steps complete (and are reported) in order.
fn consumer_streaming(
    l: &Layout,
    spec: &ConsumerSpec,
    target: &mut dyn super::target::Target,
    stream: super::target::KeyStream,
    mut rep: Reporter,
) -> Result<(), Failure> {
    let n = field::nvalues16(l.field_size) as usize;
    let per_step = l.fields_per_step() as usize;
    let members = l.members as usize;
    let mine: Vec<u32> = (0..l.fields_per_step())
        .filter(|f| f % spec.consumers == spec.index)
        .collect();
    let mut steps: Vec<StepState> = (0..l.steps)
        .map(|_| StepState {
            notified: vec![false; members * per_step],
            left: members * per_step,
            acc: std::collections::HashMap::new(),
            mine_left: mine.len(),
            triggered: None,
        })
        .collect();
    rep.ready_then_wait()?;
    let (mut delivered, mut next) = (0u64, 0u32);
    let mut spent = [0i128; 4];
    let mut t_idle = monotonic_ns();
    for key in stream {
        let key = key?;
        spent[0] += monotonic_ns() - t_idle;
        let num = |k: &str| key.get(k).and_then(|v| v.parse::<u32>().ok());
        let (Some(step), Some(m), Some(level), Some(param)) =
            (num("step"), num("number"), num("levelist"), num("param"))
        else {
            return Err(Failure::io(format!(
                "notified of {key}, which is not a member field of this run"
            )));
        };
        let (s, f) = match (step % l.step_hours.max(1) == 0).then(|| step / l.step_hours.max(1)) {
            Some(s) if s < l.steps && (1..=l.members).contains(&m) => {
                match l.field_index(param, level) {
                    Some(f) => (s, f),
                    None => return Err(Failure::io(format!("notified of {key}, not in this run"))),
                }
            }
            _ => return Err(Failure::io(format!("notified of {key}, not in this run"))),
        };
        let st = &mut steps[s as usize];
        let slot = (m as usize - 1) * per_step + f as usize;
        if st.notified[slot] {
            return Err(Failure::io(format!("notified twice of {key}")));
        }
        st.notified[slot] = true;
        st.left -= 1;
        if st.left == 0 {
            st.triggered = Some(monotonic_ns());
        }
        if f % spec.consumers == spec.index {
            let t_read = monotonic_ns();
            let (bufs, seen) = st
                .acc
                .entry(f)
                .or_insert_with(|| (Vec::with_capacity(members), vec![false; members + 1]));
            let want = l.key(m, s, f);
            let found = target.retrieve(
                &want.to_string(),
                std::slice::from_ref(&want),
                &mut |k, d| {
                    let h = check_member(l, k, d, s, f, seen)?;
                    bufs.push((d.to_vec(), h));
                    Ok(())
                },
            )?;
            if found != 1 {
                return Err(Failure::missing(format!(
                    "{want} was notified but cannot be read"
                )));
            }
            delivered += 1;
            let t_compute = monotonic_ns();
            spent[1] += t_compute - t_read;
            if bufs.len() == members {
                let (bufs, _) = st.acc.remove(&f).expect("present");
                let all: Vec<(&[u8], Header)> = bufs.iter().map(|(b, h)| (&b[..], *h)).collect();
                let stats = field::ensemble_stats(&all, n);
                let t_write = monotonic_ns();
                spent[2] += t_write - t_compute;
                write_products(target, l, s, f, stats)?;
                st.mine_left -= 1;
                spent[3] += monotonic_ns() - t_write;
            }
        }
        // Finish every step that is complete, in order.
        while next < l.steps {
            let st = &steps[next as usize];
            let Some(triggered) = st.triggered else { break };
            if st.mine_left != 0 {
                break;
            }
            let t = monotonic_ns();
            target.flush()?;
            spent[3] += monotonic_ns() - t;
            rep.say(&format!("triggered {next} {triggered}"))?;
            rep.say(&format!(
                "product {next} {} {} 0",
                monotonic_ns(),
                mine.len() * members
            ))?;
            next += 1;
        }
        if next == l.steps {
            break;
        }
        t_idle = monotonic_ns();
    }
    if next != l.steps {
        return Err(Failure::io(format!(
            "the notification stream ended at step {next} of {}",
            l.steps
        )));
    }
    let secs = |ns: i128| ns as f64 / 1e9;
    let r = json!({"delivered": delivered, "products": 2 * mine.len() as u64 * u64::from(l.steps),
                   "polls": 0, "wait_s": secs(spent[0]), "read_s": secs(spent[1]),
                   "compute_s": secs(spent[2]), "write_s": secs(spent[3])});
    rep.say(&format!("result {r}"))
}

/// Sample points checked per product (all when the field is smaller).
const CHECK_POINTS: usize = 2048;

fn verify_products(
    l: &Layout,
    target: &mut dyn super::target::Target,
    mut rep: Reporter,
) -> Result<(), Failure> {
    rep.ready_then_wait()?;
    let n = field::nvalues16(l.field_size) as usize;
    let stride = (n / CHECK_POINTS).max(1);
    let points: Vec<usize> = (0..n).step_by(stride).chain([n - 1]).collect();
    let (mut products, mut values) = (0u64, 0u64);
    for s in 0..l.steps {
        for f in 0..l.fields_per_step() {
            // Expected mean and standard deviation at the sample points, two-pass in f64.
            let seeds: Vec<u64> = (1..=l.members).map(|m| field::seed(SALT, m, f)).collect();
            let expect: Vec<(f64, f64)> = points
                .iter()
                .map(|&i| {
                    let v: Vec<f64> = (1..=l.members)
                        .zip(&seeds)
                        .map(|(m, &sd)| {
                            reference(m, s, f) + SCALE * f64::from(field::packed(sd, i as u32))
                        })
                        .collect();
                    let mean = v.iter().sum::<f64>() / v.len() as f64;
                    let var =
                        v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
                    (mean, var.sqrt())
                })
                .collect();
            for (kind, which) in [("em", Kind::Mean), ("es", Kind::Spread)] {
                let key = l.product_key(kind, s, f);
                let req = key.to_string();
                let mut found = false;
                target.retrieve(&req, std::slice::from_ref(&key), &mut |_, d| {
                    found = true;
                    check_product(d, which, s, n, &points, &expect)
                        .map_err(|e| Failure::io(format!("product {key}: {e}")))?;
                    values += points.len() as u64;
                    Ok(())
                })?;
                if !found {
                    return Err(Failure::missing(format!("product {key} is missing")));
                }
                products += 1;
            }
        }
    }
    let r = json!({"products": products, "values_checked": values});
    rep.say(&format!("result {r}"))
}

/// Checks a product field of `which` kind for step `s` with `n` values against the expected
/// (mean, standard deviation) at `points`.
fn check_product(
    d: &[u8],
    which: Kind,
    s: u32,
    n: usize,
    points: &[usize],
    expect: &[(f64, f64)],
) -> Result<(), String> {
    let h = field::verify(d)?;
    if h.kind != which || h.nvalues as usize != n || h.step != s {
        return Err(format!(
            "header says {:?} step {} with {} values",
            h.kind, h.step, h.nvalues
        ));
    }
    let wants = || {
        expect
            .iter()
            .map(move |&(mean, sd)| if which == Kind::Mean { mean } else { sd })
    };
    // A packing step coarser than the samples' range allows would hide errors.
    let (lo, hi) = wants().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if !(h.scale >= 0.0 && h.scale <= 2.0 * (hi - lo) / 65535.0 + 1e-6) {
        return Err(format!(
            "packing scale {} does not fit values {lo}..{hi}",
            h.scale
        ));
    }
    for (&i, want) in points.iter().zip(wants()) {
        let got = field::value(d, &h, i);
        // Packing is exact to half a scale step; the reduction to f32's.
        if (got - want).abs() > h.scale / 2.0 + 1e-3 + 1e-5 * want.abs() {
            return Err(format!(
                "value {i} is {got}, recomputed from the members' seeds {want}"
            ));
        }
    }
    Ok(())
}

/// A backend of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    SharedPosix,
    Haar,
    Fdb5,
}

impl Backend {
    fn parse(s: &str) -> Result<Backend, Failure> {
        match s.trim() {
            "shared-posix" | "posix" => Ok(Backend::SharedPosix),
            "haar" | "dist" | "pmem" => Ok(Backend::Haar),
            "fdb5" => Ok(Backend::Fdb5),
            other => Err(Failure::usage(format!(
                "unknown backend {other:?} in --backends: use shared-posix, haar, fdb5"
            ))),
        }
    }
    fn id(self) -> &'static str {
        match self {
            Backend::SharedPosix => "shared-posix",
            Backend::Haar => "haar",
            Backend::Fdb5 => "fdb5",
        }
    }
}

/// One run's figures.
#[derive(Debug, Default, Clone, Serialize)]
struct RunFigures {
    consumers: u32,
    producer_wall_s: f64,
    producer_io_s: f64,
    bytes: u64,
    delivered: u64,
    polls: u64,
    /// Per step: last member's flush → products flushed.
    step_latency_ms: Vec<f64>,
    /// Per step: last member's flush → the last consumer knows the step is complete.
    trigger_latency_ms: Vec<f64>,
    products_checked: u64,
    values_checked: u64,
    /// Consumers' time (summed over consumers): waiting, reading, computing, writing.
    consumer_wait_s: f64,
    consumer_read_s: f64,
    consumer_compute_s: f64,
    consumer_write_s: f64,
}

struct Prepared {
    globals: Vec<OsString>,
    env: Vec<(String, String)>,
    fdb5: bool,
    describe: String,
    _servers: Option<Servers>,
    _dir: tempfile::TempDir,
}

fn prepare(
    cli: &Cli,
    a: &WorkflowArgs,
    b: Backend,
    l: &Layout,
    label: &str,
) -> Result<Prepared, Failure> {
    let mk = |base: &Path| {
        tempfile::Builder::new()
            .prefix(&format!("haar-workflow-{}-{label}-", b.id()))
            .tempdir_in(base)
            .map_err(|e| {
                Failure::io(format!(
                    "cannot create a directory in {}: {e}",
                    base.display()
                ))
            })
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
            let env = super::fdb5::setup_root(dir.path())?;
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
            if let Some(s) = &cli.servers {
                let mut globals = super::hammer::globals(cli);
                globals.retain(|g| g != "--root" && g != "--backend");
                return Ok(Prepared {
                    globals,
                    env: Vec::new(),
                    fdb5: false,
                    describe: format!("haar dist over {s}"),
                    _servers: None,
                    _dir: dir,
                });
            }
            let volume = l.total_bytes()
                + 2 * u64::from(l.steps) * u64::from(l.fields_per_step()) * product_size(l) as u64;
            let per_node = volume * cli.replicas as u64 / a.nodes as u64;
            let pool = per_node + per_node / 3 + (64 << 20);
            let servers = Servers::start(a.nodes, dir.path(), "pmem", Some(pool), None)?;
            let config = dir.path().join("dist.yaml");
            std::fs::write(&config, servers.dist_config(cli.replicas, "field"))
                .map_err(|e| Failure::io(format!("cannot write {}: {e}", config.display())))?;
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

fn run_once(
    a: &WorkflowArgs,
    p: &Prepared,
    l: &Layout,
    consumers: u32,
    title: &str,
) -> Result<RunFigures, Failure> {
    let mut group = Group::new();
    let spawn = |group: &mut Group, name: String, spec: WorkerSpec| -> Result<(), Failure> {
        let mut cmd = worker_command(&p.globals, &spec)?;
        cmd.envs(p.env.iter().map(|(k, v)| (k, v)));
        group.spawn(name, cmd).map(|_| ())
    };
    for m in 1..=l.members {
        spawn(
            &mut group,
            format!("producer (member {m})"),
            WorkerSpec::Producer(ProducerSpec {
                layout: l.clone(),
                member: m,
                compute_ms: a.compute_ms,
                fdb5: p.fdb5,
            }),
        )?;
    }
    for c in 0..consumers {
        spawn(
            &mut group,
            format!("consumer {c}"),
            WorkerSpec::Consumer(ConsumerSpec {
                layout: l.clone(),
                index: c,
                consumers,
                timeout: a.timeout,
                fdb5: p.fdb5,
                verify: false,
                streaming: a.streaming,
            }),
        )?;
    }
    group.wait_ready(Duration::from_secs(300))?;
    let bar = super::progress_bar(l.total_fields(), title, a.quiet);
    group.go()?;
    let steps = l.steps as usize;
    let mut flushed = vec![Vec::new(); steps];
    let mut produced = vec![Vec::new(); steps];
    let mut triggered = vec![Vec::new(); steps];
    let mut fig = RunFigures {
        consumers,
        ..RunFigures::default()
    };
    let results = group.results(Duration::from_secs(a.timeout + 60), |_, line| {
        let parts: Vec<&str> = line.split(' ').collect();
        let (kind, s, ns) = match parts.as_slice() {
            [kind, s, ns, ..] => (*kind, s.parse::<usize>(), ns.parse::<i128>()),
            _ => return,
        };
        let (Ok(s), Ok(ns)) = (s, ns) else { return };
        let s = s.min(steps - 1);
        match kind {
            "flushed" => {
                flushed[s].push(ns);
                bar.inc(u64::from(l.fields_per_step()));
            }
            "triggered" => triggered[s].push(ns),
            "product" => produced[s].push(ns),
            _ => {}
        }
    })?;
    bar.finish_and_clear();
    for r in results.iter().take(l.members as usize) {
        fig.producer_wall_s = fig.producer_wall_s.max(r["wall_s"].as_f64().unwrap_or(0.0));
        fig.producer_io_s = fig.producer_io_s.max(r["io_s"].as_f64().unwrap_or(0.0));
        fig.bytes += r["bytes"].as_u64().unwrap_or(0);
    }
    for r in results.iter().skip(l.members as usize) {
        fig.delivered += r["delivered"].as_u64().unwrap_or(0);
        fig.polls += r["polls"].as_u64().unwrap_or(0);
        fig.consumer_wait_s += r["wait_s"].as_f64().unwrap_or(0.0);
        fig.consumer_read_s += r["read_s"].as_f64().unwrap_or(0.0);
        fig.consumer_compute_s += r["compute_s"].as_f64().unwrap_or(0.0);
        fig.consumer_write_s += r["write_s"].as_f64().unwrap_or(0.0);
    }
    if consumers > 0 {
        for s in 0..steps {
            let last_flush = flushed[s].iter().max().copied().unwrap_or(0);
            let done = produced[s].iter().max().copied().unwrap_or(0);
            fig.step_latency_ms.push((done - last_flush) as f64 / 1e6);
            let woke = triggered[s].iter().max().copied().unwrap_or(0);
            fig.trigger_latency_ms
                .push((woke - last_flush) as f64 / 1e6);
        }
        if fig.delivered != l.total_fields() {
            return Err(Failure::io(format!(
                "{title}: consumers were delivered {} member fields, the producers flushed {}",
                fig.delivered,
                l.total_fields()
            )));
        }
        // Independent check of every product.
        let mut checker = Group::new();
        spawn(
            &mut checker,
            "product checker".into(),
            WorkerSpec::Consumer(ConsumerSpec {
                layout: l.clone(),
                index: 0,
                consumers: 1,
                timeout: a.timeout,
                fdb5: p.fdb5,
                verify: true,
                streaming: false,
            }),
        )?;
        checker.wait_ready(Duration::from_secs(120))?;
        checker.go()?;
        let r = checker
            .results(Duration::from_secs(a.timeout), |_, _| {})?
            .pop()
            .ok_or_else(|| Failure::io("product checker gave no result"))?;
        fig.products_checked = r["products"].as_u64().unwrap_or(0);
        fig.values_checked = r["values_checked"].as_u64().unwrap_or(0);
        let want = 2 * u64::from(l.steps) * u64::from(l.fields_per_step());
        if fig.products_checked != want {
            return Err(Failure::io(format!(
                "{title}: checked {} products, expected {want}",
                fig.products_checked
            )));
        }
    }
    Ok(fig)
}

/// Runs `haar workflow`.
pub fn run(cli: &Cli, a: &WorkflowArgs) -> Result<(), Failure> {
    let l = Layout {
        class: "rd".into(),
        expver: "wflw".into(),
        date: "20261121".into(),
        time: "0000".into(),
        members: a.members,
        steps: a.steps,
        step_hours: 6,
        levels: a.levels,
        params: a.params,
        field_size: a.field_size,
    };
    l.check()?;
    if a.consumers == 0 {
        return Err(Failure::usage(
            "--consumers must be at least 1 (product generation is the point)",
        ));
    }
    if a.nodes == 0 && cli.servers.is_none() {
        return Err(Failure::usage("--nodes must be at least 1"));
    }
    if cli.replicas == 0 || (cli.servers.is_none() && cli.replicas > a.nodes) {
        return Err(Failure::usage(format!(
            "--replicas {} must be between 1 and --nodes ({})",
            cli.replicas, a.nodes
        )));
    }
    let mut backends = Vec::new();
    for b in &a.backends {
        let b = Backend::parse(b)?;
        if b == Backend::Fdb5 && !super::fdb5::available() {
            eprintln!(
                "haar workflow: FDB5 is not installed here (apt-get install fdb5 libfdb5-dev); its row is skipped"
            );
            continue;
        }
        if !backends.contains(&b) {
            backends.push(b);
        }
    }
    if backends.is_empty() {
        return Err(Failure::usage("no backend to run (see --backends)"));
    }
    for dir in [&a.shared_dir, &a.pmem_dir] {
        if !dir.is_dir() {
            return Err(Failure::usage(format!(
                "{} is not a directory (see --shared-dir, --pmem-dir)",
                dir.display()
            )));
        }
    }
    super::procs::install_interrupt_handler();
    eprintln!(
        "haar workflow: {} members x {} steps x {} fields of {} bytes = {:.2} GiB per run; {} consumers; {} ms model time per step",
        l.members,
        l.steps,
        l.fields_per_step(),
        l.field_size,
        l.total_bytes() as f64 / GIB,
        a.consumers,
        a.compute_ms
    );
    let floor_ms = product_floor(&l, a.consumers);
    eprintln!(
        "haar workflow: in-memory floor of a step's products (no store, {} threads): {floor_ms:.1} ms",
        a.consumers
    );
    let mut rows = Vec::new();
    for b in backends {
        let mut alone = None;
        let mut describe = String::new();
        if !a.only_with_consumers {
            let p = prepare(cli, a, b, &l, "alone")?;
            describe = p.describe.clone();
            alone = Some(run_once(a, &p, &l, 0, &format!("{} alone", b.id()))?);
        }
        let p = prepare(cli, a, b, &l, "with")?;
        if describe.is_empty() {
            describe = p.describe.clone();
        }
        let with = run_once(a, &p, &l, a.consumers, &format!("{} + consumers", b.id()))?;
        drop(p);
        let row = Row {
            backend: b.id().into(),
            describe,
            alone,
            with,
        };
        eprintln!("haar workflow: {}", row.line());
        rows.push(row);
    }
    let report = report(a, &l, cli.replicas, floor_ms, &rows);
    print_table(&l, a, floor_ms, &rows);
    plot(&a.plot, &rows)?;
    println!("plot: {}", a.plot.display());
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report).expect("json"))
            .map_err(|e| Failure::io(format!("cannot write {}: {e}", p.display())))?;
        println!("figures: {}", p.display());
    }
    Ok(())
}

/// The in-memory floor of one step's product generation: the consumers' computation alone —
/// every member of every field reduced and both products packed, on `consumers` threads, the
/// fields shared as the consumers share them — with the member fields already in memory and no
/// store at all. Bodies rotate over at least 64 MiB of distinct buffers (more than this
/// machine's caches) so they come from memory, as received fields would. Best of 3, in ms.
fn product_floor(l: &Layout, consumers: u32) -> f64 {
    let n = field::nvalues16(l.field_size) as usize;
    let per_set = l.members as usize * l.field_size;
    let sets = (64usize << 20)
        .div_ceil(per_set)
        .clamp(1, l.fields_per_step() as usize);
    let bodies: Vec<Vec<(Vec<u8>, Header)>> = (0..sets as u32)
        .map(|f| {
            (1..=l.members)
                .map(|m| {
                    let seed = field::seed(SALT, m, f);
                    let mut t = field::template(l.field_size, seed);
                    let h = member_header(l, m, 0, f, seed, field::body_crc(&t));
                    field::stamp(&mut t, &h);
                    (t, h)
                })
                .collect()
        })
        .collect();
    let psize = product_size(l);
    let once = || {
        let t0 = monotonic_ns();
        std::thread::scope(|sc| {
            for c in 0..consumers {
                let bodies = &bodies;
                sc.spawn(move || {
                    for f in (0..l.fields_per_step()).filter(|f| f % consumers == c) {
                        let set = &bodies[f as usize % bodies.len()];
                        let members: Vec<(&[u8], Header)> =
                            set.iter().map(|(b, h)| (&b[..], *h)).collect();
                        let (mean, sd) = field::ensemble_stats(&members, n);
                        let h = Header {
                            kind: Kind::Mean,
                            ..members[0].1
                        };
                        std::hint::black_box(field::product(psize, h, &mean));
                        std::hint::black_box(field::product(psize, h, &sd));
                    }
                });
            }
        });
        (monotonic_ns() - t0) as f64 / 1e6
    };
    (0..3).map(|_| once()).fold(f64::INFINITY, f64::min)
}

fn p50_p99(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (quantile(&v, 0.5), quantile(&v, 0.99))
}

struct Row {
    backend: String,
    describe: String,
    alone: Option<RunFigures>,
    with: RunFigures,
}

impl Row {
    fn slowdown(&self) -> Option<f64> {
        self.alone
            .as_ref()
            .map(|a| self.with.producer_wall_s / a.producer_wall_s - 1.0)
    }
    fn io_slowdown(&self) -> Option<f64> {
        self.alone
            .as_ref()
            .map(|a| self.with.producer_io_s / a.producer_io_s - 1.0)
    }
    fn latency(&self) -> (f64, f64) {
        p50_p99(&self.with.step_latency_ms)
    }
    fn trigger(&self) -> (f64, f64) {
        p50_p99(&self.with.trigger_latency_ms)
    }
    fn line(&self) -> String {
        let (p50, p99) = self.latency();
        format!(
            "{}: producers {} → {:.2} s with consumers ({}), delivery p50 {p50:.1} ms p99 {p99:.1} ms, {} fields delivered once, {} products checked",
            self.backend,
            self.alone
                .as_ref()
                .map(|a| format!("{:.2} s alone", a.producer_wall_s))
                .unwrap_or_else(|| "(not run alone)".into()),
            self.with.producer_wall_s,
            self.slowdown()
                .map(|s| format!("{:+.1}%", 100.0 * s))
                .unwrap_or_else(|| "n/a".into()),
            self.with.delivered,
            self.with.products_checked
        )
    }
}

fn report(a: &WorkflowArgs, l: &Layout, replicas: usize, floor_ms: f64, rows: &[Row]) -> Value {
    json!({
        "tool": "haar workflow",
        "version": env!("CARGO_PKG_VERSION"),
        "layout": l,
        "consumers": a.consumers,
        "compute_ms": a.compute_ms,
        "nodes": a.nodes,
        "replicas": replicas,
        "volume_bytes_per_run": l.total_bytes(),
        "product_floor_ms": floor_ms,
        "machine": super::super::commands::bench::machine_description(),
        "backends": rows.iter().map(|r| {
            let (p50, p99) = r.latency();
            json!({
                "backend": r.backend,
                "describe": r.describe,
                "alone": r.alone,
                "with_consumers": r.with,
                "producer_slowdown": r.slowdown(),
                "producer_io_slowdown": r.io_slowdown(),
                "step_latency_p50_ms": p50,
                "step_latency_p99_ms": p99,
                "step_latency_p50_over_floor": p50 / floor_ms,
                "trigger_latency_p50_ms": r.trigger().0,
                "trigger_latency_p99_ms": r.trigger().1,
                "write_gib_per_s_alone": r.alone.as_ref().map(|x| x.bytes as f64 / x.producer_io_s.max(1e-9) / GIB),
            })
        }).collect::<Vec<_>>(),
    })
}

fn print_table(l: &Layout, a: &WorkflowArgs, floor_ms: f64, rows: &[Row]) {
    println!();
    println!(
        "Forecast workflow, {} members x {} steps x {} fields of {:.0} KiB ({:.2} GiB per run), {} consumers, {} ms model time per step",
        l.members,
        l.steps,
        l.fields_per_step(),
        l.field_size as f64 / 1024.0,
        l.total_bytes() as f64 / GIB,
        a.consumers,
        a.compute_ms
    );
    println!("(shaped like SC'19 Table 9: producer run time without and with product generation)");
    println!();
    println!(
        "{:<52} {:>8} {:>8} {:>9} {:>9} {:>17} {:>7} {:>15}",
        "storage",
        "alone s",
        "+PGEN s",
        "slowdown",
        "I/O slow",
        "product p50/p99",
        "/floor",
        "trigger p50/99"
    );
    for r in rows {
        let (p50, p99) = r.latency();
        let (t50, t99) = r.trigger();
        println!(
            "{:<52} {:>8} {:>8.2} {:>9} {:>9} {:>17} {:>7} {:>15}",
            r.describe,
            r.alone
                .as_ref()
                .map(|x| format!("{:.2}", x.producer_wall_s))
                .unwrap_or_else(|| "-".into()),
            r.with.producer_wall_s,
            r.slowdown()
                .map(|s| format!("{:+.1}%", 100.0 * s))
                .unwrap_or_else(|| "-".into()),
            r.io_slowdown()
                .map(|s| format!("{:+.1}%", 100.0 * s))
                .unwrap_or_else(|| "-".into()),
            format!("{p50:.0} / {p99:.0} ms"),
            format!("{:.1}x", p50 / floor_ms),
            format!("{t50:.0} / {t99:.0} ms")
        );
    }
    println!();
    println!(
        "slowdown: producers' wall time with consumers vs alone; I/O slow: the same for their archive+flush time only."
    );
    println!(
        "product: last member's flush of a step -> every product of the step flushed; trigger: -> every consumer knows the step is complete."
    );
    if rows.iter().any(|r| r.backend == "haar") && haar_net::ClientConfig::default().local_reads {
        println!(
            "haar: consumers on the servers' machine read the pools directly while connected (same-host reads, design §8; HAAR_LOCAL_READS=0: over TCP)."
        );
    }
    println!(
        "/floor: product p50 over the in-memory floor measured in this run, {floor_ms:.1} ms: the consumers' computation alone for one step (reduce {} x {} fields, pack {} products) on {} threads, no store.",
        l.members,
        l.fields_per_step(),
        2 * l.fields_per_step(),
        a.consumers
    );
    println!();
    println!(
        "every member field delivered exactly once to product generation; every product (em, es) checked against values recomputed from the members' seeds"
    );
}

fn plot(path: &Path, rows: &[Row]) -> Result<(), Failure> {
    let bars: Vec<haar_mem::plot::BarGroup> = rows
        .iter()
        .map(|r| haar_mem::plot::BarGroup {
            name: r.backend.replace("shared-posix", "posix dir"),
            values: vec![
                r.alone.as_ref().map(|x| x.producer_wall_s).unwrap_or(0.0),
                r.with.producer_wall_s,
            ],
        })
        .collect();
    let lines: Vec<haar_mem::plot::Series> = rows
        .iter()
        .map(|r| haar_mem::plot::Series {
            name: r.backend.clone(),
            points: r
                .with
                .step_latency_ms
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as f64, v))
                .collect(),
        })
        .collect();
    haar_mem::plot::workflow_png(
        path,
        "HAAR WORKFLOW",
        &["ALONE", "WITH PGEN"],
        &bars,
        &lines,
    )
    .map_err(Failure::io)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checker passes a product made from the members and refuses one wrong value, a
    /// packing too coarse to check, and the wrong kind.
    #[test]
    fn the_product_checker_fails_wrong_products() {
        let l = Layout {
            class: "rd".into(),
            expver: "test".into(),
            date: "20260101".into(),
            time: "0000".into(),
            members: 5,
            steps: 1,
            step_hours: 6,
            levels: 1,
            params: 1,
            field_size: 64 + 2 * 3000,
        };
        let n = field::nvalues16(l.field_size) as usize;
        let ms: Vec<(Vec<u8>, Header)> = (1..=l.members)
            .map(|m| {
                let seed = field::seed(SALT, m, 0);
                let mut t = field::template(l.field_size, seed);
                let h = member_header(&l, m, 0, 0, seed, field::body_crc(&t));
                field::stamp(&mut t, &h);
                (t, h)
            })
            .collect();
        let refs: Vec<(&[u8], Header)> = ms.iter().map(|(b, h)| (&b[..], *h)).collect();
        let (mean, sd) = field::ensemble_stats(&refs, n);
        let points: Vec<usize> = (0..n).collect();
        let expect: Vec<(f64, f64)> = points
            .iter()
            .map(|&i| {
                let v: Vec<f64> = refs.iter().map(|(b, h)| field::value(b, h, i)).collect();
                let mu = v.iter().sum::<f64>() / v.len() as f64;
                let var = v.iter().map(|x| (x - mu) * (x - mu)).sum::<f64>() / v.len() as f64;
                (mu, var.sqrt())
            })
            .collect();
        let base = Header {
            kind: Kind::Mean,
            member: 0,
            seed: 0,
            ..refs[0].1
        };
        let psize = product_size(&l);
        let em = field::product(psize, base, &mean);
        let es = field::product(
            psize,
            Header {
                kind: Kind::Spread,
                ..base
            },
            &sd,
        );
        check_product(&em, Kind::Mean, 0, n, &points, &expect).unwrap();
        check_product(&es, Kind::Spread, 0, n, &points, &expect).unwrap();
        assert!(check_product(&em, Kind::Spread, 0, n, &points, &expect).is_err());
        let mut bad = mean.clone();
        bad[1234] += 0.01;
        let e = check_product(
            &field::product(psize, base, &bad),
            Kind::Mean,
            0,
            n,
            &points,
            &expect,
        )
        .unwrap_err();
        assert!(e.contains("value 1234"), "{e}");
        // A product packed with a step of 1.0 could hide errors of 0.5: refused.
        let mut coarse = em.clone();
        let h = Header {
            scale: 1.0,
            ..field::verify(&em).unwrap()
        };
        field::stamp(&mut coarse, &h);
        let e = check_product(&coarse, Kind::Mean, 0, n, &points, &expect).unwrap_err();
        assert!(e.contains("packing scale"), "{e}");
    }
}
