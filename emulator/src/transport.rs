//! The byte stream under one WebSocket: plain TCP or TLS over TCP.
//!
//! Owns reading and writing bytes and reaching the TCP socket underneath
//! (timeouts, abrupt shutdown). It must never interpret WebSocket frames or
//! JSON: that is `conn`'s job, through tungstenite.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustls::{ServerConnection, StreamOwned};

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

/// One accepted connection's byte stream.
///
/// Writes can be *muted*: the upgrade behaviours that must leave an HTTP
/// request unanswered (`UpgradeBehaviour::DropConnection`, `Hang`) run
/// inside tungstenite's handshake, which always writes a response; muting
/// turns that write into an error so nothing reaches the client.
pub(crate) struct Transport {
    stream: Stream,
    muted: Arc<AtomicBool>,
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
        }
    }

    pub(crate) fn tls(tls: StreamOwned<ServerConnection, TcpStream>) -> Self {
        Transport {
            stream: Stream::Tls(Box::new(tls)),
            muted: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The switch that mutes this transport's writes.
    pub(crate) fn mute_switch(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.muted)
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

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.stream {
            Stream::Plain(tcp) => tcp.read(buf),
            Stream::Tls(tls) => tls.read(buf),
        }
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
