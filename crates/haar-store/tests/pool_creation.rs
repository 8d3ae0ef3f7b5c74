//! Pool creation (design §5.1): a pool is usable only once its header, magic last, is
//! persisted; what an interrupted creation leaves (no magic, nothing allocated or committed)
//! is re-initialised by the next opener, while a file without magic that holds data is never
//! overwritten. Tested with leftovers made by hand and by killing creators with SIGKILL.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use haar_store::conformance::{payload, reuse_key};
use haar_store::pmem::PmemOptions;
use haar_store::{Backend, PmemBackend, Store, StoreOptions};

fn shm() -> tempfile::TempDir {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    tempfile::tempdir_in(base).unwrap()
}

fn open(root: &std::path::Path) -> haar_store::Result<(Arc<PmemBackend>, Store)> {
    let opts = PmemOptions {
        initial_size: 32 << 20,
        ..PmemOptions::default()
    };
    open_with(root, opts)
}

fn open_with(
    root: &std::path::Path,
    opts: PmemOptions,
) -> haar_store::Result<(Arc<PmemBackend>, Store)> {
    let b = Arc::new(PmemBackend::open(root, opts)?);
    let s = Store::with_options(b.clone() as Arc<dyn Backend>, StoreOptions::default());
    Ok((b, s))
}

fn round_trip(store: &mut Store, i: u32) {
    let k = reuse_key("crea", i);
    store.archive(&k, &payload(&k, 0, 4096)).unwrap();
    store.flush().unwrap();
    let (_, v) = store.retrieve_lent(&k).unwrap().unwrap();
    assert!(*v == payload(&k, 0, 4096)[..]);
}

#[test]
fn leftovers_of_an_interrupted_creation_are_reinitialised() {
    // All zeros (what the issue reproduced), short or long; and a header complete but for its
    // magic, over a pool that was never used.
    for len in [0usize, 100, 4096, 3 << 20] {
        let dir = shm();
        let root = dir.path().join("store");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("haar.pool"), vec![0u8; len]).unwrap();
        let (b, mut store) = open(&root).unwrap_or_else(|e| panic!("{len} zero bytes: {e}"));
        round_trip(&mut store, 1);
        assert_eq!(b.info()["created_over_interrupted_creation"], len > 0);
    }
    let dir = shm();
    let root = dir.path().join("store");
    drop(open(&root).unwrap());
    let pool = root.join("haar.pool");
    let mut bytes = std::fs::read(&pool).unwrap();
    bytes[0..8].fill(0);
    std::fs::write(&pool, &bytes).unwrap();
    let (b, mut store) = open(&root).unwrap();
    round_trip(&mut store, 2);
    assert_eq!(b.info()["created_over_interrupted_creation"], true);
}

#[test]
fn a_pool_with_data_and_no_magic_is_never_overwritten() {
    let dir = shm();
    let root = dir.path().join("store");
    let (_, mut store) = open(&root).unwrap();
    round_trip(&mut store, 3);
    drop(store);
    let pool = root.join("haar.pool");
    let mut bytes = std::fs::read(&pool).unwrap();
    bytes[0..8].fill(0);
    std::fs::write(&pool, &bytes).unwrap();
    let e = open(&root)
        .err()
        .expect("a damaged pool with data must not open");
    assert!(e.to_string().contains("holds data"), "{e}");
    assert_eq!(std::fs::read(&pool).unwrap(), bytes, "the file was changed");
}

