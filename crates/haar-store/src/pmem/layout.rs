//! The on-media layout of a pmem pool (design §5.1, §5.3, §5.4): every magic, version, header
//! offset, table size, alignment and record header of the pool file, and the types that say
//! where its slot arrays and tables lie.
//!
//! The one home of the format: `pool`, `heap`, `commit` and `reuse` import it and nothing
//! here imports them. A change of any value here is a change of the pool format.

// ---------------------------------------------------------------------------------------
// The pool header (design §5.1)

pub(super) const MAGIC: &[u8; 8] = b"HAARPOOL";
/// Version written into new pools: 2 added slot-array extensions, 3 space reuse (design §5.1).
pub(super) const VERSION: u32 = 3;
/// The first version with slot-array extensions.
pub(super) const VERSION_EXTENSIONS: u32 = 2;
/// The version before extensions, still read and written (without them).
pub(super) const VERSION_NO_EXTENSIONS: u32 = 1;
pub(super) const HEADER: usize = 4096;
pub(super) const OFF_LEN: usize = 16;
pub(super) const OFF_HEAP_START: usize = 24;
pub(super) const OFF_HEAP_TOP: usize = 32;
pub(super) const OFF_NSLOTS: usize = 40;
pub(super) const OFF_TAIL: usize = 48;
pub(super) const OFF_CRC: usize = 56;
/// Version 2: link to the first slot-array extension.
pub(super) const OFF_LINK0: usize = 64;
/// Version 3: the process table and free table (offset, entries each), after the epoch.
pub(super) const OFF_TABLES: usize = 80;
/// Version 3: 1 if this pool was created over what an interrupted creation left.
pub(super) const OFF_RECOVERED: usize = 120;

/// The header page every pool starts with (design §5.1): a shorter file holds no pool.
pub(super) const POOL_HEADER_MIN: u64 = 4096;

// ---------------------------------------------------------------------------------------
// The heap (design §5.3)

/// Alignment of every heap extent and of the chunk size (design §5.1).
pub(super) const ALIGN: u64 = 64;

// ---------------------------------------------------------------------------------------
// Commit slots and segment records (design §5.1, §5.3)

pub(super) const ARRAY_MAGIC: &[u8; 4] = b"HPSA";
pub(super) const ARRAY_HEADER: u64 = 64;
pub(super) const ARRAY_OFF_LINK: u64 = 32;
pub(super) const RECORD_MAGIC: &[u8; 4] = b"HPSR";
pub(super) const RECORD_HEADER: usize = 16;

/// One array of commit slots: the primary one in the header area or an extension in the heap.
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotArray {
    /// Global index of its first slot.
    pub(super) first: u64,
    /// Pool offset of its first slot.
    pub(super) slots_off: u64,
    /// Pool offset of its link to the next extension (`None` in version 1 pools).
    pub(super) link_off: Option<u64>,
    /// Pool offset of the link word that points to it (`None` for the primary array).
    pub(super) linked_from: Option<u64>,
}

/// The heap bytes of a segment record holding a segment of `len` bytes.
pub(super) fn record_size(len: u64) -> u64 {
    (RECORD_HEADER as u64 + len).next_multiple_of(ALIGN)
}

// ---------------------------------------------------------------------------------------
// Space reuse, version 3 (design §5.4)

/// Header word holding the reclaim epoch (version 3).
pub(super) const OFF_EPOCH: usize = 72;
/// Header word counting entries made free (version 3; a hint, not persisted): an allocator
/// that found the free table empty need not scan it again until the count moves.
pub(super) const OFF_FREE_CHANGES: usize = 112;
/// Entries of the process table of a new pool, and the size of one.
pub(super) const PROCS: u64 = 1024;
pub(super) const PROC_ENTRY: u64 = 64;
/// Words of a process table entry after `owner` and `pin`: the open pool's current chunk
/// (design §5.4, "A killed writer's chunk"; start 0 = none).
pub(super) const PROC_CHUNK_START: u64 = 16;
pub(super) const PROC_CHUNK_NEXT: u64 = 24;
pub(super) const PROC_CHUNK_END: u64 = 32;
/// Entries of the free table of a new pool, and the size of one.
pub(super) const FREE_ENTRIES: u64 = 16384;
pub(super) const FREE_ENTRY: u64 = 32;
/// The value of a commit slot whose segment was reclaimed (never a record offset).
pub(super) const DEAD_SLOT: u64 = 1;
/// A process table entry's pin when the process holds none.
pub(super) const NO_PIN: u64 = u64::MAX;
/// The largest region one free-table entry can name (a 24-bit count of 64-byte units).
pub(super) const MAX_REGION: u64 = ((1 << 24) - 1) * ALIGN;

pub(super) const EMPTY: u64 = 0;
pub(super) const FREE: u64 = 1;
pub(super) const ADDING: u64 = 2;
pub(super) const SPLITTING: u64 = 3;

/// Where a version 3 pool keeps its two tables (validated when the pool is opened).
#[derive(Debug, Clone, Copy)]
pub(super) struct Tables {
    pub(super) procs: u64,
    pub(super) nprocs: u64,
    pub(super) free: u64,
    pub(super) nfree: u64,
}
