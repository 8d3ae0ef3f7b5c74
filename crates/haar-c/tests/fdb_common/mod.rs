//! Shared by the tests of haar's `libfdb5.so`: where the built library and FDB5 5.25's own
//! (the `fdb5lib` wheel PyPI's `pyfdb` brings) are, compiling C programs against FDB5's
//! header, and running them against either library.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Set to `1` (as CI does) to make a missing FDB5 wheel a failure instead of a skip.
pub const REQUIRE_WHEEL: &str = "HAAR_REQUIRE_FDB5_WHEEL";

/// FDB5 5.25 from the `fdb5lib` wheel and its companions.
pub struct Wheel {
    /// The directory holding `fdb5/api/fdb_c.h`.
    pub include: PathBuf,
    /// The directory holding FDB5's `libfdb5.so`.
    pub lib: PathBuf,
    /// Every directory its libraries need (for `LD_LIBRARY_PATH` and `-rpath-link`).
    pub lib_path: String,
}

/// The wheel, or `None` (with the reason printed) when it is absent and not required.
pub fn wheel() -> Option<Wheel> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import fdb5lib,os;print(os.path.dirname(os.path.dirname(fdb5lib.__file__)))",
        ])
        .output();
    let site = match out {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        other => {
            let why = format!(
                "FDB5 5.25 wheel not found (python3 -c 'import fdb5lib': {:?}); install it with `pip install pyfdb==5.25.0.33`",
                other.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            );
            assert!(
                std::env::var(REQUIRE_WHEEL).as_deref() != Ok("1"),
                "{why} ({REQUIRE_WHEEL}=1)"
            );
            eprintln!("SKIPPED: {why}");
            return None;
        }
    };
    let dirs = [
        "fdb5lib/lib64",
        "eckitlib/lib64",
        "metkitlib/lib64",
        "eccodeslib/lib64",
        "eckitlib.libs",
    ];
    let lib_path = dirs
        .iter()
        .map(|d| site.join(d).display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    Some(Wheel {
        include: site.join("fdb5lib/include"),
        lib: site.join("fdb5lib/lib64"),
        lib_path,
    })
}

/// The FDB5 5.25 header: the wheel's, or the copy checked in beside these tests when the
/// wheel is absent.
pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/include")
}

/// haar's C library as built for these tests (`libhaar_c.so`, next to the test binary's
/// `deps` directory), copied as `DIR/libfdb5.so` as `make c` installs it. Returns `DIR`.
pub fn haar_libfdb5(dir: &Path) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let built = [
        deps.parent().unwrap().join("libhaar_c.so"),
        deps.join("libhaar_c.so"),
    ]
    .into_iter()
    .filter(|p| p.exists())
    .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
    .expect("libhaar_c.so not built: run `cargo test --release -p haar-c`");
    let lib = dir.join("haar-lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::copy(&built, lib.join("libfdb5.so")).unwrap();
    lib
}

/// Compiles the C program `src` with `-Wall -Wextra -Werror` against FDB5's header in
/// `include`, linked with `-lfdb5` from `lib_dir`.
pub fn cc(src: &Path, out: &Path, include: &Path, lib_dir: &Path, rpath_link: Option<&str>) {
    let mut c = Command::new("gcc");
    c.args(["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", include.display()))
        .arg(format!(
            "-I{}",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../bench")
                .display()
        ))
        .arg(src)
        .arg(format!("-L{}", lib_dir.display()));
    if let Some(r) = rpath_link {
        c.arg(format!("-Wl,-rpath-link={r}"));
    }
    c.arg("-lfdb5").arg("-o").arg(out);
    let o = c.output().expect("gcc runs");
    assert!(
        o.status.success(),
        "gcc {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Runs `bin args` with `LD_LIBRARY_PATH=lib_path` and no `HAAR_CONFIG` (so FDB5's own
/// configuration variables decide), plus `envs`.
pub fn run(bin: &Path, args: &[&str], lib_path: &str, envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin);
    c.args(args)
        .env("LD_LIBRARY_PATH", lib_path)
        .env_remove("HAAR_CONFIG")
        .env_remove("FDB5_CONFIG")
        .env_remove("FDB5_CONFIG_FILE")
        .env_remove("FDB_HOME");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("the program runs")
}

/// `o`'s stdout, after asserting it succeeded (the message shows stderr).
pub fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A scratch directory in /dev/shm where it exists (as the benchmarks use), else in /tmp.
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("haar-fdbapi-")
            .tempdir_in(shm)
            .unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}
