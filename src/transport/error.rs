//! [`TransportError`]: every way opening or using a connection can fail,
//! each with one precise name, its [`Disposition`] (what the caller does
//! next, PROTOCOL.md §1.3) and the `reason` of the `WS_DISCONNECTED` audit
//! record.
//!
//! Messages are one line. They must never contain a secret: no variant holds
//! the bearer token or proxy credentials, and of a response from the network
//! only the `detail` of a refused upgrade is kept, escaped and bounded
//! ([`refusal_detail`]); no other body or header is ever formatted here.
//! Operating-system and TLS error texts are shown with control characters
//! escaped.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::proxy::ProxySettingProblem;
use super::tunnel::ProxyResponseProblem;
use super::url::UrlError;
use crate::text::{excerpt, one_line};

/// What the caller does after a [`TransportError`] (PROTOCOL.md §1.3, §11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// The configuration cannot work as it is (`start` exits 78). Retrying
    /// does not help.
    Config,
    /// Reconnect with backoff.
    Transient,
    /// HTTP 401 on the upgrade: refresh the access token once and retry
    /// immediately (PROTOCOL.md §1.3).
    RefreshToken,
    /// The platform refused this machine or session (HTTP 403): no token
    /// refresh; reconnect with backoff a few times only, then the runtime
    /// ends (PROTOCOL.md §11).
    Refused,
}

/// The step of opening a connection that failed or timed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Resolving the host (or the proxy's host).
    Resolve,
    /// The TCP connection (to the platform or to the proxy).
    Connect,
    /// The `CONNECT` exchange with the proxy.
    Proxy,
    /// The TLS handshake, including certificate and pin verification.
    Tls,
    /// The HTTP upgrade request and its response.
    Upgrade,
    /// Reading from an established connection.
    Read,
    /// Writing to an established connection.
    Write,
}

impl Stage {
    fn as_str(self) -> &'static str {
        match self {
            Stage::Resolve => "resolve",
            Stage::Connect => "connect",
            Stage::Proxy => "proxy",
            Stage::Tls => "tls",
            Stage::Upgrade => "upgrade",
            Stage::Read => "read",
            Stage::Write => "write",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Resolve => "name resolution",
            Stage::Connect => "the TCP connection",
            Stage::Proxy => "the proxy's CONNECT exchange",
            Stage::Tls => "the TLS handshake",
            Stage::Upgrade => "the WebSocket upgrade",
            Stage::Read => "a read",
            Stage::Write => "a write",
        })
    }
}

/// Why the `--ca-file` cannot be used (PROTOCOL.md §1.2a: a configuration
/// error).
#[derive(Debug)]
#[non_exhaustive]
pub enum CaFileProblem {
    /// Opening or reading it failed.
    Unreadable(io::Error),
    /// It is larger than the limit (bytes).
    TooLarge(u64),
    /// It is not well-formed PEM.
    Malformed(String),
    /// It holds no `CERTIFICATE` section.
    NoCertificates,
    /// A certificate in it is not a usable trust anchor.
    BadCertificate(rustls::Error),
}

impl fmt::Display for CaFileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaFileProblem::Unreadable(e) => {
                write!(f, "cannot be read: {}", one_line(&e.to_string()))
            }
            CaFileProblem::TooLarge(limit) => write!(f, "is larger than {limit} bytes"),
            CaFileProblem::Malformed(detail) => write!(f, "is not valid PEM: {}", one_line(detail)),
            CaFileProblem::NoCertificates => f.write_str("contains no PEM CERTIFICATE section"),
            CaFileProblem::BadCertificate(e) => {
                write!(
                    f,
                    "holds an unusable certificate: {}",
                    one_line(&e.to_string())
                )
            }
        }
    }
}

