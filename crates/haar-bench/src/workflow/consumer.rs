//! The consumer process of `haar workflow` (product generation): per step it waits for the
//! step to be complete (a notification where the store has servers, polling otherwise), reads
//! every member of its share of the fields, checks each, reduces them to the ensemble mean and
//! standard deviation and archives both; or, streaming, reads each member field as soon as it
//! is flushed. With `verify` it is the product checker instead ([`super::check`]).
//!
//! Owns the consumers' reads and product writes; must not write member fields.

use std::time::Duration;

use haar::OpenOptions;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::product_size;
use crate::error::Error;
use crate::field::{self, Header, Kind};
use crate::layout::Layout;
use crate::procs::Reporter;
use crate::stats::monotonic_ns;
use haar_store::FieldStore;

use crate::target::{self, KeyStream};

/// A consumer's (or, with `verify`, the product checker's) instructions.
#[derive(Debug, Serialize, Deserialize)]
pub struct ConsumerSpec {
    pub(super) layout: Layout,
    pub(super) index: u32,
    pub(super) consumers: u32,
    pub(super) timeout: u64,
    pub(super) fdb5: bool,
    pub(super) verify: bool,
    /// Read each member field as soon as it is flushed (haar's notifications).
    #[serde(default)]
    pub(super) streaming: bool,
}

/// The consumer process: per step, wait for completion, then for each of its fields read all
/// members, verify them, and archive mean and standard deviation. With `verify`, the checker:
/// reads every product and compares it with values recomputed from the seeds.
pub fn consumer(opts: &OpenOptions, spec: ConsumerSpec, mut rep: Reporter) -> Result<(), Error> {
    let l = &spec.layout;
    let (mut store, flushes) = target::open(opts, spec.fdb5, None)?;
    if spec.verify {
        return super::check::verify_products(l, &*store, rep);
    }
    let n = field::nvalues16(l.field_size) as usize;
    if spec.streaming
        && let Some(stream) = flushes.watch(&target::request(&l.request_all_steps())?)?
    {
        return consumer_streaming(l, &spec, store.as_mut(), stream, rep);
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
        let polls = flushes.wait(
            &*store,
            &target::request(&l.request("pf", s, None))?,
            l.members as usize * l.fields_per_step() as usize,
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
            let mut got_fields = 0;
            target::retrieve(&*store, &keys, |key, d, crc| {
                let h = check_member(l, key, d, crc, s, f, &mut seen)?;
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
                return Err(Error::Missing(format!(
                    "step {s} said complete, but {} gave {got} of {} members",
                    l.request("pf", s, Some(f)),
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
            write_products(store.as_mut(), l, s, f, stats)?;
            spent[3] += monotonic_ns() - t_write;
        }
        let t_flush = monotonic_ns();
        store.flush()?;
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
/// `s`, field `f`), once per member; returns its header. `crc`: the CRC-32C of `d` the store
/// verified, if it keeps one.
pub(super) fn check_member(
    l: &Layout,
    key: &haar_core::Key,
    d: &[u8],
    crc: Option<u32>,
    s: u32,
    f: u32,
    seen: &mut [bool],
) -> Result<Header, Error> {
    let h = field::verify_with(d, crc).map_err(|e| Error::Failed(format!("field {key}: {e}")))?;
    let number: u32 = key.get("number").and_then(|v| v.parse().ok()).unwrap_or(0);
    if h.kind != Kind::Member
        || h.member != number
        || h.step != s
        || (h.param, h.level) != l.field(f)
    {
        return Err(Error::Failed(format!(
            "field {key} holds member {} step {} param {} level {}",
            h.member, h.step, h.param, h.level
        )));
    }
    if number == 0 || number > l.members || seen[number as usize] {
        return Err(Error::Failed(format!(
            "field {key} delivered twice or not asked for"
        )));
    }
    seen[number as usize] = true;
    Ok(h)
}

/// Archives the ensemble mean and standard deviation of field `f` at step `s`.
fn write_products(
    store: &mut dyn FieldStore,
    l: &Layout,
    s: u32,
    f: u32,
    (mean, sd): (Vec<f32>, Vec<f32>),
) -> Result<(), Error> {
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
    store.archive(&l.product_key("em", s, f), &mean)?;
    Ok(store.archive(&l.product_key("es", s, f), &spread)?)
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
    store: &mut dyn FieldStore,
    stream: KeyStream,
    mut rep: Reporter,
) -> Result<(), Error> {
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
            return Err(Error::Failed(format!(
                "notified of {key}, which is not a member field of this run"
            )));
        };
        let (s, f) = match (step % l.step_hours.max(1) == 0).then(|| step / l.step_hours.max(1)) {
            Some(s) if s < l.steps && (1..=l.members).contains(&m) => {
                match l.field_index(param, level) {
                    Some(f) => (s, f),
                    None => {
                        return Err(Error::Failed(format!("notified of {key}, not in this run")));
                    }
                }
            }
            _ => return Err(Error::Failed(format!("notified of {key}, not in this run"))),
        };
        let st = &mut steps[s as usize];
        let slot = (m as usize - 1) * per_step + f as usize;
        if st.notified[slot] {
            return Err(Error::Failed(format!("notified twice of {key}")));
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
            let found = target::retrieve(store, std::slice::from_ref(&want), |k, d, crc| {
                let h = check_member(l, k, d, crc, s, f, seen)?;
                bufs.push((d.to_vec(), h));
                Ok(())
            })?;
            if found != 1 {
                return Err(Error::Missing(format!(
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
                write_products(store, l, s, f, stats)?;
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
            store.flush()?;
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
        return Err(Error::Failed(format!(
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
