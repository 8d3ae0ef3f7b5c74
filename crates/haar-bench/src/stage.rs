//! Staging against `cp` between the same two directories in the same run, and how good the
//! ETA printed at 10% progress was: files ([`files_between`]), and the fields of a MARS
//! request out of a haar store into one GRIB file ([`fields_between`]), whose peer is `cp` of
//! a GRIB file holding the same bytes. Programs print these numbers (`haar stage bench`, the
//! `stage_bench` example); they are not timed tests.
//!
//! Both sides start from a warm page cache of the source (written just before). `cp` neither
//! fsyncs nor verifies; a task does both (design §13.3), so the ratio prices the durability
//! and the check. `cp_sync_seconds` (cp then `sync -f` of the destination) is the fairer peer
//! and is reported too.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::Serialize;

use haar_stage::{
    Dataspace, Dataspaces, Direction, Error, Journal, Mapping, Result, Stager, State, TaskSpec,
};

/// The figures of one run (medians over the rounds).
#[derive(Debug, Clone, Serialize)]
pub struct StageBench {
    /// `files` or `fields`.
    pub kind: String,
    /// Where the sources were.
    pub src_dir: std::path::PathBuf,
    /// Where the copies went.
    pub dst_dir: std::path::PathBuf,
    /// Objects (files or fields) staged per round.
    pub files: usize,
    /// Bytes staged per round.
    pub bytes: u64,
    /// Rounds (each: cp, cp + sync, stage, alternating).
    pub rounds: usize,
    /// Median seconds of `haar stage in` (library, same process).
    pub stage_seconds: f64,
    /// Median seconds of `cp -r`.
    pub cp_seconds: f64,
    /// Median seconds of `cp -r` followed by `sync -f` on the destination.
    pub cp_sync_seconds: f64,
    /// Stage throughput, GiB/s.
    pub stage_gib_s: f64,
    /// cp throughput, GiB/s.
    pub cp_gib_s: f64,
    /// `cp_seconds / stage_seconds` (1.0: as fast as cp).
    pub ratio_to_cp: f64,
    /// `cp_sync_seconds / stage_seconds`.
    pub ratio_to_cp_sync: f64,
    /// ETA the task reported when it first passed 10% of its bytes, per round.
    pub eta_at_10pct_seconds: Vec<f64>,
    /// The time it really had left then, per round.
    pub real_left_seconds: Vec<f64>,
    /// Largest |ETA − real| / real over the rounds.
    pub eta_error_max: f64,
    /// Per round, the task's progress as reported (every 100 ms): seconds since it started,
    /// bytes done, ETA in seconds (negative: none yet). Shows where a round's rate changed.
    pub progress: Vec<Vec<[f64; 3]>>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Files of `file_bytes` making `total` bytes, each with different pseudo-random bytes,
/// written under `dir`.
fn write_files(dir: &Path, total: u64, file_bytes: u64) -> Result<usize> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create", dir, e))?;
    let files = total.div_ceil(file_bytes).max(1) as usize;
    let mut block = vec![0u8; file_bytes as usize];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..files {
        fill(&mut block, &mut x);
        let p = dir.join(format!("f{i:05}.grib"));
        std::fs::File::create(&p)
            .and_then(|mut f| f.write_all(&block))
            .map_err(|e| Error::io("write", &p, e))?;
    }
    Ok(files)
}