/// A failure of the transport layer.
///
/// Each variant's documentation says when it happens;
/// [`disposition`](Self::disposition) says what the caller does next.
#[derive(Debug)]
#[non_exhaustive]
pub enum TransportError {
    /// The URL is refused; nothing was connected. (Config.)
    Url(UrlError),
    /// A `ws://` host resolved to no loopback address; nothing was
    /// connected. (Config.)
    NotLoopback {
        /// The host as written in the URL.
        host: String,
    },
    /// The `--ca-file` is unreadable, empty or malformed. (Config.)
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: CaFileProblem,
    },
    /// `HTTPS_PROXY` / `https_proxy` holds a value that cannot be used.
    /// (Config.)
    ProxySetting {
        /// The variable it came from.
        variable: &'static str,
        /// What is wrong with it.
        problem: ProxySettingProblem,
    },
    /// The TLS library refused the client configuration (a defect of this
    /// program, not of the input). (Config.)
    TlsSetup(rustls::Error),
    /// The host (or the proxy's host) could not be resolved. (Transient.)
    Resolve {
        /// The host looked up.
        host: String,
        /// The resolver's error.
        source: io::Error,
    },
    /// No TCP connection could be made to any address of the host (or the
    /// proxy); the error is the last address's. (Transient.)
    Connect {
        /// The last address tried.
        addr: SocketAddr,
        /// The connect error.
        source: io::Error,
    },
    /// The opening timeout (10 s for the whole opening) ran out in this
    /// stage. (Transient.)
    Timeout(Stage),
    /// The proxy answered `CONNECT` with a status other than 200 (407 when
    /// it wants other credentials). (Transient.)
    ProxyRefused {
        /// The proxy's status code.
        status: u16,
    },
    /// The proxy's answer to `CONNECT` is not a well-formed HTTP response,
    /// is too large, or is followed by data. (Transient.)
    ProxyResponse(ProxyResponseProblem),
    /// The TLS handshake failed: certificate not trusted, expired, wrong
    /// name, no common protocol version, an alert from the server, …
    /// (Transient.)
    Tls(rustls::Error),
    /// The certificate chain is valid but the leaf's SPKI digest is not one
    /// of the configured pins. Audited as `tls_pin_mismatch`; never
    /// bypassed. (Transient: backoff.)
    PinMismatch,
    /// The upgrade was answered 401. (RefreshToken.)
    Unauthorized {
        /// The body's `detail`, as `refusal_detail` keeps it.
        detail: Option<String>,
    },
    /// The upgrade was answered 403: the session is not bound to this
    /// machine, or the feature is off for the account. (Refused.)
    Forbidden {
        /// The body's `detail`, as `refusal_detail` keeps it.
        detail: Option<String>,
    },
    /// The upgrade was answered with another status than 101, 401 or 403.
    /// (Transient.)
    UpgradeStatus(u16),
    /// The upgrade response was 101 but is not a valid WebSocket handshake
    /// (missing `Upgrade`, wrong `Sec-WebSocket-Accept`, …). (Transient.)
    UpgradeRejected(String),
    /// The access token contains characters that cannot appear in an HTTP
    /// header; nothing was sent. (RefreshToken: a fresh token may be fine.)
    InvalidToken,
    /// An I/O error at this stage, on an open connection or while opening
    /// it. (Transient.)
    Io {
        /// Where it happened.
        stage: Stage,
        /// The error.
        source: io::Error,
    },
    /// An inbound message or frame is larger than the 16 MiB limit; the
    /// connection was failed with close code 1009 (PROTOCOL.md §1.4).
    /// (Transient.)
    MessageTooLarge {
        /// Its size in bytes (as announced by the frame header).
        size: usize,
    },
    /// An outbound message is larger than 16 MiB; it was not sent. The
    /// protocol layer replaces such frames before they get here
    /// (PROTOCOL.md §1.4), so this is a caller defect. (Transient.)
    OutboundTooLarge {
        /// Its size in bytes.
        size: usize,
    },
    /// The peer broke the WebSocket protocol (bad opcode, masked frame,
    /// invalid UTF-8 in a text frame, …). (Transient.)
    Protocol(String),
    /// The connection is closed: the close handshake completed, or an
    /// earlier error ended it. (Transient.)
    Closed,
    /// A write made no progress for the stall limit: the peer stopped
    /// reading. (Transient.)
    WriteStalled,
    /// The pong to a keepalive ping did not arrive in time
    /// (PROTOCOL.md §1.5); reported by the caller of
    /// [`Keepalive`](super::Keepalive). (Transient.)
    KeepaliveTimeout,
}

