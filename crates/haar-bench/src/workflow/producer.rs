//! The producer process of `haar workflow`: one ensemble member writing its fields step by
//! step, sleeping the model's compute time before each step, flushing per step and saying
//! `flushed STEP NS` after each flush.
//!
//! Owns nothing but its own writes; must not read.

use std::time::Duration;

use haar::OpenOptions;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{SALT, member_header};
use crate::error::Error;
use crate::field;
use crate::layout::Layout;
use crate::procs::Reporter;
use crate::stats::monotonic_ns;
use crate::target;

/// A producer's instructions.
#[derive(Debug, Serialize, Deserialize)]
pub struct ProducerSpec {
    pub(super) layout: Layout,
    pub(super) member: u32,
    pub(super) compute_ms: u64,
    pub(super) fdb5: bool,
    /// Only create the database: archive one field at a step after the run's last
    /// (`steps + 100`, which no consumer or check reads), flush, and say nothing else.
    #[serde(default)]
    pub(super) create_only: bool,
}

/// The producer process.
pub fn producer(opts: &OpenOptions, spec: ProducerSpec, mut rep: Reporter) -> Result<(), Error> {
    let l = &spec.layout;
    let (mut store, _) = target::open(opts, spec.fdb5, None)?;
    let mut templates: Vec<(Vec<u8>, u64, u32)> = (0..l.fields_per_step())
        .map(|f| {
            let seed = field::seed(SALT, spec.member, f);
            let t = field::template(l.field_size, seed);
            let crc = field::body_crc(&t);
            (t, seed, crc)
        })
        .collect();
    rep.ready_then_wait()?;
    if spec.create_only {
        let (buf, seed, crc) = &mut templates[0];
        let s = l.steps + 100;
        field::stamp(buf, &member_header(l, spec.member, s, 0, *seed, *crc));
        store.archive(&l.key(spec.member, s, 0), buf)?;
        store.flush()?;
        return rep.say(&format!("result {}", json!({"created": true})));
    }
    let t0 = monotonic_ns();
    let cpu0 = crate::cpu::self_cpu_s();
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
            store.archive(&l.key(spec.member, s, f), buf)?;
            bytes += buf.len() as u64;
        }
        store.flush()?;
        let done = monotonic_ns();
        io_ns += done - t;
        rep.say(&format!("flushed {s} {done}"))?;
    }
    let wall = (monotonic_ns() - t0) as f64 / 1e9;
    // Its own CPU time over the same span (user + system, all threads), for the run's CPU
    // figures: it ends with the span, too soon for the parent to read it from /proc.
    let cpu_s = crate::cpu::self_cpu_s() - cpu0;
    let r = json!({"wall_s": wall, "io_s": io_ns as f64 / 1e9, "bytes": bytes,
                   "fields": l.steps * l.fields_per_step(), "cpu_s": cpu_s});
    rep.say(&format!("result {r}"))
}
