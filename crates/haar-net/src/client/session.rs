//! One authenticated connection to a server: connect (with timeout, TLS when configured), the
//! HMAC handshake, and a liveness probe. Owns no retry or routing decision.

use std::io;
use std::net::{TcpStream, ToSocketAddrs};

use haar_store::{Error, Result};

use super::{ClientConfig, io_error};
use crate::auth;
use crate::protocol::{
    self, Access, Challenge, Frame, Hello, Kind, Limits, LocalOffer, RefusalCause, Refused,
    Welcome, WireError, to_meta,
};
use crate::transport::{Conn, Wire};

pub(super) struct Session {
    pub(super) wire: Wire,
    pub(super) access: Access,
    pub(super) local: Option<LocalOffer>,
}

impl Session {
    /// False once the peer has closed or reset the connection (or sent something unasked):
    /// a poll that does not wait.
    pub(super) fn alive(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut p = libc::pollfd {
            fd: self.wire.socket().as_raw_fd(),
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 0
    }
}

/// Opens a connection and authenticates.
pub(super) fn connect(addr: &str, cfg: &ClientConfig) -> Result<Session> {
    login(addr, cfg, &mut None)
}

/// Opens a connection and authenticates; a refused login also gives the server's typed cause
/// (`REFUSED`'s `cause`, design §8), which a caller acts on instead of the reason's wording.
pub(super) fn connect_why(
    addr: &str,
    cfg: &ClientConfig,
) -> (Result<Session>, Option<RefusalCause>) {
    let mut cause = None;
    let r = login(addr, cfg, &mut cause);
    (r, cause)
}

fn login(addr: &str, cfg: &ClientConfig, cause: &mut Option<RefusalCause>) -> Result<Session> {
    let hint = "is `haar serve` running there?";
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| io_error("resolve", addr, format!("{e}; give HOST:PORT")))?
        .collect();
    let mut last = None;
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, cfg.connect_timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let stream = stream.ok_or_else(|| {
        io_error(
            "connect",
            addr,
            format!(
                "{}; {hint}",
                last.map(|e| e.to_string())
                    .unwrap_or_else(|| "no address".into())
            ),
        )
    })?;
    let setup = |s: &TcpStream| -> io::Result<()> {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(cfg.connect_timeout))?;
        s.set_write_timeout(Some(cfg.connect_timeout))
    };
    setup(&stream).map_err(|e| io_error("connect", addr, e))?;
    let stream_peer = stream.peer_addr().ok();
    let conn: Box<dyn Conn> = match &cfg.tls {
        Some(tls) => {
            let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| io_error("TLS to", addr, e))?;
            let c = rustls::ClientConnection::new(tls.clone(), name)
                .map_err(|e| io_error("TLS to", addr, e))?;
            Box::new(rustls::StreamOwned::new(c, stream))
        }
        None => Box::new(stream),
    };
    // Plain TCP asks for frame tags unless the server is on a loopback address (design §8).
    let ask_tags = cfg.tls.is_none() && cfg.frame_tags.wanted(stream_peer);
    let mut wire = Wire::new(conn);
    let hs = |e: WireError| match e {
        WireError::Io(ref io)
            if io.get_ref().is_some_and(|x| {
                matches!(
                    x.downcast_ref::<rustls::Error>(),
                    Some(rustls::Error::InvalidCertificate(_))
                )
            }) =>
        {
            io_error(
                "TLS handshake with",
                addr,
                format!(
                    "{e}: the server's certificate is not trusted by this client; give --tls-ca the CA certificate that signed it (and check the server's name or IP address is in it)"
                ),
            )
        }
        WireError::Frame(protocol::FrameError::BadMagic(_)) => io_error(
            "handshake with",
            addr,
            format!("{e}; if the server uses TLS, give the client its CA (--tls-ca)"),
        ),
        WireError::Io(ref io)
            if io.kind() == io::ErrorKind::WouldBlock || io.kind() == io::ErrorKind::TimedOut =>
        {
            io_error("handshake with", addr, format!("no answer ({e}); {hint}"))
        }
        e => io_error("handshake with", addr, format!("{e}; {hint}")),
    };
    let client_nonce = auth::nonce();
    let hello = Hello {
        version: protocol::VERSION,
        client: format!("haar {}", env!("CARGO_PKG_VERSION")),
        nonce: client_nonce.clone(),
        host: crate::server::boot_id().map(|b| auth::host_proof(&b, &client_nonce)),
        tags: ask_tags,
    };
    wire.send(Kind::Hello, 0, 0, &to_meta(&hello), &[])
        .map_err(hs)?;
    wire.flush().map_err(|e| hs(e.into()))?;
    let mut f = Frame::default();
    wire.read(Limits::HANDSHAKE, &mut f).map_err(hs)?;
    let mut refused = |f: &Frame| {
        let (reason, why) = f
            .meta::<Refused>()
            .map(|r| (r.reason, r.cause))
            .unwrap_or_else(|e| (e.to_string(), None));
        *cause = why;
        let extra = if cfg.token.is_none() && reason.contains("token") {
            " (this client has no token: set HAAR_TOKEN or --token-file)"
        } else {
            ""
        };
        Error::Remote {
            server: addr.into(),
            message: format!("refused the connection: {reason}{extra}"),
            class: haar_store::Class::Input,
        }
    };
    let challenge: Challenge = match f.kind() {
        Some(Kind::Challenge) => f.meta().map_err(|e| hs(e.into()))?,
        Some(Kind::Refused) => return Err(refused(&f)),
        _ => {
            return Err(hs(io::Error::other(format!(
                "unexpected frame kind {}",
                f.kind
            ))
            .into()));
        }
    };
    if challenge.version != protocol::VERSION {
        return Err(Error::Remote {
            server: addr.into(),
            message: format!(
                "speaks protocol version {}, this client version {}; use the same haar release on both ends",
                challenge.version,
                protocol::VERSION
            ),
            class: haar_store::Class::Input,
        });
    }
    if ask_tags && !challenge.tags {
        return Err(Error::Remote {
            server: addr.into(),
            message: "would not tag its frames although this client asked (its address is not a loopback address): the connection could be altered in flight; use TLS, or check for a man in the middle".into(),
            class: haar_store::Class::Input,
        });
    }
    let tags = auth::TagsAgreed {
        asked: ask_tags,
        granted: challenge.tags,
    };
    let token = cfg.token.as_deref().unwrap_or("");
    let proof = auth::client_proof(token, &challenge.nonce, &client_nonce, tags);
    wire.send(Kind::Auth, 0, 0, &to_meta(&protocol::Auth { proof }), &[])
        .map_err(hs)?;
    wire.flush().map_err(|e| hs(e.into()))?;
    // WELCOME is the server's first tagged frame on plain TCP (design §8): it is checked
    // under the keys this token derives, so its access and same-host offer are the server's.
    let (h, header) = wire.read_header(Limits::HANDSHAKE).map_err(hs)?;
    if tags.granted && header.kind == Kind::Welcome as u8 {
        let keys = auth::frame_keys(token, &challenge.nonce, &client_nonce);
        wire.seal(
            protocol::Sealer::new(keys.client_to_server),
            protocol::Sealer::new(keys.server_to_client),
        );
    }
    wire.read_body(&h, &header, &mut f).map_err(|e| match e {
        WireError::Frame(protocol::FrameError::Mac { .. }) => Error::Remote {
            server: addr.into(),
            message: format!(
                "the server's WELCOME failed its check ({e}): wrong server, another token, or a man in the middle; check the address and HAAR_TOKEN"
            ),
            class: haar_store::Class::Input,
        },
        e => hs(e),
    })?;
    let welcome: Welcome = match f.kind() {
        Some(Kind::Welcome) => f.meta().map_err(|e| hs(e.into()))?,
        Some(Kind::Refused) => return Err(refused(&f)),
        _ => {
            return Err(hs(io::Error::other(format!(
                "unexpected frame kind {}",
                f.kind
            ))
            .into()));
        }
    };
    let expected = auth::server_proof(token, &client_nonce, &challenge.nonce, tags);
    if !auth::constant_time_eq(&expected, &welcome.proof) {
        return Err(Error::Remote {
            server: addr.into(),
            message: "the server could not prove it knows the token: wrong server, or a man in the middle; check the address".into(),
            class: haar_store::Class::Input,
        });
    }
    // From now on a request gives up on a server that sends or takes no byte for this long.
    wire.set_read_timeout(Some(cfg.reply_timeout))
        .map_err(|e| io_error("connect", addr, e))?;
    wire.socket()
        .set_write_timeout(Some(cfg.reply_timeout))
        .map_err(|e| io_error("connect", addr, e))?;
    Ok(Session {
        wire,
        access: welcome.access,
        local: welcome.local,
    })
}
