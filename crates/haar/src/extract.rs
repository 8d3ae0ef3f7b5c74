//! Values of every field of a request at index ranges (or nearest to points), reading only the
//! bytes that hold them where the store can (design §16): the one function every face calls.
//!
//! Owns the choice of path: a local store (posix, pmem) is read by range through
//! [`Store::with_field_ranges`], with each field's jump record from the database's `jumps`
//! sidecar (computed from the field's leading bytes and appended there on first use); one
//! server (`remote`) is sent an EXTRACT and extracts with this same code on its side
//! ([`ServerExtractor`], design §8), so only the values travel; `dist` over several servers
//! asks each lane for the fields it holds, with dist's replicas and failover
//! (`DistStore::read_by_lane`), each server extracting its own; `select` extracts through
//! each route a retrieve would consult, each by its own path; any other store (FDB5, a server
//! that predates EXTRACT) retrieves whole fields and extracts from them. The decoding is
//! `haar_grib::jump`'s.
//!
//! ```
//! use haar::extract::{Selection, extract};
//! use haar_core::request::Request;
//! # let dir = tempfile::tempdir().unwrap();
//! # let opts = haar::OpenOptions {
//! #     config: haar::ConfigSource::Yaml { text: "backend: posix\n".into(), origin: "doc".into() },
//! #     root: Some(dir.path().into()), ..haar::OpenOptions::default() };
//! # let mut store = opts.field_store().unwrap();
//! let msg = haar_grib::jump::tests_support::simple_field(&[1.0, 2.0, f64::NAN, 4.0], 16);
//! let key = haar_core::Key::parse("class=od,expver=1,stream=oper,date=20261121,time=12,\
//!                                  domain=g,type=fc,levtype=sfc,step=0,param=167").unwrap();
//! store.archive(&key, &msg).unwrap();
//! store.flush().unwrap();
//! let out = extract(&*store, &Request::parse("param=167").unwrap(),
//!                   &Selection::Ranges(vec![(1, 3)])).unwrap();
//! assert_eq!(out[0].values[0][0], 2.0);
//! assert!(out[0].values[0][1].is_nan());
//! assert_eq!(out[0].method.as_str(), "jump");
//! ```

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use haar_core::Key;
use haar_core::request::Request;
/// How a field's values were found (re-exported so faces need not depend on `haar-grib`).
pub use haar_grib::jump::Method;
use haar_grib::jump::{self, ByteSource, JumpError, JumpInfo};
use haar_store::dist::{DistStore, SelectStore, requests_for};
use haar_store::format::DataRef;
use haar_store::{Error, FieldBytes, FieldStore, Result, Store};

use haar_net::protocol::FieldValues;
/// Which values of each field (the type an EXTRACT carries to a server).
pub use haar_net::protocol::Selection;

/// One field's values.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    /// The field's key as stored.
    pub key: Key,
    /// The ranges the values are of (for points: `[index, index + 1)` each).
    pub ranges: Vec<(u64, u64)>,
    /// Per range, its values in index order; NaN where the field has no value.
    pub values: Vec<Vec<f64>>,
    /// How they were found: [`Method::Jump`] read only their bytes;
    /// [`Method::WholeField`] decoded the whole field with ecCodes (its packing is not simple).
    pub method: Method,
    /// Bytes of the field read to find them.
    pub bytes_read: u64,
}

fn grib_error(key: &Key, e: JumpError) -> Error {
    Error::BadRequest {
        request: key.to_string(),
        reason: format!("cannot extract from this field: {e}").into(),
    }
}

/// The ranges `sel` means on the field of `info`.
fn ranges_of(key: &Key, sel: &Selection, info: Option<&JumpInfo>) -> Result<Vec<(u64, u64)>> {
    match sel {
        Selection::Ranges(r) => Ok(r.clone()),
        Selection::Points(points) => {
            let grid = info
                .and_then(|i| i.grid.as_ref())
                .ok_or_else(|| Error::BadRequest {
                    request: key.to_string(),
                    reason: "--points needs a regular lat/lon grid or a global Gaussian grid \
                         (reduced or regular) and this field's grid is another (limited-area \
                         Gaussian, projected, unstructured): give --ranges of grid indices"
                        .into(),
                })?;
            points
                .iter()
                .map(|&(lat, lon)| {
                    grid.nearest(lat, lon)
                        .map(|g| (g, g + 1))
                        .ok_or_else(|| Error::BadRequest {
                            request: key.to_string(),
                            reason: format!("point ({lat}, {lon}) is outside the field's grid")
                                .into(),
                        })
                })
                .collect()
        }
    }
}

