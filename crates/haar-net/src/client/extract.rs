//! EXTRACT from the client's side (design §8, issue 29): the server extracts values at index
//! ranges (or nearest to points) and only the values travel. Owns the request and the checks
//! of the VALUES frames; the connection handling is [`RemoteStore`]'s.

use haar_core::request::Request;
use haar_store::{Error, Result};

use super::remote::{CallError, RemoteStore};
use crate::protocol::{
    ExtractEnd, ExtractMeta, FieldValues, Frame, Kind, Selection, ValuesMeta,
    extract_unsupported_prefix, to_meta,
};

impl RemoteStore {
    /// The values of every field of `req` at `sel`, extracted by the server and handed to
    /// `each` field by field, each checked against the CRC-32C the server sent. `Ok(None)`
    /// when the server does not extract (it predates EXTRACT, has no extractor or speaks
    /// another version of it): nothing was handed to `each`, and the caller retrieves the
    /// fields whole instead.
    pub fn extract(
        &self,
        req: &Request,
        sel: &Selection,
        each: &mut dyn FnMut(FieldValues) -> Result<()>,
    ) -> Result<Option<ExtractEnd>> {
        let meta = to_meta(&ExtractMeta::new(req.to_string(), sel));
        let addr = self.addr().to_string();
        let r: Result<ExtractEnd> = self.call_frames(Kind::Extract, &meta, &mut |f: &Frame| {
            if f.kind() != Some(Kind::Values) {
                return Err(CallError::Sink(Error::net(
                    "reply from",
                    &addr,
                    std::io::Error::other("a FIELD frame in reply to EXTRACT"),
                )));
            }
            let m: ValuesMeta = f.meta()?;
            let values = FieldValues::decode(m, &f.data, sel).map_err(|e| {
                CallError::Sink(Error::net("reply from", &addr, std::io::Error::other(e)))
            })?;
            each(values).map_err(CallError::Sink)
        });
        match r {
            Ok(end) => Ok(Some(end)),
            Err(Error::Remote { message, .. })
                if message.starts_with(&extract_unsupported_prefix()) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}
