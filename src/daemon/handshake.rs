//! The handshake of one connection (PROTOCOL.md §4): which capabilities to
//! advertise, the `HELLO` to send, and the verdict on the platform's answer.
//!
//! This module owns the decision, not the exchange: it never touches a
//! socket, never reads a clock, never writes an audit record. The caller
//! sends the [`Hello`], waits at most [`HELLO_ACK_WAIT`] for one frame, hands
//! what happened to [`check_ack`] as an [`AckInput`] and carries out the
//! verdict (close, reconnect, stop, audit).
//!
//! What it must never do: advertise a capability whose local switch is off
//! (the platform can only narrow what the user allowed, CAPABILITIES.md §1),
//! advertise `recording`, or accept a `HELLO_ACK` that fails any step of
//! PROTOCOL.md §4.4. The steps run in the specification's order because the
//! order decides the outcome when an ACK breaks several rules at once.

use std::collections::BTreeSet;
use std::num::NonZeroU64;
use std::time::Duration;

use serde_json::{Map, Value};

use super::refusal::RefusalKind;
use crate::config::{Config, ConfigError, Settings};
use crate::protocol::version::mismatch_close_reason;
use crate::protocol::{
    Arch, Capability, CloseAction, DEFAULT_COMMAND_TIMEOUT_SECONDS, DEFAULT_MAX_CONCURRENT,
    DEFAULT_MAX_FILE_SIZE_BYTES, DecodeError, Frame, Hello, HelloAck, Invalid, Message,
    MessageType, Negotiation, Platform, SHIM_MAX_VERSION, ShimClose, TerminalClose, Version,
    WIRE_VERSION, classify_close, negotiate,
};

/// The implementation version sent as `HELLO.shim_version`.
pub const SHIM_VERSION: &str = env!("CARGO_PKG_VERSION");

/// How long to wait for the `HELLO_ACK` after sending `HELLO` (§1.6).
pub const HELLO_ACK_WAIT: Duration = Duration::from_secs(10);

/// Which of the daemon's connections a handshake belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionKind {
    /// The machine control connection (CONTROL.md §3): no session, no root.
    Control,
    /// A data connection bound to one session: a child runtime or the
    /// legacy `--session-id` daemon.
    Data {
        /// The session this connection was opened for; the `HELLO_ACK` must
        /// name exactly this one (§4.4 step 5a).
        session_id: String,
    },
}

impl ConnectionKind {
    /// True for the control connection.
    pub fn is_control(&self) -> bool {
        matches!(self, ConnectionKind::Control)
    }
}

/// The local switches and dependency checks that decide what is advertised
/// (CAPABILITIES.md §2). A capability is advertised only when its switch
/// *and* its dependency flag are both true.
///
/// The dependency flags are facts the caller probed before this HELLO;
/// features whose probes do not exist yet are reported as absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gates {
    /// `enable_shell`.
    pub enable_shell: bool,
    /// `enable_computer_use`.
    pub enable_computer_use: bool,
    /// A usable computer-use backend (X11 reachable, XTEST and RandR present,
    /// not Wayland, not WSL2).
    pub computer_use_backend: bool,
    /// `enable_local_llm`.
    pub enable_local_llm: bool,
    /// The model probe at this HELLO returned at least one model.
    pub local_llm_models_found: bool,
    /// `enable_hardware`.
    pub enable_hardware: bool,
    /// `/sys/class/tty` is readable.
    pub serial_support: bool,
    /// `/sys/bus/usb/devices` is readable.
    pub usb_support: bool,
    /// At least one `/dev/gpiochip*` exists.
    pub gpio_support: bool,
}

impl Gates {
    /// The switches from the configuration, with every dependency flag
    /// false: the caller sets the ones its probes confirmed.
    pub fn from_config(settings: &Settings) -> Gates {
        Gates {
            enable_shell: settings.enable_shell,
            enable_computer_use: settings.enable_computer_use,
            enable_local_llm: settings.enable_local_llm,
            enable_hardware: settings.enable_hardware,
            ..Gates::default()
        }
    }
}

