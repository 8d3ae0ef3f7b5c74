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
    /// Why, as a client acts on it (absent from servers before 2026-11-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<RefusalCause>,
}

/// Why a connection did not get to log in: `REFUSED`'s `cause` on the wire and the `cause`
/// label of `haar_logins_refused_total` (design §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalCause {
    /// `max_connections` connections were open.
    Busy,
    /// Dropped before login for a newer connection (pre-login bounds): trying again soon
    /// is likely to pass.
    PreloginDropped,
    /// No login within the handshake deadline.
    HandshakeTimeout,
    /// The peer did not speak haar's handshake (no HELLO, no AUTH, or a bad one).
    NotAHaarClient,
    /// The client speaks another protocol version.
    VersionMismatch,
    /// The token's proof did not match.
    TokenRejected,
    /// A plain-TCP client of a TLS-only server.
    TlsRequired,
    /// A cause this build does not know (a newer server's).
    #[serde(other)]
    Other,
}

impl RefusalCause {
    /// Its name on the wire and in metrics.
    pub fn label(self) -> &'static str {
        match self {
            RefusalCause::Busy => "busy",
            RefusalCause::PreloginDropped => "prelogin_dropped",
            RefusalCause::HandshakeTimeout => "handshake_timeout",
            RefusalCause::NotAHaarClient => "not_a_haar_client",
            RefusalCause::VersionMismatch => "version_mismatch",
            RefusalCause::TokenRejected => "token_rejected",
            RefusalCause::TlsRequired => "tls_required",
            RefusalCause::Other => "other",
        }
    }
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
    /// LIST: the version of the masked listing asked for ([`MASKED_LIST_VERSION`]; 0, absent:
    /// a plain listing). Older servers skip the field; a client tells them by the reply.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub masked: u32,
}

/// The version of LIST's masked listing this build speaks (design §8, "Masked copies").
pub const MASKED_LIST_VERSION: u32 = 1;

/// The version of READ_LOCATED this build speaks.
pub const READ_LOCATED_VERSION: u32 = 1;

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// `END` of LIST: the fields, and for a masked listing the version answered (absent from a
/// server that predates masked listings, which answered a plain one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListEnd {
    /// The fields; with `masked`, each followed by its key's masked copies, newest first.
    pub fields: Vec<ListedField>,
    /// The masked listing's version answered; 0 (absent) for a plain listing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub masked: u32,
}

/// Meta of READ_LOCATED: a location a listing gave (design §8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocatedMeta {
    /// [`READ_LOCATED_VERSION`].
    pub version: u32,
    /// The database key.
    pub db: Key,
    /// Data object on the server.
    pub object: u64,
    /// Offset in it.
    pub offset: u64,
    /// Length.
    pub length: u64,
    /// The CRC-32C the listing gave: other bytes there are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc: Option<u32>,
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
    /// A masked copy of the key of the field before it (masked listings only).
    #[serde(default, skip_serializing_if = "is_false")]
    pub masked: bool,
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
            masked: false,
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

/// The version of EXTRACT and VALUES this build speaks (design §8, "EXTRACT").
pub const EXTRACT_VERSION: u32 = 1;

/// Which values of each field an EXTRACT asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// Half-open ranges `[i, j)` of grid indices, as `pygribjump` counts them.
    Ranges(Vec<(u64, u64)>),
    /// Points (latitude, longitude) in degrees, each resolved per field to its nearest grid
    /// index (regular lat/lon and global Gaussian grids).
    Points(Vec<(f64, f64)>),
}

/// `EXTRACT`: exactly one of `ranges` and `points`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractMeta {
    /// [`EXTRACT_VERSION`] of the sender.
    pub version: u32,
    /// The MARS request in its text form.
    pub request: String,
    /// Half-open grid index ranges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Vec<(u64, u64)>>,
    /// Points (latitude, longitude) in degrees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<Vec<(f64, f64)>>,
}

impl ExtractMeta {
    /// The request for `sel` of the fields of `request`.
    pub fn new(request: String, sel: &Selection) -> ExtractMeta {
        let (ranges, points) = match sel {
            Selection::Ranges(r) => (Some(r.clone()), None),
            Selection::Points(p) => (None, Some(p.clone())),
        };
        ExtractMeta {
            version: EXTRACT_VERSION,
            request,
            ranges,
            points,
        }
    }

