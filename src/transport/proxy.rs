//! HTTP `CONNECT` proxy settings (PROTOCOL.md §1.2a): the `HTTPS_PROXY` /
//! `NO_PROXY` decision of which connections go through a proxy, and the
//! proxy's address and credentials.
//!
//! The environment is handed in as data, never read here. It must never
//! route a loopback host through a proxy taken from the environment, never
//! accept a proxy URL other than `http://`, and never show the proxy
//! credentials: they are held in zeroizing buffers and left out of every
//! `Debug`, `Display` and error message. The exchange with the proxy is
//! [`super::tunnel`]'s.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::net::IpAddr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use zeroize::Zeroizing;

use super::error::TransportError;
use super::percent;
use super::url::{Host, UrlError, split_authority};
use crate::text::one_line;

/// The port of an `http://` proxy URL that names none.
const DEFAULT_PROXY_PORT: u16 = 80;

/// Why an `HTTPS_PROXY` value cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxySettingProblem {
    /// The value is not valid UTF-8.
    NotUtf8,
    /// A scheme other than `http://` (TLS to the proxy and SOCKS are not
    /// supported).
    Scheme,
    /// The host or port is malformed.
    Authority(UrlError),
    /// A path other than `/`, a query or a fragment.
    Path,
    /// A malformed `%XX` escape in the user name or password.
    Escape,
    /// Whitespace, control or non-ASCII characters.
    BadCharacter,
}

impl fmt::Display for ProxySettingProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxySettingProblem::NotUtf8 => f.write_str("the value is not valid UTF-8"),
            ProxySettingProblem::Scheme => {
                f.write_str("only http:// proxies (HTTP CONNECT) are supported")
            }
            ProxySettingProblem::Authority(problem) => {
                write!(f, "the proxy's host or port is malformed ({problem})")
            }
            ProxySettingProblem::Path => {
                f.write_str("a proxy URL must not have a path, query or fragment")
            }
            ProxySettingProblem::Escape => {
                f.write_str("the proxy credentials contain a malformed %-escape")
            }
            ProxySettingProblem::BadCharacter => f.write_str(
                "the value contains whitespace, control characters or non-ASCII characters",
            ),
        }
    }
}

/// One HTTP proxy: where it is and, if the URL had them, the credentials
/// as a ready `Proxy-Authorization` value.
#[derive(Clone)]
pub struct ProxyServer {
    host: Host,
    port: u16,
    authorization: Option<Zeroizing<String>>,
}

impl ProxyServer {
    /// Parses `http://[user[:password]@]host[:port][/]`; a value without a
    /// scheme is read as `http://`. User name and password are
    /// percent-decoded.
    pub fn parse(value: &str) -> Result<ProxyServer, ProxySettingProblem> {
        if !value.bytes().all(|b| b.is_ascii_graphic()) || value.contains('\\') {
            return Err(ProxySettingProblem::BadCharacter);
        }
        let rest = match value.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some(_) => return Err(ProxySettingProblem::Scheme),
            None => value,
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, after) = rest.split_at(authority_end);
        if !(after.is_empty() || after == "/") {
            return Err(ProxySettingProblem::Path);
        }
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority),
        };
        let (host, port) = split_authority(host_port).map_err(ProxySettingProblem::Authority)?;
        let authorization = match userinfo {
            None => None,
            Some(userinfo) => Some(basic_authorization(userinfo)?),
        };
        Ok(ProxyServer {
            host,
            port: port.unwrap_or(DEFAULT_PROXY_PORT),
            authorization,
        })
    }

    /// The proxy's host.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the URL carried credentials.
    pub fn has_credentials(&self) -> bool {
        self.authorization.is_some()
    }

    /// The `Proxy-Authorization` value, when the URL carried credentials.
    pub(super) fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref().map(String::as_str)
    }
}

impl fmt::Display for ProxyServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", one_line(&self.host.with_port(self.port)))
    }
}

