//! The network measurements of `haar bench` (formerly `haar_net::bench`, moved here so that
//! the network library ships no benchmark): remote archive bandwidth beside raw loopback TCP
//! measured in the same run, and flush → notification latency. Uses only haar-net's public
//! client API.
//!
//! The server runs in a child process (`haar serve`, see [`spawn_server`]); the producer and
//! the watcher are threads of the calling process on separate connections, so every
//! notification crosses from the server process to another process.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use haar_core::Key;
use haar_core::request::Request;
use haar_store::FieldStore;
use serde::Serialize;

use haar_net::{ClientConfig, RemoteStore, Watch};

/// The figures, as printed and saved by `haar bench`.
#[derive(Debug, Clone, Serialize)]
pub struct NetBench {
    /// Field size archived (bytes).
    pub field_bytes: usize,
    /// Fields archived.
    pub fields: usize,
    /// Raw loopback TCP, one stream, 1 MiB messages, GB/s (10^9 bytes/s).
    pub raw_tcp_gbps: f64,
    /// Remote archive (+ one flush at the end), GB/s.
    pub remote_archive_gbps: f64,
    /// remote / raw.
    pub ratio: f64,
    /// Flush → event delivered, p50, microseconds.
    pub notify_p50_us: f64,
    /// p90.
    pub notify_p90_us: f64,
    /// Samples behind the percentiles.
    pub notify_samples: usize,
}

/// Raw loopback TCP bandwidth: one connection, `total` bytes in 1 MiB messages, GB/s.
pub fn raw_loopback_gbps(total: usize) -> std::io::Result<f64> {
    const MSG: usize = 1 << 20;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<usize> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; MSG];
        let mut got = 0;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(got);
            }
            got += n;
        }
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let msg = vec![0x5au8; MSG];
    let start = Instant::now();
    let mut sent = 0;
    while sent < total {
        s.write_all(&msg)?;
        sent += MSG;
    }
    drop(s);
    let got = reader.join().expect("reader thread")?;
    Ok(got as f64 / start.elapsed().as_secs_f64() / 1e9)
}

/// The key of field `i` in the network benchmarks (50 members × steps, one database).
pub fn bench_key(i: usize) -> Key {
    Key::parse(&format!(
        "class=od,expver=1,stream=enfo,date=20261121,time=0,domain=g,type=pf,levtype=sfc,number={},step={},param=167",
        i % 50,
        i / 50
    ))
    .expect("valid key")
}

/// Archives `fields` fields of `size` bytes to `addr` and flushes once; GB/s including the
/// flush.
pub fn remote_archive_gbps(
    addr: &str,
    cfg: &ClientConfig,
    fields: usize,
    size: usize,
) -> haar_store::Result<f64> {
    remote_archive_flushing_gbps(addr, cfg, fields, size, fields)
}

/// Archives `fields` fields of `size` bytes to `addr`, flushing after every `flush_every`
/// and at the end (as FDB5's peer benchmark does); GB/s including the flushes.
pub fn remote_archive_flushing_gbps(
    addr: &str,
    cfg: &ClientConfig,
    fields: usize,
    size: usize,
    flush_every: usize,
) -> haar_store::Result<f64> {
    let mut r = RemoteStore::connect(addr, cfg)?;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    let keys: Vec<Key> = (0..fields).map(bench_key).collect();
    let every = flush_every.max(1);
    let start = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        r.archive(k, &data)?;
        if (i + 1) % every == 0 && i + 1 < fields {
            r.flush()?;
        }
    }
    r.flush()?;
    Ok((fields * size) as f64 / start.elapsed().as_secs_f64() / 1e9)
}

/// Flush → notification latency: a watcher on its own connection, a producer archiving one
/// small field and flushing `samples` times; each sample is from just before `flush()` to the
/// event's arrival (so it includes the flush itself).
pub fn notify_latency(
    addr: &str,
    cfg: &ClientConfig,
    samples: usize,
) -> haar_store::Result<Vec<Duration>> {
    let req = Request::parse("class=od,stream=enfo,type=cf").expect("valid request");
    let mut watch = Watch::open(addr, cfg, &req)?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        while let Some(ev) = watch.next_event() {
            let ok = ev.map(|(_, m)| m.replay).unwrap_or(true);
            if !ok && tx.send(Instant::now()).is_err() {
                return;
            }
        }
    });
    let mut producer = RemoteStore::connect(addr, cfg)?;
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let key = Key::parse(&format!(
            "class=od,expver=1,stream=enfo,date=20261121,time=0,domain=g,type=cf,levtype=sfc,step={i},param=167"
        ))
        .expect("valid key");
        producer.archive(&key, b"GRIB-latency-probe-7777")?;
        let t0 = Instant::now();
        producer.flush()?;
        let t1 = rx.recv_timeout(Duration::from_secs(10)).map_err(|_| {
            haar_store::Error::net(
                "watch on",
                addr,
                std::io::Error::other("no event within 10 s of a flush"),
            )
        })?;
        out.push(t1.saturating_duration_since(t0));
    }
    Ok(out)
}

/// A `haar serve` child process; killed on drop.
pub struct ChildServer {
    child: Child,
    /// `host:port` it listens on.
    pub addr: String,
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `haar_exe --root root --backend backend serve --listen 127.0.0.1:0` with `token`.
pub fn spawn_server(
    haar_exe: &Path,
    root: &Path,
    backend: &str,
    token: &str,
) -> std::io::Result<ChildServer> {
    let mut child = Command::new(haar_exe)
        .arg("--root")
        .arg(root)
        .args(["--backend", backend, "serve", "--listen", "127.0.0.1:0"])
        .env("HAAR_TOKEN", token)
        .env_remove("HAAR_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| std::io::Error::other(format!("haar serve printed {line:?}")))?
        .to_string();
    Ok(ChildServer { child, addr })
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// The whole network benchmark against a running server: raw TCP first, then remote
/// archive, then notification latency.
pub fn run(
    addr: &str,
    cfg: &ClientConfig,
    fields: usize,
    field_bytes: usize,
    samples: usize,
) -> haar_store::Result<NetBench> {
    let total = fields * field_bytes;
    let raw = raw_loopback_gbps(total.max(256 << 20))
        .map_err(|e| haar_store::Error::io("measure", "loopback TCP", e))?;
    let remote = remote_archive_gbps(addr, cfg, fields, field_bytes)?;
    let mut lat = notify_latency(addr, cfg, samples)?;
    lat.sort();
    Ok(NetBench {
        field_bytes,
        fields,
        raw_tcp_gbps: raw,
        remote_archive_gbps: remote,
        ratio: remote / raw,
        notify_p50_us: percentile(&lat, 0.5),
        notify_p90_us: percentile(&lat, 0.9),
        notify_samples: lat.len(),
    })
}
