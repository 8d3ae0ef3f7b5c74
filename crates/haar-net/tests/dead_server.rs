//! A `dist` client over real server processes, one of which is killed with SIGKILL (the virtual
//! cluster's node-kill findings, docs/cluster.md):
//! - a read returns its fields in request order and byte-identical, whichever lane serves each
//!   (the best lane dead, or alive and lacking fields archived while another was dead);
//! - a process asks a dead server once per back-off, not once per field, and an archive that
//!   no live lane can take fails naming the dead servers.
//!
//! The servers are this test binary started again (`child_server`, an ignored test that does
//! nothing unless a scenario starts it), each over a POSIX root of its own, as `haar serve`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use haar_core::Key;
use haar_core::request::Request;
use haar_net::auth::Tokens;
use haar_net::client::{Backoff, connect_attempts, is_remembered_down};
use haar_net::{ClientConfig, RemoteStore, Server, ServerConfig, Target};
use haar_store::dist::{DistStore, Placement};
use haar_store::posix::{FsyncPolicy, PosixBackend};
use haar_store::{FieldStore, StoreOptions};
use haar_testkit::{Announce, ServerProcess};

const TOKEN: &str = "dead-server-token";
const CHILD_ENV: &str = "HAAR_DEAD_SERVER_CHILD";

/// The server process of the scenarios: `haar serve` over the POSIX root in `$CHILD_ENV`.
#[test]
#[ignore = "run by the other tests as their server process"]
fn child_server() {
    let Some(root) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let backend = PosixBackend::new(vec![PathBuf::from(root)], FsyncPolicy::Never).unwrap();
    let server = Server::bind(
        "127.0.0.1:0",
        Target::Local {
            backend: Arc::new(backend),
            options: StoreOptions::default(),
        },
        ServerConfig {
            tokens: Tokens {
                read_write: Some(TOKEN.into()),
                read_only: None,
            },
            ..ServerConfig::default()
        },
    )
    .unwrap();
    println!("listening on {}", server.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    server.run().unwrap();
}

/// A server process over `root` (started and killed as haar-testkit does it).
fn start(root: &Path) -> ServerProcess {
    ServerProcess::spawn(
        haar_testkit::rerun_self("child_server")
            .env(CHILD_ENV, root)
            .stderr(Stdio::inherit()),
        Announce::AfterHarness,
    )
}

fn cluster(n: usize, dir: &Path) -> Vec<ServerProcess> {
    (0..n)
        .map(|i| start(&dir.join(format!("node{i}"))))
        .collect()
}

fn cfg() -> ClientConfig {
    ClientConfig {
        token: Some(TOKEN.into()),
        ..ClientConfig::default()
    }
}

/// `dist` over every server (all must be up: lanes connect as they are made).
fn dist(servers: &[ServerProcess], replicas: usize, cfg: &ClientConfig) -> DistStore {
    let lanes = servers
        .iter()
        .map(|s| {
            let lane: Box<dyn FieldStore> = Box::new(RemoteStore::connect(&s.addr, cfg).unwrap());
            (s.addr.clone(), lane)
        })
        .collect();
    let o = StoreOptions::default();
    DistStore::new(lanes, replicas, Placement::Database, o.schema, o.context).unwrap()
}

const BASE: &str =
    "class=od,expver=1,stream=oper,date=20270101,time=0,type=fc,levtype=sfc,param=167";

fn key(step: u32) -> Key {
    Key::parse(&format!("{BASE},domain=g,step={step}")).unwrap()
}

/// A field that names its step in its first bytes, then bytes made from the step.
fn field(step: u32) -> Vec<u8> {
    let mut out = format!("STEP {step:>4} ").into_bytes();
    let mut x = u64::from(step) << 20 | 1;
    while out.len() < 40_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x as u8);
    }
    out
}

