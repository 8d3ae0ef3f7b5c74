//! Shared-secret authentication (design §8): nonces, HMAC-SHA256 proofs, token sources.
//!
//! Pure except for [`nonce`] (reads the OS random source) and [`load_token`] (reads a file or
//! the environment). Tokens are never sent over the wire, only proofs bound to both nonces.

use std::io::Read;
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::protocol::{Access, FrameKeys};

type HmacSha256 = Hmac<Sha256>;

/// The environment variable holding the token for servers and clients.
pub const TOKEN_ENV: &str = "HAAR_TOKEN";

/// 32 random bytes from the OS, hex-encoded.
pub fn nonce() -> String {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("the OS random source /dev/urandom is readable");
    hex(&b)
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// The frame-tag negotiation of one handshake (design §8): what the client's HELLO asked and
/// what the server's CHALLENGE granted. Both proofs cover it, so a man in the middle who
/// rewrites either flag (to turn the tags off) makes the login fail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TagsAgreed {
    /// HELLO's `tags`.
    pub asked: bool,
    /// CHALLENGE's `tags`.
    pub granted: bool,
}

impl TagsAgreed {
    /// The byte the proofs cover: ASCII `'0' + asked + 2 × granted`.
    fn byte(self) -> u8 {
        b'0' + u8::from(self.asked) + 2 * u8::from(self.granted)
    }
}

fn mac(token: &str, label: &[u8], first: &str, second: &str, tags: TagsAgreed) -> String {
    let mut m = HmacSha256::new_from_slice(token.as_bytes()).expect("HMAC takes any key length");
    m.update(label);
    m.update(first.as_bytes());
    m.update(second.as_bytes());
    m.update(&[tags.byte()]);
    hex(&m.finalize().into_bytes())
}

/// The client's proof:
/// `hex(HMAC-SHA256(token, "haar-auth-v2" ‖ server_nonce ‖ client_nonce ‖ tags))`, `tags` the
/// byte of [`TagsAgreed`].
pub fn client_proof(
    token: &str,
    server_nonce: &str,
    client_nonce: &str,
    tags: TagsAgreed,
) -> String {
    mac(token, b"haar-auth-v2", server_nonce, client_nonce, tags)
}

/// The server's proof:
/// `hex(HMAC-SHA256(token, "haar-server-v2" ‖ client_nonce ‖ server_nonce ‖ tags))`.
pub fn server_proof(
    token: &str,
    client_nonce: &str,
    server_nonce: &str,
    tags: TagsAgreed,
) -> String {
    mac(token, b"haar-server-v2", client_nonce, server_nonce, tags)
}

fn key(token: &str, label: &[u8], server_nonce: &str, client_nonce: &str) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(token.as_bytes()).expect("HMAC takes any key length");
    m.update(label);
    m.update(server_nonce.as_bytes());
    m.update(client_nonce.as_bytes());
    m.finalize().into_bytes().into()
}

/// The frame keys of a plain-TCP connection (design §8, version 2), one per direction:
/// `HMAC-SHA256(token, "haar-frames-v2 client" ‖ server_nonce ‖ client_nonce)` and the same
/// with `"haar-frames-v2 server"`. Only the two ends know the token, and the nonces are fresh
/// per connection, so no frame of another connection or direction verifies.
pub fn frame_keys(token: &str, server_nonce: &str, client_nonce: &str) -> FrameKeys {
    FrameKeys {
        client_to_server: key(token, b"haar-frames-v2 client", server_nonce, client_nonce),
        server_to_client: key(token, b"haar-frames-v2 server", server_nonce, client_nonce),
    }
}

/// A client's evidence that it runs on the machine with boot id `boot_id`, bound to its nonce:
/// `hex(SHA-256("haar-host-v2" ‖ boot_id ‖ client_nonce))`. The server compares it with its own
/// boot id's; the boot id itself never travels.
pub fn host_proof(boot_id: &str, client_nonce: &str) -> String {
    use sha2::Digest;
    let mut h = Sha256::new();
    h.update(b"haar-host-v2");
    h.update(boot_id.as_bytes());
    h.update(client_nonce.as_bytes());
    hex(&h.finalize())
}

