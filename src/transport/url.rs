//! The WebSocket URL a connection is opened to: a strict parser for
//! `ws://` and `wss://` (PROTOCOL.md §1.1, AUTH.md §1).
//!
//! It owns the decision which host, port and request target a URL names,
//! and the rule that plain-text `ws://` goes only to a loopback host. It is
//! deliberately narrower than a general URL parser — no credentials, no
//! fragment, no percent signs or non-ASCII in the host, no ambiguous numeric
//! hosts such as `127.1` — so that no resolver or proxy can read a different
//! host out of a URL accepted here. It never resolves names and never
//! echoes the URL text in an error.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::percent;
use crate::config::is_loopback_host;

/// Longest host name accepted (RFC 1035 text form without a trailing dot).
const MAX_HOST_NAME_BYTES: usize = 253;
/// Longest label of a host name.
const MAX_LABEL_BYTES: usize = 63;

/// Why a WebSocket URL is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UrlError {
    /// The URL does not start with lower-case `ws://` or `wss://`.
    Scheme,
    /// Whitespace, control characters, backslashes or non-ASCII characters.
    BadCharacter,
    /// `user[:password]@` in the authority.
    Credentials,
    /// A `#fragment`.
    Fragment,
    /// No host, or a host that is not a DNS name, a dotted-quad IPv4 address
    /// or a bracketed IPv6 literal.
    BadHost,
    /// A port that is empty, not decimal, 0 or above 65535.
    BadPort,
    /// A `%` in the path or query that does not start a `%XX` escape.
    BadEscape,
    /// `ws://` to a host that is not `localhost`, 127.0.0.0/8 or `::1`.
    PlainTextToRemoteHost,
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UrlError::Scheme => "the URL must start with wss:// (or ws:// to a loopback host)",
            UrlError::BadCharacter => {
                "the URL contains whitespace, control characters, backslashes or non-ASCII characters"
            }
            UrlError::Credentials => "credentials (user@) in a WebSocket URL are not allowed",
            UrlError::Fragment => "a #fragment in a WebSocket URL is not allowed",
            UrlError::BadHost => "the URL's host is missing or malformed",
            UrlError::BadPort => "the URL's port is malformed",
            UrlError::BadEscape => "the URL's path contains a malformed %-escape",
            UrlError::PlainTextToRemoteHost => {
                "plain-text ws:// is only allowed to localhost, 127.0.0.0/8 or [::1]; use wss://"
            }
        })
    }
}

/// The host part of a URL, classified once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// A DNS name, lower-cased.
    Name(String),
    /// A dotted-quad IPv4 literal.
    V4(Ipv4Addr),
    /// A bracketed IPv6 literal (held without brackets).
    V6(Ipv6Addr),
}

impl Host {
    /// Whether this is `localhost`, an address in 127.0.0.0/8 or `::1`.
    pub fn is_loopback(&self) -> bool {
        match self {
            Host::Name(name) => is_loopback_host(name),
            Host::V4(v4) => v4.is_loopback(),
            Host::V6(v6) => v6.is_loopback(),
        }
    }

    /// The host as given to the resolver and to TLS (IPv6 without brackets).
    pub fn bare(&self) -> String {
        match self {
            Host::Name(name) => name.clone(),
            Host::V4(v4) => v4.to_string(),
            Host::V6(v6) => v6.to_string(),
        }
    }

    /// `host:port` as written in a `Host:` header or a `CONNECT` request
    /// (IPv6 in brackets).
    pub fn with_port(&self, port: u16) -> String {
        match self {
            Host::V6(v6) => format!("[{v6}]:{port}"),
            _ => format!("{}:{port}", self.bare()),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::V6(v6) => write!(f, "[{v6}]"),
            other => f.write_str(&other.bare()),
        }
    }
}

/// A parsed `ws://` or `wss://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsUrl {
    secure: bool,
    host: Host,
    port: u16,
    explicit_port: bool,
    target: String,
}

