//! The platform's OAuth endpoints (`AUTH.md` §1–§7, §11): the authorize
//! endpoint the user's browser opens, the token endpoint (both grant types)
//! and the revoke endpoint, with the platform's checks — PKCE S256, single
//! use codes bound to their client and redirect URI, refresh tokens that
//! rotate, revocation of a whole grant.
//!
//! This module owns the OAuth side of an emulated platform: the ledger of
//! codes and tokens it issued, a queue of per-request behaviours for the
//! token and revoke endpoints (so "500, then tokens" is scriptable), and the
//! record of every request received. [`OAuthEndpoints`] is that state; the
//! platform [`crate::Emulator`] serves it on its own port (TLS included),
//! beside the WebSocket, and [`OAuthEmulator`] serves it alone over plain
//! HTTP for tests that only need a token endpoint.
//!
//! Like the WebSocket side it is written from the specification alone and
//! listens on 127.0.0.1 only: a test platform handing out tokens must never
//! be reachable from the network. Codes and tokens come from the OS random
//! source; without it a request is answered 500 rather than with a
//! guessable value.
//!
//! ```no_run
//! use std::time::Duration;
//! use autogpt_shim_emulator::oauth::{OAuthEmulator, TokenBehaviour, form_fields};
//!
//! let oauth = OAuthEmulator::start()?;
//! oauth.push_token(TokenBehaviour::Status(400, r#"{"error":"invalid_grant"}"#.to_owned()));
//! // … point a shim's platform_url at oauth.base_url(), let it refresh, then:
//! let seen = oauth.wait_requests(1, Duration::from_secs(10));
//! assert_eq!(seen[0].path, "/api/oauth/token");
//! let fields = form_fields(&seen[0].body);
//! assert_eq!(fields[0], ("grant_type".to_owned(), "refresh_token".to_owned()));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

pub use crate::browser::{Browser, Followed, HttpResponse, http_request, visit};
pub use crate::http::{MAX_BODY_BYTES, MAX_HEAD_BYTES, RecordedRequest};

use crate::http::{
    Fault, Head, HttpReader, Socket, finish, parse_head, read_body, reason, request_line,
    write_chunked, write_plain,
};
use crate::listener::{Acceptor, Record};
use crate::wire;

/// Path of the authorize endpoint under the platform base (`AUTH.md` §1).
pub const AUTHORIZE_PATH: &str = "/auth/authorize";

/// Path of the token endpoint (`AUTH.md` §1).
pub const TOKEN_PATH: &str = "/api/oauth/token";

/// Path of the revoke endpoint (`AUTH.md` §1).
pub const REVOKE_PATH: &str = "/api/oauth/revoke";

/// The one client the platform registers for the shim (`AUTH.md` §2).
pub const CLIENT_ID: &str = "autogpt-local-executor";

/// The one scope the platform grants it (`AUTH.md` §2).
pub const SCOPE: &str = "USE_TOOLS";

/// How long a code from the authorize endpoint can be exchanged (RFC 6749
/// §4.1.2 recommends at most ten minutes).
pub const CODE_LIFETIME: Duration = Duration::from_secs(600);

/// How long the server waits for a whole request on one connection, and how
/// long writing an answer may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `expires_in` of issued tokens, in seconds.
const EXPIRES_IN: u64 = 3600;

/// What to answer to one `POST /api/oauth/token`, whatever its grant type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenBehaviour {
    /// When the grant is good ([`Grants`]): 200 with `{"access_token",
    /// "refresh_token", "token_type": "Bearer", "expires_in": 3600,
    /// "scope": "USE_TOOLS"}` and fresh random tokens (`at-` / `rt-`
    /// followed by 32 lowercase hex digits). Otherwise the platform's
    /// refusal: 400 `invalid_request`, `invalid_grant` or
    /// `unsupported_grant_type`, or 401 `invalid_client`.
    Issue,
    /// Like [`TokenBehaviour::Issue`] but without `refresh_token` (the
    /// other members stay), as a platform that does not rotate refresh
    /// tokens answers a refresh.
    IssueWithoutRefresh,
    /// Like [`TokenBehaviour::Issue`], but the body is sent with
    /// `Transfer-Encoding: chunked` in several small chunks instead of a
    /// `Content-Length`.
    Chunked,
    /// This status with this body (e.g. `400` with
    /// `{"error":"invalid_grant"}`, or `500`), whatever the grant. The body
    /// is labelled `application/json` when it parses as JSON, `text/plain`
    /// otherwise.
    Status(u16, String),
    /// 200 with this raw body, labelled `application/json` whatever it is
    /// (e.g. `not json`, `{}`, `[]`).
    Body(String),
    /// Read the request, answer nothing for this long, then close.
    Hang(Duration),
    /// Read the request, then close the connection without any answer.
    DropConnection,
}

