//! The machine-wide limits shared by every connection of one daemon: the
//! command rate and concurrency limits and the screenshot rate limit
//! (PROTOCOL.md §5.7, EXEC.md §8), counted over a rolling window. Never
//! waits and never reads the clock itself.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Overloaded, lock};
use crate::config::Settings;

/// Length of the rolling windows: an event expires when it is this old.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);
/// Default `max_commands_per_minute`.
pub const DEFAULT_MAX_COMMANDS_PER_MINUTE: u32 = 60;
/// Default `max_concurrent_commands`.
pub const DEFAULT_MAX_CONCURRENT_COMMANDS: u32 = 10;
/// Default `max_screenshots_per_minute`.
pub const DEFAULT_MAX_SCREENSHOTS_PER_MINUTE: u32 = 10;

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
    #[cfg(test)]
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
    #[cfg(test)]
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

    /// Commands currently holding a `CommandSlot`.
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::thread;

    use super::*;

    fn at(start: Instant, millis: u64) -> Instant {
        start + Duration::from_millis(millis)
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
}
