//! A connection from accept to login (design §8): TLS or plain TCP, the HELLO → CHALLENGE →
//! AUTH → WELCOME handshake under its deadline, and the REFUSED frames; a connection that
//! logs in then runs its [`Session`].

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use super::accept::{Shared, Slot, token_name};
use super::config::boot_id;
use super::session::{Session, timed_out};
use crate::auth;
use crate::protocol::{
    self, Access, Challenge, FLAG_END, Frame, Hello, Kind, Limits, RefusalCause, Refused,
    WireError, to_meta,
};
use crate::transport::{Conn, Wire};

fn refuse(
    shared: &Shared,
    cause: RefusalCause,
    wire: &mut Wire,
    id: u64,
    reason: String,
) -> Result<(), WireError> {
    shared.metrics.refused(cause);
    let peer = wire
        .socket()
        .peer_addr()
        .map_or_else(|_| "unknown".to_string(), |a| a.to_string());
    tracing::warn!(%peer, %reason, "refused");
    wire.send(
        Kind::Refused,
        FLAG_END,
        id,
        &to_meta(&Refused {
            reason,
            cause: Some(cause),
        }),
        &[],
    )?;
    wire.flush()?;
    Ok(())
}

/// The handshake: HELLO → CHALLENGE → AUTH → WELCOME (or REFUSED and close).
fn handshake(shared: &Shared, wire: &mut Wire) -> Result<Option<Access>, WireError> {
    let mut f = Frame::default();
    wire.read(Limits::PRELOGIN, &mut f)?;
    if f.kind() != Some(Kind::Hello) {
        refuse(
            shared,
            RefusalCause::NotAHaarClient,
            wire,
            f.id,
            "expected HELLO: the peer is not a haar client".into(),
        )?;
        return Ok(None);
    }
    let hello: Hello = match f.meta() {
        Ok(h) => h,
        Err(e) => {
            refuse(
                shared,
                RefusalCause::NotAHaarClient,
                wire,
                f.id,
                e.to_string(),
            )?;
            return Ok(None);
        }
    };
    if hello.version != protocol::VERSION {
        refuse(
            shared,
            RefusalCause::VersionMismatch,
            wire,
            f.id,
            format!(
                "protocol version mismatch: client {} speaks version {}, server {} speaks version {}; use the same haar release on both ends",
                hello.client,
                hello.version,
                shared.name,
                protocol::VERSION
            ),
        )?;
        return Ok(None);
    }
    let server_nonce = auth::nonce();
    // Plain TCP tags its frames after the login when the client asks or this server's rule
    // says so (design §8); TLS protects its records itself.
    let tags = auth::TagsAgreed {
        asked: hello.tags,
        granted: shared.config.tls.is_none()
            && (hello.tags
                || shared
                    .config
                    .frame_tags
                    .wanted(wire.socket().peer_addr().ok())),
    };
    let challenge = Challenge {
        version: protocol::VERSION,
        server: format!("haar {} at {}", env!("CARGO_PKG_VERSION"), shared.name),
        nonce: server_nonce.clone(),
        tags: tags.granted,
    };
    wire.send(Kind::Challenge, 0, f.id, &to_meta(&challenge), &[])?;
    wire.flush()?;
    wire.read(Limits::PRELOGIN, &mut f)?;
    let proof = match (f.kind(), f.meta::<protocol::Auth>()) {
        (Some(Kind::Auth), Ok(a)) => a.proof,
        _ => {
            refuse(
                shared,
                RefusalCause::NotAHaarClient,
                wire,
                f.id,
                "expected AUTH".into(),
            )?;
            return Ok(None);
        }
    };
    let Some((access, token)) =
        shared
            .config
            .tokens
            .check(&proof, &server_nonce, &hello.nonce, tags)
    else {
        refuse(
            shared,
            RefusalCause::TokenRejected,
            wire,
            f.id,
            "token rejected: check HAAR_TOKEN (or --token-file) on the client against the server's \
             (a handshake altered in flight is refused the same way)"
                .into(),
        )?;
        return Ok(None);
    };
    // The store's whereabouts only to a client on this machine, and to a reader only what
    // reading needs (design §8).
    let same_host = match (&hello.host, boot_id()) {
        (Some(theirs), Some(ours)) => {
            auth::constant_time_eq(theirs, &auth::host_proof(&ours, &hello.nonce))
        }
        _ => false,
    };
    let local = match &shared.config.local {
        Some(_) if !same_host => None,
        Some(offer) if access == Access::ReadOnly => offer.for_reader(),
        offer => offer.clone(),
    };
    let welcome = protocol::Welcome {
        access,
        proof: auth::server_proof(token, &hello.nonce, &server_nonce, tags),
        local,
    };
    // From WELCOME on, every frame of both directions is tagged when agreed (design §8).
    if tags.granted {
        let keys = auth::frame_keys(token, &server_nonce, &hello.nonce);
        wire.seal(
            protocol::Sealer::new(keys.server_to_client),
            protocol::Sealer::new(keys.client_to_server),
        );
    }
    wire.send(Kind::Welcome, 0, f.id, &to_meta(&welcome), &[])?;
    wire.flush()?;
    Ok(Some(access))
}