/// What to answer to one `POST /api/oauth/revoke`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeBehaviour {
    /// Revoke the token if this emulator issued it (a refresh token takes
    /// its whole grant with it, RFC 7009 §2.1), then 200 with an empty body
    /// (RFC 7009 §2.2: unknown tokens too).
    Ok,
    /// This status with a short JSON body; nothing is revoked.
    Status(u16),
    /// Read the request, answer nothing for this long, then close.
    Hang(Duration),
    /// Read the request, then close the connection without any answer.
    DropConnection,
}

/// Which codes and refresh tokens the token endpoint honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grants {
    /// As the platform: a code only if this emulator's authorize endpoint
    /// issued it — once, within [`CODE_LIFETIME`], for the same client and
    /// redirect URI, with a `code_verifier` whose S256 challenge is the one
    /// authorized — and a refresh token only if it issued it and neither
    /// rotated nor revoked it since. The client id must be [`CLIENT_ID`].
    #[default]
    Issued,
    /// Like [`Grants::Issued`] for codes and refresh tokens this emulator
    /// issued, but any other code, refresh token or body is honoured too:
    /// for tests that script a token endpoint with values of their own.
    Any,
}

/// State shared by the servers' connection threads and every handle.
struct Shared {
    grants: Grants,
    stop: Arc<AtomicBool>,
    tokens: Mutex<VecDeque<TokenBehaviour>>,
    revokes: Mutex<VecDeque<RevokeBehaviour>>,
    requests: Record<RecordedRequest>,
    issued: Mutex<Vec<(String, String)>>,
    ledger: Mutex<Ledger>,
}

/// What this emulator handed out and what of it is still good.
#[derive(Default)]
struct Ledger {
    /// Codes not yet exchanged, with what they were issued for.
    codes: HashMap<String, Authorization>,
    /// Live access tokens, with the grant each belongs to.
    access: HashMap<String, u64>,
    /// Live refresh tokens, with the grant each belongs to.
    refresh: HashMap<String, u64>,
    next_grant: u64,
}

impl Ledger {
    fn new_grant(&mut self) -> u64 {
        self.next_grant += 1;
        self.next_grant
    }
}

/// One approved authorization request, waiting for its code exchange.
struct Authorization {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    issued: Instant,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every value behind these locks is changed in one step under the lock,
    // so a panic elsewhere cannot leave it half-updated.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The OAuth side of an emulated platform: the endpoints' behaviour queues,
/// the codes and tokens issued, and every request received. Cloning gives
/// another handle on the same state.
#[derive(Clone)]
pub struct OAuthEndpoints {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for OAuthEndpoints {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("OAuthEndpoints")
            .field("grants", &self.shared.grants)
            .finish_non_exhaustive()
    }
}

impl OAuthEndpoints {
    /// Fresh state; `stop` cuts short any hang in progress once set.
    pub(crate) fn new(grants: Grants, stop: Arc<AtomicBool>) -> OAuthEndpoints {
        OAuthEndpoints {
            shared: Arc::new(Shared {
                grants,
                stop,
                tokens: Mutex::new(VecDeque::new()),
                revokes: Mutex::new(VecDeque::new()),
                requests: Record::new(),
                issued: Mutex::new(Vec::new()),
                ledger: Mutex::new(Ledger::default()),
            }),
        }
    }

    /// Which codes and refresh tokens the token endpoint honours.
    pub fn grants(&self) -> Grants {
        self.shared.grants
    }

    /// Queues the behaviour for a coming token request (first in, first
    /// out); once the queue is empty every token request gets
    /// [`TokenBehaviour::Issue`].
    pub fn push_token(&self, behaviour: TokenBehaviour) {
        lock(&self.shared.tokens).push_back(behaviour);
    }

    /// Queues the behaviour for a coming revoke request (first in, first
    /// out); once the queue is empty every revoke request gets
    /// [`RevokeBehaviour::Ok`].
    pub fn push_revoke(&self, behaviour: RevokeBehaviour) {
        lock(&self.shared.revokes).push_back(behaviour);
    }

    /// Every request read so far, whatever its path, in the order they were
    /// read in full. A request is recorded before it is answered, so one
    /// being hung on is already here.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.all()
    }

    /// Waits until at least `count` requests have been read (or `timeout`
    /// passed) and returns all of them.
    pub fn wait_requests(&self, count: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.shared.requests.wait_for(count, timeout)
    }

