//! Stage-in against `cp` between the same two directories in the same run, and how good the
//! ETA printed at 10% progress was. A program prints these numbers (`haar_stage::bench::
//! stage_vs_cp`); it is not a timed test.
//!
//! Both sides start from a warm page cache of the source (written just before). `cp` neither
//! fsyncs nor verifies; a stage-in does both (design §13.3), so the ratio prices the
//! durability and the check. `cp_sync_seconds` (cp then `sync -f` of the destination) is the
//! fairer peer and is reported too.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde::Serialize;

use crate::dataspace::{Dataspace, Dataspaces};
use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::task::{Direction, Mapping, Stager, State, TaskSpec};

/// The figures of one [`stage_vs_cp`] run (medians over the rounds).
#[derive(Debug, Clone, Serialize)]
pub struct StageBench {
    /// Files staged per round.
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
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Writes `total` bytes as files of `file_bytes` under `dir/src`, then, `rounds` times, copies
/// them to fresh destinations with `cp -r`, with `cp -r` + `sync -f`, and with a stage-in
/// task; removes everything but returns the figures.
pub fn stage_vs_cp(dir: &Path, total: u64, file_bytes: u64, rounds: usize) -> Result<StageBench> {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).map_err(|e| Error::io("create", &src, e))?;
    let files = total.div_ceil(file_bytes).max(1) as usize;
    let mut block = vec![0u8; file_bytes as usize];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..files {
        for chunk in block.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
        let p = src.join(format!("f{i:05}.grib"));
        std::fs::File::create(&p)
            .and_then(|mut f| f.write_all(&block))
            .map_err(|e| Error::io("write", &p, e))?;
    }
    let bytes = files as u64 * file_bytes;
    let mut spaces = Dataspaces::default();
    spaces
        .spaces
        .insert("from".into(), Dataspace::Shared { path: dir.into() });
    spaces
        .spaces
        .insert("to".into(), Dataspace::Posix { path: dir.into() });
    let stager = Stager {
        spaces,
        journal: Journal::open(&dir.join("journal"))?,
    };
    let (mut st, mut cp, mut cps) = (Vec::new(), Vec::new(), Vec::new());
    let (mut etas, mut reals) = (Vec::new(), Vec::new());
    let run_cp = |dst: &Path, sync: bool| -> Result<f64> {
        let t = Instant::now();
        let ok = Command::new("cp")
            .arg("-r")
            .arg(&src)
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
        let _ = std::fs::remove_dir_all(dst);
        Ok(secs)
    };
    for round in 0..rounds.max(1) {
        cp.push(run_cp(&dir.join("cp"), false)?);
        cps.push(run_cp(&dir.join("cps"), true)?);
        let spec = TaskSpec {
            id: Some(format!("bench{round}")),
            direction: Direction::In,
            src: "from:src".into(),
            dst: format!("to:stage{round}"),
            mapping: Mapping::Same,
        };
        let task = stager.submit(&spec)?;
        let t = Instant::now();
        let mut at10: Option<(f64, f64)> = None;
        let rec = stager.run(&task.id, &mut |r| {
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
        if let Some((when, eta)) = at10 {
            etas.push(eta);
            reals.push(secs - when);
        }
        let _ = std::fs::remove_dir_all(dir.join(format!("stage{round}")));
    }
    let _ = std::fs::remove_dir_all(&src);
    let _ = std::fs::remove_dir_all(dir.join("journal"));
    let (s, c, cs) = (median(st), median(cp), median(cps));
    let gib = bytes as f64 / (1u64 << 30) as f64;
    let eta_error_max = etas
        .iter()
        .zip(&reals)
        .map(|(e, r)| (e - r).abs() / r.max(1e-9))
        .fold(0.0, f64::max);
    Ok(StageBench {
        files,
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
    })
}
