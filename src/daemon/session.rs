//! One established data connection after its handshake (PROTOCOL.md §5,
//! §9, §11.4): the reader loop, the writer thread, request admission, the
//! capability gate, and the hand-off of admitted requests to the shared
//! worker pool.
//!
//! Threads: the caller's thread reads; one writer thread per connection
//! sends, taking PONGs before anything else so no worker can delay them,
//! then command results, then the other responses (see [`Lane`]);
//! workers come from the daemon's pool, and a running command gets a thread
//! of its own so that it never holds a worker. A command meets the
//! machine-wide command limits as it is admitted, on the reader: it is
//! counted then and refused then, never queued. A response is queued only
//! after its audit record is durable, and only on the connection its
//! request came from; unless the operation has a sync of its own to finish
//! (a written file's), the worker leaves it with the record and the audit
//! writer queues it right after the sync, so the worker is free meanwhile
//! and no thread wakes only to pass it on. When the connection ends its
//! channels close and late responses are discarded. A request keeps its slot while its response
//! waits for the writer, and every queued frame's bytes count against the
//! connection's [`Backlog`] until the writer has handed it to the socket;
//! while the backlog is full no new work is admitted, so a platform that
//! stops reading cannot make the daemon pile up responses. When the writer
//! cannot send, the connection ends. This module never runs an operation
//! the connection did not grant, never answers an invalid frame it cannot
//! answer unambiguously, never reads on after its writer failed, and never
//! blocks the reader on a worker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use rustix::process::Pid;
use serde_json::json;

use super::backlog::{Backlog, ByteBudget, Held};
use super::capacity::{Admitted, MachineWorkPool, Overloaded, RequestSlots};
use super::handlers::{self, CommandEntry, CommandGate};
use super::outbox::{Lane, Next, Outbox};
use super::pool::{self, Job, WorkerThreads};
use crate::audit::{AuditLog, Details, Entry, SessionAudit, Then, Ticket};
use crate::exec::{Cancel, ExecContext, PlatformDeadline, Spawner};
use crate::files::FileContext;
use crate::jail::Jail;
use crate::protocol::{
    self, Capability, DecodeError, Encoded, ErrorCode, ErrorPayload, Frame, Message, MessageType,
};
use crate::transport::{CloseInfo, Payload};

/// Frames queued for the writer at most, per lane.
const OUT_QUEUE: usize = 256;

/// `STATUS_INTERVAL_SECONDS` (PROTOCOL.md §9.2).
pub const STATUS_INTERVAL: Duration = Duration::from_secs(30);

/// The message of an operation whose record could not be written (AUDIT.md
/// §8.3 hardening note, step 1).
pub const AUDIT_FAILED: &str =
    "The audit record of this operation could not be written; the operation may have taken effect.";

/// The message of every non-control frame on the control connection
/// (PROTOCOL.md §5.4).
pub const CONTROL_ONLY: &str =
    "Execution operations require an activated per-session data connection.";

/// Why a connection ended when an answer could not be queued (its audit
/// reason).
const UNANSWERED: &str = "loop_error: answer_not_queued";

/// The message for requests refused because the audit log failed earlier.
pub const AUDIT_UNHEALTHY: &str = "The audit log cannot be written; no operation is executed.";

/// Why a connection's inbound side ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// A close frame arrived (`None`: without a code) or the stream ended.
    Closed(Option<CloseInfo>),
    /// A transport failure; the text is for the audit reason.
    Failed(String),
}

/// The receiving half of an established connection.
pub trait Inbound {
    /// Blocks until the next message (text or binary), the end, or
    /// `should_stop` turning true (then `Ended::Closed(None)`); it is
    /// polled at least every few hundred milliseconds.
    fn recv(&mut self, should_stop: &dyn Fn() -> bool) -> Result<Payload, Ended>;
    /// Ends the whole connection at once, both ways, so that a writer
    /// waiting for the platform to read gives up too.
    fn abort(&mut self);
}

/// The sending half, owned by the writer thread.
pub trait Outbound: Send {
    /// Sends one text message.
    fn send(&mut self, text: Encoded) -> Result<(), Ended>;
    /// Queues one text message that may wait to reach the socket until the
    /// next [`Outbound::flush`]: the writer has more at hand.
    fn send_queued(&mut self, text: Encoded) -> Result<(), Ended> {
        self.send(text)
    }
    /// Hands everything queued to the socket.
    fn flush(&mut self) -> Result<(), Ended> {
        Ok(())
    }
    /// Sends a close frame (best effort).
    fn close(&mut self, code: u16, reason: &str);
}

/// Where this connection's records go: the shared writer (legacy mode) or
/// a handle bound to the chat session (child runtimes).
#[derive(Debug, Clone)]
pub enum AuditSink {
    /// The shared writer with its default session.
    Log(AuditLog),
    /// A session-bound handle.
    Session(SessionAudit),
}

impl AuditSink {
    fn submit(&self, entry: Entry) -> Ticket {
        match self {
            AuditSink::Log(log) => log.submit(entry),
            AuditSink::Session(s) => s.submit(entry),
        }
    }

    fn submit_then(&self, entry: Entry, then: Then) {
        match self {
            AuditSink::Log(log) => log.submit_then(entry, then),
            AuditSink::Session(s) => s.submit_then(entry, then),
        }
    }