impl WsUrl {
    /// Parses `url` and applies the loopback rule for `ws://`.
    pub fn parse(url: &str) -> Result<WsUrl, UrlError> {
        if !url.bytes().all(|b| b.is_ascii_graphic()) || url.contains('\\') {
            return Err(UrlError::BadCharacter);
        }
        let (secure, rest) = if let Some(rest) = url.strip_prefix("wss://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("ws://") {
            (false, rest)
        } else {
            return Err(UrlError::Scheme);
        };
        if rest.contains('#') {
            return Err(UrlError::Fragment);
        }
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, after) = rest.split_at(authority_end);
        if authority.contains('@') {
            return Err(UrlError::Credentials);
        }
        let (host, port) = split_authority(authority)?;
        let target = match after.as_bytes().first() {
            None => "/".to_owned(),
            Some(b'?') => format!("/{after}"),
            Some(_) => after.to_owned(),
        };
        percent::check(&target).map_err(|_| UrlError::BadEscape)?;
        let parsed = WsUrl {
            secure,
            host,
            port: port.unwrap_or(if secure { 443 } else { 80 }),
            explicit_port: port.is_some(),
            target,
        };
        if !parsed.secure && !parsed.host.is_loopback() {
            return Err(UrlError::PlainTextToRemoteHost);
        }
        Ok(parsed)
    }

    /// `wss://` (TLS) rather than loopback `ws://`.
    pub fn is_secure(&self) -> bool {
        self.secure
    }

    /// The host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The port, explicit or the scheme's default (443, 80).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The request target: path and query, starting with `/`.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The `Host:` header value: the host, and the port when the URL gave one.
    pub fn host_header(&self) -> String {
        if self.explicit_port {
            self.host.with_port(self.port)
        } else {
            self.host.to_string()
        }
    }
}

impl fmt::Display for WsUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.secure { "wss" } else { "ws" };
        write!(f, "{scheme}://{}{}", self.host_header(), self.target)
    }
}

/// Splits `host[:port]` (the host possibly a bracketed IPv6 literal).
pub(crate) fn split_authority(authority: &str) -> Result<(Host, Option<u16>), UrlError> {
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (literal, after) = bracketed.split_once(']').ok_or(UrlError::BadHost)?;
        let v6 = literal.parse::<Ipv6Addr>().map_err(|_| UrlError::BadHost)?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or(UrlError::BadHost)?),
        };
        (Host::V6(v6), port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        (parse_host(host)?, port)
    };
    let port = match port {
        None => None,
        Some(digits) => Some(parse_port(digits).ok_or(UrlError::BadPort)?),
    };
    Ok((host, port))
}

/// A DNS name or a dotted-quad IPv4 address. A name whose last label is
/// numeric must be a complete dotted quad: resolvers read `127.1` or
/// `0x7f.1` as addresses, and such spellings are refused rather than
/// guessed at.
fn parse_host(host: &str) -> Result<Host, UrlError> {
    if host.is_empty() || host.len() > MAX_HOST_NAME_BYTES {
        return Err(UrlError::BadHost);
    }
    let labels_ok = host.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= MAX_LABEL_BYTES
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
    });
    if !labels_ok {
        return Err(UrlError::BadHost);
    }
    let last = host.rsplit('.').next().unwrap_or(host);
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return host
            .parse::<Ipv4Addr>()
            .map(Host::V4)
            .map_err(|_| UrlError::BadHost);
    }
    Ok(Host::Name(host.to_ascii_lowercase()))
}

