//! The handshake from the platform's side: checking a shim's `HELLO`
//! (`PROTOCOL.md` §4.2, `CONTROL.md` §3.1) and building the `HELLO_ACK`
//! (`PROTOCOL.md` §4.3), including deliberately wrong acks for the shim's
//! validation tests (§4.4).
//!
//! This module owns the reading of the specification's handshake tables. It
//! never touches a socket (`conn` sends what it builds) and never accepts a
//! HELLO it cannot fully account for: every key is checked, unknown ones are
//! reported, so the shim's wire output is pinned as well as its behaviour.
//!
//! On top of the specification it applies the platform's own limits, which
//! the platform enforces by closing the connection ([`HelloError::close`]):
//! `machine_id` at most 128 chars matching `^[A-Za-z0-9][A-Za-z0-9._:-]*$`;
//! `display_name` at most 128 chars without `<`, `>` or control characters;
//! `shim_version` at most 64 chars matching `^[A-Za-z0-9][A-Za-z0-9._+-]*$`;
//! `allowed_root` non-empty on a data connection (null on the control
//! connection), at most 4096 chars without `<`, `>` or control characters;
//! the whole HELLO at most [`MAX_HELLO_BYTES`], sent within the HELLO
//! deadline ([`HELLO_DEADLINE`] by default). An invalid HELLO is closed with
//! 4400, a late one with 4408, one of another protocol major with 4426.

use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::strict::close_reason;
use crate::wire;

/// Largest HELLO the platform accepts, in bytes of the message.
pub const MAX_HELLO_BYTES: usize = 64 * 1024;

/// How long after the upgrade the platform waits for the HELLO.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(10);

/// The platform's close code for an invalid HELLO.
pub const CLOSE_INVALID_HELLO: u16 = 4400;

/// The platform's close code for a HELLO that did not come in time.
pub const CLOSE_HELLO_LATE: u16 = 4408;

/// The platform's close code for a HELLO of another protocol major.
pub const CLOSE_VERSION_MISMATCH: u16 = 4426;

/// What kind of shim connection a request path names (`PROTOCOL.md` §1.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnKind {
    /// The control connection: exactly the base path.
    Control,
    /// A data connection for the session named by the percent-decoded last
    /// path segment.
    Data {
        /// The decoded session ID.
        session_id: String,
    },
    /// Any other path; kind-specific checks are skipped.
    Other,
}

impl ConnKind {
    /// Classifies an upgrade request path (a query string, if any, is
    /// ignored) against the base path `ws_path`.
    pub fn from_path(path: &str, ws_path: &str) -> ConnKind {
        let path = path.split_once('?').map_or(path, |(before, _)| before);
        let base = ws_path.trim_end_matches('/');
        if path == base {
            return ConnKind::Control;
        }
        let Some(rest) = path
            .strip_prefix(base)
            .and_then(|rest| rest.strip_prefix('/'))
        else {
            return ConnKind::Other;
        };
        if rest.is_empty() || rest.contains('/') {
            return ConnKind::Other;
        }
        match wire::pct_decode(rest) {
            Some(session_id) => ConnKind::Data { session_id },
            None => ConnKind::Other,
        }
    }
}

/// Why a HELLO was not accepted.
#[derive(Debug, Clone, PartialEq)]
pub enum HelloError {
    /// No frame arrived within the timeout.
    Timeout,
    /// The connection ended before a frame arrived.
    Disconnected,
    /// The first frame was not a JSON text; carries its text (lossy UTF-8).
    NotJson(String),
    /// The first frame was larger than [`MAX_HELLO_BYTES`]; carries its
    /// size in bytes.
    TooLarge(usize),
    /// The HELLO's `protocol_version` names another major version than the
    /// platform's 1.
    VersionMismatch {
        /// The frame as received.
        frame: Value,
        /// The `protocol_version` it carried.
        version: String,
    },
    /// A JSON frame arrived but is not a valid HELLO; every problem found is
    /// listed, each naming the field.
    Invalid {
        /// The frame as received.
        frame: Value,
        /// One human-readable line per violated rule.
        problems: Vec<String>,
    },
}

impl fmt::Display for HelloError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HelloError::Timeout => write!(formatter, "no HELLO within the timeout"),
            HelloError::Disconnected => {
                write!(formatter, "the connection ended before a HELLO arrived")
            }
            HelloError::NotJson(text) => write!(formatter, "first frame is not JSON: {text:?}"),
            HelloError::TooLarge(bytes) => write!(
                formatter,
                "HELLO of {bytes} bytes, over the platform's {MAX_HELLO_BYTES}"
            ),
            HelloError::VersionMismatch { version, .. } => write!(
                formatter,
                "HELLO speaks protocol {version}; the platform speaks {}",
                wire::PROTOCOL_VERSION
            ),
            HelloError::Invalid { problems, .. } => {
                write!(formatter, "invalid HELLO: {}", problems.join("; "))
            }
        }
    }
}

