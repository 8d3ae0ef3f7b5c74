//! The pipeline against a store with checkpoints (a `Store` in memory) and one without (the
//! same store behind a wrapper that cannot take fields back, as remote and dist cannot):
//! buffers, streams and files of real GRIB made by ecCodes, filters, raw inputs, and inputs
//! with a corrupt message.

use std::collections::BTreeSet;
use std::sync::Arc;

use haar_core::Key;
use haar_core::request::Request;
use haar_grib::{EnsembleSpec, Grid};
use haar_store::{FieldStore, MemoryBackend, Store};

use super::{IngestOptions, IngestReport, Input, Progress, ingest};

/// `members` × steps 0 and 6 of temperature at 500 hPa on a tiny grid, dated `date`.
fn grib(date: u32, members: u32) -> Vec<u8> {
    let spec = EnsembleSpec {
        members,
        steps: vec![0, 6],
        levels: vec![500],
        params: vec![130],
        grid: Grid::RegularLatLon { ni: 8, nj: 4 },
        date,
        ..EnsembleSpec::tiny()
    };
    let mut out = Vec::new();
    haar_grib::generate(&spec, &mut out).unwrap();
    out
}

/// `bytes` with the last message's section 1 (identification: centre, date, MARS keys) zeroed,
/// so framing still finds every message and the last one has no keys the schema accepts.
fn corrupt_last(mut bytes: Vec<u8>) -> (Vec<u8>, usize) {
    let last = haar_grib::messages(&bytes).last().unwrap().unwrap().offset as usize;
    bytes[last + 16..last + 40].fill(0);
    (bytes, last)
}

fn memory_store() -> Store {
    Store::with_options(Arc::new(MemoryBackend::new()), Default::default())
}

/// Every flushed field of `date` as `step/number` strings, and their bytes in all.
fn stored(store: &dyn FieldStore, date: u32) -> (BTreeSet<String>, u64) {
    let req = Request::parse(&format!("date={date}")).unwrap();
    let fields = store.list(&req).unwrap();
    let bytes = fields.iter().map(|f| f.data.length).sum();
    let names = fields
        .iter()
        .map(|f| {
            let k = f.key();
            format!("{}/{}", k.get("step").unwrap(), k.get("number").unwrap())
        })
        .collect();
    (names, bytes)
}

fn names(members: u32) -> BTreeSet<String> {
    (1..=members)
        .flat_map(|m| [format!("0/{m}"), format!("6/{m}")])
        .collect()
}

/// `Store` with and without its checkpoints (without: as remote and dist, which cannot take
/// fields back), counting what the pipeline asks of it.
struct Probe {
    store: Store,
    checkpoints: bool,
    archived: usize,
    discarded: usize,
}

impl Probe {
    fn new(checkpoints: bool) -> Probe {
        Probe {
            store: memory_store(),
            checkpoints,
            archived: 0,
            discarded: 0,
        }
    }
}

impl FieldStore for Probe {
    fn describe(&self) -> String {
        format!("memory store, checkpoints: {}", self.checkpoints)
    }
    fn options(&self) -> &haar_store::StoreOptions {
        FieldStore::options(&self.store)
    }
    fn archive_split(
        &mut self,
        split: &haar_core::schema::SplitKey,
        data: &[u8],
        crc: Option<u32>,
    ) -> haar_store::Result<()> {
        self.archived += 1;
        FieldStore::archive_split(&mut self.store, split, data, crc)
    }
    fn flush(&mut self) -> haar_store::Result<()> {
        FieldStore::flush(&mut self.store)
    }
    fn checkpoint(&self) -> Option<haar_store::Checkpoint> {
        self.checkpoints.then(|| self.store.checkpoint())
    }
    fn discard_since(&mut self, cp: &haar_store::Checkpoint) -> usize {
        let n = self.store.discard_since(cp);
        self.discarded += n;
        n
    }
    fn retrieve(
        &self,
        req: &Request,
        sink: &mut haar_store::Sink<'_>,
    ) -> haar_store::Result<haar_store::RetrieveReport> {
        FieldStore::retrieve(&self.store, req, sink)
    }
    fn list(&self, req: &Request) -> haar_store::Result<Vec<haar_store::Field>> {
        FieldStore::list(&self.store, req)
    }
    fn wipe(&mut self, req: &Request, doit: bool) -> haar_store::Result<haar_store::WipeReport> {
        FieldStore::wipe(&mut self.store, req, doit)
    }
    fn purge(&mut self, req: &Request, doit: bool) -> haar_store::Result<haar_store::PurgeReport> {
        FieldStore::purge(&mut self.store, req, doit)
    }
    fn stats(&self, req: &Request) -> haar_store::Result<Vec<haar_store::DbStats>> {
        FieldStore::stats(&self.store, req)
    }
}

fn run(store: &mut dyn FieldStore, inputs: Vec<Input<'_>>, opts: &IngestOptions) -> IngestReport {
    ingest(store, inputs, opts, &mut |_| {}).unwrap()
}

/// Both kinds of store, each fresh.
fn stores() -> [Probe; 2] {
    [Probe::new(true), Probe::new(false)]
}

