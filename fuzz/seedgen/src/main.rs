//! Writes the binary seed corpora of the fuzz targets with haar's real encoders, so the seeds
//! follow the format whatever it becomes: `seedgen <corpus-dir>` fills `<corpus-dir>/segment`,
//! `<corpus-dir>/grib_frame` and `<corpus-dir>/wire` (text seeds are written by `fuzz/seed.sh`
//! itself).

use std::path::Path;
use std::{env, fs, process};

use haar_core::Key;
use haar_grib::frame::tests_support::{minimal_grib1, minimal_grib2};
use haar_store::format::{
    CommitRecord, DataRef, Entry, FLAG_SNAPSHOT, RECORD_SEGMENT, RECORD_WIPED, SegmentBuilder,
    TOC_VERSION, encode_db_key_file, encode_key, encode_toc_header,
};

fn key(text: &str) -> Key {
    Key::parse(text).expect("seed key parses")
}

fn segment(flags: u16, writer: u64, sequence: u64, db: &Key, entries: &[Entry]) -> Vec<u8> {
    let mut b = SegmentBuilder::new(flags, writer, sequence, db).expect("seed db key encodes");
    for e in entries {
        b.push(e).expect("seed entry encodes");
    }
    b.finish()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::write(dir.join(name), bytes)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", dir.join(name).display()));
}

fn main() {
    let Some(root) = env::args().nth(1) else {
        eprintln!("usage: seedgen <corpus-dir>");
        process::exit(2);
    };
    let root = Path::new(&root);
    let seg_dir = root.join("segment");
    let grib_dir = root.join("grib_frame");
    for d in [&seg_dir, &grib_dir] {
        fs::create_dir_all(d).expect("create corpus dir");
    }

    // --- segment: index segments, db.key files, bare keys, toc header, commit records.
    let db = key("class=od,expver=0001,stream=oper,date=20261121,time=1200,domain=g");
    let index = key("type=fc,levtype=pl");
    let field = |step: &str, param: &str, offset: u64| Entry::Field {
        index: index.clone(),
        datum: key(&format!("step={step},levelist=500,param={param}")),
        data: DataRef {
            object: 7,
            offset,
            length: 1000,
            crc: 0xdead_beef,
        },
    };
    let one = segment(0, 7, 1, &db, &[field("0", "130", 0)]);
    write(&seg_dir, "segment-one", &one);
    let mixed = segment(
        0,
        7,
        2,
        &db,
        &[
            field("0", "130", 0),
            field("6", "130", 1000),
            Entry::Tombstone {
                index: index.clone(),
                datum: key("step=0,levelist=500,param=130"),
            },
            field("12", "", 2000),
        ],
    );
    write(&seg_dir, "segment-mixed", &mixed);
    write(
        &seg_dir,
        "segment-snapshot-empty",
        &segment(FLAG_SNAPSHOT, u64::MAX, 0, &Key::new(), &[]),
    );
    write(
        &seg_dir,
        "db-key-file",
        &encode_db_key_file(&db).expect("db key encodes"),
    );
    let mut bare = Vec::new();
    encode_key(&key("class=od,param=130.128,levelist="), &mut bare).expect("key encodes");
    write(&seg_dir, "key-bytes", &bare);
    // A toc file: header (the version this haar writes) then commit records.
    let mut toc = encode_toc_header(TOC_VERSION).to_vec();
    toc.extend_from_slice(
        &CommitRecord {
            kind: RECORD_SEGMENT,
            writer: 7,
            offset: 0,
            length: one.len() as u32,
            segment_crc: haar_store::format::segment_crc(&one),
            time_ns: 1_795_000_000_000_000_000,
        }
        .encode(),
    );
    toc.extend_from_slice(
        &CommitRecord {
            kind: RECORD_WIPED,
            writer: 7,
            offset: 0,
            length: 0,
            segment_crc: 0,
            time_ns: 1_795_000_000_000_000_001,
        }
        .encode(),
    );
    write(&seg_dir, "toc", &toc);

    // --- grib_frame: minimal frames (the ecCodes samples are copied by seed.sh).
    let g1 = minimal_grib1(64);
    let g2 = minimal_grib2(100);
    write(&grib_dir, "minimal-grib1", &g1);
    write(&grib_dir, "minimal-grib2", &g2);
    let mut padded = vec![0u8; 16];
    padded.extend_from_slice(&g1);
    padded.extend_from_slice(b"\0\0\0\x40");
    padded.extend_from_slice(&g2);
    padded.extend_from_slice(b"GRIB\0\0\0\x09junk");
    write(&grib_dir, "padded-pair", &padded);
    let mut cut = g2.clone();
    cut.truncate(g2.len() - 10);
    write(&grib_dir, "truncated-grib2", &cut);
    // Large-GRIB1 convention: length in units of 120 bytes (bit 0x800000), with a section 1
    // and a small section 4 length so the correction path is taken: (2 * 120) - 20 + 4 = 224.
    let mut large = b"GRIB".to_vec();
    large.extend_from_slice(&[0x80, 0x00, 0x02, 1]);
    let mut sec1 = vec![0u8; 28];
    sec1[2] = 28;
    large.extend_from_slice(&sec1);
    large.extend_from_slice(&[0, 0, 20]);
    large.resize(224 - 4, 0);
    large.extend_from_slice(b"7777");
    write(&grib_dir, "large-grib1", &large);

    let wire_dir = root.join("wire");
    wire_seeds(&wire_dir);

    println!(
        "seedgen: wrote seeds to {}, {} and {}",
        seg_dir.display(),
        grib_dir.display(),
        wire_dir.display()
    );
}