impl fmt::Debug for ProxyServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyServer")
            .field("host", &self.host)
            .field("port", &self.port)
            .field(
                "credentials",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// `Basic base64(user ":" password)` from the percent-encoded userinfo.
fn basic_authorization(userinfo: &str) -> Result<Zeroizing<String>, ProxySettingProblem> {
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let mut pair = Zeroizing::new(Vec::with_capacity(userinfo.len()));
    // Room for both halves up front: no growing copy of them is left.
    percent::decode_into(user, &mut pair).map_err(|_| ProxySettingProblem::Escape)?;
    pair.push(b':');
    percent::decode_into(password, &mut pair).map_err(|_| ProxySettingProblem::Escape)?;
    let mut value = Zeroizing::new(String::with_capacity(6 + pair.len().div_ceil(3) * 4));
    value.push_str("Basic ");
    BASE64.encode_string(pair.as_slice(), &mut value);
    Ok(value)
}

/// One `NO_PROXY` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Bypass {
    /// `*`: every host.
    All,
    /// A host name and all names below it (`example.com` and `.example.com`
    /// both match `example.com` and `a.example.com`).
    Suffix(String),
    /// An IP address, matched exactly (no CIDR ranges).
    Address(IpAddr),
}

impl Bypass {
    /// Reads one trimmed, non-empty entry; an optional `:port` is ignored.
    fn parse(entry: &str) -> Bypass {
        if entry == "*" {
            return Bypass::All;
        }
        let host = if let Some(bracketed) = entry.strip_prefix('[') {
            bracketed.split_once(']').map_or(bracketed, |(h, _)| h)
        } else if entry.matches(':').count() == 1 {
            entry.split_once(':').map_or(entry, |(h, _)| h)
        } else {
            entry
        };
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Bypass::Address(ip);
        }
        let name = host.trim_start_matches('*').trim_start_matches('.');
        Bypass::Suffix(name.trim_end_matches('.').to_ascii_lowercase())
    }

    fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (Bypass::All, _) => true,
            (Bypass::Suffix(suffix), Host::Name(name)) => {
                !suffix.is_empty()
                    && (name == suffix
                        || name
                            .strip_suffix(suffix.as_str())
                            .is_some_and(|head| head.ends_with('.')))
            }
            (Bypass::Address(ip), Host::V4(v4)) => *ip == IpAddr::V4(*v4),
            (Bypass::Address(ip), Host::V6(v6)) => *ip == IpAddr::V6(*v6),
            _ => false,
        }
    }
}

/// When a proxy is used.
#[derive(Clone, Debug)]
enum Policy {
    /// No proxy.
    Direct,
    /// The environment's rule: the proxy, except for loopback hosts and
    /// `NO_PROXY` matches.
    Environment {
        server: ProxyServer,
        bypass: Vec<Bypass>,
    },
    /// This proxy for every `wss://` connection, loopback included (an
    /// explicit choice of the embedding program; tests use it to reach a
    /// proxy on loopback).
    Always(ProxyServer),
}

/// The proxy setting of a connector.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    policy: Policy,
}

impl ProxyConfig {
    /// No proxy for any connection.
    pub fn direct() -> ProxyConfig {
        ProxyConfig {
            policy: Policy::Direct,
        }
    }

    /// The proxy from `https_proxy` (or, if that is unset or empty,
    /// `HTTPS_PROXY`) with the exceptions from `no_proxy` (or `NO_PROXY`).
    /// Lower case wins when both spellings are set, as in curl and Python.
    /// `env` is the process environment captured once by the caller.
    pub fn from_env(env: &[(OsString, OsString)]) -> Result<ProxyConfig, TransportError> {
        let Some((variable, value)) = lookup(env, "https_proxy", "HTTPS_PROXY") else {
            return Ok(ProxyConfig::direct());
        };
        let setting_error = |problem| TransportError::ProxySetting { variable, problem };
        let value = value
            .to_str()
            .ok_or_else(|| setting_error(ProxySettingProblem::NotUtf8))?;
        let server = ProxyServer::parse(value).map_err(setting_error)?;
        let bypass = match lookup(env, "no_proxy", "NO_PROXY") {
            None => Vec::new(),
            Some((variable, value)) => value
                .to_str()
                .ok_or(TransportError::ProxySetting {
                    variable,
                    problem: ProxySettingProblem::NotUtf8,
                })?
                .split(',')
                .map(str::trim)
                .filter(|entry| !entry.is_empty())
                .map(Bypass::parse)
                .collect(),
        };
        Ok(ProxyConfig {
            policy: Policy::Environment { server, bypass },
        })
    }