#[test]
fn a_buffer_of_messages_archives_every_field_under_its_grib_keys() {
    let bytes = grib(20250101, 3);
    for mut store in stores() {
        let mut last = Progress::default();
        let r = ingest(
            &mut store,
            vec![Input::buffer("ens", &bytes[..])],
            &IngestOptions::default(),
            &mut |p| last = *p,
        )
        .unwrap();
        let what = store.describe();
        assert_eq!(r.fields, 6, "{what}");
        assert_eq!(r.failed, Vec::<String>::new(), "{what}");
        assert_eq!(r.files.len(), 1);
        assert_eq!((r.files[0].name.as_str(), r.files[0].fields), ("ens", 6));
        assert_eq!(r.bytes, bytes.len() as u64, "{what}");
        assert_eq!(
            (last.fields, last.bytes, last.total_bytes),
            (6, r.bytes, r.bytes)
        );
        let (got, len) = stored(&store, 20250101);
        assert_eq!(got, names(3), "{what}");
        assert_eq!(len, bytes.len() as u64, "{what}");
        // The bytes come back as they went in, in message order.
        let mut back = Vec::new();
        let req = Request::parse("date=20250101,step=0/6,number=1/2/3").unwrap();
        let rep = store
            .retrieve(&req, &mut |_, d, _| {
                back.extend_from_slice(d);
                Ok(())
            })
            .unwrap();
        assert_eq!(rep.found, 6);
        let mut want: Vec<&[u8]> = haar_grib::messages(&bytes)
            .map(|m| m.unwrap().bytes)
            .collect();
        let mut have: Vec<&[u8]> = haar_grib::messages(&back)
            .map(|m| m.unwrap().bytes)
            .collect();
        want.sort();
        have.sort();
        assert_eq!(have, want, "{what}");
    }
}

#[test]
fn a_corrupt_message_keeps_its_whole_input_out_and_the_others_in() {
    let (bad, offset) = corrupt_last(grib(20250102, 4));
    let good = grib(20250103, 2);
    for mut store in stores() {
        let what = store.describe();
        let inputs = vec![
            Input::buffer("bad", &bad[..]),
            Input::stream("good", &good[..]),
        ];
        let r = run(&mut store, inputs, &IngestOptions::default());
        assert_eq!(r.failed.len(), 1, "{what}: {:?}", r.failed);
        let msg = &r.failed[0];
        assert!(msg.starts_with("bad: message 8 (1-based)"), "{what}: {msg}");
        assert!(
            msg.contains(&format!("byte offset {offset}")),
            "{what}: {msg}"
        );
        assert_eq!(stored(&store, 20250102).0, BTreeSet::new(), "{what}");
        assert_eq!(stored(&store, 20250103).0, names(2), "{what}");
        assert_eq!(r.fields, 4, "{what}");
        assert_eq!(r.files.len(), 1);
        assert_eq!(r.files[0].name, "good");
        if store.checkpoints {
            // The bad input's first 7 fields were stored as their keys came, then forgotten.
            assert_eq!((store.archived, store.discarded), (7 + 4, 7), "{what}");
        } else {
            // Nothing of the bad input was sent: it waited for all of its keys.
            assert_eq!((store.archived, store.discarded), (4, 0), "{what}");
        }
    }
}

#[test]
fn a_corrupt_message_alone_leaves_nothing_to_flush() {
    // Without other inputs nothing may be pending either: a caller that flushes later
    // commits nothing of the refused input.
    let (bad, _) = corrupt_last(grib(20250104, 3));
    for mut store in stores() {
        let opts = IngestOptions {
            flush: false,
            ..IngestOptions::default()
        };
        let r = run(&mut store, vec![Input::buffer("bad", bad.clone())], &opts);
        assert_eq!(r.failed.len(), 1);
        store.flush().unwrap();
        assert_eq!(stored(&store, 20250104).0, BTreeSet::new());
    }
}

#[test]
fn files_filters_and_raw_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ens.grib");
    std::fs::write(&file, grib(20250105, 2)).unwrap();
    let raw = dir.path().join("raw.bin");
    std::fs::write(&raw, b"not grib at all").unwrap();
    for mut store in stores() {
        let what = store.describe();
        let opts = IngestOptions {
            include: Some(Request::parse("step=6").unwrap()),
            ..IngestOptions::default()
        };
        let r = run(&mut store, vec![Input::File(file.clone())], &opts);
        assert_eq!((r.fields, r.files[0].skipped), (2, 2), "{what}");
        assert_eq!(
            stored(&store, 20250105).0,
            ["6/1", "6/2"].map(String::from).into(),
            "{what}"
        );

        // Raw bytes are refused without a key, and archived whole under one.
        let r = run(&mut store, vec![raw.clone().into()], &Default::default());
        assert!(
            r.failed[0].contains("not a GRIB file"),
            "{what}: {:?}",
            r.failed
        );
        let opts = IngestOptions {
            key: Key::parse(
                "class=od,expver=0001,stream=enfo,date=20250106,time=1200,domain=g,type=pf,\
                 levtype=sfc,number=1,step=0,param=167",
            )
            .unwrap(),
            ..IngestOptions::default()
        };
        let r = run(&mut store, vec![raw.clone().into()], &opts);
        assert_eq!((r.fields, r.bytes), (1, 15), "{what}: {:?}", r.failed);
        assert_eq!(stored(&store, 20250106).0, ["0/1".to_string()].into());
    }
}

#[test]
fn a_filter_the_schema_cannot_resolve_is_an_error() {
    let mut store = memory_store();
    let opts = IngestOptions {
        include: Some(Request::parse("date=notadate").unwrap()),
        ..IngestOptions::default()
    };
    let e = ingest(&mut store, vec![], &opts, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("notadate"), "{e}");
}
