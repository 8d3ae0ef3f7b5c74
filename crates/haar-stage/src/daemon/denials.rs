//! Which denied requests the stage service logs (issue 27): the first of each (uid, cause),
//! then at most one summary line per (uid, cause) and period with how many more there were,
//! so that a user hammering a denied request cannot flood the log. Pure bookkeeping over
//! instants the caller gives; the caller writes the lines.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// At most this many (uid, cause) pairs are tracked at once; beyond it a new cause is counted
/// under its uid's [`OTHER_CAUSES`] (a user whose denials name ever new paths cannot grow the
/// table or the log without bound).
const MAX_TRACKED: usize = 1024;
/// At most this many causes per uid; beyond it, [`OTHER_CAUSES`].
const MAX_PER_UID: usize = 16;
/// The cause a denial is counted under once its uid (or the table) has no room for its own.
pub(super) const OTHER_CAUSES: &str = "(other causes: the first of each was logged, or this uid \
     had too many distinct ones to track)";

/// What to log for one denial, or for a period's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Line {
    /// The first denial of its (uid, cause) in a period: log it whole.
    First,
    /// `count` more denials of `cause` for `uid` since its last line, `over` ago.
    Again {
        uid: u32,
        cause: String,
        count: u64,
        over: Duration,
    },
}

#[derive(Debug)]
struct Seen {
    /// When its last line was written.
    logged: Instant,
    /// Denials since that line, not logged.
    quiet: u64,
}

/// The denials seen and not yet summarised.
#[derive(Debug)]
pub(super) struct Denials {
    every: Duration,
    seen: HashMap<(u32, String), Seen>,
    next_sweep: Option<Instant>,
}

impl Denials {
    /// Summaries of a (uid, cause) at most once per `every`.
    pub(super) fn new(every: Duration) -> Denials {
        Denials {
            every,
            seen: HashMap::new(),
            next_sweep: None,
        }
    }

    /// A request of `uid` denied for `cause` at `now`: what to log, if anything.
    pub(super) fn note(&mut self, uid: u32, cause: &str, now: Instant) -> Option<Line> {
        let key = self.key(uid, cause);
        self.next_sweep.get_or_insert(now + self.every);
        match self.seen.get_mut(&key) {
            None => {
                let first = key.1 != OTHER_CAUSES;
                let quiet = u64::from(!first);
                self.seen.insert(key, Seen { logged: now, quiet });
                first.then_some(Line::First)
            }
            Some(s) if now.duration_since(s.logged) < self.every => {
                s.quiet += 1;
                None
            }
            Some(s) => {
                let line = Line::Again {
                    uid,
                    cause: key.1.clone(),
                    count: s.quiet + 1,
                    over: now.duration_since(s.logged),
                };
                *s = Seen {
                    logged: now,
                    quiet: 0,
                };
                Some(line)
            }
        }
    }

    /// The summaries due at `now` (for pairs that went quiet since their period began), and
    /// forgets pairs with nothing to say. Cheap when called on every request: it looks only
    /// once a period.
    pub(super) fn due(&mut self, now: Instant) -> Vec<Line> {
        match self.next_sweep {
            Some(t) if now >= t => {}
            _ => return Vec::new(),
        }
        let every = self.every;
        let mut out = Vec::new();
        self.seen.retain(|(uid, cause), s| {
            let over = now.duration_since(s.logged);
            if over < every {
                return true;
            }
            if s.quiet == 0 {
                return false;
            }
            out.push(Line::Again {
                uid: *uid,
                cause: cause.clone(),
                count: s.quiet,
                over,
            });
            *s = Seen {
                logged: now,
                quiet: 0,
            };
            true
        });
        self.next_sweep = (!self.seen.is_empty()).then(|| now + every);
        out
    }

    /// The key `cause` is counted under: its own while there is room.
    fn key(&self, uid: u32, cause: &str) -> (u32, String) {
        let own = (uid, cause.to_string());
        if self.seen.contains_key(&own) {
            return own;
        }
        let of_uid = self.seen.keys().filter(|(u, _)| *u == uid).count();
        if self.seen.len() >= MAX_TRACKED || of_uid >= MAX_PER_UID {
            return (uid, OTHER_CAUSES.to_string());
        }
        own
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_of_each_uid_and_cause_is_logged_then_one_count_per_period() {
        let t0 = Instant::now();
        let mut d = Denials::new(10 * S);
        assert_eq!(d.note(1000, "draining", t0), Some(Line::First));
        assert_eq!(d.note(1001, "draining", t0), Some(Line::First));
        assert_eq!(d.note(1000, "admin only", t0), Some(Line::First));
        for i in 0..500u32 {
            assert_eq!(d.note(1000, "draining", t0 + S * i / 100), None);
        }
        assert!(d.due(t0 + 9 * S).is_empty());
        // The next denial after the period carries the count.
        assert_eq!(
            d.note(1000, "draining", t0 + 11 * S),
            Some(Line::Again {
                uid: 1000,
                cause: "draining".into(),
                count: 501,
                over: 11 * S
            })
        );
        // A user who went quiet after hammering is summarised by the sweep, once.
        for _ in 0..7 {
            assert_eq!(d.note(1000, "draining", t0 + 12 * S), None);
        }
        let due = d.due(t0 + 22 * S);
        assert_eq!(
            due,
            vec![Line::Again {
                uid: 1000,
                cause: "draining".into(),
                count: 7,
                over: 11 * S
            }]
        );
        assert!(d.due(t0 + 23 * S).is_empty());
        // Quiet pairs are forgotten: their next denial is a first again.
        assert!(d.due(t0 + 40 * S).is_empty());
        assert!(d.seen.is_empty());
        assert_eq!(d.note(1000, "draining", t0 + 41 * S), Some(Line::First));
    }

    #[test]
    fn a_uid_with_ever_new_causes_is_bounded() {
        let t0 = Instant::now();
        let mut d = Denials::new(10 * S);
        let firsts = (0..1000)
            .filter(|i| d.note(7, &format!("path /x/{i}"), t0).is_some())
            .count();
        assert_eq!(firsts, MAX_PER_UID);
        assert_eq!(d.seen.len(), MAX_PER_UID + 1);
        let due = d.due(t0 + 10 * S);
        let other: Vec<_> = due
            .iter()
            .filter(|l| matches!(l, Line::Again { cause, .. } if cause == OTHER_CAUSES))
            .collect();
        assert_eq!(
            other,
            vec![&Line::Again {
                uid: 7,
                cause: OTHER_CAUSES.into(),
                count: 1000 - MAX_PER_UID as u64,
                over: 10 * S
            }]
        );
        // Another uid still gets its own first line.
        assert_eq!(d.note(8, "path /x/1", t0), Some(Line::First));
    }
}
