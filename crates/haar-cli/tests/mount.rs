//! `haar mount` end to end (design §15): the real binary mounts a real FUSE file system over a
//! store in a temporary directory, and unmodified programs (`ls`, `find`, `cp`, `tar`, `dd`,
//! `grib_ls`, `sh`) and this test's own system calls use it. Every mount is undone by a guard
//! even when a check fails. Needs /dev/fuse, root (or fuse3's fusermount3) and ecCodes' tools.

use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/small_fs.rs"]
mod small_fs;
use small_fs::SmallFs;

const HAAR: &str = env!("CARGO_BIN_EXE_haar");

/// A running `haar mount` over `store`, unmounted and reaped on drop.
struct Mounted {
    child: Option<Child>,
    mnt: PathBuf,
    stderr: PathBuf,
}

impl Mounted {
    /// Mounts `store` (backend `backend`) on `mnt` and waits for `mounted MOUNTPOINT`.
    fn new(store: &Path, backend: &str, mnt: &Path) -> Mounted {
        let mut cmd = Command::new(HAAR);
        cmd.args(["--backend", backend, "--root"])
            .arg(store)
            .arg("mount")
            .arg(mnt);
        Mounted::spawn(cmd, mnt)
    }

    /// Runs `cmd` (a `haar … mount MNT` command) and waits for `mounted MNT`.
    fn spawn(mut cmd: Command, mnt: &Path) -> Mounted {
        fs::create_dir_all(mnt).unwrap();
        let stderr = mnt.with_extension("stderr");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("run haar mount");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let m = Mounted {
            child: Some(child),
            mnt: mnt.into(),
            stderr,
        };
        assert_eq!(
            line.trim_end(),
            format!("mounted {}", mnt.display()),
            "haar mount did not start: {}",
            m.errors()
        );
        m
    }

    fn errors(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// SIGTERM: the server must unmount and exit 0.
    fn terminate(mut self) {
        let mut child = self.child.take().unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_for(&mut child, HANG);
        assert_eq!(status, Some(0), "haar mount on SIGTERM: {}", self.errors());
        assert!(!is_mounted(&self.mnt), "still mounted after SIGTERM");
    }

    /// kill -9: the server dies; the dead mount is detached.
    fn kill9(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        unmount(&self.mnt);
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unmount(&self.mnt);
            if wait_for(&mut c, HANG).is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        unmount(&self.mnt);
    }
}

fn unmount(mnt: &Path) {
    if is_mounted(mnt) {
        let ok = Command::new("fusermount3")
            .arg("-u")
            .arg(mnt)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(mnt).status();
        }
    }
}

fn is_mounted(mnt: &Path) -> bool {
    let Ok(canon) = mnt
        .canonicalize()
        .or_else(|_| Ok::<_, ()>(mnt.to_path_buf()))
    else {
        return false;
    };
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(canon.to_str().unwrap_or("")))
}

/// How long a wait for an exit, an unmount or a refresh lasts before the test calls it a hang.
/// These waits end as soon as the event happens (tens of milliseconds when the host is idle);
/// the bound only tells "never" from "late", and on a 2-core host busy with builds exits have
/// taken over 10 s, so it is generous. Speed is measured by benchmarks, not here.
const HANG: Duration = Duration::from_secs(60);

