//! The JSON bodies (meta) of every message of design §8, and their conversions to and from
//! the store's types. Pure data: no I/O, no framing (that is the parent module's).

use haar_core::Key;
use serde::{Deserialize, Serialize};

/// `HELLO`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Protocol version the client speaks.
    pub version: u32,
    /// Free text: program and version.
    pub client: String,
    /// 32 random bytes, hex.
    pub nonce: String,
    /// Same-host evidence ([`crate::auth::host_proof`] of this machine's boot id and the
    /// nonce): a server offers its store for same-host reads only when it matches its own.
    /// Absent when the client's machine has no boot id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The client asks for frame tags (its server's address is not a loopback address, or it
    /// is configured to always tag). Bound into both proofs, so it cannot be stripped in flight.
    #[serde(default)]
    pub tags: bool,
}

/// `CHALLENGE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    /// Protocol version the server speaks.
    pub version: u32,
    /// Free text: program and version.
    pub server: String,
    /// 32 random bytes, hex.
    pub nonce: String,
    /// Frames after the login carry tags: the client asked, or the server's rule says so
    /// (its peer is not a loopback address, or it always tags). Bound into both proofs.
    #[serde(default)]
    pub tags: bool,
}

/// `AUTH`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Auth {
    /// hex HMAC-SHA256 (see [`crate::auth`]).
    pub proof: String,
}

/// What a connection may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Reads only.
    ReadOnly,
    /// Reads and writes.
    ReadWrite,
}

/// `WELCOME`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// What the token allows.
    pub access: Access,
    /// The server's proof that it knows the token too.
    pub proof: String,
    /// Where the server's store is, for clients on the same machine (design §8, same-host
    /// reads): only to a client whose HELLO proved the same boot id, and to a read-only token
    /// only what opening it for reading needs ([`LocalOffer::for_reader`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalOffer>,
}

/// A server's store, as a client on the same machine can open it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalOffer {
    /// `/proc/sys/kernel/random/boot_id` of the server's machine.
    pub boot_id: String,
    /// Device of the store's first root.
    pub dev: u64,
    /// Inode of the store's first root.
    pub ino: u64,
    /// The store configuration (`haar_store::Config`).
    pub store: serde_json::Value,
    /// Schema text; absent for the built-in schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
}

impl LocalOffer {
    /// The offer cut to what a reader needs to open the store: the backend and its roots
    /// (every other setting at its default, no schema path: the schema text travels
    /// separately). `None` if the configuration does not parse.
    pub fn for_reader(&self) -> Option<LocalOffer> {
        let full: haar_store::Config = serde_json::from_value(self.store.clone()).ok()?;
        let reader = haar_store::Config {
            backend: full.backend,
            roots: full.roots,
            ..haar_store::Config::default()
        };
        Some(LocalOffer {
            store: serde_json::to_value(&reader).ok()?,
            ..self.clone()
        })
    }
}

/// `REFUSED` (and `ERROR` before a request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    /// Why, and what to do.
    pub reason: String,
}

/// `ARCHIVE` and `FIELD`: a key and the CRC-32C of the data part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldMeta {
    /// The field key (as archived, or the stored full key on retrieve).
    pub key: Key,
    /// CRC-32C of the data part, checked end to end.
    pub crc: u32,
}

/// Body of `RETRIEVE`, `LIST`, `AXES`, `STATS`, `WIPE`, `PURGE`, `WATCH`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestMeta {
    /// The MARS request in its text form.
    pub request: String,
    /// WIPE / PURGE: really do it.
    #[serde(default)]
    pub doit: bool,
}

/// Meta of RETRIEVE_KEYS: the keys whose fields to send, each matched as a one-key request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeysMeta {
    /// The keys, in the order their fields are sent.
    pub keys: Vec<Key>,
}

/// `OK` (reply to FLUSH).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushOk {
    /// Fields made durable and visible by this flush.
    pub fields: u64,
}

/// `EVENT`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventMeta {
    /// Full key of the flushed field (normalised, schema order).
    pub key: Key,
    /// Field length in bytes.
    pub length: u64,
    /// Position in the server's event log (replayed fields carry the log position at which
    /// the subscription started).
    pub seq: u64,
    /// True for fields flushed before the subscription (sent first).
    #[serde(default)]
    pub replay: bool,
    /// CRC-32C of the field bytes: with the key it names one version of a field, so a client
    /// watching replicas (or a restarted server's replay) reports it once. Absent from
    /// servers older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc: Option<u32>,
}

/// `ERROR`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorMeta {
    /// What went wrong and what to do.
    pub message: String,
    /// The class of failure as a code ([`class_code`]): 1 input, 2 missing, 3 storage.
    pub exit_code: i32,
}

