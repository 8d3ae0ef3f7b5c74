//! The placement `DIR[:SIZE]`: pure parsing, no file-system access.

use std::path::PathBuf;
use std::str::FromStr;

use crate::HeapError;

/// The smallest heap accepted: mimalloc's smallest arena (32 MiB) with room for its bitmaps
/// and the alignment of the mapping.
pub const MIN_SIZE: u64 = 64 << 20;

/// The largest heap mimalloc takes as one arena: 502 × 32 MiB = 15.7 GiB (16,064 MiB).
/// mimalloc 3 (libmimalloc-sys 0.1.49) keeps an arena's bookkeeping (its bitmaps and a page
/// record per 64 KiB slice) within the arena's first 32 MiB chunk, and refuses the whole
/// area when that does not fit: a pool of 16,064 MiB is used, one of 16,096 MiB (503 chunks)
/// or more is refused, 16 GiB and 24 GiB included (issue 27). A pool size is used in whole
/// 32 MiB chunks, so this is also the largest size worth giving. `haar run --heap DIR`
/// without SIZE takes the space available in DIR up to this.
pub const MAX_SIZE: u64 = 502 * (32 << 20);

/// Where the heap goes: a directory and, optionally, the pool's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapSpec {
    /// The directory the pool file is created in.
    pub dir: PathBuf,
    /// The pool's size in bytes; `None` means the space available in DIR at launch (the
    /// file is sparse: only pages the program touches take space).
    pub size: Option<u64>,
}

impl FromStr for HeapSpec {
    type Err = HeapError;

    /// `DIR` or `DIR:SIZE`, SIZE in bytes or with a binary suffix (`K`, `M`, `G`, `T`, also
    /// `KiB`…). The split is at the last `:` and only when what follows is a size, so a
    /// directory whose name holds a `:` needs no quoting.
    fn from_str(s: &str) -> Result<HeapSpec, HeapError> {
        let bad = |reason: &str| HeapError::BadSpec {
            given: s.to_string(),
            reason: reason.to_string(),
        };
        if s.is_empty() {
            return Err(bad("the directory is empty"));
        }
        let (dir, size) = match s.rsplit_once(':') {
            Some((d, z)) if z.starts_with(|c: char| c.is_ascii_digit()) => {
                let n = haar_mem::units::parse_size(z).map_err(|e| bad(&e))?;
                (d, Some(n))
            }
            Some((_, "")) => return Err(bad("SIZE after ':' is empty")),
            _ => (s, None),
        };
        if dir.is_empty() {
            return Err(bad("the directory is empty"));
        }
        if let Some(n) = size
            && n < MIN_SIZE
        {
            return Err(HeapError::TooSmall { size: n });
        }

        Ok(HeapSpec {
            dir: PathBuf::from(dir),
            size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_and_size_forms() {
        let s: HeapSpec = "/dev/shm:2G".parse().unwrap();
        assert_eq!(s.dir, PathBuf::from("/dev/shm"));
        assert_eq!(s.size, Some(2 << 30));
        let s: HeapSpec = "/mnt/pmem0".parse().unwrap();
        assert_eq!((s.dir.to_str().unwrap(), s.size), ("/mnt/pmem0", None));
        assert_eq!("d:512M".parse::<HeapSpec>().unwrap().size, Some(512 << 20));
        assert_eq!("d:1T".parse::<HeapSpec>().unwrap().size, Some(1 << 40));
        assert_eq!(
            "d:100MiB".parse::<HeapSpec>().unwrap().size,
            Some(100 << 20)
        );
        // A ':' inside the directory's name that is not followed by a size.
        let s: HeapSpec = "/scratch/run:a".parse().unwrap();
        assert_eq!((s.dir.to_str().unwrap(), s.size), ("/scratch/run:a", None));
        let s: HeapSpec = "/scratch/run:a:1G".parse().unwrap();
        assert_eq!(s.dir, PathBuf::from("/scratch/run:a"));
    }

    #[test]
    fn bad_forms_are_refused_with_the_reason() {
        for (given, says) in [
            ("", "directory is empty"),
            (":1G", "directory is empty"),
            ("/d:", "SIZE after ':' is empty"),
            ("/d:12parsecs", "unknown unit"),
        ] {
            let e = given.parse::<HeapSpec>().unwrap_err().to_string();
            assert!(e.contains(says), "{given}: {e}");
        }
        let e = "/d:1M".parse::<HeapSpec>().unwrap_err();
        assert!(matches!(e, HeapError::TooSmall { size } if size == 1 << 20));
        assert!(e.to_string().contains("at least 64.0 MiB"), "{e}");
    }
}
