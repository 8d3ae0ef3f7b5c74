//! What `haar workflow` shows: a table shaped like SC'19 Table 9, the JSON of every figure,
//! and the two-panel plot (producers' time alone and with product generation; each step's
//! delivery latency).
//!
//! Owns presentation only; the figures come from [`super::runs`].

use std::path::Path;

use serde_json::{Value, json};

use super::runs::RunFigures;
use super::topology::Site;
use super::{GIB, Options};
use crate::error::Error;
use crate::layout::Layout;
use crate::stats::quantile;

fn p50_p99(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (quantile(&v, 0.5), quantile(&v, 0.99))
}

pub(super) struct Row {
    pub(super) backend: String,
    pub(super) describe: String,
    pub(super) alone: Option<RunFigures>,
    pub(super) with: RunFigures,
    /// The servers' metrics before and after the run with consumers (haar's local servers).
    pub(super) metrics: Option<Value>,
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
    /// What the members' CPUs did besides the producers' work, alone and with product
    /// generation, beside the slowdown: `extra_over_alone_wall` is the CPU time product
    /// generation's run added there, over the producers' time alone — the slowdown it can
    /// cause when the producers could use those CPUs whole.
    fn members_cpu(&self) -> Option<Value> {
        let alone = self.alone.as_ref()?;
        let (a, w) = (
            &alone.cpu.as_ref()?.members,
            &self.with.cpu.as_ref()?.members,
        );
        let extra = w.non_producer_s - a.non_producer_s;
        Some(json!({
            "cpus": w.cpus,
            "non_producer_alone_s": a.non_producer_s,
            "non_producer_with_s": w.non_producer_s,
            "non_producer_share_alone": a.non_producer_share,
            "non_producer_share_with": w.non_producer_share,
            "idle_alone_s": a.idle_s,
            "idle_with_s": w.idle_s,
            "haar_servers_alone_s": a.confined_here.haar_servers_s,
            "haar_servers_with_s": w.confined_here.haar_servers_s,
            "extra_s": extra,
            "extra_over_alone_wall": extra / alone.producer_wall_s,
            "producer_slowdown": self.slowdown(),
        }))
    }
    /// [`Row::members_cpu`] as one line.
    pub(super) fn members_cpu_line(&self) -> Option<String> {
        let m = self.members_cpu()?;
        let f = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
        Some(format!(
            "{}: members' CPU {}: not the producers' work {:.2} s alone ({:.1}% of it, idle {:.2} s) -> {:.2} s with product generation ({:.1}%, idle {:.2} s; haar servers there {:.2} -> {:.2} s): {:+.2} s = {:+.1}% of the producers' {:.2} s alone, beside a slowdown of {}",
            self.backend,
            m["cpus"],
            f("non_producer_alone_s"),
            100.0 * f("non_producer_share_alone"),
            f("idle_alone_s"),
            f("non_producer_with_s"),
            100.0 * f("non_producer_share_with"),
            f("idle_with_s"),
            f("haar_servers_alone_s"),
            f("haar_servers_with_s"),
            f("extra_s"),
            100.0 * f("extra_over_alone_wall"),
            self.alone.as_ref().map_or(f64::NAN, |a| a.producer_wall_s),
            self.slowdown()
                .map(|s| format!("{:+.1}%", 100.0 * s))
                .unwrap_or_else(|| "n/a".into()),
        ))
    }
    /// One line per run of the row: where the CPUs' time went.
    pub(super) fn cpu_lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(c) = self.alone.as_ref().and_then(|a| a.cpu.as_ref()) {
            v.push(format!("{} alone: {}", self.backend, c.line()));
        }
        if let Some(c) = &self.with.cpu {
            v.push(format!("{} + consumers: {}", self.backend, c.line()));
        }
        v
    }
    fn latency(&self) -> (f64, f64) {
        p50_p99(&self.with.step_latency_ms)
    }
    fn trigger(&self) -> (f64, f64) {
        p50_p99(&self.with.trigger_latency_ms)
    }
    pub(super) fn line(&self) -> String {
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

pub(super) fn report(
    a: &Options,
    site: &Site,
    l: &Layout,
    replicas: usize,
    floor_ms: f64,
    rows: &[Row],
) -> Value {
    json!({
        "tool": "haar workflow",
        "version": env!("CARGO_PKG_VERSION"),
        "layout": l,
        "consumers": a.consumers,
        "compute_ms": a.compute_ms,
        "nodes": a.vcluster.unwrap_or(a.nodes),
        "site": site.describe(),
        "vcluster": site.cluster.as_ref().map(|c| json!({
            "nodes": c.vc.nodes.iter().map(|n| &n.name).collect::<Vec<_>>(),
            "producer_nodes": c.producers.iter().map(|&i| &c.vc.nodes[i].name).collect::<Vec<_>>(),
            "consumer_nodes": c.consumers.iter().map(|&i| &c.vc.nodes[i].name).collect::<Vec<_>>(),
            "shared_bw": c.vc.shared_bw,
            "node_bw": c.vc.node_bw,
            "pmem_size": c.vc.pmem_size,
            "cpus": c.vc.nodes.iter().map(|n| (n.name.clone(), n.cpus.clone())).collect::<std::collections::BTreeMap<_, _>>(),
            "shared_dir": site.shared_dir,
            "pmem_dir": site.pmem_dir,
        })),
        "replicas": replicas,
        "volume_bytes_per_run": l.total_bytes(),
        "product_floor_ms": floor_ms,
        "machine": crate::bench::machine_description(),
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
                "server_metrics": r.metrics,
                "members_cpu": r.members_cpu(),
                "write_gib_per_s_alone": r.alone.as_ref().map(|x| x.bytes as f64 / x.producer_io_s.max(1e-9) / GIB),
            })
        }).collect::<Vec<_>>(),
    })
}

