//! What Python selects: a MARS string or a mapping of keyword to values, read into a
//! [`Request`] (through the request language wherever a value needs it), and the single key an
//! identifier given to `archive` names.
//!
//! Reads arguments only; which reads are lent, and how, is the library's.

use haar::Error;
use haar::Key;
use haar::request::{KEYWORDS, Request, Values, canonical_keyword};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyMapping, PyString};

use crate::failure::{Failure, Outcome, raise};

/// A selection from Python: a MARS string, or keyword → values. `None` selects everything.
pub(crate) enum Selection {
    Text(String),
    Map(Vec<(String, Vec<String>)>),
}

/// Reads a selection: a `str`, or a mapping whose values are strings (`a/b` splits), numbers
/// or iterables of those. Done here rather than in Python: it is on every call's path.
pub(crate) fn read_selection(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Selection>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Some(Selection::Text(s.to_str()?.to_string())));
    }
    let bad = |m: String| {
        raise(
            obj.py(),
            Failure::Haar(Error::BadRequest {
                request: m.clone(),
                reason: "give a dict of keyword to value(s), values as strings, numbers or lists of them, or a MARS string like 'class=od,param=130/167'".into(),
            }),
        )
    };
    let mut out = Vec::new();
    let mut add = |k: Bound<'_, PyAny>, v: Bound<'_, PyAny>| -> PyResult<()> {
        let k = k.str()?.to_str()?.to_string();
        let mut values = Vec::with_capacity(1);
        push_values(&v, &mut values, true).map_err(|_| bad(format!("{k}={v}")))?;
        out.push((k, values));
        Ok(())
    };
    // A dict (the usual case) is walked directly; any other mapping through items().
    if let Ok(d) = obj.cast::<PyDict>() {
        for (k, v) in d.iter() {
            add(k, v)?;
        }
    } else {
        let map = obj.cast::<PyMapping>().map_err(|_| bad(format!("{obj}")))?;
        for item in map.items()?.iter() {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            add(k, v)?;
        }
    }
    Ok(Some(Selection::Map(out)))
}

fn push_values(v: &Bound<'_, PyAny>, out: &mut Vec<String>, nested: bool) -> PyResult<()> {
    if let Ok(s) = v.cast::<PyString>() {
        out.extend(s.to_str()?.split('/').map(str::to_string));
    } else if v.is_none() || v.is_instance_of::<PyBool>() {
        return Err(PyValueError::new_err("not a value"));
    } else if v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>() {
        out.push(v.str()?.to_str()?.to_string());
    } else if nested {
        for item in v.try_iter()? {
            push_values(&item?, out, false)?;
        }
    } else {
        return Err(PyValueError::new_err("not a value"));
    }
    Ok(())
}

pub(crate) fn request_of(sel: Option<Selection>) -> Outcome<Request> {
    let bad = |request: String, reason: String| {
        Failure::Haar(Error::BadRequest {
            request,
            reason: reason.into(),
        })
    };
    match sel {
        None => Ok(Request::default()),
        Some(Selection::Text(t)) => {
            let reqs = haar::open::requests(Some(&t))?;
            match <[Request; 1]>::try_from(reqs) {
                Ok([r]) => Ok(r),
                Err(v) => Err(bad(t, format!("expected one request, found {}", v.len()))),
            }
        }
        Some(Selection::Map(m)) => {
            let mut r = Request::default();
            for (k, v) in m {
                if v.is_empty() {
                    return Err(bad(
                        format!("{k}=[]"),
                        format!("{k} has no value; leave it out to select any value"),
                    ));
                }
                // A full keyword with plain values is taken as is (no parse on every call);
                // anything else goes through the request language, so that
                // abbreviations, `all` and `to`/`by` mean what they mean in a MARS string.
                // One empty value is an optional keyword the field does not have, as `list`
                // shows it (`levelist=` of a surface field): the request language has no
                // spelling for it, so it is taken as is.
                if is_plain(&k, &v) || is_empty_value(&k, &v) {
                    r.set(k, Values::List(v));
                    continue;
                }
                let text = format!("{k}={}", v.join("/"));
                let one = Request::parse(&text).map_err(|e| bad(text.clone(), e.to_string()))?;
                for p in one.params {
                    r.set(p.keyword, p.values);
                }
            }
            Ok(r)
        }
    }
}

/// [`request_of`], refusing a selection that names nothing: for `retrieve` and `wipe`,
/// "everything" is never what was meant, so the caller is told, in `refusal`, what the empty
/// selection would do and what to name instead.
pub(crate) fn named_request_of(sel: Option<Selection>, refusal: &str) -> Outcome<Request> {
    let req = request_of(sel)?;
    if req.params.is_empty() {
        return Err(Failure::Haar(Error::BadRequest {
            request: String::new(),
            reason: refusal.into(),
        }));
    }
    Ok(req)
}

