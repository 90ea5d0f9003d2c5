//! Local approval of the commands a rule says to `ask` about: the registry
//! of questions waiting for an answer, the Unix socket (`approvals.sock`
//! in the state directory, mode 0600) through which `autogpt-shim approve`
//! and `deny` list and answer them, and a desktop notification where one
//! can be shown.
//!
//! The socket speaks one JSON line each way per connection: `{"list":
//! true}` answers `{"pending": [...]}`; `{"decide": ID, "approve": BOOL}`
//! answers `{"decided": ID}` or `{"error": "..."}`. A peer that is not this
//! user (by `SO_PEERCRED`), or that is one of the shim's own descendants
//! (a command, or something a command left running: a command must never
//! answer for itself), is closed without an answer. A request is read with
//! a size bound and one deadline for the whole exchange, on a thread of
//! its own (at most [`MAX_CLIENTS`] at once), so a slow client holds up
//! nobody else.
//!
//! This module never answers a question by itself: an unanswered question
//! times out (the command is refused), and a question leaves the registry
//! as soon as its command stops waiting, so a late answer can never start
//! a command nobody is waiting for.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::exec::Cancel;
use crate::exec::policy::{Answer, Approver, Question};

/// The socket's name in the state directory.
pub const SOCKET_NAME: &str = "approvals.sock";

/// The longest request line a client may send.
const MAX_REQUEST_BYTES: u64 = 4096;

/// How long a client may take to send its request and read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a waiting command looks at its cancellation.
const CANCEL_POLL: Duration = Duration::from_millis(100);

/// How often the socket thread looks at its stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(200);

/// Connections served at once; more are closed at once.
const MAX_CLIENTS: usize = 4;

/// The longest command a list shows; longer ones are cut, and say so.
const MAX_SHOWN_COMMAND: usize = 64 * 1024;

/// The largest answer the client reads.
const MAX_REPLY_BYTES: u64 = 4 * 1024 * 1024;

/// A request on the socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientRequest {
    /// Asks for the waiting questions.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub list: bool,
    /// Answers the question with this id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decide: Option<u64>,
    /// The answer, with `decide`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve: Option<bool>,
}

/// One waiting question as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingView {
    /// What `decide` names it by.
    pub id: u64,
    /// The session the command belongs to.
    pub session_id: String,
    /// The full command.
    pub command: String,
    /// Its working directory.
    pub cwd: String,
    /// The rule that asked.
    pub rule: String,
    /// Whole seconds until it times out.
    pub seconds_left: u64,
}

/// An answer on the socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientReply {
    /// The answer to `list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Vec<PendingView>>,
    /// The question `decide` answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<u64>,
    /// Why the request was not done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The questions waiting for an answer.
pub struct Approvals {
    state: Mutex<State>,
    changed: Condvar,
    /// `notify-send`, when a desktop session can show its notification.
    notifier: Option<(PathBuf, Vec<(String, String)>)>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("notifier", &self.notifier.as_ref().map(|(p, _)| p))
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
}

struct Pending {
    question: Question,
    deadline: Instant,
    answer: Option<bool>,
}

