//! The WebSocket-level keepalive (PROTOCOL.md §1.5): a ping every 20 s,
//! and the connection fails when, 10 s later, neither its pong nor any
//! other sign of life has come. A sign of life (anything arriving from the
//! platform, or our own bytes still draining ahead of the ping) starts the
//! 10 s over: a slow link busy with a large frame is not a dead one.
//!
//! A sans-IO state machine: the caller passes the current [`Instant`] and
//! sends the pings it is told to, and reports the pongs it reads and the
//! signs of life it sees. It never
//! reads a clock, sleeps or touches a socket itself, so it is tested without
//! waiting. The application-level `PING`/`PONG` frames are not its concern.

use std::time::{Duration, Instant};

/// Time from one ping to the next.
pub const PING_INTERVAL: Duration = Duration::from_secs(20);
/// How long the pong to a ping may take.
pub const PONG_TIMEOUT: Duration = Duration::from_secs(10);

/// What the caller does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepaliveAction {
    /// Nothing until this instant (call [`Keepalive::poll`] again then, or
    /// earlier).
    Wait(Instant),
    /// Send a WebSocket ping with this payload now.
    Ping([u8; 8]),
    /// The pong is overdue: fail the connection (a transient disconnect,
    /// [`TransportError::KeepaliveTimeout`](super::TransportError::KeepaliveTimeout)).
    Expired,
}

/// The keepalive of one connection.
#[derive(Debug, Clone)]
pub struct Keepalive {
    interval: Duration,
    timeout: Duration,
    next_ping: Instant,
    /// The payload of the ping whose pong is awaited, and since when
    /// nothing has shown the connection alive.
    outstanding: Option<([u8; 8], Instant)>,
    sequence: u64,
    expired: bool,
}

impl Keepalive {
    /// A keepalive for a connection opened at `now`, with the protocol's
    /// timing: first ping at `now + 20 s`.
    pub fn new(now: Instant) -> Keepalive {
        Keepalive::with_timing(now, PING_INTERVAL, PONG_TIMEOUT)
    }

    /// The same with other timing. While a ping awaits its pong no other
    /// ping is sent, whatever `interval` is.
    pub fn with_timing(now: Instant, interval: Duration, timeout: Duration) -> Keepalive {
        Keepalive {
            interval,
            timeout,
            next_ping: now + interval,
            outstanding: None,
            sequence: 0,
            expired: false,
        }
    }

    /// What to do at `now`. Once [`KeepaliveAction::Expired`] is returned,
    /// it is returned for good.
    pub fn poll(&mut self, now: Instant) -> KeepaliveAction {
        if self.expired {
            return KeepaliveAction::Expired;
        }
        if let Some((_, quiet_since)) = self.outstanding {
            let deadline = quiet_since + self.timeout;
            if now >= deadline {
                self.expired = true;
                return KeepaliveAction::Expired;
            }
            return KeepaliveAction::Wait(deadline);
        }
        if now >= self.next_ping {
            self.sequence += 1;
            let payload = self.sequence.to_be_bytes();
            self.outstanding = Some((payload, now));
            self.next_ping = now + self.interval;
            return KeepaliveAction::Ping(payload);
        }
        KeepaliveAction::Wait(self.next_ping)
    }

    /// The connection showed life at `now` (bytes arrived, or ours ahead of
    /// the ping moved on): the wait for the pong starts over. The ping
    /// schedule does not move.
    pub fn on_progress(&mut self, now: Instant) {
        if self.expired {
            return;
        }
        if let Some((_, quiet_since)) = &mut self.outstanding {
            *quiet_since = (*quiet_since).max(now);
        }
    }