/// Compares in time independent of where the strings differ.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The tokens a server accepts.
#[derive(Clone, Default)]
pub struct Tokens {
    /// Grants reads and writes.
    pub read_write: Option<String>,
    /// Grants reads only.
    pub read_only: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a secret.
        f.debug_struct("Tokens")
            .field("read_write", &self.read_write.as_ref().map(|_| "…"))
            .field("read_only", &self.read_only.as_ref().map(|_| "…"))
            .finish()
    }
}

impl Tokens {
    /// Which access (and which token) a client proof shows, if any.
    pub fn check(
        &self,
        proof: &str,
        server_nonce: &str,
        client_nonce: &str,
        tags: TagsAgreed,
    ) -> Option<(Access, &str)> {
        let candidates = [
            (Access::ReadWrite, self.read_write.as_deref()),
            (Access::ReadOnly, self.read_only.as_deref()),
        ];
        candidates.into_iter().find_map(|(access, token)| {
            let token = token?;
            constant_time_eq(
                &client_proof(token, server_nonce, client_nonce, tags),
                proof,
            )
            .then_some((access, token))
        })
    }
}

/// Reads a token: the file's content (trimmed) if a file is given, else `$HAAR_TOKEN`.
/// An empty token is refused: it would authenticate anyone.
pub fn load_token(file: Option<&Path>) -> Result<Option<String>, String> {
    let token = match file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read token file {}: {e}", p.display()))?
                .trim()
                .to_string(),
        ),
        None => std::env::var(TOKEN_ENV).ok().map(|t| t.trim().to_string()),
    };
    match token {
        Some(t) if t.is_empty() => Err(match file {
            Some(p) => format!("token file {} is empty", p.display()),
            None => format!("${TOKEN_ENV} is empty"),
        }),
        t => Ok(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_token_both_nonces_and_the_tag_negotiation() {
        let n = TagsAgreed::default();
        let p = client_proof("secret", "s", "c", n);
        assert_eq!(p.len(), 64);
        assert_ne!(p, client_proof("other", "s", "c", n));
        assert_ne!(p, client_proof("secret", "c", "s", n));
        assert_ne!(p, server_proof("secret", "s", "c", n));
        // Every flag of the negotiation changes both proofs: a downgrade in flight fails.
        let all = [(false, false), (true, false), (false, true), (true, true)]
            .map(|(asked, granted)| TagsAgreed { asked, granted });
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(
                    client_proof("k", "s", "c", *a),
                    client_proof("k", "s", "c", *b)
                );
                assert_ne!(
                    server_proof("k", "c", "s", *a),
                    server_proof("k", "c", "s", *b)
                );
            }
        }
        let t = Tokens {
            read_write: Some("rw".into()),
            read_only: Some("ro".into()),
        };
        assert_eq!(
            t.check(&client_proof("rw", "s", "c", n), "s", "c", n)
                .unwrap()
                .0,
            Access::ReadWrite
        );
        assert_eq!(
            t.check(&client_proof("ro", "s", "c", n), "s", "c", n)
                .unwrap()
                .0,
            Access::ReadOnly
        );
        assert!(
            t.check(&client_proof("xx", "s", "c", n), "s", "c", n)
                .is_none()
        );
        assert!(Tokens::default().check(&p, "s", "c", n).is_none());
        let granted = TagsAgreed {
            asked: false,
            granted: true,
        };
        assert!(
            t.check(&client_proof("rw", "s", "c", n), "s", "c", granted)
                .is_none()
        );
        assert!(!format!("{t:?}").contains("rw\""));
    }

    #[test]
    fn frame_keys_differ_by_direction_token_and_nonce() {
        let k = frame_keys("secret", "s", "c");
        assert_ne!(k.client_to_server, k.server_to_client);
        assert_ne!(
            k.client_to_server,
            frame_keys("other", "s", "c").client_to_server
        );
        assert_ne!(
            k.client_to_server,
            frame_keys("secret", "s", "d").client_to_server
        );
        assert_eq!(host_proof("b", "n"), host_proof("b", "n"));
        assert_ne!(host_proof("b", "n"), host_proof("b", "m"));
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce(), nonce());
        assert_eq!(nonce().len(), 64);
    }
}
