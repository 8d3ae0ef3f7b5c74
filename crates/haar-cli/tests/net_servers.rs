//! Real `haar serve` processes on loopback, with producers and consumers in other processes:
//! byte-identical round trips through 1 and 3 servers, authentication refusals, a version
//! mismatch, exactly-once notifications (including a late subscriber), `haar wait`, and
//! kill -9 + restart of a server.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::Request;
use haar_net::protocol::{self, Kind, Limits};
use haar_net::{ClientConfig, RemoteStore};
use haar_store::FieldStore;
use haar_testkit::{Announce, ServerProcess};

const TOKEN: &str = "net-test-token";
const RO_TOKEN: &str = "net-test-read-only";
const HAAR: &str = env!("CARGO_BIN_EXE_haar");

/// A `haar serve` process (killed when dropped), its address and root.
struct Server {
    process: ServerProcess,
    addr: String,
    root: PathBuf,
}

impl Server {
    fn new(process: ServerProcess, root: &Path) -> Server {
        Server {
            addr: process.addr.clone(),
            process,
            root: root.to_path_buf(),
        }
    }
}

fn spawn_server(root: &Path, listen: &str, ro_token: Option<&Path>) -> Server {
    spawn_server_on(root, "posix", listen, ro_token)
}

fn spawn_server_on(root: &Path, backend: &str, listen: &str, ro_token: Option<&Path>) -> Server {
    let mut cmd = Command::new(HAAR);
    cmd.arg("--root")
        .arg(root)
        .args(["--backend", backend, "serve", "--listen", listen])
        .env("HAAR_TOKEN", TOKEN)
        .env_remove("HAAR_CONFIG")
        .stderr(Stdio::null());
    if let Some(f) = ro_token {
        cmd.arg("--read-token-file").arg(f);
    }
    let process =
        ServerProcess::spawn_within(&mut cmd, Announce::FirstLine, Duration::from_secs(20));
    Server::new(process, root)
}

fn haar(args: &[&str], token: Option<&str>) -> Output {
    let mut cmd = Command::new(HAAR);
    cmd.args(args)
        .env_remove("HAAR_CONFIG")
        .env_remove("HAAR_TOKEN");
    if let Some(t) = token {
        cmd.env("HAAR_TOKEN", t);
    }
    cmd.output().unwrap()
}

fn key(member: u32, step: u32) -> Key {
    Key::parse(&format!(
        "class=od,expver=1,stream=enfo,date=20261121,time=0,domain=g,type=pf,levtype=sfc,number={member},step={step},param=167"
    ))
    .unwrap()
}

