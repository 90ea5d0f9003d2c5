//! The audit writer (AUDIT.md §1, §6.1, §8, §9): one thread owns the current
//! file and the chain; callers submit records over a channel and receive a
//! [`Ticket`] that completes only once the record is durable, or leave a
//! [`Then`] that the writer runs once it is.
//!
//! Records that arrive together share one `fdatasync` (group commit); no
//! ticket completes, and no continuation runs, before the sync that covers
//! it. A failed append or sync
//! marks the writer unhealthy for good: every later record is refused and the
//! daemon is expected to fail closed. Every descriptor it opens is
//! close-on-exec (std's default), so none reaches a command. The writer never restarts a chain
//! inside a file that already has records, never overwrites a rotated file,
//! and never prints anything itself (warnings go to the caller's callback).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{FlockOperation, Mode, OFlags, RenameFlags};
use serde_json::{Value, json};

use super::anchor;
use super::canonical::{CanonError, canonical};
use super::cap::cap_details;
use super::files::last_complete_line;
use super::record::{AuditKey, Details, Outcome, Record};
use crate::handoff::{self, Fill, Receiver, Sender, Wait};
use crate::protocol::json::parse_strict_for_audit;

/// Size at which the current file is rotated before the next write (64 MiB).
pub const ROTATE_AT_BYTES: u64 = 64 * 1024 * 1024;
/// Age of the first record after which the file is rotated (30 days).
pub const ROTATE_AFTER: Duration = Duration::from_secs(30 * 24 * 3600);
/// Most records committed by one sync.
const MAX_GROUP: usize = 512;

/// Why a file was rotated (`AUDIT_ROTATED.details.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotateReason {
    /// The file reached 64 MiB.
    Size,
    /// The first record is older than 30 days.
    Age,
    /// `audit rotate`.
    Explicit,
    /// A new audit key was created while the log had records.
    KeyChange,
    /// The file ended torn or with a record the key does not verify.
    Recovery,
}

impl RotateReason {
    fn as_str(self) -> &'static str {
        match self {
            RotateReason::Size => "size",
            RotateReason::Age => "age",
            RotateReason::Explicit => "explicit",
            RotateReason::KeyChange => "key_change",
            RotateReason::Recovery => "recovery",
        }
    }
}

/// Why the writer could not be created or could not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditError {
    /// The directory, lock or file cannot be created or opened (start: 78).
    Open(String),
    /// Another process holds the writer lock (start: 78; `audit rotate`: 75).
    Locked(PathBuf),
    /// An append or sync failed: the record is not durable and the writer
    /// refuses everything from now on (AUDIT.md §8.3).
    WriteFailed(String),
    /// An earlier write failed; nothing more is written.
    Unhealthy(String),
    /// A session-bound handle was asked to write under another session.
    CrossSession,
    /// A session-bound handle needs a non-empty session id.
    EmptySession,
    /// The record holds a value with no canonical form (a bug upstream).
    Canonical(String),
    /// The writer thread is gone.
    Closed,
    /// A log file could not be read by a reading command (`audit export`).
    Read(String),
    /// `audit export`: the output already exists; nothing was written there.
    OutputExists(PathBuf),
    /// `audit export`: the output (or its temporary file) cannot be created,
    /// written, synced or renamed into place.
    Output(String),
}

impl fmt::Display for AuditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuditError::Open(why) => write!(f, "cannot open the audit log: {why}"),
            AuditError::Locked(p) => write!(
                f,
                "audit log in use by another shim process (lock {} is held)",
                p.display()
            ),
            AuditError::WriteFailed(why) => write!(f, "audit record could not be written: {why}"),
            AuditError::Unhealthy(why) => {
                write!(
                    f,
                    "the audit log failed earlier and accepts no more records: {why}"
                )
            }
            AuditError::CrossSession => {
                f.write_str("audit write attempted to cross session boundary")
            }
            AuditError::EmptySession => {
                f.write_str("a session-bound audit handle needs a session id")
            }
            AuditError::Canonical(why) => write!(f, "audit record cannot be canonicalised: {why}"),
            AuditError::Closed => f.write_str("the audit writer has stopped"),
            AuditError::Read(why) => write!(f, "cannot read audit log {why}"),
            AuditError::OutputExists(p) => {
                write!(f, "{} already exists; refusing to replace it", p.display())
            }
            AuditError::Output(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for AuditError {}

impl From<CanonError> for AuditError {
    fn from(e: CanonError) -> Self {
        AuditError::Canonical(e.to_string())
    }
}

/// Whether another process holds the writer lock of the log at `path`
/// (`status`, CLI.md §4.3). Probed with a shared non-blocking lock that is
/// released at once; a missing lock file means no writer ever ran here.
pub fn writer_running(path: &Path) -> bool {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return false;
    };
    let Ok(lock) = std::fs::File::open(dir.join(format!(".{name}.lock"))) else {
        return false;
    };
    matches!(
        rustix::fs::flock(&lock, FlockOperation::NonBlockingLockShared),
        Err(rustix::io::Errno::WOULDBLOCK)
    )
}

