//! Dataspaces: the named places data is staged between (NORNS's word), read from the
//! `dataspaces:` section of the one haar configuration file, and the `NAME:REST` endpoints
//! that name an object inside one.
//!
//! Owns parsing and the confinement of paths to their dataspace. Opening a store goes through
//! `haar::OpenOptions`, the same code every other face uses; nothing here knows how a store
//! keeps bytes.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use haar::request::Request;
use haar::{ConfigSource, FieldStore, OpenOptions};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What kind of place a dataspace is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Dataspace {
    /// A node-local POSIX directory (local disk, a tmpfs).
    Posix {
        /// Its root directory; endpoints name paths below it.
        path: PathBuf,
    },
    /// A directory shared by every node, standing for the parallel file system.
    Shared {
        /// Its root directory; endpoints name paths below it.
        path: PathBuf,
    },
    /// A haar field store: endpoints are MARS requests.
    Store {
        /// A configuration file describing the store (a local store, or `remote`/`dist`/
        /// `select` servers); absent: the configuration file this section is in.
        #[serde(default)]
        config: Option<PathBuf>,
        /// Store root directory, over the configuration's roots.
        #[serde(default)]
        root: Option<PathBuf>,
        /// Backend (`posix` or `pmem`), over the configuration's.
        #[serde(default)]
        backend: Option<String>,
    },
}

impl Dataspace {
    /// A dataspace of `kind` (`posix`, `shared`, or `store`: a store root) at `path`, as an
    /// administrator registers one by name.
    ///
    /// # Errors
    /// [`Error::Usage`] naming the kind when it is none of these.
    pub fn of_kind(kind: &str, path: PathBuf) -> Result<Dataspace> {
        Ok(match kind {
            "posix" => Dataspace::Posix { path },
            "shared" => Dataspace::Shared { path },
            "store" => Dataspace::Store {
                config: None,
                root: Some(path),
                backend: None,
            },
            k => {
                return Err(Error::Usage(format!(
                    "dataspace kind {k:?}: use posix, shared or store"
                )));
            }
        })
    }

    /// The root directory of a directory dataspace; `None` for a store.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            Dataspace::Posix { path } | Dataspace::Shared { path } => Some(path),
            Dataspace::Store { .. } => None,
        }
    }
}

/// Every dataspace the configuration names, and where the configuration came from (a `store`
/// dataspace without its own `config` opens the store that file describes).
#[derive(Debug, Clone, Default)]
pub struct Dataspaces {
    /// Name → dataspace.
    pub spaces: BTreeMap<String, Dataspace>,
    /// The configuration the section was read from.
    pub source: ConfigSource,
}

/// The `dataspaces:` section only; the rest of the file is the store's.
#[derive(Deserialize)]
struct Section {
    #[serde(default)]
    dataspaces: BTreeMap<String, Dataspace>,
}

impl Dataspaces {
    /// Reads the `dataspaces:` section of the configuration `source` names (none: no
    /// dataspaces, and absolute paths still work as endpoints).
    pub fn load(source: ConfigSource) -> Result<Dataspaces> {
        let spaces = match source.text()? {
            None => BTreeMap::new(),
            Some((text, origin)) => Self::parse(&text, &origin)?,
        };
        Ok(Dataspaces { spaces, source })
    }

    /// Parses the `dataspaces:` section of a configuration file's text; `origin` names it in
    /// errors. Names are `[A-Za-z0-9_.-]+` so that `NAME:REST` endpoints split unambiguously.
    pub fn parse(text: &str, origin: &str) -> Result<BTreeMap<String, Dataspace>> {
        let value: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        let mut only = serde_yaml_ng::Mapping::new();
        if let Some(d) = value.get("dataspaces") {
            only.insert("dataspaces".into(), d.clone());
        }
        let section: Section = serde_yaml_ng::from_value(serde_yaml_ng::Value::Mapping(only))
            .map_err(|e| Error::Config(format!("{origin}: dataspaces: {e}")))?;
        for name in section.dataspaces.keys() {
            if !valid_name(name) {
                return Err(Error::Config(format!(
                    "{origin}: dataspace name {name:?}: use letters, digits, '_', '-' and '.'"
                )));
            }
        }
        Ok(section.dataspaces)
    }

