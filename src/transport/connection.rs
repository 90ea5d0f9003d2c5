//! An open WebSocket connection, shared by one reader thread and writer
//! threads without an async runtime.
//!
//! One `WebSocket` sits behind a turn lock: a mutex whose turns are handed
//! out first come, first served. The reader never waits while it holds a
//! turn: it takes what the socket already holds, and when no message is
//! complete it gives the turn back and waits for the socket to become
//! readable on a second descriptor, outside the lock. A writer (a response,
//! an application `PONG`, a keepalive ping) therefore never queues behind
//! an idle read; it waits at most for a reader that is busy decoding bytes
//! that have already arrived. A read call ends after [`READ_TURN`] without
//! a complete message so the caller can look at its stop flag. Partial
//! frames and TLS records stay buffered in the WebSocket and TLS layers
//! between turns. A write that cannot finish within one turn's write budget
//! ([`POLL_INTERVAL`]) gives its turn back and continues on the next one,
//! so a platform that is itself blocked writing can still be read from,
//! and a large frame draining slowly never keeps the reader from reading.
//! The reader never waits for room to write: its keepalive pings and
//! control replies are queued behind whatever is being written and sent
//! with it; the reader only pushes them on when no writer will.
//!
//! This module never interprets message contents (they go up to the
//! protocol layer unchanged: a text frame's as the UTF-8 the codec checked,
//! a binary frame's as bytes), never sends a message larger than 16 MiB,
//! and never writes anything of its own except the WebSocket control
//! replies (pong to a ping, the close reply, and close 1009 / 1007 / 1002
//! when the peer breaks the limits, sends text that is not UTF-8, or
//! breaks the protocol).

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tungstenite::protocol::CloseFrame;
use tungstenite::protocol::frame::Frame;
use tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tungstenite::{Bytes, Message, Utf8Bytes, WebSocket};

use super::MAX_MESSAGE_BYTES;
use super::error::{Stage, TransportError};
use super::stream::{POLL_INTERVAL, Stream, Traffic};

/// The longest one [`Reader::read`] call waits for a complete message
/// before it returns [`Incoming::Idle`].
pub const READ_TURN: Duration = Duration::from_millis(50);

/// A write that moves no byte to the socket for this long fails with
/// [`TransportError::WriteStalled`].
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest close reason: a control frame carries at most 125 bytes, two of
/// them the code.
const MAX_CLOSE_REASON_BYTES: usize = 123;

/// Largest frame of an outgoing message; a longer message is sent in
/// fragments of this size (see [`Writer::send_text_pieces`]).
pub const FRAGMENT_BYTES: usize = 1 << 20;

/// The largest message [`Writer::queue_text`] leaves queued for a later
/// flush; a larger one is worth its own system call, and the codec's
/// buffer never holds more than a few of these beyond its write size.
pub const QUEUED_TEXT_BYTES: usize = 16 * 1024;

/// A complete message's bytes. A text frame's were checked as UTF-8 by the
/// frame codec, which the protocol layer need not do again (a second pass
/// over a 16 MiB frame); a binary frame's are unchecked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// A text frame's, valid UTF-8.
    Text(Utf8Bytes),
    /// A binary frame's.
    Binary(Bytes),
}

impl Payload {
    /// The text, when the codec checked it as UTF-8 already.
    pub fn checked_text(&self) -> Option<&str> {
        match self {
            Payload::Text(text) => Some(text.as_str()),
            Payload::Binary(_) => None,
        }
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Payload::Text(text) => text.as_bytes(),
            Payload::Binary(bytes) => bytes,
        }
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Payload {
        Payload::Binary(Bytes::from(bytes))
    }
}

impl From<String> for Payload {
    fn from(text: String) -> Payload {
        Payload::Text(Utf8Bytes::from(text))
    }
}

