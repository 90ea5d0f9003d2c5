//! The platform's OAuth endpoints (`AUTH.md` §6, §7.3, §11) as a real
//! HTTP/1.1 server on 127.0.0.1, and a small HTTP client that plays the
//! user's browser against the shim's callback listener (`AUTH.md` §5).
//!
//! This module owns everything the OAuth side of a test touches that is not
//! a WebSocket: the token endpoint (`POST /api/oauth/token`, both grant
//! types), the revoke endpoint (`POST /api/oauth/revoke`), a queue of
//! per-request behaviours for each (so "500, then tokens" is scriptable),
//! the record of every request received, the tokens handed out, and the
//! decoding of form bodies and JSON members in the order they were sent.
//!
//! Like the WebSocket side it is written from the specification alone and
//! listens on 127.0.0.1 only: a test platform handing out tokens must never
//! be reachable from the network. The browser side ([`visit`],
//! [`http_request`]) likewise refuses any host that is not loopback.
//!
//! The HTTP spoken is deliberately small: one request per connection, a
//! request head of at most [`MAX_HEAD_BYTES`], a body framed by
//! `Content-Length` (or chunked) of at most [`MAX_BODY_BYTES`], and every
//! answer framed by `Content-Length` (chunked for
//! [`TokenBehaviour::Chunked`]) with `Connection: close`.
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

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::listener::{Acceptor, Record};
use crate::wire;

/// Path of the token endpoint (`AUTH.md` §1).
pub const TOKEN_PATH: &str = "/api/oauth/token";

/// Path of the revoke endpoint (`AUTH.md` §1).
pub const REVOKE_PATH: &str = "/api/oauth/revoke";

/// Largest request head (request line and headers) the server reads, and
/// largest response head the client reads.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Largest request body the server reads, and largest response body the
/// client reads.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How long the server waits for a whole request on one connection, and how
/// long writing an answer may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `expires_in` of issued tokens, in seconds.
const EXPIRES_IN: u64 = 3600;

/// What to answer to one `POST /api/oauth/token`, whatever its grant type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenBehaviour {
    /// 200 with `{"access_token", "refresh_token", "token_type": "Bearer",
    /// "expires_in": 3600, "scope": "USE_TOOLS"}` and fresh random tokens
    /// (`at-` / `rt-` followed by 32 lowercase hex digits).
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
    /// `{"error":"invalid_grant"}`, or `500`). The body is labelled
    /// `application/json` when it parses as JSON, `text/plain` otherwise.
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
    /// 200 with an empty body (RFC 7009 §2.2).
    Ok,
    /// This status with a short JSON body.
    Status(u16),
    /// Read the request, answer nothing for this long, then close.
    Hang(Duration),
    /// Read the request, then close the connection without any answer.
    DropConnection,
}

/// One HTTP request the emulator read in full, whatever its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method, as sent (e.g. `POST`).
    pub method: String,
    /// The request target, as sent (path and any query).
    pub path: String,
    /// Every header in order, names lower-cased, values as sent (without
    /// surrounding whitespace).
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked if it was sent chunked.
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The value of the first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }

    /// Every value of the headers called `name` (any case), in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
            .collect()
    }

    /// The body decoded as a form ([`form_fields`]).
    pub fn form(&self) -> Vec<(String, String)> {
        form_fields(&self.body)
    }

    /// The body as JSON, if it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The members of the body's top-level JSON object in the order they
    /// were sent ([`json_members`]).
    pub fn json_members(&self) -> Option<Vec<(String, Value)>> {
        json_members(&self.body)
    }
}

