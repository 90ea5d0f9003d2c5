//! The byte stream under the WebSocket: a TCP socket whose every read and
//! write is bounded in time, optionally wrapped in TLS.
//!
//! [`Paced`] owns the socket's timing in two modes. While the connection is
//! being opened every operation is bounded by the one opening deadline and a
//! timeout surfaces as `TimedOut`. Once it is open, writes wait at most
//! [`POLL_INTERVAL`], the reader's reads and writes do not wait at all, and
//! no write starts after the end of the current turn's write budget, so a
//! large frame leaving a slowly drained socket never holds the connection
//! for more than one budget; an expired or refused wait surfaces as
//! `WouldBlock`, which the WebSocket and TLS layers treat as "try again"
//! without losing buffered partial frames or records. [`wait_readable`] is
//! how the reader waits, outside the lock. This module never decides what
//! to send: it only moves bytes and counts them, both ways ([`Traffic`]).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustls::{ClientConnection, StreamOwned};

/// How long one read or write on an open connection waits for the socket
/// before giving the lock back.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The shortest timeout handed to the socket (a zero timeout means "none"
/// to the OS).
const MIN_SOCKET_TIMEOUT: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Opening: everything must finish by `deadline`.
    Opening { deadline: Instant },
    /// Open: waits are bounded by the poll interval; `immediate` reads
    /// and writes take only what the socket holds or has room for now and
    /// never wait.
    Open { immediate: bool },
}

/// Bytes a socket has moved so far, readable by any thread without the
/// connection's lock: how the keepalive sees that a connection is alive
/// while another thread is using it.
#[derive(Debug, Default)]
pub struct Traffic {
    read: AtomicU64,
    written: AtomicU64,
}

impl Traffic {
    /// Bytes read from the socket so far.
    pub fn read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// Bytes written to the socket so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
}

/// A TCP socket with bounded waits; see the module documentation.
#[derive(Debug)]
pub struct Paced {
    tcp: TcpStream,
    mode: Mode,
    traffic: Arc<Traffic>,
    /// Open mode: a write that would start after this instant reports
    /// `WouldBlock` instead.
    write_budget_end: Option<Instant>,
}

impl Paced {
    /// Wraps a connected socket for the opening phase ending at `deadline`.
    pub fn opening(tcp: TcpStream, deadline: Instant) -> Paced {
        Paced {
            tcp,
            mode: Mode::Opening { deadline },
            traffic: Arc::default(),
            write_budget_end: None,
        }
    }

    /// Switches to the open mode: socket timeouts become the poll interval.
    pub fn set_open(&mut self) -> io::Result<()> {
        self.tcp.set_read_timeout(Some(POLL_INTERVAL))?;
        self.tcp.set_write_timeout(Some(POLL_INTERVAL))?;
        self.mode = Mode::Open { immediate: false };
        Ok(())
    }

    /// In open mode: reads take what the socket already holds, and writes
    /// what it has room for, and fail with `WouldBlock` instead of waiting.
    /// The reader waits for readability with [`wait_readable`] while it
    /// does not hold the connection, so a writer never queues behind an
    /// idle read, and it never waits for room to write a control reply.
    pub fn set_immediate(&mut self, on: bool) {
        if let Mode::Open { immediate } = &mut self.mode {
            *immediate = on;
        }
    }

    /// In open mode: no write starts after `end` (it reports `WouldBlock`),
    /// so whoever holds the connection gives it back by then even while
    /// the bytes keep moving.
    pub fn set_write_budget(&mut self, end: Instant) {
        self.write_budget_end = Some(end);
    }

    /// A second descriptor for the socket, to wait on without the lock.
    pub fn try_clone_fd(&self) -> io::Result<std::os::fd::OwnedFd> {
        Ok(self.tcp.try_clone()?.into())
    }

    /// Bytes written to the socket so far.
    pub fn bytes_written(&self) -> u64 {
        self.traffic.written()
    }

    /// The byte counts of this socket, shared.
    pub fn traffic(&self) -> Arc<Traffic> {
        self.traffic.clone()
    }