/// What one reader turn produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A complete message, text or binary (PROTOCOL.md §1.2 serves both
    /// alike): a text frame's UTF-8 was checked by the codec, a binary
    /// frame's is the protocol layer's to check. The bytes are the frame
    /// codec's own, not a copy: a 16 MiB message is not held twice.
    Message(Payload),
    /// A pong with its payload, for
    /// [`Keepalive::on_pong`](super::Keepalive::on_pong).
    Pong(Vec<u8>),
    /// No complete message this turn (an answered ping also ends a turn
    /// this way). Call again.
    Idle,
    /// The platform closed the connection with this code and reason (none:
    /// a close frame without a code). The close reply has been queued;
    /// further reads return [`TransportError::Closed`].
    Closed(Option<CloseInfo>),
}

/// The code and reason of a close frame received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseInfo {
    /// The close code (PROTOCOL.md §3.3).
    pub code: u16,
    /// The reason text.
    pub reason: String,
}

/// Ticket counters of the turn lock.
#[derive(Debug, Default)]
struct Turns {
    next_ticket: u64,
    serving: u64,
}

/// The state shared by the reader and the writers.
struct Shared {
    turns: Mutex<Turns>,
    turn_changed: Condvar,
    socket: Mutex<WebSocket<Stream>>,
    /// A second descriptor of the socket: the reader waits on it for
    /// readability without holding the socket.
    wait_fd: std::os::fd::OwnedFd,
    traffic: Arc<Traffic>,
    /// A ping or control reply the reader queued may not have reached the
    /// socket yet; cleared by the next flush that completes.
    output_pending: AtomicBool,
    /// Bytes written (as [`Traffic::written`] counts them) when what the
    /// reader had queued was last found handed to the socket: the end of
    /// the last ping, or a little past it.
    pending_flushed_at: AtomicU64,
    /// Held while one data message is sent: the fragments of two messages
    /// must never interleave, whichever threads send them.
    sending: Mutex<()>,
}

/// Holding the socket for one turn; the next ticket is served on drop.
struct Turn<'a> {
    shared: &'a Shared,
    socket: MutexGuard<'a, WebSocket<Stream>>,
}

impl Shared {
    /// Waits for this thread's turn (first come, first served).
    fn turn(&self) -> Result<Turn<'_>, TransportError> {
        let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        let ticket = turns.next_ticket;
        turns.next_ticket += 1;
        while turns.serving != ticket {
            turns = self
                .turn_changed
                .wait(turns)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(turns);
        match self.socket.lock() {
            Ok(mut socket) => {
                socket
                    .get_mut()
                    .paced_mut()
                    .set_write_budget(Instant::now() + POLL_INTERVAL);
                Ok(Turn {
                    shared: self,
                    socket,
                })
            }
            Err(_) => {
                // A thread panicked mid-operation: the socket's state is
                // unknown, so it is not used again.
                self.end_turn();
                Err(TransportError::Closed)
            }
        }
    }

    /// Flushes what is queued as far as the socket takes it now;
    /// `WouldBlock` leaves the rest queued, and marks it pending.
    fn flush_best_effort(&self, socket: &mut WebSocket<Stream>) -> Result<(), TransportError> {
        match socket.flush() {
            Ok(()) => {
                self.flushed();
                Ok(())
            }
            Err(e) if is_would_block(&e) => {
                self.output_pending.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(write_error(e)),
        }
    }

    /// A flush completed: nothing the reader queued is pending any more.
    fn flushed(&self) {
        if self.output_pending.swap(false, Ordering::Relaxed) {
            self.pending_flushed_at
                .store(self.traffic.written(), Ordering::Relaxed);
        }
    }

    fn end_turn(&self) {
        let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        turns.serving += 1;
        // A ticket taken after this one is held by a thread that waits or
        // is about to look; with none, nobody needs a wake-up (which is a
        // system call whether or not anyone waits).
        let waiters = turns.serving != turns.next_ticket;
        drop(turns);
        if waiters {
            self.turn_changed.notify_all();
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.shared.end_turn();
    }
}

/// An open connection, before it is split.
pub struct Connection {
    socket: WebSocket<Stream>,
    via_proxy: bool,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("tls", &self.is_tls())
            .field("via_proxy", &self.via_proxy)
            .finish_non_exhaustive()
    }
}

impl Connection {
    pub(crate) fn new(socket: WebSocket<Stream>, via_proxy: bool) -> Connection {
        Connection { socket, via_proxy }
    }

