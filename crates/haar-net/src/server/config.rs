//! What a server serves ([`Target`]), its security settings ([`ServerConfig`]), the bounds
//! it keeps hostile peers to ([`ServerLimits`]), and the same-host read offer it makes
//! ([`local_offer`]). Plain data and their defaults: no connection is handled here.

use std::sync::Arc;
use std::time::Duration;

use haar_core::request::Request;
use haar_store::{Backend, FieldStore, Store, StoreOptions};

use crate::auth::Tokens;
use crate::protocol::{self, Access, FieldValues, LocalOffer, Selection};

type Opener = dyn Fn() -> haar_store::Result<Box<dyn FieldStore>> + Send + Sync;

/// What a server serves.
pub enum Target {
    /// A local backend: every connection gets its own `Store` over it.
    Local {
        /// The shared backend.
        backend: Arc<dyn Backend>,
        /// Schema and normalisation context.
        options: StoreOptions,
    },
    /// Any front-end (e.g. a `dist` over other servers): `open` makes one handle per
    /// connection; `options` normalises keys for events and WATCH requests.
    Front {
        /// Makes a fresh handle.
        open: Box<Opener>,
        /// Schema and normalisation context used for events.
        options: StoreOptions,
    },
}

impl Target {
    /// Serves the backend of an existing local store, with its schema and context.
    pub fn from_store(store: &Store) -> Target {
        Target::Local {
            backend: store.backend().clone(),
            options: StoreOptions {
                schema: Arc::new(store.schema().clone()),
                context: store.context().clone(),
                merge: store.options().merge,
            },
        }
    }

    pub(super) fn options(&self) -> &StoreOptions {
        match self {
            Target::Local { options, .. } | Target::Front { options, .. } => options,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Target::Local { backend, .. } => format!("local {}", backend.describe()),
            Target::Front { .. } => "front-end".into(),
        }
    }
}

/// Security settings of a server.
#[derive(Clone, Default)]
pub struct ServerConfig {
    /// Accepted tokens; a server without any refuses every client.
    pub tokens: Tokens,
    /// TLS 1.3 when set.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Offered to clients for same-host reads ([`local_offer`]).
    pub local: Option<LocalOffer>,
    /// Bounds on connections, handshakes and idle peers.
    pub limits: ServerLimits,
    /// When plain-TCP connections tag their frames (design §8): by default when the client's
    /// address is not a loopback address or the client asks.
    pub frame_tags: protocol::FrameTags,
    /// What EXTRACT runs (design §8; `haar serve` gives the library's extraction). Without
    /// one, EXTRACT is answered "unsupported" and clients retrieve whole fields.
    pub extractor: Option<Arc<dyn Extractor>>,
}

/// The extraction a server runs for EXTRACT: values of every field of `req` at `sel` from
/// `store`, handed to `each` field by field in the order the store lists them (so a reply
/// streams, whatever the number of fields). An error of `each` (the client went away) ends
/// the extraction with that error.
pub trait Extractor: Send + Sync {
    /// Extracts; errors name the field (input errors: a range past the grid, a point outside
    /// it, a grid points cannot be resolved on).
    fn extract(
        &self,
        store: &dyn FieldStore,
        req: &Request,
        sel: &Selection,
        each: &mut dyn FnMut(FieldValues) -> haar_store::Result<()>,
    ) -> haar_store::Result<()>;
}

