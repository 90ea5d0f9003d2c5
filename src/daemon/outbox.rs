//! A connection's outgoing frames on their way to its writer thread: three
//! bounded lanes under one lock, taken in priority order.
//!
//! What goes in which lane, and why, is the session's decision (see its
//! writer loop). This owns only the queueing: a full lane makes a blocking
//! sender wait for room and a non-blocking one fail; the writer waits for
//! the first frame of any lane, or until a deadline (its periodic
//! `STATUS`). Nobody spins: a waiting thread parks at once and is woken
//! only when it is waiting (see `crate::handoff` for what spinning cost).
//! Once the writer is gone, every send fails and what is queued is dropped,
//! which gives back the slots and backlog bytes the frames hold.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// A lane, highest priority first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    Priority = 0,
    Urgent = 1,
    Normal = 2,
}

/// What [`Outbox::next`] found.
#[derive(Debug)]
pub(crate) enum Next<T> {
    Item(T),
    /// The deadline passed with every lane empty.
    Timeout,
}

/// Three bounded lanes of `T`.
#[derive(Debug)]
pub(crate) struct Outbox<T> {
    state: Mutex<State<T>>,
    /// Signalled for the writer: a frame arrived.
    arrived: Condvar,
    /// Signalled for blocked senders: room was made, or the writer left.
    room: Condvar,
    capacity: usize,
}

#[derive(Debug)]
struct State<T> {
    lanes: [VecDeque<T>; 3],
    writer_gone: bool,
    writer_waiting: bool,
    senders_waiting: usize,
}