impl TransportError {
    /// What the caller does next.
    pub fn disposition(&self) -> Disposition {
        match self {
            TransportError::Url(_)
            | TransportError::NotLoopback { .. }
            | TransportError::CaFile { .. }
            | TransportError::ProxySetting { .. }
            | TransportError::TlsSetup(_) => Disposition::Config,
            TransportError::Unauthorized { .. } | TransportError::InvalidToken => {
                Disposition::RefreshToken
            }
            TransportError::Forbidden { .. } => Disposition::Refused,
            TransportError::Resolve { .. }
            | TransportError::Connect { .. }
            | TransportError::Timeout(_)
            | TransportError::ProxyRefused { .. }
            | TransportError::ProxyResponse(_)
            | TransportError::Tls(_)
            | TransportError::PinMismatch
            | TransportError::UpgradeStatus(_)
            | TransportError::UpgradeRejected(_)
            | TransportError::Io { .. }
            | TransportError::MessageTooLarge { .. }
            | TransportError::OutboundTooLarge { .. }
            | TransportError::Protocol(_)
            | TransportError::Closed
            | TransportError::WriteStalled
            | TransportError::KeepaliveTimeout => Disposition::Transient,
        }
    }

    /// Reconnect with backoff.
    pub fn is_transient(&self) -> bool {
        self.disposition() == Disposition::Transient
    }

    /// Retrying cannot help: a configuration error.
    pub fn is_terminal(&self) -> bool {
        self.disposition() == Disposition::Config
    }

    /// What the platform said about a refused upgrade (the body's `detail`),
    /// escaped and bounded.
    pub fn platform_reason(&self) -> Option<&str> {
        match self {
            TransportError::Unauthorized { detail } | TransportError::Forbidden { detail } => {
                detail.as_deref()
            }
            _ => None,
        }
    }

    /// HTTP 401 (or an unsendable token): refresh once, retry once.
    pub fn needs_token_refresh(&self) -> bool {
        self.disposition() == Disposition::RefreshToken
    }

    /// A short stable name of the failure, for logs and the audit reason.
    pub fn kind(&self) -> String {
        match self {
            TransportError::Url(_) => "url_refused".into(),
            TransportError::NotLoopback { .. } => "not_loopback".into(),
            TransportError::CaFile { .. } => "ca_file".into(),
            TransportError::ProxySetting { .. } => "proxy_setting".into(),
            TransportError::TlsSetup(_) => "tls_setup".into(),
            TransportError::Resolve { .. } => "dns".into(),
            TransportError::Connect { .. } => "connect".into(),
            TransportError::Timeout(stage) => format!("timeout_{}", stage.as_str()),
            TransportError::ProxyRefused { status } => format!("proxy_http_{status}"),
            TransportError::ProxyResponse(_) => "proxy_response".into(),
            TransportError::Tls(_) => "tls".into(),
            TransportError::PinMismatch => "tls_pin_mismatch".into(),
            TransportError::Unauthorized { .. } => "http_401".into(),
            TransportError::Forbidden { .. } => "http_403".into(),
            TransportError::UpgradeStatus(status) => format!("http_{status}"),
            TransportError::UpgradeRejected(_) => "upgrade_rejected".into(),
            TransportError::InvalidToken => "invalid_token".into(),
            TransportError::Io { stage, .. } => format!("io_{}", stage.as_str()),
            TransportError::MessageTooLarge { .. } => "message_too_large".into(),
            TransportError::OutboundTooLarge { .. } => "outbound_too_large".into(),
            TransportError::Protocol(_) => "protocol".into(),
            TransportError::Closed => "closed".into(),
            TransportError::WriteStalled => "write_stalled".into(),
            TransportError::KeepaliveTimeout => "keepalive_timeout".into(),
        }
    }