impl std::error::Error for HelloError {}

impl HelloError {
    /// The close code and reason the platform ends the connection with for
    /// this HELLO; `None` when the connection is already gone.
    pub fn close(&self) -> Option<(u16, String)> {
        let (code, reason) = match self {
            HelloError::Disconnected => return None,
            HelloError::Timeout => (
                CLOSE_HELLO_LATE,
                "No HELLO in time after the upgrade".to_owned(),
            ),
            HelloError::NotJson(_) => (
                CLOSE_INVALID_HELLO,
                "Invalid HELLO: the first message is not a JSON object".to_owned(),
            ),
            HelloError::TooLarge(bytes) => (
                CLOSE_INVALID_HELLO,
                format!("Invalid HELLO: {bytes} bytes, over the limit of {MAX_HELLO_BYTES}"),
            ),
            HelloError::VersionMismatch { version, .. } => (
                CLOSE_VERSION_MISMATCH,
                format!(
                    "Unsupported protocol version {version}: this platform speaks {}",
                    wire::PROTOCOL_VERSION
                ),
            ),
            HelloError::Invalid { problems, .. } => (
                CLOSE_INVALID_HELLO,
                format!(
                    "Invalid HELLO: {}",
                    problems.first().map_or("rejected", String::as_str)
                ),
            ),
        };
        Some((code, close_reason(&reason)))
    }
}

/// Checks the first message of a connection, `text` as received and `json`
/// its parse (if it is JSON), the way the platform does: size, protocol
/// major, then every rule of [`hello_problems`]. Returns the HELLO when it
/// is valid.
pub fn check_hello(text: &str, json: Option<&Value>, kind: &ConnKind) -> Result<Value, HelloError> {
    if text.len() > MAX_HELLO_BYTES {
        return Err(HelloError::TooLarge(text.len()));
    }
    let Some(frame) = json else {
        return Err(HelloError::NotJson(text.to_owned()));
    };
    let version = wire::frame_payload(frame)
        .and_then(|payload| payload.get("protocol_version"))
        .and_then(Value::as_str);
    if let Some(version) = version {
        if major_of(version).is_some_and(|major| Some(major) != major_of(wire::PROTOCOL_VERSION)) {
            return Err(HelloError::VersionMismatch {
                frame: frame.clone(),
                version: version.to_owned(),
            });
        }
    }
    let problems = hello_problems(frame, kind);
    if problems.is_empty() {
        Ok(frame.clone())
    } else {
        Err(HelloError::Invalid {
            frame: frame.clone(),
            problems,
        })
    }
}

/// The major of a `"<major>.<minor>"` version (ASCII digits only).
fn major_of(version: &str) -> Option<u64> {
    let (major, minor) = version.split_once('.')?;
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_digit());
    if !digits(major) || !digits(minor) {
        return None;
    }
    major.parse().ok()
}

/// Capability names a shim may advertise (`PROTOCOL.md` §4.2.4), with their
/// rank in the required order; the hardware capabilities share one rank.
const CAPABILITY_ORDER: &[(&str, u8)] = &[
    ("shell", 0),
    ("files", 1),
    ("computer_use", 2),
    ("local_llm", 3),
    ("hardware_serial", 4),
    ("hardware_usb", 4),
    ("hardware_gpio", 4),
    ("directory_browse", 5),
];

const HELLO_ENVELOPE_KEYS: &[&str] =
    &["type", "id", "ts", "version", "pending_capacity", "payload"];

const HELLO_PAYLOAD_KEYS: &[&str] = &[
    "shim_version",
    "protocol_version",
    "machine_id",
    "display_name",
    "platform",
    "arch",
    "screen_resolution",
    "capabilities",
    "allowed_root",
    "local_llm_models",
    "hardware_devices",
    "computer_use_features",
    "computer_use_features_coarse",
    "recording_channels",
    "recording_routes",
];

const COARSE_FEATURES: &[&str] = &[
    "screenshot",
    "input",
    "windows",
    "apps",
    "clipboard",
    "permissions",
];

