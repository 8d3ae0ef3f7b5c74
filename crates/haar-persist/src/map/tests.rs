//! Tests of [`super::PoolMapping`]: bounds, growth, persistence read back through the file,
//! huge-page alignment and a counter shared by three processes.

use super::*;
use crate::cpu::sfence;
use crate::test_support::pattern;

/// The mapping starts at a 2 MiB boundary (so huge pages can back it), and backing a
/// range with huge pages, where the kernel can, leaves every byte as it was.
#[test]
fn mapping_is_huge_page_aligned_and_huge_pages_keep_contents() {
    let dir = tempfile::tempdir().unwrap();
    let pool = PoolMapping::open(dir.path().join("pool"), 64 << 20).unwrap();
    assert_eq!(pool.base() as usize % HUGE_PAGE, 0);
    pool.grow(8 << 20).unwrap();
    let data = pattern(8 << 20, 7);
    // SAFETY: in bounds; nothing else uses this mapping.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), pool.base(), data.len()) };
    pool.use_huge_pages(4096, (8 << 20) - 4096); // best effort: either way
    assert!(pool.slice(0, 8 << 20).unwrap() == &data[..]);
    assert!(!pool.use_huge_pages(0, 4096), "no whole huge page inside");
    let small = PoolMapping::open(dir.path().join("small"), 1 << 20).unwrap();
    small.grow(4096).unwrap();
    assert!(small.slice(0, 4096).is_some());
}

/// Regression (design §5.1): huge pages over space this process never touched, on a tmpfs
/// mounted `huge=always`, and then stores through the mapping: every store must reach the
/// file (read back with pread, bypassing the mapping). Linux 6.18 kept none of them when
/// `MADV_COLLAPSE` ran before the pages were faulted in. Needs root to mount the tmpfs;
/// skipped otherwise unless `HAAR_REQUIRE_ROOT_TESTS` is set.
#[test]
fn stores_after_huge_pages_over_untouched_space_reach_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("huge");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "huge=always,size=256m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        assert!(
            std::env::var_os("HAAR_REQUIRE_ROOT_TESTS").is_none(),
            "cannot mount a huge=always tmpfs (HAAR_REQUIRE_ROOT_TESTS is set): run as root"
        );
        eprintln!("skipped: mounting a huge=always tmpfs needs root");
        return;
    }
    let result = std::panic::catch_unwind(|| {
        let path = mnt.join("pool");
        let pool = PoolMapping::open(&path, 256 << 20).unwrap();
        pool.grow(64 << 20).unwrap();
        pool.use_huge_pages(0, 64 << 20);
        let data = pattern(64 << 20, 11);
        // SAFETY: in bounds; nothing else uses this mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), pool.base(), data.len()) };
        pool.persist(0, 64 << 20).unwrap();
        let mut back = vec![0u8; data.len()];
        std::os::unix::fs::FileExt::read_exact_at(&File::open(&path).unwrap(), &mut back, 0)
            .unwrap();
        let lost = (0..data.len())
            .step_by(4096)
            .filter(|&i| back[i..i + 4096] != data[i..i + 4096])
            .count();
        assert_eq!(
            lost, 0,
            "{lost} of 16384 pages written through the mapping are not in the file"
        );
    });
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

#[test]
fn slice_past_eof_returns_none() {
    let dir = tempfile::tempdir().unwrap();
    let pool = PoolMapping::open(dir.path().join("pool"), 1 << 20).unwrap();
    assert_eq!(pool.file_len(), 0);
    assert_eq!(pool.slice(0, 0), Some(&[][..]));
    assert!(pool.slice(0, 1).is_none());
    pool.grow(100).unwrap();
    assert_eq!(pool.slice(0, 100).map(<[u8]>::len), Some(100));
    assert_eq!(pool.slice(100, 0).map(<[u8]>::len), Some(0));
    assert!(pool.slice(99, 2).is_none());
    assert!(pool.slice(101, 0).is_none());
    assert!(pool.slice(usize::MAX, 2).is_none());
    assert!(pool.ptr_mut(50, 51).is_none());
    assert!(pool.persist(0, 101).is_err());
    assert!(pool.populate(4096, 1).is_err());
}

