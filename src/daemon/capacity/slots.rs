//! The request slots of one connection: admission (PROTOCOL.md §5.2) and
//! the `P`/`F`/`Q` counters and `pending_capacity` of §9. Never waits: a
//! request that does not fit is refused at once.

use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{Overloaded, lock};
use crate::protocol::{Counters, Status};

/// The request slots of one connection: admission (PROTOCOL.md §5.2) and
/// the `P`/`F`/`Q` counters of §9.1.
///
/// Create one per connection after its handshake, sized to the effective
/// `max_concurrent`: a new connection starts from zero, and tickets still
/// alive from an old connection only ever touch the old instance (§11.4).
/// Cloning shares the same counters.
#[derive(Debug, Clone)]
pub struct RequestSlots {
    shared: Arc<Slots>,
}

#[derive(Debug)]
struct Slots {
    max_concurrent: u64,
    counters: Mutex<Counters>,
}

/// Capacity and edge information after a request released its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// `pending_capacity` for this request's terminal response (§9.1).
    pub pending_capacity: u64,
    /// The connection was saturated before this release: send a `STATUS`
    /// right after the response (§9.2). Ignored frames (§5.5) never send one.
    pub edge_status: bool,
    /// The counters after the release, for that `STATUS`.
    pub counters: Counters,
}

/// A `STATUS` payload and the `pending_capacity` it carries (§7.11, §9.1).
#[derive(Debug, Clone, PartialEq)]
pub struct StatusReport {
    /// The payload.
    pub status: Status,
    /// The envelope's `pending_capacity`.
    pub pending_capacity: u64,
}

impl RequestSlots {
    /// Slots for a connection whose effective `max_concurrent` is given.
    pub fn new(max_concurrent: NonZeroU64) -> RequestSlots {
        RequestSlots {
            shared: Arc::new(Slots {
                max_concurrent: max_concurrent.get(),
                counters: Mutex::new(Counters::default()),
            }),
        }
    }

    /// Admission (§5.1 step 5, §5.2): refused when `P ≥ max_concurrent`;
    /// otherwise the request is counted in `P` and, until it takes its slot,
    /// in `Q`. Nothing is queued beyond that bound.
    pub fn admit(&self) -> Result<Admitted, Overloaded> {
        let max_concurrent = self.shared.max_concurrent;
        let mut counters = lock(&self.shared.counters);
        if !counters.admits(max_concurrent) {
            return Err(Overloaded::Admission { max_concurrent });
        }
        counters.pending += 1;
        counters.queued += 1;
        Ok(Admitted {
            shared: Arc::clone(&self.shared),
            holds_slot: false,
            released: false,
        })
    }

    /// The current counters.
    pub fn counters(&self) -> Counters {
        *lock(&self.shared.counters)
    }

    /// `max(0, max_concurrent − max(P, F + Q))` now.
    pub fn pending_capacity(&self) -> u64 {
        self.counters().pending_capacity(self.shared.max_concurrent)
    }

    /// A `STATUS` as of `now` (periodic, every 30 s, or the edge one after
    /// a response). `uptime_seconds` counts from `connected_at`, the moment
    /// this WebSocket connection was established, and is never negative.
    pub fn status(
        &self,
        audit_log_bytes: u64,
        connected_at: Instant,
        now: Instant,
    ) -> StatusReport {
        let counters = self.counters();
        StatusReport {
            status: Status {
                in_flight: counters.in_flight,
                max_concurrent: self.shared.max_concurrent,
                queue_depth: counters.queued,
                audit_log_bytes,
                uptime_seconds: now.saturating_duration_since(connected_at).as_secs_f64(),
            },
            pending_capacity: counters.pending_capacity(self.shared.max_concurrent),
        }
    }
}

/// An admitted request: holds its place in `P` (and in `Q` or `F`) until
/// [`Admitted::finish`] or drop. Dropping it without finishing — a
/// cancelled or panicking handler — releases the same way, minus the reply.
#[derive(Debug)]
#[must_use = "an admitted request is released as soon as it is dropped"]
pub struct Admitted {
    shared: Arc<Slots>,
    holds_slot: bool,
    released: bool,
}

impl Admitted {
    /// Moves the request from waiting (`Q`) to holding a request slot (`F`).
    /// Idempotent.
    ///
    /// This never has to wait: admission keeps `P ≤ max_concurrent`, every
    /// admitted request holds at most one slot and this one holds none yet,
    /// so `F < max_concurrent` whenever it is called.
    pub fn take_slot(&mut self) {
        if self.holds_slot {
            return;
        }
        let mut counters = lock(&self.shared.counters);
        counters.queued = counters.queued.saturating_sub(1);
        counters.in_flight += 1;
        self.holds_slot = true;
    }

    /// The `pending_capacity` this request's response carries: the
    /// capacity once it has released its slot, which it does only when the
    /// response is handed to the socket (§9.1).
    pub fn capacity_after_release(&self) -> u64 {
        let mut counters = *lock(&self.shared.counters);
        self.remove_from(&mut counters);
        counters.pending_capacity(self.shared.max_concurrent)
    }

    /// Takes this request out of `counters`.
    fn remove_from(&self, counters: &mut Counters) {
        counters.pending = counters.pending.saturating_sub(1);
        if self.holds_slot {
            counters.in_flight = counters.in_flight.saturating_sub(1);
        } else {
            counters.queued = counters.queued.saturating_sub(1);
        }
    }

