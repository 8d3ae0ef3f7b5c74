//! `haar mount MOUNTPOINT`: the command line of `haar_fs` (docs/design.md §15); the file
//! system lives there.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use clap::Args;

use crate::Failure;
use crate::args::{Cli, OpenArgs};

/// Options of `haar mount`.
#[derive(Debug, Args)]
#[command(after_long_help = MOUNT_AFTER_HELP)]
pub(crate) struct MountArgs {
    /// Directory to mount the file system on (must exist).
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
    /// Name of the file system's database in the store (`haarfs=NAME`): several file
    /// systems can share one store.
    #[arg(long, value_name = "NAME", default_value = "main")]
    pub fs_name: String,
    /// This mount's id (0 to 1048575): the high bits of the inode numbers it makes. Mounts of
    /// one file system that run at the same time (one per node) need different ids;
    /// scripts/slurm-mount.sh gives each node its Slurm node number.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub mount_id: u32,
    /// Threads answering the kernel's requests.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub threads: usize,
    /// Let other users use the mount (FUSE's allow_other; needs user_allow_other in
    /// /etc/fuse.conf when not root). Permissions are still checked by the kernel.
    #[arg(long)]
    pub allow_other: bool,
    /// Return as soon as the file system is mounted, leaving it served in the background
    /// (stop it with `fusermount3 -u MOUNTPOINT` or `umount MOUNTPOINT`).
    #[arg(long)]
    pub daemon: bool,
    /// With --daemon: append the server's messages to FILE (default: discarded once it has
    /// mounted; messages before that are printed by `haar mount --daemon` itself).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Serve metrics over HTTP at `http://ADDR/metrics` (`HOST:PORT`; port 0 picks a free
    /// one, named by a second stdout line `metrics on HOST:PORT`, after `mounted`):
    /// operations, bytes read and written and latency by operation, errors by errno (ENOSPC
    /// among them), whether the store is full, in the OpenMetrics text format Prometheus
    /// scrapes (names: docs/operations.md). Off by default. No authentication: bind it to a
    /// loopback or management address.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Form of the log on stderr (or --log): `text` (default), one line per event with its
    /// fields, or `json`, one JSON object per line (`timestamp`, `level`, `message`, and the
    /// request's `op`, `uid`, `pid`, `errno`). Failures of the store and full storage (once
    /// until it has room again) are logged by default; `HAAR_LOG=debug` adds every request
    /// answered with an error.
    #[arg(long, value_name = "text|json", default_value = "text")]
    pub log_format: crate::commands::net::LogFormat,
    /// Internal: this process is the server --daemon started.
    #[arg(long, hide = true)]
    pub daemon_child: bool,
    #[command(flatten)]
    pub open: OpenArgs,
}

const MOUNT_AFTER_HELP: &str = "\
WHAT IS MOUNTED
    MOUNTPOINT/fields/     read-only: one directory per schema level (database, index),
                           one file per field, named by its keys (k=v,k=v; '/' as %2F,
                           '%' as %25); listings come from `list`, bytes from the store
                           (from a pmem pool without a copy). New fields appear within a
                           second.
    MOUNTPOINT/anything    a writable file system for arbitrary files, stored in the same
                           backend as the fields (1 MiB chunks, database haarfs=NAME).
                           With servers (--servers, or a configuration of type remote,
                           dist or select) its chunks, inodes and entries are spread over
                           the servers by the rendezvous hash of their keys, with the
                           configured replicas.

SEVERAL MOUNTS (one per node, scripts/slurm-mount.sh)
    Give each a different --mount-id. A name a mount does not know is looked for on the
    servers (at most once a second per directory): files other mounts closed or fsynced
    appear. Files a mount already knows are not re-read: changes other mounts make to
    them, and their removals and renames, are seen after mounting again.

DURABILITY
    fsync, fdatasync and close are the barrier: when they return, the file's data and
    every namespace change before them are persisted by the store. mkdir, rmdir, unlink,
    rename and symlink are barriers themselves. Data written and not yet closed or
    fsynced may be lost if haar mount or the machine stops. Over servers, a barrier returns
    when every replica has persisted: with replicas R, losing fewer than R servers loses
    nothing that passed a barrier. A server failing while it holds data not yet past one
    makes that write, fsync or close fail with EIO (the log names the server).

RELAXED SEMANTICS
    link (hard links): EPERM. mknod of devices, FIFOs, sockets: EPERM. rename with
    RENAME_EXCHANGE or RENAME_WHITEOUT: EINVAL. rename into or out of fields/: EXDEV
    (mv copies). Writes under fields/: EROFS. setxattr: ENOTSUP. atime is not updated.
    Locks are local to this mount.

