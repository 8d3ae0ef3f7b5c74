//! `haar bench`, GRIB section: archiving GRIB files end to end (framing, MARS keys through
//! ecCodes, schema, copy, flush) with `haar archive`, beside FDB5's own `fdb-write` on the same
//! files, device and run.
//!
//! Workload: haar's synthetic ensemble ([`haar_grib::synth`], reproducible byte for byte):
//! O320 fields at 16 bits per value (about 824 KiB per message), one file per forecast step as
//! a model writes them. Full size: 10 members × 4 steps × 4 levels × 5 params = 800 messages in
//! 4 files (the size FDB5's figure of 2.6 s is quoted for); `--quick`: 2 × 2 × 2 × 5 = 40
//! messages in 2 files.
//!
//! Each round runs, one after the other and in alternating order, both programs as child
//! processes from start to exit, so process start and ecCodes' definition loading count for
//! both:
//! - `haar --backend pmem --root R archive FILE...` into a pmem root on the same directory.
//!   The pool is created (provisioned: allocated and pre-faulted) before the timed run, which
//!   is how a pool is used in production; its provisioning time is reported beside, and the
//!   ratio is also given with it included.
//! - `haar --backend posix --root R archive FILE...` into a fresh posix root on the same
//!   directory (haar's default backend: files written with `write(2)` and synced, as FDB5's).
//! - the file system's own limit for a store that keeps its fields in files there: the input
//!   files' bytes written into one new file in the same directory with `write(2)`, then
//!   `fsync` (no parsing, no index, no checksum). No file-backed store can beat it.
//! - `fdb-write FILE...` into a fresh FDB5 root with the configuration from FACTS
//!   (`{type: local, engine: toc, schema, spaces: [{handler: Default, roots: [{path}]}]}`, a copy
//!   of `/etc/fdb/schema`, an empty `FDB_DBNAMES_FILE`).
//!
//! This module owns only this measurement; it does not touch the other bench sections.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use haar_grib::{EnsembleSpec, Grid};
use haar_store::PmemBackend;
use haar_store::pmem::PmemOptions;
use serde_json::{Value, json};

use crate::error::{Error, io};
use crate::stats::median;

const MIB: f64 = 1024.0 * 1024.0;

/// The ensemble of this section: full size, or `--quick`'s.
pub fn spec(quick: bool) -> EnsembleSpec {
    let (members, steps, levels) = if quick {
        (2, vec![0, 6], vec![850, 500])
    } else {
        (10, vec![0, 6, 12, 18], vec![1000, 850, 500, 250])
    };
    EnsembleSpec {
        members,
        steps,
        levels,
        params: vec![129, 130, 131, 132, 133],
        grid: Grid::O320,
        date: 20261121,
        time: 0,
        expver: "0001".into(),
        class: "od".into(),
    }
}

