//! MARS keys of a GRIB message, read through ecCodes exactly as FDB5 reads them
//! when it archives.
//!
//! This module owns the mapping "GRIB bytes → list of (key, value) strings".
//! It must not apply a schema, reorder keys or fill defaults: that belongs to
//! the schema layer in `haar-core`.
//!
//! # Rules mirrored from FDB5
//!
//! FDB5 (`fdb-write`, `FDB::archive(bytes)`) builds a message's key in
//! `fdb5/message/MessageDecoder.cc` (`MessageDecoder::msgToKey`), which calls
//! metkit's `GRIBDecoder::getMetadata` (`metkit/codes/GRIBDecoder.cc`) with a
//! `KeySetter` gatherer and the string value representation. [`mars_keys`]
//! reproduces it rule by rule:
//!
//! 1. **Namespace `mars`, all keys.** A keys iterator over namespace `mars`
//!    (eckit resource `gribToRequestNamespace`, default `"mars"`) with flags
//!    `CODES_KEYS_ITERATOR_ALL_KEYS` (= 0), in ecCodes' order.
//! 2. **Skip `_` keys.** Names beginning with `_` are skipped ("skip silly
//!    underscores in GRIB").
//! 3. **Scalars only.** Keys whose `codes_get_size` is not 1 are skipped.
//! 4. **Values as strings.** Each value is ecCodes' string form
//!    (`codes_keys_iterator_get_string`, the same as `codes_get_string` for the key).
//!    A key that appears twice keeps its first position and its last value
//!    (`fdb5::Key::set`).
//! 5. **`levelist` as a number.** `levelist` is read with `codes_get_double`;
//!    a whole number is written as an integer (`850`, not `850.0`), anything
//!    else as C++ `ostream << double` writes it (6 significant digits, `%g`
//!    style: `0.5`, `1013.25`). metkit does this as a workaround for ecCodes
//!    issue ECC-2113.
//! 6. **`param` is `paramId`.** After the loop, if `paramId` is defined and
//!    not missing, `param` is set to its string value (replacing ecCodes'
//!    `param`, which may be `130.128`-style or a short name; appended at the end
//!    if the namespace had no `param`). `paramId` is by far the dearest key to read (a
//!    concept: ecCodes matches the message against its whole parameter tables), so its value
//!    is cached per *signature* — exactly the key values those tables' conditions read; see
//!    `param_cache.rs` for why that is exact. `param`'s own value is read only when there is
//!    no `paramId`.
//! 7. **`expver` is four characters.** FDB5's schema types `expver` as
//!    `Expver` (`fdb5/types/TypeExpver.cc`, `TypeExpver::tidy`): the value is
//!    trimmed and left-padded with `0` to width 4 (`1` → `0001`; longer values
//!    are kept). ecCodes already gives four characters for ECMWF local
//!    sections; the rule matters for messages without one.
//!
//! 8. **Embedded request.** A message with `localDefinitionNumber` 191 may carry a MARS
//!    request in `freeFormData` (ECMWF GRIB1 local definition 191, "free format data"),
//!    serialised as an eckit `Stream`. metkit decodes it after rule 6 and sets each of its
//!    keywords, lower-cased, to its value, lower-cased (replacing or appending, as
//!    `fdb5::Key::set`): FDB5 archives such a message under the embedded keys (checked with
//!    `fdb-write`/`fdb-list` 5.10.8: an embedded `TYPE=FC,STEP=24` turns `type=an,step=0`
//!    into `type=fc,step=24`). [`decode_embedded_request`] reads the stream exactly as metkit
//!    does; a request it cannot read (more than one request, a keyword with several values,
//!    a malformed stream) is refused with [`KeyError::EmbeddedRequest`], where metkit's
//!    assertions make FDB5 fail too. Rule 7 runs last, on the final `expver`.
//!
//! # Threads
//!
//! Each call makes its own ecCodes handle over the caller's bytes
//! (`codes_handle_new_from_message`, which does not copy; the borrow keeps the
//! bytes alive and unchanged for the handle's life) and deletes it before
//! returning, so calls from several threads run in parallel. Debian's ecCodes
//! is built with thread support (`GRIB_OMP_THREADS 1` in `eccodes_config.h`),
//! which guards the shared default context (definition files are parsed once,
//! under a lock).