    /// A pong arrived with `payload`. Returns whether it answered the
    /// outstanding ping; other pongs (unsolicited, or late answers to an
    /// older ping) change nothing.
    pub fn on_pong(&mut self, payload: &[u8]) -> bool {
        match self.outstanding {
            Some((expected, _)) if !self.expired && payload == expected => {
                self.outstanding = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_first_ping_is_due_twenty_seconds_after_opening() {
        let t0 = Instant::now();
        let mut keepalive = Keepalive::new(t0);
        assert_eq!(keepalive.poll(t0), KeepaliveAction::Wait(t0 + secs(20)));
        assert_eq!(
            keepalive.poll(t0 + secs(19)),
            KeepaliveAction::Wait(t0 + secs(20))
        );
        assert!(matches!(
            keepalive.poll(t0 + secs(20)),
            KeepaliveAction::Ping(_)
        ));
    }

    #[test]
    fn a_timely_pong_keeps_the_connection_and_schedules_the_next_ping() {
        let t0 = Instant::now();
        let mut keepalive = Keepalive::new(t0);
        let KeepaliveAction::Ping(payload) = keepalive.poll(t0 + secs(20)) else {
            panic!("no ping");
        };
        assert_eq!(
            keepalive.poll(t0 + secs(25)),
            KeepaliveAction::Wait(t0 + secs(30))
        );
        assert!(keepalive.on_pong(&payload));
        assert_eq!(
            keepalive.poll(t0 + secs(31)),
            KeepaliveAction::Wait(t0 + secs(40))
        );
        let KeepaliveAction::Ping(second) = keepalive.poll(t0 + secs(40)) else {
            panic!("no second ping");
        };
        assert_ne!(second, payload);
    }

    #[test]
    fn a_missing_pong_expires_the_connection_after_ten_seconds_for_good() {
        let t0 = Instant::now();
        let mut keepalive = Keepalive::new(t0);
        let KeepaliveAction::Ping(payload) = keepalive.poll(t0 + secs(20)) else {
            panic!("no ping");
        };
        assert_eq!(
            keepalive.poll(t0 + secs(29)),
            KeepaliveAction::Wait(t0 + secs(30))
        );
        assert_eq!(keepalive.poll(t0 + secs(30)), KeepaliveAction::Expired);
        assert!(!keepalive.on_pong(&payload));
        assert_eq!(keepalive.poll(t0 + secs(31)), KeepaliveAction::Expired);
    }

    #[test]
    fn unsolicited_or_mismatched_pongs_do_not_count() {
        let t0 = Instant::now();
        let mut keepalive = Keepalive::new(t0);
        assert!(!keepalive.on_pong(b"anything"));
        let KeepaliveAction::Ping(payload) = keepalive.poll(t0 + secs(20)) else {
            panic!("no ping");
        };
        assert!(!keepalive.on_pong(b"other"));
        assert_eq!(keepalive.poll(t0 + secs(30)), KeepaliveAction::Expired);
        let _ = payload;
    }

    #[test]
    fn progress_while_the_pong_is_awaited_starts_the_wait_over() {
        let t0 = Instant::now();
        let mut keepalive = Keepalive::new(t0);
        let KeepaliveAction::Ping(payload) = keepalive.poll(t0 + secs(20)) else {
            panic!("no ping");
        };
        keepalive.on_progress(t0 + secs(28));
        assert_eq!(
            keepalive.poll(t0 + secs(30)),
            KeepaliveAction::Wait(t0 + secs(38))
        );
        keepalive.on_progress(t0 + secs(37));
        assert_eq!(
            keepalive.poll(t0 + secs(46)),
            KeepaliveAction::Wait(t0 + secs(47))
        );
        assert!(keepalive.on_pong(&payload));
        // The schedule kept its pace: the next ping was due at 40 s.
        assert!(matches!(
            keepalive.poll(t0 + secs(46)),
            KeepaliveAction::Ping(_)
        ));
    }

    #[test]
    fn progress_that_stops_expires_the_connection_ten_seconds_later() {
        let t0 = Instant::now();
        let mut keepalive = Keepalive::new(t0);
        assert!(matches!(
            keepalive.poll(t0 + secs(20)),
            KeepaliveAction::Ping(_)
        ));
        keepalive.on_progress(t0 + secs(25));
        assert_eq!(
            keepalive.poll(t0 + secs(34)),
            KeepaliveAction::Wait(t0 + secs(35))
        );
        assert_eq!(keepalive.poll(t0 + secs(35)), KeepaliveAction::Expired);
        keepalive.on_progress(t0 + secs(36));
        assert_eq!(keepalive.poll(t0 + secs(36)), KeepaliveAction::Expired);
    }

    #[test]
    fn progress_with_no_ping_outstanding_changes_nothing() {
        let t0 = Instant::now();
        let mut keepalive = Keepalive::new(t0);
        keepalive.on_progress(t0 + secs(5));
        assert_eq!(
            keepalive.poll(t0 + secs(6)),
            KeepaliveAction::Wait(t0 + secs(20))
        );
        assert!(matches!(
            keepalive.poll(t0 + secs(20)),
            KeepaliveAction::Ping(_)
        ));
        // Earlier than the ping: not a sign of life after it.
        keepalive.on_progress(t0 + secs(19));
        assert_eq!(keepalive.poll(t0 + secs(30)), KeepaliveAction::Expired);
    }

    #[test]
    fn a_late_poll_sends_the_ping_then_and_times_the_pong_from_then() {
        let t0 = Instant::now();
        let mut keepalive = Keepalive::new(t0);
        let late = t0 + secs(50);
        assert!(matches!(keepalive.poll(late), KeepaliveAction::Ping(_)));
        assert_eq!(
            keepalive.poll(late + secs(1)),
            KeepaliveAction::Wait(late + secs(10))
        );
    }
}