/// A keyword already in its full lower-case form with values the request language would
/// keep as they are.
fn is_plain(keyword: &str, values: &[String]) -> bool {
    let special = |v: &str| {
        v.is_empty()
            || ["to", "by", "all"]
                .iter()
                .any(|w| v.eq_ignore_ascii_case(w))
            || v.contains(['/', ',', '=', '"', '\'', ' '])
    };
    (KEYWORDS.contains(&keyword) || canonical_keyword(keyword).is_ok_and(|c| c == keyword))
        && !values.iter().any(|v| special(v))
}

/// One empty value of a full keyword: an optional keyword a field does not have.
fn is_empty_value(keyword: &str, values: &[String]) -> bool {
    matches!(values, [v] if v.is_empty())
        && (KEYWORDS.contains(&keyword) || canonical_keyword(keyword).is_ok_and(|c| c == keyword))
}

/// The key an identifier given to `archive` names, if every keyword has exactly one plain
/// value. (Not a read rule: which reads are lent is `haar::read::lent_one`'s.)
pub(crate) fn single_key(req: &Request) -> Option<Key> {
    let mut key = Key::new();
    for p in &req.params {
        match &p.values {
            Values::List(v) if v.len() == 1 && v[0] != "to" && v[0] != "by" => {
                key.push(p.keyword.clone(), v[0].clone())
            }
            _ => return None,
        }
    }
    (!key.is_empty()).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &[&str])]) -> Option<Selection> {
        Some(Selection::Map(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
                .collect(),
        ))
    }

    fn request(sel: Option<Selection>) -> Request {
        match request_of(sel) {
            Ok(r) => r,
            Err(_) => panic!("refused"),
        }
    }

    /// `retrieve` and `wipe` refuse a selection that names nothing, with the reason they give,
    /// and pass any other through as `request_of` reads it.
    #[test]
    fn a_named_request_refuses_the_empty_selection() {
        for empty in [None, map(&[])] {
            match named_request_of(empty, "an empty selection would do it all; name some") {
                Err(Failure::Haar(Error::BadRequest { request, reason })) => {
                    assert_eq!(request, "");
                    assert_eq!(
                        reason.to_string(),
                        "an empty selection would do it all; name some"
                    );
                }
                Err(_) => panic!("refused with another error"),
                Ok(r) => panic!("not refused: {r}"),
            }
        }
        let named = named_request_of(map(&[("class", &["od"])]), "unused");
        let Ok(named) = named else {
            panic!("a named selection refused")
        };
        assert_eq!(named, request(map(&[("class", &["od"])])));
    }

    #[test]
    fn dict_and_mars_string_selections_make_the_same_request() {
        let from_map = request(map(&[
            ("class", &["od"]),
            ("param", &["130", "167"]),
            ("step", &["0", "to", "12", "by", "6"]),
        ]));
        let from_text = request(Some(Selection::Text(
            "class=od,param=130/167,step=0/to/12/by/6".into(),
        )));
        assert_eq!(from_map, from_text);
        assert_eq!(from_map.expand().len(), 10); // unresolved: to/by still literal
    }

    #[test]
    fn abbreviations_go_through_the_request_language() {
        let r = request(map(&[("levtype", &["sfc"]), ("PARAM", &["167"])]));
        assert!(r.get("param").is_some(), "{r}");
        assert!(!is_plain("PARAM", &["167".into()]));
        assert!(!is_plain("step", &["all".into()]));
        assert!(is_plain("step", &["6".into()]));
    }

    #[test]
    fn one_key_only_when_every_keyword_has_one_plain_value() {
        let one = request(map(&[("class", &["od"]), ("step", &["6"])]));
        assert_eq!(single_key(&one).unwrap().to_string(), "class=od,step=6");
        let two = request(map(&[("class", &["od"]), ("step", &["6", "12"])]));
        assert!(single_key(&two).is_none());
        assert!(single_key(&Request::default()).is_none());
    }

    #[test]
    fn one_empty_value_names_an_optional_keyword_the_field_lacks() {
        // What list shows for a surface field (`levelist=`) retrieves it as one key.
        let r = request(map(&[("levtype", &["sfc"]), ("levelist", &[""])]));
        assert_eq!(single_key(&r).unwrap().to_string(), "levtype=sfc,levelist=");
        assert!(!is_empty_value("LEVELIST", &["".into()]));
        assert!(!is_empty_value("levelist", &["".into(), "500".into()]));
    }

    #[test]
    fn an_empty_value_list_is_refused_naming_the_keyword() {
        match request_of(map(&[("param", &[])])) {
            Err(Failure::Haar(e)) => assert!(e.to_string().contains("param has no value"), "{e}"),
            _ => panic!("accepted"),
        }
    }
}
