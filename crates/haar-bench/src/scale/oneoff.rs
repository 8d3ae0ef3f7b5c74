//! The one-off CLI figures: each store's own tools (`haar list` / `haar retrieve`, FDB5's
//! `fdb-list` / `fdb-read` from the `fdb5lib` wheel) run as fresh processes, timed from spawn
//! to reap, with their peak RSS from `wait4`. Owns how those processes are made and their
//! environment; not the workers.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::{
    PER_MEMBER_STEP, Picks, Side, field_request, is_field, key, list_request, member_step, ms,
    request_text,
};
use crate::error::{Error, io};
use crate::fdb5;

/// FDB5 5.25 from PyPI's `fdb5lib` wheel (what `pip install pyfdb==5.25.0.33` brings).
#[derive(Debug, Clone)]
pub struct Wheel {
    /// Its `libfdb5.so`.
    pub lib: PathBuf,
    /// Its command-line tools (`fdb-list`, `fdb-read`).
    pub bin: PathBuf,
    /// Every directory its libraries need, for `LD_LIBRARY_PATH`.
    pub lib_path: String,
}

/// The `fdb5lib` wheel where `python3` imports it; else why not.
pub fn wheel() -> Result<Wheel, String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import fdb5lib,os;print(os.path.dirname(os.path.dirname(fdb5lib.__file__)))",
        ])
        .stderr(Stdio::null())
        .output();
    let site = match out {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => {
            return Err(
                "FDB5 5.25 (the fdb5lib wheel) not found: `python3 -c 'import fdb5lib'` fails; \
                 install it with `pip install pyfdb==5.25.0.33`"
                    .into(),
            );
        }
    };
    let lib = site.join("fdb5lib/lib64/libfdb5.so");
    let bin = site.join("fdb5lib/bin");
    if !lib.exists() || !bin.join("fdb-list").exists() || !bin.join("fdb-read").exists() {
        return Err(format!(
            "the fdb5lib wheel under {} lacks lib64/libfdb5.so or bin/fdb-list, bin/fdb-read",
            site.display()
        ));
    }
    let lib_path = [
        "fdb5lib/lib64",
        "eckitlib/lib64",
        "metkitlib/lib64",
        "eccodeslib/lib64",
        "eckitlib.libs",
    ]
    .iter()
    .map(|d| site.join(d).display().to_string())
    .collect::<Vec<_>>()
    .join(":");
    Ok(Wheel { lib, bin, lib_path })
}

/// The environment of every FDB5 process of the run: its libraries and its configuration.
pub(super) fn fdb5_env(cmd: &mut Command, wheel: &Wheel, config: &[(String, String)]) {
    for v in ["FDB5_CONFIG", "FDB_HOME", "HAAR_CONFIG", "FDB5_HOME"] {
        cmd.env_remove(v);
    }
    cmd.env("LD_LIBRARY_PATH", &wheel.lib_path)
        .env(fdb5::LIB_ENV, &wheel.lib)
        .envs(config.iter().map(|(k, v)| (k, v)));
}

/// One finished one-off process: its wall time, peak RSS and stdout.
pub(super) struct Ran {
    pub(super) wall_ms: f64,
    pub(super) rss_mb: f64,
    pub(super) stdout: Vec<u8>,
}

