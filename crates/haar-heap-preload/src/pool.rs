//! The pool: claiming the file `haar run` created (or making a private one), mapping it,
//! handing it to mimalloc as its only arena, and keeping it private across `fork`.
//!
//! Set-up runs once, at the first call of any exported function, and allocates nothing
//! itself; what it calls that allocates (`dlsym`) is served by the bootstrap buffer.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::fmt::Write;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};

use libmimalloc_sys as mi;

use crate::next;
use crate::say::{Bytes, CText, Line};

/// The environment variable naming the pool file (design §14).
const ENV_FILE: &core::ffi::CStr = c"HAAR_HEAP_FILE";
/// The mapping's alignment: 2 MiB, so that huge pages (tmpfs `huge=`, DAX PMD faults) can
/// back it; mimalloc itself needs 64 KiB.
const MAP_ALIGN: usize = 2 << 20;
/// Exit status when the pool cannot be set up (a program cannot run without its heap).
const SETUP_FAILED: i32 = 127;

/// Where allocations go right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The pool is set up: mimalloc in the mapping.
    Pool,
    /// No pool configured: the next allocator.
    Pass,
    /// Set-up is under way (this or another thread): the bootstrap buffer.
    Boot,
}

const UNINIT: u8 = 0;
const INITIALISING: u8 = 1;
const POOL: u8 = 2;
const PASS: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static BASE: AtomicUsize = AtomicUsize::new(0);
static LEN: AtomicUsize = AtomicUsize::new(0);
static FD: AtomicI32 = AtomicI32::new(-1);
/// The descriptor of the copy made for a child by the fork prepare handler.
static FORK_FD: AtomicI32 = AtomicI32::new(-1);
static REPORTED_FULL: AtomicBool = AtomicBool::new(false);
/// Whether this process's pool is the named file (`false`: a private unnamed one).
static NAMED: AtomicBool = AtomicBool::new(false);

/// A copy of `HAAR_HEAP_FILE`, NUL-terminated, written once during set-up.
struct PathBuf(UnsafeCell<[u8; 4096]>);
// SAFETY: written by the one thread that set the state to INITIALISING, read only after the
// Release store that ends set-up.
unsafe impl Sync for PathBuf {}
static PATH: PathBuf = PathBuf(UnsafeCell::new([0; 4096]));

fn path() -> &'static [u8] {
    // SAFETY: see `PathBuf`.
    let all = unsafe { &*PATH.0.get() };
    let n = all.iter().position(|&b| b == 0).unwrap_or(0);
    all.get(..n).unwrap_or(&[])
}

fn errno() -> i32 {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

fn strerror(e: i32) -> &'static [u8] {
    // SAFETY: strerror returns a static or thread-local string (it does not allocate for
    // known codes in glibc).
    let s = unsafe { libc::strerror(e) };
    if s.is_null() {
        return b"unknown error";
    }
    // SAFETY: NUL-terminated.
    unsafe { core::ffi::CStr::from_ptr(s) }.to_bytes()
}

/// Where allocations go now, setting the pool up at the first call.
#[inline]
pub(crate) fn mode() -> Mode {
    match STATE.load(Ordering::Acquire) {
        POOL => Mode::Pool,
        PASS => Mode::Pass,
        INITIALISING => Mode::Boot,
        _ => {
            if STATE
                .compare_exchange(UNINIT, INITIALISING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                let end = set_up();
                STATE.store(end, Ordering::Release);
                if end == POOL {
                    register_fork_handlers();
                }
            }
            mode()
        }
    }
}

/// Whether `p` lies in this process's pool.
#[inline]
pub(crate) fn owns(p: *mut c_void) -> bool {
    let base = BASE.load(Ordering::Acquire);
    let a = p as usize;
    base != 0 && a >= base && a - base < LEN.load(Ordering::Acquire)
}

/// Prints the one line saying the pool cannot be set up, and ends the process.
fn fatal(what: &str, e: i32) -> ! {
    let mut l = Line::new();
    let _ = write!(
        l,
        "haar heap: cannot set up the heap pool {} ({what}: {}); check the directory given \
         to haar run --heap",
        CText(path()),
        CText(strerror(e))
    );
    l.emit();
    // SAFETY: ends the process without running handlers that could allocate.
    unsafe { libc::_exit(SETUP_FAILED) }
}

/// mimalloc's largest arena, as `haar_heap::MAX_SIZE` says (its bookkeeping must fit in the
/// arena's first 32 MiB chunk): 502 chunks of 32 MiB.
const MAX_ARENA: usize = 502 * (32 << 20);
/// mimalloc's smallest arena (32 MiB) with its bitmaps, as `haar_heap::MIN_SIZE` says.
const MIN_ARENA: usize = 64 << 20;