/// Values of every field of `req` at `sel`, in the order the store lists (or retrieves) them;
/// fields the request names that are not stored are absent. Errors name the field.
pub fn extract(store: &dyn FieldStore, req: &Request, sel: &Selection) -> Result<Vec<Extracted>> {
    let mut out = Vec::new();
    extract_each(store, req, sel, &mut |e| {
        out.push(e);
        Ok(())
    })?;
    Ok(out)
}

/// As [`extract`], handing the fields to `each` one by one as they are found (a server streams
/// its reply this way).
pub fn extract_each(
    store: &dyn FieldStore,
    req: &Request,
    sel: &Selection,
    each: &mut dyn FnMut(Extracted) -> Result<()>,
) -> Result<()> {
    if let Some(local) = store.as_local() {
        return extract_local(local, req, sel, each);
    }
    if let Some(dist) = (store.as_any()).and_then(|a| a.downcast_ref::<DistStore>()) {
        return extract_dist(dist, req, sel, each);
    }
    if let Some(select) = (store.as_any()).and_then(|a| a.downcast_ref::<SelectStore>()) {
        return extract_select(select, req, sel, each);
    }
    let remote = (store.as_any()).and_then(|a| a.downcast_ref::<haar_net::RemoteStore>());
    if let Some(remote) = remote {
        let done = remote.extract(req, sel, &mut |v| each(from_wire(v)))?;
        if done.is_some() {
            return Ok(());
        }
        // The server does not extract (it predates EXTRACT): the fields travel whole.
    }
    extract_whole(store, req, sel, each)
}

/// Through `dist` (design §7.1): the request's keys grouped by the lane that holds them, each
/// group extracted by that lane (a server: one EXTRACT per product of keys, so only values
/// travel; a lane that does not extract: its fields whole), the lanes at once, with dist's
/// replicas and failover (`DistStore::read_by_lane`), handed on in the request's order.
fn extract_dist(
    dist: &DistStore,
    req: &Request,
    sel: &Selection,
    each: &mut dyn FnMut(Extracted) -> Result<()>,
) -> Result<()> {
    let (keys, _) = dist.request_keys(req)?;
    dist.read_by_lane(
        "extract from",
        keys,
        &|lane, keys, found| {
            for r in requests_for(keys) {
                extract_each(lane, &r, sel, &mut |e| {
                    found(e.key.clone(), e);
                    Ok(())
                })?;
            }
            Ok(())
        },
        &mut |_, e| each(e),
    )?;
    Ok(())
}

/// Through `select` (design §7): the request extracted through each route a retrieve of it
/// consults (`SelectStore::read_routes`), in route order, so a route that is a server or a
/// `dist` of servers extracts there and only values travel; a route that does not extract
/// sends its fields whole.
fn extract_select(
    select: &SelectStore,
    req: &Request,
    sel: &Selection,
    each: &mut dyn FnMut(Extracted) -> Result<()>,
) -> Result<()> {
    for route in select.read_routes(req) {
        extract_each(route, req, sel, each)?;
    }
    Ok(())
}

/// A field's values as a server sent them.
fn from_wire(v: FieldValues) -> Extracted {
    Extracted {
        key: v.key,
        ranges: v.ranges,
        values: v.values,
        method: if v.method == Method::Jump.as_str() {
            Method::Jump
        } else {
            Method::WholeField
        },
        bytes_read: v.bytes_read,
    }
}

/// What `haar serve` runs for EXTRACT (design §8): this module's extraction over the
/// server's own store, so a client gets the values a local extraction gives.
pub struct ServerExtractor;

impl haar_net::server::Extractor for ServerExtractor {
    fn extract(
        &self,
        store: &dyn FieldStore,
        req: &Request,
        sel: &Selection,
        each: &mut dyn FnMut(FieldValues) -> Result<()>,
    ) -> Result<()> {
        extract_each(store, req, sel, &mut |e| {
            each(FieldValues {
                key: e.key,
                ranges: e.ranges,
                values: e.values,
                method: e.method.as_str().to_string(),
                bytes_read: e.bytes_read,
            })
        })
    }
}