/// `HELLO.capabilities` for this connection, in the order of
/// CAPABILITIES.md §2 (`shell`, `files`, `computer_use`, `local_llm`,
/// `hardware_serial`, `hardware_usb`, `hardware_gpio`, `directory_browse`).
/// `recording` is never advertised (CAPABILITIES.md §3).
pub fn advertised_capabilities(gates: &Gates, kind: &ConnectionKind) -> Vec<Capability> {
    let candidates = [
        (Capability::Shell, gates.enable_shell),
        (Capability::Files, true),
        (
            Capability::ComputerUse,
            gates.enable_computer_use && gates.computer_use_backend,
        ),
        (
            Capability::LocalLlm,
            gates.enable_local_llm && gates.local_llm_models_found,
        ),
        (
            Capability::HardwareSerial,
            gates.enable_hardware && gates.serial_support,
        ),
        (
            Capability::HardwareUsb,
            gates.enable_hardware && gates.usb_support,
        ),
        (
            Capability::HardwareGpio,
            gates.enable_hardware && gates.gpio_support,
        ),
        (Capability::DirectoryBrowse, kind.is_control()),
    ];
    candidates
        .into_iter()
        .filter_map(|(capability, on)| on.then_some(capability))
        .collect()
}

/// Who this shim is, as `HELLO` reports it. The same for every connection
/// of the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// PROTOCOL.md §4.2.1.
    pub machine_id: String,
    /// 1–128 chars (validated by the configuration).
    pub display_name: String,
    /// PROTOCOL.md §4.2.2.
    pub platform: Platform,
    /// PROTOCOL.md §4.2.3.
    pub arch: Arch,
}

impl Identity {
    /// The identity of this machine. Fails on an unsupported OS or
    /// architecture and when no machine id can be obtained; `start` refuses
    /// to run in either case (exit 78).
    pub fn from_config(config: &Config) -> Result<Identity, ConfigError> {
        Ok(Identity {
            machine_id: config.machine_id()?.to_owned(),
            display_name: config.display_name.clone(),
            platform: config.host.platform()?,
            arch: config.host.arch()?,
        })
    }
}

/// What the optional feature probes found for this HELLO. Each value is sent
/// only when the capability it describes is advertised, so a probe result
/// can never leak information about a switched-off feature.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Probes {
    /// `[width, height]` of the primary display.
    pub screen_resolution: Option<[i64; 2]>,
    /// Model names from the local LLM probe.
    pub local_llm_models: Vec<String>,
    /// Device objects of CAPABILITIES.md §6, each with a `type` of `serial`,
    /// `usb` or `gpio`.
    pub hardware_devices: Vec<Map<String, Value>>,
    /// CAPABILITIES.md §4.1 fine-grained feature flags.
    pub computer_use_features: Vec<String>,
    /// CAPABILITIES.md §4.1 coarse buckets.
    pub computer_use_features_coarse: Vec<String>,
}

/// Builds `HELLO` (PROTOCOL.md §4.2) from the identity, the advertised
/// capabilities and the probe results.
///
/// `allowed_root` is the session's canonical root; it is sent on a data
/// connection only. The control connection always sends `null`, whatever is
/// passed, because it has no root (CONTROL.md §3.1).
pub fn build_hello(
    identity: &Identity,
    kind: &ConnectionKind,
    allowed_root: Option<&str>,
    capabilities: &[Capability],
    probes: Probes,
) -> Hello {
    let advertised = |capability| capabilities.contains(&capability);
    let computer_use = advertised(Capability::ComputerUse);
    let hardware_devices = probes
        .hardware_devices
        .into_iter()
        .filter(|device| device_capability(device).is_some_and(advertised))
        .collect();
    Hello {
        shim_version: SHIM_VERSION.to_owned(),
        machine_id: identity.machine_id.clone(),
        display_name: identity.display_name.clone(),
        platform: identity.platform,
        arch: identity.arch,
        screen_resolution: probes.screen_resolution.filter(|_| computer_use),
        capabilities: capabilities.to_vec(),
        allowed_root: match kind {
            ConnectionKind::Control => None,
            ConnectionKind::Data { .. } => allowed_root.map(str::to_owned),
        },
        local_llm_models: if advertised(Capability::LocalLlm) {
            probes.local_llm_models
        } else {
            Vec::new()
        },
        hardware_devices,
        computer_use_features: if computer_use {
            probes.computer_use_features
        } else {
            Vec::new()
        },
        computer_use_features_coarse: if computer_use {
            probes.computer_use_features_coarse
        } else {
            Vec::new()
        },
        recording_channels: Vec::new(),
        recording_routes: Vec::new(),
        protocol_version: WIRE_VERSION.to_owned(),
    }
}