/// Creators killed with SIGKILL at random moments of creating a 256 MiB pool: the next
/// process always opens the pool (re-initialising what was left), and every field whose
/// flush returned is still there.
#[test]
fn kill_9_during_pool_creation() {
    let trials: u32 = std::env::var("HAAR_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(30, |t: u32| (t / 7).max(10));
    let size = (256u64 << 20).to_string();
    let run = |root: &std::path::Path, i: u32| {
        Command::new(env!("CARGO_BIN_EXE_haar-torture"))
            .args(["create", root.to_str().unwrap(), &size, &i.to_string()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // How long a creation takes here, to spread the kills over it.
    let dir = shm();
    let t = Instant::now();
    let out = run(&dir.path().join("probe"), 0)
        .wait_with_output()
        .unwrap();
    assert!(out.status.success());
    let took = t.elapsed();
    let mut rng = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    let (mut mid_creation, mut acked) = (0, Vec::new());
    for trial in 0..trials {
        let root = dir.path().join(format!("t{trial}"));
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut c = run(&root, 1);
        std::thread::sleep(Duration::from_micros(rng % (took.as_micros() as u64 + 1)));
        let _ = c.kill();
        let out = c.wait_with_output().unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("ok 1") {
            acked.push((root.clone(), 1));
        }
        let left = std::fs::read(root.join("haar.pool")).unwrap_or_default();
        if !left.is_empty() && !left.starts_with(b"HAARPOOL") {
            mid_creation += 1;
        }
        // The next process opens it, whatever was left.
        let out = run(&root, 2).wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "trial {trial}: the pool did not open after a kill: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        acked.push((root.clone(), 2));
        // Checked now and removed: every trial's pool is memory in /dev/shm.
        for (root, i) in acked.drain(..) {
            let (_, store) = open(&root).unwrap();
            let k = reuse_key("crea", i);
            let (_, v) = store
                .retrieve_lent(&k)
                .unwrap()
                .unwrap_or_else(|| panic!("{}: acknowledged field {i} lost", root.display()));
            assert!(*v == payload(&k, 0, 4096)[..]);
        }
        let _ = std::fs::remove_dir_all(&root);
    }
    eprintln!(
        "pool creation: {trials} creators killed, {mid_creation} left a pool without magic (creation {took:?})"
    );
    assert!(
        mid_creation > 0,
        "no kill landed inside a creation; the test is not testing"
    );
}

/// Bytes of the pool file at `pool` that this process has mapped in (its mappings' `Rss` in
/// `/proc/self/smaps`).
fn mapped_bytes(pool: &std::path::Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut ours = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if head.contains('-') && !head.ends_with(':') {
            ours = line.ends_with(&*pool.to_string_lossy());
        } else if ours && head == "Rss:" {
            kib += line
                .split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
    }
    kib << 10
}

/// `FieldStore::provision` (a bulk copy follows, design §5.1): the room is checked at once,
/// and the copy grows the pool as it goes, writing its fields of 64 KiB or more through the
/// file, so none of their pages is mapped into the copying process; every byte reads back,
/// in this process and through a fresh mapping. Beyond `pool_max` it fails at once, naming
/// the pool, before anything is written or grown.
#[test]
fn provision_checks_the_room_and_the_copy_writes_through_the_file() {
    use haar_store::FieldStore;
    let dir = shm();
    let root = dir.path().join("store");
    let (b, mut store) = open(&root).unwrap();
    let len = |b: &PmemBackend| b.info()["pool_bytes"].as_u64().unwrap();
    let pool = root.join("haar.pool");
    let before = len(&b);
    let mapped_before = mapped_bytes(&pool);
    FieldStore::provision(&store, 96 << 20).unwrap();
    assert_eq!(len(&b), before, "the room was allocated before the copy");
    // 1 MiB fields (through the file) and, every eighth, 4 KiB ones (through the mapping).
    let size = |i: u32| if i % 8 == 7 { 4096 } else { 1 << 20 };
    for i in 0..96 {
        let k = reuse_key("prov", i);
        store.archive(&k, &payload(&k, 0, size(i))).unwrap();
    }
    store.flush().unwrap();
    assert!(len(&b) >= before + (84 << 20), "{before} -> {}", len(&b));
    let mapped = mapped_bytes(&pool) - mapped_before;
    assert!(
        mapped < 24 << 20,
        "{mapped} bytes of the pool mapped in while 84 MiB of fields went through the file"
    );
    let (_b2, fresh) = open(&root).unwrap();
    for s in [&store, &fresh] {
        for i in 0..96 {
            let k = reuse_key("prov", i);
            let (_, v) = s.retrieve_lent(&k).unwrap().unwrap();
            assert!(*v == payload(&k, 0, size(i))[..], "field {i}");
        }
    }

    // `pool_prefault: never` (a bulk copier's store): the pool starts at its minimum, not at
    // its configured size, and writes through the file from the first field.
    let bulk = dir.path().join("bulk");
    let opts = PmemOptions {
        initial_size: 256 << 20,
        prefault: haar_store::pmem::Prefault::Never,
        ..PmemOptions::default()
    };
    let (b, mut s) = open_with(&bulk, opts).unwrap();
    assert!(
        len(&b) < 64 << 20,
        "a bulk copier's new pool: {} bytes",
        len(&b)
    );
    let mapped_before = mapped_bytes(&bulk.join("haar.pool"));
    for i in 0..64 {
        let k = reuse_key("bulk", i);
        s.archive(&k, &payload(&k, 0, 1 << 20)).unwrap();
    }
    s.flush().unwrap();
    let mapped = mapped_bytes(&bulk.join("haar.pool")) - mapped_before;
    assert!(mapped < 16 << 20, "{mapped} bytes mapped in");
    for i in 0..64 {
        let k = reuse_key("bulk", i);
        let (_, v) = s.retrieve_lent(&k).unwrap().unwrap();
        assert!(*v == payload(&k, 0, 1 << 20)[..], "field {i}");
    }

    let small = dir.path().join("small");
    let opts = PmemOptions {
        initial_size: 32 << 20,
        max_size: 64 << 20,
        ..PmemOptions::default()
    };
    let (b, s) = open_with(&small, opts).unwrap();
    let e = FieldStore::provision(&s, 256 << 20)
        .unwrap_err()
        .to_string();
    assert!(e.contains("haar.pool") && e.contains("pool_max"), "{e}");
    assert_eq!(len(&b), 32 << 20, "a refused provision grew the pool");
}
