//! Server and client in one process (fast, deterministic): the protocol paths, auth, errors,
//! hostile keys, watch replay/stream, wait. Real-process tests are in haar-cli/tests/net_*.rs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::Request;
use haar_net::auth::Tokens;
use haar_net::protocol::{self, Kind, Limits, LocalOffer};
use haar_net::{ClientConfig, RemoteStore, Server, ServerConfig, Target, WaitOutcome};
use haar_store::{FieldStore, FsyncPolicy, PosixBackend, StoreOptions};

fn key(step: u32, param: u32) -> Key {
    Key::parse(&format!(
        "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc,step={step},param={param}"
    ))
    .unwrap()
}

fn data(step: u32, param: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32 ^ step.wrapping_mul(31) ^ param) as u8)
        .collect()
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    addr: SocketAddr,
}

fn start() -> Fixture {
    start_offering(|_| None)
}

/// A server whose WELCOME carries `offer(root)` (design §8, same-host reads).
fn start_offering(offer: impl Fn(&std::path::Path) -> Option<LocalOffer>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let backend = PosixBackend::new(vec![root.clone()], FsyncPolicy::Never).unwrap();
    let local = offer(&root);
    let target = Target::Local {
        backend: Arc::new(backend),
        options: StoreOptions::default(),
    };
    let config = ServerConfig {
        tokens: Tokens {
            read_write: Some("rw-secret".into()),
            read_only: Some("ro-secret".into()),
        },
        tls: None,
        local,
        ..ServerConfig::default()
    };
    let addr = Server::bind("127.0.0.1:0", target, config)
        .unwrap()
        .spawn()
        .unwrap();
    Fixture {
        _dir: dir,
        root,
        addr,
    }
}

fn cfg(token: Option<&str>) -> ClientConfig {
    ClientConfig {
        token: token.map(str::to_string),
        ..ClientConfig::default()
    }
}

fn posix_offer(root: &std::path::Path) -> Option<LocalOffer> {
    let cfg = haar_store::Config {
        backend: haar_store::BackendKind::Posix,
        roots: vec![root.to_path_buf()],
        fsync: FsyncPolicy::Never,
        ..haar_store::Config::default()
    };
    haar_net::server::local_offer(&cfg, None)
}

fn retrieve_all(c: &RemoteStore, steps: &str) -> Vec<(Key, Vec<u8>)> {
    let req = Request::parse(&format!(
        "class=od,expver=1,stream=oper,date=20261121,time=12,type=fc,levtype=sfc,step={steps},param=130/167"
    ))
    .unwrap();
    let mut got = Vec::new();
    c.retrieve(&req, &mut |k, d, _| {
        got.push((k.clone(), d.to_vec()));
        Ok(())
    })
    .unwrap();
    got
}

#[test]
fn same_host_reads_come_from_the_servers_store_and_equal_the_wire() {
    let f = start_offering(posix_offer);
    let addr = f.addr.to_string();
    let mut w = RemoteStore::connect(&addr, &cfg(Some("rw-secret"))).unwrap();
    let local = RemoteStore::connect(&addr, &cfg(Some("ro-secret"))).unwrap();
    let wire = RemoteStore::connect(
        &addr,
        &ClientConfig {
            local_reads: false,
            ..cfg(Some("ro-secret"))
        },
    )
    .unwrap();
    for step in 0..3 {
        w.archive(&key(step, 130), &data(step, 130, 70_000))
            .unwrap();
        w.archive(&key(step, 167), &data(step, 167, 5_000)).unwrap();
    }
    // Unflushed fields are not visible locally either.
    assert!(retrieve_all(&local, "0/1/2").is_empty());
    w.flush().unwrap();
    let (a, b) = (retrieve_all(&local, "0/1/2"), retrieve_all(&wire, "0/1/2"));
    assert_eq!(a.len(), 6);
    assert!(a == b, "same-host and wire reads differ");
    assert!(
        local.describe().contains("same-host reads from posix:"),
        "{}",
        local.describe()
    );
    assert_eq!(wire.describe(), format!("remote {addr}"));
    // A later flush is visible to the local reader as soon as it is acknowledged.
    w.archive(&key(7, 130), &data(7, 130, 123)).unwrap();
    w.flush().unwrap();
    let got = retrieve_all(&local, "7");
    assert!(
        got.len() == 1 && got[0].1 == data(7, 130, 123),
        "{} fields",
        got.len()
    );
}