/// State shared by the accept loop, the connection threads and the
/// [`OAuthEmulator`] handle.
struct Shared {
    stop: Arc<AtomicBool>,
    tokens: Mutex<VecDeque<TokenBehaviour>>,
    revokes: Mutex<VecDeque<RevokeBehaviour>>,
    requests: Record<RecordedRequest>,
    issued: Mutex<Vec<(String, String)>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every value behind these locks is pushed or popped in one step, so a
    // panic elsewhere cannot leave it half-updated.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running OAuth endpoint emulator on 127.0.0.1. Dropping it stops
/// accepting connections and cuts short any [`TokenBehaviour::Hang`] or
/// [`RevokeBehaviour::Hang`] in progress.
pub struct OAuthEmulator {
    addr: SocketAddr,
    shared: Arc<Shared>,
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
    /// answering in a background thread.
    pub fn start() -> io::Result<OAuthEmulator> {
        let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            stop: Arc::new(AtomicBool::new(false)),
            tokens: Mutex::new(VecDeque::new()),
            revokes: Mutex::new(VecDeque::new()),
            requests: Record::new(),
            issued: Mutex::new(Vec::new()),
        });
        let conn_shared = Arc::clone(&shared);
        let acceptor = Acceptor::start(
            listener,
            "oauth-accept",
            "oauth-conn",
            Arc::clone(&shared.stop),
            move |tcp, _peer| serve(tcp, &conn_shared),
        )?;
        Ok(OAuthEmulator {
            addr,
            shared,
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

    /// `http://127.0.0.1:PORT`, the `platform_url` a shim derives the token
    /// and revoke endpoints from.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The token endpoint, `http://127.0.0.1:PORT/api/oauth/token`.
    pub fn token_url(&self) -> String {
        format!("{}{TOKEN_PATH}", self.base_url())
    }

    /// The revoke endpoint, `http://127.0.0.1:PORT/api/oauth/revoke`.
    pub fn revoke_url(&self) -> String {
        format!("{}{REVOKE_PATH}", self.base_url())
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
}

/// What the server does with the connection once the request is read.
enum Answer {
    /// A complete response with a `Content-Length` body.
    Plain {
        status: u16,
        content_type: &'static str,
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

fn serve(tcp: TcpStream, shared: &Shared) {
    let _ = tcp.set_nodelay(true);
    if tcp.set_write_timeout(Some(REQUEST_TIMEOUT)).is_err() {
        return;
    }
    let Ok(write_half) = tcp.try_clone() else {
        return;
    };
    let mut reader = HttpReader::new(tcp, Instant::now() + REQUEST_TIMEOUT);
    let request = match read_request(&mut reader, &write_half) {
        Ok(request) => request,
        Err(Fault::Closed | Fault::Io(_)) => return,
        Err(fault) => {
            let status = fault.status();
            let body = format!("{status} {}\n", reason(status)).into_bytes();
            let _ = write_plain(&write_half, status, "text/plain; charset=utf-8", &body);
            // The rest of the request was not read: drain a little so closing
            // does not reset the connection before the client reads the
            // answer.
            finish(&write_half, &mut reader);
            return;
        }
    };
    let answer = answer_for(&request, shared);
    shared.requests.push(request);
    let written = match answer {
        Answer::Plain {
            status,
            content_type,
            body,
        } => write_plain(&write_half, status, content_type, &body),
        Answer::Chunked { content_type, body } => write_chunked(&write_half, content_type, &body),
        Answer::Hang(duration) => {
            hang(duration, &shared.stop);
            Ok(())
        }
        Answer::Drop => Ok(()),
    };
    if written.is_ok() {
        finish(&write_half, &mut reader);
    }
}

/// Picks the answer for a request, taking the next queued behaviour of its
/// endpoint. Issued tokens are recorded here.
fn answer_for(request: &RecordedRequest, shared: &Shared) -> Answer {
    match (request.method.as_str(), request.path.as_str()) {
        ("POST", TOKEN_PATH) => {
            let behaviour = lock(&shared.tokens)
                .pop_front()
                .unwrap_or(TokenBehaviour::Issue);
            token_answer(behaviour, shared)
        }
        ("POST", REVOKE_PATH) => {
            let behaviour = lock(&shared.revokes)
                .pop_front()
                .unwrap_or(RevokeBehaviour::Ok);
            match behaviour {
                RevokeBehaviour::Ok => Answer::Plain {
                    status: 200,
                    content_type: "application/json",
                    body: Vec::new(),
                },
                RevokeBehaviour::Status(status) => Answer::Plain {
                    status,
                    content_type: "application/json",
                    body: json!({"detail": format!("{status} {}", reason(status))})
                        .to_string()
                        .into_bytes(),
                },
                RevokeBehaviour::Hang(duration) => Answer::Hang(duration),
                RevokeBehaviour::DropConnection => Answer::Drop,
            }
        }
        _ => Answer::Plain {
            status: 404,
            content_type: "application/json",
            body: br#"{"detail":"Not Found"}"#.to_vec(),
        },
    }
}

fn token_answer(behaviour: TokenBehaviour, shared: &Shared) -> Answer {
    let issue = |with_refresh: bool| -> Option<Vec<u8>> {
        // Without the OS random source no token would be unpredictable;
        // the request is answered 500 instead of with a guessable token.
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
            "scope": "USE_TOOLS",
        });
        if with_refresh {
            body["refresh_token"] = Value::String(refresh.clone());
        }
        lock(&shared.issued).push((access, refresh));
        Some(body.to_string().into_bytes())
    };
    let server_error = || Answer::Plain {
        status: 500,
        content_type: "application/json",
        body: br#"{"error":"server_error"}"#.to_vec(),
    };
    match behaviour {
        TokenBehaviour::Issue | TokenBehaviour::IssueWithoutRefresh => {
            match issue(behaviour == TokenBehaviour::Issue) {
                Some(body) => Answer::Plain {
                    status: 200,
                    content_type: "application/json",
                    body,
                },
                None => server_error(),
            }
        }
        TokenBehaviour::Chunked => match issue(true) {
            Some(body) => Answer::Chunked {
                content_type: "application/json",
                body,
            },
            None => server_error(),
        },
        TokenBehaviour::Status(status, body) => Answer::Plain {
            status,
            content_type: if serde_json::from_str::<Value>(&body).is_ok() {
                "application/json"
            } else {
                "text/plain; charset=utf-8"
            },
            body: body.into_bytes(),
        },
        TokenBehaviour::Body(body) => Answer::Plain {
            status: 200,
            content_type: "application/json",
            body: body.into_bytes(),
        },
        TokenBehaviour::Hang(duration) => Answer::Hang(duration),
        TokenBehaviour::DropConnection => Answer::Drop,
    }
}

/// `prefix` followed by 32 lowercase hex digits from the OS random source.
fn random_token(prefix: &str) -> io::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|error| io::Error::other(error.to_string()))?;
    Ok(format!("{prefix}{}", wire::hex_lower(&bytes)))
}

fn read_request(reader: &mut HttpReader, write_half: &TcpStream) -> Result<RecordedRequest, Fault> {
    let head = reader.read_head(MAX_HEAD_BYTES)?;
    let head = parse_head(&head)?;
    let mut parts = head.start.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Fault::Malformed("request line"));
    };
    if method.is_empty() || path.is_empty() || !version.starts_with("HTTP/1.") {
        return Err(Fault::Malformed("request line"));
    }
    let framing = body_framing(&head.headers)?;
    let continues = header_value(&head.headers, "expect")
        .is_some_and(|value| value.eq_ignore_ascii_case("100-continue"));
    if continues && framing != Framing::Length(0) {
        let mut out = write_half;
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .map_err(Fault::Io)?;
    }
    let body = match framing {
        Framing::Length(length) if length > MAX_BODY_BYTES => return Err(Fault::BodyTooLarge),
        Framing::Length(length) => reader.take(length)?,
        Framing::Chunked => reader.read_chunked(MAX_BODY_BYTES)?,
        // A request without framing has no body (RFC 9112 §6.3).
        Framing::UntilClose => Vec::new(),
    };
    Ok(RecordedRequest {
        method: method.to_owned(),
        path: path.to_owned(),
        headers: head.headers,
        body,
    })
}

