//! The shim's side of the spawner process ([`server`]): starts it, asks it
//! to start commands, routes each command's exit status back to the thread
//! supervising it, and replaces it when it dies.
//!
//! Commands are children of the spawner, not of the shim, so the shim
//! never calls `wait` for them: their status arrives as an `Exited` frame.
//! The shim still reads their output pipes and signals their process
//! groups itself. If the spawner disappears without being asked to
//! (EXEC.md §11 as amended), every pending request fails, every supervisor
//! sees its status channel close, and the shim at once kills the groups of
//! the commands that were running, everything in the commands' cgroup and
//! every orphan re-parented to it ([`contain`]), reports the death to the
//! hook it was given (the daemon audits it) and starts a new spawner;
//! requests made meanwhile wait for it. A spawner that stops answering
//! (stopped by a signal, which is watched for, or not answering a request
//! within [`REPLY_TIMEOUT`]) is killed and goes the same way.
//!
//! This module never passes the shim's environment or descriptors to the
//! spawner beyond what one command needs (its directory and two pipe ends),
//! and the socket is close-on-exec on the shim's side. It never retries a
//! request the dead spawner may already have acted on.

mod contain;
mod server;
mod wire;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError, bounded};
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions, WaitOptions};

pub use contain::{Containment, Mechanism};
use wire::{Frame, WireError};

/// The reserved first argument that selects the spawner mode of the
/// binary (CLI.md §1.2). It only works together with the socket on
/// descriptor [`SOCKET_FD`].
pub const MODE_ARG: &str = "__autogpt-shim-spawner__";

/// The descriptor number on which the spawner finds its socket.
pub const SOCKET_FD: i32 = 3;

/// How long a spawn request may wait for its answer, or for a replacement
/// spawner. Forking a small process takes well under a millisecond; a
/// spawner that does not answer in this time is killed and replaced.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long dropping the handle waits for the spawner's final sweep
/// (SIGTERM, 2 s, SIGKILL and stragglers) and the containment's.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(9);

/// How a command is confined beyond its working directory and
/// environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Confinement<'a> {
    /// The Landlock ruleset it must run under.
    pub landlock: Option<BorrowedFd<'a>>,
    /// Whether it runs without network (its own network namespace, behind
    /// the socket filter).
    pub isolate_network: bool,
}

/// A started command.
#[derive(Debug)]
pub struct Spawned {
    /// The command's pid, which is also its process-group id.
    pub pid: Pid,
    /// The leader's exit status, once the spawner has reaped it.
    pub exit: ExitReport,
}

/// The leader's raw wait status, delivered once by the reader thread, and
/// a descriptor that becomes readable when the status has arrived or can
/// no longer arrive (the spawner went away first). A supervisor's `poll`
/// wakes on it: the status is a frame behind the leader's exit, and
/// looking again on a timer instead would put a tick on every command.
#[derive(Debug)]
pub struct ExitReport {
    status: Receiver<i32>,
    ready: Arc<OwnedFd>,
}

impl ExitReport {
    /// The status if it has arrived; `Disconnected` if it never will.
    pub fn try_recv(&self) -> Result<i32, TryRecvError> {
        self.status.try_recv()
    }

    /// Waits up to `timeout` for the status.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<i32, RecvTimeoutError> {
        self.status.recv_timeout(timeout)
    }

    /// Readable once [`try_recv`](Self::try_recv) no longer says `Empty`;
    /// it stays readable.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.ready.as_fd()
    }
}

/// The reader's end of an [`ExitReport`]. However it ends, delivered or
/// dropped, the report's descriptor becomes readable, and only after the
/// status was sent or the channel closed, so a woken supervisor never
/// finds it still empty.
#[derive(Debug)]
struct ExitRoute {
    status: Option<Sender<i32>>,
    ready: Arc<OwnedFd>,
}

impl ExitRoute {
    /// A route and its report, linked by a new eventfd.
    fn pair() -> io::Result<(ExitRoute, ExitReport)> {
        let flags = rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK;
        let ready = Arc::new(rustix::event::eventfd(0, flags)?);
        let (tx, rx) = bounded(1);
        let route = ExitRoute {
            status: Some(tx),
            ready: Arc::clone(&ready),
        };
        Ok((route, ExitReport { status: rx, ready }))
    }

