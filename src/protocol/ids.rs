//! Identifier types of the wire: `SESSION_ID` and message ids.
//!
//! A [`SessionId`] can only be built from a string that matches the protocol
//! pattern, so code holding one never re-checks it (and never builds a URL or
//! file name from an unchecked string). Message ids have no format, only a
//! length bound ([`MAX_MESSAGE_ID_BYTES`]). Randomness is not drawn here: UUIDs
//! are formatted from bytes the caller supplies, keeping this module sans-IO.

use std::fmt;

use serde::Serialize;

/// A `SESSION_ID`: `^[A-Za-z0-9][A-Za-z0-9._:-]{0,255}$` over the whole
/// value (PROTOCOL.md §2.2).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// Longest accepted id, in bytes (all accepted characters are ASCII).
    pub const MAX_LEN: usize = 256;

    /// Accepts `text` only if it matches the `SESSION_ID` pattern exactly.
    pub fn parse(text: &str) -> Option<Self> {
        Self::is_valid(text).then(|| Self(text.to_owned()))
    }

    /// The pattern check on its own.
    pub fn is_valid(text: &str) -> bool {
        let bytes = text.as_bytes();
        match bytes.split_first() {
            Some((first, rest)) => {
                first.is_ascii_alphanumeric()
                    && rest.len() < Self::MAX_LEN
                    && rest.iter().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
                    })
            }
            None => false,
        }
    }

    /// The id as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Longest usable message `id`, in bytes. A response repeats its request's
/// id, so an unbounded id could make an answer larger than a WebSocket
/// message may be; a frame whose id is longer has no usable id and is
/// dropped unanswered (PROTOCOL.md §2.4). UUIDs, which the platform sends,
/// are 36 bytes.
pub const MAX_MESSAGE_ID_BYTES: usize = 1024;

/// Formats 16 random bytes as a version-4 UUID in canonical lowercase
/// hyphenated form (the id of unsolicited frames, PROTOCOL.md §2.1).
pub fn uuid_v4_from_bytes(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_id_pattern_is_matched_against_the_whole_value() {
        for ok in ["s", "session-1", "a.b_c:d-e", "0", &"a".repeat(256)] {
            assert!(SessionId::is_valid(ok), "{ok:?}");
        }
        for bad in [
            "",
            "-a",
            ".a",
            "a/b",
            "a?b",
            "a%2F",
            "a b",
            "a\n",
            "../control?admin=true",
            &"a".repeat(257),
            "é",
        ] {
            assert!(!SessionId::is_valid(bad), "{bad:?}");
        }
    }

    #[test]
    fn uuid_v4_has_version_and_variant_bits() {
        let id = uuid_v4_from_bytes([0xff; 16]);
        assert_eq!(id, "ffffffff-ffff-4fff-bfff-ffffffffffff");
        let id = uuid_v4_from_bytes([0; 16]);
        assert_eq!(id, "00000000-0000-4000-8000-000000000000");
    }
}
