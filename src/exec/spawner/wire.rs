//! The private framing between the shim and its spawner process: a length
//! prefix, a kind byte and fixed-layout fields, with descriptors passed as
//! `SCM_RIGHTS` on the frame's first bytes.
//!
//! Both ends are the same binary, but the spawner still treats every frame
//! as untrusted input: every length is checked against the frame, a frame
//! larger than [`MAX_FRAME`] is refused before anything is allocated, and
//! received descriptors are close-on-exec (`MSG_CMSG_CLOEXEC`) so one
//! command's pipes can never leak into the next command. This module never
//! interprets what it carries.

use std::ffi::OsString;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// The largest frame either side accepts. `execve` refuses far smaller
/// argument lists (a quarter of the stack limit, 2 MiB by default), so a
/// larger request could never run anyway.
pub const MAX_FRAME: usize = 8 * 1024 * 1024;

/// The most descriptors one frame carries (cwd, stdout, stderr and, for a
/// sandboxed command, its Landlock ruleset).
pub const MAX_FDS: usize = 4;

/// The first frame from the shim: proves the peer is the shim and fixes
/// the framing version.
pub const MAGIC: &[u8] = b"autogpt-shim spawner 2";

/// One frame, decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// Shim → spawner, first frame: [`MAGIC`].
    Hello(Vec<u8>),
    /// Shim → spawner: start `argv` with exactly `env`; descriptors: the
    /// working directory, the stdout and the stderr write ends, and for a
    /// sandboxed command the Landlock ruleset it must run under.
    Spawn {
        /// Correlates the reply.
        id: u64,
        /// Whether the command runs without network: in its own network
        /// namespace, behind the socket filter.
        isolate_network: bool,
        /// Program and arguments; the program is looked up on `env`'s PATH.
        argv: Vec<OsString>,
        /// The complete environment of the command.
        env: Vec<(OsString, OsString)>,
    },
    /// Shim → spawner: every command is finished; terminate whatever is
    /// left and exit.
    Shutdown,
    /// Spawner → shim, answer to `Hello`: the spawner's pid.
    Ready {
        /// The spawner's process id.
        pid: i32,
    },
    /// Spawner → shim: the command runs as `pid` (also its process group).
    Spawned {
        /// The request's id.
        id: u64,
        /// The command's pid.
        pid: i32,
    },
    /// Spawner → shim: the command could not be started.
    Failed {
        /// The request's id.
        id: u64,
        /// The `errno` of the failure.
        errno: i32,
    },
    /// Spawner → shim: a command's leader was reaped.
    Exited {
        /// The command's pid.
        pid: i32,
        /// The raw wait status.
        status: i32,
    },
}

const HELLO: u8 = 1;
const SPAWN: u8 = 2;
const SHUTDOWN: u8 = 3;
const READY: u8 = 10;
const SPAWNED: u8 = 11;
const FAILED: u8 = 12;
const EXITED: u8 = 13;