    fn deliver(mut self, status: i32) {
        if let Some(tx) = self.status.take() {
            let _ = tx.send(status);
        }
    }
}

impl Drop for ExitRoute {
    fn drop(&mut self) {
        drop(self.status.take());
        // Cannot fail short of a counter overflow, which a route writing
        // its 1 once never reaches.
        let _ = rustix::io::write(&*self.ready, &1u64.to_ne_bytes());
    }
}

/// What the daemon is told when its spawner died without being asked to.
#[derive(Debug, Clone)]
pub struct Death {
    /// The dead spawner's pid.
    pub pid: Pid,
    /// Its exit status: the code, −N for death by signal N, −1 unknown.
    pub exit_code: i64,
    /// How many commands were running on it (all killed).
    pub commands: usize,
    /// What contained the commands.
    pub mechanism: Mechanism,
    /// The new spawner's pid, or why none could be started.
    pub replacement: Result<Pid, String>,
}

/// Called once per unexpected death, after the cleanup and the restart.
pub type DeathHook = Box<dyn Fn(&Death) + Send + Sync>;

/// The answer to a spawn request: the command's pid, or the `errno` of
/// the failure.
type Reply = Result<Pid, i32>;

/// A spawn request waiting for its answer.
#[derive(Debug)]
struct Pending {
    reply: Sender<Reply>,
    /// Where the command's status goes once it has started.
    exit: ExitRoute,
}

/// Routing state shared with the reader thread.
#[derive(Default)]
struct Routes {
    /// Spawn requests waiting for `Spawned`/`Failed`, by request id.
    pending: HashMap<u64, Pending>,
    /// Commands running, by pid, with where their `Exited` goes (none when
    /// their request gave up waiting: the command still runs, and its
    /// group is still killed if the spawner dies).
    exits: HashMap<i32, Option<ExitRoute>>,
    /// False once the socket broke: nothing more will be answered.
    closed: bool,
}

/// One spawner process and its socket.
struct Link {
    sock: OwnedFd,
    pid: Pid,
    /// One frame at a time on the socket.
    send: Mutex<()>,
    routes: Mutex<Routes>,
    next_id: AtomicU64,
    /// Signalled when the reader thread has cleaned up after the process.
    finished: Receiver<()>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded data stays consistent at every await point; a panic
    // elsewhere must not take command supervision down with it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which spawner is current.
#[derive(Debug)]
struct Current {
    link: Arc<Link>,
    /// The current link died and a replacement is being started.
    recovering: bool,
    /// The handle is being dropped: nothing is restarted.
    stopping: bool,
}

struct Inner {
    exe: PathBuf,
    containment: Containment,
    current: Mutex<Current>,
    changed: Condvar,
    on_death: Option<DeathHook>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("exe", &self.exe)
            .finish_non_exhaustive()
    }
}

/// The handle to the daemon's spawner. Dropping it shuts the spawner down
/// cleanly (it still terminates anything left) and waits for that.
#[derive(Debug)]
pub struct Spawner {
    inner: Arc<Inner>,
}

/// Why a request did not reach a spawner.
enum SpawnError {
    /// The link was closed before the request was sent: safe to retry on
    /// a replacement.
    Gone,
    /// Anything else, including a link that broke after the request went
    /// out (the command may have started).
    Other(io::Error),
}

impl Spawner {
    /// Starts the spawner by re-executing `exe` (the shim binary) in its
    /// hidden mode, in a session of its own, and waits for its hello. Its
    /// death is contained and it is replaced, without anyone being told.
    pub fn start(exe: &Path) -> io::Result<Spawner> {
        Spawner::start_watched(exe, None)
    }

    /// [`start`](Self::start), with `on_death` called after each
    /// unexpected death has been contained and a replacement started.
    pub fn start_watched(exe: &Path, on_death: Option<DeathHook>) -> io::Result<Spawner> {
        launch_contained(exe)?.watch(exe, on_death)
    }

