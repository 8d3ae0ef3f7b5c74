//! Synthetic workloads run as real processes: `haar hammer` (FDB5's fdb-hammer, done right) and
//! `haar workflow` (the IFS ensemble with product generation, SC'19 Table 9 in miniature).
//!
//! Both share the field payload of [`field`] (documented in docs/design.md §10), the key layout
//! of [`Layout`], and the process harness of [`procs`]: workers are `haar workload-worker`
//! children that report on a line protocol, so a worker that dies fails the run by name.

pub mod fdb5;
pub mod field;
pub mod hammer;
pub mod procs;
pub mod target;
pub mod workflow;

use haar_core::Key;
use serde::{Deserialize, Serialize};

use crate::Failure;

/// Where the fields of a synthetic run live in the MARS key space: an ensemble forecast
/// (`stream=enfo`, `type=pf`, one `number` per member) on model levels, like fdb-hammer's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Layout {
    /// MARS class (`od`, `rd`, …).
    pub class: String,
    /// Experiment version, 4 characters.
    pub expver: String,
    /// Forecast base date `YYYYMMDD`.
    pub date: String,
    /// Forecast base time `HHMM`.
    pub time: String,
    /// Members (`number=1..=members`).
    pub members: u32,
    /// Output steps (`step=0, h, 2h, …`).
    pub steps: u32,
    /// Hours between output steps.
    pub step_hours: u32,
    /// Model levels (`levelist=1..=levels`).
    pub levels: u32,
    /// Parameters per level (the first of [`PARAMS`]).
    pub params: u32,
    /// Bytes per field.
    pub field_size: usize,
}

/// Model-level parameters, as paramIds: t, u, v, q, w, vo, d, z, o3, clwc, ciwc, cc.
pub const PARAMS: [u32; 12] = [130, 131, 132, 133, 135, 138, 155, 129, 203, 246, 247, 248];

impl Layout {
    /// Fields per member per step.
    pub fn fields_per_step(&self) -> u32 {
        self.levels * self.params
    }

    /// Every field of the run.
    pub fn total_fields(&self) -> u64 {
        u64::from(self.members) * u64::from(self.steps) * u64::from(self.fields_per_step())
    }

    /// Bytes of every field of the run.
    pub fn total_bytes(&self) -> u64 {
        self.total_fields() * self.field_size as u64
    }

    /// `(param, level)` of field index `f` (level-major: all params of level 1 first).
    pub fn field(&self, f: u32) -> (u32, u32) {
        (PARAMS[(f % self.params) as usize], f / self.params + 1)
    }

    /// The field index of `(param, level)`, if the layout has it.
    pub fn field_index(&self, param: u32, level: u32) -> Option<u32> {
        let p = PARAMS[..self.params as usize]
            .iter()
            .position(|&x| x == param)? as u32;
        (1..=self.levels)
            .contains(&level)
            .then(|| (level - 1) * self.params + p)
    }

    /// The header of member `m`'s field `f` at step index `s`: values `reference + scale·X`,
    /// `X` from a body with `seed` whose CRC is `crc`.
    #[allow(clippy::too_many_arguments)]
    pub fn member_header(
        &self,
        m: u32,
        s: u32,
        f: u32,
        reference: f64,
        scale: f64,
        seed: u64,
        crc: u32,
    ) -> field::Header {
        let (param, level) = self.field(f);
        field::Header {
            bits: 16,
            member: m,
            step: s,
            param,
            level,
            reference,
            scale,
            nvalues: field::nvalues16(self.field_size),
            kind: field::Kind::Member,
            seed,
            body_crc: crc,
        }
    }

    /// The `step` value of step index `s`.
    pub fn step_value(&self, s: u32) -> u32 {
        s * self.step_hours
    }

    /// The database and index part shared by every field of the run.
    fn base(&self, kind: &str) -> Key {
        Key::new()
            .with("class", self.class.clone())
            .with("expver", self.expver.clone())
            .with("stream", "enfo")
            .with("date", self.date.clone())
            .with("time", self.time.clone())
            .with("domain", "g")
            .with("type", kind)
            .with("levtype", "ml")
    }

    /// The key of member `m`'s field `f` at step index `s`.
    pub fn key(&self, m: u32, s: u32, f: u32) -> Key {
        let (param, level) = self.field(f);
        self.base("pf")
            .with("step", self.step_value(s).to_string())
            .with("number", m.to_string())
            .with("levelist", level.to_string())
            .with("param", param.to_string())
    }

    /// The key of a product (`em` ensemble mean, `es` ensemble standard deviation).
    pub fn product_key(&self, kind: &str, s: u32, f: u32) -> Key {
        let (param, level) = self.field(f);
        self.base(kind)
            .with("step", self.step_value(s).to_string())
            .with("levelist", level.to_string())
            .with("param", param.to_string())
    }

    /// A MARS request for `type` at step index `s`: every member (for `pf`), every level and
    /// parameter unless narrowed to field `f`.
    pub fn request(&self, kind: &str, s: u32, f: Option<u32>) -> String {
        let (levels, params) = match f {
            Some(f) => {
                let (p, l) = self.field(f);
                (l.to_string(), p.to_string())
            }
            None => (
                format!("1/to/{}", self.levels),
                PARAMS[..self.params as usize]
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join("/"),
            ),
        };
        let number = if kind == "pf" {
            format!(",number=1/to/{}", self.members)
        } else {
            String::new()
        };
        format!(
            "class={},expver={},stream=enfo,date={},time={},domain=g,type={kind},levtype=ml,step={}{number},levelist={levels},param={params}",
            self.class,
            self.expver,
            self.date,
            self.time,
            self.step_value(s),
        )
    }