/// Checks a frame against the HELLO rules of `PROTOCOL.md` §2.1 and §4.2
/// (and `CONTROL.md` §3.1 for a control connection). Returns every problem
/// found; an empty list means the HELLO is valid.
pub fn hello_problems(frame: &Value, kind: &ConnKind) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(envelope) = frame.as_object() else {
        return vec!["frame is not a JSON object".to_owned()];
    };
    check_exact_keys("envelope", envelope, HELLO_ENVELOPE_KEYS, &mut problems);
    if wire::frame_type(frame) != Some("HELLO") {
        problems.push(format!(
            "type is {}, expected \"HELLO\"",
            show(envelope.get("type"))
        ));
    }
    match envelope.get("id").and_then(Value::as_str) {
        Some(id) if wire::is_canonical_uuid_v4(id) => {}
        _ => problems.push(format!(
            "id is {}, expected a lowercase canonical UUID v4",
            show(envelope.get("id"))
        )),
    }
    match envelope.get("ts") {
        // `is_f64` is true only for a number written with a fraction or an
        // exponent, which is what §2.1 asks of `ts`.
        Some(Value::Number(number)) if number.is_f64() => {
            if !number.as_f64().is_some_and(|ts| ts.is_finite() && ts > 0.0) {
                problems.push(format!("ts is {number}, expected a positive Unix time"));
            }
        }
        other => problems.push(format!(
            "ts is {}, expected a number with a fractional part",
            show(other)
        )),
    }
    if envelope.get("version") != Some(&json!(wire::PROTOCOL_VERSION)) {
        problems.push(format!(
            "version is {}, expected \"1.1\"",
            show(envelope.get("version"))
        ));
    }
    if envelope.get("pending_capacity") != Some(&Value::Null) {
        problems.push(format!(
            "pending_capacity is {}, expected null",
            show(envelope.get("pending_capacity"))
        ));
    }
    match envelope.get("payload").and_then(Value::as_object) {
        Some(payload) => payload_problems(payload, kind, &mut problems),
        None => problems.push(format!(
            "payload is {}, expected an object",
            show(envelope.get("payload"))
        )),
    }
    problems
}

fn payload_problems(payload: &Map<String, Value>, kind: &ConnKind, problems: &mut Vec<String>) {
    check_exact_keys("payload", payload, HELLO_PAYLOAD_KEYS, problems);

    match payload.get("shim_version").and_then(Value::as_str) {
        Some(version)
            if is_semver(version)
                && version.chars().count() <= 64
                && is_name(version, &['.', '_', '+', '-']) => {}
        _ => problems.push(format!(
            "shim_version is {}, expected a semantic version of at most 64 chars matching ^[A-Za-z0-9][A-Za-z0-9._+-]*$",
            show(payload.get("shim_version"))
        )),
    }
    if payload.get("protocol_version") != Some(&json!(wire::PROTOCOL_VERSION)) {
        problems.push(format!(
            "protocol_version is {}, expected \"1.1\"",
            show(payload.get("protocol_version"))
        ));
    }
    match payload.get("machine_id").and_then(Value::as_str) {
        Some(id) if id.chars().count() <= 128 && is_name(id, &['.', '_', ':', '-']) => {}
        _ => problems.push(format!(
            "machine_id is {}, expected at most 128 chars matching ^[A-Za-z0-9][A-Za-z0-9._:-]*$",
            show(payload.get("machine_id"))
        )),
    }
    match payload.get("display_name").and_then(Value::as_str) {
        Some(name) if name.chars().count() <= 128 && is_plain_text(name) => {}
        _ => problems.push(format!(
            "display_name is {}, expected at most 128 chars without <, > or control characters",
            show(payload.get("display_name"))
        )),
    }
    check_enum(
        payload,
        "platform",
        &["darwin", "linux", "windows", "wsl2"],
        problems,
    );
    check_enum(payload, "arch", &["x86_64", "arm64"], problems);

    let capabilities = capability_problems(payload.get("capabilities"), problems);
    let has = |name: &str| capabilities.iter().any(|capability| capability == name);

    match payload.get("screen_resolution") {
        Some(Value::Null) => {}
        Some(Value::Array(pair))
            if pair.len() == 2 && pair.iter().all(|side| side.as_u64().is_some_and(|n| n > 0)) =>
        {
            if !has("computer_use") {
                problems.push(
                    "screen_resolution must be null unless computer_use is advertised".to_owned(),
                );
            }
        }
        other => problems.push(format!(
            "screen_resolution is {}, expected null or [width, height]",
            show(other)
        )),
    }

    match kind {
        ConnKind::Control => {
            if payload.get("allowed_root") != Some(&Value::Null) {
                problems.push(format!(
                    "allowed_root is {} on the control connection, expected null",
                    show(payload.get("allowed_root"))
                ));
            }
            if !has("directory_browse") {
                problems
                    .push("capabilities of a control connection lack directory_browse".to_owned());
            }
        }
        ConnKind::Data { .. } => {
            match payload.get("allowed_root").and_then(Value::as_str) {
                Some(root)
                    if is_absolute(root) && root.chars().count() <= 4096 && is_plain_text(root) => {}
                _ => problems.push(format!(
                    "allowed_root is {} on a data connection, expected an absolute path of at most 4096 chars without <, > or control characters",
                    show(payload.get("allowed_root"))
                )),
            }
            if has("directory_browse") {
                problems.push("a data connection advertised directory_browse".to_owned());
            }
        }
        ConnKind::Other => match payload.get("allowed_root") {
            Some(Value::Null | Value::String(_)) => {}
            other => problems.push(format!(
                "allowed_root is {}, expected a string or null",
                show(other)
            )),
        },
    }

    let models = string_list(payload, "local_llm_models", problems);
    if has("local_llm") && models.is_empty() {
        problems.push("local_llm is advertised with an empty local_llm_models".to_owned());
    }
    if !has("local_llm") && !models.is_empty() {
        problems.push("local_llm_models must be [] unless local_llm is advertised".to_owned());
    }

    match payload.get("hardware_devices") {
        Some(Value::Array(devices)) if devices.iter().all(Value::is_object) => {}
        other => problems.push(format!(
            "hardware_devices is {}, expected a list of objects",
            show(other)
        )),
    }

    let features = string_list(payload, "computer_use_features", problems);
    let coarse = string_list(payload, "computer_use_features_coarse", problems);
    if !has("computer_use") && (!features.is_empty() || !coarse.is_empty()) {
        problems.push(
            "computer_use_features and computer_use_features_coarse must be [] unless computer_use is advertised"
                .to_owned(),
        );
    }
    for bucket in &coarse {
        if !COARSE_FEATURES.contains(&bucket.as_str()) {
            problems.push(format!("unknown coarse computer-use feature {bucket:?}"));
        }
    }

    for key in ["recording_channels", "recording_routes"] {
        if payload.get(key) != Some(&json!([])) {
            problems.push(format!("{key} is {}, expected []", show(payload.get(key))));
        }
    }
}