    /// Starts launching the spawner on a thread of its own, to be finished
    /// by [`Launching::watch`]. Moving a process into a cgroup waits for
    /// the kernel (an RCU grace period, often 10 ms or more); launched
    /// early, that wait overlaps the rest of the daemon's start-up.
    pub fn launch_early(exe: &Path) -> Launching {
        let thread_exe = exe.to_owned();
        let launched = std::thread::Builder::new()
            .name("spawner-launch".to_owned())
            .spawn(move || launch_contained(&thread_exe));
        Launching {
            exe: exe.to_owned(),
            launched: Some(launched),
        }
    }

    /// How the commands are contained.
    pub fn containment(&self) -> &Containment {
        &self.inner.containment
    }

    /// The current spawner's pid.
    pub fn pid(&self) -> Pid {
        lock(&self.inner.current).link.pid
    }

    /// False while no spawner runs (one that died is being replaced, or
    /// could not be).
    pub fn is_alive(&self) -> bool {
        !lock(&lock(&self.inner.current).link.routes).closed
    }

    /// Starts `argv` with exactly `env` in the directory `cwd`, stdout and
    /// stderr to the given write ends (which the shim no longer needs),
    /// under the Landlock ruleset `landlock` when one is given.
    /// Errors carry the `errno` of the failure (`ENOENT` for a missing
    /// program). While a dead spawner is being replaced, waits for the
    /// replacement.
    pub fn spawn(
        &self,
        argv: &[OsString],
        env: &BTreeMap<OsString, OsString>,
        cwd: BorrowedFd<'_>,
        stdout: OwnedFd,
        stderr: OwnedFd,
        confinement: Confinement<'_>,
    ) -> io::Result<Spawned> {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let mut fds = vec![cwd, stdout.as_fd(), stderr.as_fd()];
        fds.extend(confinement.landlock);
        loop {
            let link = self.inner.live_link(deadline)?;
            match link.spawn(argv, env, confinement.isolate_network, &fds) {
                Ok(spawned) => return Ok(spawned),
                Err(SpawnError::Gone) => {}
                Err(SpawnError::Other(e)) => return Err(e),
            }
        }
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        let link = {
            let mut current = lock(&self.inner.current);
            current.stopping = true;
            Arc::clone(&current.link)
        };
        link.shut_down();
        let _ = link.finished.recv_timeout(SHUTDOWN_WAIT);
    }
}

