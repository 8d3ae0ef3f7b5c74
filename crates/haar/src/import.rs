//! Importing an existing FDB5 database into any [`FieldStore`], verified field by field.
//!
//! FDB5 is driven through its own command-line tools, not its C API or its TOC files:
//! `fdb-list --porcelain --location` enumerates the fields (keys as FDB5 reports them, and each
//! field's length), `fdb-read --raw` fetches them in batches from a request file holding one
//! request per field (the tool writes them back to back, in request order). Why the tools:
//! they need no compiler or headers at run time, they work the same with Debian's 5.10 and the
//! newer tools of PyPI's `pyfdb`/`fdb5lib` wheel (whose C API differs, e.g. `fdb_list`'s
//! arguments), and eckit's process-wide state, logging and exceptions stay out of haar's
//! process. Debian's 5.10 C API also cannot enumerate a whole database: `fdb_list` with an
//! empty request fails an assertion (`request.all() == request.request().empty()`) and dumps
//! a backtrace, while `fdb-list --all` works (measured 2026-11-24). A process per batch of
//! 1000 fields costs a fraction of a second, small beside the bytes copied. Reading the TOC
//! format directly would bind haar to an undocumented, versioned on-disk layout.
//!
//! The tools see the `FDB_DBNAMES_FILE` FDB5 itself would (the system's dbnames, as stock
//! `fdb-write` used) first; an empty one when that lists nothing or its first field does not
//! read back (5.10 lists databases whatever the dbnames, but reads only under the names they
//! were written with).
//!
//! Per batch: fetch, check each field's length against `fdb-list`'s, archive into the store
//! with the keys FDB5 reports (re-split by the store's schema), flush, then read every field
//! back from the store and compare bytes and CRC-32C with what FDB5 returned. A field that
//! fails is named in the report; the others stay flushed.
//! This module owns nothing else: it must not know how the store keeps bytes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Instant;

use haar_core::Key;
use haar_store::FieldStore;

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
    /// The FDB5 database.
    pub source: Fdb5Source,
    /// FDB5 request selecting what to import, as `fdb-list` takes it; `None`: everything.
    pub request: Option<String>,
    /// Pass the request to `fdb-list` unexpanded (FDB5 5.10 cannot expand `param` for some
    /// classes, e.g. class=ea); values must then be canonical.
    pub raw: bool,
    /// Fields fetched per `fdb-read` call (and per flush and verification pass).
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
    /// Distinct fields `fdb-list` reported.
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
    /// Running `fdb-list`.
    pub list: f64,
    /// Running `fdb-read` and splitting its output.
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
    /// An FDB5 tool is not installed or not on `PATH`.
    #[error(
        "{tool} not found: install FDB5's tools (Debian: apt-get install fdb5; or pip install pyfdb) or put them on PATH"
    )]
    ToolMissing {
        /// `fdb-list` or `fdb-read`.
        tool: String,
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
    /// An FDB5 tool failed.
    #[error("{tool} {args} failed ({status}): {stderr}")]
    Tool {
        /// The tool.
        tool: String,
        /// Its arguments, space-separated.
        args: String,
        /// How it ended.
        status: ExitStatus,
        /// The last lines of its standard error, joined with ` | `.
        stderr: String,
    },
    /// A tool's output is not what FDB5 writes (a listing line, a batch of the wrong size).
    #[error("{0}")]
    BadOutput(String),
    /// Scratch files or a tool could not be used.
    #[error("{what}: {source}")]
    Io {
        /// What could not be done, naming the path or tool.
        what: String,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// `fdb-list` reports no field for the request.
    #[error("FDB5 lists no field for {request}")]
    NothingListed {
        /// The request, or "the whole database".
        request: String,
    },
    /// The store failed (archive or flush).
    #[error(transparent)]
    Store(#[from] haar_store::Error),
}

fn io_error(what: String) -> impl FnOnce(std::io::Error) -> ImportError {
    move |source| ImportError::Io { what, source }
}

/// One field as `fdb-list` reports it.
struct Listed {
    key: Key,
    length: Option<u64>,
}

/// A private scratch directory removed on every exit path.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How to run the FDB5 tools against the chosen database.
struct Fdb5Env {
    config: PathBuf,
    /// `FDB_DBNAMES_FILE` for the tools (`None`: inherited).
    dbnames: Option<PathBuf>,
    /// The settings of `dbnames` to try, in order, until one lists fields.
    dbnames_choices: Vec<Option<PathBuf>>,
}

impl Fdb5Env {
    fn command(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.env("FDB5_CONFIG_FILE", &self.config);
        if let Some(d) = &self.dbnames {
            c.env("FDB_DBNAMES_FILE", d);
        }
        c
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<Vec<u8>, ImportError> {
        let out = self.command(tool).args(args).output().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ImportError::ToolMissing { tool: tool.into() }
            } else {
                io_error(format!("cannot run {tool}"))(e)
            }
        })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(6).collect();
            return Err(ImportError::Tool {
                tool: tool.into(),
                args: args.join(" "),
                status: out.status,
                stderr: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
            });
        }
        Ok(out.stdout)
    }
}

