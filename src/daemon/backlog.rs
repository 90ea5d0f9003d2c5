//! How many bytes of responses may wait to be sent: per connection, and for
//! all child runtimes together.
//!
//! A platform that reads its socket slowly while it keeps sending requests
//! would otherwise make the daemon hold every response it produced. Each
//! encoded frame is counted here from the moment it exists until the writer
//! has handed it to the socket; while a connection's count (or the machine's)
//! is at its limit the connection admits no further work. A response that
//! already exists is always counted, even past the limit, so the count is
//! the truth about memory; only new work is refused.
//!
//! Bookkeeping only: atomic counters and a guard released on drop. This
//! module never blocks, never refuses a frame by itself, and never touches
//! the frames it counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::protocol::MAX_WEBSOCKET_MESSAGE_BYTES;

/// The largest frame, in the unit of the counters.
const MAX_FRAME: u64 = MAX_WEBSOCKET_MESSAGE_BYTES as u64;

/// Bytes of responses one connection may have waiting before it stops
/// admitting work: one of the largest frames. Requests already running when
/// the limit is reached still send their responses, so against a platform
/// that does not read, one response is being written and about one more
/// waits behind it.
pub const CONNECTION_BACKLOG_BYTES: u64 = MAX_FRAME;

/// Bytes of responses all child runtimes together may have waiting before
/// every child stops admitting work: one of the largest frames for each of
/// the eight children that may run at once.
pub const MACHINE_BACKLOG_BYTES: u64 = 8 * MAX_FRAME;

/// What the small frames the reader makes on its own (a `PONG`, a refusal,
/// an `ERROR` for an invalid request, a `STATUS`) may have waiting on one
/// connection, whatever the responses use. They count towards the limits
/// as well; when this is used up the platform has not read for a long
/// time: a `STATUS` is dropped, and an answer ends the connection.
pub const REPLY_HEADROOM_BYTES: u64 = 1024 * 1024;

/// One byte counter with its limit; clones share the counter.
#[derive(Debug, Clone)]
pub struct ByteBudget {
    shared: Arc<Counter>,
}

#[derive(Debug)]
struct Counter {
    limit: u64,
    used: AtomicU64,
}

impl ByteBudget {
    /// A budget of `limit` bytes, none used.
    pub fn new(limit: u64) -> ByteBudget {
        ByteBudget {
            shared: Arc::new(Counter {
                limit,
                used: AtomicU64::new(0),
            }),
        }
    }

    /// Bytes counted now.
    pub fn used(&self) -> u64 {
        self.shared.used.load(Ordering::SeqCst)
    }

    /// Whether the count has reached the limit.
    pub fn is_full(&self) -> bool {
        self.used() >= self.shared.limit
    }

    fn add(&self, bytes: u64) {
        self.shared.used.fetch_add(bytes, Ordering::SeqCst);
    }

