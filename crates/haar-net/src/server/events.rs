//! The flush-event log (design §7): every flushed field in flush order, kept in memory for the
//! watchers that stream it (WATCH), and the pending fields a connection's next flush logs.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use haar_core::Key;

/// How often an idle WATCH stream carries a HEARTBEAT (clients give up after 3 missed).
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// Events kept in memory for watchers that are catching up.
pub const EVENT_LOG_CAPACITY: usize = 1 << 18;

pub(super) struct Ev {
    pub(super) key: Key,
    pub(super) length: u64,
    pub(super) crc: u32,
}

pub(super) struct LogInner {
    pub(super) events: VecDeque<Arc<Ev>>,
    /// Sequence number of `events[0]`.
    pub(super) first: u64,
}

impl LogInner {
    pub(super) fn next(&self) -> u64 {
        self.first + self.events.len() as u64
    }
}

/// Every flushed field, in flush order, with waiting watchers.
pub(super) struct EventLog {
    pub(super) inner: Mutex<LogInner>,
    pub(super) cond: Condvar,
}

impl EventLog {
    pub(super) fn append(&self, evs: impl IntoIterator<Item = Pending>) {
        let mut g = self.inner.lock().unwrap();
        for p in evs {
            g.events.push_back(Arc::new(Ev {
                key: p.key,
                length: p.length,
                crc: p.crc,
            }));
        }
        while g.events.len() > EVENT_LOG_CAPACITY {
            g.events.pop_front();
            g.first += 1;
        }
        drop(g);
        self.cond.notify_all();
    }
}

/// A field archived on a connection and not yet flushed.
pub(super) struct Pending {
    /// The key as it will be listed.
    pub(super) key: Key,
    pub(super) length: u64,
    pub(super) crc: u32,
}
