//! One accepted shim connection, as a test drives it.
//!
//! Owns the WebSocket after the upgrade: a per-connection I/O thread is the
//! only code that touches the socket. It alternates between the commands the
//! test queued (send, close, drop) and a read with a short socket timeout, so
//! a send never waits behind a read for longer than [`POLL_INTERVAL`].
//! Everything read is recorded (raw frames, `STATUS` frames) and queued for
//! [`Conn::recv`] and [`Conn::wait_response`], which take frames out of the
//! queue by position, so responses can arrive in any order.
//!
//! It must never answer the shim by itself: beyond WebSocket pongs (which
//! tungstenite sends as the RFC requires) every frame the emulator sends is
//! one the test asked for, so a test sees exactly what the shim did. The
//! only frames it sends unasked are the platform's close frames: the I/O
//! thread shows every frame both ways to the connection's judge
//! ([`crate::strict`]), and closes as the platform does when the HELLO is
//! invalid (4400, 4426) or late (4408), or when the shim breaks a rule of
//! the relay (1008). A broken rule is a [`Violation`] that fails the test
//! when the `Conn` is dropped, unless the test took it or allowed it.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use serde_json::{Value, json};
use tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tungstenite::protocol::frame::{CloseFrame, Frame};
use tungstenite::{Message, WebSocket};

use crate::hello::{ConnKind, HelloAck, HelloError, check_hello};
use crate::strict::{
    Judge, Judgement, Sent, UnansweredReads, VIOLATION_CLOSE_CODE, Violation, close_reason,
};
use crate::transport::{PaceState, ReadPace, Transport};
use crate::wire;

/// The close code the platform ends a connection with when the access
/// token has expired; the shim is to reconnect and refresh its token.
pub const CLOSE_TOKEN_EXPIRED: u16 = 4401;

/// The reason sent with [`CLOSE_TOKEN_EXPIRED`].
pub const TOKEN_EXPIRED_REASON: &str = "Access token expired";

/// Socket read timeout of the I/O thread, and so the longest a queued send
/// waits: short enough that tests do not notice, long enough that an idle
/// connection costs next to nothing.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// How often the automatic handshake looks whether the emulator stopped.
const STOP_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// What kind of WebSocket message a [`RawFrame`] was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawKind {
    /// A text message.
    Text,
    /// A binary message.
    Binary,
    /// A WebSocket ping (answered by the library, never by a test).
    Ping,
    /// A WebSocket pong.
    Pong,
    /// A close frame; `data` is the two-byte code followed by the reason.
    Close,
}

/// One message as it arrived from the shim, before any interpretation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// The message kind.
    pub kind: RawKind,
    /// The message payload as received.
    pub data: Vec<u8>,
    /// When the I/O thread read it.
    pub at: Instant,
}

impl RawFrame {
    /// The payload as UTF-8, if it is.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.data).ok()
    }
}

/// A message to send without going through JSON, for malformed-frame tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawMessage {
    /// A text message with this content (not necessarily JSON).
    Text(String),
    /// A binary message (the shim decodes it as UTF-8 text, §1.2).
    Binary(Vec<u8>),
    /// A text message whose payload is these bytes, even if they are not
    /// UTF-8 — something a conforming sender never produces.
    TextBytes(Vec<u8>),
}

/// How a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The shim sent a close frame first. `code` is `None` for a close frame
    /// without a status code. An invalid code (e.g. 1005 on the wire) is
    /// reported by the WebSocket library as 1002.
    ClosedByShim {
        /// The code in the shim's close frame.
        code: Option<u16>,
        /// The reason in the shim's close frame.
        reason: String,
    },
    /// The emulator sent a close frame first ([`Conn::close`]).
    ClosedByEmulator {
        /// The code the emulator sent.
        code: u16,
        /// The reason the emulator sent.
        reason: String,
        /// The code of the shim's answering close frame; `None` when it
        /// answered without a code, or ended the connection without
        /// answering (then `answered` is false).
        reply_code: Option<u16>,
        /// Whether the shim answered with a close frame at all.
        answered: bool,
    },
    /// The connection ended without any close frame: the shim (or the
    /// network) dropped it.
    Dropped {
        /// What the WebSocket library reported.
        error: String,
    },
    /// The emulator dropped the TCP connection ([`Conn::drop_tcp`]).
    DroppedByEmulator,
}