use crate::ffi::{self, CodesError, Handle};
use crate::param_cache::ParamIdCache;

/// Why the MARS keys of a message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// ecCodes did not accept the bytes as a GRIB message (frame it with
    /// [`crate::messages`] first: `mars_keys` takes exactly one message).
    #[error("ecCodes could not decode the message ({len} bytes): not one whole GRIB message")]
    NotAMessage {
        /// Length of the bytes given.
        len: usize,
    },
    /// An ecCodes call failed while reading a key.
    #[error("ecCodes {call}{} failed: {message} (code {code})", key.as_ref().map(|k| format!(" on key '{k}'")).unwrap_or_default())]
    Codes {
        /// The ecCodes function that failed.
        call: &'static str,
        /// The key it was reading, if any.
        key: Option<String>,
        /// ecCodes' error code.
        code: i32,
        /// ecCodes' error text.
        message: String,
    },
    /// The message embeds a MARS request (`localDefinitionNumber` 191,
    /// `freeFormData`) that is not one request with one value per keyword, the
    /// only form FDB5 (metkit) accepts either. Give the keys with `--key`.
    #[error(
        "message embeds a MARS request (localDefinitionNumber 191, freeFormData) that cannot be read: {reason}; FDB5 refuses it too"
    )]
    EmbeddedRequest {
        /// What is wrong with the embedded request.
        reason: String,
    },
}

impl From<CodesError> for KeyError {
    fn from(e: CodesError) -> Self {
        Self::Codes {
            call: e.call,
            message: ffi::error_message(e.code),
            key: e.key,
            code: e.code,
        }
    }
}

/// ecCodes' version as `major.minor.patch`, e.g. `"2.28.0"`, from
/// `codes_get_api_version`. haar is tested against Debian's ecCodes 2.28; key
/// values come from ecCodes' definition files, so quote this version next to
/// any key comparison.
pub fn eccodes_version() -> String {
    let v = ffi::api_version();
    format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)
}

/// The MARS keys of one GRIB message, as FDB5 reads them for archive (see the
/// [module documentation](self) for each rule and its FDB5 source).
///
/// `msg` must be exactly one message, `GRIB` to `7777`, as yielded by
/// [`crate::messages`]. Keys come in ecCodes' namespace order. Safe to call from
/// many threads at once; the cost is ecCodes' (about a millisecond per message).
pub fn mars_keys(msg: &[u8]) -> Result<Vec<(String, String)>, KeyError> {
    keys_of(msg, true)
}

/// [`mars_keys`] without the `paramId` cache: every call has ecCodes evaluate the parameter
/// tables. For tests that check the cache changes nothing; slower, same answers.
#[doc(hidden)]
pub fn mars_keys_uncached(msg: &[u8]) -> Result<Vec<(String, String)>, KeyError> {
    keys_of(msg, false)
}

fn keys_of(msg: &[u8], cached: bool) -> Result<Vec<(String, String)>, KeyError> {
    // ecCodes trusts section 0; give it only what frames as exactly one message.
    let mut framed = crate::frame::messages(msg);
    match (framed.next(), framed.next()) {
        (Some(Ok(m)), None) if m.offset == 0 && m.bytes.len() == msg.len() => {}
        _ => return Err(KeyError::NotAMessage { len: msg.len() }),
    }
    let handle = Handle::from_message(msg).map_err(|_| KeyError::NotAMessage { len: msg.len() })?;
    let mut keys: Vec<(String, String)> = Vec::with_capacity(16);
    // Rule 6 replaces `param` by `paramId` whenever paramId is there, so `param`'s own value
    // is only read when it is not: both are concepts that ecCodes evaluates by matching the
    // message against every entry of its parameter tables, by far the dearest keys to read
    // (about two thirds of the time of this function on ECMWF GRIB2).
    let param_id = handle.has("paramId");

    for name in handle.key_names("mars")? {
        if name.starts_with('_') {
            continue; // rule 2
        }
        if handle.size(&name)? != 1 {
            continue; // rule 3
        }
        let value = if name == "levelist" {
            format_levelist(handle.get_double(&name)?) // rule 5
        } else if name == "param" && param_id {
            String::new() // placeholder: its position counts, its value is set below
        } else {
            handle.get_string(&name)? // rule 4
        };
        set(&mut keys, name, value);
    }

    if param_id {
        // rule 6
        let param = if cached {
            ParamIdCache::global().param_id(&handle, msg[7])?
        } else {
            handle.get_string("paramId")?
        };
        set(&mut keys, "param".to_owned(), param);
    }

    // rule 8
    if handle.has("localDefinitionNumber")
        && handle.get_long("localDefinitionNumber")? == 191
        && handle.has("freeFormData")
    {
        let bytes: Vec<u8> = handle
            .get_long_array("freeFormData")?
            .into_iter()
            .map(|b| b as u8)
            .collect();
        if !bytes.is_empty() {
            let embedded = decode_embedded_request(&bytes)
                .map_err(|reason| KeyError::EmbeddedRequest { reason })?;
            for (k, v) in embedded {
                set(&mut keys, k, v);
            }
        }
    }

    if let Some((_, expver)) = keys.iter_mut().find(|(k, _)| k == "expver") {
        *expver = tidy_expver(expver); // rule 7
    }
    Ok(keys)
}