fn write_plain(
    mut out: &TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> io::Result<()> {
    // A status HTTP cannot carry as three digits becomes 500.
    let status = if (100..=999).contains(&status) {
        status
    } else {
        500
    };
    // These statuses have no body and no Content-Length (RFC 9110 §8.6).
    let bodiless = status < 200 || status == 204 || status == 304;
    let mut message = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    if !bodiless {
        message.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    message.push_str("Cache-Control: no-store\r\nConnection: close\r\n\r\n");
    let mut bytes = message.into_bytes();
    if !bodiless {
        bytes.extend_from_slice(body);
    }
    out.write_all(&bytes)?;
    out.flush()
}

fn write_chunked(mut out: &TcpStream, content_type: &str, body: &[u8]) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    );
    out.write_all(head.as_bytes())?;
    out.flush()?;
    // Small chunks of varying size, each its own write, so a client meets
    // sizes of one and two hex digits and chunks split across reads.
    let sizes = [1usize, 7, 16, 31];
    let mut rest = body;
    let mut turn = 0;
    while !rest.is_empty() {
        let size = sizes[turn % sizes.len()].min(rest.len());
        let (chunk, tail) = rest.split_at(size);
        let mut bytes = format!("{size:X}\r\n").into_bytes();
        bytes.extend_from_slice(chunk);
        bytes.extend_from_slice(b"\r\n");
        out.write_all(&bytes)?;
        out.flush()?;
        rest = tail;
        turn += 1;
    }
    out.write_all(b"0\r\n\r\n")?;
    out.flush()
}