pub(super) fn print_table(l: &Layout, a: &Options, site: &Site, floor_ms: f64, rows: &[Row]) {
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
    if site.cluster.is_some() {
        println!("({})", site.describe());
    }
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
        if site.cluster.is_some() {
            println!(
                "haar: a consumer reads its own node's server's pool directly while connected, the other nodes' fields over TCP (same-host reads, design §8; HAAR_LOCAL_READS=0: all over TCP)."
            );
        } else {
            println!(
                "haar: consumers on the servers' machine read the pools directly while connected (same-host reads, design §8; HAAR_LOCAL_READS=0: over TCP)."
            );
        }
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
    if rows.iter().any(|r| r.members_cpu().is_some()) {
        println!();
        println!(
            "CPU over each run's producers' span (go -> last member flush; /proc/stat and /proc/PID/stat), on the members' CPU(s):"
        );
        for line in rows.iter().filter_map(Row::members_cpu_line) {
            println!("{line}");
        }
    }
    for r in rows {
        let Some(m) = &r.metrics else { continue };
        let v = |when: &str, k: &str| m[when][k].as_f64().unwrap_or(0.0);
        let gib = |x: f64| x / GIB;
        println!(
            "{} servers' metrics ({}), before -> after the run with consumers: requests {:.0} -> {:.0}, field bytes received {:.2} -> {:.2} GiB, sent {:.2} -> {:.2} GiB",
            r.backend,
            m["endpoints"]
                .as_array()
                .map(|e| e
                    .iter()
                    .filter_map(|x| x.as_str())
                    .map(|x| format!("http://{x}/metrics"))
                    .collect::<Vec<_>>()
                    .join(" "))
                .unwrap_or_default(),
            v("before", "haar_requests_total"),
            v("after", "haar_requests_total"),
            gib(v("before", "haar_field_bytes_received_total")),
            gib(v("after", "haar_field_bytes_received_total")),
            gib(v("before", "haar_field_bytes_sent_total")),
            gib(v("after", "haar_field_bytes_sent_total")),
        );
    }
}

pub(super) fn plot(path: &Path, rows: &[Row]) -> Result<(), Error> {
    let bars: Vec<crate::plot::BarGroup> = rows
        .iter()
        .map(|r| crate::plot::BarGroup {
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
    crate::plot::workflow_png(
        path,
        "haar workflow",
        &["alone", "with product generation"],
        &bars,
        &lines,
    )
    .map_err(Error::Failed)
}