/// The keywords and values of the MARS request embedded in a message's `freeFormData`
/// (`localDefinitionNumber` 191), lower-cased, in stream order — metkit's
/// `GRIBDecoder::getMetadata`.
///
/// The bytes are an eckit `Stream` (`eckit/serialisation/Stream.cc`): each value is a tag byte
/// then its payload, integers big-endian; tag 5 `int` (4 bytes), tag 15 `string` (4-byte
/// length, bytes); tag 2 (end of object) is skipped wherever a value is expected. Layout:
/// `int` number of requests (must be 1), `string` verb, `int` number of keywords, then per
/// keyword `string` name, `int` number of values (must be 1), `string` value.
pub fn decode_embedded_request(bytes: &[u8]) -> Result<Vec<(String, String)>, String> {
    struct Stream<'a>(&'a [u8]);
    impl Stream<'_> {
        fn tag(&mut self, want: u8, what: &str) -> Result<(), String> {
            loop {
                let (&t, rest) = self
                    .0
                    .split_first()
                    .ok_or_else(|| format!("the stream ends where {what} was expected"))?;
                self.0 = rest;
                match t {
                    2 => continue, // end of object
                    t if t == want => return Ok(()),
                    t => return Err(format!("tag {t} where {what} (tag {want}) was expected")),
                }
            }
        }
        fn u32(&mut self, what: &str) -> Result<u32, String> {
            if self.0.len() < 4 {
                return Err(format!("the stream ends inside {what}"));
            }
            let (n, rest) = self.0.split_at(4);
            self.0 = rest;
            Ok(u32::from_be_bytes([n[0], n[1], n[2], n[3]]))
        }
        fn int(&mut self, what: &str) -> Result<i32, String> {
            self.tag(5, what)?;
            Ok(self.u32(what)? as i32)
        }
        fn string(&mut self, what: &str) -> Result<String, String> {
            self.tag(15, what)?;
            let len = self.u32(what)? as usize;
            if self.0.len() < len {
                return Err(format!("{what} is longer ({len} bytes) than the stream"));
            }
            let (s, rest) = self.0.split_at(len);
            self.0 = rest;
            Ok(String::from_utf8_lossy(s).to_ascii_lowercase())
        }
    }
    let mut s = Stream(bytes);
    let requests = s.int("the number of requests")?;
    if requests != 1 {
        return Err(format!("{requests} requests (one is expected)"));
    }
    s.string("the verb")?;
    let n = s.int("the number of keywords")?;
    let mut out = Vec::with_capacity(n.max(0) as usize);
    for _ in 0..n {
        let keyword = s.string("a keyword")?;
        let values = s.int("the number of values")?;
        if values != 1 {
            return Err(format!("{keyword} has {values} values (one is expected)"));
        }
        let value = s.string("a value")?;
        out.push((keyword, value));
    }
    Ok(out)
}

/// `fdb5::Key::set`: replace the value in place, or append a new key.
fn set(keys: &mut Vec<(String, String)>, name: String, value: String) {
    match keys.iter_mut().find(|(k, _)| *k == name) {
        Some((_, v)) => *v = value,
        None => keys.push((name, value)),
    }
}

/// `TypeExpver::tidy`: trim, then left-pad with `0` to width 4.
pub(crate) fn tidy_expver(value: &str) -> String {
    format!("{:0>4}", value.trim())
}