    /// Resolves an endpoint: `NAME:PATH` (a path below a directory dataspace's root, `..`
    /// refused), `NAME:REQUEST` (a store dataspace; empty selects everything), or an absolute
    /// path (a directory outside any dataspace, called `path`).
    pub fn endpoint(&self, text: &str) -> Result<Endpoint> {
        let bad = |m: String| Error::Usage(format!("endpoint {text:?}: {m}"));
        if text.starts_with('/') {
            return Ok(Endpoint {
                text: text.into(),
                space: "path".into(),
                object: Object::Path(PathBuf::from(text)),
            });
        }
        let Some((name, rest)) = text.split_once(':') else {
            return Err(bad(
                "write NAME:PATH (a dataspace of the configuration) or an absolute path".into(),
            ));
        };
        let space = self.spaces.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.spaces.keys().map(String::as_str).collect();
            bad(format!(
                "no dataspace {name:?} in the configuration (it names: {})",
                if known.is_empty() {
                    "none: add a `dataspaces:` section".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })?;
        let object = match space {
            Dataspace::Posix { path } | Dataspace::Shared { path } => {
                Object::Path(path.join(confined(rest).map_err(bad)?))
            }
            Dataspace::Store { .. } => {
                let req = if rest.is_empty() {
                    Request::default()
                } else {
                    Request::parse(rest).map_err(|e| bad(format!("request: {e}")))?
                };
                Object::Fields(req)
            }
        };
        Ok(Endpoint {
            text: text.into(),
            space: name.into(),
            object,
        })
    }

    /// Opens the field store of the store dataspace `name` through `haar::OpenOptions` (the
    /// configuration code every face uses); for writing, as a bulk copy's destination
    /// (`OpenOptions::field_store_for_copy`).
    pub fn open_store(&self, name: &str, for_writing: bool) -> Result<Box<dyn FieldStore>> {
        let Some(Dataspace::Store {
            config,
            root,
            backend,
        }) = self.spaces.get(name)
        else {
            return Err(Error::Usage(format!("{name:?} is not a store dataspace")));
        };
        let opts = OpenOptions {
            config: match config {
                Some(p) => ConfigSource::File(p.clone()),
                None => self.source.clone(),
            },
            root: root.clone(),
            backend: backend.clone(),
            read_only: !for_writing,
            ..OpenOptions::default()
        };
        // Every store this opens for writing is a stage task's destination: a bulk copy.
        Ok(match for_writing {
            true => opts.field_store_for_copy()?,
            false => opts.field_store()?,
        })
    }
}

/// `[A-Za-z0-9_.-]+`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A relative path that stays below its root: no `..`, no absolute part.
fn confined(rest: &str) -> std::result::Result<PathBuf, String> {
    let p = Path::new(rest);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err("`..` would leave the dataspace".into());
            }
        }
    }
    Ok(out)
}

/// What an endpoint names.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// A file or a directory tree.
    Path(PathBuf),
    /// The fields of a request in a store dataspace.
    Fields(Request),
}

/// A resolved endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// As given.
    pub text: String,
    /// The dataspace's name (`path` for an absolute path).
    pub space: String,
    /// What it names.
    pub object: Object,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spaces() -> Dataspaces {
        let text = "backend: posix\ndataspaces:\n  shared: {kind: shared, path: /lus/p}\n  local: {kind: posix, path: /tmp/n}\n  nv: {kind: store, backend: pmem, root: /dev/shm/h}\n";
        Dataspaces {
            spaces: Dataspaces::parse(text, "c.yaml").unwrap(),
            source: ConfigSource::Defaults,
        }
    }

    #[test]
    fn endpoints_resolve_below_their_root_and_requests_parse() {
        let d = spaces();
        let e = d.endpoint("shared:in/a.grib").unwrap();
        assert_eq!(e.object, Object::Path("/lus/p/in/a.grib".into()));
        assert_eq!(e.space, "shared");
        assert_eq!(
            d.endpoint("local:").unwrap().object,
            Object::Path("/tmp/n".into())
        );
        assert_eq!(
            d.endpoint("/abs/x").unwrap().object,
            Object::Path("/abs/x".into())
        );
        assert!(matches!(
            d.endpoint("nv:class=od,step=0/6").unwrap().object,
            Object::Fields(_)
        ));
    }

    #[test]
    fn escapes_unknown_names_and_bad_sections_are_refused_with_what_to_do() {
        let d = spaces();
        let e = d.endpoint("shared:../etc/passwd").unwrap_err().to_string();
        assert!(e.contains("leave the dataspace"), "{e}");
        let e = d.endpoint("nowhere:x").unwrap_err().to_string();
        assert!(e.contains("local, nv, shared"), "{e}");
        let e = d.endpoint("relative/path").unwrap_err().to_string();
        assert!(e.contains("NAME:PATH"), "{e}");
        let e = Dataspaces::parse("dataspaces: {x: {kind: tape}}\n", "c.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.yaml") && e.contains("tape"), "{e}");
        assert!(Dataspaces::parse("dataspaces: {'a:b': {kind: posix, path: /x}}\n", "c").is_err());
    }
}