    /// `(access_token, refresh_token)` of every token answer issued so far
    /// ([`TokenBehaviour::Issue`], [`TokenBehaviour::Chunked`] and, with an
    /// empty refresh token, [`TokenBehaviour::IssueWithoutRefresh`]), in
    /// order. A pair is recorded before its answer is written.
    pub fn issued(&self) -> Vec<(String, String)> {
        lock(&self.shared.issued).clone()
    }

    /// Whether `token` is an access token this emulator issued and has not
    /// revoked: what the platform checks on a WebSocket upgrade.
    pub fn access_token_is_live(&self, token: &str) -> bool {
        lock(&self.shared.ledger).access.contains_key(token)
    }

    /// Reads the rest of one request whose head has been read, answers it
    /// on the same connection and ends the connection.
    pub(crate) fn serve<S: Socket>(&self, mut reader: HttpReader<S>, head: Head) {
        let request = match read_body(&mut reader, head) {
            Ok(request) => request,
            Err(Fault::Closed | Fault::Io(_)) => return,
            Err(fault) => {
                refuse_malformed(&mut reader, &fault);
                return;
            }
        };
        let answer = answer_for(&request, &self.shared);
        self.shared.requests.push(request);
        let out: &mut dyn io::Write = reader.stream_mut();
        let written = match answer {
            Answer::Plain {
                status,
                content_type,
                location,
                body,
            } => {
                let extra: Vec<(&str, &str)> = location
                    .as_deref()
                    .map(|location| ("Location", location))
                    .into_iter()
                    .collect();
                write_plain(out, status, content_type, &extra, &body)
            }
            Answer::Chunked { content_type, body } => write_chunked(out, content_type, &body),
            Answer::Hang(duration) => {
                hang(duration, &self.shared.stop);
                Ok(())
            }
            Answer::Drop => Ok(()),
        };
        if written.is_ok() {
            finish(&mut reader);
        }
    }
}

/// Whether a request head is for one of the OAuth endpoints (by its path,
/// whatever the method or query) rather than a WebSocket upgrade: how the
/// platform emulator tells the two apart on one port.
pub(crate) fn routes_here(head: &Head) -> bool {
    let Ok((_, target)) = request_line(head) else {
        return false;
    };
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    let upgrade = crate::http::header_value(&head.headers, "upgrade").is_some();
    !upgrade && [AUTHORIZE_PATH, TOKEN_PATH, REVOKE_PATH].contains(&path)
}

/// Answers a request that could not be read as HTTP, and ends the
/// connection.
pub(crate) fn refuse_malformed<S: Socket>(reader: &mut HttpReader<S>, fault: &Fault) {
    let status = fault.status();
    let body = format!("{status} {}\n", reason(status)).into_bytes();
    let _ = write_plain(
        reader.stream_mut(),
        status,
        "text/plain; charset=utf-8",
        &[],
        &body,
    );
    // The rest of the request was not read: draining a little in `finish`
    // keeps the close from resetting the connection before the client
    // reads the answer.
    finish(reader);
}

/// A running OAuth endpoint emulator on 127.0.0.1, plain HTTP. Dropping it
/// stops accepting connections and cuts short any [`TokenBehaviour::Hang`]
/// or [`RevokeBehaviour::Hang`] in progress.
pub struct OAuthEmulator {
    addr: SocketAddr,
    endpoints: OAuthEndpoints,
    _acceptor: Acceptor,
}

impl std::fmt::Debug for OAuthEmulator {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("OAuthEmulator")
            .field("base_url", &self.base_url())
            .finish_non_exhaustive()
    }
}

impl OAuthEmulator {
    /// Binds an ephemeral port of 127.0.0.1 (plain HTTP) and starts
    /// answering in a background thread, honouring any grant
    /// ([`Grants::Any`]).
    pub fn start() -> io::Result<OAuthEmulator> {
        OAuthEmulator::start_with(Grants::Any)
    }