fn field(member: u32, step: u32, len: usize) -> Vec<u8> {
    let mut x = (member as u64) << 32 | step as u64 | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn rw() -> ClientConfig {
    ClientConfig {
        token: Some(TOKEN.into()),
        ..ClientConfig::default()
    }
}

fn step_request(step: &str) -> String {
    format!(
        "class=od,expver=1,stream=enfo,date=20261121,time=0,type=pf,levtype=sfc,number=1/2/3,step={step},param=167"
    )
}

#[test]
fn three_servers_round_trip_through_the_cli_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let servers: Vec<Server> = (0..3)
        .map(|i| spawn_server(&dir.path().join(format!("n{i}")), "127.0.0.1:0", None))
        .collect();
    let list = servers
        .iter()
        .map(|s| s.addr.as_str())
        .collect::<Vec<_>>()
        .join(",");
    // Different dates are different databases, so they spread over the lanes.
    let mut expected = HashMap::new();
    for d in 0..6u32 {
        let bytes = field(d, 0, 300_000 + d as usize);
        let path = dir.path().join(format!("f{d}.bin"));
        std::fs::write(&path, &bytes).unwrap();
        let k = format!(
            "class=od,expver=1,stream=oper,date=2026112{d},time=0,domain=g,type=fc,levtype=sfc,step=0,param=167"
        );
        let out = haar(
            &[
                "--servers",
                &list,
                "archive",
                "--key",
                &k,
                path.to_str().unwrap(),
            ],
            Some(TOKEN),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        expected.insert(format!("2026112{d}"), bytes);
    }
    let out = haar(&["--servers", &list, "list", "class=od"], Some(TOKEN));
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 6);
    // Spread: more than one server holds data.
    let holding = servers
        .iter()
        .filter(|s| {
            let r = RemoteStore::connect(&s.addr, &rw()).unwrap();
            !r.list(&Request::default()).unwrap().is_empty()
        })
        .count();
    assert!(holding >= 2, "all databases on one lane");
    for (date, bytes) in &expected {
        let out_path = dir.path().join(format!("out{date}"));
        let req = format!(
            "class=od,expver=1,stream=oper,date={date},time=0,type=fc,levtype=sfc,step=0,param=167"
        );
        let out = haar(
            &[
                "--servers",
                &list,
                "retrieve",
                &req,
                "-o",
                out_path.to_str().unwrap(),
            ],
            Some(TOKEN),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(&std::fs::read(&out_path).unwrap(), bytes);
    }
}

#[test]
fn refusals_name_the_server_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro-token");
    std::fs::write(&ro, RO_TOKEN).unwrap();
    let s = spawn_server(&dir.path().join("root"), "127.0.0.1:0", Some(&ro));
    let raw = dir.path().join("x.bin");
    std::fs::write(&raw, b"bytes").unwrap();
    let k = "class=od,expver=1,stream=oper,date=20261121,time=0,domain=g,type=fc,levtype=sfc,step=0,param=167";
    for token in [None, Some("wrong")] {
        let out = haar(&["--servers", &s.addr, "list"], token);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&s.addr) && err.contains("token rejected"),
            "{err}"
        );
    }
    let out = haar(
        &[
            "--servers",
            &s.addr,
            "archive",
            "--key",
            k,
            raw.to_str().unwrap(),
        ],
        Some(RO_TOKEN),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("read-only"), "{err}");
    let out = haar(
        &["--servers", &s.addr, "wipe", "class=od", "--doit"],
        Some(RO_TOKEN),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WIPE refused") && err.contains("read-only"),
        "{err}"
    );
    // Reads with the read-only token work.
    let out = haar(&["--servers", &s.addr, "list"], Some(RO_TOKEN));
    assert!(out.status.success());
    // Nobody listening.
    let out = haar(&["--servers", "127.0.0.1:1", "list"], Some(TOKEN));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("is `haar serve` running there?"), "{err}");
    // A server without any token refuses to start.
    let out = Command::new(HAAR)
        .args([
            "--root",
            dir.path().join("r2").to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("HAAR_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HAAR_TOKEN"));
}

#[test]
fn a_hello_of_another_version_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let s = spawn_server(&dir.path().join("root"), "127.0.0.1:0", None);
    let mut sock = TcpStream::connect(&s.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let hello = protocol::to_meta(&protocol::Hello {
        version: 99,
        client: "haar 99.0".into(),
        nonce: "ab".into(),
        host: None,
        tags: false,
    });
    sock.write_all(&protocol::encode(Kind::Hello, 0, 7, &hello, &[]).unwrap())
        .unwrap();
    let mut buf = Vec::new();
    sock.read_to_end(&mut buf).unwrap();
    let (f, _) = protocol::decode(&buf, Limits::HANDSHAKE).unwrap();
    assert_eq!(f.kind(), Some(Kind::Refused));
    assert_eq!(f.id, 7);
    let r: protocol::Refused = f.meta().unwrap();
    assert!(
        r.reason.contains("version 99")
            && r.reason.contains(&format!("version {}", protocol::VERSION)),
        "{}",
        r.reason
    );
}

/// Reads `haar watch --json` lines from a child on a thread.
fn watcher(addr: &str, req: &str) -> (Child, mpsc::Receiver<serde_json::Value>) {
    let mut child = Command::new(HAAR)
        .args(["--servers", addr, "watch", req, "--json"])
        .env("HAAR_TOKEN", TOKEN)
        .env_remove("HAAR_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

fn collect(
    rx: &mpsc::Receiver<serde_json::Value>,
    n: usize,
    within: Duration,
) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(v) => got.push(v),
            Err(_) => break,
        }
    }
    got
}

