//! One run of `haar workflow` on one prepared backend: producers (and consumers) started as
//! worker processes behind a start barrier, their event lines turned into per-step delivery
//! and trigger latencies, every member field counted once, then the product checker.
//!
//! Owns the run's figures ([`RunFigures`]); must not print them.

use std::time::Duration;

use serde::Serialize;

use super::cpu_use::{CpuFigures, CpuWatch};
use super::topology::{Prepared, Site};
use super::{ConsumerSpec, Options, ProducerSpec};
use crate::error::Error;
use crate::layout::Layout;
use crate::procs::Group;
use crate::worker::{self, WorkerSpec};

/// One run's figures.
#[derive(Debug, Default, Clone, Serialize)]
pub(super) struct RunFigures {
    pub(super) consumers: u32,
    pub(super) producer_wall_s: f64,
    pub(super) producer_io_s: f64,
    pub(super) bytes: u64,
    pub(super) delivered: u64,
    pub(super) polls: u64,
    /// Per step: last member's flush → products flushed.
    pub(super) step_latency_ms: Vec<f64>,
    /// Per step: last member's flush → the last consumer knows the step is complete.
    pub(super) trigger_latency_ms: Vec<f64>,
    pub(super) products_checked: u64,
    pub(super) values_checked: u64,
    /// Consumers' time (summed over consumers): waiting, reading, computing, writing.
    pub(super) consumer_wait_s: f64,
    pub(super) consumer_read_s: f64,
    pub(super) consumer_compute_s: f64,
    pub(super) consumer_write_s: f64,
    /// The producers' own CPU time (summed over members) from go to their last flush.
    pub(super) producer_cpu_s: f64,
    /// Where the CPUs' time went over the producers' span ([`super::cpu_use`]).
    pub(super) cpu: Option<CpuFigures>,
}

pub(super) fn run_once(
    a: &Options,
    site: &Site,
    p: &Prepared,
    l: &Layout,
    consumers: u32,
    title: &str,
) -> Result<RunFigures, Error> {
    let mut group = Group::new();
    let spawn = |group: &mut Group,
                 name: String,
                 node: Option<&crate::vcluster::Node>,
                 spec: WorkerSpec|
     -> Result<(), Error> {
        let mut cmd = worker::command(&p.globals, &spec)?;
        cmd.envs(p.env.iter().map(|(k, v)| (k, v)));
        let name = match node {
            Some(n) => format!("{name} on {}", n.name),
            None => name,
        };
        group.spawn(name, Site::place(node, cmd)).map(|_| ())
    };
    if p.fdb5 && site.cluster.is_some() {
        // FDB5's database is made by one process before the timed run: over GlusterFS, the
        // members' concurrent first archives from several nodes race on its schema file (one
        // opens it as another renames a copy over it: ESTALE), which Lustre does not show.
        let mut seed = Group::new();
        spawn(
            &mut seed,
            "FDB5 database creation".into(),
            site.producer_node(1),
            WorkerSpec::Producer(ProducerSpec {
                layout: l.clone(),
                member: 1,
                compute_ms: 0,
                fdb5: true,
                create_only: true,
            }),
        )?;
        seed.wait_ready(Duration::from_secs(120))?;
        seed.go()?;
        seed.results(Duration::from_secs(120), |_, _| {})?;
    }
    for m in 1..=l.members {
        spawn(
            &mut group,
            format!("producer (member {m})"),
            site.producer_node(m),
            WorkerSpec::Producer(ProducerSpec {
                layout: l.clone(),
                member: m,
                compute_ms: a.compute_ms,
                fdb5: p.fdb5,
                create_only: false,
            }),
        )?;
    }
    for c in 0..consumers {
        spawn(
            &mut group,
            format!("consumer {c}"),
            site.consumer_node(c),
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
    let bar = crate::progress::bar(l.total_fields(), title, a.quiet);
    // The CPU figures' span: go → the last member's last flush (what the slowdown compares).
    let watch = CpuWatch::start(site)?;
    let mut cpu_end = None;
    let mut flushes = 0u64;
    let all_flushes = u64::from(l.members) * u64::from(l.steps);
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
                flushes += 1;
                if flushes == all_flushes {
                    cpu_end = Some(watch.end());
                }
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
        fig.producer_cpu_s += r["cpu_s"].as_f64().unwrap_or(0.0);
    }
    let cpu_end = match cpu_end {
        Some(e) => e?,
        None => {
            return Err(Error::Failed(format!(
                "{title}: the producers said {flushes} flushes, expected {all_flushes}"
            )));
        }
    };
    fig.cpu = Some(watch.figures(&cpu_end, fig.producer_cpu_s));
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
            return Err(Error::Failed(format!(
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
            site.consumer_node(0),
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
            .ok_or_else(|| Error::Failed("product checker gave no result".into()))?;
        fig.products_checked = r["products"].as_u64().unwrap_or(0);
        fig.values_checked = r["values_checked"].as_u64().unwrap_or(0);
        let want = 2 * u64::from(l.steps) * u64::from(l.fields_per_step());
        if fig.products_checked != want {
            return Err(Error::Failed(format!(
                "{title}: checked {} products, expected {want}",
                fig.products_checked
            )));
        }
    }
    Ok(fig)
}
