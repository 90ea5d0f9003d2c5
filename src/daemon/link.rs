//! The bridge between an open transport connection and a served session:
//! the inbound half keeps the WebSocket-level keepalive (PROTOCOL.md §1.5),
//! fed with the connection's signs of life (see [`Reader::progressed`]),
//! and notices a stop request between reader turns; the outbound half sends
//! the session's encoded frames as text messages.
//!
//! It never interprets a frame and never holds the transport's turn lock
//! longer than one reader turn, so the writer thread is not held up.

use std::time::{Duration, Instant};

use super::session::{Ended, Inbound, Outbound};
use crate::protocol::Encoded;
use crate::transport::{
    Incoming, Keepalive, KeepaliveAction, Payload, Reader, TransportError, Writer,
};

/// The receiving side of a served connection.
#[derive(Debug)]
pub struct LinkIn {
    reader: Reader,
    writer: Writer,
    keepalive: Keepalive,
}

impl LinkIn {
    /// Wraps the transport halves.
    pub fn new(reader: Reader, writer: Writer) -> LinkIn {
        LinkIn {
            reader,
            writer,
            keepalive: Keepalive::new(Instant::now()),
        }
    }
}

impl Inbound for LinkIn {
    fn recv(&mut self, should_stop: &dyn Fn() -> bool) -> Result<Payload, Ended> {
        loop {
            if should_stop() {
                return Err(Ended::Closed(None));
            }
            // The large blocks kept for the next large message go back a
            // while after the last was freed, busy connection or quiet.
            crate::sys::release_kept_blocks(KEPT_BLOCKS_IDLE);
            let now = Instant::now();
            if self.reader.progressed() {
                self.keepalive.on_progress(now);
            }
            match self.keepalive.poll(now) {
                KeepaliveAction::Wait(_) => {}
                KeepaliveAction::Ping(payload) => {
                    if let Err(e) = self.writer.ping(&payload) {
                        return Err(Ended::Failed(e.audit_reason()));
                    }
                }
                KeepaliveAction::Expired => {
                    return Err(Ended::Failed(
                        TransportError::KeepaliveTimeout.audit_reason(),
                    ));
                }
            }
            match self.reader.read() {
                Ok(Incoming::Message(payload)) => return Ok(payload),
                Ok(Incoming::Pong(payload)) => {
                    self.keepalive.on_pong(&payload);
                }
                Ok(Incoming::Idle) => {}
                Ok(Incoming::Closed(info)) => return Err(Ended::Closed(info)),
                Err(e) => return Err(Ended::Failed(e.audit_reason())),
            }
        }
    }

    fn abort(&mut self) {
        self.writer.abort();
    }
}

/// How long the allocator keeps freed large blocks after the last one was
/// freed (see [`crate::LargePages`]).
const KEPT_BLOCKS_IDLE: Duration = Duration::from_secs(1);

/// The sending side of a served connection.
#[derive(Debug)]
pub struct LinkOut(pub Writer);

impl Outbound for LinkOut {
    fn send(&mut self, text: Encoded) -> Result<(), Ended> {
        self.0
            .send_text_pieces(text.into_pieces())
            .map_err(|e| Ended::Failed(e.audit_reason()))
    }

    fn send_queued(&mut self, text: Encoded) -> Result<(), Ended> {
        let sent = match text.into_pieces() {
            [whole, content, tail] if content.is_empty() && tail.is_empty() => {
                self.0.queue_text(whole)
            }
            // Only a large response is in pieces, and it is sent at once.
            pieces => self.0.send_text_pieces(pieces),
        };
        sent.map_err(|e| Ended::Failed(e.audit_reason()))
    }

    fn flush(&mut self) -> Result<(), Ended> {
        self.0.flush().map_err(|e| Ended::Failed(e.audit_reason()))
    }

    fn close(&mut self, code: u16, reason: &str) {
        let _ = self.0.close(code, reason);
    }
}