/// Ends the server's side of a connection gracefully: sends FIN, then reads
/// (and discards) briefly whatever the client still sends, so unread bytes
/// do not turn the close into a reset that could destroy the answer in
/// flight.
fn finish(out: &TcpStream, reader: &mut HttpReader) {
    let _ = out.shutdown(Shutdown::Write);
    reader.drain(Duration::from_millis(200), 64 * 1024);
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

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

// ---------------------------------------------------------------------------
// Bodies

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

// ---------------------------------------------------------------------------
// The browser

/// One HTTP response as [`http_request`] read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Every header in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked if it was sent chunked.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The value of the first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }

    /// The body as text (invalid UTF-8 becomes U+FFFD).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The browser following the platform's redirect to the shim's callback:
/// `GET` of an `http://localhost:PORT/…` or `http://127.0.0.1:PORT/…` URL
/// (`localhost` is resolved to 127.0.0.1) with the headers a browser sends
/// and `Connection: close`. Returns the status and the body as text.
/// `timeout` bounds the whole exchange.
pub fn visit(url: &str, timeout: Duration) -> io::Result<(u16, String)> {
    let headers = [
        (
            "User-Agent",
            "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        ),
        (
            "Accept",
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        ),
        ("Accept-Language", "en-US,en;q=0.5"),
        ("Accept-Encoding", "gzip, deflate, br, zstd"),
        ("Upgrade-Insecure-Requests", "1"),
        ("Sec-Fetch-Dest", "document"),
        ("Sec-Fetch-Mode", "navigate"),
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-User", "?1"),
        ("Priority", "u=0, i"),
    ];
    let response = http_request("GET", url, &headers, &[], timeout)?;
    // The browser advertised compression; a compressed page cannot be shown
    // as text here, and the callback's fixed pages have no reason to be.
    if let Some(coding) = response.header("content-encoding") {
        if !coding.eq_ignore_ascii_case("identity") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the page came with Content-Encoding {coding}"),
            ));
        }
    }
    Ok((response.status, response.text()))
}

/// One HTTP/1.1 request over plain TCP to a loopback `http://` URL (host
/// `localhost`, `127.x.x.x` or `[::1]`; `localhost` is resolved to
/// 127.0.0.1), then the response read to its end. Sends `Host`, the given
/// `headers`, `Content-Length` when there is a body or the method is `POST`
/// or `PUT`, and `Connection: close`. Interim 1xx responses are skipped. The
/// response body is framed by chunked encoding, `Content-Length`, or the
/// end of the connection, and bounded by [`MAX_BODY_BYTES`]. `timeout`
/// bounds the whole exchange, connecting included.
pub fn http_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<HttpResponse> {
    let deadline = Instant::now() + timeout;
    let target = parse_url(url)?;
    let tcp = TcpStream::connect_timeout(&target.addr, remaining(deadline)?)?;
    let _ = tcp.set_nodelay(true);
    tcp.set_write_timeout(Some(remaining(deadline)?))?;

    let mut request = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\n",
        target.path, target.host
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" || method == "PUT" {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("Connection: close\r\n\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    (&tcp).write_all(&bytes)?;
    (&tcp).flush()?;

    let mut reader = HttpReader::new(tcp, deadline);
    loop {
        let head = reader
            .read_head(MAX_HEAD_BYTES)
            .and_then(|head| parse_head(&head))
            .map_err(Fault::into_io)?;
        let status = parse_status_line(&head.start)?;
        if (100..200).contains(&status) {
            continue;
        }
        let bodiless = method.eq_ignore_ascii_case("HEAD") || status == 204 || status == 304;
        let body = if bodiless {
            Vec::new()
        } else {
            match body_framing(&head.headers).map_err(Fault::into_io)? {
                Framing::Length(length) if length > MAX_BODY_BYTES => {
                    return Err(Fault::BodyTooLarge.into_io());
                }
                Framing::Length(length) => reader.take(length),
                Framing::Chunked => reader.read_chunked(MAX_BODY_BYTES),
                Framing::UntilClose => reader.read_to_close(MAX_BODY_BYTES),
            }
            .map_err(Fault::into_io)?
        };
        return Ok(HttpResponse {
            status,
            headers: head.headers,
            body,
        });
    }
}

