//! The OAuth callback listener (AUTH.md §5 with its hardening note): bound
//! to 127.0.0.1 only, on the first free port of twelve, serving until a
//! request to `/callback` settles the flow or the deadline passes.
//!
//! Every answer is a fixed page that echoes nothing from the request; the
//! authorization code, the state and the query are never printed or
//! logged. Other paths get 404 and the listener keeps waiting, so a
//! browser's favicon probe cannot end the flow. This module never binds a
//! non-loopback address.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use super::form::parse_query;
use super::pkce::Pkce;

/// Ports tried: the configured first port and the eleven after it.
pub const PORT_COUNT: u16 = 12;
/// How long the flow waits for the browser (AUTH.md §5).
pub const CALLBACK_TIMEOUT: Duration = Duration::from_secs(300);
/// Per-connection read timeout.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest request head read.
const MAX_HEAD: usize = 8 * 1024;

const PAGE_OK: &str = "<!doctype html><html><head><meta charset=\"utf-8\"><title>autogpt-shim</title></head><body><p>Authorization complete. You can close this tab and return to the terminal.</p></body></html>";
const PAGE_FAILED: &str = "<!doctype html><html><head><meta charset=\"utf-8\"><title>autogpt-shim</title></head><body><p>Authorization failed. Return to the terminal for details.</p></body></html>";
const PAGE_NOT_FOUND: &str = "<!doctype html><html><head><meta charset=\"utf-8\"><title>autogpt-shim</title></head><body><p>Not found.</p></body></html>";

/// How the flow ended at the callback.
#[derive(Debug)]
pub enum Callback {
    /// The authorization code.
    Code(Zeroizing<String>),
    /// The platform reported this OAuth error code (e.g. `access_denied`).
    Denied(String),
    /// The state was missing or wrong.
    StateMismatch,
    /// `/callback` without a code.
    NoCode,
    /// No settling request before the deadline.
    TimedOut,
}

/// The bound listener.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
    port: u16,
}

/// No port of the range could be bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoFreePort {
    /// The first port tried.
    pub first: u16,
    /// The last port tried.
    pub last: u16,
}

impl std::fmt::Display for NoFreePort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "could not bind the OAuth callback on ports {}-{}",
            self.first, self.last
        )
    }
}

impl Listener {
    /// Binds 127.0.0.1 on the first free port of `first ..= first + 11`.
    pub fn bind(first: u16) -> Result<Listener, NoFreePort> {
        let last = first.saturating_add(PORT_COUNT - 1);
        for port in first..=last {
            if let Ok(listener) = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)) {
                return Ok(Listener { listener, port });
            }
        }
        Err(NoFreePort { first, last })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The redirect URI registered for this port (host `localhost`).
    pub fn redirect_uri(&self) -> String {
        format!("http://localhost:{}/callback", self.port)
    }

    /// Serves requests until `/callback` settles the flow or `timeout`
    /// passes; the listener is closed when this returns.
    pub fn wait(self, pkce: &Pkce, timeout: Duration) -> Callback {
        let deadline = Instant::now() + timeout;
        if self.listener.set_nonblocking(true).is_err() {
            return Callback::TimedOut;
        }
        loop {
            if Instant::now() >= deadline {
                return Callback::TimedOut;
            }
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if let Some(settled) = serve(stream, pkce, deadline) {
                        return settled;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// Answers one connection; `Some` when it settled the flow.
fn serve(mut stream: TcpStream, pkce: &Pkce, deadline: Instant) -> Option<Callback> {
    let _ = stream.set_nonblocking(false);
    let timeout = deadline
        .saturating_duration_since(Instant::now())
        .min(READ_TIMEOUT)
        .max(Duration::from_millis(1));
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(READ_TIMEOUT));
    let head = read_head(&mut stream)?;
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let (method, target) = match request.parse(&head) {
        Ok(httparse::Status::Complete(_)) => (
            request.method.unwrap_or("").to_owned(),
            Zeroizing::new(request.path.unwrap_or("").to_owned()),
        ),
        _ => {
            respond(&mut stream, 400, "Bad Request", PAGE_FAILED);
            return None;
        }
    };
    if method != "GET" {
        respond(&mut stream, 501, "Not Implemented", PAGE_FAILED);
        return None;
    }
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    if path != "/callback" {
        respond(&mut stream, 404, "Not Found", PAGE_NOT_FOUND);
        return None;
    }
    let settled = judge(pkce, query);
    match &settled {
        Callback::Code(_) => respond(&mut stream, 200, "OK", PAGE_OK),
        _ => respond(&mut stream, 400, "Bad Request", PAGE_FAILED),
    }
    Some(settled)
}

/// The checks of the §5 table, in order.
fn judge(pkce: &Pkce, query: &str) -> Callback {
    let pairs = parse_query(query);
    // First value wins; empty values count as absent.
    let first = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    match first("state") {
        Some(state) if pkce.state_matches(&state) => {}
        _ => return Callback::StateMismatch,
    }
    if let Some(error) = first("error") {
        return Callback::Denied(crate::text::one_line(&error));
    }
    match first("code") {
        Some(code) => Callback::Code(code),
        None => Callback::NoCode,
    }
}

fn read_head(stream: &mut TcpStream) -> Option<Zeroizing<Vec<u8>>> {
    let mut head = Zeroizing::new(Vec::with_capacity(1024));
    let mut buf = [0u8; 1024];
    loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            return Some(head);
        }
        if head.len() >= MAX_HEAD {
            return None;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => {
                let room = MAX_HEAD - head.len();
                head.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

fn respond(stream: &mut TcpStream, status: u16, reason: &str, page: &str) {
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{page}",
        page.len()
    );
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
}
