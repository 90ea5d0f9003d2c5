//! What went wrong in a computer-use operation, said as what happened. The
//! data-plane handlers map each case to its wire code, message and
//! `details` (CAPABILITIES.md §4.2) in one place.

use super::geometry::Rect;

/// A payload too large to answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    Screenshot,
    Clipboard,
}

/// Why the live clipboard is not handed to the platform.
#[derive(Debug, Clone, PartialEq)]
pub enum Concealment {
    /// Nothing written by the shim is on record.
    NoWriteback,
    /// The shim's last write is older than the 30 s window.
    WritebackExpired { age_seconds: f64 },
    /// Something else is on the clipboard now.
    Overwritten,
    /// The owner marked the content as a secret (a password manager).
    PasswordManager { marker: &'static str },
}

/// A failed computer-use operation.
#[derive(Debug, Clone, PartialEq)]
pub enum DesktopError {
    /// The local `enable_computer_use` switch is off.
    Disabled,
    /// The feature cannot be served here, with the reason when one is known.
    Unsupported {
        feature: String,
        reason: Option<String>,
    },
    /// A window id that no longer names a live window.
    WindowStale { window_id: String, known: bool },
    /// A coordinate outside every display.
    OutOfBounds {
        coordinate: [i64; 2],
        displays: Vec<Rect>,
    },
    /// The clipboard is not readable to the platform.
    Concealed(Concealment),
    /// A screenshot or clipboard text over the limit.
    TooLarge {
        payload: Payload,
        size: u64,
        limit: u64,
    },
    /// The machine-wide screenshot rate.
    Overloaded(String),
    /// Anything unexpected, with its text.
    Internal(String),
}

impl DesktopError {
    pub fn unsupported(feature: &str, reason: impl Into<String>) -> DesktopError {
        DesktopError::Unsupported {
            feature: feature.to_owned(),
            reason: Some(reason.into()),
        }
    }

    /// The feature refused because its target is a masked window.
    pub fn masked(feature: &str) -> DesktopError {
        DesktopError::unsupported(feature, "masked window")
    }
}