/// metkit's `levelist` rule: integer text for whole numbers, else C++
/// `ostream << double` (default precision 6, `%g`).
pub(crate) fn format_levelist(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.2e18 {
        return format!("{}", v as i64);
    }
    format_g6(v)
}

/// C's `%g` with precision 6, which is what `std::ostream << double` prints.
pub(crate) fn format_g6(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Round to 6 significant digits first; the exponent after rounding picks
    // the style, as C does.
    let sci = format!("{v:.5e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    if !(-4..6).contains(&exp) {
        let m = strip_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        strip_zeros(&format!("{v:.decimals$}")).to_owned()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g6_matches_c_printf() {
        for (v, want) in [
            (0.5, "0.5"),
            (1013.25, "1013.25"),
            (1234567.5, "1.23457e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (999999.5, "1e+06"),
            (-2.5, "-2.5"),
            (100000.0, "100000"),
            (123456.7, "123457"),
        ] {
            assert_eq!(format_g6(v), want, "{v}");
        }
    }

    #[test]
    fn levelist_whole_numbers_are_integers() {
        assert_eq!(format_levelist(850.0), "850");
        assert_eq!(format_levelist(0.0), "0");
        assert_eq!(format_levelist(2.5), "2.5");
    }

    #[test]
    fn expver_is_padded_like_fdb5() {
        assert_eq!(tidy_expver("1"), "0001");
        assert_eq!(tidy_expver(" 12 "), "0012");
        assert_eq!(tidy_expver("0001"), "0001");
        assert_eq!(tidy_expver("abcd"), "abcd");
        assert_eq!(tidy_expver("12345"), "12345");
    }

    /// The eckit `Stream` bytes of a request, as MARS writes them into `freeFormData`.
    fn stream(requests: i32, pairs: &[(&str, &[&str])]) -> Vec<u8> {
        let int = |n: i32| [&[5u8][..], &n.to_be_bytes()].concat();
        let string =
            |t: &str| [&[15u8][..], &(t.len() as u32).to_be_bytes(), t.as_bytes()].concat();
        let mut v = int(requests);
        v.extend(string("retrieve"));
        v.extend(int(pairs.len() as i32));
        for (k, vals) in pairs {
            v.extend(string(k));
            v.extend(int(vals.len() as i32));
            for x in *vals {
                v.extend(string(x));
            }
        }
        v
    }

    #[test]
    fn embedded_request_decodes_like_metkit() {
        let bytes = stream(1, &[("TYPE", &["FC"]), ("Step", &["24"])]);
        assert_eq!(
            decode_embedded_request(&bytes).unwrap(),
            vec![("type".into(), "fc".into()), ("step".into(), "24".into())]
        );
        // End-of-object tags are skipped where a value is expected.
        let mut with_end = vec![2u8];
        with_end.extend(&bytes);
        assert_eq!(decode_embedded_request(&with_end).unwrap().len(), 2);
        assert_eq!(decode_embedded_request(&stream(1, &[])).unwrap(), vec![]);
    }

    #[test]
    fn embedded_requests_metkit_refuses_are_refused() {
        for (bytes, why) in [
            (stream(2, &[("type", &["fc"])]), "2 requests"),
            (stream(1, &[("step", &["0", "6"])]), "step has 2 values"),
            (vec![15, 0, 0, 0, 1, b'x'], "tag 15 where"),
            (stream(1, &[("type", &["fc"])])[..20].to_vec(), "ends"),
            (vec![], "ends"),
        ] {
            let e = decode_embedded_request(&bytes).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn version_is_dotted() {
        let v = eccodes_version();
        assert_eq!(v.split('.').count(), 3, "{v}");
        assert!(v.starts_with("2."), "{v}");
    }

    #[test]
    fn garbage_is_refused_not_crashed() {
        assert!(matches!(mars_keys(b""), Err(KeyError::NotAMessage { .. })));
        assert!(matches!(
            mars_keys(b"GRIB\0\0\0\x027777"),
            Err(KeyError::NotAMessage { .. })
        ));
        let fake = crate::frame::tests_support::minimal_grib2(200);
        // ecCodes decides what 0xAB filler means; it must only not crash.
        let _ = mars_keys(&fake);
    }
}