fn parse_port(digits: &str) -> Option<u16> {
    if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u16>().ok().filter(|p| *p != 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_production_url_splits_into_host_port_and_target() {
        let url = WsUrl::parse("wss://platform.autogpt.net/ws/local-executor").unwrap();
        assert!(url.is_secure());
        assert_eq!(url.host(), &Host::Name("platform.autogpt.net".into()));
        assert_eq!(url.port(), 443);
        assert_eq!(url.target(), "/ws/local-executor");
        assert_eq!(url.host_header(), "platform.autogpt.net");
    }

    #[test]
    fn a_session_url_keeps_its_escapes_and_query() {
        let url = WsUrl::parse("wss://h.example:8443/ws/local-executor/a%3Ab?x=1").unwrap();
        assert_eq!(url.port(), 8443);
        assert_eq!(url.target(), "/ws/local-executor/a%3Ab?x=1");
        assert_eq!(url.host_header(), "h.example:8443");
        assert_eq!(
            url.to_string(),
            "wss://h.example:8443/ws/local-executor/a%3Ab?x=1"
        );
    }

    #[test]
    fn an_empty_path_becomes_slash_and_a_bare_query_gets_one() {
        assert_eq!(WsUrl::parse("wss://h").unwrap().target(), "/");
        assert_eq!(WsUrl::parse("wss://h?q").unwrap().target(), "/?q");
    }

    #[test]
    fn bracketed_ipv6_hosts_are_parsed_and_written_back_with_brackets() {
        let url = WsUrl::parse("ws://[::1]:8000/ws").unwrap();
        assert_eq!(url.host(), &Host::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(url.host().bare(), "::1");
        assert_eq!(url.host_header(), "[::1]:8000");
        assert!(WsUrl::parse("wss://[fe80::1%25eth0]/").is_err());
        assert_eq!(WsUrl::parse("wss://[::1/"), Err(UrlError::BadHost));
        assert_eq!(WsUrl::parse("wss://[::1]x/"), Err(UrlError::BadHost));
    }

    #[test]
    fn plain_text_is_allowed_only_to_loopback_hosts() {
        for ok in [
            "ws://localhost:8000/ws",
            "ws://LOCALHOST/ws",
            "ws://127.0.0.1/",
            "ws://127.9.8.7:1/",
            "ws://[::1]/",
        ] {
            assert!(WsUrl::parse(ok).is_ok(), "{ok}");
        }
        for remote in [
            "ws://example.com/ws",
            "ws://10.0.0.1/",
            "ws://[::2]/",
            "ws://localhost.example/",
            "ws://foo.localhost/",
        ] {
            assert_eq!(
                WsUrl::parse(remote),
                Err(UrlError::PlainTextToRemoteHost),
                "{remote}"
            );
        }
    }

    #[test]
    fn other_schemes_credentials_and_fragments_are_refused() {
        assert_eq!(WsUrl::parse("https://h/"), Err(UrlError::Scheme));
        assert_eq!(WsUrl::parse("WSS://h/"), Err(UrlError::Scheme));
        assert_eq!(WsUrl::parse("wss:/h/"), Err(UrlError::Scheme));
        assert_eq!(WsUrl::parse("wss://u:p@h/"), Err(UrlError::Credentials));
        assert_eq!(WsUrl::parse("wss://u@h/"), Err(UrlError::Credentials));
        assert_eq!(WsUrl::parse("wss://h/#x"), Err(UrlError::Fragment));
        assert_eq!(WsUrl::parse("wss://h#x"), Err(UrlError::Fragment));
    }

    #[test]
    fn malformed_hosts_ports_and_characters_are_refused() {
        assert_eq!(WsUrl::parse("wss:///x"), Err(UrlError::BadHost));
        assert_eq!(WsUrl::parse("wss://a..b/"), Err(UrlError::BadHost));
        assert_eq!(WsUrl::parse("wss://a.b./"), Err(UrlError::BadHost));
        assert_eq!(WsUrl::parse("wss://127.1/"), Err(UrlError::BadHost));
        assert_eq!(WsUrl::parse("wss://0x7f.1/"), Err(UrlError::BadHost));
        assert_eq!(WsUrl::parse("wss://256.0.0.1/"), Err(UrlError::BadHost));
        assert_eq!(WsUrl::parse("wss://h%41/"), Err(UrlError::BadHost));
        assert_eq!(WsUrl::parse("wss://h:/"), Err(UrlError::BadPort));
        assert_eq!(WsUrl::parse("wss://h:0/"), Err(UrlError::BadPort));
        assert_eq!(WsUrl::parse("wss://h:65536/"), Err(UrlError::BadPort));
        assert_eq!(WsUrl::parse("wss://h:+1/"), Err(UrlError::BadPort));
        assert_eq!(WsUrl::parse("wss://h:1:2/"), Err(UrlError::BadPort));
        assert_eq!(WsUrl::parse("wss://h/a b"), Err(UrlError::BadCharacter));
        assert_eq!(WsUrl::parse("wss://h/\\"), Err(UrlError::BadCharacter));
        assert_eq!(WsUrl::parse("wss://h/é"), Err(UrlError::BadCharacter));
        assert_eq!(WsUrl::parse("wss://h/%4"), Err(UrlError::BadEscape));
        assert_eq!(WsUrl::parse("wss://h/%zz"), Err(UrlError::BadEscape));
        let long_label = format!("wss://{}.example/", "a".repeat(64));
        assert_eq!(WsUrl::parse(&long_label), Err(UrlError::BadHost));
    }

    #[test]
    fn host_names_are_lower_cased() {
        let url = WsUrl::parse("wss://Platform.Example/").unwrap();
        assert_eq!(url.host(), &Host::Name("platform.example".into()));
    }
}