/// Runs `cmd` to its end, reading its stdout as a caller would; wall time from before the
/// spawn to the reap, peak RSS from `wait4`'s `ru_maxrss`. A non-zero exit fails with the
/// end of its stderr (kept in `errlog`).
pub(super) fn run_once(cmd: &mut Command, errlog: &Path) -> Result<Ran, Error> {
    let err =
        std::fs::File::create(errlog).map_err(io(format!("cannot create {}", errlog.display())))?;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(err);
    let what = format!("{:?}", cmd.get_program());
    let t = Instant::now();
    let mut child = cmd.spawn().map_err(io(format!("cannot run {what}")))?;
    let mut stdout = Vec::new();
    let read = child.stdout.take().expect("piped").read_to_end(&mut stdout);
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into values we own. std's Child is not waited
    // on afterwards (its Drop neither waits nor kills).
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall_ms = ms(t);
    if r != pid {
        return Err(io(format!("wait4 on {what}"))(
            std::io::Error::last_os_error(),
        ));
    }
    read.map_err(io(format!("reading the output of {what}")))?;
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let text = std::fs::read_to_string(errlog).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(6).collect();
        return Err(Error::Failed(format!(
            "{:?} {:?} failed (wait status {status}):\n{}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )));
    }
    Ok(Ran {
        wall_ms,
        rss_mb: ru.ru_maxrss as f64 * 1024.0 / 1e6,
        stdout,
    })
}

/// The one-off CLI figures of one store at one size.
#[derive(Debug, Default)]
pub(super) struct Cli {
    pub(super) list_ms: Vec<f64>,
    pub(super) list_rss: Vec<f64>,
    pub(super) retrieve_ms: Vec<f64>,
    pub(super) retrieve_rss: Vec<f64>,
}

/// How the one-off processes of a store are made.
pub(super) struct Tools<'a> {
    pub(super) side: Side,
    /// `haar` (this executable) with `--root`, `--backend`.
    pub(super) haar: Option<(PathBuf, PathBuf, String)>,
    /// The wheel and FDB5's configuration.
    pub(super) fdb5: Option<(&'a Wheel, &'a [(String, String)])>,
    pub(super) dir: &'a Path,
}

impl Tools<'_> {
    fn list(&self, j: u64) -> Command {
        let text = request_text(&list_request(j));
        match self.side {
            Side::Haar => {
                let (exe, root, backend) = self.haar.as_ref().expect("haar tools");
                let mut c = Command::new(exe);
                haar_env(&mut c);
                c.arg("--root")
                    .arg(root)
                    .args(["--backend", backend, "list", &text]);
                c
            }
            Side::Fdb5 => {
                let (wheel, config) = self.fdb5.expect("fdb5 tools");
                let mut c = Command::new(wheel.bin.join("fdb-list"));
                fdb5_env(&mut c, wheel, config);
                c.args(["--porcelain", &text]);
                c
            }
        }
    }

    /// The command retrieving field `g`, and the file it writes to (FDB5's `fdb-read`; haar
    /// writes to stdout).
    fn retrieve(&self, g: u64) -> Result<(Command, Option<PathBuf>), Error> {
        let text = field_request(g);
        Ok(match self.side {
            Side::Haar => {
                let (exe, root, backend) = self.haar.as_ref().expect("haar tools");
                let mut c = Command::new(exe);
                haar_env(&mut c);
                c.arg("--root")
                    .arg(root)
                    .args(["--backend", backend, "retrieve", &text]);
                (c, None)
            }
            Side::Fdb5 => {
                let (wheel, config) = self.fdb5.expect("fdb5 tools");
                let req = self.dir.join("fdb-read.req");
                let out = self.dir.join("fdb-read.out");
                std::fs::write(&req, format!("retrieve,{text}\n"))
                    .map_err(io(format!("cannot write {}", req.display())))?;
                let _ = std::fs::remove_file(&out);
                let mut c = Command::new(wheel.bin.join("fdb-read"));
                fdb5_env(&mut c, wheel, config);
                c.arg(&req).arg(&out);
                (c, Some(out))
            }
        })
    }

    /// Lines of a listing that name a field: `fdb-list --porcelain` prints
    /// `{db}{index}{datum}` lines, `haar list` one `k=v,...` key per line.
    fn count(&self, stdout: &[u8]) -> u64 {
        let start = match self.side {
            Side::Haar => "class=",
            Side::Fdb5 => "{class=",
        };
        String::from_utf8_lossy(stdout)
            .lines()
            .filter(|l| l.starts_with(start) && l.contains("param="))
            .count() as u64
    }

    pub(super) fn measure(&self, picks: &Picks, size: usize) -> Result<Cli, Error> {
        let errlog = self.dir.join(format!("{}-cli.err", self.side.name()));
        let mut c = Cli::default();
        for (i, &j) in std::iter::once(&picks.lists[0])
            .chain(&picks.lists)
            .enumerate()
        {
            let r = run_once(&mut self.list(j), &errlog)?;
            let n = self.count(&r.stdout);
            if n != PER_MEMBER_STEP {
                let (number, step) = member_step(j);
                return Err(Error::Failed(format!(
                    "scale: {} CLI list of number={number},step={step} printed {n} fields, not {PER_MEMBER_STEP}",
                    self.side.name()
                )));
            }
            if i > 0 {
                c.list_ms.push(r.wall_ms);
                c.list_rss.push(r.rss_mb);
            }
        }
        for (i, &g) in std::iter::once(&picks.reads[0])
            .chain(&picks.reads)
            .enumerate()
        {
            let (mut cmd, file) = self.retrieve(g)?;
            let r = run_once(&mut cmd, &errlog)?;
            let bytes = match &file {
                Some(f) => std::fs::read(f).map_err(io(format!("cannot read {}", f.display())))?,
                None => r.stdout,
            };
            if !is_field(&bytes, g, size) {
                return Err(Error::Failed(format!(
                    "scale: {} CLI retrieve of {} returned {} bytes, not the field",
                    self.side.name(),
                    key(g),
                    bytes.len()
                )));
            }
            if i > 0 {
                c.retrieve_ms.push(r.wall_ms);
                c.retrieve_rss.push(r.rss_mb);
            }
        }
        Ok(c)
    }
}

pub(super) fn haar_env(c: &mut Command) {
    for v in ["HAAR_CONFIG", "FDB5_CONFIG", "FDB5_CONFIG_FILE", "FDB_HOME"] {
        c.env_remove(v);
    }
}
