//! How much work runs at once: the per-connection request slots
//! (PROTOCOL.md §5.2, §9; `slots.rs`), the machine-wide command and
//! screenshot limits over a rolling window (§5.7, EXEC.md §8; `rate.rs`)
//! and the machine work pool of child runtimes (CONTROL.md §10.2;
//! `work_pool.rs`), and the `SHIM_OVERLOADED` refusal they share.
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

mod rate;
mod slots;
mod work_pool;

use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::{Map, Value};

use crate::protocol::{ErrorCode, ErrorPayload};

/// The machine-wide command and screenshot limits.
pub use rate::{MachineLimitSettings, MachineLimits};
/// A connection's request slots and an admitted request's hold on one.
pub use slots::{Admitted, RequestSlots};
/// The machine work pool of child runtimes.
pub use work_pool::MachineWorkPool;

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
    pub fn to_error(self) -> ErrorPayload {
        let error = ErrorPayload::new(ErrorCode::ShimOverloaded, self.message());
        match self.details() {
            Some(details) => error.with_details(details),
            None => error,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
}
