//! The byte stream under one WebSocket: plain TCP or TLS over TCP.
//!
//! Owns reading and writing bytes and reaching the TCP socket underneath
//! (timeouts, abrupt shutdown), and replaying the bytes the server read
//! to route a connection. It must never interpret WebSocket frames or
//! JSON: that is `conn`'s job, through tungstenite.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustls::{ServerConnection, StreamOwned};

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

/// A cap on how fast the emulator takes what the shim sends: at most
/// `bytes` per `interval`, the way a platform that reads its socket slowly
/// behaves. What is not taken stays in the socket, so the shim's writes back
/// up exactly as they would against such a platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadPace {
    pub(crate) bytes: usize,
    pub(crate) interval: Duration,
}

/// The pace in force and what the current interval has used of it; shared
/// between the connection's I/O thread and the test that sets it.
#[derive(Debug, Default)]
pub(crate) struct PaceState {
    pace: Option<ReadPace>,
    window_start: Option<Instant>,
    used: usize,
}

impl PaceState {
    /// Reads at `pace` from now on (`None`: as fast as the socket allows).
    pub(crate) fn set(&mut self, pace: Option<ReadPace>) {
        *self = PaceState {
            pace,
            window_start: None,
            used: 0,
        };
    }

    /// How many bytes may be read now (`None`: no limit), opening a new
    /// interval when the last one is over.
    fn allowance(&mut self, now: Instant) -> Option<usize> {
        let pace = self.pace?;
        let start = *self.window_start.get_or_insert(now);
        if now.duration_since(start) >= pace.interval {
            self.window_start = Some(now);
            self.used = 0;
        }
        Some(pace.bytes.saturating_sub(self.used))
    }

    /// What is left of the current interval.
    fn rest_of_interval(&self, now: Instant) -> Duration {
        match (self.pace, self.window_start) {
            (Some(pace), Some(start)) => pace.interval.saturating_sub(now.duration_since(start)),
            _ => Duration::ZERO,
        }
    }
}

/// One accepted connection's byte stream.
///
/// Reads can be *paced* (see [`ReadPace`]). Writes can be *muted*: the upgrade behaviours that must leave an HTTP
/// request unanswered (`UpgradeBehaviour::DropConnection`, `Hang`) run
/// inside tungstenite's handshake, which always writes a response; muting
/// turns that write into an error so nothing reaches the client.
pub(crate) struct Transport {
    stream: Stream,
    muted: Arc<AtomicBool>,
    pace: Arc<Mutex<PaceState>>,
    /// Bytes already read from the stream (the request head the server
    /// looked at to route the connection), read again before the stream.
    replay: Vec<u8>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.stream {
            Stream::Plain(_) => "plain",
            Stream::Tls(_) => "tls",
        };
        formatter
            .debug_struct("Transport")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

impl Transport {
    pub(crate) fn plain(tcp: TcpStream) -> Self {
        Transport {
            stream: Stream::Plain(tcp),
            muted: Arc::new(AtomicBool::new(false)),
            pace: Arc::default(),
            replay: Vec::new(),
        }
    }

    pub(crate) fn tls(tls: StreamOwned<ServerConnection, TcpStream>) -> Self {
        Transport {
            stream: Stream::Tls(Box::new(tls)),
            muted: Arc::new(AtomicBool::new(false)),
            pace: Arc::default(),
            replay: Vec::new(),
        }
    }

    /// Makes `bytes` (read from this stream already) the next bytes read,
    /// ahead of anything still unread in it.
    pub(crate) fn replay(&mut self, mut bytes: Vec<u8>) {
        bytes.append(&mut self.replay);
        self.replay = bytes;
    }

    /// The switch that mutes this transport's writes.
    pub(crate) fn mute_switch(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.muted)
    }

    /// The handle that sets this transport's read pace.
    pub(crate) fn pace_handle(&self) -> Arc<Mutex<PaceState>> {
        Arc::clone(&self.pace)
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        match &self.stream {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => &tls.sock,
        }
    }

    /// Sends the TLS close_notify alert (a no-op on plain TCP), so a client
    /// can tell an orderly end from a truncation. Errors are ignored: the
    /// peer may already be gone, and the connection ends either way.
    pub(crate) fn close_notify(&mut self) {
        if let Stream::Tls(tls) = &mut self.stream {
            tls.conn.send_close_notify();
            let _ = tls.conn.complete_io(&mut tls.sock);
        }
    }

    /// Ends the TCP connection in both directions without a WebSocket close
    /// frame or a TLS close_notify: what a crash or a cut cable looks like
    /// to the peer.
    pub(crate) fn shutdown(&self) {
        // The socket may already be gone; there is nothing left to end then.
        let _ = self.tcp().shutdown(Shutdown::Both);
    }
}

/// The longest a paced read that has used up its interval sleeps before it
/// reports `WouldBlock`, so queued sends are not held up.
const PACED_NAP: Duration = Duration::from_millis(5);

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.replay.is_empty() {
            let n = buf.len().min(self.replay.len());
            buf[..n].copy_from_slice(&self.replay[..n]);
            self.replay.drain(..n);
            return Ok(n);
        }
        let now = Instant::now();
        let mut pace = self.pace.lock().unwrap_or_else(PoisonError::into_inner);
        let len = match pace.allowance(now) {
            None => buf.len(),
            Some(0) => {
                let nap = pace.rest_of_interval(now).min(PACED_NAP);
                drop(pace);
                std::thread::sleep(nap);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Some(allowed) => buf.len().min(allowed),
        };
        let n = match &mut self.stream {
            Stream::Plain(tcp) => tcp.read(&mut buf[..len])?,
            Stream::Tls(tls) => tls.read(&mut buf[..len])?,
        };
        pace.used = pace.used.saturating_add(n);
        Ok(n)
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.muted.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the emulator leaves this request unanswered",
            ));
        }
        match &mut self.stream {
            Stream::Plain(tcp) => tcp.write(buf),
            Stream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.muted.load(Ordering::SeqCst) {
            return Ok(());
        }
        match &mut self.stream {
            Stream::Plain(tcp) => tcp.flush(),
            Stream::Tls(tls) => tls.flush(),
        }
    }
}

impl crate::http::Socket for Transport {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.tcp().set_read_timeout(timeout)
    }

    fn end_writes(&mut self) {
        self.close_notify();
        // The peer may already be gone; the connection ends either way.
        let _ = self.tcp().shutdown(Shutdown::Write);
    }
}
