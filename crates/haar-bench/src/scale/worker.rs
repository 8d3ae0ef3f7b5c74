//! The scale worker: one store (haar or FDB5) in a process of its own, filled and measured
//! on the parent's word (`fill J`, `measure JSON` on its stdin). Must not touch the other
//! store or the report.

use std::io::BufRead;
use std::time::Instant;

use haar::OpenOptions;
use haar_core::Key;
use haar_core::request::Request;
use haar_store::FieldStore;
use serde_json::json;

use super::{
    InProcess, MIN_FIELD_BYTES, PER_MEMBER_STEP, Picks, Side, Spec, failed, is_field, key,
    list_request, member_step, ms, request_text, stamp, template,
};
use crate::error::{Error, io};
use crate::fdb5::Fdb5Store;
use crate::procs::Reporter;

/// One store as a worker drives it.
trait Target {
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<(), Error>;
    fn flush(&mut self) -> Result<(), Error>;
    /// Waits for the work the writer left running in the background after its last flush
    /// (haar: the catalogue merges it asked for, which a closing writer finishes; FDB5 has
    /// none).
    fn settle(&mut self) -> Result<(), Error> {
        Ok(())
    }
    /// Opens a fresh handle and reads field `key` through it; returns the bytes.
    fn open_read(&mut self, key: &Key, buf: &mut Vec<u8>) -> Result<(), Error>;
    /// Makes the reader handle the timed lists and reads use (after the fill).
    fn renew(&mut self) -> Result<(), Error>;
    /// Lists member-step `j` through the reader handle; returns how many fields it listed.
    fn list(&mut self, j: u64) -> Result<u64, Error>;
    /// Reads field `key` through the reader handle.
    fn read(&mut self, key: &Key, buf: &mut Vec<u8>) -> Result<(), Error>;
}

struct HaarTarget {
    opts: OpenOptions,
    writer: Box<dyn FieldStore>,
    reader: Option<Box<dyn FieldStore>>,
}

fn haar_read(store: &dyn FieldStore, key: &Key, buf: &mut Vec<u8>) -> Result<(), Error> {
    buf.clear();
    store
        .retrieve_keys(std::slice::from_ref(key), &mut |_, d, _| {
            buf.extend_from_slice(d);
            Ok(())
        })
        .map_err(failed("retrieve"))?;
    Ok(())
}

impl Target for HaarTarget {
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<(), Error> {
        self.writer.archive(key, data).map_err(failed("archive"))
    }
    fn flush(&mut self) -> Result<(), Error> {
        self.writer.flush().map_err(failed("flush"))
    }
    fn settle(&mut self) -> Result<(), Error> {
        // Closing a writer finishes its merges (design §3.1); the next fill uses a new one.
        let fresh = self.opts.field_store().map_err(failed("open"))?;
        drop(std::mem::replace(&mut self.writer, fresh));
        Ok(())
    }
    fn open_read(&mut self, key: &Key, buf: &mut Vec<u8>) -> Result<(), Error> {
        let store = self.opts.field_store().map_err(failed("open"))?;
        haar_read(&*store, key, buf)
    }
    fn renew(&mut self) -> Result<(), Error> {
        self.reader = None;
        self.reader = Some(self.opts.field_store().map_err(failed("open"))?);
        Ok(())
    }
    fn list(&mut self, j: u64) -> Result<u64, Error> {
        let reader = self.reader.as_ref().expect("renewed before measuring");
        let text = request_text(&list_request(j));
        let req = Request::parse(&text)
            .map_err(|e| Error::Failed(format!("scale: request {text}: {e}")))?;
        Ok(reader.list(&req).map_err(failed("list"))?.len() as u64)
    }
    fn read(&mut self, key: &Key, buf: &mut Vec<u8>) -> Result<(), Error> {
        let reader = self.reader.as_ref().expect("renewed before measuring");
        haar_read(&**reader, key, buf)
    }
}

struct Fdb5Target(Fdb5Store);

impl Target for Fdb5Target {
    fn archive(&mut self, key: &Key, data: &[u8]) -> Result<(), Error> {
        self.0.archive(key, data).map_err(failed("FDB5 archive"))
    }
    fn flush(&mut self) -> Result<(), Error> {
        self.0.flush().map_err(failed("FDB5 flush"))
    }
    fn open_read(&mut self, key: &Key, buf: &mut Vec<u8>) -> Result<(), Error> {
        let n = self
            .0
            .read_fresh(key, buf)
            .map_err(failed("FDB5 retrieve"))?;
        buf.truncate(n);
        Ok(())
    }
    fn renew(&mut self) -> Result<(), Error> {
        self.0.renew_reader().map_err(failed("FDB5 handle"))
    }
    fn list(&mut self, j: u64) -> Result<u64, Error> {
        let n = self
            .0
            .list_count(&list_request(j))
            .map_err(failed("FDB5 list"))?;
        Ok(n as u64)
    }
    fn read(&mut self, key: &Key, buf: &mut Vec<u8>) -> Result<(), Error> {
        let n = self
            .0
            .read_warm(key, buf)
            .map_err(failed("FDB5 retrieve"))?;
        buf.truncate(n);
        Ok(())
    }
}

