//! The listening side: options, the accept loop, the TLS and HTTP upgrade
//! of each connection, and the record of every upgrade attempt.
//!
//! Owns everything that happens before a WebSocket exists: which port, which
//! certificate, what to answer to each upgrade request (a queue of
//! per-attempt behaviours, so "401, then 101" is scriptable), and whether
//! the bearer token is the expected one — a fixed token, or one the
//! emulator's own OAuth endpoints issued. Like the platform, one port
//! serves both: a request for an OAuth endpoint ([`crate::oauth`]) is
//! answered there, anything else goes to the WebSocket upgrade. Upgraded
//! connections are handed to the test as [`Conn`]s through
//! [`Emulator::accept`].
//!
//! It listens on 127.0.0.1 only and must never bind another address: the
//! emulator exists for loopback tests and local development, and a test
//! platform reachable from the network would be an open door.

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rustls::{ServerConnection, StreamOwned};
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::http;
use tungstenite::protocol::WebSocketConfig;

use crate::conn::{Conn, RequestInfo, fail_test};
use crate::hello::{ConnKind, HELLO_DEADLINE, HelloAck};
use crate::http::{Fault, HttpReader, MAX_HEAD_BYTES, parse_head};
use crate::listener::{Acceptor, Record};
use crate::oauth::{self, Grants, OAuthEndpoints};
use crate::strict::UnansweredReads;
use crate::tls::{self, TlsMaterial, TlsVersions};
use crate::transport::Transport;
use crate::wire;

/// How long the TLS handshake and the HTTP upgrade request may take, and how
/// long the automatic handshake waits for HELLO. The shim's own limits are
/// 10 s for both (`PROTOCOL.md` §1.6).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long dropping an [`Emulator`] waits for upgraded connections still
/// on their way to [`Emulator::accept`], so that they are judged too. Their
/// automatic handshakes give up once the emulator stops, so the wait runs
/// out only when a connection's thread is stalled; a connection queued
/// after that is dropped unjudged.
const HAND_OUT_WAIT: Duration = Duration::from_secs(2);

/// What to answer to one upgrade request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeBehaviour {
    /// Upgrade (101), unless a token is required and the request's
    /// `Authorization` is not `Bearer <token>` for an accepted token (the
    /// expected one, or one the emulator issued when it requires issued
    /// tokens): then 401.
    Accept,
    /// Refuse the upgrade with this HTTP status (e.g. 401, 403, 500).
    Status(u16),
    /// Refuse the upgrade as the platform does when it explains why: this
    /// HTTP status with the JSON body `{"detail": <detail>}` (e.g. 403 for a
    /// session that is not bound to this machine).
    Refuse {
        /// The HTTP status.
        status: u16,
        /// The body's `detail`.
        detail: String,
    },
    /// Close the TCP connection after reading the request, without any
    /// HTTP answer.
    DropConnection,
    /// Read the request, answer nothing for this long, then close the TCP
    /// connection (an upgrade timeout on the shim's side).
    Hang(Duration),
}

/// How one upgrade attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Upgraded to a WebSocket; the [`Conn`] went to [`Emulator::accept`].
    Upgraded,
    /// Refused with this HTTP status.
    Rejected(u16),
    /// Closed without an HTTP answer ([`UpgradeBehaviour::DropConnection`]
    /// or [`UpgradeBehaviour::Hang`]).
    Unanswered,
    /// The TLS handshake failed (e.g. the client distrusted the certificate
    /// or its pin did not match); no HTTP request was read.
    TlsFailed(String),
    /// The HTTP exchange failed (not a WebSocket request, timeout, I/O).
    HandshakeFailed(String),
}

/// One TCP connection the emulator accepted, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeAttempt {
    /// The client's address.
    pub peer: SocketAddr,
    /// The request path, if an HTTP request was read.
    pub path: Option<String>,
    /// The `Authorization` header, if the request had one.
    pub authorization: Option<String>,
    /// Every request header, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// How the attempt ended.
    pub outcome: AttemptOutcome,
}