/// Where an [`http_request`] goes.
struct Target {
    addr: SocketAddr,
    /// The authority as written in the URL, for the `Host` header.
    host: String,
    /// Path and query; the fragment is dropped, as a browser does.
    path: String,
}

fn parse_url(url: &str) -> io::Result<Target> {
    let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{why}: {url}"));
    let scheme_end = url.find("://").ok_or_else(|| invalid("not a URL"))?;
    if !url[..scheme_end].eq_ignore_ascii_case("http") {
        return Err(invalid("only http:// URLs are supported"));
    }
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let mut path = rest[authority_end..].to_owned();
    if let Some(hash) = path.find('#') {
        path.truncate(hash);
    }
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    if authority.contains('@') {
        return Err(invalid("credentials in the URL are not supported"));
    }
    let (host, port) = match authority.rfind(':') {
        Some(colon) if !authority[colon..].contains(']') => {
            let port = authority[colon + 1..]
                .parse::<u16>()
                .map_err(|_| invalid("bad port"))?;
            (&authority[..colon], port)
        }
        _ => (authority, 80),
    };
    let ip: std::net::IpAddr = if host.eq_ignore_ascii_case("localhost") {
        Ipv4Addr::LOCALHOST.into()
    } else if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        inner.parse().map_err(|_| invalid("bad host"))?
    } else {
        host.parse::<Ipv4Addr>()
            .map_err(|_| invalid("bad host"))?
            .into()
    };
    if !ip.is_loopback() {
        return Err(invalid("only loopback hosts are visited"));
    }
    Ok(Target {
        addr: SocketAddr::new(ip, port),
        host: authority.to_owned(),
        path,
    })
}

fn parse_status_line(line: &str) -> io::Result<u16> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad status line: {line}"),
        )
    };
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return Err(bad());
    }
    code.parse::<u16>().map_err(|_| bad())
}

fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"))
    } else {
        Ok(left)
    }
}

// ---------------------------------------------------------------------------
// HTTP/1.1 reading, shared by the server and the browser

/// Why reading or parsing a message failed.
#[derive(Debug)]
enum Fault {
    /// The peer closed before sending anything.
    Closed,
    /// The connection failed or timed out, or closed mid-message.
    Io(io::Error),
    /// The message is not HTTP/1.1 as understood here.
    Malformed(&'static str),
    /// The head exceeded its bound.
    HeadTooLarge,
    /// The body exceeded its bound.
    BodyTooLarge,
}

impl Fault {
    /// The status a server answers this fault with.
    fn status(&self) -> u16 {
        match self {
            Fault::HeadTooLarge => 431,
            Fault::BodyTooLarge => 413,
            _ => 400,
        }
    }

    fn into_io(self) -> io::Error {
        match self {
            Fault::Closed => io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed before any response",
            ),
            Fault::Io(error) => error,
            Fault::Malformed(what) => {
                io::Error::new(io::ErrorKind::InvalidData, format!("malformed {what}"))
            }
            Fault::HeadTooLarge => io::Error::new(
                io::ErrorKind::InvalidData,
                format!("head larger than {MAX_HEAD_BYTES} bytes"),
            ),
            Fault::BodyTooLarge => io::Error::new(
                io::ErrorKind::InvalidData,
                format!("body larger than {MAX_BODY_BYTES} bytes"),
            ),
        }
    }
}

/// A parsed message head.
struct Head {
    /// The request line or status line.
    start: String,
    /// The headers, names lower-cased, values trimmed.
    headers: Vec<(String, String)>,
}

/// How a message's body is delimited.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

