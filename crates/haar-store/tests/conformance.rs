//! Every backend passes the same conformance suite (`haar_store::conformance`).

use std::sync::Arc;

use haar_store::pmem::PmemOptions;
use haar_store::{Backend, FsyncPolicy, MemoryBackend, PmemBackend, PosixBackend, conformance};

#[test]
fn memory_backend_conforms() {
    let b = MemoryBackend::new();
    conformance::run_all(&|| Arc::new(b.clone()) as Arc<dyn Backend>);
}

#[test]
fn posix_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    conformance::run_all(&|| {
        Arc::new(PosixBackend::new(vec![root.clone()], FsyncPolicy::Never).unwrap())
            as Arc<dyn Backend>
    });
    assert_nothing_escaped(dir.path());
}

#[test]
fn posix_backend_with_two_roots_and_fsync_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let roots = vec![dir.path().join("a"), dir.path().join("b")];
    conformance::run_all(&|| {
        Arc::new(PosixBackend::new(roots.clone(), FsyncPolicy::Always).unwrap()) as Arc<dyn Backend>
    });
    let used = |r: &std::path::Path| std::fs::read_dir(r).unwrap().count();
    assert!(
        used(&roots[0]) > 0 && used(&roots[1]) > 0,
        "databases not spread over roots"
    );
    assert_nothing_escaped(dir.path());
}

fn pmem_opts() -> PmemOptions {
    PmemOptions {
        initial_size: 32 << 20, // small, so the suite exercises growth
        slots: 4096,
        ..PmemOptions::default()
    }
}

#[test]
fn pmem_backend_conforms() {
    let dir = tempfile::tempdir_in(shm()).unwrap();
    let root = dir.path().to_path_buf();
    conformance::run_all(&|| {
        Arc::new(PmemBackend::open(&root, pmem_opts()).unwrap()) as Arc<dyn Backend>
    });
    assert_nothing_escaped(dir.path());
}

#[test]
fn pmem_backend_cpu_cache_mode_conforms() {
    let dir = tempfile::tempdir_in(shm()).unwrap();
    let root = dir.path().to_path_buf();
    conformance::run_all(&|| {
        let opts = PmemOptions {
            force_mode: Some(haar_store::persist::PersistMode::CpuCache),
            ..pmem_opts()
        };
        Arc::new(PmemBackend::open(&root, opts).unwrap()) as Arc<dyn Backend>
    });
}

fn shm() -> std::path::PathBuf {
    let p = std::path::PathBuf::from("/dev/shm");
    if p.is_dir() { p } else { std::env::temp_dir() }
}

/// Every file the store made is inside the temporary root (hostile key values included).
fn assert_nothing_escaped(root: &std::path::Path) {
    fn walk(p: &std::path::Path, n: &mut usize) {
        for e in std::fs::read_dir(p).unwrap() {
            let e = e.unwrap();
            let name = e.file_name();
            let name = name.to_string_lossy();
            assert!(
                name != ".." && name != "." && !name.contains('/'),
                "bad name {name}"
            );
            *n += 1;
            if e.file_type().unwrap().is_dir() {
                walk(&e.path(), n);
            }
        }
    }
    let mut n = 0;
    walk(root, &mut n);
    assert!(n > 0);
    let parent = root.parent().unwrap();
    for bad in ["etc", "hidden"] {
        assert!(!parent.join(bad).exists() || parent.join(bad) == std::path::PathBuf::from("/etc"));
    }
}
