//! The OAuth callback listener (AUTH.md §5 with its hardening note): bound
//! to 127.0.0.1 only, on the first free port of twelve, serving until a
//! request to `/callback` settles the flow or the deadline passes.
//!
//! The request that brings the code is answered only once the caller knows
//! whether the code could be exchanged for tokens ([`Page`]), so the
//! browser never says "complete" for an authorization that failed.
//!
//! Every answer is a fixed page that echoes nothing from the request; the
//! authorization code, the state and the query are never printed or
//! logged. Other paths get 404 and the listener keeps waiting, so a
//! browser's favicon probe cannot end the flow. Connections are read side by
//! side without blocking, each with a bound on its whole request head, so an
//! idle or trickling connection can neither delay the real callback nor keep
//! the flow past its deadline. This module never binds a non-loopback
//! address.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use super::form::parse_query;
use super::pkce::Pkce;

/// Ports tried: the configured first port and the eleven after it.
pub const PORT_COUNT: u16 = 12;
/// How long the flow waits for the browser (AUTH.md §5).
pub const CALLBACK_TIMEOUT: Duration = Duration::from_secs(300);
/// How long one connection may take to send its whole request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long writing one answer may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections whose heads are awaited at once.
const MAX_PENDING: usize = 16;
/// The pause between two looks when nothing arrived.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Longest request head read.
const MAX_HEAD: usize = 8 * 1024;

const PAGE_OK: &str = "<!doctype html><html><head><meta charset=\"utf-8\"><title>autogpt-shim</title></head><body><p>Authorization complete. You can close this tab and return to the terminal.</p></body></html>";
const PAGE_FAILED: &str = "<!doctype html><html><head><meta charset=\"utf-8\"><title>autogpt-shim</title></head><body><p>Authorization failed. Return to the terminal for details.</p></body></html>";
/// Status of the page for a code that could not be turned into stored
/// tokens: the browser's request was fine, this machine failed.
const STATUS_EXCHANGE_FAILED: (u16, &str) = (500, "Internal Server Error");
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

/// How the flow ended, and for a code, the browser's request still waiting
/// for its page.
#[derive(Debug)]
pub struct Settled {
    /// How the flow ended.
    pub callback: Callback,
    /// For a code that came through the listener: its request, unanswered.
    pub page: Option<Page>,
}

/// The browser's request that brought the code, held open until the code
/// exchange is over. Dropping it unanswered answers "failed".
#[derive(Debug)]
pub struct Page {
    stream: Option<TcpStream>,
}

impl Page {
    /// Tells the browser the authorization is complete.
    pub fn complete(mut self) {
        if let Some(mut stream) = self.stream.take() {
            respond(&mut stream, 200, "OK", PAGE_OK);
        }
    }

    /// Tells the browser the authorization failed and to look at the
    /// terminal.
    pub fn failed(mut self) {
        self.fail();
    }

    fn fail(&mut self) {
        if let Some(mut stream) = self.stream.take() {
            let (status, reason) = STATUS_EXCHANGE_FAILED;
            respond(&mut stream, status, reason, PAGE_FAILED);
        }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.fail();
    }
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
    /// passes, answering the request that brought a code at once with the
    /// "complete" page; the listener is closed when this returns.
    pub fn wait(self, pkce: &Pkce, timeout: Duration) -> Callback {
        let settled = self.serve(pkce, timeout, &mut |_| None);
        if let Some(page) = settled.page {
            page.complete();
        }
        settled.callback
    }