    /// The selection, or why there is none (neither or both given, a range that ends before
    /// it starts, a point that is not finite).
    pub fn selection(&self) -> Result<Selection, String> {
        match (&self.ranges, &self.points) {
            (Some(r), None) => match r.iter().find(|(i, j)| j < i) {
                Some((i, j)) => Err(format!("range [{i}, {j}) ends before it starts")),
                None => Ok(Selection::Ranges(r.clone())),
            },
            (None, Some(p)) => match p.iter().find(|(a, b)| !a.is_finite() || !b.is_finite()) {
                Some((a, b)) => Err(format!(
                    "point ({a}, {b}) is not a finite latitude, longitude"
                )),
                None => Ok(Selection::Points(p.clone())),
            },
            _ => Err("EXTRACT needs exactly one of `ranges` and `points`".into()),
        }
    }
}

/// One field's values as a VALUES frame carries them (meta [`ValuesMeta`], data the values).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldValues {
    /// The field's key as stored.
    pub key: Key,
    /// The ranges the values are of (for points: `[index, index + 1)` each).
    pub ranges: Vec<(u64, u64)>,
    /// Per range, its values in index order; NaN where the field has no value.
    pub values: Vec<Vec<f64>>,
    /// How the server found them: `jump` or `eccodes-whole-field` (design §16).
    pub method: String,
    /// Bytes of the field the server read to find them.
    pub bytes_read: u64,
}

/// `VALUES` meta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValuesMeta {
    /// [`EXTRACT_VERSION`] of the server.
    pub version: u32,
    /// The field's key as stored.
    pub key: Key,
    /// The ranges the values are of, in the order of the data; absent when they are the
    /// EXTRACT's own `ranges` (only resolved points travel: a range list echoed per field
    /// would outweigh 100 single values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Vec<(u64, u64)>>,
    /// `jump` or `eccodes-whole-field`.
    pub method: String,
    /// Bytes of the field read on the server.
    pub bytes_read: u64,
    /// CRC-32C of the data part.
    pub crc: u32,
}

impl FieldValues {
    /// The VALUES meta and data: every value of every range, in range order, f64
    /// little-endian, under a CRC-32C; the ranges are left out when they are `asked`.
    pub fn encode(&self, asked: &Selection) -> (ValuesMeta, Vec<u8>) {
        let n: usize = self.values.iter().map(Vec::len).sum();
        let mut data = Vec::with_capacity(n * 8);
        for v in self.values.iter().flatten() {
            data.extend_from_slice(&v.to_le_bytes());
        }
        let meta = ValuesMeta {
            version: EXTRACT_VERSION,
            key: self.key.clone(),
            ranges: match asked {
                Selection::Ranges(r) if *r == self.ranges => None,
                _ => Some(self.ranges.clone()),
            },
            method: self.method.clone(),
            bytes_read: self.bytes_read,
            crc: haar_persist::crc32c(&data),
        };
        (meta, data)
    }

    /// The values of a VALUES frame in reply to an EXTRACT of `asked`, or why they cannot be
    /// trusted (a CRC that does not match, a length that is not the ranges' values).
    pub fn decode(meta: ValuesMeta, data: &[u8], asked: &Selection) -> Result<FieldValues, String> {
        let crc = haar_persist::crc32c(data);
        if crc != meta.crc {
            return Err(format!(
                "values of {} damaged in transit: CRC-32C {crc:#010x}, the server sent {:#010x}",
                meta.key, meta.crc
            ));
        }
        let ranges = match (meta.ranges, asked) {
            (Some(r), _) => r,
            (None, Selection::Ranges(r)) => r.clone(),
            (None, Selection::Points(_)) => {
                return Err(format!(
                    "values of {} without their points' ranges",
                    meta.key
                ));
            }
        };
        let counts: Vec<u64> = ranges.iter().map(|(i, j)| j.saturating_sub(*i)).collect();
        let total: u64 = counts.iter().sum();
        if total.checked_mul(8) != Some(data.len() as u64) {
            return Err(format!(
                "values of {}: {} data bytes for ranges holding {total} values",
                meta.key,
                data.len()
            ));
        }
        let mut chunks = data
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()));
        let values = counts
            .iter()
            .map(|&c| chunks.by_ref().take(c as usize).collect())
            .collect();
        Ok(FieldValues {
            key: meta.key,
            ranges,
            values,
            method: meta.method,
            bytes_read: meta.bytes_read,
        })
    }
}

/// `END` of EXTRACT.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtractEnd {
    /// Fields whose values were sent.
    pub found: u64,
    /// Values sent.
    pub values: u64,
}

/// The start of the message of an ERROR that means "this server does not extract" (it
/// predates EXTRACT, has no extractor, or speaks another EXTRACT version): the client falls
/// back to retrieving whole fields on it, and on nothing else.
pub fn extract_unsupported_prefix() -> String {
    format!(
        "unknown or unexpected request kind {}",
        crate::protocol::Kind::Extract as u8
    )
}

#[cfg(test)]
mod extract_tests {
    use super::*;

