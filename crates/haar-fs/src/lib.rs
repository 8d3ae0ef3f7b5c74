//! `haar mount`: a FUSE file system over a haar store (docs/design.md §15), the library the
//! CLI is a thin face of.
//!
//! - `fields/`: a read-only view of the configured store, one directory level per schema
//!   level, one file per field; listings from `list`, bytes from `retrieve_lent` (a pmem
//!   pool's mapping itself).
//! - everything else: a writable file system whose file data (in 1 MiB chunks) and metadata
//!   records are fields of a database of its own in the configured backend; `fsync` and
//!   `close` are the durability barrier; hard links, special files and extended attributes
//!   are refused with documented errnos.
//!
//! The store is opened from [`haar::OpenOptions`], as every other face does: a local store, or
//! servers (`--servers` or a front-end configuration), over which the writable part's chunks
//! and records are spread by the rendezvous hash of their full key, with the configured
//! replicas (design §15.6).
//!
//! ```no_run
//! use haar_fs::{MountOptions, Mount};
//! let opts = MountOptions::new(haar::OpenOptions::from_env());
//! let mount = Mount::new(&opts, "/mnt/haar".as_ref()).unwrap(); // mounted now
//! mount.run_until_signalled().unwrap(); // until unmounted, SIGINT or SIGTERM
//! ```

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod fields;
pub mod files;
pub mod format;
pub mod fuse;
pub mod metrics;
#[cfg(feature = "power-loss")]
pub mod powerfail;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use haar::OpenOptions;
use haar::dist::Placement;
use haar::schema::Schema;
use haar::{Store, StoreOptions};

pub use fuse::{FIELDS_BASE, FIELDS_NAME, HaarFs};

/// What to mount and how.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// The store (configuration and overrides), as every face opens it.
    pub open: OpenOptions,
    /// Name of the file system's database (`haarfs=NAME`, design §15.2).
    pub fs_name: String,
    /// Threads answering the kernel.
    pub threads: usize,
    /// Let users other than the one mounting use the mount (`allow_other`; needs
    /// `user_allow_other` in /etc/fuse.conf unless root).
    pub allow_other: bool,
    /// This mount's id: the high bits of the inode numbers it makes (design §15.2). Mounts
    /// of one file system that run at the same time need different ids.
    pub mount_id: u32,
    /// Serve the mount's metrics at `http://ADDR/metrics` (`HOST:PORT`; port 0 picks one):
    /// [`Mount::metrics_addr`] says where.
    pub metrics: Option<String>,
}

impl MountOptions {
    /// Defaults over `open`: file system `main`, two threads, owner only.
    pub fn new(open: OpenOptions) -> MountOptions {
        MountOptions {
            open,
            fs_name: "main".into(),
            threads: 2,
            allow_other: false,
            mount_id: 0,
            metrics: None,
        }
    }
}