/// Parses one `fdb-list --porcelain [--location]` line:
/// `{k=v,..}{k=v,..}{k=v,..} TocFieldLocation[...,length=N,...]`.
fn parse_list_line(line: &str) -> Option<Listed> {
    let mut rest = line.trim();
    let mut key = Key::new();
    for _ in 0..3 {
        rest = rest.strip_prefix('{')?;
        let end = rest.find('}')?;
        for kv in rest[..end].split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=')?;
            if !v.is_empty() {
                key.push(k, v);
            }
        }
        rest = &rest[end + 1..];
    }
    let length = rest.find("length=").and_then(|i| {
        let digits: String = rest[i + 7..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    });
    Some(Listed { key, length })
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

/// Splits `fdb-read`'s output into the batch's fields: by `fdb-list`'s lengths when it gave
/// them, else by GRIB framing.
fn split_batch<'a>(batch: &[Listed], data: &'a [u8]) -> Result<Vec<&'a [u8]>, String> {
    if batch.iter().all(|f| f.length.is_some()) {
        let want: u64 = batch.iter().map(|f| f.length.unwrap()).sum();
        if want != data.len() as u64 {
            return Err(format!(
                "fdb-read returned {} bytes for {} fields, fdb-list says {want}",
                data.len(),
                batch.len()
            ));
        }
        let mut out = Vec::with_capacity(batch.len());
        let mut at = 0usize;
        for f in batch {
            let n = f.length.unwrap() as usize;
            out.push(&data[at..at + n]);
            at += n;
        }
        return Ok(out);
    }
    let msgs: Vec<&[u8]> = haar_grib::messages(data)
        .map(|m| m.map(|m| m.bytes).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    if msgs.len() != batch.len() {
        return Err(format!(
            "fdb-read returned {} GRIB messages for {} fields",
            msgs.len(),
            batch.len()
        ));
    }
    Ok(msgs)
}

/// Fetches `batch` with one `fdb-read`, filling `parts` (one slot per field of `batch`). If
/// FDB5 refuses the batch (e.g. `fdb-read` throws on a value it archived itself, such as
/// `date=aug-01` in 5.10), the halves are fetched separately, down to single fields, which are
/// then reported as failed with FDB5's message.
fn fetch(
    env: &Fdb5Env,
    batch: &[Listed],
    scratch: &Path,
    parts: &mut [Option<Vec<u8>>],
    failures: &mut Vec<String>,
) -> Result<(), ImportError> {
    let req_path = scratch.join("batch.req");
    let out_path = scratch.join("batch.grib");
    let mut text = String::new();
    for f in batch {
        text.push_str("retrieve,");
        text.push_str(&f.key.to_string());
        text.push('\n');
    }
    std::fs::write(&req_path, text)
        .map_err(io_error(format!("cannot write {}", req_path.display())))?;
    let _ = std::fs::remove_file(&out_path);
    let read = env.run(
        "fdb-read",
        &[
            "--raw",
            &req_path.display().to_string(),
            &out_path.display().to_string(),
        ],
    );
    let outcome = read.and_then(|_| {
        let data = std::fs::read(&out_path)
            .map_err(io_error(format!("cannot read {}", out_path.display())))?;
        let split = split_batch(batch, &data).map_err(ImportError::BadOutput)?;
        Ok(split.into_iter().map(<[u8]>::to_vec).collect::<Vec<_>>())
    });
    match outcome {
        Ok(fields) => {
            for (slot, f) in parts.iter_mut().zip(fields) {
                *slot = Some(f);
            }
            Ok(())
        }
        Err(e @ ImportError::ToolMissing { .. }) => Err(e), // nothing to bisect
        Err(e) if batch.len() == 1 => {
            failures.push(format!("{}: FDB5 cannot read it: {e}", batch[0].key));
            Ok(())
        }
        Err(_) => {
            let mid = batch.len() / 2;
            let (a, b) = batch.split_at(mid);
            let (pa, pb) = parts.split_at_mut(mid);
            fetch(env, a, scratch, pa, failures)?;
            fetch(env, b, scratch, pb, failures)
        }
    }
}

