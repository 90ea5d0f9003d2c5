//! The control connection's request handlers (CONTROL.md §4–§12): browse,
//! ATTACH, ACTIVATE, RESTORE and DETACH, each serialised per session, each
//! writing its record at the step the specification fixes and rolling back
//! when that write or a child start fails; plus what a control (re)connect
//! resets and the idle reaper.
//!
//! It never binds a session to a folder the user did not pick through a
//! reference minted here or through a grant signed with this machine's key
//! and re-verified against the live folder; it never writes a grant, a
//! reference or a key into the audit log.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, json};

use super::bindings::{Binding, Bindings, Revisions};
use super::browse::{BrowseError, Browser, RootSources};
use super::children::{CAP_MESSAGE, Children, StartError};
use super::folder::{self, FolderError};
use super::grant::{self, Claims, GrantError, GrantKey};
use crate::audit::{AuditLog, Details, Entry, Outcome};
use crate::daemon::capacity::MachineWorkPool;
use crate::daemon::handshake::{ConnectionKind, Limits, Negotiated};
use crate::daemon::runtime::Plane;
use crate::daemon::session::{ControlRequests, Serving, now_ts};
use crate::jail::{ProtectedLocations, roots};
use crate::log::Log;
use crate::protocol::{
    Ack, ActivateSession, AttachSession, DetachSession, DirectoryListRequest, ErrorCode,
    ErrorPayload, HelloField, Message, MessageType, RestoreSession, SessionActivated,
    SessionAttached,
};

/// Idle children are looked for this often (CONTROL.md §10.4).
pub const REAP_INTERVAL: Duration = Duration::from_secs(30);
/// A child without an admitted request for this long is stopped.
pub const IDLE_AFTER: Duration = Duration::from_secs(600);

const DANGEROUS_ROOT: &str = "The selected directory cannot be used as a session root";
/// A folder whose path the platform refuses in the chat's HELLO.
const ROOT_NOT_SENDABLE: &str = "The selected directory's path cannot be sent to the platform: it is longer than 4096 characters or holds <, > or a control character (invisible formatting ones included)";
const AUDIT_FAILED: &str = "The audit record of this operation could not be written.";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Per-session mutual exclusion (§12.3) whose entries vanish when unused,
/// so many distinct session ids cannot grow it.
#[derive(Debug, Default)]
struct SessionLocks {
    busy: Mutex<HashSet<String>>,
    freed: Condvar,
}

struct SessionGuard<'a> {
    locks: &'a SessionLocks,
    session: String,
}

impl SessionLocks {
    fn lock(&self, session: &str) -> SessionGuard<'_> {
        let mut busy = lock(&self.busy);
        while busy.contains(session) {
            busy = self
                .freed
                .wait(busy)
                .unwrap_or_else(PoisonError::into_inner);
        }
        busy.insert(session.to_owned());
        SessionGuard {
            locks: self,
            session: session.to_owned(),
        }
    }
}

impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        lock(&self.locks.busy).remove(&self.session);
        self.locks.freed.notify_all();
    }
}

/// What the control plane is built from.
pub struct ControlSettings {
    /// Derived from the audit key.
    pub grant_key: GrantKey,
    /// This machine's id (grant claims).
    pub machine_id: String,
    /// The user's home (virtual roots, dangerous roots).
    pub home: PathBuf,
    /// WSL2 drive mounts as roots.
    pub wsl: bool,
    /// The shared writer (records name their chat session explicitly).
    pub audit: AuditLog,
    /// Persisted grant revisions.
    pub revisions: Revisions,
    /// Log lines.
    pub log: Log,
    /// The local ceilings before any control handshake.
    pub ceilings: Limits,
    /// The shim's own directories, never a session root.
    pub protected: ProtectedLocations,
}

impl std::fmt::Debug for ControlSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlSettings")
            .field("machine_id", &self.machine_id)
            .finish_non_exhaustive()
    }
}

/// The control plane: shared by the control connection's workers, the
/// connection lifecycle hooks and the idle reaper.
pub struct ControlPlane {
    inner: Arc<Inner>,
}