fn wait_for(c: &mut Child, limit: Duration) -> Option<i32> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(s) = c.try_wait().unwrap() {
            return Some(s.code().unwrap_or(-1));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run a tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn haar_ok(store: &Path, backend: &str, args: &[&OsStr]) -> String {
    run(Command::new(HAAR)
        .args(["--backend", backend, "--root"])
        .arg(store)
        .args(args))
}

/// Bytes that differ everywhere (a misplaced chunk cannot compare equal).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// GRIB messages made by ecCodes' grib_set from its own sample, with MARS keys: `steps` ×
/// `params` fields.
fn grib_file(dir: &Path, steps: &[u32], params: &[u32]) -> PathBuf {
    let out = dir.join("input.grib");
    let mut all = Vec::new();
    for s in steps {
        for p in params {
            let one = dir.join(format!("m{s}-{p}.grib"));
            run(Command::new("grib_set")
                .arg("-s")
                .arg(format!(
                    "setLocalDefinition=1,localDefinitionNumber=1,class=od,type=fc,\
                     stream=oper,expver=0001,step={s},paramId={p}"
                ))
                .arg("/usr/share/eccodes/samples/GRIB2.tmpl")
                .arg(&one));
            all.extend(fs::read(&one).unwrap());
        }
    }
    fs::write(&out, all).unwrap();
    out
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let out = run(Command::new("find").arg(dir).args(["-type", "f"]));
    let mut v: Vec<PathBuf> = out.lines().map(PathBuf::from).collect();
    v.sort();
    v
}

/// fields/: one directory per schema level and one file per field, each file the bytes
/// `haar retrieve` gives for its key; `find`, `ls`, `cp -r` and `grib_ls` work on it; a field
/// archived while mounted appears; nothing under fields/ can be written.
#[test]
fn fields_view_serves_every_field_to_unmodified_tools() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let grib = grib_file(work.path(), &[0, 6, 12], &[130, 167]);
    haar_ok(&store, "pmem", &["archive".as_ref(), grib.as_os_str()]);
    let m = Mounted::new(&store, "pmem", &work.path().join("mnt"));
    let fields = m.p("fields");

    let found = files_under(&fields);
    assert_eq!(found.len(), 6, "{found:#?}");
    for f in &found {
        let rel = f.strip_prefix(&fields).unwrap();
        let levels: Vec<&str> = rel.iter().map(|c| c.to_str().unwrap()).collect();
        assert_eq!(levels.len(), 3, "{rel:?}");
        assert_eq!(
            levels[0],
            "class=od,expver=0001,stream=oper,date=20070323,time=1200,domain=g"
        );
        assert_eq!(levels[1], "type=fc,levtype=sfc");
        // The bytes are those of the field with that key, as `haar retrieve` gives them.
        let key = levels.join(",");
        let want = work.path().join("want.grib");
        haar_ok(
            &store,
            "pmem",
            &[
                "retrieve".as_ref(),
                key.as_ref(),
                "-o".as_ref(),
                want.as_os_str(),
            ],
        );
        assert_eq!(fs::read(f).unwrap(), fs::read(&want).unwrap(), "{key}");
        assert_eq!(
            fs::metadata(f).unwrap().len(),
            fs::read(&want).unwrap().len() as u64
        );
    }
    let ls = run(Command::new("ls").arg(fields.join(
        "class=od,expver=0001,stream=oper,date=20070323,time=1200,domain=g/type=fc,levtype=sfc",
    )));
    assert_eq!(
        ls.lines().collect::<Vec<_>>(),
        [
            "step=0,param=130",
            "step=0,param=167",
            "step=12,param=130",
            "step=12,param=167",
            "step=6,param=130",
            "step=6,param=167"
        ]
    );

    // grib_ls reads every message, with the keys of its file name.
    let gl = run(Command::new("grib_ls")
        .args(["-p", "step,paramId"])
        .args(&found));
    assert!(gl.contains("6 of 6 total messages in 6 files"), "{gl}");
    for f in &found {
        let name = f.file_name().unwrap().to_str().unwrap();
        let one = run(Command::new("grib_ls")
            .args(["-p", "step,paramId", "-m"])
            .arg(f));
        let step = name.split(',').next().unwrap().trim_start_matches("step=");
        let param = name
            .rsplit(',')
            .next()
            .unwrap()
            .trim_start_matches("param=");
        let row = one.lines().nth(2).unwrap_or_default().to_string();
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>(),
            [step, param],
            "{one}"
        );
    }

    // cp -r copies the tree, byte for byte.
    let copy = work.path().join("copy");
    run(Command::new("cp").arg("-r").arg(&fields).arg(&copy));
    let copied = files_under(&copy);
    assert_eq!(copied.len(), 6);
    for (a, b) in found.iter().zip(&copied) {
        assert_eq!(fs::read(a).unwrap(), fs::read(b).unwrap());
    }

    // A field archived while mounted appears (the view refreshes every second).
    let more = grib_file(work.path(), &[18], &[130]);
    haar_ok(&store, "pmem", &["archive".as_ref(), more.as_os_str()]);
    let t = Instant::now();
    while files_under(&fields).len() != 7 {
        assert!(t.elapsed() < HANG, "the new field never appeared");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Read-only: EROFS on every kind of write.
    assert_eq!(errno_of(fs::write(&found[0], b"x")), libc::EROFS);
    assert_eq!(errno_of(fs::create_dir(fields.join("x"))), libc::EROFS);
    assert_eq!(errno_of(fs::write(fields.join("new"), b"x")), libc::EROFS);
    assert_eq!(errno_of(fs::remove_file(&found[0])), libc::EROFS);
    assert_eq!(errno_of(fs::remove_dir(&fields)), libc::EPERM);
    // Out of fields/ into the writable part: a cross-device rename (mv copies instead).
    fs::write(m.p("mine"), b"x").unwrap();
    assert_eq!(
        errno_of(fs::rename(m.p("mine"), fields.join("mine"))),
        libc::EXDEV
    );
    // The file system's own database is not shown as fields.
    assert!(
        files_under(&fields)
            .iter()
            .all(|f| !f.to_str().unwrap().contains("haarfs"))
    );
    m.terminate();
}