/// The steps a read delivered, in order, each checked byte for byte.
fn read_steps(store: &dyn FieldStore, request: &str) -> Vec<u32> {
    let mut steps = Vec::new();
    let r = store
        .retrieve(&Request::parse(request).unwrap(), &mut |k, data, _| {
            let step: u32 = k.get("step").unwrap().parse().unwrap();
            assert!(
                data == field(step),
                "{k}: bytes differ from what was archived"
            );
            steps.push(step);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{request}: {e}"));
    assert!(r.missing.is_empty(), "{request}: missing {:?}", r.missing);
    steps
}

/// The virtual cluster's finding: 4 servers, replicas 2, steps 0–5 archived, the database's
/// first lane killed, steps 6–9 archived; a read of the ten steps returned 6 7 8 9 0 1 2 3 4 5.
/// Now every read returns the request's order, with or without `domain` (a request without it
/// ranks the lanes by another database key, so its best lane is alive and holds only the steps
/// archived after the kill), over the wire and through same-host reads.
#[test]
fn a_dist_read_keeps_request_order_with_a_server_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = cluster(4, dir.path());
    let mut writer = dist(&servers, 2, &cfg());
    for s in 0..6 {
        writer.archive(&key(s), &field(s)).unwrap();
    }
    writer.flush().unwrap();
    let wire = ClientConfig {
        local_reads: false,
        ..cfg()
    };
    // Readers made before the kill (lanes connect as they are made): one over the wire, one
    // reading the servers' roots directly (same host), as `haar retrieve` would on loopback.
    let readers = [dist(&servers, 2, &wire), dist(&servers, 2, &cfg())];
    let top = writer.ranking(&key(0)).unwrap()[0];
    servers[top].kill_9();
    for s in 6..10 {
        writer.archive(&key(s), &field(s)).unwrap();
    }
    writer.flush().unwrap();
    let order = [9, 0, 8, 1, 7, 2, 6, 3, 5, 4];
    let steps: Vec<String> = order.iter().map(u32::to_string).collect();
    for reader in &readers {
        for domain in [",domain=g", ""] {
            let request = format!("{BASE}{domain},step={}", steps.join("/"));
            assert_eq!(read_steps(reader, &request), order, "{request}");
            let request = format!("{BASE}{domain},step=0/1/2/3/4/5/6/7/8/9");
            assert_eq!(
                read_steps(reader, &request),
                (0..10).collect::<Vec<_>>(),
                "{request}"
            );
        }
    }
}

/// A process that keeps working with one server dead asks it once, then not again within the
/// back-off, however many fields it archives and reads: here 25 of each, on one handle and on a
/// new handle per field (as a program that opens the store for each step). The back-off is set
/// longer than the test so the count is exact; the default's schedule is tested in the client.
#[test]
fn a_dead_server_is_asked_once_per_back_off_not_once_per_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = cluster(4, dir.path());
    let cfg = ClientConfig {
        unreachable_backoff: Backoff {
            first: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
        },
        ..cfg()
    };
    let mut store = dist(&servers, 2, &cfg);
    // The database's best lane, so that every field's read asks it first.
    let top = store.ranking(&key(0)).unwrap()[0];
    let dead = servers[top].addr.clone();
    servers[top].kill_9();
    let before = connect_attempts(&dead);
    for s in 0..25 {
        store.archive(&key(s), &field(s)).unwrap();
        store.flush().unwrap();
        assert_eq!(read_steps(&store, &format!("{BASE},step={s}")), [s]);
    }
    assert_eq!(
        connect_attempts(&dead) - before,
        1,
        "the dead server {dead} was asked again within its back-off"
    );
    assert!(is_remembered_down(&dead));
    // A new handle per field: the dead server's lane fails at once, naming it.
    for s in 0..25 {
        let e = RemoteStore::connect(&dead, &cfg).err().expect("dead");
        let e = e.to_string();
        assert!(e.contains(&dead) && e.contains("not tried again"), "{e}");
        let lanes = servers
            .iter()
            .filter(|p| p.addr != dead)
            .map(|p| {
                let lane: Box<dyn FieldStore> =
                    Box::new(RemoteStore::connect(&p.addr, &cfg).unwrap());
                (p.addr.clone(), lane)
            })
            .collect();
        let o = StoreOptions::default();
        let mut d = DistStore::new(lanes, 2, Placement::Database, o.schema, o.context).unwrap();
        assert_eq!(read_steps(&d, &format!("{BASE},step={s}")), [s]);
        d.archive(&key(100 + s), &field(100 + s)).unwrap();
        d.flush().unwrap();
    }
    assert_eq!(connect_attempts(&dead) - before, 1);

    // Two more servers die: a field has one live lane for its two replicas. The archive fails
    // and its error names every server it could not use.
    let mut dead_all = vec![dead.clone()];
    for p in servers.iter_mut().filter(|p| p.addr != dead).take(2) {
        p.kill_9();
        dead_all.push(p.addr.clone());
    }
    let e = store
        .archive(&key(200), &field(200))
        .expect_err("one live lane cannot hold two replicas")
        .to_string();
    assert!(e.contains("only 1 of 2 replica(s)"), "{e}");
    for d in &dead_all {
        assert!(e.contains(d.as_str()), "{e} does not name {d}");
    }
}
