//! Importing an existing FDB5 database into any [`FieldStore`], verified field by field.
//!
//! FDB5 is read through its C API, with the one adapter haar has ([`crate::fdb5`], loaded at
//! run time, so haar builds and runs without FDB5): `fdb_list` enumerates the fields (with the
//! keys FDB5 reports), `fdb_retrieve` and the data reader fetch each one. Both C signatures of
//! `fdb_list` are handled, Debian 12's 5.10 and 5.11+ (PyPI's `fdb5lib` 5.25 wheel), chosen
//! from `fdb_version` at run time. The whole database is listed with a null request, which
//! both versions accept; an empty one makes FDB5 fail an assertion and abort (measured, see
//! [`crate::fdb5::Fdb5Store::list_fields`]), so it is never sent. FDB5's command-line tools
//! are not used. Reading the TOC files directly would bind haar to an undocumented, versioned
//! on-disk layout.
//!
//! A request is given to FDB5 as keyword → values. FDB5's C API does not expand MARS values,
//! so haar canonicalises them first with the store's schema and context (`expver=1` → `0001`,
//! `param=t` → `130`, `step=0/to/24/by/6` → its steps); with [`ImportOptions::raw`] the values
//! go as written (they must then be canonical).
//!
//! Database names: FDB5 finds a database's directory by its `FDB_DBNAMES_FILE` (Debian's
//! `/etc/fdb/dbnames`, what stock `fdb-write` names databases with, e.g.
//! `ea:0001/20170101:0000:g/enda`) or, with an empty one, FDB5's default names (one directory
//! per database directly under the root, `ea:0001:enda:20170101:0000:g`). It reads that file
//! once per process, and lists databases whatever the names but reads them only under the
//! names they were written with. So where the caller did not set `FDB_DBNAMES_FILE`, the
//! import looks at the roots before FDB5 is loaded: a TOC database (a directory holding a
//! `toc` file) directly under a root means FDB5's default names (an empty dbnames file);
//! otherwise the system's. A field FDB5 lists but returns no bytes for is reported, with this
//! as the likely reason.
//!
//! Per batch: fetch each field (its length checked against the listing's, where FDB5 gives
//! one), archive into the store with the keys FDB5 reports (re-split by the store's schema),
//! flush, then read every field back from the store and compare bytes and CRC-32C with what
//! FDB5 returned. A field that fails is named in the report; the others stay flushed.
//! This module owns nothing else: it must not know how the store keeps bytes, nor call FDB5
//! but through [`crate::fdb5`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use haar_core::Key;
use haar_core::request::{Request, Values};
use haar_store::{FieldStore, FieldStoreExt};

use crate::fdb5::{Fdb5Store, Listed};

/// Which FDB5 database to import.
#[derive(Debug, Clone)]
pub enum Fdb5Source {
    /// An FDB5 configuration file (what `FDB5_CONFIG_FILE` would name).
    Config(PathBuf),
    /// A local TOC store: its root directory and the schema its databases were written with.
    Root {
        /// The root directory.
        root: PathBuf,
        /// The schema file (FDB5's default: `/etc/fdb/schema`).
        schema: PathBuf,
    },
}

/// What to import and how.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// MARS request selecting what to import (`class=od,expver=1,param=t`); `None`:
    /// everything.
    pub request: Option<String>,
    /// The FDB5 database.
    pub source: Fdb5Source,
    /// Give the request's values to FDB5 as written, not canonicalised by haar; they must
    /// then be canonical (`expver=0001`, `param=130`).
    pub raw: bool,
    /// Fields fetched per flush and verification pass.
    pub batch: usize,
}

impl ImportOptions {
    /// Everything in `source`, 1000 fields per batch.
    pub fn new(source: Fdb5Source) -> ImportOptions {
        ImportOptions {
            source,
            request: None,
            raw: false,
            batch: 1000,
        }
    }
}

/// What an import did. Fields that failed are named in `failed`; every field counted in
/// `fields` was read back from the store, compared with FDB5's bytes, and is flushed.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ImportReport {
    /// FDB5's version as its library reports it (`5.10.8`, `5.25.0`).
    pub fdb5_version: String,
    /// Distinct fields FDB5's `fdb_list` reported.
    pub listed: usize,
    /// Fields imported and verified.
    pub fields: usize,
    /// Bytes of those.
    pub bytes: u64,
    /// Every field that failed to import or verify, with why (its key first).
    pub failed: Vec<String>,
    /// Seconds in all.
    pub seconds: f64,
    /// Seconds per phase.
    pub phases: ImportPhases,
}