    /// [`OAuthEmulator::start`] honouring the given grants.
    pub fn start_with(grants: Grants) -> io::Result<OAuthEmulator> {
        let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let endpoints = OAuthEndpoints::new(grants, Arc::clone(&stop));
        let conn_endpoints = endpoints.clone();
        let acceptor = Acceptor::start(
            listener,
            "oauth-accept",
            "oauth-conn",
            stop,
            move |tcp, _peer| serve_tcp(tcp, &conn_endpoints),
        )?;
        Ok(OAuthEmulator {
            addr,
            endpoints,
            _acceptor: acceptor,
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

    /// `http://127.0.0.1:PORT`, the `platform_url` a shim derives the
    /// endpoints from.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The authorize endpoint, `http://127.0.0.1:PORT/auth/authorize`.
    pub fn authorize_url(&self) -> String {
        format!("{}{AUTHORIZE_PATH}", self.base_url())
    }

    /// The token endpoint, `http://127.0.0.1:PORT/api/oauth/token`.
    pub fn token_url(&self) -> String {
        format!("{}{TOKEN_PATH}", self.base_url())
    }

    /// The revoke endpoint, `http://127.0.0.1:PORT/api/oauth/revoke`.
    pub fn revoke_url(&self) -> String {
        format!("{}{REVOKE_PATH}", self.base_url())
    }

    /// The endpoints' state.
    pub fn endpoints(&self) -> &OAuthEndpoints {
        &self.endpoints
    }

    /// [`OAuthEndpoints::push_token`].
    pub fn push_token(&self, behaviour: TokenBehaviour) {
        self.endpoints.push_token(behaviour);
    }

    /// [`OAuthEndpoints::push_revoke`].
    pub fn push_revoke(&self, behaviour: RevokeBehaviour) {
        self.endpoints.push_revoke(behaviour);
    }

    /// [`OAuthEndpoints::requests`].
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.endpoints.requests()
    }

    /// [`OAuthEndpoints::wait_requests`].
    pub fn wait_requests(&self, count: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.endpoints.wait_requests(count, timeout)
    }

    /// [`OAuthEndpoints::issued`].
    pub fn issued(&self) -> Vec<(String, String)> {
        self.endpoints.issued()
    }
}

/// One connection of the plain-HTTP [`OAuthEmulator`].
fn serve_tcp(tcp: TcpStream, endpoints: &OAuthEndpoints) {
    let _ = tcp.set_nodelay(true);
    if tcp.set_write_timeout(Some(REQUEST_TIMEOUT)).is_err() {
        return;
    }
    let mut reader = HttpReader::new(tcp, Instant::now() + REQUEST_TIMEOUT);
    match reader
        .read_head(MAX_HEAD_BYTES)
        .and_then(|head| parse_head(&head))
    {
        Ok(head) => endpoints.serve(reader, head),
        Err(Fault::Closed | Fault::Io(_)) => {}
        Err(fault) => refuse_malformed(&mut reader, &fault),
    }
}

/// What the server does with the connection once the request is read.
enum Answer {
    /// A complete response with a `Content-Length` body (and a `Location`
    /// for a redirect).
    Plain {
        status: u16,
        content_type: &'static str,
        location: Option<String>,
        body: Vec<u8>,
    },
    /// A 200 response whose body is sent chunked.
    Chunked {
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// Nothing, for this long, then close.
    Hang(Duration),
    /// Close without answering.
    Drop,
}

impl Answer {
    fn json(status: u16, body: &Value) -> Answer {
        Answer::Plain {
            status,
            content_type: "application/json",
            location: None,
            body: body.to_string().into_bytes(),
        }
    }

    /// The OAuth error answer of RFC 6749 §5.2.
    fn oauth_error(status: u16, error: &str, description: &str) -> Answer {
        Answer::json(
            status,
            &json!({"error": error, "error_description": description}),
        )
    }

    fn server_error() -> Answer {
        Answer::oauth_error(500, "server_error", "no random source for a token")
    }

    fn page(status: u16, text: &str) -> Answer {
        Answer::Plain {
            status,
            content_type: "text/html; charset=utf-8",
            location: None,
            body: page(text).into_bytes(),
        }
    }
}

/// A small fixed HTML page.
fn page(text: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>AutoGPT platform emulator</title>\
         </head><body><p>{text}</p></body></html>"
    )
}

/// Picks the answer for a request, taking the next queued behaviour of its
/// endpoint. Codes and tokens are issued (and recorded) here.
fn answer_for(request: &RecordedRequest, shared: &Shared) -> Answer {
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", _) if request.path_only() == AUTHORIZE_PATH => authorize(request, shared),
        ("POST", TOKEN_PATH) => {
            let behaviour = lock(&shared.tokens)
                .pop_front()
                .unwrap_or(TokenBehaviour::Issue);
            token_answer(request, behaviour, shared)
        }
        ("POST", REVOKE_PATH) => {
            let behaviour = lock(&shared.revokes)
                .pop_front()
                .unwrap_or(RevokeBehaviour::Ok);
            match behaviour {
                RevokeBehaviour::Ok => revoke(request, shared),
                RevokeBehaviour::Status(status) => Answer::json(
                    status,
                    &json!({"detail": format!("{status} {}", reason(status))}),
                ),
                RevokeBehaviour::Hang(duration) => Answer::Hang(duration),
                RevokeBehaviour::DropConnection => Answer::Drop,
            }
        }
        _ => Answer::json(404, &json!({"detail": "Not Found"})),
    }
}

/// The fields of a form in order, first value of each name; `None` when a
/// name repeats (RFC 6749 §3.1 and §3.2: parameters must not be sent more
/// than once).
fn single_fields(body: &[u8]) -> Option<HashMap<String, String>> {
    let mut fields = HashMap::new();
    for (name, value) in form_fields(body) {
        if fields.insert(name, value).is_some() {
            return None;
        }
    }
    Some(fields)
}

/// `GET /auth/authorize` (`AUTH.md` §4, RFC 6749 §4.1.1, RFC 7636 §4.3):
/// the user approves at once, as a platform does for a user who is logged
/// in; the answer is the redirect to the shim's callback with a fresh code
/// and the state, or with an `error` for a bad request. An unknown client
/// or redirect URI gets a page and no redirect (RFC 6749 §4.1.2.1): the
/// browser must never be sent somewhere unregistered.
fn authorize(request: &RecordedRequest, shared: &Shared) -> Answer {
    let Some(params) = single_fields(request.query().as_bytes()) else {
        return Answer::page(400, "The authorization request repeats a parameter.");
    };
    let param = |name: &str| params.get(name).map(String::as_str).unwrap_or_default();
    if param("client_id") != CLIENT_ID {
        return Answer::page(400, "The authorization request names an unknown client.");
    }
    let redirect_uri = param("redirect_uri");
    if !is_registered_redirect(redirect_uri) {
        return Answer::page(
            400,
            "The authorization request names a redirect URI that is not registered.",
        );
    }
    let state = params.get("state").filter(|state| !state.is_empty());
    let redirect = |fields: &[(&str, &str)]| -> Answer {
        let mut all: Vec<(&str, &str)> = fields.to_vec();
        if let Some(state) = state {
            all.push(("state", state));
        }
        let query: Vec<String> = all
            .iter()
            .map(|(name, value)| format!("{}={}", form_encode(name), form_encode(value)))
            .collect();
        let location = format!("{redirect_uri}?{}", query.join("&"));
        let body = page(&format!(
            "Authorized. Returning to autogpt-shim: <a href=\"{}\">continue</a>.",
            location.replace('&', "&amp;").replace('"', "&quot;")
        ));
        Answer::Plain {
            status: 302,
            content_type: "text/html; charset=utf-8",
            location: Some(location),
            body: body.into_bytes(),
        }
    };
    if param("response_type") != "code" {
        return redirect(&[("error", "unsupported_response_type")]);
    }
    let challenge = param("code_challenge");
    if param("code_challenge_method") != "S256" || !is_challenge(challenge) {
        return redirect(&[
            ("error", "invalid_request"),
            (
                "error_description",
                "a code_challenge of 43 base64url characters with method S256 is required",
            ),
        ]);
    }
    if param("scope") != SCOPE {
        return redirect(&[("error", "invalid_scope")]);
    }
    let Ok(code) = random_token("ac-") else {
        return redirect(&[("error", "server_error")]);
    };
    lock(&shared.ledger).codes.insert(
        code.clone(),
        Authorization {
            client_id: CLIENT_ID.to_owned(),
            redirect_uri: redirect_uri.to_owned(),
            challenge: challenge.to_owned(),
            issued: Instant::now(),
        },
    );
    redirect(&[("code", &code)])
}

/// `http://localhost:PORT/callback`, the form of the redirect URIs the
/// platform registers (`AUTH.md` §2). Any port is taken, so tests can use
/// ports of their own; the platform itself registers 41899–41910.
fn is_registered_redirect(uri: &str) -> bool {
    uri.strip_prefix("http://localhost:")
        .and_then(|rest| rest.strip_suffix("/callback"))
        .is_some_and(|port| {
            !port.is_empty()
                && port.len() <= 5
                && port.bytes().all(|byte| byte.is_ascii_digit())
                && port.parse::<u16>().is_ok_and(|port| port > 0)
        })
}

/// 43 base64url characters: an encoded SHA-256 (RFC 7636 §4.2).
fn is_challenge(text: &str) -> bool {
    text.len() == 43 && text.bytes().all(is_base64url)
}

fn is_base64url(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

/// A `code_verifier` as RFC 7636 §4.1 allows it: 43–128 unreserved
/// characters.
fn is_verifier(text: &str) -> bool {
    (43..=128).contains(&text.len())
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-._~".contains(&byte))
}

/// base64url-without-padding(SHA-256(verifier)), RFC 7636 §4.2.
fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        verifier.as_bytes(),
    ))
}