#[test]
fn grow_then_access_persist_and_read_back_through_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    for mode in [PersistMode::CpuCache, PersistMode::Msync] {
        let _ = std::fs::remove_file(&path);
        let pool = PoolMapping::open_with_mode(&path, 1 << 30, Some(mode)).unwrap();
        assert_eq!(pool.mode(), mode);
        let len = 3 * page_size() + 5;
        pool.grow(len).unwrap();
        pool.grow(10).unwrap(); // never shrinks
        assert_eq!(pool.file_len(), len);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len as u64);
        pool.populate(0, len).unwrap();
        assert!(pool.slice(0, len).unwrap().iter().all(|&b| b == 0));

        let data = pattern(len - 3, 9);
        // SAFETY: the pool is private to this test; nothing else reads or writes it.
        unsafe { pool.write_nt(3, &data).unwrap() };
        pool.persist(3, data.len()).unwrap();
        assert_eq!(pool.slice(3, data.len()).unwrap(), &data[..]);

        // Read back bypassing the mapping.
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(&on_disk[3..], &data[..]);
        drop(pool);

        // A new mapping sees the same bytes and length.
        let again = PoolMapping::open(&path, 1 << 30).unwrap();
        assert_eq!(again.file_len(), len);
        assert_eq!(again.slice(3, data.len()).unwrap(), &data[..]);
    }
}

#[test]
fn grow_beyond_reserve_and_open_of_oversized_file_fail_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let pool = PoolMapping::open(&path, 8192).unwrap();
    let err = pool.grow(8193).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("larger reserve"), "{err}");
    pool.grow(8192).unwrap();
    drop(pool);
    let err = PoolMapping::open(&path, 4096).unwrap_err();
    assert!(err.to_string().contains("larger reserve"), "{err}");
}

#[test]
fn refresh_len_sees_growth_through_another_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let a = PoolMapping::open(&path, 1 << 24).unwrap();
    let b = PoolMapping::open(&path, 1 << 24).unwrap();
    b.grow(10_000).unwrap();
    // SAFETY: the range is written by `b` only, before `a` reads it.
    unsafe { b.write_nt(9_000, b"hello").unwrap() };
    sfence();
    assert!(a.slice(9_000, 5).is_none());
    assert_eq!(a.refresh_len().unwrap(), 10_000);
    assert_eq!(a.slice(9_000, 5).unwrap(), b"hello");
}

#[test]
#[should_panic(expected = "not 8-byte aligned")]
fn atomic_u64_rejects_misaligned_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let pool = PoolMapping::open(dir.path().join("pool"), 1 << 20).unwrap();
    pool.grow(64).unwrap();
    pool.atomic_u64(4);
}

#[test]
#[should_panic(expected = "past end of pool file")]
fn atomic_u64_rejects_offsets_past_eof() {
    let dir = tempfile::tempdir().unwrap();
    let pool = PoolMapping::open(dir.path().join("pool"), 1 << 20).unwrap();
    pool.grow(64).unwrap();
    pool.atomic_u64(64);
}

const CHILD_ENV: &str = "HAAR_PERSIST_TEST_CHILD_POOL";
const INCREMENTS: u64 = 200_000;
const COUNTER_OFF: usize = 64;

/// Runs only when re-executed by `atomic_counter_is_shared_between_processes`: maps the pool
/// independently and bumps the shared counter.
#[test]
fn cross_process_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let pool = PoolMapping::open(path, 1 << 20).unwrap();
    let counter = pool.atomic_u64(COUNTER_OFF);
    for _ in 0..INCREMENTS {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    pool.persist(COUNTER_OFF, 8).unwrap();
}

#[test]
fn atomic_counter_is_shared_between_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool");
    let pool = PoolMapping::open(&path, 1 << 20).unwrap();
    pool.grow(4096).unwrap();
    let counter = pool.atomic_u64(COUNTER_OFF);

    // The test's own name, from this module's path minus the crate name.
    let module = module_path!().split_once("::").map_or("", |(_, rest)| rest);
    let child_test = format!("{module}::cross_process_child");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", &child_test, "--test-threads=1", "--nocapture"])
                .env(CHILD_ENV, &path)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for _ in 0..INCREMENTS {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {stdout}");
        assert!(
            stdout.contains("1 passed"),
            "child did not run the test: {stdout}"
        );
    }
    assert_eq!(counter.load(Ordering::SeqCst), 3 * INCREMENTS);
    let on_disk = std::fs::read(&path).unwrap();
    let word = u64::from_le_bytes(on_disk[COUNTER_OFF..COUNTER_OFF + 8].try_into().unwrap());
    assert_eq!(word, 3 * INCREMENTS);
}