    /// Whether the connection runs over TLS (`wss://`).
    pub fn is_tls(&self) -> bool {
        matches!(self.socket.get_ref(), Stream::Tls(_))
    }

    /// Whether it was opened through an HTTP `CONNECT` proxy.
    pub fn via_proxy(&self) -> bool {
        self.via_proxy
    }

    /// The negotiated TLS version (`None` for loopback `ws://`).
    pub fn tls_version(&self) -> Option<rustls::ProtocolVersion> {
        match self.socket.get_ref() {
            Stream::Tls(tls) => tls.conn.protocol_version(),
            Stream::Plain(_) => None,
        }
    }

    /// Splits into the reading half (one reader thread) and the writing
    /// half (cloneable, for the writer thread and the keepalive).
    pub fn split(self) -> Result<(Reader, Writer), TransportError> {
        let wait_fd = self
            .socket
            .get_ref()
            .paced()
            .try_clone_fd()
            .map_err(|source| TransportError::Io {
                stage: Stage::Read,
                source,
            })?;
        let traffic = self.socket.get_ref().paced().traffic();
        let shared = Arc::new(Shared {
            turns: Mutex::new(Turns::default()),
            turn_changed: Condvar::new(),
            socket: Mutex::new(self.socket),
            wait_fd,
            traffic,
            output_pending: AtomicBool::new(false),
            pending_flushed_at: AtomicU64::new(0),
            sending: Mutex::new(()),
        });
        Ok((
            Reader {
                shared: shared.clone(),
                seen: Seen::default(),
            },
            Writer { shared },
        ))
    }
}

/// The reading half.
pub struct Reader {
    shared: Arc<Shared>,
    seen: Seen,
}

/// The byte counts as of the last [`Reader::progressed`].
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    read: u64,
    written: u64,
    /// The most of our bytes seen acknowledged by the platform.
    acknowledged: u64,
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader").finish_non_exhaustive()
    }
}

impl Reader {
    /// Whether, since the last call, the connection showed that the
    /// platform is there though no pong has come yet: bytes arrived from
    /// it, or it acknowledged more of the bytes we wrote ahead of the last
    /// ping (while the ping waits behind a large frame, the frame moving is
    /// all there is to see). Acknowledgements of what follows the ping
    /// count for nothing: a platform whose system still takes bytes while
    /// the platform itself answers nothing is not alive. Where the system
    /// does not tell what was acknowledged, our bytes leaving for the
    /// socket while the ping waits behind them count instead.
    pub fn progressed(&mut self) -> bool {
        use std::os::fd::AsFd;
        let shared = &self.shared;
        let read = shared.traffic.read();
        // Written before asking what is unacknowledged, so a write between
        // the two can only make the acknowledged count look smaller.
        let written = shared.traffic.written();
        let pending = shared.output_pending.load(Ordering::Relaxed);
        let ping_end = if pending {
            u64::MAX
        } else {
            shared.pending_flushed_at.load(Ordering::Relaxed)
        };
        let taken = match crate::sys::unacknowledged_bytes(shared.wait_fd.as_fd()) {
            Some(unacknowledged) => {
                let acknowledged = written.saturating_sub(unacknowledged);
                let taken =
                    acknowledged > self.seen.acknowledged && self.seen.acknowledged < ping_end;
                self.seen.acknowledged = self.seen.acknowledged.max(acknowledged);
                taken
            }
            None => pending && written != self.seen.written,
        };
        let progressed = read != self.seen.read || taken;
        self.seen.read = read;
        self.seen.written = written;
        progressed
    }

