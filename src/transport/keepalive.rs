//! The WebSocket-level keepalive (PROTOCOL.md §1.5): a ping every 20 s,
//! and the connection fails when its pong has not arrived 10 s later.
//!
//! A sans-IO state machine: the caller passes the current [`Instant`] and
//! sends the pings it is told to, and reports the pongs it reads. It never
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
    /// The payload and send time of the ping whose pong is awaited.
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
        if let Some((_, sent)) = self.outstanding {
            let deadline = sent + self.timeout;
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