    /// The `reason` of the `WS_DISCONNECTED` audit record for a connection
    /// that ended (or could not be opened) with this error:
    /// `tls_pin_mismatch` for a pin mismatch (PROTOCOL.md §1.2a),
    /// `keepalive_timeout` for a connection that stopped answering,
    /// otherwise `loop_error: <kind>` (AUDIT.md §3.3).
    pub fn audit_reason(&self) -> String {
        match self {
            TransportError::PinMismatch | TransportError::KeepaliveTimeout => self.kind(),
            other => format!("loop_error: {}", other.kind()),
        }
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Url(problem) => write!(f, "invalid WebSocket URL: {problem}"),
            TransportError::NotLoopback { host } => write!(
                f,
                "{} does not resolve to a loopback address; plain-text ws:// is only allowed to loopback",
                one_line(host)
            ),
            TransportError::CaFile { path, problem } => write!(
                f,
                "CA file {} {problem}",
                one_line(&path.display().to_string())
            ),
            TransportError::ProxySetting { variable, problem } => {
                write!(f, "{variable} cannot be used: {problem}")
            }
            TransportError::TlsSetup(e) => {
                write!(f, "TLS client setup failed: {}", one_line(&e.to_string()))
            }
            TransportError::Resolve { host, source } => write!(
                f,
                "cannot resolve {}: {}",
                one_line(host),
                one_line(&source.to_string())
            ),
            TransportError::Connect { addr, source } => write!(
                f,
                "cannot connect to {addr}: {}",
                one_line(&source.to_string())
            ),
            TransportError::Timeout(stage) => write!(f, "timed out during {stage}"),
            TransportError::ProxyRefused { status } => {
                write!(f, "the proxy refused CONNECT with HTTP {status}")
            }
            TransportError::ProxyResponse(problem) => {
                write!(f, "invalid answer from the proxy: {problem}")
            }
            TransportError::Tls(e) => {
                write!(f, "TLS handshake failed: {}", one_line(&e.to_string()))
            }
            TransportError::PinMismatch => f.write_str(
                "TLS handshake failed: the server's public key matches none of the configured pins",
            ),
            TransportError::Unauthorized { detail } => {
                f.write_str(
                    "the platform refused the upgrade with HTTP 401 (access token rejected)",
                )?;
                quoted_detail(f, detail.as_deref())
            }
            TransportError::Forbidden { detail } => {
                f.write_str("the platform refused the upgrade with HTTP 403")?;
                quoted_detail(f, detail.as_deref())
            }
            TransportError::UpgradeStatus(status) => {
                write!(f, "the platform answered the upgrade with HTTP {status}")
            }
            TransportError::UpgradeRejected(detail) => {
                write!(
                    f,
                    "invalid WebSocket upgrade response: {}",
                    one_line(detail)
                )
            }
            TransportError::InvalidToken => f.write_str(
                "the stored access token contains characters not allowed in an HTTP header",
            ),
            TransportError::Io { stage, source } => {
                write!(
                    f,
                    "I/O error during {stage}: {}",
                    one_line(&source.to_string())
                )
            }
            TransportError::MessageTooLarge { size } => write!(
                f,
                "inbound message of {size} bytes exceeds the 16 MiB limit"
            ),
            TransportError::OutboundTooLarge { size } => write!(
                f,
                "outbound message of {size} bytes exceeds the 16 MiB limit; not sent"
            ),
            TransportError::Protocol(detail) => {
                write!(f, "WebSocket protocol error: {}", one_line(detail))
            }
            TransportError::Closed => f.write_str("the connection is closed"),
            TransportError::WriteStalled => {
                f.write_str("writing made no progress: the platform stopped reading")
            }
            TransportError::KeepaliveTimeout => {
                f.write_str("no pong to the keepalive ping within 10 s")
            }
        }
    }
}

/// `: "<detail>"` after a refusal's message, when the platform gave one.
fn quoted_detail(f: &mut fmt::Formatter<'_>, detail: Option<&str>) -> fmt::Result {
    match detail {
        Some(detail) => write!(f, ": \"{detail}\""),
        None => Ok(()),
    }
}

