//! The wire protocol 1.1, sans-IO: bytes in, typed frames out, and back.
//!
//! This module owns framing rules, inbound validation (PROTOCOL.md §2.3–§2.4),
//! the typed messages of PROTOCOL.md and CONTROL.md, version negotiation,
//! close-code classification and the backpressure formula. It never touches a
//! socket, a file or a clock: callers pass bytes, timestamps and random
//! samples in. It must never execute, admit or audit anything — an invalid
//! frame only ever yields a [`DecodeError`].
//!
//! Where to look: `frame` parses and writes the envelope, `json` is the
//! strict JSON reader, `payload` holds one struct per message, `types` the
//! closed vocabularies, `error` the decoding failures and their mapping to
//! an `ERROR` reply.

pub(crate) mod backpressure;
mod close;
mod error;
mod fields;
mod frame;
pub(crate) mod hello_rules;
mod ids;
pub(crate) mod json;
mod payload;
mod types;
pub(crate) mod version;
mod wire_enum;

/// The reconnection delays and the backpressure counters.
pub use backpressure::{Backoff, Counters};
/// What a close code means for the connection and the daemon.
pub use close::{CloseAction, ShimClose, TerminalClose, classify_close};
/// Decoding and encoding failures, and the `ERROR` reply an invalid frame gets.
pub use error::{DecodeError, EncodeError, ErrorReply, Invalid};
/// Which payload field is wrong, and how.
pub use fields::{FieldError, FieldProblem};
/// The envelope: bytes to a typed frame and back.
pub use frame::{Encoded, Frame, OVERSIZE_MESSAGE, decode, decode_text, encode, encode_response};
/// The `HELLO` fields the configuration bounds.
pub use hello_rules::HelloField;
/// Message and session ids.
pub use ids::{MAX_MESSAGE_ID_BYTES, SessionId, uuid_v4_from_bytes};
/// The strict JSON reader's bounds.
pub use json::{MAX_FRAME_JSON_VALUES, MAX_JSON_DEPTH};
/// One struct per message type, and the `Message` enum over them.
pub use payload::*;
/// The closed vocabularies of the wire.
pub use types::{
    Arch, Capability, ChatRole, ClipboardFormat, Encoding, ErrorCode, FinishReason, ImageFormat,
    InputActionKind, KeyDirection, MessageType, Modifier, MouseButton, PermissionState, Platform,
    ReadFormat, RecordingChannel, RecordingRoute, ScrollDirection, Shell,
};
/// Protocol versions and their negotiation.
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