#[test]
fn an_offer_naming_another_directory_or_machine_is_not_taken() {
    for spoil in [0, 1] {
        let f = start_offering(|root| {
            let mut o = posix_offer(root).unwrap();
            if spoil == 0 {
                o.ino ^= 1; // the path now names another directory
            } else {
                o.boot_id = "another-machine".into();
            }
            Some(o)
        });
        let addr = f.addr.to_string();
        let mut w = RemoteStore::connect(&addr, &cfg(Some("rw-secret"))).unwrap();
        w.archive(&key(1, 130), &data(1, 130, 4096)).unwrap();
        w.flush().unwrap();
        let r = RemoteStore::connect(&addr, &cfg(Some("ro-secret"))).unwrap();
        let got = retrieve_all(&r, "1");
        assert!(
            got.len() == 1 && got[0].1 == data(1, 130, 4096),
            "{} fields",
            got.len()
        );
        assert_eq!(r.describe(), format!("remote {addr}"), "spoil {spoil}");
    }
}

#[test]
fn archive_flush_retrieve_list_byte_identical() {
    let f = start();
    let addr = f.addr.to_string();
    let mut c = RemoteStore::connect(&addr, &cfg(Some("rw-secret"))).unwrap();
    for step in 0..4 {
        for param in [130, 167] {
            c.archive(
                &key(step, param),
                &data(step, param, 100_000 + step as usize),
            )
            .unwrap();
        }
    }
    // Private until flushed.
    let other = RemoteStore::connect(&addr, &cfg(Some("ro-secret"))).unwrap();
    assert!(other.list(&Request::default()).unwrap().is_empty());
    c.flush().unwrap();
    assert_eq!(other.list(&Request::default()).unwrap().len(), 8);
    let req = Request::parse(
        "class=od,expver=1,stream=oper,date=20261121,time=12,type=fc,levtype=sfc,step=0/1/2/3,param=130/167/999",
    )
    .unwrap();
    let mut got = Vec::new();
    let report = other
        .retrieve(&req, &mut |k, d, _| {
            got.push((k.clone(), d.to_vec()));
            Ok(())
        })
        .unwrap();
    assert_eq!(report.found, 8, "{report:?}");
    assert_eq!(report.missing.len(), 4);
    for (k, d) in &got {
        let step: u32 = k.get("step").unwrap().parse().unwrap();
        let param: u32 = k.get("param").unwrap().parse().unwrap();
        assert_eq!(d, &data(step, param, 100_000 + step as usize));
    }
    let axes = other.axes(&Request::default()).unwrap();
    assert_eq!(axes["step"].len(), 4);
    let stats = other.stats(&Request::default()).unwrap();
    assert_eq!(stats.iter().map(|s| s.fields).sum::<u64>(), 8);
    // Read-only: writes refused with the operation named.
    let mut ro = other;
    let e = ro.archive(&key(9, 130), b"x").unwrap_err().to_string();
    assert!(e.contains("read-only"), "{e}");
    let e = ro
        .wipe(&Request::parse("class=od").unwrap(), true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("WIPE refused") && e.contains("read-only"), "{e}");
    let w = c
        .wipe(&Request::parse("class=od,step=0").unwrap(), true)
        .unwrap();
    assert_eq!(w.fields, 2);
    assert_eq!(c.list(&Request::default()).unwrap().len(), 6);
}

#[test]
fn auth_refusals_are_clear() {
    let f = start();
    let addr = f.addr.to_string();
    let e = RemoteStore::connect(&addr, &cfg(None))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("token rejected") && e.contains("HAAR_TOKEN"),
        "{e}"
    );
    let e = RemoteStore::connect(&addr, &cfg(Some("wrong")))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("token rejected") && e.contains(&addr), "{e}");
    let e = RemoteStore::connect("127.0.0.1:1", &cfg(Some("x")))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("is `haar serve` running there?"), "{e}");
}

#[test]
fn version_mismatch_is_refused_naming_both_versions() {
    let f = start();
    let mut s = TcpStream::connect(f.addr).unwrap();
    let hello = protocol::to_meta(&protocol::Hello {
        version: 99,
        client: "time traveller".into(),
        nonce: "00".into(),
        host: None,
        tags: false,
    });
    s.write_all(&protocol::encode(Kind::Hello, 0, 0, &hello, &[]).unwrap())
        .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let (frame, _) = protocol::decode(&buf, Limits::HANDSHAKE).unwrap();
    assert_eq!(frame.kind(), Some(Kind::Refused));
    let r: protocol::Refused = frame.meta().unwrap();
    assert!(
        r.reason.contains("version 99")
            && r.reason.contains(&format!("version {}", protocol::VERSION)),
        "{}",
        r.reason
    );
}