/// Why the token endpoint refuses a grant: status, OAuth error, description.
type Refusal = (u16, &'static str, &'static str);

/// Judges the grant of a token request under `shared.grants`; the grant id
/// to issue under, and the refresh token the answer replaces (rotation).
fn judge_grant(
    request: &RecordedRequest,
    shared: &Shared,
) -> Result<(u64, Option<String>), Refusal> {
    let lenient = shared.grants == Grants::Any;
    let mut ledger = lock(&shared.ledger);
    let Some(fields) = single_fields(&request.body) else {
        if lenient {
            return Ok((ledger.new_grant(), None));
        }
        return Err((400, "invalid_request", "a parameter is repeated"));
    };
    let field = |name: &str| fields.get(name).map(String::as_str).unwrap_or_default();
    let client_ok = field("client_id") == CLIENT_ID;
    match field("grant_type") {
        "authorization_code" => {
            let code = field("code");
            // Single use: the code is gone whatever the outcome.
            let Some(authorization) = ledger.codes.remove(code) else {
                if lenient {
                    return Ok((ledger.new_grant(), None));
                }
                if !client_ok {
                    return Err((401, "invalid_client", "unknown client"));
                }
                return Err((400, "invalid_grant", "unknown, used or expired code"));
            };
            if field("client_id") != authorization.client_id {
                return Err((
                    401,
                    "invalid_client",
                    "the code was issued to another client",
                ));
            }
            if authorization.issued.elapsed() > CODE_LIFETIME {
                return Err((400, "invalid_grant", "unknown, used or expired code"));
            }
            if field("redirect_uri") != authorization.redirect_uri {
                return Err((
                    400,
                    "invalid_grant",
                    "redirect_uri differs from the authorization request",
                ));
            }
            let verifier = field("code_verifier");
            if !is_verifier(verifier) || s256(verifier) != authorization.challenge {
                return Err((
                    400,
                    "invalid_grant",
                    "code_verifier does not match the code_challenge",
                ));
            }
            Ok((ledger.new_grant(), None))
        }
        "refresh_token" => {
            let token = field("refresh_token");
            match ledger.refresh.get(token).copied() {
                Some(grant) if client_ok => Ok((grant, Some(token.to_owned()))),
                Some(_) => Err((401, "invalid_client", "unknown client")),
                None if lenient => Ok((ledger.new_grant(), None)),
                None if !client_ok => Err((401, "invalid_client", "unknown client")),
                None => Err((
                    400,
                    "invalid_grant",
                    "unknown, rotated or revoked refresh token",
                )),
            }
        }
        _ if lenient => Ok((ledger.new_grant(), None)),
        _ => Err((
            400,
            "unsupported_grant_type",
            "grant_type must be authorization_code or refresh_token",
        )),
    }
}

