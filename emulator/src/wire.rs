//! Small wire-format functions written from `PROTOCOL.md` alone: platform
//! envelopes, UUID v4 message ids, Unix timestamps and the `pct()` encoding of
//! session IDs in URLs.
//!
//! This module owns the platform side's idea of what a frame looks like. It
//! must never import anything from the `autogpt-shim` crate: the emulator is
//! the oracle the shim is tested against, so sharing the shim's codec would
//! let a bug in it agree with itself.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The wire version the emulator speaks, written into every envelope it sends.
pub const PROTOCOL_VERSION: &str = "1.1";

/// Path of the control connection on the platform (`PROTOCOL.md` §1.1); a data
/// connection for session `S` is this path followed by `/` and `pct(S)`.
pub const WS_PATH: &str = "/ws/local-executor";

/// Largest WebSocket message either side may send (`PROTOCOL.md` §1.4).
pub const MAX_WEBSOCKET_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// A fresh random UUID v4 in canonical lowercase hyphenated form, as the
/// platform uses for message ids.
///
/// The operating system's random source failing is treated as fatal for the
/// emulator process: without it no id would be unpredictable, and a test
/// oracle that silently reused ids could hide correlation bugs.
pub fn uuid_v4() -> String {
    let mut bytes = [0u8; 16];
    if let Err(error) = getrandom::fill(&mut bytes) {
        panic!("the operating system's random source failed: {error}");
    }
    // RFC 9562 §5.4: version 4 in the high nibble of byte 6, variant 10xx in
    // the high bits of byte 8.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex_lower(&bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Whether `text` is a UUID v4 in canonical lowercase hyphenated form, the
/// form `PROTOCOL.md` §2.1 requires for the shim's unsolicited frames.
pub fn is_canonical_uuid_v4(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return false;
    }
    for (index, &byte) in bytes.iter().enumerate() {
        let ok = match index {
            8 | 13 | 18 | 23 => byte == b'-',
            14 => byte == b'4',
            19 => matches!(byte, b'8' | b'9' | b'a' | b'b'),
            _ => byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Current wall-clock time as Unix seconds with a fractional part, the `ts`
/// of every frame.
pub fn now_ts() -> f64 {
    // A clock before 1970 is not a state worth failing a test run over: the
    // field is informational (`PROTOCOL.md` §2), so 0.0 is sent instead.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs_f64())
        .unwrap_or(0.0)
}

/// A platform→shim envelope: `{type, id, ts, version, payload}`.
///
/// `pending_capacity` is left out: it is a shim→platform field that the shim
/// ignores inbound (`PROTOCOL.md` §2), and the platform's own frames in the
/// specification's examples do not carry it.
pub fn envelope(message_type: &str, id: &str, payload: Value) -> Value {
    json!({
        "type": message_type,
        "id": id,
        "ts": now_ts(),
        "version": PROTOCOL_VERSION,
        "payload": payload,
    })
}

/// The `type` of a frame, if it is an object with a string `type`.
pub fn frame_type(frame: &Value) -> Option<&str> {
    frame.get("type").and_then(Value::as_str)
}

/// The `id` of a frame, if it is an object with a string `id`.
pub fn frame_id(frame: &Value) -> Option<&str> {
    frame.get("id").and_then(Value::as_str)
}

/// The `payload` object of a frame, if present and an object.
pub fn frame_payload(frame: &Value) -> Option<&Map<String, Value>> {
    frame.get("payload").and_then(Value::as_object)
}

/// `pct(S)` of `PROTOCOL.md` §1.1: every UTF-8 byte except ASCII letters,
/// digits and `_ . - ~` becomes `%XX` with uppercase hex.
pub fn pct_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX_UPPER[usize::from(byte >> 4)]));
            out.push(char::from(HEX_UPPER[usize::from(byte & 0x0f)]));
        }
    }
    out
}

/// Inverse of [`pct_encode`], accepting either hex case. `None` when a `%` is
/// not followed by two hex digits or the decoded bytes are not UTF-8.
pub fn pct_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let high = hex_value(*bytes.get(index + 1)?)?;
            let low = hex_value(*bytes.get(index + 2)?)?;
            out.push((high << 4) | low);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Lowercase hex of `bytes`.
pub fn hex_lower(bytes: &[u8]) -> String {
    const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &byte in bytes {
        out.push(char::from(HEX_LOWER[usize::from(byte >> 4)]));
        out.push(char::from(HEX_LOWER[usize::from(byte & 0x0f)]));
    }
    out
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_canonical_v4_and_distinct() {
        let first = uuid_v4();
        let second = uuid_v4();
        assert!(is_canonical_uuid_v4(&first), "{first}");
        assert!(is_canonical_uuid_v4(&second), "{second}");
        assert_ne!(first, second);
    }

    #[test]
    fn uuid_check_rejects_uppercase_other_versions_and_bad_variants() {
        assert!(is_canonical_uuid_v4("6f1c2a3b-4d5e-4f60-8a1b-2c3d4e5f6071"));
        assert!(!is_canonical_uuid_v4(
            "6F1C2A3B-4D5E-4F60-8A1B-2C3D4E5F6071"
        ));
        assert!(!is_canonical_uuid_v4(
            "6f1c2a3b-4d5e-1f60-8a1b-2c3d4e5f6071"
        ));
        assert!(!is_canonical_uuid_v4(
            "6f1c2a3b-4d5e-4f60-7a1b-2c3d4e5f6071"
        ));
        assert!(!is_canonical_uuid_v4("6f1c2a3b4d5e4f608a1b2c3d4e5f6071"));
    }

    #[test]
    fn pct_keeps_unreserved_and_encodes_the_rest_in_uppercase() {
        assert_eq!(pct_encode("session-1"), "session-1");
        assert_eq!(pct_encode("a:b/c d~_."), "a%3Ab%2Fc%20d~_.");
        assert_eq!(pct_encode("é"), "%C3%A9");
        assert_eq!(pct_decode("a%3Ab%2fc").as_deref(), Some("a:b/c"));
        assert_eq!(pct_decode(&pct_encode("x:é/y")).as_deref(), Some("x:é/y"));
        assert_eq!(pct_decode("%4"), None);
        assert_eq!(pct_decode("%ZZ"), None);
        assert_eq!(pct_decode("%FF"), None);
    }

    #[test]
    fn platform_envelope_has_the_five_platform_keys() {
        let frame = envelope("PING", "k1", json!({}));
        let keys: Vec<&str> = frame
            .as_object()
            .map(|object| object.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(keys.len(), 5, "{keys:?}");
        assert_eq!(frame_type(&frame), Some("PING"));
        assert_eq!(frame_id(&frame), Some("k1"));
        assert!(frame["ts"].is_f64());
        assert_eq!(frame["version"], "1.1");
    }
}