/// Why a frame could not be read.
///
/// Either side answers every error the same way (it stops talking to the
/// peer), so the causes below are carried for the `Debug` text of a failed
/// test and for the unit tests that tell the malformations apart, which the
/// dead-code lint does not count as reads.
#[derive(Debug)]
pub enum WireError {
    /// The peer closed the connection between frames.
    Closed,
    /// A system call failed, or the peer closed mid-frame.
    #[allow(dead_code, reason = "read only through Debug; see the enum's doc")]
    Io(io::Error),
    /// The bytes do not form a valid frame.
    #[allow(dead_code, reason = "read only through Debug and the unit tests")]
    Malformed(&'static str),
}

impl From<Errno> for WireError {
    fn from(e: Errno) -> Self {
        Self::Io(e.into())
    }
}

impl Frame {
    /// The frame's body (without the length prefix).
    pub fn encode(&self) -> Result<Vec<u8>, io::Error> {
        let mut out = Vec::new();
        match self {
            Frame::Hello(magic) => {
                out.push(HELLO);
                put_bytes(&mut out, magic);
            }
            Frame::Spawn {
                id,
                isolate_network,
                argv,
                env,
            } => {
                out.push(SPAWN);
                out.extend_from_slice(&id.to_le_bytes());
                out.push(u8::from(*isolate_network));
                put_len(&mut out, argv.len());
                for arg in argv {
                    put_bytes(&mut out, arg.as_bytes());
                }
                put_len(&mut out, env.len());
                for (name, value) in env {
                    put_bytes(&mut out, name.as_bytes());
                    put_bytes(&mut out, value.as_bytes());
                }
            }
            Frame::Shutdown => out.push(SHUTDOWN),
            Frame::Ready { pid } => {
                out.push(READY);
                out.extend_from_slice(&pid.to_le_bytes());
            }
            Frame::Spawned { id, pid } => {
                out.push(SPAWNED);
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&pid.to_le_bytes());
            }
            Frame::Failed { id, errno } => {
                out.push(FAILED);
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&errno.to_le_bytes());
            }
            Frame::Exited { pid, status } => {
                out.push(EXITED);
                out.extend_from_slice(&pid.to_le_bytes());
                out.extend_from_slice(&status.to_le_bytes());
            }
        }
        if out.len() > MAX_FRAME {
            // E2BIG: what execve would have said about such a command.
            return Err(io::Error::from_raw_os_error(Errno::TOOBIG.raw_os_error()));
        }
        Ok(out)
    }

    /// Decodes a frame body; trailing bytes are an error.
    pub fn decode(body: &[u8]) -> Result<Frame, WireError> {
        let mut r = Reader { rest: body };
        let frame = match r.u8()? {
            HELLO => Frame::Hello(r.bytes()?.to_vec()),
            SPAWN => {
                let id = r.u64()?;
                let isolate_network = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(WireError::Malformed("network flag")),
                };
                let argc = r.len()?;
                let mut argv = Vec::new();
                for _ in 0..argc {
                    argv.push(OsString::from_vec(r.bytes()?.to_vec()));
                }
                let envc = r.len()?;
                let mut env = Vec::new();
                for _ in 0..envc {
                    let name = OsString::from_vec(r.bytes()?.to_vec());
                    let value = OsString::from_vec(r.bytes()?.to_vec());
                    env.push((name, value));
                }
                Frame::Spawn {
                    id,
                    isolate_network,
                    argv,
                    env,
                }
            }
            SHUTDOWN => Frame::Shutdown,
            READY => Frame::Ready { pid: r.i32()? },
            SPAWNED => Frame::Spawned {
                id: r.u64()?,
                pid: r.i32()?,
            },
            FAILED => Frame::Failed {
                id: r.u64()?,
                errno: r.i32()?,
            },
            EXITED => Frame::Exited {
                pid: r.i32()?,
                status: r.i32()?,
            },
            _ => return Err(WireError::Malformed("unknown frame kind")),
        };
        if !r.rest.is_empty() {
            return Err(WireError::Malformed("trailing bytes"));
        }
        Ok(frame)
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    // Lengths above u32 cannot pass MAX_FRAME; saturating keeps the
    // encoder total and the size check reports them.
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            return Err(WireError::Malformed("truncated frame"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    /// A count or length; it can never exceed the bytes left, which bounds
    /// every allocation by the frame size.
    fn len(&mut self) -> Result<usize, WireError> {
        let n = u32::from_le_bytes(self.array()?) as usize;
        if n > self.rest.len() {
            return Err(WireError::Malformed("length beyond the frame"));
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.len()?;
        self.take(n)
    }
}

/// Sends one frame with `fds` attached to its first bytes. Blocks until
/// the whole frame is written.
pub fn send(sock: BorrowedFd<'_>, frame: &Frame, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let body = frame.encode()?;
    let len = u32::try_from(body.len())
        .map_err(|_| io::Error::from_raw_os_error(Errno::TOOBIG.raw_os_error()))?
        .to_le_bytes();
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::from_raw_os_error(Errno::INVAL.raw_os_error()));
    }
    let total = len.len() + body.len();
    let mut sent = 0;
    while sent < total {
        let (a, b) = if sent < len.len() {
            (&len[sent..], &body[..])
        } else {
            (&[][..], &body[sent - len.len()..])
        };
        let iov = [IoSlice::new(a), IoSlice::new(b)];
        let n = if sent == 0 {
            rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL)
        } else {
            let mut none = SendAncillaryBuffer::default();
            rustix::net::sendmsg(sock, &iov, &mut none, SendFlags::NOSIGNAL)
        };
        match n {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Receives one frame and the descriptors that came with it (close-on-exec).
/// Blocks until a whole frame has arrived.
pub fn recv(sock: BorrowedFd<'_>) -> Result<(Frame, Vec<OwnedFd>), WireError> {
    let mut header = [0u8; 4];
    let mut got = 0;
    let mut fds = Vec::new();
    // The descriptors ride on the frame's first bytes; read the header
    // with a control buffer until it is complete.
    while got < header.len() {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [IoSliceMut::new(&mut header[got..])];
        match rustix::net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(msg) if msg.bytes == 0 => {
                return Err(if got == 0 {
                    WireError::Closed
                } else {
                    WireError::Io(io::ErrorKind::UnexpectedEof.into())
                });
            }
            Ok(msg) => {
                got += msg.bytes;
                for message in control.drain() {
                    if let RecvAncillaryMessage::ScmRights(received) = message {
                        fds.extend(received);
                    }
                }
                if msg.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
                    return Err(WireError::Malformed("too many descriptors"));
                }
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if fds.len() > MAX_FDS {
        return Err(WireError::Malformed("too many descriptors"));
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(WireError::Malformed("frame too large"));
    }
    let mut body = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        match rustix::io::read(sock, &mut body[filled..]) {
            Ok(0) => return Err(WireError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => filled += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok((Frame::decode(&body)?, fds))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn every_frame_round_trips() {
        let frames = [
            Frame::Hello(MAGIC.to_vec()),
            Frame::Spawn {
                id: 7,
                isolate_network: true,
                argv: vec![
                    "sh".into(),
                    "-c".into(),
                    OsString::from_vec(vec![0xff, b'x']),
                ],
                env: vec![("PATH".into(), "/bin".into()), ("E".into(), "".into())],
            },
            Frame::Shutdown,
            Frame::Ready { pid: 42 },
            Frame::Spawned { id: 1, pid: 99 },
            Frame::Failed { id: 2, errno: 2 },
            Frame::Exited {
                pid: 99,
                status: 0x0900,
            },
        ];
        for frame in frames {
            let body = frame.encode().unwrap();
            assert_eq!(Frame::decode(&body).unwrap(), frame);
        }
    }

    #[test]
    fn lengths_beyond_the_frame_are_refused_before_allocating() {
        // A SPAWN claiming four billion arguments in an 18-byte frame.
        let mut body = vec![SPAWN];
        body.extend_from_slice(&1u64.to_le_bytes());
        body.push(0);
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Frame::decode(&body),
            Err(WireError::Malformed("length beyond the frame"))
        ));
        let mut flag = vec![SPAWN];
        flag.extend_from_slice(&1u64.to_le_bytes());
        flag.push(2);
        assert!(matches!(
            Frame::decode(&flag),
            Err(WireError::Malformed("network flag"))
        ));
        assert!(matches!(
            Frame::decode(&[EXITED, 1, 2]),
            Err(WireError::Malformed("truncated frame"))
        ));
        assert!(matches!(
            Frame::decode(&[SHUTDOWN, 0]),
            Err(WireError::Malformed("trailing bytes"))
        ));
        assert!(matches!(
            Frame::decode(&[200]),
            Err(WireError::Malformed("unknown frame kind"))
        ));
    }

    #[test]
    fn descriptors_travel_with_their_frame() {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        let (a, b) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        let big = Frame::Spawn {
            id: 3,
            isolate_network: false,
            argv: vec![OsString::from("x".repeat(300_000))],
            env: vec![],
        };
        let writer = std::thread::spawn(move || {
            send(a.as_fd(), &big, &[w.as_fd()]).unwrap();
            send(a.as_fd(), &Frame::Shutdown, &[]).unwrap();
            a
        });
        let (frame, fds) = recv(b.as_fd()).unwrap();
        assert!(matches!(frame, Frame::Spawn { id: 3, .. }));
        assert_eq!(fds.len(), 1);
        let flags = rustix::io::fcntl_getfd(&fds[0]).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
        rustix::io::write(&fds[0], b"ok").unwrap();
        let mut buf = [0u8; 2];
        rustix::io::read(&r, &mut buf).unwrap();
        assert_eq!(&buf, b"ok");
        let (frame, fds) = recv(b.as_fd()).unwrap();
        assert_eq!((frame, fds.len()), (Frame::Shutdown, 0));
        drop(writer.join().unwrap());
        assert!(matches!(recv(b.as_fd()), Err(WireError::Closed)));
    }
}
