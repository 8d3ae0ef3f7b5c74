//! The client of the stage service, as the CLI uses it: one connection, one request line and
//! one reply line at a time.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::codec::{Request, decode_line, encode_line, read_line};
use crate::error::{Error, ErrorClass, Result};
use crate::task::{TaskRecord, TaskSpec};

/// A connection to a stage service.
#[derive(Debug)]
pub struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
    socket: PathBuf,
    /// The admin token sent with every request.
    pub token: Option<String>,
}

impl Client {
    /// Connects to the service on `socket`.
    pub fn connect(socket: &Path) -> Result<Client> {
        let s = UnixStream::connect(socket)
            .map_err(|e| Error::io("connect to the stage service on", socket, e))?;
        let w = s
            .try_clone()
            .map_err(|e| Error::io("connect to the stage service on", socket, e))?;
        Ok(Client {
            r: BufReader::new(s),
            w,
            socket: socket.to_path_buf(),
            token: None,
        })
    }

    /// Sends `req` and returns the reply's object; a refusal becomes the error of its class.
    pub fn call(&mut self, mut req: Request) -> Result<Value> {
        if req.token().is_none() {
            req.set_token(self.token.clone());
        }
        let line = encode_line(&serde_json::to_value(&req).expect("requests serialise"));
        let gone = |what: String| {
            Error::Service(format!(
                "the stage service on {} went away ({what}); once it runs again its tasks \
                 resume: ask again (`haar stage wait TASK`, or release the Slurm job)",
                self.socket.display()
            ))
        };
        // A service that refuses the connection (over its limits) says why and closes it,
        // maybe before the request is sent: its reply is read even when sending failed.
        let sent = self.w.write_all(line.as_bytes());
        let reply = match (read_line(&mut self.r), sent) {
            (Ok(Some(reply)), _) => reply,
            (_, Err(e)) => return Err(gone(format!("send: {e}"))),
            (Err(e), Ok(())) => return Err(gone(format!("receive: {e}"))),
            (Ok(None), Ok(())) => return Err(gone("it closed the connection".into())),
        };
        let v = decode_line(&reply).map_err(|m| {
            Error::Service(format!("stage service on {}: {m}", self.socket.display()))
        })?;
        if v["ok"] == Value::Bool(true) {
            return Ok(v);
        }
        let msg = v["error"].as_str().unwrap_or("refused").to_string();
        let class = v["class"]
            .as_str()
            .map_or(ErrorClass::Io, ErrorClass::of_name);
        Err(class.error(msg, Error::Service))
    }

    /// Submits a task; returns its record.
    pub fn submit(&mut self, spec: &TaskSpec) -> Result<TaskRecord> {
        let v = self.call(Request::Submit {
            spec: spec.clone(),
            token: None,
        })?;
        record(&v["task"])
    }

    /// One of the caller's tasks.
    pub fn status(&mut self, task: &str) -> Result<TaskRecord> {
        let v = self.call(Request::Status {
            task: Some(task.into()),
            user: None,
            token: None,
        })?;
        let mut all = records(&v["tasks"])?;
        all.pop()
            .ok_or_else(|| Error::Service("status: an empty reply".into()))
    }

    /// The caller's tasks (`user`: another user's, for an admin).
    pub fn list(&mut self, user: Option<&str>) -> Result<Vec<TaskRecord>> {
        let v = self.call(Request::Status {
            task: None,
            user: user.map(String::from),
            token: None,
        })?;
        records(&v["tasks"])
    }

    /// Cancels one of the caller's tasks (`user`: another user's, for an admin).
    pub fn cancel(&mut self, task: &str, user: Option<&str>) -> Result<TaskRecord> {
        let v = self.call(Request::Cancel {
            task: task.into(),
            user: user.map(String::from),
            token: None,
        })?;
        record(&v["task"])
    }

    /// Drains the service (an admin operation): it takes no new tasks; with `wait`, returns
    /// once none of its tasks runs (polled every 200 ms). The reply says how many run.
    pub fn drain(&mut self, wait: bool) -> Result<Value> {
        let mut v = self.call(Request::Drain { token: None })?;
        while wait && v["running"].as_u64().unwrap_or(0) > 0 {
            std::thread::sleep(Duration::from_millis(200));
            v = self.call(Request::Hello { token: None })?;
        }
        Ok(v)
    }

    /// Polls the task every 100 ms until it is final (or `timeout`), telling `progress`.
    pub fn wait(
        &mut self,
        task: &str,
        timeout: Option<Duration>,
        progress: &mut dyn FnMut(&TaskRecord),
    ) -> Result<TaskRecord> {
        let start = std::time::Instant::now();
        loop {
            let rec = self.status(task)?;
            progress(&rec);
            if rec.state.is_final() || timeout.is_some_and(|t| start.elapsed() >= t) {
                return Ok(rec);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn record(v: &Value) -> Result<TaskRecord> {
    serde_json::from_value(v.clone())
        .map_err(|e| Error::Service(format!("a task record the client cannot read: {e}")))
}

fn records(v: &Value) -> Result<Vec<TaskRecord>> {
    serde_json::from_value(v.clone())
        .map_err(|e| Error::Service(format!("task records the client cannot read: {e}")))
}