    /// Ends the request: decrements `P` and frees its slot, and reports the
    /// capacity to stamp on the response and whether an edge `STATUS` is due
    /// (saturation is judged before the release, §9.2).
    pub fn finish(mut self) -> Released {
        self.release()
    }

    /// Runs once: `finish` consumes the ticket and `drop` skips a released one.
    fn release(&mut self) -> Released {
        let max_concurrent = self.shared.max_concurrent;
        let mut counters = lock(&self.shared.counters);
        let edge_status = counters.is_saturated(max_concurrent);
        self.remove_from(&mut counters);
        self.released = true;
        Released {
            pending_capacity: counters.pending_capacity(max_concurrent),
            edge_status,
            counters: *counters,
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if !self.released {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn at(start: Instant, millis: u64) -> Instant {
        start + Duration::from_millis(millis)
    }

    fn n(value: u64) -> NonZeroU64 {
        NonZeroU64::new(value).expect("non-zero")
    }

    // --- request slots ---------------------------------------------------------

    #[test]
    fn admission_refusal_is_the_specified_shim_overloaded_payload() {
        let slots = RequestSlots::new(n(4));
        let held: Vec<_> = (0..4).map(|_| slots.admit().expect("admitted")).collect();
        let refused = slots.admit().expect_err("fifth");
        assert_eq!(refused, Overloaded::Admission { max_concurrent: 4 });
        assert_eq!(
            serde_json::to_value(refused.to_error()).expect("json"),
            json!({"code": "SHIM_OVERLOADED",
                   "message": "The local executor is at its concurrent request limit.",
                   "fatal": false, "details": {"max_concurrent": 4}})
        );
        assert_eq!(slots.pending_capacity(), 0);
        drop(held);
    }

    #[test]
    fn admission_refuses_at_the_limit_and_admits_again_after_a_release() {
        let slots = RequestSlots::new(n(2));
        let a = slots.admit().expect("a");
        let _b = slots.admit().expect("b");
        assert!(slots.admit().is_err());
        assert_eq!(slots.counters().pending, 2);
        let _ = a.finish();
        assert!(slots.admit().is_ok());
    }

    #[test]
    fn queued_and_running_requests_are_counted_separately() {
        let slots = RequestSlots::new(n(4));
        let mut running = slots.admit().expect("running");
        running.take_slot();
        running.take_slot();
        let _waiting = slots.admit().expect("waiting");
        assert_eq!(
            slots.counters(),
            Counters {
                pending: 2,
                in_flight: 1,
                queued: 1,
            }
        );
        assert_eq!(slots.pending_capacity(), 2);
    }

    #[test]
    fn capacity_after_release_matches_the_specification_example() {
        // §9.2: max 4, three other requests in flight, ours finishes →
        // response with pending_capacity 1, then STATUS {in_flight: 3, …}.
        let t0 = Instant::now();
        let slots = RequestSlots::new(n(4));
        let mut tickets: Vec<_> = (0..4).map(|_| slots.admit().expect("admitted")).collect();
        for ticket in &mut tickets {
            ticket.take_slot();
        }
        let ours = tickets.pop().expect("ours");
        assert_eq!(ours.capacity_after_release(), 1);
        let released = ours.finish();
        assert_eq!(released.pending_capacity, 1);
        assert!(released.edge_status);
        assert_eq!(
            released.counters,
            Counters {
                pending: 3,
                in_flight: 3,
                queued: 0,
            }
        );
        let report = slots.status(12345, t0, at(t0, 30_000));
        assert_eq!(
            report.status,
            Status {
                in_flight: 3,
                max_concurrent: 4,
                queue_depth: 0,
                audit_log_bytes: 12345,
                uptime_seconds: 30.0,
            }
        );
        assert_eq!(report.pending_capacity, 1);
    }

    #[test]
    fn release_from_an_unsaturated_connection_sends_no_edge_status() {
        let slots = RequestSlots::new(n(4));
        let mut a = slots.admit().expect("a");
        let _b = slots.admit().expect("b");
        a.take_slot();
        let released = a.finish();
        assert!(!released.edge_status);
        assert_eq!(released.pending_capacity, 3);
        // Saturated by admissions alone (P = max, nobody running yet).
        let full = RequestSlots::new(n(1));
        let only = full.admit().expect("only");
        assert!(only.finish().edge_status);
    }

    #[test]
    fn dropping_an_admitted_request_releases_it() {
        let slots = RequestSlots::new(n(1));
        let mut ticket = slots.admit().expect("admitted");
        ticket.take_slot();
        drop(ticket);
        assert_eq!(slots.counters(), Counters::default());
        let queued = slots.admit().expect("admitted");
        drop(queued);
        assert_eq!(slots.counters(), Counters::default());
        assert_eq!(slots.pending_capacity(), 1);
    }

    #[test]
    fn status_uptime_is_never_negative() {
        let t0 = Instant::now();
        let slots = RequestSlots::new(n(4));
        let report = slots.status(0, at(t0, 5_000), t0);
        assert_eq!(report.status.uptime_seconds, 0.0);
        assert_eq!(report.pending_capacity, 4);
    }
}
