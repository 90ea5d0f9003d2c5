//! The spawner process (EXEC.md §11 L2, L3, L5b): a small copy of the shim,
//! started by the daemon in a hidden mode (again if it dies), that forks
//! every command, reaps it, and kills every command and descendant when the
//! shim goes away.
//!
//! Why a separate process: forking copies the parent's page tables, so a
//! shim holding large buffers would pay milliseconds per command (the
//! pre-exec hook forces `fork`); this process stays a few MiB. And because
//! it is every command's parent and a child subreaper, every descendant of
//! a command that loses its parent — including ones that left the group
//! with `setsid` — is re-parented here, where the shutdown sweep finds it.
//!
//! It serves one socket. When the socket reaches EOF without `Shutdown`
//! (the shim was killed, however), or on `Shutdown`, it sends SIGTERM to
//! every command group and to every process it adopted, waits up to 2 s,
//! sends SIGKILL to whatever is left, and exits. It never runs anything the
//! socket did not ask for, never outlives the sweep, and ignores SIGINT and
//! SIGTERM so a terminal or service stop reaches it only through the shim.
//!
//! Like every shim process it is non-dumpable (set at the binary's entry,
//! before this mode is chosen), so the commands it starts cannot read its
//! memory; the daemon runs it inside the commands' cgroup when there is
//! one, and replaces it if it dies.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

use super::contain;
use super::wire::{self, Frame, MAGIC};
use crate::exec::run::{GRACE, group_gone};
use crate::sys::NetworkIsolation;

/// How long the shim has to introduce itself.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the loop reaps adopted orphans and forgets empty groups when
/// nothing else wakes it.
const IDLE_TICK: Duration = Duration::from_millis(200);

/// How long the SIGKILL phase of the sweep keeps looking for stragglers
/// being re-parented here.
const KILL_PHASE: Duration = Duration::from_secs(3);

/// The process exit codes of the spawner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The peer never said the right hello: not a shim. The caller treats
    /// the invocation as an unknown command (exit 2).
    NotAShim,
    /// The sweep ran after a clean shutdown or the shim's disappearance.
    Done,
}

/// A command this process started and has not yet reported.
struct Leader {
    /// Watched for the leader's exit, so reporting it takes no polling.
    pidfd: Option<OwnedFd>,
}

struct State {
    sock: OwnedFd,
    /// Leaders not yet reaped, by pid.
    leaders: BTreeMap<i32, Leader>,
    /// Command groups that may still have members (a group's id is the
    /// leader's pid and cannot be reused while any member exists).
    groups: BTreeSet<i32>,
    /// The identity maps of a command without network, prepared once.
    isolation: NetworkIsolation,
}

/// Runs the spawner on `sock` until the shim goes away.
pub fn serve(sock: OwnedFd) -> Served {
    // Held pending forever: only the shim decides when this process ends.
    // Commands start with an empty mask (the pre-exec hook resets it).
    let _ = crate::sys::block_termination_signals();
    if !hello(&sock) {
        return Served::NotAShim;
    }
    // Orphaned descendants of commands come here instead of to init.
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let mut state = State {
        sock,
        leaders: BTreeMap::new(),
        groups: BTreeSet::new(),
        isolation: NetworkIsolation::new(),
    };
    loop {
        match state.wait() {
            Ok(true) => match wire::recv(state.sock.as_fd()) {
                Ok((
                    Frame::Spawn {
                        id,
                        isolate_network,
                        argv,
                        env,
                    },
                    fds,
                )) => {
                    let network = isolate_network.then_some(state.isolation);
                    if state.spawn(id, &argv, env, fds, network).is_err() {
                        break;
                    }
                }
                // Shutdown, EOF, a broken socket or a frame only a
                // confused peer would send: all end in the sweep.
                Ok(_) | Err(_) => break,
            },
            Ok(false) => {}
            Err(_) => break,
        }
        if state.reap().is_err() {
            break;
        }
    }
    state.sweep();
    Served::Done
}

/// Reads the shim's hello within [`HELLO_TIMEOUT`] and answers it.
fn hello(sock: &OwnedFd) -> bool {
    use rustix::net::sockopt::{Timeout, set_socket_timeout};
    if set_socket_timeout(sock, Timeout::Recv, Some(HELLO_TIMEOUT)).is_err() {
        return false;
    }
    let ok = matches!(wire::recv(sock.as_fd()), Ok((Frame::Hello(m), fds)) if m == MAGIC && fds.is_empty());
    if !ok || set_socket_timeout(sock, Timeout::Recv, None).is_err() {
        return false;
    }
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    wire::send(sock.as_fd(), &Frame::Ready { pid }, &[]).is_ok()
}

