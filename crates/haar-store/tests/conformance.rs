//! Every backend passes the same conformance suite (`haar_store::conformance`).

use std::sync::Arc;

use haar_store::pmem::PmemOptions;
use haar_store::{Backend, FsyncPolicy, MemoryBackend, PmemBackend, PosixBackend, conformance};

/// One field's bytes, copied out of `retrieve_keys` (`None` when missing).
trait GetCopy {
    fn get_copy(&self, key: &haar_core::Key) -> haar_store::Result<Option<Vec<u8>>>;
}

impl GetCopy for haar_store::Store {
    fn get_copy(&self, key: &haar_core::Key) -> haar_store::Result<Option<Vec<u8>>> {
        let mut got = None;
        self.retrieve_keys(std::slice::from_ref(key), |_, b, _| {
            got = Some(b.to_vec());
            Ok(())
        })?;
        Ok(got)
    }
}

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
            force_mode: Some(haar_persist::PersistMode::CpuCache),
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

/// Two slots per array: every check of the suite runs across slot-array extensions
/// (design §5.1), including concurrent writers racing to extend the chain.
#[test]
fn pmem_backend_with_tiny_slot_arrays_conforms() {
    let dir = tempfile::tempdir_in(shm()).unwrap();
    let root = nested_root(dir.path());
    conformance::run_all(&|| {
        let opts = PmemOptions {
            slots: 2,
            ..pmem_opts()
        };
        Arc::new(PmemBackend::open(&root, opts).unwrap()) as Arc<dyn Backend>
    });
}

fn tiny_slot_pool(root: &std::path::Path) -> Arc<dyn Backend> {
    Arc::new(
        PmemBackend::open(
            root,
            PmemOptions {
                slots: 3,
                ..pmem_opts()
            },
        )
        .unwrap(),
    )
}

/// The commit log outgrows its slot array many times over: a reader opened before, and a
/// fresh process-level handle after, both see every flush; `info` counts the arrays.
#[test]
fn pmem_commit_log_is_not_limited_by_the_slot_array() {
    use haar_store::conformance::{field_key, payload};
    use haar_store::{Store, StoreOptions};
    let dir = tempfile::tempdir_in(shm()).unwrap();
    let root = dir.path().join("store");
    let mut w = Store::with_options(tiny_slot_pool(&root), StoreOptions::default());
    let key = |db: u32, flush: u32| field_key(&format!("2026030{db}"), flush, 850, "130");
    w.archive(&key(1, 0), b"GRIB-first-7777").unwrap();
    w.flush().unwrap();
    let early = Store::with_options(tiny_slot_pool(&root), StoreOptions::default());
    assert!(early.get_copy(&key(1, 0)).unwrap().is_some());
    for flush in 1..40 {
        for db in 1..4 {
            w.archive(&key(db, flush), &payload(&key(db, flush), 0, 3000))
                .unwrap();
        }
        w.flush().unwrap();
    }
    let fresh = Store::with_options(tiny_slot_pool(&root), StoreOptions::default());
    for s in [&early, &fresh] {
        for flush in 1..40 {
            for db in 1..4 {
                let got = s.get_copy(&key(db, flush)).unwrap();
                assert_eq!(
                    got,
                    Some(payload(&key(db, flush), 0, 3000)),
                    "db {db} flush {flush}"
                );
            }
        }
    }
    let info = fresh.backend().info();
    assert_eq!(info["pool_version"], 3, "{info}");
    assert!(
        info["commit_slots_used"].as_u64().unwrap() > 39 * 3, // the first flush and 39 × 3
        "{info}"
    );
    assert!(info["commit_slot_arrays"].as_u64().unwrap() >= 40, "{info}");
}

/// A version 1 pool (no extension link) is still read and written, and a full slot array
/// stays an error that says what to do, with everything committed intact.
#[test]
fn pmem_version_1_pool_keeps_its_slot_limit_and_its_data() {
    use haar_store::conformance::field_key;
    use haar_store::{Error, Store, StoreOptions};
    let dir = tempfile::tempdir_in(shm()).unwrap();
    let root = dir.path().join("store");
    drop(tiny_slot_pool(&root)); // creates an empty version 3 pool
    // Rewrite it as version 1 (its version field and the header crc that covers it).
    haar_store::conformance::set_pool_version(&root.join("haar.pool"), 1);

    let mut w = Store::with_options(tiny_slot_pool(&root), StoreOptions::default());
    let key = |i: u32| field_key("20260401", i, 850, "130");
    for i in 0..3 {
        w.archive(&key(i), b"GRIB-v1-7777").unwrap();
        w.flush().unwrap();
    }
    w.archive(&key(3), b"GRIB-v1-7777").unwrap();
    let e = w.flush().unwrap_err();
    assert!(matches!(e, Error::PoolFull { .. }), "{e}");
    assert!(e.to_string().contains("version 1"), "{e}");
    let r = Store::with_options(tiny_slot_pool(&root), StoreOptions::default());
    for i in 0..3 {
        assert_eq!(r.get_copy(&key(i)).unwrap(), Some(b"GRIB-v1-7777".to_vec()));
    }
    assert_eq!(r.backend().info()["pool_version"], 1);
}