/// A record to write; the writer adds `ts`, ids, `seq` and the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Operation or event name.
    pub op: String,
    /// The request's envelope id, when a request caused the record.
    pub request_id: Option<String>,
    /// Operation-specific fields, in on-disk order.
    pub details: Details,
    /// The outcome.
    pub result: Outcome,
    /// An explicit session; `None` uses the writer's default (or `"-"`).
    pub session_id: Option<String>,
}

impl Entry {
    /// An event with default result and no request.
    pub fn event(op: &str, details: Details) -> Self {
        Self {
            op: op.to_owned(),
            request_id: None,
            details,
            result: Outcome::default(),
            session_id: None,
        }
    }
}

/// What a completed ticket reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durable {
    /// The record's `seq` in its file.
    pub seq: u64,
    /// The record's `hmac`.
    pub hmac: String,
}

/// A submitted record; [`Ticket::wait`] returns once it is durable.
#[derive(Debug)]
pub struct Ticket(Wait<Result<Durable, AuditError>>);

impl Ticket {
    /// Blocks until the record is durable (or failed).
    pub fn wait(self) -> Result<Durable, AuditError> {
        self.0.recv().unwrap_or(Err(AuditError::Closed))
    }
}

/// How the writer is set up.
#[derive(Clone)]
pub struct WriterOptions {
    /// The current log file.
    pub path: PathBuf,
    /// `shim_version` of every record.
    pub shim_version: String,
    /// Default `machine_id` (`"-"` when `None`).
    pub machine_id: Option<String>,
    /// Default `session_id` (`"-"` when `None`): the legacy session.
    pub default_session: Option<String>,
    /// Size trigger (normally `ROTATE_AT_BYTES`).
    pub rotate_at_bytes: u64,
    /// Age trigger (normally `ROTATE_AFTER`).
    pub rotate_after: Duration,
    /// Rotate a non-empty file right after opening (a new key was created).
    pub rotate_on_open: Option<RotateReason>,
    /// Formats the rotation stamp `YYYYMMDD-HHMMSS` for a Unix time (local
    /// time in production).
    pub stamp: Arc<dyn Fn(i64) -> String + Send + Sync>,
    /// Receives warnings (loose permissions tightened, a failed rotation).
    pub warn: Arc<dyn Fn(&str) + Send + Sync>,
    /// The log's directory is this shim's own per-OS directory, whose loose
    /// permissions are tightened. Any other (configured) directory that
    /// exists is only checked: a shared one is refused and nothing in it is
    /// changed.
    pub own_directory: bool,
}

impl fmt::Debug for WriterOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterOptions")
            .field("path", &self.path)
            .field("rotate_at_bytes", &self.rotate_at_bytes)
            .field("rotate_after", &self.rotate_after)
            .finish_non_exhaustive()
    }
}

impl WriterOptions {
    /// Production defaults for `path`.
    pub fn new(path: PathBuf, shim_version: &str) -> Self {
        Self {
            path,
            shim_version: shim_version.to_owned(),
            machine_id: None,
            default_session: None,
            rotate_at_bytes: ROTATE_AT_BYTES,
            rotate_after: ROTATE_AFTER,
            rotate_on_open: None,
            stamp: Arc::new(crate::timefmt::local_stamp),
            warn: Arc::new(|_| {}),
            own_directory: false,
        }
    }
}

/// What the writer does once a record is durable, or once it cannot be:
/// run on the writer's own thread right after the sync, so the caller's
/// next step (a response queued for its socket) needs no thread of its own
/// to wake. It must only hand work on and never wait: no other record is
/// committed while it runs. Dropped unrun (the writer is gone), it runs
/// with [`AuditError::Closed`], so its owner always learns the outcome.
pub struct Then(Option<Step>);

/// The step a [`Then`] holds until it runs.
type Step = Box<dyn FnOnce(Result<Durable, AuditError>) + Send>;

impl Then {
    /// Wraps `step`.
    pub fn new(step: impl FnOnce(Result<Durable, AuditError>) + Send + 'static) -> Then {
        Then(Some(Box::new(step)))
    }

    fn run(mut self, result: Result<Durable, AuditError>) {
        if let Some(step) = self.0.take() {
            step(result);
        }
    }
}

impl Drop for Then {
    fn drop(&mut self) {
        if let Some(step) = self.0.take() {
            step(Err(AuditError::Closed));
        }
    }
}

impl fmt::Debug for Then {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Then { .. }")
    }
}

/// Who learns a record's outcome.
enum Reply {
    /// A caller blocked on its [`Ticket`].
    Ticket(Fill<Result<Durable, AuditError>>),
    /// A continuation.
    Then(Then),
}

impl Reply {
    fn send(self, result: Result<Durable, AuditError>) {
        match self {
            Reply::Ticket(fill) => fill.send(result),
            Reply::Then(then) => then.run(result),
        }
    }
}

