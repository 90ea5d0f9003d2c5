//! WebSocket close codes: what a received code means for the runtime, and
//! the codes and reasons the shim sends (PROTOCOL.md §3.3, §11).

/// What to do after the platform closed the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseAction {
    /// 4426–4429: audit `SESSION_REVOKED`, never reconnect.
    Terminal(TerminalClose),
    /// 1000/1001: reconnect after `backoff(0)`, then reset the attempt counter.
    ReconnectNormal,
    /// Anything else (1006, 1009, 1011, 4400, 4401, 4403, no code…):
    /// reconnect with backoff.
    ReconnectBackoff,
}

/// The terminal close codes the platform sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminalClose {
    /// 4426.
    ProtocolVersionMismatch,
    /// 4427.
    SessionTakenOver,
    /// 4428.
    SessionRevoked,
    /// 4429.
    PlatformShutdown,
}

impl TerminalClose {
    /// The numeric close code.
    pub fn code(self) -> u16 {
        match self {
            TerminalClose::ProtocolVersionMismatch => 4426,
            TerminalClose::SessionTakenOver => 4427,
            TerminalClose::SessionRevoked => 4428,
            TerminalClose::PlatformShutdown => 4429,
        }
    }

    /// The label, e.g. `SESSION_TAKEN_OVER`.
    pub fn label(self) -> &'static str {
        match self {
            TerminalClose::ProtocolVersionMismatch => "PROTOCOL_VERSION_MISMATCH",
            TerminalClose::SessionTakenOver => "SESSION_TAKEN_OVER",
            TerminalClose::SessionRevoked => "SESSION_REVOKED",
            TerminalClose::PlatformShutdown => "PLATFORM_SHUTDOWN",
        }
    }

    /// The audit `reason`: the label lower-cased, e.g. `session_taken_over`.
    pub fn audit_reason(self) -> &'static str {
        match self {
            TerminalClose::ProtocolVersionMismatch => "protocol_version_mismatch",
            TerminalClose::SessionTakenOver => "session_taken_over",
            TerminalClose::SessionRevoked => "session_revoked",
            TerminalClose::PlatformShutdown => "platform_shutdown",
        }
    }

    /// The terminal close for a numeric code, if it is one.
    pub fn from_code(code: u16) -> Option<Self> {
        Some(match code {
            4426 => TerminalClose::ProtocolVersionMismatch,
            4427 => TerminalClose::SessionTakenOver,
            4428 => TerminalClose::SessionRevoked,
            4429 => TerminalClose::PlatformShutdown,
            _ => return None,
        })
    }
}

/// Classifies a received close (`None` when the connection ended without a
/// close frame).
pub fn classify_close(code: Option<u16>) -> CloseAction {
    match code {
        Some(1000 | 1001) => CloseAction::ReconnectNormal,
        Some(code) => match TerminalClose::from_code(code) {
            Some(terminal) => CloseAction::Terminal(terminal),
            None => CloseAction::ReconnectBackoff,
        },
        None => CloseAction::ReconnectBackoff,
    }
}

/// A close the shim sends, with its code and reason text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShimClose {
    /// 4400: the serialized HELLO exceeds 16 MiB.
    HelloTooLarge,
    /// 4400: the ACK's `id` is not the HELLO's.
    AckCorrelationMismatch,
    /// 4400: the ACK grants a capability that was not advertised.
    AckUnadvertisedCapability,
    /// 4403: data connection bound to another session.
    AckSessionMismatch,
    /// 4403: control connection bound to a session.
    AckControlMismatch,
    /// 4426: the platform's protocol version does not parse.
    InvalidPlatformVersion,
    /// 4426: control connection requirements not met.
    ControlRequirements,
    /// 4428: after receiving `SESSION_REVOKED`.
    SessionRevoked,
}

impl ShimClose {
    /// Close code to send.
    pub fn code(self) -> u16 {
        match self {
            ShimClose::HelloTooLarge
            | ShimClose::AckCorrelationMismatch
            | ShimClose::AckUnadvertisedCapability => 4400,
            ShimClose::AckSessionMismatch | ShimClose::AckControlMismatch => 4403,
            ShimClose::InvalidPlatformVersion | ShimClose::ControlRequirements => 4426,
            ShimClose::SessionRevoked => 4428,
        }
    }

    /// Reason text to send (always ≤ 123 bytes).
    pub fn reason(self) -> &'static str {
        match self {
            ShimClose::HelloTooLarge => "HELLO payload too large",
            ShimClose::AckCorrelationMismatch => "HELLO_ACK correlation mismatch",
            ShimClose::AckUnadvertisedCapability => "HELLO_ACK granted unadvertised capability",
            ShimClose::AckSessionMismatch => "HELLO_ACK session mismatch",
            ShimClose::AckControlMismatch => "HELLO_ACK control mismatch",
            ShimClose::InvalidPlatformVersion => "Invalid platform protocol version",
            ShimClose::ControlRequirements => {
                "Machine control requires protocol 1.1 and directory_browse"
            }
            ShimClose::SessionRevoked => "session_revoked",
        }
    }

    /// True when the runtime ends as a terminal authentication failure
    /// (exit 77, PROTOCOL.md §4.4 step 5) rather than a plain terminal stop.
    pub fn is_auth_failure(self) -> bool {
        matches!(
            self,
            ShimClose::AckSessionMismatch | ShimClose::AckControlMismatch
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes_4426_to_4429_are_terminal_and_others_reconnect() {
        for (code, label) in [
            (4426, "protocol_version_mismatch"),
            (4427, "session_taken_over"),
            (4428, "session_revoked"),
            (4429, "platform_shutdown"),
        ] {
            match classify_close(Some(code)) {
                CloseAction::Terminal(t) => {
                    assert_eq!(t.code(), code);
                    assert_eq!(t.audit_reason(), label);
                    assert_eq!(t.label().to_ascii_lowercase(), label);
                }
                other => panic!("{code}: {other:?}"),
            }
        }
        assert_eq!(classify_close(Some(1000)), CloseAction::ReconnectNormal);
        assert_eq!(classify_close(Some(1001)), CloseAction::ReconnectNormal);
        for code in [1006, 1009, 1011, 4400, 4401, 4403, 4425, 4430] {
            assert_eq!(
                classify_close(Some(code)),
                CloseAction::ReconnectBackoff,
                "{code}"
            );
        }
        assert_eq!(classify_close(None), CloseAction::ReconnectBackoff);
    }

    #[test]
    fn every_reason_the_shim_sends_fits_a_close_frame() {
        for close in [
            ShimClose::HelloTooLarge,
            ShimClose::AckCorrelationMismatch,
            ShimClose::AckUnadvertisedCapability,
            ShimClose::AckSessionMismatch,
            ShimClose::AckControlMismatch,
            ShimClose::InvalidPlatformVersion,
            ShimClose::ControlRequirements,
            ShimClose::SessionRevoked,
        ] {
            assert!(close.reason().len() <= 123);
        }
    }
}
