//! The per-node link limit of a Table 8 run: one TCP stream from one node to another, its
//! two ends worker processes placed on the nodes.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::GIB;
use crate::error::{Error, io};
use crate::procs::{Group, Reporter};
use crate::vcluster::Node;
use crate::worker::{self, WorkerSpec};

/// Bytes of the link measurement's stream.
const LINK_BYTES: u64 = 1 << 30;

/// A port every node has free (each node is its own network namespace).
const LINK_PORT: u16 = 7399;

/// One end of the link measurement.
#[derive(Debug, Serialize, Deserialize)]
pub enum LinkSpec {
    /// Accepts one connection on this address and reads it to the end.
    Sink(String),
    /// Connects to this address and sends this many bytes.
    Source(String, u64),
}

/// Runs one end of the link measurement (a worker process on a node).
pub fn link_worker(spec: LinkSpec, mut rep: Reporter) -> Result<(), Error> {
    match spec {
        LinkSpec::Sink(addr) => {
            let l = TcpListener::bind(&addr).map_err(io(format!("link sink: bind {addr}")))?;
            rep.ready_then_wait()?;
            let (mut s, _) = l.accept().map_err(io("link sink: accept"))?;
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => n += k as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io("link sink: read")(e)),
                }
            }
            rep.say(&format!("result {}", json!({ "bytes": n })))
        }
        LinkSpec::Source(addr, bytes) => {
            rep.ready_then_wait()?;
            let mut s = connect(&addr)?;
            let buf = vec![0x5au8; 1 << 20];
            let mut left = bytes;
            while left > 0 {
                let k = left.min(buf.len() as u64) as usize;
                s.write_all(&buf[..k])
                    .map_err(io(format!("link source: send to {addr}")))?;
                left -= k as u64;
            }
            s.shutdown(std::net::Shutdown::Write)
                .map_err(io("link source: shutdown"))?;
            rep.say(&format!("result {}", json!({ "bytes": bytes })))
        }
    }
}

fn connect(addr: &str) -> Result<TcpStream, Error> {
    let t = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return Ok(s),
            Err(e) if t.elapsed() > Duration::from_secs(5) => {
                return Err(io(format!("link source: connect {addr}"))(e));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// GiB/s of one TCP stream from `from` to `to`, best of 3.
pub(super) fn link_limit(from: &Node, to: &Node) -> Result<f64, Error> {
    let addr = format!("{}:{LINK_PORT}", to.ip);
    let mut best: f64 = 0.0;
    for _ in 0..3 {
        let mut g = Group::new();
        let sink = worker::command(&[], &WorkerSpec::Link(LinkSpec::Sink(addr.clone())))?;
        g.spawn(format!("link sink on {}", to.name), to.command(&sink))?;
        // The sink binds before it says ready, and the source connects only after go.
        let src = worker::command(
            &[],
            &WorkerSpec::Link(LinkSpec::Source(addr.clone(), LINK_BYTES)),
        )?;
        g.spawn(format!("link source on {}", from.name), from.command(&src))?;
        g.wait_ready(Duration::from_secs(30))?;
        let t = Instant::now();
        g.go()?;
        let r = g.results(Duration::from_secs(300), |_, _| {})?;
        let secs = t.elapsed().as_secs_f64();
        let got = r.first().and_then(|v| v["bytes"].as_u64()).unwrap_or(0);
        if got != LINK_BYTES {
            return Err(Error::Failed(format!(
                "link {} -> {}: {got} of {LINK_BYTES} bytes arrived",
                from.name, to.name
            )));
        }
        best = best.max(LINK_BYTES as f64 / secs / GIB);
    }
    Ok(best)
}