fn event_name(v: &serde_json::Value) -> String {
    format!("{}/{}", v["key"]["number"], v["key"]["step"])
}

#[test]
fn watchers_in_other_processes_see_each_flushed_field_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = spawn_server(&dir.path().join("root"), "127.0.0.1:0", None);
    let (mut early, early_rx) = watcher(&s.addr, "class=od,stream=enfo");
    // Give the early watcher time to subscribe (its replay is empty either way).
    std::thread::sleep(Duration::from_millis(300));
    let mut producer = RemoteStore::connect(&s.addr, &rw()).unwrap();
    let mut late = None;
    let steps = 6;
    for step in 0..steps {
        for member in 1..=3 {
            producer
                .archive(&key(member, step), &field(member, step, 50_000))
                .unwrap();
        }
        // Re-archiving a field before the flush still flushes it once.
        producer
            .archive(&key(1, step), &field(1, step, 50_000))
            .unwrap();
        producer.flush().unwrap();
        if step == 2 {
            late = Some(watcher(&s.addr, "class=od,stream=enfo"));
        }
    }
    let total = (steps * 3) as usize;
    let (mut late_child, late_rx) = late.unwrap();
    for (rx, who) in [(&early_rx, "early"), (&late_rx, "late")] {
        let got = collect(rx, total, Duration::from_secs(20));
        let extra = collect(rx, 1, Duration::from_millis(300));
        assert!(extra.is_empty(), "{who}: extra event {extra:?}");
        let mut count: HashMap<String, usize> = HashMap::new();
        for v in &got {
            *count.entry(event_name(v)).or_default() += 1;
        }
        assert_eq!(count.len(), total, "{who}: {count:?}");
        for (k, n) in &count {
            assert_eq!(*n, 1, "{who}: {k} seen {n} times");
        }
        if who == "late" {
            assert!(
                got.iter().any(|v| v["replay"] == true),
                "late watcher had no replay"
            );
        }
    }
    early.kill().unwrap();
    late_child.kill().unwrap();
    let _ = early.wait();
    let _ = late_child.wait();
}

#[test]
fn wait_returns_when_the_step_is_complete_and_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let s = spawn_server(&dir.path().join("root"), "127.0.0.1:0", None);
    let mut producer = RemoteStore::connect(&s.addr, &rw()).unwrap();
    // Timeout: exit 2 naming what is missing.
    producer.archive(&key(1, 6), &field(1, 6, 1000)).unwrap();
    producer.flush().unwrap();
    let out = haar(
        &[
            "--servers",
            &s.addr,
            "wait",
            &step_request("6"),
            "--timeout",
            "0.5",
        ],
        Some(TOKEN),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("number=2") && err.contains("number=3") && !err.contains("number=1,"),
        "{err}"
    );
    // Complete: exits 0 only after the last member's flush.
    let mut waiting = Command::new(HAAR)
        .args([
            "--servers",
            &s.addr,
            "wait",
            &step_request("12"),
            "--timeout",
            "30",
        ])
        .env("HAAR_TOKEN", TOKEN)
        .env_remove("HAAR_CONFIG")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    for member in [3, 1] {
        producer
            .archive(&key(member, 12), &field(member, 12, 1000))
            .unwrap();
        producer.flush().unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "wait returned before member 2 flushed"
    );
    producer.archive(&key(2, 12), &field(2, 12, 1000)).unwrap();
    let flushed = Instant::now();
    producer.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = waiting.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "wait did not return");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(status.success());
    eprintln!(
        "wait returned {:?} after the completing flush",
        flushed.elapsed()
    );
}

