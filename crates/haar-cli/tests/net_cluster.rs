//! Clusters of real `haar serve` processes under faults, with producers and consumers in other
//! processes: kill -9 of one server mid-run with `--replicas 2` (no flushed field lost, reads
//! go on) and `--replicas 1` (errors name the dead server), restart (every flushed field reads
//! back byte-identical), and notifications counted per field for consumers that subscribe
//! before, during and after the failure. The scenarios run on loopback and again with each
//! server a separate host in its own network namespace (`ip netns` + veth, root only). TLS:
//! certificates made by the test, a client trusting the CA, and one that does not.
//!
//! Producers are this test binary started again as a child (`producer_process`, an ignored
//! test that does nothing unless started by a scenario); consumers and readers are the `haar`
//! binary (`watch --json`, `retrieve`, `list`).

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::Request;
use haar_net::{ClientConfig, RemoteStore};
use haar_store::FieldStore;
use haar_store::dist::{DistStore, Placement};
use haar_testkit::{Announce, ServerProcess};

const TOKEN: &str = "net-cluster-token";
const HAAR: &str = env!("CARGO_BIN_EXE_haar");
const FIELD_BYTES: usize = 100_000;
const MEMBERS: u32 = 4;

// ---------------------------------------------------------------------------------------------
// Fields: each one names itself in its first bytes, so a chunk of a retrieve's output can be
// checked against the bytes it must hold whatever order fields come back in.

fn key(date: &str, member: u32, step: u32) -> Key {
    Key::parse(&format!(
        "class=od,expver=1,stream=enfo,date={date},time=0,domain=g,type=pf,levtype=sfc,number={member},step={step},param=167"
    ))
    .unwrap()
}

fn field(date: &str, member: u32, step: u32) -> Vec<u8> {
    let head = format!("FIELD {date} {member:>3} {step:>4} ");
    let mut x = (date.parse::<u64>().unwrap() << 20) ^ ((member as u64) << 12) ^ step as u64 | 1;
    let mut out = head.into_bytes();
    while out.len() < FIELD_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x as u8);
    }
    out
}

/// `(date, member, step)` of a field's bytes, checking the rest of them.
fn identify(chunk: &[u8]) -> (String, u32, u32) {
    let head = String::from_utf8_lossy(&chunk[..24]).to_string();
    let mut w = head.split_whitespace().skip(1);
    let date = w.next().unwrap().to_string();
    let member = w.next().unwrap().parse().unwrap();
    let step = w.next().unwrap().parse().unwrap();
    assert!(
        chunk == field(&date, member, step),
        "bytes of {date}/{member}/{step} differ from what was archived"
    );
    (date, member, step)
}

fn step_request(date: &str, steps: &BTreeSet<u32>) -> String {
    let steps: Vec<String> = steps.iter().map(u32::to_string).collect();
    format!(
        "class=od,expver=1,stream=enfo,date={date},time=0,type=pf,levtype=sfc,number=1/2/3/4,step={},param=167",
        steps.join("/")
    )
}

// ---------------------------------------------------------------------------------------------
// Where servers run: loopback, or each in a network namespace of its own behind a veth pair.

