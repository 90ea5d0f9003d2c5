//! Opening a connection: URL → resolve → TCP → proxy tunnel → TLS →
//! WebSocket upgrade, all within one opening timeout (PROTOCOL.md §1.3,
//! §1.6).
//!
//! [`Connector`] owns the order of these steps and the classification of
//! the upgrade outcome. It never writes the bearer token to a connection
//! whose TLS handshake (including the pin) has not succeeded, except a
//! loopback `ws://` connection; it never opens a plain-text connection to
//! an address outside the loopback range, never follows a redirect, and
//! never reads the process environment (the proxy setting is handed in).

use std::ffi::OsString;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

use tungstenite::client::client_with_config;
use tungstenite::handshake::HandshakeError;
use tungstenite::handshake::client::{Request, generate_key};
use tungstenite::http::header::{AUTHORIZATION, HeaderValue};
use tungstenite::protocol::WebSocketConfig;
use zeroize::Zeroizing;

use super::MAX_MESSAGE_BYTES;
use super::connection::Connection;
use super::error::{Stage, TransportError, refusal_detail};
use super::proxy::{ProxyConfig, open_tunnel};
use super::stream::{Paced, Stream};
use super::tls::TlsSettings;
use super::url::{Host, WsUrl};
use crate::config::Config;

/// The time allowed for opening a connection, from the first DNS lookup to
/// the upgrade response (the reference's opening timeout).
pub const OPENING_TIMEOUT: Duration = Duration::from_secs(10);

/// Room in the write buffer besides one maximal message: its frame header
/// and queued control frames.
const WRITE_BUFFER_SLACK: usize = 64 * 1024;

/// The WebSocket limits of every connection (PROTOCOL.md §1.4): 16 MiB per
/// message and per frame inbound; a write buffer that holds one maximal
/// outbound frame.
pub fn websocket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES))
        .max_write_buffer_size(MAX_MESSAGE_BYTES + WRITE_BUFFER_SLACK)
}

/// Opens connections with one trust and proxy setting.
#[derive(Debug, Clone)]
pub struct Connector {
    tls: TlsSettings,
    proxy: ProxyConfig,
    opening_timeout: Duration,
}

impl Connector {
    /// A connector trusting the web PKI roots plus the certificates of
    /// `ca_file`, enforcing `pins` (SPKI SHA-256 digests; empty: none), and
    /// routing through `proxy`.
    pub fn new(
        ca_file: Option<&Path>,
        pins: &[[u8; 32]],
        proxy: ProxyConfig,
    ) -> Result<Connector, TransportError> {
        Ok(Connector {
            tls: TlsSettings::new(ca_file, pins)?,
            proxy,
            opening_timeout: OPENING_TIMEOUT,
        })
    }

    /// The connector of the daemon: `tls_ca_file` and `tls_pin_sha256` from
    /// `config`, the proxy from `env` (the process environment captured
    /// once at start).
    pub fn from_config(
        config: &Config,
        env: &[(OsString, OsString)],
    ) -> Result<Connector, TransportError> {
        Connector::new(
            config.tls_ca_file.as_deref(),
            &config.tls_pin_sha256,
            ProxyConfig::from_env(env)?,
        )
    }

    /// The same connector with another opening timeout.
    pub fn with_opening_timeout(mut self, timeout: Duration) -> Connector {
        self.opening_timeout = timeout;
        self
    }

    /// The proxy for a TLS connection to `host`, if one applies.
    pub(super) fn proxy_for(&self, host: &Host) -> Option<&super::proxy::ProxyServer> {
        self.proxy.route(host)
    }

    /// The trust anchors and pins.
    pub(super) fn tls(&self) -> &TlsSettings {
        &self.tls
    }

    /// Whether a pin set is enforced.
    pub fn is_pinned(&self) -> bool {
        self.tls.is_pinned()
    }

    /// Opens a WebSocket to `url`, sending `Authorization: Bearer <token>`
    /// when `token` is given and not empty. The URL is checked before
    /// anything is connected.
    pub fn connect(
        &self,
        url: &str,
        token: Option<&Zeroizing<String>>,
    ) -> Result<Connection, TransportError> {
        let url = WsUrl::parse(url).map_err(TransportError::Url)?;
        self.connect_to(&url, token)
    }

