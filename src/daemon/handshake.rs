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
    /// The first frame as [`crate::protocol::decode`] returned it.
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
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::{decode, encode};

    const HELLO_ID: &str = "6f1c0000-0000-4000-8000-000000000001";

    fn data() -> ConnectionKind {
        ConnectionKind::Data {
            session_id: "session-1".to_owned(),
        }
    }

    fn input(envelope: Value) -> AckInput {
        AckInput::received(decode(envelope.to_string().as_bytes()))
    }

    fn ack(id: &str, payload: Value) -> AckInput {
        input(
            json!({"type": "HELLO_ACK", "id": id, "ts": 1.5, "version": "1.1", "payload": payload}),
        )
    }

    fn data_payload() -> Value {
        json!({"session_id": "session-1", "connection_id": null, "protocol_version": "1.1",
               "granted_capabilities": ["files"], "max_file_size_bytes": 10485760,
               "command_timeout_seconds": 30, "max_concurrent": 4})
    }

    fn control_payload() -> Value {
        json!({"session_id": null, "connection_id": "presence-7", "protocol_version": "1.1",
               "granted_capabilities": ["files", "directory_browse"]})
    }

    fn with(mut payload: Value, key: &str, value: Value) -> Value {
        payload[key] = value;
        payload
    }

    fn check_data(input: AckInput) -> Result<Negotiated, AckFailure> {
        check_ack(
            HELLO_ID,
            &data(),
            &[Capability::Shell, Capability::Files],
            Limits::default(),
            input,
        )
    }

    fn check_control(input: AckInput) -> Result<Negotiated, AckFailure> {
        check_ack(
            HELLO_ID,
            &ConnectionKind::Control,
            &[Capability::Files, Capability::DirectoryBrowse],
            Limits::default(),
            input,
        )
    }

    fn refused(result: Result<Negotiated, AckFailure>) -> AckFailure {
        match result {
            Ok(negotiated) => panic!("accepted: {negotiated:?}"),
            Err(failure) => failure,
        }
    }

    fn assert_close(failure: &AckFailure, code: u16, reason: &str) {
        let close = failure.close().expect("a close to send");
        assert_eq!((close.code(), close.reason()), (code, reason));
    }

    // --- §4.4 step 1 -------------------------------------------------------

    #[test]
    fn no_ack_within_ten_seconds_leaves_normally_and_reconnects() {
        assert_eq!(HELLO_ACK_WAIT, Duration::from_secs(10));
        let failure = refused(check_data(AckInput::TimedOut));
        assert_eq!(failure.rejection.step(), "1");
        assert_eq!(failure.close(), Some(HandshakeClose::Normal));
        assert_close(&failure, 1000, "");
        assert_eq!(failure.after(), AfterFailure::Reconnect);
        assert_eq!(failure.received_terminal(), None);
        assert_eq!(failure.audit_reason(), "loop_error: HelloAckTimeout");
    }

    #[test]
    fn close_before_ack_reconnects_with_backoff_unless_terminal() {
        for (code, reason) in [
            (Some(1000), "ws_closed_1000_unknown"),
            (Some(1001), "ws_closed_1001_unknown"),
            (Some(1006), "ws_closed_1006_unknown"),
            (Some(4401), "ws_closed_4401_unknown"),
            (Some(4408), "ws_closed_4408_unknown"),
            (None, "ws_closed_None_unknown"),
        ] {
            let failure = refused(check_data(AckInput::Closed {
                code,
                reason: String::new(),
            }));
            assert_eq!(failure.rejection.step(), "1");
            assert_eq!(failure.close(), None, "{code:?}: already closed");
            assert_eq!(failure.after(), AfterFailure::Reconnect, "{code:?}");
            assert_eq!(failure.received_terminal(), None);
            assert_eq!(failure.audit_reason(), reason);
            assert_eq!(failure.platform_reason(), None);
        }
    }

    #[test]
    fn close_4400_or_4403_before_ack_is_a_refusal_with_the_platforms_reason() {
        for (code, kind) in [
            (4400, RefusalKind::InvalidHello),
            (4403, RefusalKind::BindingMismatch),
        ] {
            let failure = refused(check_data(AckInput::Closed {
                code: Some(code),
                reason: "machine does not match".into(),
            }));
            assert_eq!(failure.close(), None);
            assert_eq!(failure.after(), AfterFailure::Refused(kind));
            assert_eq!(failure.received_terminal(), None);
            assert_eq!(failure.audit_reason(), format!("ws_closed_{code}_unknown"));
            assert_eq!(failure.platform_reason(), Some("machine does not match"));
        }
    }

    #[test]
    fn close_4426_to_4429_before_ack_is_terminal_and_audited_as_revocation() {
        for (code, terminal, reason) in [
            (
                4426,
                TerminalClose::ProtocolVersionMismatch,
                "ws_closed_4426_PROTOCOL_VERSION_MISMATCH",
            ),
            (
                4427,
                TerminalClose::SessionTakenOver,
                "ws_closed_4427_SESSION_TAKEN_OVER",
            ),
            (
                4428,
                TerminalClose::SessionRevoked,
                "ws_closed_4428_SESSION_REVOKED",
            ),
            (
                4429,
                TerminalClose::PlatformShutdown,
                "ws_closed_4429_PLATFORM_SHUTDOWN",
            ),
        ] {
            let failure = refused(check_control(AckInput::Closed {
                code: Some(code),
                reason: "bye".into(),
            }));
            assert_eq!(failure.close(), None);
            assert_eq!(failure.after(), AfterFailure::Terminal);
            assert_eq!(failure.received_terminal(), Some(terminal));
            assert_eq!(failure.audit_reason(), reason);
        }
    }

    // --- steps 2 and 3 -----------------------------------------------------

    #[test]
    fn invalid_ack_frame_leaves_normally_and_reconnects() {
        let not_json = AckInput::received(decode(b"{not json"));
        let unknown_key = ack(HELLO_ID, with(data_payload(), "extra", json!(1)));
        let no_grant = ack(HELLO_ID, json!({"session_id": "session-1"}));
        for bad in [not_json, unknown_key, no_grant] {
            let failure = refused(check_data(bad));
            assert!(
                matches!(failure.rejection, AckRejection::InvalidFrame(_)),
                "{failure:?}"
            );
            assert_eq!(failure.rejection.step(), "2");
            assert_eq!(failure.close(), Some(HandshakeClose::Normal));
            assert_eq!(failure.after(), AfterFailure::Reconnect);
            assert_eq!(failure.audit_reason(), "loop_error: InvalidHelloAck");
        }
    }

    #[test]
    fn ack_with_a_limit_of_zero_or_an_empty_session_is_never_accepted() {
        for (key, value) in [
            ("max_concurrent", json!(0)),
            ("command_timeout_seconds", json!(-1)),
            ("max_file_size_bytes", json!(0)),
            ("session_id", json!("")),
        ] {
            let failure = refused(check_data(ack(HELLO_ID, with(data_payload(), key, value))));
            assert_eq!(failure.rejection.step(), "2", "{key}");
            assert_eq!(failure.after(), AfterFailure::Reconnect, "{key}");
        }
    }

    #[test]
    fn first_frame_of_another_type_leaves_normally_and_reconnects() {
        let ping = input(json!({"type": "PING", "id": HELLO_ID, "ts": 1.0}));
        let failure = refused(check_data(ping));
        assert_eq!(
            failure.rejection,
            AckRejection::UnexpectedType(MessageType::Ping)
        );
        assert_eq!(failure.rejection.step(), "3");
        assert_eq!(failure.close(), Some(HandshakeClose::Normal));
        assert_eq!(failure.after(), AfterFailure::Reconnect);
    }

    // --- steps 4 to 9 ------------------------------------------------------

    #[test]
    fn ack_with_foreign_id_closes_4400_and_is_terminal() {
        let failure = refused(check_data(ack("someone-else", data_payload())));
        assert_eq!(failure.rejection, AckRejection::CorrelationMismatch);
        assert_close(&failure, 4400, "HELLO_ACK correlation mismatch");
        assert_eq!(failure.after(), AfterFailure::Terminal);
        assert_eq!(failure.received_terminal(), None);
        assert_eq!(
            failure.audit_reason(),
            "loop_error: HelloAckCorrelationMismatch"
        );
    }

    #[test]
    fn ack_for_another_session_closes_4403_as_authentication_failure() {
        for session in [json!("session-2"), json!(null), json!("Session-1")] {
            let failure = refused(check_data(ack(
                HELLO_ID,
                with(data_payload(), "session_id", session.clone()),
            )));
            assert_eq!(
                failure.rejection,
                AckRejection::SessionMismatch,
                "{session}"
            );
            assert_eq!(failure.rejection.step(), "5a");
            assert_close(&failure, 4403, "HELLO_ACK session mismatch");
            assert_eq!(failure.after(), AfterFailure::TerminalAuthFailure);
        }
    }

    #[test]
    fn control_ack_naming_a_session_closes_4403_as_authentication_failure() {
        let failure = refused(check_control(ack(
            HELLO_ID,
            with(control_payload(), "session_id", json!("session-1")),
        )));
        assert_eq!(failure.rejection, AckRejection::ControlMismatch);
        assert_eq!(failure.rejection.step(), "5b");
        assert_close(&failure, 4403, "HELLO_ACK control mismatch");
        assert_eq!(failure.after(), AfterFailure::TerminalAuthFailure);
    }

    #[test]
    fn control_ack_without_session_key_is_accepted() {
        let mut payload = control_payload();
        if let Value::Object(map) = &mut payload {
            map.remove("session_id");
        }
        let negotiated = check_control(ack(HELLO_ID, payload)).expect("accepted");
        assert_eq!(negotiated.connection_id.as_deref(), Some("presence-7"));
    }

    #[test]
    fn ack_granting_unadvertised_capability_closes_4400() {
        let only_files = |name: &str| {
            check_ack(
                HELLO_ID,
                &data(),
                &[Capability::Files],
                Limits::default(),
                ack(
                    HELLO_ID,
                    with(
                        data_payload(),
                        "granted_capabilities",
                        json!(["files", name]),
                    ),
                ),
            )
        };
        for name in [
            "shell",
            "recording",
            "directory_browse",
            "teleport",
            "FILES",
        ] {
            let failure = refused(only_files(name));
            assert_eq!(
                failure.rejection,
                AckRejection::UnadvertisedCapability(name.to_owned())
            );
            assert_eq!(failure.rejection.step(), "7");
            assert_close(&failure, 4400, "HELLO_ACK granted unadvertised capability");
            assert_eq!(failure.after(), AfterFailure::Terminal);
        }
    }

    #[test]
    fn malformed_platform_version_closes_4426_and_is_terminal() {
        for version in ["1", "v1.1", "1.1.0", " 1.1", ""] {
            let failure = refused(check_data(ack(
                HELLO_ID,
                with(data_payload(), "protocol_version", json!(version)),
            )));
            assert_eq!(failure.rejection.step(), "8", "{version:?}");
            assert_close(&failure, 4426, "Invalid platform protocol version");
            assert_eq!(failure.after(), AfterFailure::Terminal);
        }
    }

    #[test]
    fn other_major_version_closes_4426_with_the_fitted_json_reason() {
        let failure = refused(check_data(ack(
            HELLO_ID,
            with(data_payload(), "protocol_version", json!("2.0")),
        )));
        assert_eq!(
            failure.rejection,
            AckRejection::MajorMismatch("2.0".to_owned())
        );
        assert_close(
            &failure,
            4426,
            r#"{"error":"PROTOCOL_VERSION_MISMATCH","shim_max":"1.1","platform_max":"2.0","hint":"upgrade the older side"}"#,
        );
        assert_eq!(failure.after(), AfterFailure::Terminal);
    }

    #[test]
    fn control_connection_requires_1_1_directory_browse_and_connection_id() {
        for payload in [
            with(control_payload(), "protocol_version", json!("1.0")),
            with(control_payload(), "granted_capabilities", json!(["files"])),
            with(control_payload(), "connection_id", json!(null)),
            with(control_payload(), "connection_id", json!("")),
        ] {
            let failure = refused(check_control(ack(HELLO_ID, payload.clone())));
            assert_eq!(
                failure.rejection,
                AckRejection::ControlRequirements,
                "{payload}"
            );
            assert_eq!(failure.rejection.step(), "9");
            assert_close(
                &failure,
                4426,
                "Machine control requires protocol 1.1 and directory_browse",
            );
            assert_eq!(failure.after(), AfterFailure::Terminal);
        }
    }

    #[test]
    fn data_connection_accepts_protocol_1_0() {
        let negotiated = check_data(ack(
            HELLO_ID,
            with(data_payload(), "protocol_version", json!("1.0")),
        ))
        .expect("accepted");
        assert_eq!(negotiated.version.to_string(), "1.0");
        let newer = check_data(ack(
            HELLO_ID,
            with(data_payload(), "protocol_version", json!("1.9")),
        ))
        .expect("accepted");
        assert_eq!(newer.version, SHIM_MAX_VERSION);
    }

    // --- order -------------------------------------------------------------

    #[test]
    fn invalid_frame_is_reported_before_a_wrong_id() {
        let failure = refused(check_data(ack(
            "someone-else",
            with(data_payload(), "max_concurrent", json!(0)),
        )));
        assert_eq!(failure.rejection.step(), "2");
    }

    #[test]
    fn wrong_type_is_reported_before_a_wrong_id() {
        let pong = input(json!({"type": "PONG", "id": "someone-else", "ts": 1.0}));
        assert_eq!(refused(check_data(pong)).rejection.step(), "3");
    }

    #[test]
    fn wrong_id_is_reported_before_a_session_mismatch() {
        let payload = with(data_payload(), "session_id", json!("session-2"));
        let failure = refused(check_data(ack("someone-else", payload)));
        assert_eq!(failure.rejection, AckRejection::CorrelationMismatch);
        assert_eq!(failure.after(), AfterFailure::Terminal);

        let control = with(control_payload(), "session_id", json!("session-2"));
        let failure = refused(check_control(ack("someone-else", control)));
        assert_eq!(failure.rejection, AckRejection::CorrelationMismatch);
    }

    #[test]
    fn session_mismatch_is_reported_before_an_unadvertised_grant() {
        let payload = with(
            with(data_payload(), "session_id", json!("session-2")),
            "granted_capabilities",
            json!(["computer_use"]),
        );
        assert_eq!(
            refused(check_data(ack(HELLO_ID, payload))).rejection.step(),
            "5a"
        );
    }

    #[test]
    fn unadvertised_grant_is_reported_before_a_version_mismatch() {
        let payload = with(
            with(data_payload(), "granted_capabilities", json!(["local_llm"])),
            "protocol_version",
            json!("2.0"),
        );
        assert_eq!(
            refused(check_data(ack(HELLO_ID, payload))).rejection.step(),
            "7"
        );
    }

    #[test]
    fn version_mismatch_is_reported_before_control_requirements() {
        let payload = with(
            with(control_payload(), "granted_capabilities", json!(["files"])),
            "protocol_version",
            json!("x"),
        );
        assert_eq!(
            refused(check_control(ack(HELLO_ID, payload)))
                .rejection
                .step(),
            "8"
        );
    }

    // --- success and limits --------------------------------------------------

    #[test]
    fn accepted_ack_fixes_the_granted_subset_version_and_connection_id() {
        let payload = with(
            with(
                control_payload(),
                "granted_capabilities",
                json!(["directory_browse", "files"]),
            ),
            "protocol_version",
            json!("01.1"),
        );
        let negotiated = check_control(ack(HELLO_ID, payload)).expect("accepted");
        assert_eq!(negotiated.version, SHIM_MAX_VERSION);
        assert_eq!(
            negotiated.granted,
            BTreeSet::from([Capability::Files, Capability::DirectoryBrowse])
        );
        assert_eq!(
            negotiated.granted_as_sent,
            vec![Capability::DirectoryBrowse, Capability::Files]
        );
        assert_eq!(
            negotiated.granted_names_sorted(),
            vec!["directory_browse", "files"]
        );
        assert_eq!(negotiated.connection_id.as_deref(), Some("presence-7"));
    }

    #[test]
    fn empty_grant_is_accepted_on_a_data_connection() {
        let negotiated = check_data(ack(
            HELLO_ID,
            with(data_payload(), "granted_capabilities", json!([])),
        ))
        .expect("accepted");
        assert!(negotiated.granted.is_empty());
    }

    #[test]
    fn platform_can_lower_limits_but_never_raise_them() {
        let n = |v: u64| NonZeroU64::new(v).expect("non-zero");
        let ceilings = Limits {
            max_concurrent: n(4),
            command_timeout_seconds: n(30),
            max_file_size_bytes: n(1000),
        };
        let payload = json!({"session_id": "session-1", "granted_capabilities": ["files"],
                             "max_concurrent": 2, "command_timeout_seconds": 300,
                             "max_file_size_bytes": 999});
        let negotiated = check_ack(
            HELLO_ID,
            &data(),
            &[Capability::Files],
            ceilings,
            ack(HELLO_ID, payload),
        )
        .expect("accepted");
        assert_eq!(
            negotiated.limits,
            Limits {
                max_concurrent: n(2),
                command_timeout_seconds: n(30),
                max_file_size_bytes: n(999),
            }
        );

        // Omitted values default to 4 / 30 / 10 MiB and cannot exceed tighter ceilings.
        let tight = Limits {
            max_concurrent: n(1),
            command_timeout_seconds: n(5),
            max_file_size_bytes: n(10),
        };
        let negotiated = check_ack(
            HELLO_ID,
            &data(),
            &[Capability::Files],
            tight,
            ack(
                HELLO_ID,
                json!({"session_id": "session-1", "granted_capabilities": []}),
            ),
        )
        .expect("accepted");
        assert_eq!(negotiated.limits, tight);
        let roomy = Limits {
            max_concurrent: n(64),
            command_timeout_seconds: n(3600),
            max_file_size_bytes: n(u64::MAX),
        };
        let negotiated = check_ack(
            HELLO_ID,
            &data(),
            &[Capability::Files],
            roomy,
            ack(
                HELLO_ID,
                json!({"session_id": "session-1", "granted_capabilities": []}),
            ),
        )
        .expect("accepted");
        assert_eq!(negotiated.limits, Limits::default());
    }

    // --- advertising ---------------------------------------------------------

    #[test]
    fn default_gates_advertise_files_and_control_appends_directory_browse() {
        let gates = Gates::default();
        assert_eq!(
            advertised_capabilities(&gates, &data()),
            vec![Capability::Files]
        );
        assert_eq!(
            advertised_capabilities(&gates, &ConnectionKind::Control),
            vec![Capability::Files, Capability::DirectoryBrowse]
        );
    }

    #[test]
    fn every_gate_on_advertises_in_specified_order_without_recording() {
        let gates = Gates {
            enable_shell: true,
            enable_computer_use: true,
            computer_use_backend: true,
            enable_local_llm: true,
            local_llm_models_found: true,
            enable_hardware: true,
            serial_support: true,
            usb_support: true,
            gpio_support: true,
        };
        let names: Vec<_> = advertised_capabilities(&gates, &ConnectionKind::Control)
            .into_iter()
            .map(Capability::as_str)
            .collect();
        assert_eq!(
            names,
            [
                "shell",
                "files",
                "computer_use",
                "local_llm",
                "hardware_serial",
                "hardware_usb",
                "hardware_gpio",
                "directory_browse"
            ]
        );
        let on_data = advertised_capabilities(&gates, &data());
        assert!(!on_data.contains(&Capability::DirectoryBrowse));
        assert!(!on_data.contains(&Capability::Recording));
    }

    #[test]
    fn dependency_without_local_switch_advertises_nothing() {
        let probed_only = Gates {
            computer_use_backend: true,
            local_llm_models_found: true,
            serial_support: true,
            usb_support: true,
            gpio_support: true,
            ..Gates::default()
        };
        assert_eq!(
            advertised_capabilities(&probed_only, &data()),
            vec![Capability::Files]
        );
        let switched_only = Gates {
            enable_computer_use: true,
            enable_local_llm: true,
            enable_hardware: true,
            ..Gates::default()
        };
        assert_eq!(
            advertised_capabilities(&switched_only, &data()),
            vec![Capability::Files]
        );
        let shell = Gates {
            enable_shell: true,
            ..Gates::default()
        };
        assert_eq!(
            advertised_capabilities(&shell, &data()),
            vec![Capability::Shell, Capability::Files]
        );
    }

    // --- HELLO -------------------------------------------------------------

    fn identity() -> Identity {
        Identity {
            machine_id: "4c6f1b0e-9d2a-4c1e-8f43-0a1b2c3d4e5f".to_owned(),
            display_name: "alice-laptop".to_owned(),
            platform: Platform::Linux,
            arch: Arch::X86_64,
        }
    }

    fn probes() -> Probes {
        let device = |kind: &str| {
            let mut map = Map::new();
            map.insert("type".to_owned(), json!(kind));
            map
        };
        Probes {
            screen_resolution: Some([1920, 1080]),
            local_llm_models: vec!["llama3".to_owned()],
            hardware_devices: vec![device("serial"), device("usb"), device("gpio")],
            computer_use_features: vec!["screenshot.region".to_owned()],
            computer_use_features_coarse: vec!["screenshot".to_owned()],
        }
    }

    fn payload_of(hello: Hello) -> Value {
        let frame = Frame::new(HELLO_ID, 1.5, Message::Hello(hello));
        let bytes = encode(&frame).expect("encodes");
        let value: Value = serde_json::from_slice(&bytes).expect("json");
        value["payload"].clone()
    }

    #[test]
    fn data_hello_matches_the_specification_example() {
        let hello = build_hello(
            &identity(),
            &data(),
            Some("/home/alice/projects/site"),
            &[Capability::Shell, Capability::Files],
            Probes::default(),
        );
        assert_eq!(
            payload_of(hello),
            json!({"shim_version": SHIM_VERSION,
                   "machine_id": "4c6f1b0e-9d2a-4c1e-8f43-0a1b2c3d4e5f",
                   "display_name": "alice-laptop", "platform": "linux", "arch": "x86_64",
                   "screen_resolution": null, "capabilities": ["shell", "files"],
                   "allowed_root": "/home/alice/projects/site", "local_llm_models": [],
                   "hardware_devices": [], "computer_use_features": [],
                   "computer_use_features_coarse": [], "recording_channels": [],
                   "recording_routes": [], "protocol_version": "1.1"})
        );
    }

    #[test]
    fn control_hello_sends_null_root_even_when_one_is_passed() {
        let hello = build_hello(
            &identity(),
            &ConnectionKind::Control,
            Some("/home/alice"),
            &[Capability::Files, Capability::DirectoryBrowse],
            Probes::default(),
        );
        assert_eq!(hello.allowed_root, None);
        let payload = payload_of(hello);
        assert_eq!(payload["allowed_root"], Value::Null);
        assert_eq!(
            payload["capabilities"],
            json!(["files", "directory_browse"])
        );
    }

    #[test]
    fn probe_results_of_unadvertised_capabilities_are_not_sent() {
        let hello = build_hello(
            &identity(),
            &data(),
            Some("/r"),
            &[Capability::Files],
            probes(),
        );
        assert_eq!(hello.screen_resolution, None);
        assert!(hello.local_llm_models.is_empty());
        assert!(hello.hardware_devices.is_empty());
        assert!(hello.computer_use_features.is_empty());
        assert!(hello.computer_use_features_coarse.is_empty());
        assert!(hello.recording_channels.is_empty());
        assert!(hello.recording_routes.is_empty());
    }

    #[test]
    fn probe_results_of_advertised_capabilities_are_sent() {
        let hello = build_hello(
            &identity(),
            &data(),
            Some("/r"),
            &[
                Capability::Files,
                Capability::ComputerUse,
                Capability::LocalLlm,
                Capability::HardwareUsb,
            ],
            probes(),
        );
        assert_eq!(hello.screen_resolution, Some([1920, 1080]));
        assert_eq!(hello.local_llm_models, vec!["llama3".to_owned()]);
        assert_eq!(
            hello.computer_use_features,
            vec!["screenshot.region".to_owned()]
        );
        assert_eq!(
            hello.computer_use_features_coarse,
            vec!["screenshot".to_owned()]
        );
        let kinds: Vec<_> = hello
            .hardware_devices
            .iter()
            .map(|d| d["type"].as_str())
            .collect();
        assert_eq!(kinds, vec![Some("usb")]);
        assert_eq!(hello.shim_version, env!("CARGO_PKG_VERSION"));
        assert_eq!(hello.protocol_version, "1.1");
    }
}