impl Ending {
    /// The close code the shim sent, first or in reply.
    pub fn shim_close_code(&self) -> Option<u16> {
        match self {
            Ending::ClosedByShim { code, .. } => *code,
            Ending::ClosedByEmulator { reply_code, .. } => *reply_code,
            Ending::Dropped { .. } | Ending::DroppedByEmulator => None,
        }
    }
}

/// What the upgrade request said, recorded before the WebSocket existed.
#[derive(Debug, Clone)]
pub(crate) struct RequestInfo {
    pub(crate) serial: u64,
    pub(crate) peer: SocketAddr,
    pub(crate) path: String,
    pub(crate) authorization: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) kind: ConnKind,
    /// How long after the upgrade the HELLO may take.
    pub(crate) hello_deadline: Duration,
    /// Where the connection leaves the reads it got no answer to.
    pub(crate) unanswered: Arc<UnansweredReads>,
}

enum Command {
    Send(Message, Option<Sent>, Sender<io::Result<()>>),
    /// Several messages written out together, in one flush.
    SendAll(Vec<(Message, Option<Sent>)>, Sender<io::Result<()>>),
    Close(u16, String, Sender<io::Result<()>>),
    DropTcp(Sender<io::Result<()>>),
}

struct Inbound {
    json: Option<Value>,
    text: String,
}

#[derive(Default)]
struct Inbox {
    queue: VecDeque<Inbound>,
    raw: Vec<RawFrame>,
    statuses: Vec<Value>,
    violations: Vec<Violation>,
    ending: Option<Ending>,
}

