//! Byte streams under the protocol: plain TCP or TLS 1.3 (rustls), and [`Wire`], the buffered
//! frame reader/writer both ends use. Owns socket options; knows nothing of messages.

use std::io::{self, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::protocol::{self, Frame, Header, Kind, Limits, Sealer, TAG_LEN, WireError};

/// A connected byte stream (plain or TLS) the protocol runs over.
pub trait Conn: Read + Write + Send {
    /// The underlying socket (for timeouts and shutdown).
    fn socket(&self) -> &TcpStream;
}

impl Conn for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

impl Conn for rustls::StreamOwned<rustls::ServerConnection, TcpStream> {
    fn socket(&self) -> &TcpStream {
        &self.sock
    }
}

impl Conn for rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    fn socket(&self) -> &TcpStream {
        &self.sock
    }
}

/// Small frames are gathered up to this size before a write; larger data parts go straight
/// from the caller's slice to the socket (no copy).
const GATHER: usize = 64 << 10;

/// Buffers larger than this are released after use instead of being kept for the next
/// frame: a connection idles on at most this much, however large its last frame was.
pub const RETAIN: usize = 16 << 20;

/// Buffered frame I/O over one connection.
pub struct Wire {
    r: BufReader<Box<dyn Conn>>,
    wbuf: Vec<u8>,
    /// Frame tags once [`Wire::seal`] is called: (frames sent, frames received).
    sealers: Option<(Sealer, Sealer)>,
}

impl Wire {
    /// Wraps a connection.
    pub fn new(conn: Box<dyn Conn>) -> Wire {
        Wire {
            r: BufReader::with_capacity(GATHER, conn),
            wbuf: Vec::with_capacity(GATHER),
            sealers: None,
        }
    }

    /// From now on every frame sent carries a tag under `send` and every frame read must
    /// carry a valid one under `receive` (design §8: plain TCP after the login).
    pub fn seal(&mut self, send: Sealer, receive: Sealer) {
        self.sealers = Some((send, receive));
    }

    /// The socket.
    pub fn socket(&self) -> &TcpStream {
        self.r.get_ref().socket()
    }

    /// Reads the next frame into `frame` (buffers reused).
    pub fn read(&mut self, limits: Limits, frame: &mut Frame) -> Result<(), WireError> {
        let (h, header) = self.read_header(limits)?;
        self.read_body(&h, &header, frame)
    }

    /// Reads the next header only (see [`protocol::read_header`]).
    pub fn read_header(
        &mut self,
        limits: Limits,
    ) -> Result<([u8; protocol::HEADER_LEN], Header), WireError> {
        protocol::read_header(&mut self.r, limits)
    }

    /// Reads the body of the frame whose header [`Wire::read_header`] returned, and on a
    /// sealed wire its tag, which must verify before the caller sees the frame.
    pub fn read_body(
        &mut self,
        h: &[u8; protocol::HEADER_LEN],
        header: &Header,
        frame: &mut Frame,
    ) -> Result<(), WireError> {
        protocol::read_body(&mut self.r, h, header, frame)?;
        if let Some((_, receive)) = &mut self.sealers {
            let mut tag = [0u8; TAG_LEN];
            self.r.read_exact(&mut tag)?;
            receive.open(h, &frame.meta, &frame.data, &tag)?;
        }
        Ok(())
    }

    /// Queues a frame; large data parts are written through at once. Call [`Wire::flush`] when
    /// a reply is expected.
    pub fn send(
        &mut self,
        kind: Kind,
        flags: u8,
        id: u64,
        meta: &[u8],
        data: &[u8],
    ) -> Result<(), WireError> {
        let h = protocol::encode_header(kind, flags, id, meta, data.len())?;
        let tag = self
            .sealers
            .as_mut()
            .map(|(send, _)| send.seal(&h, meta, data));
        self.wbuf.extend_from_slice(&h);
        self.wbuf.extend_from_slice(meta);
        if data.len() >= GATHER {
            let conn = self.r.get_mut();
            conn.write_all(&self.wbuf)?;
            self.wbuf.clear();
            conn.write_all(data)?;
        } else {
            self.wbuf.extend_from_slice(data);
        }
        if let Some(tag) = tag {
            self.wbuf.extend_from_slice(&tag);
        }
        if self.wbuf.len() >= GATHER {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes everything queued.
    pub fn flush(&mut self) -> io::Result<()> {
        let conn = self.r.get_mut();
        if !self.wbuf.is_empty() {
            conn.write_all(&self.wbuf)?;
            self.wbuf.clear();
            // A large reply (a LIST of many fields) does not keep its buffer for the life of
            // the connection.
            if self.wbuf.capacity() > RETAIN {
                self.wbuf = Vec::with_capacity(GATHER);
            }
        }
        conn.flush()
    }

    /// Sets (or clears) the write timeout.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.socket().set_write_timeout(t)
    }

    /// Sets (or clears) the read timeout.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.socket().set_read_timeout(t)
    }
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read TLS {what} {}: {e}", path.display()))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS 1.3 server configuration from a PEM certificate chain and private key.
pub fn tls_server(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = CertificateDer::pem_slice_iter(&read_pem(cert, "certificate")?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("TLS certificate {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "TLS certificate {} holds no PEM certificate",
            cert.display()
        ));
    }
    let key_der = PrivateKeyDer::from_pem_slice(&read_pem(key, "key")?).map_err(|e| match e {
        pem::Error::NoItemsFound => {
            format!("TLS key {} holds no PEM private key", key.display())
        }
        e => format!("TLS key {}: {e}", key.display()),
    })?;
    let cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| {
            format!(
                "TLS certificate {} / key {}: {e}",
                cert.display(),
                key.display()
            )
        })?;
    Ok(Arc::new(cfg))
}

/// A TLS 1.3 client configuration trusting the certificates (CA or the server's own) in `ca`.
pub fn tls_client(ca: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&read_pem(ca, "CA certificate")?) {
        let c = c.map_err(|e| format!("TLS CA {}: {e}", ca.display()))?;
        roots
            .add(c)
            .map_err(|e| format!("TLS CA {}: {e}", ca.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("TLS CA {} holds no PEM certificate", ca.display()));
    }
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}
