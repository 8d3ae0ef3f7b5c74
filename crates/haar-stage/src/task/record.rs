//! What a task is written down as: its spec, its record in the journal and its states.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::ErrorClass;

/// Which way data goes, as the job sees it (NORNS's stage_in / stage_out); the mechanics are
/// the same, the direction says which destinations a job's teardown removes (stage-in ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Into the job's node-local tier.
    In,
    /// Out of it.
    Out,
    /// Neither (an administrator's copy).
    Copy,
}

/// How source objects map onto the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mapping {
    /// The destination is the copy: a file to a file, a directory to a directory, a request
    /// to one GRIB file.
    #[default]
    Same,
    /// The destination is a directory the source goes into, under its own name.
    Into,
}

impl std::str::FromStr for Mapping {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "same" => Ok(Mapping::Same),
            "into" => Ok(Mapping::Into),
            _ => Err(format!("unknown mapping {s:?}: use same or into")),
        }
    }
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Recorded, not started.
    Queued,
    /// A live process is running it.
    Running,
    /// Its runner died (killed, node rebooted): run it again to resume.
    Interrupted,
    /// Every object is at its destination, verified.
    Done,
    /// Stopped by an error (see `error`).
    Failed,
    /// Stopped by `cancel`.
    Cancelled,
}

impl State {
    /// Whether the task will not change any more by itself.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            State::Done | State::Failed | State::Cancelled | State::Interrupted
        )
    }
}

/// An object staged and verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoneObject {
    /// Its destination path (or the store dataspace's name for fields).
    pub dst: PathBuf,
    /// Its length.
    pub bytes: u64,
    /// CRC-32C of its bytes.
    pub crc32c: u32,
}

/// What to stage.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskSpec {
    /// The task's id; `None`: one is made up (`t` + time + pid).
    pub id: Option<String>,
    /// Which way.
    pub direction: Direction,
    /// Source endpoint.
    pub src: String,
    /// Destination endpoint.
    pub dst: String,
    /// How the source maps onto the destination.
    pub mapping: Mapping,
}

/// A task's journal record (design §13.2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The id.
    pub id: String,
    /// Which way.
    pub direction: Direction,
    /// Source endpoint as given.
    pub src: String,
    /// Destination endpoint as given.
    pub dst: String,
    /// Source dataspace.
    pub src_space: String,
    /// Destination dataspace.
    pub dst_space: String,
    /// Mapping.
    pub mapping: Mapping,
    /// State.
    pub state: State,
    /// The process running it (while running).
    pub pid: Option<u32>,
    /// That process's start time (clock ticks after boot, /proc/PID/stat field 22), so that a
    /// reused pid is not taken for the runner.
    pub pid_start: Option<u64>,
    /// Unix seconds it was recorded.
    pub created: f64,
    /// Unix seconds its last run started.
    pub started: Option<f64>,
    /// Unix seconds it ended.
    pub finished: Option<f64>,
    /// Runs so far (more than one: resumed).
    pub attempts: u32,
    /// Bytes to stage.
    pub bytes_total: u64,
    /// Bytes staged.
    pub bytes_done: u64,
    /// Objects to stage.
    pub objects_total: u64,
    /// Objects staged.
    pub objects_done: u64,
    /// Bytes per second of this run so far (or the pair's recorded rate before it measured).
    pub rate: f64,
    /// Seconds left at `rate`.
    pub eta_seconds: Option<f64>,
    /// Objects staged and verified (what a resumed run keeps).
    pub done: Vec<DoneObject>,
    /// Why it failed.
    pub error: Option<String>,
    /// What kind of failure: `missing` (the source is not there), `input` (a wrong endpoint,
    /// option or input file), `denied`, or `io` (storage, checksum, anything else).
    pub error_class: Option<ErrorClass>,
}

impl TaskRecord {
    /// `SRC->DST`, the key bandwidth is recorded under.
    pub fn pair(&self) -> String {
        format!("{}->{}", self.src_space, self.dst_space)
    }
}
