//! Opening a connection: URL → resolve → TCP → proxy tunnel → TLS →
//! WebSocket upgrade, all within one opening timeout (PROTOCOL.md §1.3,
//! §1.6).
//!
//! [`Connector`] owns the order of these steps and the classification of
//! the upgrade outcome. Name resolution runs on a thread of its own, which
//! the opening stops waiting for at its deadline; at most [`MAX_LOOKUPS`]
//! such threads exist at once, so a resolver that hangs cannot make
//! reconnects pile them up.
//!
//! [`Connector::connect_observed`] reports each step that succeeded as a
//! [`Step`], so that `doctor` proves the connection one line per step over
//! exactly the code the daemon uses.
//!
//! It never writes the bearer token to a connection whose TLS handshake
//! (including the pin) has not succeeded, except a loopback `ws://`
//! connection; it never opens a plain-text connection to an address outside
//! the loopback range, never follows a redirect, and never reads the
//! process environment (the proxy setting is handed in).

use std::ffi::OsString;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tungstenite::protocol::WebSocketConfig;
use zeroize::Zeroizing;

use super::MAX_MESSAGE_BYTES;
use super::connection::Connection;
use super::error::{Stage, TransportError};
use super::proxy::ProxyConfig;
use super::stream::{Paced, Stream};
use super::tls::{TlsSettings, spki_sha256};
use super::tunnel::open_tunnel;
use super::upgrade::{UpgradeRequest, upgrade};
use super::url::{Host, WsUrl};
use crate::config::Config;

/// The time allowed for opening a connection, from the first DNS lookup to
/// the upgrade response (the reference's opening timeout).
pub const OPENING_TIMEOUT: Duration = Duration::from_secs(10);

/// Name resolutions under way at most, including those an opening stopped
/// waiting for: the system resolver cannot be interrupted, so a lookup
/// that hangs keeps its thread until the resolver gives up.
pub const MAX_LOOKUPS: usize = 4;

/// Room in the write buffer besides one maximal message: its frame header
/// and queued control frames.
const WRITE_BUFFER_SLACK: usize = 64 * 1024;

/// Bytes the WebSocket layer asks the stream for per read: two TLS records
/// of plaintext. The layer zero-fills this much of its buffer before every
/// read, and a TLS stream hands back at most what it has decrypted (one
/// record at a time while a large frame streams in), so its default of
/// 128 KiB cleared eight bytes for every one received.
const READ_CHUNK: usize = 32 * 1024;

/// The WebSocket limits of every connection (PROTOCOL.md §1.4): 16 MiB per
/// message and per frame inbound; a write buffer that holds one maximal
/// outbound frame; reads of [`READ_CHUNK`].
pub fn websocket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_CHUNK)
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES))
        .max_write_buffer_size(MAX_MESSAGE_BYTES + WRITE_BUFFER_SLACK)
}