struct Inner {
    browser: Mutex<Browser>,
    bindings: Mutex<Bindings>,
    revisions: Mutex<Revisions>,
    locks: SessionLocks,
    children: Children,
    grant_key: GrantKey,
    machine_id: String,
    sources: RootSources,
    protected: ProtectedLocations,
    audit: AuditLog,
    log: Log,
    ceilings: Mutex<Limits>,
    machine_pool: Arc<MachineWorkPool>,
    connection_id: Mutex<Option<String>>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("children", &self.inner.children)
            .finish_non_exhaustive()
    }
}

impl ControlPlane {
    /// A control plane whose children come from `children` and share
    /// `machine_pool`.
    pub fn new(
        settings: ControlSettings,
        children: Children,
        machine_pool: Arc<MachineWorkPool>,
    ) -> ControlPlane {
        ControlPlane {
            inner: Arc::new(Inner {
                browser: Mutex::new(Browser::new()),
                bindings: Mutex::new(Bindings::new()),
                revisions: Mutex::new(settings.revisions),
                locks: SessionLocks::default(),
                children,
                grant_key: settings.grant_key,
                machine_id: settings.machine_id,
                sources: RootSources {
                    home: settings.home,
                    wsl: settings.wsl,
                },
                protected: settings.protected,
                audit: settings.audit,
                log: settings.log,
                ceilings: Mutex::new(settings.ceilings),
                machine_pool,
                connection_id: Mutex::new(None),
            }),
        }
    }

    /// The child runtimes.
    pub fn children(&self) -> &Children {
        &self.inner.children
    }

    /// One pass of the idle reaper (§10.4): every child idle for at least
    /// `idle_after` is recorded and stopped; its binding stays. False when
    /// an `IDLE_SESSION_DETACH` record could not be written (the daemon
    /// must then fail closed).
    pub fn reap_idle(&self, idle_after: Duration) -> bool {
        let inner = &self.inner;
        for (session, id) in inner.children.idle(Instant::now(), idle_after) {
            let _guard = inner.locks.lock(&session);
            let Some(idle) = inner
                .children
                .still_idle(&session, id, Instant::now(), idle_after)
            else {
                continue;
            };
            let idle = idle.as_secs_f64();
            let mut entry = Entry::event(
                "IDLE_SESSION_DETACH",
                Details::new().with("idle_seconds", json!(idle)),
            );
            entry.session_id = Some(session.clone());
            if inner.audit.write(entry).is_err() {
                return false;
            }
            inner.log.info(
                "control",
                format!("session {session} idle for {idle:.0} s: its runtime is stopped"),
            );
            inner.children.stop_if(&session, id);
        }
        true
    }

    /// Runs the idle reaper every `interval` until `stop`; an audit failure
    /// raises `stop` (the daemon fails closed).
    pub fn spawn_reaper(
        &self,
        interval: Duration,
        idle_after: Duration,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let plane = ControlPlane {
            inner: Arc::clone(&self.inner),
        };
        std::thread::Builder::new()
            .name("idle-reaper".into())
            .spawn(move || {
                while crate::daemon::runtime::pause(&stop, interval) {
                    if !plane.reap_idle(idle_after) {
                        stop.store(true, Ordering::SeqCst);
                    }
                }
                // The daemon is stopping: every child starts its own stop
                // now rather than after the control connection's teardown.
                plane.inner.children.signal_all();
            })
    }
}

impl Plane for ControlPlane {
    fn kind(&self) -> ConnectionKind {
        ConnectionKind::Control
    }

    fn hello_root(&self) -> Option<String> {
        None
    }

    fn on_connected(&self) {
        // §3.4: children stopped, every reference invalidated, the previous
        // connection id forgotten; bindings stay.
        self.inner.children.stop_all();
        lock(&self.inner.browser).reset();
        *lock(&self.inner.connection_id) = None;
    }

    fn on_negotiated(&self, negotiated: &Negotiated) {
        *lock(&self.inner.ceilings) = negotiated.limits;
        self.inner
            .machine_pool
            .resize(negotiated.limits.max_concurrent);
        *lock(&self.inner.connection_id) = negotiated.connection_id.clone();
    }

    fn serving(&self) -> Serving {
        Serving::Control(Arc::clone(&self.inner) as Arc<dyn ControlRequests>)
    }
}

