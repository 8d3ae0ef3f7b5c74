//! `haar run --heap DIR[:SIZE] -- COMMAND`: runs an unmodified, dynamically linked program
//! with its heap (every `malloc`, `calloc`, `realloc`, `posix_memalign`… and `free`) in a file
//! mapped from DIR, a DAX mount on machines with persistent memory, as PMDK's libvmmalloc did;
//! static data and stacks stay in DRAM. The program runs with the library
//! `libhaar_heap_preload.so` (crate `haar-heap-preload`, mimalloc inside) preloaded.
//!
//! This crate is the launcher: it parses the placement ([`HeapSpec`]), checks DIR and creates
//! the pool file ([`PoolFile`]), finds the library ([`find_library`]), runs the command and
//! removes the file however the command ends ([`run`]). The file layout and environment it
//! hands the library are docs/design.md §14. It must not allocate in the pool itself: it never
//! loads the preload library.
//!
//! ```no_run
//! use haar_heap::{HeapSpec, run};
//!
//! let spec: HeapSpec = "/mnt/pmem_fsdax0:64G".parse()?;
//! let ran = run(&spec, None, &["./app".into(), "input.nml".into()])?;
//! std::process::exit(ran.shell_status().into());
//! # Ok::<(), haar_heap::HeapError>(())
//! ```

#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod launch;
mod pool_file;
mod spec;

pub use launch::{LIB_ENV, LIB_NAME, Ran, find_library, run};
pub use pool_file::{FILE_ENV, PoolFile};
pub use spec::{HeapSpec, MAX_SIZE, MIN_SIZE};

use std::path::PathBuf;

/// C source of the STREAM-shaped triad (dynamic arrays, one thread; not the reference
/// STREAM) that the tests and `haar_bench::bench::heap` compile and run under the heap:
/// `triad N REPS [OUT]` prints `triad_best_gbs=… n=… reps=… bad=…` (into OUT when given) and
/// exits 0 when every element is right.
pub const TRIAD_C: &str = include_str!("triad.c");

/// Why `haar run --heap` could not run the command. Every message names the directory, file
/// or command involved and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeapError {
    /// The placement text is not `DIR[:SIZE]`.
    #[error("--heap {given:?}: {reason} (give DIR or DIR:SIZE, e.g. /mnt/pmem0:64G)")]
    BadSpec {
        /// What was given.
        given: String,
        /// What is wrong with it.
        reason: String,
    },
    /// DIR does not exist.
    #[error(
        "heap directory {} does not exist: create it, or name a mounted DAX file system \
         (haar advise --probe lists them) or /dev/shm",
        dir.display()
    )]
    DirMissing {
        /// The directory.
        dir: PathBuf,
    },
    /// DIR is not a directory.
    #[error("heap directory {} is not a directory: name a directory on a DAX file system or /dev/shm", dir.display())]
    NotADirectory {
        /// The path given.
        dir: PathBuf,
    },
    /// The pool file could not be created or sized in DIR.
    #[error(
        "cannot create the heap pool file in {}: {source}; make the directory writable for \
         this user or choose another one",
        dir.display()
    )]
    NotWritable {
        /// The directory.
        dir: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// DIR's file system has less space available than SIZE.
    #[error(
        "heap directory {} has {} available, less than the heap size {}: free space there or \
         give a smaller SIZE (--heap {}:SIZE)",
        dir.display(), human(*available), human(*size), dir.display()
    )]
    NoSpace {
        /// The directory.
        dir: PathBuf,
        /// The heap size asked for.
        size: u64,
        /// What `statvfs` says is available to this user.
        available: u64,
    },
    /// SIZE is below what the allocator can use.
    #[error(
        "heap size {} is too small: at least {} (mimalloc's smallest arena and its bitmaps)",
        human(*size), human(MIN_SIZE)
    )]
    TooSmall {
        /// The size given.
        size: u64,
    },
    /// SIZE is above what the allocator can use as one arena.
    #[error(
        "heap size {} is larger than mimalloc's largest arena, {} ({}M): give at most that \
         (--heap DIR:{}M), or leave SIZE out (the default is the space available in DIR, up to \
         that)",
        human(*size), human(MAX_SIZE), MAX_SIZE >> 20, MAX_SIZE >> 20
    )]
    TooLarge {
        /// The size given.
        size: u64,
    },
    /// The preload library was not found.
    #[error(
        "the heap library {LIB_NAME} was not found (looked at: {}); build it with `cargo build \
         --release -p haar-heap-preload` (it lands next to target/release/haar), or set \
         ${LIB_ENV} to its path",
        searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    LibraryMissing {
        /// Every place looked at, in order.
        searched: Vec<PathBuf>,
    },
    /// No command was given.
    #[error("no command to run: haar run --heap DIR[:SIZE] -- COMMAND [ARGS...]")]
    NoCommand,
    /// The command could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command's name.
        command: String,
        /// The system's reason.
        source: std::io::Error,
    },
}

impl HeapError {
    /// The exit status a shell would give for this failure: 127 for a command not found, 126
    /// for one that cannot be executed, 1 for everything found wrong before running it.
    pub fn exit_status(&self) -> u8 {
        match self {
            HeapError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => 127,
            HeapError::Spawn { .. } => 126,
            _ => 1,
        }
    }
}

/// Bytes as a short human figure (binary units), as the messages print them.
fn human(b: u64) -> String {
    haar_mem::machine::human(b)
}