/// Network namespaces made (and removed on drop) by the test: namespace `i` holds one end of
/// a veth pair as 10.A.B.2/30, the root namespace the other as 10.A.B.1/30 (A from the process
/// id, B from the call and `i`).
struct Namespaces {
    names: Vec<String>,
    host_links: Vec<String>,
    hosts: Vec<String>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("`ip` (iproute2) runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Namespaces {
    fn create(n: usize) -> Namespaces {
        // Unique per process and per call: tests run in parallel threads and CI may run
        // several jobs on one host.
        static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = (std::process::id() * 8 + call) % 100_000;
        let a = 200 + std::process::id() % 50;
        let b0 = (call % 32) * 8;
        let mut ns = Namespaces {
            names: Vec::new(),
            host_links: Vec::new(),
            hosts: Vec::new(),
        };
        for i in 0..n {
            let name = format!("haar{tag}n{i}");
            let link = format!("hv{tag}n{i}");
            let peer = format!("hp{tag}n{i}");
            ip(&["netns", "add", &name]);
            ns.names.push(name.clone());
            ip(&[
                "link", "add", &link, "type", "veth", "peer", "name", &peer, "netns", &name,
            ]);
            ns.host_links.push(link.clone());
            let b = b0 + i as u32;
            ip(&["addr", "add", &format!("10.{a}.{b}.1/30"), "dev", &link]);
            ip(&["link", "set", &link, "up"]);
            ip(&[
                "-n",
                &name,
                "addr",
                "add",
                &format!("10.{a}.{b}.2/30"),
                "dev",
                &peer,
            ]);
            ip(&["-n", &name, "link", "set", &peer, "up"]);
            ip(&["-n", &name, "link", "set", "lo", "up"]);
            ns.hosts.push(format!("10.{a}.{b}.2"));
        }
        ns
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for l in &self.host_links {
            let _ = Command::new("ip").args(["link", "del", l]).output();
        }
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

enum Net {
    Loopback,
    Namespaces(Namespaces),
}

impl Net {
    fn namespaces(n: usize) -> Option<Net> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!(
                "SKIPPED: network-namespace tests need root (ip netns); CI runs them as root"
            );
            return None;
        }
        Some(Net::Namespaces(Namespaces::create(n)))
    }

    /// The command that runs `haar` on host `i`, and the address it listens on.
    fn host(&self, i: usize) -> (Command, String) {
        match self {
            Net::Loopback => (Command::new(HAAR), "127.0.0.1:0".into()),
            Net::Namespaces(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.names[i], HAAR]);
                (c, format!("{}:0", ns.hosts[i]))
            }
        }
    }
}

/// A `haar serve` process (killed when dropped), its address, root and host.
struct Server {
    process: ServerProcess,
    addr: String,
    root: PathBuf,
    host: usize,
}

/// Starts `haar serve` on host `i` of `net` (on `listen`, or a free port), logging to
/// `root.log`.
fn serve(net: &Net, i: usize, root: &Path, listen: Option<&str>, tls: Option<&Tls>) -> Server {
    let (mut cmd, any) = net.host(i);
    let log = std::fs::File::create(root.with_extension("log")).unwrap();
    cmd.arg("--root")
        .arg(root)
        .args(["serve", "--listen", listen.unwrap_or(&any)])
        .env("HAAR_TOKEN", TOKEN)
        .env_remove("HAAR_CONFIG")
        .stderr(log);
    if let Some(t) = tls {
        cmd.arg("--tls-cert")
            .arg(&t.cert)
            .arg("--tls-key")
            .arg(&t.key);
    }
    let process =
        ServerProcess::try_spawn(&mut cmd, Announce::FirstLine, Some(Duration::from_secs(20)))
            .unwrap_or_else(|e| {
                panic!(
                    "haar serve: {e}; log: {}",
                    std::fs::read_to_string(root.with_extension("log")).unwrap_or_default()
                )
            });
    Server {
        addr: process.addr.clone(),
        process,
        root: root.to_path_buf(),
        host: i,
    }
}

fn cluster(net: &Net, n: usize, dir: &Path) -> Vec<Server> {
    (0..n)
        .map(|i| serve(net, i, &dir.join(format!("node{i}")), None, None))
        .collect()
}

/// Kills a server with SIGKILL (no chance to flush or say goodbye).
fn kill_9(s: &mut Server) {
    s.process.kill_9();
}

/// The same server back on its root and address.
fn restart(net: &Net, s: &Server) -> Server {
    let back = serve(net, s.host, &s.root, Some(&s.addr), None);
    assert_eq!(back.addr, s.addr);
    back
}

fn haar(args: &[&str]) -> Output {
    Command::new(HAAR)
        .args(args)
        .env("HAAR_TOKEN", TOKEN)
        .env_remove("HAAR_CONFIG")
        .output()
        .unwrap()
}