/// Two handles writing at once (as two processes would) each sub-allocate from chunks of
/// their own; every field reads back through a fresh handle; a handle that closes gives the
/// unused tail of its chunk back when nobody reserved after it, and `pool_prefault: open`
/// reserves the first chunk at open (design §5.3).
#[test]
fn pmem_writers_take_private_chunks_and_give_back_their_tails() {
    use haar_store::conformance::{field_key, payload};
    use haar_store::pmem::Prefault;
    use haar_store::{Store, StoreOptions};
    let dir = tempfile::tempdir_in(shm()).unwrap();
    let root = dir.path().join("store");
    let open = |chunk: u64, prefault: Prefault| {
        Arc::new(
            PmemBackend::open(
                &root,
                PmemOptions {
                    chunk,
                    prefault,
                    ..pmem_opts()
                },
            )
            .unwrap(),
        )
    };
    let observer = open(1 << 20, Prefault::Create);
    let used = || observer.info()["heap_used_bytes"].as_u64().unwrap();
    let base = used();

    let early = open(4 << 20, Prefault::Open);
    assert_eq!(used(), base + (4 << 20), "a chunk reserved at open");
    drop(early);
    assert_eq!(used(), base, "an unused chunk is given back whole");

    let store = |b: Arc<PmemBackend>| Store::with_options(b, StoreOptions::default());
    let (mut a, mut b) = (
        store(open(1 << 20, Prefault::Create)),
        store(open(1 << 20, Prefault::Create)),
    );
    let key = |w: u32, i: u32| field_key(&format!("2026050{w}"), i, 850, "130");
    for i in 0..20 {
        // 2 MB each, interleaved: each handle takes two chunks, a's and b's alternating.
        a.archive(&key(1, i), &payload(&key(1, i), 0, 100_000))
            .unwrap();
        b.archive(&key(2, i), &payload(&key(2, i), 0, 100_000))
            .unwrap();
    }
    a.flush().unwrap();
    b.flush().unwrap();
    let reserved = used();
    assert_eq!(reserved, base + 4 * (1 << 20), "two chunks per handle");
    drop(b); // reserved last: its tail goes back
    let after_b = used();
    assert!(after_b < reserved, "{after_b} < {reserved}");
    drop(a); // its tail lies below b's chunk: it stays reserved (leaked space)
    assert_eq!(used(), after_b);

    let fresh = store(open(1 << 20, Prefault::Create));
    for w in 1..=2 {
        for i in 0..20 {
            let got = fresh.get_copy(&key(w, i)).unwrap();
            assert_eq!(
                got,
                Some(payload(&key(w, i), 0, 100_000)),
                "writer {w} field {i}"
            );
        }
    }
}

/// The data-safety bug of issue 26: a file put in a posix database's directory by someone
/// else (here a sub-directory too) was deleted by a wipe with `doit`. Now the wipe fails,
/// naming both, and deletes nothing; `wipe_unsafe_all` deletes them with the database.
#[test]
fn posix_wipe_refuses_a_database_directory_holding_foreign_files() {
    use haar_core::Request;
    use haar_store::conformance::{field_key, payload};
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> =
        Arc::new(PosixBackend::new(vec![dir.path().to_path_buf()], FsyncPolicy::Never).unwrap());
    let mut s = haar_store::Store::with_options(backend.clone(), Default::default());
    let k = field_key("20260107", 0, 500, "130");
    s.archive(&k, &payload(&k, 0, 64)).unwrap();
    s.flush().unwrap();
    let split = s.options().schema.split(&k, &s.options().context).unwrap();
    let db_dir = posix_db_dir(&*backend, &split.db);
    let file = db_dir.join("an:pl.20260107.data");
    let sub = db_dir.join("mine");
    std::fs::write(&file, b"FDB5 or a user").unwrap();
    std::fs::create_dir(&sub).unwrap();
    let db = Request::parse("class=od,expver=1,stream=oper,date=20260107,time=12").unwrap();
    let err = s.wipe(&db, true).unwrap_err().to_string();
    for p in [&file, &sub] {
        assert!(err.contains(&p.display().to_string()), "{err}");
        assert!(p.exists(), "{} deleted by a refused wipe", p.display());
    }
    assert_eq!(s.get_copy(&k).unwrap().unwrap(), payload(&k, 0, 64));
    s.wipe_unsafe_all(&db, true).unwrap();
    assert!(!db_dir.exists());
    assert!(s.get_copy(&k).unwrap().is_none());
}