impl Inner {
    /// The current link once it is live, waiting while a replacement is
    /// being started (until `deadline`).
    fn live_link(&self, deadline: Instant) -> io::Result<Arc<Link>> {
        let mut current = lock(&self.current);
        loop {
            if current.stopping {
                return Err(gone());
            }
            if !lock(&current.link.routes).closed {
                return Ok(Arc::clone(&current.link));
            }
            let now = Instant::now();
            if !current.recovering || now >= deadline {
                return Err(gone());
            }
            current = self
                .changed
                .wait_timeout(current, deadline - now)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Kills a spawner that cannot be used and everything it started.
    fn abandon(&self, link: &Link) {
        let _ = rustix::process::kill_process(link.pid, Signal::KILL);
        let _ = reap(link.pid);
        self.containment.kill_all();
    }

    /// After the link's reader saw its socket end: reaps the spawner, kills
    /// what it was responsible for, and, unless the handle is being
    /// dropped, starts a replacement and reports the death.
    fn after_end(self: &Arc<Self>, link: &Arc<Link>, commands: usize) {
        let stopping = lock(&self.current).stopping;
        if !stopping {
            // A spawner whose socket broke is of no use, dead or not.
            let _ = rustix::process::kill_process(link.pid, Signal::KILL);
        }
        let exit_code = reap(link.pid);
        self.containment.kill_all();
        if stopping {
            return;
        }
        let replacement = launch(&self.exe, &self.containment).and_then(|(new, finished)| {
            let pid = new.pid;
            match start_reader(Arc::clone(&new), finished, Arc::downgrade(self)) {
                Ok(()) => Ok((new, pid)),
                Err(e) => {
                    self.abandon(&new);
                    Err(e)
                }
            }
        });
        let replacement = {
            let mut current = lock(&self.current);
            current.recovering = false;
            let replacement = match replacement {
                // The handle was dropped meanwhile: nobody will use it.
                Ok((new, _)) if current.stopping => {
                    new.shut_down();
                    Err("the shim is stopping".to_owned())
                }
                Ok((new, pid)) => {
                    current.link = new;
                    Ok(pid)
                }
                Err(e) => Err(e.to_string()),
            };
            self.changed.notify_all();
            replacement
        };
        if let Some(hook) = &self.on_death {
            hook(&Death {
                pid: link.pid,
                exit_code,
                commands,
                mechanism: self.containment.mechanism(),
                replacement,
            });
        }
    }
}

impl Link {
    /// Asks the spawner to end (it terminates whatever is left first).
    fn shut_down(&self) {
        {
            let _guard = lock(&self.send);
            let _ = wire::send(self.sock.as_fd(), &Frame::Shutdown, &[]);
        }
        // The reader thread holds the socket open; shutting it down ends
        // the reader once the spawner closes its side.
        let _ = rustix::net::shutdown(&self.sock, rustix::net::Shutdown::Write);
    }

    /// Sends one spawn request and waits for its answer.
    fn spawn(
        &self,
        argv: &[OsString],
        env: &BTreeMap<OsString, OsString>,
        isolate_network: bool,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Spawned, SpawnError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = bounded(1);
        let (route, exit) = ExitRoute::pair().map_err(SpawnError::Other)?;
        {
            let mut routes = lock(&self.routes);
            if routes.closed {
                return Err(SpawnError::Gone);
            }
            let pending = Pending {
                reply: tx,
                exit: route,
            };
            routes.pending.insert(id, pending);
        }
        let frame = Frame::Spawn {
            id,
            isolate_network,
            argv: argv.to_vec(),
            env: env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        };
        let sent = {
            let _guard = lock(&self.send);
            wire::send(self.sock.as_fd(), &frame, fds)
        };
        if let Err(e) = sent {
            lock(&self.routes).pending.remove(&id);
            // A frame the spawner did not receive whole was never acted
            // on: a broken socket means a spawner gone, try its successor.
            let broken = matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            );
            return Err(if broken {
                SpawnError::Gone
            } else {
                SpawnError::Other(e)
            });
        }
        match rx.recv_timeout(REPLY_TIMEOUT) {
            Ok(Ok(pid)) => Ok(Spawned { pid, exit }),
            Ok(Err(errno)) => Err(SpawnError::Other(io::Error::from_raw_os_error(errno))),
            Err(RecvTimeoutError::Timeout) => {
                lock(&self.routes).pending.remove(&id);
                // Stopped, frozen or wedged: left alive it would hold every
                // later request for the whole timeout. Killed, it takes the
                // death path and is replaced.
                self.kill_unresponsive();
                Err(SpawnError::Other(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the command spawner did not answer and was replaced",
                )))
            }
            Err(RecvTimeoutError::Disconnected) => Err(SpawnError::Other(gone())),
        }
    }

    /// Kills a spawner that can no longer be relied on to answer, so its
    /// socket ends and the reader contains, audits and replaces it. Only
    /// while the routes are open: the reader reaps the pid only after
    /// closing them, so until then the pid is still this spawner's.
    fn kill_unresponsive(&self) {
        let routes = lock(&self.routes);
        if !routes.closed {
            let _ = rustix::process::kill_process(self.pid, Signal::KILL);
        }
    }
}

/// A spawner being launched by [`Spawner::launch_early`]. Until
/// [`watch`](Self::watch) nothing reads its socket: a death in between is
/// found by the reader's first read and handled (and reported) like any
/// other. Dropped unwatched, it waits for the launch and kills the
/// spawner.
#[derive(Debug)]
pub struct Launching {
    exe: PathBuf,
    launched: Option<io::Result<std::thread::JoinHandle<io::Result<Launched>>>>,
}

impl Launching {
    /// Waits for the launch and watches the spawner from now on, as
    /// [`Spawner::start_watched`] does.
    pub fn watch(mut self, on_death: Option<DeathHook>) -> io::Result<Spawner> {
        self.finish()?.watch(&self.exe, on_death)
    }

    fn finish(&mut self) -> io::Result<Launched> {
        match self.launched.take() {
            Some(Ok(thread)) => thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the spawner's launch thread panicked"))),
            Some(Err(e)) => Err(e),
            None => Err(gone()),
        }
    }
}

