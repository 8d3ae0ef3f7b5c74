//! What the stage service counts (docs/operations.md, "Metrics"): its requests by operation
//! and result, its connections and refusals, the runners it started and how their tasks
//! ended, and the bytes they staged. Shown in the OpenMetrics text format by haar-net's
//! endpoint (`haar stage daemon --metrics ADDR`); the gauges of every user's tasks are found
//! at each scrape by the server (`Daemon`'s `Exposition`), from the journals.
//!
//! Owns the metric names and their labels; when something is counted is the server's.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::task::State;

/// One label: `cause="busy"`, `state="done"`.
type Label = [(&'static str, &'static str); 1];
/// `op="submit",result="denied"`.
type OpResult = [(&'static str, &'static str); 2];

/// Why a connection was refused at accept: the `cause` label of
/// `haar_stage_connections_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Every connection the service allows was open.
    Busy,
    /// The peer's uid held its share.
    UserLimit,
}

/// Every state a task can be in, with its label.
pub(crate) const STATES: [(State, &str); 6] = [
    (State::Queued, "queued"),
    (State::Running, "running"),
    (State::Interrupted, "interrupted"),
    (State::Done, "done"),
    (State::Failed, "failed"),
    (State::Cancelled, "cancelled"),
];

/// The label of a task state.
pub(crate) fn state_label(s: State) -> &'static str {
    STATES
        .iter()
        .find(|(x, _)| *x == s)
        .map_or("unknown", |(_, l)| l)
}

/// The stage service's counters and gauges.
pub(crate) struct StageMetrics {
    pub(crate) registry: Registry,
    requests: Family<OpResult, Counter>,
    open: Gauge,
    accepted: Counter,
    refused: Family<Label, Counter>,
    dropped: Family<Label, Counter>,
    runners: Counter,
    ended: Family<Label, Counter>,
    bytes: Counter,
    tasks: Family<Label, Gauge>,
    inflight_done: Gauge,
    inflight_total: Gauge,
}

impl std::fmt::Debug for StageMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StageMetrics")
    }
}

impl Default for StageMetrics {
    fn default() -> StageMetrics {
        let mut registry = Registry::with_prefix("haar_stage");
        let m = StageMetrics {
            requests: Family::default(),
            open: Gauge::default(),
            accepted: Counter::default(),
            refused: Family::default(),
            dropped: Family::default(),
            runners: Counter::default(),
            ended: Family::default(),
            bytes: Counter::default(),
            tasks: Family::default(),
            inflight_done: Gauge::default(),
            inflight_total: Gauge::default(),
            registry: Registry::default(),
        };
        // The client appends `_total` to counters.
        registry.register(
            "requests",
            "Requests answered, by operation and result (ok, or the error class: denied, input, missing, io)",
            m.requests.clone(),
        );
        registry.register("connections_open", "Connections open now", m.open.clone());
        registry.register(
            "connections_accepted",
            "Connections admitted",
            m.accepted.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections refused at accept, by cause (busy: the service's limit; user_limit: the uid's)",
            m.refused.clone(),
        );
        registry.register(
            "connections_dropped",
            "Connections closed by the service for what the peer sent, by cause (deadline, bad_line: too long or not UTF-8, eof: ended inside a line, io)",
            m.dropped.clone(),
        );
        registry.register(
            "runners_started",
            "Task runners started (a submitted or resumed task each)",
            m.runners.clone(),
        );
        registry.register(
            "runners_ended",
            "Task runners that ended, by the state they left their task in",
            m.ended.clone(),
        );
        registry.register(
            "bytes_staged",
            "Bytes the runners this service started staged (counted when each ends)",
            m.bytes.clone(),
        );
        registry.register(
            "tasks",
            "Tasks in every user's journal on this node, by state (found at each scrape)",
            m.tasks.clone(),
        );
        registry.register(
            "inflight_bytes_done",
            "Bytes staged so far by the queued and running tasks (found at each scrape)",
            m.inflight_done.clone(),
        );
        registry.register(
            "inflight_bytes_total",
            "Bytes the queued and running tasks stage in all (found at each scrape)",
            m.inflight_total.clone(),
        );
        StageMetrics { registry, ..m }
    }
}

fn gauge_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl StageMetrics {
    /// Counts a request of `op` answered with `result` (`ok` or an error class's name).
    pub(crate) fn request(&self, op: &'static str, result: &'static str) {
        self.requests
            .get_or_create(&[("op", op), ("result", result)])
            .inc();
    }

    /// Counts an admitted connection; `open` are open now.
    pub(crate) fn accepted(&self, open: usize) {
        self.accepted.inc();
        self.set_open(open);
    }

    /// Sets the number of connections open.
    pub(crate) fn set_open(&self, open: usize) {
        self.open.set(gauge_of(open as u64));
    }

    /// Counts a refused connection.
    pub(crate) fn refused(&self, why: Refusal) {
        let cause = match why {
            Refusal::Busy => "busy",
            Refusal::UserLimit => "user_limit",
        };
        self.refused.get_or_create(&[("cause", cause)]).inc();
    }

    /// Counts a connection closed for what its peer sent.
    pub(crate) fn dropped(&self, cause: &'static str) {
        self.dropped.get_or_create(&[("cause", cause)]).inc();
    }

    /// Counts a runner started.
    pub(crate) fn runner_started(&self) {
        self.runners.inc();
    }

    /// Counts a runner that ended leaving its task in `state`, having staged `bytes`.
    pub(crate) fn runner_ended(&self, state: &'static str, bytes: u64) {
        self.ended.get_or_create(&[("state", state)]).inc();
        self.bytes.inc_by(bytes);
    }

    /// Sets the task gauges: how many tasks are in each state, and the bytes done and to do
    /// of the queued and running ones.
    pub(crate) fn set_tasks(&self, by_state: &[u64; STATES.len()], done: u64, total: u64) {
        for ((_, label), n) in STATES.iter().zip(by_state) {
            self.tasks
                .get_or_create(&[("state", label)])
                .set(gauge_of(*n));
        }
        self.inflight_done.set(gauge_of(done));
        self.inflight_total.set(gauge_of(total));
    }
}
