//! Simulated power loss on pmem pools (design §6.2): a writer archives, re-archives, purges,
//! wipes and grows its pool; at a chosen persistence point (`HAAR_POWER_LOSS`, recorded by
//! `haar_persist::powerfail`) the image a power cut would leave is written out — only what was
//! persisted or fenced, plus, in half the trials, a random half of the dirty cache lines that
//! were never persisted — and the writer ends at once. The image is then opened by the real
//! code, which must find every acknowledged flush whole, each flush all-or-nothing, no free
//! space overlapping a live field, and a store that archives on.
//!
//! Both persistence modes are exercised: `msync` (what an emulated pool uses) and the CPU-cache
//! path of real persistent memory (non-temporal stores + fence, CLWB + fence); and a bulk
//! copier's pool (`pool_prefault: never`, msync), whose fields of 64 KiB or more are written
//! through the file.
//!
//! Trials: `HAAR_POWER_TRIALS` (default 120), spread over every persistence point of the run.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use haar_persist::PersistMode;
use haar_persist::powerfail::{POWER_LOSS_ENV, POWER_LOSS_EXIT, persist_points};
use haar_store::conformance::power_loss::{Shape, check_image, run_workload, said};
use haar_store::pmem::{PmemOptions, Prefault};
use haar_store::{Backend, PmemBackend, Store, StoreOptions};

const CHILD_ENV: &str = "HAAR_POWER_CHILD";

fn size(i: u32) -> usize {
    // 4 KiB to ~300 KiB: several chunks, and the 16 MiB pool grows during the run.
    4096 + (i as usize * 7919 % 75) * 4096
}

const SHAPE: Shape = Shape {
    size,
    more: 200 << 10,
};

/// The options of mode `name`: `msync`, `cpu` or `bulk`.
fn options(name: &str) -> PmemOptions {
    PmemOptions {
        initial_size: 16 << 20,
        chunk: 1 << 20,
        force_mode: Some(match name {
            "cpu" => PersistMode::CpuCache,
            _ => PersistMode::Msync,
        }),
        prefault: match name {
            "bulk" => Prefault::Never,
            _ => Prefault::Create,
        },
        ..PmemOptions::default()
    }
}

fn open(root: &Path, mode: &str) -> (Arc<PmemBackend>, Store) {
    let b = Arc::new(PmemBackend::open(root, options(mode)).unwrap());
    let store = Store::with_options(b.clone() as Arc<dyn Backend>, StoreOptions::default());
    (b, store)
}

/// The writer: what it has done is printed (and flushed) only once the call returned.
#[test]
#[ignore = "run by the power-loss test as a child process"]
fn child_writer() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let root = std::env::var("HAAR_POWER_ROOT").unwrap();
    let mode = std::env::var("HAAR_POWER_MODE").unwrap();
    let (_b, mut store) = open(Path::new(&root), &mode);
    let mut out = std::io::stdout();
    let mut say = |what: &str| {
        writeln!(out, "{what}").unwrap();
        out.flush().unwrap();
    };
    run_workload(&mut store, SHAPE, &mut say);
    say(&format!("points {}", persist_points()));
}

struct Run {
    crashed: bool,
    said: Vec<String>,
    points: Option<u64>,
}

fn run_writer(root: &Path, mode: &str, plan: &str) -> Run {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_writer", "--ignored", "--nocapture", "-q"])
        .env(CHILD_ENV, "1")
        .env("HAAR_POWER_ROOT", root)
        .env("HAAR_POWER_MODE", mode)
        .env(POWER_LOSS_ENV, plan)
        .output()
        .unwrap();
    let code = out.status.code();
    assert!(
        code == Some(0) || code == Some(POWER_LOSS_EXIT),
        "writer failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    Run {
        crashed: code == Some(POWER_LOSS_EXIT),
        said: said(&text),
        points: text
            .lines()
            .find_map(|l| l.strip_prefix("points "))
            .and_then(|n| n.parse().ok()),
    }
}

/// Checks the store at `root` after a run that said `said` (its acknowledged steps).
fn check(root: &Path, said: &[String], what: &str) {
    // Opened by the real code, in the default mode of this host (msync on /dev/shm).
    let (b, mut store) = open(root, "msync");
    check_image(&mut store, said, SHAPE, what, &|store| {
        haar_store::conformance::assert_no_free_space_over_live_fields(&b, store, what)
    });
}

fn shm() -> tempfile::TempDir {
    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    tempfile::tempdir_in(base).unwrap()
}

#[test]
fn every_acknowledged_flush_survives_simulated_power_loss() {
    let trials: u64 = std::env::var("HAAR_POWER_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let tmp = shm();
    let mut crashed = 0;
    let modes = ["msync", "cpu", "bulk"];
    for mode in modes {
        // A run without power loss: how many persistence points the workload has.
        let root = tmp.path().join(format!("count-{mode}"));
        let image = tmp.path().join("unused.img");
        let run = run_writer(&root, mode, &format!("at=0,image={}", image.display()));
        assert!(!run.crashed);
        let points: u64 = run
            .points
            .unwrap_or_else(|| panic!("no point count: {:?}", run.said));
        assert!(points > 50, "only {points} persistence points in {mode}");
        eprintln!("{mode}: {points} persistence points");
        check(&root, &run.said, &format!("{mode}, no power loss"));
        std::fs::remove_dir_all(&root).unwrap();
        for t in 0..trials / 2 {
            // Spread over the whole run, with the first points (pool creation) included.
            let at = 1 + (t * 7919 + t * t) % points;
            let evict = t % 2;
            let root = tmp.path().join(format!("{mode}-{t}"));
            let image = tmp.path().join(format!("{mode}-{t}.img"));
            let plan = format!(
                "at={at},seed={},evict={evict},image={}",
                t + 1,
                image.display()
            );
            let run = run_writer(&root, mode, &plan);
            assert!(
                run.crashed,
                "{mode} trial {t}: no power loss at point {at} of {points}"
            );
            crashed += 1;
            // The image replaces the pool, as after a reboot.
            std::fs::rename(&image, root.join("haar.pool")).unwrap();
            let what = format!(
                "{mode} trial {t} (point {at}/{points}, evict {evict}; said {:?})",
                run.said.last()
            );
            check(&root, &run.said, &what);
            std::fs::remove_dir_all(&root).unwrap();
        }
    }
    assert_eq!(crashed, trials / 2 * modes.len() as u64);
    eprintln!(
        "power loss: {crashed} crash images checked (half with random eviction), every \
         acknowledged flush intact"
    );
}
