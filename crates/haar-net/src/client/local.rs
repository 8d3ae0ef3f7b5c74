//! Same-host reads (design §8): a client on the server's machine opens the store the server
//! offers in WELCOME and serves retrieves from it while the connection is up. Owns the checks
//! that the offer names this very store (boot id, device and inode); never creates a pool.

use std::sync::Arc;

use haar_store::StoreOptions;

use crate::protocol::LocalOffer;

/// A store opened from a server's same-host offer.
pub(super) struct LocalStore {
    pub(super) offer: LocalOffer,
    pub(super) store: Option<haar_store::Store>,
}

/// Opens the store a server offers, if it is on this machine: the same boot id, and the
/// root this process sees is the very directory the server named (device and inode).
pub(super) fn open_offer(offer: &LocalOffer) -> Option<haar_store::Store> {
    use std::os::unix::fs::MetadataExt;
    if crate::server::boot_id().as_deref() != Some(offer.boot_id.as_str()) {
        return None;
    }
    let mut cfg: haar_store::Config = serde_json::from_value(offer.store.clone()).ok()?;
    // A reader: never reserve heap for writing when opening.
    cfg.pool_prefault = haar_store::pmem::Prefault::Create;
    let meta = std::fs::metadata(cfg.roots.first()?).ok()?;
    if (meta.dev(), meta.ino()) != (offer.dev, offer.ino) {
        return None;
    }
    if cfg.backend == haar_store::BackendKind::Pmem
        && !cfg.roots[0].join(haar_store::pmem::POOL_FILE).is_file()
    {
        return None; // never create a pool here
    }
    let mut opts = StoreOptions::default();
    if let Some(text) = &offer.schema {
        opts.schema = Arc::new(haar_core::schema::Schema::parse(text).ok()?);
    }
    // As the server splits (design §15.6): a mount's records read from the pool directly.
    opts.schema = Arc::new(opts.schema.with_files_rule());
    let backend = cfg.open_backend().ok()?;
    Some(haar_store::Store::with_options(backend, opts))
}
