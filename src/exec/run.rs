//! Starting a command and supervising it (EXEC.md §6, §7, §9): the child
//! runs in its own session with a null stdin and two pipes, which are
//! drained together in one `poll` loop while the timeout and the
//! termination sequence (SIGTERM to the group, 2 s, SIGKILL to whatever
//! remains) are enforced.
//!
//! Everything here is bounded in time: after the leader exits the pipes
//! are drained for at most 2 s, after a timeout at most 2 + 2 + 2 s pass.
//! It must never stop reading a pipe while waiting for the child (a full
//! pipe would block it) and never signal anything but the command's own
//! process group.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal};

use super::output::{Collected, Collector, Stream};

/// How long the group gets between SIGTERM and SIGKILL, the wait for the
/// leader's status after SIGKILL, and the wait for pipe EOF.
pub const GRACE: Duration = Duration::from_secs(2);

/// The largest read from a pipe.
const CHUNK: usize = 64 * 1024;

/// How often the loop looks again when nothing can wake it: group
/// membership after SIGTERM, or the leader's exit on kernels without
/// pidfds (before 5.3).
const TICK: Duration = Duration::from_millis(10);

/// What a supervised command ended with.
#[derive(Debug)]
pub struct Finished {
    /// Exit status, −N for death by signal N, −1 when never collected.
    pub exit_code: i64,
    /// The timeout fired.
    pub timed_out: bool,
    /// The retained output.
    pub output: Collected,
    /// The command's process group, when members outlived the supervision
    /// (background jobs after a normal exit): the owner must terminate it
    /// with [`terminate_group`] when the session or the shim stops.
    pub leftover_group: Option<Pid>,
}

/// Starts `argv` with exactly `env`, in the directory `cwd`, in a new
/// session, stdin `/dev/null`, stdout and stderr piped.
pub fn spawn(
    argv: &[OsString],
    env: &BTreeMap<OsString, OsString>,
    cwd: BorrowedFd<'_>,
) -> io::Result<Child> {
    let Some((program, args)) = argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty argv"));
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::sys::prepare_command_child(&mut command, cwd)?;
    command.spawn()
}

/// Where the supervision loop stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the leader; `None` for a timeout too large to represent.
    Running(Option<Instant>),
    /// SIGTERM sent; SIGKILL at the instant unless the group is gone.
    Terminating(Instant),
    /// SIGKILL sent (or the group gone); waiting for the leader's status.
    Reaping(Instant),
    /// The leader is done; reading the pipes until EOF or the instant.
    Draining(Instant),
}

/// Supervises `child` until it is done (EXEC.md §9) and returns its status
/// and output collected under the budget for `max_file_size_bytes`.
pub fn supervise(mut child: Child, timeout: Duration, max_file_size_bytes: u64) -> Finished {
    let pid = Pid::from_child(&child);
    let mut pipes: [Option<(Stream, OwnedFd)>; 2] = [
        child
            .stdout
            .take()
            .map(|p| (Stream::Stdout, OwnedFd::from(p))),
        child
            .stderr
            .take()
            .map(|p| (Stream::Stderr, OwnedFd::from(p))),
    ];
    // A pidfd becomes readable when the leader exits, so the loop sleeps in
    // `poll` instead of polling the status.
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok();
    let mut collector = Collector::new(max_file_size_bytes);
    let mut buf = vec![0u8; CHUNK];
    let mut status: Option<ExitStatus> = None;
    let mut timed_out = false;
    let mut phase = Phase::Running(Instant::now().checked_add(timeout));
    loop {
        if status.is_none() {
            // An error (ECHILD) cannot happen for a child we own; it would
            // leave the status unknown, reported as −1.
            status = child.try_wait().ok().flatten();
        }
        let now = Instant::now();
        let pipes_open = pipes.iter().any(Option::is_some);
        let next = match phase {
            Phase::Running(deadline) => {
                if status.is_some() {
                    if !pipes_open {
                        break;
                    }
                    Phase::Draining(now + GRACE)
                } else if deadline.is_some_and(|d| now >= d) {
                    timed_out = true;
                    signal_group(pid, Signal::TERM);
                    Phase::Terminating(now + GRACE)
                } else {
                    phase
                }
            }
            Phase::Terminating(kill_at) => {
                if group_gone(pid) {
                    Phase::Reaping(now + GRACE)
                } else if now >= kill_at {
                    signal_group(pid, Signal::KILL);
                    Phase::Reaping(now + GRACE)
                } else {
                    phase
                }
            }
            Phase::Reaping(until) => {
                if status.is_some() || now >= until {
                    Phase::Draining(now + GRACE)
                } else {
                    phase
                }
            }
            Phase::Draining(until) => {
                if !pipes_open || now >= until {
                    break;
                }
                phase
            }
        };
        if next != phase {
            // A step can complete the next one at once (the group is gone
            // and the leader already collected): look again before waiting.
            phase = next;
            continue;
        }
        let wake = match phase {
            Phase::Running(deadline) => deadline,
            Phase::Terminating(at) | Phase::Reaping(at) | Phase::Draining(at) => Some(at),
        };
        let mut wait = wake.map(|w| w.saturating_duration_since(now));
        let needs_tick =
            matches!(phase, Phase::Terminating(_)) || (status.is_none() && pidfd.is_none());
        if needs_tick {
            wait = Some(wait.map_or(TICK, |w| w.min(TICK)));
        }
        let watch_exit = if status.is_none() {
            pidfd.as_ref().map(|fd| fd.as_fd())
        } else {
            None
        };
        wait_and_read(&mut pipes, watch_exit, wait, &mut collector, &mut buf);
    }
    // Closing the read ends: anything still writing gets EPIPE/SIGPIPE.
    drop(pipes);
    let leftover_group = (!group_gone(pid)).then_some(pid);
    let exit_code = match status {
        Some(status) => exit_code(status),
        None => {
            // The leader was sent SIGKILL but not collected within the
            // grace period (e.g. stuck in uninterruptible sleep): collect it
            // in the background so it never stays a zombie.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            -1
        }
    };
    Finished {
        exit_code,
        timed_out,
        output: collector.finish(),
        leftover_group,
    }
}