    /// `proxy_url` for every `wss://` connection, loopback hosts included,
    /// with no exceptions.
    pub fn always(proxy_url: &str) -> Result<ProxyConfig, TransportError> {
        let server =
            ProxyServer::parse(proxy_url).map_err(|problem| TransportError::ProxySetting {
                variable: "proxy URL",
                problem,
            })?;
        Ok(ProxyConfig {
            policy: Policy::Always(server),
        })
    }

    /// The proxy a `wss://` connection to `host` goes through, if any.
    pub fn route(&self, host: &Host) -> Option<&ProxyServer> {
        match &self.policy {
            Policy::Direct => None,
            Policy::Always(server) => Some(server),
            Policy::Environment { server, bypass } => {
                if host.is_loopback() || bypass.iter().any(|b| b.matches(host)) {
                    None
                } else {
                    Some(server)
                }
            }
        }
    }
}

/// The first of `names` set to a non-empty value (matched as the OS matches
/// variable names), with the name it was found under.
fn lookup<'a>(
    env: &'a [(OsString, OsString)],
    lower: &'static str,
    upper: &'static str,
) -> Option<(&'static str, &'a OsStr)> {
    [lower, upper].into_iter().find_map(|name| {
        env.iter()
            .rev()
            .find(|(k, _)| names_equal(k, name))
            .map(|(_, v)| (name, v.as_os_str()))
            .filter(|(_, v)| !v.is_empty())
    })
}

#[cfg(windows)]
fn names_equal(a: &OsStr, b: &str) -> bool {
    a.to_str().is_some_and(|a| a.eq_ignore_ascii_case(b))
}