/// Writes the ensemble as one file per step into `dir`; returns the files and total bytes.
pub fn write_inputs(dir: &Path, spec: &EnsembleSpec) -> Result<(Vec<PathBuf>, u64), Error> {
    let io = |e: std::io::Error| Error::Failed(format!("bench grib: {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut all = Vec::new();
    haar_grib::generate(spec, &mut all)
        .map_err(|e| Error::Failed(format!("bench grib: generating the ensemble: {e}")))?;
    // `generate` writes step by step, each step the same number of messages.
    let per_file = (spec.message_count() / spec.steps.len() as u64) as usize;
    let msgs: Vec<_> = haar_grib::messages(&all)
        .collect::<Result<_, _>>()
        .map_err(|e| Error::Failed(format!("bench grib: generated data does not frame: {e}")))?;
    let mut files = Vec::new();
    for (step, chunk) in spec.steps.iter().zip(msgs.chunks(per_file)) {
        let start = chunk[0].offset as usize;
        let last = chunk[chunk.len() - 1];
        let end = last.offset as usize + last.bytes.len();
        let path = dir.join(format!("ens_step{step}.grib"));
        std::fs::write(&path, &all[start..end]).map_err(io)?;
        files.push(path);
    }
    Ok((files, all.len() as u64))
}

/// Runs `cmd` to completion; wall seconds and stdout, or what went wrong.
fn timed(mut cmd: Command, what: &str) -> Result<(f64, String), String> {
    let t = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        return Err(format!(
            "{what} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    Ok((secs, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// A fresh FDB5 root under `root`; returns the command with its environment set.
fn fdb_write(root: &Path, files: &[PathBuf]) -> Result<Command, Error> {
    let io = |e: std::io::Error| Error::Failed(format!("bench grib: {}: {e}", root.display()));
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root.join("db")).map_err(io)?;
    std::fs::copy("/etc/fdb/schema", root.join("schema")).map_err(|e| {
        Error::Failed(format!(
            "bench grib: cannot copy /etc/fdb/schema (install fdb5): {e}"
        ))
    })?;
    std::fs::write(root.join("dbnames"), "").map_err(io)?;
    std::fs::write(
        root.join("config.yaml"),
        format!(
            "{{type: local, engine: toc, schema: {}, spaces: [{{handler: Default, roots: [{{path: {}}}]}}]}}\n",
            root.join("schema").display(),
            root.join("db").display()
        ),
    )
    .map_err(io)?;
    let mut cmd = Command::new("fdb-write");
    cmd.args(files)
        .env("FDB5_CONFIG_FILE", root.join("config.yaml"))
        .env("FDB_DBNAMES_FILE", root.join("dbnames"))
        .stdout(Stdio::null());
    Ok(cmd)
}

/// A fresh, provisioned pmem root under `root`; returns the archive command and the seconds
/// provisioning took.
fn haar_archive(root: &Path, files: &[PathBuf], bytes: u64) -> Result<(Command, f64), Error> {
    let _ = std::fs::remove_dir_all(root);
    let t = Instant::now();
    let pool = PmemBackend::open(
        root,
        PmemOptions {
            initial_size: bytes + bytes / 8 + (64 << 20),
            ..PmemOptions::default()
        },
    )
    .map_err(|e| Error::Failed(format!("bench grib: create pool: {e}")))?;
    drop(pool);
    let provision = t.elapsed().as_secs_f64();
    Ok((archive_command("pmem", root, files)?, provision))
}

/// A fresh posix root under `root`; the archive command.
fn haar_posix_archive(root: &Path, files: &[PathBuf]) -> Result<Command, Error> {
    let _ = std::fs::remove_dir_all(root);
    archive_command("posix", root, files)
}

/// `haar --backend BACKEND --root ROOT archive --json FILES...`, this very binary.
fn archive_command(backend: &str, root: &Path, files: &[PathBuf]) -> Result<Command, Error> {
    let exe = std::env::current_exe().map_err(io("bench grib: current_exe"))?;
    let mut cmd = Command::new(exe);
    cmd.env_remove("HAAR_CONFIG")
        .args(["--backend", backend, "--root"])
        .arg(root)
        .args(["archive", "--json"])
        .args(files);
    Ok(cmd)
}

/// Seconds to write the bytes of `files` into one new file in `dir` with `write(2)` in 1 MiB
/// pieces, then `fsync` it: the file system's limit for any store that keeps fields in files
/// there (the input is read from the page cache, where the stores read it too).
fn write_limit(dir: &Path, files: &[PathBuf]) -> Result<f64, Error> {
    use std::io::{Read, Write};
    let path = dir.join("grib-limit.data");
    let io = |e: std::io::Error| Error::Failed(format!("bench grib: {}: {e}", path.display()));
    let mut buf = vec![0u8; 1 << 20];
    let t = Instant::now();
    let mut out = std::fs::File::create(&path).map_err(io)?;
    for f in files {
        let mut input = std::fs::File::open(f).map_err(io)?;
        loop {
            let n = input.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n]).map_err(io)?;
        }
    }
    out.sync_all().map_err(io)?;
    let secs = t.elapsed().as_secs_f64();
    drop(out);
    let _ = std::fs::remove_file(&path);
    Ok(secs)
}

/// Runs a `haar archive --json` command; its wall seconds, once its summary says it stored
/// all `n` fields.
fn archived(cmd: Command, what: &str, n: u64) -> Result<f64, Error> {
    let (secs, out) = timed(cmd, what).map_err(Error::Failed)?;
    let summary: Value = serde_json::from_str(out.trim()).unwrap_or_default();
    if summary["fields"].as_u64() != Some(n) {
        return Err(Error::Failed(format!(
            "bench grib: {what} stored {} of {n} fields: {out}",
            summary["fields"]
        )));
    }
    Ok(secs)
}

/// Runs the GRIB section in `dir`; its JSON (`grib_archive` in the report).
pub fn run(dir: &Path, quick: bool, with_fdb5: bool) -> Result<Value, Error> {
    let spec = spec(quick);
    let t = Instant::now();
    let (files, bytes) = write_inputs(&dir.join("grib-input"), &spec)?;
    let generate_s = t.elapsed().as_secs_f64();
    let n = spec.message_count();
    let rounds = if quick { 2 } else { 3 };
    let (haar_root, fdb_root) = (dir.join("grib-haar"), dir.join("grib-fdb5"));
    let posix_root = dir.join("grib-haar-posix");
    let mut runs = Vec::new();
    let mut fdb5_error = None;
    let fdb5 = with_fdb5
        && Command::new("fdb-write")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
    for round in 0..rounds {
        // Alternate who goes first, so a slow phase of the shared host hits both alike.
        let mut haar_s = None;
        let mut fdb_s = None;
        let mut provision_s = 0.0;
        let mut posix_s = None;
        let mut limit_s = None;
        for turn in 0..4 {
            let turn = (turn + round) % 4;
            if turn == 2 {
                let cmd = haar_posix_archive(&posix_root, &files)?;
                posix_s = Some(archived(cmd, "haar archive (posix)", n)?);
                let _ = std::fs::remove_dir_all(&posix_root);
            } else if turn == 3 {
                limit_s = Some(write_limit(dir, &files)?);
            } else if turn == 0 {
                let (cmd, p) = haar_archive(&haar_root, &files, bytes)?;
                provision_s = p;
                haar_s = Some(archived(cmd, "haar archive", n)?);
                let _ = std::fs::remove_dir_all(&haar_root);
            } else if fdb5 && fdb5_error.is_none() {
                match timed(fdb_write(&fdb_root, &files)?, "fdb-write") {
                    Ok((secs, _)) => fdb_s = Some(secs),
                    Err(e) => fdb5_error = Some(e),
                }
                let _ = std::fs::remove_dir_all(&fdb_root);
            }
        }
        runs.push(
            json!({"haar_s": haar_s, "haar_provision_s": provision_s, "fdb5_s": fdb_s,
                         "haar_posix_s": posix_s, "write_limit_s": limit_s}),
        );
    }
    let col = |k: &str| -> Vec<f64> { runs.iter().filter_map(|r| r[k].as_f64()).collect() };
    let rate = |secs: f64| json!({"seconds": secs, "fields_per_s": n as f64 / secs, "mib_per_s": bytes as f64 / MIB / secs});
    let haar_s = median(col("haar_s"));
    let provision_s = median(col("haar_provision_s"));
    let fdb_times = col("fdb5_s");
    let mut out = json!({
        "workload": format!(
            "synthetic ensemble O320 16-bit: {} members x {} steps x {} levels x {} params, one file per step",
            spec.members, spec.steps.len(), spec.levels.len(), spec.params.len()
        ),
        "messages": n, "bytes": bytes, "files": files.len(),
        "message_kib": bytes as f64 / n as f64 / 1024.0,
        "generate_s": generate_s, "rounds": runs,
        "haar": rate(haar_s), "haar_provision_s": provision_s,
        "haar_command": format!("haar --backend pmem --root <dir>/grib-haar archive <dir>/grib-input/ens_step*.grib"),
        "eccodes": haar_grib::eccodes_version(),
    });
    if fdb_times.len() == runs.len() && !fdb_times.is_empty() {
        let fdb_s = median(fdb_times.clone());
        let ratios: Vec<f64> = runs
            .iter()
            .filter_map(|r| Some(r["fdb5_s"].as_f64()? / r["haar_s"].as_f64()?))
            .collect();
        out["fdb5"] = rate(fdb_s);
        out["fdb5_command"] =
            json!("fdb-write <dir>/grib-input/ens_step*.grib (FDB5 root <dir>/grib-fdb5)");
        out["ratio"] = json!(fdb_s / haar_s);
        out["ratio_per_round"] = json!(ratios);
        out["ratio_with_provisioning"] = json!(fdb_s / (haar_s + provision_s));
        let posix_s = median(col("haar_posix_s"));
        let limit_s = median(col("write_limit_s"));
        out["haar_posix"] = rate(posix_s);
        out["ratio_posix"] = json!(fdb_s / posix_s);
        out["ratio_posix_per_round"] = json!(
            runs.iter()
                .filter_map(|r| Some(r["fdb5_s"].as_f64()? / r["haar_posix_s"].as_f64()?))
                .collect::<Vec<f64>>()
        );
        out["write_limit"] = rate(limit_s);
        out["ratio_write_limit"] = json!(fdb_s / limit_s);
    } else {
        out["fdb5_missing"] = json!(fdb5_error.unwrap_or_else(|| if with_fdb5 {
            "fdb-write not found (install fdb5)".into()
        } else {
            "FDB5 peer disabled".into()
        }));
    }
    let _ = std::fs::remove_dir_all(dir.join("grib-input"));
    Ok(out)
}

/// `haar bench --grib-only`: this section alone, printed and saved to `json`.
pub fn alone(
    dir: &Path,
    quick: bool,
    with_fdb5: bool,
    json_path: &Path,
    machine: &str,
) -> Result<(), Error> {
    let report = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "machine": machine,
        "grib_archive": run(dir, quick, with_fdb5)?,
    });
    print!("machine: {machine}\n{}", render(&report["grib_archive"]));
    std::fs::write(
        json_path,
        serde_json::to_string_pretty(&report).expect("json") + "\n",
    )
    .map_err(io(format!("cannot write {}", json_path.display())))?;
    eprintln!("haar bench: figures saved to {}", json_path.display());
    Ok(())
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// The section's lines in the text/Markdown report.
pub fn render(g: &Value) -> String {
    if g.is_null() {
        return String::new();
    }
    let mut s = format!(
        "\nGRIB archive end to end ({}; {} messages of {:.0} KiB in {} files, {:.0} MiB; ecCodes {}), median of {} rounds:\n\n",
        g["workload"].as_str().unwrap_or(""),
        g["messages"],
        f(&g["message_kib"]),
        g["files"],
        f(&g["bytes"]) / MIB,
        g["eccodes"].as_str().unwrap_or(""),
        g["rounds"].as_array().map_or(0, Vec::len),
    );
    s.push_str("| program | seconds | fields/s | MiB/s | ÷ fdb-write |\n|---|---|---|---|---|\n");
    // One table row: a program's figures (`g[what]`) and its ratio to fdb-write.
    let row = |label: &str, what: &str, ratio: &str| {
        format!(
            "| {label} | {:.2} | {:.0} | {:.0} | {ratio} |\n",
            f(&g[what]["seconds"]),
            f(&g[what]["fields_per_s"]),
            f(&g[what]["mib_per_s"]),
        )
    };
    let ratio = |k: &str| match g[k].as_f64() {
        Some(r) => format!("{r:.2}×"),
        None => "–".into(),
    };
    s.push_str(&row(
        "haar archive (pmem, pool provisioned beforehand)",
        "haar",
        &ratio("ratio"),
    ));
    if g["haar_posix"].is_object() {
        s.push_str(&row(
            "haar archive (posix, haar's default backend)",
            "haar_posix",
            &ratio("ratio_posix"),
        ));
        s.push_str(&row(
            "limit: the same bytes `write(2)` into one file + `fsync`, same directory",
            "write_limit",
            &ratio("ratio_write_limit"),
        ));
    }
    if g["fdb5"].is_object() {
        s.push_str(&row("fdb-write (FDB5 5.10, toc)", "fdb5", "1×"));
        let rounds = |k: &str| -> String {
            g[k].as_array()
                .map(|v| {
                    v.iter()
                        .map(|r| format!("{:.2}×", f(r)))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .join(", ")
        };
        s.push_str(&format!(
            "\nhaar ÷ fdb-write, per round: {}; with the pool's provisioning ({:.2} s) counted: {:.2}× (target ≥ 2×)\n",
            rounds("ratio_per_round"),
            f(&g["haar_provision_s"]),
            f(&g["ratio_with_provisioning"]),
        ));
        if g["haar_posix"].is_object() {
            s.push_str(&format!(
                "haar posix ÷ fdb-write, per round: {} (target ≥ 2×; a file store can reach at most the limit row's {:.2}× here)\n",
                rounds("ratio_posix_per_round"),
                f(&g["ratio_write_limit"]),
            ));
        }
        if g["messages"].as_u64().is_some_and(|n| n < 100) {
            s.push_str(
                "(a --quick size: both programs' start-up (ecCodes definitions, store) weighs as much as the \
                 archive itself; the target is for the full size)\n",
            );
        }
    } else {
        s.push_str(&format!(
            "\n(FDB5 not measured: {})\n",
            g["fdb5_missing"].as_str().unwrap_or("")
        ));
    }
    s
}
