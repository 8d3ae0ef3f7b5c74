//! The retry policy of the remote client, apart from the mechanism that sends requests: a
//! request is sent again only when doing so cannot duplicate or lose anything.

use crate::protocol::Kind;

/// What is known about a request that failed on a connection.
pub(super) struct Failed {
    /// Which attempt failed (0 = the first).
    pub attempt: u32,
    /// The connection had served requests before (it may have died while idle).
    pub reused: bool,
    /// Any reply frame arrived before the failure.
    pub replied: bool,
    /// Fields archived on the connection and not yet flushed.
    pub unflushed: u64,
}

/// Whether `kind` may be sent again on a new connection after `f`: only once, only on a
/// connection that was idle (so the server never saw the request), only when nothing
/// unflushed was lost with it, and never for requests that change the store (FLUSH, WIPE,
/// PURGE), whose effect on the server is unknown.
pub(super) fn may_retry(kind: Kind, f: &Failed) -> bool {
    f.attempt == 0
        && f.reused
        && !f.replied
        && f.unflushed == 0
        && !matches!(kind, Kind::Flush | Kind::Wipe | Kind::Purge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_idle_read_requests_are_sent_twice() {
        let idle = Failed {
            attempt: 0,
            reused: true,
            replied: false,
            unflushed: 0,
        };
        assert!(may_retry(Kind::Retrieve, &idle));
        assert!(may_retry(Kind::RetrieveKeys, &idle));
        assert!(may_retry(Kind::Problems, &idle));
        assert!(!may_retry(Kind::Flush, &idle));
        assert!(!may_retry(Kind::Wipe, &idle));
        assert!(!may_retry(Kind::Retrieve, &Failed { attempt: 1, ..idle }));
        assert!(!may_retry(
            Kind::Retrieve,
            &Failed {
                replied: true,
                ..idle
            }
        ));
        assert!(!may_retry(
            Kind::Retrieve,
            &Failed {
                reused: false,
                ..idle
            }
        ));
        assert!(!may_retry(
            Kind::List,
            &Failed {
                unflushed: 3,
                ..idle
            }
        ));
    }
}