/// Issue 26: under a root where FDB5 already wrote a database (its TOC layout, same directory
/// name as haar's), archiving into that database failed with "directory vanished right after
/// creation (concurrent wipe?)" and listings said nothing. Now the archive names the
/// directory and `haar import-fdb5`, and the store's problems name it too.
#[test]
fn a_database_fdb5_wrote_under_the_root_is_named_not_vanished() {
    use haar_store::conformance::{field_key, payload};
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> =
        Arc::new(PosixBackend::new(vec![dir.path().to_path_buf()], FsyncPolicy::Never).unwrap());
    let mut s = haar_store::Store::with_options(backend, Default::default());
    let k = field_key("20260108", 0, 500, "130");
    let split = s.options().schema.split(&k, &s.options().context).unwrap();
    let fdb5 = dir.path().join(haar_store::format::db_dir_name(&split.db));
    std::fs::create_dir(&fdb5).unwrap();
    std::fs::write(fdb5.join("toc"), b"FDB5's table of contents").unwrap();
    std::fs::write(fdb5.join("schema"), b"[ class ]").unwrap();
    let err = match s.archive(&k, &payload(&k, 0, 64)).and_then(|_| s.flush()) {
        Ok(()) => panic!("archived into FDB5's database"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(&fdb5.display().to_string())
            && err.contains("FDB5 wrote")
            && err.contains("haar import-fdb5")
            && !err.contains("vanished"),
        "{err}"
    );
    let problems = s.problems(&haar_core::Request::default()).unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("FDB5 wrote") && p.contains(&fdb5.display().to_string())),
        "{problems:?}"
    );
    // FDB5's files are untouched.
    assert_eq!(
        std::fs::read(fdb5.join("toc")).unwrap(),
        b"FDB5's table of contents"
    );
}

/// The directory of posix database `db` (its catalogue directory's parent).
fn posix_db_dir(backend: &dyn Backend, db: &haar_core::Key) -> std::path::PathBuf {
    let catalogue = backend
        .catalogue_dir(db)
        .unwrap()
        .expect("a posix database");
    catalogue.parent().unwrap().to_path_buf()
}

/// Every `.data` file directly in `dir`, by name.
fn data_file_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".data"))
        .collect();
    names.sort();
    names
}