impl ControlRequests for Inner {
    fn handle(&self, id: &str, message: &Message) -> Message {
        match message {
            Message::DirectoryListRequest(req) => self.directory_list(id, req),
            Message::AttachSession(req) => self.attach(id, req),
            Message::ActivateSession(req) => self.activate(id, req),
            Message::RestoreSession(req) => self.restore(id, req),
            Message::DetachSession(req) => self.detach(id, req),
            other => ControlError::NotAControlRequest(other.message_type()).reply(),
        }
    }
}

/// Why a control request was refused or failed. Says what happened;
/// [`ControlError::code`] and [`ControlError::reply`] are the one place the
/// control plane chooses wire codes, messages and `details`.
#[derive(Debug)]
enum ControlError {
    /// A data-plane or unknown message reached the control handlers.
    NotAControlRequest(MessageType),
    /// The browse or the picked entry is unknown, expired or unusable.
    Browse(BrowseError),
    /// ATTACH while the session's runtime is live.
    AlreadyActive,
    /// ACTIVATE of a session with no binding.
    NotAttached,
    /// The request's revision is not the binding's (`current` is).
    RevisionMismatch { current: u64, message: &'static str },
    /// The folder is dangerous as a root, or is, holds or lies inside one
    /// of the shim's own directories.
    DangerousRoot,
    /// The folder's path is one the platform refuses in the chat's HELLO
    /// (a grant issued before that was checked still carries it).
    RootNotSendable,
    /// The picked folder changed, became a link or went away between the
    /// browse and the grant.
    FolderChanged(&'static str),
    /// §7.4 refused the presented grant.
    GrantInvalid(GrantError),
    /// All the runtimes the machine allows are live.
    ChildCap,
    /// Anything else: a record not written, a store full, a child that
    /// could not start.
    Internal(String),
}

impl From<GrantError> for ControlError {
    fn from(error: GrantError) -> Self {
        ControlError::GrantInvalid(error)
    }
}

impl ControlError {
    /// The wire code, also the audit record's error code.
    fn code(&self) -> ErrorCode {
        match self {
            ControlError::NotAControlRequest(_) => ErrorCode::FeatureNotSupported,
            ControlError::Browse(BrowseError::ReferenceInvalid(_)) => {
                ErrorCode::DirectoryReferenceInvalid
            }
            ControlError::Browse(BrowseError::Unavailable(_))
            | ControlError::DangerousRoot
            | ControlError::RootNotSendable
            | ControlError::FolderChanged(_) => ErrorCode::DirectoryUnavailable,
            ControlError::AlreadyActive => ErrorCode::SessionAlreadyActive,
            ControlError::NotAttached => ErrorCode::SessionNotAttached,
            ControlError::RevisionMismatch { .. } => ErrorCode::SessionRevisionMismatch,
            ControlError::GrantInvalid(_) => ErrorCode::RootGrantInvalid,
            ControlError::Browse(BrowseError::Random)
            | ControlError::ChildCap
            | ControlError::Internal(_) => ErrorCode::InternalError,
        }
    }

    /// The `ERROR` answering the request.
    fn reply(self) -> Message {
        let code = self.code();
        let mut details = Map::new();
        let message = match self {
            ControlError::NotAControlRequest(kind) => {
                format!("{} is not a control request.", kind.as_str())
            }
            ControlError::Browse(BrowseError::ReferenceInvalid(message))
            | ControlError::Browse(BrowseError::Unavailable(message))
            | ControlError::FolderChanged(message) => message.to_owned(),
            ControlError::Browse(BrowseError::Random) => {
                "No randomness is available for a directory reference.".to_owned()
            }
            ControlError::AlreadyActive => {
                "Detach the active session before changing its allowed root.".to_owned()
            }
            ControlError::NotAttached => {
                "Attach a directory before activating this session.".to_owned()
            }
            ControlError::RevisionMismatch { current, message } => {
                details.insert("current_revision".into(), json!(current));
                message.to_owned()
            }
            ControlError::DangerousRoot => DANGEROUS_ROOT.to_owned(),
            ControlError::RootNotSendable => ROOT_NOT_SENDABLE.to_owned(),
            ControlError::GrantInvalid(error) => error.message().to_owned(),
            ControlError::ChildCap => {
                details.insert("reason".into(), json!("active_session_limit"));
                details.insert(
                    "max_active_sessions".into(),
                    json!(super::children::CHILD_CAP),
                );
                CAP_MESSAGE.to_owned()
            }
            ControlError::Internal(message) => message,
        };
        let payload = ErrorPayload::new(code, message);
        Message::Error(if details.is_empty() {
            payload
        } else {
            payload.with_details(details)
        })
    }

    /// The `result` of the record of a request refused with this error.
    fn record_result(&self) -> Outcome {
        Outcome {
            ok: false,
            exit_code: None,
            duration_ms: 0,
            error_code: Some(self.code().as_str().to_owned()),
        }
    }
}

fn mismatch(current: u64, message: &'static str) -> Message {
    ControlError::RevisionMismatch { current, message }.reply()
}

impl Inner {
    /// Writes a record; false (and a log line) when it is not durable.
    fn record(
        &self,
        id: &str,
        op: &str,
        session: Option<&str>,
        details: Details,
        result: Outcome,
    ) -> bool {
        let entry = Entry {
            op: op.to_owned(),
            request_id: Some(id.to_owned()),
            details,
            result,
            session_id: session.map(str::to_owned),
        };
        match self.audit.write(entry) {
            Ok(_) => true,
            Err(e) => {
                self.log.error(
                    "control",
                    format!("the {op} record could not be written: {e}"),
                );
                false
            }
        }
    }

    fn internal(&self, message: &str) -> Message {
        ControlError::Internal(message.to_owned()).reply()
    }

    // ---- §4 ------------------------------------------------------------------

    fn directory_list(&self, id: &str, req: &DirectoryListRequest) -> Message {
        // The filesystem is read without the browse lock: a slow folder
        // must not hold up other listings or a control reconnect.
        let result = match (&req.browse_id, &req.directory_ref) {
            (Some(browse), Some(reference)) => {
                let plan =
                    lock(&self.browser).plan(now_ts(), browse, reference, req.cursor.as_deref());
                plan.and_then(|plan| plan.scan())
                    .and_then(|listing| lock(&self.browser).finish(now_ts(), listing))
            }
            _ => {
                let roots = super::browse::virtual_roots(&self.sources);
                lock(&self.browser).start_with(now_ts(), roots)
            }
        };
        match result {
            Ok(response) => {
                let details = Details::new()
                    .with("browse_id", json!(response.browse_id))
                    .with(
                        "path",
                        json!(response.current.as_ref().map(|c| c.path.clone())),
                    )
                    .with("entries_returned", json!(response.entries.len()))
                    .with("truncated", json!(response.truncated));
                if !self.record(id, "DIRECTORY_LIST", None, details, Outcome::default()) {
                    return self.internal(AUDIT_FAILED);
                }
                Message::DirectoryListResponse(response)
            }
            Err(error) => {
                let error = ControlError::Browse(error);
                let details = Details::new().with("browse_id", json!(req.browse_id));
                if !self.record(id, "DIRECTORY_LIST", None, details, error.record_result()) {
                    return self.internal(AUDIT_FAILED);
                }
                error.reply()
            }
        }
    }

    // ---- §5 ------------------------------------------------------------------

    fn attach(&self, id: &str, req: &AttachSession) -> Message {
        let session = req.session_id.as_str();
        let _guard = self.locks.lock(session);
        // Step 1: nothing consumed, nothing recorded.
        if self.children.is_live(session) {
            return ControlError::AlreadyActive.reply();
        }
        let refuse = |error: ControlError| {
            let details = Details::new().with("session_id", json!(session));
            let result = error.record_result();
            if !self.record(id, "ATTACH_SESSION", Some(session), details, result) {
                return self.internal(AUDIT_FAILED);
            }
            error.reply()
        };
        // Step 2 (with the dangerous-root refusal of the hardening note);
        // the folder is checked without the browse lock.
        let found = lock(&self.browser).lookup(now_ts(), &req.browse_id, &req.directory_ref);
        let resolved = match found.and_then(|found| found.recheck()) {
            Ok(dir) => dir,
            Err(error) => return refuse(ControlError::Browse(error)),
        };
        if roots::check_dangerous_for(&resolved.path, &self.sources.home, self.sources.wsl).is_err()
            || self.holds_own_files(&resolved.path)
        {
            return refuse(ControlError::DangerousRoot);
        }
        // The chat's HELLO would carry this path; the platform refuses it
        // there, so it is refused here, before a grant exists.
        if !HelloField::AllowedRoot.accepts(&resolved.text) {
            return refuse(ControlError::RootNotSendable);
        }
        // Step 3 (the browse may have expired or been evicted meanwhile).
        {
            let mut browser = lock(&self.browser);
            if browser
                .lookup(now_ts(), &req.browse_id, &req.directory_ref)
                .is_err()
            {
                drop(browser);
                return refuse(ControlError::Browse(BrowseError::ReferenceInvalid(
                    super::browse::REFERENCE_INVALID,
                )));
            }
            browser.consume(&req.browse_id);
        }
        // Step 4: continue from the remembered and the persisted revision.
        let previous = lock(&self.bindings).get(session).cloned();
        let Some(revision) = previous
            .as_ref()
            .map_or(0, |b| b.revision)
            .max(lock(&self.revisions).highest(session))
            .checked_add(1)
        else {
            return self.internal("The session's revision cannot be raised any further.");
        };
        // Step 5: issued from the folder as it is now, which must still be
        // the folder resolved in step 2.
        let dir = match folder::canonical_accessible(&resolved.path) {
            Ok(dir) if dir.path == resolved.path && dir.dev_ino == resolved.dev_ino => dir,
            Ok(_) => return refuse(ControlError::FolderChanged(GrantError::Changed.message())),
            Err(e) => {
                let text = match e {
                    FolderError::Symlink => GrantError::SymlinkRoot.message(),
                    FolderError::Unavailable => GrantError::Unavailable.message(),
                };
                return refuse(ControlError::FolderChanged(text));
            }
        };
        let fingerprint = dir.fingerprint();
        let claims = Claims {
            allowed_root: dir.text.clone(),
            fingerprint: fingerprint.clone(),
            issued_at: now_ts(),
            machine_id: self.machine_id.clone(),
            revision,
            session_id: session.to_owned(),
            identity: Some(dir.identity.clone()).filter(|i| !i.is_empty()),
        };
        let token = grant::sign(&self.grant_key, &claims);
        // Step 6.
        let details = Details::new()
            .with(
                "previous_allowed_root",
                json!(previous.as_ref().map(|b| b.root_text.clone())),
            )
            .with("allowed_root", json!(dir.text))
            .with("fingerprint", json!(fingerprint))
            .with("revision", json!(revision));
        if !self.record(
            id,
            "SESSION_ALLOWED_ROOT_SET",
            Some(session),
            details,
            Outcome::default(),
        ) {
            return self.internal(AUDIT_FAILED);
        }
        // The revision is persisted before the grant leaves the machine, so
        // an older grant of the session can never be restored again.
        if let Err(e) = self.persist_revision(session, revision) {
            self.log.error("control", e.to_string());
            return self.internal("The grant revision could not be stored.");
        }
        // Step 7.
        let binding = Binding {
            session_id: session.to_owned(),
            allowed_root: dir.path.clone(),
            root_text: dir.text.clone(),
            fingerprint: fingerprint.clone(),
            revision,
            root_grant: token.clone(),
            dev_ino: dir.dev_ino,
            identity: dir.identity.clone(),
        };
        if self.remember(binding).is_err() {
            return self.internal("The session binding store is full.");
        }
        // Step 8.
        Message::SessionAttached(SessionAttached {
            session_id: req.session_id.clone(),
            allowed_root: dir.text,
            fingerprint,
            revision: nonzero(revision),
            root_grant: token,
        })
    }

    fn remember(&self, binding: Binding) -> Result<(), super::bindings::StoreFull> {
        // Read before the bindings lock: the two locks are never nested.
        let live = self.children.live_sessions();
        lock(&self.bindings).remember(binding, |s| live.contains(s))
    }

    /// Persists `revision` for `session`. The first one creates the state
    /// directory, which is then held by identity at once.
    fn persist_revision(
        &self,
        session: &str,
        revision: u64,
    ) -> Result<(), super::bindings::RevisionError> {
        let recorded = lock(&self.revisions).record(session, revision);
        self.protected.pin_created();
        recorded
    }

    /// True when `root` is, holds or lies inside one of the shim's own
    /// directories (logged: the platform only learns that it is refused).
    fn holds_own_files(&self, root: &std::path::Path) -> bool {
        match self.protected.check_root(root) {
            Ok(()) => false,
            Err(conflict) => {
                self.log.warn("control", conflict.to_string());
                true
            }
        }
    }

    /// §7.4 in full for `token` presented for `session`, and the folder must
    /// hold none of the shim's own files.
    fn verify_grant(&self, token: &str, session: &str) -> Result<Binding, ControlError> {
        let accepted = grant::verify(&self.grant_key, token, session, &self.machine_id)?;
        let dir = folder::verify_folder(&accepted, &self.sources.home, self.sources.wsl)?;
        if self.holds_own_files(&dir.path) {
            return Err(ControlError::DangerousRoot);
        }
        if !HelloField::AllowedRoot.accepts(&dir.text) {
            return Err(ControlError::RootNotSendable);
        }
        Ok(Binding {
            session_id: session.to_owned(),
            allowed_root: dir.path,
            root_text: dir.text,
            fingerprint: accepted.fingerprint,
            revision: accepted.revision,
            root_grant: token.to_owned(),
            dev_ino: dir.dev_ino,
            identity: dir.identity,
        })
    }

    /// ACTIVATE or RESTORE refused at the grant check: recorded as `op`
    /// with the code it is answered with.
    fn grant_refused(&self, id: &str, op: &str, session: &str, error: ControlError) -> Message {
        let details = Details::new().with("session_id", json!(session));
        if !self.record(id, op, Some(session), details, error.record_result()) {
            return self.internal(AUDIT_FAILED);
        }
        error.reply()
    }

    fn start_error(&self, error: StartError) -> Message {
        match error {
            StartError::Cap => ControlError::ChildCap.reply(),
            StartError::Folder(text) | StartError::Internal(text) => {
                ControlError::Internal(text).reply()
            }
        }
    }

    // ---- §8 ------------------------------------------------------------------

    fn activate(&self, id: &str, req: &ActivateSession) -> Message {
        let session = req.session_id.as_str();
        let _guard = self.locks.lock(session);
        // Step 1.
        let Some(previous) = lock(&self.bindings).get(session).cloned() else {
            return ControlError::NotAttached.reply();
        };
        // Step 2.
        if req.revision.get() != previous.revision {
            return mismatch(previous.revision, "The requested root revision is stale.");
        }
        // Step 3: the folder must still be the bound one.
        let binding = match self.verify_grant(&previous.root_grant, session) {
            Ok(binding) => binding,
            Err(e) => {
                // A child still serving a folder that is no longer the
                // bound one is stopped (the binding stays for RESTORE).
                self.children.stop(session);
                return self.grant_refused(id, "ACTIVATE_SESSION", session, e);
            }
        };
        // Step 4.
        if self.remember(binding.clone()).is_err() {
            return self.internal("The session binding store is full.");
        }
        // Step 5.
        let started = if self.children.is_live(session) {
            false
        } else {
            let ceilings = *lock(&self.ceilings);
            if let Err(e) = self.children.start(&binding, ceilings) {
                lock(&self.bindings).restore(session, Some(previous));
                return self.start_error(e);
            }
            true
        };
        // Step 6.
        let details = Details::new()
            .with("allowed_root", json!(binding.root_text))
            .with("fingerprint", json!(binding.fingerprint))
            .with("revision", json!(binding.revision));
        if !self.record(
            id,
            "ACTIVATE_SESSION",
            Some(session),
            details,
            Outcome::default(),
        ) {
            // Step 7.
            if started {
                self.children.stop(session);
            }
            lock(&self.bindings).restore(session, Some(previous));
            return self.internal(AUDIT_FAILED);
        }
        Message::SessionActivated(SessionActivated {
            session_id: req.session_id.clone(),
            allowed_root: binding.root_text,
            fingerprint: binding.fingerprint,
            revision: nonzero(binding.revision),
        })
    }

    // ---- §9 ------------------------------------------------------------------

    fn restore(&self, id: &str, req: &RestoreSession) -> Message {
        let session = req.session_id.as_str();
        let _guard = self.locks.lock(session);
        // Step 1.
        let verified = match self.verify_grant(&req.root_grant, session) {
            Ok(binding) => binding,
            Err(e) => return self.grant_refused(id, "RESTORE_SESSION", session, e),
        };
        let previous = lock(&self.bindings).get(session).cloned();
        let persisted = lock(&self.revisions).highest(session);
        let current = previous.as_ref().map_or(0, |b| b.revision).max(persisted);
        // Step 2 (and the persisted revision of the §7.5 hardening note).
        if current > verified.revision {
            return mismatch(
                current,
                "The supplied root grant is older than the current binding.",
            );
        }
        // Step 3.
        if let Some(previous) = &previous {
            if previous.revision == verified.revision
                && previous.fingerprint != verified.fingerprint
            {
                return mismatch(
                    previous.revision,
                    "The supplied root grant conflicts with the current binding revision.",
                );
            }
        }
        // Step 4: a live child with another binding is replaced.
        let live = self.children.live_binding(session);
        let replaced = live.as_ref().is_some_and(|b| !same_binding(b, &verified));
        if replaced {
            self.children.stop(session);
        }
        // Step 5.
        if self.remember(verified.clone()).is_err() {
            return self.internal("The session binding store is full.");
        }
        // Step 6.
        let mut started = false;
        if live.is_none() || replaced {
            let ceilings = *lock(&self.ceilings);
            if let Err(e) = self.children.start(&verified, ceilings) {
                self.roll_back_restore(session, previous, live.filter(|_| replaced));
                return self.start_error(e);
            }
            started = true;
        }
        if let Err(e) = self.persist_revision(session, verified.revision) {
            self.log.error("control", e.to_string());
            if started {
                self.children.stop(session);
            }
            self.roll_back_restore(session, previous, live.filter(|_| replaced));
            return self.internal("The grant revision could not be stored.");
        }
        // Step 7.
        let details = Details::new()
            .with("allowed_root", json!(verified.root_text))
            .with("fingerprint", json!(verified.fingerprint))
            .with("revision", json!(verified.revision));
        if !self.record(
            id,
            "RESTORE_SESSION",
            Some(session),
            details,
            Outcome::default(),
        ) {
            if started {
                self.children.stop(session);
            }
            self.roll_back_restore(session, previous, live.filter(|_| replaced));
            return self.internal(AUDIT_FAILED);
        }
        Message::SessionRestored(SessionAttached {
            session_id: req.session_id.clone(),
            allowed_root: verified.root_text,
            fingerprint: verified.fingerprint,
            revision: nonzero(verified.revision),
            root_grant: req.root_grant.clone(),
        })
    }

    /// §9 step 8: the previous binding back, and the replaced child again.
    fn roll_back_restore(
        &self,
        session: &str,
        previous: Option<Binding>,
        replaced: Option<Binding>,
    ) {
        lock(&self.bindings).restore(session, previous);
        if let Some(binding) = replaced {
            let ceilings = *lock(&self.ceilings);
            if let Err(e) = self.children.start(&binding, ceilings) {
                self.log.warn(
                    "control",
                    format!(
                        "session {session}: the replaced runtime could not be restarted: {e:?}"
                    ),
                );
            }
        }
    }

    // ---- §11 -----------------------------------------------------------------

    fn detach(&self, id: &str, req: &DetachSession) -> Message {
        let session = req.session_id.as_str();
        let _guard = self.locks.lock(session);
        // Step 1.
        self.children.stop(session);
        // Step 2.
        let binding = lock(&self.bindings).get(session).cloned();
        let details = Details::new()
            .with(
                "allowed_root",
                json!(binding.as_ref().map(|b| b.root_text.clone())),
            )
            .with("revision", json!(binding.as_ref().map(|b| b.revision)));
        if !self.record(
            id,
            "DETACH_SESSION",
            Some(session),
            details,
            Outcome::default(),
        ) {
            return self.internal(AUDIT_FAILED);
        }
        // Step 3.
        lock(&self.bindings).forget(session);
        Message::Ack(Ack::OK)
    }
}

fn same_binding(a: &Binding, b: &Binding) -> bool {
    a.allowed_root == b.allowed_root
        && a.fingerprint == b.fingerprint
        && a.revision == b.revision
        && a.root_grant == b.root_grant
}

fn nonzero(revision: u64) -> std::num::NonZeroU64 {
    std::num::NonZeroU64::new(revision).unwrap_or(std::num::NonZeroU64::MIN)
}