/// Largest refusal body that is parsed for its `detail`; the platform's are
/// a few dozen bytes.
const MAX_REFUSAL_BODY_BYTES: usize = 64 * 1024;

/// The `detail` of a refused upgrade's JSON body (`{"detail": …}`, the
/// platform's error shape), as an [`excerpt`]: a string as it is, any
/// other value as compact JSON. `None` when the body is absent, larger
/// than 64 KiB, not JSON, or has no non-empty `detail`.
pub fn refusal_detail(body: &[u8]) -> Option<String> {
    if body.len() > MAX_REFUSAL_BODY_BYTES {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let text = match value.get("detail")? {
        serde_json::Value::Null => return None,
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    (!text.is_empty()).then(|| excerpt(&text))
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TransportError::Resolve { source, .. }
            | TransportError::Connect { source, .. }
            | TransportError::Io { source, .. } => Some(source),
            TransportError::Tls(e) | TransportError::TlsSetup(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upgrade_outcomes_map_to_the_protocol_table() {
        let unauthorized = TransportError::Unauthorized { detail: None };
        assert_eq!(unauthorized.disposition(), Disposition::RefreshToken);
        assert_eq!(
            TransportError::Forbidden { detail: None }.disposition(),
            Disposition::Refused
        );
        assert!(!TransportError::Forbidden { detail: None }.is_terminal());
        assert!(TransportError::UpgradeStatus(500).is_transient());
        assert!(TransportError::Timeout(Stage::Upgrade).is_transient());
        assert!(TransportError::PinMismatch.is_transient());
        assert!(TransportError::Url(UrlError::PlainTextToRemoteHost).is_terminal());
        assert!(!unauthorized.is_transient());
        assert!(!unauthorized.is_terminal());
    }

    #[test]
    fn audit_reasons_name_the_pin_mismatch_and_the_keepalive_and_prefix_the_rest() {
        assert_eq!(
            TransportError::PinMismatch.audit_reason(),
            "tls_pin_mismatch"
        );
        assert_eq!(
            TransportError::KeepaliveTimeout.audit_reason(),
            "keepalive_timeout"
        );
        assert_eq!(
            TransportError::UpgradeStatus(502).audit_reason(),
            "loop_error: http_502"
        );
        assert_eq!(
            TransportError::Timeout(Stage::Tls).audit_reason(),
            "loop_error: timeout_tls"
        );
    }

    #[test]
    fn a_refusal_keeps_the_bodys_detail_escaped_and_bounded() {
        assert_eq!(
            refusal_detail(br#"{"detail":"Session is not bound to this machine"}"#).as_deref(),
            Some("Session is not bound to this machine")
        );
        assert_eq!(
            refusal_detail(br#"{"detail":"a\nb\u001b[2J"}"#).as_deref(),
            Some("a\\nb\\u{1b}[2J")
        );
        assert_eq!(
            refusal_detail(br#"{"detail":[{"msg":"off"}]}"#).as_deref(),
            Some(r#"[{\"msg\":\"off\"}]"#)
        );
        let long = format!(r#"{{"detail":"{}"}}"#, "x".repeat(10_000));
        assert!(refusal_detail(long.as_bytes()).unwrap().ends_with('…'));
        for unusable in [
            &b"403 Forbidden\n"[..],
            b"",
            br#"{"detail":""}"#,
            br#"{"x":1}"#,
        ] {
            assert_eq!(refusal_detail(unusable), None);
        }
        let error = TransportError::Forbidden {
            detail: refusal_detail(br#"{"detail":"not bound"}"#),
        };
        assert_eq!(
            error.to_string(),
            r#"the platform refused the upgrade with HTTP 403: "not bound""#
        );
        assert_eq!(error.platform_reason(), Some("not bound"));
    }

    #[test]
    fn messages_are_one_line() {
        let e = TransportError::Io {
            stage: Stage::Read,
            source: io::Error::other("a\nb"),
        };
        assert_eq!(e.to_string(), "I/O error during a read: a\\nb");
    }
}