    /// A MARS request for every member field of every step.
    pub fn request_all_steps(&self) -> String {
        let first = self.request("pf", 0, None);
        let steps = (0..self.steps)
            .map(|s| self.step_value(s).to_string())
            .collect::<Vec<_>>()
            .join("/");
        first.replace(",step=0,", &format!(",step={steps},"))
    }

    /// Refuses impossible shapes before anything starts.
    pub fn check(&self) -> Result<(), Failure> {
        let zero = [
            ("--members", self.members),
            ("--steps", self.steps),
            ("--levels", self.levels),
            ("--params", self.params),
        ];
        if let Some((flag, _)) = zero.iter().find(|(_, v)| *v == 0) {
            return Err(Failure::usage(format!("{flag} must be at least 1")));
        }
        if self.params as usize > PARAMS.len() {
            return Err(Failure::usage(format!(
                "--params {} is more than the {} model-level parameters haar knows ({:?})",
                self.params,
                PARAMS.len(),
                PARAMS
            )));
        }
        if self.expver.len() != 4 {
            return Err(Failure::usage(format!(
                "--expver {:?} must be 4 characters (e.g. 0001, xxxx)",
                self.expver
            )));
        }
        if self.field_size < field::MIN_SIZE {
            return Err(Failure::usage(format!(
                "--field-size {} is smaller than the {}-byte minimum (header + one value)",
                self.field_size,
                field::MIN_SIZE
            )));
        }
        if self.field_size > field::MAX_SIZE {
            return Err(Failure::usage(format!(
                "--field-size {} is larger than the {} bytes a field may hold",
                self.field_size,
                field::MAX_SIZE
            )));
        }
        Ok(())
    }
}

/// What a `haar workload-worker` process is told to do (JSON on its command line).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerSpec {
    /// A hammer writer, reader or lister.
    Hammer(hammer::Spec),
    /// An ensemble member writing its fields.
    Producer(workflow::ProducerSpec),
    /// A product-generation job.
    Consumer(workflow::ConsumerSpec),
}

/// Options of the hidden `haar workload-worker`.
#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// The worker's instructions (JSON).
    #[arg(long)]
    pub spec: String,
}

/// Runs one worker process (started by `haar hammer` or `haar workflow`).
pub fn worker(cli: &crate::args::Cli, a: &WorkerArgs) -> Result<(), Failure> {
    let spec: WorkerSpec = serde_json::from_str(&a.spec)
        .map_err(|e| Failure::usage(format!("workload-worker: bad --spec: {e}")))?;
    let rep = procs::Reporter::take_stdout()?;
    match spec {
        WorkerSpec::Hammer(s) => hammer::worker(cli, s, rep),
        WorkerSpec::Producer(s) => workflow::producer(cli, s, rep),
        WorkerSpec::Consumer(s) => workflow::consumer(cli, s, rep),
    }
}

/// A progress bar on stderr (hidden when `quiet` or stderr is not a terminal).
pub fn progress_bar(len: u64, what: &str, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(len);
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {msg:32} {bar:30} {pos}/{len} {per_sec} {elapsed}",
        )
        .expect("valid template"),
    );
    b.set_message(what.to_string());
    b
}

/// Parses a byte size: `65536`, `64KiB`, `800K`, `3.2MiB`, `1G` (binary units).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 65536, 64KiB, 3.2MiB)"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        u => return Err(format!("{s:?}: unknown unit {u:?} (use B, KiB, MiB, GiB)")),
    };
    let v = n * mult;
    if !v.is_finite() || v < 0.0 || v > usize::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(v.round() as usize)
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of a run on this machine.
pub fn monotonic_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// The `p` quantile (0..=1) of sorted values, nearest rank; NaN when empty.
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Sorts latencies and returns `(p50, p99, max)`.
pub fn summary(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (
        quantile(v, 0.5),
        quantile(v, 0.99),
        v.last().copied().unwrap_or(f64::NAN),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            class: "rd".into(),
            expver: "xxxx".into(),
            date: "20261121".into(),
            time: "0000".into(),
            members: 3,
            steps: 2,
            step_hours: 6,
            levels: 4,
            params: 2,
            field_size: 4096,
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("800k").unwrap(), 819_200);
        assert_eq!(parse_size("3.2MiB").unwrap(), 3_355_443);
        assert!(
            parse_size("12 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn layout_keys_and_requests() {
        let l = layout();
        assert_eq!(l.fields_per_step(), 8);
        assert_eq!(l.total_fields(), 48);
        assert_eq!(l.field(0), (130, 1));
        assert_eq!(l.field(3), (131, 2));
        for f in 0..l.fields_per_step() {
            let (p, lv) = l.field(f);
            assert_eq!(l.field_index(p, lv), Some(f));
        }
        assert_eq!(l.field_index(132, 1), None);
        assert_eq!(l.field_index(130, 5), None);
        let k = l.key(2, 1, 3);
        assert_eq!(k.get("number"), Some("2"));
        assert_eq!(k.get("step"), Some("6"));
        assert_eq!(k.get("levelist"), Some("2"));
        assert_eq!(k.get("param"), Some("131"));
        assert_eq!(l.product_key("em", 1, 3).get("number"), None);
        let r = l.request("pf", 1, None);
        assert!(
            r.contains("number=1/to/3,levelist=1/to/4,param=130/131"),
            "{r}"
        );
        let r = l.request("es", 0, Some(3));
        assert!(
            r.ends_with("type=es,levtype=ml,step=0,levelist=2,param=131"),
            "{r}"
        );
        assert!(l.check().is_ok());
        let mut bad = l.clone();
        bad.members = 0;
        assert!(bad.check().is_err());
        bad = l.clone();
        bad.params = 13;
        assert!(bad.check().is_err());
    }
}
