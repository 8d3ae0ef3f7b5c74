//! Where the three arrays live: anonymous memory, or a file mapped through haar-persist's
//! [`PoolMapping`] and persisted after every kernel (EPCC's App Direct STREAM).
//!
//! Owns allocation, the arrays' layout, the persist step and the error sums read back at the
//! end; it is the only part of `stream` that touches haar-persist. Must not time or schedule
//! work: the runner does that.

use std::io;

use haar_persist::{PersistMode, PoolMapping, persist};

use super::config::{Persist, stride_bytes};
use super::kernels::{Ptrs, error_sums, expected_values};
use crate::cleanup::TempFile;

/// Three arrays, in anonymous memory or in a mapped file.
pub(super) struct Arrays {
    pub(super) ptrs: Ptrs,
    pub(super) elements: usize,
    backing: Backing,
}

enum Backing {
    Anon {
        base: *mut u8,
        len: usize,
    },
    File {
        pool: PoolMapping,
        persist: Option<PersistMode>,
        _guard: TempFile,
    },
}

// SAFETY: the raw base pointer is only unmapped in `Drop` (after the scoped workers end);
// workers share `&Arrays` to read pointers and persist disjoint ranges.
unsafe impl Sync for Arrays {}

impl Arrays {
    fn layout(elements: usize, base: *mut u8) -> Ptrs {
        let s = stride_bytes(elements);
        // SAFETY: the callers map at least 3 * s bytes at `base`.
        unsafe {
            Ptrs {
                a: base.cast(),
                b: base.add(s).cast(),
                c: base.add(2 * s).cast(),
            }
        }
    }

    pub(super) fn dram(elements: usize) -> io::Result<Arrays> {
        let len = 3 * stride_bytes(elements);
        // SAFETY: a fresh private anonymous mapping aliases nothing. Pages are not touched
        // here, so first touch happens in the workers' initialisation (NUMA placement as with
        // stream.c's static arrays).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Arrays {
            ptrs: Self::layout(elements, p.cast()),
            elements,
            backing: Backing::Anon {
                base: p.cast(),
                len,
            },
        })
    }

    pub(super) fn file(guard: TempFile, elements: usize, persist: Persist) -> io::Result<Arrays> {
        let len = 3 * stride_bytes(elements);
        let force = match persist {
            Persist::Cpu => Some(PersistMode::CpuCache),
            Persist::Msync => Some(PersistMode::Msync),
            Persist::Auto | Persist::None => None,
        };
        if guard.path().exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already exists", guard.path().display()),
            ));
        }
        let pool = PoolMapping::open_with_mode(guard.path(), len, force)?;
        pool.grow(len)?;
        pool.populate(0, len)?;
        let mode = (persist != Persist::None).then(|| pool.mode());
        Ok(Arrays {
            ptrs: Self::layout(elements, pool.base()),
            elements,
            backing: Backing::File {
                pool,
                persist: mode,
                _guard: guard,
            },
        })
    }

    /// Persists elements `lo..hi` of the array at `p`.
    pub(super) fn persist(&self, p: *mut f64, lo: usize, hi: usize) -> io::Result<()> {
        if let Backing::File {
            persist: Some(mode),
            ..
        } = &self.backing
        {
            // SAFETY: the range lies inside the live file mapping.
            unsafe { persist(p.add(lo).cast(), (hi - lo) * 8, *mode) }
        } else {
            Ok(())
        }
    }

    pub(super) fn report(&self) -> (bool, Option<String>) {
        match &self.backing {
            Backing::Anon { .. } => (false, None),
            Backing::File { pool, persist, .. } => (
                pool.is_dax(),
                Some(match persist {
                    Some(PersistMode::CpuCache) => "cpu-cache".into(),
                    Some(PersistMode::Msync) => "msync".into(),
                    None => "none".into(),
                }),
            ),
        }
    }

    /// Error sums over `lo..hi`.
    pub(super) fn errors(&self, lo: usize, hi: usize, ntimes: usize) -> [f64; 3] {
        let e = expected_values(ntimes);
        // SAFETY: the workers have finished; the arrays hold `elements` initialised values.
        unsafe {
            let s = |x: *mut f64| std::slice::from_raw_parts(x.add(lo), hi - lo);
            error_sums(s(self.ptrs.a), s(self.ptrs.b), s(self.ptrs.c), e)
        }
    }
}

impl Drop for Arrays {
    fn drop(&mut self) {
        if let Backing::Anon { base, len } = self.backing {
            // SAFETY: our own mapping, no longer used by any worker.
            unsafe { libc::munmap(base.cast(), len) };
        }
    }
}