fn token_answer(request: &RecordedRequest, behaviour: TokenBehaviour, shared: &Shared) -> Answer {
    let with_refresh = match behaviour {
        TokenBehaviour::Issue | TokenBehaviour::Chunked => true,
        TokenBehaviour::IssueWithoutRefresh => false,
        TokenBehaviour::Status(status, body) => {
            return Answer::Plain {
                status,
                content_type: if serde_json::from_str::<Value>(&body).is_ok() {
                    "application/json"
                } else {
                    "text/plain; charset=utf-8"
                },
                location: None,
                body: body.into_bytes(),
            };
        }
        TokenBehaviour::Body(body) => {
            return Answer::Plain {
                status: 200,
                content_type: "application/json",
                location: None,
                body: body.into_bytes(),
            };
        }
        TokenBehaviour::Hang(duration) => return Answer::Hang(duration),
        TokenBehaviour::DropConnection => return Answer::Drop,
    };
    let (grant, replaced) = match judge_grant(request, shared) {
        Ok(judged) => judged,
        Err((status, error, description)) => {
            return Answer::oauth_error(status, error, description);
        }
    };
    let Some(body) = issue(grant, replaced.as_deref(), with_refresh, shared) else {
        return Answer::server_error();
    };
    if behaviour == TokenBehaviour::Chunked {
        Answer::Chunked {
            content_type: "application/json",
            body: body.to_string().into_bytes(),
        }
    } else {
        Answer::json(200, &body)
    }
}