impl Approvals {
    /// A registry; `notifier` is `notify-send` and the environment it
    /// needs to reach the desktop, when there is one.
    pub fn new(notifier: Option<(PathBuf, Vec<(String, String)>)>) -> Approvals {
        Approvals {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            notifier,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The waiting questions, oldest first.
    pub fn list(&self) -> Vec<PendingView> {
        let now = Instant::now();
        self.lock()
            .pending
            .iter()
            .filter(|(_, p)| p.answer.is_none())
            .map(|(id, p)| PendingView {
                id: *id,
                session_id: p.question.session_id.clone(),
                command: shown_command(&p.question.command),
                cwd: p.question.cwd.clone(),
                rule: p.question.rule.clone(),
                seconds_left: p.deadline.saturating_duration_since(now).as_secs(),
            })
            .collect()
    }

    /// Answers question `id`; `Err` when no such question is waiting (it
    /// was answered, timed out or never existed).
    pub fn decide(&self, id: u64, approve: bool) -> Result<(), String> {
        let mut state = self.lock();
        let now = Instant::now();
        match state.pending.get_mut(&id) {
            // Past its deadline a question is as good as timed out, even
            // if its command has not looked yet.
            Some(pending) if pending.answer.is_none() && now < pending.deadline => {
                pending.answer = Some(approve);
                drop(state);
                self.changed.notify_all();
                Ok(())
            }
            _ => Err(format!(
                "no command {id} is waiting for approval (it was answered, timed out or never existed)"
            )),
        }
    }

    /// Shows a desktop notification, without waiting for it.
    fn notify(&self, question: &Question) {
        let Some((program, env)) = &self.notifier else {
            return;
        };
        let summary = "autogpt-shim: a command waits for your approval";
        let body = format!(
            "{}\nrule \"{}\" — run `autogpt-shim approve` or `autogpt-shim deny`",
            crate::text::clip(&question.command, 200),
            question.rule
        );
        let child = std::process::Command::new(program)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .args(["--app-name=autogpt-shim", "--", summary, &body])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Ok(mut child) = child {
            // Reaped off the command's path; the notification is a courtesy.
            let _ = std::thread::Builder::new()
                .name("notify".into())
                .spawn(move || child.wait());
        }
    }
}

impl Approver for Approvals {
    fn ask(&self, question: &Question, wait: Duration, cancel: &Cancel) -> Answer {
        let asked = Instant::now();
        let deadline = asked.checked_add(wait).unwrap_or(asked);
        let id = {
            let mut state = self.lock();
            state.next_id += 1;
            let id = state.next_id;
            state.pending.insert(
                id,
                Pending {
                    question: question.clone(),
                    deadline,
                    answer: None,
                },
            );
            id
        };
        self.notify(question);
        let mut state = self.lock();
        let answer = loop {
            match state.pending.get(&id).and_then(|p| p.answer) {
                Some(true) => break Answer::Approved,
                Some(false) => break Answer::Denied,
                None => {}
            }
            if cancel.is_cancelled() {
                break Answer::Cancelled;
            }
            let now = Instant::now();
            if now >= deadline {
                break Answer::TimedOut;
            }
            let slice = deadline.saturating_duration_since(now).min(CANCEL_POLL);
            state = self
                .changed
                .wait_timeout(state, slice)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        };
        state.pending.remove(&id);
        answer
    }
}

/// The socket and the thread serving it; stopping (dropping) it removes
/// the socket file.
#[derive(Debug)]
pub struct ApprovalSocket {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ApprovalSocket {
    /// Binds `approvals.sock` in `state_dir` (replacing a stale socket, never
    /// anything else) for this user only, and serves `approvals` on it.
    pub fn start(approvals: Arc<Approvals>, state_dir: &Path) -> Result<ApprovalSocket, String> {
        use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .map_err(|e| format!("{}: {e}", state_dir.display()))?;
        let path = state_dir.join(SOCKET_NAME);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_socket() => {
                // Left by a daemon that died; only one daemon runs at a time
                // (it holds the audit log), so nobody listens on it.
                std::fs::remove_file(&path).map_err(|e| {
                    format!("{}: cannot remove the stale socket: {e}", path.display())
                })?;
            }
            Ok(_) => {
                return Err(format!(
                    "{} exists and is not a socket; remove it",
                    path.display()
                ));
            }
            Err(_) => {}
        }
        let listener = UnixListener::bind(&path)
            .map_err(|e| format!("{}: cannot create the approval socket: {e}", path.display()))?;
        // The state directory is the user's alone; the mode is a second wall.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("approvals".into())
                .spawn(move || serve(&listener, &approvals, &stop))
                .map_err(|e| format!("cannot start the approval thread: {e}"))?
        };
        Ok(ApprovalSocket {
            path,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for ApprovalSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(listener: &UnixListener, approvals: &Arc<Approvals>, stop: &AtomicBool) {
    let me = rustix::process::geteuid();
    let clients = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let ours =
                    rustix::net::sockopt::socket_peercred(&stream).is_ok_and(|cred| cred.uid == me);
                if !ours || clients.load(Ordering::SeqCst) >= MAX_CLIENTS {
                    continue;
                }
                clients.fetch_add(1, Ordering::SeqCst);
                let approvals = Arc::clone(approvals);
                let done = Arc::clone(&clients);
                let spawned = std::thread::Builder::new()
                    .name("approval-client".into())
                    .spawn(move || {
                        if !is_own_descendant(&stream) {
                            let _ = answer(stream, &approvals);
                        }
                        done.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    clients.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let fd = rustix::event::PollFd::new(listener, rustix::event::PollFlags::IN);
                let timeout = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: i64::from(ACCEPT_POLL.subsec_nanos()),
                };
                let _ = rustix::event::poll(&mut [fd], Some(&timeout));
            }
            Err(_) => std::thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Whether the peer of `stream` is this process or one of its
/// descendants (the spawner, a command, or anything a command started),
/// or cannot be told apart from one. The peer is named by a pidfd where
/// the kernel has them, so a pid reused after the peer exited cannot pass
/// for it.
fn is_own_descendant(stream: &UnixStream) -> bool {
    use std::os::fd::AsFd;
    let me = std::process::id();
    let Ok(cred) = rustix::net::sockopt::socket_peercred(stream) else {
        return true;
    };
    let Ok(peer) = u32::try_from(cred.pid.as_raw_nonzero().get()) else {
        return true;
    };
    let pidfd = crate::sys::peer_pidfd(stream.as_fd()).ok().or_else(|| {
        rustix::process::pidfd_open(cred.pid, rustix::process::PidfdFlags::empty()).ok()
    });
    let mut pid = peer;
    // Bounded: a chain longer than any real process tree is treated as ours.
    let mut descends = true;
    for _ in 0..4096 {
        if pid == me {
            break;
        }
        match parent_of(pid) {
            Some(0) => {
                descends = false;
                break;
            }
            Some(parent) => pid = parent,
            None => break,
        }
    }
    // The peer must still be the process whose ancestry was read: a pidfd
    // becomes readable once its process has exited.
    let alive = pidfd.is_some_and(|fd| {
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())) == Ok(0)
    });
    descends || !alive
}

/// The parent pid of `pid` from `/proc/<pid>/stat`; `None` when it cannot
/// be read.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything, `)` too.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `command` as the list shows it: whole up to [`MAX_SHOWN_COMMAND`]
/// bytes, else cut there and marked.
fn shown_command(command: &str) -> String {
    if command.len() <= MAX_SHOWN_COMMAND {
        return command.to_owned();
    }
    let mut cut = MAX_SHOWN_COMMAND;
    while !command.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{} … ({} more bytes; the audit record has the whole command)",
        &command[..cut],
        command.len() - cut
    )
}

/// Reads one request from `stream` and writes its answer, all within
/// [`CLIENT_TIMEOUT`].
fn answer(stream: UnixStream, approvals: &Approvals) -> std::io::Result<()> {
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let left = || {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(std::io::Error::from(std::io::ErrorKind::TimedOut))
        } else {
            Ok(left)
        }
    };
    stream.set_nonblocking(false)?;
    let mut request = Vec::new();
    let mut chunk = [0u8; 512];
    while !request.contains(&b'\n') {
        stream.set_read_timeout(Some(left()?))?;
        let read = (&stream).read(&mut chunk)?;
        if read == 0 {
            break;
        }
        request.extend_from_slice(&chunk[..read]);
        if request.len() as u64 > MAX_REQUEST_BYTES {
            return Err(std::io::Error::from(std::io::ErrorKind::InvalidData));
        }
    }
    let end = request
        .iter()
        .position(|b| *b == b'\n')
        .unwrap_or(request.len());
    let line = String::from_utf8_lossy(&request[..end]).into_owned();
    let reply = match serde_json::from_str::<ClientRequest>(line.trim_end()) {
        Ok(ClientRequest {
            list: true,
            decide: None,
            approve: None,
        }) => ClientReply {
            pending: Some(approvals.list()),
            decided: None,
            error: None,
        },
        Ok(ClientRequest {
            list: false,
            decide: Some(id),
            approve: Some(approve),
        }) => match approvals.decide(id, approve) {
            Ok(()) => ClientReply {
                pending: None,
                decided: Some(id),
                error: None,
            },
            Err(why) => ClientReply {
                pending: None,
                decided: None,
                error: Some(why),
            },
        },
        _ => ClientReply {
            pending: None,
            decided: None,
            error: Some("the request is not one this socket answers".into()),
        },
    };
    let mut bytes = serde_json::to_vec(&reply).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    stream.set_write_timeout(Some(left()?))?;
    (&stream).write_all(&bytes)
}

/// Sends one request to the daemon's approval socket in `state_dir`.
pub fn request(state_dir: &Path, request: &ClientRequest) -> Result<ClientReply, String> {
    let path = state_dir.join(SOCKET_NAME);
    let stream = UnixStream::connect(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => format!(
            "no running daemon asks for approvals here ({} is not there or not served)",
            path.display()
        ),
        _ => format!("{}: {e}", path.display()),
    })?;
    // The socket must be the daemon's of this user, not one a command put
    // in its place.
    let me = rustix::process::geteuid();
    let owner = rustix::net::sockopt::socket_peercred(&stream).map(|cred| cred.uid);
    if owner != Ok(me) {
        return Err(format!(
            "{} is not served by a process of this user; not talking to it",
            path.display()
        ));
    }
    stream
        .set_read_timeout(Some(CLIENT_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(CLIENT_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    let mut bytes = serde_json::to_vec(request).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    (&stream)
        .write_all(&bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut line = String::new();
    BufReader::new((&stream).take(MAX_REPLY_BYTES))
        .read_line(&mut line)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(line.trim_end())
        .map_err(|_| format!("{}: the daemon's answer is not readable", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn question(rule: &str) -> Question {
        Question {
            session_id: "s-1".into(),
            command: "git push".into(),
            cwd: "/w".into(),
            rule: rule.into(),
        }
    }

    #[test]
    fn an_unanswered_question_times_out_and_leaves_the_registry() {
        let approvals = Approvals::new(None);
        let cancel = Cancel::new().unwrap();
        let answer = approvals.ask(&question("r"), Duration::from_millis(50), &cancel);
        assert_eq!(answer, Answer::TimedOut);
        assert!(approvals.list().is_empty());
        assert!(approvals.decide(1, true).is_err());
    }

    #[test]
    fn an_answer_reaches_the_waiting_command_and_only_once() {
        let approvals = Arc::new(Approvals::new(None));
        let waiting = {
            let approvals = Arc::clone(&approvals);
            std::thread::spawn(move || {
                let cancel = Cancel::new().unwrap();
                approvals.ask(&question("ask push"), Duration::from_secs(20), &cancel)
            })
        };
        let pending = loop {
            let pending = approvals.list();
            if !pending.is_empty() {
                break pending;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(pending[0].rule, "ask push");
        assert_eq!(pending[0].command, "git push");
        approvals.decide(pending[0].id, false).unwrap();
        assert_eq!(waiting.join().unwrap(), Answer::Denied);
        assert!(approvals.decide(pending[0].id, true).is_err());
    }

    #[test]
    fn the_socket_is_private_refuses_the_daemons_own_process_and_goes_when_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let approvals = Arc::new(Approvals::new(None));
        let socket = ApprovalSocket::start(Arc::clone(&approvals), dir.path()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(SOCKET_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // This test is the daemon's process: it gets no answer.
        let list = ClientRequest {
            list: true,
            decide: None,
            approve: None,
        };
        assert!(request(dir.path(), &list).is_err());
        drop(socket);
        assert!(!dir.path().join(SOCKET_NAME).exists());
    }

    #[test]
    fn a_long_command_is_shown_cut_and_says_so() {
        let long = "x".repeat(MAX_SHOWN_COMMAND + 10);
        let shown = shown_command(&long);
        assert!(shown.ends_with("(10 more bytes; the audit record has the whole command)"));
        assert_eq!(shown_command("ls"), "ls");
    }

    #[test]
    fn an_answer_after_the_deadline_is_refused() {
        let approvals = Approvals::new(None);
        approvals.lock().pending.insert(
            7,
            Pending {
                question: question("r"),
                deadline: Instant::now(),
                answer: None,
            },
        );
        assert!(approvals.decide(7, true).is_err());
    }

    #[test]
    fn a_question_sends_a_desktop_notification_on_the_session_bus() {
        use std::process::{Command, Stdio};
        // A private session bus with a monitor of the notification
        // interface: nothing of the machine's own desktop is involved. No
        // notification server runs on it, so notify-send stops at asking
        // for one; that it asks, on this bus, is what is checked here.
        let mut bus = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--nopidfile", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon (package dbus) is needed");
        let mut address = String::new();
        BufReader::new(bus.stdout.take().unwrap())
            .read_line(&mut address)
            .unwrap();
        let address = address.trim().to_owned();
        let mut monitor = Command::new("dbus-monitor")
            .args([
                "--address",
                &address,
                "interface='org.freedesktop.Notifications'",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-monitor is needed");
        let seen = Arc::new(Mutex::new(String::new()));
        {
            let seen = Arc::clone(&seen);
            let out = monitor.stdout.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    seen.lock().unwrap().push_str(&line);
                    seen.lock().unwrap().push('\n');
                }
            });
        }
        // Let the monitor subscribe before anything is sent.
        std::thread::sleep(Duration::from_millis(300));
        let program = crate::exec::which(
            "notify-send",
            Some(std::ffi::OsStr::new("/usr/local/bin:/usr/bin:/bin")),
        )
        .expect("notify-send (package libnotify-bin) is needed");
        let env = vec![("DBUS_SESSION_BUS_ADDRESS".to_owned(), address.clone())];
        let approvals = Approvals::new(Some((program, env)));
        let cancel = Cancel::new().unwrap();
        let answer = approvals.ask(&question("ask push"), Duration::from_millis(200), &cancel);
        assert_eq!(answer, Answer::TimedOut);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = seen.lock().unwrap().clone();
            if text.contains("destination=org.freedesktop.Notifications") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no notification was sent: {text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = monitor.kill();
        let _ = monitor.wait();
        let _ = bus.kill();
        let _ = bus.wait();
    }

    #[test]
    fn a_cancelled_command_stops_waiting() {
        let approvals = Approvals::new(None);
        let cancel = Cancel::new().unwrap();
        cancel.cancel();
        let answer = approvals.ask(&question("r"), Duration::from_secs(20), &cancel);
        assert_eq!(answer, Answer::Cancelled);
    }

    #[test]
    fn a_file_in_the_sockets_place_is_never_removed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SOCKET_NAME), "mine").unwrap();
        let error = ApprovalSocket::start(Arc::new(Approvals::new(None)), dir.path()).unwrap_err();
        assert!(error.contains("not a socket"), "{error}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join(SOCKET_NAME)).unwrap(),
            "mine"
        );
    }
}