/// Bounds that keep hostile or broken peers from exhausting a server (design §8). The
/// defaults suit a node serving a few hundred producer and consumer processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections served at once (each holds a thread); more are refused at accept.
    pub max_connections: usize,
    /// Connections that have not completed the handshake, at once. When all are taken, a new
    /// connection drops the oldest one of the source (address) that holds the most.
    pub max_unauthenticated: usize,
    /// Connections from one source address that have not completed the handshake, at once: a
    /// new one from that source drops that source's oldest (which is sent REFUSED).
    pub max_unauthenticated_per_source: usize,
    /// Time from accept to WELCOME for the whole handshake (TLS included): a peer that has
    /// not logged in by then is disconnected, however it paces its bytes.
    pub handshake_deadline: Duration,
    /// A logged-in connection that sends no byte for this long is closed.
    pub idle_timeout: Duration,
    /// A reply that makes no progress for this long (a peer that stopped reading) closes the
    /// connection; a frame waits at most this long for its token's buffer memory.
    pub write_timeout: Duration,
    /// Bytes of frames being received that the server holds at once, over every connection
    /// (frames of at most [`SMALL_FRAME`] bytes are not counted). Split between the tokens:
    /// [`ServerLimits::max_buffered_read_only`] for the read-only token's connections, the rest
    /// for the read-write token's. A frame that would go over its token's share waits (at most
    /// the write timeout) for other frames of that token to be done, then is refused; one
    /// larger than the share is refused at once.
    pub max_buffered: u64,
    /// Of [`ServerLimits::max_buffered`], what the read-only token's connections may hold
    /// together (requests only: field bytes never come from them).
    pub max_buffered_read_only: u64,
}

impl ServerLimits {
    /// Default [`ServerLimits::max_connections`].
    pub const MAX_CONNECTIONS: usize = 1024;
    /// Default [`ServerLimits::max_unauthenticated`].
    pub const MAX_UNAUTHENTICATED: usize = 64;
    /// Default [`ServerLimits::handshake_deadline`].
    pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
    /// Default [`ServerLimits::idle_timeout`].
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
    /// Default [`ServerLimits::write_timeout`].
    pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
    /// Default [`ServerLimits::max_unauthenticated_per_source`].
    pub const MAX_UNAUTHENTICATED_PER_SOURCE: usize = 32;

    /// Default [`ServerLimits::max_buffered`]: a quarter of this machine's memory
    /// (`MemTotal`), or 1 GiB when it cannot be read.
    pub fn default_max_buffered() -> u64 {
        host_memory().map_or(1 << 30, |m| m / 4)
    }

    /// Default [`ServerLimits::max_buffered_read_only`]: a quarter of `max_buffered`.
    pub fn default_max_buffered_read_only(max_buffered: u64) -> u64 {
        max_buffered / 4
    }

    /// The buffer share of a token's connections.
    pub(super) fn share(&self, access: Access) -> u64 {
        let ro = self.max_buffered_read_only.min(self.max_buffered);
        match access {
            Access::ReadOnly => ro,
            _ => self.max_buffered - ro,
        }
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn host_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = (text.lines())
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

impl Default for ServerLimits {
    fn default() -> Self {
        let max_buffered = Self::default_max_buffered();
        ServerLimits {
            max_connections: Self::MAX_CONNECTIONS,
            max_unauthenticated: Self::MAX_UNAUTHENTICATED,
            max_unauthenticated_per_source: Self::MAX_UNAUTHENTICATED_PER_SOURCE,
            handshake_deadline: Self::HANDSHAKE_DEADLINE,
            idle_timeout: Self::IDLE_TIMEOUT,
            write_timeout: Self::WRITE_TIMEOUT,
            max_buffered,
            max_buffered_read_only: Self::default_max_buffered_read_only(max_buffered),
        }
    }
}

/// Frames of at most this many bytes (meta and data) are not charged to their token's buffer
/// share: the connection's own read buffer is this large, and their number is bounded by
/// [`ServerLimits::max_connections`].
pub const SMALL_FRAME: u64 = 64 << 10;

/// This machine's boot id (`/proc/sys/kernel/random/boot_id`), if the kernel gives one.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The same-host read offer for a store configuration (design §8): `None` for a backend other
/// processes cannot open (memory) or where the machine or root cannot be identified.
pub fn local_offer(cfg: &haar_store::Config, schema: Option<String>) -> Option<LocalOffer> {
    use std::os::unix::fs::MetadataExt;
    if !matches!(
        cfg.backend,
        haar_store::BackendKind::Pmem | haar_store::BackendKind::Posix
    ) {
        return None;
    }
    let meta = std::fs::metadata(cfg.roots.first()?).ok()?;
    Some(LocalOffer {
        boot_id: boot_id()?,
        dev: meta.dev(),
        ino: meta.ino(),
        store: serde_json::to_value(cfg).ok()?,
        schema,
    })
}
