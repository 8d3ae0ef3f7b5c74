//! The parent of a scale run: starts one worker per store, has them fill to each size in
//! turn, gathers their in-process figures and the one-off CLI figures, and hands the whole to
//! the report. Owns the workers' processes and the run's directory layout.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

use haar::OpenOptions;
use serde_json::{Value, json};

use super::oneoff::{Tools, fdb5_env, haar_env, wheel};
use super::report::{markdown, plot, render, thousands, verdicts};
use super::{InProcess, MEMBERS, Options, PER_MEMBER_STEP, Picks, Side, Spec};
use crate::error::{Error, io};
use crate::fdb5;
use crate::stats::median;

/// A running scale worker.
struct Worker {
    side: Side,
    child: std::process::Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    log: PathBuf,
    version: String,
}

impl Worker {
    fn start(mut cmd: Command, side: Side, log: PathBuf) -> Result<Worker, Error> {
        let err =
            std::fs::File::create(&log).map_err(io(format!("cannot create {}", log.display())))?;
        crate::procs::die_with_parent(&mut cmd);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .map_err(io(format!("cannot start the {} worker", side.name())))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut w = Worker {
            side,
            child,
            stdin,
            stdout,
            log,
            version: String::new(),
        };
        let ready = w.expect("ready", |_| {})?;
        w.version = ready["version"].as_str().unwrap_or("").to_string();
        Ok(w)
    }

