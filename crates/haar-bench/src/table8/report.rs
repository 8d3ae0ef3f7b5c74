//! The report of a Table 8 sweep: the printed table and the log-log plot, over the run's JSON.

use serde_json::Value;

/// Two log-log panels: write throughput against client nodes (haar, FDB5, K x link), and
/// haar over FDB5 with the 3x target.
pub(super) fn plot(path: &std::path::Path, r: &Value) -> Result<(), String> {
    use crate::plot::LogPanel;
    use haar_mem::plot::Series;
    let rows = r["rows"].as_array().cloned().unwrap_or_default();
    let pts = |f: &dyn Fn(&Value) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|row| Some((row["client_nodes"].as_f64()?, f(row)?)))
            .collect()
    };
    let panels = [
        LogPanel {
            title: "write throughput against client nodes".into(),
            ylabel: "GiB/s".into(),
            series: vec![
                Series {
                    name: "haar (a server per node)".into(),
                    points: pts(&|row| row["haar"]["gib_per_s"].as_f64()),
                },
                Series {
                    name: "FDB5 TOC on /shared".into(),
                    points: pts(&|row| row["fdb5"]["gib_per_s"].as_f64()),
                },
                Series {
                    name: "FDB5 5.25 fdb-hammer on /shared".into(),
                    points: pts(&|row| row["fdb_hammer"]["write"]["gib_per_s"].as_f64()),
                },
                Series {
                    name: "K x one node's link".into(),
                    points: pts(&|row| row["k_links_gib_per_s"].as_f64()),
                },
            ],
            target: None,
        },
        LogPanel {
            title: "haar over FDB5 on the shared file system".into(),
            ylabel: "x".into(),
            series: vec![
                Series {
                    name: "haar / FDB5".into(),
                    points: pts(&|row| row["haar_over_fdb5"].as_f64()),
                },
                Series {
                    name: "haar / fdb-hammer".into(),
                    points: pts(&|row| row["haar_over_fdb_hammer"].as_f64()),
                },
            ],
            target: Some((3.0, ">= 3x at 4 nodes".into())),
        },
    ];
    crate::plot::scale_png(
        path,
        "haar hammer --vcluster: write throughput (SC'19 Table 8 shape)",
        "Client nodes (servers for haar: one per client node)",
        &panels,
    )
}

pub(super) fn print_table(r: &Value) {
    println!();
    println!(
        "Write throughput against client nodes (SC'19 Table 8 shape), virtual cluster: /shared at {}, node links {}",
        r["shared_bw"].as_str().unwrap_or("?"),
        r["node_bw"].as_str().unwrap_or("?")
    );
    println!(
        "limits measured in this run: one node's link {:.2} GiB/s; host memcpy {:.2} GiB/s (all nodes share it)",
        r["link_gib_per_s"].as_f64().unwrap_or(0.0),
        r["memcpy_gib_per_s"].as_f64().unwrap_or(0.0)
    );
    println!();
    println!(
        "{:>6} {:>11} {:>11} {:>10} {:>14} {:>14} {:>13} {:>10} {:>16}",
        "nodes",
        "haar GiB/s",
        "FDB5 GiB/s",
        "haar/FDB5",
        "fdb-hammer w",
        "fdb-hammer r",
        "haar/fdb-ham",
        "K x link",
        "haar/(K x link)"
    );
    let cell = |v: &Value, digits: usize, suffix: &str| {
        v.as_f64()
            .map(|x| format!("{x:.digits$}{suffix}"))
            .unwrap_or_else(|| "-".into())
    };
    for row in r["rows"].as_array().into_iter().flatten() {
        let failed = |v: &Value| v.get("failed").is_some();
        let fh = &row["fdb_hammer"];
        println!(
            "{:>6} {:>11.3} {:>11} {:>10} {:>14} {:>14} {:>13} {:>10.3} {:>16.2}",
            row["client_nodes"].as_u64().unwrap_or(0),
            row["haar"]["gib_per_s"].as_f64().unwrap_or(0.0),
            if failed(&row["fdb5"]) {
                "failed".into()
            } else {
                cell(&row["fdb5"]["gib_per_s"], 3, "")
            },
            cell(&row["haar_over_fdb5"], 1, "x"),
            if failed(fh) {
                "failed".into()
            } else {
                cell(&fh["write"]["gib_per_s"], 3, "")
            },
            cell(&fh["read"]["gib_per_s"], 3, ""),
            cell(&row["haar_over_fdb_hammer"], 1, "x"),
            row["k_links_gib_per_s"].as_f64().unwrap_or(0.0),
            row["haar_over_k_links"].as_f64().unwrap_or(0.0),
        );
    }
    for row in r["rows"].as_array().into_iter().flatten() {
        for col in ["fdb5", "fdb_hammer"] {
            if let Some(why) = row[col]["failed"].as_str() {
                println!(
                    "{col} x{} failed: {why}",
                    row["client_nodes"].as_u64().unwrap_or(0)
                );
            }
        }
    }
    println!();
    println!(
        "haar: K servers, one per client node, fields spread by the rendezvous hash; FDB5 (C API) and FDB5 5.25's fdb-hammer: a TOC on the shared GlusterFS; every process flushes at the end of each step (fdb-hammer: of each member's step). fdb-hammer's figures span its processes' first to last I/O."
    );
}
