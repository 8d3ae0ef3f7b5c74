//! Worker processes for the workloads: spawning `haar` children, a start barrier, a line
//! protocol, loud failure, and Ctrl-C handling.
//!
//! Protocol (one line each way, text): a worker prints `ready` once it has built its
//! templates and opened its store, then waits for `go` on stdin; afterwards it prints event
//! lines (`flushed STEP NS …`, `product STEP NS …`, `progress N`) and finally `result JSON`.
//! Its stderr is kept (last lines) to explain a failure. A worker that exits non-zero, or
//! closes stdout without a result, fails the whole run naming it; the others are killed.
//!
//! Owns process handling only: what a worker does is in [`crate::hammer`] and
//! [`crate::workflow`], how it is told (its spec) in [`crate::worker`].

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, io};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Catches SIGINT/SIGTERM so a run stops its children and removes its temporary stores
/// (the children, in our process group, get Ctrl-C themselves; PR_SET_PDEATHSIG covers kill -9).
pub fn install_interrupt_handler() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// True once Ctrl-C (or SIGTERM) arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Makes `cmd`'s child receive SIGTERM when this process dies, however it dies.
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}

/// What a worker said.
#[derive(Debug)]
pub enum Msg {
    /// A line on its stdout.
    Line(usize, String),
    /// Its stdout closed.
    Eof(usize),
}

struct Worker {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    tail: Arc<Mutex<VecDeque<String>>>,
    done: bool,
}

/// A group of worker processes; dropping it kills those still running.
pub struct Group {
    workers: Vec<Worker>,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
}

impl Default for Group {
    fn default() -> Self {
        Self::new()
    }
}

impl Group {
    /// An empty group.
    pub fn new() -> Group {
        let (tx, rx) = mpsc::channel();
        Group {
            workers: Vec::new(),
            tx,
            rx,
        }
    }

