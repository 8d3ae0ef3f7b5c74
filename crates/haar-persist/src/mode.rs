//! How stores into a pool mapping are made durable: [`PersistMode`], chosen by a caller, by the
//! `HAAR_PMEM_FORCE` environment variable ([`FORCE_ENV`]) or by detection as libpmem does it.
//!
//! Owns the choice and the one environment variable. Must not flush, copy or keep a mapping:
//! detection maps one page through [`crate::sys`] and unmaps it at once, and acting on the mode
//! is [`crate::flush::persist`]'s job.

use std::fs::File;
use std::io;

use crate::sys::{map_shared, page_size};

/// Environment variable overriding [`PersistMode`] detection: `cpu` or `msync`.
pub const FORCE_ENV: &str = "HAAR_PMEM_FORCE";

/// How stores into a pool mapping are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistMode {
    /// Real persistent memory (a DAX file mapped with `MAP_SYNC`): flush the cache lines and
    /// fence; no system call. Forced on anything else it gives no power-loss durability.
    CpuCache,
    /// Anything else: `msync(MS_SYNC)` of the page-aligned range. A no-op on tmpfs, where the
    /// pool survives process crashes but not power loss.
    Msync,
}

impl PersistMode {
    /// The mode forced by `HAAR_PMEM_FORCE` (`cpu` or `msync`), or `None` if it is unset or
    /// empty.
    ///
    /// # Errors
    /// `InvalidInput` if the variable holds anything else.
    pub fn from_env() -> io::Result<Option<PersistMode>> {
        match std::env::var_os(FORCE_ENV) {
            None => Ok(None),
            Some(v) => Self::parse_force(&v.to_string_lossy()),
        }
    }

    /// Parses a `HAAR_PMEM_FORCE` value: `cpu` / `msync` (any case), empty means "detect".
    ///
    /// # Errors
    /// `InvalidInput`, naming the variable and the accepted values.
    pub fn parse_force(value: &str) -> io::Result<Option<PersistMode>> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" => Ok(None),
            "cpu" => Ok(Some(PersistMode::CpuCache)),
            "msync" => Ok(Some(PersistMode::Msync)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{FORCE_ENV}={value:?} is not understood: use `cpu` or `msync`, or unset it to detect"
                ),
            )),
        }
    }

    /// Detects the mode for `file` as libpmem does: [`PersistMode::CpuCache`] if the kernel
    /// accepts a `MAP_SHARED_VALIDATE | MAP_SYNC` mapping of it (a DAX file system), else
    /// [`PersistMode::Msync`]. Maps and unmaps one page; the file need not be that long.
    ///
    /// # Errors
    /// Any mapping error other than "`MAP_SYNC` not supported".
    pub fn detect(file: &File) -> io::Result<PersistMode> {
        let page = page_size();
        let (base, dax) = map_shared(file, page)?;
        // SAFETY: `base` is the mapping of `page` bytes just created and never shared.
        unsafe { libc::munmap(base.as_ptr().cast(), page) };
        Ok(Self::for_mapping(dax))
    }

    /// The mode for `file`: `force` if given, else `HAAR_PMEM_FORCE` if set, else
    /// [`PersistMode::detect`].
    ///
    /// # Errors
    /// A malformed `HAAR_PMEM_FORCE`, or a mapping error from detection.
    pub fn from_env_or_detect(file: &File, force: Option<PersistMode>) -> io::Result<PersistMode> {
        match force {
            Some(mode) => Ok(mode),
            None => match Self::from_env()? {
                Some(mode) => Ok(mode),
                None => Self::detect(file),
            },
        }
    }

    pub(crate) fn for_mapping(dax: bool) -> PersistMode {
        // Without cache-control instructions even a DAX mapping must be persisted by msync.
        if dax && cfg!(target_arch = "x86_64") {
            PersistMode::CpuCache
        } else {
            PersistMode::Msync
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::PoolMapping;
    use std::fs::OpenOptions;

    #[test]
    fn parse_force_accepts_cpu_msync_and_empty_and_names_the_variable_otherwise() {
        assert_eq!(
            PersistMode::parse_force("cpu").unwrap(),
            Some(PersistMode::CpuCache)
        );
        assert_eq!(
            PersistMode::parse_force(" MSYNC ").unwrap(),
            Some(PersistMode::Msync)
        );
        assert_eq!(PersistMode::parse_force("").unwrap(), None);
        let err = PersistMode::parse_force("clwb").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains(FORCE_ENV), "{err}");
    }

    #[test]
    fn detect_succeeds_and_agrees_with_the_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let pool = PoolMapping::open_with_mode(&path, 1 << 20, None).unwrap();
        let detected = PersistMode::detect(&File::open(&path).unwrap());
        // A read-only fd cannot be mapped writable: detection must report that, not guess.
        assert!(detected.is_err());
        let rw = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let detected = PersistMode::detect(&rw).unwrap();
        assert_eq!(detected, PersistMode::for_mapping(pool.is_dax()));
        let forced = PersistMode::from_env_or_detect(&rw, Some(PersistMode::CpuCache)).unwrap();
        assert_eq!(forced, PersistMode::CpuCache);
    }
}