impl State {
    /// Sleeps until the socket is readable (true), a leader exits or the
    /// idle tick passes (false).
    fn wait(&self) -> rustix::io::Result<bool> {
        let mut fds = Vec::with_capacity(1 + self.leaders.len());
        fds.push(PollFd::new(&self.sock, PollFlags::IN));
        for leader in self.leaders.values() {
            if let Some(pidfd) = &leader.pidfd {
                fds.push(PollFd::new(pidfd, PollFlags::IN));
            }
        }
        let tick = Timespec {
            tv_sec: 0,
            tv_nsec: i64::from(IDLE_TICK.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&tick)) {
            Ok(_) => Ok(!fds[0].revents().is_empty()),
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Starts one command and reports the outcome. An error means the
    /// shim can no longer be told: time to sweep.
    fn spawn(
        &mut self,
        id: u64,
        argv: &[OsString],
        env: Vec<(OsString, OsString)>,
        fds: Vec<OwnedFd>,
        network: Option<NetworkIsolation>,
    ) -> std::io::Result<()> {
        let started = start(argv, env, fds, network);
        match started {
            Ok(pid) => {
                // Opened before this loop can reap the pid, so it names
                // this command and nothing else.
                let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok();
                let raw = pid.as_raw_nonzero().get();
                self.groups.insert(raw);
                let sent = wire::send(self.sock.as_fd(), &Frame::Spawned { id, pid: raw }, &[]);
                self.leaders.insert(raw, Leader { pidfd });
                sent
            }
            Err(errno) => wire::send(self.sock.as_fd(), &Frame::Failed { id, errno }, &[]),
        }
    }

    /// Reaps every child that has exited: commands are reported, adopted
    /// orphans just disappear. Forgets groups that are empty. A failed
    /// report (the shim is gone) does not stop the reaping; it is returned
    /// once everything is collected.
    fn reap(&mut self) -> std::io::Result<()> {
        let mut reported = Ok(());
        while let Some((pid, status)) = reap_one() {
            let raw = pid.as_raw_nonzero().get();
            if self.leaders.remove(&raw).is_some() && reported.is_ok() {
                reported = wire::send(
                    self.sock.as_fd(),
                    &Frame::Exited {
                        pid: raw,
                        status: status.as_raw(),
                    },
                    &[],
                );
            }
        }
        let leaders = &self.leaders;
        self.groups
            .retain(|&g| leaders.contains_key(&g) || !Pid::from_raw(g).is_none_or(group_gone));
        reported
    }

    /// The end: SIGTERM to every command group and every child (adopted
    /// ones included), up to 2 s for them to go, then SIGKILL, repeated for
    /// stragglers re-parented here while the tree collapses.
    fn sweep(mut self) {
        let mut termed = BTreeSet::new();
        let kill_at = Instant::now() + GRACE;
        loop {
            for &g in &self.groups {
                signal_group(g, Signal::TERM);
            }
            let children = children_of_self();
            for &pid in &children {
                if termed.insert(pid) {
                    signal_pid(pid, Signal::TERM);
                }
            }
            // The shim may be gone: reports are best effort.
            let _ = self.reap();
            if self.groups.is_empty() && children.is_empty() {
                return;
            }
            if Instant::now() >= kill_at {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let give_up = Instant::now() + KILL_PHASE;
        loop {
            for &g in &self.groups {
                signal_group(g, Signal::KILL);
            }
            let children = children_of_self();
            for &pid in &children {
                signal_pid(pid, Signal::KILL);
            }
            // The shim may be gone: reports are best effort.
            let _ = self.reap();
            if (self.groups.is_empty() && children.is_empty()) || Instant::now() >= give_up {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One exited child, if any.
fn reap_one() -> Option<(Pid, rustix::process::WaitStatus)> {
    loop {
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(found) => return found,
            Err(Errno::INTR) => {}
            // ECHILD: no children at all.
            Err(_) => return None,
        }
    }
}

/// Forks and execs one command with the received descriptors (cwd,
/// stdout, stderr, and the Landlock ruleset of a sandboxed command), in
/// its own network namespace with `network`; returns its pid or the
/// `errno` of the failure (tagged with the step, for a confinement step).
fn start(
    argv: &[OsString],
    env: Vec<(OsString, OsString)>,
    fds: Vec<OwnedFd>,
    network: Option<NetworkIsolation>,
) -> Result<Pid, i32> {
    let einval = Errno::INVAL.raw_os_error();
    let mut fds = fds.into_iter();
    let (Some(cwd), Some(stdout), Some(stderr)) = (fds.next(), fds.next(), fds.next()) else {
        return Err(einval);
    };
    // A fourth descriptor is the command's Landlock ruleset.
    let landlock = fds.next();
    if fds.next().is_some() {
        return Err(einval);
    }
    let (program, args) = argv.split_first().ok_or(einval)?;
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(Errno::IO.raw_os_error());
    crate::sys::prepare_command_child(
        &mut command,
        cwd.as_fd(),
        landlock.as_ref().map(AsFd::as_fd),
        network,
    )
    .map_err(errno)?;
    let child = command.spawn().map_err(errno)?;
    // The write ends and the directory close here, so the command's
    // output reaches EOF when the command (not this process) closes it.
    drop(command);
    drop(cwd);
    // `Child` does not wait on drop; the loop reaps the pid itself.
    Pid::from_raw(i32::try_from(child.id()).map_err(|_| einval)?).ok_or(einval)
}

/// The pids of this process's children, adopted orphans included.
fn children_of_self() -> Vec<i32> {
    contain::children_of_self()
        .into_iter()
        .map(|child| child.pid)
        .collect()
}

fn signal_group(pgid: i32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

fn signal_pid(pid: i32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}