/// `wire`: a mode byte (0 before login, 1 read-write, 2 read-only: see the target) followed
/// by well-formed frames, so mutations start from frames whose crc is right.
fn wire_seeds(dir: &Path) {
    use haar_net::protocol::{self, Kind, to_meta};
    fs::create_dir_all(dir).expect("create corpus dir");
    let frame = |kind: Kind, meta: &[u8], data: &[u8]| {
        protocol::encode(kind, 0, 1, meta, data).expect("seed frame encodes")
    };
    let request = |text: &str, doit: bool| {
        to_meta(&protocol::RequestMeta {
            request: text.into(),
            doit,
            masked: 0,
        })
    };
    let k = key(
        "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc,step=0,param=167",
    );
    let archive = frame(
        Kind::Archive,
        &to_meta(&protocol::FieldMeta {
            key: k.clone(),
            crc: crc32c::crc32c(b"GRIB7777"),
        }),
        b"GRIB7777",
    );
    let hello = frame(
        Kind::Hello,
        &to_meta(&protocol::Hello {
            version: protocol::VERSION,
            client: "seed".into(),
            nonce: "00".repeat(32),
            host: None,
            tags: true,
        }),
        b"",
    );
    let auth = frame(
        Kind::Auth,
        &to_meta(&protocol::Auth {
            proof: "00".repeat(32),
        }),
        b"",
    );
    let session: Vec<(&str, Vec<u8>)> = vec![
        (
            "archive-flush",
            [archive.clone(), frame(Kind::Flush, b"{}", b"")].concat(),
        ),
        (
            "retrieve",
            frame(Kind::Retrieve, &request("class=od,step=0", false), b""),
        ),
        (
            "retrieve-keys",
            frame(
                Kind::RetrieveKeys,
                &to_meta(&protocol::KeysMeta { keys: vec![k] }),
                b"",
            ),
        ),
        ("list", frame(Kind::List, &request("class=od", false), b"")),
        ("axes", frame(Kind::Axes, &request("class=od", false), b"")),
        (
            "stats",
            frame(Kind::Stats, &request("class=od", false), b""),
        ),
        (
            "problems",
            frame(Kind::Problems, &request("class=od", false), b""),
        ),
        (
            "wipe",
            frame(Kind::Wipe, &request("class=od,step=0", true), b""),
        ),
        ("purge", frame(Kind::Purge, &request("class=od", true), b"")),
    ];
    write(dir, "hello-auth", &[&[0u8][..], &hello, &auth].concat());
    write(dir, "hello", &[&[0u8][..], &hello].concat());
    for (name, bytes) in &session {
        write(dir, &format!("rw-{name}"), &[&[1u8][..], bytes].concat());
        write(dir, &format!("ro-{name}"), &[&[2u8][..], bytes].concat());
    }
}
