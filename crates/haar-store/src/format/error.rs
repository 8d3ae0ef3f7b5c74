//! [`DecodeError`]: why bytes failed to decode, shared by every decoder of this module.
//!
//! Owns only the error type; no decoder lives here.

/// Why bytes failed to decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the structure needs.
    #[error("truncated at byte {0}")]
    Truncated(usize),
    /// Wrong magic number.
    #[error("bad magic {0:?}")]
    BadMagic([u8; 4]),
    /// A version this code does not read.
    #[error("unsupported version {0}")]
    Version(u16),
    /// Checksum mismatch.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// Stored crc.
        stored: u32,
        /// Recomputed crc.
        computed: u32,
    },
    /// Structurally invalid content.
    #[error("invalid: {0}")]
    Invalid(&'static str),
}
