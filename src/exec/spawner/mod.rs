//! The shim's side of the spawner process ([`server`]): starts it once,
//! asks it to start commands, and routes each command's exit status back
//! to the thread supervising it.
//!
//! Commands are children of the spawner, not of the shim, so the shim
//! never calls `wait` for them: their status arrives as an `Exited` frame.
//! The shim still reads their output pipes and signals their process
//! groups itself. If the spawner disappears, every pending request fails
//! and every supervisor sees its status channel close; the spawner's own
//! parent-death signal on commands has killed their leaders by then.
//!
//! This module never passes the shim's environment or descriptors to the
//! spawner beyond what one command needs (its directory and two pipe ends),
//! and the socket is close-on-exec on the shim's side.

pub mod server;
pub mod wire;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded};
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use rustix::process::Pid;

use wire::{Frame, WireError};

/// The reserved first argument that selects the spawner mode of the
/// binary (CLI.md §1.2). It only works together with the socket on
/// descriptor [`SOCKET_FD`].
pub const MODE_ARG: &str = "__autogpt-shim-spawner__";

/// The descriptor number on which the spawner finds its socket.
pub const SOCKET_FD: i32 = 3;

/// How long a spawn request may wait for its answer. Forking a small
/// process takes well under a millisecond; a spawner that does not answer
/// in this time is treated as gone.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A started command.
#[derive(Debug)]
pub struct Spawned {
    /// The command's pid, which is also its process-group id.
    pub pid: Pid,
    /// A pidfd that becomes readable when the leader exits (absent on
    /// kernels before 5.3).
    pub pidfd: Option<OwnedFd>,
    /// Delivers the leader's raw wait status once; closes without a value
    /// if the spawner disappears first.
    pub exit: Receiver<i32>,
}

type Reply = Result<Spawned, i32>;

/// Routing state shared with the reader thread.
#[derive(Default)]
struct Routes {
    /// Spawn requests waiting for `Spawned`/`Failed`, by request id.
    pending: HashMap<u64, Sender<Reply>>,
    /// Commands waiting for `Exited`, by pid.
    exits: HashMap<i32, Sender<i32>>,
    /// False once the socket broke: nothing more will be answered.
    closed: bool,
}

struct Shared {
    sock: OwnedFd,
    /// One frame at a time on the socket.
    send: Mutex<()>,
    routes: Mutex<Routes>,
    next_id: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded data stays consistent at every await point; a panic
    // elsewhere must not take command supervision down with it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The handle to a running spawner process. Dropping it shuts the spawner
/// down cleanly (it still terminates anything left).
#[derive(Debug)]
pub struct Spawner {
    shared: Arc<Shared>,
    pid: Pid,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Spawner {
    /// Starts the spawner by re-executing `exe` (the shim binary) in its
    /// hidden mode, in a session of its own, and waits for its hello.
    pub fn start(exe: &Path) -> io::Result<Spawner> {
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        // Never descriptor 3 itself: the hook moves it there with dup2,
        // which a same-number dup would turn into a no-op that keeps
        // close-on-exec set.
        let theirs = rustix::io::fcntl_dupfd_cloexec(&theirs, 10)?;
        let mut command = Command::new(exe);
        command
            .arg(MODE_ARG)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        crate::sys::prepare_spawner_child(&mut command, theirs.as_fd())?;
        let mut child = command.spawn()?;
        drop(theirs);
        // The spawner is this process's child: collect it whenever it ends
        // so it never lingers as a zombie.
        std::thread::Builder::new()
            .name("spawner-reaper".into())
            .spawn(move || {
                let _ = child.wait();
            })?;
        wire::send(ours.as_fd(), &Frame::Hello(wire::MAGIC.to_vec()), &[])?;
        let pid = match wire::recv(ours.as_fd()) {
            Ok((Frame::Ready { pid }, _)) => Pid::from_raw(pid),
            _ => None,
        }
        .ok_or_else(|| io::Error::other("the command spawner did not start"))?;
        let shared = Arc::new(Shared {
            sock: ours,
            send: Mutex::new(()),
            routes: Mutex::new(Routes::default()),
            next_id: AtomicU64::new(1),
        });
        let reader = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("spawner-reader".into())
            .spawn(move || read_loop(&reader))?;
        Ok(Spawner { shared, pid })
    }

    /// The spawner's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// False once the spawner is gone; every later spawn fails.
    pub fn is_alive(&self) -> bool {
        !lock(&self.shared.routes).closed
    }

    /// Starts `argv` with exactly `env` in the directory `cwd`, stdout and
    /// stderr to the given write ends (which the shim no longer needs).
    /// Errors carry the `errno` of the failure (`ENOENT` for a missing
    /// program).
    pub fn spawn(
        &self,
        argv: &[OsString],
        env: &BTreeMap<OsString, OsString>,
        cwd: BorrowedFd<'_>,
        stdout: OwnedFd,
        stderr: OwnedFd,
    ) -> io::Result<Spawned> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = bounded(1);
        {
            let mut routes = lock(&self.shared.routes);
            if routes.closed {
                return Err(gone());
            }
            routes.pending.insert(id, tx);
        }
        let frame = Frame::Spawn {
            id,
            argv: argv.to_vec(),
            env: env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        };
        let sent = {
            let _guard = lock(&self.shared.send);
            wire::send(
                self.shared.sock.as_fd(),
                &frame,
                &[cwd, stdout.as_fd(), stderr.as_fd()],
            )
        };
        drop((stdout, stderr));
        if let Err(e) = sent {
            lock(&self.shared.routes).pending.remove(&id);
            return Err(e);
        }
        match rx.recv_timeout(REPLY_TIMEOUT) {
            Ok(Ok(spawned)) => Ok(spawned),
            Ok(Err(errno)) => Err(io::Error::from_raw_os_error(errno)),
            Err(_) => {
                lock(&self.shared.routes).pending.remove(&id);
                Err(gone())
            }
        }
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        let _guard = lock(&self.shared.send);
        let _ = wire::send(self.shared.sock.as_fd(), &Frame::Shutdown, &[]);
        // The reader thread holds the socket open; shutting it down ends
        // the reader once the spawner closes its side.
        let _ = rustix::net::shutdown(&self.shared.sock, rustix::net::Shutdown::Write);
    }
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the command spawner is not running",
    )
}

