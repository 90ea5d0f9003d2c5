//! Computer-use requests on a data connection (CAPABILITIES.md §4.2): the
//! desktop runs the operation and says what happened; here its failure
//! gets its wire code, message and `details`, and the operation its one
//! audit record.

use std::time::Instant;

use serde_json::{Map, Value, json};

use super::{Handled, audit_result, millis, operation_entry};
use crate::desktop::{Concealment, ConnectionDesktop, DesktopError, Limits, Payload};
use crate::protocol::{ErrorCode, ErrorPayload, Message};

/// What a computer-use request needs besides the request.
#[derive(Debug, Clone, Copy)]
pub struct DesktopContext<'a> {
    /// The desktop as this connection's HELLO found it.
    pub connection: &'a ConnectionDesktop,
    /// Effective `max_file_size_bytes`.
    pub max_file_size_bytes: u64,
}

/// Runs one computer-use request; `screenshot_slot` takes a slot of the
/// machine-wide screenshot rate.
pub fn handle(
    ctx: &DesktopContext<'_>,
    request_id: &str,
    message: &Message,
    screenshot_slot: &dyn Fn() -> Result<(), String>,
) -> Handled {
    let started = Instant::now();
    let limits = Limits {
        max_file_size_bytes: ctx.max_file_size_bytes,
        screenshot_slot,
    };
    let outcome = ctx.connection.handle(message, &limits);
    let error_code = outcome.reply.as_ref().err().map(code);
    let audit = operation_entry(
        message.message_type(),
        request_id,
        outcome.details,
        audit_result(error_code, None, millis(started)),
    );
    let reply = match outcome.reply {
        Ok(reply) => reply,
        Err(error) => Message::Error(payload(error)),
    };
    Handled {
        reply: Some(reply),
        audit: Some(audit),
        leftover_group: None,
        settle: None,
    }
}

fn code(error: &DesktopError) -> ErrorCode {
    match error {
        DesktopError::Disabled => ErrorCode::CapabilityNotGranted,
        DesktopError::Unsupported { .. } => ErrorCode::FeatureNotSupported,
        DesktopError::WindowStale { .. } => ErrorCode::WindowStale,
        DesktopError::OutOfBounds { .. } => ErrorCode::InputOutOfBounds,
        DesktopError::Concealed(_) => ErrorCode::ClipboardConcealed,
        DesktopError::TooLarge { .. } => ErrorCode::FileTooLarge,
        DesktopError::Overloaded(_) => ErrorCode::ShimOverloaded,
        DesktopError::Internal(_) => ErrorCode::InternalError,
    }
}

/// The `ERROR` of CAPABILITIES.md §4.2's table.
fn payload(error: DesktopError) -> ErrorPayload {
    let code = code(&error);
    let mut details = Map::new();
    let message = match error {
        DesktopError::Disabled => "Computer use is not enabled on this shim.".to_owned(),
        DesktopError::Unsupported { feature, reason } => {
            let mut message = format!("feature '{feature}' is not supported on this backend");
            details.insert("feature".into(), json!(feature));
            if let Some(reason) = reason {
                message.push_str(": ");
                message.push_str(&reason);
                details.insert("reason".into(), json!(reason));
            }
            message
        }
        DesktopError::WindowStale { window_id, known } => {
            details.insert("window_id".into(), json!(window_id));
            details.insert("hint".into(), json!("re-list windows"));
            if known {
                format!("window_id {window_id} no longer maps to a live window")
            } else {
                format!("unknown window_id '{window_id}'")
            }
        }
        DesktopError::OutOfBounds {
            coordinate,
            displays,
        } => {
            details.insert("requested_coordinate".into(), json!(coordinate));
            let displays: Vec<Value> = displays
                .iter()
                .enumerate()
                .map(|(index, r)| json!({"index": index, "origin": [r.x, r.y], "size": [r.w, r.h]}))
                .collect();
            details.insert("displays".into(), Value::Array(displays));
            format!(
                "coordinate ({}, {}) is outside the union of connected display bounds",
                coordinate[0], coordinate[1]
            )
        }
        DesktopError::Concealed(reason) => {
            let text = match reason {
                Concealment::NoWriteback => "writeback_only",
                Concealment::WritebackExpired { age_seconds } => {
                    details.insert("writeback_age_seconds".into(), json!(age_seconds));
                    "writeback_only"
                }
                Concealment::Overwritten => "writeback_overwritten",
                Concealment::PasswordManager { marker } => {
                    details.insert("marker".into(), json!(marker));
                    "concealed_type"
                }
            };
            details.insert("reason".into(), json!(text));
            format!("clipboard contents not readable: {text}")
        }
        DesktopError::TooLarge {
            payload,
            size,
            limit,
        } => {
            let what = match payload {
                Payload::Screenshot => "Screenshot",
                Payload::Clipboard => "Clipboard content",
            };
            format!("{what} is {size} bytes; limit is {limit} bytes.")
        }
        DesktopError::Overloaded(message) | DesktopError::Internal(message) => message,
    };
    let payload = ErrorPayload::new(code, message);
    if details.is_empty() {
        payload
    } else {
        payload.with_details(details)
    }
}