/// How to start an [`Emulator`]. Defaults: TLS (1.3 and 1.2) on an
/// ephemeral port of 127.0.0.1, path `/ws/local-executor`, CA file in a new
/// temporary directory, every upgrade accepted whatever its token, OAuth
/// endpoints honouring only the grants they issued ([`Grants::Issued`]),
/// no automatic handshake, the platform's 10 s HELLO deadline.
#[derive(Debug, Clone, Default)]
pub struct EmulatorOptions {
    port: u16,
    plain: bool,
    tls_versions: TlsVersions,
    ca_file: Option<PathBuf>,
    expected_token: Option<String>,
    require_issued_token: bool,
    grants: Grants,
    auto_handshake: Option<HelloAck>,
    upgrades: Vec<UpgradeBehaviour>,
    hello_deadline: Option<Duration>,
}

impl EmulatorOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Listens on this port instead of an ephemeral one.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Speaks plain `ws://` instead of `wss://` (loopback development).
    #[must_use]
    pub fn plain(mut self) -> Self {
        self.plain = true;
        self
    }

    /// Offers only these TLS versions.
    #[must_use]
    pub fn tls_versions(mut self, versions: TlsVersions) -> Self {
        self.tls_versions = versions;
        self
    }

    /// Writes the CA certificate to this path (which the emulator then leaves
    /// in place) instead of a temporary directory.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Refuses with 401 every accepted upgrade whose `Authorization` is not
    /// `Bearer <token>`.
    #[must_use]
    pub fn expect_token(mut self, token: impl Into<String>) -> Self {
        self.expected_token = Some(token.into());
        self
    }

    /// Refuses with 401 every accepted upgrade whose `Authorization` is not
    /// `Bearer <token>` for an access token this emulator's token endpoint
    /// issued and has not revoked (or the [`EmulatorOptions::expect_token`]
    /// token, when one is set too): the platform's own check.
    #[must_use]
    pub fn require_issued_token(mut self) -> Self {
        self.require_issued_token = true;
        self
    }

    /// Which codes and refresh tokens the OAuth token endpoint honours.
    #[must_use]
    pub fn grants(mut self, grants: Grants) -> Self {
        self.grants = grants;
        self
    }

    /// Runs HELLO→HELLO_ACK with this ack on every upgraded connection
    /// before handing it to [`Emulator::accept`].
    #[must_use]
    pub fn auto_handshake(mut self, ack: HelloAck) -> Self {
        self.auto_handshake = Some(ack);
        self
    }

    /// Closes a connection with 4408 when no HELLO came this long after the
    /// upgrade, instead of the platform's [`HELLO_DEADLINE`].
    #[must_use]
    pub fn hello_deadline(mut self, deadline: Duration) -> Self {
        self.hello_deadline = Some(deadline);
        self
    }

    /// Queues the behaviours for the first upgrade requests, in order.
    #[must_use]
    pub fn upgrades(mut self, behaviours: impl IntoIterator<Item = UpgradeBehaviour>) -> Self {
        self.upgrades.extend(behaviours);
        self
    }
}

/// State shared by the accept loop, the connection threads and the
/// [`Emulator`] handle.
struct Shared {
    stop: Arc<AtomicBool>,
    serial: AtomicU64,
    upgrades: Mutex<VecDeque<UpgradeBehaviour>>,
    expected_token: Mutex<Option<String>>,
    require_issued_token: AtomicBool,
    oauth: OAuthEndpoints,
    auto_handshake: Mutex<Option<HelloAck>>,
    hello_deadline: Duration,
    unanswered: Arc<UnansweredReads>,
    attempts: Record<UpgradeAttempt>,
    server_config: Option<Arc<rustls::ServerConfig>>,
    conns: Sender<Conn>,
    /// Upgraded connections not yet queued for [`Emulator::accept`].
    handing_out: Mutex<usize>,
    handed_out: Condvar,
}

/// Counts one upgraded connection on its way to the queue, until dropped.
struct HandingOut<'a>(&'a Shared);