    /// Waits for a message for at most about [`READ_TURN`], holding the
    /// socket only while bytes that have already arrived are decoded.
    /// [`Incoming::Idle`] means "nothing complete yet"; call again.
    pub fn read(&mut self) -> Result<Incoming, TransportError> {
        let deadline = Instant::now() + READ_TURN;
        loop {
            match self.read_available()? {
                Incoming::Idle => {}
                other => return Ok(other),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Incoming::Idle);
            }
            use std::os::fd::AsFd;
            let readable = super::stream::wait_readable(self.shared.wait_fd.as_fd(), left)
                .map_err(|source| TransportError::Io {
                    stage: Stage::Read,
                    source,
                })?;
            if !readable {
                return Ok(Incoming::Idle);
            }
        }
    }

    /// One turn: decodes what the socket and the buffers already hold,
    /// without waiting for more.
    fn read_available(&mut self) -> Result<Incoming, TransportError> {
        let mut turn = self.shared.turn()?;
        let socket = &mut *turn.socket;
        socket.get_mut().paced_mut().set_immediate(true);
        let result = self.take_one(socket);
        socket.get_mut().paced_mut().set_immediate(false);
        result
    }

    fn take_one(&self, socket: &mut WebSocket<Stream>) -> Result<Incoming, TransportError> {
        if self.shared.output_pending.load(Ordering::Relaxed) {
            self.shared.flush_best_effort(socket)?;
        }
        match socket.read() {
            Ok(Message::Text(text)) => Ok(Incoming::Message(Payload::Text(text))),
            Ok(Message::Binary(bytes)) => Ok(Incoming::Message(Payload::Binary(bytes))),
            Ok(Message::Pong(payload)) => Ok(Incoming::Pong(Vec::from(payload))),
            Ok(Message::Ping(_)) => {
                // The pong is queued; send it now rather than on the next
                // turn. A full socket leaves it queued for the next write.
                self.shared.flush_best_effort(socket)?;
                Ok(Incoming::Idle)
            }
            Ok(Message::Close(frame)) => {
                self.shared.flush_best_effort(socket)?;
                Ok(Incoming::Closed(frame.map(|frame| CloseInfo {
                    code: u16::from(frame.code),
                    reason: frame.reason.as_str().to_owned(),
                })))
            }
            Ok(Message::Frame(_)) => Ok(Incoming::Idle),
            Err(error) => read_error(socket, error),
        }
    }
}

/// Fails the connection with a close frame, as far as the socket takes it
/// now; the caller drops the connection after the error anyway.
fn fail_with(socket: &mut WebSocket<Stream>, code: CloseCode, reason: &'static str) {
    // The turn that read the offending frame may have spent its write
    // budget decoding it; the close frame gets a budget of its own.
    socket
        .get_mut()
        .paced_mut()
        .set_write_budget(Instant::now() + POLL_INTERVAL);
    let _ = socket.close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }));
}

fn read_error(
    socket: &mut WebSocket<Stream>,
    error: tungstenite::Error,
) -> Result<Incoming, TransportError> {
    use tungstenite::Error as E;
    use tungstenite::error::{CapacityError, ProtocolError};
    match error {
        E::Io(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Incoming::Idle),
        // After the closing handshake the end of the stream is the expected
        // outcome, with or without a TLS close_notify.
        E::Io(e) if !socket.can_read() && is_end_of_stream(&e) => Err(TransportError::Closed),
        E::Io(source) => Err(TransportError::Io {
            stage: Stage::Read,
            source,
        }),
        E::Capacity(CapacityError::MessageTooLong { size, .. }) => {
            fail_with(socket, CloseCode::Size, "message too big");
            Err(TransportError::MessageTooLarge { size })
        }
        E::ConnectionClosed | E::AlreadyClosed => Err(TransportError::Closed),
        E::Protocol(ProtocolError::ResetWithoutClosingHandshake) => Err(TransportError::Io {
            stage: Stage::Read,
            source: io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection ended without a close frame",
            ),
        }),
        E::Utf8(_) => {
            fail_with(socket, CloseCode::Invalid, "invalid UTF-8");
            Err(TransportError::Protocol(
                "a text message is not valid UTF-8".into(),
            ))
        }
        E::Protocol(problem) => {
            fail_with(socket, CloseCode::Protocol, "protocol error");
            Err(TransportError::Protocol(problem.to_string()))
        }
        other => Err(TransportError::Protocol(other.to_string())),
    }
}

