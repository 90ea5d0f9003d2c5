//! Per-chat child runtimes (CONTROL.md §10): each one a complete data
//! connection for one session, on its own thread, with its own stop flag;
//! at most eight live; stopped on DETACH, idle, replacement, control
//! reconnect and daemon stop. The children share the machine work pool and
//! one byte budget for the responses waiting on all of them.
//!
//! A child's root comes only from a verified binding, and is pinned again
//! when the child starts: if the folder's device and inode are not the ones
//! the binding was verified with, the child does not start. A child that
//! ends on its own leaves the live set; a failure that concerns the whole
//! daemon (credentials refused for good, an audit write failure, an
//! unusable configuration) is handed to the daemon, which stops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::bindings::Binding;
use crate::audit::AuditLog;
use crate::daemon::backlog::{ByteBudget, MACHINE_BACKLOG_BYTES};
use crate::daemon::capacity::MachineWorkPool;
use crate::daemon::handshake::{Identity, Limits};
use crate::daemon::pool::WorkerThreads;
use crate::daemon::runtime::{self, Credentials, DataSession, RuntimeEnd, Session};
use crate::daemon::session::{Activity, AuditSink};
use crate::jail::{Jail, JailOptions};
use crate::log::Log;
use crate::protocol::Backoff;
use crate::transport::Connector;

/// Live children at most.
pub const CHILD_CAP: usize = 8;

/// The reference's text for the cap.
pub const CAP_MESSAGE: &str = "Active local-executor session limit reached";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What every child copies from the daemon (CONTROL.md §10.1): switches,
/// URLs, identity, the shared token store and limits.
pub struct ChildTemplate {
    /// The control URL; a child connects to `<this>/<pct(session)>`.
    pub endpoints: crate::config::Endpoints,
    /// Trust anchors, pins, proxy.
    pub connector: Arc<Connector>,
    /// The shared token store and its renewal lock.
    pub credentials: Arc<dyn Credentials + Send>,
    /// `machine_id`, `display_name`, platform, arch.
    pub identity: Identity,
    /// The switches and services of the optional capabilities.
    pub optional: crate::daemon::Optional,
    /// Reconnect delays.
    pub backoff: Backoff,
    /// The shared writer; each child binds it to its session.
    pub audit: AuditLog,
    /// Log lines.
    pub log: Log,
    /// The active audit log file.
    pub audit_path: std::path::PathBuf,
    /// Everything of a data plane but its root: spawner, environment,
    /// command limits, switches, umask.
    pub data_plane: crate::daemon::DataPlaneFactory,
    /// `jail_no_xdev` and home directories.
    pub jail_options: JailOptions,
}

impl std::fmt::Debug for ChildTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildTemplate")
            .field("gates", &self.optional.gates)
            .finish_non_exhaustive()
    }
}

/// Why a child did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// Eight children are live.
    Cap,
    /// The folder could not be pinned, or is no longer the bound one.
    Folder(String),
    /// A thread or an audit handle could not be created.
    Internal(String),
}

struct Child {
    id: u64,
    binding: Binding,
    stop: Arc<AtomicBool>,
    activity: Arc<Activity>,
    thread: Option<JoinHandle<()>>,
}

/// The live children and what they share.
pub struct Children {
    template: ChildTemplate,
    pool: Arc<WorkerThreads>,
    machine_pool: Arc<MachineWorkPool>,
    /// Bytes of responses waiting on all children together.
    machine_bytes: ByteBudget,
    live: Mutex<HashMap<String, Child>>,
    next_id: AtomicU64,
    /// A failure that ends the daemon, and the daemon's stop flag to raise.
    fatal: Arc<Mutex<Option<RuntimeEnd>>>,
    daemon_stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Children {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Children")
            .field("live", &lock(&self.live).len())
            .finish_non_exhaustive()
    }
}

impl Children {
    /// No children yet. `daemon_stop` is raised when a child hits a failure
    /// that concerns the whole daemon.
    pub fn new(
        template: ChildTemplate,
        pool: Arc<WorkerThreads>,
        machine_pool: Arc<MachineWorkPool>,
        daemon_stop: Arc<AtomicBool>,
    ) -> Children {
        Children {
            template,
            pool,
            machine_pool,
            machine_bytes: ByteBudget::new(MACHINE_BACKLOG_BYTES),
            live: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            fatal: Arc::new(Mutex::new(None)),
            daemon_stop,
        }
    }

