//! `haar serve` stopped by SIGTERM (docs/reliability.md, "a pmem server stopped by SIGTERM
//! leaked its chunk"): the real binary, a real pmem pool, real signals. A stop answers the
//! request in progress, drops what clients did not flush, gives the unused tail of its heap
//! chunk back, and exits 0 within its grace even with idle and half-done connections open.
//! Before the fix the server died of the signal and every restart leaked 16 MiB of the pool.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use haar_core::key::Key;
use haar_core::request::Request;
use haar_net::server::HEARTBEAT;
use haar_net::{ClientConfig, RemoteStore, Watch};
use haar_store::FieldStore;
use haar_testkit::{Announce, ServerProcess};

const HAAR: &str = env!("CARGO_BIN_EXE_haar");
const TOKEN: &str = "serve-stop-test-token-0123456789abcdef";
const ROUNDS: u32 = 3;
const CHUNK: u64 = 16 << 20;

fn key(round: u32, step: u32) -> Key {
    Key::parse(&format!(
        "class=od,expver={round},stream=oper,date=20270101,time=0,domain=g,type=fc,levtype=sfc,step={step},param=167"
    ))
    .unwrap()
}

fn serve(root: &Path) -> ServerProcess {
    ServerProcess::spawn_within(
        Command::new(HAAR)
            .arg("--root")
            .arg(root)
            .args(["--backend", "pmem", "serve", "--listen", "127.0.0.1:0"])
            .env("HAAR_TOKEN", TOKEN)
            .env_remove("HAAR_CONFIG")
            .stderr(Stdio::null()),
        Announce::FirstLine,
        Duration::from_secs(20),
    )
}

fn info(root: &Path) -> serde_json::Value {
    let out = Command::new(HAAR)
        .arg("--root")
        .arg(root)
        .args(["--backend", "pmem", "info", "--json"])
        .env_remove("HAAR_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn sigterm_stops_serve_cleanly_and_gives_the_chunk_back() {
    let dir = tempfile::tempdir_in(if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    })
    .unwrap();
    let root = dir.path().join("root");
    let cfg = ClientConfig {
        token: Some(TOKEN.into()),
        local_reads: false,
        ..ClientConfig::default()
    };
    let mut heap = Vec::new();
    for round in 1..=ROUNDS {
        let mut server = serve(&root);
        let addr = server.addr.clone();
        let mut w = RemoteStore::connect(&addr, &cfg).unwrap();
        for step in 0..20 {
            w.archive(&key(round, step), &vec![round as u8; 10_000])
                .unwrap();
        }
        w.flush().unwrap();
        // Open when the signal comes: an idle logged-in connection, a WATCH stream waiting
        // for flushes, and one whose archive is never flushed.
        let _idle = RemoteStore::connect(&addr, &cfg).unwrap();
        let _watch = Watch::open(&addr, &cfg, &Request::parse("class=rd").unwrap()).unwrap();
        let mut unflushed = RemoteStore::connect(&addr, &cfg).unwrap();
        unflushed
            .archive(&key(round, 999), &vec![9u8; 10_000])
            .unwrap();
        let t = Instant::now();
        // SAFETY: a signal to our own child.
        assert_eq!(
            unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) },
            0
        );
        let status = loop {
            if let Some(s) = server.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "round {round}: haar serve still runs 20 s after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            status.success(),
            "round {round}: haar serve ended with {status} on SIGTERM (a clean stop exits 0)"
        );
        // Nothing here needs the stop's grace (5 s): the idle connection sees the end of its
        // input and the WATCH stream is woken at once. (Slurm kills a step KillWait seconds
        // after its SIGTERM; a stop that waits out the grace loses its chunk there.)
        assert!(
            t.elapsed() < HEARTBEAT * 2,
            "round {round}: the stop took {:?}: a connection held it until the grace ran out",
            t.elapsed()
        );
        let i = info(&root);
        let used = i["backend"]["heap_used_bytes"].as_u64().unwrap();
        heap.push(used);
        assert_eq!(
            i["fields"].as_u64(),
            Some(20 * round as u64),
            "round {round}: every flushed field and no unflushed one: {i}"
        );
    }
    // Live data grows by 200 kB a round; a leaked chunk tail would add about 16 MiB a round.
    let grown = heap[ROUNDS as usize - 1] - heap[0];
    assert!(
        grown < CHUNK / 2,
        "heap grew by {grown} bytes over {ROUNDS} stops ({heap:?}): the stops leak the chunk"
    );
    assert!(
        heap[0] < CHUNK,
        "heap after one stop is {} bytes: the chunk was not given back",
        heap[0]
    );
}