/// The writable part's POSIX behaviour through this process's own system calls.
#[test]
fn the_writable_part_behaves_as_posix_says() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let m = Mounted::new(&store, "pmem", &work.path().join("mnt"));

    // create, write, read, stat
    fs::write(m.p("a"), b"hello").unwrap();
    assert_eq!(fs::read(m.p("a")).unwrap(), b"hello");
    let md = fs::metadata(m.p("a")).unwrap();
    assert!(md.is_file());
    assert_eq!(md.len(), 5);
    assert_eq!(md.nlink(), 1);
    // append
    fs::OpenOptions::new()
        .append(true)
        .open(m.p("a"))
        .unwrap()
        .write_all(b" world")
        .unwrap();
    assert_eq!(fs::read(m.p("a")).unwrap(), b"hello world");
    // O_EXCL on an existing name
    assert_eq!(
        errno_of(
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(m.p("a"))
        ),
        libc::EEXIST
    );
    // truncate down then up: the cut bytes read back as zeros
    let f = fs::OpenOptions::new().write(true).open(m.p("a")).unwrap();
    f.set_len(3).unwrap();
    f.set_len(8).unwrap();
    drop(f);
    assert_eq!(fs::read(m.p("a")).unwrap(), b"hel\0\0\0\0\0");
    // chmod, utimes
    fs::set_permissions(m.p("a"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(m.p("a")).unwrap().mode() & 0o7777, 0o600);
    let f = fs::File::options().write(true).open(m.p("a")).unwrap();
    let t = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    f.set_modified(t).unwrap();
    drop(f);
    assert_eq!(fs::metadata(m.p("a")).unwrap().modified().unwrap(), t);

    // mkdir, readdir, rmdir
    fs::create_dir(m.p("d")).unwrap();
    fs::create_dir(m.p("d/e")).unwrap();
    for i in 0..5 {
        fs::write(m.p(&format!("d/f{i}")), [i as u8]).unwrap();
    }
    let mut names: Vec<String> = fs::read_dir(m.p("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["e", "f0", "f1", "f2", "f3", "f4"]);
    assert_eq!(fs::metadata(m.p("d")).unwrap().nlink(), 3);
    assert_eq!(errno_of(fs::remove_dir(m.p("d"))), libc::ENOTEMPTY);
    assert_eq!(errno_of(fs::create_dir(m.p("d"))), libc::EEXIST);
    assert_eq!(errno_of(fs::remove_dir(m.p("a"))), libc::ENOTDIR);
    assert_eq!(errno_of(fs::remove_file(m.p("d"))), libc::EISDIR);
    assert_eq!(errno_of(fs::read(m.p("nothing"))), libc::ENOENT);

    // rename: a file over a file, a non-empty directory elsewhere, into its own subtree
    fs::rename(m.p("d/f0"), m.p("d/f1")).unwrap();
    assert_eq!(fs::read(m.p("d/f1")).unwrap(), [0]);
    assert!(!m.p("d/f0").exists());
    fs::create_dir(m.p("x")).unwrap();
    fs::rename(m.p("d"), m.p("x/d2")).unwrap();
    assert_eq!(fs::read(m.p("x/d2/f4")).unwrap(), [4]);
    assert_eq!(
        errno_of(fs::rename(m.p("x"), m.p("x/d2/e/x"))),
        libc::EINVAL
    );
    fs::create_dir(m.p("full")).unwrap();
    fs::write(m.p("full/z"), b"z").unwrap();
    assert_eq!(
        errno_of(fs::rename(m.p("x/d2"), m.p("full"))),
        libc::ENOTEMPTY
    );

    // symlinks
    std::os::unix::fs::symlink("x/d2/f4", m.p("ln")).unwrap();
    assert_eq!(fs::read_link(m.p("ln")).unwrap(), Path::new("x/d2/f4"));
    assert_eq!(fs::read(m.p("ln")).unwrap(), [4]);

    // unlink while open: the open file still reads; the name is gone at once
    fs::write(m.p("tmp"), b"still here").unwrap();
    let mut open = fs::File::open(m.p("tmp")).unwrap();
    fs::remove_file(m.p("tmp")).unwrap();
    assert!(!m.p("tmp").exists());
    let mut s = String::new();
    open.read_to_string(&mut s).unwrap();
    assert_eq!(s, "still here");
    drop(open);

    // a large file across chunk boundaries, written in odd-sized pieces
    let big = pattern(5 * (1 << 20) + 12345, 7);
    {
        let mut f = fs::File::create(m.p("big")).unwrap();
        for piece in big.chunks(300_007) {
            f.write_all(piece).unwrap();
        }
    }
    assert_eq!(fs::read(m.p("big")).unwrap(), big);
    // overwrite a range straddling a chunk boundary, read a range around it
    {
        let mut f = fs::File::options().write(true).open(m.p("big")).unwrap();
        f.seek(SeekFrom::Start((1 << 20) - 10)).unwrap();
        f.write_all(&[0xAB; 20]).unwrap();
    }
    let mut buf = [0u8; 24];
    {
        let mut f = fs::File::open(m.p("big")).unwrap();
        f.seek(SeekFrom::Start((1 << 20) - 12)).unwrap();
        f.read_exact(&mut buf).unwrap();
    }
    assert_eq!(&buf[..2], &big[(1 << 20) - 12..(1 << 20) - 10]);
    assert_eq!(&buf[2..22], &[0xAB; 20]);
    assert_eq!(&buf[22..], &big[(1 << 20) + 10..(1 << 20) + 12]);

    // sparse: a write at 3 GiB; the hole reads as zeros and takes no chunks
    {
        let mut f = fs::File::create(m.p("sparse")).unwrap();
        f.seek(SeekFrom::Start(3 << 30)).unwrap();
        f.write_all(b"end").unwrap();
    }
    let md = fs::metadata(m.p("sparse")).unwrap();
    assert_eq!(md.len(), (3 << 30) + 3);
    let mut f = fs::File::open(m.p("sparse")).unwrap();
    f.seek(SeekFrom::Start((2 << 30) + 5)).unwrap();
    let mut z = vec![1u8; 1 << 16];
    f.read_exact(&mut z).unwrap();
    assert!(z.iter().all(|b| *b == 0));
    f.seek(SeekFrom::Start(3 << 30)).unwrap();
    let mut e = Vec::new();
    f.read_to_end(&mut e).unwrap();
    assert_eq!(e, b"end");
    drop(f);

    // many small files
    fs::create_dir(m.p("many")).unwrap();
    for i in 0..1000 {
        fs::write(m.p(&format!("many/{i}")), format!("{i}")).unwrap();
    }
    assert_eq!(fs::read_dir(m.p("many")).unwrap().count(), 1000);
    for i in (0..1000).step_by(37) {
        assert_eq!(
            fs::read_to_string(m.p(&format!("many/{i}"))).unwrap(),
            format!("{i}")
        );
    }

    // names are bytes: not UTF-8, with spaces and commas
    let odd = OsStr::from_bytes(b"a, b=c\xff");
    fs::write(m.p("many").join(odd), b"odd").unwrap();
    assert_eq!(fs::read(m.p("many").join(odd)).unwrap(), b"odd");

    // the relaxed operations' errnos (design §15.3)
    assert_eq!(errno_of(fs::hard_link(m.p("a"), m.p("hard"))), libc::EPERM);
    let c = std::ffi::CString::new(m.p("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EPERM)
    );
    let (a, b) = (
        std::ffi::CString::new(m.p("a").as_os_str().as_bytes()).unwrap(),
        std::ffi::CString::new(m.p("ln").as_os_str().as_bytes()).unwrap(),
    );
    // SAFETY: valid C strings.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EINVAL)
    );
    // SAFETY: valid C strings.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EEXIST)
    );
    let name = std::ffi::CString::new("user.x").unwrap();
    // SAFETY: valid C strings and a 1-byte value.
    let r = unsafe { libc::setxattr(a.as_ptr(), name.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOTSUP)
    );
    assert_eq!(errno_of(fs::create_dir(m.p("fields"))), libc::EEXIST);
    fs::create_dir(m.p("empty")).unwrap();
    assert_eq!(
        errno_of(fs::rename(m.p("empty"), m.p("fields"))),
        libc::EPERM
    );
    assert_eq!(
        errno_of(fs::rename(m.p("fields"), m.p("empty2"))),
        libc::EPERM
    );

    // Everything above survives an unmount and a new mount.
    m.terminate();
    let m = Mounted::new(&store, "pmem", &work.path().join("mnt"));
    assert_eq!(
        fs::read(m.p("big")).unwrap()[..(1 << 20) - 10],
        big[..(1 << 20) - 10]
    );
    assert_eq!(fs::read(m.p("a")).unwrap(), b"hel\0\0\0\0\0");
    assert_eq!(fs::metadata(m.p("a")).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(fs::metadata(m.p("a")).unwrap().modified().unwrap(), t);
    assert_eq!(fs::read(m.p("x/d2/f4")).unwrap(), [4]);
    assert_eq!(fs::read_link(m.p("ln")).unwrap(), Path::new("x/d2/f4"));
    assert_eq!(fs::read_dir(m.p("many")).unwrap().count(), 1001);
    assert_eq!(fs::metadata(m.p("sparse")).unwrap().len(), (3 << 30) + 3);
    assert!(!m.p("tmp").exists() && !m.p("d").exists() && !m.p("x/d2/f0").exists());
    m.terminate();
}

/// Several processes write at once: each its own files in one shared directory, and each its
/// own region of one shared file (dd conv=notrunc); every byte is where it was written.
#[test]
fn concurrent_writers_from_several_processes() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let m = Mounted::new(&store, "posix", &work.path().join("mnt"));
    fs::create_dir(m.p("shared")).unwrap();
    let src: Vec<PathBuf> = (0..4)
        .map(|w| {
            let p = work.path().join(format!("src{w}"));
            fs::write(&p, pattern(3 << 20, w + 1)).unwrap();
            p
        })
        .collect();
    let procs: Vec<Child> = (0..4)
        .map(|w| {
            let script = format!(
                "i=0; while [ $i -lt 50 ]; do echo w{w}-$i > {dir}/w{w}-$i; i=$((i+1)); done; \
                 dd if={src} of={shared} bs=64K seek={seek} conv=notrunc status=none",
                dir = m.p("shared").display(),
                src = src[w].display(),
                shared = m.p("one-file").display(),
                seek = w * 48,
            );
            Command::new("sh").arg("-c").arg(script).spawn().unwrap()
        })
        .collect();
    for mut p in procs {
        assert!(p.wait().unwrap().success());
    }
    assert_eq!(fs::read_dir(m.p("shared")).unwrap().count(), 200);
    for w in 0..4 {
        for i in 0..50 {
            assert_eq!(
                fs::read_to_string(m.p(&format!("shared/w{w}-{i}"))).unwrap(),
                format!("w{w}-{i}\n")
            );
        }
    }
    let one = fs::read(m.p("one-file")).unwrap();
    assert_eq!(one.len(), 12 << 20);
    for (w, s) in src.iter().enumerate() {
        assert!(
            one[w * (3 << 20)..(w + 1) * (3 << 20)] == fs::read(s).unwrap()[..],
            "writer {w}"
        );
    }
    m.terminate();
}

/// Unmodified tools on the mount: cp -a in and out keeps bytes, modes, times and links; tar
/// through a pipe; dd of 64 MiB in 1 MiB blocks with fsync.
#[test]
fn cp_tar_and_dd_work_unmodified() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let tree = work.path().join("tree");
    fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    fs::write(tree.join("sub/deeper/data"), pattern(2_500_000, 3)).unwrap();
    fs::write(tree.join("small"), b"small").unwrap();
    fs::write(tree.join("empty"), b"").unwrap();
    fs::set_permissions(tree.join("small"), fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink("sub/deeper/data", tree.join("link")).unwrap();
    let m = Mounted::new(&store, "posix", &work.path().join("mnt"));

    run(Command::new("cp").arg("-a").arg(&tree).arg(m.p("in")));
    run(Command::new("cp")
        .arg("-a")
        .arg(m.p("in"))
        .arg(work.path().join("out")));
    run(Command::new("diff")
        .arg("-r")
        .arg(&tree)
        .arg(work.path().join("out")));
    let (a, b) = (
        fs::symlink_metadata(tree.join("small")).unwrap(),
        fs::symlink_metadata(work.path().join("out/small")).unwrap(),
    );
    assert_eq!(a.mode(), b.mode());
    assert_eq!(a.modified().unwrap(), b.modified().unwrap());
    assert!(
        fs::symlink_metadata(work.path().join("out/link"))
            .unwrap()
            .is_symlink()
    );

    // tar c on the mount, tar x into it
    run(Command::new("sh").arg("-c").arg(format!(
        "tar -C {in_} -cf - . | (mkdir {x} && tar -C {x} -xf -)",
        in_ = m.p("in").display(),
        x = m.p("untarred").display()
    )));
    run(Command::new("diff")
        .arg("-r")
        .arg(&tree)
        .arg(m.p("untarred")));

    // dd: 64 MiB in 1 MiB blocks, fsync at the end; read back with dd
    let src = work.path().join("dd.src");
    fs::write(&src, pattern(64 << 20, 9)).unwrap();
    run(Command::new("dd")
        .arg(format!("if={}", src.display()))
        .arg(format!("of={}", m.p("dd.out").display()))
        .args(["bs=1M", "conv=fsync", "status=none"]));
    let back = work.path().join("dd.back");
    run(Command::new("dd")
        .arg(format!("if={}", m.p("dd.out").display()))
        .arg(format!("of={}", back.display()))
        .args(["bs=1M", "status=none"]));
    assert!(fs::read(&src).unwrap() == fs::read(&back).unwrap());
    m.terminate();
}

/// close and fsync are the durability barrier: after kill -9 of the server, files closed
/// before are whole and a directory made before is there.
#[test]
fn closed_files_survive_kill_9_of_the_server() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mnt = work.path().join("mnt");
    let m = Mounted::new(&store, "posix", &mnt);
    let data = pattern(3 << 20, 5);
    fs::create_dir(m.p("dir")).unwrap();
    fs::write(m.p("dir/closed"), &data).unwrap();
    let mut synced = fs::File::create(m.p("synced")).unwrap();
    synced.write_all(&data[..1_000_000]).unwrap();
    synced.sync_all().unwrap();
    m.kill9();
    drop(synced);
    let m = Mounted::new(&store, "posix", &mnt);
    assert!(fs::read(m.p("dir/closed")).unwrap() == data);
    assert!(fs::read(m.p("synced")).unwrap()[..] == data[..1_000_000]);
    m.terminate();
}

