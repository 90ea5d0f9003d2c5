//! Starting a command and supervising it (EXEC.md §6, §7, §9): the child
//! runs in its own session with a null stdin and two pipes, which are
//! drained together in one `poll` loop while the timeout and the
//! termination sequence (SIGTERM to the group, 2 s, SIGKILL to whatever
//! remains) are enforced.
//!
//! Everything here is bounded in time: after the leader exits the pipes
//! are drained for at most 2 s, after a timeout at most 2 + 2 + 2 s pass.
//! A command that must be answered by an instant (the platform's deadline)
//! has the sequence started early and shortened so that it ends by then.
//! It must never stop reading a pipe while waiting for the child (a full
//! pipe would block it) and never signal anything but the command's own
//! process group.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crossbeam_channel::TryRecvError;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Pid, Signal};

use super::cancel::Cancel;
use super::output::{Collected, Collector, Stream};
use super::spawner::{Confinement, Spawned, Spawner};

/// How long the group gets between SIGTERM and SIGKILL, the wait for the
/// leader's status after SIGKILL, and the wait for pipe EOF.
pub const GRACE: Duration = Duration::from_secs(2);

/// The largest read from a pipe.
const CHUNK: usize = 64 * 1024;

/// How often the loop looks again when nothing can wake it: group
/// membership after SIGTERM.
const TICK: Duration = Duration::from_millis(10);

/// The two waits after SIGKILL (the leader's status, pipe EOF) when the
/// platform's deadline bounds the result. After SIGKILL both normally end
/// at once; they only bound how long a result waits for a process that
/// cannot die or a pipe held outside the group, and the output already in
/// the pipes is read either way, so they need not be as long as the grace.
const AFTER_KILL_WAIT: Duration = Duration::from_millis(250);

/// The instant a command's result must be ready by (the platform's
/// deadline less what sending takes), and whether the command's timeout is
/// the platform's wait itself rather than a shorter one it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultBy {
    /// The instant.
    pub instant: Instant,
    /// The timeout is the platform's whole wait: the termination sequence
    /// is started early enough to be over by [`ResultBy::instant`].
    pub timeout_is_the_wait: bool,
}

/// When the termination sequence starts and how long each of its parts
/// lasts (SIGTERM → SIGKILL, the leader's status, pipe EOF; the drain after
/// a normal exit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Schedule {
    /// `None`: a timeout too large to represent.
    stop_at: Option<Instant>,
    grace: Duration,
    /// Each wait after SIGKILL.
    wait: Duration,
    /// When the result must be ready, and the SIGKILL must come by then
    /// less the two waits.
    result_by: Option<Instant>,
}

impl Schedule {
    /// From `now`, without a deadline: the sequence starts at the timeout,
    /// the grace and each wait last [`GRACE`] (EXEC.md §9).
    ///
    /// With one, the waits after SIGKILL last [`AFTER_KILL_WAIT`], and the
    /// SIGKILL comes at the latest when only they are left before it. A
    /// timeout that is the platform's wait also starts the sequence early
    /// enough to be over in time: the full grace while that leaves the
    /// command at least as long to run as the sequence takes, all parts
    /// shortened in proportion beyond, so a short deadline still lets the
    /// command run for half of it and the group still gets a grace period.
    /// A shorter timeout keeps its instant; only its grace may be cut.
    fn new(now: Instant, timeout: Duration, result_by: Option<ResultBy>) -> Schedule {
        let at_timeout = now.checked_add(timeout);
        let Some(result_by) = result_by else {
            return Schedule {
                stop_at: at_timeout,
                grace: GRACE,
                wait: GRACE,
                result_by: None,
            };
        };
        let end = result_by.instant;
        let budget = end.saturating_duration_since(now);
        let full = GRACE + AFTER_KILL_WAIT * 2;
        let sequence = full.min(budget / 2);
        let (grace, wait) = if sequence == full {
            (GRACE, AFTER_KILL_WAIT)
        } else {
            let share = sequence.as_secs_f64() / full.as_secs_f64();
            (GRACE.mul_f64(share), AFTER_KILL_WAIT.mul_f64(share))
        };
        if !result_by.timeout_is_the_wait {
            return Schedule {
                stop_at: at_timeout,
                grace: GRACE,
                wait,
                result_by: Some(end),
            };
        }
        let latest = now + (budget - sequence);
        Schedule {
            stop_at: Some(at_timeout.map_or(latest, |t| t.min(latest))),
            grace,
            wait,
            result_by: Some(end),
        }
    }