/// Through any store: each field retrieved whole, then decoded at the ranges.
fn extract_whole(
    store: &dyn FieldStore,
    req: &Request,
    sel: &Selection,
    each: &mut dyn FnMut(Extracted) -> Result<()>,
) -> Result<()> {
    store.retrieve(req, &mut |key, bytes, _crc| {
        each(from_message(key, bytes, sel)?)
    })?;
    Ok(())
}

fn from_message(key: &Key, bytes: &[u8], sel: &Selection) -> Result<Extracted> {
    let info = JumpInfo::parse(bytes).ok();
    let ranges = ranges_of(key, sel, info.as_ref())?;
    let (values, method) =
        jump::extract_from_message(bytes, &ranges).map_err(|e| grib_error(key, e))?;
    Ok(Extracted {
        key: key.clone(),
        ranges,
        values,
        method,
        bytes_read: bytes.len() as u64,
    })
}

/// A field's bytes through [`Store::with_field_ranges`]'s reader, counting what is read.
struct FieldSource<'a> {
    read: &'a dyn Fn(u64, u64) -> Result<FieldBytes>,
    /// pmem: the whole field lent from the mapping (no read happens until a byte is touched).
    lent: Option<FieldBytes>,
    length: u64,
    bytes_read: std::cell::Cell<u64>,
}

impl ByteSource for FieldSource<'_> {
    fn len(&self) -> u64 {
        self.length
    }
    fn bytes_at(&self, off: u64, len: usize) -> std::result::Result<Cow<'_, [u8]>, JumpError> {
        self.bytes_read.set(self.bytes_read.get() + len as u64);
        if let Some(all) = &self.lent {
            return (**all).bytes_at(off, len);
        }
        let b = (self.read)(off, len as u64).map_err(|e| JumpError::Read(e.to_string()))?;
        Ok(Cow::Owned(b.into_buffer()))
    }
}

type FieldId = (u64, u64, u64, u32);

fn field_id(d: &DataRef) -> FieldId {
    (d.object, d.offset, d.length, d.crc)
}

/// One database's `jumps` sidecar (design §16): the records read from it, and those to append.
struct Sidecar {
    path: Option<PathBuf>,
    known: HashMap<FieldId, JumpInfo>,
    new: Vec<u8>,
}

impl Sidecar {
    fn open(dir: Option<PathBuf>) -> Sidecar {
        let path = dir.map(|d| d.join("jumps"));
        let known = path
            .as_deref()
            .and_then(|p| std::fs::read(p).ok())
            .map(|b| parse_sidecar(&b))
            .unwrap_or_default();
        Sidecar {
            path,
            known,
            new: Vec::new(),
        }
    }

    fn remember(&mut self, d: &DataRef, info: &JumpInfo) {
        if self.path.is_some() {
            self.new.extend(sidecar_entry(d, info));
        }
        self.known.insert(field_id(d), info.clone());
    }

    /// Appends the new entries with one write; a cache, so a failure (a read-only store) only
    /// means the records are computed again next time.
    fn save(self) {
        let (Some(path), false) = (self.path, self.new.is_empty()) else {
            return;
        };
        // The catalogue directory exists once runs are written; the sidecar may come first.
        if path
            .parent()
            .is_none_or(|d| std::fs::create_dir_all(d).is_err())
        {
            return;
        }
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
        {
            let _ = f.write_all(&self.new);
        }
    }
}

/// A sidecar entry: length, the field's location and CRC, the record, a CRC of all that.
fn sidecar_entry(d: &DataRef, info: &JumpInfo) -> Vec<u8> {
    let rec = info.to_bytes();
    let len = (4 + 28 + rec.len() + 4) as u32;
    let mut e = Vec::with_capacity(len as usize);
    e.extend_from_slice(&len.to_le_bytes());
    e.extend_from_slice(&d.object.to_le_bytes());
    e.extend_from_slice(&d.offset.to_le_bytes());
    e.extend_from_slice(&d.length.to_le_bytes());
    e.extend_from_slice(&d.crc.to_le_bytes());
    e.extend_from_slice(&rec);
    let crc = haar_persist::crc32c(&e);
    e.extend_from_slice(&crc.to_le_bytes());
    e
}

