//! The wire protocol 1.1, sans-IO: bytes in, typed frames out, and back.
//!
//! This module owns framing rules, inbound validation (PROTOCOL.md §2.3–§2.4),
//! the typed messages of PROTOCOL.md and CONTROL.md, version negotiation,
//! close-code classification and the backpressure formula. It never touches a
//! socket, a file or a clock: callers pass bytes, timestamps and random
//! samples in. It must never execute, admit or audit anything — an invalid
//! frame only ever yields a [`DecodeError`].
//!
//! Where to look: [`frame`] parses and writes the envelope, [`json`] is the
//! strict JSON reader, `payload` holds one struct per message, [`types`] the
//! closed vocabularies, [`error`] the decoding failures and their mapping to
//! an `ERROR` reply.

pub mod backpressure;
pub mod close;
pub mod error;
mod fields;
pub mod frame;
pub mod hello_rules;
pub mod ids;
pub mod json;
mod payload;
pub mod types;
pub mod version;
mod wire_enum;

pub use backpressure::{Backoff, Counters};
pub use close::{CloseAction, ShimClose, TerminalClose, classify_close};
pub use error::{DecodeError, EncodeError, ErrorReply, Invalid};
pub use fields::{FieldError, FieldProblem};
pub use frame::{Frame, OVERSIZE_MESSAGE, decode, encode, encode_response};
pub use hello_rules::HelloField;
pub use ids::{MAX_MESSAGE_ID_BYTES, SessionId, uuid_v4_from_bytes};
pub use json::{MAX_FRAME_JSON_VALUES, MAX_JSON_DEPTH};
pub use payload::*;
pub use types::{
    Arch, Capability, ChatRole, ClipboardFormat, Encoding, ErrorCode, FinishReason, ImageFormat,
    InputActionKind, KeyDirection, MessageType, Modifier, MouseButton, PermissionState, Platform,
    ReadFormat, RecordingChannel, RecordingRoute, ScrollDirection, Shell,
};
pub use version::{Negotiation, SHIM_MAX_VERSION, Version, negotiate};

/// The wire version the shim speaks and writes into every frame.
pub const WIRE_VERSION: &str = "1.1";

/// Largest WebSocket message in either direction: 16 MiB.
pub const MAX_WEBSOCKET_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Room kept for the envelope when sizing content caps: 64 KiB.
const ENVELOPE_RESERVE_BYTES: usize = 64 * 1024;

/// Largest raw text a response may carry (worst-case escaping is 6×).
pub const MAX_WIRE_TEXT_CONTENT_BYTES: usize =
    (MAX_WEBSOCKET_MESSAGE_BYTES - ENVELOPE_RESERVE_BYTES) / 6;

/// Largest raw binary a response may carry as base64.
pub const MAX_WIRE_BASE64_CONTENT_BYTES: usize =
    (MAX_WEBSOCKET_MESSAGE_BYTES - ENVELOPE_RESERVE_BYTES) * 3 / 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_caps_match_the_specified_constants() {
        assert_eq!(MAX_WEBSOCKET_MESSAGE_BYTES, 16_777_216);
        assert_eq!(MAX_WIRE_TEXT_CONTENT_BYTES, 2_785_280);
        assert_eq!(MAX_WIRE_BASE64_CONTENT_BYTES, 12_533_760);
    }
}