impl<'a> HandingOut<'a> {
    fn new(shared: &'a Shared) -> HandingOut<'a> {
        *lock(&shared.handing_out) += 1;
        HandingOut(shared)
    }
}

impl Drop for HandingOut<'_> {
    fn drop(&mut self) {
        *lock(&self.0.handing_out) -= 1;
        self.0.handed_out.notify_all();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every value behind these locks is replaced or pushed in one step, so a
    // panic elsewhere cannot leave it half-updated.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running platform emulator. Dropping it stops accepting connections and
/// removes the temporary CA file; connections already handed out live on
/// until their [`Conn`] is dropped.
///
/// # Panics
///
/// Dropping an `Emulator` judges every connection it upgraded that the test
/// never took with [`Emulator::accept`] (a reconnect the test did not watch,
/// say) as dropping a [`Conn`] does: it panics, unless the thread is already
/// panicking, if the shim broke a rule of the platform's relay on one of
/// them ([`crate::strict`]).
pub struct Emulator {
    addr: SocketAddr,
    tls: Option<TlsMaterial>,
    shared: Arc<Shared>,
    conns: Receiver<Conn>,
    acceptor: Acceptor,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Emulator")
            .field("ws_url", &self.ws_url())
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl Emulator {
    /// Binds 127.0.0.1, generates the PKI (unless plain) and starts
    /// accepting connections in a background thread.
    pub fn start(options: EmulatorOptions) -> io::Result<Emulator> {
        let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, options.port))?;
        let addr = listener.local_addr()?;
        let tls = if options.plain {
            None
        } else {
            Some(tls::generate(
                options.ca_file.as_deref(),
                options.tls_versions,
            )?)
        };
        let (conn_tx, conns) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            oauth: OAuthEndpoints::new(options.grants, Arc::clone(&stop)),
            stop,
            serial: AtomicU64::new(0),
            upgrades: Mutex::new(options.upgrades.into_iter().collect()),
            expected_token: Mutex::new(options.expected_token),
            require_issued_token: AtomicBool::new(options.require_issued_token),
            auto_handshake: Mutex::new(options.auto_handshake),
            hello_deadline: options.hello_deadline.unwrap_or(HELLO_DEADLINE),
            unanswered: Arc::default(),
            attempts: Record::new(),
            server_config: tls.as_ref().map(|tls| Arc::clone(&tls.server_config)),
            conns: conn_tx,
            handing_out: Mutex::new(0),
            handed_out: Condvar::new(),
        });
        let conn_shared = Arc::clone(&shared);
        let acceptor = Acceptor::start(
            listener,
            "emulator-accept",
            "emulator-upgrade",
            Arc::clone(&shared.stop),
            move |tcp, peer| serve(tcp, peer, &conn_shared),
        )?;
        Ok(Emulator {
            addr,
            tls,
            shared,
            conns,
            acceptor,
        })
    }

    /// The listening address (always 127.0.0.1).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The listening port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Whether this emulator speaks TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The control connection URL, `wss://127.0.0.1:PORT/ws/local-executor`
    /// (`ws://` when plain).
    pub fn ws_url(&self) -> String {
        let scheme = if self.is_tls() { "wss" } else { "ws" };
        format!("{scheme}://{}{}", self.addr, wire::WS_PATH)
    }

    /// The data connection URL for `session_id` (`PROTOCOL.md` §1.1).
    pub fn data_url(&self, session_id: &str) -> String {
        format!("{}/{}", self.ws_url(), wire::pct_encode(session_id))
    }

    /// The `platform_url` a shim derives [`Emulator::ws_url`] from:
    /// `https://127.0.0.1:PORT` (`http://` when plain).
    pub fn platform_url(&self) -> String {
        let scheme = if self.is_tls() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The authorize endpoint the shim derives from
    /// [`Emulator::platform_url`]: `https://127.0.0.1:PORT/auth/authorize`.
    pub fn authorize_url(&self) -> String {
        format!("{}{}", self.platform_url(), oauth::AUTHORIZE_PATH)
    }

    /// The token endpoint: `https://127.0.0.1:PORT/api/oauth/token`.
    pub fn token_url(&self) -> String {
        format!("{}{}", self.platform_url(), oauth::TOKEN_PATH)
    }

    /// The revoke endpoint: `https://127.0.0.1:PORT/api/oauth/revoke`.
    pub fn revoke_url(&self) -> String {
        format!("{}{}", self.platform_url(), oauth::REVOKE_PATH)
    }

    /// The OAuth endpoints this emulator serves beside the WebSocket: their
    /// behaviour queues, the requests they received, the tokens they
    /// issued.
    pub fn oauth(&self) -> &OAuthEndpoints {
        &self.shared.oauth
    }

    /// The PEM file holding the CA certificate (`--ca-file`); `None` when
    /// plain.
    pub fn ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|tls| tls.ca_file.as_path())
    }

    /// The CA certificate as PEM; `None` when plain.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|tls| tls.ca_pem.as_str())
    }

    /// Lowercase hex SHA-256 of the server certificate's
    /// SubjectPublicKeyInfo (`--tls-pin-sha256`); `None` when plain.
    pub fn spki_sha256(&self) -> Option<&str> {
        self.tls.as_ref().map(|tls| tls.spki_sha256.as_str())
    }

    /// The next upgraded connection (after its automatic handshake, if one
    /// is configured), waiting at most `timeout`.
    pub fn accept(&self, timeout: Duration) -> Option<Conn> {
        self.conns.recv_timeout(timeout).ok()
    }

    /// Appends behaviours for the next upgrade requests; once the queue is
    /// empty every request gets [`UpgradeBehaviour::Accept`].
    pub fn push_upgrades(&self, behaviours: impl IntoIterator<Item = UpgradeBehaviour>) {
        lock(&self.shared.upgrades).extend(behaviours);
    }

    /// Sets (or with `None` removes) the bearer token accepted upgrades
    /// require.
    pub fn set_expected_token(&self, token: Option<&str>) {
        *lock(&self.shared.expected_token) = token.map(str::to_owned);
    }

    /// Turns the requirement of an issued access token
    /// ([`EmulatorOptions::require_issued_token`]) on or off for upgrades
    /// from now on.
    pub fn set_require_issued_token(&self, required: bool) {
        self.shared
            .require_issued_token
            .store(required, Ordering::SeqCst);
    }

    /// Sets (or with `None` stops) the automatic handshake for connections
    /// upgraded from now on.
    pub fn set_auto_handshake(&self, ack: Option<HelloAck>) {
        *lock(&self.shared.auto_handshake) = ack;
    }

    /// Every upgrade attempt that has ended so far, in order of ending.
    pub fn attempts(&self) -> Vec<UpgradeAttempt> {
        self.shared.attempts.all()
    }

    /// Waits until at least `count` attempts have ended (or `timeout`
    /// passed) and returns all of them.
    pub fn wait_attempts(&self, count: usize, timeout: Duration) -> Vec<UpgradeAttempt> {
        self.shared.attempts.wait_for(count, timeout)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.acceptor.stop();
        let handing_out = lock(&self.shared.handing_out);
        let waited =
            self.shared
                .handed_out
                .wait_timeout_while(handing_out, HAND_OUT_WAIT, |count| *count > 0);
        drop(waited);
        // Each is judged here, so its own drop right after finds nothing left
        // to report.
        let reports: Vec<String> = self
            .conns
            .try_iter()
            .filter_map(|conn| conn.judge())
            .collect();
        if !reports.is_empty() {
            fail_test(&format!(
                "on connections the test never accepted: {}",
                reports.join("\n")
            ));
        }
    }
}

