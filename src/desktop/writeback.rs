//! The clipboard writeback registry (CAPABILITIES.md §4.10): the SHA-256 of
//! the shim's latest clipboard write and when it happened, so that a read
//! returns only what the shim itself put there, for 30 seconds.
//!
//! It holds a digest, never the text, and lives for the whole process.

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::error::Concealment;

/// How long a write stays readable.
pub const WINDOW: Duration = Duration::from_secs(30);

/// The latest write: one slot.
#[derive(Debug, Default)]
pub struct Writeback {
    latest: Option<(Instant, [u8; 32])>,
}

impl Writeback {
    /// Records a write of `text` at `now`.
    pub fn record(&mut self, text: &str, now: Instant) {
        self.latest = Some((now, Sha256::digest(text.as_bytes()).into()));
    }

    /// Whether the live clipboard text (`None` when there is none) may be
    /// returned at `now`; `Err` says why not.
    pub fn check(&self, live: Option<&str>, now: Instant) -> Result<(), Concealment> {
        let Some((written_at, digest)) = self.latest else {
            return Err(Concealment::NoWriteback);
        };
        let age = now.saturating_duration_since(written_at);
        if age > WINDOW {
            return Err(Concealment::WritebackExpired {
                age_seconds: age.as_secs_f64(),
            });
        }
        match live {
            Some(text) if <[u8; 32]>::from(Sha256::digest(text.as_bytes())) == digest => Ok(()),
            _ => Err(Concealment::Overwritten),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_returns_only_the_shims_own_latest_write() {
        let mut registry = Writeback::default();
        let t0 = Instant::now();
        assert_eq!(registry.check(Some("x"), t0), Err(Concealment::NoWriteback));
        registry.record("mine", t0);
        assert_eq!(registry.check(Some("mine"), t0), Ok(()));
        assert_eq!(
            registry.check(Some("theirs"), t0),
            Err(Concealment::Overwritten)
        );
        assert_eq!(registry.check(None, t0), Err(Concealment::Overwritten));
        registry.record("second", t0);
        assert_eq!(
            registry.check(Some("mine"), t0),
            Err(Concealment::Overwritten)
        );
    }

    #[test]
    fn a_write_older_than_thirty_seconds_is_no_longer_readable() {
        let mut registry = Writeback::default();
        let t0 = Instant::now();
        registry.record("mine", t0);
        assert_eq!(registry.check(Some("mine"), t0 + WINDOW), Ok(()));
        match registry.check(Some("mine"), t0 + WINDOW + Duration::from_millis(1)) {
            Err(Concealment::WritebackExpired { age_seconds }) => assert!(age_seconds > 30.0),
            other => panic!("{other:?}"),
        }
    }
}
