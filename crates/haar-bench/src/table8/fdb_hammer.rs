//! FDB5 5.25's own `fdb-hammer` (the `fdb5lib` wheel's `bin/`) as Table 8's third column:
//! every client node runs it in its distributed (ITT) mode against an FDB5 TOC on `/shared`,
//! writing and then reading back the same shape as haar's writers.
//!
//! The wheel's `fdb-hammer` dies in `libeckit.so`'s static initialisers unless it is started
//! with [`AUDIT_C`] as `LD_AUDIT` (docs/benchmarks.md, "Why the wheel's `fdb-hammer` 5.25
//! crashes"): the section indices of the wheel's `libeckit.so` dynamic symbols are off by
//! three, so `eckit::EmptyHandle::reanimator_` (in `.bss`) looks as if it were in `.got`,
//! inside `PT_GNU_RELRO`; the linker
//! therefore put `fdb-hammer`'s copy of it (an `R_X86_64_COPY`) in the executable's
//! `.data.rel.ro`, which the loader makes read-only before `libeckit.so`'s constructor builds
//! the object there. The audit library makes that one range writable again after relocation
//! (and leaves it so: the object's destructor writes there at exit). The wheel's files are
//! not modified.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::layout::Layout;

/// A node to run processes on: its host name (for `--nodes`) and how to place a command
/// there (a virtual-cluster node's [`crate::vcluster::Node::command`]).
pub(super) struct Host<'a> {
    pub(super) name: String,
    pub(super) place: Box<dyn Fn(&Command) -> Command + 'a>,
}

use super::GIB;

/// The `LD_AUDIT` library that lets the wheel's `fdb-hammer` start (see the module). Its
/// source is `fdb-hammer-audit.c` beside this file, which `bench/fdb5_plugin_bench.py` also
/// builds.
pub(super) const AUDIT_C: &str = include_str!("fdb-hammer-audit.c");

