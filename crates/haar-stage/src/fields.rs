//! Fields as staging objects: a MARS request's fields out of a store into one GRIB file,
//! GRIB files into a store (through `haar::ingest`, the path `haar archive` takes), and a
//! request from one store to another. Every field's CRC-32C is carried end to end: the store
//! verifies it on retrieve and hands it over, the file is read back and compared, the
//! destination store checks it on archive.
//!
//! Owns the mapping of fields onto tasks; stores are opened by [`crate::Dataspaces`].

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use haar_core::request::Request;

use crate::copy;
use crate::error::{Error, Result};
use crate::task::{TaskRun, write_to};

/// The fields of `req` in store dataspace `space` written to the GRIB file `dst` (temporary
/// name, fsync, read back, rename).
pub(crate) fn store_to_file(
    run: &mut TaskRun,
    space: &str,
    req: &Request,
    dst: &Path,
) -> Result<()> {
    let store = run.spaces().open_store(space, false)?;
    let total: u64 = store.list(req)?.iter().map(|f| f.data.length).sum();
    if total == 0 {
        return Err(Error::Missing(format!(
            "no field in dataspace {space} matches {req}"
        )));
    }
    run.plan_one(total);
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p).map_err(|e| Error::io("create", p, e))?;
    }
    let tmp = copy::temp_name(dst, run.id());
    let _ = std::fs::remove_file(&tmp);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(|e| Error::io("create", &tmp, e))?;
    let result = (|| {
        // Fields of 64 KiB or more bypass the buffer (one copy fewer); smaller ones are
        // gathered into 64 KiB writes.
        let mut out = std::io::BufWriter::with_capacity(64 << 10, file);
        let mut crc = 0u32;
        let mut len = 0u64;
        let mut failure: Option<Error> = None;
        let report = store.retrieve(req, &mut |key, bytes, field_crc| {
            if let Some(c) = field_crc {
                let actual = haar_persist::crc32c(bytes);
                if actual != c {
                    failure = Some(Error::Checksum {
                        path: dst.into(),
                        detail: format!("field {key}: store says {c:08x}, bytes are {actual:08x}"),
                    });
                    return Err(haar::Error::Config("checksum mismatch".into()));
                }
            }
            if run.cancelled_now() {
                failure = Some(Error::Cancelled(run.id().into()));
                return Err(haar::Error::Config("cancelled".into()));
            }
            if let Err(e) = write_to(&mut out, bytes, &tmp) {
                failure = Some(e);
                return Err(haar::Error::Config("write failed".into()));
            }
            crc = haar_persist::crc32c_append(crc, bytes);
            len += bytes.len() as u64;
            run.advance_by(bytes.len() as u64);
            Ok(())
        });
        if let Some(f) = failure {
            return Err(f);
        }
        let report = report?;
        if !report.missing.is_empty() {
            return Err(Error::Missing(format!(
                "{} field(s) of {req} missing in dataspace {space}, e.g. {}",
                report.missing.len(),
                report.missing[0]
            )));
        }
        let file = out
            .into_inner()
            .map_err(|e| Error::io("write", &tmp, e.into_error()))?;
        file.sync_data().map_err(|e| Error::io("fsync", &tmp, e))?;
        let back = copy::file_crc(&tmp)?;
        if back != (len, crc) {
            return Err(Error::Checksum {
                path: tmp.clone(),
                detail: format!("read back {:?}, wrote ({len}, {crc:08x})", back),
            });
        }
        std::fs::rename(&tmp, dst).map_err(|e| Error::io("rename", dst, e))?;
        if let Some(p) = dst.parent() {
            copy::sync_dir(p)?;
        }
        Ok((len, crc))
    })();
    match result {
        Ok((len, crc)) => {
            run.finish_one(dst.into(), len, crc);
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// The GRIB file `src` (or every file below the directory `src`) archived into the store of
/// dataspace `space` and flushed; an input with any fault fails the task (nothing of it is
/// archived, as `haar archive` guarantees).
pub(crate) fn file_to_store(run: &mut TaskRun, src: &Path, space: &str) -> Result<()> {
    let mut files = Vec::new();
    collect_files(src, &mut files)?;
    let mut total = 0;
    for f in &files {
        total += std::fs::metadata(f)
            .map_err(|e| Error::io("stat", f, e))?
            .len();
    }
    run.plan_one(total);
    let mut store = run.spaces().open_store(space, true)?;
    let inputs = files
        .iter()
        .map(|f| haar::ingest::Input::File(f.clone()))
        .collect();
    let report = haar::ingest::ingest(
        &mut *store,
        inputs,
        &haar::ingest::IngestOptions::default(),
        &mut |p| run.set_done(p.bytes),
    )?;
    if !report.failed.is_empty() {
        return Err(Error::Usage(format!(
            "not archived into {space}: {}",
            report.failed.join("; ")
        )));
    }
    run.set_done(total);
    run.finish_one(space.into(), report.bytes, 0);
    Ok(())
}

/// The fields of `req` in dataspace `from` archived into dataspace `to` with the CRC-32C the
/// source store verified (the destination refuses bytes that do not match it), then flushed.
pub(crate) fn store_to_store(run: &mut TaskRun, from: &str, req: &Request, to: &str) -> Result<()> {
    let src = run.spaces().open_store(from, false)?;
    let total: u64 = src.list(req)?.iter().map(|f| f.data.length).sum();
    if total == 0 {
        return Err(Error::Missing(format!(
            "no field in dataspace {from} matches {req}"
        )));
    }
    run.plan_one(total);
    let mut dst = run.spaces().open_store(to, true)?;
    let mut failure: Option<Error> = None;
    let mut len = 0u64;
    let report = src.retrieve(req, &mut |key, bytes, crc| {
        if run.cancelled_now() {
            failure = Some(Error::Cancelled(run.id().into()));
            return Err(haar::Error::Config("cancelled".into()));
        }
        let split = dst.split(key)?;
        dst.archive_split(&split, bytes, crc)?;
        len += bytes.len() as u64;
        run.advance_by(bytes.len() as u64);
        Ok(())
    });
    if let Some(f) = failure {
        return Err(f);
    }
    let report = report?;
    if !report.missing.is_empty() {
        return Err(Error::Missing(format!(
            "{} field(s) of {req} missing in dataspace {from}",
            report.missing.len()
        )));
    }
    dst.flush()?;
    run.finish_one(to.into(), len, 0);
    Ok(())
}

fn collect_files(p: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    let meta = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::Missing(format!("source {} does not exist", p.display()))
        }
        _ => Error::io("stat", p, e),
    })?;
    if meta.is_file() {
        out.push(p.into());
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(p)
        .map_err(|e| Error::io("list", p, e))?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for e in entries {
        collect_files(&e, out)?;
    }
    Ok(())
}
