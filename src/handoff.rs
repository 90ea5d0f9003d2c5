//! Hand-offs on a request's path between the daemon's threads: a one-shot
//! slot for one result ([`oneshot`]) and an unbounded first-in, first-out
//! queue with any number of senders and receivers ([`queue`]).
//!
//! Both park a waiting thread at once. A blocking receive of
//! crossbeam-channel first spins and then gives up the CPU several times
//! before it parks; on the path every request takes (reader → worker →
//! audit writer → worker) that came to four spinning waits per request,
//! most of them ending in a context switch, which is what made the shim's
//! CPU time per `FILE_STAT` several times the work it does (see
//! `benches/README.md`). A sender wakes one waiter, and only when one is
//! waiting, so a busy receiver costs its senders no system call.
//!
//! Neither ever runs caller code while it holds its lock, and neither
//! bounds its contents: callers admit work before they hand it over (the
//! request slots, the backlog), so these hold only what was admitted.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The lock only guards moves of values in and out; a panic elsewhere
    // cannot leave that half done.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

struct State<T> {
    items: VecDeque<T>,
    senders: usize,
    receivers: usize,
    /// Receivers parked in [`Receiver::recv`].
    waiting: usize,
}

/// Creates a queue.
pub fn queue<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            senders: 1,
            receivers: 1,
            waiting: 0,
        }),
        ready: Condvar::new(),
    });
    (
        Sender {
            shared: Arc::clone(&shared),
        },
        Receiver { shared },
    )
}

/// The sending half of a [`queue`]; clone it for more senders.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Sender<T> {
    /// Appends `item`; gives it back when no receiver is left.
    pub fn send(&self, item: T) -> Result<(), T> {
        let mut state = lock(&self.shared.state);
        if state.receivers == 0 {
            return Err(item);
        }
        state.items.push_back(item);
        let wake = state.waiting > 0;
        drop(state);
        if wake {
            self.shared.ready.notify_one();
        }
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        lock(&self.shared.state).senders += 1;
        Sender {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.shared.state);
        state.senders -= 1;
        let last = state.senders == 0;
        drop(state);
        if last {
            // Every parked receiver must see the end.
            self.shared.ready.notify_all();
        }
    }
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sender { .. }")
    }
}

/// The receiving half of a [`queue`]; clone it for more receivers, each
/// item goes to one of them.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Receiver<T> {
    /// The next item; `None` once the queue is empty and every sender is
    /// gone.
    pub fn recv(&self) -> Option<T> {
        self.wait_for_items()?.items.pop_front()
    }

    /// Waits for an item like [`Receiver::recv`], then moves it and every
    /// item queued behind it, up to `max` in all, into `into`, under one
    /// lock; false once the queue is empty and every sender is gone.
    pub fn recv_many(&self, into: &mut Vec<T>, max: usize) -> bool {
        let Some(mut state) = self.wait_for_items() else {
            return false;
        };
        let take = state.items.len().min(max.saturating_sub(into.len()).max(1));
        into.extend(state.items.drain(..take));
        true
    }

    /// The locked queue once it holds an item; `None` once it is empty and
    /// every sender is gone.
    fn wait_for_items(&self) -> Option<MutexGuard<'_, State<T>>> {
        let mut state = lock(&self.shared.state);
        loop {
            if !state.items.is_empty() {
                return Some(state);
            }
            if state.senders == 0 {
                return None;
            }
            state.waiting += 1;
            state = self
                .shared
                .ready
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.waiting -= 1;
        }
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        lock(&self.shared.state).receivers += 1;
        Receiver {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.shared.state);
        state.receivers -= 1;
        if state.receivers == 0 {
            // Nothing will take them: they go now, not with the last sender.
            let items = std::mem::take(&mut state.items);
            drop(state);
            drop(items);
        }
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Receiver { .. }")
    }
}

/// Creates a one-shot slot: one value, sent once, received once.
pub fn oneshot<T>() -> (Fill<T>, Wait<T>) {
    let shared = Arc::new(Slot {
        value: Mutex::new(Value::Empty),
        waiting: AtomicBool::new(false),
        ready: Condvar::new(),
    });
    (
        Fill {
            slot: Some(Arc::clone(&shared)),
        },
        Wait { slot: shared },
    )
}

struct Slot<T> {
    value: Mutex<Value<T>>,
    /// The waiter is parked (set and cleared under `value`'s lock), so a
    /// value that arrives before it waits costs no wake-up.
    waiting: AtomicBool,
    ready: Condvar,
}

impl<T> Slot<T> {
    /// Puts `value` in unless it is already `Full`, and wakes the waiter
    /// if it is parked.
    fn put(&self, value: Value<T>) {
        let mut slot = lock(&self.value);
        if !matches!(*slot, Value::Full(_)) {
            *slot = value;
        }
        let wake = self.waiting.load(Ordering::Relaxed);
        drop(slot);
        if wake {
            self.ready.notify_one();
        }
    }
}