#[cfg(not(windows))]
fn names_equal(a: &OsStr, b: &str) -> bool {
    a == b
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn name(host: &str) -> Host {
        Host::Name(host.into())
    }

    #[test]
    fn no_proxy_variable_means_direct_connections() {
        let config = ProxyConfig::from_env(&env(&[("NO_PROXY", "*")])).unwrap();
        assert!(config.route(&name("platform.example")).is_none());
        let empty = ProxyConfig::from_env(&env(&[("HTTPS_PROXY", "")])).unwrap();
        assert!(empty.route(&name("platform.example")).is_none());
    }

    #[test]
    fn the_proxy_is_used_for_remote_hosts_and_never_for_loopback() {
        let config =
            ProxyConfig::from_env(&env(&[("HTTPS_PROXY", "http://proxy.corp:3128")])).unwrap();
        let server = config.route(&name("platform.example")).unwrap();
        assert_eq!(server.host(), &name("proxy.corp"));
        assert_eq!(server.port(), 3128);
        assert!(!server.has_credentials());
        for loopback in [
            name("localhost"),
            Host::V4(Ipv4Addr::new(127, 0, 0, 1)),
            Host::V4(Ipv4Addr::new(127, 1, 2, 3)),
            Host::V6(Ipv6Addr::LOCALHOST),
        ] {
            assert!(config.route(&loopback).is_none(), "{loopback}");
        }
        assert!(
            config
                .route(&Host::V4(Ipv4Addr::new(10, 1, 2, 3)))
                .is_some()
        );
    }

    #[test]
    fn lower_case_variables_win_over_upper_case() {
        let config = ProxyConfig::from_env(&env(&[
            ("HTTPS_PROXY", "http://upper:1"),
            ("https_proxy", "http://lower:2"),
            ("NO_PROXY", "example"),
            ("no_proxy", "other"),
        ]))
        .unwrap();
        let server = config.route(&name("example")).unwrap();
        assert_eq!(server.host(), &name("lower"));
        assert!(config.route(&name("other")).is_none());
    }

    #[test]
    fn no_proxy_entries_match_host_suffixes_on_label_boundaries() {
        let config = ProxyConfig::from_env(&env(&[
            ("HTTPS_PROXY", "proxy:8080"),
            (
                "NO_PROXY",
                " example.com , .internal,*.corp.test, 10.0.0.1, [fd00::1]:443, host:8443,",
            ),
        ]))
        .unwrap();
        for bypassed in [
            "example.com",
            "a.example.com",
            "b.a.example.com",
            "svc.internal",
            "internal",
            "x.corp.test",
            "host",
        ] {
            assert!(config.route(&name(bypassed)).is_none(), "{bypassed}");
        }
        for proxied in [
            "notexample.com",
            "example.com.evil",
            "internal.evil",
            "corp",
        ] {
            assert!(config.route(&name(proxied)).is_some(), "{proxied}");
        }
        assert!(
            config
                .route(&Host::V4(Ipv4Addr::new(10, 0, 0, 1)))
                .is_none()
        );
        assert!(
            config
                .route(&Host::V4(Ipv4Addr::new(10, 0, 0, 2)))
                .is_some()
        );
        assert!(
            config
                .route(&Host::V6("fd00::1".parse().unwrap()))
                .is_none()
        );
    }

    #[test]
    fn a_star_bypasses_every_host() {
        let config =
            ProxyConfig::from_env(&env(&[("https_proxy", "http://p:1"), ("no_proxy", "*")]))
                .unwrap();
        assert!(config.route(&name("platform.example")).is_none());
    }

    #[test]
    fn an_explicit_proxy_is_used_even_for_loopback() {
        let config = ProxyConfig::always("http://127.0.0.1:9").unwrap();
        assert!(config.route(&name("localhost")).is_some());
        assert!(ProxyConfig::direct().route(&name("example")).is_none());
    }

    #[test]
    fn proxy_urls_other_than_http_are_configuration_errors() {
        for (value, problem) in [
            ("https://p:1", ProxySettingProblem::Scheme),
            ("socks5://p:1", ProxySettingProblem::Scheme),
            ("http://p:1/path", ProxySettingProblem::Path),
            ("http://p:1?x", ProxySettingProblem::Path),
            (
                "http://p:notaport",
                ProxySettingProblem::Authority(UrlError::BadPort),
            ),
            (
                "http://:1",
                ProxySettingProblem::Authority(UrlError::BadHost),
            ),
            ("http://u%zz:p@p:1", ProxySettingProblem::Escape),
            ("http://p 1", ProxySettingProblem::BadCharacter),
        ] {
            let error = ProxyConfig::from_env(&env(&[("HTTPS_PROXY", value)])).unwrap_err();
            match error {
                TransportError::ProxySetting {
                    variable,
                    problem: got,
                } => {
                    assert_eq!(variable, "HTTPS_PROXY");
                    assert_eq!(got, problem, "{value}");
                }
                other => panic!("{value}: {other:?}"),
            }
            assert!(
                ProxyConfig::from_env(&env(&[("HTTPS_PROXY", value)]))
                    .unwrap_err()
                    .is_terminal()
            );
        }
        let server = ProxyServer::parse("http://p/").unwrap();
        assert_eq!(server.port(), 80);
    }

    #[test]
    fn credentials_are_percent_decoded_into_a_basic_header_and_never_shown() {
        let server = ProxyServer::parse("http://us%40er:p%3Ass@proxy:3128").unwrap();
        assert!(server.has_credentials());
        // base64("us@er:p:ss")
        assert_eq!(
            server.authorization.as_deref().map(String::as_str),
            Some("Basic dXNAZXI6cDpzcw==")
        );
        let shown = format!("{server:?} {server}");
        assert!(!shown.contains("dXNA") && !shown.contains("us@er") && !shown.contains("p%3Ass"));
        let no_password = ProxyServer::parse("http://user@proxy:1").unwrap();
        assert_eq!(
            no_password.authorization.as_deref().map(String::as_str),
            Some("Basic dXNlcjo=")
        );
    }
}