/// Why mounting failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    /// The store could not be opened or its file system loaded.
    #[error("{0}")]
    Store(#[from] haar::Error),
    /// The kernel refused the mount, or the session failed.
    #[error(
        "cannot mount {path}: {source} (is /dev/fuse there, and fuse3's fusermount3 installed when not root?)"
    )]
    Fuse {
        /// The mount point.
        path: PathBuf,
        /// What the kernel or fusermount3 said.
        source: std::io::Error,
    },
    /// The metrics endpoint could not listen.
    #[error("--metrics {addr}: cannot listen: {source}")]
    Metrics {
        /// The address asked for.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Builds the file system for `opts`: the `fields/` view over the configured store and the
/// writable part in the same backend or, with servers, spread over them (design §15.6).
pub fn build(opts: &MountOptions) -> Result<HaarFs, MountError> {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let load = files::LoadOptions {
        mount_id: opts.mount_id,
        ..files::LoadOptions::new(&opts.fs_name, uid, gid)
    };
    if let Some(remote) = opts.open.remote()? {
        let fields = fields::Fields::new(remote, FIELDS_BASE);
        let store = opts
            .open
            .remote_with(Some(files_options()?), Some(Placement::Field))?
            .ok_or_else(|| haar::Error::Config("the servers went away".into()))?;
        let load = files::LoadOptions {
            shared: true,
            ..load
        };
        let files = files::Files::load_with(store, &load)?;
        return Ok(HaarFs::new(Some(files), fields, None));
    }
    let (backend, store_opts) = opts.open.local_backend()?;
    let root = opts.open.config()?.roots.first().cloned();
    let fields = fields::Fields::new(
        Box::new(Store::with_options(Arc::clone(&backend), store_opts)),
        FIELDS_BASE,
    );
    let mut files = files::Files::load_with(Box::new(files_store(backend)?), &load)?;
    if let Some(root) = &root {
        files.set_reserve(files::Reserve::new(
            reserve_path(root, &opts.fs_name, opts.mount_id),
            files::Reserve::SIZE,
        ));
    }
    Ok(HaarFs::new(Some(files), fields, root))
}

/// The file a mount of file system `fs` with id `mount_id` keeps its [`files::Reserve`] in:
/// `ROOT/.haar-mount-reserve.FS.ID` (a dot file: no backend takes it for a database).
pub fn reserve_path(root: &Path, fs: &str, mount_id: u32) -> PathBuf {
    let fs: String = (fs.chars())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    root.join(format!(".haar-mount-reserve.{fs}.{mount_id}"))
}

/// The file system's own schema (design §15.2) as store options: what the writable part
/// splits keys with, over a local backend or servers.
pub fn files_options() -> haar::Result<StoreOptions> {
    let schema = Schema::parse(format::SCHEMA)
        .map_err(|e| haar::Error::Config(format!("the file system's schema: {e}")))?;
    Ok(StoreOptions {
        schema: Arc::new(schema),
        ..StoreOptions::default()
    })
}

/// The store the writable part keeps its records and chunks in: `backend` under the file
/// system's own schema (design §15.2).
pub fn files_store(backend: Arc<dyn haar::Backend>) -> haar::Result<Store> {
    Ok(Store::with_options(backend, files_options()?))
}

/// A mounted file system, not yet served: the mount exists from [`Mount::new`] on.
pub struct Mount {
    session: fuser::Session<HaarFs>,
    path: PathBuf,
    metrics: Option<std::net::SocketAddr>,
}

impl Mount {
    /// Builds the file system ([`build`]), serves its metrics when `opts.metrics` asks (before
    /// mounting: a bad address leaves nothing mounted), and mounts it on `path`.
    pub fn new(opts: &MountOptions, path: &Path) -> Result<Mount, MountError> {
        let fs = build(opts)?;
        let metrics = (opts.metrics.as_deref())
            .map(|addr| {
                haar::metrics::listen(addr, fs.metrics()).map_err(|source| MountError::Metrics {
                    addr: addr.into(),
                    source,
                })
            })
            .transpose()?;
        let mut cfg = fuser::Config::default();
        cfg.mount_options = vec![
            fuser::MountOption::FSName("haar".into()),
            fuser::MountOption::Subtype("haar".into()),
            fuser::MountOption::DefaultPermissions,
            fuser::MountOption::NoAtime,
        ];
        if opts.allow_other {
            cfg.acl = fuser::SessionACL::All;
        }
        cfg.n_threads = Some(opts.threads.max(1));
        let session = fuser::Session::new(fs, path, &cfg).map_err(|source| MountError::Fuse {
            path: path.into(),
            source,
        })?;
        Ok(Mount {
            session,
            path: path.into(),
            metrics,
        })
    }

    /// Where the metrics are served (`MountOptions::metrics`), if they are.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics
    }

    /// Serves the kernel until the file system is unmounted (`fusermount3 -u`, `umount`) or
    /// SIGINT/SIGTERM arrives, which unmounts it (lazily when files are open: then the
    /// session ends when the last one is closed); everything written is flushed at the end.
    pub fn run_until_signalled(mut self) -> Result<(), MountError> {
        let mut unmounter = self.session.unmount_callable();
        let path = self.path.clone();
        // SAFETY: plain signal-mask calls on a zeroed set. SIGINT and SIGTERM are blocked in
        // this thread (and so in the session's threads it spawns) and taken by sigwait below.
        let set = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            set
        };
        std::thread::spawn(move || {
            let mut sig = 0;
            // SAFETY: `set` is a valid, initialised signal set.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                return;
            }
            if let Err(e) = unmounter.unmount() {
                // Busy (open files): detach it, as libfuse does; the session ends when the
                // last open file is closed.
                let lazy = Command::new("fusermount3")
                    .args(["-u", "-z"])
                    .arg(&path)
                    .status()
                    .is_ok_and(|s| s.success())
                    || Command::new("umount")
                        .arg("-l")
                        .arg(&path)
                        .status()
                        .is_ok_and(|s| s.success());
                if !lazy {
                    tracing::error!(mountpoint = %path.display(), "cannot unmount: {e}");
                }
            }
        });
        let path = self.path.clone();
        self.session
            .run()
            .map_err(|source| MountError::Fuse { path, source })
    }
}