#[test]
fn deferred_archive_errors_are_reported_by_flush() {
    let f = start();
    let mut c = RemoteStore::connect(&f.addr.to_string(), &cfg(Some("rw-secret"))).unwrap();
    c.archive(&key(0, 130), b"good").unwrap();
    c.archive(&Key::parse("nonsense=1").unwrap(), b"bad")
        .unwrap();
    let e = c.flush().unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("1 archive(s) failed") && m.contains("nonsense"),
        "{m}"
    );
    assert_eq!(e.class(), haar_store::Class::Input);
    assert_eq!(c.list(&Request::default()).unwrap().len(), 1);
    // The session continues normally.
    c.archive(&key(1, 130), b"more").unwrap();
    c.flush().unwrap();
}

#[test]
fn hostile_keys_never_leave_the_root() {
    let f = start();
    let mut c = RemoteStore::connect(&f.addr.to_string(), &cfg(Some("rw-secret"))).unwrap();
    let hostile = [
        "../../../../tmp/haar-escape",
        "/etc/passwd",
        "..",
        ".",
        "a/../../b",
        "\0nul",
        "%2e%2e",
    ];
    for (i, h) in hostile.iter().enumerate() {
        let mut k = Key::new();
        for (kw, v) in key(0, 130).iter() {
            match kw {
                "class" | "expver" | "stream" => k.push(kw, *h),
                "step" => k.push(kw, i.to_string()),
                _ => k.push(kw, v),
            }
        }
        c.archive(&k, b"hostile").unwrap();
    }
    let _ = c.flush();
    let parent = f.root.parent().unwrap();
    for entry in std::fs::read_dir(parent).unwrap() {
        let name = entry.unwrap().file_name();
        assert_eq!(name, "root", "something was created beside the root");
    }
    assert!(!std::path::Path::new("/tmp/haar-escape").exists());
    for entry in std::fs::read_dir(&f.root).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(!name.contains('/') && name != ".." && name != ".", "{name}");
    }
    let e = c.list(&Request::parse("class=../../etc").unwrap()).unwrap();
    assert!(e.is_empty());
}