    /// When the SIGKILL of a SIGTERM sent `now` is due.
    fn kill_at(&self, now: Instant) -> Instant {
        let at = now + self.grace;
        match self.result_by {
            Some(end) => at.min(end.checked_sub(self.wait * 2).unwrap_or(end)),
            None => at,
        }
    }

    /// The end of the drain after a command that exited on its own `now`:
    /// up to [`GRACE`] for the pipes, but not past the result's instant
    /// unless that leaves less than a wait.
    fn drain_until(&self, now: Instant) -> Instant {
        let left = self
            .result_by
            .map_or(GRACE, |end| end.saturating_duration_since(now));
        // `wait` is never longer than the grace.
        now + GRACE.min(left).max(self.wait)
    }
}

/// What a supervised command ended with.
#[derive(Debug)]
pub struct Finished {
    /// Exit status, −N for death by signal N, −1 when never collected.
    pub exit_code: i64,
    /// The timeout fired.
    pub timed_out: bool,
    /// The cancellation token tripped first: no result is to be sent.
    pub cancelled: bool,
    /// The retained output.
    pub output: Collected,
    /// The command's process group, when members outlived the supervision
    /// (background jobs after a normal exit): the owner must terminate it
    /// with [`terminate_group`] when the session or the shim stops.
    pub leftover_group: Option<Pid>,
}

/// The command's ends of its output pipes, and ours.
#[derive(Debug)]
pub struct Pipes {
    /// Our read ends.
    pub stdout: OwnedFd,
    /// Our read end of stderr.
    pub stderr: OwnedFd,
    /// The command's write ends, handed to the spawner.
    pub child_stdout: OwnedFd,
    /// The command's stderr write end.
    pub child_stderr: OwnedFd,
}

impl Pipes {
    /// Two close-on-exec pipes.
    pub fn new() -> io::Result<Pipes> {
        let flags = rustix::pipe::PipeFlags::CLOEXEC;
        let (stdout, child_stdout) = rustix::pipe::pipe_with(flags)?;
        let (stderr, child_stderr) = rustix::pipe::pipe_with(flags)?;
        Ok(Pipes {
            stdout,
            stderr,
            child_stdout,
            child_stderr,
        })
    }
}

/// Starts `argv` with exactly `env`, in the directory `cwd`, through the
/// spawner: a new session, stdin `/dev/null`, stdout and stderr piped,
/// under the Landlock ruleset `landlock` when given. Returns the command and our read ends.
pub fn spawn(
    spawner: &Spawner,
    argv: &[OsString],
    env: &BTreeMap<OsString, OsString>,
    cwd: BorrowedFd<'_>,
    confinement: Confinement<'_>,
) -> io::Result<(Spawned, [OwnedFd; 2])> {
    if argv.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty argv"));
    }
    let pipes = Pipes::new()?;
    let spawned = spawner.spawn(
        argv,
        env,
        cwd,
        pipes.child_stdout,
        pipes.child_stderr,
        confinement,
    )?;
    Ok((spawned, [pipes.stdout, pipes.stderr]))
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

/// Why the termination sequence started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Timeout,
    Cancelled,
}

