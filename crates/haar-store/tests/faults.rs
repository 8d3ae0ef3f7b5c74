//! Faults injected under the backend trait (ENOSPC, EIO, short writes) and flipped bytes in
//! data, index, commit-log and pool files: clear errors naming the file and key; every other
//! flushed field still reads.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use haar_core::Key;
use haar_store::conformance::{field_key, payload};
use haar_store::fault::{Fault, FaultPlan, FaultyBackend};
use haar_store::pmem::PmemOptions;
use haar_store::{Backend, Error, FsyncPolicy, PmemBackend, PosixBackend, Store, StoreOptions};

fn keys(date: &str, n: u32) -> Vec<Key> {
    (0..n).map(|s| field_key(date, s, 500, "130")).collect()
}

fn read(store: &Store, k: &Key) -> Result<Option<Vec<u8>>, Error> {
    let mut got = None;
    store.retrieve_keys(std::slice::from_ref(k), |_, b, _| {
        got = Some(b.to_vec());
        Ok(())
    })?;
    Ok(got)
}

fn assert_all_read(store: &Store, ks: &[Key], generation: u8) {
    for k in ks {
        let got = read(store, k).unwrap_or_else(|e| panic!("{k}: {e}"));
        assert!(
            got == Some(payload(k, generation, 5000)),
            "{k} did not read back"
        );
    }
}

fn posix(root: &Path) -> Arc<dyn Backend> {
    Arc::new(PosixBackend::new(vec![root.to_path_buf()], FsyncPolicy::Always).unwrap())
}

fn faulty(root: &Path, plan: &FaultPlan) -> Store {
    Store::with_options(
        Arc::new(FaultyBackend::new(posix(root), plan.clone())),
        StoreOptions::default(),
    )
}

fn archive_all(store: &mut Store, ks: &[Key], generation: u8) {
    for k in ks {
        store.archive(k, &payload(k, generation, 5000)).unwrap();
    }
    store.flush().unwrap();
}

#[test]
fn enospc_on_append_names_key_and_keeps_flushed_data() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::default();
    let mut s = faulty(dir.path(), &plan);
    let good = keys("20250301", 5);
    archive_all(&mut s, &good, 0);
    plan.arm(Fault::NoSpace, 0);
    let k = field_key("20250301", 99, 500, "130");
    let err = s.archive(&k, &payload(&k, 0, 5000)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("No space left"), "{msg}");
    assert!(
        msg.contains("step=99"),
        "error does not name the key: {msg}"
    );
    assert_eq!(err.exit_code(), 3);
    // The store keeps working, and nothing flushed was lost.
    s.flush().unwrap();
    assert!(
        read(&s, &k).unwrap().is_none(),
        "failed field became visible"
    );
    assert_all_read(&s, &good, 0);
    let more = keys("20250302", 3);
    archive_all(&mut s, &more, 0);
    assert_all_read(
        &Store::with_options(posix(dir.path()), StoreOptions::default()),
        &more,
        0,
    );
}

#[test]
fn short_write_leaves_no_entry_and_later_fields_are_intact() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::default();
    let mut s = faulty(dir.path(), &plan);
    let ks = keys("20250303", 6);
    plan.arm(Fault::ShortWrite, 2);
    let mut stored = Vec::new();
    for k in &ks {
        match s.archive(k, &payload(k, 0, 5000)) {
            Ok(()) => stored.push(k.clone()),
            Err(e) => assert!(
                e.to_string()
                    .contains(&k.get("step").map(|v| format!("step={v}")).unwrap())
            ),
        }
    }
    s.flush().unwrap();
    assert_eq!(plan.fired(), [Fault::ShortWrite]);
    assert_eq!(stored.len(), 5);
    let fresh = Store::with_options(posix(dir.path()), StoreOptions::default());
    assert_all_read(&fresh, &stored, 0);
    assert!(read(&fresh, &ks[2]).unwrap().is_none());
}

#[test]
fn commit_failure_hides_the_whole_flush_and_names_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::default();
    let mut s = faulty(dir.path(), &plan);
    let first = keys("20250304", 4);
    archive_all(&mut s, &first, 0);
    for k in &first {
        s.archive(k, &payload(k, 1, 5000)).unwrap();
    }
    plan.arm(Fault::CommitIo, 0);
    let msg = s.flush().unwrap_err().to_string();
    assert!(
        msg.contains("20250304") && msg.contains("must be archived again"),
        "{msg}"
    );
    let fresh = Store::with_options(posix(dir.path()), StoreOptions::default());
    // Old versions, all of them: the failed flush is invisible, not partly visible.
    assert_all_read(&fresh, &first, 0);
}