enum Request {
    Record(Entry, Reply),
    Rotate(RotateReason, Fill<Result<Option<PathBuf>, AuditError>>),
}

#[derive(Debug, Default)]
struct Health {
    failed: AtomicBool,
    reason: Mutex<String>,
}

impl Health {
    fn fail(&self, why: &str) {
        if let Ok(mut reason) = self.reason.lock() {
            if reason.is_empty() {
                *reason = why.to_owned();
            }
        }
        self.failed.store(true, Ordering::SeqCst);
    }

    fn reason(&self) -> String {
        self.reason.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// A handle on the shared writer; cheap to clone, usable from any thread.
#[derive(Clone, Debug)]
pub struct AuditLog {
    tx: Sender<Request>,
    health: Arc<Health>,
    rotated_at_open: Option<PathBuf>,
}

/// The writer thread, joined when the daemon stops.
#[derive(Debug)]
pub struct WriterThread(JoinHandle<()>);

impl WriterThread {
    /// Waits for the thread to finish (after every handle was dropped).
    pub fn join(self) {
        let _ = self.0.join();
    }
}

impl AuditLog {
    /// Opens (or creates) the log, takes the writer lock, recovers the chain
    /// and starts the writer thread.
    pub fn open(
        options: WriterOptions,
        key: AuditKey,
    ) -> Result<(AuditLog, WriterThread), AuditError> {
        let mut state = State::open(options, key)?;
        let rotated_at_open = state.rotated_at_open.take();
        let (tx, rx) = handoff::queue();
        let health = Arc::new(Health::default());
        let thread_health = health.clone();
        let handle = std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || state.run(&rx, &thread_health))
            .map_err(|e| AuditError::Open(format!("cannot start the writer thread: {e}")))?;
        Ok((
            AuditLog {
                tx,
                health,
                rotated_at_open,
            },
            WriterThread(handle),
        ))
    }

    /// The file the current log was rotated to while opening (recovery of a
    /// torn or unverifiable file, or `rotate_on_open`), if that happened.
    pub fn rotated_at_open(&self) -> Option<&Path> {
        self.rotated_at_open.as_deref()
    }

    /// True until a write has failed.
    pub fn is_healthy(&self) -> bool {
        !self.health.failed.load(Ordering::SeqCst)
    }

    /// Why the writer failed, if it did.
    pub fn failure(&self) -> Option<String> {
        (!self.is_healthy()).then(|| self.health.reason())
    }

    /// Submits a record; the ticket completes once it is durable.
    ///
    /// Every record of the program enters here, so this is where its
    /// free-text fields are capped: on the caller's thread, so neither the
    /// queue nor the writer thread ever holds or hashes an oversized field
    /// (the writer's own `AUDIT_ROTATED` holds only file names and numbers).
    pub fn submit(&self, entry: Entry) -> Ticket {
        let (fill, rx) = handoff::oneshot();
        self.enqueue(entry, Reply::Ticket(fill));
        Ticket(rx)
    }

    /// Submits a record; `then` runs on the writer's thread once it is
    /// durable (or has failed). See [`Then`] for what it may do.
    pub fn submit_then(&self, entry: Entry, then: Then) {
        self.enqueue(entry, Reply::Then(then));
    }

    fn enqueue(&self, mut entry: Entry, reply: Reply) {
        entry.details = cap_details(std::mem::take(&mut entry.details));
        if !self.is_healthy() {
            reply.send(Err(AuditError::Unhealthy(self.health.reason())));
        } else if let Err(Request::Record(_, reply)) = self.tx.send(Request::Record(entry, reply)) {
            reply.send(Err(AuditError::Closed));
        }
    }

    /// Writes a record and waits until it is durable.
    pub fn write(&self, entry: Entry) -> Result<Durable, AuditError> {
        self.submit(entry).wait()
    }

    /// Rotates now; `Ok(None)` when the current file is empty.
    pub fn rotate(&self, reason: RotateReason) -> Result<Option<PathBuf>, AuditError> {
        let (reply, rx) = handoff::oneshot();
        self.tx
            .send(Request::Rotate(reason, reply))
            .map_err(|_| AuditError::Closed)?;
        rx.recv().unwrap_or(Err(AuditError::Closed))
    }

    /// A handle whose every record carries `session_id` (AUDIT.md §8.5).
    pub fn bind(&self, session_id: &str) -> Result<SessionAudit, AuditError> {
        if session_id.is_empty() {
            return Err(AuditError::EmptySession);
        }
        Ok(SessionAudit {
            log: self.clone(),
            session_id: session_id.to_owned(),
        })
    }
}

/// A child runtime's view of the shared writer: bound to one session for
/// its whole life.
#[derive(Clone, Debug)]
pub struct SessionAudit {
    log: AuditLog,
    session_id: String,
}

impl SessionAudit {
    /// The bound session.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Submits a record under the bound session; an explicit other session
    /// is refused and nothing is written.
    pub fn submit(&self, entry: Entry) -> Ticket {
        let (fill, rx) = handoff::oneshot();
        self.enqueue(entry, Reply::Ticket(fill));
        Ticket(rx)
    }