/// Writes the template GRIB `fdb-hammer` stamps its fields from: one GRIB2 message of
/// about `field_size` bytes (16-bit values on a square grid), an ensemble member
/// (`stream=enfo`, `type=pf`) on pressure levels, with the run's class, expver and date.
const TEMPLATE_PY: &str = r#"
import sys, eccodes, numpy as np
path, size, klass, expver, date = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
side = max(int((max(size - 200, 128) // 2) ** 0.5), 8)
h = eccodes.codes_grib_new_from_samples("regular_ll_pl_grib2")
for k, v in (("Ni", side), ("Nj", side), ("iDirectionIncrement", 1000),
             ("jDirectionIncrement", 1000), ("bitsPerValue", 16)):
    eccodes.codes_set(h, k, v)
eccodes.codes_set_values(h, np.random.default_rng(0).random(side * side) * 300)
for k, v in (("centre", 98), ("setLocalDefinition", 1), ("localDefinitionNumber", 1),
             ("productDefinitionTemplateNumber", 1), ("class", klass), ("expver", expver),
             ("stream", "enfo"), ("type", "pf"), ("number", 1), ("dataDate", date),
             ("dataTime", 0), ("level", 1), ("step", 0), ("paramId", 130)):
    eccodes.codes_set(h, k, v)
open(path, "wb").write(eccodes.codes_get_message(h))
"#;

/// The barrier's TCP port on the first node (each node is its own network namespace).
const BARRIER_PORT: u16 = 7777;

/// What every `fdb-hammer` run of a sweep shares: the tool, its audit shim and template.
pub(super) struct Kit {
    /// Holds the shim, the template and the per-node run directories (in `/var/tmp`,
    /// which every node sees).
    pub(super) dir: tempfile::TempDir,
    pub(super) bin: PathBuf,
    pub(super) audit: PathBuf,
    pub(super) grib: PathBuf,
    pub(super) version: String,
}

fn run_here(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{what}: {} ({})",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The wheel's `fdb-hammer` (`HAAR_FDB_HAMMER` overrides), its audit shim built with `cc`,
/// and a template GRIB of `layout`'s field size; an error says what is missing.
pub(super) fn prepare(layout: &Layout) -> Result<Kit, String> {
    let dir = tempfile::Builder::new()
        .prefix("haar-fdb-hammer-")
        .tempdir_in("/var/tmp")
        .map_err(|e| format!("cannot create a directory in /var/tmp: {e}"))?;
    let (bin, version) = match std::env::var_os("HAAR_FDB_HAMMER") {
        Some(b) => (PathBuf::from(b), "HAAR_FDB_HAMMER".to_string()),
        None => {
            let out = run_here(
                Command::new("python3").args([
                    "-c",
                    "import fdb5lib, os; print(os.path.join(os.path.dirname(fdb5lib.__file__), 'bin', 'fdb-hammer')); print(fdb5lib.__version__)",
                ]),
                "finding the fdb5lib wheel (pip install pyfdb==5.25.0.33)",
            )?;
            let mut l = out.lines();
            let bin = PathBuf::from(l.next().unwrap_or_default());
            (bin, l.next().unwrap_or("?").to_string())
        }
    };
    if !bin.is_file() {
        return Err(format!("{} is missing", bin.display()));
    }
    let src = dir.path().join("fdb-hammer-audit.c");
    let audit = dir.path().join("fdb-hammer-audit.so");
    std::fs::write(&src, AUDIT_C).map_err(|e| format!("cannot write {}: {e}", src.display()))?;
    run_here(
        Command::new("cc")
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(&audit)
            .arg(&src),
        "building fdb-hammer's LD_AUDIT shim",
    )?;
    let grib = dir.path().join("template.grib");
    run_here(
        Command::new("python3")
            .args(["-c", TEMPLATE_PY])
            .arg(&grib)
            .arg(layout.field_size.to_string())
            .args([&layout.class, &layout.expver, &layout.date]),
        "writing fdb-hammer's template GRIB with ecCodes' Python module",
    )?;
    Ok(Kit {
        dir,
        bin,
        audit,
        grib,
        version,
    })
}

/// What one `fdb-hammer` process said it did.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Said {
    pub(super) fields: u64,
    pub(super) bytes: u64,
    /// Wall-clock (epoch) seconds before its first and after its last I/O.
    pub(super) first_io: f64,
    pub(super) last_io: f64,
}

/// Parses `fdb-hammer`'s report (write: `Fields written`, read: `Fields read`, …).
pub(super) fn parse(out: &str) -> Option<Said> {
    let mut s = Said::default();
    let (mut f, mut b, mut t0, mut t1) = (false, false, false, false);
    for line in out.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k.trim() {
            "Fields written" | "Fields read" => (s.fields, f) = (v.parse().ok()?, true),
            "Bytes written" | "Bytes read" => (s.bytes, b) = (v.parse().ok()?, true),
            "Timestamp before first IO" => (s.first_io, t0) = (v.parse().ok()?, true),
            "Timestamp after last IO" => (s.last_io, t1) = (v.parse().ok()?, true),
            _ => {}
        }
    }
    (f && b && t0 && t1).then_some(s)
}

/// One process to run: its name, host (an index) and arguments after the tool.
struct Proc {
    name: String,
    node: usize,
    args: Vec<String>,
    /// Environment of this process only (beside the run's).
    env: Vec<(String, String)>,
}

/// Runs `procs` on their nodes at once, each as `env LD_AUDIT=shim fdb-hammer ARGS` with
/// `env` added; returns each one's stdout, or why one failed (its output's tail).
fn run_all(
    kit: &Kit,
    env: &[(String, String)],
    hosts: &[Host<'_>],
    procs: &[Proc],
    tag: &str,
    timeout: Duration,
) -> Result<Vec<String>, String> {
    let mut running = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        let out = kit.dir.path().join(format!("{tag}-{i}.out"));
        let err = kit.dir.path().join(format!("{tag}-{i}.err"));
        let mut inner = Command::new("env");
        inner
            .arg(format!("LD_AUDIT={}", kit.audit.display()))
            .arg(&kit.bin)
            .args(&p.args);
        inner.envs(env.iter().chain(&p.env).map(|(k, v)| (k, v)));
        let mut cmd = (hosts[p.node].place)(&inner);
        let file = |p: &Path| {
            std::fs::File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()))
        };
        cmd.stdin(Stdio::null())
            .stdout(file(&out)?)
            .stderr(file(&err)?);
        crate::procs::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("{}: cannot start: {e}", p.name))?;
        running.push((child, out, err));
    }
    let t = Instant::now();
    let mut failed = None;
    let mut left = running.len();
    let mut done = vec![false; running.len()];
    while left > 0 && failed.is_none() {
        for (i, (child, _, err)) in running.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            if let Ok(Some(st)) = child.try_wait() {
                done[i] = true;
                left -= 1;
                if !st.success() {
                    let tail = |p: &Path| {
                        let s = std::fs::read_to_string(p).unwrap_or_default();
                        let l: Vec<&str> = s.lines().rev().take(6).collect();
                        l.into_iter().rev().collect::<Vec<_>>().join(" | ")
                    };
                    failed = Some(format!(
                        "{}: fdb-hammer {st}: {} {}",
                        procs[i].name,
                        tail(err),
                        tail(&running[i].1)
                    ));
                    break;
                }
            }
        }
        if failed.is_none() && left > 0 {
            if crate::procs::interrupted() {
                failed = Some("interrupted".into());
            } else if t.elapsed() > timeout {
                failed = Some(format!("{tag}: still running after {timeout:?}"));
            } else {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    if let Some(why) = failed {
        for (i, (child, _, _)) in running.iter_mut().enumerate() {
            if !done[i] {
                crate::procs::kill_with_children(child);
                let _ = child.wait();
            }
        }
        return Err(why);
    }
    Ok(running
        .iter()
        .map(|(_, out, _)| std::fs::read_to_string(out).unwrap_or_default())
        .collect())
}

/// Figures of one phase from every process's report: the bytes over the span from the
/// first process's first I/O to the last one's last (the SC'19 paper's aggregate).
fn phase(outs: &[String], expected_fields: u64, what: &str) -> Result<Value, String> {
    let said = outs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            parse(o).ok_or_else(|| format!("{what}: process {i} printed no figures: {}", o.trim()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let fields: u64 = said.iter().map(|s| s.fields).sum();
    let bytes: u64 = said.iter().map(|s| s.bytes).sum();
    if fields != expected_fields {
        return Err(format!(
            "{what}: {fields} fields, expected {expected_fields}"
        ));
    }
    let t0 = said.iter().map(|s| s.first_io).fold(f64::MAX, f64::min);
    let t1 = said.iter().map(|s| s.last_io).fold(0.0, f64::max);
    let secs = (t1 - t0).max(1e-6);
    Ok(json!({
        "fields": fields,
        "bytes": bytes,
        "seconds": secs,
        "gib_per_s": bytes as f64 / secs / GIB,
    }))
}

/// `fdb-hammer` writing, then reading, `layout` (members `1..=per_node × K`, `per_node`
/// on each of `nodes`, `procs` processes per node) into the FDB5 `env` configures.
pub(super) fn write_then_read(
    kit: &Kit,
    env: &[(String, String)],
    nodes: &[Host<'_>],
    layout: &Layout,
    per_node: u32,
    procs: u32,
) -> Result<Value, String> {
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let common = |number: u32, members: u32, nsteps: u32, nlevels: u32, nparams: u32| {
        vec![
            format!("--class={}", layout.class),
            format!("--expver={}", layout.expver),
            format!("--number={number}"),
            format!("--nensembles={members}"),
            format!("--nsteps={nsteps}"),
            "--level=1".to_string(),
            format!("--nlevels={nlevels}"),
            format!("--nparams={nparams}"),
            "--no-randomise-data".to_string(),
        ]
    };
    let grib = kit.grib.display().to_string();
    // The database once, from one node, before the timed runs: writers creating it from
    // several nodes at once race on GlusterFS (ESTALE). Its one field (step 9999) is outside
    // the run.
    let mut pre = common(1, 1, 1, 1, 1);
    pre.extend(["--step=9999".to_string(), grib.clone()]);
    run_all(
        kit,
        env,
        nodes,
        &[Proc {
            name: format!("fdb-hammer creating the database on {}", nodes[0].name),
            node: 0,
            args: pre,
            env: Vec::new(),
        }],
        "create",
        Duration::from_secs(300),
    )?;
    let mut writers = Vec::new();
    let mut readers = Vec::new();
    let (base, extra) = (per_node / procs, per_node % procs);
    for (i, node) in nodes.iter().enumerate() {
        // Where the processes of one node meet (fdb-hammer's FIFOs and pid file).
        let run = kit.dir.path().join(format!("run-{}", node.name));
        std::fs::create_dir_all(&run)
            .map_err(|e| format!("cannot create {}: {e}", run.display()))?;
        let run_env = vec![("FDB_HAMMER_RUN_PATH".to_string(), run.display().to_string())];
        let mut first = i as u32 * per_node + 1;
        for p in 0..procs {
            let n = base + u32::from(p < extra);
            let mut w = vec![
                "--itt".to_string(),
                "--step-window=0".to_string(),
                "--random-delay=0".to_string(),
                format!("--nodes={}", names.join(",")),
                format!("--ppn={procs}"),
                format!("--barrier-port={BARRIER_PORT}"),
                "--barrier-max-wait=120".to_string(),
            ];
            w.extend(common(first, n, layout.steps, layout.levels, layout.params));
            w.push(grib.clone());
            let mut r = vec!["--read".to_string()];
            r.extend(common(first, n, layout.steps, layout.levels, layout.params));
            r.push(grib.clone());
            let name = |what: &str| format!("fdb-hammer {what} {p} on {}", node.name);
            writers.push(Proc {
                name: name("writer"),
                node: i,
                args: w,
                env: run_env.clone(),
            });
            readers.push(Proc {
                name: name("reader"),
                node: i,
                args: r,
                env: run_env.clone(),
            });
            first += n;
        }
    }
    let timeout = Duration::from_secs(1800);
    let fields = layout.total_fields();
    let write = phase(
        &run_all(kit, env, nodes, &writers, "write", timeout)?,
        fields,
        "fdb-hammer write",
    )?;
    let read = phase(
        &run_all(kit, env, nodes, &readers, "read", timeout)?,
        fields,
        "fdb-hammer --read",
    )?;
    Ok(json!({
        "target": "fdb-hammer",
        "version": kit.version,
        "describe": format!(
            "FDB5 {}'s fdb-hammer (fdb5lib wheel), TOC on /shared (GlusterFS); writers in ITT mode (--nodes, --ppn: one barrier across nodes before the first step), then --read",
            kit.version
        ),
        "client_nodes": nodes.len(),
        "procs": nodes.len() as u32 * procs,
        "template_bytes": std::fs::metadata(&kit.grib).map(|m| m.len()).unwrap_or(0),
        "write": write,
        "read": read,
        "gib_per_s": write["gib_per_s"],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_figures_fdb_hammer_prints() {
        let write = "A writer fdb-hammer process has been configured ...\n\
            Fields written: 200\nBytes written: 163879800\nTotal duration: 2.9223\n\
            Total rate: 53.4812 MB / s\nTimestamp before first IO: 1795829957.951641\n\
            Timestamp after last IO: 1795829960.719938\n";
        let s = parse(write).expect("figures");
        assert_eq!((s.fields, s.bytes), (200, 163_879_800));
        assert!((s.last_io - s.first_io - 2.768297).abs() < 1e-5);
        let read = "Read  rate: 915.49 Mbytes per second\nData read duration: 1.3545\n\
            Fields read: 200\nBytes read: 163879800\nTimestamp before first IO: 1.5\n\
            Timestamp after last IO: 2.0\n";
        assert_eq!(parse(read).expect("figures").fields, 200);
        assert_eq!(parse("Fields written: 2\nBytes written: 9\n"), None);
        let outs = [write.to_string(), write.replace("957.951641", "958.951641")];
        let v = phase(&outs, 400, "write").expect("phase");
        assert_eq!(v["bytes"].as_u64(), Some(2 * 163_879_800));
        assert!((v["seconds"].as_f64().unwrap() - 2.768297).abs() < 1e-5);
        assert!(
            phase(&outs, 401, "write")
                .unwrap_err()
                .contains("expected 401")
        );
    }

    /// The wheel's fdb-hammer, started through the audit shim, writes and reads back a
    /// small run on this host with two processes meeting at its barrier. Skipped where the
    /// wheel, `cc`, ecCodes' Python module or the schema is missing.
    #[test]
    fn the_wheels_fdb_hammer_runs_through_the_shim() {
        if !std::path::Path::new("/etc/fdb/schema").exists() {
            eprintln!("skipped: no /etc/fdb/schema");
            return;
        }
        let layout = Layout {
            class: "rd".into(),
            expver: "xxxx".into(),
            date: "20261121".into(),
            time: "0000".into(),
            members: 2,
            steps: 2,
            step_hours: 6,
            levels: 2,
            params: 3,
            field_size: 65536,
        };
        let kit = match prepare(&layout) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        let root = tempfile::tempdir().expect("tempdir");
        let env = crate::fdb5::setup_root(root.path()).expect("FDB5 root");
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .expect("hostname")
            .trim()
            .to_string();
        let here = Host {
            name: hostname,
            place: Box::new(|c: &Command| {
                let mut n = Command::new(c.get_program());
                n.args(c.get_args());
                for (k, v) in c.get_envs() {
                    if let Some(v) = v {
                        n.env(k, v);
                    }
                }
                n
            }),
        };
        let v = write_then_read(&kit, &env, &[here], &layout, 2, 2).expect("fdb-hammer");
        assert_eq!(v["write"]["fields"].as_u64(), Some(24));
        assert_eq!(v["read"]["fields"].as_u64(), Some(24));
        assert!(v["write"]["gib_per_s"].as_f64().unwrap() > 0.0);
        assert!(v["template_bytes"].as_u64().unwrap() > 60_000);
    }
}