impl Drop for Launching {
    fn drop(&mut self) {
        // Nothing left to do once `watch` took the launch.
        if let Ok(launched) = self.finish() {
            let _ = rustix::process::kill_process(launched.link.pid, Signal::KILL);
            let _ = reap(launched.link.pid);
            launched.containment.kill_all();
        }
    }
}

/// A spawner that said hello, in its containment, not yet watched.
#[derive(Debug)]
struct Launched {
    containment: Containment,
    link: Arc<Link>,
    /// The reader's end signal.
    finished: Sender<()>,
}

impl Launched {
    /// Starts the reader that routes the spawner's answers and handles its
    /// death.
    fn watch(self, exe: &Path, on_death: Option<DeathHook>) -> io::Result<Spawner> {
        let Launched {
            containment,
            link,
            finished,
        } = self;
        let inner = Arc::new(Inner {
            exe: exe.to_owned(),
            containment,
            current: Mutex::new(Current {
                link: Arc::clone(&link),
                recovering: false,
                stopping: false,
            }),
            changed: Condvar::new(),
            on_death,
        });
        if let Err(e) = start_reader(link, finished, Arc::downgrade(&inner)) {
            inner.abandon(&lock(&inner.current).link);
            return Err(e);
        }
        Ok(Spawner { inner })
    }
}

/// Sets up the commands' containment and launches a spawner in it.
fn launch_contained(exe: &Path) -> io::Result<Launched> {
    let containment = Containment::set_up();
    let (link, finished) = launch(exe, &containment)?;
    Ok(Launched {
        containment,
        link,
        finished,
    })
}

/// Starts one spawner process (in the commands' cgroup, if there is one)
/// and waits for its hello. The second value is the reader's end signal.
fn launch(exe: &Path, containment: &Containment) -> io::Result<(Arc<Link>, Sender<()>)> {
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
    // `Child` does not wait on drop: the reader thread reaps the pid.
    let pid = contain::register_spawner(|| {
        let child = command.spawn()?;
        i32::try_from(child.id())
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| io::Error::other("the command spawner has no valid pid"))
    })?;
    drop(theirs);
    // Before the hello: until it has one the spawner starts nothing.
    containment.adopt(pid);
    let ready = wire::send(ours.as_fd(), &Frame::Hello(wire::MAGIC.to_vec()), &[])
        .ok()
        .and_then(|()| match wire::recv(ours.as_fd()) {
            Ok((Frame::Ready { pid: said }, _)) => Some(said),
            _ => None,
        });
    if ready != Some(pid.as_raw_nonzero().get()) {
        let _ = rustix::process::kill_process(pid, Signal::KILL);
        let _ = reap(pid);
        return Err(io::Error::other("the command spawner did not start"));
    }
    let (done, finished) = bounded(1);
    let link = Arc::new(Link {
        sock: ours,
        pid,
        send: Mutex::new(()),
        routes: Mutex::new(Routes::default()),
        next_id: AtomicU64::new(1),
        finished,
    });
    Ok((link, done))
}

/// Starts the thread that routes the link's answers and cleans up after
/// its process, and the one that watches it being stopped.
fn start_reader(link: Arc<Link>, done: Sender<()>, inner: Weak<Inner>) -> io::Result<()> {
    start_stop_watch(&link);
    std::thread::Builder::new()
        .name("spawner-reader".into())
        .spawn(move || {
            let commands = read_loop(&link, &inner);
            if let Some(inner) = inner.upgrade() {
                inner.after_end(&link, commands);
            } else {
                let _ = reap(link.pid);
            }
            let _ = done.send(());
        })
        .map(|_| ())
}

/// Kills the spawner as soon as it is stopped (a command can send it
/// `SIGSTOP`): a stopped spawner answers nothing, and the reply timeout
/// would only notice it one request later. Watched through a pidfd, which
/// names this process and no other; it waits without collecting anything,
/// so the reader still reaps the exit status. Without pidfds (Linux before
/// 5.4) the reply timeout alone notices.
fn start_stop_watch(link: &Arc<Link>) {
    let Ok(pidfd) = rustix::process::pidfd_open(link.pid, PidfdFlags::empty()) else {
        return;
    };
    let link = Arc::clone(link);
    let _ = std::thread::Builder::new()
        .name("spawner-watch".into())
        .spawn(move || {
            let options = WaitIdOptions::STOPPED | WaitIdOptions::EXITED | WaitIdOptions::NOWAIT;
            loop {
                match rustix::process::waitid(WaitId::PidFd(pidfd.as_fd()), options) {
                    Ok(Some(status)) if status.stopped() => {
                        link.kill_unresponsive();
                        return;
                    }
                    Err(rustix::io::Errno::INTR) => {}
                    // Exited (left for the reader to collect) or unwatchable.
                    _ => return,
                }
            }
        });
}