    /// Submits a record under the bound session; `then` runs once it is
    /// durable, or at once when it is refused (see [`AuditLog::submit_then`]).
    pub fn submit_then(&self, entry: Entry, then: Then) {
        self.enqueue(entry, Reply::Then(then));
    }

    fn enqueue(&self, mut entry: Entry, reply: Reply) {
        match &entry.session_id {
            Some(s) if *s != self.session_id => {
                reply.send(Err(AuditError::CrossSession));
                return;
            }
            _ => entry.session_id = Some(self.session_id.clone()),
        }
        self.log.enqueue(entry, reply);
    }

    /// Writes a record and waits until it is durable.
    pub fn write(&self, entry: Entry) -> Result<Durable, AuditError> {
        self.submit(entry).wait()
    }

    /// True until a write has failed.
    pub fn is_healthy(&self) -> bool {
        self.log.is_healthy()
    }
}

/// The chain position the next record takes.
#[derive(Debug, Clone, PartialEq)]
struct Chain {
    seq: u64,
    prev: Option<String>,
    last_ts: f64,
    /// `ts` of the file's first record (the age trigger), when known.
    first_ts: Option<f64>,
}

impl Chain {
    fn fresh() -> Self {
        Self {
            seq: 1,
            prev: None,
            last_ts: 0.0,
            first_ts: None,
        }
    }
}

struct State {
    options: WriterOptions,
    key: AuditKey,
    dir: OwnedFd,
    name: String,
    /// The anchor's spare file (see `write_anchor`), named after `name`.
    anchor_spare: String,
    /// The anchor file, named after `name`.
    anchor_file: String,
    file: File,
    size: u64,
    chain: Chain,
    /// Where `open` rotated the file it found, if it did.
    rotated_at_open: Option<PathBuf>,
    _lock: File,
}

fn io_err(what: &str, path: &Path, e: impl fmt::Display) -> AuditError {
    AuditError::Open(format!("{what} {}: {e}", path.display()))
}

fn now_ts() -> f64 {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    micros as f64 / 1e6
}

impl State {
    fn open(options: WriterOptions, key: AuditKey) -> Result<State, AuditError> {
        let path = options.path.clone();
        let dir_path = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .ok_or_else(|| AuditError::Open(format!("{} has no directory", path.display())))?
            .to_owned();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| AuditError::Open(format!("{} has no usable file name", path.display())))?
            .to_owned();
        match std::fs::metadata(&dir_path) {
            Ok(_) if options.own_directory => tighten(&dir_path, 0o700, &options)?,
            Ok(meta) => refuse_shared(&dir_path, &meta)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir_path)
                .map_err(|e| io_err("cannot create", &dir_path, e))?,
            Err(e) => return Err(io_err("cannot stat", &dir_path, e)),
        }
        // Nothing is created next to something that is not a log file (a
        // device, a link, a directory).
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if !meta.file_type().is_file() => {
                return Err(AuditError::Open(format!(
                    "{} is not a regular file",
                    path.display()
                )));
            }
            Ok(meta) if meta.uid() != rustix::process::geteuid().as_raw() => {
                return Err(AuditError::Open(format!(
                    "{} belongs to another user",
                    path.display()
                )));
            }
            _ => {}
        }
        let lock_path = dir_path.join(format!(".{name}.lock"));
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| io_err("cannot open", &lock_path, e))?;
        match rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(AuditError::Locked(lock_path)),
            Err(e) => return Err(io_err("cannot lock", &lock_path, e)),
        }
        let dir = rustix::fs::open(
            &dir_path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("cannot open", &dir_path, e))?;
        let file = open_current(&path, &dir)?;
        tighten(&path, 0o600, &options)?;
        let size = file
            .metadata()
            .map_err(|e| io_err("cannot stat", &path, e))?
            .len();
        let mut state = State {
            options,
            key,
            dir,
            anchor_spare: format!(".{name}.anchor.tmp"),
            anchor_file: format!("{name}.anchor"),
            name,
            file,
            size,
            chain: Chain::fresh(),
            rotated_at_open: None,
            _lock: lock,
        };
        match state.recover()? {
            Recovered::Resume(chain) => {
                state.chain = chain;
                if let Some(reason) = state.options.rotate_on_open {
                    if state.size > 0 {
                        state.rotated_at_open = state.rotate(reason, true)?;
                    }
                }
            }
            Recovered::Unusable(last) => {
                state.chain = last;
                state.rotated_at_open = state.rotate(RotateReason::Recovery, true)?;
                if let Some(rotated) = &state.rotated_at_open {
                    (state.options.warn)(&format!(
                        "{} ended with a torn or unverifiable record; it was set aside unchanged as {} and a new log was started",
                        state.options.path.display(),
                        rotated.display()
                    ));
                }
            }
        }
        Ok(state)
    }

    /// AUDIT.md §6.1 with its hardening note: resume after the last complete
    /// record if it verifies; otherwise the file must be rotated away.
    fn recover(&mut self) -> Result<Recovered, AuditError> {
        if self.size == 0 {
            return Ok(Recovered::Resume(Chain::fresh()));
        }
        let path = self.options.path.clone();
        let mut reader = File::open(&path).map_err(|e| io_err("cannot read", &path, e))?;
        let last_line =
            last_complete_line(&mut reader).map_err(|e| io_err("cannot read", &path, e))?;
        let ends_with_lf =
            ends_with_lf(&mut reader, self.size).map_err(|e| io_err("cannot read", &path, e))?;
        let first_ts = first_record_ts(&mut reader).ok().flatten();
        let parsed = last_line
            .as_deref()
            .and_then(|line| self.verified_tail(line))
            .map(|chain| Chain { first_ts, ..chain });
        match parsed {
            Some(chain) if ends_with_lf => Ok(Recovered::Resume(chain)),
            Some(chain) => Ok(Recovered::Unusable(chain)),
            None => Ok(Recovered::Unusable(Chain::fresh())),
        }
    }

    /// The chain after `line`, if it is a record the current key verifies.
    fn verified_tail(&self, line: &[u8]) -> Option<Chain> {
        let text = std::str::from_utf8(line).ok()?;
        let Value::Object(mut map) = parse_strict_for_audit(text).ok()? else {
            return None;
        };
        let Some(Value::String(hmac)) = map.remove("hmac") else {
            return None;
        };
        let seq = map.get("seq").and_then(Value::as_u64)?;
        let ts = map.get("ts").and_then(Value::as_f64).unwrap_or(0.0);
        let canonical = canonical(&Value::Object(map)).ok()?;
        self.key
            .verify_hex(canonical.as_bytes(), &hmac)
            .then(|| Chain {
                seq: seq + 1,
                prev: Some(hmac),
                last_ts: ts,
                first_ts: None,
            })
    }

    fn run(mut self, rx: &Receiver<Request>, health: &Health) {
        let mut batch = Vec::with_capacity(MAX_GROUP);
        while rx.recv_many(&mut batch, MAX_GROUP) {
            self.handle_batch(batch.drain(..), health);
        }
    }

    fn handle_batch(&mut self, batch: impl Iterator<Item = Request>, health: &Health) {
        let mut pending: Vec<(Durable, Reply)> = Vec::new();
        let mut buffer: Vec<u8> = Vec::new();
        let mut staged = self.chain.clone();
        for request in batch {
            if health.failed.load(Ordering::SeqCst) {
                refuse(request, &health.reason());
                continue;
            }
            match request {
                Request::Rotate(reason, reply) => {
                    self.commit(&mut buffer, &mut pending, &staged, health);
                    let result = if health.failed.load(Ordering::SeqCst) {
                        Err(AuditError::Unhealthy(health.reason()))
                    } else {
                        self.rotate(reason, false)
                            .inspect_err(|e| fail_if_write(e, health))
                    };
                    staged = self.chain.clone();
                    reply.send(result);
                }
                Request::Record(entry, reply) => {
                    if let Some(reason) = self.rotation_due(buffer.len() as u64) {
                        self.commit(&mut buffer, &mut pending, &staged, health);
                        if health.failed.load(Ordering::SeqCst) {
                            reply.send(Err(AuditError::Unhealthy(health.reason())));
                            continue;
                        }
                        match self.rotate(reason, false) {
                            Ok(_) => {}
                            Err(e @ AuditError::WriteFailed(_)) => {
                                fail_if_write(&e, health);
                                reply.send(Err(e));
                                continue;
                            }
                            // A refused rename keeps the old file and chain.
                            Err(_) => {}
                        }
                        staged = self.chain.clone();
                    }
                    match self.build(entry, &mut staged) {
                        Ok((line, durable)) => {
                            buffer.extend_from_slice(line.as_bytes());
                            buffer.push(b'\n');
                            pending.push((durable, reply));
                        }
                        Err(e) => {
                            reply.send(Err(e));
                        }
                    }
                }
            }
        }
        self.commit(&mut buffer, &mut pending, &staged, health);
    }

    /// Seals `entry` at the staged chain position and advances it.
    fn build(&self, entry: Entry, staged: &mut Chain) -> Result<(String, Durable), AuditError> {
        let ts = now_ts().max(staged.last_ts);
        let named = |id: &Option<String>| id.as_ref().filter(|s| !s.is_empty()).cloned();
        let record = Record {
            ts,
            session_id: entry
                .session_id
                .filter(|s| !s.is_empty())
                .or_else(|| named(&self.options.default_session))
                .unwrap_or_else(|| "-".to_owned()),
            machine_id: named(&self.options.machine_id).unwrap_or_else(|| "-".to_owned()),
            shim_version: self.options.shim_version.clone(),
            request_id: entry.request_id,
            op: entry.op,
            details: entry.details,
            result: entry.result,
            seq: staged.seq,
            prev_hmac: staged.prev.clone(),
        };
        let sealed = record.seal(&self.key)?;
        let durable = Durable {
            seq: staged.seq,
            hmac: sealed.hmac.clone(),
        };
        if staged.seq == 1 {
            staged.first_ts = Some(ts);
        }
        staged.seq += 1;
        staged.prev = Some(sealed.hmac);
        staged.last_ts = ts;
        Ok((sealed.line, durable))
    }

    /// Appends the staged lines, syncs once, then acknowledges them.
    fn commit(
        &mut self,
        buffer: &mut Vec<u8>,
        pending: &mut Vec<(Durable, Reply)>,
        staged: &Chain,
        health: &Health,
    ) {
        if pending.is_empty() {
            return;
        }
        let result = self.append(buffer);
        match result {
            Ok(()) => {
                self.chain = staged.clone();
                // The anchor may lag the log but never lead it, so the
                // callers are released first: their replies do not wait
                // for a file the sync does not depend on.
                for (durable, reply) in pending.drain(..) {
                    reply.send(Ok(durable));
                }
                self.write_anchor();
            }
            Err(why) => {
                health.fail(&why);
                for (_, reply) in pending.drain(..) {
                    reply.send(Err(AuditError::WriteFailed(why.clone())));
                }
            }
        }
        buffer.clear();
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.file
            .write_all(bytes)
            .map_err(|e| format!("append to {}: {e}", self.options.path.display()))?;
        rustix::fs::fdatasync(&self.file)
            .map_err(|e| format!("sync of {}: {e}", self.options.path.display()))?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// Replaces the anchor (AUDIT.md §4). It vouches only for records
    /// already synced, so it needs no sync of its own: after a crash it may
    /// lag behind the log, never run ahead of it.
    ///
    /// The new line is written into the spare file `.<name>.anchor.tmp`,
    /// which then trades places with the anchor in one atomic exchange, so
    /// a reader always finds a whole anchor under the anchor's name and the
    /// previous anchor becomes the next spare. Creating a file and renaming
    /// it over the anchor after every sync cost more than the sync itself
    /// (an inode allocated and one freed each time, with the filesystem's
    /// flush-on-replace and block discards). The spare is rewritten in place
    /// only when the new line has its exact length, so a crash before the
    /// spare's data reaches the disk leaves it holding an older whole
    /// anchor: one that lags, never a torn one. A line of another length
    /// (the seq gains a digit, the first anchor) takes the slow path, a new
    /// file renamed over the anchor.
    fn write_anchor(&mut self) {
        let Some(hmac) = &self.chain.prev else {
            return;
        };
        let line = anchor::line(&self.key, &self.name, self.chain.seq - 1, hmac);
        let (spare, target) = (&self.anchor_spare, &self.anchor_file);
        let written = match self.exchange_anchor(spare, target, line.as_bytes()) {
            Ok(true) => Ok(()),
            Ok(false) => self.replace_anchor(spare, target, line.as_bytes()),
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            (self.options.warn)(&format!("could not update the audit tail anchor: {e}"));
        }
    }

    /// The fast path of [`State::write_anchor`]: false when there is no
    /// spare of the line's length or no anchor to trade places with.
    fn exchange_anchor(&self, tmp: &str, target: &str, line: &[u8]) -> io::Result<bool> {
        let spare = match rustix::fs::openat(
            &self.dir,
            tmp,
            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // None yet, or something else under its name (a link): the
            // slow path replaces it.
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let st = rustix::fs::fstat(&spare)?;
        // Only a file that is ours alone is written through: never one with
        // another name (a hard link) or loosened permissions, which would
        // become the anchor's.
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
            || st.st_nlink != 1
            || st.st_uid != rustix::process::geteuid().as_raw()
            || st.st_mode & 0o077 != 0
            || u64::try_from(st.st_size).ok() != Some(line.len() as u64)
        {
            return Ok(false);
        }
        if rustix::io::pwrite(&spare, line, 0)? != line.len() {
            return Ok(false);
        }
        drop(spare);
        self.trade_places(tmp, target)
    }

    /// Exchanges the spare and the anchor atomically; false when there is
    /// no anchor yet or the filesystem cannot exchange.
    fn trade_places(&self, tmp: &str, target: &str) -> io::Result<bool> {
        match rustix::fs::renameat_with(&self.dir, tmp, &self.dir, target, RenameFlags::EXCHANGE) {
            Ok(()) => Ok(true),
            Err(
                rustix::io::Errno::NOENT
                | rustix::io::Errno::INVAL
                | rustix::io::Errno::NOSYS
                | rustix::io::Errno::OPNOTSUPP,
            ) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The slow path of [`State::write_anchor`]: a new spare, synced so
    /// that it is whole on disk before its name can change, trades places
    /// with the anchor (or becomes it, the first time). The old anchor is
    /// the next spare.
    fn replace_anchor(&self, tmp: &str, target: &str, line: &[u8]) -> io::Result<()> {
        // A spare of another length (or another kind of file under its
        // name) is not written through; it is replaced.
        match rustix::fs::unlinkat(&self.dir, tmp, rustix::fs::AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        let fd = rustix::fs::openat(
            &self.dir,
            tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut file = File::from(fd);
        file.write_all(line)?;
        rustix::fs::fdatasync(&file)?;
        drop(file);
        if !self.trade_places(tmp, target)? {
            rustix::fs::renameat(&self.dir, tmp, &self.dir, target)?;
        }
        Ok(())
    }

    fn rotation_due(&self, staged_bytes: u64) -> Option<RotateReason> {
        if self.size + staged_bytes >= self.options.rotate_at_bytes {
            return Some(RotateReason::Size);
        }
        let first = self.chain.first_ts?;
        (self.size > 0 && now_ts() - first > self.options.rotate_after.as_secs_f64())
            .then_some(RotateReason::Age)
    }

    /// AUDIT.md §9.2 with the hardening notes: no-replace rename to the
    /// first free stamped name, a new file created `O_EXCL` 0600, the
    /// directory synced, then `AUDIT_ROTATED` as the new file's first record.
    ///
    /// `at_open`: a failure here stops the writer from being created at all
    /// (recovery must never append to the old file).
    fn rotate(
        &mut self,
        reason: RotateReason,
        at_open: bool,
    ) -> Result<Option<PathBuf>, AuditError> {
        if self.size == 0 && reason == RotateReason::Explicit {
            return Ok(None);
        }
        let stamp = (self.options.stamp)(now_ts() as i64);
        let mut target = None;
        for counter in 0u32..10_000 {
            let candidate = if counter == 0 {
                format!("{}.{stamp}", self.name)
            } else {
                format!("{}.{stamp}-{counter}", self.name)
            };
            match rustix::fs::renameat_with(
                &self.dir,
                self.name.as_str(),
                &self.dir,
                candidate.as_str(),
                RenameFlags::NOREPLACE,
            ) {
                Ok(()) => {
                    target = Some(candidate);
                    break;
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => {
                    let why = format!("rotation of {} failed: {e}", self.options.path.display());
                    if at_open {
                        return Err(AuditError::Open(why));
                    }
                    (self.options.warn)(&format!("{why}; still writing to the current file"));
                    return Err(AuditError::Open(why));
                }
            }
        }
        let Some(rotated) = target else {
            return Err(AuditError::Open(
                "no free name for the rotated audit log".into(),
            ));
        };
        self.file = open_current(&self.options.path, &self.dir).map_err(|e| match e {
            AuditError::Open(why) => AuditError::WriteFailed(why),
            other => other,
        })?;
        self.size = 0;
        let previous = std::mem::replace(&mut self.chain, Chain::fresh());
        let details = Details::new()
            .with("reason", json!(reason.as_str()))
            .with("previous_file", json!(rotated))
            .with(
                "previous_last_seq",
                json!(previous.prev.as_ref().map(|_| previous.seq - 1)),
            )
            .with("previous_last_hmac", json!(previous.prev));
        let mut staged = self.chain.clone();
        let (line, _) = self.build(Entry::event("AUDIT_ROTATED", details), &mut staged)?;
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        self.append(&bytes).map_err(AuditError::WriteFailed)?;
        self.chain = staged;
        self.write_anchor();
        Ok(Some(self.options.path.with_file_name(rotated)))
    }
}

enum Recovered {
    /// Append after this chain position.
    Resume(Chain),
    /// The file cannot be appended to; the chain of its last good record
    /// (for `AUDIT_ROTATED`), if any.
    Unusable(Chain),
}

fn refuse(request: Request, reason: &str) {
    match request {
        Request::Record(_, reply) => {
            reply.send(Err(AuditError::Unhealthy(reason.to_owned())));
        }
        Request::Rotate(_, reply) => {
            reply.send(Err(AuditError::Unhealthy(reason.to_owned())));
        }
    }
}

fn fail_if_write(e: &AuditError, health: &Health) {
    if let AuditError::WriteFailed(why) = e {
        health.fail(why);
    }
}

/// Opens the current file for appending, creating it `O_EXCL` with mode
/// 0600 when absent (and syncing the directory so the new name is durable).
fn open_current(path: &Path, dir: &OwnedFd) -> Result<File, AuditError> {
    let created = OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(file) => {
            rustix::fs::fsync(dir.as_fd())
                .map_err(|e| io_err("cannot sync the directory of", path, e))?;
            Ok(file)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => OpenOptions::new()
            .append(true)
            // A symlink planted at the log's name is refused, not followed.
            .custom_flags(OFlags::NOFOLLOW.bits() as i32)
            .open(path)
            .map_err(|e| io_err("cannot open", path, e)),
        Err(e) => Err(io_err("cannot create", path, e)),
    }
}

/// Where [`inspect_location`] found the log would be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The log's directory is missing; the writer would create it below
    /// this nearest existing (and writable) ancestor.
    NewDirectory(PathBuf),
    /// The directory exists and holds no log yet.
    NewFile,
    /// The log exists, is a regular file of this user, writable and
    /// owner-only.
    Existing,
}

/// What opening the log at `path` would meet, found without creating or
/// changing anything (`doctor`, CLI.md §10.2): `Err` is one line saying
/// what would stop the writer or what is wrong with an existing log. A
/// log file that grants group or other access is reported (AUDIT.md §1.3
/// says the writer tightens it; doctor asks for it to be fixed).
/// `own_directory` as in [`WriterOptions`].
pub fn inspect_location(path: &Path, own_directory: bool) -> Result<Location, String> {
    let shown = |p: &Path| crate::text::one_line(&p.display().to_string());
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .ok_or_else(|| format!("{} has no directory", shown(path)))?;
    let writable = |p: &Path| {
        rustix::fs::access(
            p,
            rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        )
        .map_err(|e| format!("{} is not writable: {e}", shown(p)))
    };
    match std::fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => return Err(format!("{} is not a directory", shown(dir))),
        Ok(meta) => {
            if !own_directory {
                refuse_shared(dir, &meta).map_err(|e| crate::text::one_line(&e.to_string()))?;
            }
            writable(dir)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mut ancestor = dir;
            loop {
                ancestor = match ancestor.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent,
                    _ => return Err(format!("no ancestor of {} exists", shown(dir))),
                };
                match std::fs::metadata(ancestor) {
                    Ok(meta) if meta.is_dir() => {
                        writable(ancestor)?;
                        return Ok(Location::NewDirectory(ancestor.to_owned()));
                    }
                    Ok(_) => return Err(format!("{} is not a directory", shown(ancestor))),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(format!("cannot stat {}: {e}", shown(ancestor))),
                }
            }
        }
        Err(e) => return Err(format!("cannot stat {}: {e}", shown(dir))),
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Location::NewFile),
        Err(e) => return Err(format!("cannot stat {}: {e}", shown(path))),
    };
    if !meta.file_type().is_file() {
        return Err(format!("{} is not a regular file", shown(path)));
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(format!("{} belongs to another user", shown(path)));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} is accessible to other users (mode {mode:o}); run `chmod 600` on it",
            shown(path)
        ));
    }
    rustix::fs::access(path, rustix::fs::Access::WRITE_OK)
        .map_err(|e| format!("{} is not writable: {e}", shown(path)))?;
    Ok(Location::Existing)
}

