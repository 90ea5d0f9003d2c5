//! Protocol versions: parsing, negotiation and the 4426 close reason
//! (PROTOCOL.md §3).
//!
//! Version numbers are compared as arbitrary-size decimal integers (leading
//! zeros ignored), so no input can overflow; only ASCII digits are accepted.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

/// A parsed `"<major>.<minor>"` version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    major: Cow<'static, str>,
    minor: Cow<'static, str>,
}

/// The shim's maximum (and only) version, `1.1`.
pub const SHIM_MAX_VERSION: Version = Version {
    major: Cow::Borrowed("1"),
    minor: Cow::Borrowed("1"),
};

impl Version {
    /// Parses `"<digits>.<digits>"`; anything else (`"1"`, `"v1.0"`,
    /// `"1.0.1"`, `" 1.0"`, `"+1.0"`, `"1_0.1"`) is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let (major, minor) = text.split_once('.')?;
        Some(Self {
            major: Cow::Owned(normalize(major)?),
            minor: Cow::Owned(normalize(minor)?),
        })
    }

    /// True when both versions have the same major number.
    pub fn same_major(&self, other: &Version) -> bool {
        self.major_digits() == other.major_digits()
    }

    fn major_digits(&self) -> &str {
        &self.major
    }

    fn minor_digits(&self) -> &str {
        &self.minor
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major_digits(), self.minor_digits())
    }
}

/// Strips leading zeros from an all-digit string ("" → None, "000" → "0").
fn normalize(part: &str) -> Option<String> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let trimmed = part.trim_start_matches('0');
    Some(if trimmed.is_empty() { "0" } else { trimmed }.to_owned())
}

/// Compares normalized decimal strings numerically.
fn cmp_decimal(a: &str, b: &str) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Outcome of negotiating against `HELLO_ACK.protocol_version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Negotiation {
    /// Same major: the negotiated version string, `"<a>.<min(b, d)>"`.
    Agreed(String),
    /// The platform's version does not parse: close 4426
    /// `Invalid platform protocol version`, terminal.
    Malformed,
    /// Different majors: close 4426 with `mismatch_close_reason`, terminal.
    MajorMismatch,
}

/// Negotiates `shim` (our maximum) against the platform's version text.
pub fn negotiate(shim: &Version, platform: &str) -> Negotiation {
    let Some(theirs) = Version::parse(platform) else {
        return Negotiation::Malformed;
    };
    if !shim.same_major(&theirs) {
        return Negotiation::MajorMismatch;
    }
    let minor = match cmp_decimal(shim.minor_digits(), theirs.minor_digits()) {
        Ordering::Greater => theirs.minor_digits(),
        _ => shim.minor_digits(),
    };
    Negotiation::Agreed(format!("{}.{minor}", shim.major_digits()))
}

/// Largest close reason a WebSocket close frame can carry, in bytes.
pub const MAX_CLOSE_REASON_BYTES: usize = 123;

/// The 4426 close reason for a major mismatch, fitted into 123 bytes as the
/// hardening note of PROTOCOL.md §3.2 requires.
pub fn mismatch_close_reason(shim_max: &str, platform_max: &str) -> String {
    for hint in ["upgrade the older side", ""] {
        let text = format!(
            "{{\"error\":\"PROTOCOL_VERSION_MISMATCH\",\"shim_max\":{},\"platform_max\":{},\"hint\":{}}}",
            json_string(shim_max),
            json_string(platform_max),
            json_string(hint)
        );
        if text.len() <= MAX_CLOSE_REASON_BYTES {
            return text;
        }
    }
    "PROTOCOL_VERSION_MISMATCH".to_owned()
}

fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        Version::parse(text).unwrap()
    }

    fn agreed(shim: &str, platform: &str) -> Negotiation {
        negotiate(&v(shim), platform)
    }

    #[test]
    fn negotiation_takes_the_lower_minor_of_the_same_major() {
        let ok = |s: &str| Negotiation::Agreed(s.to_owned());
        assert_eq!(agreed("1.0", "1.0"), ok("1.0"));
        assert_eq!(agreed("1.2", "1.7"), ok("1.2"));
        assert_eq!(agreed("1.7", "1.2"), ok("1.2"));
        assert_eq!(agreed("1.1", "1.9"), ok("1.1"));
        assert_eq!(agreed("1.1", "1.0"), ok("1.0"));
        assert_eq!(agreed("1.1", "01.1"), ok("1.1"));
        assert_eq!(agreed("1.1", "1.0000000000000000000000009"), ok("1.1"));
        assert_eq!(negotiate(&SHIM_MAX_VERSION, "1.0"), ok("1.0"));
        assert_eq!(negotiate(&SHIM_MAX_VERSION, "1.4"), ok("1.1"));
    }

    #[test]
    fn different_majors_do_not_negotiate() {
        assert_eq!(agreed("1.5", "2.0"), Negotiation::MajorMismatch);
        assert_eq!(agreed("2.0", "1.5"), Negotiation::MajorMismatch);
        assert_eq!(
            negotiate(&SHIM_MAX_VERSION, "99999999999999999999999.1"),
            Negotiation::MajorMismatch
        );
    }

    #[test]
    fn version_parsing_accepts_ascii_digits_only() {
        for bad in [
            "1", "v1.0", "1.0.1", " 1.0", "1.0 ", "+1.0", "1_0.1", "", ".", "1.", ".1", "١.١",
        ] {
            assert_eq!(Version::parse(bad), None, "{bad:?}");
            assert_eq!(negotiate(&SHIM_MAX_VERSION, bad), Negotiation::Malformed);
        }
        assert_eq!(SHIM_MAX_VERSION.to_string(), "1.1");
        assert_eq!(v("007.010").to_string(), "7.10");
    }

    #[test]
    fn mismatch_reason_fits_a_close_frame() {
        let typical = mismatch_close_reason("1.1", "2.0");
        assert_eq!(
            typical,
            r#"{"error":"PROTOCOL_VERSION_MISMATCH","shim_max":"1.1","platform_max":"2.0","hint":"upgrade the older side"}"#
        );
        assert_eq!(typical.len(), 107);
        let longer = mismatch_close_reason("1.1", "2.00000000000000000000");
        assert!(longer.len() <= MAX_CLOSE_REASON_BYTES);
        assert!(longer.ends_with(r#""hint":""}"#), "{longer}");
        let huge = mismatch_close_reason("1.1", &format!("2.{}", "0".repeat(200)));
        assert_eq!(huge, "PROTOCOL_VERSION_MISMATCH");
    }
}
