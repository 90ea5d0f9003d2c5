//! Payloads of the connection itself: handshake, keepalive, status, generic
//! replies and revocation (PROTOCOL.md §4, §7.8–§7.12).

use std::num::NonZeroU64;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::protocol::fields::{FieldError, FieldResult, Fields};
use crate::protocol::ids::SessionId;
use crate::protocol::types::{
    Arch, Capability, ErrorCode, Platform, RecordingChannel, RecordingRoute,
};

/// `HELLO` (shim → platform, PROTOCOL.md §4.2). Field order follows the
/// specification's example.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hello {
    pub shim_version: String,
    pub machine_id: String,
    /// Human label, at most 128 chars.
    pub display_name: String,
    pub platform: Platform,
    pub arch: Arch,
    /// `[width, height]` of the primary display; null unless computer use is advertised.
    pub screen_resolution: Option<[i64; 2]>,
    pub capabilities: Vec<Capability>,
    /// Null on the control connection; the session root on a data connection.
    pub allowed_root: Option<String>,
    pub local_llm_models: Vec<String>,
    pub hardware_devices: Vec<Map<String, Value>>,
    pub computer_use_features: Vec<String>,
    pub computer_use_features_coarse: Vec<String>,
    pub recording_channels: Vec<RecordingChannel>,
    pub recording_routes: Vec<RecordingRoute>,
    pub protocol_version: String,
}

impl Hello {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            shim_version: f.string("shim_version")?,
            machine_id: f.string("machine_id")?,
            display_name: {
                let name = f.string_or("display_name", "")?;
                if name.chars().nth(128).is_some() {
                    return Err(FieldError::constraint(
                        "display_name",
                        "must be at most 128 characters long",
                    ));
                }
                name
            },
            platform: f.enumeration("platform")?,
            arch: f.enumeration("arch")?,
            screen_resolution: f.opt_int_array("screen_resolution")?,
            capabilities: f.enums_or_empty("capabilities")?,
            allowed_root: f.opt_string("allowed_root")?,
            local_llm_models: f.strings_or_empty("local_llm_models")?,
            hardware_devices: f.raw_objects_or_empty("hardware_devices")?,
            computer_use_features: f.strings_or_empty("computer_use_features")?,
            computer_use_features_coarse: f.strings_or_empty("computer_use_features_coarse")?,
            recording_channels: f.enums_or_empty("recording_channels")?,
            recording_routes: f.enums_or_empty("recording_routes")?,
            protocol_version: f.string_or("protocol_version", "1.1")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// Default `max_file_size_bytes` of a `HELLO_ACK` (10 MiB).
pub const DEFAULT_MAX_FILE_SIZE_BYTES: NonZeroU64 = match NonZeroU64::new(10_485_760) {
    Some(n) => n,
    None => NonZeroU64::MIN,
};
/// Default `command_timeout_seconds` of a `HELLO_ACK`.
pub const DEFAULT_COMMAND_TIMEOUT_SECONDS: NonZeroU64 = match NonZeroU64::new(30) {
    Some(n) => n,
    None => NonZeroU64::MIN,
};
/// Default `max_concurrent` of a `HELLO_ACK`.
pub const DEFAULT_MAX_CONCURRENT: NonZeroU64 = match NonZeroU64::new(4) {
    Some(n) => n,
    None => NonZeroU64::MIN,
};

/// `HELLO_ACK` (platform → shim, PROTOCOL.md §4.3). Field order follows the
/// specification's example.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HelloAck {
    pub session_id: Option<SessionId>,
    pub connection_id: Option<String>,
    /// Checked during negotiation, not parsing (PROTOCOL.md §4.4 step 8).
    pub protocol_version: String,
    /// Untrusted names: may contain capabilities never advertised (checked
    /// at §4.4 step 7), so kept as strings.
    pub granted_capabilities: Vec<String>,
    pub max_file_size_bytes: NonZeroU64,
    pub command_timeout_seconds: NonZeroU64,
    pub max_concurrent: NonZeroU64,
}

