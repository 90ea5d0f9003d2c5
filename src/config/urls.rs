//! Endpoint URLs (AUTH.md §1, PROTOCOL.md §1.1) and the scheme/host rules of
//! the AUTH.md §1 hardening note.
//!
//! Derivation is plain string work, exactly as the reference does it. The
//! validation parses just enough of a URL (scheme, authority, host, port) to
//! decide whether plain text is allowed; it is deliberately stricter than a
//! general URL parser (no credentials, no backslashes, no percent signs or
//! non-ASCII in the host) so that no other parser can read a different host
//! out of a URL this module accepted. It never resolves names.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Percent-encodes a URL component (the session id of a data connection
/// URL); the codec is the transport's, `crate::transport::percent`.
pub use crate::transport::percent::encode as pct_encode;

/// Schemes allowed for `platform_url`.
pub const PLATFORM_SCHEMES: &[&str] = &["https", "wss", "http", "ws"];
/// Schemes allowed for `platform_oauth_url`.
pub const OAUTH_SCHEMES: &[&str] = &["https", "http"];
/// Schemes allowed for `platform_ws_url`.
pub const WS_SCHEMES: &[&str] = &["wss", "ws"];

/// The path appended to the (ws-ified) platform URL.
const WS_PATH: &str = "/ws/local-executor";

/// The derived endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    authorize: String,
    token: String,
    revoke: String,
    ws_base: String,
}

impl Endpoints {
    /// Derives every endpoint from the three URL settings (AUTH.md §1 table).
    pub fn derive(
        platform_url: &str,
        platform_oauth_url: Option<&str>,
        platform_ws_url: Option<&str>,
    ) -> Endpoints {
        let base = platform_url.trim_end_matches('/');
        let http_base = http_ify(base);
        let authorize_base = match platform_oauth_url {
            Some(oauth) => oauth.trim_end_matches('/').to_owned(),
            None => format!("{http_base}/auth"),
        };
        Endpoints {
            authorize: format!("{authorize_base}/authorize"),
            token: format!("{http_base}/api/oauth/token"),
            revoke: format!("{http_base}/api/oauth/revoke"),
            ws_base: match platform_ws_url {
                Some(ws) => ws.to_owned(),
                None => format!("{}{WS_PATH}", ws_ify(base)),
            },
        }
    }

    /// The OAuth authorize endpoint (without query).
    pub fn authorize(&self) -> &str {
        &self.authorize
    }

    /// The OAuth token endpoint; ignores `platform_oauth_url`.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The OAuth revoke endpoint; ignores `platform_oauth_url`.
    pub fn revoke(&self) -> &str {
        &self.revoke
    }

    /// The WebSocket base as configured or derived (an explicit
    /// `platform_ws_url` verbatim).
    pub fn ws_base(&self) -> &str {
        &self.ws_base
    }

    /// The control connection's URL: the WebSocket base without trailing `/`.
    pub fn control_url(&self) -> &str {
        self.ws_base.trim_end_matches('/')
    }

    /// The data connection URL of one session: control URL + `/` + the
    /// percent-encoded session id.
    pub fn session_url(&self, session_id: &str) -> String {
        format!("{}/{}", self.control_url(), pct_encode(session_id))
    }
}

/// `wss://` → `https://`, `ws://` → `http://`; any other prefix unchanged.
pub fn http_ify(url: &str) -> String {
    if let Some(rest) = url.strip_prefix("wss://") {
        format!("https://{rest}")
    } else if let Some(rest) = url.strip_prefix("ws://") {
        format!("http://{rest}")
    } else {
        url.to_owned()
    }
}

/// `https://` → `wss://`, `http://` → `ws://`; any other prefix unchanged.
pub fn ws_ify(url: &str) -> String {
    if let Some(rest) = url.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = url.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        url.to_owned()
    }
}

