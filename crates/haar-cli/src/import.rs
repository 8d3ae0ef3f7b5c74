//! `haar import-fdb5`: bring the fields of an existing FDB5 database into haar, verified field
//! by field.
//!
//! FDB5 is driven through its own command-line tools, not its C API or its TOC files:
//! `fdb-list --porcelain --location` enumerates the fields (keys as FDB5 reports them, and each
//! field's length), `fdb-read --raw` fetches them in batches from a request file holding one
//! request per field (the tool writes them back to back, in request order). Why the tools:
//! they need no compiler or headers at run time, they work the same with Debian's 5.10 and the
//! newer tools of PyPI's `pyfdb`/`fdb5lib` wheel (whose C API differs, e.g. `fdb_list`'s
//! arguments), and eckit's process-wide state, logging and exceptions stay out of haar's
//! process. A process per batch of 1000 fields costs a fraction of a second, small beside the
//! bytes copied. Reading the TOC format directly would bind haar to an undocumented, versioned
//! on-disk layout.
//!
//! Per batch: fetch, check each field's length against `fdb-list`'s, archive into haar with the
//! keys FDB5 reports (re-split by haar's schema), flush, then read every field back from haar
//! and compare bytes and CRC-32C with what FDB5 returned. Exit 3 if any field fails, naming it.
//! This module owns nothing else: it must not know how haar stores bytes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use haar_core::Key;
use serde_json::json;

use crate::Failure;
use crate::args::{Cli, ImportFdb5Args};
use crate::open;

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
    dbnames: Option<PathBuf>,
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

    fn run(&self, tool: &str, args: &[&str]) -> Result<Vec<u8>, Failure> {
        let out = self.command(tool).args(args).output().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Failure::usage(format!(
                    "{tool} not found: install FDB5's tools (Debian: apt-get install fdb5; \
                     or pip install pyfdb) or put them on PATH"
                ))
            } else {
                Failure::io(format!("cannot run {tool}: {e}"))
            }
        })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(6).collect();
            return Err(Failure::io(format!(
                "{tool} {} failed ({}): {}",
                args.join(" "),
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )));
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

