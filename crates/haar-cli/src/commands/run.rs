//! `haar run --heap DIR[:SIZE] -- COMMAND`: the command line of `haar_heap`; the launcher,
//! its checks and the preloaded library live there (docs/design.md §14).

use std::ffi::OsString;

use clap::Args;
use haar_heap::HeapSpec;

use crate::Failure;

/// Options of `haar run`.
#[derive(Debug, Args)]
#[command(after_long_help = RUN_AFTER_HELP)]
pub(crate) struct RunArgs {
    /// Place COMMAND's heap in a file mapped from DIR (a DAX file system on persistent
    /// memory; any directory, e.g. /dev/shm, elsewhere). SIZE is the pool's size per process,
    /// in bytes or with a suffix K, M, G, T (binary); default: all the space available in DIR
    /// (the file is sparse), up to 16064M. At least 64M, at most 16064M (15.7 GiB: mimalloc's
    /// largest arena; its bookkeeping must fit in the arena's first 32 MiB).
    #[arg(long, value_name = "DIR[:SIZE]", required = true)]
    pub heap: HeapSpec,
    /// The program to run and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

const RUN_AFTER_HELP: &str = "\
HOW IT WORKS
    haar creates DIR/haar-heap.<pid>.<n>.pool (mode 0600, sparse, SIZE bytes), preloads
    libhaar_heap_preload.so (mimalloc, found next to the haar executable or at
    $HAAR_HEAP_LIB) and names the file in $HAAR_HEAP_FILE. Every malloc, calloc, realloc,
    posix_memalign, aligned_alloc, memalign, valloc and free of COMMAND is served from the
    mapped file; static data and stacks stay in DRAM. Programs COMMAND starts get a private
    pool of the same size in DIR, removed when they end. The file is removed when COMMAND
    ends, also when it is killed.

    CPython takes its small objects from its own mmap'ed arenas, not from malloc: run it
    with PYTHONMALLOC=malloc to place them in the heap too.

POOL FULL
    An allocation that does not fit returns NULL with errno ENOMEM, and one line on stderr
    names the pool and its size: run again with a larger SIZE.

EXIT STATUS
    COMMAND's exit status, or 128+N when signal N ended it (as a shell reports it); 1 when
    DIR or SIZE is unusable (nothing is run); 126/127 when COMMAND cannot be run / found.

EXAMPLES
    haar run --heap /mnt/pmem_fsdax0:64G -- ./castep.mpi TiN
    haar run --heap /dev/shm:2G -- python3 -c 'print(sum(range(10**7)))'";

/// Runs `haar run`: exits with COMMAND's status.
pub(crate) fn run(a: &RunArgs) -> Result<(), Failure> {
    let fail = |e: haar_heap::HeapError| Failure::with_status(e.exit_status(), e.to_string());
    let ran = haar_heap::run(&a.heap, None, &a.command).map_err(fail)?;
    match ran.shell_status() {
        0 => Ok(()),
        code => Err(Failure::quiet(code)),
    }
}