/// True when the first byte from the peer is the start of a plain haar frame (`H` of `HAR1`)
/// rather than of a TLS record.
fn plain_haar_client(stream: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first), Ok(1)) && first[0] == protocol::MAGIC[0]
}

pub(super) fn connection(
    shared: &Arc<Shared>,
    stream: TcpStream,
    mut slot: Slot,
) -> Result<(), WireError> {
    let limits = shared.config.limits;
    let deadline = Instant::now() + limits.handshake_deadline;
    stream.set_nodelay(true)?;
    // Backstops: the deadline below ends the whole handshake.
    stream.set_read_timeout(Some(limits.handshake_deadline))?;
    stream.set_write_timeout(Some(limits.handshake_deadline))?;
    let fd = stream.as_raw_fd();
    // A TLS record starts with 0x16; a plain HELLO with the magic's 'H'. Tell a plain client
    // of a TLS server what to do instead of failing its handshake with a bare end of file.
    let plain_to_tls = shared.config.tls.is_some() && plain_haar_client(&stream);
    let conn: Box<dyn Conn> = match &shared.config.tls {
        Some(tls) if !plain_to_tls => {
            let sc = rustls::ServerConnection::new(tls.clone())
                .map_err(|e| io::Error::other(format!("TLS: {e}")))?;
            Box::new(rustls::StreamOwned::new(sc, stream))
        }
        _ => Box::new(stream),
    };
    let mut wire = Wire::new(conn);
    // Declared after `wire`, so disarmed before the socket is closed.
    let armed = shared.deadlines.arm(fd, deadline);
    if plain_to_tls {
        let mut f = Frame::default();
        let id = match wire.read(Limits::PRELOGIN, &mut f) {
            Ok(()) => f.id,
            Err(_) => 0,
        };
        refuse(
            shared,
            RefusalCause::TlsRequired,
            &mut wire,
            id,
            format!(
                "server {} accepts TLS only: connect with --tls-ca (the CA certificate that signed the server's)",
                shared.name
            ),
        )?;
        return Ok(());
    }
    let access = match handshake(shared, &mut wire) {
        Ok(a) => a,
        Err(e) if armed.expired() || timed_out(&e) => {
            shared.metrics.refused(RefusalCause::HandshakeTimeout);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "disconnected: no login within the handshake deadline of {:?} ({e})",
                    limits.handshake_deadline
                ),
            )
            .into());
        }
        Err(e) => return Err(e),
    };
    drop(armed);
    let Some(access) = access else {
        return Ok(());
    };
    slot.logged_in();
    tracing::Span::current().record("token", token_name(access));
    if let Ok(peer) = wire.socket().peer_addr() {
        tracing::info!(%peer, ?access, tls = shared.config.tls.is_some(), "logged in");
    }
    wire.set_read_timeout(Some(limits.idle_timeout))?;
    wire.set_write_timeout(Some(limits.write_timeout))?;
    let store = shared.open().map_err(|e| io::Error::other(e.to_string()))?;
    Session {
        shared: shared.clone(),
        wire,
        access,
        store,
        pending: Vec::new(),
        deferred: Vec::new(),
        deferred_code: 0,
        charged: 0,
    }
    .run()
    .map_err(|e| match e {
        // Reads that time out are reported as idle by `run`; what is left is a reply the
        // client stopped taking.
        WireError::Io(io) if io.kind() == io::ErrorKind::WouldBlock => io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "closed: the client took no byte of a reply for the write timeout of {:?} ({io})",
                limits.write_timeout
            ),
        )
        .into(),
        e => e,
    })
}
