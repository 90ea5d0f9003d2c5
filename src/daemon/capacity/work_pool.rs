//! The machine work pool (CONTROL.md §10.2, EXEC.md §8.2): the permits that
//! bound how many requests of all child runtimes run at once. A request
//! waits here for a permit; nobody is refused for lack of one.

use std::num::NonZeroU64;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::lock;

/// The machine work pool (CONTROL.md §10.2, EXEC.md §8.2): child requests
/// wait here, after taking their own request slot, until fewer than `size`
/// requests of all children run. Nobody is refused for lack of a permit.
///
/// Resized to the control connection's effective `max_concurrent` at each
/// control handshake. Waiters are woken in no particular order.
#[derive(Debug, Clone)]
pub struct MachineWorkPool {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<PermitState>,
    changed: Condvar,
}

#[derive(Debug)]
struct PermitState {
    size: u64,
    in_use: u64,
    waiting: u64,
}

impl MachineWorkPool {
    /// A pool of `size` permits, none in use.
    pub fn new(size: NonZeroU64) -> MachineWorkPool {
        MachineWorkPool {
            shared: Arc::new(Shared {
                state: Mutex::new(PermitState {
                    size: size.get(),
                    in_use: 0,
                    waiting: 0,
                }),
                changed: Condvar::new(),
            }),
        }
    }

    /// Changes the number of permits. Shrinking revokes nothing: permits
    /// already out stay valid, and new work waits until usage falls below
    /// the new size. Growing wakes waiters at once.
    pub fn resize(&self, size: NonZeroU64) {
        lock(&self.shared.state).size = size.get();
        self.shared.changed.notify_all();
    }

    /// The current number of permits.
    pub fn size(&self) -> u64 {
        lock(&self.shared.state).size
    }

    /// Permits currently held.
    pub fn in_use(&self) -> u64 {
        lock(&self.shared.state).in_use
    }

    /// Callers currently blocked waiting for a permit.
    pub fn waiting(&self) -> u64 {
        lock(&self.shared.state).waiting
    }

    /// A permit if one is free now.
    pub fn try_acquire(&self) -> Option<WorkPermit> {
        let mut state = lock(&self.shared.state);
        self.take(&mut state)
    }

    /// Waits for a permit.
    pub fn acquire(&self) -> WorkPermit {
        loop {
            if let Some(permit) = self.acquire_unless(|| false) {
                return permit;
            }
        }
    }

    /// Waits for a permit unless `cancelled` returns true, which is checked
    /// before each wait and after each wake-up. Whoever makes `cancelled`
    /// true must then call [`MachineWorkPool::wake_waiters`] so sleeping waiters
    /// notice (a connection that ends cancels its waiting requests, §11.4).
    pub fn acquire_unless(&self, cancelled: impl Fn() -> bool) -> Option<WorkPermit> {
        let mut state = lock(&self.shared.state);
        loop {
            if cancelled() {
                return None;
            }
            if let Some(permit) = self.take(&mut state) {
                return Some(permit);
            }
            state.waiting += 1;
            state = self
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.waiting = state.waiting.saturating_sub(1);
        }
    }

    /// Wakes every waiter so it re-checks its cancellation predicate.
    pub fn wake_waiters(&self) {
        // Taking the lock orders this wake-up after any waiter's predicate
        // check, so a waiter cannot miss it between check and wait.
        drop(lock(&self.shared.state));
        self.shared.changed.notify_all();
    }

    fn take(&self, state: &mut PermitState) -> Option<WorkPermit> {
        if state.in_use >= state.size {
            return None;
        }
        state.in_use += 1;
        Some(WorkPermit {
            shared: Arc::clone(&self.shared),
        })
    }
}

/// A held machine work slot; released on drop.
#[derive(Debug)]
#[must_use = "the work permit is released as soon as it is dropped"]
pub struct WorkPermit {
    shared: Arc<Shared>,
}

impl Drop for WorkPermit {
    fn drop(&mut self) {
        let waiting = {
            let mut state = lock(&self.shared.state);
            state.in_use = state.in_use.saturating_sub(1);
            state.waiting > 0
        };
        // All, not one: a woken waiter may be a cancelled one that leaves
        // without taking the permit, which would strand the others. None
        // when nobody waits: a wake-up is a system call either way.
        if waiting {
            self.shared.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::thread;

    use super::*;

    fn n(value: u64) -> NonZeroU64 {
        NonZeroU64::new(value).expect("non-zero")
    }

    // --- machine work pool -------------------------------------------------------

    /// Spins until one caller sleeps in the pool's wait.
    fn wait_until_blocked(pool: &MachineWorkPool) {
        while pool.waiting() == 0 {
            thread::yield_now();
        }
    }

    #[test]
    fn work_pool_never_exceeds_its_size_across_threads() {
        const SIZE: u64 = 2;
        let pool = MachineWorkPool::new(n(SIZE));
        let running = Arc::new(AtomicU64::new(0));
        let peak = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..6)
            .map(|_| {
                let (pool, running, peak) = (pool.clone(), running.clone(), peak.clone());
                thread::spawn(move || {
                    for _ in 0..200 {
                        let permit = pool.acquire();
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        thread::yield_now();
                        running.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker");
        }
        assert!(peak.load(Ordering::SeqCst) <= SIZE);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn work_pool_waiter_proceeds_when_a_permit_is_released() {
        let pool = MachineWorkPool::new(n(1));
        let held = pool.acquire();
        let waiter = {
            let pool = pool.clone();
            thread::spawn(move || drop(pool.acquire()))
        };
        wait_until_blocked(&pool);
        assert!(!waiter.is_finished());
        drop(held);
        waiter.join().expect("waiter");
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn shrinking_the_pool_holds_new_work_until_usage_falls() {
        let pool = MachineWorkPool::new(n(3));
        let a = pool.acquire();
        let b = pool.acquire();
        pool.resize(n(1));
        assert_eq!(pool.size(), 1);
        assert!(pool.try_acquire().is_none());
        drop(a);
        assert!(pool.try_acquire().is_none());
        drop(b);
        let c = pool.try_acquire();
        assert!(c.is_some());
        assert!(pool.try_acquire().is_none());
    }

    #[test]
    fn growing_the_pool_wakes_a_waiter() {
        let pool = MachineWorkPool::new(n(1));
        let _held = pool.acquire();
        let waiter = {
            let pool = pool.clone();
            thread::spawn(move || drop(pool.acquire()))
        };
        wait_until_blocked(&pool);
        pool.resize(n(2));
        waiter.join().expect("waiter");
    }

    #[test]
    fn cancelled_waiter_leaves_without_a_permit() {
        let pool = MachineWorkPool::new(n(1));
        let held = pool.acquire();
        let cancelled = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (pool, cancelled) = (pool.clone(), cancelled.clone());
            thread::spawn(move || {
                pool.acquire_unless(|| cancelled.load(Ordering::SeqCst))
                    .is_none()
            })
        };
        wait_until_blocked(&pool);
        cancelled.store(true, Ordering::SeqCst);
        pool.wake_waiters();
        assert!(waiter.join().expect("waiter"));
        assert_eq!(pool.in_use(), 1);
        drop(held);
        assert_eq!(pool.in_use(), 0);
    }
}
