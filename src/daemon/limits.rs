//! Limits on how much work runs at once: the per-connection request slots
//! (PROTOCOL.md §5.2, §9), the machine-wide command and screenshot limits
//! (§5.7, EXEC.md §8) and the machine work pool of child runtimes
//! (CONTROL.md §10.2).
//!
//! Everything here is bookkeeping behind a `Mutex`: no threads, no timers,
//! no clock of its own (the caller passes `Instant`s), no I/O. Every slot
//! is an RAII value released on drop, so a handler that returns early,
//! panics or is cancelled still gives its slot back; nothing here can leak
//! capacity or admit more than a limit allows.
//!
//! A poisoned lock is recovered rather than propagated: the guarded state is
//! a handful of counters that no code path leaves half-updated, and keeping
//! the limits enforced matters more than surfacing a panic from some other
//! request.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::config::Settings;
use crate::protocol::{Counters, ErrorCode, ErrorPayload, Status};

/// Length of the rolling windows: an event expires when it is this old.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);
/// Default `max_commands_per_minute`.
pub const DEFAULT_MAX_COMMANDS_PER_MINUTE: u32 = 60;
/// Default `max_concurrent_commands`.
pub const DEFAULT_MAX_CONCURRENT_COMMANDS: u32 = 10;
/// Default `max_screenshots_per_minute`.
pub const DEFAULT_MAX_SCREENSHOTS_PER_MINUTE: u32 = 10;
/// Message of the admission `SHIM_OVERLOADED` (PROTOCOL.md §5.2).
pub const ADMISSION_MESSAGE: &str = "The local executor is at its concurrent request limit.";

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a request was refused with `SHIM_OVERLOADED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overloaded {
    /// Per-connection admission: `P ≥ max_concurrent` (PROTOCOL.md §5.2).
    /// The reply carries `pending_capacity: 0`.
    Admission {
        /// The effective `max_concurrent`.
        max_concurrent: u64,
    },
    /// More than `max_commands_per_minute` commands in the rolling minute.
    CommandRate {
        /// The configured `max_commands_per_minute`.
        per_minute: u32,
    },
    /// `max_concurrent_commands` commands are already running.
    CommandConcurrency {
        /// The configured `max_concurrent_commands`.
        limit: u32,
    },
    /// More than `max_screenshots_per_minute` screenshots in the rolling
    /// minute.
    ScreenshotRate {
        /// The configured `max_screenshots_per_minute`.
        per_minute: u32,
    },
    /// The responses waiting to be sent on this connection (or on all
    /// child runtimes together) have reached their byte limit: the platform
    /// is not reading them (see [`super::backlog`]).
    Backlog,
}

impl Overloaded {
    /// The `ERROR.message`, exactly as PROTOCOL.md §5.2 / EXEC.md §8 and
    /// CAPABILITIES.md §4.5 spell it.
    pub fn message(&self) -> String {
        match self {
            Overloaded::Admission { .. } => ADMISSION_MESSAGE.to_owned(),
            Overloaded::CommandRate { per_minute } => {
                format!("Command rate limit exceeded ({per_minute}/minute).")
            }
            Overloaded::CommandConcurrency { .. } => {
                "Concurrent command limit exceeded.".to_owned()
            }
            Overloaded::ScreenshotRate { per_minute } => {
                format!("Screenshot rate limit exceeded ({per_minute}/minute).")
            }
            Overloaded::Backlog => {
                "The local executor has too many unread responses waiting to be sent.".to_owned()
            }
        }
    }

    /// The `ERROR.details`: `{"max_concurrent": N}` for admission; the
    /// shared limits specify none, so `null`.
    pub fn details(&self) -> Option<Map<String, Value>> {
        match self {
            Overloaded::Admission { max_concurrent } => {
                let mut details = Map::new();
                details.insert("max_concurrent".to_owned(), Value::from(*max_concurrent));
                Some(details)
            }
            _ => None,
        }
    }

    /// The `ERROR` payload (`SHIM_OVERLOADED`, `fatal: false`).
    pub fn to_error(&self) -> ErrorPayload {
        let error = ErrorPayload::new(ErrorCode::ShimOverloaded, self.message());
        match self.details() {
            Some(details) => error.with_details(details),
            None => error,
        }
    }
}

/// A sliding-window rate limiter on a monotonic clock (PROTOCOL.md §5.7,
/// EXEC.md §8.4): an event counts at its start and expires when it is
/// [`RATE_WINDOW`] old or older.
#[derive(Debug, Clone)]
pub struct RollingWindow {
    limit: u32,
    /// Start times of the counted events, oldest first.
    events: VecDeque<Instant>,
}

impl RollingWindow {
    /// A window admitting `limit` events per [`RATE_WINDOW`]. A limit of 0
    /// admits nothing.
    pub fn new(limit: u32) -> RollingWindow {
        RollingWindow {
            limit,
            events: VecDeque::new(),
        }
    }

    /// The configured limit.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Drops expired events (`t ≤ now − 60 s`); then, if fewer than `limit`
    /// remain, records `now` and returns true. A refused attempt is not
    /// recorded (EXEC.md §8.4).
    pub fn try_acquire(&mut self, now: Instant) -> bool {
        self.expire(now);
        if self.events.len() >= self.limit as usize {
            return false;
        }
        // Callers read the clock before taking the lock, so `now` can trail
        // the newest event by a hair. Recording the later of the two keeps
        // the deque ordered; the event then expires marginally late, which
        // can only refuse, never over-admit.
        let at = self.events.back().map_or(now, |&last| last.max(now));
        self.events.push_back(at);
        true
    }

    /// How many events count at `now`.
    pub fn count(&mut self, now: Instant) -> usize {
        self.expire(now);
        self.events.len()
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&oldest) = self.events.front() {
            if now.saturating_duration_since(oldest) >= RATE_WINDOW {
                self.events.pop_front();
            } else {
                break;
            }
        }
    }
}

/// The configured machine-wide limits (CLI.md §5.2; all > 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineLimitSettings {
    /// `max_commands_per_minute`.
    pub max_commands_per_minute: u32,
    /// `max_concurrent_commands`.
    pub max_concurrent_commands: u32,
    /// `max_screenshots_per_minute`.
    pub max_screenshots_per_minute: u32,
}

impl Default for MachineLimitSettings {
    /// 60 / 10 / 10 (PROTOCOL.md Appendix A).
    fn default() -> Self {
        MachineLimitSettings {
            max_commands_per_minute: DEFAULT_MAX_COMMANDS_PER_MINUTE,
            max_concurrent_commands: DEFAULT_MAX_CONCURRENT_COMMANDS,
            max_screenshots_per_minute: DEFAULT_MAX_SCREENSHOTS_PER_MINUTE,
        }
    }
}

impl MachineLimitSettings {
    /// The values of the effective configuration. They are local only: the
    /// platform never negotiates them (EXEC.md §8).
    pub fn from_config(settings: &Settings) -> MachineLimitSettings {
        MachineLimitSettings {
            max_commands_per_minute: settings.max_commands_per_minute,
            max_concurrent_commands: settings.max_concurrent_commands,
            max_screenshots_per_minute: settings.max_screenshots_per_minute,
        }
    }
}

/// The limits shared by every connection of one daemon (control and
/// children) for the whole process lifetime: they survive reconnects and
/// session restarts (EXEC.md §8.4). Cloning shares the same counters.
#[derive(Debug, Clone)]
pub struct MachineLimits {
    shared: Arc<Machine>,
}

#[derive(Debug)]
struct Machine {
    settings: MachineLimitSettings,
    state: Mutex<MachineState>,
}

#[derive(Debug)]
struct MachineState {
    commands: RollingWindow,
    screenshots: RollingWindow,
    active_commands: u32,
}

impl MachineLimits {
    /// Fresh limits with nothing counted.
    pub fn new(settings: MachineLimitSettings) -> MachineLimits {
        MachineLimits {
            shared: Arc::new(Machine {
                settings,
                state: Mutex::new(MachineState {
                    commands: RollingWindow::new(settings.max_commands_per_minute),
                    screenshots: RollingWindow::new(settings.max_screenshots_per_minute),
                    active_commands: 0,
                }),
            }),
        }
    }

    /// The settings these limits enforce.
    pub fn settings(&self) -> MachineLimitSettings {
        self.shared.settings
    }

    /// EXEC.md §3 steps 2 and 3 for one `EXECUTE_COMMAND`, called after the
    /// local `enable_shell` check (step 1).
    ///
    /// The rate limiter runs first (step 2) and a request that passes it is
    /// counted whatever happens next, including a refusal by the
    /// concurrency limit (step 3; EXEC.md §8.4 "Counted"). A request the
    /// rate limiter refuses takes no concurrency slot. Both steps run under
    /// one lock so that no other command interleaves between them.
    ///
    /// The returned slot must live until the handler returns (output
    /// collection and termination included, EXEC.md §8.3).
    pub fn start_command(&self, now: Instant) -> Result<CommandSlot, Overloaded> {
        let settings = self.shared.settings;
        let mut state = lock(&self.shared.state);
        if !state.commands.try_acquire(now) {
            return Err(Overloaded::CommandRate {
                per_minute: settings.max_commands_per_minute,
            });
        }
        if state.active_commands >= settings.max_concurrent_commands {
            return Err(Overloaded::CommandConcurrency {
                limit: settings.max_concurrent_commands,
            });
        }
        state.active_commands += 1;
        Ok(CommandSlot {
            shared: Arc::clone(&self.shared),
        })
    }

    /// The screenshot rate limiter (EXEC.md §8.5), checked first inside
    /// `SCREENSHOT_REQUEST` handling. An admitted request counts even if the
    /// capture then fails. There is nothing to release afterwards.
    pub fn start_screenshot(&self, now: Instant) -> Result<(), Overloaded> {
        let mut state = lock(&self.shared.state);
        if state.screenshots.try_acquire(now) {
            Ok(())
        } else {
            Err(Overloaded::ScreenshotRate {
                per_minute: self.shared.settings.max_screenshots_per_minute,
            })
        }
    }

    /// Commands currently holding a [`CommandSlot`].
    pub fn active_commands(&self) -> u32 {
        lock(&self.shared.state).active_commands
    }
}

/// One running command's share of `max_concurrent_commands`; released on
/// drop, on every path (EXEC.md §8.3).
#[derive(Debug)]
#[must_use = "the command slot is released as soon as it is dropped"]
pub struct CommandSlot {
    shared: Arc<Machine>,
}

impl Drop for CommandSlot {
    fn drop(&mut self) {
        let mut state = lock(&self.shared.state);
        state.active_commands = state.active_commands.saturating_sub(1);
    }
}

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

    /// The effective `max_concurrent`.
    pub fn max_concurrent(&self) -> u64 {
        self.shared.max_concurrent
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
        {
            let mut state = lock(&self.shared.state);
            state.in_use = state.in_use.saturating_sub(1);
        }
        // All, not one: a woken waiter may be a cancelled one that leaves
        // without taking the permit, which would strand the others.
        self.shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::thread;

    use serde_json::json;

    use super::*;

    fn at(start: Instant, millis: u64) -> Instant {
        start + Duration::from_millis(millis)
    }

    fn n(value: u64) -> NonZeroU64 {
        NonZeroU64::new(value).expect("non-zero")
    }

    fn machine(per_minute: u32, concurrent: u32) -> MachineLimits {
        MachineLimits::new(MachineLimitSettings {
            max_commands_per_minute: per_minute,
            max_concurrent_commands: concurrent,
            max_screenshots_per_minute: DEFAULT_MAX_SCREENSHOTS_PER_MINUTE,
        })
    }

    // --- rolling window ------------------------------------------------------

    #[test]
    fn window_event_expires_at_exactly_sixty_seconds() {
        let t0 = Instant::now();
        let mut window = RollingWindow::new(1);
        assert!(window.try_acquire(t0));
        assert!(!window.try_acquire(at(t0, 59_999)));
        assert_eq!(window.count(at(t0, 59_999)), 1);
        assert_eq!(window.count(at(t0, 60_000)), 0);
        assert!(window.try_acquire(at(t0, 60_000)));
    }

    #[test]
    fn window_follows_the_sixty_per_minute_example() {
        // EXEC.md §8.4: 60 at t = 0 … 59 admitted, 59.9 refused, 60.0 admitted.
        let t0 = Instant::now();
        let mut window = RollingWindow::new(60);
        for second in 0..60 {
            assert!(window.try_acquire(at(t0, second * 1000)), "t = {second}");
        }
        assert!(!window.try_acquire(at(t0, 59_900)));
        assert!(window.try_acquire(at(t0, 60_000)));
        assert!(!window.try_acquire(at(t0, 60_500)));
        assert!(window.try_acquire(at(t0, 61_000)));
    }

    #[test]
    fn refused_attempts_are_not_recorded() {
        let t0 = Instant::now();
        let mut window = RollingWindow::new(1);
        assert!(window.try_acquire(t0));
        assert!(!window.try_acquire(at(t0, 30_000)));
        // Had the refusal at 30 s counted, this would still be refused.
        assert!(window.try_acquire(at(t0, 60_000)));
    }

    #[test]
    fn window_with_limit_zero_admits_nothing() {
        let mut window = RollingWindow::new(0);
        assert!(!window.try_acquire(Instant::now()));
        assert_eq!(window.limit(), 0);
    }

    #[test]
    fn out_of_order_instant_never_admits_more_than_the_limit() {
        let t0 = Instant::now();
        let mut window = RollingWindow::new(2);
        assert!(window.try_acquire(at(t0, 10_000)));
        assert!(window.try_acquire(at(t0, 9_000)));
        assert!(!window.try_acquire(at(t0, 69_999)));
        assert!(window.try_acquire(at(t0, 70_000)));
    }

    // --- machine-wide limits ---------------------------------------------------

    #[test]
    fn defaults_are_sixty_per_minute_ten_concurrent_ten_screenshots() {
        let limits = MachineLimitSettings::default();
        assert_eq!(limits.max_commands_per_minute, 60);
        assert_eq!(limits.max_concurrent_commands, 10);
        assert_eq!(limits.max_screenshots_per_minute, 10);
    }

    #[test]
    fn command_rate_refusal_names_the_configured_number() {
        let t0 = Instant::now();
        let limits = MachineLimits::new(MachineLimitSettings::default());
        let mut slots = Vec::new();
        for i in 0..10 {
            slots.push(limits.start_command(at(t0, i)).expect("within limits"));
        }
        drop(slots);
        for i in 10..60 {
            drop(limits.start_command(at(t0, i)).expect("within rate"));
        }
        let refused = limits.start_command(at(t0, 60)).expect_err("61st");
        assert_eq!(refused, Overloaded::CommandRate { per_minute: 60 });
        assert_eq!(
            refused.message(),
            "Command rate limit exceeded (60/minute)."
        );
        assert_eq!(refused.details(), None);
        let seven = machine(7, 100);
        for i in 0..7 {
            drop(seven.start_command(at(t0, i)).expect("within rate"));
        }
        assert_eq!(
            seven.start_command(at(t0, 8)).expect_err("8th").message(),
            "Command rate limit exceeded (7/minute)."
        );
    }

    #[test]
    fn rate_is_checked_before_concurrency_and_a_concurrency_refusal_still_counts() {
        let t0 = Instant::now();
        let limits = machine(3, 1);
        let running = limits.start_command(t0).expect("first");
        let refused = limits.start_command(at(t0, 1)).expect_err("second");
        assert_eq!(refused, Overloaded::CommandConcurrency { limit: 1 });
        assert_eq!(refused.message(), "Concurrent command limit exceeded.");
        drop(running);
        drop(limits.start_command(at(t0, 2)).expect("third"));
        // The refused second request used up a rate slot (EXEC.md §8.4).
        assert_eq!(
            limits.start_command(at(t0, 3)).expect_err("fourth"),
            Overloaded::CommandRate { per_minute: 3 }
        );
    }

    #[test]
    fn rate_refusal_takes_no_concurrency_slot() {
        let t0 = Instant::now();
        let limits = machine(1, 5);
        let running = limits.start_command(t0).expect("first");
        assert!(limits.start_command(at(t0, 1)).is_err());
        assert_eq!(limits.active_commands(), 1);
        drop(running);
        assert_eq!(limits.active_commands(), 0);
    }

    #[test]
    fn command_slot_is_released_on_drop() {
        let t0 = Instant::now();
        let limits = machine(100, 2);
        let a = limits.start_command(t0).expect("a");
        let b = limits.start_command(t0).expect("b");
        assert_eq!(limits.active_commands(), 2);
        assert!(limits.start_command(t0).is_err());
        drop(a);
        assert_eq!(limits.active_commands(), 1);
        let c = limits.start_command(t0).expect("c after a released");
        drop((b, c));
        assert_eq!(limits.active_commands(), 0);
    }

    #[test]
    fn command_slot_is_released_when_its_holder_panics() {
        let limits = machine(100, 1);
        let shared = limits.clone();
        let outcome = thread::spawn(move || {
            let _slot = shared.start_command(Instant::now()).expect("slot");
            panic!("handler failed while holding its command slot");
        })
        .join();
        assert!(outcome.is_err());
        assert_eq!(limits.active_commands(), 0);
        assert!(limits.start_command(Instant::now()).is_ok());
    }

    #[test]
    fn concurrent_commands_never_exceed_the_limit_across_threads() {
        const LIMIT: u32 = 3;
        let limits = machine(u32::MAX, LIMIT);
        let running = Arc::new(AtomicU64::new(0));
        let peak = Arc::new(AtomicU64::new(0));
        let granted = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let (limits, running, peak) = (limits.clone(), running.clone(), peak.clone());
                let (granted, refused) = (granted.clone(), refused.clone());
                thread::spawn(move || {
                    for _ in 0..500 {
                        match limits.start_command(Instant::now()) {
                            Ok(slot) => {
                                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                                peak.fetch_max(now, Ordering::SeqCst);
                                assert!(limits.active_commands() <= LIMIT);
                                thread::yield_now();
                                running.fetch_sub(1, Ordering::SeqCst);
                                drop(slot);
                                granted.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(Overloaded::CommandConcurrency { limit }) => {
                                assert_eq!(limit, LIMIT);
                                refused.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(other) => panic!("unexpected {other:?}"),
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker");
        }
        assert!(peak.load(Ordering::SeqCst) <= u64::from(LIMIT));
        assert_eq!(
            granted.load(Ordering::SeqCst) + refused.load(Ordering::SeqCst),
            8 * 500
        );
        assert!(granted.load(Ordering::SeqCst) > 0);
        assert_eq!(limits.active_commands(), 0);
    }

    #[test]
    fn screenshot_rate_refuses_the_eleventh_in_a_minute() {
        let t0 = Instant::now();
        let limits = MachineLimits::new(MachineLimitSettings::default());
        for i in 0..10 {
            assert_eq!(limits.start_screenshot(at(t0, i)), Ok(()));
        }
        let refused = limits.start_screenshot(at(t0, 10)).expect_err("11th");
        assert_eq!(
            refused.message(),
            "Screenshot rate limit exceeded (10/minute)."
        );
        assert_eq!(refused.to_error().code.as_str(), "SHIM_OVERLOADED");
        assert_eq!(limits.start_screenshot(at(t0, 60_000)), Ok(()));
        // Screenshots and commands are counted separately.
        assert!(limits.start_command(at(t0, 10)).is_ok());
    }

    #[test]
    fn shared_limit_errors_have_no_details() {
        for overloaded in [
            Overloaded::CommandRate { per_minute: 60 },
            Overloaded::CommandConcurrency { limit: 10 },
            Overloaded::ScreenshotRate { per_minute: 10 },
        ] {
            let error = serde_json::to_value(overloaded.to_error()).expect("json");
            assert_eq!(error["code"], json!("SHIM_OVERLOADED"));
            assert_eq!(error["fatal"], json!(false));
            assert_eq!(error["details"], Value::Null);
        }
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