#[test]
fn kill_9_and_restart_keeps_every_flushed_field() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let mut s = spawn_server(&root, "127.0.0.1:0", None);
    let addr = s.addr.clone();
    let mut producer = RemoteStore::connect(&addr, &rw()).unwrap();
    let mut flushed = Vec::new();
    for step in 0..10 {
        for member in 1..=3 {
            producer
                .archive(&key(member, step), &field(member, step, 200_000))
                .unwrap();
        }
        producer.flush().unwrap();
        flushed.extend((1..=3).map(|m| (m, step)));
    }
    // Unflushed fields in flight when the server dies.
    for member in 1..=3 {
        producer
            .archive(&key(member, 99), &field(member, 99, 200_000))
            .unwrap();
    }
    s.process.child.kill().unwrap(); // SIGKILL
    s.process.child.wait().unwrap();
    assert!(
        producer.flush().is_err(),
        "flush to a dead server must fail"
    );
    let s2 = spawn_server(&s.root, &addr, None);
    assert_eq!(s2.addr, addr);
    let reader = RemoteStore::connect(&addr, &rw()).unwrap();
    let req = Request::parse(&format!(
        "class=od,expver=1,stream=enfo,date=20261121,time=0,type=pf,levtype=sfc,number=1/2/3,step={},param=167",
        (0..10).map(|s| s.to_string()).collect::<Vec<_>>().join("/")
    ))
    .unwrap();
    let mut n = 0;
    let report = reader
        .retrieve(&req, &mut |k, d, _| {
            let m: u32 = k.get("number").unwrap().parse().unwrap();
            let st: u32 = k.get("step").unwrap().parse().unwrap();
            assert_eq!(d, field(m, st, 200_000), "{k}");
            n += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(report.found, flushed.len());
    assert_eq!(n, flushed.len());
    // The unflushed step never became visible.
    let none = reader
        .list(&Request::parse("class=od,stream=enfo,step=99").unwrap())
        .unwrap();
    assert!(none.is_empty());
    drop(s);
}

/// Server restarts at scale (issue 14, design §6): a server process is killed with SIGKILL at
/// a random moment while a producer archives and flushes through it, then restarted on the
/// same store, `HAAR_RESTART_TRIALS` times per backend (default 20; `scripts/torture.sh`
/// runs 1,000). Every flush the producer saw return is retrieved byte-identical after every
/// restart, and each flush is all-or-nothing.
#[test]
fn servers_killed_at_random_moments_lose_no_acknowledged_flush() {
    let trials: u32 = std::env::var("HAAR_RESTART_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    const MEMBERS: u32 = 3;
    const SIZE: usize = 100_000;
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    let mut rng = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for backend in ["posix", "pmem"] {
        let dir = if backend == "pmem" && Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let root = dir.path().join("root");
        let mut acked: Vec<u32> = Vec::new();
        let mut mid_flush = 0;
        for t in 0..trials {
            let mut s = spawn_server_on(&root, backend, "127.0.0.1:0", None);
            let addr = s.addr.clone();
            let first = t * 1000;
            let producer = std::thread::spawn(move || {
                let mut done = Vec::new();
                let Ok(mut p) = RemoteStore::connect(&addr, &rw()) else {
                    return done;
                };
                for step in first..first + 1000 {
                    for m in 1..=MEMBERS {
                        if p.archive(&key(m, step), &field(m, step, SIZE)).is_err() {
                            return done;
                        }
                    }
                    if p.flush().is_err() {
                        return done;
                    }
                    done.push(step);
                }
                done
            });
            std::thread::sleep(Duration::from_micros(rng() % 60_000));
            s.process.child.kill().unwrap(); // SIGKILL, wherever the server is
            s.process.child.wait().unwrap();
            let done = producer.join().unwrap();
            acked.extend(&done);
            // The restarted server holds every acknowledged flush, and of the flush that was
            // in flight all fields or none.
            let s2 = spawn_server_on(&root, backend, "127.0.0.1:0", None);
            let reader = RemoteStore::connect(&s2.addr, &rw()).unwrap();
            let listed = reader
                .list(&Request::parse("class=od,stream=enfo").unwrap())
                .unwrap();
            let mut per_step: HashMap<u32, u32> = HashMap::new();
            for f in &listed {
                let step: u32 = f.key().get("step").unwrap().parse().unwrap();
                *per_step.entry(step).or_default() += 1;
            }
            for (step, n) in &per_step {
                assert_eq!(
                    *n, MEMBERS,
                    "{backend} trial {t}: step {step} has {n} fields"
                );
            }
            let in_flight = done.last().map_or(first, |s| s + 1);
            if per_step.contains_key(&in_flight) {
                mid_flush += 1;
            }
            let check: Vec<u32> = if t + 1 == trials {
                acked.clone() // everything, at the end
            } else {
                done.clone()
            };
            for step in check {
                for m in 1..=MEMBERS {
                    let k = key(m, step);
                    let got = reader
                        .retrieve_keys(std::slice::from_ref(&k), &mut |_, d, _| {
                            assert_eq!(d, field(m, step, SIZE), "{backend} trial {t}: {k}");
                            Ok(())
                        })
                        .unwrap();
                    assert_eq!(got.found, 1, "{backend} trial {t}: acknowledged {k} lost");
                }
            }
            drop(s2);
        }
        eprintln!(
            "{backend}: {trials} server kills, {} flushes acknowledged and kept, {mid_flush} \
             in-flight flushes found whole",
            acked.len()
        );
    }
}

/// A pool file truncated under a running server (issue 14, hostile pools): the reads that
/// touch the lost part fail with an error naming the pool, instead of SIGBUS killing the
/// server; the server keeps accepting connections, and says what to do.
#[test]
fn a_pool_truncated_under_a_server_fails_reads_not_the_server() {
    let dir = tempfile::tempdir_in(if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    })
    .unwrap();
    let root = dir.path().join("root");
    let mut s = spawn_server_on(&root, "pmem", "127.0.0.1:0", None);
    let cfg = ClientConfig {
        local_reads: false, // every byte through the server
        ..rw()
    };
    let mut p = RemoteStore::connect(&s.addr, &cfg).unwrap();
    const SIZE: usize = 1 << 20;
    for step in 0..40 {
        p.archive(&key(1, step), &field(1, step, SIZE)).unwrap();
    }
    p.flush().unwrap();
    let pool = root.join("haar.pool");
    let f = std::fs::OpenOptions::new().write(true).open(&pool).unwrap();
    f.set_len(32 << 20).unwrap(); // what an operator's mistake or another program might do
    let reader = RemoteStore::connect(&s.addr, &cfg).unwrap();
    let mut errors = Vec::new();
    for step in 0..40 {
        let k = key(1, step);
        let r = reader.retrieve_keys(std::slice::from_ref(&k), &mut |_, d, _| {
            assert_eq!(d, field(1, step, SIZE), "{k}: wrong bytes delivered");
            Ok(())
        });
        // Either the right bytes, or the damage reported naming the pool: never a silent
        // absence.
        match r {
            Ok(rep) if rep.found == 1 => {}
            Ok(rep) => {
                assert!(
                    !rep.problems.is_empty(),
                    "{k}: missing with no problem reported"
                );
                errors.push(rep.problems.join("; "));
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    eprintln!("{} of 40 reads failed; first: {}", errors.len(), errors[0]);
    assert!(
        s.process.child.try_wait().unwrap().is_none(),
        "the server died: {errors:?}"
    );
    assert!(
        errors
            .iter()
            .all(|e| e.contains(&pool.display().to_string())),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("shrank")),
        "no error says the pool shrank: {errors:?}"
    );
    // Still accepting and answering.
    let again = RemoteStore::connect(&s.addr, &cfg).unwrap();
    let _ = again.list(&Request::parse("class=od").unwrap());
    assert!(
        s.process.child.try_wait().unwrap().is_none(),
        "the server died"
    );
}

/// `haar serve --max-connections --handshake-timeout` reach the server (design §8, hostile
/// peers): a connection over the limit is refused with a REFUSED naming the limit, the ones
/// that never log in are closed at the deadline, and then clients are served again.
#[test]
fn serve_bounds_connections_and_handshakes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(HAAR);
    cmd.arg("--root")
        .arg(dir.path().join("root"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--max-connections",
            "2",
            "--handshake-timeout",
            "1",
        ])
        .env("HAAR_TOKEN", TOKEN)
        .env_remove("HAAR_CONFIG")
        .stderr(Stdio::null());
    let s = Server::new(
        ServerProcess::spawn(&mut cmd, Announce::FirstLine),
        &dir.path().join("root"),
    );
    let mut held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(&s.addr).unwrap())
        .collect();
    let mut third = TcpStream::connect(&s.addr).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut f = protocol::Frame::default();
    protocol::read_frame(&mut third, Limits::SESSION, &mut f).unwrap();
    assert_eq!(f.kind(), Some(Kind::Refused));
    let r: protocol::Refused = f.meta().unwrap();
    assert!(
        r.reason.contains("busy") && r.reason.contains("2 connections open"),
        "{}",
        r.reason
    );
    // The two that never log in are closed at the handshake deadline.
    for c in &mut held {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 64];
        let closed = match c.read(&mut b) {
            Ok(n) => n == 0,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
        assert!(closed, "a connection that never logged in was kept");
    }
    drop(held);
    let until = Instant::now() + Duration::from_secs(30);
    let c = loop {
        match RemoteStore::connect(&s.addr, &rw()) {
            Ok(c) => break c,
            Err(e) if Instant::now() < until => {
                assert!(e.to_string().contains("busy"), "{e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(c.list(&Request::default()).unwrap().is_empty());
}

/// `haar serve` with `extra` arguments and `log_env` as `HAAR_LOG`, its stderr in `log`.
fn spawn_logging_server(root: &Path, log: &Path, extra: &[&str], log_env: Option<&str>) -> Server {
    let mut cmd = Command::new(HAAR);
    cmd.arg("--root")
        .arg(root)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(extra)
        .env("HAAR_TOKEN", TOKEN)
        .env_remove("HAAR_CONFIG")
        .env_remove("HAAR_LOG")
        .stderr(std::fs::File::create(log).unwrap());
    if let Some(v) = log_env {
        cmd.env("HAAR_LOG", v);
    }
    Server::new(ServerProcess::spawn(&mut cmd, Announce::FirstLine), root)
}

/// Waits (up to 30 s) until `log` holds a line with every one of `parts`.
fn wait_log_line(log: &Path, parts: &[&str]) -> String {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap();
        if let Some(l) = text.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
            return l.to_string();
        }
        assert!(Instant::now() < until, "no line with {parts:?} in: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_server_logs_each_refused_login_with_peer_and_reason_and_more_with_v() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, log_env, logins_shown) in [
        (&[][..], None, false),
        (&["-v"][..], None, true),
        (&["-vv"][..], Some("warn"), false),
        (&[][..], Some("haar_net=info"), true),
    ] {
        let log = dir.path().join("server.log");
        let s = spawn_logging_server(&dir.path().join("root"), &log, extra, log_env);
        let out = haar(&["--servers", &s.addr, "list", "class=od"], Some("wrong"));
        assert_eq!(out.status.code(), Some(1));
        let refused = wait_log_line(&log, &["refused", "reason=token rejected"]);
        assert!(
            refused.contains(" WARN ") && refused.contains("peer=127.0.0.1:"),
            "{refused}"
        );
        let out = haar(&["--servers", &s.addr, "list", "class=od"], Some(TOKEN));
        assert!(out.status.success(), "{out:?}");
        if logins_shown {
            let l = wait_log_line(&log, &["logged in", "peer=127.0.0.1:"]);
            assert!(
                l.contains(" INFO ") && l.contains("access=ReadWrite"),
                "{l}"
            );
        } else {
            // The refusal after the login is a marker that the login was handled by then.
            let _ = haar(
                &["--servers", &s.addr, "list", "class=od"],
                Some("wrong again"),
            );
            wait_log_line(&log, &["refused"]);
            let until = Instant::now() + Duration::from_secs(30);
            while std::fs::read_to_string(&log)
                .unwrap()
                .matches("refused")
                .count()
                < 2
            {
                assert!(Instant::now() < until);
                std::thread::sleep(Duration::from_millis(50));
            }
            let text = std::fs::read_to_string(&log).unwrap();
            assert!(!text.contains("logged in"), "{extra:?} {log_env:?}: {text}");
        }
    }
}