/// Supervises `child` until it is done (EXEC.md §9) and returns its status
/// and output collected under the budget for `max_file_size_bytes`. A
/// tripped `cancel` runs the same termination sequence as the timeout and
/// marks the result cancelled. With `end_by`, the termination sequence
/// is shaped so that the result is ready by then (see [`Schedule::new`]),
/// and a command stopped for it is reported as timed out.
pub fn supervise(
    child: Spawned,
    output: [OwnedFd; 2],
    timeout: Duration,
    result_by: Option<ResultBy>,
    max_file_size_bytes: u64,
    cancel: &Cancel,
) -> Finished {
    let pid = child.pid;
    let [stdout, stderr] = output;
    let mut pipes: [Option<(Stream, OwnedFd)>; 2] = [
        Some((Stream::Stdout, stdout)),
        Some((Stream::Stderr, stderr)),
    ];
    let mut collector = Collector::new(max_file_size_bytes);
    let mut buf = vec![0u8; CHUNK];
    let mut status: Option<ExitStatus> = None;
    // The spawner went away before reporting: the status is lost (the
    // leader was killed by its parent-death signal).
    let mut status_lost = false;
    let mut stop: Option<Stop> = None;
    let schedule = Schedule::new(Instant::now(), timeout, result_by);
    let mut phase = Phase::Running(schedule.stop_at);
    loop {
        if status.is_none() && !status_lost {
            match child.exit.try_recv() {
                Ok(raw) => status = Some(ExitStatus::from_raw(raw)),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => status_lost = true,
            }
        }
        let collected = status.is_some() || status_lost;
        let now = Instant::now();
        let pipes_open = pipes.iter().any(Option::is_some);
        let next = match phase {
            Phase::Running(deadline) => {
                if collected {
                    if !pipes_open {
                        break;
                    }
                    Phase::Draining(schedule.drain_until(now))
                } else if stop.is_none() && cancel.is_cancelled() {
                    stop = Some(Stop::Cancelled);
                    signal_group(pid, Signal::TERM);
                    Phase::Terminating(schedule.kill_at(now))
                } else if deadline.is_some_and(|d| now >= d) {
                    stop = Some(Stop::Timeout);
                    signal_group(pid, Signal::TERM);
                    Phase::Terminating(schedule.kill_at(now))
                } else {
                    phase
                }
            }
            Phase::Terminating(kill_at) => {
                if group_gone(pid) {
                    Phase::Reaping(now + schedule.wait)
                } else if now >= kill_at {
                    signal_group(pid, Signal::KILL);
                    Phase::Reaping(now + schedule.wait)
                } else {
                    phase
                }
            }
            Phase::Reaping(until) => {
                if collected || now >= until {
                    Phase::Draining(now + schedule.wait)
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
        // Group membership after SIGTERM has no descriptor to wait on.
        if matches!(phase, Phase::Terminating(_)) {
            wait = Some(wait.map_or(TICK, |w| w.min(TICK)));
        }
        // The report's descriptor stays readable once it fired: watched
        // only until the status is in.
        let watch_exit = (!collected).then(|| child.exit.fd());
        let watch_cancel = (stop.is_none() && !collected).then(|| cancel.fd());
        wait_and_read(
            &mut pipes,
            [watch_exit, watch_cancel],
            wait,
            &mut collector,
            &mut buf,
        );
    }
    // Closing the read ends: anything still writing gets EPIPE/SIGPIPE.
    drop(pipes);
    let leftover_group = (!group_gone(pid)).then_some(pid);
    let exit_code = status.map_or(-1, exit_code);
    Finished {
        exit_code,
        timed_out: stop == Some(Stop::Timeout),
        cancelled: stop == Some(Stop::Cancelled),
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

/// One `poll` over the open pipes and the extra descriptors (the leader's
/// exit report, the cancellation token), which only wake it, for at most
/// `wait` (`None`: until something happens), then one read from each
/// ready pipe. A pipe at EOF or failing is closed.
fn wait_and_read(
    pipes: &mut [Option<(Stream, OwnedFd)>; 2],
    extra: [Option<BorrowedFd<'_>>; 2],
    wait: Option<Duration>,
    collector: &mut Collector,
    buf: &mut [u8],
) {
    let mut ready = [false; 2];
    {
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(4);
        let mut slots = Vec::with_capacity(2);
        for (i, pipe) in pipes.iter().enumerate() {
            if let Some((_, fd)) = pipe {
                fds.push(PollFd::new(fd, PollFlags::IN));
                slots.push(i);
            }
        }
        for fd in extra.into_iter().flatten() {
            fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
        }
        let timeout = wait.map(|w| Timespec {
            tv_sec: i64::try_from(w.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(w.subsec_nanos()),
        });
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) => {
                // The pipes come first in `fds`.
                for (fd, &i) in fds.iter().zip(&slots) {
                    ready[i] = !fd.revents().is_empty();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: f64) -> Duration {
        Duration::from_secs_f64(n)
    }

    #[test]
    fn without_an_end_the_sequence_starts_at_the_timeout_with_full_waits() {
        let now = Instant::now();
        let schedule = Schedule::new(now, secs(5.0), None);
        assert_eq!(schedule.stop_at, Some(now + secs(5.0)));
        assert_eq!((schedule.grace, schedule.wait), (GRACE, GRACE));
        assert_eq!(schedule.kill_at(now), now + GRACE);
        assert_eq!(schedule.drain_until(now), now + GRACE);
    }

    fn bounded(instant: Instant) -> Option<ResultBy> {
        Some(ResultBy {
            instant,
            timeout_is_the_wait: true,
        })
    }

    fn shorter(instant: Instant) -> Option<ResultBy> {
        Some(ResultBy {
            instant,
            timeout_is_the_wait: false,
        })
    }

    #[test]
    fn a_distant_end_keeps_the_full_grace_and_starts_it_in_time() {
        let now = Instant::now();
        let schedule = Schedule::new(now, secs(30.0), bounded(now + secs(28.5)));
        assert_eq!((schedule.grace, schedule.wait), (GRACE, AFTER_KILL_WAIT));
        assert_eq!(schedule.stop_at, Some(now + secs(26.0)));
        assert_eq!(schedule.kill_at(now + secs(26.0)), now + secs(28.0));
    }

    #[test]
    fn a_normal_exit_drains_for_the_full_grace_unless_the_end_is_nearer() {
        let now = Instant::now();
        let schedule = Schedule::new(now, secs(30.0), bounded(now + secs(28.5)));
        // Background output a little after the exit is still collected.
        assert_eq!(schedule.drain_until(now + secs(1.0)), now + secs(3.0));
        // Just before the end, the drain stops at the end…
        assert_eq!(schedule.drain_until(now + secs(27.5)), now + secs(28.5));
        // …but never shorter than a wait.
        assert_eq!(
            schedule.drain_until(now + secs(28.4)),
            now + secs(28.4) + AFTER_KILL_WAIT
        );
    }

    #[test]
    fn a_near_end_shortens_the_sequence_to_half_of_what_is_left() {
        let now = Instant::now();
        let schedule = Schedule::new(now, secs(3.0), bounded(now + secs(1.5)));
        assert_eq!(schedule.stop_at, Some(now + secs(0.75)));
        let sequence = schedule.grace + schedule.wait * 2;
        assert!(sequence.abs_diff(secs(0.75)) < secs(0.001), "{sequence:?}");
        assert!(schedule.grace > schedule.wait * 4);
    }

    #[test]
    fn a_shorter_timeout_keeps_its_instant_and_its_kill_comes_in_time() {
        let now = Instant::now();
        let schedule = Schedule::new(now, secs(29.0), shorter(now + secs(28.5)));
        assert_eq!(schedule.stop_at, Some(now + secs(29.0)));
        // Past the end already: SIGKILL at once after the SIGTERM.
        let term = now + secs(29.0);
        assert!(schedule.kill_at(term) <= term);
        let early = Schedule::new(now, secs(10.0), shorter(now + secs(28.5)));
        assert_eq!(early.stop_at, Some(now + secs(10.0)));
        assert_eq!(early.kill_at(now + secs(10.0)), now + secs(12.0));
        let close = Schedule::new(now, secs(27.0), shorter(now + secs(28.5)));
        assert_eq!(close.kill_at(now + secs(27.0)), now + secs(28.0));
    }

    #[test]
    fn an_earlier_timeout_is_kept_and_a_passed_end_stops_at_once() {
        let now = Instant::now();
        let early = Schedule::new(now, secs(1.0), bounded(now + secs(28.5)));
        assert_eq!(early.stop_at, Some(now + secs(1.0)));
        let passed = Schedule::new(now, secs(3.0), bounded(now));
        assert_eq!(passed.stop_at, Some(now));
        assert_eq!(
            (passed.grace, passed.wait),
            (Duration::ZERO, Duration::ZERO)
        );
    }
}