/// What the upgrade callback saw and decided.
#[derive(Default)]
struct Seen {
    path: Option<String>,
    authorization: Option<String>,
    headers: Vec<(String, String)>,
    decision: Option<Decision>,
    /// Whether the attempt is already in the record: a refusal is recorded
    /// before its answer is written, so a client that has read the answer
    /// always finds the attempt.
    recorded: bool,
}

#[derive(Clone, PartialEq, Eq)]
enum Decision {
    Upgrade,
    /// The status, and the `detail` of a JSON body (else a text body).
    Reject(u16, Option<String>),
    Unanswered,
}

fn serve(tcp: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) {
    let mut seen = Seen::default();
    let result = match upgrade(tcp, peer, shared, &mut seen) {
        // An OAuth request, answered: no upgrade was attempted.
        Ok(None) => return,
        Ok(Some(conn)) => Ok(conn),
        Err(outcome) => Err(outcome),
    };
    let outcome = match &result {
        Ok(_) => AttemptOutcome::Upgraded,
        Err(outcome) => outcome.clone(),
    };
    // Recorded before the Conn is handed out, so a test holding a Conn
    // always finds its attempt.
    if !seen.recorded {
        shared.attempts.push(UpgradeAttempt {
            peer,
            path: seen.path,
            authorization: seen.authorization,
            headers: seen.headers,
            outcome,
        });
    }
    let Ok(conn) = result else {
        return;
    };
    let _handing_out = HandingOut::new(shared);
    let auto = lock(&shared.auto_handshake).clone();
    if let Some(ack) = auto {
        conn.auto_handshake(&ack, HANDSHAKE_TIMEOUT, &shared.stop);
    }
    // The receiver lives as long as the Emulator; once it is gone the
    // connection is dropped here, which closes it.
    let _ = shared.conns.send(conn);
}

