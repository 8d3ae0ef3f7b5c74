//! The wire protocol (design §8): the frame decoder on arbitrary bytes, and the same bytes sent
//! to a live server over loopback — before login (the handshake), or after a real login with
//! the read-write or the read-only token (the session's request decoding and refusals).
//!
//! Properties: no panic, in the decoder or in any server thread (libFuzzer's panic hook aborts
//! the process); `decode` and `read_frame` agree; a decoded frame re-encodes to the same bytes;
//! reading never allocates much more than the bytes that arrived, whatever a header announces;
//! every frame the server sends back decodes.
#![no_main]

use std::io::{Cursor, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use haar_net::auth::{self, Tokens};
use haar_net::protocol::{self, Frame, Kind, Limits};
use haar_net::{Server, ServerConfig, ServerLimits, Target};
use haar_store::{MemoryBackend, StoreOptions};
use libfuzzer_sys::fuzz_target;

const RW: &str = "fuzz-rw";
const RO: &str = "fuzz-ro";

fn server() -> &'static str {
    static ADDR: OnceLock<String> = OnceLock::new();
    ADDR.get_or_init(|| {
        let config = ServerConfig {
            tokens: Tokens {
                read_write: Some(RW.into()),
                read_only: Some(RO.into()),
            },
            limits: ServerLimits {
                handshake_deadline: Duration::from_secs(2),
                idle_timeout: Duration::from_secs(2),
                write_timeout: Duration::from_secs(2),
                ..ServerLimits::default()
            },
            ..ServerConfig::default()
        };
        let target = Target::Local {
            backend: Arc::new(MemoryBackend::new()),
            options: StoreOptions::default(),
        };
        Server::bind("127.0.0.1:0", target, config)
            .expect("bind a loopback port")
            .spawn()
            .expect("start the server")
            .to_string()
    })
}

fn decoder(data: &[u8]) {
    for limits in [Limits::SESSION, Limits::HANDSHAKE, Limits::PRELOGIN] {
        let mut g = Frame::default();
        let streamed = protocol::read_frame(&mut Cursor::new(data), limits, &mut g);
        // Buffers follow the bytes that arrived, not the lengths announced.
        let bound = 4 * data.len().max(protocol::READ_STEP);
        assert!(
            g.meta.capacity() <= bound && g.data.capacity() <= bound,
            "read_frame allocated {} + {} bytes for {} input bytes",
            g.meta.capacity(),
            g.data.capacity(),
            data.len()
        );
        match protocol::decode(data, limits) {
            Ok((f, used)) => {
                assert!(used <= data.len());
                assert!(streamed.is_ok(), "decode accepts what read_frame refuses");
                assert_eq!(g, f, "read_frame and decode disagree");
                if let Some(kind) = f.kind() {
                    let again = protocol::encode(kind, f.flags, f.id, &f.meta, &f.data).unwrap();
                    assert_eq!(
                        again,
                        &data[..used],
                        "a decoded frame re-encodes differently"
                    );
                }
            }
            Err(_) => assert!(streamed.is_err(), "read_frame accepts what decode refuses"),
        }
    }
}

fn frame(kind: Kind, meta: &[u8]) -> Vec<u8> {
    protocol::encode(kind, 0, 0, meta, &[]).unwrap()
}

/// Reads a frame, and its tag when the session is sealed (design §8: plain TCP after login).
fn read(s: &mut TcpStream, rx: Option<&mut protocol::Sealer>) -> Option<Frame> {
    let mut f = Frame::default();
    match protocol::read_frame(s, Limits::SESSION, &mut f) {
        Ok(()) => {}
        // Anything the server sends must be a valid frame; a closed or reset socket is fine.
        Err(protocol::WireError::Frame(e)) => panic!("the server sent a bad frame: {e}"),
        Err(_) => return None,
    }
    if let Some(rx) = rx {
        let mut tag = [0u8; protocol::TAG_LEN];
        s.read_exact(&mut tag).ok()?;
        let kind = f.kind().expect("the server sends known kinds");
        let h = protocol::encode_header(kind, f.flags, f.id, &f.meta, f.data.len()).unwrap();
        if let Err(e) = rx.open(&h, &f.meta, &f.data, &tag) {
            panic!("the server sent a frame with a bad tag: {e}");
        }
    }
    Some(f)
}

/// The two directions' tags of a logged-in session: (frames sent, frames received).
type Sealers = (protocol::Sealer, protocol::Sealer);

/// Logs in with `token` as a real client does; `None` if the server is not reachable.
fn login(s: &mut TcpStream, token: &str) -> Option<Sealers> {
    let nonce = auth::nonce();
    let hello = protocol::Hello {
        version: protocol::VERSION,
        client: "fuzz".into(),
        nonce: nonce.clone(),
        host: None,
        tags: true, // a tagged session, as every connection off loopback is
    };
    s.write_all(&frame(Kind::Hello, &protocol::to_meta(&hello)))
        .ok()?;
    let c: protocol::Challenge = read(s, None)?.meta().ok()?;
    let tags = auth::TagsAgreed {
        asked: true,
        granted: c.tags,
    };
    let proof = auth::client_proof(token, &c.nonce, &nonce, tags);
    let a = protocol::to_meta(&protocol::Auth { proof });
    s.write_all(&frame(Kind::Auth, &a)).ok()?;
    let keys = auth::frame_keys(token, &c.nonce, &nonce);
    let mut rx = protocol::Sealer::new(keys.server_to_client);
    let w = read(s, Some(&mut rx))?;
    assert_eq!(w.kind(), Some(Kind::Welcome), "a correct proof was refused");
    Some((protocol::Sealer::new(keys.client_to_server), rx))
}

/// The fuzzed bytes as a logged-in client sends them: every leading frame that decodes, tagged
/// (so the session's request handling is reached), then whatever is left as it is (which the
/// decoder or the tag check must refuse).
fn tagged(tx: &mut protocol::Sealer, mut bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    while let Ok((f, used)) = protocol::decode(bytes, Limits::SESSION) {
        let Some(kind) = f.kind() else { break };
        let h = protocol::encode_header(kind, f.flags, f.id, &f.meta, f.data.len()).unwrap();
        out.extend_from_slice(&bytes[..used]);
        out.extend_from_slice(&tx.seal(&h, &f.meta, &f.data));
        bytes = &bytes[used..];
    }
    out.extend_from_slice(bytes);
    out
}

fn against_server(mode: u8, bytes: &[u8]) {
    let Ok(mut s) = TcpStream::connect(server()) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let mut sealers = match mode % 3 {
        0 => None,
        1 => Some(login(&mut s, RW)),
        _ => Some(login(&mut s, RO)),
    };
    let sent = match &mut sealers {
        None => bytes.to_vec(),
        Some(None) => return,
        Some(Some((tx, _))) => tagged(tx, bytes),
    };
    let _ = s.write_all(&sent);
    let _ = s.shutdown(Shutdown::Write);
    let mut rx = sealers.flatten().map(|(_, rx)| rx);
    while let Some(f) = read(&mut s, rx.as_mut()) {
        // A WATCH stream only ends when the client closes.
        if matches!(f.kind(), Some(Kind::Event | Kind::Heartbeat)) {
            break;
        }
    }
}

fuzz_target!(|data: &[u8]| {
    decoder(data);
    if let Some((&mode, rest)) = data.split_first() {
        against_server(mode, rest);
    }
});
