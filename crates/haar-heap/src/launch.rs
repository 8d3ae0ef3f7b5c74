//! Finding the preload library, running the command with it, passing on signals, and
//! reporting how the command ended as a shell would.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::HeapError;
use crate::pool_file::{FILE_ENV, PoolFile};
use crate::spec::HeapSpec;

/// The file name of the preload library (`cargo build -p haar-heap-preload`).
pub const LIB_NAME: &str = "libhaar_heap_preload.so";
/// The environment variable that overrides where the preload library is.
pub const LIB_ENV: &str = "HAAR_HEAP_LIB";

/// Finds the preload library: `$HAAR_HEAP_LIB`, else next to the running executable (cargo
/// puts `target/release/libhaar_heap_preload.so` beside `target/release/haar`), else in
/// `../lib/` and `../lib/haar/` beside it (an installed layout). When the executable is a
/// test or an example (`target/*/deps/`, `target/*/examples/`), the profile directory above
/// it is looked at too.
///
/// # Errors
/// [`HeapError::LibraryMissing`], listing every place looked at and how to build it.
pub fn find_library() -> Result<PathBuf, HeapError> {
    let exe = std::env::current_exe().ok();
    find_library_from(std::env::var_os(LIB_ENV), exe.as_deref())
}

fn find_library_from(env: Option<OsString>, exe: Option<&Path>) -> Result<PathBuf, HeapError> {
    let mut searched = Vec::new();
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        // An explicit choice that is wrong is an error, not a reason to look elsewhere.
        return Err(HeapError::LibraryMissing { searched: vec![p] });
    }
    if let Some(dir) = exe.and_then(Path::parent) {
        let mut candidates = vec![
            dir.join(LIB_NAME),
            dir.join("../lib").join(LIB_NAME),
            dir.join("../lib/haar").join(LIB_NAME),
        ];
        if [OsStr::new("deps"), OsStr::new("examples")]
            .contains(&dir.file_name().unwrap_or_default())
        {
            candidates.insert(1, dir.join("..").join(LIB_NAME));
        }
        for c in candidates {
            if c.is_file() {
                return Ok(c);
            }
            searched.push(c);
        }
    }
    Err(HeapError::LibraryMissing { searched })
}

/// How the command ended, with the pool it ran on (already removed).
#[derive(Debug, Clone)]
pub struct Ran {
    /// The command's wait status.
    pub status: ExitStatus,
    /// The pool file it ran on.
    pub file: PathBuf,
    /// The pool's size in bytes.
    pub size: u64,
}

impl Ran {
    /// The status a shell reports: the exit code, or 128 + N when signal N ended the command.
    pub fn shell_status(&self) -> u8 {
        match (self.status.code(), self.status.signal()) {
            (Some(c), _) => c as u8,
            (None, Some(s)) => (128 + s) as u8,
            _ => 1,
        }
    }
}

/// The command's pid while it runs, for the signal handler (0: none).
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn pass_on(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::Acquire);
    // SIGINT and SIGQUIT come from the terminal to the whole process group, the command
    // included: only outlive them. SIGTERM and SIGHUP are usually sent to haar alone.
    if pid > 0 && (sig == libc::SIGTERM || sig == libc::SIGHUP) {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Handlers installed for the duration of a run, and the previous ones to restore.
struct Handlers(Vec<(libc::c_int, libc::sigaction)>);

impl Handlers {
    fn install() -> Handlers {
        let mut old = Vec::new();
        for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: a zeroed sigaction with a valid handler is well formed; a handler (not
            // SIG_IGN) is reset to the default by exec, so the command gets default dispositions.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = pass_on as *const () as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        Handlers(old)
    }
}

impl Drop for Handlers {
    fn drop(&mut self) {
        for (sig, prev) in &self.0 {
            // SAFETY: restores what sigaction returned.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
    }
}

/// Runs `command` (program and arguments) with its heap in a new pool file under
/// `spec.dir`, through the preload library `lib` (`None`: [`find_library`]), waits for it,
/// and removes the file however it ended. The command inherits stdin, stdout and stderr.
/// DIR is checked before the library is looked for, and both before anything runs.
///
/// # Errors
/// [`HeapError::NoCommand`], everything found wrong with DIR (see [`PoolFile::create`]),
/// [`HeapError::LibraryMissing`], and [`HeapError::Spawn`] when the command cannot be
/// started.
pub fn run(spec: &HeapSpec, lib: Option<&Path>, command: &[OsString]) -> Result<Ran, HeapError> {
    let (program, args) = command.split_first().ok_or(HeapError::NoCommand)?;
    let pool = PoolFile::create(spec)?;
    let lib = match lib {
        // ld.so only warns about a preload it cannot open and runs the program anyway, on
        // the DRAM heap: refuse that here.
        Some(l) if !l.is_file() => {
            return Err(HeapError::LibraryMissing {
                searched: vec![l.to_path_buf()],
            });
        }
        Some(l) => l.to_path_buf(),
        None => find_library()?,
    };
    let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
    let file = std::fs::canonicalize(pool.path()).unwrap_or_else(|_| pool.path().into());
    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let handlers = Handlers::install();
    let mut child = Command::new(program)
        .args(args)
        .env("LD_PRELOAD", preload)
        .env(FILE_ENV, &file)
        .spawn()
        .map_err(|source| HeapError::Spawn {
            command: program.to_string_lossy().into_owned(),
            source,
        })?;
    CHILD.store(child.id() as i32, Ordering::Release);
    let waited = child.wait();
    CHILD.store(0, Ordering::Release);
    drop(handlers);
    let status = waited.map_err(|source| HeapError::Spawn {
        command: program.to_string_lossy().into_owned(),
        source,
    })?;
    let ran = Ran {
        status,
        file,
        size: pool.size(),
    };
    drop(pool);
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_found_by_variable_then_beside_the_executable() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let deps = bin.join("deps");
        std::fs::create_dir_all(&deps).unwrap();
        let exe = bin.join("haar");
        // Nothing there: the error lists the places and says how to build it.
        let e = find_library_from(None, Some(&exe)).unwrap_err().to_string();
        assert!(e.contains(&bin.join(LIB_NAME).display().to_string()), "{e}");
        assert!(
            e.contains("cargo build --release -p haar-heap-preload"),
            "{e}"
        );
        // Beside the executable, and from a test binary in deps/.
        std::fs::write(bin.join(LIB_NAME), b"").unwrap();
        assert_eq!(
            find_library_from(None, Some(&exe)).unwrap(),
            bin.join(LIB_NAME)
        );
        let found = find_library_from(None, Some(&deps.join("t-123"))).unwrap();
        assert_eq!(found, deps.join("..").join(LIB_NAME));
        // The variable wins, and a wrong one is an error naming it.
        let other = dir.path().join("other.so");
        std::fs::write(&other, b"").unwrap();
        assert_eq!(
            find_library_from(Some(other.clone().into()), Some(&exe)).unwrap(),
            other
        );
        let wrong = dir.path().join("missing.so");
        let e = find_library_from(Some(wrong.clone().into()), Some(&exe)).unwrap_err();
        assert!(e.to_string().contains(&wrong.display().to_string()));
    }

    #[test]
    fn shell_status_is_the_code_or_128_plus_the_signal() {
        let ran = |raw: i32| Ran {
            status: ExitStatus::from_raw(raw),
            file: PathBuf::new(),
            size: 0,
        };
        assert_eq!(ran(3 << 8).shell_status(), 3);
        assert_eq!(ran(libc::SIGKILL).shell_status(), 137);
        assert_eq!(ran(libc::SIGSEGV).shell_status(), 139);
    }
}