/// Waits for the spawner `pid` to end and collects it; returns its exit
/// status in the wire form (−N for signal N, −1 when none was collected).
fn reap(pid: Pid) -> i64 {
    let status = loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Ok(found) => break found.map(|(_, status)| status),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break None,
        }
    };
    contain::unregister_spawner(pid);
    match status {
        Some(status) => match (status.exit_status(), status.terminating_signal()) {
            (Some(code), _) => i64::from(code),
            (None, Some(signal)) => -i64::from(signal),
            (None, None) => -1,
        },
        None => -1,
    }
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the command spawner is not running",
    )
}

/// Routes the spawner's answers until its socket closes; then fails
/// everything still waiting and kills the groups of the commands still
/// running. Returns how many there were.
fn read_loop(link: &Link, inner: &Weak<Inner>) -> usize {
    loop {
        let received = wire::recv(link.sock.as_fd());
        let mut routes = lock(&link.routes);
        match received {
            Ok((Frame::Spawned { id, pid }, _)) => {
                let Some(pid) = Pid::from_raw(pid) else {
                    break;
                };
                // Registered before the request is answered, and frames
                // are read in order, so `Exited` always finds its route.
                let (reply, route) = routes
                    .pending
                    .remove(&id)
                    .map(|pending| (pending.reply, pending.exit))
                    .unzip();
                routes.exits.insert(pid.as_raw_nonzero().get(), route);
                if let Some(reply) = reply {
                    let _ = reply.send(Ok(pid));
                }
            }
            Ok((Frame::Failed { id, errno }, _)) => {
                if let Some(pending) = routes.pending.remove(&id) {
                    let _ = pending.reply.send(Err(errno));
                }
            }
            Ok((Frame::Exited { pid, status }, _)) => {
                if let Some(Some(route)) = routes.exits.remove(&pid) {
                    route.deliver(status);
                }
            }
            Ok(_) | Err(WireError::Closed | WireError::Io(_) | WireError::Malformed(_)) => break,
        }
    }
    // Marked before the routes close, so a request that finds them closed
    // waits for the replacement instead of failing.
    if let Some(inner) = inner.upgrade() {
        let mut current = lock(&inner.current);
        current.recovering = !current.stopping;
    }
    let mut routes = lock(&link.routes);
    routes.closed = true;
    routes.pending.clear();
    // The spawner is gone (killed, or it crashed) and cannot sweep: its
    // parent-death signal took the leaders, and the groups of commands
    // still running are killed here so their members do not outlive it.
    for (&pid, _) in routes.exits.iter() {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        }
    }
    let commands = routes.exits.len();
    routes.exits.clear();
    commands
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `fd` is readable now.
    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut fds = [rustix::event::PollFd::from_borrowed_fd(
            fd,
            rustix::event::PollFlags::IN,
        )];
        let now = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&now)).is_ok_and(|n| n == 1)
    }

    #[test]
    fn an_exit_report_is_readable_only_once_its_status_is_in() {
        let (route, report) = ExitRoute::pair().expect("eventfd");
        assert!(!readable(report.fd()), "readable before any status");
        assert_eq!(report.try_recv(), Err(TryRecvError::Empty));
        route.deliver(9);
        assert!(readable(report.fd()), "not readable with the status in");
        assert_eq!(report.try_recv(), Ok(9));
    }

    #[test]
    fn an_exit_report_whose_route_is_dropped_wakes_with_no_status() {
        // The spawner died: the reader drops the routes it still holds.
        let (route, report) = ExitRoute::pair().expect("eventfd");
        drop(route);
        assert!(readable(report.fd()), "a lost status never woke anyone");
        assert_eq!(report.try_recv(), Err(TryRecvError::Disconnected));
    }
}