/// Imports the fields `opts` selects from an FDB5 database into `store`, batch by batch:
/// fetched with `fdb-read`, archived under the keys FDB5 reports, flushed, read back and
/// compared. Fields verified stay flushed whatever happens to later ones.
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
    let mut env = fdb5_env(&opts.source, &scratch.0)?;

    // 1. Enumerate: with the dbnames FDB5 itself would use (the system's, as stock
    // `fdb-write` did), then, if that finds nothing or fails, with none (what haar's own
    // FDB5 set-ups and the newer tools use); the first that lists fields serves the import.
    let mut args = vec!["--porcelain", "--location"];
    if opts.raw {
        args.push("--raw");
    }
    match &opts.request {
        Some(r) => args.push(r),
        None => args.extend(["--minimum-keys=", "--all"]),
    }
    // The first setting whose listing also reads back (FDB5 5.10 lists databases whatever the
    // dbnames, but finds their data only under the names they were written with); failing
    // that, the first that lists anything, so the fields' failures are reported one by one.
    let mut chosen: Option<(Option<PathBuf>, String)> = None;
    let mut first_error = None;
    for dbnames in env.dbnames_choices.clone() {
        env.dbnames = dbnames.clone();
        let listing = match env.run("fdb-list", &args) {
            Ok(out) => String::from_utf8_lossy(&out).into_owned(),
            Err(e @ ImportError::ToolMissing { .. }) => return Err(e),
            Err(e) => {
                first_error.get_or_insert(e);
                continue;
            }
        };
        let Some(first) = listing
            .lines()
            .find(|l| l.starts_with('{'))
            .and_then(parse_list_line)
        else {
            continue;
        };
        let mut probe = vec![None];
        fetch(&env, &[first], &scratch.0, &mut probe, &mut Vec::new())?;
        let reads = probe[0].as_ref().is_some_and(|b| !b.is_empty());
        if reads || chosen.is_none() {
            chosen = Some((dbnames, listing));
        }
        if reads {
            break;
        }
    }
    let listing = match (chosen, first_error) {
        (Some((dbnames, listing)), _) => {
            env.dbnames = dbnames;
            listing
        }
        (None, Some(e)) => return Err(e),
        (None, None) => String::new(),
    };
    let mut fields = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for line in listing.lines().filter(|l| l.starts_with('{')) {
        let f = parse_list_line(line).ok_or_else(|| {
            ImportError::BadOutput(format!("cannot parse fdb-list line {line:?}"))
        })?;
        if seen.insert(f.key.to_string()) {
            fields.push(f);
        }
    }
    let mut report = ImportReport {
        listed: fields.len(),
        ..ImportReport::default()
    };
    report.phases.list = start.elapsed().as_secs_f64();
    if fields.is_empty() {
        return Err(ImportError::NothingListed {
            request: (opts.request.as_deref())
                .unwrap_or("the whole database")
                .to_string(),
        });
    }

    // 2. Fetch, archive, flush, verify, batch by batch.
    for batch in fields.chunks(opts.batch.max(1)) {
        let t = Instant::now();
        let mut parts: Vec<Option<Vec<u8>>> = vec![None; batch.len()];
        fetch(&env, batch, &scratch.0, &mut parts, &mut report.failed)?;
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
fn verify(store: &dyn FieldStore, archived: &[Archived], report: &mut ImportReport) {
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
    archived: &[Archived],
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

/// The FDB5 configuration: the given file, or one written for a root with its schema.
/// Where the caller set `FDB_DBNAMES_FILE`, the tools use it; otherwise the system's dbnames
/// (Debian's `/etc/fdb/dbnames`, what stock `fdb-write` names databases with) are tried first,
/// then an empty file (FDB5's default names; newer FDB5 tools may crash on Debian's file).
fn fdb5_env(source: &Fdb5Source, scratch: &Path) -> Result<Fdb5Env, ImportError> {
    let dbnames_choices = if std::env::var_os("FDB_DBNAMES_FILE").is_some() {
        vec![None]
    } else {
        let p = scratch.join("dbnames");
        std::fs::write(&p, "").map_err(io_error(format!("cannot write {}", p.display())))?;
        vec![None, Some(p)]
    };
    let bad =
        |what: String, source: Option<std::io::Error>| ImportError::BadSource { what, source };
    let config = match source {
        Fdb5Source::Config(c) => {
            if !c.is_file() {
                return Err(bad(
                    format!("FDB5 configuration {} not found", c.display()),
                    None,
                ));
            }
            c.clone()
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
            p
        }
    };
    Ok(Fdb5Env {
        config,
        dbnames: None,
        dbnames_choices,
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
    fn parses_fdb_list_location_lines() {
        let l = parse_list_line(
            "{class=od,expver=0001}{type=an,levtype=sfc}{step=0,param=130} \
             TocFieldLocation[uri=URI[scheme=file,name=/x/an:sfc.data],offset=0,length=9410,remapKey={}]",
        )
        .unwrap();
        assert_eq!(
            l.key.to_string(),
            "class=od,expver=0001,type=an,levtype=sfc,step=0,param=130"
        );
        assert_eq!(l.length, Some(9410));
        let l = parse_list_line("{a=1}{b=2}{c=3}").unwrap();
        assert_eq!(l.length, None);
        assert!(parse_list_line("Listing for request").is_none());
    }
}