/// Prints the one line saying why mimalloc refused a pool of `size` bytes, and ends the
/// process.
fn refused(size: usize) -> ! {
    let why = if size > MAX_ARENA {
        "larger than mimalloc's largest arena"
    } else if size < MIN_ARENA {
        "smaller than mimalloc's smallest arena"
    } else {
        "refused by mimalloc"
    };
    let mut l = Line::new();
    let _ = write!(
        l,
        "haar heap: cannot set up the heap pool {} of {} MiB: {why} (it takes pools of {} to {} MiB); give haar run --heap DIR:SIZE within that",
        CText(path()),
        size >> 20,
        MIN_ARENA >> 20,
        MAX_ARENA >> 20
    );
    l.emit();
    // SAFETY: ends the process without running handlers that could allocate.
    unsafe { libc::_exit(SETUP_FAILED) }
}

/// Sets the pool up; returns the state to enter.
fn set_up() -> u8 {
    next::resolve();
    // SAFETY: getenv does not allocate; the string is copied at once.
    let env = unsafe { libc::getenv(ENV_FILE.as_ptr()) };
    if env.is_null() {
        return PASS;
    }
    // SAFETY: NUL-terminated environment string.
    let name = unsafe { core::ffi::CStr::from_ptr(env) }.to_bytes();
    if name.is_empty() {
        return PASS;
    }
    // SAFETY: only this thread writes PATH, before the state leaves INITIALISING.
    let buf = unsafe { &mut *PATH.0.get() };
    let n = name.len().min(buf.len() - 1);
    if let (Some(dst), Some(src)) = (buf.get_mut(..n), name.get(..n)) {
        dst.copy_from_slice(src);
    }
    let c_path = buf.as_ptr().cast::<libc::c_char>();
    // SAFETY: plain system calls on a NUL-terminated path and our own descriptors.
    unsafe {
        let fd = libc::open(c_path, libc::O_RDWR | libc::O_CLOEXEC);
        if fd < 0 {
            fatal("open", errno());
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            fatal("fstat", errno());
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            fatal("not a regular file", libc::EINVAL);
        }
        let size = st.st_size as usize;
        let fd = if libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) == 0 {
            // Ours: empty it (a program that exec'd left its heap there) so that it reads
            // as zeros and mimalloc may skip zeroing.
            if libc::ftruncate(fd, 0) != 0 || libc::ftruncate(fd, size as libc::off_t) != 0 {
                fatal("ftruncate", errno());
            }
            NAMED.store(true, Ordering::Release);
            fd
        } else {
            // Another process (our parent, which exec'd us) holds the file: a private pool of
            // the same size in the same directory.
            libc::close(fd);
            match private_pool(size) {
                Ok(fd) => fd,
                Err(e) => fatal("creating a private pool in its directory", e),
            }
        };
        FD.store(fd, Ordering::Release);
        let base = match map(fd, size, ptr::null_mut()) {
            Ok(b) => b,
            Err(e) => fatal("mmap", e),
        };
        mi::mi_option_set(mi::mi_option_limit_os_alloc, 1);
        let mut id: mi::mi_arena_id_t = std::mem::zeroed();
        // committed, pinned (never decommit or reset: no use on a shared file mapping), zero,
        // any NUMA node, not exclusive (the default heap allocates from it).
        if !mi::mi_manage_os_memory_ex(base.cast(), size, true, true, true, -1, false, &mut id) {
            refused(size);
        }
        LEN.store(size, Ordering::Release);
        BASE.store(base as usize, Ordering::Release);
    }
    POOL
}