/// The capability a discovered device object belongs to, from its `type`.
fn device_capability(device: &Map<String, Value>) -> Option<Capability> {
    match device.get("type").and_then(Value::as_str)? {
        "serial" => Some(Capability::HardwareSerial),
        "usb" => Some(Capability::HardwareUsb),
        "gpio" => Some(Capability::HardwareGpio),
        _ => None,
    }
}

/// The three limits negotiated in the handshake (PROTOCOL.md §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Requests admitted at once on one connection.
    pub max_concurrent: NonZeroU64,
    /// Upper bound of a command's timeout.
    pub command_timeout_seconds: NonZeroU64,
    /// Upper bound of file, screenshot and clipboard payloads.
    pub max_file_size_bytes: NonZeroU64,
}

impl Default for Limits {
    /// 4 / 30 / 10,485,760: the configuration defaults (Appendix A).
    fn default() -> Self {
        Limits {
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            command_timeout_seconds: DEFAULT_COMMAND_TIMEOUT_SECONDS,
            max_file_size_bytes: DEFAULT_MAX_FILE_SIZE_BYTES,
        }
    }
}

impl Limits {
    /// The local ceilings: the configured values, captured once at daemon
    /// start and never ratcheted by earlier handshakes.
    pub fn from_config(settings: &Settings) -> Limits {
        // The configuration rejects 0; should one slip through, 1 is the
        // most restrictive reading, never a wider one.
        let nonzero = |value: u64| NonZeroU64::new(value).unwrap_or(NonZeroU64::MIN);
        Limits {
            max_concurrent: nonzero(u64::from(settings.max_concurrent)),
            command_timeout_seconds: nonzero(settings.command_timeout_seconds),
            max_file_size_bytes: nonzero(settings.max_file_size_bytes),
        }
    }

    /// `min(ceiling, ack)` per limit: the platform can lower a limit, never
    /// raise it.
    pub fn lowered_by(self, ack: &HelloAck) -> Limits {
        Limits {
            max_concurrent: self.max_concurrent.min(ack.max_concurrent),
            command_timeout_seconds: self
                .command_timeout_seconds
                .min(ack.command_timeout_seconds),
            max_file_size_bytes: self.max_file_size_bytes.min(ack.max_file_size_bytes),
        }
    }
}

/// What the connection produced while the shim waited for the `HELLO_ACK`.
#[derive(Debug, Clone, PartialEq)]
pub enum AckInput {
    /// No frame within [`HELLO_ACK_WAIT`].
    TimedOut,
    /// The connection ended first; `code` is the close code, if a close
    /// frame carried one.
    Closed {
        /// The received close code.
        code: Option<u16>,
        /// The close frame's reason text, as an
        /// [`excerpt`](crate::text::excerpt) (empty without one).
        reason: String,
    },
    /// A frame arrived but failed PROTOCOL.md §2.3.
    Invalid(DecodeError),
    /// A valid frame arrived (boxed: frames are large and this value is
    /// moved around once per handshake).
    Frame(Box<Frame>),
}

impl AckInput {
    /// The first frame as [`super::session::decode`] returned it.
    pub fn received(decoded: Result<Frame, DecodeError>) -> AckInput {
        match decoded {
            Ok(frame) => AckInput::Frame(Box::new(frame)),
            Err(error) => AckInput::Invalid(error),
        }
    }
}

/// A successful handshake: what holds for the rest of the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The negotiated protocol version (`1.1`, or `1.0` on a data
    /// connection of an older platform).
    pub version: Version,
    /// The granted capabilities, a subset of the advertised ones. Fixed
    /// until the connection ends.
    pub granted: BTreeSet<Capability>,
    /// `granted_capabilities` in the order the platform sent them, for the
    /// `CONFIG_RELOADED` audit record (AUDIT.md §3.3: "as granted").
    pub granted_as_sent: Vec<Capability>,
    /// The platform's presence generation (control connection: never empty).
    pub connection_id: Option<String>,
    /// Effective limits: `min(ceiling, ack)` (§4.5).
    pub limits: Limits,
    /// The `HELLO_ACK`'s own `command_timeout_seconds`: how long the
    /// platform waits for any reply before it drops it.
    pub platform_wait_seconds: NonZeroU64,
}

impl Negotiated {
    /// The granted names sorted ascending by their wire spelling, as
    /// `CAPABILITY_NOT_GRANTED` details list them (§5.3).
    pub fn granted_names_sorted(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.granted.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        names
    }
}