/// Runs one scale worker (`haar workload-worker --spec '{"scale":…}'`): opens its store, says
/// `ready` (with FDB5's version), then obeys `fill J` (archive member-steps up to `J`, a
/// flush after each, `progress FIELDS` lines, then `filled JSON`) and `measure JSON` (answers
/// `measured JSON`) until its stdin closes.
pub fn worker(opts: &OpenOptions, spec: Spec, mut rep: Reporter) -> Result<(), Error> {
    if spec.field_bytes < MIN_FIELD_BYTES {
        return Err(Error::Usage(format!(
            "--field-bytes must be at least {MIN_FIELD_BYTES}"
        )));
    }
    let (mut target, version): (Box<dyn Target>, String) = match spec.side {
        Side::Haar => {
            let writer = opts.field_store().map_err(failed("open"))?;
            let version = writer.describe();
            let t = HaarTarget {
                opts: opts.clone(),
                writer,
                reader: None,
            };
            (Box::new(t), version)
        }
        Side::Fdb5 => {
            let f = Fdb5Store::open().map_err(failed("FDB5 open"))?;
            let v = f.version().to_string();
            (Box::new(Fdb5Target(f)), v)
        }
    };
    rep.say(&format!("ready {}", json!({ "version": version })))?;
    let mut data = template(spec.field_bytes);
    let mut done: u64 = 0; // member-steps archived
    let mut buf = Vec::with_capacity(spec.field_bytes * 2);
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(io("scale worker: reading the parent's commands"))?;
        let (cmd, arg) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match cmd {
            "fill" => {
                let to: u64 = arg
                    .parse()
                    .map_err(|_| Error::Failed(format!("scale worker: bad fill {arg:?}")))?;
                let start = done;
                let t = Instant::now();
                while done < to {
                    for f in 0..PER_MEMBER_STEP {
                        let g = done * PER_MEMBER_STEP + f;
                        stamp(&mut data, g);
                        target.archive(&key(g), &data)?;
                    }
                    target.flush()?;
                    done += 1;
                    rep.say(&format!("progress {}", done * PER_MEMBER_STEP))?;
                }
                let seconds = t.elapsed().as_secs_f64();
                let t = Instant::now();
                target.settle()?;
                let settle = t.elapsed().as_secs_f64();
                let fields = (done - start) * PER_MEMBER_STEP;
                rep.say(&format!(
                    "filled {}",
                    json!({ "fields": fields, "seconds": seconds, "settle_seconds": settle })
                ))?;
            }
            "measure" => {
                let picks: Picks = serde_json::from_str(arg)
                    .map_err(|e| Error::Failed(format!("scale worker: bad measure: {e}")))?;
                let m = measure(&mut *target, &picks, spec.field_bytes, &mut buf)?;
                rep.say(&format!(
                    "measured {}",
                    serde_json::to_string(&m).expect("figures serialise")
                ))?;
            }
            other => {
                return Err(Error::Failed(format!(
                    "scale worker: unknown command {other:?}"
                )));
            }
        }
    }
    Ok(())
}

/// The in-process figures: each pick once untimed first (the warm-up), then timed.
fn measure(
    t: &mut dyn Target,
    picks: &Picks,
    size: usize,
    buf: &mut Vec<u8>,
) -> Result<InProcess, Error> {
    let check = |buf: &[u8], g: u64| {
        if is_field(buf, g, size) {
            Ok(())
        } else {
            Err(Error::Failed(format!(
                "scale: field {} read back wrong ({} bytes)",
                key(g),
                buf.len()
            )))
        }
    };
    let mut m = InProcess::default();
    let warm = picks.opens[0];
    t.open_read(&key(warm), buf)?;
    check(buf, warm)?;
    for &g in &picks.opens {
        let k = key(g);
        let t0 = Instant::now();
        t.open_read(&k, buf)?;
        m.open_ms.push(ms(t0));
        check(buf, g)?;
    }
    t.renew()?;
    m.listed = t.list(picks.lists[0])?;
    for &j in &picks.lists {
        let t0 = Instant::now();
        let n = t.list(j)?;
        m.list_ms.push(ms(t0));
        if n != PER_MEMBER_STEP {
            let (number, step) = member_step(j);
            return Err(Error::Failed(format!(
                "scale: list of number={number},step={step} found {n} fields, not {PER_MEMBER_STEP}"
            )));
        }
    }
    t.read(&key(picks.reads[0]), buf)?;
    for &g in &picks.reads {
        let k = key(g);
        let t0 = Instant::now();
        t.read(&k, buf)?;
        m.read_ms.push(ms(t0));
        check(buf, g)?;
    }
    Ok(m)
}