    /// The daemon-wide failure a child reported, if any.
    pub fn fatal(&self) -> Option<RuntimeEnd> {
        lock(&self.fatal).clone()
    }

    /// Whether `session_id` has a live child.
    pub fn is_live(&self, session_id: &str) -> bool {
        self.reap_finished();
        lock(&self.live).contains_key(session_id)
    }

    /// The binding the live child of `session_id` runs with.
    pub fn live_binding(&self, session_id: &str) -> Option<Binding> {
        self.reap_finished();
        lock(&self.live).get(session_id).map(|c| c.binding.clone())
    }

    /// Number of live children.
    pub fn count(&self) -> usize {
        self.reap_finished();
        lock(&self.live).len()
    }

    /// Starts a child for `binding` with `ceilings` (the control
    /// connection's effective limits). The count check and the insertion
    /// happen under one lock.
    pub fn start(&self, binding: &Binding, ceilings: Limits) -> Result<(), StartError> {
        if self.is_live(&binding.session_id) {
            return Ok(());
        }
        // The folder is pinned and checked before the lock is taken: a
        // slow filesystem must not hold up every other child operation.
        let stop = Arc::new(AtomicBool::new(false));
        let activity = Arc::new(Activity::new());
        let session = self.session_for(binding, ceilings, &stop, &activity)?;
        let mut live = lock(&self.live);
        if live.contains_key(&binding.session_id) {
            return Ok(());
        }
        if live.len() >= CHILD_CAP {
            return Err(StartError::Cap);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let pool = Arc::clone(&self.pool);
        let fatal = Arc::clone(&self.fatal);
        let daemon_stop = Arc::clone(&self.daemon_stop);
        let log = self.template.log.clone();
        let session_id = binding.session_id.clone();
        let thread = std::thread::Builder::new()
            .name(format!("child-{id}"))
            .spawn(move || {
                let outcome = runtime::run(&session, &pool);
                child_ended(&log, &session_id, outcome, &fatal, &daemon_stop);
            })
            .map_err(|e| StartError::Internal(format!("cannot start the child runtime: {e}")))?;
        live.insert(
            binding.session_id.clone(),
            Child {
                id,
                binding: binding.clone(),
                stop,
                activity,
                thread: Some(thread),
            },
        );
        Ok(())
    }

    /// The sessions with a live child.
    pub fn live_sessions(&self) -> std::collections::HashSet<String> {
        self.reap_finished();
        lock(&self.live).keys().cloned().collect()
    }

    fn session_for(
        &self,
        binding: &Binding,
        ceilings: Limits,
        stop: &Arc<AtomicBool>,
        activity: &Arc<Activity>,
    ) -> Result<Session, StartError> {
        let t = &self.template;
        let jail = Jail::pin(&binding.allowed_root, t.jail_options.clone())
            .map_err(|e| StartError::Folder(e.to_string()))?;
        // What was pinned must be the verified folder: same path, same
        // device and inode, same birth time and generation (a folder
        // recreated since verification often reuses the inode number).
        let changed = || {
            StartError::Folder("The selected directory changed after the grant was issued".into())
        };
        let live =
            super::folder::canonical_accessible(&binding.allowed_root).map_err(|_| changed())?;
        if jail.root() != binding.root_text
            || jail.root_identity() != binding.dev_ino
            || live.dev_ino != binding.dev_ino
            || live.identity != binding.identity
        {
            return Err(changed());
        }
        let audit = t
            .audit
            .bind(&binding.session_id)
            .map_err(|e| StartError::Internal(e.to_string()))?;
        let plane = DataSession {
            session_id: binding.session_id.clone(),
            data: (t.data_plane)(&binding.session_id, Arc::new(jail)),
            activity: Some(Arc::clone(activity)),
            machine_pool: Some(Arc::clone(&self.machine_pool)),
            machine_bytes: Some(self.machine_bytes.clone()),
        };
        Ok(Session {
            url: t.endpoints.session_url(&binding.session_id),
            connector: Arc::clone(&t.connector),
            credentials: Arc::clone(&t.credentials),
            identity: t.identity.clone(),
            optional: t.optional.clone(),
            ceilings,
            backoff: t.backoff,
            audit: AuditSink::Session(audit),
            log: t.log.clone(),
            stop: Arc::clone(stop),
            audit_path: t.audit_path.clone(),
            plane: Arc::new(plane),
        })
    }

    /// Stops the child of `session_id` and waits for it (its in-flight
    /// requests are cancelled, PROTOCOL.md §11.4). False when none was live.
    pub fn stop(&self, session_id: &str) -> bool {
        let child = lock(&self.live).remove(session_id);
        match child {
            Some(child) => {
                finish(child);
                true
            }
            None => false,
        }
    }

    /// Stops the child of `session_id` only if it is still child `id` (the
    /// idle reaper's re-check under the session lock).
    pub fn stop_if(&self, session_id: &str, id: u64) -> bool {
        let child = {
            let mut live = lock(&self.live);
            match live.get(session_id) {
                Some(c) if c.id == id => live.remove(session_id),
                _ => None,
            }
        };
        match child {
            Some(child) => {
                finish(child);
                true
            }
            None => false,
        }
    }

    /// Stops every child (control reconnect, daemon stop).
    pub fn stop_all(&self) {
        let all: Vec<Child> = lock(&self.live).drain().map(|(_, c)| c).collect();
        for child in &all {
            child.stop.store(true, Ordering::SeqCst);
        }
        for child in all {
            finish(child);
        }
    }

    /// Raises every live child's stop flag without waiting for it.
    pub fn signal_all(&self) {
        for child in lock(&self.live).values() {
            child.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Children whose last admitted request is at least `idle_after` old,
    /// as `(session_id, child id)`.
    pub fn idle(&self, now: Instant, idle_after: Duration) -> Vec<(String, u64)> {
        self.reap_finished();
        lock(&self.live)
            .iter()
            .filter(|(_, child)| now.saturating_duration_since(child.activity.last()) >= idle_after)
            .map(|(session, child)| (session.clone(), child.id))
            .collect()
    }

    /// How long child `id` of `session_id` has been idle, if it is still
    /// live and idle for at least `idle_after`.
    pub fn still_idle(
        &self,
        session_id: &str,
        id: u64,
        now: Instant,
        idle_after: Duration,
    ) -> Option<Duration> {
        lock(&self.live)
            .get(session_id)
            .filter(|c| c.id == id)
            .map(|c| now.saturating_duration_since(c.activity.last()))
            .filter(|idle| *idle >= idle_after)
    }

    /// Removes children whose runtime ended on its own.
    fn reap_finished(&self) {
        let ended: Vec<Child> = {
            let mut live = lock(&self.live);
            let done: Vec<String> = live
                .iter()
                .filter(|(_, c)| c.thread.as_ref().is_none_or(JoinHandle::is_finished))
                .map(|(s, _)| s.clone())
                .collect();
            done.iter().filter_map(|s| live.remove(s)).collect()
        };
        for child in ended {
            finish(child);
        }
    }
}

/// Raises the child's stop flag and joins its thread.
fn finish(mut child: Child) {
    child.stop.store(true, Ordering::SeqCst);
    if let Some(thread) = child.thread.take() {
        let _ = thread.join();
    }
}

/// What a child's end means for the daemon (CONTROL.md §10.5).
fn child_ended(
    log: &Log,
    session_id: &str,
    outcome: RuntimeEnd,
    fatal: &Mutex<Option<RuntimeEnd>>,
    daemon_stop: &AtomicBool,
) {
    match outcome {
        RuntimeEnd::Stopped => {}
        RuntimeEnd::Terminal(reason) | RuntimeEnd::AuthFailed(reason) => {
            log.warn(
                "child",
                format!("the runtime of session {session_id} ended: {reason}"),
            );
        }
        RuntimeEnd::Refused(refusal) => {
            log.warn(
                "child",
                format!("the runtime of session {session_id} ended: {refusal}"),
            );
        }
        daemon_wide @ (RuntimeEnd::CredentialsRefused(_)
        | RuntimeEnd::AuditFailed
        | RuntimeEnd::Config(_)) => {
            log.error(
                "child",
                format!("session {session_id}: {daemon_wide:?}; stopping the daemon"),
            );
            lock(fatal).get_or_insert(daemon_wide);
            daemon_stop.store(true, Ordering::SeqCst);
        }
    }
}