/// Which row of PROTOCOL.md §4.4 refused the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckRejection {
    /// Step 1: no frame within [`HELLO_ACK_WAIT`].
    TimedOut,
    /// Step 1: the connection closed before a frame arrived.
    Closed {
        /// The received close code, if any.
        code: Option<u16>,
        /// The platform's reason text (escaped and bounded; may be empty).
        reason: String,
    },
    /// Step 2: the frame failed §2.3 (this includes a `HELLO_ACK` whose
    /// limits are ≤ 0 or whose `session_id` is `""`).
    InvalidFrame(Invalid),
    /// Step 3: a valid frame of another type.
    UnexpectedType(MessageType),
    /// Step 4: the ACK's `id` is not the HELLO's.
    CorrelationMismatch,
    /// Step 5a: data connection, `session_id` is not the selected session.
    SessionMismatch,
    /// Step 5b: control connection, `session_id` names a session.
    ControlMismatch,
    /// Step 7: a granted name that was not advertised (the first one).
    UnadvertisedCapability(String),
    /// Step 8: `protocol_version` does not parse.
    MalformedVersion(String),
    /// Step 8: a different major version.
    MajorMismatch(String),
    /// Step 9: control connection without protocol 1.1, `directory_browse`
    /// or a `connection_id`.
    ControlRequirements,
}

impl AckRejection {
    /// The row of §4.4: `"1"`, `"2"`, `"3"`, `"4"`, `"5a"`, `"5b"`, `"7"`,
    /// `"8"` or `"9"`.
    #[cfg(test)]
    pub fn step(&self) -> &'static str {
        match self {
            AckRejection::TimedOut | AckRejection::Closed { .. } => "1",
            AckRejection::InvalidFrame(_) => "2",
            AckRejection::UnexpectedType(_) => "3",
            AckRejection::CorrelationMismatch => "4",
            AckRejection::SessionMismatch => "5a",
            AckRejection::ControlMismatch => "5b",
            AckRejection::UnadvertisedCapability(_) => "7",
            AckRejection::MalformedVersion(_) | AckRejection::MajorMismatch(_) => "8",
            AckRejection::ControlRequirements => "9",
        }
    }

    /// A stable name for the `loop_error: <kind>` disconnect reason.
    fn kind(&self) -> &'static str {
        match self {
            AckRejection::TimedOut => "HelloAckTimeout",
            AckRejection::Closed { .. } => "ClosedDuringHandshake",
            AckRejection::InvalidFrame(_) => "InvalidHelloAck",
            AckRejection::UnexpectedType(_) => "UnexpectedHandshakeFrame",
            AckRejection::CorrelationMismatch => "HelloAckCorrelationMismatch",
            AckRejection::SessionMismatch => "HelloAckSessionMismatch",
            AckRejection::ControlMismatch => "HelloAckControlMismatch",
            AckRejection::UnadvertisedCapability(_) => "HelloAckUnadvertisedCapability",
            AckRejection::MalformedVersion(_) => "InvalidPlatformProtocolVersion",
            AckRejection::MajorMismatch(_) => "ProtocolVersionMismatch",
            AckRejection::ControlRequirements => "MachineControlRequirements",
        }
    }
}

/// The close frame the shim sends when it leaves a failed handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeClose {
    /// 1000, empty reason: leaving a failed transient attempt (§3.3).
    Normal,
    /// One of the fixed closes of §3.3.
    Shim(ShimClose),
    /// 4426 with the JSON reason of §3.2, already fitted into 123 bytes.
    VersionMismatch {
        /// The reason text.
        reason: String,
    },
}

impl HandshakeClose {
    /// The close code.
    pub fn code(&self) -> u16 {
        match self {
            HandshakeClose::Normal => 1000,
            HandshakeClose::Shim(close) => close.code(),
            HandshakeClose::VersionMismatch { .. } => 4426,
        }
    }

    /// The close reason (≤ 123 bytes).
    pub fn reason(&self) -> &str {
        match self {
            HandshakeClose::Normal => "",
            HandshakeClose::Shim(close) => close.reason(),
            HandshakeClose::VersionMismatch { reason } => reason,
        }
    }
}

/// What the runtime does after a refused handshake (§11.1–§11.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Transient: sleep `backoff(attempt)`, then reconnect.
    Reconnect,
    /// Terminal: no reconnect; the daemon (control) or this child (data)
    /// ends; the process exits 0 when it was the control runtime.
    Terminal,
    /// Terminal authentication failure (§4.4 step 5): exit status 77.
    TerminalAuthFailure,
    /// The platform refused the handshake (4400 or 4403 before the ACK):
    /// reconnect with backoff, but only [`REFUSAL_RETRIES`] times.
    ///
    /// [`REFUSAL_RETRIES`]: super::refusal::REFUSAL_RETRIES
    Refused(RefusalKind),
}