/// --daemon returns once mounted; the server goes on until unmounted.
#[test]
fn daemon_mode_returns_when_mounted() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mnt = work.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            unmount(self.0);
        }
    }
    let _guard = Unmount(&mnt);
    let out = run(Command::new(HAAR)
        .args(["--backend", "posix", "--root"])
        .arg(&store)
        .args(["mount", "--daemon"])
        .arg(&mnt));
    assert_eq!(out.trim_end(), format!("mounted {}", mnt.display()));
    assert!(is_mounted(&mnt));
    fs::write(mnt.join("f"), b"daemon").unwrap();
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"daemon");
    run(Command::new("fusermount3").arg("-u").arg(&mnt));
    assert!(!is_mounted(&mnt));
}

/// SIGTERM while a file is open detaches the mount (new paths no longer reach it), the open
/// file still reads, and the server exits 0 once it is closed.
#[test]
fn sigterm_with_an_open_file_detaches_and_ends_at_its_close() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut m = Mounted::new(&store, "posix", &work.path().join("mnt"));
    fs::write(m.p("kept"), b"open across the unmount").unwrap();
    let mut open = fs::File::open(m.p("kept")).unwrap();
    let mut child = m.child.take().unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    while is_mounted(&m.mnt) {
        assert!(t.elapsed() < HANG, "still mounted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        wait_for(&mut child, Duration::from_millis(500)),
        None,
        "ended with a file open"
    );
    let mut s = String::new();
    open.read_to_string(&mut s).unwrap();
    assert_eq!(s, "open across the unmount");
    drop(open);
    assert_eq!(wait_for(&mut child, HANG), Some(0), "{}", m.errors());
}