/// One step of an opening that succeeded, in the order they happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The host (the proxy's, when one is used: see
    /// [`Connector::proxy_for_url`]) has these addresses;
    /// `looked_up` is false for an IP address, which needs no lookup.
    Resolved {
        /// The name or address as written in the URL (or proxy setting).
        host: String,
        /// The addresses that will be tried, in order.
        addresses: Vec<SocketAddr>,
        /// Whether the resolver was asked.
        looked_up: bool,
    },
    /// A TCP connection is open to `addr` (the proxy's, when one is used).
    Connected {
        /// The address that answered.
        addr: SocketAddr,
    },
    /// The proxy opened its tunnel to the platform.
    Tunnelled,
    /// The TLS handshake completed: the chain was verified, and the pin
    /// too when `pinned`.
    Secured {
        /// The negotiated protocol version.
        version: Option<rustls::ProtocolVersion>,
        /// Whether a pin set was enforced (and matched).
        pinned: bool,
        /// The SHA-256 digest of the server certificate's public key (what
        /// a pin names), when the certificate could be parsed.
        spki_sha256: Option<[u8; 32]>,
    },
    /// The server answered the upgrade with a valid `101`.
    Upgraded,
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

    /// The proxy a connection to `url` goes through, if any: then the name
    /// looked up and the TCP connection are the proxy's.
    pub fn proxy_for_url(&self, url: &WsUrl) -> Option<&super::proxy::ProxyServer> {
        if url.is_secure() {
            self.proxy.route(url.host())
        } else {
            None
        }
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
        self.connect_observed(url, token, &mut |_| {})
    }

    /// [`connect_to`](Self::connect_to), telling `observe` of each step as
    /// it succeeds: a failure belongs to the step after the last one
    /// reported.
    pub fn connect_observed(
        &self,
        url: &WsUrl,
        token: Option<&Zeroizing<String>>,
        observe: &mut dyn FnMut(Step),
    ) -> Result<Connection, TransportError> {
        let deadline = Instant::now() + self.opening_timeout;
        let request = UpgradeRequest::new(url, token)?;
        let (stream, proxied) = self.open_stream(url, deadline, observe)?;

        // Only now, with the server authenticated (or on loopback), does the
        // request carrying the token go out.
        let mut websocket = upgrade(stream, &request)?;
        websocket
            .get_mut()
            .paced_mut()
            .set_open()
            .map_err(|source| TransportError::Io {
                stage: Stage::Upgrade,
                source,
            })?;
        observe(Step::Upgraded);
        Ok(Connection::new(websocket, proxied))
    }

    /// The steps of [`connect_observed`](Self::connect_observed) before the
    /// upgrade, then a TLS `close_notify` and the end of the connection:
    /// proves that the platform can be reached and authenticated when there
    /// is no token to ask for the upgrade with. Nothing but the handshakes
    /// is sent.
    pub fn reach_observed(
        &self,
        url: &WsUrl,
        observe: &mut dyn FnMut(Step),
    ) -> Result<(), TransportError> {
        let deadline = Instant::now() + self.opening_timeout;
        let (stream, _) = self.open_stream(url, deadline, observe)?;
        if let Stream::Tls(mut tls) = stream {
            tls.conn.send_close_notify();
            // The peer learns of the end from the socket closing anyway.
            let _ = tls.flush();
        }
        Ok(())
    }

    /// Resolve, TCP, proxy tunnel and TLS (for `wss://`), by `deadline`;
    /// the stream and whether it runs through a proxy.
    fn open_stream(
        &self,
        url: &WsUrl,
        deadline: Instant,
        observe: &mut dyn FnMut(Step),
    ) -> Result<(Stream, bool), TransportError> {
        let proxy = self.proxy_for_url(url);
        let tcp = match proxy {
            Some(server) => dial(server.host(), server.port(), false, deadline, observe)?,
            None => dial(url.host(), url.port(), !url.is_secure(), deadline, observe)?,
        };
        let mut socket = Paced::opening(tcp, deadline);
        if let Some(server) = proxy {
            open_tunnel(&mut socket, server, url.host(), url.port())?;
            observe(Step::Tunnelled);
        }
        let stream = if url.is_secure() {
            let tls = self.tls.handshake(url.host(), socket)?;
            observe(Step::Secured {
                version: tls.conn.protocol_version(),
                pinned: self.tls.is_pinned(),
                spki_sha256: tls
                    .conn
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|leaf| spki_sha256(leaf.as_ref()).ok()),
            });
            Stream::Tls(Box::new(tls))
        } else {
            Stream::Plain(socket)
        };
        Ok((stream, proxy.is_some()))
    }
}

/// Resolves `host` and connects to the first address that answers, within
/// the deadline. With `loopback_only`, addresses outside the loopback range
/// are never tried (plain-text `ws://`). `observe` hears of the addresses
/// and of the connection.
pub(super) fn dial(
    host: &Host,
    port: u16,
    loopback_only: bool,
    deadline: Instant,
    observe: &mut dyn FnMut(Step),
) -> Result<TcpStream, TransportError> {
    let name = host.bare();
    let looked_up = name.parse::<IpAddr>().is_err();
    let addresses: Vec<SocketAddr> = resolve(&name, port, deadline)?
        .into_iter()
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
    observe(Step::Resolved {
        host: name,
        addresses: addresses.clone(),
        looked_up,
    });
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
                observe(Step::Connected { addr });
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

/// The addresses of `name`, or [`TransportError::Timeout`] at `deadline`.
/// An IP literal needs no lookup.
fn resolve(name: &str, port: u16, deadline: Instant) -> Result<Vec<SocketAddr>, TransportError> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let owned = name.to_owned();
    lookup_within(&LOOKUPS, deadline, move || {
        (owned.as_str(), port)
            .to_socket_addrs()
            .map(Iterator::collect)
    })?
    .map_err(|source| TransportError::Resolve {
        host: name.to_owned(),
        source,
    })
}