    /// The time left before the opening deadline, as a socket timeout.
    fn opening_timeout(deadline: Instant) -> io::Result<Duration> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        Ok(left.max(MIN_SOCKET_TIMEOUT))
    }
}

/// While opening, an expired socket timeout (which some systems report as
/// `WouldBlock`) is a `TimedOut`; once open, it is a `WouldBlock`.
fn normalise(mode: Mode, error: io::Error) -> io::Error {
    match (mode, error.kind()) {
        (Mode::Opening { .. }, io::ErrorKind::WouldBlock) => io::ErrorKind::TimedOut.into(),
        (Mode::Open { .. }, io::ErrorKind::TimedOut) => io::ErrorKind::WouldBlock.into(),
        _ => error,
    }
}

impl Read for Paced {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.mode {
                Mode::Opening { deadline } => {
                    let timeout = Self::opening_timeout(deadline)?;
                    self.tcp.set_read_timeout(Some(timeout))?;
                }
                Mode::Open { immediate: true } => {
                    return match rustix::net::recv(
                        &self.tcp,
                        &mut *buf,
                        rustix::net::RecvFlags::DONTWAIT,
                    ) {
                        Ok((n, _)) => Ok(self.count_read(n)),
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(e) => Err(io::Error::from(e)),
                    };
                }
                Mode::Open { .. } => {}
            }
            match self.tcp.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                result => {
                    return result
                        .map(|n| self.count_read(n))
                        .map_err(|e| normalise(self.mode, e));
                }
            }
        }
    }
}

impl Paced {
    fn count_read(&self, n: usize) -> usize {
        self.traffic.read.fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    fn count_written(&self, n: usize) -> usize {
        self.traffic.written.fetch_add(n as u64, Ordering::Relaxed);
        n
    }
}

impl Write for Paced {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match self.mode {
                Mode::Opening { deadline } => {
                    let timeout = Self::opening_timeout(deadline)?;
                    self.tcp.set_write_timeout(Some(timeout))?;
                }
                Mode::Open { .. }
                    if self
                        .write_budget_end
                        .is_some_and(|end| Instant::now() >= end) =>
                {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Mode::Open { immediate: true } => {
                    use rustix::net::SendFlags;
                    return match rustix::net::send(
                        &self.tcp,
                        buf,
                        SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
                    ) {
                        Ok(n) => Ok(self.count_written(n)),
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(e) => Err(io::Error::from(e)),
                    };
                }
                Mode::Open { immediate: false } => {}
            }
            match self.tcp.write(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(n) => return Ok(self.count_written(n)),
                Err(e) => return Err(normalise(self.mode, e)),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

/// Waits until `fd` is readable (or has hung up), for at most `timeout`.
/// True when it is; false on timeout.
pub fn wait_readable(fd: std::os::fd::BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let timeout = Timespec {
        tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    loop {
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The stream a WebSocket runs on: loopback plain text or TLS.
#[derive(Debug)]
pub enum Stream {
    /// `ws://` to a loopback host.
    Plain(Paced),
    /// `wss://`, after a completed handshake (chain and pin verified).
    Tls(Box<StreamOwned<ClientConnection, Paced>>),
}

impl Stream {
    /// The socket wrapper.
    pub fn paced(&self) -> &Paced {
        match self {
            Stream::Plain(paced) => paced,
            Stream::Tls(tls) => &tls.sock,
        }
    }

    /// The socket wrapper, mutably.
    pub fn paced_mut(&mut self) -> &mut Paced {
        match self {
            Stream::Plain(paced) => paced,
            Stream::Tls(tls) => &mut tls.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(paced) => paced.read(buf),
            Stream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(paced) => paced.write(buf),
            // rustls accepts nothing while its send buffer is full (it
            // reports 0 bytes, which the WebSocket layer would take for a
            // closed connection): that is "try again", like a full socket.
            Stream::Tls(tls) => match tls.write(buf) {
                Ok(0) if !buf.is_empty() => Err(io::ErrorKind::WouldBlock.into()),
                result => result,
            },
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(paced) => paced.flush(),
            Stream::Tls(tls) => tls.flush(),
        }
    }
}