/// Where an import's time went, in seconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ImportPhases {
    /// Loading FDB5 and listing with `fdb_list`.
    pub list: f64,
    /// Reading the fields from FDB5 (`fdb_retrieve` and the data reader).
    pub fdb_read: f64,
    /// Archiving into the store and flushing.
    pub archive_flush: f64,
    /// Reading back and comparing.
    pub verify: f64,
}

/// Why an import could not run (fields that fail are not errors: they are in the report).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// FDB5's library cannot be loaded (not installed, too old, or `$HAAR_FDB5_LIB` wrong).
    #[error(
        "{why} (haar reads FDB5 through its C API: install FDB5's library, Debian: apt-get install libfdb5-0d or fdb5; or name one with ${})",
        crate::fdb5::LIB_ENV
    )]
    Fdb5Unavailable {
        /// Why, as the loader says.
        why: String,
    },
    /// The database named by [`ImportOptions::source`] cannot be used.
    #[error("{what}{}", source.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    BadSource {
        /// What is wrong, naming the path.
        what: String,
        /// The system's reason, when there is one.
        #[source]
        source: Option<std::io::Error>,
    },
    /// The request cannot be parsed or canonicalised.
    #[error("bad FDB5 request {request:?}: {why}")]
    BadRequest {
        /// The request as given.
        request: String,
        /// Why.
        why: String,
    },
    /// FDB5 failed on the database as a whole (opening it, listing it).
    #[error("FDB5 failed {what}: {source}")]
    Fdb5 {
        /// What FDB5 was doing, naming the configuration.
        what: String,
        /// FDB5's error, naming the call.
        #[source]
        source: Box<haar_store::Error>,
    },
    /// Scratch files could not be written.
    #[error("{what}: {source}")]
    Io {
        /// What could not be done, naming the path.
        what: String,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// FDB5 lists no field for the request.
    #[error(
        "FDB5 lists no field for {request} in {config} (check the request's values, or that this is the configuration the database was written with)"
    )]
    NothingListed {
        /// The request, or "the whole database".
        request: String,
        /// The FDB5 configuration used.
        config: String,
    },
    /// The store failed (archive or flush).
    #[error(transparent)]
    Store(#[from] haar_store::Error),
}

fn io_error(what: String) -> impl FnOnce(std::io::Error) -> ImportError {
    move |source| ImportError::Io { what, source }
}