/// Checks the capability list's names, order and uniqueness; returns the
/// names found (whatever their validity) for the cross-field checks.
fn capability_problems(value: Option<&Value>, problems: &mut Vec<String>) -> Vec<String> {
    let Some(Value::Array(items)) = value else {
        problems.push(format!("capabilities is {}, expected a list", show(value)));
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut last_rank = None;
    for item in items {
        let Some(name) = item.as_str() else {
            problems.push(format!("capability {item} is not a string"));
            continue;
        };
        if names.iter().any(|seen: &String| seen == name) {
            problems.push(format!("capability {name:?} is listed twice"));
        }
        match CAPABILITY_ORDER.iter().find(|(known, _)| *known == name) {
            Some(&(_, rank)) => {
                if last_rank.is_some_and(|last| rank < last) {
                    problems.push(format!(
                        "capability {name:?} is out of order (shell, files, computer_use, local_llm, hardware_*, directory_browse)"
                    ));
                }
                last_rank = Some(last_rank.map_or(rank, |last: u8| last.max(rank)));
            }
            None if name == "recording" => {
                problems.push("capability \"recording\" must never be advertised".to_owned());
            }
            None => problems.push(format!("unknown capability {name:?}")),
        }
        names.push(name.to_owned());
    }
    if !names.iter().any(|name| name == "files") {
        problems.push("capabilities lack \"files\", which is always advertised".to_owned());
    }
    names
}

fn string_list(payload: &Map<String, Value>, key: &str, problems: &mut Vec<String>) -> Vec<String> {
    match payload.get(key) {
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                match item.as_str() {
                    Some(text) => out.push(text.to_owned()),
                    None => problems.push(format!("{key} contains {item}, expected strings")),
                }
            }
            out
        }
        other => {
            problems.push(format!(
                "{key} is {}, expected a list of strings",
                show(other)
            ));
            Vec::new()
        }
    }
}

fn check_enum(
    payload: &Map<String, Value>,
    key: &str,
    allowed: &[&str],
    problems: &mut Vec<String>,
) {
    match payload.get(key).and_then(Value::as_str) {
        Some(value) if allowed.contains(&value) => {}
        _ => problems.push(format!(
            "{key} is {}, expected one of {}",
            show(payload.get(key)),
            allowed.join(", ")
        )),
    }
}

