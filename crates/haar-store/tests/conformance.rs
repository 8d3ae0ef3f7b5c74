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
    let root = nested_root(dir.path());
    conformance::run_all(&|| {
        Arc::new(PosixBackend::new(vec![root.clone()], FsyncPolicy::Never).unwrap())
            as Arc<dyn Backend>
    });
    assert_nothing_escaped(dir.path());
}

#[test]
fn posix_backend_with_two_roots_and_fsync_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let roots = vec![
        nested_root(dir.path()).join("r1"),
        nested_root(dir.path()).join("r2"),
    ];
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
    let root = nested_root(dir.path());
    conformance::run_all(&|| {
        Arc::new(PmemBackend::open(&root, pmem_opts()).unwrap()) as Arc<dyn Backend>
    });
    assert_nothing_escaped(dir.path());
}

#[test]
fn pmem_backend_cpu_cache_mode_conforms() {
    let dir = tempfile::tempdir_in(shm()).unwrap();
    let root = nested_root(dir.path());
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

/// Nothing was created beside the store root or in the two directories above it (hostile
/// values such as `../../etc` would land there), and no name inside is `.`/`..`.
fn assert_nothing_escaped(outer: &std::path::Path) {
    let only = |dir: &std::path::Path, name: &str| {
        let names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, [name], "unexpected entries in {}", dir.display());
    };
    only(outer, "a");
    only(&outer.join("a"), "b");
    only(&outer.join("a/b"), "store");
}

fn nested_root(outer: &std::path::Path) -> std::path::PathBuf {
    outer.join("a/b/store")
}