/// The TLS handshake, then either the OAuth answer (`Ok(None)`) or the
/// WebSocket upgrade (`Ok(Some(conn))`).
fn upgrade(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    seen: &mut Seen,
) -> Result<Option<Conn>, AttemptOutcome> {
    let setup = tcp
        .set_nodelay(true)
        .and_then(|()| tcp.set_read_timeout(Some(HANDSHAKE_TIMEOUT)))
        .and_then(|()| tcp.set_write_timeout(Some(HANDSHAKE_TIMEOUT)));
    if let Err(error) = setup {
        return Err(AttemptOutcome::HandshakeFailed(error.to_string()));
    }
    let transport = match &shared.server_config {
        None => Transport::plain(tcp),
        Some(config) => match tls_handshake(tcp, config) {
            Ok(tls) => Transport::tls(tls),
            Err(error) => return Err(AttemptOutcome::TlsFailed(error.to_string())),
        },
    };
    // The request head decides where the connection goes. A head that cannot
    // be read as one is left to the WebSocket handshake, which answers it as
    // it always did.
    let mut reader = HttpReader::new(transport, Instant::now() + HANDSHAKE_TIMEOUT);
    let head = match reader.read_head(MAX_HEAD_BYTES) {
        Ok(head) => head,
        Err(Fault::Closed) => {
            return Err(AttemptOutcome::HandshakeFailed(
                "the client closed the connection before sending a request".to_owned(),
            ));
        }
        Err(Fault::Io(error)) => return Err(AttemptOutcome::HandshakeFailed(error.to_string())),
        Err(_) => Vec::new(),
    };
    if let Ok(parsed) = parse_head(&head) {
        if oauth::routes_here(&parsed) {
            shared.oauth.serve(reader, parsed);
            return Ok(None);
        }
    }
    let (mut transport, unread) = reader.into_parts();
    let mut replay = head;
    replay.extend(unread);
    transport.replay(replay);
    if let Err(error) = transport.tcp().set_read_timeout(Some(HANDSHAKE_TIMEOUT)) {
        return Err(AttemptOutcome::HandshakeFailed(error.to_string()));
    }
    let mute = transport.mute_switch();
    let config = WebSocketConfig::default()
        .max_message_size(Some(wire::MAX_WEBSOCKET_MESSAGE_BYTES))
        .max_frame_size(Some(wire::MAX_WEBSOCKET_MESSAGE_BYTES));

    // The callback's signature is tungstenite's, error type included.
    #[allow(clippy::result_large_err)]
    let callback = |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
        seen.path = Some(request.uri().to_string());
        seen.headers = request
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        seen.authorization = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        let behaviour = lock(&shared.upgrades)
            .pop_front()
            .unwrap_or(UpgradeBehaviour::Accept);
        let decision = match behaviour {
            UpgradeBehaviour::Accept => {
                if bearer_accepted(shared, seen.authorization.as_deref()) {
                    Decision::Upgrade
                } else {
                    Decision::Reject(401, None)
                }
            }
            UpgradeBehaviour::Status(status) => Decision::Reject(status, None),
            UpgradeBehaviour::Refuse { status, detail } => Decision::Reject(status, Some(detail)),
            UpgradeBehaviour::DropConnection => Decision::Unanswered,
            UpgradeBehaviour::Hang(duration) => {
                hang(duration, &shared.stop);
                Decision::Unanswered
            }
        };
        seen.decision = Some(decision.clone());
        let refused = match &decision {
            Decision::Upgrade => None,
            Decision::Reject(status, _) => Some(AttemptOutcome::Rejected(*status)),
            Decision::Unanswered => Some(AttemptOutcome::Unanswered),
        };
        if let Some(outcome) = refused {
            shared.attempts.push(UpgradeAttempt {
                peer,
                path: seen.path.clone(),
                authorization: seen.authorization.clone(),
                headers: seen.headers.clone(),
                outcome,
            });
            seen.recorded = true;
        }
        match decision {
            Decision::Upgrade => Ok(response),
            Decision::Reject(status, detail) => Err(error_response(status, detail.as_deref())),
            Decision::Unanswered => {
                mute.store(true, Ordering::SeqCst);
                Err(error_response(500, None))
            }
        }
    };
    // The error may hold the callback, which borrows `seen`: only its text
    // is kept.
    let result = tungstenite::accept_hdr_with_config(transport, callback, Some(config))
        .map_err(|error| error.to_string());
    let ws = match result {
        Ok(ws) => ws,
        Err(message) => {
            return Err(match seen.decision {
                Some(Decision::Reject(status, _)) => AttemptOutcome::Rejected(status),
                Some(Decision::Unanswered) => AttemptOutcome::Unanswered,
                _ => AttemptOutcome::HandshakeFailed(message),
            });
        }
    };

    let serial = shared.serial.fetch_add(1, Ordering::SeqCst) + 1;
    let path = seen.path.clone().unwrap_or_default();
    let info = RequestInfo {
        serial,
        peer,
        kind: ConnKind::from_path(&path, wire::WS_PATH),
        path,
        authorization: seen.authorization.clone(),
        headers: seen.headers.clone(),
        hello_deadline: shared.hello_deadline,
        unanswered: Arc::clone(&shared.unanswered),
    };
    let upgraded = ws
        .get_ref()
        .tcp()
        .set_write_timeout(None)
        .and_then(|()| Conn::start(ws, info));
    upgraded
        .map(Some)
        .map_err(|error| AttemptOutcome::HandshakeFailed(error.to_string()))
}