#[test]
fn watch_replays_then_streams_exactly_once_and_wait_completes() {
    let f = start();
    let addr = f.addr.to_string();
    let rw = cfg(Some("rw-secret"));
    let mut c = RemoteStore::connect(&addr, &rw).unwrap();
    c.archive(&key(0, 130), b"a").unwrap();
    c.archive(&key(0, 167), b"b").unwrap();
    c.flush().unwrap();
    let req = Request::parse("class=od,step=0/1,param=130/167").unwrap();
    let mut w = RemoteStore::connect(&addr, &rw)
        .unwrap()
        .watch(&req)
        .unwrap();
    let (e1, m1) = w.next_event().unwrap().unwrap();
    let (_, m2) = w.next_event().unwrap().unwrap();
    assert!(m1.replay && m2.replay);
    assert_eq!(e1.origin, addr);
    let wait_req = Request::parse(
        "class=od,expver=1,stream=oper,date=20261121,time=12,type=fc,levtype=sfc,step=1,param=130/167",
    )
    .unwrap();
    let short = c.wait(&wait_req, Duration::from_millis(200)).unwrap();
    match short {
        WaitOutcome::TimedOut { missing } => assert_eq!(missing.len(), 2),
        o => panic!("{o:?}"),
    }
    let waiter = {
        let addr = addr.clone();
        let rw = rw.clone();
        let wait_req = wait_req.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            let r = haar_net::wait(
                &[addr],
                &rw,
                &wait_req,
                &StoreOptions::default(),
                Duration::from_secs(20),
            )
            .unwrap();
            (r, t.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    c.archive(&key(1, 130), b"c").unwrap();
    c.archive(&key(5, 130), b"not watched").unwrap();
    c.flush().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !waiter.is_finished(),
        "wait returned before the step was complete"
    );
    c.archive(&key(1, 167), b"d").unwrap();
    c.flush().unwrap();
    let (r, took) = waiter.join().unwrap();
    assert_eq!(r, WaitOutcome::Complete { fields: 2 });
    assert!(took >= Duration::from_millis(300));
    let (e3, m3) = w.next_event().unwrap().unwrap();
    let (e4, m4) = w.next_event().unwrap().unwrap();
    assert!(!m3.replay && !m4.replay && m4.seq > m3.seq);
    assert_eq!(e3.key.get("step"), Some("1"));
    assert_eq!(e4.key.get("param"), Some("167"));
}

/// Logs in raw with `token` and `host(nonce)` in HELLO; the WELCOME the server sends (its tag
/// checked).
fn welcome(
    addr: SocketAddr,
    token: &str,
    host: impl Fn(&str) -> Option<String>,
) -> protocol::Welcome {
    let mut s = TcpStream::connect(addr).unwrap();
    let read = |s: &mut TcpStream| {
        let mut f = protocol::Frame::default();
        protocol::read_frame(s, Limits::HANDSHAKE, &mut f).unwrap();
        f
    };
    let nonce = haar_net::auth::nonce();
    let hello = protocol::to_meta(&protocol::Hello {
        version: protocol::VERSION,
        client: "welcome test".into(),
        nonce: nonce.clone(),
        host: host(&nonce),
        tags: true, // asked, so that the WELCOME is tagged and its tag checked here
    });
    s.write_all(&protocol::encode(Kind::Hello, 0, 0, &hello, &[]).unwrap())
        .unwrap();
    let c: protocol::Challenge = read(&mut s).meta().unwrap();
    assert!(c.tags, "a server grants the tags a client asks for");
    let tags = haar_net::auth::TagsAgreed {
        asked: true,
        granted: true,
    };
    let proof = haar_net::auth::client_proof(token, &c.nonce, &nonce, tags);
    let auth = protocol::to_meta(&protocol::Auth { proof });
    s.write_all(&protocol::encode(Kind::Auth, 0, 0, &auth, &[]).unwrap())
        .unwrap();
    let f = read(&mut s);
    assert_eq!(f.kind(), Some(Kind::Welcome));
    let mut tag = [0u8; protocol::TAG_LEN];
    s.read_exact(&mut tag).unwrap();
    let keys = haar_net::auth::frame_keys(token, &c.nonce, &nonce);
    let h = protocol::encode_header(Kind::Welcome, f.flags, f.id, &f.meta, 0).unwrap();
    protocol::Sealer::new(keys.server_to_client)
        .open(&h, &f.meta, &f.data, &tag)
        .unwrap();
    f.meta().unwrap()
}

#[test]
fn welcome_tells_a_reader_only_what_reading_needs() {
    let f = start_offering(|root| {
        let cfg = haar_store::Config {
            backend: haar_store::BackendKind::Posix,
            roots: vec![root.to_path_buf()],
            fsync: FsyncPolicy::Never,
            pool_size: 12345 << 20,
            schema: Some("/etc/secret/schema".into()),
            ..haar_store::Config::default()
        };
        haar_net::server::local_offer(&cfg, Some("schema text".into()))
    });
    let boot_id = haar_net::server::boot_id().expect("this test needs a boot id");
    let here = |nonce: &str| Some(haar_net::auth::host_proof(&boot_id, nonce));
    // A client elsewhere (no host evidence, or evidence of another machine) learns nothing
    // of the store, whatever its token; nor does one replaying evidence made for another nonce.
    for token in ["rw-secret", "ro-secret"] {
        assert_eq!(welcome(f.addr, token, |_| None).local, None, "{token}");
        let elsewhere = |n: &str| Some(haar_net::auth::host_proof("another-machine", n));
        assert_eq!(welcome(f.addr, token, elsewhere).local, None, "{token}");
        assert_eq!(
            welcome(f.addr, token, |_| here("00")).local,
            None,
            "{token}"
        );
    }
    let with_nonce = |token: &str| {
        welcome(f.addr, token, here)
            .local
            .expect("an offer to a client on the same machine")
    };
    // On this machine, a reader gets the backend and roots only.
    let reader = with_nonce("ro-secret");
    let store = &reader.store;
    assert_eq!(store["backend"], "posix");
    assert_eq!(store["roots"], serde_json::json!([f.root]));
    assert_eq!(store["schema"], serde_json::Value::Null, "{store}");
    assert_ne!(
        store["pool_size"],
        serde_json::json!(12345u64 << 20),
        "{store}"
    );
    assert_eq!(
        store["fsync"],
        serde_json::to_value(haar_store::Config::default().fsync).unwrap()
    );
    assert_eq!(reader.schema.as_deref(), Some("schema text"));
    // A writer on this machine gets the store's configuration as before.
    let writer = with_nonce("rw-secret");
    assert_eq!(writer.store["pool_size"], serde_json::json!(12345u64 << 20));
    assert_eq!(writer.store["schema"], "/etc/secret/schema");
}
