//! Real processes with their heap in a pool file: unmodified C programs compiled here with
//! `cc`, a STREAM-shaped triad and a Python interpreter, run through `haar_heap::run` (what
//! `haar run --heap` calls) with the library cargo built for this test
//! (`target/*/deps/libhaar_heap_preload.so`). Each check reads where the memory went from outside
//! the allocator: `/proc/self/smaps` and the file's allocated blocks, and the same program
//! without the library as the contrast.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use haar_heap::{HeapError, HeapSpec, Ran};

/// The tests map GiB-sized pools and touch them; one at a time keeps a 2-core CI machine's
/// memory and timing sane.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The library cargo built for this test, beside it in `target/<profile>/deps/` (a `.so` in
/// `target/<profile>/` may be older: `cargo test` does not copy it there).
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join(haar_heap::LIB_NAME);
    assert!(lib.is_file(), "{} not built", lib.display());
    lib
}

/// Compiles a C source into `dir` and returns the program.
fn compile(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `command` under the heap in `dir` with `size`, capturing stdout and stderr into files
/// (the launcher lets the command inherit them, as `haar run` does).
fn run_heap(
    dir: &Path,
    size: &str,
    command: &[&str],
    env: &[(&str, &str)],
) -> (Ran, String, String) {
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let spec: HeapSpec = format!("{}:{size}", dir.display()).parse().unwrap();
    // The command's output goes to files through a shell redirect, so that the launcher's own
    // inheritance is what is exercised.
    let mut script = String::from("exec");
    for (k, v) in env {
        script = format!("{k}='{v}' {script}");
    }
    let script = format!(
        "{script} \"$@\" >{} 2>{}",
        out.path().display(),
        err.path().display()
    );
    let mut argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into(), "sh".into()];
    argv.extend(command.iter().map(OsString::from));
    let ran = haar_heap::run(&spec, Some(&library()), &argv).unwrap();
    let o = std::fs::read_to_string(out.path()).unwrap();
    let e = std::fs::read_to_string(err.path()).unwrap();
    (ran, o, e)
}

/// `key=value` from a program's report.
fn field(text: &str, key: &str) -> i64 {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {text:?}"))
        .parse()
        .unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A tmpfs directory when there is one (the emulated DAX mount), else a temporary one.
fn pool_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("haar-heap-test.")
            .tempdir_in(shm)
            .unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

#[test]
fn a_c_program_s_gib_lives_in_the_file_not_in_the_dram_heap() {
    let _g = serial();
    let work = tempfile::tempdir().unwrap();
    let prog = compile(work.path(), "bigheap", include_str!("c/bigheap.c"));
    let dir = pool_dir();
    let (ran, out, err) = run_heap(dir.path(), "2G", &[prog.to_str().unwrap()], &[]);
    assert_eq!(ran.shell_status(), 0, "{out}{err}");
    assert!(out.contains("bigheap ok"), "{out}{err}");
    let (pool_rss, file, anon) = (
        field(&out, "pool_rss_kb"),
        field(&out, "file_kb"),
        field(&out, "anon_kb"),
    );
    // 1 GiB written and still held (the grown block included): resident in the mapping of the
    // file, allocated in the file, and not in anonymous (DRAM heap) memory.
    assert!(pool_rss > 1_000_000, "pool Rss {pool_rss} KiB: {out}");
    assert!(file > 1_000_000, "file holds {file} KiB: {out}");
    assert!(anon < 100_000, "anonymous Rss {anon} KiB: {out}");
    assert!(!ran.file.exists(), "pool file left behind");
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));

    // A program the command starts (sh runs it as a child, not by exec) gets a private pool
    // in the same directory, not the DRAM heap, and it goes when the program ends.
    let (ran, out, err) = run_heap(
        dir.path(),
        "2G",
        &["sh", "-c", &format!("{}; true", prog.display())],
        &[],
    );
    assert_eq!(ran.shell_status(), 0, "{out}{err}");
    assert!(field(&out, "pool_rss_kb") > 1_000_000, "{out}");
    assert!(
        field(&out, "file_kb") < 100_000,
        "the named pool is the shell's: {out}"
    );
    assert!(field(&out, "anon_kb") < 100_000, "{out}");
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));

    // The contrast: the same program on the C library's heap, and with the library preloaded
    // but no pool named (it is then inert), has no pool and 1 GiB anonymous, so the figures
    // above measure placement, not the program.
    for preload in [None, Some(library())] {
        let mut c = Command::new(&prog);
        c.env_remove(haar_heap::FILE_ENV);
        if let Some(lib) = &preload {
            c.env("LD_PRELOAD", lib);
        }
        let plain = c.output().unwrap();
        let out = String::from_utf8_lossy(&plain.stdout);
        assert!(plain.status.success(), "{preload:?}: {out}");
        assert_eq!(field(&out, "pool_rss_kb"), 0);
        assert!(field(&out, "anon_kb") > 1_000_000, "{preload:?}: {out}");
    }
}

