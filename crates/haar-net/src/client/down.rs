//! Servers this process could not reach, remembered for the life of the process so that later
//! requests fail at once (and a `dist` front-end goes straight to the next lane) instead of
//! waiting out a connect timeout each (design §7.1). A remembered server
//! is tried again after a back-off: [`Backoff::DEFAULT`], 1 s after the first failure, doubling
//! with each failure in a row up to 30 s; one answer forgets it.
//!
//! Policy ([`Backoff`], [`Unreachable`]: pure, given the time) is apart from the mechanism
//! ([`connect`]: the process's one registry around [`super::session::connect`]). Owns no
//! connection and no routing decision.

use std::collections::HashMap;
use std::io;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use haar_store::{Error, Result};

use super::ClientConfig;
use super::session::{self, Session};
use crate::protocol::RefusalCause;

/// How long a server that could not be reached is left alone before it is tried again: `first`
/// after one failure, doubled after each further failure in a row, never more than `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failure.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Backoff {
    /// 1 s doubling to 30 s: a server back after a restart is used again within a second or
    /// two of a short outage, and a dead one costs at most one connect timeout per 30 s.
    pub const DEFAULT: Backoff = Backoff {
        first: Duration::from_secs(1),
        max: Duration::from_secs(30),
    };

    /// The wait after `failures` (≥ 1) failures in a row.
    pub fn wait(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.first
            .checked_mul(1 << doublings)
            .map_or(self.max, |w| w.min(self.max))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::DEFAULT
    }
}

/// What is remembered of a server that could not be reached.
#[derive(Debug, Clone)]
pub(super) struct Unreachable {
    /// Failed attempts in a row.
    failures: u32,
    /// When the last one failed.
    at: Instant,
    /// Not tried again before this.
    until: Instant,
    /// Why it failed (the connect error's own text, which names no server).
    error: String,
}

impl Unreachable {
    /// After a failed attempt at `now`, following `before` (if it was remembered already).
    fn failed(before: Option<&Unreachable>, now: Instant, error: String, b: Backoff) -> Self {
        let failures = before.map_or(0, |u| u.failures) + 1;
        Unreachable {
            failures,
            at: now,
            until: now + b.wait(failures),
            error,
        }
    }

    /// The error for a request refused at `now` without an attempt, or `None` when the server
    /// is due to be tried again.
    fn refuse(&self, addr: &str, now: Instant) -> Option<Error> {
        if now >= self.until {
            return None;
        }
        Some(Error::net(
            "connect",
            addr,
            io::Error::other(format!(
                "{} (found unreachable {} time(s) in a row by this process, last {:.1} s ago; \
                 not tried again for {:.1} s)",
                self.error,
                self.failures,
                now.duration_since(self.at).as_secs_f64(),
                self.until.duration_since(now).as_secs_f64()
            )),
        ))
    }
}

/// Per server address: connection attempts made (counted for operations and tests), and what
/// is remembered while it is unreachable.
#[derive(Default)]
struct Entry {
    attempts: u64,
    down: Option<Unreachable>,
}

fn registry() -> MutexGuard<'static, HashMap<String, Entry>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Entry>>> = OnceLock::new();
    let m = REGISTRY.get_or_init(Default::default);
    // A panic while holding the lock leaves plain counters behind: still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Connects to `addr` as [`session::connect`] does, unless this process found it unreachable
/// and its back-off has not passed: then fails at once with the remembered error, naming the
/// server (an [`Error::Net`], so `dist` fails over on it). A failure to reach the server (any
/// [`Error::Net`]: connect, TLS or handshake I/O, timeouts) is remembered; any answer, a
/// refusal included, forgets it.
pub(super) fn connect(addr: &str, cfg: &ClientConfig) -> Result<Session> {
    {
        let mut reg = registry();
        let e = reg.entry(addr.to_string()).or_default();
        if let Some(err) = e.down.as_ref().and_then(|u| u.refuse(addr, Instant::now())) {
            return Err(err);
        }
        e.attempts += 1;
    }
    let (mut r, mut cause) = session::connect_why(addr, cfg);
    for pause in DROPPED_LOGIN_PAUSES {
        // Dropped before login for a newer connection from its source: someone else's
        // connections, not this client's token or the server's fullness, so trying again
        // soon is likely to pass. A server at its connection limit (`busy`) is not retried.
        if r.is_ok() || cause != Some(RefusalCause::PreloginDropped) {
            break;
        }
        std::thread::sleep(pause);
        registry().entry(addr.to_string()).or_default().attempts += 1;
        (r, cause) = session::connect_why(addr, cfg);
    }
    let mut reg = registry();
    let e = reg.entry(addr.to_string()).or_default();
    match &r {
        Err(Error::Net { source, .. }) => {
            e.down = Some(Unreachable::failed(
                e.down.as_ref(),
                Instant::now(),
                source.to_string(),
                cfg.unreachable_backoff,
            ));
        }
        _ => e.down = None,
    }
    r
}

/// Pauses before each new login after one the server dropped for a newer connection from
/// the same source address (design §8, "Hostile peers": users of one host share it).
const DROPPED_LOGIN_PAUSES: [Duration; 4] = [
    Duration::from_millis(10),
    Duration::from_millis(20),
    Duration::from_millis(40),
    Duration::from_millis(80),
];

/// `addr` answered on a connection opened elsewhere (a watch): it is reachable again.
pub(super) fn answered(addr: &str) {
    if let Some(e) = registry().get_mut(addr) {
        e.down = None;
    }
}

/// How many times this process has tried to connect to `addr` for requests (attempts skipped
/// during a back-off are not counted): how a test, or an operator, sees that a dead server is
/// not asked again for every field.
pub fn connect_attempts(addr: &str) -> u64 {
    registry().get(addr).map_or(0, |e| e.attempts)
}

/// Whether this process currently skips `addr` (found unreachable, back-off not yet passed).
pub fn is_remembered_down(addr: &str) -> bool {
    registry()
        .get(addr)
        .and_then(|e| e.down.as_ref())
        .is_some_and(|u| Instant::now() < u.until)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_first_to_max() {
        let b = Backoff::DEFAULT;
        let secs: Vec<u64> = (1..=8).map(|n| b.wait(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(b.wait(u32::MAX), b.max);
        let odd = Backoff {
            first: Duration::from_millis(300),
            max: Duration::from_secs(1),
        };
        assert_eq!(odd.wait(2), Duration::from_millis(600));
        assert_eq!(odd.wait(3), Duration::from_secs(1));
    }

    #[test]
    fn a_remembered_server_is_refused_until_its_back_off_passes() {
        let t0 = Instant::now();
        let b = Backoff::DEFAULT;
        let u = Unreachable::failed(None, t0, "Connection refused (os error 111)".into(), b);
        let e = u
            .refuse("n3:7070", t0 + Duration::from_millis(500))
            .expect("refused within the first second")
            .to_string();
        assert!(e.contains("n3:7070"), "{e}");
        assert!(e.contains("Connection refused"), "{e}");
        assert!(e.contains("1 time(s) in a row"), "{e}");
        assert!(u.refuse("n3:7070", t0 + Duration::from_secs(1)).is_none());
        // A second failure in a row waits twice as long.
        let t1 = t0 + Duration::from_secs(1);
        let u = Unreachable::failed(Some(&u), t1, "timed out".into(), b);
        assert!(
            u.refuse("n3:7070", t1 + Duration::from_millis(1999))
                .is_some()
        );
        assert!(u.refuse("n3:7070", t1 + Duration::from_secs(2)).is_none());
    }
}
