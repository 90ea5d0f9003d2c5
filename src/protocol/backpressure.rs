//! Backpressure arithmetic and reconnection delays (PROTOCOL.md §9, §11.1).
//!
//! Pure functions: the counters, limits and random samples are the caller's.

use std::time::Duration;

/// The per-connection request counters of PROTOCOL.md §9.1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// `P`: admitted requests that have not finished (queued or executing).
    pub pending: u64,
    /// `F`: requests holding a request slot.
    pub in_flight: u64,
    /// `Q`: admitted requests waiting for a slot.
    pub queued: u64,
}

impl Counters {
    /// `max(0, max_concurrent − max(P, F + Q))`.
    pub fn pending_capacity(&self, max_concurrent: u64) -> u64 {
        let used = self.pending.max(self.in_flight.saturating_add(self.queued));
        max_concurrent.saturating_sub(used)
    }

    /// Admission refuses a new request when `P ≥ max_concurrent` (§5.2).
    pub fn admits(&self, max_concurrent: u64) -> bool {
        self.pending < max_concurrent
    }

    /// The connection is saturated (`P ≥ max` or `F = max`): a finishing
    /// request is then followed by an edge `STATUS` (§9.2).
    pub fn is_saturated(&self, max_concurrent: u64) -> bool {
        self.pending >= max_concurrent || self.in_flight == max_concurrent
    }
}

/// The shortest reconnection delay, in seconds: with it a platform that
/// drops every connection at once gets at most 20 reconnects (and their
/// audit records) a second. The configuration refuses anything shorter.
pub const MIN_RECONNECT_SECONDS: f64 = 0.05;

/// Reconnection delay settings (config `reconnect_*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Base delay in seconds (default 1.0).
    pub base: f64,
    /// Cap of the exponential part in seconds (default 60.0).
    pub max_delay: f64,
    /// Upper bound of the uniform jitter in seconds (default 5.0).
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: 1.0,
            max_delay: 60.0,
            jitter: 5.0,
        }
    }
}

impl Backoff {
    /// `min(base × 2^attempt, max_delay) + jitter × unit`, where `unit` is a
    /// uniform sample from `[0, 1)` supplied by the caller; never less than
    /// [`MIN_RECONNECT_SECONDS`], whatever the settings.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let exponential = self.base * 2f64.powi(attempt.min(1024) as i32);
        let capped = exponential.min(self.max_delay).max(MIN_RECONNECT_SECONDS);
        let jitter = self.jitter.max(0.0) * unit.clamp(0.0, 1.0);
        Duration::try_from_secs_f64(capped + jitter).unwrap_or(Duration::from_secs(3600))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_follows_the_spec_example() {
        // max 4, three others in flight, ours finished and released its slot.
        let c = Counters {
            pending: 3,
            in_flight: 3,
            queued: 0,
        };
        assert_eq!(c.pending_capacity(4), 1);
        // Before release the connection was saturated.
        let before = Counters {
            pending: 4,
            in_flight: 4,
            queued: 0,
        };
        assert!(before.is_saturated(4));
        assert_eq!(before.pending_capacity(4), 0);
    }

    #[test]
    fn capacity_uses_the_larger_of_pending_and_in_flight_plus_queued() {
        let c = Counters {
            pending: 1,
            in_flight: 2,
            queued: 1,
        };
        assert_eq!(c.pending_capacity(10), 7);
        let over = Counters {
            pending: 12,
            in_flight: 0,
            queued: 0,
        };
        assert_eq!(over.pending_capacity(10), 0);
        assert!(!over.admits(10));
        assert!(Counters::default().admits(1));
    }

    #[test]
    fn backoff_doubles_then_caps_and_adds_bounded_jitter() {
        let b = Backoff::default();
        assert_eq!(b.delay(0, 0.0), Duration::from_secs(1));
        assert_eq!(b.delay(3, 0.0), Duration::from_secs(8));
        assert_eq!(b.delay(6, 0.0), Duration::from_secs(60));
        assert_eq!(b.delay(u32::MAX, 0.0), Duration::from_secs(60));
        assert_eq!(b.delay(0, 0.5), Duration::from_secs_f64(3.5));
        assert!(b.delay(10, 0.999_999) < Duration::from_secs(65));
    }
}