enum Value<T> {
    Empty,
    Full(T),
    /// The filling half was dropped unused.
    Abandoned,
}

/// The sending half of a [`oneshot`].
pub struct Fill<T> {
    slot: Option<Arc<Slot<T>>>,
}

impl<T> Fill<T> {
    /// Fills the slot and wakes its waiter.
    pub fn send(mut self, value: T) {
        if let Some(slot) = self.slot.take() {
            slot.put(Value::Full(value));
        }
    }
}

impl<T> Drop for Fill<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.put(Value::Abandoned);
        }
    }
}

impl<T> std::fmt::Debug for Fill<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fill { .. }")
    }
}

/// The receiving half of a [`oneshot`].
pub struct Wait<T> {
    slot: Arc<Slot<T>>,
}

impl<T> Wait<T> {
    /// The value; `None` when the filling half was dropped unused.
    pub fn recv(self) -> Option<T> {
        let mut value = lock(&self.slot.value);
        loop {
            match std::mem::replace(&mut *value, Value::Empty) {
                Value::Full(v) => return Some(v),
                Value::Abandoned => return None,
                Value::Empty => {
                    self.slot.waiting.store(true, Ordering::Relaxed);
                    value = self
                        .slot
                        .ready
                        .wait(value)
                        .unwrap_or_else(PoisonError::into_inner);
                    self.slot.waiting.store(false, Ordering::Relaxed);
                }
            }
        }
    }
}

impl<T> std::fmt::Debug for Wait<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Wait { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_delivers_in_order_and_ends_when_the_senders_are_gone() {
        let (tx, rx) = queue();
        let second = tx.clone();
        let producer = std::thread::spawn(move || {
            for n in 0..1000 {
                tx.send(n).unwrap();
            }
        });
        producer.join().unwrap();
        second.send(1000).unwrap();
        drop(second);
        let got: Vec<i32> = std::iter::from_fn(|| rx.recv()).collect();
        assert_eq!(got, (0..=1000).collect::<Vec<_>>());
    }

    #[test]
    fn a_parked_receiver_wakes_for_an_item_and_for_the_end() {
        let (tx, rx) = queue::<u8>();
        let other = rx.clone();
        let a = std::thread::spawn(move || rx.recv());
        let b = std::thread::spawn(move || other.recv());
        std::thread::sleep(std::time::Duration::from_millis(50));
        tx.send(7).unwrap();
        drop(tx);
        let mut got = [a.join().unwrap(), b.join().unwrap()];
        got.sort();
        assert_eq!(got, [None, Some(7)]);
    }

    #[test]
    fn a_send_without_receivers_gives_the_item_back() {
        let (tx, rx) = queue();
        drop(rx);
        assert_eq!(tx.send("job"), Err("job"));
    }

    #[test]
    fn recv_many_takes_what_is_queued_up_to_the_limit() {
        let (tx, rx) = queue();
        for n in 0..5 {
            tx.send(n).unwrap();
        }
        let mut batch = Vec::new();
        assert!(rx.recv_many(&mut batch, 3));
        assert_eq!(batch, [0, 1, 2]);
        batch.clear();
        assert!(rx.recv_many(&mut batch, 3));
        assert_eq!(batch, [3, 4]);
        drop(tx);
        batch.clear();
        assert!(!rx.recv_many(&mut batch, 3));
    }

    #[test]
    fn a_oneshot_carries_its_value_across_threads() {
        let (fill, wait) = oneshot();
        let t = std::thread::spawn(move || wait.recv());
        std::thread::sleep(std::time::Duration::from_millis(20));
        fill.send(42);
        assert_eq!(t.join().unwrap(), Some(42));
    }

    #[test]
    fn a_oneshot_filled_before_its_wait_is_received_at_once() {
        let (fill, wait) = oneshot();
        fill.send(7);
        assert_eq!(wait.recv(), Some(7));
    }

    #[test]
    fn a_oneshot_racing_its_waiter_never_loses_the_wake_up() {
        // Filler and waiter start together, so either may come first; a
        // lost wake-up leaves a waiter parked for ever.
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        for round in 0..2000u32 {
            let (fill, wait) = oneshot();
            let done = done_tx.clone();
            let waiter = std::thread::spawn(move || {
                let _ = done.send(wait.recv());
            });
            if round % 2 == 0 {
                fill.send(round);
            } else {
                drop(fill);
            }
            let got = done_rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("a waiter was never woken");
            assert_eq!(got, (round % 2 == 0).then_some(round));
            waiter.join().unwrap();
        }
    }

    #[test]
    fn a_oneshot_dropped_unfilled_ends_its_wait() {
        let (fill, wait) = oneshot::<u8>();
        let t = std::thread::spawn(move || wait.recv());
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(fill);
        assert_eq!(t.join().unwrap(), None);
    }
}