    /// [`connect`](Self::connect) with a parsed URL.
    pub fn connect_to(
        &self,
        url: &WsUrl,
        token: Option<&Zeroizing<String>>,
    ) -> Result<Connection, TransportError> {
        let deadline = Instant::now() + self.opening_timeout;
        let request = upgrade_request(url, token)?;

        let proxy = if url.is_secure() {
            self.proxy.route(url.host())
        } else {
            None
        };
        let tcp = match proxy {
            Some(server) => dial(server.host(), server.port(), false, deadline)?,
            None => dial(url.host(), url.port(), !url.is_secure(), deadline)?,
        };
        let mut socket = Paced::opening(tcp, deadline);
        if let Some(server) = proxy {
            open_tunnel(&mut socket, server, url.host(), url.port())?;
        }
        let stream = if url.is_secure() {
            Stream::Tls(Box::new(self.tls.handshake(url.host(), socket)?))
        } else {
            Stream::Plain(socket)
        };

        // Only now, with the server authenticated (or on loopback), does the
        // request carrying the token go out.
        let (mut websocket, _response) =
            client_with_config(request, stream, Some(websocket_config())).map_err(|error| {
                match error {
                    HandshakeError::Interrupted(_) => TransportError::Timeout(Stage::Upgrade),
                    HandshakeError::Failure(error) => upgrade_error(error),
                }
            })?;
        websocket
            .get_mut()
            .paced_mut()
            .set_open()
            .map_err(|source| TransportError::Io {
                stage: Stage::Upgrade,
                source,
            })?;
        Ok(Connection::new(websocket, proxy.is_some()))
    }
}

/// The upgrade request; the token goes into a header marked sensitive.
fn upgrade_request(
    url: &WsUrl,
    token: Option<&Zeroizing<String>>,
) -> Result<Request, TransportError> {
    let mut builder = Request::builder()
        .method("GET")
        .uri(url.to_string())
        .header("Host", url.host_header())
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", generate_key());
    if let Some(token) = token.filter(|t| !t.is_empty()) {
        let mut text = Zeroizing::new(String::with_capacity(7 + token.len()));
        text.push_str("Bearer ");
        text.push_str(token);
        let mut value = HeaderValue::from_str(&text).map_err(|_| TransportError::InvalidToken)?;
        value.set_sensitive(true);
        builder = builder.header(AUTHORIZATION, value);
    }
    builder
        .body(())
        .map_err(|_| TransportError::Url(super::url::UrlError::BadHost))
}

/// Resolves `host` and connects to the first address that answers, within
/// the deadline. With `loopback_only`, addresses outside the loopback range
/// are never tried (plain-text `ws://`).
pub(super) fn dial(
    host: &Host,
    port: u16,
    loopback_only: bool,
    deadline: Instant,
) -> Result<TcpStream, TransportError> {
    let name = host.bare();
    // The system resolver cannot be given a timeout; the deadline is
    // checked as soon as it returns.
    let addresses: Vec<SocketAddr> = (name.as_str(), port)
        .to_socket_addrs()
        .map_err(|source| TransportError::Resolve {
            host: name.clone(),
            source,
        })?
        .filter(|addr| !loopback_only || addr.ip().is_loopback())
        .collect();
    if addresses.is_empty() {
        return Err(if loopback_only {
            TransportError::NotLoopback { host: name }
        } else {
            TransportError::Resolve {
                host: name,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the name resolved to no address",
                ),
            }
        });
    }
    let mut last_error = None;
    for addr in addresses {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(TransportError::Timeout(Stage::Connect));
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(tcp) => {
                tcp.set_nodelay(true)
                    .map_err(|source| TransportError::Connect { addr, source })?;
                return Ok(tcp);
            }
            Err(source) => last_error = Some((addr, source)),
        }
    }
    match last_error {
        Some((_, source)) if Instant::now() >= deadline && is_timeout(&source) => {
            Err(TransportError::Timeout(Stage::Connect))
        }
        Some((addr, source)) => Err(TransportError::Connect { addr, source }),
        None => Err(TransportError::Timeout(Stage::Connect)),
    }
}

pub(super) fn is_timeout(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    )
}

/// PROTOCOL.md §1.3: 401 → refresh, 403 → refused, any other status →
/// transient; a broken handshake or I/O error → transient. Of a refusal's
/// body (what arrived with its head) only the `detail` is kept.
fn upgrade_error(error: tungstenite::Error) -> TransportError {
    match error {
        tungstenite::Error::Http(response) => {
            let detail = || response.body().as_deref().and_then(refusal_detail);
            match response.status().as_u16() {
                401 => TransportError::Unauthorized { detail: detail() },
                403 => TransportError::Forbidden { detail: detail() },
                status => TransportError::UpgradeStatus(status),
            }
        }
        tungstenite::Error::Io(source) if is_timeout(&source) => {
            TransportError::Timeout(Stage::Upgrade)
        }
        tungstenite::Error::Io(source) => TransportError::Io {
            stage: Stage::Upgrade,
            source,
        },
        other => TransportError::UpgradeRejected(other.to_string()),
    }
}