fn parse_head(bytes: &[u8]) -> Result<Head, Fault> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.split("\r\n").filter(|line| !line.is_empty());
    let start = lines
        .next()
        .ok_or(Fault::Malformed("start line"))?
        .to_owned();
    let mut headers = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            // Obsolete line folding (RFC 9112 §5.2).
            return Err(Fault::Malformed("header folding"));
        }
        let (name, value) = line.split_once(':').ok_or(Fault::Malformed("header"))?;
        if name.is_empty() || name.contains([' ', '\t']) {
            return Err(Fault::Malformed("header name"));
        }
        headers.push((
            name.to_ascii_lowercase(),
            value.trim_matches([' ', '\t']).to_owned(),
        ));
    }
    Ok(Head { start, headers })
}

fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// The body framing of a message (RFC 9112 §6.3), strictly: both
/// `Transfer-Encoding` and `Content-Length`, a transfer coding other than a
/// final `chunked`, or disagreeing lengths are malformed.
fn body_framing(headers: &[(String, String)]) -> Result<Framing, Fault> {
    let codings: Vec<&str> = headers
        .iter()
        .filter(|(name, _)| name == "transfer-encoding")
        .flat_map(|(_, value)| value.split(','))
        .map(str::trim)
        .filter(|coding| !coding.is_empty())
        .collect();
    let lengths: Vec<&str> = headers
        .iter()
        .filter(|(name, _)| name == "content-length")
        .flat_map(|(_, value)| value.split(','))
        .map(str::trim)
        .collect();
    if !codings.is_empty() {
        if !lengths.is_empty() {
            return Err(Fault::Malformed(
                "both Transfer-Encoding and Content-Length",
            ));
        }
        return match codings.last() {
            Some(last) if last.eq_ignore_ascii_case("chunked") && codings.len() == 1 => {
                Ok(Framing::Chunked)
            }
            _ => Err(Fault::Malformed("transfer coding")),
        };
    }
    let Some(first) = lengths.first() else {
        return Ok(Framing::UntilClose);
    };
    if lengths.iter().any(|length| length != first)
        || first.is_empty()
        || !first.bytes().all(|byte| byte.is_ascii_digit())
    {
        return Err(Fault::Malformed("Content-Length"));
    }
    // A length too large for usize is certainly too large to read.
    first
        .parse::<usize>()
        .map(Framing::Length)
        .map_err(|_| Fault::BodyTooLarge)
}

/// Buffered reading of one HTTP message from a TCP stream, every read
/// bounded by one overall deadline.
struct HttpReader {
    stream: TcpStream,
    buf: Vec<u8>,
    deadline: Instant,
}

impl HttpReader {
    fn new(stream: TcpStream, deadline: Instant) -> Self {
        HttpReader {
            stream,
            buf: Vec::new(),
            deadline,
        }
    }

