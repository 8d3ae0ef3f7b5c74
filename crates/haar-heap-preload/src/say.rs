//! One-line messages to stderr without allocating: formatted by `core::fmt` into a stack
//! buffer and written with one `write(2)`, so that they can be printed from inside `malloc`.

use std::fmt::{self, Write};

/// A fixed buffer that `core::fmt` writes into; text past its end is cut.
pub(crate) struct Line {
    buf: [u8; 1024],
    len: usize,
}

impl Line {
    /// An empty line.
    pub(crate) fn new() -> Line {
        Line {
            buf: [0; 1024],
            len: 0,
        }
    }

    /// The text so far (NUL-terminated only if a `\0` was written).
    pub(crate) fn as_ptr(&self) -> *const libc::c_char {
        self.buf.as_ptr().cast()
    }

    /// Writes the line and a newline to stderr in one call (so that lines of several
    /// processes do not interleave).
    pub(crate) fn emit(mut self) {
        let _ = self.write_str("\n");
        if self.len == self.buf.len()
            && let Some(last) = self.buf.last_mut()
        {
            *last = b'\n';
        }
        // SAFETY: the buffer is valid for `len` bytes.
        unsafe { libc::write(2, self.buf.as_ptr().cast(), self.len) };
    }
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - self.len;
        let n = s.len().min(room);
        if let (Some(dst), Some(src)) = (
            self.buf.get_mut(self.len..self.len + n),
            s.as_bytes().get(..n),
        ) {
            dst.copy_from_slice(src);
            self.len += n;
        }
        Ok(())
    }
}

/// A byte count as people read it: `512 MiB`, `2.0 GiB`.
pub(crate) struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut i = 0;
        while v >= 1024.0 && i + 1 < UNITS.len() {
            v /= 1024.0;
            i += 1;
        }
        let unit = UNITS.get(i).copied().unwrap_or("B");
        if i == 0 {
            write!(f, "{} B", self.0)
        } else if v.fract() == 0.0 {
            write!(f, "{v:.0} {unit}")
        } else {
            write!(f, "{v:.1} {unit}")
        }
    }
}

/// A NUL-terminated C string shown as text (bytes that are not UTF-8 shown as `?`).
pub(crate) struct CText<'a>(pub &'a [u8]);

impl fmt::Display for CText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("?")?;
            }
        }
        Ok(())
    }
}
