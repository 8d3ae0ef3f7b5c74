//! The scale report: the targets judged on haar's figures (FDB5's beside them), the tables
//! printed and saved as Markdown, and the log-log plot. Pure over the run's JSON.

use std::path::Path;

use serde_json::{Value, json};

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A figure for the table: 3 significant digits, `–` when not measured.
fn num(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// The targets of issue 13, each judged on haar's figures (FDB5's beside them).
pub(super) fn verdicts(r: &Value) -> Vec<Value> {
    let rows = r["sizes"].as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        return Vec::new();
    }
    // The absolute targets are set at 10^6 fields: the measured size nearest to it.
    let at = rows
        .iter()
        .min_by(|a, b| {
            let d = |x: &Value| (f(&x["fields"]).log10() - 6.0).abs();
            d(a).total_cmp(&d(b))
        })
        .expect("non-empty");
    let at_n = thousands(at["fields"].as_u64().unwrap_or(0));
    let fdb5 = rows.iter().all(|x| x["fdb5"].is_object());
    let get = |x: &Value, side: &str, col: &str| f(&x[side][col]);
    let mut v = Vec::new();
    let mut push = |target: String, haar: f64, peer: f64, unit: &str, pass: Option<bool>| {
        v.push(json!({
            "target": target,
            "haar": haar,
            "fdb5": if peer.is_finite() { json!(peer) } else { Value::Null },
            "unit": unit,
            "verdict": match pass { Some(true) => "PASS", Some(false) => "FAIL", None => "n/a" },
        }));
    };
    for (col, limit, unit, what) in [
        (
            "retrieve_cli_ms",
            20.0,
            "ms",
            "one-off CLI retrieve of one field ≤ 20 ms wall",
        ),
        (
            "retrieve_cli_rss_mb",
            50.0,
            "MB",
            "one-off CLI retrieve of one field ≤ 50 MB peak RSS",
        ),
        (
            "list_ms",
            10.0,
            "ms",
            "list of 1,644 fields ≤ 10 ms (in-process)",
        ),
        (
            "list_cli_ms",
            10.0,
            "ms",
            "list of 1,644 fields ≤ 10 ms (one-off CLI, wall)",
        ),
    ] {
        let h = get(at, "haar", col);
        push(
            format!("{what}, at {at_n} fields"),
            h,
            get(at, "fdb5", col),
            unit,
            h.is_finite().then_some(h <= limit),
        );
    }
    let (first, last) = (&rows[0], &rows[rows.len() - 1]);
    let span = format!(
        "{} → {} fields",
        thousands(first["fields"].as_u64().unwrap_or(0)),
        thousands(last["fields"].as_u64().unwrap_or(0))
    );
    let spread = |side: &str, col: &str| {
        let vals: Vec<f64> = rows.iter().map(|x| get(x, side, col)).collect();
        let max = vals.iter().copied().fold(f64::NAN, f64::max);
        let min = vals.iter().copied().fold(f64::NAN, f64::min);
        max / min
    };
    for (col, what) in [
        ("retrieve_cli_ms", "one-off CLI retrieve wall"),
        ("retrieve_cli_rss_mb", "one-off CLI retrieve peak RSS"),
        ("list_ms", "list of 1,644 fields (in-process)"),
        ("list_cli_ms", "list of 1,644 fields (one-off CLI)"),
    ] {
        let h = spread("haar", col);
        push(
            format!("{what} flat within 2× (largest ÷ smallest), {span}"),
            h,
            if fdb5 { spread("fdb5", col) } else { f64::NAN },
            "×",
            (rows.len() > 1 && h.is_finite()).then_some(h <= 2.0),
        );
    }
    // Speed-ups over FDB5: the worst size counts.
    for (col, want, what) in [
        ("list_ms", 5.0, "list ≥ 5× FDB5 (in-process), worst size"),
        (
            "list_cli_ms",
            5.0,
            "list ≥ 5× FDB5 (one-off CLI), worst size",
        ),
        (
            "retrieve_cli_ms",
            3.0,
            "retrieve ≥ 3× FDB5 (one-off CLI wall), worst size",
        ),
        (
            "open_ms",
            3.0,
            "retrieve ≥ 3× FDB5 (in-process, fresh handle), worst size",
        ),
    ] {
        let speedup = rows
            .iter()
            .map(|x| get(x, "fdb5", col) / get(x, "haar", col))
            .fold(f64::NAN, f64::min);
        push(
            what.to_string(),
            speedup,
            f64::NAN,
            "× FDB5",
            (fdb5 && speedup.is_finite()).then_some(speedup >= want),
        );
    }
    let rate = |side: &str| {
        get(last, side, "archive_fields_per_s") / get(first, side, "archive_fields_per_s")
    };
    let h = rate("haar");
    push(
        format!("archive rate at the largest size within 20% of the smallest's ({span})"),
        h,
        if fdb5 { rate("fdb5") } else { f64::NAN },
        "× first",
        (rows.len() > 1 && h.is_finite()).then_some(h >= 0.8),
    );
    v
}