/// Fetches `batch` with one `fdb-read`, filling `parts` (one slot per field of `batch`). If FDB5 refuses the batch (e.g. `fdb-read` throws on a value it archived
/// itself, such as `date=aug-01` in 5.10), the halves are fetched separately, down to single
/// fields, which are then reported as failed with FDB5's message.
fn fetch(
    env: &Fdb5Env,
    batch: &[Listed],
    scratch: &Path,
    parts: &mut [Option<Vec<u8>>],
    failures: &mut Vec<String>,
) -> Result<(), Failure> {
    let req_path = scratch.join("batch.req");
    let out_path = scratch.join("batch.grib");
    let mut text = String::new();
    for f in batch {
        text.push_str("retrieve,");
        text.push_str(&f.key.to_string());
        text.push('\n');
    }
    std::fs::write(&req_path, text)
        .map_err(|e| Failure::io(format!("cannot write {}: {e}", req_path.display())))?;
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
            .map_err(|e| Failure::io(format!("cannot read {}: {e}", out_path.display())))?;
        let split = split_batch(batch, &data).map_err(Failure::io)?;
        Ok(split.into_iter().map(<[u8]>::to_vec).collect::<Vec<_>>())
    });
    match outcome {
        Ok(fields) => {
            for (slot, f) in parts.iter_mut().zip(fields) {
                *slot = Some(f);
            }
            Ok(())
        }
        Err(e) if e.code == 1 => Err(e), // tool missing: nothing to bisect
        Err(e) if batch.len() == 1 => {
            failures.push(format!(
                "{}: FDB5 cannot read it: {}",
                batch[0].key, e.message
            ));
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

/// Runs `haar import-fdb5`.
pub fn run(cli: &Cli, a: &ImportFdb5Args) -> Result<(), Failure> {
    let start = Instant::now();
    let scratch = Scratch(std::env::temp_dir().join(format!(
        "haar-import-fdb5-{}-{}",
        std::process::id(),
        start.elapsed().as_nanos()
    )));
    std::fs::create_dir_all(&scratch.0)
        .map_err(|e| Failure::io(format!("cannot create {}: {e}", scratch.0.display())))?;
    let env = fdb5_env(a, &scratch.0)?;
    let mut store = open::store(cli)?;

    // 1. Enumerate.
    let mut args = vec!["--porcelain", "--location"];
    if a.raw {
        args.push("--raw");
    }
    match &a.request {
        Some(r) => args.push(r),
        None => args.extend(["--minimum-keys=", "--all"]),
    }
    let listing = String::from_utf8_lossy(&env.run("fdb-list", &args)?).into_owned();
    let mut fields = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for line in listing.lines().filter(|l| l.starts_with('{')) {
        let f = parse_list_line(line)
            .ok_or_else(|| Failure::io(format!("cannot parse fdb-list line {line:?}")))?;
        if seen.insert(f.key.to_string()) {
            fields.push(f);
        }
    }
    let listed_secs = start.elapsed().as_secs_f64();
    if fields.is_empty() {
        return Err(Failure::missing(format!(
            "FDB5 lists no field for {}",
            a.request.as_deref().unwrap_or("the whole database")
        )));
    }

    // 2. Fetch, archive, flush, verify, batch by batch.
    let (mut imported, mut bytes) = (0usize, 0u64);
    let mut failures: Vec<String> = Vec::new();
    let (mut read_secs, mut archive_secs, mut verify_secs) = (0f64, 0f64, 0f64);
    let batch_size = a.batch.max(1);
    for batch in fields.chunks(batch_size) {
        let t = Instant::now();
        let mut parts: Vec<Option<Vec<u8>>> = vec![None; batch.len()];
        fetch(&env, batch, &scratch.0, &mut parts, &mut failures)?;
        read_secs += t.elapsed().as_secs_f64();

        let t = Instant::now();
        let mut archived = Vec::with_capacity(batch.len());
        for (f, part) in batch.iter().zip(&parts) {
            let Some(part) = part else { continue };
            match store.split(&f.key) {
                Ok(split) => {
                    store.archive_split(&split, part, None)?;
                    archived.push((f, part.as_slice(), crc32c(part)));
                }
                Err(e) => failures.push(format!("{}: not archived: {e}", f.key)),
            }
        }
        store.flush()?;
        archive_secs += t.elapsed().as_secs_f64();

        let t = Instant::now();
        let mut buf = Vec::new();
        for (f, theirs, crc) in archived {
            buf.clear();
            let read = store.retrieve_keys(std::slice::from_ref(&f.key), |_, b, _| {
                buf.extend_from_slice(b);
                Ok(())
            });
            match read.map(|r| r.found == 1) {
                Ok(true) if buf == theirs && crc32c(&buf) == crc => {
                    imported += 1;
                    bytes += buf.len() as u64;
                }
                Ok(true) => failures.push(format!(
                    "{}: haar returns {} bytes (crc32c {:08x}), FDB5 gave {} (crc32c {crc:08x})",
                    f.key,
                    buf.len(),
                    crc32c(&buf),
                    theirs.len()
                )),
                Ok(false) => failures.push(format!("{}: not found in haar after flush", f.key)),
                Err(e) => failures.push(format!("{}: {e}", f.key)),
            }
        }
        verify_secs += t.elapsed().as_secs_f64();
    }

    let secs = start.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            json!({
                "listed": fields.len(), "fields": imported, "bytes": bytes,
                "failed": failures, "seconds": secs,
                "phases": {"list": listed_secs, "fdb_read": read_secs,
                           "archive_flush": archive_secs, "verify": verify_secs},
            })
        );
    } else {
        println!(
            "imported and verified {imported} of {} field(s), {:.1} MiB in {secs:.2} s \
             (fdb-list {listed_secs:.2} s, fdb-read {read_secs:.2} s, archive+flush \
             {archive_secs:.2} s, verify {verify_secs:.2} s)",
            fields.len(),
            bytes as f64 / 1048576.0
        );
    }
    if !failures.is_empty() {
        for f in failures.iter().take(20) {
            eprintln!("haar: import failed: {f}");
        }
        if failures.len() > 20 {
            eprintln!("haar: … and {} more", failures.len() - 20);
        }
        return Err(Failure::io(format!(
            "{} field(s) failed to import or verify; the {imported} verified field(s) are flushed",
            failures.len()
        )));
    }
    Ok(())
}

/// The FDB5 configuration: the given file, or one written for `--fdb-root` with the schema.
/// `FDB_DBNAMES_FILE` points at an empty file unless the caller set it (newer FDB5 tools may
/// crash on Debian's `/etc/fdb/dbnames`).
fn fdb5_env(a: &ImportFdb5Args, scratch: &Path) -> Result<Fdb5Env, Failure> {
    let dbnames = if std::env::var_os("FDB_DBNAMES_FILE").is_some() {
        None
    } else {
        let p = scratch.join("dbnames");
        std::fs::write(&p, "")
            .map_err(|e| Failure::io(format!("cannot write {}: {e}", p.display())))?;
        Some(p)
    };
    let config = match (&a.fdb_config, &a.fdb_root) {
        (Some(c), _) => {
            if !c.is_file() {
                return Err(Failure::usage(format!(
                    "FDB5 configuration {} not found",
                    c.display()
                )));
            }
            c.clone()
        }
        (None, Some(root)) => {
            if !root.is_dir() {
                return Err(Failure::usage(format!(
                    "FDB5 root {} is not a directory",
                    root.display()
                )));
            }
            let root = root
                .canonicalize()
                .map_err(|e| Failure::usage(format!("{}: {e}", root.display())))?;
            let schema = a
                .fdb_schema
                .canonicalize()
                .map_err(|e| Failure::usage(format!("schema {}: {e}", a.fdb_schema.display())))?;
            let p = scratch.join("fdb5-config.yaml");
            let text = format!(
                "{{type: local, engine: toc, schema: \"{}\", spaces: [{{handler: Default, roots: [{{path: \"{}\"}}]}}]}}\n",
                schema.display(),
                root.display()
            );
            std::fs::write(&p, text)
                .map_err(|e| Failure::io(format!("cannot write {}: {e}", p.display())))?;
            p
        }
        (None, None) => {
            return Err(Failure::usage(
                "give the FDB5 database with --fdb-config FILE or --fdb-root DIR",
            ));
        }
    };
    Ok(Fdb5Env { config, dbnames })
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