    /// Reads more bytes into the buffer; `Ok(0)` at the end of the stream.
    fn fill(&mut self) -> Result<usize, Fault> {
        let left = remaining(self.deadline).map_err(Fault::Io)?;
        self.stream
            .set_read_timeout(Some(left))
            .map_err(Fault::Io)?;
        let mut chunk = [0u8; 8192];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(count) => {
                    self.buf.extend_from_slice(&chunk[..count]);
                    return Ok(count);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                // A socket read timeout shows as WouldBlock on some systems.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return Err(Fault::Io(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "timed out",
                    )));
                }
                Err(error) => return Err(Fault::Io(error)),
            }
        }
    }

    fn fill_or_eof(&mut self) -> Result<(), Fault> {
        if self.fill()? == 0 {
            return Err(Fault::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed mid-message",
            )));
        }
        Ok(())
    }

    /// The head up to and including its blank line, at most `limit` bytes.
    fn read_head(&mut self, limit: usize) -> Result<Vec<u8>, Fault> {
        let mut searched: usize = 0;
        loop {
            let from = searched.saturating_sub(3);
            if let Some(at) = find(&self.buf[from..], b"\r\n\r\n") {
                let end = from + at + 4;
                if end > limit {
                    return Err(Fault::HeadTooLarge);
                }
                return Ok(self.buf.drain(..end).collect());
            }
            if self.buf.len() > limit {
                return Err(Fault::HeadTooLarge);
            }
            searched = self.buf.len();
            if self.fill()? == 0 {
                return Err(if self.buf.is_empty() {
                    Fault::Closed
                } else {
                    Fault::Malformed("head cut short")
                });
            }
        }
    }

    /// Exactly `count` bytes.
    fn take(&mut self, count: usize) -> Result<Vec<u8>, Fault> {
        while self.buf.len() < count {
            self.fill_or_eof()?;
        }
        Ok(self.buf.drain(..count).collect())
    }

    /// One line without its line ending (CRLF, or a bare LF), at most
    /// `limit` bytes.
    fn read_line(&mut self, limit: usize) -> Result<Vec<u8>, Fault> {
        let mut searched: usize = 0;
        loop {
            if let Some(at) = self.buf[searched..].iter().position(|&byte| byte == b'\n') {
                let end = searched + at;
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            if self.buf.len() > limit {
                return Err(Fault::Malformed("line too long"));
            }
            searched = self.buf.len();
            self.fill_or_eof()?;
        }
    }

    /// A chunked body (RFC 9112 §7.1), extensions and trailers ignored, at
    /// most `limit` bytes of data.
    fn read_chunked(&mut self, limit: usize) -> Result<Vec<u8>, Fault> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line(1024)?;
            let line = String::from_utf8_lossy(&line);
            let size = line.split(';').next().unwrap_or_default().trim();
            if size.is_empty() || !size.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                return Err(Fault::Malformed("chunk size"));
            }
            let size = usize::from_str_radix(size, 16).map_err(|_| Fault::BodyTooLarge)?;
            if size == 0 {
                break;
            }
            if size > limit.saturating_sub(body.len()) {
                return Err(Fault::BodyTooLarge);
            }
            body.extend(self.take(size)?);
            if !self.read_line(2)?.is_empty() {
                return Err(Fault::Malformed("chunk end"));
            }
        }
        // Trailer fields, up to the blank line.
        let mut trailer_bytes = 0;
        loop {
            let line = self.read_line(MAX_HEAD_BYTES)?;
            if line.is_empty() {
                return Ok(body);
            }
            trailer_bytes += line.len();
            if trailer_bytes > MAX_HEAD_BYTES {
                return Err(Fault::HeadTooLarge);
            }
        }
    }

    /// Everything up to the end of the stream, at most `limit` bytes.
    fn read_to_close(&mut self, limit: usize) -> Result<Vec<u8>, Fault> {
        while self.fill()? > 0 {
            if self.buf.len() > limit {
                return Err(Fault::BodyTooLarge);
            }
        }
        Ok(std::mem::take(&mut self.buf))
    }

    /// Reads and discards for at most `wait` or `limit` bytes, or until the
    /// stream ends.
    fn drain(&mut self, wait: Duration, limit: usize) {
        self.deadline = self.deadline.min(Instant::now() + wait);
        let mut total = 0;
        while total < limit {
            self.buf.clear();
            match self.fill() {
                Ok(0) | Err(_) => return,
                Ok(count) => total += count,
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
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
    fn framing_is_strict() {
        let headers = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect()
        };
        assert_eq!(
            body_framing(&headers(&[("content-length", "12")])).ok(),
            Some(Framing::Length(12))
        );
        assert_eq!(
            body_framing(&headers(&[("transfer-encoding", "chunked")])).ok(),
            Some(Framing::Chunked)
        );
        assert_eq!(body_framing(&[]).ok(), Some(Framing::UntilClose));
        for bad in [
            vec![("content-length", "1"), ("content-length", "2")],
            vec![("content-length", "-1")],
            vec![("content-length", "1"), ("transfer-encoding", "chunked")],
            vec![("transfer-encoding", "gzip")],
        ] {
            assert!(body_framing(&headers(&bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn urls_must_be_loopback_http() {
        let target = parse_url("http://localhost:41899/callback?code=c&state=s#frag");
        let target = target.unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            target.addr,
            SocketAddr::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 41899))
        );
        assert_eq!(target.host, "localhost:41899");
        assert_eq!(target.path, "/callback?code=c&state=s");
        let target = parse_url("http://127.0.0.1:9?x=1").unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(target.path, "/?x=1");
        assert!(parse_url("http://[::1]:80/").is_ok());
        assert!(parse_url("https://localhost:1/").is_err());
        assert!(parse_url("http://example.com:1/").is_err());
        assert!(parse_url("http://10.0.0.1:1/").is_err());
        assert!(parse_url("http://user@localhost:1/").is_err());
        assert!(parse_url("localhost:1/").is_err());
    }
}