/// The code an ERROR carries for a class of failure: 1 input, 2 missing, 3 storage (the
/// CLI's exit statuses, which is why the field is called `exit_code`).
pub fn class_code(c: haar_store::Class) -> i32 {
    match c {
        haar_store::Class::Input => 1,
        haar_store::Class::Missing => 2,
        _ => 3,
    }
}

impl ErrorMeta {
    /// The ERROR for a store error.
    pub fn from_error(e: &haar_store::Error) -> ErrorMeta {
        ErrorMeta {
            message: e.to_string(),
            exit_code: class_code(e.class()),
        }
    }

    /// The class of failure the code stands for (an unknown code counts as storage).
    pub fn class(&self) -> haar_store::Class {
        match self.exit_code {
            1 => haar_store::Class::Input,
            2 => haar_store::Class::Missing,
            _ => haar_store::Class::Storage,
        }
    }
}

/// One listed field (`END` of LIST carries `{fields: [..]}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedField {
    /// Database key.
    pub db: Key,
    /// Index key.
    pub index: Key,
    /// Datum key.
    pub datum: Key,
    /// Where the bytes are on the server.
    pub object: u64,
    /// Offset on the server.
    pub offset: u64,
    /// Length.
    pub length: u64,
    /// CRC-32C.
    pub crc: u32,
}

impl From<&haar_store::Field> for ListedField {
    fn from(f: &haar_store::Field) -> Self {
        ListedField {
            db: f.db.clone(),
            index: f.index.clone(),
            datum: f.datum.clone(),
            object: f.data.object,
            offset: f.data.offset,
            length: f.data.length,
            crc: f.data.crc,
        }
    }
}

impl From<ListedField> for haar_store::Field {
    fn from(f: ListedField) -> Self {
        haar_store::Field {
            db: f.db,
            index: f.index,
            datum: f.datum,
            data: haar_store::format::DataRef {
                object: f.object,
                offset: f.offset,
                length: f.length,
                crc: f.crc,
            },
        }
    }
}

/// `END` of RETRIEVE.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetrieveEnd {
    /// Fields delivered.
    pub found: usize,
    /// Bytes delivered.
    pub bytes: u64,
    /// Combinations with no field.
    pub missing: Vec<Key>,
    /// Keywords ignored.
    pub ignored: Vec<String>,
    /// Damage found.
    pub problems: Vec<String>,
}

impl From<&haar_store::RetrieveReport> for RetrieveEnd {
    fn from(r: &haar_store::RetrieveReport) -> Self {
        RetrieveEnd {
            found: r.found,
            bytes: r.bytes,
            missing: r.missing.clone(),
            ignored: r.ignored.clone(),
            problems: r.problems.clone(),
        }
    }
}

impl From<RetrieveEnd> for haar_store::RetrieveReport {
    fn from(r: RetrieveEnd) -> Self {
        haar_store::RetrieveReport {
            found: r.found,
            bytes: r.bytes,
            missing: r.missing,
            ignored: r.ignored,
            problems: r.problems,
        }
    }
}

/// `END` of WIPE (mirrors `haar_store::WipeReport`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WipeEnd {
    /// Databases removed.
    pub databases: Vec<String>,
    /// Fields removed.
    pub fields: usize,
    /// Bytes removed.
    pub bytes: u64,
}

/// `END` of PURGE (mirrors `haar_store::PurgeReport`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeEnd {
    /// Databases examined.
    pub databases: usize,
    /// Fields dropped.
    pub dropped_fields: u64,
    /// Bytes those held.
    pub dropped_bytes: u64,
    /// Bytes freed.
    pub freed_bytes: u64,
}

/// One database in the `END` of STATS (mirrors `haar_store::DbStats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsEntry {
    /// Database key.
    pub db: String,
    /// Live fields.
    pub fields: u64,
    /// Live bytes.
    pub bytes: u64,
    /// Dead fields.
    pub dead_fields: u64,
    /// Dead bytes.
    pub dead_bytes: u64,
    /// Problems.
    pub problems: Vec<String>,
}

impl From<haar_store::DbStats> for StatsEntry {
    fn from(s: haar_store::DbStats) -> Self {
        StatsEntry {
            db: s.db,
            fields: s.fields,
            bytes: s.bytes,
            dead_fields: s.dead_fields,
            dead_bytes: s.dead_bytes,
            problems: s.problems,
        }
    }
}

impl From<StatsEntry> for haar_store::DbStats {
    fn from(s: StatsEntry) -> Self {
        haar_store::DbStats {
            db: s.db,
            fields: s.fields,
            bytes: s.bytes,
            dead_fields: s.dead_fields,
            dead_bytes: s.dead_bytes,
            problems: s.problems,
        }
    }
}