#[test]
fn read_error_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan::default();
    let mut s = faulty(dir.path(), &plan);
    let ks = keys("20250305", 2);
    archive_all(&mut s, &ks, 0);
    plan.arm(Fault::ReadIo, 0);
    let e = read(&s, &ks[0]).unwrap_err();
    assert_eq!(e.exit_code(), 3);
    assert_all_read(&s, &ks, 0);
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in walk(dir) {
        if e.extension().is_some_and(|x| x == ext) || e.file_name().is_some_and(|n| n == ext) {
            out.push(e);
        }
    }
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn flip(path: &Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x20;
    f.write_all_at(&b, at).unwrap();
}

#[test]
fn flipped_byte_in_posix_data_names_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::with_options(posix(dir.path()), StoreOptions::default());
    let ks = keys("20250306", 4);
    archive_all(&mut s, &ks, 0);
    let data = files(dir.path(), "data");
    assert_eq!(data.len(), 1);
    flip(&data[0], 5000 + 100); // inside the second field
    let r = Store::with_options(posix(dir.path()), StoreOptions::default());
    let e = read(&r, &ks[1]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Corrupt { .. }), "{msg}");
    assert!(
        msg.contains(&data[0].display().to_string()),
        "file not named: {msg}"
    );
    assert!(msg.contains("step=1"), "key not named: {msg}");
    assert_eq!(e.exit_code(), 3);
    for k in [&ks[0], &ks[2], &ks[3]] {
        assert!(read(&r, k).unwrap() == Some(payload(k, 0, 5000)));
    }
}

#[test]
fn flipped_byte_in_index_or_toc_loses_only_that_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::with_options(posix(dir.path()), StoreOptions::default());
    let a = keys("20250307", 3);
    archive_all(&mut s, &a, 0);
    let b: Vec<Key> = (10..13)
        .map(|st| field_key("20250307", st, 500, "130"))
        .collect();
    archive_all(&mut s, &b, 0);
    let index = files(dir.path(), "index");
    assert_eq!(index.len(), 1);
    flip(&index[0], 40); // inside the first segment (flush of `a`)
    let r = Store::with_options(posix(dir.path()), StoreOptions::default());
    assert_all_read(&r, &b, 0);
    let req = haar_core::Request::parse(&a[0].to_string()).unwrap();
    let rep = r.retrieve(&req, |_, _, _| Ok(())).unwrap();
    assert_eq!(rep.missing.len(), 1);
    assert!(
        rep.problems
            .iter()
            .any(|p| p.contains(&index[0].display().to_string())),
        "index file not named: {:?}",
        rep.problems
    );
    // A flipped commit record: that flush is skipped, the other still reads.
    let toc = files(dir.path(), "toc");
    flip(&toc[0], 64 + 64 + 10); // second record (flush of `b`)
    let r = Store::with_options(posix(dir.path()), StoreOptions::default());
    let stats = r
        .stats(&haar_core::Request::parse("date=20250307").unwrap())
        .unwrap();
    assert!(
        stats[0].problems.iter().any(|p| p.contains("toc")),
        "{:?}",
        stats[0].problems
    );
}

#[test]
fn flipped_byte_in_pmem_pool_names_pool_and_key() {
    let base = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let root = base.path().join("pool");
    let open = || -> Store {
        let b = PmemBackend::open(
            &root,
            PmemOptions {
                initial_size: 32 << 20,
                slots: 1024,
                ..Default::default()
            },
        )
        .unwrap();
        Store::with_options(Arc::new(b), StoreOptions::default())
    };
    let mut s = open();
    let ks = keys("20250308", 3);
    archive_all(&mut s, &ks, 0);
    drop(s);
    let r = open();
    let f = r
        .list(&haar_core::Request::parse("date=20250308,step=1").unwrap())
        .unwrap();
    let pool = root.join("haar.pool");
    flip(&pool, f[0].data.offset + 77);
    let r = open();
    let e = read(&r, &ks[1]).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&pool.display().to_string()) && msg.contains("step=1"),
        "{msg}"
    );
    // The zero-copy path checks the same checksum before lending a byte.
    let e = (r.retrieve_keys(&ks[1..2], |_, _, _| Ok(())))
        .unwrap_err()
        .to_string();
    assert!(e.contains("step=1") && e.contains("crc"), "{e}");
    let req = haar_core::Request::parse(&ks[1].to_string()).unwrap();
    assert!(
        r.retrieve(&req, |_, _, _| Ok(())).is_err(),
        "retrieve lent damaged bytes"
    );
    assert!(read(&r, &ks[0]).unwrap() == Some(payload(&ks[0], 0, 5000)));
    assert!(read(&r, &ks[2]).unwrap() == Some(payload(&ks[2], 0, 5000)));
}