/// Routes the spawner's answers until its socket closes; then fails
/// everything still waiting.
fn read_loop(shared: &Shared) {
    loop {
        let received = wire::recv(shared.sock.as_fd());
        let mut routes = lock(&shared.routes);
        match received {
            Ok((Frame::Spawned { id, pid }, mut fds)) => {
                let Some(pid) = Pid::from_raw(pid) else {
                    break;
                };
                // Registered before the request is answered, and frames
                // are read in order, so `Exited` always finds its route.
                let (tx, exit) = bounded(1);
                routes.exits.insert(pid.as_raw_nonzero().get(), tx);
                if let Some(reply) = routes.pending.remove(&id) {
                    let _ = reply.send(Ok(Spawned {
                        pid,
                        pidfd: fds.pop(),
                        exit,
                    }));
                }
            }
            Ok((Frame::Failed { id, errno }, _)) => {
                if let Some(reply) = routes.pending.remove(&id) {
                    let _ = reply.send(Err(errno));
                }
            }
            Ok((Frame::Exited { pid, status }, _)) => {
                if let Some(tx) = routes.exits.remove(&pid) {
                    let _ = tx.send(status);
                }
            }
            Ok(_) | Err(WireError::Closed | WireError::Io(_) | WireError::Malformed(_)) => break,
        }
    }
    let mut routes = lock(&shared.routes);
    routes.closed = true;
    routes.pending.clear();
    // The spawner is gone (killed, or it crashed) and cannot sweep: its
    // parent-death signal took the leaders, and the groups of commands
    // still running are killed here so their members do not outlive it.
    for (&pid, _) in routes.exits.iter() {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
    routes.exits.clear();
}

/// Entry of the hidden spawner mode: `args` are the process arguments
/// after the program name. Returns `None` when this is not a spawner
/// invocation (the caller then parses `args` as usual, which reports the
/// unknown command); otherwise the exit code.
pub fn run_if_requested(args: &[OsString]) -> Option<u8> {
    if args.len() != 1 || args[0] != MODE_ARG {
        return None;
    }
    let sock = crate::sys::take_inherited_socket(SOCKET_FD)?;
    let stream = rustix::net::sockopt::socket_type(&sock).ok() == Some(SocketType::STREAM);
    let unix = rustix::net::sockopt::socket_domain(&sock).ok() == Some(AddressFamily::UNIX);
    if !(stream && unix) {
        return None;
    }
    match server::serve(sock) {
        server::Served::NotAShim => None,
        server::Served::Done => Some(0),
    }
}