impl<T> Outbox<T> {
    /// Lanes of `capacity` frames each.
    pub(crate) fn new(capacity: usize) -> Outbox<T> {
        Outbox {
            state: Mutex::new(State {
                lanes: [VecDeque::new(), VecDeque::new(), VecDeque::new()],
                writer_gone: false,
                writer_waiting: false,
                senders_waiting: 0,
            }),
            arrived: Condvar::new(),
            room: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Only moves of frames happen under the lock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item`, waiting while `lane` is full; gives it back when the
    /// writer is gone.
    pub(crate) fn send(&self, lane: Lane, item: T) -> Result<(), T> {
        let mut state = self.lock();
        loop {
            if state.writer_gone {
                return Err(item);
            }
            if state.lanes[lane as usize].len() < self.capacity {
                break;
            }
            state.senders_waiting += 1;
            state = self
                .room
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.senders_waiting -= 1;
        }
        self.push(state, lane, item);
        Ok(())
    }

    /// Queues `item` without waiting for room, even beyond the lane's
    /// capacity: for an item that something else already bounds (a
    /// response holds its request's slot), sent from a thread that must
    /// not wait for the writer. Gives it back when the writer is gone.
    pub(crate) fn send_now(&self, lane: Lane, item: T) -> Result<(), T> {
        let state = self.lock();
        if state.writer_gone {
            return Err(item);
        }
        self.push(state, lane, item);
        Ok(())
    }

    /// Queues `item` unless `lane` is full or the writer is gone.
    pub(crate) fn try_send(&self, lane: Lane, item: T) -> Result<(), T> {
        let state = self.lock();
        if state.writer_gone || state.lanes[lane as usize].len() >= self.capacity {
            return Err(item);
        }
        self.push(state, lane, item);
        Ok(())
    }

    fn push(&self, mut state: MutexGuard<'_, State<T>>, lane: Lane, item: T) {
        state.lanes[lane as usize].push_back(item);
        let wake = state.writer_waiting;
        drop(state);
        if wake {
            self.arrived.notify_one();
        }
    }

    /// The writer's next frame, highest lane first, waiting until `until`
    /// at most.
    pub(crate) fn next(&self, until: Instant) -> Next<T> {
        let mut state = self.lock();
        loop {
            if let Some(item) = self.take(&mut state, &[Lane::Priority, Lane::Urgent, Lane::Normal])
            {
                return Next::Item(item);
            }
            let now = Instant::now();
            if now >= until {
                return Next::Timeout;
            }
            state.writer_waiting = true;
            state = self
                .arrived
                .wait_timeout(state, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            state.writer_waiting = false;
        }
    }

    /// The next frame of `lanes` (in that order) without waiting.
    pub(crate) fn try_next(&self, lanes: &[Lane]) -> Option<T> {
        let mut state = self.lock();
        self.take(&mut state, lanes)
    }

    fn take(&self, state: &mut State<T>, lanes: &[Lane]) -> Option<T> {
        let item = lanes
            .iter()
            .find_map(|lane| state.lanes[*lane as usize].pop_front())?;
        if state.senders_waiting > 0 {
            self.room.notify_all();
        }
        Some(item)
    }

    /// The writer is gone: sends fail from now on, blocked senders wake,
    /// and what is queued is dropped (outside the lock).
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.writer_gone = true;
        let queued = std::mem::take(&mut state.lanes);
        drop(state);
        self.room.notify_all();
        drop(queued);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn the_writer_takes_the_highest_lane_first() {
        let outbox = Outbox::new(4);
        outbox.send(Lane::Normal, "status").unwrap();
        outbox.send(Lane::Urgent, "command result").unwrap();
        outbox.send(Lane::Priority, "pong").unwrap();
        let far = Instant::now() + Duration::from_secs(5);
        let order: Vec<_> = (0..3)
            .map(|_| match outbox.next(far) {
                Next::Item(item) => item,
                Next::Timeout => panic!("a frame was queued"),
            })
            .collect();
        assert_eq!(order, ["pong", "command result", "status"]);
        assert!(matches!(outbox.next(Instant::now()), Next::Timeout));
    }

    #[test]
    fn a_full_lane_refuses_a_try_send_and_holds_a_send_until_there_is_room() {
        let outbox = Arc::new(Outbox::new(1));
        outbox.send(Lane::Normal, 1).unwrap();
        assert_eq!(outbox.try_send(Lane::Normal, 2), Err(2));
        // Another lane has its own room.
        outbox.try_send(Lane::Priority, 3).unwrap();
        let sender = Arc::clone(&outbox);
        let blocked = std::thread::spawn(move || sender.send(Lane::Normal, 4));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!blocked.is_finished());
        assert_eq!(outbox.try_next(&[Lane::Normal]), Some(1));
        blocked.join().unwrap().unwrap();
        assert_eq!(outbox.try_next(&[Lane::Normal]), Some(4));
    }

    #[test]
    fn send_now_queues_beyond_a_full_lane_until_the_writer_is_gone() {
        let outbox = Outbox::new(1);
        outbox.send(Lane::Normal, 1).unwrap();
        outbox.send_now(Lane::Normal, 2).unwrap();
        assert_eq!(outbox.try_next(&[Lane::Normal]), Some(1));
        assert_eq!(outbox.try_next(&[Lane::Normal]), Some(2));
        outbox.close();
        assert_eq!(outbox.send_now(Lane::Normal, 3), Err(3));
    }

    #[test]
    fn a_closed_outbox_wakes_blocked_senders_and_refuses_more() {
        let outbox = Arc::new(Outbox::new(1));
        outbox.send(Lane::Urgent, 1).unwrap();
        let sender = Arc::clone(&outbox);
        let blocked = std::thread::spawn(move || sender.send(Lane::Urgent, 2));
        std::thread::sleep(Duration::from_millis(50));
        outbox.close();
        assert_eq!(blocked.join().unwrap(), Err(2));
        assert_eq!(outbox.try_send(Lane::Priority, 3), Err(3));
        assert_eq!(outbox.try_next(&[Lane::Urgent]), None);
    }

    #[test]
    fn a_waiting_writer_wakes_for_a_frame() {
        let outbox = Arc::new(Outbox::new(2));
        let writer = Arc::clone(&outbox);
        let waiting = std::thread::spawn(move || {
            match writer.next(Instant::now() + Duration::from_secs(30)) {
                Next::Item(item) => Some(item),
                Next::Timeout => None,
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        outbox.send(Lane::Normal, 9).unwrap();
        assert_eq!(waiting.join().unwrap(), Some(9));
    }
}