/// A configured log directory that others can write to (its group
/// included) or that belongs to another user is not this shim's to use or
/// to change: refused, untouched.
fn refuse_shared(dir: &Path, meta: &std::fs::Metadata) -> Result<(), AuditError> {
    let mode = meta.permissions().mode();
    let reason = if mode & 0o002 != 0 {
        "writable by every user"
    } else if mode & 0o020 != 0 {
        "writable by its group"
    } else if mode & 0o1000 != 0 {
        "a sticky shared directory"
    } else if meta.uid() != rustix::process::geteuid().as_raw() {
        "owned by another user"
    } else {
        return Ok(());
    };
    Err(AuditError::Open(format!(
        "the audit log directory {} is shared ({reason}); set audit_log_path to a file in a private directory",
        dir.display()
    )))
}

/// AUDIT.md §1.3: anything granting group/other access is tightened (and
/// reported); failing to tighten is fatal. Only for the shim's own files and
/// its own per-OS directory.
fn tighten(path: &Path, mode: u32, options: &WriterOptions) -> Result<(), AuditError> {
    let meta = std::fs::metadata(path).map_err(|e| io_err("cannot stat", path, e))?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io_err("cannot tighten permissions of", path, e))?;
        (options.warn)(&format!(
            "{} was accessible to other users; permissions set to {mode:o}",
            path.display()
        ));
    }
    Ok(())
}

/// Whether a non-empty file ends with LF (a torn last line otherwise).
fn ends_with_lf(file: &mut File, size: u64) -> io::Result<bool> {
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(size - 1))?;
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// `ts` of the first record (for the age trigger), reading at most 1 MiB.
fn first_record_ts(file: &mut File) -> io::Result<Option<f64>> {
    file.seek(SeekFrom::Start(0))?;
    let mut head = Vec::new();
    file.take(1 << 20).read_to_end(&mut head)?;
    let Some(end) = head.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let Ok(text) = std::str::from_utf8(&head[..end]) else {
        return Ok(None);
    };
    Ok(parse_strict_for_audit(text)
        .ok()
        .and_then(|v| v.get("ts").and_then(Value::as_f64)))
}