/// Terminates a leftover process group (EXEC.md §9, §11 L4): SIGTERM,
/// up to 2 s for every member to go, then SIGKILL to whatever remains.
/// Blocks for at most the grace period.
///
/// Only for groups this shim's commands left behind, and only while they
/// may still exist: once a group is empty its id can be reused by an
/// unrelated group, so owners should forget groups [`group_gone`] reports
/// empty rather than keep them for later.
pub fn terminate_group(pgid: Pid) {
    if group_gone(pgid) {
        return;
    }
    signal_group(pgid, Signal::TERM);
    let kill_at = Instant::now() + GRACE;
    while Instant::now() < kill_at {
        if group_gone(pgid) {
            return;
        }
        std::thread::sleep(TICK);
    }
    signal_group(pgid, Signal::KILL);
}

/// One `poll` over the open pipes (and the leader's pidfd) for at most
/// `wait` (`None`: until something happens), then one read from each
/// ready pipe. A pipe at EOF or failing is closed.
fn wait_and_read(
    pipes: &mut [Option<(Stream, OwnedFd)>; 2],
    exit: Option<BorrowedFd<'_>>,
    wait: Option<Duration>,
    collector: &mut Collector,
    buf: &mut [u8],
) {
    let mut ready = [false; 2];
    {
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(3);
        let mut slots = Vec::with_capacity(2);
        for (i, pipe) in pipes.iter().enumerate() {
            if let Some((_, fd)) = pipe {
                fds.push(PollFd::new(fd, PollFlags::IN));
                slots.push(i);
            }
        }
        if let Some(exit) = exit {
            fds.push(PollFd::from_borrowed_fd(exit, PollFlags::IN));
        }
        let timeout = wait.map(|w| Timespec {
            tv_sec: i64::try_from(w.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(w.subsec_nanos()),
        });
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) => {
                for (fd, &slot) in fds.iter().zip(&slots) {
                    ready[slot] = !fd.revents().is_empty();
                }
            }
            // EINTR: the caller loops anyway. Anything else (ENOMEM) must
            // not turn into a blocking read: pause briefly and let the
            // caller's deadlines decide.
            Err(Errno::INTR) => {}
            Err(_) => std::thread::sleep(TICK),
        }
    }
    for (i, pipe) in pipes.iter_mut().enumerate() {
        if !ready[i] {
            continue;
        }
        let Some((stream, fd)) = pipe else {
            continue;
        };
        match rustix::io::read(&*fd, &mut *buf) {
            Ok(0) => *pipe = None,
            Ok(n) => collector.push(*stream, &buf[..n]),
            Err(Errno::INTR | Errno::AGAIN) => {}
            Err(_) => *pipe = None,
        }
    }
}

/// Sends `signal` to the command's process group. A group that no longer
/// exists (`ESRCH`) is the desired state; nothing else can fail for a
/// group of our own child.
fn signal_group(pid: Pid, signal: Signal) {
    let _ = rustix::process::kill_process_group(pid, signal);
}

/// True when no process of the group remains (zombies count as members
/// until reaped).
pub fn group_gone(pid: Pid) -> bool {
    rustix::process::test_kill_process_group(pid) == Err(Errno::SRCH)
}

/// The wire form of an exit status.
fn exit_code(status: ExitStatus) -> i64 {
    match (status.code(), status.signal()) {
        (Some(code), _) => i64::from(code),
        (None, Some(signal)) => -i64::from(signal),
        (None, None) => -1,
    }
}