RUNNING
    haar mount prints `mounted MOUNTPOINT` on stdout once the file system is usable and
    serves it in the foreground until it is unmounted (fusermount3 -u, umount) or until
    SIGINT/SIGTERM, which unmount it; then it exits 0. If files are open then, the mount
    is detached (umount -l): new paths no longer reach it, and haar mount goes on serving
    the open files until they are closed. --daemon returns after that line (and, with
    --metrics, after the `metrics on HOST:PORT` line that follows it).

OPERATIONS (docs/operations.md)
    --metrics ADDR serves http://ADDR/metrics: haar_mount_operations_total{op},
    haar_mount_operation_duration_seconds{op}, haar_mount_bytes_total{op=read|write},
    haar_mount_errors_total{op,errno} (ENOSPC among them), haar_mount_storage_full.
    --log-format json writes one JSON object per log line, with the request's op, uid
    and pid; HAAR_LOG (e.g. haar_fs=debug) chooses what is logged.

EXAMPLES
    haar --backend pmem --root /dev/shm/haar mount /mnt/haar &
    ls /mnt/haar/fields/*/*; grib_ls /mnt/haar/fields/*/*/*
    haar mount --daemon /mnt/haar && cp -a results /mnt/haar/ && fusermount3 -u /mnt/haar
    haar --config haar-cluster.yaml mount --mount-id 3 --daemon /mnt/haar";

/// Runs `haar mount`.
pub(crate) fn run(cli: &Cli, a: &MountArgs) -> Result<(), Failure> {
    if a.daemon {
        return daemonise(a.metrics.is_some());
    }
    let mut opts = haar_fs::MountOptions::new(crate::open::open_options(cli));
    opts.fs_name.clone_from(&a.fs_name);
    opts.threads = a.threads;
    opts.allow_other = a.allow_other;
    opts.mount_id = a.mount_id;
    opts.metrics.clone_from(&a.metrics);
    let mount = haar_fs::Mount::new(&opts, &a.mountpoint).map_err(|e| match e {
        haar_fs::MountError::Store(e) => Failure::from(e),
        e => Failure::io(e.to_string()),
    })?;
    outln!("mounted {}", a.mountpoint.display())?;
    std::io::stdout()
        .flush()
        .map_err(crate::commands::out_err)?;
    if let Some(at) = mount.metrics_addr() {
        // A reader that took only the first line and left must not stop the mount.
        let mut out = std::io::stdout();
        let _ = writeln!(out, "metrics on {at}").and_then(|_| out.flush());
    }
    if a.daemon_child {
        detach_output(a.log.as_deref())?;
    }
    mount
        .run_until_signalled()
        .map_err(|e| Failure::io(e.to_string()))
}

/// The daemon's stdout and stderr leave the pipes `haar mount --daemon` reads (so that it, and
/// a shell's `$(...)` around it, ends): stderr goes to `log` or is discarded.
fn detach_output(log: Option<&std::path::Path>) -> Result<(), Failure> {
    let target = match log {
        Some(p) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| Failure::io(format!("cannot open the log {}: {e}", p.display())))?,
        None => std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .map_err(|e| Failure::io(format!("cannot open /dev/null: {e}")))?,
    };
    use std::os::fd::AsRawFd;
    // SAFETY: dup2 onto the standard descriptors from a file open for writing.
    unsafe {
        libc::dup2(target.as_raw_fd(), 1);
        libc::dup2(target.as_raw_fd(), 2);
    }
    Ok(())
}

/// `--daemon`: runs this command again as the server, in a new session, and returns once it
/// says it has mounted (and, with `metrics`, where they are); if it fails first, prints what
/// it said and exits with its status.
fn daemonise(metrics: bool) -> Result<(), Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::io(format!("cannot find haar: {e}")))?;
    let args = std::env::args_os().skip(1).map(|a| {
        if a == "--daemon" {
            "--daemon-child".into()
        } else {
            a
        }
    });
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Out of the terminal's process group, so that a Ctrl-C meant for the shell does not
    // reach the server.
    haar_stage::launch::in_new_session(&mut cmd, None);
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::io(format!("cannot start haar mount: {e}")))?;
    let mut line = String::new();
    let mut out = child.stdout.take().map(BufReader::new);
    if let Some(out) = &mut out {
        let _ = out.read_line(&mut line);
    }
    if line.starts_with("mounted ") {
        outln!("{}", line.trim_end())?;
        let mut second = String::new();
        if let Some(out) = out.as_mut().filter(|_| metrics) {
            let _ = out.read_line(&mut second);
        }
        if second.starts_with("metrics on ") {
            outln!("{}", second.trim_end())?;
        }
        return Ok(());
    }
    if let Some(mut err) = child.stderr.take() {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut text);
        eprint!("{text}");
    }
    let status = child
        .wait()
        .map_err(|e| Failure::io(format!("haar mount: {e}")))?;
    Err(Failure::quiet(
        status.code().unwrap_or(3).clamp(1, 255) as u8
    ))
}