fn check_exact_keys(
    what: &str,
    object: &Map<String, Value>,
    expected: &[&str],
    problems: &mut Vec<String>,
) {
    for key in expected {
        if !object.contains_key(*key) {
            problems.push(format!("{what} lacks the key {key:?}"));
        }
    }
    for key in object.keys() {
        if !expected.contains(&key.as_str()) {
            problems.push(format!("{what} has the unknown key {key:?}"));
        }
    }
}

/// `MAJOR.MINOR.PATCH` with optional `-pre` and `+build` parts, digits only in
/// the three numbers.
fn is_semver(text: &str) -> bool {
    let core = text.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|part| !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_digit()))
        && !text.ends_with(['-', '+'])
}

/// `^[A-Za-z0-9][A-Za-z0-9<extra>]*$`: an ASCII letter or digit, then
/// letters, digits and the `extra` punctuation.
fn is_name(text: &str, extra: &[char]) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphanumeric())
        && chars.all(|rest| rest.is_ascii_alphanumeric() || extra.contains(&rest))
}

/// No `<`, `>` or control character: text the platform shows in its pages.
fn is_plain_text(text: &str) -> bool {
    !text
        .chars()
        .any(|character| matches!(character, '<' | '>') || character.is_control())
}

/// POSIX absolute, or a Windows drive (`C:\`) or UNC (`\\server`) path.
fn is_absolute(path: &str) -> bool {
    let bytes = path.as_bytes();
    path.starts_with('/')
        || path.starts_with("\\\\")
        || (bytes.len() >= 3
            && bytes[0].is_ascii_alphabetic()
            && bytes[1] == b':'
            && matches!(bytes[2], b'\\' | b'/'))
}

fn show(value: Option<&Value>) -> String {
    match value {
        None => "missing".to_owned(),
        Some(value) => {
            let text = value.to_string();
            if text.chars().count() > 80 {
                let cut: String = text.chars().take(77).collect();
                format!("{cut}...")
            } else {
                text
            }
        }
    }
}

/// How the ack fills `session_id`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum SessionChoice {
    /// The session named by the connection's path; null on a control
    /// connection. What a correct platform sends.
    #[default]
    FromPath,
    /// A fixed value (`Some`) or null (`None`).
    Fixed(Option<String>),
}

/// How the ack fills `connection_id`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum ConnectionIdChoice {
    /// `conn-<serial>` on a control connection (which requires one), null
    /// otherwise.
    #[default]
    Auto,
    Fixed(Option<String>),
}

/// How the ack fills `granted_capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum GrantChoice {
    /// Everything the HELLO advertised.
    #[default]
    Advertised,
    Fixed(Vec<String>),
}

/// A `HELLO_ACK` to send, built from the specification's defaults
/// (`PROTOCOL.md` §4.3) and adjustable field by field, including into acks a
/// correct shim must refuse (§4.4).
///
/// Defaults: the ack answers the HELLO's `id`; `session_id` is the session of
/// the connection's path (null on the control connection); `connection_id`
/// is `conn-<n>` on the control connection and null elsewhere;
/// `granted_capabilities` is everything the HELLO advertised;
/// `max_file_size_bytes` 10485760, `command_timeout_seconds` 30,
/// `max_concurrent` 4, `protocol_version` `"1.1"`.
#[derive(Debug, Clone, PartialEq)]
pub struct HelloAck {
    message_type: String,
    id: Option<String>,
    session: SessionChoice,
    connection_id: ConnectionIdChoice,
    granted: GrantChoice,
    max_file_size_bytes: Value,
    command_timeout_seconds: Value,
    max_concurrent: Value,
    protocol_version: Value,
    omitted_payload: Vec<String>,
    extra_payload: Vec<(String, Value)>,
    omitted_envelope: Vec<String>,
    extra_envelope: Vec<(String, Value)>,
}

impl Default for HelloAck {
    fn default() -> Self {
        HelloAck {
            message_type: "HELLO_ACK".to_owned(),
            id: None,
            session: SessionChoice::FromPath,
            connection_id: ConnectionIdChoice::Auto,
            granted: GrantChoice::Advertised,
            max_file_size_bytes: json!(10_485_760),
            command_timeout_seconds: json!(30),
            max_concurrent: json!(4),
            protocol_version: json!(wire::PROTOCOL_VERSION),
            omitted_payload: Vec::new(),
            extra_payload: Vec::new(),
            omitted_envelope: Vec::new(),
            extra_envelope: Vec::new(),
        }
    }
}