/// The entries of a sidecar up to the first short or damaged one (a torn append).
fn parse_sidecar(mut b: &[u8]) -> HashMap<FieldId, JumpInfo> {
    let mut out = HashMap::new();
    while b.len() >= 4 {
        let len = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
        if len < 36 || len > b.len() {
            break;
        }
        let (e, rest) = b.split_at(len);
        let crc = u32::from_le_bytes(e[len - 4..].try_into().unwrap());
        if haar_persist::crc32c(&e[..len - 4]) != crc {
            break;
        }
        let u64_at = |o: usize| u64::from_le_bytes(e[o..o + 8].try_into().unwrap());
        let id = (
            u64_at(4),
            u64_at(12),
            u64_at(20),
            u32::from_le_bytes(e[28..32].try_into().unwrap()),
        );
        if let Ok(info) = JumpInfo::from_bytes(&e[32..len - 4]) {
            out.insert(id, info);
        }
        b = rest;
    }
    out
}

/// Through a local store: each field read by range, its record from the sidecar.
fn extract_local(
    store: &Store,
    req: &Request,
    sel: &Selection,
    each: &mut dyn FnMut(Extracted) -> Result<()>,
) -> Result<()> {
    let mut sidecars: HashMap<Key, Sidecar> = HashMap::new();
    for field in store.list(req)? {
        let key = field.key();
        if !sidecars.contains_key(&field.db) {
            let dir = store.catalogue_dir(&field.db)?;
            sidecars.insert(field.db.clone(), Sidecar::open(dir));
        }
        let sidecar = sidecars.get_mut(&field.db).unwrap();
        let known = sidecar
            .known
            .get(&field_id(&field.data))
            .filter(|i| i.message_length == field.data.length)
            .cloned();
        let done = store.with_field_ranges(&field, |read| -> Result<Option<Extracted>> {
            // pmem lends a range without reading it: lend the whole field once.
            let probe = read(0, field.data.length.min(1))?;
            let lent = matches!(probe, FieldBytes::Lent { .. })
                .then(|| read(0, field.data.length))
                .transpose()?;
            let src = FieldSource {
                read,
                lent,
                length: field.data.length,
                bytes_read: std::cell::Cell::new(0),
            };
            let (info, fresh) = match known {
                Some(i) => (i, false),
                None => match JumpInfo::parse(&src) {
                    Ok(i) => (i, true),
                    // Not parsable here: ecCodes on the whole field decides.
                    Err(_) => return Ok(None),
                },
            };
            if fresh {
                sidecar.remember(&field.data, &info);
            }
            if info.method != Method::Jump {
                return Ok(None);
            }
            let ranges = ranges_of(&key, sel, Some(&info))?;
            let values = info
                .extract(&src, &ranges)
                .map_err(|e| grib_error(&key, e))?;
            Ok(Some(Extracted {
                key: key.clone(),
                ranges,
                values,
                method: Method::Jump,
                bytes_read: src.bytes_read.get(),
            }))
        })?;
        match done.transpose()? {
            Some(Some(e)) => each(e)?,
            // Another packing, or the database went away meanwhile: the whole field.
            _ => {
                let Some((stored, bytes)) = store.retrieve_lent(&key)? else {
                    continue;
                };
                each(from_message(&stored, &bytes, sel)?)?;
            }
        }
    }
    for (_, s) in sidecars {
        s.save();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecar_entries_round_trip_and_a_torn_tail_is_ignored() {
        let msg = jump::tests_support::simple_field(&[1.0, f64::NAN, 3.0], 12);
        let info = JumpInfo::parse(&msg[..]).unwrap();
        let d = DataRef {
            object: 7,
            offset: 4096,
            length: msg.len() as u64,
            crc: 0xdead_beef,
        };
        let mut file = sidecar_entry(&d, &info);
        let one = file.len();
        file.extend(sidecar_entry(&DataRef { offset: 1, ..d }, &info));
        let got = parse_sidecar(&file);
        assert_eq!(got.len(), 2);
        assert_eq!(got[&field_id(&d)], info);
        // A torn second entry: the first still counts.
        let got = parse_sidecar(&file[..file.len() - 3]);
        assert_eq!(got.len(), 1);
        // A damaged first entry: nothing after it is trusted.
        file[one - 10] ^= 0xff;
        assert!(parse_sidecar(&file).is_empty());
    }
}
