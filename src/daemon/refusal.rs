//! The platform refusing a connection before it is served: an upgrade
//! answered 403, or the handshake closed with 4400 (invalid HELLO) or 4403
//! (this machine or root does not match the session's binding) instead of a
//! `HELLO_ACK`. The platform's reason comes along, and how often a runtime
//! tries again ([`REFUSAL_RETRIES`]) is fixed here.
//!
//! This module owns the wording that tells the user what the refusal means
//! and what to do. It never decides an exit status (the CLI does) and never
//! shows the platform's text unescaped or unbounded: the reason it holds is
//! already an [`excerpt`](crate::text::excerpt).

use std::fmt;

use super::handshake::ConnectionKind;

/// How many times a refused connection is tried again, with backoff, before
/// its runtime ends: four attempts in all.
pub const REFUSAL_RETRIES: u32 = 3;

/// What the platform refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalKind {
    /// HTTP 403 on the upgrade: the session is not bound to this machine,
    /// or the feature is off for the account.
    Forbidden,
    /// Close 4400 before `HELLO_ACK`: the platform found the HELLO invalid.
    InvalidHello,
    /// Close 4403 before `HELLO_ACK`: this machine or root does not match
    /// the session's binding.
    BindingMismatch,
}

impl RefusalKind {
    /// The refusal a close code received before `HELLO_ACK` stands for.
    pub fn from_close(code: Option<u16>) -> Option<RefusalKind> {
        match code? {
            4400 => Some(RefusalKind::InvalidHello),
            4403 => Some(RefusalKind::BindingMismatch),
            _ => None,
        }
    }
}

/// One refused attempt: what was refused, on which connection, and the
/// platform's reason (an escaped, bounded excerpt; `None` when it gave
/// none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlatformRefusal {
    /// What was refused.
    pub kind: RefusalKind,
    /// The connection it was refused on.
    pub connection: ConnectionKind,
    /// The close reason or the 403 body's `detail`.
    pub reason: Option<String>,
}

impl PlatformRefusal {
    /// What the user should do about it.
    fn advice(&self) -> &'static str {
        match (self.kind, &self.connection) {
            (RefusalKind::Forbidden, ConnectionKind::Data { .. }) => {
                "this chat is not bound to this machine: pick the folder in the platform, or start without --session-id"
            }
            (RefusalKind::BindingMismatch, ConnectionKind::Data { .. }) => {
                "this chat is bound to another machine or folder: pick the folder in the platform, or start without --session-id"
            }
            (RefusalKind::Forbidden, ConnectionKind::Control) => {
                "machine control is not available to this account: turn the local executor on in the platform, then start again"
            }
            (RefusalKind::BindingMismatch, ConnectionKind::Control) => {
                "the platform knows this machine under another identity: keep machine_id as it was when this machine was set up"
            }
            (RefusalKind::InvalidHello, _) => {
                "check display_name, machine_id and allowed_root in the configuration, or update autogpt-shim"
            }
        }
    }
}

impl fmt::Display for PlatformRefusal {
    /// One line: what was refused, the platform's reason in quotes, what to
    /// do.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match &self.connection {
            ConnectionKind::Control => "machine control".to_owned(),
            ConnectionKind::Data { session_id } => format!("session {session_id}"),
        };
        let how = match self.kind {
            RefusalKind::Forbidden => "refused the connection with HTTP 403",
            RefusalKind::InvalidHello => "refused the HELLO with close code 4400",
            RefusalKind::BindingMismatch => "refused the handshake with close code 4403",
        };
        let reason = self.reason.as_deref().unwrap_or("no reason given");
        write!(
            f,
            "the platform {how} for {what} (\"{reason}\"): {}",
            self.advice()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> ConnectionKind {
        ConnectionKind::Data {
            session_id: "s-1".into(),
        }
    }

    #[test]
    fn only_4400_and_4403_before_the_ack_are_refusals() {
        assert_eq!(
            RefusalKind::from_close(Some(4400)),
            Some(RefusalKind::InvalidHello)
        );
        assert_eq!(
            RefusalKind::from_close(Some(4403)),
            Some(RefusalKind::BindingMismatch)
        );
        for other in [
            None,
            Some(1000),
            Some(1011),
            Some(4401),
            Some(4408),
            Some(4426),
        ] {
            assert_eq!(RefusalKind::from_close(other), None, "{other:?}");
        }
    }

    #[test]
    fn the_message_quotes_the_reason_and_says_what_to_do() {
        let refusal = PlatformRefusal {
            kind: RefusalKind::Forbidden,
            connection: data(),
            reason: Some("Session is not bound to this machine".into()),
        };
        assert_eq!(
            refusal.to_string(),
            "the platform refused the connection with HTTP 403 for session s-1 \
             (\"Session is not bound to this machine\"): this chat is not bound to this machine: \
             pick the folder in the platform, or start without --session-id"
        );
        let silent = PlatformRefusal {
            kind: RefusalKind::InvalidHello,
            connection: ConnectionKind::Control,
            reason: None,
        };
        let text = silent.to_string();
        assert!(text.contains("(\"no reason given\")"), "{text}");
        assert!(text.contains("check display_name"), "{text}");
        assert!(!text.contains("autogpt-shim auth"), "{text}");
    }
}