#[test]
fn a_stream_shaped_triad_is_right_with_its_arrays_in_the_file() {
    let _g = serial();
    let work = tempfile::tempdir().unwrap();
    let prog = compile(work.path(), "triad", haar_heap::TRIAD_C);
    let dir = pool_dir();
    let (ran, out, err) = run_heap(
        dir.path(),
        "1G",
        &[prog.to_str().unwrap(), "10000000", "3"],
        &[],
    );
    assert_eq!(ran.shell_status(), 0, "{out}{err}");
    assert_eq!(field(&out, "bad"), 0, "{out}");
    assert!(out.contains("n=10000000"), "{out}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn python_runs_with_its_heap_in_the_file() {
    let _g = serial();
    if Command::new("python3").arg("-V").output().is_err() {
        panic!("python3 is needed for this test");
    }
    let dir = pool_dir();
    // PYTHONMALLOC=malloc: CPython's small objects come from malloc too (its own allocator
    // takes arenas with mmap, which no malloc interposer sees).
    let code = "\
import os
d = {i: str(i) * 3 for i in range(300000)}
l = [i * 2 for i in range(2000000)]
pool = os.environ['HAAR_HEAP_FILE']
rss, inside = 0, False
for line in open('/proc/self/smaps'):
    if '-' in line.split(' ')[0] and len(line.split()) >= 5:
        inside = line.rstrip().endswith(pool)
    elif inside and line.startswith('Rss:'):
        rss += int(line.split()[1])
print('sum=%d len=%d chars=%d pool_rss_kb=%d' % (sum(l), len(d), sum(len(v) for v in d.values()), rss))
";
    for (env, min_rss) in [(vec![("PYTHONMALLOC", "malloc")], 100_000), (vec![], 1_000)] {
        let (ran, out, err) = run_heap(dir.path(), "1G", &["python3", "-c", code], &env);
        assert_eq!(ran.shell_status(), 0, "{env:?}: {out}{err}");
        assert_eq!(field(&out, "sum"), 3_999_998_000_000, "{out}");
        assert_eq!(field(&out, "len"), 300_000);
        let chars: i64 = (0..300_000)
            .map(|i: i64| 3 * i.to_string().len() as i64)
            .sum();
        assert_eq!(field(&out, "chars"), chars);
        assert!(field(&out, "pool_rss_kb") > min_rss, "{env:?}: {out}");
    }
    assert!(entries(dir.path()).is_empty());
}

#[test]
fn a_full_pool_is_null_with_enomem_and_one_line_naming_the_file() {
    let _g = serial();
    let work = tempfile::tempdir().unwrap();
    let prog = compile(work.path(), "full", include_str!("c/full.c"));
    let dir = pool_dir();
    let (ran, out, err) = run_heap(dir.path(), "64M", &[prog.to_str().unwrap()], &[]);
    assert_eq!(ran.shell_status(), 0, "{out}{err}");
    assert_eq!(field(&out, "errno"), libc::ENOMEM as i64, "{out}");
    assert_eq!(field(&out, "again_null"), 1, "{out}");
    let got = field(&out, "got_mib");
    assert!((40..64).contains(&got), "{got} MiB from a 64 MiB pool");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    let name = ran.file.file_name().unwrap().to_string_lossy().into_owned();
    assert!(lines[0].contains(&name), "{err}");
    assert!(
        lines[0].contains("64 MiB") && lines[0].contains("larger SIZE"),
        "{err}"
    );
    assert!(!ran.file.exists());
}

#[test]
fn fork_threads_and_exec_keep_heaps_private() {
    let _g = serial();
    let work = tempfile::tempdir().unwrap();
    let prog = compile(work.path(), "forks", include_str!("c/forks.c"));
    let dir = pool_dir();
    let (ran, out, err) = run_heap(dir.path(), "512M", &[prog.to_str().unwrap()], &[]);
    assert_eq!(ran.shell_status(), 0, "{out}{err}");
    assert!(
        out.contains("exec ok") && out.contains("forks ok"),
        "{out}{err}"
    );
    // The forked child's copy and the exec'd shell's private pool went with them.
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
}

#[test]
fn the_file_is_removed_and_the_status_passed_on_however_the_command_ends() {
    let _g = serial();
    let dir = pool_dir();
    let spec: HeapSpec = format!("{}:128M", dir.path().display()).parse().unwrap();
    let lib = library();
    let sh = |script: &str| -> Vec<OsString> { vec!["sh".into(), "-c".into(), script.into()] };
    // The pool exists while the command runs, private to the user.
    let ran = haar_heap::run(
        &spec,
        Some(&lib),
        &sh("test -f \"$HAAR_HEAP_FILE\" && test \"$(stat -c %a \"$HAAR_HEAP_FILE\")\" = 600 && exit 3"),
    )
    .unwrap();
    assert_eq!(ran.shell_status(), 3);
    assert!(!ran.file.exists());
    for (script, status) in [("kill -9 $$", 137), ("kill -TERM $$", 143), ("true", 0)] {
        let ran = haar_heap::run(&spec, Some(&lib), &sh(script)).unwrap();
        assert_eq!(ran.shell_status(), status, "{script}");
        assert!(!ran.file.exists(), "{script}: {} left", ran.file.display());
    }
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
}

#[test]
fn an_unusable_directory_or_library_stops_before_the_command_runs() {
    let _g = serial();
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("ran");
    let touch: Vec<OsString> = vec!["touch".into(), marker.clone().into()];
    let missing: HeapSpec = format!("{}/nope:128M", work.path().display())
        .parse()
        .unwrap();
    let e = haar_heap::run(&missing, Some(&library()), &touch).unwrap_err();
    assert!(matches!(e, HeapError::DirMissing { .. }), "{e}");
    assert!(e.to_string().contains("nope"), "{e}");
    let here: HeapSpec = format!("{}:128M", work.path().display()).parse().unwrap();
    // A library that does not exist: ld.so would only warn and run the program on the DRAM
    // heap, so the launcher refuses it itself.
    let e = haar_heap::run(&here, Some(&work.path().join("no.so")), &touch).unwrap_err();
    assert!(matches!(e, HeapError::LibraryMissing { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("cargo build --release -p haar-heap-preload"),
        "{e}"
    );
    let big: HeapSpec = format!("{}:{}", work.path().display(), 1u64 << 60)
        .parse()
        .unwrap();
    let e = haar_heap::run(&big, Some(&library()), &touch).unwrap_err();
    assert!(matches!(e, HeapError::NoSpace { .. }), "{e}");
    assert!(!marker.exists(), "the command ran");
    assert_eq!(entries(work.path()), Vec::<String>::new());
}

#[test]
fn sigterm_to_the_launcher_reaches_the_command_and_the_file_goes() {
    let _g = serial();
    let dir = pool_dir();
    let work = tempfile::tempdir().unwrap();
    let started = work.path().join("started");
    let spec: HeapSpec = format!("{}:128M", dir.path().display()).parse().unwrap();
    let lib = library();
    let script = format!("touch {}; exec sleep 30", started.display());
    let runner = std::thread::spawn(move || {
        let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into()];
        haar_heap::run(&spec, Some(&lib), &argv).unwrap()
    });
    let t = std::time::Instant::now();
    while !started.exists() {
        assert!(t.elapsed().as_secs() < 20, "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // As `kill PID_OF_HAAR` would: the launcher's handler is installed before the command
    // starts, so this process survives and the command gets the signal.
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    let ran = runner.join().unwrap();
    assert_eq!(ran.shell_status(), 128 + libc::SIGTERM as u8);
    assert!(
        t.elapsed().as_secs() < 20,
        "sleep was not ended by the signal"
    );
    assert!(!ran.file.exists());
    assert!(entries(dir.path()).is_empty());
}

/// Issue 27: `haar run --heap DIR` without SIZE took all the space available in DIR, and
/// mimalloc refuses an arena of 16,096 MiB or more (its bookkeeping must fit in the arena's
/// first 32 MiB), so on a 24 GiB /dev/shm every program failed at its first malloc with
/// "mimalloc refused the pool (too small?)". The default now stops at mimalloc's largest arena
/// (`haar_heap::MAX_SIZE`, 16,064 MiB): a program that allocates runs, in a directory with
/// more room than that (the test's temporary directory; the pool file is sparse).
#[test]
fn without_a_size_the_pool_is_one_mimalloc_takes_however_large_the_directory() {
    let _g = serial();
    let work = tempfile::tempdir().unwrap();
    let available = {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(work.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string and a zeroed statvfs.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        st.f_bavail * st.f_frsize
    };
    let spec = HeapSpec {
        dir: work.path().into(),
        size: None,
    };
    let argv: Vec<OsString> = ["sh", "-c", "x=$(printf '%s' heap); test \"$x\" = heap"]
        .iter()
        .map(OsString::from)
        .collect();
    let ran = haar_heap::run(&spec, Some(&library()), &argv).unwrap();
    assert_eq!(
        ran.shell_status(),
        0,
        "a pool of {} MiB (DIR has {} MiB available)",
        ran.size >> 20,
        available >> 20
    );
    assert!(ran.size <= haar_heap::MAX_SIZE);
    if available > haar_heap::MAX_SIZE + (1 << 30) {
        assert_eq!(ran.size, haar_heap::MAX_SIZE);
    } else {
        eprintln!(
            "note: {} has only {} MiB available, less than mimalloc's largest arena",
            work.path().display(),
            available >> 20
        );
    }
    assert!(entries(work.path()).is_empty());
}