    /// True until a write has failed anywhere.
    pub fn is_healthy(&self) -> bool {
        match self {
            AuditSink::Log(log) => log.is_healthy(),
            AuditSink::Session(s) => s.is_healthy(),
        }
    }

    /// Writes `entry` and waits until it is durable.
    pub fn write(&self, entry: Entry) -> bool {
        self.submit(entry).wait().is_ok()
    }
}

/// What a data connection's requests run against.
#[derive(Clone)]
pub struct DataPlane {
    /// The session root, pinned once for every connection of the session.
    pub jail: Arc<Jail>,
    /// Starts commands.
    pub spawner: Arc<Spawner>,
    /// The shim's environment captured at start.
    pub host_env: Arc<Vec<(std::ffi::OsString, std::ffi::OsString)>>,
    /// The machine-wide command limits.
    pub commands: Arc<dyn CommandGate + Send>,
    /// The local `enable_shell` switch.
    pub shell_enabled: bool,
    /// `refuse_multilink_reads`.
    pub refuse_multilink_reads: bool,
    /// The process umask captured at start.
    pub umask: rustix::fs::Mode,
    /// The sandboxes of commands, decided at start.
    pub sandbox: crate::exec::CommandSandbox,
    /// The local command rules, shared by every session.
    pub rules: Arc<CommandRules>,
    /// The session's id, shown to the user asked about a command.
    pub session_id: String,
}

/// Builds a session's data plane from its id and its pinned root.
pub type DataPlaneFactory = Arc<dyn Fn(&str, Arc<Jail>) -> DataPlane + Send + Sync>;

/// The local command rules and whoever asks the user about an `ask`,
/// built once at start.
pub struct CommandRules {
    /// The rules.
    pub policy: crate::exec::Policy,
    /// The approval registry; `None` when no rule can say `ask`.
    pub approver: Option<Arc<dyn crate::exec::Approver>>,
    /// `approval_timeout_seconds`.
    pub approval_timeout: Duration,
}

impl Default for CommandRules {
    /// No rules: every command is allowed and nothing is recorded.
    fn default() -> Self {
        CommandRules {
            policy: crate::exec::Policy::default(),
            approver: None,
            approval_timeout: Duration::from_secs(20),
        }
    }
}

impl std::fmt::Debug for CommandRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandRules")
            .field("policy", &self.policy)
            .field("approver", &self.approver.is_some())
            .field("approval_timeout", &self.approval_timeout)
            .finish()
    }
}

impl std::fmt::Debug for DataPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataPlane")
            .field("root", &self.jail.root())
            .field("shell_enabled", &self.shell_enabled)
            .finish_non_exhaustive()
    }
}

/// The control connection's request handler (CONTROL.md §4–§11). It writes
/// its own records, at the step each operation fixes, and returns the reply.
pub trait ControlRequests: Send + Sync {
    /// Handles one of the five control requests.
    fn handle(&self, id: &str, message: &Message) -> Message;
}

/// Which plane a connection serves.
#[derive(Clone)]
pub enum Serving {
    /// A data connection: files and commands beneath one root.
    Data(DataPlane),
    /// The control connection: browsing, grants, child runtimes.
    Control(Arc<dyn ControlRequests>),
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Serving::Data(data) => data.fmt(f),
            Serving::Control(_) => f.write_str("Control"),
        }
    }
}

/// When a child runtime last admitted a request (CONTROL.md §10.4); `PING`
/// never counts.
#[derive(Debug)]
pub struct Activity(Mutex<Instant>);

impl Activity {
    /// Starts counting from now.
    pub fn new() -> Activity {
        Activity(Mutex::new(Instant::now()))
    }

    /// Records a request reaching admission.
    pub fn touch(&self) {
        *lock(&self.0) = Instant::now();
    }

    /// The last admitted request (or the creation time).
    pub fn last(&self) -> Instant {
        *lock(&self.0)
    }
}

impl Default for Activity {
    fn default() -> Self {
        Activity::new()
    }
}

/// Everything a connection's requests need, fixed at the handshake.
pub struct Setup {
    /// What the requests run against.
    pub serving: Serving,
    /// The records' destination.
    pub audit: AuditSink,
    /// The granted capabilities, as the platform spelled them.
    pub granted: Vec<String>,
    /// Effective `max_concurrent`.
    pub max_concurrent: u64,
    /// Effective `command_timeout_seconds`.
    pub command_timeout_seconds: u64,
    /// The `HELLO_ACK`'s own `command_timeout_seconds`: the platform's wait
    /// for any reply.
    pub platform_wait_seconds: u64,
    /// Effective `max_file_size_bytes`.
    pub max_file_size_bytes: u64,
    /// The active audit log file, for `STATUS.audit_log_bytes`.
    pub audit_path: std::path::PathBuf,
    /// Idle tracking of a child runtime.
    pub activity: Option<Arc<Activity>>,
    /// The machine-wide work pool a child runtime's requests also wait for
    /// (CONTROL.md §10.2); `None` in legacy mode and on the control
    /// connection.
    pub machine_pool: Option<Arc<MachineWorkPool>>,
    /// The byte budget of responses waiting on all child runtimes together;
    /// `None` in legacy mode and on the control connection.
    pub machine_bytes: Option<ByteBudget>,
    /// What the optional capabilities' checks found at this connection's
    /// HELLO.
    pub found: super::features::Found,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("granted", &self.granted)
            .field("max_concurrent", &self.max_concurrent)
            .field("control", &matches!(self.serving, Serving::Control(_)))
            .finish_non_exhaustive()
    }
}