    /// Serves requests until `/callback` settles the flow, `on_turn`
    /// settles it (a redirect the user pasted, say), or `timeout` passes;
    /// the listener is closed when this returns. The request that brought
    /// a code is returned unanswered in [`Settled::page`].
    ///
    /// `on_turn` is called with the time left on every turn of the loop, at
    /// most [`POLL_INTERVAL`] apart while nothing arrives.
    ///
    /// Connections are served side by side without blocking: each has
    /// `HEAD_TIMEOUT` for its whole request head, at most
    /// [`MAX_PENDING`] wait at once (a new one displaces the oldest), and
    /// the deadline is checked on every turn, so neither a browser's idle
    /// preconnection nor a local connection trickling bytes can hold the
    /// flow open or delay the real callback.
    pub fn serve(
        self,
        pkce: &Pkce,
        timeout: Duration,
        on_turn: &mut dyn FnMut(Duration) -> Option<Callback>,
    ) -> Settled {
        let deadline = Instant::now() + timeout;
        let unsettled = |callback| Settled {
            callback,
            page: None,
        };
        if self.listener.set_nonblocking(true).is_err() {
            return unsettled(Callback::TimedOut);
        }
        let mut pending: VecDeque<Pending> = VecDeque::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return unsettled(Callback::TimedOut);
            }
            if let Some(callback) = on_turn(left) {
                return unsettled(callback);
            }
            let mut progressed = false;
            // Bounded, so a flood of connections cannot starve the rest.
            for _ in 0..MAX_PENDING {
                let Ok((stream, _)) = self.listener.accept() else {
                    break;
                };
                progressed = true;
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                if pending.len() >= MAX_PENDING {
                    pending.pop_front();
                }
                pending.push_back(Pending::new(stream));
            }
            let now = Instant::now();
            let mut index = 0;
            while let Some(connection) = pending.get_mut(index) {
                match connection.poll(now) {
                    Poll::Waiting => index += 1,
                    Poll::Progress => {
                        progressed = true;
                        index += 1;
                    }
                    Poll::Dropped => {
                        pending.remove(index);
                    }
                    Poll::Head => {
                        progressed = true;
                        if let Some(done) = pending.remove(index) {
                            if let Some(settled) = answer(done.stream, &done.head, pkce) {
                                return settled;
                            }
                        }
                    }
                }
            }
            if !progressed {
                std::thread::sleep(POLL_INTERVAL);
            }
        }
    }
}

/// One accepted connection whose request head is still arriving.
struct Pending {
    stream: TcpStream,
    head: Zeroizing<Vec<u8>>,
    /// When its whole head must have arrived.
    head_deadline: Instant,
}

/// What one look at a pending connection found.
enum Poll {
    /// Nothing new.
    Waiting,
    /// More bytes, the head is not complete yet.
    Progress,
    /// The head is complete.
    Head,
    /// Closed, failed, too large or too slow: forget it.
    Dropped,
}

impl Pending {
    fn new(stream: TcpStream) -> Pending {
        Pending {
            stream,
            head: Zeroizing::new(Vec::with_capacity(1024)),
            head_deadline: Instant::now() + HEAD_TIMEOUT,
        }
    }

    /// Reads what has arrived, without blocking.
    fn poll(&mut self, now: Instant) -> Poll {
        let mut buf = Zeroizing::new([0u8; 1024]);
        let mut progressed = false;
        loop {
            if self.head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Poll::Head;
            }
            if self.head.len() >= MAX_HEAD {
                return Poll::Dropped;
            }
            match self.stream.read(&mut buf[..]) {
                Ok(0) => return Poll::Dropped,
                Ok(n) => {
                    let room = MAX_HEAD - self.head.len();
                    self.head.extend_from_slice(&buf[..n.min(room)]);
                    progressed = true;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => return Poll::Dropped,
            }
        }
        if now >= self.head_deadline {
            Poll::Dropped
        } else if progressed {
            Poll::Progress
        } else {
            Poll::Waiting
        }
    }
}

/// Answers one complete request head; `Some` when it settled the flow. The
/// request that brings a code is not answered here: it goes back in
/// [`Settled::page`].
fn answer(mut stream: TcpStream, head: &[u8], pkce: &Pkce) -> Option<Settled> {
    // The answer is a few hundred bytes to a loopback peer: a short
    // blocking write, bounded so that a peer that reads nothing cannot
    // hold the flow.
    if stream.set_nonblocking(false).is_err() {
        return None;
    }
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let (method, target) = match request.parse(head) {
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
    let callback = judge(pkce, query);
    if let Callback::Code(_) = callback {
        let page = Page {
            stream: Some(stream),
        };
        return Some(Settled {
            callback,
            page: Some(page),
        });
    }
    respond(&mut stream, 400, "Bad Request", PAGE_FAILED);
    Some(Settled {
        callback,
        page: None,
    })
}

/// The checks of the §5 table, in order, on the query of a request to
/// `/callback` (or of the address the user pasted from the browser).
pub fn judge(pkce: &Pkce, query: &str) -> Callback {
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

fn respond(stream: &mut TcpStream, status: u16, reason: &str, page: &str) {
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{page}",
        page.len()
    );
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
}