/// A refused handshake: the rule that fired and, derived from it, what the
/// caller has to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckFailure {
    /// Which rule fired.
    pub rejection: AckRejection,
}

impl AckFailure {
    /// The close to send; `None` when the connection is already closed.
    pub fn close(&self) -> Option<HandshakeClose> {
        match &self.rejection {
            AckRejection::Closed { .. } => None,
            AckRejection::TimedOut
            | AckRejection::InvalidFrame(_)
            | AckRejection::UnexpectedType(_) => Some(HandshakeClose::Normal),
            AckRejection::CorrelationMismatch => shim(ShimClose::AckCorrelationMismatch),
            AckRejection::SessionMismatch => shim(ShimClose::AckSessionMismatch),
            AckRejection::ControlMismatch => shim(ShimClose::AckControlMismatch),
            AckRejection::UnadvertisedCapability(_) => shim(ShimClose::AckUnadvertisedCapability),
            AckRejection::MalformedVersion(_) => shim(ShimClose::InvalidPlatformVersion),
            AckRejection::MajorMismatch(platform) => Some(HandshakeClose::VersionMismatch {
                reason: mismatch_close_reason(&SHIM_MAX_VERSION.to_string(), platform),
            }),
            AckRejection::ControlRequirements => shim(ShimClose::ControlRequirements),
        }
    }

    /// Reconnect or stop (§4.4, §11.2): steps 1–3 are transient unless the
    /// platform closed with 4426–4429; steps 4–9 are terminal, step 5 as an
    /// authentication failure.
    pub fn after(&self) -> AfterFailure {
        match &self.rejection {
            AckRejection::Closed { .. } if self.received_terminal().is_some() => {
                AfterFailure::Terminal
            }
            // Row 1 makes every other close during the handshake a failed
            // attempt, so even 1000/1001 reconnect with backoff; a refusal
            // does so a bounded number of times.
            AckRejection::Closed { code, .. } => match RefusalKind::from_close(*code) {
                Some(kind) => AfterFailure::Refused(kind),
                None => AfterFailure::Reconnect,
            },
            AckRejection::TimedOut
            | AckRejection::InvalidFrame(_)
            | AckRejection::UnexpectedType(_) => AfterFailure::Reconnect,
            AckRejection::SessionMismatch | AckRejection::ControlMismatch => {
                AfterFailure::TerminalAuthFailure
            }
            AckRejection::CorrelationMismatch
            | AckRejection::UnadvertisedCapability(_)
            | AckRejection::MalformedVersion(_)
            | AckRejection::MajorMismatch(_)
            | AckRejection::ControlRequirements => AfterFailure::Terminal,
        }
    }

    /// The platform closed with 4426–4429: append `SESSION_REVOKED`
    /// `{reason, source: "ws_close_code", close_code}` before stopping
    /// (§3.3; the Rust shim writes it during the handshake too).
    pub fn received_terminal(&self) -> Option<TerminalClose> {
        match &self.rejection {
            AckRejection::Closed { code, .. } => match classify_close(*code) {
                CloseAction::Terminal(terminal) => Some(terminal),
                CloseAction::ReconnectNormal | CloseAction::ReconnectBackoff => None,
            },
            _ => None,
        }
    }

    /// The `reason` of the `WS_DISCONNECTED` record (AUDIT.md §3.3):
    /// `ws_closed_<code>_<LABEL>` for a received close, otherwise
    /// `loop_error: <kind>` with a stable kind per rule.
    pub fn audit_reason(&self) -> String {
        match &self.rejection {
            AckRejection::Closed { code, .. } => disconnect_reason(*code),
            other => format!("loop_error: {}", other.kind()),
        }
    }

    /// The platform's reason text for a close it sent, if it gave one.
    pub fn platform_reason(&self) -> Option<&str> {
        match &self.rejection {
            AckRejection::Closed { reason, .. } if !reason.is_empty() => Some(reason),
            _ => None,
        }
    }
}

fn shim(close: ShimClose) -> Option<HandshakeClose> {
    Some(HandshakeClose::Shim(close))
}