    /// Adds `bytes` unless that would pass the limit.
    fn try_add(&self, bytes: u64) -> bool {
        let limit = self.shared.limit;
        self.shared
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(bytes).filter(|&after| after <= limit)
            })
            .is_ok()
    }

    fn sub(&self, bytes: u64) {
        // Every subtraction undoes an addition made by the same guard, so
        // the counter cannot go below zero; saturating all the same.
        let _ = self
            .shared
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

/// The budgets one connection's outbound frames count against: its own,
/// and for a child runtime the one all children share; the reader's own
/// small frames also against a cap of their own.
#[derive(Debug, Clone)]
pub struct Backlog {
    connection: ByteBudget,
    machine: Option<ByteBudget>,
    replies: ByteBudget,
}

impl Backlog {
    /// A fresh connection budget of [`CONNECTION_BACKLOG_BYTES`], counted
    /// against `machine` too when given.
    pub fn new(machine: Option<ByteBudget>) -> Backlog {
        Backlog {
            connection: ByteBudget::new(CONNECTION_BACKLOG_BYTES),
            machine,
            replies: ByteBudget::new(REPLY_HEADROOM_BYTES),
        }
    }

    /// Whether new work must be refused: the connection's count or the
    /// machine's has reached its limit.
    pub fn is_full(&self) -> bool {
        self.connection.is_full() || self.machine.as_ref().is_some_and(ByteBudget::is_full)
    }

    /// Bytes this connection has waiting.
    pub fn used(&self) -> u64 {
        self.connection.used()
    }

    /// Counts a frame that already exists (a worker's response), whatever
    /// the limits say.
    pub fn hold(&self, bytes: usize) -> Held {
        self.count(bytes as u64, false)
    }

    /// Counts a small frame the reader makes on its own if the replies
    /// waiting leave room for it within [`REPLY_HEADROOM_BYTES`], however
    /// full the limits are; `None`: no room for the frame.
    pub fn try_hold_reply(&self, bytes: usize) -> Option<Held> {
        let bytes = bytes as u64;
        self.replies.try_add(bytes).then(|| self.count(bytes, true))
    }

    fn count(&self, bytes: u64, reply: bool) -> Held {
        self.connection.add(bytes);
        if let Some(machine) = &self.machine {
            machine.add(bytes);
        }
        Held {
            backlog: self.clone(),
            bytes,
            reply,
        }
    }
}

/// One frame's bytes, counted until this is dropped (after the writer has
/// handed the frame to the socket, or when the frame is discarded).
#[derive(Debug)]
#[must_use = "the bytes stop being counted as soon as this is dropped"]
pub struct Held {
    backlog: Backlog,
    bytes: u64,
    /// Counted against the replies' cap too.
    reply: bool,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.backlog.connection.sub(self.bytes);
        if let Some(machine) = &self.backlog.machine {
            machine.sub(self.bytes);
        }
        if self.reply {
            self.backlog.replies.sub(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_frame_counts_until_dropped_even_past_the_limit() {
        let backlog = Backlog::new(None);
        let half = MAX_WEBSOCKET_MESSAGE_BYTES / 2;
        let first = backlog.hold(half);
        assert!(!backlog.is_full());
        let second = backlog.hold(half);
        assert!(backlog.is_full());
        let third = backlog.hold(MAX_WEBSOCKET_MESSAGE_BYTES);
        assert_eq!(backlog.used(), CONNECTION_BACKLOG_BYTES + MAX_FRAME);
        drop((first, third));
        assert!(!backlog.is_full());
        drop(second);
        assert_eq!(backlog.used(), 0);
    }

    #[test]
    fn replies_have_their_own_headroom_however_far_past_the_limit_responses_are() {
        let backlog = Backlog::new(None);
        let past = backlog.hold(3 * CONNECTION_BACKLOG_BYTES as usize);
        let headroom = REPLY_HEADROOM_BYTES as usize;
        let reply = backlog
            .try_hold_reply(headroom)
            .expect("within the headroom");
        assert_eq!(
            backlog.used(),
            3 * CONNECTION_BACKLOG_BYTES + REPLY_HEADROOM_BYTES
        );
        assert!(backlog.try_hold_reply(1).is_none());
        drop(reply);
        assert!(backlog.try_hold_reply(1).is_some());
        drop(past);
        assert_eq!(backlog.used(), 0);
    }

    #[test]
    fn the_machine_budget_covers_every_connection_that_shares_it() {
        let third = MAX_WEBSOCKET_MESSAGE_BYTES / 3;
        let machine = ByteBudget::new(MAX_FRAME);
        let a = Backlog::new(Some(machine.clone()));
        let b = Backlog::new(Some(machine.clone()));
        let a1 = a.hold(third);
        let b1 = b.hold(third);
        assert!(!a.is_full() && !b.is_full());
        let b2 = b.hold(third + 1);
        // Neither connection is full on its own: the machine is.
        assert!(b.is_full());
        assert!(a.is_full());
        assert_eq!(a.used(), third as u64);
        drop(b2);
        assert!(!a.is_full());
        drop((a1, b1));
        assert_eq!(machine.used(), 0);
    }
}