/// Maps `size` bytes of `fd` shared at `at` (fixed) or at a fresh address aligned to
/// [`MAP_ALIGN`].
unsafe fn map(fd: i32, size: usize, at: *mut c_void) -> Result<*mut c_void, i32> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    if !at.is_null() {
        // SAFETY: replaces our own mapping of the same range.
        let p = unsafe { libc::mmap(at, size, prot, libc::MAP_SHARED | libc::MAP_FIXED, fd, 0) };
        return if p == libc::MAP_FAILED {
            Err(errno())
        } else {
            Ok(p)
        };
    }
    // Reserve address space with room to align, then map the file over the aligned part.
    let span = size.checked_add(MAP_ALIGN).ok_or(libc::ENOMEM)?;
    // SAFETY: a fresh anonymous reservation.
    let r = unsafe {
        libc::mmap(
            ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if r == libc::MAP_FAILED {
        return Err(errno());
    }
    let start = (r as usize + MAP_ALIGN - 1) & !(MAP_ALIGN - 1);
    // SAFETY: within the reservation just made.
    let p = unsafe {
        libc::mmap(
            start as *mut c_void,
            size,
            prot,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = errno();
        // SAFETY: our reservation.
        unsafe { libc::munmap(r, span) };
        return Err(e);
    }
    // Give back the unused ends of the reservation.
    let head = start - r as usize;
    let tail = span - head - size;
    // SAFETY: both ranges are parts of our reservation outside the file mapping.
    unsafe {
        if head > 0 {
            libc::munmap(r, head);
        }
        if tail > 0 {
            libc::munmap((start + size) as *mut c_void, tail);
        }
    }
    Ok(p)
}

/// An unnamed file of `size` bytes (sparse) in the pool file's directory: `O_TMPFILE`, else a
/// uniquely named file unlinked at once. It disappears with the last descriptor.
fn private_pool(size: usize) -> Result<i32, i32> {
    let full = path();
    let cut = full.iter().rposition(|&b| b == b'/').unwrap_or(0);
    let mut dir = [0u8; 4096];
    let dir_bytes: &[u8] = if cut == 0 {
        b"."
    } else {
        full.get(..cut).unwrap_or(b".")
    };
    if let Some(d) = dir.get_mut(..dir_bytes.len()) {
        d.copy_from_slice(dir_bytes);
    }
    let cdir = dir.as_ptr().cast::<libc::c_char>();
    // SAFETY: system calls on NUL-terminated paths.
    unsafe {
        let mut fd = libc::open(
            cdir,
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        );
        if fd < 0 {
            let mut name = Line::new();
            for attempt in 0..100u32 {
                name = Line::new();
                let _ = write!(
                    name,
                    "{}/.haar-heap.{}.{attempt}.private\0",
                    CText(dir_bytes),
                    libc::getpid()
                );
                fd = libc::open(
                    name.as_ptr(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                    0o600,
                );
                if fd >= 0 || errno() != libc::EEXIST {
                    break;
                }
            }
            if fd < 0 {
                return Err(errno());
            }
            libc::unlink(name.as_ptr());
        }
        if libc::ftruncate(fd, size as libc::off_t) != 0 {
            let e = errno();
            libc::close(fd);
            return Err(e);
        }
        Ok(fd)
    }
}

/// Says once that the pool is full (the caller returns NULL with `ENOMEM`).
pub(crate) fn report_full(request: usize) {
    if REPORTED_FULL.swap(true, Ordering::AcqRel) {
        return;
    }
    let size = LEN.load(Ordering::Acquire) as u64;
    let mut l = Line::new();
    if NAMED.load(Ordering::Acquire) {
        let _ = write!(
            l,
            "haar heap: pool {} ({}) is full",
            CText(path()),
            Bytes(size)
        );
    } else {
        let _ = write!(
            l,
            "haar heap: private pool of {} (pid {}, beside {}) is full",
            Bytes(size),
            // SAFETY: no preconditions.
            unsafe { libc::getpid() },
            CText(path())
        );
    }
    let _ = write!(
        l,
        ": a request of {request} bytes failed (ENOMEM); run with a larger SIZE: haar run \
         --heap DIR:SIZE"
    );
    l.emit();
}

/// Blocks aligned to more than mimalloc's arenas serve (above 64 KiB, e.g. 2 MiB for huge
/// pages): mimalloc would take them from the OS, which the pool forbids. They are carved from a
/// larger pool block, and the (aligned, raw, size) triple is kept in a small table so that
/// `free` and `malloc_usable_size` find the raw block. Such requests are rare; the table holds
/// [`BIG_SLOTS`] at a time (more: `ENOMEM`).
pub(crate) fn big_aligned(align: usize, size: usize) -> *mut c_void {
    let Some(total) = size.checked_add(align) else {
        return ptr::null_mut();
    };
    // SAFETY: plain allocation call.
    let raw = unsafe { mi::mi_malloc_aligned(total, crate::ARENA_ALIGN) };
    if raw.is_null() {
        return raw;
    }
    let aligned = (raw as usize + align - 1) & !(align - 1);
    let _guard = BigLock::take();
    for slot in &BIG {
        if slot.aligned.load(Ordering::Relaxed) == 0 {
            slot.raw.store(raw as usize, Ordering::Relaxed);
            slot.size.store(size, Ordering::Relaxed);
            slot.aligned.store(aligned, Ordering::Relaxed);
            BIG_COUNT.fetch_add(1, Ordering::Release);
            return aligned as *mut c_void;
        }
    }
    // SAFETY: the block just allocated.
    unsafe { mi::mi_free(raw) };
    ptr::null_mut()
}

/// How many blocks [`big_aligned`] can keep at once.
const BIG_SLOTS: usize = 256;

struct BigSlot {
    aligned: AtomicUsize,
    raw: AtomicUsize,
    size: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: BigSlot = BigSlot {
    aligned: AtomicUsize::new(0),
    raw: AtomicUsize::new(0),
    size: AtomicUsize::new(0),
};
static BIG: [BigSlot; BIG_SLOTS] = [EMPTY_SLOT; BIG_SLOTS];
static BIG_COUNT: AtomicUsize = AtomicUsize::new(0);
static BIG_LOCK: AtomicBool = AtomicBool::new(false);

/// A spin lock over [`BIG`] (held for a scan of 256 slots at most).
struct BigLock;

impl BigLock {
    fn take() -> BigLock {
        while BIG_LOCK
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        BigLock
    }
}

impl Drop for BigLock {
    fn drop(&mut self) {
        BIG_LOCK.store(false, Ordering::Release);
    }
}

/// The block to give mimalloc back for `p`: the raw block of a [`big_aligned`] one (its slot
/// is emptied), else `p` itself.
pub(crate) fn big_aligned_release(p: *mut c_void) -> *mut c_void {
    if BIG_COUNT.load(Ordering::Acquire) == 0 {
        return p;
    }
    let _guard = BigLock::take();
    for slot in &BIG {
        if slot.aligned.load(Ordering::Relaxed) == p as usize {
            slot.aligned.store(0, Ordering::Relaxed);
            BIG_COUNT.fetch_sub(1, Ordering::Release);
            return slot.raw.load(Ordering::Relaxed) as *mut c_void;
        }
    }
    p
}

/// Usable size of a [`big_aligned`] block, `None` for any other.
pub(crate) fn big_aligned_usable(p: *mut c_void) -> Option<usize> {
    if BIG_COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let _guard = BigLock::take();
    BIG.iter()
        .find(|s| s.aligned.load(Ordering::Relaxed) == p as usize)
        .map(|s| s.size.load(Ordering::Relaxed))
}

fn register_fork_handlers() {
    // SAFETY: handlers are plain functions; registration may allocate, which the pool now
    // serves.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
}

/// Before `fork`, in the parent: copy the pool's data (not its holes) into a new unnamed file
/// for the child.
extern "C" fn fork_prepare() {
    let base = BASE.load(Ordering::Acquire);
    let len = LEN.load(Ordering::Acquire);
    let fd = FD.load(Ordering::Acquire);
    if base == 0 {
        return;
    }
    let copy = match private_pool(len) {
        Ok(c) => c,
        Err(_) => return, // the child reports it
    };
    let mut off: libc::off_t = 0;
    // SAFETY: reads of our own mapping, writes to our own new file.
    unsafe {
        loop {
            let data = libc::lseek(fd, off, libc::SEEK_DATA);
            if data < 0 {
                break;
            }
            let hole = libc::lseek(fd, data, libc::SEEK_HOLE);
            let end = if hole < 0 { len as libc::off_t } else { hole };
            let mut at = data;
            while at < end {
                let n = libc::pwrite(
                    copy,
                    (base + at as usize) as *const c_void,
                    (end - at) as usize,
                    at,
                );
                if n <= 0 {
                    libc::close(copy);
                    return;
                }
                at += n as libc::off_t;
            }
            off = end;
        }
    }
    FORK_FD.store(copy, Ordering::Release);
}

/// After `fork`, in the parent: the child has its copy; close ours.
extern "C" fn fork_parent() {
    let copy = FORK_FD.swap(-1, Ordering::AcqRel);
    if copy >= 0 {
        // SAFETY: our descriptor.
        unsafe { libc::close(copy) };
    }
}

/// After `fork`, in the child: map the copy over the pool, so that parent and child no longer
/// share heap memory.
extern "C" fn fork_child() {
    let base = BASE.load(Ordering::Acquire);
    if base == 0 {
        return;
    }
    let copy = FORK_FD.swap(-1, Ordering::AcqRel);
    if copy < 0 {
        fatal("copying the heap for a forked child", libc::ENOSPC);
    }
    // SAFETY: remaps our own pool range onto the copy.
    if let Err(e) = unsafe { map(copy, LEN.load(Ordering::Acquire), base as *mut c_void) } {
        fatal("mapping the heap copy of a forked child", e);
    }
    let old = FD.swap(copy, Ordering::AcqRel);
    NAMED.store(false, Ordering::Release);
    if old >= 0 {
        // SAFETY: the parent's descriptor, inherited; the lock stays with the parent's.
        unsafe { libc::close(old) };
    }
}
