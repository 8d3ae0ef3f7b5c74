//! Simulated power loss on the POSIX backend (docs/design.md §6.2): a writer process runs the
//! shared power-loss workload (`haar_store::conformance::power_loss`) with `fsync: always` on
//! a store whose root is on `haar_fs::powerfail`'s recording file system, saying what returned
//! in a file on the same mount. From the record, crash images are built at every barrier,
//! rename and create of the run (and between them when more trials are asked for): only what
//! was `fsync`ed, plus in half the trials a random part of what was not (dirty pages torn at
//! 4 KiB, a prefix or subset of directory changes), under both a journalling file system's
//! ordering and POSIX's weaker one. Each image is opened by the real code, which must find
//! every acknowledged flush whole, each flush, wipe and re-archive all-or-nothing, and a store
//! that archives on.
//!
//! Needs /dev/fuse and root; skipped with a message otherwise unless `HAAR_REQUIRE_ROOT_TESTS`
//! is set (CI sets it). Trials: `HAAR_POWER_TRIALS` (default 1,000).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use haar_fs::powerfail::{Cut, Namespace, Op, Recording, Replay};
use haar_store::conformance::power_loss::{Shape, check_image, run_workload, said};
use haar_store::{Backend, FsyncPolicy, MergePolicy, PosixBackend, Store, StoreOptions};

const CHILD_ENV: &str = "HAAR_POSIX_POWER_CHILD";
const ACKS: &str = "acks";
const STORE: &str = "store";

fn size(i: u32) -> usize {
    // 0.7 to 33 KiB, rarely page-aligned: fields straddle pages, so torn pages cut fields.
    700 + (i as usize * 7919 % 23) * 1500
}

const SHAPE: Shape = Shape {
    size,
    more: 20 << 10,
};

fn open(root: &Path, fsync: FsyncPolicy, merge_often: bool) -> Store {
    let b = Arc::new(PosixBackend::new(vec![root.to_path_buf()], fsync).unwrap());
    let mut opts = StoreOptions::default();
    if merge_often {
        // Merge the catalogue after nearly every flush, so cuts land in merges too.
        opts.merge = MergePolicy {
            threshold: 10,
            fanout: 2,
            background: true,
        };
    }
    Store::with_options(b as Arc<dyn Backend>, opts)
}

/// The writer: each line goes to the acknowledgement file, one write(2) each, only once the
/// call returned.
#[test]
#[ignore = "run by the power-loss test as a child process"]
fn child_writer() {
    let Some(mnt) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mnt = Path::new(&mnt);
    let mut store = open(&mnt.join(STORE), FsyncPolicy::Always, true);
    let mut acks = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(mnt.join(ACKS))
        .unwrap();
    let mut say = |what: &str| acks.write_all(format!("{what}\n").as_bytes()).unwrap();
    run_workload(&mut store, SHAPE, &mut say);
    drop(store);
    say("done");
}

fn can_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ok = root && Path::new("/dev/fuse").exists();
    if !ok {
        assert!(
            std::env::var_os("HAAR_REQUIRE_ROOT_TESTS").is_none(),
            "HAAR_REQUIRE_ROOT_TESTS is set but this test cannot mount FUSE: run as root with /dev/fuse"
        );
        eprintln!("skipped: the POSIX power-loss test needs root and /dev/fuse");
    }
    ok
}

/// Records one run of the writer on the recording file system.
fn record(base: &Path) -> Vec<Op> {
    let rec = Recording::new();
    let mnt = base.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = rec.mount(&mnt).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_writer", "--ignored", "--nocapture", "-q"])
        .env(CHILD_ENV, &mnt)
        .output()
        .unwrap();
    mounted.unmount().unwrap();
    assert!(
        out.status.success(),
        "writer failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    rec.log()
}

#[test]
fn every_acknowledged_flush_survives_simulated_power_loss_on_posix() {
    if !can_mount() {
        return;
    }
    let trials: usize = std::env::var("HAAR_POWER_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let base = tempfile::tempdir_in(if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    })
    .unwrap();
    let log = record(base.path());
    let syncs = log.iter().filter(|o| matches!(o, Op::Sync { .. })).count();
    let renames = log
        .iter()
        .filter(|o| matches!(o, Op::Rename { .. }))
        .count();
    if std::env::var_os("HAAR_POWER_DUMP").is_some() {
        for (i, op) in log.iter().enumerate() {
            eprintln!("{i:5} {}", short(op));
        }
    }
    let mut cuts: Vec<usize> = (0..log.len()).filter(|&i| log[i].is_cut_point()).collect();
    cuts.push(log.len());
    eprintln!(
        "recorded {} operations: {syncs} syncs, {renames} renames, {} cut points",
        log.len(),
        cuts.len()
    );
    // The workload flushes 9 times with fsync of data, index and toc, and merges its
    // catalogue (runs and manifests written to a temporary name, synced, renamed).
    assert!(syncs > 30, "only {syncs} syncs recorded");
    assert!(
        renames > 5,
        "only {renames} renames: no catalogue merge ran"
    );

    let img = base.path().join("img");
    let mut checked = 0;
    let mut torn = 0;
    let mut acked_max = 0;
    for namespace in [Namespace::Ordered, Namespace::Weak] {
        let mut replay = Replay::new(&log, namespace);
        let n = trials / 2;
        for t in 0..n {
            // Spread over every cut point; with more trials than points, between them too.
            let at = if n <= cuts.len() {
                cuts[t * cuts.len() / n]
            } else {
                t * log.len() / n
            };
            let at = at.max(replay.position());
            replay.advance(at);
            let cut = Cut {
                namespace,
                evict: t % 2 == 1,
                seed: t as u64 + 1,
            };
            if img.exists() {
                std::fs::remove_dir_all(&img).unwrap();
            }
            std::fs::create_dir(&img).unwrap();
            let stats = replay.write_image(cut, &img).unwrap();
            torn += stats.torn_pages;
            let acks = replay
                .live_file(ACKS)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            let said = said(&acks);
            acked_max = acked_max.max(said.len());
            let what = format!(
                "{namespace:?} trial {t} (cut before operation {at} of {}: {:?}; evict {}; \
                 acknowledged {:?})",
                log.len(),
                log.get(at).map(short),
                cut.evict,
                said.last()
            );
            let mut store = open(&img.join(STORE), FsyncPolicy::Never, false);
            check_image(&mut store, &said, SHAPE, &what, &|_| {});
            checked += 1;
        }
    }
    assert_eq!(checked, trials / 2 * 2);
    assert!(
        acked_max >= 11,
        "no trial saw the whole workload acknowledged"
    );
    eprintln!(
        "power loss (posix): {checked} crash images checked (half with {torn} unsynced pages \
         landed), every acknowledged flush intact"
    );
}

/// An operation without its bytes, for messages.
fn short(op: &Op) -> String {
    match op {
        Op::Write { ino, offset, data } => format!("write ino {ino} @{offset} +{}", data.len()),
        Op::Create {
            parent,
            name,
            ino,
            dir,
        } => format!(
            "create {} {parent}/{} -> {ino}",
            if *dir { "dir" } else { "file" },
            String::from_utf8_lossy(name)
        ),
        Op::Remove { parent, name } => {
            format!("remove {parent}/{}", String::from_utf8_lossy(name))
        }
        Op::Rename {
            parent,
            name,
            newparent,
            newname,
            ino,
        } => format!(
            "rename {parent}/{} -> {newparent}/{} ({ino})",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(newname)
        ),
        other => format!("{other:?}"),
    }
}