/// The human-readable tables (also in the Markdown report).
pub(super) fn render(r: &Value) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "machine: {}\n",
        r["machine"].as_str().unwrap_or("")
    ));
    s.push_str(&format!(
        "one database, {} B fields, {} fields per member-step (137 levels × 12 params), {} members per step, a flush per member-step; haar {}; FDB5 {}\n",
        r["field_bytes"],
        r["fields_per_member_step"],
        r["members"],
        r["haar"].as_str().unwrap_or(""),
        match r["fdb5"]["version"].as_str() {
            Some(v) => format!("{v} (PyPI wheel fdb5lib: C API in its own worker process; CLI: fdb-list, fdb-read)"),
            None => format!("not run: {}", r["fdb5"]["skipped"].as_str().unwrap_or("")),
        },
    ));
    s.push_str(&format!(
        "p50 of {} runs after one untimed warm-up (RSS: the largest); `speed-up`: FDB5's cost ÷ haar's (archive: haar's rate ÷ FDB5's); host load average {} at the start, {} at the end\n\n",
        r["runs"],
        r["loadavg"]["start"].as_str().unwrap_or("?"),
        r["loadavg"]["end"].as_str().unwrap_or("?"),
    ));
    s.push_str("| fields | store | archive fields/s | open + 1st read ms | list ms | retrieve ms | list CLI ms | retrieve CLI ms | retrieve CLI RSS MB | store MB |\n");
    s.push_str("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let cols = [
        "archive_fields_per_s",
        "open_ms",
        "list_ms",
        "retrieve_ms",
        "list_cli_ms",
        "retrieve_cli_ms",
        "retrieve_cli_rss_mb",
        "store_mb",
    ];
    for row in r["sizes"].as_array().into_iter().flatten() {
        let n = thousands(row["fields"].as_u64().unwrap_or(0));
        for side in ["haar", "fdb5"] {
            if !row[side].is_object() {
                continue;
            }
            let cells: Vec<String> = cols.iter().map(|c| num(f(&row[side][c]))).collect();
            s.push_str(&format!(
                "| {n} | {} | {} |\n",
                if side == "haar" { "haar" } else { "FDB5" },
                cells.join(" | ")
            ));
        }
        if row["fdb5"].is_object() {
            let cells: Vec<String> = cols
                .iter()
                .map(|c| {
                    let (h, p) = (f(&row["haar"][c]), f(&row["fdb5"][c]));
                    match *c {
                        "archive_fields_per_s" => format!("{}×", num(h / p)),
                        "store_mb" => "–".into(),
                        _ => format!("{}×", num(p / h)),
                    }
                })
                .collect();
            s.push_str(&format!("| {n} | speed-up | {} |\n", cells.join(" | ")));
        }
    }
    let settled: Vec<String> = (r["sizes"].as_array().into_iter().flatten())
        .filter(|row| row["haar"]["settle_seconds"].is_number())
        .map(|row| {
            format!(
                "{} s at {} ({} fields/s counting them)",
                num(f(&row["haar"]["settle_seconds"])),
                thousands(row["fields"].as_u64().unwrap_or(0)),
                num(f(&row["haar"]["archive_settled_fields_per_s"]))
            )
        })
        .collect();
    if !settled.is_empty() {
        s.push_str(&format!(
            "\nhaar's background catalogue merges still running when a fill's last flush returned \
             took {} to finish (closing the writer waits for them); the figures after each fill \
             are measured once they have.\n",
            settled.join(", ")
        ));
    }
    s.push_str("\n| target | haar | FDB5 (same run) | verdict |\n|---|---:|---:|---|\n");
    for v in r["verdicts"].as_array().into_iter().flatten() {
        let unit = v["unit"].as_str().unwrap_or("");
        let val = |x: &Value| match x.as_f64() {
            Some(x) if x.is_finite() => format!("{} {unit}", num(x)),
            _ => "–".into(),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            v["target"].as_str().unwrap_or(""),
            val(&v["haar"]),
            val(&v["fdb5"]),
            v["verdict"].as_str().unwrap_or("")
        ));
    }
    s
}

pub(super) fn markdown(r: &Value, table: &str) -> String {
    format!(
        "# haar at scale: one database, 10^5 fields and up\n\n\
         Produced by `{}` on {}.\n\n\
         - *archive fields/s*: the fields added since the previous size ÷ the time to archive\n\
           and flush them (one flush per member-step of 1,644 fields).\n\
         - *open + 1st read*: a new handle (haar: the store opened from its root; FDB5:\n\
           `fdb_new_handle`) reading one field, in the store's worker process. haar's costs the\n\
           runs it opens plus the catalogue tail it replays (the entries committed since the\n\
           last merge: fewer than the merge threshold, 8,192 by default).\n\
         - *list*: one member-step (1,644 fields) on an open handle (haar: `FieldStore::list`;\n\
           FDB5: `fdb_list`, every element's attributes read); *retrieve*: one field on an open\n\
           handle.\n\
         - *CLI*: a fresh process, wall from spawn to reap with its output read: `haar list`,\n\
           `haar retrieve` (stdout) beside FDB5's `fdb-list` and `fdb-read` (to a file) from the\n\
           same wheel; *RSS*: `ru_maxrss` of that process (`wait4`), in MB (10^6 bytes).\n\
         - *store MB*: blocks allocated under the store's directory (haar on pmem: the pool\n\
           file, which the backend provisions 1 GiB at a time).\n\
         - Which member-steps and fields are measured is drawn at random among those filled;\n\
           both stores get the same draws. Every read is checked (length, field number).\n\n\
         ![cost against size](scale.png)\n\n{}\n",
        r["command"].as_str().unwrap_or("haar bench --scale"),
        r["machine"].as_str().unwrap_or(""),
        table
    )
}

