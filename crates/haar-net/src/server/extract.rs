//! EXTRACT on the server (design §8, issue 29): values at index ranges (or nearest to points)
//! of the fields of a request, extracted from the server's own store so that only the values
//! travel, one VALUES frame per field.
//!
//! The extraction itself is not here: it is the library's (`haar::extract`, which sits above
//! this crate), handed to the server as its [`super::Extractor`] by `haar serve`. This file owns the
//! request's checks, the bounds, and the framing of the reply; it must not decode GRIB.

use haar_core::request::Request;

use super::session::Session;
use crate::protocol::{
    EXTRACT_VERSION, ErrorMeta, ExtractEnd, ExtractMeta, FLAG_END, FieldValues, Frame, Kind,
    MAX_DATA, Selection, extract_unsupported_prefix, to_meta,
};

fn input(message: String) -> ErrorMeta {
    ErrorMeta {
        message,
        exit_code: 1,
    }
}

impl Session {
    /// EXTRACT: the values of each field as a VALUES frame, then END. A read-only request:
    /// either token may send it.
    pub(super) fn extract(&mut self, f: &Frame) -> Result<(), ErrorMeta> {
        let unsupported = extract_unsupported_prefix();
        let Some(extractor) = self.shared.config.extractor.clone() else {
            return Err(input(format!(
                "{unsupported} (EXTRACT): this server was started without an extractor; \
                 retrieve the fields instead"
            )));
        };
        let m: ExtractMeta = f.meta().map_err(|e| input(e.to_string()))?;
        if m.version != EXTRACT_VERSION {
            return Err(input(format!(
                "{unsupported} (EXTRACT version {}): this server speaks EXTRACT version \
                 {EXTRACT_VERSION}",
                m.version
            )));
        }
        let sel = m.selection().map_err(input)?;
        let req = Request::parse(&m.request)
            .map_err(|e| input(format!("request {:?}: {e}", m.request)))?;
        let per_field: u64 = match &sel {
            Selection::Ranges(r) => (r.iter()).fold(0u64, |n, (i, j)| n.saturating_add(j - i)),
            Selection::Points(p) => p.len() as u64,
        };
        if per_field.saturating_mul(8) > u64::from(MAX_DATA) {
            return Err(input(format!(
                "EXTRACT of {per_field} values per field: a field's values travel in one frame \
                 of at most {MAX_DATA} bytes ({} values); ask for fewer ranges at a time",
                MAX_DATA / 8
            )));
        }
        let (id, wire, store) = (f.id, &mut self.wire, self.store.as_ref());
        let (mut end, mut sent) = (ExtractEnd::default(), 0u64);
        let r = extractor.extract(store, &req, &sel, &mut |v: FieldValues| {
            let (meta, data) = v.encode(&sel);
            wire.send(Kind::Values, 0, id, &to_meta(&meta), &data)
                .map_err(|e| {
                    let peer = (wire.socket().peer_addr())
                        .map_or_else(|_| "client".into(), |a| a.to_string());
                    haar_store::Error::net("send to", peer, std::io::Error::other(e))
                })?;
            end.found += 1;
            end.values += data.len() as u64 / 8;
            sent += data.len() as u64;
            Ok(())
        });
        self.shared.metrics.sent(Kind::Extract, sent);
        r.map_err(|e| ErrorMeta::from_error(&e))?;
        self.wire
            .send(Kind::End, FLAG_END, id, &to_meta(&end), &[])
            .map_err(|e| ErrorMeta {
                message: e.to_string(),
                exit_code: 3,
            })
    }
}