impl HelloAck {
    /// The specification's defaults (see the type's documentation).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends this `session_id` instead of the path's session.
    #[must_use]
    pub fn session_id(mut self, session_id: impl Into<String>) -> Self {
        self.session = SessionChoice::Fixed(Some(session_id.into()));
        self
    }

    /// Sends `session_id: null` whatever the path.
    #[must_use]
    pub fn null_session_id(mut self) -> Self {
        self.session = SessionChoice::Fixed(None);
        self
    }

    /// Sends this `connection_id` (`None`: null) instead of the automatic one.
    #[must_use]
    pub fn connection_id(mut self, connection_id: Option<&str>) -> Self {
        self.connection_id = ConnectionIdChoice::Fixed(connection_id.map(str::to_owned));
        self
    }

    /// Grants exactly these capabilities instead of everything advertised.
    #[must_use]
    pub fn grant<I, S>(mut self, capabilities: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.granted = GrantChoice::Fixed(capabilities.into_iter().map(Into::into).collect());
        self
    }

    /// Sets `max_file_size_bytes` (any integer, including invalid ones).
    #[must_use]
    pub fn max_file_size_bytes(mut self, value: i64) -> Self {
        self.max_file_size_bytes = json!(value);
        self
    }

    /// Sets `command_timeout_seconds` (any integer, including invalid ones).
    #[must_use]
    pub fn command_timeout_seconds(mut self, value: i64) -> Self {
        self.command_timeout_seconds = json!(value);
        self
    }

    /// Sets `max_concurrent` (any integer, including invalid ones).
    #[must_use]
    pub fn max_concurrent(mut self, value: i64) -> Self {
        self.max_concurrent = json!(value);
        self
    }

    /// Sets `protocol_version`, e.g. `"1.0"`, `"2.0"` or a malformed string.
    #[must_use]
    pub fn protocol_version(mut self, version: impl Into<String>) -> Self {
        self.protocol_version = json!(version.into());
        self
    }

    /// Answers with this envelope `id` instead of the HELLO's (a correlation
    /// mismatch unless it happens to match).
    #[must_use]
    pub fn ack_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sends this envelope `type` instead of `HELLO_ACK`.
    #[must_use]
    pub fn message_type(mut self, message_type: impl Into<String>) -> Self {
        self.message_type = message_type.into();
        self
    }

    /// Leaves this key out of the payload (e.g. `granted_capabilities`).
    #[must_use]
    pub fn omit_payload_field(mut self, key: impl Into<String>) -> Self {
        self.omitted_payload.push(key.into());
        self
    }

    /// Sets a payload key to any JSON value, overriding a default or adding
    /// an unknown key.
    #[must_use]
    pub fn payload_field(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra_payload.push((key.into(), value));
        self
    }

    /// Leaves this key out of the envelope (e.g. `ts`).
    #[must_use]
    pub fn omit_envelope_field(mut self, key: impl Into<String>) -> Self {
        self.omitted_envelope.push(key.into());
        self
    }

    /// Sets an envelope key to any JSON value, overriding a default or adding
    /// an unknown key.
    #[must_use]
    pub fn envelope_field(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra_envelope.push((key.into(), value));
        self
    }