/// `ws_closed_<code>_<LABEL>`; the reference prints a missing code as
/// `None`, and every code outside 4426–4429 as `unknown`.
pub fn disconnect_reason(code: Option<u16>) -> String {
    let label = code
        .and_then(TerminalClose::from_code)
        .map_or("unknown", TerminalClose::label);
    match code {
        Some(code) => format!("ws_closed_{code}_{label}"),
        None => format!("ws_closed_None_{label}"),
    }
}

/// Judges what arrived after `HELLO` against PROTOCOL.md §4.4, steps 1–9 in
/// order; the first failing step decides.
///
/// `advertised` is the `capabilities` list of the HELLO with id `hello_id`;
/// `ceilings` are the local limits (for a child runtime, the control
/// connection's effective limits, CONTROL.md §10.1).
///
/// A `HELLO_ACK` that is well-formed JSON but breaks a value constraint
/// (`max_concurrent: 0`, `session_id: ""`) fails decoding, so it arrives
/// here as [`AckInput::Invalid`] and is refused at step 2. It is never
/// accepted, which is what the hardening note requires; it stays transient
/// as the step-2 row lists it, rather than taking the note's terminal
/// option: backoff already caps the retry rate, and a terminal stop would
/// turn one bad platform deployment into a daemon that needs an operator
/// restart.
pub fn check_ack(
    hello_id: &str,
    kind: &ConnectionKind,
    advertised: &[Capability],
    ceilings: Limits,
    outcome: AckInput,
) -> Result<Negotiated, AckFailure> {
    let reject = |rejection| Err(AckFailure { rejection });

    // Steps 1–3: something other than a valid HELLO_ACK.
    let frame = match outcome {
        AckInput::TimedOut => return reject(AckRejection::TimedOut),
        AckInput::Closed { code, reason } => {
            return reject(AckRejection::Closed { code, reason });
        }
        AckInput::Invalid(error) => return reject(AckRejection::InvalidFrame(error.invalid)),
        AckInput::Frame(frame) => frame,
    };
    let Frame { id, message, .. } = *frame;
    let Message::HelloAck(ack) = message else {
        return reject(AckRejection::UnexpectedType(message.message_type()));
    };

    // Step 4: correlation.
    if id != hello_id {
        return reject(AckRejection::CorrelationMismatch);
    }

    // Step 5: the session binding (exact compare; null never matches a data
    // connection, and any non-null id on the control connection is a
    // binding it must not have).
    let bound = ack.session_id.as_ref().map(|id| id.as_str());
    match kind {
        ConnectionKind::Data { session_id } if bound != Some(session_id.as_str()) => {
            return reject(AckRejection::SessionMismatch);
        }
        ConnectionKind::Control if bound.is_some_and(|id| !id.is_empty()) => {
            return reject(AckRejection::ControlMismatch);
        }
        _ => {}
    }

    // Step 6: remember connection_id (kept in the result).

    // Step 7: the grant may only narrow what was advertised.
    let mut granted_as_sent = Vec::with_capacity(ack.granted_capabilities.len());
    for name in &ack.granted_capabilities {
        match Capability::parse(name).filter(|c| advertised.contains(c)) {
            Some(capability) => granted_as_sent.push(capability),
            None => return reject(AckRejection::UnadvertisedCapability(name.clone())),
        }
    }
    let granted: BTreeSet<Capability> = granted_as_sent.iter().copied().collect();

    // Step 8: version negotiation.
    let version = match negotiate(&SHIM_MAX_VERSION, &ack.protocol_version) {
        Negotiation::Agreed(text) => match Version::parse(&text) {
            Some(version) => version,
            None => return reject(AckRejection::MalformedVersion(ack.protocol_version)),
        },
        Negotiation::Malformed => {
            return reject(AckRejection::MalformedVersion(ack.protocol_version));
        }
        Negotiation::MajorMismatch => {
            return reject(AckRejection::MajorMismatch(ack.protocol_version));
        }
    };

    // Step 9: what the control connection cannot work without.
    if kind.is_control()
        && (version != SHIM_MAX_VERSION
            || !granted.contains(&Capability::DirectoryBrowse)
            || ack.connection_id.as_deref().is_none_or(str::is_empty))
    {
        return reject(AckRejection::ControlRequirements);
    }

    let limits = ceilings.lowered_by(&ack);
    Ok(Negotiated {
        version,
        granted,
        granted_as_sent,
        connection_id: ack.connection_id,
        limits,
        platform_wait_seconds: ack.command_timeout_seconds,
    })
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