/// The log-log figure: list, retrieve and RSS against the number of fields, both stores.
pub(super) fn plot(r: &Value, path: &Path) -> Result<(), String> {
    use crate::plot::{LogPanel, scale_png};
    use haar_mem::plot::Series;
    let rows = r["sizes"].as_array().cloned().unwrap_or_default();
    let series = |side: &str, col: &str, name: &str| Series {
        name: name.to_string(),
        points: rows
            .iter()
            .map(|x| (f(&x["fields"]), f(&x[side][col])))
            .filter(|p| p.1.is_finite() && p.1 > 0.0)
            .collect(),
    };
    let mut panels = vec![
        LogPanel {
            title: "List of 1,644 fields".into(),
            ylabel: "ms".into(),
            target: Some((10.0, "target ≤ 10 ms at 10^6".into())),
            series: vec![
                series("haar", "list_ms", "haar in-process"),
                series("haar", "list_cli_ms", "haar CLI"),
                series("fdb5", "list_ms", "FDB5 in-process"),
                series("fdb5", "list_cli_ms", "FDB5 CLI"),
            ],
        },
        LogPanel {
            title: "Retrieve one field".into(),
            ylabel: "ms".into(),
            target: Some((20.0, "target (CLI) ≤ 20 ms at 10^6".into())),
            series: vec![
                series("haar", "open_ms", "haar fresh handle"),
                series("haar", "retrieve_cli_ms", "haar CLI"),
                series("fdb5", "open_ms", "FDB5 fresh handle"),
                series("fdb5", "retrieve_cli_ms", "FDB5 CLI"),
            ],
        },
        LogPanel {
            title: "Peak RSS of a one-off CLI retrieve".into(),
            ylabel: "MB".into(),
            target: Some((50.0, "target ≤ 50 MB at 10^6".into())),
            series: vec![
                series("haar", "retrieve_cli_rss_mb", "haar CLI"),
                series("fdb5", "retrieve_cli_rss_mb", "FDB5 CLI"),
            ],
        },
        LogPanel {
            title: "Archive rate reaching each size".into(),
            ylabel: "fields/s".into(),
            target: None,
            series: vec![
                series("haar", "archive_fields_per_s", "haar in-process"),
                series("fdb5", "archive_fields_per_s", "FDB5 in-process"),
            ],
        },
    ];
    for p in &mut panels {
        p.series.retain(|s| !s.points.is_empty());
    }
    scale_png(
        path,
        &format!(
            "Cost against database size ({} B fields, haar {} beside FDB5)",
            r["field_bytes"],
            r["backend"].as_str().unwrap_or("")
        ),
        "Fields in the database",
        &panels,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::COLUMNS;

    #[test]
    fn verdicts_judge_haar_and_show_fdb5() {
        let side = |list: f64, rss: f64, rate: f64| {
            let mut o = json!({});
            for c in COLUMNS {
                o[c] = json!(1.0);
            }
            o["list_ms"] = json!(list);
            o["list_cli_ms"] = json!(list);
            o["retrieve_cli_rss_mb"] = json!(rss);
            o["archive_fields_per_s"] = json!(rate);
            o
        };
        let r = json!({"sizes": [
            {"fields": 100_284, "haar": side(1.0, 10.0, 100.0), "fdb5": side(20.0, 100.0, 40.0)},
            {"fields": 1_000_188, "haar": side(3.0, 60.0, 70.0), "fdb5": side(30.0, 100.0, 40.0)},
        ]});
        let v = verdicts(&r);
        let find = |t: &str| {
            v.iter()
                .find(|x| x["target"].as_str().unwrap().starts_with(t))
                .unwrap_or_else(|| panic!("{t}: {v:?}"))
                .clone()
        };
        assert_eq!(
            find("list of 1,644 fields ≤ 10 ms (in-process)")["verdict"],
            "PASS"
        );
        assert_eq!(
            find("one-off CLI retrieve of one field ≤ 50 MB")["verdict"],
            "FAIL"
        );
        assert_eq!(
            find("list of 1,644 fields (in-process) flat")["verdict"],
            "FAIL"
        );
        assert_eq!(find("list ≥ 5× FDB5 (in-process)")["haar"], json!(10.0));
        assert_eq!(find("archive rate")["verdict"], "FAIL");
        assert!(
            find("one-off CLI retrieve of one field ≤ 20 ms")["target"]
                .as_str()
                .unwrap()
                .contains("1,000,188")
        );
    }
}