fn rw() -> ClientConfig {
    ClientConfig {
        token: Some(TOKEN.into()),
        ..ClientConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Producers: this binary again, as a child process. Each flushes one step at a time, retrying
// a step whose archive or flush failed (as a model run would), and reports on stdout.

const ROLE: &str = "HAAR_NET_CLUSTER_PRODUCER";

#[test]
#[ignore = "a producer process that the cluster scenarios start; does nothing on its own"]
fn producer_process() {
    let Ok(spec) = std::env::var(ROLE) else {
        return;
    };
    // servers;replicas;date;steps;pace_ms
    let parts: Vec<&str> = spec.split(';').collect();
    let servers: Vec<String> = parts[0].split(',').map(str::to_string).collect();
    let replicas: usize = parts[1].parse().unwrap();
    let date = parts[2];
    let steps: u32 = parts[3].parse().unwrap();
    let pace = Duration::from_millis(parts[4].parse().unwrap());
    let lanes = servers
        .iter()
        .map(|s| {
            let r: Box<dyn FieldStore> = Box::new(RemoteStore::connect(s, &rw()).unwrap());
            (s.clone(), r)
        })
        .collect();
    let opts = haar_store::StoreOptions::default();
    let mut dist = DistStore::new(
        lanes,
        replicas,
        Placement::Database,
        opts.schema.clone(),
        opts.context.clone(),
    )
    .unwrap();
    for step in 0..steps {
        let mut attempt = 0;
        loop {
            let r = (1..=MEMBERS)
                .try_for_each(|m| dist.archive(&key(date, m, step), &field(date, m, step)))
                .and_then(|()| dist.flush());
            match r {
                Ok(()) => {
                    println!("FLUSHED {date} {step}");
                    break;
                }
                Err(e) => {
                    println!("ERROR {date} {step}: {e}");
                    attempt += 1;
                    assert!(attempt < 10, "step {step} failed 10 times");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        std::thread::sleep(pace);
    }
    println!("DONE {date}");
}

struct Producer {
    child: Child,
    lines: mpsc::Receiver<String>,
    flushed: BTreeSet<u32>,
    errors: Vec<String>,
    done: bool,
}

impl Producer {
    fn start(servers: &str, replicas: usize, date: &str, steps: u32, pace_ms: u64) -> Producer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "producer_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                ROLE,
                format!("{servers};{replicas};{date};{steps};{pace_ms}"),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Producer {
            child,
            lines: rx,
            flushed: BTreeSet::new(),
            errors: Vec::new(),
            done: false,
        }
    }

    /// Reads its reports until `until` holds (or panics after `within`).
    fn follow(&mut self, within: Duration, until: impl Fn(&Producer) -> bool) {
        let deadline = Instant::now() + within;
        while !until(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("producer stalled; errors so far: {:?}", self.errors));
            // The test harness may print "test producer_process ... " on the same line.
            if let Some(i) = line.find("FLUSHED ") {
                let step = line[i..]
                    .split_whitespace()
                    .nth(2)
                    .unwrap()
                    .parse()
                    .unwrap();
                self.flushed.insert(step);
            } else if let Some(i) = line.find("ERROR ") {
                eprintln!("producer: {}", &line[i..]);
                self.errors.push(line[i..].to_string());
            } else if line.contains("DONE ") {
                self.done = true;
            }
        }
    }

    fn finish(&mut self) {
        self.follow(Duration::from_secs(60), |p| p.done);
        assert!(self.child.wait().unwrap().success(), "producer failed");
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Consumers: `haar watch --json` processes; every line is counted.

struct Consumer {
    child: Child,
    events: mpsc::Receiver<serde_json::Value>,
    seen: HashMap<String, usize>,
}

impl Consumer {
    fn start(servers: &str) -> Consumer {
        let mut child = Command::new(HAAR)
            .args([
                "--servers",
                servers,
                "watch",
                "class=od,stream=enfo",
                "--json",
            ])
            .env("HAAR_TOKEN", TOKEN)
            .env_remove("HAAR_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
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
        Consumer {
            child,
            events: rx,
            seen: HashMap::new(),
        }
    }

    /// Counts events until `expected` distinct fields have arrived, then listens 1.5 s more
    /// for duplicates; asserts every field arrived exactly once.
    fn expect_exactly_once(&mut self, who: &str, expected: &BTreeSet<String>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.seen.len() < expected.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(v) => self.count(&v),
                Err(_) => break,
            }
        }
        let quiet = Instant::now() + Duration::from_millis(1500);
        while let Ok(v) = self
            .events
            .recv_timeout(quiet.saturating_duration_since(Instant::now()))
        {
            self.count(&v);
        }
        let got: BTreeSet<String> = self.seen.keys().cloned().collect();
        let missing: Vec<_> = expected.difference(&got).collect();
        let extra: Vec<_> = got.difference(expected).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{who}: missing {missing:?}, unexpected {extra:?}"
        );
        let twice: Vec<_> = self.seen.iter().filter(|(_, n)| **n != 1).collect();
        assert!(twice.is_empty(), "{who}: seen more than once: {twice:?}");
    }

    fn count(&mut self, v: &serde_json::Value) {
        let k = &v["key"];
        let name = format!(
            "{}/{}/{}",
            k["date"].as_str().unwrap(),
            k["number"].as_str().unwrap(),
            k["step"].as_str().unwrap()
        );
        *self.seen.entry(name).or_default() += 1;
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn names(date: &str, steps: &BTreeSet<u32>) -> BTreeSet<String> {
    steps
        .iter()
        .flat_map(|s| (1..=MEMBERS).map(move |m| format!("{date}/{m}/{s}")))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Readers: `haar retrieve` processes.

/// Retrieves `steps` of `date` through `servers`; returns the fields found (checked
/// byte-identical) or the failed command's output.
fn retrieve(
    servers: &str,
    replicas: usize,
    date: &str,
    steps: &BTreeSet<u32>,
    out: &Path,
) -> Result<BTreeSet<String>, Output> {
    let r = replicas.to_string();
    let o = haar(&[
        "--servers",
        servers,
        "--replicas",
        &r,
        "retrieve",
        &step_request(date, steps),
        "-o",
        out.to_str().unwrap(),
    ]);
    if !o.status.success() {
        return Err(o);
    }
    let bytes = std::fs::read(out).unwrap();
    assert_eq!(bytes.len() % FIELD_BYTES, 0, "output is not whole fields");
    let mut got = BTreeSet::new();
    for chunk in bytes.chunks(FIELD_BYTES) {
        let (d, m, s) = identify(chunk);
        assert!(
            got.insert(format!("{d}/{m}/{s}")),
            "{d}/{m}/{s} retrieved twice"
        );
    }
    Ok(got)
}

/// The server of `servers` that holds fields of `date`.
fn holder(servers: &[Server], date: &str) -> usize {
    let req = Request::parse(&format!("class=od,date={date}")).unwrap();
    servers
        .iter()
        .position(|s| {
            let r = RemoteStore::connect(&s.addr, &rw()).unwrap();
            !r.list(&req).unwrap().is_empty()
        })
        .expect("some server holds the producer's database")
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

/// Four servers, two replicas: kill -9 the server holding producer A's database mid-run.
fn replicas_2_survive_kill_9(net: &Net) {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = cluster(net, 4, dir.path());
    let all = servers
        .iter()
        .map(|s| s.addr.clone())
        .collect::<Vec<_>>()
        .join(",");
    let steps = 12;
    let mut early = Consumer::start(&all);
    std::thread::sleep(Duration::from_millis(300));
    let mut a = Producer::start(&all, 2, "20261101", steps, 150);
    let mut b = Producer::start(&all, 2, "20261102", steps, 150);
    a.follow(Duration::from_secs(30), |p| p.flushed.len() >= 3);
    let mut mid = Consumer::start(&all);
    let v = holder(&servers, "20261101");
    let victim_addr = servers[v].addr.clone();
    // What the victim holds now must all come back after its restart.
    let before: Vec<Key> = RemoteStore::connect(&victim_addr, &rw())
        .unwrap()
        .list(&Request::parse("class=od").unwrap())
        .unwrap()
        .iter()
        .map(|f| f.key())
        .collect();
    assert!(!before.is_empty());
    kill_9(&mut servers[v]);
    eprintln!("killed {victim_addr} holding {} fields", before.len());
    let mut during = Consumer::start(&all);
    // Reads go on through the replicas while it is down.
    a.follow(Duration::from_secs(30), |p| p.flushed.len() >= 6);
    b.follow(Duration::from_secs(30), |p| p.flushed.len() >= 3);
    for (p, date) in [(&a, "20261101"), (&b, "20261102")] {
        let got =
            retrieve(&all, 2, date, &p.flushed, &dir.path().join("during")).unwrap_or_else(|o| {
                panic!(
                    "read with {victim_addr} down failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                )
            });
        assert_eq!(
            got,
            names(date, &p.flushed),
            "{date} while {victim_addr} is down"
        );
    }
    servers[v] = restart(net, &servers[v]);
    let mut after = Consumer::start(&all);
    a.finish();
    b.finish();
    let every: BTreeSet<u32> = (0..steps).collect();
    assert_eq!(a.flushed, every);
    assert_eq!(b.flushed, every);
    let mut expected = names("20261101", &every);
    expected.extend(names("20261102", &every));
    for (c, who) in [
        (&mut early, "subscribed before the run"),
        (&mut mid, "subscribed mid-run"),
        (&mut during, "subscribed while a server was down"),
        (&mut after, "subscribed after the restart"),
    ] {
        c.expect_exactly_once(who, &expected);
    }
    for date in ["20261101", "20261102"] {
        let got = retrieve(&all, 2, date, &every, &dir.path().join("after"))
            .unwrap_or_else(|o| panic!("final read: {}", String::from_utf8_lossy(&o.stderr)));
        assert_eq!(got, names(date, &every));
    }
    // The restarted server holds what it held before the kill, byte for byte.
    let back = RemoteStore::connect(&victim_addr, &rw()).unwrap();
    for k in &before {
        let mut req = Request::default();
        for (kw, val) in k.iter() {
            req.set(kw, haar_core::request::Values::List(vec![val.to_string()]));
        }
        let mut n = 0;
        back.retrieve(&req, &mut |_, d, _| {
            identify(d);
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 1, "{k} not back on {victim_addr}");
    }
}

/// Three servers, one replica: kill -9 the server holding the producer's database; reads of
/// its fields fail naming it; after the restart everything reads back.
fn replicas_1_errors_name_the_dead_server(net: &Net) {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = cluster(net, 3, dir.path());
    let all = servers
        .iter()
        .map(|s| s.addr.clone())
        .collect::<Vec<_>>()
        .join(",");
    let date = "20261103";
    let steps = 10;
    let mut early = Consumer::start(&all);
    std::thread::sleep(Duration::from_millis(300));
    let mut p = Producer::start(&all, 1, date, steps, 150);
    p.follow(Duration::from_secs(30), |p| p.flushed.len() >= 3);
    let v = holder(&servers, date);
    let victim_addr = servers[v].addr.clone();
    kill_9(&mut servers[v]);
    let flushed_before: BTreeSet<u32> = p.flushed.clone();
    let o = retrieve(&all, 1, date, &flushed_before, &dir.path().join("r"))
        .expect_err("a read of fields only the dead server holds must fail");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&victim_addr),
        "error does not name {victim_addr}: {err}"
    );
    let o = haar(&["--servers", &all, "list", "class=od"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "list with a lane down and no replica must fail"
    );
    assert!(err.contains(&victim_addr), "{err}");
    // The producer goes on: new steps fail over to the next lane in hash order; an error it
    // saw (data in flight on the dead server) names that server.
    p.follow(Duration::from_secs(30), |p| p.flushed.len() >= 6);
    for e in &p.errors {
        assert!(e.contains(&victim_addr), "{e}");
    }
    servers[v] = restart(net, &servers[v]);
    let mut after = Consumer::start(&all);
    p.finish();
    let every: BTreeSet<u32> = (0..steps).collect();
    assert_eq!(p.flushed, every);
    let got = retrieve(&all, 1, date, &every, &dir.path().join("r"))
        .unwrap_or_else(|o| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(got, names(date, &every));
    let expected = names(date, &every);
    early.expect_exactly_once("subscribed before the run", &expected);
    after.expect_exactly_once("subscribed after the restart", &expected);
}

#[test]
fn loopback_replicas_2_survive_kill_9() {
    replicas_2_survive_kill_9(&Net::Loopback);
}

#[test]
fn loopback_replicas_1_errors_name_the_dead_server() {
    replicas_1_errors_name_the_dead_server(&Net::Loopback);
}

#[test]
fn namespaces_replicas_2_survive_kill_9() {
    if let Some(net) = Net::namespaces(4) {
        replicas_2_survive_kill_9(&net);
    }
}

#[test]
fn namespaces_replicas_1_errors_name_the_dead_server() {
    if let Some(net) = Net::namespaces(3) {
        replicas_1_errors_name_the_dead_server(&net);
    }
}

// ---------------------------------------------------------------------------------------------
// TLS.

struct Tls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

/// A CA, and a server certificate for 127.0.0.1 signed by it, as PEM files in `dir`.
fn make_ca(dir: &Path, name: &str) -> Tls {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let tls = Tls {
        cert: dir.join(format!("{name}-server.pem")),
        key: dir.join(format!("{name}-server.key")),
        ca: dir.join(format!("{name}-ca.pem")),
    };
    std::fs::write(&tls.cert, cert.pem()).unwrap();
    std::fs::write(&tls.key, key.serialize_pem()).unwrap();
    std::fs::write(&tls.ca, ca.pem()).unwrap();
    tls
}

#[test]
fn tls_round_trip_and_an_untrusted_client_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tls = make_ca(dir.path(), "ours");
    let other = make_ca(dir.path(), "other");
    let s = serve(
        &Net::Loopback,
        0,
        &dir.path().join("root"),
        None,
        Some(&tls),
    );
    let date = "20261104";
    let data = field(date, 1, 0);
    let raw = dir.path().join("f.bin");
    std::fs::write(&raw, &data).unwrap();
    let k = key(date, 1, 0).to_string();
    let ca = tls.ca.to_str().unwrap();
    let o = haar(&[
        "--servers",
        &s.addr,
        "--tls-ca",
        ca,
        "archive",
        "--key",
        &k,
        raw.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = dir.path().join("out.bin");
    let o = haar(&[
        "--servers",
        &s.addr,
        "--tls-ca",
        ca,
        "retrieve",
        &k,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), data);
    // A client that trusts another CA: refused, saying why.
    let o = haar(&[
        "--servers",
        &s.addr,
        "--tls-ca",
        other.ca.to_str().unwrap(),
        "list",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains(&s.addr) && err.contains("certificate") && err.contains("--tls-ca"),
        "untrusted server certificate not reported clearly: {err}"
    );
    // A client without TLS: refused, told to use --tls-ca.
    let o = haar(&["--servers", &s.addr, "list"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains(&s.addr) && err.contains("--tls-ca"),
        "plain client against a TLS server not told what to do: {err}"
    );
}

// ---------------------------------------------------------------------------------------------
// The configuration file a cluster script writes.

#[test]
fn a_dist_configuration_file_reaches_the_servers_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let servers = cluster(&Net::Loopback, 3, dir.path());
    let mut yaml = String::from("type: dist\nreplicas: 2\nlanes:\n");
    for s in &servers {
        yaml.push_str(&format!("  - {{type: remote, server: \"{}\"}}\n", s.addr));
    }
    let cfg = dir.path().join("cluster.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let cfg = cfg.to_str().unwrap();
    let date = "20261105";
    for m in 1..=MEMBERS {
        let raw = dir.path().join(format!("f{m}.bin"));
        std::fs::write(&raw, field(date, m, 0)).unwrap();
        let o = haar(&[
            "--config",
            cfg,
            "archive",
            "--key",
            &key(date, m, 0).to_string(),
            raw.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // Two copies of every field, on two different servers.
    let req = Request::parse(&format!("class=od,date={date}")).unwrap();
    let copies: usize = servers
        .iter()
        .map(|s| {
            RemoteStore::connect(&s.addr, &rw())
                .unwrap()
                .list(&req)
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(copies, 2 * MEMBERS as usize);
    let o = haar(&["--config", cfg, "list", &format!("class=od,date={date}")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        MEMBERS as usize
    );
    let steps = BTreeSet::from([0]);
    let out = dir.path().join("out.bin");
    let o = haar(&[
        "--config",
        cfg,
        "retrieve",
        &step_request(date, &steps),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: BTreeSet<String> = std::fs::read(&out)
        .unwrap()
        .chunks(FIELD_BYTES)
        .map(|c| {
            let (d, m, s) = identify(c);
            format!("{d}/{m}/{s}")
        })
        .collect();
    assert_eq!(got, names(date, &steps));
    // watch/wait take their servers from the file too.
    let o = haar(&[
        "--config",
        cfg,
        "wait",
        &step_request(date, &steps),
        "--timeout",
        "10",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A command that needs a local store says so.
    let o = haar(&["--config", cfg, "serve"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--root"), "{err}");
}