/// A private scratch directory removed on every exit path.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// CRC-32C (Castagnoli), computed here rather than by haar's store so the check does not
/// share code with what it checks.
fn crc32c(bytes: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    let mut c = !0u32;
    for &b in bytes {
        c = table[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// The request as FDB5's C API takes it: keyword → values. `raw`: split as written;
/// otherwise parsed as MARS and canonicalised with the store's schema and context (keywords
/// the schema does not know are dropped, as FDB5 ignores them; `all` leaves a keyword open).
fn fdb5_request(
    store: &dyn FieldStore,
    text: &str,
    raw: bool,
) -> Result<Vec<(String, Vec<String>)>, ImportError> {
    let bad = |why: String| ImportError::BadRequest {
        request: text.to_string(),
        why,
    };
    if raw {
        let mut out = Vec::new();
        for kv in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(format!("{kv:?} is not keyword=values")))?;
            let values: Vec<String> = v.split('/').map(|v| v.trim().to_string()).collect();
            out.push((k.trim().to_lowercase(), values));
        }
        return Ok(out);
    }
    let req = Request::parse(text).map_err(|e| bad(e.to_string()))?;
    let (resolved, _ignored) = store
        .options()
        .resolve(&req)
        .map_err(|e| bad(e.to_string()))?;
    Ok(resolved
        .params
        .into_iter()
        .filter_map(|p| match p.values {
            Values::List(v) => Some((p.keyword, v)),
            Values::All => None,
        })
        .collect())
}

/// Reads one field from FDB5 into `buf`; `Err` says why not, naming the field.
fn fetch(fdb: &Fdb5Store, f: &Listed, buf: &mut Vec<u8>) -> Result<(), String> {
    match fdb.read_warm(&f.key, buf) {
        Ok(0) => Err(format!(
            "{}: FDB5 lists it but returns no bytes for it (if the database was written with \
             other database names, set FDB_DBNAMES_FILE to the dbnames file it was written with)",
            f.key
        )),
        Ok(n) => match f.length {
            Some(want) if want != n as u64 => Err(format!(
                "{}: FDB5 returns {n} bytes, its listing says {want}",
                f.key
            )),
            _ => {
                buf.truncate(n);
                Ok(())
            }
        },
        Err(e) => Err(format!("{}: FDB5 cannot read it: {e}", f.key)),
    }
}

/// Imports the fields `opts` selects from an FDB5 database into `store`, batch by batch:
/// read through FDB5's C API, archived under the keys FDB5 reports, flushed, read back and
/// compared. Fields verified stay flushed whatever happens to later ones.
///
/// FDB5 takes its configuration from the environment: this sets `FDB5_CONFIG_FILE` (and
/// `FDB_DBNAMES_FILE` where the caller did not) in this process (see
/// [`Fdb5Store::open_config`]), so call it while no other thread uses the environment. While
/// FDB5 is in use, standard output is standard error ([`crate::fdb5::StdoutToStderr`]: FDB5
/// prints its errors there), so call it while nothing else prints to standard output.
pub fn import_fdb5(
    store: &mut dyn FieldStore,
    opts: &ImportOptions,
) -> Result<ImportReport, ImportError> {
    let start = Instant::now();
    let scratch = Scratch(std::env::temp_dir().join(format!(
        "haar-import-fdb5-{}-{}",
        std::process::id(),
        start.elapsed().as_nanos()
    )));
    std::fs::create_dir_all(&scratch.0)
        .map_err(io_error(format!("cannot create {}", scratch.0.display())))?;
    let request = match &opts.request {
        Some(r) => Some(fdb5_request(&*store, r, opts.raw)?),
        None => None,
    };
    let (config, roots) = fdb5_config(&opts.source, &scratch.0)?;
    let dbnames = dbnames_for(&roots, &scratch.0)?;
    // Declared before `fdb`, so dropped after it: FDB5 may also print while closing.
    let _quiet = crate::fdb5::StdoutToStderr::new();
    let fdb = Fdb5Store::open_config(&config, dbnames.as_deref()).map_err(|e| match e {
        haar_store::Error::Config(why) => ImportError::Fdb5Unavailable { why },
        source => ImportError::Fdb5 {
            what: format!("to open {}", config.display()),
            source: Box::new(source),
        },
    })?;

    // 1. Enumerate.
    let fields = fdb
        .list_fields(request.as_deref())
        .map_err(|source| ImportError::Fdb5 {
            what: format!("to list {} (FDB5 {})", config.display(), fdb.version()),
            source: Box::new(source),
        })?;
    let mut report = ImportReport {
        fdb5_version: fdb.version().to_string(),
        listed: fields.len(),
        ..ImportReport::default()
    };
    report.phases.list = start.elapsed().as_secs_f64();
    if fields.is_empty() {
        return Err(ImportError::NothingListed {
            request: (opts.request.as_deref())
                .unwrap_or("the whole database")
                .to_string(),
            config: config.display().to_string(),
        });
    }

    // 2. Fetch, archive, flush, verify, batch by batch.
    let mut buf = Vec::new();
    for batch in fields.chunks(opts.batch.max(1)) {
        let t = Instant::now();
        let mut parts: Vec<Option<Vec<u8>>> = Vec::with_capacity(batch.len());
        for f in batch {
            match fetch(&fdb, f, &mut buf) {
                Ok(()) => parts.push(Some(buf.clone())),
                Err(why) => {
                    report.failed.push(why);
                    parts.push(None);
                }
            }
        }
        report.phases.fdb_read += t.elapsed().as_secs_f64();

        let t = Instant::now();
        let mut archived = Vec::with_capacity(batch.len());
        for (f, part) in batch.iter().zip(&parts) {
            let Some(part) = part else { continue };
            match store.split(&f.key) {
                Ok(split) => {
                    store.archive_split(&split, part, None)?;
                    archived.push(Archived {
                        listed: f,
                        stored: split.full(),
                        theirs: part,
                        crc: crc32c(part),
                    });
                }
                Err(e) => report.failed.push(format!("{}: not archived: {e}", f.key)),
            }
        }
        store.flush()?;
        report.phases.archive_flush += t.elapsed().as_secs_f64();

        let t = Instant::now();
        verify(&*store, &archived, &mut report);
        report.phases.verify += t.elapsed().as_secs_f64();
    }
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

/// A field archived in this batch: FDB5's listing, the key the store split it into, FDB5's
/// bytes and their CRC-32C.
struct Archived<'a> {
    listed: &'a Listed,
    stored: Key,
    theirs: &'a [u8],
    crc: u32,
}

/// Reads a batch back in one request and compares every field with what FDB5 gave; the
/// verdicts are reported in archive order. If the batch's read fails part way (a corrupt
/// field), the fields it did not reach are read one by one, so the error names only the
/// fields it is about.
fn verify(store: &dyn FieldStore, archived: &[Archived<'_>], report: &mut ImportReport) {
    // Per field: its length once it matched, or why not.
    let mut verdicts: Vec<Option<Result<u64, String>>> = vec![None; archived.len()];
    let mut strays = Vec::new();
    let all: Vec<usize> = (0..archived.len()).collect();
    if read_back(store, archived, &all, &mut verdicts, &mut strays).is_err() {
        let unseen: Vec<usize> = (0..archived.len())
            .filter(|&i| verdicts[i].is_none())
            .collect();
        for i in unseen {
            if let Err(e) = read_back(store, archived, &[i], &mut verdicts, &mut strays) {
                verdicts[i] = Some(Err(format!("{}: {e}", archived[i].listed.key)));
            }
        }
    }
    for (a, verdict) in archived.iter().zip(verdicts) {
        match verdict {
            Some(Ok(len)) => {
                report.fields += 1;
                report.bytes += len;
            }
            Some(Err(why)) => report.failed.push(why),
            None => {
                (report.failed).push(format!("{}: not found in haar after flush", a.listed.key))
            }
        }
    }
    report.failed.extend(strays);
}

/// Reads the fields `which` of `archived` back with one `retrieve_keys` and records a verdict
/// for each field delivered.
fn read_back(
    store: &dyn FieldStore,
    archived: &[Archived<'_>],
    which: &[usize],
    verdicts: &mut [Option<Result<u64, String>>],
    strays: &mut Vec<String>,
) -> haar_store::Result<()> {
    let at: HashMap<&Key, usize> = which.iter().map(|&i| (&archived[i].stored, i)).collect();
    let keys: Vec<Key> = which.iter().map(|&i| archived[i].stored.clone()).collect();
    store.retrieve_keys(&keys, &mut |key, ours, _| {
        let Some(&i) = at.get(key) else {
            strays.push(format!("{key}: returned by the store, never asked for"));
            return Ok(());
        };
        let a = &archived[i];
        verdicts[i] = Some(if ours == a.theirs && crc32c(ours) == a.crc {
            Ok(ours.len() as u64)
        } else {
            Err(format!(
                "{}: haar returns {} bytes (crc32c {:08x}), FDB5 gave {} (crc32c {:08x})",
                a.listed.key,
                ours.len(),
                crc32c(ours),
                a.theirs.len(),
                a.crc
            ))
        });
        Ok(())
    })?;
    Ok(())
}

/// The FDB5 configuration file (the given one, or one written for a root with its schema)
/// and the roots it names.
fn fdb5_config(
    source: &Fdb5Source,
    scratch: &Path,
) -> Result<(PathBuf, Vec<PathBuf>), ImportError> {
    let bad =
        |what: String, source: Option<std::io::Error>| ImportError::BadSource { what, source };
    match source {
        Fdb5Source::Config(c) => {
            if !c.is_file() {
                return Err(bad(
                    format!("FDB5 configuration {} not found", c.display()),
                    None,
                ));
            }
            // The roots, where haar reads the file as FDB5's local TOC configuration (else
            // none: FDB5 then keeps the dbnames it would use anyway).
            let roots = std::fs::read_to_string(c)
                .ok()
                .and_then(|t| haar_store::Config::from_yaml(&t, &c.display().to_string()).ok())
                .map(|cfg| cfg.roots)
                .unwrap_or_default();
            Ok((c.clone(), roots))
        }
        Fdb5Source::Root { root, schema } => {
            if !root.is_dir() {
                return Err(bad(
                    format!("FDB5 root {} is not a directory", root.display()),
                    None,
                ));
            }
            let root =
                (root.canonicalize()).map_err(|e| bad(root.display().to_string(), Some(e)))?;
            let schema = (schema.canonicalize())
                .map_err(|e| bad(format!("schema {}", schema.display()), Some(e)))?;
            let p = scratch.join("fdb5-config.yaml");
            let text = format!(
                "{{type: local, engine: toc, schema: \"{}\", spaces: [{{handler: Default, roots: [{{path: \"{}\"}}]}}]}}\n",
                schema.display(),
                root.display()
            );
            std::fs::write(&p, text).map_err(io_error(format!("cannot write {}", p.display())))?;
            Ok((p, vec![root]))
        }
    }
}

/// The `FDB_DBNAMES_FILE` to give FDB5 (see the module documentation): `None` (FDB5's own
/// choice) where the caller set one or no database sits directly under a root; an empty file
/// (FDB5's default names) where one does.
fn dbnames_for(roots: &[PathBuf], scratch: &Path) -> Result<Option<PathBuf>, ImportError> {
    if std::env::var_os("FDB_DBNAMES_FILE").is_some() || !default_names_under(roots) {
        return Ok(None);
    }
    let p = scratch.join("dbnames");
    std::fs::write(&p, "").map_err(io_error(format!("cannot write {}", p.display())))?;
    Ok(Some(p))
}

/// Whether a TOC database (a directory holding a `toc` file) sits directly under one of
/// `roots`: what FDB5's default database names make.
fn default_names_under(roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| {
        std::fs::read_dir(root)
            .is_ok_and(|entries| entries.flatten().any(|e| e.path().join("toc").is_file()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn parses_fdb5_key_strings() {
        let k = crate::fdb5::parse_key_string(
            "{class=od,expver=0001}{type=an,levtype=sfc}{step=0,levelist=,param=130}",
        )
        .unwrap();
        assert_eq!(
            k.to_string(),
            "class=od,expver=0001,type=an,levtype=sfc,step=0,param=130"
        );
        assert!(crate::fdb5::parse_key_string("Listing for request").is_none());
        assert!(crate::fdb5::parse_key_string("{a=1}{b=2}").is_none());
    }

    /// Requests reach FDB5 canonical (its C API expands nothing), or as written with `raw`.
    #[test]
    fn requests_are_canonicalised_for_fdb5() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::OpenOptions {
            root: Some(dir.path().into()),
            config: crate::ConfigSource::Yaml {
                text: "backend: posix\n".into(),
                origin: "test".into(),
            },
            ..crate::OpenOptions::default()
        }
        .local()
        .unwrap();
        let got = fdb5_request(
            &store,
            "class=od,expver=1,time=12,param=t,step=0/to/12/by/6",
            false,
        )
        .unwrap();
        let get = |k: &str| got.iter().find(|(kw, _)| kw == k).map(|(_, v)| v.clone());
        assert_eq!(get("expver"), Some(vec!["0001".to_string()]));
        assert_eq!(get("time"), Some(vec!["1200".to_string()]));
        assert_eq!(get("param"), Some(vec!["130".to_string()]));
        assert_eq!(get("step").map(|v| v.len()), Some(3));
        let raw = fdb5_request(&store, "class=ea,param=130/129", true).unwrap();
        assert_eq!(
            raw,
            vec![
                ("class".to_string(), vec!["ea".to_string()]),
                (
                    "param".to_string(),
                    vec!["130".to_string(), "129".to_string()]
                )
            ]
        );
        assert!(fdb5_request(&store, "class", true).is_err());
    }

    #[test]
    fn default_database_names_are_recognised_by_layout() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let nested = root.join("ea:0001/20170101:0000:g/enda");
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::write(nested.join("toc"), b"").unwrap();
        assert!(!default_names_under(std::slice::from_ref(&root)));
        let flat = root.join("ea:0001:enda:20170101:0000:g");
        std::fs::create_dir_all(&flat).unwrap();
        std::fs::write(flat.join("toc"), b"").unwrap();
        assert!(default_names_under(&[root]));
    }
}
