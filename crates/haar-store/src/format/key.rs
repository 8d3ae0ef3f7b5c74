//! The key encoding of design §3 and its limits: encode, check and decode keys, the bounds-
//! checked little-endian [`Cursor`] every decoder of this module reads with, and the
//! allocation-free walk over encoded pairs ([`RawPairs`]) that catalogue replay uses.
//!
//! Knows nothing of segments or files; those build on it.

use haar_core::Key;

use super::error::DecodeError;

/// Limits on encoded keys (design §3).
pub const MAX_KEYWORD_LEN: usize = 255;
/// Longest value accepted in a key.
pub const MAX_VALUE_LEN: usize = 65_536;
/// Most pairs in one key.
pub const MAX_PAIRS: usize = 256;

/// Little-endian reader over a slice; every read is bounds-checked.
pub(crate) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(DecodeError::Truncated(self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
}

/// Checks one encoded key (the rules of [`decode_key`]) and moves past it, without
/// building it.
pub(super) fn skip_key(c: &mut Cursor<'_>) -> Result<(), DecodeError> {
    let n = c.u16()? as usize;
    if n > MAX_PAIRS {
        return Err(DecodeError::Invalid("too many key pairs"));
    }
    let start = c.pos();
    for i in 0..n {
        let kl = c.u16()? as usize;
        if kl > MAX_KEYWORD_LEN {
            return Err(DecodeError::Invalid("keyword too long"));
        }
        let k = c.take(kl)?;
        let vl = c.u32()? as usize;
        if vl > MAX_VALUE_LEN {
            return Err(DecodeError::Invalid("value too long"));
        }
        c.take(vl)?;
        // Keys are short: a quadratic duplicate check over the keywords already read.
        if i > 0 && raw_keywords(&c.buf[start..c.pos()], i).any(|x| x == k) {
            return Err(DecodeError::Invalid("duplicate keyword"));
        }
    }
    // Every keyword and value is UTF-8 when the whole encoding is ASCII (lengths included:
    // any byte below 0x80 is UTF-8 by itself), as MARS keys are; only otherwise check each.
    let body = &c.buf[start..c.pos()];
    if !body.is_ascii() {
        let mut b = body;
        for _ in 0..n {
            let kl = u16::from_le_bytes([b[0], b[1]]) as usize;
            std::str::from_utf8(&b[2..2 + kl])
                .map_err(|_| DecodeError::Invalid("keyword not UTF-8"))?;
            let vl = u32::from_le_bytes([b[2 + kl], b[3 + kl], b[4 + kl], b[5 + kl]]) as usize;
            std::str::from_utf8(&b[6 + kl..6 + kl + vl])
                .map_err(|_| DecodeError::Invalid("value not UTF-8"))?;
            b = &b[6 + kl + vl..];
        }
    }
    Ok(())
}

/// The pairs of an encoded key (design §3) already checked by
/// [`decode_segment_raw`](super::segment::decode_segment_raw), without allocating. Stops at the
/// end of the key; [`RawPairs::rest`] is what follows.
#[derive(Clone)]
pub(crate) struct RawPairs<'a> {
    buf: &'a [u8],
    left: usize,
}

impl<'a> RawPairs<'a> {
    /// The pairs of the key at the start of `enc`.
    pub(crate) fn new(enc: &'a [u8]) -> RawPairs<'a> {
        let n = enc
            .get(0..2)
            .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
        RawPairs {
            buf: enc.get(2..).unwrap_or_default(),
            left: n as usize,
        }
    }

    /// The bytes after the key (all pairs must have been read).
    pub(crate) fn rest(mut self) -> &'a [u8] {
        while self.next().is_some() {}
        self.buf
    }
}