    fn values() -> FieldValues {
        FieldValues {
            key: Key::parse("class=od,param=167").unwrap(),
            ranges: vec![(3, 5), (9, 10)],
            values: vec![vec![1.5, f64::NAN], vec![-0.0]],
            method: "jump".into(),
            bytes_read: 12,
        }
    }

    #[test]
    fn values_round_trip_bit_for_bit_and_echo_ranges_only_for_points() {
        let v = values();
        let asked = Selection::Ranges(v.ranges.clone());
        let (meta, data) = v.encode(&asked);
        assert_eq!(meta.ranges, None);
        assert_eq!(data.len(), 3 * 8);
        assert_eq!(data[..8], 1.5f64.to_le_bytes());
        let back = FieldValues::decode(meta, &data, &asked).unwrap();
        let bits = |v: &FieldValues| -> Vec<u64> {
            v.values.concat().iter().map(|x| x.to_bits()).collect()
        };
        assert_eq!(bits(&back), bits(&v));
        assert_eq!(back.ranges, v.ranges);
        // Points: the resolved ranges travel.
        let points = Selection::Points(vec![(1.0, 2.0), (3.0, 4.0)]);
        let (meta, data) = v.encode(&points);
        assert_eq!(meta.ranges.as_deref(), Some(&v.ranges[..]));
        assert_eq!(
            FieldValues::decode(meta, &data, &points).unwrap().ranges,
            v.ranges
        );
    }

    #[test]
    fn damaged_or_short_values_are_refused() {
        let v = values();
        let asked = Selection::Ranges(v.ranges.clone());
        let (meta, mut data) = v.encode(&asked);
        data[3] ^= 1;
        let e = FieldValues::decode(meta.clone(), &data, &asked).unwrap_err();
        assert!(e.contains("damaged in transit"), "{e}");
        let short = &data[..16];
        let m = ValuesMeta {
            crc: haar_persist::crc32c(short),
            ..meta
        };
        let e = FieldValues::decode(m, short, &asked).unwrap_err();
        assert!(
            e.contains("16 data bytes for ranges holding 3 values"),
            "{e}"
        );
    }

    #[test]
    fn an_extract_asks_for_exactly_one_valid_selection() {
        let m = ExtractMeta::new("param=167".into(), &Selection::Ranges(vec![(0, 2)]));
        let text = String::from_utf8(crate::protocol::to_meta(&m)).unwrap();
        assert_eq!(
            text,
            r#"{"version":1,"request":"param=167","ranges":[[0,2]]}"#
        );
        assert_eq!(m.selection(), Ok(Selection::Ranges(vec![(0, 2)])));
        let bad = |m: ExtractMeta| m.selection().unwrap_err();
        assert!(
            bad(ExtractMeta {
                ranges: Some(vec![(5, 4)]),
                ..m.clone()
            })
            .contains("ends before")
        );
        assert!(
            bad(ExtractMeta {
                points: Some(vec![]),
                ..m.clone()
            })
            .contains("exactly one")
        );
        assert!(
            bad(ExtractMeta {
                ranges: None,
                ..m.clone()
            })
            .contains("exactly one")
        );
        let nan = ExtractMeta {
            ranges: None,
            points: Some(vec![(f64::NAN, 0.0)]),
            ..m
        };
        assert!(bad(nan).contains("not a finite"));
        // What a server that predates EXTRACT answers is "unsupported" to the client.
        assert!(
            "unknown or unexpected request kind 27 (unknown)"
                .starts_with(&extract_unsupported_prefix())
        );
    }
}

#[cfg(test)]
mod refused_tests {
    use super::*;

    #[test]
    fn a_refusal_carries_its_cause_by_name_and_reads_without_one() {
        let r = Refused {
            reason: "server a:1 is busy: … the oldest is dropped for the newest".into(),
            cause: Some(RefusalCause::PreloginDropped),
        };
        let json = String::from_utf8(crate::protocol::to_meta(&r)).unwrap();
        assert!(json.contains(r#""cause":"prelogin_dropped""#), "{json}");
        let back: Refused = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        // An older server sends no cause; a newer one may send a cause this build lacks.
        let old: Refused = serde_json::from_str(r#"{"reason":"busy"}"#).unwrap();
        assert_eq!(old.cause, None);
        let newer: Refused =
            serde_json::from_str(r#"{"reason":"x","cause":"quota_exceeded"}"#).unwrap();
        assert_eq!(newer.cause, Some(RefusalCause::Other));
        assert_eq!(newer.reason, "x");
        // Older clients ignore the field: a cause-less refusal has no `cause` key at all.
        let plain = Refused {
            reason: "x".into(),
            cause: None,
        };
        assert!(
            !String::from_utf8(crate::protocol::to_meta(&plain))
                .unwrap()
                .contains("cause")
        );
    }
}