fn fill(block: &mut [u8], x: &mut u64) {
    for chunk in block.chunks_mut(8) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// [`files_between`] with both sides in `dir`.
pub fn stage_vs_cp(dir: &Path, total: u64, file_bytes: u64, rounds: usize) -> Result<StageBench> {
    files_between(dir, dir, total, file_bytes, rounds)
}

/// Writes `total` bytes as files of `file_bytes` under `src_dir/src`, then, `rounds` times,
/// copies them to fresh destinations in `dst_dir` with `cp -r`, with `cp -r` + `sync -f`, and
/// with a task (dataspace `from` = `src_dir`, `to` = `dst_dir`); removes everything but
/// returns the figures.
pub fn files_between(
    src_dir: &Path,
    dst_dir: &Path,
    total: u64,
    file_bytes: u64,
    rounds: usize,
) -> Result<StageBench> {
    let src = src_dir.join("src");
    let files = write_files(&src, total, file_bytes)?;
    let bytes = files as u64 * file_bytes;
    let mut spaces = Dataspaces::default();
    spaces.spaces.insert(
        "from".into(),
        Dataspace::Shared {
            path: src_dir.into(),
        },
    );
    spaces.spaces.insert(
        "to".into(),
        Dataspace::Posix {
            path: dst_dir.into(),
        },
    );
    let r = measure(
        "files",
        src_dir,
        dst_dir,
        spaces,
        &src,
        true,
        "from:src",
        |round| {
            (
                format!("to:stage{round}"),
                dst_dir.join(format!("stage{round}")),
            )
        },
        |_| Ok(()),
        files,
        bytes,
        rounds,
    );
    let _ = std::fs::remove_dir_all(&src);
    r
}

/// Archives `total` bytes as fields of `field_bytes` into a posix haar store under
/// `store_dir/store` (and the same bytes, in the same order, as `store_dir/fields.grib`, the
/// `cp` peer), then, `rounds` times, stages the request for all of them into one GRIB file in
/// `dst_dir` (checked equal to the peer's bytes in the first round) and copies the peer file
/// there with `cp` and `cp` + `sync -f`.
pub fn fields_between(
    store_dir: &Path,
    dst_dir: &Path,
    total: u64,
    field_bytes: u64,
    rounds: usize,
) -> Result<StageBench> {
    let to = Dataspace::Posix {
        path: dst_dir.into(),
    };
    let spaces = [("to".to_string(), to)];
    fields_bench(
        "fields",
        (store_dir, dst_dir),
        (total, field_bytes, rounds),
        spaces,
        |round| {
            let name = format!("fields{round}.grib");
            (format!("to:{name}"), dst_dir.join(name))
        },
        |out, peer, _| same_bytes(peer, crc_of(out)?, out),
    )
}

/// Like [`fields_between`], but the request's fields go into a new pmem store in `dst_dir`
/// each round (`haar stage in fdb:REQUEST nv:`, a node-local store as NEXTGenIO staged into),
/// checked in the first round by retrieving every field back from it; the peer is the same
/// `cp` of the same bytes as one file into `dst_dir`.
pub fn fields_to_store(
    store_dir: &Path,
    dst_dir: &Path,
    total: u64,
    field_bytes: u64,
    rounds: usize,
) -> Result<StageBench> {
    // One node-local store, made anew each round (the previous one is removed), so every
    // round stages between the same two dataspaces, as a workflow's jobs do, and from round 2
    // the ETA has the pair's recorded rate.
    let store = Dataspace::Store {
        config: None,
        root: Some(dst_dir.join("nv")),
        backend: Some("pmem".into()),
    };
    fields_bench(
        "fields-to-store",
        (store_dir, dst_dir),
        (total, field_bytes, rounds),
        [("nv".to_string(), store)],
        |_| ("nv:".to_string(), dst_dir.join("nv")),
        |out, peer, n| {
            let opts = haar::OpenOptions {
                root: Some(out.into()),
                backend: Some("pmem".into()),
                ..haar::OpenOptions::default()
            };
            let store = opts.field_store()?;
            let req = haar_core::request::Request::parse(&fields_request(n))
                .map_err(|e| Error::Usage(format!("bench request: {e}")))?;
            let mut crc = 0u32;
            let report = store.retrieve(&req, &mut |_, b, _| {
                crc = haar_persist::crc32c_append(crc, b);
                Ok(())
            })?;
            if report.found as u64 != n {
                return Err(Error::Missing(format!(
                    "{} of {n} fields staged into {}",
                    report.found,
                    out.display()
                )));
            }
            same_bytes(peer, crc, out)
        },
    )
}

/// The request for the `n` bench fields.
fn fields_request(n: u64) -> String {
    format!("{FIELD_REQUEST},step=0/to/{}/by/1", n.saturating_sub(1))
}

/// The frame of both fields benches: the sources of [`field_sources`] in `dirs.0` (the store
/// as dataspace `fdb`), the destination `spaces` added, the request for every field staged
/// to `dst(round)` in each round of [`measure`], checked by `verify(out, peer, fields)` in the
/// first; the sources removed afterwards.
fn fields_bench(
    kind: &str,
    (store_dir, dst_dir): (&Path, &Path),
    (total, field_bytes, rounds): (u64, u64, usize),
    spaces: impl IntoIterator<Item = (String, Dataspace)>,
    dst: impl Fn(usize) -> (String, PathBuf),
    verify: impl Fn(&Path, &Path, u64) -> Result<()>,
) -> Result<StageBench> {
    let (root, peer, n) = field_sources(store_dir, total, field_bytes)?;
    let mut all = Dataspaces::default();
    all.spaces.insert("fdb".into(), posix_store(&root));
    all.spaces.extend(spaces);
    let r = measure(
        kind,
        store_dir,
        dst_dir,
        all,
        &peer,
        false,
        &format!("fdb:{}", fields_request(n)),
        dst,
        |out| verify(out, &peer, n),
        n as usize,
        n * field_bytes,
        rounds,
    );
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_file(&peer);
    r
}

fn posix_store(root: &Path) -> Dataspace {
    Dataspace::Store {
        config: None,
        root: Some(root.into()),
        backend: Some("posix".into()),
    }
}

/// Whether what was staged to `out` (CRC-32C `got`) is the peer file's bytes.
fn same_bytes(peer: &Path, got: u32, out: &Path) -> Result<()> {
    let want = crc_of(peer)?;
    if want != got {
        return Err(Error::Checksum {
            path: out.into(),
            detail: format!("staged {got:08x}, the peer file holds {want:08x}"),
        });
    }
    Ok(())
}

/// Archives `total` bytes as fields of `field_bytes` into a posix haar store under
/// `store_dir/store`, and the same bytes in the same order as `store_dir/fields.grib` (the
/// `cp` peer); returns the store's root, the peer and the number of fields.
fn field_sources(
    store_dir: &Path,
    total: u64,
    field_bytes: u64,
) -> Result<(PathBuf, PathBuf, u64)> {
    let root = store_dir.join("store");
    let peer = store_dir.join("fields.grib");
    let n = total.div_ceil(field_bytes).max(1);
    {
        let opts = haar::OpenOptions {
            root: Some(root.clone()),
            backend: Some("posix".into()),
            ..haar::OpenOptions::default()
        };
        let mut store = opts.field_store()?;
        let mut out = std::fs::File::create(&peer).map_err(|e| Error::io("create", &peer, e))?;
        let mut block = vec![0u8; field_bytes as usize];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..n {
            fill(&mut block, &mut x);
            let key = haar_core::key::Key::parse(&format!("{FIELD_KEY},step={i}"))
                .map_err(|e| Error::Usage(format!("bench key: {e}")))?;
            store.archive(&key, &block)?;
            out.write_all(&block)
                .map_err(|e| Error::io("write", &peer, e))?;
        }
        store.flush()?;
    }
    Ok((root, peer, n))
}

/// The bench fields' key, but for `step`.
const FIELD_KEY: &str =
    "class=od,expver=1,stream=oper,date=20261124,time=0,domain=g,type=fc,levtype=sfc,param=167";
/// The request for them, but for `step`.
const FIELD_REQUEST: &str =
    "class=od,expver=1,stream=oper,date=20261124,time=0,type=fc,levtype=sfc,param=167";

/// `syncfs` of the file system holding `dir`: everything written there is on its device.
fn sync_fs(dir: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let d = std::fs::File::open(dir).map_err(|e| Error::io("open", dir, e))?;
    // SAFETY: a file descriptor we own, open for the call.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(Error::io("syncfs", dir, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// A removed copy's file system settled before the next timed copy: its journal committed,
/// and with it the discards of the freed blocks (a disk mounted `-o discard`, as this host's
/// ext4 is, issues them then). Without it the first 0.1-0.3 s of the next copy ran beside
/// 4 GiB of discards (a stage-out round seen stalled there, its ETA at 10% 103% off).
fn settle(dir: &Path) -> Result<()> {
    sync_fs(dir)
}

/// The rounds: `cp` of `peer` (`-r` when `tree`), `cp` + `sync -f`, then the task from
/// `src_endpoint` to `to:DST(round)`, each on a settled file system ([`settle`]).
#[allow(clippy::too_many_arguments)]
fn measure(
    kind: &str,
    src_dir: &Path,
    dst_dir: &Path,
    spaces: Dataspaces,
    peer: &Path,
    tree: bool,
    src_endpoint: &str,
    dst: impl Fn(usize) -> (String, PathBuf),
    verify: impl Fn(&Path) -> Result<()>,
    objects: usize,
    bytes: u64,
    rounds: usize,
) -> Result<StageBench> {
    // The sources were just written: their writeback would otherwise run through the first
    // round (a disk busy and a core taken by it for whichever copy came first).
    sync_fs(src_dir)?;
    let journal_dir = dst_dir.join(format!("bench-journal-{}", std::process::id()));
    let stager = Stager {
        spaces,
        journal: Journal::open(&journal_dir)?,
    };
    let (mut st, mut cp, mut cps) = (Vec::new(), Vec::new(), Vec::new());
    let (mut etas, mut reals) = (Vec::new(), Vec::new());
    let mut progress = Vec::new();
    let run_cp = |dst: &Path, sync: bool| -> Result<f64> {
        let t = Instant::now();
        let ok = Command::new("cp")
            .args(if tree { &["-r"][..] } else { &[] })
            .arg(peer)
            .arg(dst)
            .status()
            .map_err(|e| Error::io("run cp for", dst, e))?
            .success()
            && (!sync
                || Command::new("sync")
                    .arg("-f")
                    .arg(dst)
                    .status()
                    .is_ok_and(|s| s.success()));
        let secs = t.elapsed().as_secs_f64();
        if !ok {
            return Err(Error::Usage(format!("cp into {} failed", dst.display())));
        }
        remove(dst);
        settle(dst_dir)?;
        Ok(secs)
    };
    for round in 0..rounds.max(1) {
        cp.push(run_cp(&dst_dir.join("cp"), false)?);
        cps.push(run_cp(&dst_dir.join("cps"), true)?);
        let spec = TaskSpec {
            id: Some(format!("bench{round}")),
            direction: Direction::In,
            src: src_endpoint.into(),
            dst: dst(round).0,
            mapping: Mapping::Same,
        };
        let task = stager.submit(&spec)?;
        let t = Instant::now();
        let mut at10: Option<(f64, f64)> = None;
        let mut trace = Vec::new();
        let rec = stager.run(&task.id, &mut |r| {
            trace.push([
                t.elapsed().as_secs_f64(),
                r.bytes_done as f64,
                r.eta_seconds.unwrap_or(-1.0),
            ]);
            if at10.is_none()
                && r.bytes_total > 0
                && r.bytes_done * 10 >= r.bytes_total
                && let Some(eta) = r.eta_seconds
            {
                at10 = Some((t.elapsed().as_secs_f64(), eta));
            }
        })?;
        let secs = t.elapsed().as_secs_f64();
        if rec.state != State::Done {
            return Err(Error::Usage(format!(
                "bench stage-in ended {:?}: {:?}",
                rec.state, rec.error
            )));
        }
        st.push(secs);
        progress.push(trace);
        if let Some((when, eta)) = at10 {
            etas.push(eta);
            reals.push(secs - when);
        }
        let out = dst(round).1;
        if round == 0 {
            verify(&out)?;
        }
        remove(&out);
        settle(dst_dir)?;
    }
    let _ = std::fs::remove_dir_all(&journal_dir);
    let (s, c, cs) = (median(st), median(cp), median(cps));
    let gib = bytes as f64 / (1u64 << 30) as f64;
    let eta_error_max = etas
        .iter()
        .zip(&reals)
        .map(|(e, r)| (e - r).abs() / r.max(1e-9))
        .fold(0.0, f64::max);
    Ok(StageBench {
        kind: kind.into(),
        src_dir: src_dir.into(),
        dst_dir: dst_dir.into(),
        files: objects,
        bytes,
        rounds: rounds.max(1),
        stage_seconds: s,
        cp_seconds: c,
        cp_sync_seconds: cs,
        stage_gib_s: gib / s,
        cp_gib_s: gib / c,
        ratio_to_cp: c / s,
        ratio_to_cp_sync: cs / s,
        eta_at_10pct_seconds: etas,
        real_left_seconds: reals,
        eta_error_max,
        progress,
    })
}

fn remove(p: &Path) {
    let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
}

fn crc_of(p: &Path) -> Result<u32> {
    let f = std::fs::File::open(p).map_err(|e| Error::io("open", p, e))?;
    // SAFETY: a read-only mapping of a file nobody else writes while the bench runs.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::io("map", p, e))?;
    Ok(haar_persist::crc32c(&map))
}

/// What `haar stage bench` measures: between the directories `from` and `to`, files and/or
/// fields, with or without the non-temporal copy limit of `to` beside them.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Where the sources are written (the tier staged from).
    pub from: std::path::PathBuf,
    /// Where the copies go (the tier staged to).
    pub to: std::path::PathBuf,
    /// Bytes per round.
    pub bytes: u64,
    /// Bytes per file (files).
    pub file_bytes: u64,
    /// Bytes per field (fields).
    pub field_bytes: u64,
    /// Rounds (medians are reported).
    pub rounds: usize,
    /// Measure files.
    pub files: bool,
    /// Measure fields.
    pub fields: bool,
    /// Measure fields into a pmem store on `to`.
    pub store: bool,
    /// Also measure the non-temporal copy limit into `to` and report the stage rate against it.
    pub nt_limit: bool,
}

/// Runs `plan` in scratch directories under `from` and `to` (removed afterwards) and returns
/// the report `haar stage bench` prints: host, CPUs, load averages before and after, the NT
/// copy limit if asked, and each [`StageBench`] with its rate (and its share of the limit).
pub fn report(plan: &Plan) -> Result<serde_json::Value> {
    let load = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let scratch = |d: &Path| {
        tempfile::Builder::new()
            .prefix("haar-stage-bench")
            .tempdir_in(d)
            .map_err(|e| Error::io("create a scratch directory in", d, e))
    };
    let load_before = load();
    let (from, to) = (scratch(&plan.from)?, scratch(&plan.to)?);
    let mut results = Vec::new();
    if plan.files {
        results.push(files_between(
            from.path(),
            to.path(),
            plan.bytes,
            plan.file_bytes,
            plan.rounds,
        )?);
    }
    if plan.fields {
        results.push(fields_between(
            from.path(),
            to.path(),
            plan.bytes,
            plan.field_bytes,
            plan.rounds,
        )?);
    }
    if plan.store {
        results.push(fields_to_store(
            from.path(),
            to.path(),
            plan.bytes,
            plan.field_bytes,
            plan.rounds,
        )?);
    }
    let nt = if plan.nt_limit {
        let l = haar_persist::measure_raw_limits(to.path(), 1 << 30)
            .map_err(|e| Error::io("measure the raw limits in", &plan.to, e))?;
        Some(l.nt_copy_gbs)
    } else {
        None
    };
    let gbs = |r: &StageBench| r.bytes as f64 / r.stage_seconds / 1e9;
    Ok(serde_json::json!({
        "host": std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "load_before": load_before,
        "load_after": load(),
        "from": plan.from,
        "to": plan.to,
        "nt_copy_limit_gb_s": nt,
        "results": results.iter().map(|r| {
            let mut j = serde_json::to_value(r).expect("serialise");
            j["stage_gb_s"] = serde_json::json!(gbs(r));
            if let Some(l) = nt {
                j["ratio_to_nt_copy"] = serde_json::json!(gbs(r) / l);
                // The file-to-file limit beside it: `cp` + sync of the same bytes between
                // the same directories in the same round, as a fraction of the NT limit.
                j["cp_sync_ratio_to_nt_copy"] =
                    serde_json::json!(r.bytes as f64 / r.cp_sync_seconds / 1e9 / l);
            }
            j
        }).collect::<Vec<_>>(),
    }))
}