    /// Starts `cmd` as worker `name` (e.g. `producer member 3`); returns its index.
    pub fn spawn(&mut self, name: String, mut cmd: Command) -> Result<usize, Error> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(io(format!("cannot start {name}")))?;
        let idx = self.workers.len();
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(Msg::Line(idx, l)).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(Msg::Eof(idx));
        });
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let t = tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut t = t.lock().expect("tail lock");
                if t.len() == 12 {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        self.workers.push(Worker {
            name,
            stdin: child.stdin.take(),
            child,
            tail,
            done: false,
        });
        Ok(idx)
    }

    /// Worker `i`'s name.
    pub fn name(&self, i: usize) -> &str {
        &self.workers[i].name
    }

    /// The next message, or `None` after `timeout`; fails on Ctrl-C.
    pub fn recv(&self, timeout: Duration) -> Result<Option<Msg>, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            if interrupted() {
                return Err(Error::Interrupted);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            match self.rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(m) => return Ok(Some(m)),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return Ok(None),
            }
        }
    }

    /// Waits until every worker printed `ready` (other lines before it are an error).
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<(), Error> {
        let mut ready = vec![false; self.workers.len()];
        let deadline = Instant::now() + timeout;
        while ready.iter().any(|r| !r) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.recv(left)? {
                None => {
                    let late: Vec<&str> = ready
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| !**r)
                        .map(|(i, _)| self.name(i))
                        .collect();
                    return Err(Error::Failed(format!(
                        "not ready after {} s: {}",
                        timeout.as_secs(),
                        late.join(", ")
                    )));
                }
                Some(Msg::Line(i, l)) if l == "ready" => ready[i] = true,
                Some(Msg::Line(i, l)) => {
                    return Err(self.fail(i, &format!("said {l:?} before ready")));
                }
                Some(Msg::Eof(i)) => return Err(self.exited(i)),
            }
        }
        Ok(())
    }

    /// Releases every worker at once (the start barrier).
    pub fn go(&mut self) -> Result<(), Error> {
        for i in 0..self.workers.len() {
            let ok = match self.workers[i].stdin.as_mut() {
                Some(s) => s.write_all(b"go\n").and_then(|_| s.flush()).is_ok(),
                None => false,
            };
            if !ok {
                return Err(self.fail(i, "could not be told to start (its stdin is closed)"));
            }
        }
        Ok(())
    }

    /// Runs every worker to its end: passes each event line to `on_line` and returns each
    /// worker's `result` JSON (in start order). A worker that fails, or ends without a result,
    /// fails the run; so does silence from all of them for `idle`.
    pub fn results(
        &mut self,
        idle: Duration,
        mut on_line: impl FnMut(usize, &str),
    ) -> Result<Vec<serde_json::Value>, Error> {
        let mut results: Vec<Option<serde_json::Value>> = vec![None; self.workers.len()];
        let mut open = self.workers.len();
        while open > 0 {
            match self.recv(idle)? {
                None => {
                    return Err(Error::Failed(format!(
                        "no word from any worker for {} s",
                        idle.as_secs()
                    )));
                }
                Some(Msg::Line(i, line)) => match line.strip_prefix("result ") {
                    Some(j) => {
                        results[i] = Some(serde_json::from_str(j).map_err(|e| {
                            Error::Failed(format!("{}: bad result line: {e}", self.name(i)))
                        })?);
                    }
                    None => on_line(i, &line),
                },
                Some(Msg::Eof(i)) => {
                    self.reap(i)?;
                    if results[i].is_none() {
                        return Err(self.fail(i, "exited without a result"));
                    }
                    open -= 1;
                }
            }
        }
        Ok(results.into_iter().flatten().collect())
    }

    /// A worker's stdout closed: reaps it; `Ok` if it exited 0, else the failure.
    pub fn reap(&mut self, i: usize) -> Result<(), Error> {
        let status = self.workers[i].child.wait();
        self.workers[i].done = true;
        match status {
            Ok(s) if s.success() => Ok(()),
            _ => Err(self.exited(i)),
        }
    }

    fn tail(&self, i: usize) -> String {
        // The stderr reader may still be draining the last lines.
        std::thread::sleep(Duration::from_millis(50));
        let t = self.workers[i].tail.lock().expect("tail lock");
        if t.is_empty() {
            String::new()
        } else {
            format!(
                "\n  its last messages:\n    {}",
                t.iter().cloned().collect::<Vec<_>>().join("\n    ")
            )
        }
    }

    /// Error for worker `i` that exited (or closed stdout) early.
    fn exited(&mut self, i: usize) -> Error {
        let status = match self.workers[i].child.wait() {
            Ok(s) => match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                (Some(c), _) => format!("exit status {c}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => s.to_string(),
            },
            Err(e) => format!("unknown status ({e})"),
        };
        self.workers[i].done = true;
        self.fail(i, &format!("stopped early ({status})"))
    }

    /// Kills every worker and describes why: worker `i` and `why`.
    pub fn fail(&mut self, i: usize, why: &str) -> Error {
        let tail = self.tail(i);
        let msg = format!(
            "{} (pid {}) {why}; stopped the other workers{tail}",
            self.workers[i].name,
            self.workers[i].child.id()
        );
        self.kill_all();
        Error::Failed(msg)
    }

    /// Kills every worker still running.
    pub fn kill_all(&mut self) {
        for w in &mut self.workers {
            if !w.done {
                kill_with_children(&mut w.child);
                let _ = w.child.wait();
                w.done = true;
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A worker's side of the protocol. Writes go to the real stdout, which is moved aside first:
/// libraries that log to stdout (FDB5's eckit does) then write to stderr instead.
pub struct Reporter {
    out: std::fs::File,
}

impl Reporter {
    /// Takes stdout over for protocol lines.
    pub fn take_stdout() -> Result<Reporter, Error> {
        use std::os::fd::FromRawFd;
        std::io::stdout().flush().ok();
        // SAFETY: plain descriptor calls; the new descriptor is owned by the File.
        unsafe {
            let fd = libc::dup(1);
            if fd < 0 || libc::dup2(2, 1) < 0 {
                return Err(io("cannot redirect stdout")(std::io::Error::last_os_error()));
            }
            Ok(Reporter {
                out: std::fs::File::from_raw_fd(fd),
            })
        }
    }

    /// Sends one line.
    pub fn say(&mut self, line: &str) -> Result<(), Error> {
        self.out
            .write_all(format!("{line}\n").as_bytes())
            .map_err(io("cannot report to the parent"))
    }

    /// Says `ready` and blocks until the parent says `go`.
    pub fn ready_then_wait(&mut self) -> Result<(), Error> {
        self.say("ready")?;
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map_err(io("waiting for go"))?;
        if line.trim() != "go" {
            return Err(Error::Failed(format!(
                "expected go from the parent, got {:?} (parent gone?)",
                line.trim()
            )));
        }
        Ok(())
    }
}

/// Where one server of [`Servers::start_placed`] runs.
#[derive(Debug, Clone)]
pub struct ServerPlace {
    /// Its store's root, as the server names it.
    pub data: PathBuf,
    /// Its `--listen` address (port 0: any free port).
    pub listen: String,
    /// The virtual-cluster node it runs on; this host when `None`.
    pub node: Option<crate::vcluster::Node>,
    /// Also serve metrics on a free port of 127.0.0.1 (`haar serve --metrics`).
    pub metrics: bool,
}

/// Local `haar serve` processes for a run; stopped on drop.
pub struct Servers {
    children: Vec<Child>,
    /// `host:port` of each.
    pub addrs: Vec<String>,
    /// Their shared token.
    pub token_file: PathBuf,
    /// `host:port` of each metrics endpoint asked for ([`ServerPlace::metrics`]).
    pub metrics: Vec<String>,
}

impl Servers {
    /// Starts `n` servers with `backend` (pmem pools of `pool_size` bytes), server `i` under
    /// `root/nodeI`, sharing the token in `token_file` (default: a new one in `root/token`).
    pub fn start(
        n: usize,
        root: &Path,
        backend: &str,
        pool_size: Option<u64>,
        token_file: Option<&Path>,
    ) -> Result<Servers, Error> {
        let places: Vec<ServerPlace> = (0..n)
            .map(|i| ServerPlace {
                data: root.join(format!("node{i}")),
                listen: "127.0.0.1:0".into(),
                node: None,
                metrics: false,
            })
            .collect();
        Servers::start_placed(&places, root, backend, pool_size, token_file)
    }

    /// Starts one server per entry of `places`, each with its data directory, listening
    /// address and node (see [`ServerPlace`]); their configurations and, unless `token_file`
    /// names one, a new shared token go into `control`, a directory every server's node sees.
    pub fn start_placed(
        places: &[ServerPlace],
        control: &Path,
        backend: &str,
        pool_size: Option<u64>,
        token_file: Option<&Path>,
    ) -> Result<Servers, Error> {
        let exe = std::env::current_exe().map_err(io("cannot find the haar executable"))?;
        std::fs::create_dir_all(control)
            .map_err(io(format!("cannot create {}", control.display())))?;
        let token_file = token_file.map_or_else(|| control.join("token"), Path::to_path_buf);
        if !token_file.exists() {
            write_private(&token_file, &haar_net::auth::nonce())?;
        }
        let mut s = Servers {
            children: Vec::new(),
            addrs: Vec::new(),
            token_file,
            metrics: Vec::new(),
        };
        for (i, place) in places.iter().enumerate() {
            let dir = &place.data;
            let config = control.join(format!("node{i}.yaml"));
            let mut text = format!("backend: {backend}\nroots: [\"{}\"]\n", dir.display());
            if let Some(p) = pool_size {
                text.push_str(&format!("pool_size: {p}\n"));
            }
            std::fs::write(&config, text)
                .map_err(io(format!("cannot write {}", config.display())))?;
            let mut cmd = Command::new(&exe);
            cmd.arg("--config")
                .arg(&config)
                .args(["serve", "--listen", &place.listen, "--token-file"])
                .arg(&s.token_file)
                .env_remove("HAAR_CONFIG");
            if place.metrics {
                cmd.args(["--metrics", "127.0.0.1:0"]);
            }
            if let Some(node) = &place.node {
                cmd = node.command(&cmd);
            }
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            die_with_parent(&mut cmd);
            let mut child = cmd
                .spawn()
                .map_err(io(format!("cannot start {}", exe.display())))?;
            let mut line = String::new();
            let mut out = BufReader::new(child.stdout.take().expect("piped"));
            let _ = out.read_line(&mut line);
            let addr = line
                .trim()
                .strip_prefix("listening on ")
                .map(str::to_string);
            let Some(addr) = addr else {
                let _ = child.kill();
                let mut err = String::new();
                let _ = std::io::Read::read_to_string(
                    &mut child.stderr.take().expect("piped"),
                    &mut err,
                );
                let _ = child.wait();
                let on = place
                    .node
                    .as_ref()
                    .map(|n| format!(" on node {}", n.name))
                    .unwrap_or_default();
                return Err(Error::Failed(format!(
                    "server {i}{on} ({backend} under {}) did not start: {}",
                    dir.display(),
                    err.trim()
                )));
            };
            if place.metrics {
                let mut line = String::new();
                let _ = out.read_line(&mut line);
                match line.trim().strip_prefix("metrics on ") {
                    Some(m) => s.metrics.push(m.to_string()),
                    None => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err(Error::Failed(format!(
                            "server {i} did not say where its metrics are (got {:?})",
                            line.trim()
                        )));
                    }
                }
            }
            // Keep draining its stderr so a chatty server never blocks.
            let mut err = child.stderr.take().expect("piped");
            std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
            s.children.push(child);
            s.addrs.push(addr);
        }
        Ok(s)
    }

    /// The sum over every metrics endpoint of the samples of `metric` (its name without
    /// labels, e.g. `haar_requests_total`), read over HTTP as Prometheus would.
    pub fn scrape_sum(&self, metric: &str) -> Result<f64, Error> {
        let mut sum = 0.0;
        for at in &self.metrics {
            let text = http_get(at, "/metrics")?;
            sum += metric_sum(&text, metric);
        }
        Ok(sum)
    }

    /// A `dist` front-end configuration over these servers (`placement: field` spreads every
    /// field over the servers, as NEXTGenIO's FDB5 did).
    pub fn dist_config(&self, replicas: usize, placement: &str) -> String {
        let mut c = format!("type: dist\nreplicas: {replicas}\nplacement: {placement}\nlanes:\n");
        for a in &self.addrs {
            c.push_str(&format!("  - {{type: remote, server: \"{a}\"}}\n"));
        }
        c
    }

    /// Stops every server.
    pub fn stop(&mut self) {
        for c in &mut self.children {
            kill_with_children(c);
            let _ = c.wait();
        }
        self.children.clear();
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The body of `GET PATH` from `addr` (HTTP/1.0, the whole reply read to its end).
fn http_get(addr: &str, path: &str) -> Result<String, Error> {
    use std::io::Read;
    let fail = |e: std::io::Error| Error::Failed(format!("cannot read http://{addr}{path}: {e}"));
    let mut s = std::net::TcpStream::connect(addr).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(fail)?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .map_err(fail)?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).map_err(fail)?;
    match reply.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200") => {
            Ok(body.to_string())
        }
        _ => Err(Error::Failed(format!(
            "http://{addr}{path} did not answer 200: {:?}",
            reply.lines().next().unwrap_or("")
        ))),
    }
}

/// The sum of the samples of `metric` (any labels) in an OpenMetrics text.
fn metric_sum(text: &str, metric: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(metric)?;
            let rest = match rest.strip_prefix('{') {
                Some(r) => r.split_once('}')?.1,
                None => rest,
            };
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum()
}

/// SIGKILLs `child` and its own children: a process placed on a virtual-cluster node is the
/// child of `nsenter`, which forks to enter the node's PID namespace and does not pass signals
/// on (docs/cluster.md).
pub fn kill_with_children(child: &mut Child) {
    let pid = child.id();
    if let Ok(list) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        for c in list
            .split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
        {
            // SAFETY: kill(2) with a pid read from our own child's children list.
            unsafe { libc::kill(c, libc::SIGKILL) };
        }
    }
    let _ = child.kill();
}

/// Creates `path` readable by its owner only, holding `text`.
pub fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(format!("cannot create {}", path.display())))?;
    f.write_all(text.as_bytes())
        .map_err(io(format!("cannot write {}", path.display())))
}

#[cfg(test)]
mod metric_tests {
    use super::metric_sum;

    #[test]
    fn samples_of_one_metric_are_summed_over_their_labels() {
        let text = "# HELP haar_requests Requests\n# TYPE haar_requests counter\n\
                    haar_requests_total{op=\"ARCHIVE\",result=\"ok\"} 40\n\
                    haar_requests_total{op=\"FLUSH\",result=\"ok\"} 2\n\
                    haar_requests_totally_different 9\n\
                    haar_connections_open 3\n";
        assert_eq!(metric_sum(text, "haar_requests_total"), 42.0);
        assert_eq!(metric_sum(text, "haar_connections_open"), 3.0);
        assert_eq!(metric_sum(text, "haar_missing"), 0.0);
    }
}