    /// The frame this ack becomes on a connection of `kind` that received
    /// `hello` (if any). `serial` numbers the connection for the automatic
    /// `connection_id`.
    pub fn to_frame(&self, hello: Option<&Value>, kind: &ConnKind, serial: u64) -> Value {
        let session_id = match (&self.session, kind) {
            (SessionChoice::Fixed(fixed), _) => fixed.clone().map_or(Value::Null, Value::String),
            (SessionChoice::FromPath, ConnKind::Data { session_id }) => json!(session_id),
            (SessionChoice::FromPath, _) => Value::Null,
        };
        let connection_id = match (&self.connection_id, kind) {
            (ConnectionIdChoice::Fixed(fixed), _) => {
                fixed.clone().map_or(Value::Null, Value::String)
            }
            (ConnectionIdChoice::Auto, ConnKind::Control) => json!(format!("conn-{serial}")),
            (ConnectionIdChoice::Auto, _) => Value::Null,
        };
        let granted = match &self.granted {
            GrantChoice::Fixed(list) => json!(list),
            GrantChoice::Advertised => hello
                .and_then(wire::frame_payload)
                .and_then(|payload| payload.get("capabilities"))
                .filter(|capabilities| capabilities.is_array())
                .cloned()
                .unwrap_or_else(|| json!([])),
        };

        let mut payload = Map::new();
        payload.insert("session_id".to_owned(), session_id);
        payload.insert("connection_id".to_owned(), connection_id);
        payload.insert("protocol_version".to_owned(), self.protocol_version.clone());
        payload.insert("granted_capabilities".to_owned(), granted);
        payload.insert(
            "max_file_size_bytes".to_owned(),
            self.max_file_size_bytes.clone(),
        );
        payload.insert(
            "command_timeout_seconds".to_owned(),
            self.command_timeout_seconds.clone(),
        );
        payload.insert("max_concurrent".to_owned(), self.max_concurrent.clone());
        for (key, value) in &self.extra_payload {
            payload.insert(key.clone(), value.clone());
        }
        for key in &self.omitted_payload {
            payload.remove(key);
        }

        let id = self
            .id
            .clone()
            .or_else(|| hello.and_then(wire::frame_id).map(str::to_owned))
            .unwrap_or_else(wire::uuid_v4);
        let mut frame = wire::envelope(&self.message_type, &id, Value::Object(payload));
        if let Some(envelope) = frame.as_object_mut() {
            for (key, value) in &self.extra_envelope {
                envelope.insert(key.clone(), value.clone());
            }
            for key in &self.omitted_envelope {
                envelope.remove(key);
            }
        }
        frame
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_kind() -> ConnKind {
        ConnKind::Data {
            session_id: "session-1".to_owned(),
        }
    }

    fn valid_hello(capabilities: Value, allowed_root: Value) -> Value {
        json!({
            "type": "HELLO",
            "id": wire::uuid_v4(),
            "ts": 1712345678.123,
            "version": "1.1",
            "pending_capacity": null,
            "payload": {
                "shim_version": "0.1.0",
                "protocol_version": "1.1",
                "machine_id": "4c6f1b0e-9d2a-4c1e-8f43-0a1b2c3d4e5f",
                "display_name": "alice-laptop",
                "platform": "linux",
                "arch": "x86_64",
                "screen_resolution": null,
                "capabilities": capabilities,
                "allowed_root": allowed_root,
                "local_llm_models": [],
                "hardware_devices": [],
                "computer_use_features": [],
                "computer_use_features_coarse": [],
                "recording_channels": [],
                "recording_routes": []
            }
        })
    }

    #[test]
    fn paths_classify_into_control_data_and_other() {
        let base = wire::WS_PATH;
        assert_eq!(ConnKind::from_path(base, base), ConnKind::Control);
        assert_eq!(
            ConnKind::from_path("/ws/local-executor/a%3Ab", base),
            ConnKind::Data {
                session_id: "a:b".to_owned()
            }
        );
        assert_eq!(
            ConnKind::from_path("/ws/local-executor/s?x=1", base),
            ConnKind::Data {
                session_id: "s".to_owned()
            }
        );
        assert_eq!(
            ConnKind::from_path("/ws/local-executor/", base),
            ConnKind::Other
        );
        assert_eq!(
            ConnKind::from_path("/ws/local-executor/a/b", base),
            ConnKind::Other
        );
        assert_eq!(
            ConnKind::from_path("/ws/local-executorX", base),
            ConnKind::Other
        );
        assert_eq!(ConnKind::from_path("/", base), ConnKind::Other);
    }

    #[test]
    fn the_specification_example_is_a_valid_data_hello() {
        let hello = valid_hello(
            json!(["shell", "files"]),
            json!("/home/alice/projects/site"),
        );
        assert_eq!(hello_problems(&hello, &data_kind()), Vec::<String>::new());
    }

    #[test]
    fn a_control_hello_needs_a_null_root_and_directory_browse_last() {
        let kind = ConnKind::Control;
        let good = valid_hello(json!(["files", "directory_browse"]), Value::Null);
        assert!(hello_problems(&good, &kind).is_empty());
        let rooted = valid_hello(json!(["files", "directory_browse"]), json!("/home/a"));
        assert_eq!(hello_problems(&rooted, &kind).len(), 1);
        let unordered = valid_hello(json!(["directory_browse", "files"]), Value::Null);
        assert_eq!(hello_problems(&unordered, &kind).len(), 1);
        let missing = valid_hello(json!(["files"]), Value::Null);
        assert_eq!(hello_problems(&missing, &kind).len(), 1);
    }

    #[test]
    fn envelope_rules_are_each_reported() {
        let mut hello = valid_hello(json!(["files"]), json!("/r"));
        hello["ts"] = json!(1712345678);
        hello["id"] = json!("6F1C2A3B-4D5E-4F60-8A1B-2C3D4E5F6071");
        hello["pending_capacity"] = json!(4);
        hello["extra"] = json!(true);
        hello["payload"]["recording_channels"] = json!(["floor"]);
        hello["payload"]["capabilities"] = json!(["files", "recording"]);
        let problems = hello_problems(&hello, &data_kind());
        assert_eq!(problems.len(), 6, "{problems:#?}");
    }

    #[test]
    fn a_missing_payload_key_is_named() {
        let mut hello = valid_hello(json!(["files"]), json!("/r"));
        if let Some(payload) = hello["payload"].as_object_mut() {
            payload.remove("hardware_devices");
        }
        let problems = hello_problems(&hello, &data_kind());
        assert!(
            problems
                .iter()
                .any(|problem| problem.contains("\"hardware_devices\"")),
            "{problems:#?}"
        );
    }

    #[test]
    fn names_and_plain_text_follow_the_platform_patterns() {
        let machine = ['.', '_', ':', '-'];
        assert!(is_name("4c6f1b0e-9d2a:host_1.local", &machine));
        assert!(!is_name("-leading-dash", &machine));
        assert!(!is_name("", &machine));
        assert!(!is_name("with space", &machine));
        assert!(!is_name("slash/inside", &machine));
        assert!(is_plain_text("Alice's laptop (é)"));
        assert!(!is_plain_text("a<b"));
        assert!(!is_plain_text("line\nbreak"));
        assert!(!is_plain_text("c1\u{85}control"));
    }

    #[test]
    fn only_another_protocol_major_is_a_version_mismatch() {
        let kind = data_kind();
        let with_version = |version: &str| {
            let mut hello = valid_hello(json!(["files"]), json!("/r"));
            hello["payload"]["protocol_version"] = json!(version);
            let text = hello.to_string();
            check_hello(&text, Some(&hello), &kind)
        };
        assert!(matches!(
            with_version("2.0"),
            Err(HelloError::VersionMismatch { .. })
        ));
        assert!(matches!(
            with_version("1.0"),
            Err(HelloError::Invalid { .. })
        ));
        assert!(matches!(
            with_version("two"),
            Err(HelloError::Invalid { .. })
        ));
        assert!(with_version("1.1").is_ok());
        let (code, _) = with_version("2.0").unwrap_err().close().unwrap();
        assert_eq!(code, CLOSE_VERSION_MISMATCH);
    }

    #[test]
    fn semantic_versions() {
        assert!(is_semver("0.1.0"));
        assert!(is_semver("1.2.3-rc.1+build.5"));
        assert!(!is_semver("1.2"));
        assert!(!is_semver("v1.2.3"));
        assert!(!is_semver("1.2.3-"));
    }

    #[test]
    fn default_ack_follows_the_specification() {
        let hello = valid_hello(json!(["shell", "files"]), json!("/r"));
        let ack = HelloAck::new().to_frame(Some(&hello), &data_kind(), 3);
        assert_eq!(ack["type"], "HELLO_ACK");
        assert_eq!(ack["id"], hello["id"]);
        assert_eq!(
            ack["payload"],
            json!({
                "session_id": "session-1",
                "connection_id": null,
                "protocol_version": "1.1",
                "granted_capabilities": ["shell", "files"],
                "max_file_size_bytes": 10485760,
                "command_timeout_seconds": 30,
                "max_concurrent": 4
            })
        );
        let control = HelloAck::new().to_frame(Some(&hello), &ConnKind::Control, 3);
        assert_eq!(control["payload"]["session_id"], Value::Null);
        assert_eq!(control["payload"]["connection_id"], "conn-3");
    }

    #[test]
    fn knobs_produce_the_invalid_acks() {
        let hello = valid_hello(json!(["files"]), json!("/r"));
        let ack = HelloAck::new()
            .ack_id("other")
            .session_id("wrong")
            .protocol_version("2.0")
            .grant(["files", "shell"])
            .max_concurrent(0)
            .omit_payload_field("command_timeout_seconds")
            .payload_field("surprise", json!(1))
            .omit_envelope_field("ts")
            .envelope_field("extra", json!(null))
            .message_type("PONG")
            .to_frame(Some(&hello), &data_kind(), 1);
        assert_eq!(ack["type"], "PONG");
        assert_eq!(ack["id"], "other");
        assert!(ack.get("ts").is_none());
        assert_eq!(ack["extra"], Value::Null);
        let payload = &ack["payload"];
        assert_eq!(payload["session_id"], "wrong");
        assert_eq!(payload["protocol_version"], "2.0");
        assert_eq!(payload["granted_capabilities"], json!(["files", "shell"]));
        assert_eq!(payload["max_concurrent"], 0);
        assert!(payload.get("command_timeout_seconds").is_none());
        assert_eq!(payload["surprise"], 1);
    }
}