/// Issues an access token (and a refresh token when `with_refresh`, which
/// replaces `replaced`) under `grant`; the answer's JSON. `None` without a
/// random source.
fn issue(grant: u64, replaced: Option<&str>, with_refresh: bool, shared: &Shared) -> Option<Value> {
    let access = random_token("at-").ok()?;
    let refresh = if with_refresh {
        random_token("rt-").ok()?
    } else {
        String::new()
    };
    let mut body = json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": EXPIRES_IN,
        "scope": SCOPE,
    });
    let mut ledger = lock(&shared.ledger);
    ledger.access.insert(access.clone(), grant);
    if with_refresh {
        body["refresh_token"] = Value::String(refresh.clone());
        if let Some(old) = replaced {
            ledger.refresh.remove(old);
        }
        ledger.refresh.insert(refresh.clone(), grant);
    }
    drop(ledger);
    lock(&shared.issued).push((access, refresh));
    Some(body)
}

/// `POST /api/oauth/revoke` (`AUTH.md` §11, RFC 7009): a JSON body as the
/// shim sends it, or a form as RFC 7009 describes. An access token is
/// revoked alone; a refresh token takes every token of its grant with it.
/// Unknown tokens are answered 200 like known ones (RFC 7009 §2.2).
fn revoke(request: &RecordedRequest, shared: &Shared) -> Answer {
    let token = match request.json() {
        Some(Value::Object(members)) => members
            .get("token")
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => form_fields(&request.body)
            .into_iter()
            .find(|(name, _)| name == "token")
            .map(|(_, value)| value),
    };
    match token.filter(|token| !token.is_empty()) {
        Some(token) => {
            let mut ledger = lock(&shared.ledger);
            if let Some(grant) = ledger.refresh.get(&token).copied() {
                ledger.refresh.retain(|_, owner| *owner != grant);
                ledger.access.retain(|_, owner| *owner != grant);
            } else {
                ledger.access.remove(&token);
            }
        }
        None if shared.grants == Grants::Issued => {
            return Answer::oauth_error(400, "invalid_request", "no token to revoke");
        }
        None => {}
    }
    Answer::Plain {
        status: 200,
        content_type: "application/json",
        location: None,
        body: Vec::new(),
    }
}

/// `prefix` followed by 32 lowercase hex digits from the OS random source.
fn random_token(prefix: &str) -> io::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|error| io::Error::other(error.to_string()))?;
    Ok(format!("{prefix}{}", wire::hex_lower(&bytes)))
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

/// The form encoding of the shim's authorize URL (`AUTH.md` §4): every
/// byte outside `A–Z a–z 0–9 _ . - ~` as `%XX` in uppercase hex, space as
/// `+`.
pub fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Decodes an `application/x-www-form-urlencoded` body into its fields, in
/// order: pairs are separated by `&` (empty pairs are skipped), a pair
/// without `=` has an empty value, `+` is a space and `%XX` a byte (either
/// hex case; a `%` not followed by two hex digits stays as it is). Bytes
/// that are not UTF-8 after decoding become U+FFFD.
pub fn form_fields(body: &[u8]) -> Vec<(String, String)> {
    body.split(|&byte| byte == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = match pair.iter().position(|&byte| byte == b'=') {
                Some(at) => (&pair[..at], &pair[at + 1..]),
                None => (pair, &[][..]),
            };
            (form_decode(name), form_decode(value))
        })
        .collect()
}