/// The lookups under way (see [`MAX_LOOKUPS`]).
static LOOKUPS: Lookups = Lookups::new();

/// A count of lookup threads, bounded by [`MAX_LOOKUPS`].
#[derive(Debug)]
struct Lookups {
    running: Mutex<usize>,
    finished: Condvar,
}

impl Lookups {
    const fn new() -> Lookups {
        Lookups {
            running: Mutex::new(0),
            finished: Condvar::new(),
        }
    }

    /// Counts a lookup in, waiting until `deadline` for one to finish when
    /// [`MAX_LOOKUPS`] are under way; false when none did.
    fn enter(&self, deadline: Instant) -> bool {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        while *running >= MAX_LOOKUPS {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            running = self
                .finished
                .wait_timeout(running, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *running += 1;
        true
    }

    fn leave(&self) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        *running = running.saturating_sub(1);
        self.finished.notify_one();
    }
}

/// Counts a lookup thread out when it ends, however it ends.
struct Leave<'a>(&'a Lookups);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// Runs `lookup` on a thread counted in `lookups` and waits for its answer
/// until `deadline`; then gives up on it (the thread ends, and is counted
/// out, when the lookup returns).
fn lookup_within<T: Send + 'static>(
    lookups: &'static Lookups,
    deadline: Instant,
    lookup: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<std::io::Result<T>, TransportError> {
    if !lookups.enter(deadline) {
        return Err(TransportError::Timeout(Stage::Resolve));
    }
    let (answer, answered) = crossbeam_channel::bounded(1);
    let spawned = std::thread::Builder::new()
        .name("resolver".into())
        .spawn(move || {
            let _leave = Leave(lookups);
            // Nobody may be waiting any more: the answer is then dropped.
            let _ = answer.send(lookup());
        });
    if let Err(e) = spawned {
        lookups.leave();
        return Ok(Err(e));
    }
    answered
        .recv_deadline(deadline)
        .map_err(|_| TransportError::Timeout(Stage::Resolve))
}

pub(super) fn is_timeout(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(100)
    }

    #[test]
    fn a_hanging_lookup_is_given_up_at_the_deadline_and_lookups_stay_bounded() {
        static LIMITED: Lookups = Lookups::new();
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let (release, released) = crossbeam_channel::bounded::<()>(0);
        let hanging = || {
            let released = released.clone();
            move || {
                STARTED.fetch_add(1, Ordering::SeqCst);
                let _ = released.recv();
                Ok(())
            }
        };
        for _ in 0..MAX_LOOKUPS {
            let begun = Instant::now();
            let outcome = lookup_within(&LIMITED, soon(), hanging());
            assert!(matches!(
                outcome,
                Err(TransportError::Timeout(Stage::Resolve))
            ));
            assert!(begun.elapsed() < Duration::from_secs(2));
        }
        // Every slot is held by a hanging lookup: the next one waits for a
        // slot until its deadline and starts no thread.
        let outcome = lookup_within(&LIMITED, soon(), hanging());
        assert!(matches!(
            outcome,
            Err(TransportError::Timeout(Stage::Resolve))
        ));
        while STARTED.load(Ordering::SeqCst) < MAX_LOOKUPS {
            std::thread::yield_now();
        }
        assert_eq!(STARTED.load(Ordering::SeqCst), MAX_LOOKUPS);

        // Once the resolver answers, the threads end and free their slots.
        drop(release);
        let answer = lookup_within(&LIMITED, Instant::now() + Duration::from_secs(10), || Ok(7));
        assert_eq!(answer.unwrap().unwrap(), 7);
    }

    #[test]
    fn an_ip_literal_is_not_looked_up() {
        let past = Instant::now();
        assert_eq!(
            resolve("127.0.0.1", 8080, past).unwrap(),
            [SocketAddr::from(([127, 0, 0, 1], 8080))]
        );
    }
}
