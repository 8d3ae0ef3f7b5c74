//! Frame protection on plain TCP (design §8, protocol version 2): every frame after the login
//! carries a 16-byte tag, keyed BLAKE3 over an implicit per-direction sequence number, the
//! header, the meta and the data. Pure: no I/O; [`crate::transport::Wire`] applies it.
//!
//! The sequence number is never sent: both ends count the frames of each direction, so a
//! frame altered, injected, replayed, reordered or dropped fails the check of the frame where
//! the two counts or contents first differ.

use super::{FrameError, HEADER_LEN};

/// Bytes of the tag that follows a protected frame's data.
pub const TAG_LEN: usize = 16;

/// The two keys of one connection, one per direction (see [`crate::auth::frame_keys`]).
#[derive(Clone)]
pub struct FrameKeys {
    /// Tags frames the client sends.
    pub client_to_server: [u8; 32],
    /// Tags frames the server sends.
    pub server_to_client: [u8; 32],
}

impl std::fmt::Debug for FrameKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameKeys(…)") // never print a secret
    }
}

/// One direction of a protected connection: its key and the number of the next frame.
#[derive(Clone)]
pub struct Sealer {
    key: [u8; 32],
    seq: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").field("seq", &self.seq).finish()
    }
}

impl Sealer {
    /// A direction whose next frame is number 0.
    pub fn new(key: [u8; 32]) -> Sealer {
        Sealer { key, seq: 0 }
    }

    /// The number of the next frame (the frames tagged or checked so far).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    fn compute(&self, h: &[u8; HEADER_LEN], meta: &[u8], data: &[u8]) -> [u8; TAG_LEN] {
        let mut m = blake3::Hasher::new_keyed(&self.key);
        m.update(&self.seq.to_le_bytes());
        m.update(h);
        m.update(meta);
        m.update(data);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&m.finalize().as_bytes()[..TAG_LEN]);
        tag
    }

    /// The tag of the next frame sent; counts it.
    pub fn seal(&mut self, h: &[u8; HEADER_LEN], meta: &[u8], data: &[u8]) -> [u8; TAG_LEN] {
        let tag = self.compute(h, meta, data);
        self.seq += 1;
        tag
    }

    /// Checks the tag of the next frame received (in time independent of where it differs);
    /// counts it either way (a connection is closed after a failure).
    pub fn open(
        &mut self,
        h: &[u8; HEADER_LEN],
        meta: &[u8],
        data: &[u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), FrameError> {
        let want = self.compute(h, meta, data);
        let seq = self.seq;
        self.seq += 1;
        let diff = want.iter().zip(tag).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if diff != 0 {
            return Err(FrameError::Mac { seq });
        }
        Ok(())
    }
}

/// Encodes a whole protected frame (header, meta, data, tag) into one buffer.
pub fn encode_sealed(
    sealer: &mut Sealer,
    kind: super::Kind,
    flags: u8,
    id: u64,
    meta: &[u8],
    data: &[u8],
) -> Result<Vec<u8>, FrameError> {
    let h = super::encode_header(kind, flags, id, meta, data.len())?;
    let tag = sealer.seal(&h, meta, data);
    let mut out = super::encode(kind, flags, id, meta, data)?;
    out.extend_from_slice(&tag);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Kind, encode_header};

    #[test]
    fn a_tag_binds_key_sequence_and_every_byte() {
        let h = encode_header(Kind::Archive, 0, 7, b"{}", 4).unwrap();
        let mut tx = Sealer::new([1; 32]);
        let t0 = tx.seal(&h, b"{}", b"GRIB");
        let t1 = tx.seal(&h, b"{}", b"GRIB");
        assert_ne!(t0, t1, "the same frame twice has two tags");
        let mut rx = Sealer::new([1; 32]);
        rx.open(&h, b"{}", b"GRIB", &t0).unwrap();
        rx.open(&h, b"{}", b"GRIB", &t1).unwrap();
        // A replay of frame 0 as frame 2.
        assert_eq!(
            rx.open(&h, b"{}", b"GRIB", &t0),
            Err(FrameError::Mac { seq: 2 })
        );
        // One bit anywhere, or another key.
        let mut rx = Sealer::new([1; 32]);
        assert!(rx.open(&h, b"{}", b"GRIC", &t0).is_err());
        let mut rx = Sealer::new([1; 32]);
        assert!(rx.open(&h, b"{ }", b"GRIB", &t0).is_err());
        let mut h2 = h;
        h2[8] ^= 1;
        let mut rx = Sealer::new([1; 32]);
        assert!(rx.open(&h2, b"{}", b"GRIB", &t0).is_err());
        let mut rx = Sealer::new([2; 32]);
        assert!(rx.open(&h, b"{}", b"GRIB", &t0).is_err());
    }
}