/// xarray with cfgrib opens a field file of fields/ (it cannot write its index next to it, and
/// need not): the variable and grid are those ecCodes reads from the same file. Needs
/// `pip install cfgrib xarray`; skipped with a warning without them unless
/// `HAAR_REQUIRE_PYTHON_GRIB` is set (as CI sets it).
#[test]
fn xarray_cfgrib_opens_a_field_file() {
    let probe = Command::new("python3")
        .args(["-c", "import cfgrib, xarray"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var_os("HAAR_REQUIRE_PYTHON_GRIB").is_none(),
            "cfgrib and xarray are required (pip install cfgrib xarray)"
        );
        eprintln!("warning: cfgrib or xarray missing: xarray_cfgrib_opens_a_field_file skipped");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let grib = grib_file(work.path(), &[0, 6], &[130]);
    haar_ok(&store, "posix", &["archive".as_ref(), grib.as_os_str()]);
    let m = Mounted::new(&store, "posix", &work.path().join("mnt"));
    let files = files_under(&m.p("fields"));
    assert_eq!(files.len(), 2);
    let got = run(Command::new("python3")
        .args([
            "-c",
            "import sys, xarray\n\
             ds = xarray.open_dataset(sys.argv[1], engine='cfgrib')\n\
             print(' '.join(ds.data_vars), *ds['t'].shape)",
        ])
        .arg(&files[1]));
    let want = run(Command::new("grib_get")
        .args(["-p", "shortName,Nj,Ni"])
        .arg(&files[1]));
    assert_eq!(
        got.split_whitespace().collect::<Vec<_>>(),
        want.split_whitespace().collect::<Vec<_>>()
    );
    m.terminate();
}

// ---------------------------------------------------------------------------------------------
// The writable part over servers (design §15.6).

const TOKEN: &str = "mount-dist-token";

/// A `haar serve` on loopback, killed on drop.
struct Server {
    child: Child,
    addr: String,
    root: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(root: &Path) -> Server {
    let log = fs::File::create(root.with_extension("log")).unwrap();
    let mut child = Command::new(HAAR)
        .arg("--root")
        .arg(root)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("HAAR_TOKEN", TOKEN)
        .env_remove("HAAR_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("haar serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = (line.trim().strip_prefix("listening on "))
        .unwrap_or_else(|| {
            panic!(
                "haar serve printed {line:?}: {}",
                fs::read_to_string(root.with_extension("log")).unwrap_or_default()
            )
        })
        .to_string();
    Server {
        child,
        addr,
        root: root.into(),
    }
}

/// `haar --config CONFIG mount --mount-id ID MNT` with the servers' token.
fn mount_dist(config: &Path, id: u32, mnt: &Path) -> Mounted {
    let mut cmd = Command::new(HAAR);
    cmd.arg("--config")
        .arg(config)
        .args(["mount", "--mount-id", &id.to_string()])
        .arg(mnt)
        .env("HAAR_TOKEN", TOKEN)
        .env("HAAR_LOCAL_READS", "0");
    Mounted::spawn(cmd, mnt)
}

/// Bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    files_under(dir)
        .iter()
        .map(|f| fs::metadata(f).map_or(0, |m| m.len()))
        .sum()
}

/// The kernel's cached pages of the mount go, so reads reach haar mount again.
fn drop_page_cache() {
    let _ = fs::write("/proc/sys/vm/drop_caches", "3");
}

/// Issue 16's failure test: 3 real servers, `dist` with replicas 2, `haar mount` over it.
/// Files written with cp and dd and fsynced are spread over all three servers; a second mount
/// (another node's) sees them and its own new file reaches the first; after kill -9 of one
/// server every byte reads back through the mount, writing goes on, and a fresh mount with
/// that server still down sees the same namespace and bytes.
#[test]
fn mount_over_three_servers_with_replicas_2_survives_kill_9_of_one() {
    let work = tempfile::tempdir().unwrap();
    let mut servers: Vec<Server> = (0..3)
        .map(|i| serve(&work.path().join(format!("node{i}"))))
        .collect();
    let config = work.path().join("cluster.yaml");
    let mut yaml = String::from("type: dist\nreplicas: 2\nlanes:\n");
    for s in &servers {
        yaml.push_str(&format!("  - {{type: remote, server: \"{}\"}}\n", s.addr));
    }
    fs::write(&config, yaml).unwrap();

    // A tree for cp -a: many small files, one of several chunks, one empty.
    let tree = work.path().join("tree");
    fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    for i in 0..40 {
        fs::write(
            tree.join(format!("sub/small{i}")),
            pattern(100 + 977 * i, i as u64),
        )
        .unwrap();
    }
    fs::write(tree.join("sub/deeper/data"), pattern(5_500_000, 3)).unwrap();
    fs::write(tree.join("empty"), b"").unwrap();
    let dd_src = work.path().join("dd.src");
    fs::write(&dd_src, pattern(24 << 20, 9)).unwrap();

    let a = mount_dist(&config, 1, &work.path().join("a"));
    run(Command::new("cp").arg("-a").arg(&tree).arg(a.p("tree")));
    run(Command::new("dd")
        .arg(format!("if={}", dd_src.display()))
        .arg(format!("of={}", a.p("dd.out").display()))
        .args(["bs=1M", "conv=fsync", "status=none"]));
    let mut synced = fs::File::create(a.p("tree/synced")).unwrap();
    synced.write_all(&pattern(3 << 20, 11)).unwrap();
    synced.sync_all().unwrap();
    drop(synced);
    run(Command::new("sync").arg("-f").arg(a.p("tree")));

    // Chunks spread: every server holds a part of the ~33 MiB written (twice).
    for s in &servers {
        let held = bytes_under(&s.root);
        assert!(
            held > 4 << 20,
            "server {} holds only {held} bytes: chunks are not spread",
            s.addr
        );
    }

    // Another node's mount sees the namespace; its new file reaches the first mount.
    let b = mount_dist(&config, 2, &work.path().join("b"));
    run(Command::new("diff")
        .arg("-r")
        .arg(&tree)
        .arg(b.p("tree"))
        .arg("-x")
        .arg("synced"));
    assert!(fs::read(b.p("dd.out")).unwrap() == fs::read(&dd_src).unwrap());
    fs::write(b.p("from-b"), pattern(1_500_000, 21)).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert!(
        fs::read(a.p("from-b")).unwrap() == pattern(1_500_000, 21),
        "a file another mount closed is seen: {}",
        a.errors()
    );

    // kill -9 of one server while a file is being written (not yet fsynced): that writer
    // may get EIO (design §15.6), nothing hangs, and every byte fsynced before still reads
    // back through both mounts.
    let mut writer = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", a.p("during").display()))
        .args(["bs=1M", "count=300", "status=none"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let dead = servers.remove(1);
    let dead_addr = dead.addr.clone();
    let mut dead = dead;
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    let status = wait_for(&mut writer, Duration::from_secs(60));
    let mut why = String::new();
    writer
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut why)
        .unwrap();
    assert!(
        status == Some(0) || why.contains("Input/output error"),
        "a writer meeting the dead server ends, or fails with EIO: {status:?} {why}"
    );
    fs::remove_file(a.p("during")).unwrap();
    drop_page_cache();
    for m in [&a, &b] {
        run(Command::new("diff")
            .arg("-r")
            .arg(&tree)
            .arg(m.p("tree"))
            .arg("-x")
            .arg("synced"));
        assert!(fs::read(m.p("dd.out")).unwrap() == fs::read(&dd_src).unwrap());
        assert!(fs::read(m.p("tree/synced")).unwrap() == pattern(3 << 20, 11));
        assert!(fs::read(m.p("from-b")).unwrap() == pattern(1_500_000, 21));
    }
    // Writing goes on over the two left.
    fs::write(a.p("after-kill"), pattern(4 << 20, 31)).unwrap();
    fs::create_dir(a.p("dir-after")).unwrap();
    a.terminate();
    b.terminate();

    // A fresh mount, the server still down: same namespace, same bytes.
    let c = mount_dist(&config, 1, &work.path().join("c"));
    let names: Vec<String> = fs::read_dir(c.p(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for n in [
        "tree",
        "dd.out",
        "from-b",
        "after-kill",
        "dir-after",
        "fields",
    ] {
        assert!(names.contains(&n.to_string()), "{n} missing from {names:?}");
    }
    assert_eq!(names.len(), 6, "{names:?}");
    run(Command::new("diff")
        .arg("-r")
        .arg(&tree)
        .arg(c.p("tree"))
        .arg("-x")
        .arg("synced"));
    assert!(fs::read(c.p("dd.out")).unwrap() == fs::read(&dd_src).unwrap());
    assert!(fs::read(c.p("tree/synced")).unwrap() == pattern(3 << 20, 11));
    assert!(fs::read(c.p("from-b")).unwrap() == pattern(1_500_000, 21));
    assert!(fs::read(c.p("after-kill")).unwrap() == pattern(4 << 20, 31));
    assert!(
        !c.errors().contains("panicked"),
        "mount with {dead_addr} down: {}",
        c.errors()
    );
    c.terminate();
}

/// scripts/slurm-mount.sh's logic on one machine (HAAR_MOUNT_LOCAL_NODES: its per-node
/// command as local processes instead of srun): three "nodes" mount the same servers with
/// their own ids, a file written through one is read through the others, and the script
/// unmounts every node when its command ends.
#[test]
fn slurm_mount_script_gives_every_node_one_namespace() {
    let work = tempfile::tempdir().unwrap();
    let token = work.path().join("token");
    fs::write(&token, TOKEN).unwrap();
    fs::set_permissions(&token, fs::Permissions::from_mode(0o600)).unwrap();
    let servers: Vec<Server> = (0..3)
        .map(|i| serve(&work.path().join(format!("node{i}"))))
        .collect();
    let config = work.path().join("cluster.yaml");
    let mut yaml = String::from("type: dist\nreplicas: 2\nlanes:\n");
    for s in &servers {
        yaml.push_str(&format!("  - {{type: remote, server: \"{}\"}}\n", s.addr));
    }
    fs::write(&config, yaml).unwrap();
    let data = work.path().join("data");
    fs::write(&data, pattern(2_600_000, 41)).unwrap();
    let mnt = |i: u32| work.path().join(format!("mnt-{i}"));
    // Node 0 writes; nodes 1 and 2 read it; node 2 makes a directory node 0 then reads.
    let check = format!(
        "set -e; test \"$HAAR_MOUNT\" = {m0}; cp {data} {m0}/data; cmp {data} {m1}/data; \
         cmp {data} {m2}/data; mkdir {m2}/from2; echo two > {m2}/from2/f; sleep 1.2; \
         test \"$(cat {m0}/from2/f)\" = two; echo SCRIPT-CHECK-OK",
        m0 = mnt(0).display(),
        m1 = mnt(1).display(),
        m2 = mnt(2).display(),
        data = data.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm-mount.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--mountpoint")
        .arg(work.path().join("mnt-%n"))
        .arg("--config")
        .arg(&config)
        .arg("--token-file")
        .arg(&token)
        .args(["--", "bash", "-c", &check])
        .env("HAAR", HAAR)
        .env("HAAR_MOUNT_LOCAL_NODES", "3")
        .env_remove("HAAR_CONFIG")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("SCRIPT-CHECK-OK"),
        "slurm-mount.sh: {stdout}{stderr}"
    );
    for i in 0..3 {
        assert!(
            !is_mounted(&mnt(i)),
            "node {i} still mounted after the script"
        );
    }
    // What the nodes wrote is on the servers: a new mount sees it.
    let m = mount_dist(&config, 7, &work.path().join("again"));
    assert!(fs::read(m.p("data")).unwrap() == fs::read(&data).unwrap());
    assert_eq!(fs::read(m.p("from2/f")).unwrap(), b"two\n");
    m.terminate();
}

/// Full storage through the mount (issue 27), both backends on a small tmpfs: a write that
/// fills the store's file system fails with ENOSPC (was EIO); a file written before reads
/// back intact; `rm` of the file that filled it works while the file system is still full
/// (was EIO: the mount keeps a reserve for removals); creating fails with ENOSPC or works,
/// never EIO; once space is freed outside the mount, files are created, written and read
/// again without a remount, and everything closed survives one.
#[test]
fn a_full_store_gives_enospc_and_the_mount_recovers_when_space_is_freed() {
    for (backend, size, big_mib) in [("posix", "8m", 16), ("pmem", "32m", 40)] {
        let Some(small) = SmallFs::mount(size) else {
            return;
        };
        let tmp = tempfile::tempdir().unwrap();
        let root = small.path().join("store");
        // Space that is freed later, outside the mount.
        let filler = small.path().join("filler");
        fs::write(&filler, vec![1u8; 1 << 20]).unwrap();
        // A pool that starts small and grows by 1 MiB into the file system.
        let config = tmp.path().join("haar.yaml");
        fs::write(
            &config,
            format!(
                "backend: {backend}\nroots: [{}]\npool_size: 20971520\npool_chunk: 1048576\n",
                root.display()
            ),
        )
        .unwrap();
        let mnt = tmp.path().join("mnt");
        let mut cmd = Command::new(HAAR);
        cmd.arg("--config")
            .arg(&config)
            .env_remove("HAAR_CONFIG")
            .arg("mount")
            .arg(&mnt);
        let m = Mounted::spawn(cmd, &mnt);
        let intact = pattern(300_000, 1);
        fs::write(m.p("intact"), &intact).unwrap();
        // Fill it.
        let chunk = pattern(1 << 20, 2);
        let mut f = fs::File::create(m.p("big")).unwrap();
        let mut failed = None;
        for _ in 0..big_mib {
            if let Err(e) = f.write_all(&chunk) {
                failed = Some(e);
                break;
            }
        }
        let failed = failed.or_else(|| f.sync_all().err());
        drop(f);
        let failed = failed.unwrap_or_else(|| panic!("{backend}: {big_mib} MiB fitted in {size}"));
        assert_eq!(
            failed.raw_os_error(),
            Some(libc::ENOSPC),
            "{backend}: filling the store failed with {failed}, not ENOSPC; {}",
            m.errors()
        );
        assert!(fs::read(m.p("intact")).unwrap() == intact, "{backend}");
        // The file system is still full: rm through the mount works.
        fs::remove_file(m.p("big"))
            .unwrap_or_else(|e| panic!("{backend}: rm on a full store: {e}; {}", m.errors()));
        let e = errno_of(fs::write(m.p("while-full"), b"x"));
        assert!(
            e == 0 || e == libc::ENOSPC,
            "{backend}: a create on a full store failed with errno {e}"
        );
        // Space is freed outside the mount: the mount works again, no remount.
        fs::remove_file(&filler).unwrap();
        let after = pattern(200_000, 3);
        fs::write(m.p("after"), &after).unwrap_or_else(|e| {
            panic!(
                "{backend}: write after space was freed: {e}; {}",
                m.errors()
            )
        });
        assert!(fs::read(m.p("after")).unwrap() == after, "{backend}");
        assert!(fs::read(m.p("intact")).unwrap() == intact, "{backend}");
        fs::create_dir(m.p("dir")).unwrap();
        fs::remove_dir(m.p("dir")).unwrap();
        let log = m.errors();
        assert!(!log.contains("Input/output"), "{backend}: {log}");
        assert!(log.contains("storage is full"), "{backend}: {log}");
        m.terminate();
        // Everything closed survived.
        let m = Mounted::spawn(
            {
                let mut c = Command::new(HAAR);
                c.arg("--config")
                    .arg(&config)
                    .env_remove("HAAR_CONFIG")
                    .arg("mount")
                    .arg(&mnt);
                c
            },
            &mnt,
        );
        assert!(fs::read(m.p("intact")).unwrap() == intact, "{backend}");
        assert!(fs::read(m.p("after")).unwrap() == after, "{backend}");
        assert!(!m.p("big").exists(), "{backend}");
        m.terminate();
    }
}