/// Why a URL is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UrlProblem {
    /// The scheme is missing, not lower-case, or not one of these.
    Scheme(&'static [&'static str]),
    /// Whitespace, control characters, backslashes or non-ASCII characters.
    BadCharacter,
    /// `user:password@` in the authority.
    Credentials,
    /// No host, or a host that is not a name, IPv4 or bracketed IPv6 literal.
    BadHost,
    /// A port that is empty, not decimal, 0 or above 65535.
    BadPort,
    /// `http`/`ws` to a host that is not loopback.
    PlainTextToRemoteHost,
}

impl fmt::Display for UrlProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlProblem::Scheme(allowed) => write!(
                f,
                "the scheme must be one of {} (lower case, followed by ://)",
                allowed.join(", ")
            ),
            UrlProblem::BadCharacter => f.write_str(
                "URLs must not contain whitespace, control characters, backslashes or non-ASCII characters",
            ),
            UrlProblem::Credentials => f.write_str("credentials (user@) in the URL are not allowed"),
            UrlProblem::BadHost => f.write_str("the host is missing or malformed"),
            UrlProblem::BadPort => f.write_str("the port is malformed"),
            UrlProblem::PlainTextToRemoteHost => f.write_str(
                "plain-text http:// and ws:// are only allowed to localhost, 127.0.0.0/8 or [::1]; use https:// or wss://",
            ),
        }
    }
}

/// The parts of a URL this module cares about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UrlParts<'a> {
    /// The scheme, lower case.
    pub scheme: &'a str,
    /// The host: a name, a dotted IPv4 address, or an IPv6 literal without
    /// its brackets.
    pub host: &'a str,
    /// The explicit port, if any.
    pub port: Option<u16>,
}

/// Splits `url` into scheme, host and port, refusing anything ambiguous.
pub fn split_url<'a>(
    url: &'a str,
    schemes: &'static [&'static str],
) -> Result<UrlParts<'a>, UrlProblem> {
    if !url.bytes().all(|b| b.is_ascii_graphic()) || url.contains('\\') {
        return Err(UrlProblem::BadCharacter);
    }
    let (scheme, rest) = url.split_once("://").ok_or(UrlProblem::Scheme(schemes))?;
    if !schemes.contains(&scheme) {
        return Err(UrlProblem::Scheme(schemes));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    if authority.contains('@') {
        return Err(UrlProblem::Credentials);
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (literal, after) = bracketed.split_once(']').ok_or(UrlProblem::BadHost)?;
        if literal.parse::<Ipv6Addr>().is_err() {
            return Err(UrlProblem::BadHost);
        }
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or(UrlProblem::BadHost)?),
        };
        (literal, port)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let host_ok = !host.is_empty()
        && (host.contains(':')
            || host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')));
    if !host_ok {
        return Err(UrlProblem::BadHost);
    }
    let port = match port {
        None => None,
        Some(digits) => Some(parse_port(digits).ok_or(UrlProblem::BadPort)?),
    };
    Ok(UrlParts { scheme, host, port })
}

fn parse_port(digits: &str) -> Option<u16> {
    if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u16>().ok().filter(|p| *p != 0)
}

/// Checks a platform-facing URL: scheme in `schemes`, a well-formed host, and
/// plain text (`http`, `ws`) only to a loopback host.
pub fn check_platform_url(url: &str, schemes: &'static [&'static str]) -> Result<(), UrlProblem> {
    let parts = split_url(url, schemes)?;
    if matches!(parts.scheme, "http" | "ws") && !is_loopback_host(parts.host) {
        return Err(UrlProblem::PlainTextToRemoteHost);
    }
    Ok(())
}

/// `localhost` (any case), an IPv4 address in 127.0.0.0/8, or `::1`
/// (given without brackets, as [`UrlParts::host`] holds it). Nothing that
/// needs a resolver counts: `foo.localhost` and `localhost.` do not.
pub fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Ok(v4) = host.parse::<Ipv4Addr>() {
        return v4.is_loopback();
    }
    host.parse::<Ipv6Addr>().is_ok_and(|v6| v6.is_loopback())
}
