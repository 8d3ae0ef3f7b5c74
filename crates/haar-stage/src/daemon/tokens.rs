//! The admin token: read from a file only its owner can read, compared in constant time.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::identity::euid;

/// Constant-time comparison (the token must not leak through timing).
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token a token file's text holds: its first line, trimmed.
pub fn token_of(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_string()
}

/// Reads the admin token file: its first line; refused when it is readable by group or
/// others, or belongs to another user than the daemon's.
pub fn read_token_file(path: &Path) -> Result<String> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
    if meta.mode() & 0o077 != 0 || meta.uid() != euid() {
        return Err(Error::Config(format!(
            "admin token file {}: must belong to uid {} and be readable by it alone (chmod 600)",
            path.display(),
            euid()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))?;
    let t = token_of(&text);
    if t.len() < 16 {
        return Err(Error::Config(format!(
            "admin token file {}: the token (first line) needs 16 characters or more",
            path.display()
        )));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same_secret(b"0123456789abcdef", b"0123456789abcdeX"));
        assert!(!same_secret(b"0123456789abcdef", b"0123456789abcde"));
    }
}
