//! Server processes and counting relays shared by the extraction tests over servers
//! (`extract_dist.rs`, `extract_select.rs`): each test binary starts itself again as its
//! server (an ignored test `child_server` calling [`serve_child`]), and a TCP relay in front of
//! each server counts the bytes it sends.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use haar::{ConfigSource, OpenOptions};

/// The body of a test binary's server process: `haar serve` over the pmem root named by the
/// environment variable `child_env` (nothing when it is unset), printing `listening on ADDR`.
pub fn serve_child(child_env: &str) {
    let Some(root) = std::env::var_os(child_env) else {
        return;
    };
    let root = PathBuf::from(root);
    let opts = OpenOptions {
        config: ConfigSource::Yaml {
            text: "backend: pmem\n".into(),
            origin: "test".into(),
        },
        root: Some(root.join("store")),
        token_file: Some(root.join("token")),
        ..OpenOptions::default()
    };
    let server = haar::serve::bind(
        &opts,
        &haar::serve::ServeOptions {
            listen: "127.0.0.1:0".into(),
            read_token_file: None,
            tls: None,
            limits: haar_net::ServerLimits::default(),
            frame_tags: haar_net::protocol::FrameTags::Auto,
        },
    )
    .unwrap();
    println!("listening on {}", server.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    haar::serve::run_until_signalled(server).unwrap();
}

/// A server process; killed when dropped.
pub struct Proc {
    child: Child,
    /// The server's address.
    pub addr: String,
}

impl Proc {
    /// Starts this test binary again as its server process (its ignored test `child_server`,
    /// which calls [`serve_child`] with `child_env`), over `dir` with `token`.
    pub fn start(dir: &Path, child_env: &str, token: &str) -> Proc {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("token"), token).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_server", "--ignored", "--nocapture"])
            .env(child_env, dir)
            .env_remove("HAAR_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        // The harness may print "running 1 test" and the test's name first.
        while !line.contains("listening on ") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "server exited");
        }
        let addr = line
            .split("listening on ")
            .nth(1)
            .unwrap()
            .trim()
            .to_string();
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Proc { child, addr }
    }

    /// SIGKILL: no chance to close a connection cleanly.
    #[allow(dead_code)] // not every test binary kills its servers
    pub fn kill_9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback TCP relay in front of a server that counts the bytes the server sends through
/// it (every byte of every frame: handshake, headers, meta, data).
pub struct Relay {
    /// The relay's address, to give the client in place of the server's.
    pub addr: String,
    from_server: Arc<AtomicU64>,
}

impl Relay {
    /// A relay to `target`.
    pub fn start(target: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let from_server = Arc::new(AtomicU64::new(0));
        let (target, count) = (target.to_string(), from_server.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&target) else {
                    continue; // the client sees its connection closed
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || pump(client, server, None));
                let count = count.clone();
                std::thread::spawn(move || pump(s2, c2, Some(count)));
            }
        });
        Relay { addr, from_server }
    }

    /// Bytes the server has sent through the relay so far.
    pub fn sent(&self) -> u64 {
        self.from_server.load(Ordering::SeqCst)
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, count: Option<Arc<AtomicU64>>) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = from.read(&mut buf).unwrap_or(0);
        if n == 0 {
            let _ = to.shutdown(Shutdown::Write);
            return;
        }
        if let Some(c) = &count {
            c.fetch_add(n as u64, Ordering::SeqCst);
        }
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}