    /// Reads lines until `word JSON`, handing `progress N` lines to `on_progress`.
    fn expect(&mut self, word: &str, mut on_progress: impl FnMut(u64)) -> Result<Value, Error> {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stdout
                .read_line(&mut line)
                .map_err(io(format!("reading the {} worker", self.side.name())))?;
            if n == 0 {
                return Err(self.died(word));
            }
            let (w, rest) = line
                .trim_end()
                .split_once(' ')
                .unwrap_or((line.trim_end(), ""));
            if w == "progress" {
                on_progress(rest.parse().unwrap_or(0));
            } else if w == word {
                return serde_json::from_str(rest).map_err(|e| {
                    Error::Failed(format!("{} worker said {line:?}: {e}", self.side.name()))
                });
            }
        }
    }

    fn died(&mut self, waiting_for: &str) -> Error {
        if crate::procs::interrupted() {
            return Error::Interrupted;
        }
        let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(8).collect();
        Error::Failed(format!(
            "the {} worker exited ({status}) before `{waiting_for}`:\n{}",
            self.side.name(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    }

    fn say(&mut self, line: &str) -> Result<(), Error> {
        let stdin = self.stdin.as_mut().expect("open until drop");
        if stdin.write_all(format!("{line}\n").as_bytes()).is_err() || stdin.flush().is_err() {
            return Err(self.died(line.split(' ').next().unwrap_or("")));
        }
        Ok(())
    }

    /// Closes its stdin and waits for it to exit.
    fn finish(mut self) -> Result<(), Error> {
        self.stdin = None;
        match self.child.wait() {
            Ok(s) if s.success() => Ok(()),
            _ => Err(self.died("its exit")),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.stdin.take().is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Bytes the files under `dir` occupy (allocated blocks), in MB.
fn du_mb(dir: &Path) -> f64 {
    use std::os::unix::fs::MetadataExt;
    fn walk(p: &Path) -> u64 {
        let Ok(m) = std::fs::symlink_metadata(p) else {
            return 0;
        };
        if m.is_dir() {
            std::fs::read_dir(p)
                .map(|rd| rd.filter_map(|e| e.ok()).map(|e| walk(&e.path())).sum())
                .unwrap_or(0)
        } else {
            m.blocks() * 512
        }
    }
    walk(dir) as f64 / 1e6
}

/// A small deterministic generator for the picks (xorshift64*).
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

pub(super) fn run_in(o: &Options, dir: &Path) -> Result<(), Error> {
    let load_start = loadavg();
    let haar_root = dir.join("haar");
    let fdb5_root = dir.join("fdb5");
    let exe = std::env::current_exe().map_err(io("cannot find the haar executable"))?;
    let spec = |side| {
        crate::worker::WorkerSpec::Scale(Spec {
            side,
            field_bytes: o.field_bytes,
        })
    };
    eprintln!(
        "haar bench --scale: stores in {} ({}, {} B fields){}",
        dir.display(),
        o.backend,
        o.field_bytes,
        if o.keep { "" } else { ", removed afterwards" }
    );

    let haar_opts = OpenOptions {
        root: Some(haar_root.clone()),
        backend: Some(o.backend.clone()),
        ..OpenOptions::default()
    };
    let mut cmd = crate::worker::command(&crate::worker::globals(&haar_opts)?, &spec(Side::Haar))?;
    haar_env(&mut cmd);
    let mut haar = Worker::start(cmd, Side::Haar, dir.join("haar-worker.log"))?;

    let (wheel, skipped) = if o.fdb5 {
        match wheel() {
            Ok(w) => (Some(w), None),
            Err(why) => (None, Some(why)),
        }
    } else {
        (None, Some("--no-fdb5 given".to_string()))
    };
    if let Some(why) = &skipped {
        eprintln!("haar bench --scale: FDB5 skipped: {why}");
    }
    let fdb5_config = match &wheel {
        Some(_) => fdb5::setup_root(&fdb5_root)?,
        None => Vec::new(),
    };
    let mut fdb = match &wheel {
        Some(w) => {
            let mut cmd = crate::worker::command(&[], &spec(Side::Fdb5))?;
            fdb5_env(&mut cmd, w, &fdb5_config);
            Some(Worker::start(cmd, Side::Fdb5, dir.join("fdb5-worker.log"))?)
        }
        None => None,
    };

    let mut rows = Vec::new();
    let mut done: u64 = 0;
    for &size in &o.sizes {
        let target = size.div_ceil(PER_MEMBER_STEP);
        let fields = target * PER_MEMBER_STEP;
        let mut draw = Draw(0x5eed ^ size);
        let picks = Picks {
            opens: (0..o.runs).map(|_| draw.below(fields)).collect(),
            lists: (0..o.runs).map(|_| draw.below(target)).collect(),
            reads: (0..o.runs).map(|_| draw.below(fields)).collect(),
        };
        let mut row = json!({
            "fields": fields,
            "requested": size,
            "member_steps": target,
            "steps": target.div_ceil(MEMBERS),
        });
        let mut workers: Vec<&mut Worker> = vec![&mut haar];
        if let Some(f) = fdb.as_mut() {
            workers.push(f);
        }
        for w in workers {
            let side = w.side;
            let label = format!("{} fill to {}", side.name(), thousands(fields));
            let pb = crate::progress::bar(fields - done * PER_MEMBER_STEP, &label, o.quiet);
            let from = done * PER_MEMBER_STEP;
            w.say(&format!("fill {target}"))?;
            let filled = w.expect("filled", |n| pb.set_position(n.saturating_sub(from)))?;
            pb.finish_and_clear();
            let pb = crate::progress::bar(
                1,
                &format!("{} measure at {}", side.name(), thousands(fields)),
                o.quiet,
            );
            pb.tick();
            w.say(&format!(
                "measure {}",
                serde_json::to_string(&picks).expect("picks")
            ))?;
            let inproc: InProcess = serde_json::from_value(w.expect("measured", |_| {})?)
                .map_err(|e| Error::Failed(format!("{} worker's figures: {e}", side.name())))?;
            let tools = Tools {
                side,
                haar: Some((exe.clone(), haar_root.clone(), o.backend.clone())),
                fdb5: wheel.as_ref().map(|w| (w, fdb5_config.as_slice())),
                dir,
            };
            let cli = tools.measure(&picks, o.field_bytes)?;
            pb.finish_and_clear();
            let secs = filled["seconds"].as_f64().unwrap_or(f64::NAN);
            let settle = filled["settle_seconds"].as_f64().unwrap_or(f64::NAN);
            let added = filled["fields"].as_f64().unwrap_or(f64::NAN);
            let max = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
            row[side.name()] = json!({
                "archive_fields_per_s": added / secs,
                "archive_seconds": secs,
                "archive_fields": added,
                "settle_seconds": settle,
                "archive_settled_fields_per_s": added / (secs + settle),
                "open_ms": median(inproc.open_ms.clone()),
                "list_ms": median(inproc.list_ms.clone()),
                "retrieve_ms": median(inproc.read_ms.clone()),
                "list_cli_ms": median(cli.list_ms.clone()),
                "list_cli_rss_mb": max(&cli.list_rss),
                "retrieve_cli_ms": median(cli.retrieve_ms.clone()),
                "retrieve_cli_rss_mb": max(&cli.retrieve_rss),
                "store_mb": du_mb(match side { Side::Haar => &haar_root, Side::Fdb5 => &fdb5_root }),
                "listed": inproc.listed,
                "runs": {
                    "open_ms": inproc.open_ms, "list_ms": inproc.list_ms,
                    "retrieve_ms": inproc.read_ms, "list_cli_ms": cli.list_ms,
                    "list_cli_rss_mb": cli.list_rss, "retrieve_cli_ms": cli.retrieve_ms,
                    "retrieve_cli_rss_mb": cli.retrieve_rss,
                },
            });
            if crate::procs::interrupted() {
                return Err(Error::Interrupted);
            }
        }
        done = target;
        rows.push(row);
    }
    let haar_version = haar.version.clone();
    haar.finish()?;
    let fdb5_version = fdb.as_ref().map(|f| f.version.clone());
    if let Some(f) = fdb {
        f.finish()?;
    }

    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "loadavg": { "start": load_start, "end": loadavg() },
        "machine": crate::bench::machine_description(),
        "backend": o.backend,
        "root": dir.display().to_string(),
        "field_bytes": o.field_bytes,
        "fields_per_member_step": PER_MEMBER_STEP,
        "members": MEMBERS,
        "runs": o.runs,
        "haar": haar_version,
        "fdb5": match (&wheel, &skipped) {
            (Some(w), _) => json!({
                "version": fdb5_version,
                "library": w.lib.display().to_string(),
                "in_process": "C API in a worker process: fdb_list (no duplicates, depth 3, every element's attrs) on an open handle; fdb_retrieve + data reader on a new handle (open) or the open one",
                "cli": "the wheel's fdb-list --porcelain REQUEST and fdb-read REQUEST_FILE TARGET",
            }),
            (None, why) => json!({ "skipped": why }),
        },
        "sizes": rows,
    });
    let mut report = report;
    report["verdicts"] = Value::Array(verdicts(&report));
    let text = render(&report);
    print!("{text}");
    let json_path = o.json.clone().unwrap_or_else(|| o.out.join("scale.json"));
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&report).expect("json") + "\n",
    )
    .map_err(io(format!("cannot write {}", json_path.display())))?;
    let md = o.out.join("benchmarks-scale.md");
    std::fs::write(&md, markdown(&report, &text))
        .map_err(io(format!("cannot write {}", md.display())))?;
    let png = o.out.join("scale.png");
    plot(&report, &png).map_err(|e| Error::Failed(format!("scale plot: {e}")))?;
    eprintln!(
        "haar bench --scale: figures saved to {}, {} and {}",
        json_path.display(),
        md.display(),
        png.display()
    );
    Ok(())
}

/// The host's load averages (`/proc/loadavg`'s first three figures): this benchmark shares
/// its host, and a busy one shows here.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