fn form_decode(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        if byte == b'+' {
            out.push(b' ');
            index += 1;
        } else if byte == b'%' {
            let high = bytes.get(index + 1).copied().and_then(hex_digit);
            let low = bytes.get(index + 2).copied().and_then(hex_digit);
            if let (Some(high), Some(low)) = (high, low) {
                out.push((high << 4) | low);
                index += 3;
            } else {
                out.push(byte);
                index += 1;
            }
        } else {
            out.push(byte);
            index += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// The members of a JSON object in the order they appear in `body`,
/// duplicates included; `None` unless `body` is exactly one JSON object
/// (surrounding whitespace allowed). Member order matters for the revoke
/// body (`AUTH.md` §11), and [`serde_json::Value`] does not keep it.
pub fn json_members(body: &[u8]) -> Option<Vec<(String, Value)>> {
    // The whole body must be a JSON object first; the scan below then only
    // has to find where each name and value ends.
    if !serde_json::from_slice::<Value>(body).ok()?.is_object() {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?;
    let mut at = skip_space(text, 0);
    if !text[at..].starts_with('{') {
        return None;
    }
    at = skip_space(text, at + 1);
    let mut members = Vec::new();
    if text[at..].starts_with('}') {
        return Some(members);
    }
    loop {
        let (Value::String(name), end) = next_json(text, at)? else {
            return None;
        };
        at = skip_space(text, end);
        if !text[at..].starts_with(':') {
            return None;
        }
        let (value, end) = next_json(text, at + 1)?;
        members.push((name, value));
        at = skip_space(text, end);
        if text[at..].starts_with(',') {
            at = skip_space(text, at + 1);
        } else if text[at..].starts_with('}') {
            return Some(members);
        } else {
            return None;
        }
    }
}

fn skip_space(text: &str, mut at: usize) -> usize {
    let bytes = text.as_bytes();
    while at < bytes.len() && matches!(bytes[at], b' ' | b'\t' | b'\n' | b'\r') {
        at += 1;
    }
    at
}

/// Parses one JSON value starting at byte `at` of `text`; returns it and the
/// byte offset just past it.
fn next_json(text: &str, at: usize) -> Option<(Value, usize)> {
    let rest = text.get(at..)?;
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    let value = values.next()?.ok()?;
    Some((value, at + values.byte_offset()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_fields_decode_plus_and_percent_in_order() {
        let body = b"grant_type=authorization_code&code=SplxlOBeZQQYbYS6WxSbIA\
&redirect_uri=http%3A%2F%2Flocalhost%3A41899%2Fcallback&client_id=autogpt-local-executor\
&code_verifier=dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let fields = form_fields(body);
        let names: Vec<&str> = fields.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "grant_type",
                "code",
                "redirect_uri",
                "client_id",
                "code_verifier"
            ]
        );
        assert_eq!(fields[2].1, "http://localhost:41899/callback");
        assert_eq!(
            form_fields(b"a=x+y%2bz&&b&c=%zz%4&d=%C3%A9"),
            [
                ("a".to_owned(), "x y+z".to_owned()),
                ("b".to_owned(), String::new()),
                ("c".to_owned(), "%zz%4".to_owned()),
                ("d".to_owned(), "é".to_owned()),
            ]
        );
        assert!(form_fields(b"").is_empty());
    }

    #[test]
    fn json_members_keep_the_order_sent() {
        let body = br#" {"token": "at-example", "token_type_hint": "access_token",
            "client_id": "autogpt-local-executor", "client_secret": "", "n": 12, "o": {"a": [1, 2]}} "#;
        let members = json_members(body).unwrap_or_default();
        let names: Vec<&str> = members.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "token",
                "token_type_hint",
                "client_id",
                "client_secret",
                "n",
                "o"
            ]
        );
        assert_eq!(members[3].1, json!(""));
        assert_eq!(members[4].1, json!(12));
        assert_eq!(members[5].1, json!({"a": [1, 2]}));
        assert_eq!(json_members(b"{}"), Some(Vec::new()));
        let duplicated = json_members(br#"{"a":1,"a":2}"#).unwrap_or_default();
        assert_eq!(duplicated.len(), 2);
        assert_eq!(json_members(b"[1]"), None);
        assert_eq!(json_members(b"not json"), None);
        assert_eq!(json_members(br#"{"a":1} {}"#), None);
    }

    #[test]
    fn s256_matches_the_rfc_7636_vector() {
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert!(is_challenge("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"));
        assert!(!is_challenge("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-c"));
        assert!(!is_challenge("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw+cM"));
        assert!(is_verifier("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"));
        assert!(!is_verifier("short"));
        assert!(!is_verifier(&"a".repeat(129)));
        assert!(!is_verifier(&format!("{}/", "a".repeat(50))));
    }

    #[test]
    fn only_localhost_callback_uris_are_registered() {
        assert!(is_registered_redirect("http://localhost:41899/callback"));
        assert!(is_registered_redirect("http://localhost:43012/callback"));
        for bad in [
            "http://127.0.0.1:41899/callback",
            "https://localhost:41899/callback",
            "http://localhost:41899/callback/",
            "http://localhost:41899/callback?x=1",
            "http://localhost:/callback",
            "http://localhost:0/callback",
            "http://localhost:70000/callback",
            "http://localhost:4189a/callback",
            "http://localhost.evil:41899/callback",
        ] {
            assert!(!is_registered_redirect(bad), "{bad}");
        }
    }

    #[test]
    fn form_encoding_is_the_authorize_urls() {
        assert_eq!(
            form_encode("http://localhost:41899/callback"),
            "http%3A%2F%2Flocalhost%3A41899%2Fcallback"
        );
        assert_eq!(form_encode("a b~c-_."), "a+b~c-_.");
        assert_eq!(form_encode("Ü"), "%C3%9C");
    }
}
