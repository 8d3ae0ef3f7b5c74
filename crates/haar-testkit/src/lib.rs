//! Test support shared by the integration tests of haar's crates (a dev-dependency only, never
//! shipped): a server process started and waited for until it prints `listening on ADDR`, and
//! a loopback TCP relay that counts the bytes a server sends.
//!
//! Owns process start-up and the relay; what a server serves, and how, stays in each test
//! (this crate depends on std alone, so that any crate may dev-depend on it without a cycle).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// What a server's standard output says before its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    /// `listening on ADDR` is the first line (`haar serve`); anything else is an error.
    FirstLine,
    /// `listening on ADDR` follows whatever the test harness prints first (`running 1 test`,
    /// the test's name): a test binary started again as its own server, see [`rerun_self`].
    AfterHarness,
}

/// A server process; killed (SIGKILL) and reaped when dropped.
pub struct ServerProcess {
    /// The process, for tests that kill it or check that it is still running.
    pub child: Child,
    /// The address it printed.
    pub addr: String,
}

impl ServerProcess {
    /// Starts `cmd` (standard input closed, standard output read here; standard error as `cmd`
    /// says) and waits for its address, without a time limit. Panics if it exits or prints
    /// something else first (see [`Announce`]).
    pub fn spawn(cmd: &mut Command, announce: Announce) -> ServerProcess {
        Self::try_spawn(cmd, announce, None).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`spawn`](Self::spawn), failing if the address is not printed `within`.
    pub fn spawn_within(cmd: &mut Command, announce: Announce, within: Duration) -> ServerProcess {
        Self::try_spawn(cmd, announce, Some(within)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`spawn`](Self::spawn) with a time limit, if any, returning what went wrong (so that a
    /// caller can add, say, the server's log) instead of panicking. A process that did not
    /// announce itself is killed.
    pub fn try_spawn(
        cmd: &mut Command,
        announce: Announce,
        within: Option<Duration>,
    ) -> Result<ServerProcess, String> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{cmd:?} does not start: {e}"))?;
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = mpsc::channel();
        // Read in a thread, so that a time limit holds, which then keeps draining the pipe so
        // that the server never blocks on a full one.
        std::thread::spawn(move || {
            let _ = tx.send(read_addr(&mut out, announce));
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        });
        let got = match within {
            Some(t) => rx
                .recv_timeout(t)
                .unwrap_or_else(|_| Err(format!("no `listening on ADDR` within {t:?}"))),
            None => rx.recv().unwrap(),
        };
        match got {
            Ok(addr) => Ok(ServerProcess { child, addr }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    /// SIGKILL: no chance to flush or close a connection cleanly.
    pub fn kill_9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address in the `listening on ADDR` line of `out`, read as `announce` says.
fn read_addr(out: &mut impl BufRead, announce: Announce) -> Result<String, String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("server exited before printing `listening on ADDR`".into());
        }
        match announce {
            Announce::FirstLine => {
                return line
                    .trim()
                    .strip_prefix("listening on ")
                    .map(str::to_string)
                    .ok_or_else(|| format!("first line was {line:?}"));
            }
            Announce::AfterHarness => {
                if let Some((_, addr)) = line.split_once("listening on ") {
                    return Ok(addr.trim().to_string());
                }
            }
        }
    }
}

/// This test binary, to be started again to run only its ignored test `test` (a server's
/// body, which does nothing unless the environment the caller sets names its work), its
/// output not captured: start it with [`Announce::AfterHarness`].
pub fn rerun_self(test: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--ignored", "--nocapture"]);
    cmd
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

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(out: &str, announce: Announce) -> Result<String, String> {
        read_addr(&mut out.as_bytes(), announce)
    }

    #[test]
    fn the_address_line_is_read_as_announced() {
        let harness = "\nrunning 1 test\nchild_server listening on 127.0.0.1:4000\n";
        assert_eq!(
            addr(harness, Announce::AfterHarness).unwrap(),
            "127.0.0.1:4000"
        );
        assert_eq!(
            addr(harness, Announce::FirstLine).unwrap_err(),
            "first line was \"\\n\""
        );
        assert_eq!(
            addr("listening on [::1]:9\nmore\n", Announce::FirstLine).unwrap(),
            "[::1]:9"
        );
        assert!(
            addr("running 1 test\n", Announce::AfterHarness)
                .unwrap_err()
                .contains("exited")
        );
        assert!(
            addr("", Announce::FirstLine)
                .unwrap_err()
                .contains("exited")
        );
    }
}