#[derive(Default)]
struct Shared {
    inbox: Mutex<Inbox>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inbox> {
        // A test thread that panicked while holding the lock leaves the inbox
        // consistent (every update is a single push or assignment).
        self.inbox.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One shim connection after a successful upgrade.
///
/// Every method takes `&self`, and `Conn` is `Send + Sync`: one thread may
/// wait for a response while another sends. Dropping the `Conn` drops the TCP
/// connection without a close frame.
///
/// # Panics
///
/// Dropping a `Conn` panics (unless the thread is already panicking, when
/// it prints instead) if the shim broke a rule of the platform's relay on
/// it ([`crate::strict`]) and the test neither took the violation
/// ([`Conn::wait_violation`], [`Conn::take_violations`]) nor allowed it
/// ([`Conn::allow_violations`]): every test that drives a shim through the
/// emulator runs under those rules.
pub struct Conn {
    info: RequestInfo,
    commands: Sender<Command>,
    shared: Arc<Shared>,
    pace: Arc<Mutex<PaceState>>,
    hello: Mutex<Option<Value>>,
    auto_handshake_error: Mutex<Option<HelloError>>,
    violations_allowed: AtomicBool,
    late_answers_allowed: AtomicBool,
}

impl fmt::Debug for Conn {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Conn")
            .field("serial", &self.info.serial)
            .field("path", &self.info.path)
            .field("kind", &self.info.kind)
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// Starts the I/O thread for an upgraded WebSocket.
    pub(crate) fn start(ws: WebSocket<Transport>, info: RequestInfo) -> io::Result<Conn> {
        ws.get_ref().tcp().set_read_timeout(Some(POLL_INTERVAL))?;
        let (commands, command_rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared::default());
        let io_shared = Arc::clone(&shared);
        let pace = ws.get_ref().pace_handle();
        let judge = Judge::new(info.kind.clone(), Instant::now() + info.hello_deadline);
        let path = info.path.clone();
        let unanswered = Arc::clone(&info.unanswered);
        thread::Builder::new()
            .name(format!("emulator-conn-{}", info.serial))
            .spawn(move || {
                let mut judge = judge;
                let ending = run_io(ws, &command_rx, &io_shared, &mut judge);
                // Left for the next connection before the ending is told, so
                // a test that saw this one end finds them.
                unanswered.add(judge.unanswered_reads(&path));
                let mut inbox = io_shared.lock();
                inbox.ending = Some(ending);
                drop(inbox);
                io_shared.changed.notify_all();
            })?;
        Ok(Conn {
            info,
            commands,
            shared,
            pace,
            hello: Mutex::new(None),
            auto_handshake_error: Mutex::new(None),
            violations_allowed: AtomicBool::new(false),
            late_answers_allowed: AtomicBool::new(false),
        })
    }

    /// 1 for the first connection the emulator upgraded, then 2, 3, …
    pub fn serial(&self) -> u64 {
        self.info.serial
    }

    /// The upgrade request's path (with any query string).
    pub fn path(&self) -> &str {
        &self.info.path
    }

    /// Control or data connection, from the path.
    pub fn kind(&self) -> &ConnKind {
        &self.info.kind
    }

    /// The upgrade request's `Authorization` header, if it had one.
    pub fn authorization(&self) -> Option<&str> {
        self.info.authorization.as_deref()
    }

    /// Every header of the upgrade request, names lower-cased, in order.
    pub fn headers(&self) -> &[(String, String)] {
        &self.info.headers
    }

    /// The shim's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.info.peer
    }

    /// The next JSON frame from the shim, waiting at most `timeout`. Frames
    /// that are not JSON are skipped (they stay in [`Conn::raw_frames`]).
    /// `None` on timeout, or once the connection has ended and every frame
    /// was taken.
    pub fn recv(&self, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        let mut inbox = self.shared.lock();
        loop {
            while let Some(inbound) = inbox.queue.pop_front() {
                if let Some(json) = inbound.json {
                    return Some(json);
                }
            }
            inbox = self.wait(inbox, deadline)?;
        }
    }

    /// The next frame of type `message_type`, leaving other frames queued.
    pub fn recv_type(&self, message_type: &str, timeout: Duration) -> Option<Value> {
        self.take_where(timeout, |frame| {
            wire::frame_type(frame) == Some(message_type)
        })
    }

    /// The terminal response to request `id`: the first frame with that
    /// `id` that is not a `LOCAL_LLM_COMPLETION_CHUNK`. Other frames
    /// (`STATUS`, responses to other requests, chunks) stay queued for later
    /// calls, so responses may arrive in any order.
    pub fn wait_response(&self, id: &str, timeout: Duration) -> Option<Value> {
        self.take_where(timeout, |frame| {
            wire::frame_id(frame) == Some(id)
                && wire::frame_type(frame) != Some("LOCAL_LLM_COMPLETION_CHUNK")
        })
    }

    /// From now on takes at most `bytes` of what the shim sends per
    /// `interval`, like a platform that reads its socket slowly; the rest
    /// waits in the socket. Sending is not slowed.
    pub fn read_slowly(&self, bytes: usize, interval: Duration) {
        self.pace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set(Some(ReadPace { bytes, interval }));
    }

    /// Reads at full speed again after [`Conn::read_slowly`].
    pub fn read_normally(&self) {
        self.pace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set(None);
    }

    /// Sends one JSON frame as a text message. A frame with a string `type`
    /// and `id` is an outstanding request from then on (see
    /// [`crate::strict`]).
    pub fn send(&self, frame: &Value) -> io::Result<()> {
        let text = frame.to_string();
        let sent = Sent::of_frame(frame, &text);
        self.send_message(Message::text(text), sent)
    }

    /// Sends a message as given, JSON or not. Bytes that are a JSON object
    /// with a string `type` and `id` make an outstanding request, as with
    /// [`Conn::send`].
    pub fn send_raw(&self, message: RawMessage) -> io::Result<()> {
        let (message, sent) = match message {
            RawMessage::Text(text) => {
                let sent = Sent::of_raw(text.as_bytes());
                (Message::text(text), sent)
            }
            RawMessage::Binary(bytes) => {
                let sent = Sent::of_raw(&bytes);
                (Message::binary(bytes), sent)
            }
            RawMessage::TextBytes(bytes) => {
                let sent = Sent::of_raw(&bytes);
                let frame = Frame::message(bytes, OpCode::Data(Data::Text), true);
                (Message::Frame(frame), sent)
            }
        };
        self.send_message(message, sent)
    }

    /// Sends a request `{type, id, ts, version, payload}` with a fresh UUID v4
    /// `id` and returns the id.
    pub fn request(&self, message_type: &str, payload: Value) -> io::Result<String> {
        let id = wire::uuid_v4();
        self.send(&wire::envelope(message_type, &id, payload))?;
        Ok(id)
    }

    /// Requests like [`Conn::request`], written out together so that they
    /// reach the shim at once, however busy the machine; returns their ids
    /// in order.
    pub fn request_all(&self, requests: &[(&str, Value)]) -> io::Result<Vec<String>> {
        let mut ids = Vec::with_capacity(requests.len());
        let mut messages = Vec::with_capacity(requests.len());
        for (message_type, payload) in requests {
            let id = wire::uuid_v4();
            let frame = wire::envelope(message_type, &id, payload.clone());
            let text = frame.to_string();
            let sent = Sent::of_frame(&frame, &text);
            messages.push((Message::text(text), sent));
            ids.push(id);
        }
        let (reply, result) = crossbeam_channel::bounded(1);
        self.command(Command::SendAll(messages, reply), &result)?;
        Ok(ids)
    }

    /// [`Conn::request`] then [`Conn::wait_response`]; a missing response is
    /// an `io::ErrorKind::TimedOut` error.
    pub fn call(&self, message_type: &str, payload: Value, timeout: Duration) -> io::Result<Value> {
        let id = self.request(message_type, payload)?;
        self.wait_response(&id, timeout).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no response to {message_type} {id} within {timeout:?}"),
            )
        })
    }

    /// Sends an application-level `PING` (`PROTOCOL.md` §7.10) and returns
    /// its id; the `PONG` comes back through [`Conn::wait_response`].
    pub fn ping(&self) -> io::Result<String> {
        self.request("PING", json!({}))
    }

    /// Sends a WebSocket-level ping with this payload (at most 125 bytes).
    pub fn ws_ping(&self, payload: &[u8]) -> io::Result<()> {
        self.send_message(Message::Ping(payload.to_vec().into()), None)
    }

    /// Starts the closing handshake with this code and reason. The shim's
    /// answer is reported by [`Conn::wait_closed`].
    pub fn close(&self, code: u16, reason: &str) -> io::Result<()> {
        let (reply, result) = crossbeam_channel::bounded(1);
        self.command(Command::Close(code, reason.to_owned(), reply), &result)
    }

    /// Closes the connection as the platform does when the access token has
    /// expired: code 4401 with [`TOKEN_EXPIRED_REASON`], no
    /// `SESSION_REVOKED`.
    pub fn expire_token(&self) -> io::Result<()> {
        self.close(CLOSE_TOKEN_EXPIRED, TOKEN_EXPIRED_REASON)
    }

    /// Resends, with their ids, the reads (`FILE_READ`, `FILE_STAT`,
    /// `FILE_LIST`, `SCREENSHOT_REQUEST`) that earlier connections to this
    /// path left unanswered when they ended, as the platform does after a
    /// reconnect; returns their ids, oldest first. Each is resent once.
    pub fn resend_unanswered_reads(&self) -> io::Result<Vec<String>> {
        let mut ids = Vec::new();
        for read in self.info.unanswered.take_for(&self.info.path) {
            self.send_raw(RawMessage::Text(read.text))?;
            ids.push(read.id);
        }
        Ok(ids)
    }

    /// Every rule of the platform's relay the shim broke on this connection
    /// that no test took yet ([`crate::strict`]).
    pub fn violations(&self) -> Vec<Violation> {
        self.shared.lock().violations.clone()
    }

    /// Takes every violation recorded so far: the test has seen them, and
    /// dropping the `Conn` no longer fails for them.
    pub fn take_violations(&self) -> Vec<Violation> {
        std::mem::take(&mut self.shared.lock().violations)
    }

    /// Waits at most `timeout` for a violation and takes it, for a test that
    /// makes the shim break a rule on purpose. `None` when none came (or the
    /// connection ended without one).
    pub fn wait_violation(&self, timeout: Duration) -> Option<Violation> {
        let deadline = Instant::now() + timeout;
        let mut inbox = self.shared.lock();
        loop {
            if !inbox.violations.is_empty() {
                return Some(inbox.violations.remove(0));
            }
            inbox = self.wait(inbox, deadline)?;
        }
    }

    /// Declares that the shim is expected to break the relay's rules on
    /// this connection: dropping the `Conn` will not fail for them.
    pub fn allow_violations(&self) {
        self.violations_allowed.store(true, Ordering::SeqCst);
    }

    /// Declares that an answer on this connection may come later than the
    /// platform waits ([`Violation::Late`]), e.g. because the test reads
    /// slowly on purpose: dropping the `Conn` will not fail for that, but
    /// still fails for any other violation.
    pub fn allow_late_answers(&self) {
        self.late_answers_allowed.store(true, Ordering::SeqCst);
    }

    /// Takes the violations the test neither took nor allowed and describes
    /// them, for the check that fails the test; `None` when there are none.
    pub(crate) fn judge(&self) -> Option<String> {
        let mut violations = self.take_violations();
        if self.violations_allowed.load(Ordering::SeqCst) {
            return None;
        }
        if self.late_answers_allowed.load(Ordering::SeqCst) {
            violations.retain(|violation| !matches!(violation, Violation::Late { .. }));
        }
        if violations.is_empty() {
            return None;
        }
        let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
        Some(format!(
            "connection {} ({}): the shim broke the platform's rules: {}",
            self.info.serial,
            self.info.path,
            list.join("; ")
        ))
    }

    /// Ends the TCP connection at once, with no close frame and no TLS
    /// close_notify.
    pub fn drop_tcp(&self) -> io::Result<()> {
        let (reply, result) = crossbeam_channel::bounded(1);
        self.command(Command::DropTcp(reply), &result)
    }

    /// Waits until the connection has ended and says how.
    pub fn wait_closed(&self, timeout: Duration) -> Option<Ending> {
        let deadline = Instant::now() + timeout;
        let mut inbox = self.shared.lock();
        loop {
            if let Some(ending) = &inbox.ending {
                return Some(ending.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            inbox = self
                .shared
                .changed
                .wait_timeout(inbox, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// How the connection ended, if it has.
    pub fn ending(&self) -> Option<Ending> {
        self.shared.lock().ending.clone()
    }

    /// Every `STATUS` frame received so far, in order (also those that
    /// [`Conn::recv`] has returned).
    pub fn statuses(&self) -> Vec<Value> {
        self.shared.lock().statuses.clone()
    }

    /// Every message received so far, as received.
    pub fn raw_frames(&self) -> Vec<RawFrame> {
        self.shared.lock().raw.clone()
    }

    /// When the first text message that names `id` was read: the arrival
    /// of the answer to the request with that id, which a test times.
    pub fn arrival_of(&self, id: &str) -> Option<Instant> {
        self.shared
            .lock()
            .raw
            .iter()
            .filter(|f| f.kind == RawKind::Text)
            .find(|f| f.text().is_some_and(|t| t.contains(id)))
            .map(|f| f.at)
    }

    /// The HELLO accepted on this connection by [`Conn::expect_hello`] or the
    /// automatic handshake.
    pub fn hello(&self) -> Option<Value> {
        self.hello
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Why the automatic handshake failed, if the emulator runs one and it
    /// did.
    pub fn auto_handshake_error(&self) -> Option<HelloError> {
        self.auto_handshake_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Takes the next frame, which must be a valid HELLO for this
    /// connection's kind (`PROTOCOL.md` §4.2), and remembers it for
    /// [`Conn::send_hello_ack`].
    pub fn try_expect_hello(&self, timeout: Duration) -> Result<Value, HelloError> {
        let deadline = Instant::now() + timeout;
        let mut inbox = self.shared.lock();
        let inbound = loop {
            if let Some(inbound) = inbox.queue.pop_front() {
                break inbound;
            }
            let ended = inbox.ending.is_some();
            inbox = match self.wait(inbox, deadline) {
                Some(inbox) => inbox,
                None if ended => return Err(HelloError::Disconnected),
                None => return Err(HelloError::Timeout),
            };
        };
        drop(inbox);
        let frame = check_hello(&inbound.text, inbound.json.as_ref(), &self.info.kind)?;
        *self.hello.lock().unwrap_or_else(PoisonError::into_inner) = Some(frame.clone());
        Ok(frame)
    }

    /// [`Conn::try_expect_hello`] for tests.
    ///
    /// # Panics
    ///
    /// When no valid HELLO arrives; the message lists every problem found.
    pub fn expect_hello(&self, timeout: Duration) -> Value {
        match self.try_expect_hello(timeout) {
            Ok(hello) => hello,
            Err(error) => panic!("connection {}: {error}", self.info.serial),
        }
    }

    /// Sends `ack` as the answer to the HELLO this connection accepted (or
    /// with a fresh id if none was) and returns the frame sent.
    pub fn send_hello_ack(&self, ack: &HelloAck) -> io::Result<Value> {
        let hello = self.hello();
        let frame = ack.to_frame(hello.as_ref(), &self.info.kind, self.info.serial);
        self.send(&frame)?;
        Ok(frame)
    }

    /// The HELLO→HELLO_ACK exchange the emulator runs for every connection
    /// when it was started with an automatic ack; it gives up early once
    /// `stop` is set (the emulator is being dropped).
    pub(crate) fn auto_handshake(&self, ack: &HelloAck, timeout: Duration, stop: &AtomicBool) {
        let deadline = Instant::now() + timeout;
        let hello = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.try_expect_hello(left.min(STOP_CHECK_INTERVAL)) {
                Err(HelloError::Timeout)
                    if Instant::now() < deadline && !stop.load(Ordering::SeqCst) => {}
                outcome => break outcome,
            }
        };
        let outcome = hello.and_then(|_| {
            self.send_hello_ack(ack)
                .map_err(|_| HelloError::Disconnected)
        });
        if let Err(error) = outcome {
            *self
                .auto_handshake_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(error);
        }
    }

    fn send_message(&self, message: Message, sent: Option<Sent>) -> io::Result<()> {
        let (reply, result) = crossbeam_channel::bounded(1);
        self.command(Command::Send(message, sent, reply), &result)
    }

    fn command(&self, command: Command, result: &Receiver<io::Result<()>>) -> io::Result<()> {
        let gone = || io::Error::new(io::ErrorKind::NotConnected, "the connection has ended");
        self.commands.send(command).map_err(|_| gone())?;
        result.recv().map_err(|_| gone())?
    }

    /// Removes and returns the first queued JSON frame matching `wanted`,
    /// waiting for more frames until `timeout`.
    fn take_where(
        &self,
        timeout: Duration,
        mut wanted: impl FnMut(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        let mut inbox = self.shared.lock();
        loop {
            let position = inbox
                .queue
                .iter()
                .position(|inbound| inbound.json.as_ref().is_some_and(&mut wanted));
            if let Some(position) = position {
                return inbox
                    .queue
                    .remove(position)
                    .and_then(|inbound| inbound.json);
            }
            inbox = self.wait(inbox, deadline)?;
        }
    }

    /// Waits for the inbox to change; `None` when the deadline passed or the
    /// connection has ended (no further frame can come).
    fn wait<'a>(
        &self,
        inbox: MutexGuard<'a, Inbox>,
        deadline: Instant,
    ) -> Option<MutexGuard<'a, Inbox>> {
        if inbox.ending.is_some() {
            return None;
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        Some(
            self.shared
                .changed
                .wait_timeout(inbox, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0,
        )
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(report) = self.judge() {
            fail_test(&report);
        }
    }
}

/// Fails the test with `report`, or only prints it when the thread is
/// already panicking (a second panic would abort the test binary).
pub(crate) fn fail_test(report: &str) {
    if thread::panicking() {
        eprintln!("{report}");
    } else {
        panic!("{report}");
    }
}

/// Who sent the first close frame, and what the other side answered.
#[derive(Default)]
struct CloseState {
    ours: Option<(u16, String)>,
    shims: Option<(Option<u16>, String)>,
    shim_first: bool,
}

/// The I/O thread: the only code that reads or writes this WebSocket.
/// Returns how the connection ended.
fn run_io(
    mut ws: WebSocket<Transport>,
    commands: &Receiver<Command>,
    shared: &Shared,
    judge: &mut Judge,
) -> Ending {
    let mut close = CloseState::default();
    let ending = loop {
        if let Some(ending) = run_commands(&mut ws, commands, &mut close, judge) {
            break ending;
        }
        if let Some((code, reason)) = judge.hello_late(Instant::now()) {
            // The shim learns of the close from the frame; a failure to
            // write it shows as the connection's ending.
            let _ = start_close(&mut ws, &mut close, code, reason);
        }
        match ws.read() {
            Ok(message) => {
                if let Some((code, reason)) = record(shared, message, &mut close, judge) {
                    let _ = start_close(&mut ws, &mut close, code, reason);
                }
            }
            Err(tungstenite::Error::Io(error))
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(error) => break ending_after(&close, &error),
        }
    };
    if matches!(
        ending,
        Ending::ClosedByShim { .. } | Ending::ClosedByEmulator { .. }
    ) {
        ws.get_mut().close_notify();
    }
    ws.get_ref().shutdown();
    ending
}

/// Sends the emulator's close frame (the first one it sends is the one the
/// ending reports).
fn start_close(
    ws: &mut WebSocket<Transport>,
    close: &mut CloseState,
    code: u16,
    reason: String,
) -> Result<(), tungstenite::Error> {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: reason.clone().into(),
    };
    let result = ws.close(Some(frame)).and_then(|()| ws.flush());
    if close.ours.is_none() && close.shims.is_none() {
        close.ours = Some((code, reason));
    }
    result
}

/// Runs every queued command; `Some` when the connection is over.
fn run_commands(
    ws: &mut WebSocket<Transport>,
    commands: &Receiver<Command>,
    close: &mut CloseState,
    judge: &mut Judge,
) -> Option<Ending> {
    loop {
        match commands.try_recv() {
            Ok(Command::Send(message, sent, reply)) => {
                let result = ws.send(message).map_err(to_io);
                // Noted before this thread reads again, so no answer can
                // arrive ahead of its request.
                if let (Ok(()), Some(sent)) = (&result, sent) {
                    judge.sent(sent, Instant::now());
                }
                let _ = reply.send(result);
            }
            Ok(Command::SendAll(messages, reply)) => {
                let mut result = Ok(());
                for (message, sent) in messages {
                    result = ws.write(message).map_err(to_io);
                    if result.is_err() {
                        break;
                    }
                    if let Some(sent) = sent {
                        judge.sent(sent, Instant::now());
                    }
                }
                if result.is_ok() {
                    result = ws.flush().map_err(to_io);
                }
                let _ = reply.send(result);
            }
            Ok(Command::Close(code, reason, reply)) => {
                let result = start_close(ws, close, code, reason);
                let _ = reply.send(match result {
                    // The close frame was written; the handshake finishing
                    // is what ConnectionClosed reports.
                    Ok(()) | Err(tungstenite::Error::ConnectionClosed) => Ok(()),
                    Err(error) => Err(to_io(error)),
                });
            }
            Ok(Command::DropTcp(reply)) => {
                ws.get_ref().shutdown();
                let _ = reply.send(Ok(()));
                return Some(Ending::DroppedByEmulator);
            }
            Err(TryRecvError::Empty) => return None,
            // The Conn was dropped: nobody can observe this connection any
            // more, so it ends the way drop_tcp ends it.
            Err(TryRecvError::Disconnected) => return Some(Ending::DroppedByEmulator),
        }
    }
}

/// Records a message from the shim and has the judge look at it; returns
/// the close the platform would answer it with, if any.
fn record(
    shared: &Shared,
    message: Message,
    close: &mut CloseState,
    judge: &mut Judge,
) -> Option<(u16, String)> {
    let at = Instant::now();
    let (kind, data) = match message {
        Message::Text(text) => (RawKind::Text, text.as_bytes().to_vec()),
        Message::Binary(bytes) => (RawKind::Binary, bytes.to_vec()),
        Message::Ping(bytes) => (RawKind::Ping, bytes.to_vec()),
        Message::Pong(bytes) => (RawKind::Pong, bytes.to_vec()),
        Message::Close(frame) => {
            let code = frame.as_ref().map(|frame| u16::from(frame.code));
            let reason = frame
                .as_ref()
                .map(|frame| frame.reason.as_str().to_owned())
                .unwrap_or_default();
            let mut data = Vec::new();
            if let Some(code) = code {
                data.extend_from_slice(&code.to_be_bytes());
                data.extend_from_slice(reason.as_bytes());
            }
            if close.shims.is_none() {
                close.shim_first = close.ours.is_none();
                close.shims = Some((code, reason));
            }
            (RawKind::Close, data)
        }
        // Never produced by reading.
        Message::Frame(_) => return None,
    };
    let mut inbox = shared.lock();
    let mut answer = None;
    if matches!(kind, RawKind::Text | RawKind::Binary) {
        let text = String::from_utf8_lossy(&data).into_owned();
        let json = std::str::from_utf8(&data)
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(text).ok());
        if let Some(frame) = &json {
            if wire::frame_type(frame) == Some("STATUS") {
                inbox.statuses.push(frame.clone());
            }
        }
        answer = match judge.received(json.as_ref(), &text, at) {
            Judgement::Fine => None,
            Judgement::RefuseHello(code, reason) => Some((code, reason)),
            Judgement::Broken(violation) => {
                let reason = close_reason(&format!("Uncorrelated frame: {violation}"));
                inbox.violations.push(violation);
                Some((VIOLATION_CLOSE_CODE, reason))
            }
        };
        inbox.queue.push_back(Inbound { json, text });
    }
    inbox.raw.push(RawFrame { kind, data, at });
    drop(inbox);
    shared.changed.notify_all();
    answer
}

fn ending_after(close: &CloseState, error: &tungstenite::Error) -> Ending {
    match (&close.ours, &close.shims) {
        (Some((code, reason)), shims) if !close.shim_first => Ending::ClosedByEmulator {
            code: *code,
            reason: reason.clone(),
            reply_code: shims.as_ref().and_then(|(code, _)| *code),
            answered: shims.is_some(),
        },
        (_, Some((code, reason))) => Ending::ClosedByShim {
            code: *code,
            reason: reason.clone(),
        },
        _ => Ending::Dropped {
            error: error.to_string(),
        },
    }
}

fn to_io(error: tungstenite::Error) -> io::Error {
    match error {
        tungstenite::Error::Io(error) => error,
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => {
            io::Error::new(io::ErrorKind::NotConnected, error.to_string())
        }
        other => io::Error::other(other.to_string()),
    }
}