/// Whether an upgrade's `Authorization` passes the token checks in force:
/// none, the expected token, an issued one, or either of the two.
fn bearer_accepted(shared: &Shared, authorization: Option<&str>) -> bool {
    let expected = lock(&shared.expected_token).clone();
    let require_issued = shared.require_issued_token.load(Ordering::SeqCst);
    if expected.is_none() && !require_issued {
        return true;
    }
    let Some(token) = authorization.and_then(|value| value.strip_prefix("Bearer ")) else {
        return false;
    };
    expected.as_deref() == Some(token)
        || (require_issued && shared.oauth.access_token_is_live(token))
}

fn tls_handshake(
    mut tcp: TcpStream,
    config: &Arc<rustls::ServerConfig>,
) -> io::Result<StreamOwned<ServerConnection, TcpStream>> {
    let mut tls = ServerConnection::new(Arc::clone(config)).map_err(io::Error::other)?;
    while tls.is_handshaking() {
        let (read, written) = tls.complete_io(&mut tcp)?;
        if read == 0 && written == 0 && tls.is_handshaking() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the client closed the connection during the TLS handshake",
            ));
        }
    }
    Ok(StreamOwned::new(tls, tcp))
}

/// Sleeps for `duration`, waking early when the emulator stops.
fn hang(duration: Duration, stop: &AtomicBool) {
    let deadline = Instant::now() + duration;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        thread::sleep((deadline - now).min(Duration::from_millis(20)));
    }
}

/// The refusal's response: `{"detail": …}` as JSON when there is a
/// detail, else a one-line text body naming the status.
fn error_response(status: u16, detail: Option<&str>) -> ErrorResponse {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|code| code.canonical_reason())
        .unwrap_or("Refused");
    let body = match detail {
        Some(detail) => serde_json::json!({ "detail": detail }).to_string(),
        None => format!("{status} {reason}\n"),
    };
    let mut response = ErrorResponse::new(Some(body));
    if detail.is_some() {
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
    }
    // An unrepresentable status (outside 100..=999) becomes 500 rather than
    // an answer the HTTP layer cannot write.
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    response
}