/// How a connection ended, for `WS_DISCONNECTED` and the reconnect decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The platform closed (or the stream ended) with this code and
    /// reason.
    Closed(Option<CloseInfo>),
    /// The transport failed.
    Failed(String),
    /// `SESSION_REVOKED` arrived: never reconnect.
    Revoked {
        /// The frame's `reason`.
        reason: String,
    },
    /// The daemon is stopping.
    Stopped,
    /// An audit write failed: the daemon must stop (exit 78).
    AuditFailed,
}

/// What goes to the writer thread.
enum Out {
    /// A frame the reader or the writer made, its bytes counted.
    Frame(String, Held),
    /// A worker's terminal response.
    Response(Response),
    Close(u16, &'static str),
    /// The connection is over without a close of ours.
    Stop,
}

/// A terminal response on its way to the socket: its request keeps its
/// slot until the writer takes it, its bytes stay counted until they are
/// handed to the socket.
struct Response {
    text: Encoded,
    held: Held,
    admitted: Admitted,
}

/// State shared by the reader, the writer and the workers.
struct Shared {
    setup: Setup,
    cancel: Cancel,
    slots: RequestSlots,
    /// Bytes of this connection's frames not yet handed to the socket.
    backlog: Backlog,
    /// Frames for the writer, by lane (see [`Lane`]).
    outbox: Outbox<Out>,
    leftovers: Mutex<Vec<Pid>>,
    audit_failed: AtomicBool,
    /// Why the connection can no longer answer, once it cannot: the writer
    /// could not send, or an answer could not be queued. The reader ends
    /// the connection when it sees this.
    send_failed: OnceLock<Ended>,
    connected_at: Instant,
    /// Requests handed to the pool and not yet answered.
    running: Arc<Running>,
}

/// The requests of a connection that are admitted and not yet answered:
/// the connection's end waits for none to be left. Apart from [`Shared`]
/// because a request whose answer waits for its record is finished on the
/// audit writer's thread, which must let go of the connection's state
/// before the connection's end may go on (the last one to let go of it
/// drops everything it holds, which is not work for that thread).
#[derive(Debug, Default)]
struct Running {
    count: Mutex<RunningCount>,
    idle: std::sync::Condvar,
}

/// The count, and whether the connection's end waits for it to reach
/// zero: only then does a finishing request wake anyone (a wake-up is a
/// system call whether or not anyone waits).
#[derive(Debug, Default)]
struct RunningCount {
    requests: u64,
    awaited: bool,
}

impl Running {
    /// Counts a request until its [`Finished`] is dropped.
    fn start(self: &Arc<Running>) -> Finished {
        lock(&self.count).requests += 1;
        Finished(Arc::clone(self))
    }