/// Design §4.1, "Data files per index": as FDB5's TOC store, a posix writer keeps one data file
/// per index, named `<index values>.<object>.data`, and a field's listed path is that file, so
/// a client checking the path for its index (pyfdb's `test_archival_read`) finds it. A purge
/// keeps the names readable and a wipe finds no file it did not write.
#[test]
fn posix_keeps_a_data_file_per_index_named_by_its_values() {
    use haar_core::{Key, Request};
    use haar_store::conformance::payload;
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> =
        Arc::new(PosixBackend::new(vec![dir.path().to_path_buf()], FsyncPolicy::Never).unwrap());
    let mut s = haar_store::Store::with_options(backend.clone(), Default::default());
    let key = |levtype: &str, level: u32, param: &str| {
        Key::parse(&format!(
            "class=od,expver=0001,stream=oper,date=20260107,time=1200,domain=g,type=an,\
             levtype={levtype},levelist={level},step=0,param={param}"
        ))
        .unwrap()
    };
    let keys = [
        key("pl", 500, "130"),
        key("pl", 850, "130"),
        key("ml", 1, "130"),
        key("pl", 500, "131"),
    ];
    for (i, k) in keys.iter().enumerate() {
        s.archive(k, &payload(k, i as u8, 100 + i)).unwrap();
    }
    s.flush().unwrap();
    // The same fields again from a second writer: masked copies in files of their own.
    drop(s);
    let mut s = haar_store::Store::with_options(backend.clone(), Default::default());
    for (i, k) in keys.iter().enumerate() {
        s.archive(k, &payload(k, 10 + i as u8, 200 + i)).unwrap();
    }
    s.flush().unwrap();

    let split = s
        .options()
        .schema
        .split(&keys[0], &s.options().context)
        .unwrap();
    let db_dir = posix_db_dir(&*backend, &split.db);
    let names = data_file_names(&db_dir);
    let stems: Vec<&str> = names.iter().map(|n| n.split('.').next().unwrap()).collect();
    assert_eq!(stems.len(), 4, "{names:?}");
    assert_eq!(
        stems.iter().filter(|s| **s == "an:pl").count(),
        2,
        "{names:?}"
    );
    assert_eq!(
        stems.iter().filter(|s| **s == "an:ml").count(),
        2,
        "{names:?}"
    );
    for n in &names {
        let parts: Vec<&str> = n.split('.').collect();
        assert_eq!(parts.len(), 3, "{n}: two dots");
        assert!(
            parts[1].len() == 16 && parts[1].bytes().all(|b| b.is_ascii_hexdigit()),
            "{n}"
        );
    }

    let all = Request::parse("class=od,expver=0001,stream=oper,date=20260107,time=1200").unwrap();
    let listed = s.list(&all).unwrap();
    assert_eq!(listed.len(), 4);
    for f in &listed {
        let key = f.key();
        let path = backend
            .data_path(&f.db, &f.data)
            .unwrap()
            .expect("a posix field has a path");
        let levtype = key.get("levtype").unwrap();
        assert!(
            path.to_string_lossy().contains(&format!("/an:{levtype}.")),
            "{} for {}",
            path.display(),
            key
        );
        let bytes = std::fs::read(&path).unwrap();
        let at = f.data.offset as usize;
        assert_eq!(
            Some(&bytes[at..at + f.data.length as usize]),
            s.get_copy(&key).unwrap().as_deref(),
            "{key}"
        );
    }

    // A purge copies nothing here (every older file holds only masked copies) and deletes
    // the files it leaves unnamed; a fresh store reads every field from what remains.
    s.purge(&all, true).unwrap();
    let after = data_file_names(&db_dir);
    assert_eq!(after.len(), 2, "{after:?}");
    let fresh = haar_store::Store::with_options(backend.clone(), Default::default());
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            fresh.get_copy(k).unwrap(),
            Some(payload(k, 10 + i as u8, 200 + i)),
            "{k}"
        );
    }
    assert!(backend.unowned_files(&split.db).unwrap().is_empty());
    s.wipe(&all, true).unwrap();
    assert!(!db_dir.exists());
}

/// A database an older haar made (`toc` version 1) keeps one `<writer>.data` per writer, so
/// that an older haar still reading it finds every file it names; its fields read back beside
/// those of files named per index.
#[test]
fn posix_version_1_database_keeps_a_data_file_per_writer() {
    use haar_store::conformance::{field_key, payload};
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> =
        Arc::new(PosixBackend::new(vec![dir.path().to_path_buf()], FsyncPolicy::Never).unwrap());
    let mut s = haar_store::Store::with_options(backend.clone(), Default::default());
    let a = field_key("20260107", 0, 500, "130");
    s.archive(&a, &payload(&a, 0, 64)).unwrap();
    s.flush().unwrap();
    drop(s);
    let split = haar_store::Store::with_options(backend.clone(), Default::default())
        .options()
        .schema
        .split(&a, &Default::default())
        .unwrap();
    let db_dir = posix_db_dir(&*backend, &split.db);
    let toc = std::fs::OpenOptions::new()
        .write(true)
        .open(db_dir.join("toc"))
        .unwrap();
    toc.write_all_at(&haar_store::format::encode_toc_header(1), 0)
        .unwrap();

    let mut s = haar_store::Store::with_options(backend.clone(), Default::default());
    let b = field_key("20260107", 6, 850, "131");
    s.archive(&b, &payload(&b, 1, 80)).unwrap();
    s.flush().unwrap();
    let names = data_file_names(&db_dir);
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("fc:pl.")), "{names:?}");
    assert!(
        names
            .iter()
            .any(|n| n.len() == 21 && !n[..16].contains(':')),
        "a version 1 writer's <writer>.data: {names:?}"
    );
    let fresh = haar_store::Store::with_options(backend.clone(), Default::default());
    assert_eq!(fresh.get_copy(&a).unwrap(), Some(payload(&a, 0, 64)));
    assert_eq!(fresh.get_copy(&b).unwrap(), Some(payload(&b, 1, 80)));
    // A version 2 toc is refused by a reader that knows only version 1: the header says 2.
    let mut h = [0u8; 64];
    std::fs::File::open(db_dir.join("toc"))
        .unwrap()
        .read_exact_at(&mut h, 0)
        .unwrap();
    assert_eq!(haar_store::format::check_toc_header(&h).unwrap(), 1);
}