impl HelloAck {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            session_id: opt_session_id(&mut f, "session_id")?,
            connection_id: f.opt_string("connection_id")?,
            protocol_version: f.string_or("protocol_version", "1.1")?,
            granted_capabilities: f.strings("granted_capabilities")?,
            max_file_size_bytes: f
                .positive_or("max_file_size_bytes", DEFAULT_MAX_FILE_SIZE_BYTES)?,
            command_timeout_seconds: f
                .positive_or("command_timeout_seconds", DEFAULT_COMMAND_TIMEOUT_SECONDS)?,
            max_concurrent: f.positive_or("max_concurrent", DEFAULT_MAX_CONCURRENT)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// Reads a required `SESSION_ID` field.
pub(crate) fn session_id(f: &mut Fields, key: &str) -> FieldResult<SessionId> {
    let text = f.string(key)?;
    SessionId::parse(&text).ok_or_else(|| session_id_error(f, key))
}

/// Reads a nullable `SESSION_ID` field (the empty string is invalid, not null).
pub(crate) fn opt_session_id(f: &mut Fields, key: &str) -> FieldResult<Option<SessionId>> {
    match f.opt_string(key)? {
        None => Ok(None),
        Some(text) => SessionId::parse(&text)
            .map(Some)
            .ok_or_else(|| session_id_error(f, key)),
    }
}

fn session_id_error(f: &Fields, key: &str) -> FieldError {
    FieldError::constraint(
        f.field_path(key),
        "must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,255}$",
    )
}

/// A payload with no fields: `PING`, `PONG` and the parameterless
/// computer-use requests. Any key makes the frame invalid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Empty {}

impl Empty {
    pub(crate) fn decode(f: Fields) -> FieldResult<Self> {
        f.finish()?;
        Ok(Self {})
    }
}

/// `ACK` (PROTOCOL.md §7.8). The shim always sends `ok: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Ack {
    pub ok: bool,
}

impl Ack {
    /// The only `ACK` the shim sends.
    pub const OK: Ack = Ack { ok: true };

    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            ok: f.bool_or("ok", true)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// The `code` of an `ERROR`: one of ours, or (inbound only) any other string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorCodeText {
    Known(ErrorCode),
    Other(String),
}

impl ErrorCodeText {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Known(code) => code.as_str(),
            Self::Other(text) => text,
        }
    }
}

impl From<ErrorCode> for ErrorCodeText {
    fn from(code: ErrorCode) -> Self {
        Self::Known(code)
    }
}

impl Serialize for ErrorCodeText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// `ERROR` (PROTOCOL.md §7.9).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorPayload {
    pub code: ErrorCodeText,
    /// Human-readable; not part of the contract.
    pub message: String,
    /// Always false from the shim.
    pub fatal: bool,
    pub details: Option<Map<String, Value>>,
}

impl ErrorPayload {
    /// An error as the shim sends it (`fatal: false`).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            fatal: false,
            details: None,
        }
    }

    /// Adds `details`.
    pub fn with_details(mut self, details: Map<String, Value>) -> Self {
        self.details = Some(details);
        self
    }

    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let code = f.string("code")?;
        let v = Self {
            code: match ErrorCode::parse(&code) {
                Some(known) => ErrorCodeText::Known(known),
                None => ErrorCodeText::Other(code),
            },
            message: f.string("message")?,
            fatal: f.bool_or("fatal", false)?,
            details: f.opt_raw_object("details")?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `STATUS` (shim → platform, PROTOCOL.md §7.11).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    pub in_flight: u64,
    pub max_concurrent: u64,
    pub queue_depth: u64,
    pub audit_log_bytes: u64,
    pub uptime_seconds: f64,
}

impl Status {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            in_flight: f.nonneg("in_flight")?,
            max_concurrent: f.nonneg("max_concurrent")?,
            queue_depth: f.nonneg_or("queue_depth", 0)?,
            audit_log_bytes: f.nonneg_or("audit_log_bytes", 0)?,
            uptime_seconds: f.number_or("uptime_seconds", 0.0)?,
        };
        f.finish()?;
        Ok(v)
    }
}

/// `SESSION_REVOKED` (platform → shim, PROTOCOL.md §7.12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionRevoked {
    /// Known values `another_shim_connected`, `user_revoked`,
    /// `platform_shutdown`; any string is handled the same way.
    pub reason: String,
    pub new_shim_machine_id: Option<String>,
}

impl SessionRevoked {
    pub(crate) fn decode(mut f: Fields) -> FieldResult<Self> {
        let v = Self {
            reason: f.string("reason")?,
            new_shim_machine_id: f.opt_string("new_shim_machine_id")?,
        };
        f.finish()?;
        Ok(v)
    }
}