    /// Waits until every request has finished.
    fn wait_idle(&self) {
        let mut count = lock(&self.count);
        count.awaited = true;
        while count.requests > 0 {
            count = self
                .idle
                .wait(count)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// One admitted request, counted until this is dropped: after its answer
/// is queued, or once it is known there will be none.
struct Finished(Arc<Running>);

impl Drop for Finished {
    fn drop(&mut self) {
        let mut count = lock(&self.0.count);
        count.requests -= 1;
        if count.requests == 0 && count.awaited {
            self.0.idle.notify_all();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Counters stay consistent between statements; a panic elsewhere must
    // not stop the connection's bookkeeping.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The current Unix time for `ts`.
pub fn now_ts() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A fresh UUID v4 for unsolicited frames.
pub fn fresh_id() -> String {
    let mut bytes = [0u8; 16];
    // Without randomness the id would repeat; a fixed id only confuses
    // correlation of unsolicited frames, which nothing relies on.
    let _ = getrandom::fill(&mut bytes);
    protocol::uuid_v4_from_bytes(bytes)
}

/// Serves one connection until it ends. `stop` ends it from outside
/// (shutdown): the reader must then return from `recv` (the caller closes
/// the transport).
pub fn serve(
    setup: Setup,
    pool: &WorkerThreads,
    mut inbound: impl Inbound,
    outbound: impl Outbound + 'static,
    stop: &AtomicBool,
) -> End {
    // Bounded in frames here and in bytes by the backlog: a platform that
    // floods frames without reading its socket cannot make the queues grow.
    // When either is full, an answer the reader makes on its own (PONG,
    // invalid-frame ERROR, SHIM_OVERLOADED) ends the connection instead and
    // the periodic STATUS is dropped; a worker's response waits for room.
    let cancel = match Cancel::new() {
        Ok(c) => c,
        Err(e) => return End::Failed(format!("cannot create the cancellation token: {e}")),
    };
    let Some(max_concurrent) = std::num::NonZeroU64::new(setup.max_concurrent) else {
        return End::Failed("max_concurrent must be positive".into());
    };
    let backlog = Backlog::new(setup.machine_bytes.clone());
    let shared = Arc::new(Shared {
        setup,
        cancel,
        slots: RequestSlots::new(max_concurrent),
        backlog,
        outbox: Outbox::new(OUT_QUEUE),
        leftovers: Mutex::new(Vec::new()),
        audit_failed: AtomicBool::new(false),
        send_failed: OnceLock::new(),
        connected_at: Instant::now(),
        running: Arc::new(Running::default()),
    });
    let writer = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("ws-writer".into())
            .spawn(move || write_loop(&shared, outbound))
    };
    let end = match writer {
        Ok(_) => read_loop(&shared, pool, &mut inbound, stop),
        Err(e) => End::Failed(format!("cannot start the writer: {e}")),
    };
    // PROTOCOL.md §11.4: cancel everything admitted, wait for the workers
    // (commands take at most the termination sequence), terminate what
    // commands left behind.
    shared.cancel.cancel();
    if let Some(pool) = &shared.setup.machine_pool {
        pool.wake_waiters();
    }
    shared.running.wait_idle();
    let leftovers = std::mem::take(&mut *lock(&shared.leftovers));
    for group in leftovers {
        crate::exec::run::terminate_group(group);
    }
    match &end {
        End::Revoked { .. } => {
            let _ = shared
                .outbox
                .send(Lane::Priority, Out::Close(4428, "session_revoked"));
        }
        End::Stopped | End::AuditFailed => {
            let _ = shared
                .outbox
                .send(Lane::Priority, Out::Close(1000, "shutdown"));
        }
        End::Closed(_) | End::Failed(_) => {
            let _ = shared.outbox.send(Lane::Priority, Out::Stop);
        }
    }
    if shared.audit_failed.load(Ordering::SeqCst) {
        return End::AuditFailed;
    }
    end
}

fn read_loop(
    shared: &Arc<Shared>,
    pool: &WorkerThreads,
    inbound: &mut impl Inbound,
    stop: &AtomicBool,
) -> End {
    loop {
        if stop.load(Ordering::SeqCst) {
            return End::Stopped;
        }
        if !healthy(shared) {
            return End::AuditFailed;
        }
        if let Some(failed) = shared.send_failed.get() {
            // The writer may still be waiting for a platform that reads
            // slowly; until it stops, nothing that waits for it can end.
            inbound.abort();
            return ended(failed.clone());
        }
        // A stop, or an audit failure anywhere in the daemon, ends the
        // connection at once rather than at the platform's next frame
        // (AUDIT.md §8.3 step 3); so does a writer that can no longer send,
        // or every request read from here on would run unanswered.
        let should_stop = || {
            stop.load(Ordering::SeqCst)
                || shared.audit_failed.load(Ordering::SeqCst)
                || !shared.setup.audit.is_healthy()
                || shared.send_failed.get().is_some()
        };
        let payload = match inbound.recv(&should_stop) {
            Ok(_) if shared.send_failed.get().is_some() => continue,
            Ok(payload) => payload,
            Err(_) if stop.load(Ordering::SeqCst) => return End::Stopped,
            Err(_) if !healthy(shared) => return End::AuditFailed,
            Err(_) if shared.send_failed.get().is_some() => continue,
            Err(end) => return ended(end),
        };
        let received = Instant::now();
        let decoded = decode(&payload);
        // A 16 MiB request is held once from here: as its parsed value.
        drop(payload);
        let frame = match decoded {
            Ok(frame) => frame,
            Err(e) => {
                answer_invalid(shared, &e);
                continue;
            }
        };
        match &frame.message {
            Message::Ping(_) => {
                let pong = Frame::new(
                    frame.id.clone(),
                    now_ts(),
                    Message::Pong(Default::default()),
                );
                answer(shared, Lane::Priority, pong);
                continue;
            }
            Message::SessionRevoked(revoked) => {
                let mut details = Details::new()
                    .with("reason", json!(revoked.reason))
                    .with("source", json!("frame"));
                if let Some(id) = &revoked.new_shim_machine_id {
                    details = details.with("new_shim_machine_id", json!(id));
                }
                if !shared
                    .setup
                    .audit
                    .write(Entry::event("SESSION_REVOKED", details))
                {
                    shared.audit_failed.store(true, Ordering::SeqCst);
                }
                return End::Revoked {
                    reason: revoked.reason.clone(),
                };
            }
            _ => {}
        }
        admit(shared, pool, frame, received);
    }
}

/// Decodes a received message; its UTF-8 is checked here only when the
/// WebSocket codec has not checked it already (a binary frame).
pub(super) fn decode(payload: &Payload) -> Result<Frame, DecodeError> {
    match payload.checked_text() {
        Some(text) => protocol::decode_text(text),
        None => protocol::decode(payload),
    }
}

fn ended(end: Ended) -> End {
    match end {
        Ended::Closed(close) => End::Closed(close),
        Ended::Failed(e) => End::Failed(e),
    }
}

/// PROTOCOL.md §2.4 hardening note: an invalid request with a usable id
/// gets an `ERROR`; everything else is dropped.
fn answer_invalid(shared: &Shared, e: &DecodeError) {
    let Some(reply) = &e.reply else {
        return;
    };
    let capacity = shared.slots.pending_capacity();
    let frame = Frame::new(
        reply.id.clone(),
        now_ts(),
        Message::Error(ErrorPayload::new(
            reply.code,
            crate::text::one_line(&e.invalid.to_string()),
        )),
    )
    .with_capacity(capacity);
    answer(shared, Lane::Normal, frame);
}

/// Step 5–6 of PROTOCOL.md §5.1; a full backlog refuses like a full
/// connection. `received`: when the frame was read.
fn admit(shared: &Arc<Shared>, pool: &WorkerThreads, frame: Frame, received: Instant) {
    let admission = if shared.backlog.is_full() {
        Err(Overloaded::Backlog)
    } else {
        shared.slots.admit()
    };
    let admitted = match admission {
        Ok(admitted) => admitted,
        Err(refused) => {
            let reply =
                Frame::new(frame.id, now_ts(), Message::Error(refused.to_error())).with_capacity(0);
            answer(shared, Lane::Normal, reply);
            return;
        }
    };
    if let Some(activity) = &shared.setup.activity {
        activity.touch();
    }
    let command = enter_command_limits(shared, &frame.message);
    let runs_a_command = matches!(command, Some(Ok(_)));
    let finished = shared.running.start();
    let job_shared = Arc::clone(shared);
    let job: Job = Box::new(move || {
        run_request(&job_shared, admitted, frame, command, received, finished);
    });
    let job = if runs_a_command {
        match pool::spawn_apart(job) {
            Ok(()) => return,
            // No thread to be had: a worker runs it rather than nobody.
            Err(job) => job,
        }
    } else {
        job
    };
    // A job the pool refuses (the daemon is stopping) is dropped unrun,
    // and its ticket with it.
    let _ = pool.submit(job);
}

/// EXEC.md §3 steps 2–3, taken when a command is admitted so that the rate
/// window counts it then and the concurrency limit refuses it then, however
/// many request slots the connection has: for an `EXECUTE_COMMAND` on a data
/// connection that granted `shell`, with the local switch on and the audit
/// log healthy (what [`route`] and the handler check before step 2). `None`
/// for every other request, which the command limits never count.
fn enter_command_limits(shared: &Shared, message: &Message) -> Option<CommandEntry> {
    let Serving::Data(data) = &shared.setup.serving else {
        return None;
    };
    let shell = Capability::Shell.as_str();
    let reaches_the_limits = matches!(message, Message::ExecuteCommand(_))
        && data.shell_enabled
        && shared.setup.granted.iter().any(|g| g == shell)
        && healthy(shared);
    reaches_the_limits.then(|| data.commands.enter())
}

/// A worker's part (or a command thread's): the slot, the gates, the
/// handler, the record, and the response, which goes to the writer with the
/// request's slot (the writer releases it and sends the edge `STATUS`).
fn run_request(
    shared: &Arc<Shared>,
    mut admitted: Admitted,
    frame: Frame,
    command: Option<CommandEntry>,
    received: Instant,
    finished: Finished,
) {
    admitted.take_slot();
    let Frame {
        id,
        message: mut request,
        ..
    } = frame;
    let kind = request.message_type();
    // A child runtime's request also waits for the machine-wide pool; the
    // connection's end wakes it (PROTOCOL.md §5.1 step 6). A command that
    // met the command limits does not: they bound commands machine-wide,
    // and a running command holding a work slot would make file operations
    // wait behind it.
    let machine_pool = match &command {
        Some(_) => None,
        None => shared.setup.machine_pool.as_ref(),
    };
    let permit = match machine_pool {
        Some(pool) => match pool.acquire_unless(|| shared.cancel.is_cancelled()) {
            Some(permit) => Some(permit),
            None => return,
        },
        None => None,
    };
    let routed = if shared.cancel.is_cancelled() {
        // Admitted before the connection ended: cancelled unrun.
        Routed::Now(None)
    } else if shared.backlog.is_full() {
        // The backlog filled while this request waited: running it would
        // only add a response nobody reads.
        Routed::Now(Some(Message::Error(Overloaded::Backlog.to_error())))
    } else {
        route(shared, &id, kind, &mut request, command, received)
    };
    // A request can be as large as a frame; it is not kept while its
    // response waits.
    drop(request);
    let lane = match kind {
        MessageType::ExecuteCommand => Lane::Urgent,
        _ => Lane::Normal,
    };
    // A reply to a request that ran is queued even when the connection is
    // ending meanwhile: the writer sends what is queued before a close (an
    // audit failure's INTERNAL_ERROR among it, which the failure itself
    // makes the reader end the connection for), and drops it otherwise.
    match routed {
        Routed::Now(None) => drop(permit),
        Routed::Now(Some(message)) => {
            drop(permit);
            if let Ok(response) = respond(shared, &id, message, admitted) {
                let _ = shared.outbox.send(lane, Out::Response(response));
            }
        }
        Routed::Recorded(reply, entry) => {
            // Encoded now, sent only once the record is durable: the audit
            // writer then queues it from its own thread, and this worker is
            // free for the next request meanwhile.
            let (response, mut unanswered) = match reply {
                Some(message) => match respond(shared, &id, message, admitted) {
                    Ok(response) => (Some(response), None),
                    Err(slot) => (None, Some(slot)),
                },
                None => (None, Some(admitted)),
            };
            let owner = Arc::clone(shared);
            let then = Then::new(move |durable| {
                let shared = owner;
                let response = match durable {
                    Ok(_) => response,
                    Err(_) => {
                        // AUDIT.md §8.3 step 1: the operation is answered
                        // with the failure, whatever its reply would have
                        // been.
                        shared.audit_failed.store(true, Ordering::SeqCst);
                        let slot = response.map(|r| r.admitted).or(unanswered.take());
                        slot.and_then(|slot| {
                            let failed = handlers::error(ErrorCode::InternalError, AUDIT_FAILED);
                            respond(&shared, &id, failed, slot).ok()
                        })
                    }
                };
                if let Some(response) = response {
                    // Never waits for room: the response's slot bounds how
                    // many there are, and the audit writer's thread must
                    // not wait for a platform that does not read.
                    let _ = shared.outbox.send_now(lane, Out::Response(response));
                }
                // A child runtime's work permit bounds operations until
                // their records are durable, as the machine's workers did.
                drop(permit);
                // The connection's state is let go of before the request
                // counts as finished (see [`Running`]).
                drop(shared);
                drop(unanswered);
                drop(finished);
            });
            shared.setup.audit.submit_then(entry, then);
            return;
        }
    }
    drop(finished);
}

/// The response to `id` carrying `message`, encoded and counted against
/// the backlog; the request's slot back when it cannot be encoded.
fn respond(
    shared: &Shared,
    id: &str,
    message: Message,
    admitted: Admitted,
) -> Result<Response, Admitted> {
    let response =
        Frame::new(id, now_ts(), message).with_capacity(admitted.capacity_after_release());
    let Ok(text) = protocol::encode_response(response) else {
        return Err(admitted);
    };
    let held = shared.backlog.hold(text.len());
    Ok(Response {
        text,
        held,
        admitted,
    })
}

/// What handling a request left to do.
enum Routed {
    /// Send this reply (if any) now.
    Now(Option<Message>),
    /// Send this reply (if any) once this record is durable.
    Recorded(Option<Message>, Entry),
}

/// The gates of §5.3–§5.5 and the handler; returns the reply to send.
/// `received`: when the request was read, from which the platform's
/// deadline runs.
fn route(
    shared: &Shared,
    id: &str,
    kind: MessageType,
    message: &mut Message,
    command: Option<CommandEntry>,
    received: Instant,
) -> Routed {
    let setup = &shared.setup;
    let data = match &setup.serving {
        Serving::Control(control) => {
            return Routed::Now(Some(route_control(shared, control, id, kind, message)));
        }
        Serving::Data(data) => data,
    };
    let Some(capability) = kind.required_capability() else {
        // §5.5: known non-request types are ignored on a data connection.
        return Routed::Now(None);
    };
    if !setup.granted.iter().any(|g| g == capability.as_str()) {
        return Routed::Now(Some(handlers::not_granted(
            capability.as_str(),
            &setup.granted,
        )));
    }
    if !healthy(shared) {
        return Routed::Now(Some(handlers::error(
            ErrorCode::InternalError,
            AUDIT_UNHEALTHY,
        )));
    }
    if capability == Capability::LocalLlm {
        let handled = match (&setup.found.llm, message) {
            (Some(llm), Message::LocalLlmCompletion(req)) => {
                let mut chunks = Chunks { shared, id };
                let cancelled = || shared.cancel.is_cancelled();
                handlers::handle_completion(llm, id, req, &setup.granted, &mut chunks, &cancelled)
            }
            // The local switch is off: the grant cannot have matched an
            // advertisement, answered all the same.
            _ => handlers::Handled {
                reply: Some(handlers::not_granted(
                    Capability::LocalLlm.as_str(),
                    &setup.granted,
                )),
                audit: None,
                leftover_group: None,
                settle: None,
            },
        };
        return finish(shared, handled);
    }
    if capability == Capability::ComputerUse {
        let handled = match &setup.found.desktop {
            Some(connection) => {
                let ctx = handlers::DesktopContext {
                    connection,
                    max_file_size_bytes: setup.max_file_size_bytes,
                };
                let screenshot = || data.commands.screenshot();
                handlers::handle_desktop(&ctx, id, message, &screenshot)
            }
            // The local switch is off: the grant cannot have matched an
            // advertisement, answered all the same.
            None => handlers::Handled {
                reply: Some(handlers::error(
                    ErrorCode::CapabilityNotGranted,
                    "Computer use is not enabled on this shim.",
                )),
                audit: None,
                leftover_group: None,
                settle: None,
            },
        };
        return finish(shared, handled);
    }
    if !matches!(capability, Capability::Files | Capability::Shell) {
        // Granted but not built: unreachable while such capabilities are
        // never advertised, answered rather than ignored all the same.
        return Routed::Now(Some(handlers::error(
            ErrorCode::FeatureNotSupported,
            format!("{} is not supported by this shim.", kind.as_str()),
        )));
    }
    let ctx = handlers::Context {
        files: FileContext {
            jail: &data.jail,
            max_file_size_bytes: setup.max_file_size_bytes,
            refuse_multilink_reads: data.refuse_multilink_reads,
            umask: data.umask,
        },
        exec: ExecContext {
            jail: &data.jail,
            command_timeout_seconds: setup.command_timeout_seconds,
            max_file_size_bytes: setup.max_file_size_bytes,
            host_env: &data.host_env,
            spawner: &data.spawner,
            cancel: &shared.cancel,
            platform_deadline: Some(PlatformDeadline {
                received,
                wait: Duration::from_secs(setup.platform_wait_seconds),
            }),
            sandbox: data.sandbox,
            rules: crate::exec::Rules {
                policy: &data.rules.policy,
                approver: data.rules.approver.as_deref(),
                approval_timeout: data.rules.approval_timeout,
                session_id: &data.session_id,
            },
        },
        shell_enabled: data.shell_enabled,
    };
    let handled = handlers::handle(&ctx, id, message, &setup.granted, command);
    finish(shared, handled)
}

/// Bytes of this connection's frames that may wait to be sent before a
/// streaming completion waits for the platform to read: the upstream stream
/// is then not read either, so a fast model and a slow platform hold at
/// most this much.
const CHUNK_BACKLOG_BYTES: u64 = 256 * 1024;

/// The chunks of a streaming completion on their way to the writer, on the
/// lane of the final response so that they arrive before it.
struct Chunks<'a> {
    shared: &'a Shared,
    id: &'a str,
}

impl crate::llm::ChunkSink for Chunks<'_> {
    fn send(&mut self, chunk: crate::protocol::LocalLlmCompletionChunk) {
        // `pending_capacity` stays null on a chunk (PROTOCOL.md §9.1).
        let frame = Frame::new(self.id, now_ts(), Message::LocalLlmCompletionChunk(chunk));
        let Ok(text) = protocol::encode(&frame) else {
            return;
        };
        drop(frame);
        while self.shared.backlog.used() > CHUNK_BACKLOG_BYTES {
            if self.shared.cancel.is_cancelled() || self.shared.send_failed.get().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let held = self.shared.backlog.hold(text.len());
        let _ = self
            .shared
            .outbox
            .send(Lane::Normal, Out::Frame(text, held));
    }
}

/// What remains of a handled request: its reply once its record is
/// durable. An operation with a last sync of its own (a written file's)
/// runs it here while the record's runs, and answers only once both are
/// done; any other leaves its reply to follow its record.
fn finish(shared: &Shared, handled: handlers::Handled) -> Routed {
    if let Some(group) = handled.leftover_group {
        lock(&shared.leftovers).push(group);
    }
    let (entry, settle) = match (handled.audit, handled.settle) {
        (None, None) => return Routed::Now(handled.reply),
        (Some(entry), None) => return Routed::Recorded(handled.reply, entry),
        (entry, Some(settle)) => (entry, settle),
    };
    let ticket = entry.map(|entry| shared.setup.audit.submit(entry));
    settle.finish();
    if let Some(ticket) = ticket {
        if ticket.wait().is_err() {
            shared.audit_failed.store(true, Ordering::SeqCst);
            return Routed::Now(Some(handlers::error(
                ErrorCode::InternalError,
                AUDIT_FAILED,
            )));
        }
    }
    Routed::Now(handled.reply)
}

/// The control connection (§5.4): the five control requests go to the
/// control plane; every other accepted frame is `FEATURE_NOT_SUPPORTED`.
fn route_control(
    shared: &Shared,
    control: &Arc<dyn ControlRequests>,
    id: &str,
    kind: MessageType,
    message: &Message,
) -> Message {
    if kind.required_capability() != Some(Capability::DirectoryBrowse) {
        return handlers::error(ErrorCode::FeatureNotSupported, CONTROL_ONLY);
    }
    if !shared
        .setup
        .granted
        .iter()
        .any(|g| g == Capability::DirectoryBrowse.as_str())
    {
        return handlers::not_granted(Capability::DirectoryBrowse.as_str(), &shared.setup.granted);
    }
    if !healthy(shared) {
        return handlers::error(ErrorCode::InternalError, AUDIT_UNHEALTHY);
    }
    let reply = control.handle(id, message);
    // A control operation writes its records itself; one that failed makes
    // the whole daemon fail closed (AUDIT.md §8.3).
    if !shared.setup.audit.is_healthy() {
        shared.audit_failed.store(true, Ordering::SeqCst);
    }
    reply
}

fn healthy(shared: &Shared) -> bool {
    shared.setup.audit.is_healthy() && !shared.audit_failed.load(Ordering::SeqCst)
}

/// The answer the reader makes to a request on its own (a `PONG`, a
/// refusal, an `ERROR` for an invalid request), on `lane`. Every request
/// gets exactly one answer or the connection ends: when the answer cannot
/// be queued (the platform has not read for long, and the queue or the
/// replies' headroom is full) the connection is given up, and the runtime
/// connects again.
fn answer(shared: &Shared, lane: Lane, frame: Frame) {
    let queued = protocol::encode_response(frame)
        .is_ok_and(|text| queue_reply(shared, lane, text.into_string()));
    if !queued {
        let _ = shared.send_failed.set(Ended::Failed(UNANSWERED.into()));
    }
}

/// Queues a small frame the reader or the writer makes on `lane` unless
/// the queue or the replies' headroom is full; false: not queued.
fn queue_reply(shared: &Shared, lane: Lane, text: String) -> bool {
    shared
        .backlog
        .try_hold_reply(text.len())
        .is_some_and(|held| shared.outbox.try_send(lane, Out::Frame(text, held)).is_ok())
}

/// A `STATUS` as of now, encoded.
fn status_frame(shared: &Shared) -> Option<String> {
    let bytes = std::fs::metadata(&shared.setup.audit_path).map_or(0, |m| m.len());
    let report = shared
        .slots
        .status(bytes, shared.connected_at, Instant::now());
    let frame = Frame::new(fresh_id(), now_ts(), Message::Status(report.status))
        .with_capacity(report.pending_capacity);
    protocol::encode(&frame).ok()
}

/// The periodic `STATUS`: advisory, and queued from the writer thread
/// itself, so it never waits for room and is dropped when there is none.
fn send_status(shared: &Shared) {
    if let Some(bytes) = status_frame(shared) {
        let _ = queue_reply(shared, Lane::Normal, bytes);
    }
}

/// Sends what the connection produces, lane by lane, and the periodic
/// `STATUS`. Ends on a close request or a send failure; its end closes the
/// outbox, so no worker waits for room that will never come.
///
/// The lanes, taken in this order whenever more than one holds a frame (a
/// frame already being written is never cut short):
/// [`Lane::Priority`]: `PONG`s and the connection's end, which no worker
/// may delay. [`Lane::Urgent`]: command results. The platform waits for any
/// reply for the same time from its request on; a file operation's
/// response exists at once, while a command's result can be made as late
/// as that wait allows (a command bounded by it is stopped just before it,
/// EXEC.md §9), so behind a few large file responses on a slow link it
/// would arrive after the platform gave up. Responses may leave in any
/// order (PROTOCOL.md §5.7); each keeps its slot and its backlog bytes
/// until it is handed to the socket, whichever lane it took.
/// [`Lane::Normal`]: every other response and the periodic `STATUS`.
fn write_loop(shared: &Shared, out: impl Outbound) {
    write_frames(shared, out);
    shared.outbox.close();
}

fn write_frames(shared: &Shared, mut out: impl Outbound) {
    let mut next_status = Instant::now() + STATUS_INTERVAL;
    // Frames queued on the socket since its last flush: what is at hand
    // leaves together, flushed once the outbox is empty.
    let mut queued = 0;
    loop {
        let item = match shared.outbox.try_next(&LANES) {
            Some(item) => item,
            None => {
                if queued > 0 {
                    queued = 0;
                    if !flush(shared, &mut out) {
                        return;
                    }
                }
                match shared.outbox.next(next_status) {
                    Next::Item(item) => item,
                    Next::Timeout => {
                        next_status += STATUS_INTERVAL;
                        send_status(shared);
                        continue;
                    }
                }
            }
        };
        match item {
            Out::Close(code, reason) => {
                // The close is sent once every worker has finished, so the
                // responses it would overtake on the priority lane are all
                // queued already: each acknowledged operation (an audit
                // failure's INTERNAL_ERROR among them) is answered first.
                while let Some(item) = shared.outbox.try_next(&[Lane::Urgent, Lane::Normal]) {
                    if !deliver(shared, &mut out, item) {
                        return;
                    }
                }
                out.close(code, reason);
                return;
            }
            Out::Stop => {
                // What this batch queued goes as far as the ending
                // connection takes it.
                if queued > 0 {
                    let _ = out.flush();
                }
                return;
            }
            item => {
                if !deliver(shared, &mut out, item) {
                    return;
                }
                queued += 1;
                if queued >= QUEUED_FRAMES {
                    queued = 0;
                    if !flush(shared, &mut out) {
                        return;
                    }
                }
            }
        }
    }
}

/// Every lane, highest first.
const LANES: [Lane; 3] = [Lane::Priority, Lane::Urgent, Lane::Normal];

/// Frames the writer queues on the socket at most before it flushes them,
/// however many more are at hand: a `PONG` behind them waits for no more
/// than these (each at most `QUEUED_TEXT_BYTES`; a larger frame is sent
/// at once, and flushes what is queued ahead of it).
const QUEUED_FRAMES: usize = 16;

/// Hands what is queued to the socket; false once a send failed (and the
/// reader has been told).
fn flush(shared: &Shared, out: &mut impl Outbound) -> bool {
    match out.flush() {
        Ok(()) => true,
        Err(failure) => {
            let _ = shared.send_failed.set(failure);
            false
        }
    }
}

/// Queues one frame or response on the socket (the caller flushes); false
/// once the connection cannot take more (a send failed, and the reader has
/// been told) or the item ends the connection.
fn deliver(shared: &Shared, out: &mut impl Outbound, item: Out) -> bool {
    let sent = match item {
        Out::Frame(text, held) => {
            let sent = out.send_queued(text.into());
            drop(held);
            sent
        }
        Out::Response(Response {
            mut text,
            held,
            admitted,
        }) => {
            // The slot is given back as the response goes to the socket,
            // not after: a platform that answers its arrival at once finds
            // the capacity the response announced, which is stamped now
            // (the response was encoded before its record was durable, and
            // requests admitted meanwhile count).
            let released = admitted.finish();
            text.restamp_capacity(released.pending_capacity);
            let sent = out.send_queued(text);
            drop(held);
            // §9.2: right after the response that ended saturation.
            match sent {
                Ok(()) if released.edge_status => {
                    status_frame(shared).map_or(Ok(()), |s| out.send_queued(s.into()))
                }
                sent => sent,
            }
        }
        Out::Close(..) | Out::Stop => return false,
    };
    match sent {
        Ok(()) => true,
        Err(failure) => {
            // The reader sees this and ends the connection (the runtime
            // then reconnects).
            let _ = shared.send_failed.set(failure);
            false
        }
    }
}