impl<'a> Iterator for RawPairs<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<(&'a str, &'a str)> {
        if self.left == 0 {
            return None;
        }
        let b = self.buf;
        let kl = u16::from_le_bytes(b.get(0..2)?.try_into().ok()?) as usize;
        let k = b.get(2..2 + kl)?;
        let vl = u32::from_le_bytes(b.get(2 + kl..6 + kl)?.try_into().ok()?) as usize;
        let v = b.get(6 + kl..6 + kl + vl)?;
        self.buf = &b[6 + kl + vl..];
        self.left -= 1;
        Some((
            std::str::from_utf8(k).unwrap_or_default(),
            std::str::from_utf8(v).unwrap_or_default(),
        ))
    }
}

/// The first `n` keywords of the encoded pairs `body` (no UTF-8 check: the caller has
/// checked them).
fn raw_keywords(body: &[u8], n: usize) -> impl Iterator<Item = &[u8]> {
    let mut b = body;
    (0..n).map_while(move |_| {
        let kl = u16::from_le_bytes(b.get(0..2)?.try_into().ok()?) as usize;
        let k = b.get(2..2 + kl)?;
        let vl = u32::from_le_bytes(b.get(2 + kl..6 + kl)?.try_into().ok()?) as usize;
        b = b.get(6 + kl + vl..)?;
        Some(k)
    })
}

/// Checks a key against the encoding limits without encoding it.
pub fn check_key(key: &Key) -> Result<(), String> {
    if key.len() > MAX_PAIRS {
        return Err(format!("{} keywords (at most {MAX_PAIRS})", key.len()));
    }
    for (k, v) in key.iter() {
        if k.len() > MAX_KEYWORD_LEN {
            return Err(format!(
                "keyword of {} bytes (at most {MAX_KEYWORD_LEN})",
                k.len()
            ));
        }
        if v.len() > MAX_VALUE_LEN {
            return Err(format!(
                "value of {k} is {} bytes (at most {MAX_VALUE_LEN})",
                v.len()
            ));
        }
    }
    Ok(())
}

/// Encodes a key (design §3). Fails if a limit is exceeded.
pub fn encode_key(key: &Key, out: &mut Vec<u8>) -> Result<(), String> {
    check_key(key)?;
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    for (k, v) in key.iter() {
        out.extend_from_slice(&(k.len() as u16).to_le_bytes());
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    Ok(())
}

pub(crate) fn decode_key(c: &mut Cursor<'_>) -> Result<Key, DecodeError> {
    let n = c.u16()? as usize;
    if n > MAX_PAIRS {
        return Err(DecodeError::Invalid("too many key pairs"));
    }
    let mut key = Key::new();
    for _ in 0..n {
        let kl = c.u16()? as usize;
        if kl > MAX_KEYWORD_LEN {
            return Err(DecodeError::Invalid("keyword too long"));
        }
        let k = std::str::from_utf8(c.take(kl)?)
            .map_err(|_| DecodeError::Invalid("keyword not UTF-8"))?;
        let vl = c.u32()? as usize;
        if vl > MAX_VALUE_LEN {
            return Err(DecodeError::Invalid("value too long"));
        }
        let v = std::str::from_utf8(c.take(vl)?)
            .map_err(|_| DecodeError::Invalid("value not UTF-8"))?;
        if key.get(k).is_some() {
            return Err(DecodeError::Invalid("duplicate keyword"));
        }
        key.push(k, v);
    }
    Ok(key)
}

/// Decodes a standalone key (the whole slice).
pub fn decode_key_bytes(buf: &[u8]) -> Result<Key, DecodeError> {
    let mut c = Cursor::new(buf);
    let key = decode_key(&mut c)?;
    if c.remaining() != 0 {
        return Err(DecodeError::Invalid("trailing bytes after key"));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn keys_round_trip(pairs in proptest::collection::btree_map("[a-z]{1,8}", "\\PC{0,30}", 0..10)) {
            let key: Key = pairs.into_iter().collect();
            let mut buf = Vec::new();
            encode_key(&key, &mut buf).unwrap();
            prop_assert_eq!(decode_key_bytes(&buf).unwrap(), key);
        }
    }
}