fn is_end_of_stream(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

fn is_would_block(error: &tungstenite::Error) -> bool {
    matches!(error, tungstenite::Error::Io(e) if e.kind() == io::ErrorKind::WouldBlock)
}

fn write_error(error: tungstenite::Error) -> TransportError {
    use tungstenite::Error as E;
    use tungstenite::error::{CapacityError, ProtocolError};
    match error {
        E::Io(source) => TransportError::Io {
            stage: Stage::Write,
            source,
        },
        E::ConnectionClosed | E::AlreadyClosed | E::Protocol(ProtocolError::SendAfterClosing) => {
            TransportError::Closed
        }
        E::Capacity(CapacityError::MessageTooLong { size, .. }) => {
            TransportError::OutboundTooLarge { size }
        }
        E::WriteBufferFull(_) => TransportError::WriteStalled,
        other => TransportError::Protocol(other.to_string()),
    }
}

/// `pieces` as one string: the one that is not empty, moved, when there
/// is only one.
fn joined<const N: usize>(pieces: [String; N]) -> String {
    if pieces.iter().filter(|piece| !piece.is_empty()).count() <= 1 {
        return pieces
            .into_iter()
            .find(|piece| !piece.is_empty())
            .unwrap_or_default();
    }
    pieces.concat()
}

/// The text of a message given in pieces, taken from the front.
struct Pieces {
    /// The pieces not yet taken whole, the first maybe in part; none empty.
    pieces: std::collections::VecDeque<Bytes>,
}

impl Pieces {
    fn new<const N: usize>(pieces: [String; N]) -> Pieces {
        Pieces {
            pieces: pieces
                .into_iter()
                .filter(|piece| !piece.is_empty())
                // The piece's own allocation, shared by its fragments.
                .map(|piece| Bytes::from(piece.into_bytes()))
                .collect(),
        }
    }

    /// The next `len` bytes, or what is left when that is less: a slice of
    /// the first piece when it holds them, a copy of those bytes otherwise.
    fn take(&mut self, len: usize) -> Bytes {
        if let Some(first) = self.pieces.front_mut() {
            if first.len() > len {
                return first.split_to(len);
            }
            if first.len() == len {
                return self.pieces.pop_front().unwrap_or_default();
            }
        }
        let mut joined = Vec::with_capacity(len);
        while joined.len() < len {
            let Some(first) = self.pieces.front_mut() else {
                break;
            };
            let part = first.split_to(first.len().min(len - joined.len()));
            joined.extend_from_slice(&part);
            if first.is_empty() {
                self.pieces.pop_front();
            }
        }
        Bytes::from(joined)
    }
}

/// The writing half. Clones share the connection; writes are ordered by
/// the turn lock.
#[derive(Clone)]
pub struct Writer {
    shared: Arc<Shared>,
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

impl Writer {
    /// Sends one text message (one JSON envelope) and waits until it is
    /// handed to the socket. Over 16 MiB it is refused unsent.
    pub fn send_text(&self, text: String) -> Result<(), TransportError> {
        self.send_text_pieces([text])
    }

    /// Sends one text message given as pieces, which the peer receives
    /// joined in order, and waits until it is handed to the socket. Over
    /// 16 MiB in all it is refused unsent.
    ///
    /// A message over [`FRAGMENT_BYTES`] goes as fragments (RFC 6455 §5.4)
    /// of that size but the last, cut as from the joined text, each queued
    /// once the one before is out: the codec's send buffer holds one
    /// fragment rather than a second copy of the message (and keeps that
    /// size for the rest of the connection). A fragment inside one piece is
    /// sent from the piece's own buffer; only one that spans pieces is
    /// copied, so a large piece is never copied or moved whole. Control
    /// frames may go between fragments, as the RFC allows. A message of one
    /// fragment or less goes as one frame.
    pub fn send_text_pieces<const N: usize>(
        &self,
        pieces: [String; N],
    ) -> Result<(), TransportError> {
        let size = pieces.iter().map(String::len).sum();
        if size > MAX_MESSAGE_BYTES {
            return Err(TransportError::OutboundTooLarge { size });
        }
        let _sending = self.sending();
        if size <= FRAGMENT_BYTES {
            let text = joined(pieces);
            return self.write_with(|socket| socket.write(Message::Text(text.into())));
        }
        let mut rest = Pieces::new(pieces);
        let mut sent = 0;
        while sent < size {
            let len = FRAGMENT_BYTES.min(size - sent);
            let opcode = if sent == 0 {
                OpCode::Data(Data::Text)
            } else {
                OpCode::Data(Data::Continue)
            };
            sent += len;
            let fragment = Frame::message(rest.take(len), opcode, sent == size);
            self.write_with(|socket| socket.write(Message::Frame(fragment)))?;
        }
        Ok(())
    }

    /// Queues one text message behind what is queued, without waiting for
    /// it to reach the socket: for a sender with more messages at hand,
    /// which calls [`Writer::flush`] once it has queued them, so that they
    /// leave together (one TLS record and one system call rather than one
    /// each). A message over [`QUEUED_TEXT_BYTES`] is sent at once, with
    /// what is queued ahead of it, as [`Writer::send_text_pieces`] sends it; so is
    /// one the socket does not take while it is queued.
    pub fn queue_text(&self, text: String) -> Result<(), TransportError> {
        if text.len() > QUEUED_TEXT_BYTES {
            return self.send_text(text);
        }
        let _sending = self.sending();
        self.write_then(|socket| socket.write(Message::Text(text.into())), false)
    }

    /// Waits until everything queued is handed to the socket.
    pub fn flush(&self) -> Result<(), TransportError> {
        let _sending = self.sending();
        self.write_with(|_| Ok(()))
    }

    /// Ends the connection at once, both ways and without a close frame:
    /// a write waiting for the peer fails now, and so does every later read
    /// and write. For a connection that can no longer answer what it reads.
    pub fn abort(&self) {
        let _ = rustix::net::shutdown(&self.shared.wait_fd, rustix::net::Shutdown::Both);
    }

    /// Queues a WebSocket ping with `payload` (at most 125 bytes) behind
    /// what is already queued, and sends as much as the socket takes at
    /// once, never waiting: the rest leaves with the writer that is sending
    /// the frames ahead of it, or on the reader's next turns.
    pub fn ping(&self, payload: &[u8]) -> Result<(), TransportError> {
        let payload = Bytes::copy_from_slice(payload);
        let mut turn = self.shared.turn()?;
        let socket = &mut *turn.socket;
        self.shared.output_pending.store(true, Ordering::Relaxed);
        socket.get_mut().paced_mut().set_immediate(true);
        let queued = match socket.write(Message::Ping(payload)) {
            Ok(()) => Ok(()),
            Err(e) if is_would_block(&e) => Ok(()),
            Err(e) => Err(write_error(e)),
        };
        let flushed = queued.and_then(|()| self.shared.flush_best_effort(socket));
        socket.get_mut().paced_mut().set_immediate(false);
        flushed
    }

    /// Starts the closing handshake with `code` and `reason` (cut to 123
    /// bytes). Reads then return the platform's close reply.
    pub fn close(&self, code: u16, reason: &str) -> Result<(), TransportError> {
        let mut end = reason.len().min(MAX_CLOSE_REASON_BYTES);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        let frame = CloseFrame {
            code: CloseCode::from(code),
            reason: reason[..end].into(),
        };
        self.write_with(|socket| socket.close(Some(frame)))
    }

    /// Holds the connection for one data message (or a flush of those
    /// queued): another sender's fragments wait.
    fn sending(&self) -> MutexGuard<'_, ()> {
        self.shared
            .sending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues with `op`, then flushes turn by turn until the bytes are out,
    /// a write fails, or no byte moves for [`WRITE_STALL_TIMEOUT`].
    fn write_with(
        &self,
        op: impl FnOnce(&mut WebSocket<Stream>) -> tungstenite::Result<()>,
    ) -> Result<(), TransportError> {
        self.write_then(op, true)
    }

    /// Queues with `op`; flushes as [`Writer::write_with`] does when
    /// `flush` is set, or when the socket did not take what `op` wrote out.
    fn write_then(
        &self,
        op: impl FnOnce(&mut WebSocket<Stream>) -> tungstenite::Result<()>,
        flush: bool,
    ) -> Result<(), TransportError> {
        let mut written;
        {
            let mut turn = self.shared.turn()?;
            let socket = &mut *turn.socket;
            let queued = op(socket);
            if !flush && queued.is_ok() {
                return Ok(());
            }
            match queued.and_then(|()| socket.flush()) {
                Ok(()) => {
                    self.shared.flushed();
                    return Ok(());
                }
                Err(e) if is_would_block(&e) => {}
                Err(e) => return Err(write_error(e)),
            }
            written = socket.get_ref().paced().bytes_written();
        }
        let mut last_progress = Instant::now();
        loop {
            let mut turn = self.shared.turn()?;
            let socket = &mut *turn.socket;
            match socket.flush() {
                Ok(()) => {
                    self.shared.flushed();
                    return Ok(());
                }
                Err(e) if is_would_block(&e) => {}
                Err(e) => return Err(write_error(e)),
            }
            let now_written = socket.get_ref().paced().bytes_written();
            if now_written != written {
                written = now_written;
                last_progress = Instant::now();
            } else if last_progress.elapsed() >= WRITE_STALL_TIMEOUT {
                return Err(TransportError::WriteStalled);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    // Test fixtures fail loudly by design.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// The address of every byte of the pieces, in order.
    fn origins(pieces: &[String]) -> Vec<usize> {
        pieces
            .iter()
            .flat_map(|p| (0..p.len()).map(move |i| p.as_ptr() as usize + i))
            .collect()
    }

    #[test]
    fn fragments_inside_a_piece_are_its_own_bytes_and_only_those_across_pieces_are_copied() {
        let shapes: [[String; 3]; 4] = [
            ["ab".into(), "c".repeat(25), "de".into()],
            [String::new(), "x".repeat(20), String::new()],
            ["y".repeat(10), String::new(), "z".repeat(10)],
            ["h".into(), "é".repeat(9), String::new()],
        ];
        for pieces in shapes {
            let joined = pieces.concat();
            let addresses = origins(&pieces);
            let mut rest = Pieces::new(pieces);
            let mut at = 0;
            while at < joined.len() {
                // As the writer takes them: full fragments, then the rest.
                let fragment = rest.take(10.min(joined.len() - at));
                assert!(!fragment.is_empty() && fragment.len() <= 10);
                assert_eq!(&fragment[..], &joined.as_bytes()[at..at + fragment.len()]);
                let end = at + fragment.len();
                // Contiguous in one piece: the fragment is that piece's
                // bytes, not a copy of them.
                let contiguous = addresses[at..end].windows(2).all(|w| w[1] == w[0] + 1);
                assert_eq!(
                    fragment.as_ptr() as usize == addresses[at],
                    contiguous,
                    "fragment at {at} of {joined:?}"
                );
                at = end;
            }
            assert!(rest.take(10).is_empty());
        }
    }
}
