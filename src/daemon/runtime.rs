//! The life of one data session's connection (PROTOCOL.md §4, §11): open
//! the WebSocket with the stored token, say HELLO, judge the HELLO_ACK,
//! serve, and reconnect with backoff until a terminal condition or a local
//! stop.
//!
//! This module owns the order of the connection's internal audit records
//! (`WS_CONNECTED`, `CONFIG_RELOADED`, `SESSION_REVOKED`,
//! `WS_DISCONNECTED`) and the reconnect decision. An attempt that never
//! became a connection has no `WS_CONNECTED`, and its `WS_DISCONNECTED`
//! says that it failed (`ok: false`), never that a connection ended. It never retries a
//! terminal condition, retries a refusal of the platform only
//! [`REFUSAL_RETRIES`] times, never sends the token anywhere but the upgrade
//! request of the configured URL, and stops at the first audit write that
//! fails: from then on nothing is served and nothing more is written.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use zeroize::Zeroizing;

use super::backlog::ByteBudget;
use super::capacity::MachineWorkPool;
use super::features::{Found, Optional};
use super::handshake::{
    self, AckInput, AfterFailure, ConnectionKind, HELLO_ACK_WAIT, Identity, Limits,
};
use super::link::{LinkIn, LinkOut};
use super::pool::WorkerThreads;
use super::refusal::{PlatformRefusal, REFUSAL_RETRIES, RefusalKind};
use super::session::{self, Activity, AuditSink, DataPlane, End, Serving, Setup};
use crate::audit::{Details, Entry, Outcome};
use crate::log::Log;
use crate::protocol::{
    self, Backoff, CloseAction, Frame, MAX_WEBSOCKET_MESSAGE_BYTES, Message, ShimClose,
    TerminalClose, classify_close,
};
use crate::text::excerpt;
use crate::transport::{
    CloseInfo, Connector, Disposition, Incoming, Reader, TransportError, Writer,
};

const COMPONENT: &str = "connection";

/// The access token for the upgrade and what to do when it is refused.
pub trait Credentials: Sync {
    /// The stored access token, if any. An error is a store that cannot be
    /// read right now (retried with backoff).
    fn access_token(&self) -> Result<Option<Zeroizing<String>>, String>;

    /// The upgrade with `rejected` got HTTP 401: the token to retry with
    /// once, or why there is none (PROTOCOL.md §1.3). A refresh is recorded
    /// as `TOKEN_REFRESHED` through `audit`, the connection's handle.
    fn renew(&self, rejected: Option<&Zeroizing<String>>, audit: &AuditSink) -> Renewal;
}

/// The outcome of [`Credentials::renew`].
#[derive(Debug)]
pub enum Renewal {
    /// Retry the upgrade once, immediately, with this token.
    Retry(Zeroizing<String>),
    /// The renewal failed for now: reconnect with backoff.
    Transient(String),
    /// The stored credentials cannot work: terminal authentication failure.
    Definitive(String),
    /// The tokens were refreshed but `TOKEN_REFRESHED` could not be written:
    /// the daemon fails closed (AUDIT.md §8.3).
    AuditFailed,
}

/// What distinguishes the control connection from a data connection to
/// the connection lifecycle.
pub trait Plane: Send + Sync {
    /// The connection's kind (the session the `HELLO_ACK` must name).
    fn kind(&self) -> ConnectionKind;
    /// `HELLO.allowed_root`.
    fn hello_root(&self) -> Option<String>;
    /// After the upgrade, before HELLO (CONTROL.md §3.4 on the control
    /// connection).
    fn on_connected(&self) {}
    /// After an accepted `HELLO_ACK`.
    fn on_negotiated(&self, _negotiated: &handshake::Negotiated) {}
    /// What the connection's requests run against.
    fn serving(&self) -> Serving;
    /// Idle tracking (child runtimes).
    fn activity(&self) -> Option<Arc<Activity>> {
        None
    }
    /// The machine-wide work pool (child runtimes).
    fn machine_pool(&self) -> Option<Arc<MachineWorkPool>> {
        None
    }
    /// The byte budget all child runtimes' waiting responses share.
    fn machine_bytes(&self) -> Option<ByteBudget> {
        None
    }
}

/// A data connection for one session: the legacy daemon or a child
/// runtime.
#[derive(Debug)]
pub struct DataSession {
    /// The session.
    pub session_id: String,
    /// Root, spawner, switches.
    pub data: DataPlane,
    /// Idle tracking (child runtimes only).
    pub activity: Option<Arc<Activity>>,
    /// The machine-wide work pool (child runtimes only).
    pub machine_pool: Option<Arc<MachineWorkPool>>,
    /// The byte budget of all children's waiting responses (child runtimes
    /// only).
    pub machine_bytes: Option<ByteBudget>,
}

impl Plane for DataSession {
    fn kind(&self) -> ConnectionKind {
        ConnectionKind::Data {
            session_id: self.session_id.clone(),
        }
    }

    fn hello_root(&self) -> Option<String> {
        Some(self.data.jail.root().to_owned())
    }

    fn serving(&self) -> Serving {
        Serving::Data(self.data.clone())
    }

    fn activity(&self) -> Option<Arc<Activity>> {
        self.activity.clone()
    }

    fn machine_pool(&self) -> Option<Arc<MachineWorkPool>> {
        self.machine_pool.clone()
    }

    fn machine_bytes(&self) -> Option<ByteBudget> {
        self.machine_bytes.clone()
    }
}

/// Everything a runtime needs across its connections.
pub struct Session {
    /// The connect URL.
    pub url: String,
    /// Opens connections (trust anchors, pins, proxy).
    pub connector: Arc<Connector>,
    /// The upgrade's token.
    pub credentials: Arc<dyn Credentials + Send>,
    /// `machine_id`, `display_name`, platform, arch.
    pub identity: Identity,
    /// The switches and the services of the optional capabilities, checked
    /// at every HELLO.
    pub optional: Optional,
    /// The local ceilings of the negotiated limits.
    pub ceilings: Limits,
    /// Reconnect delays.
    pub backoff: Backoff,
    /// Where the records go.
    pub audit: AuditSink,
    /// Log lines.
    pub log: Log,
    /// Set to stop intake and end.
    pub stop: Arc<AtomicBool>,
    /// The active audit log file.
    pub audit_path: std::path::PathBuf,
    /// Control or data.
    pub plane: Arc<dyn Plane>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("url", &self.url)
            .field("kind", &self.plane.kind())
            .field("gates", &self.optional.gates)
            .finish_non_exhaustive()
    }
}

/// How a session's runtime ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeEnd {
    /// A local stop request.
    Stopped,
    /// A terminal protocol condition (PROTOCOL.md §11.2): no reconnect,
    /// exit 0.
    Terminal(String),
    /// A terminal authentication failure of this connection: exit 77 (a
    /// child runtime ends alone).
    AuthFailed(String),
    /// The stored credentials are unusable for every connection (a
    /// definitive renewal refusal): the whole daemon exits 77.
    CredentialsRefused(String),
    /// An audit record could not be written: exit 78, nothing more written.
    AuditFailed,
    /// The configuration cannot work (a refused URL, an unusable CA file):
    /// exit 78.
    Config(String),
    /// The platform refused this connection on every one of
    /// `1 + REFUSAL_RETRIES` attempts (a child runtime ends alone).
    Refused(PlatformRefusal),
}

/// What one attempt led to.
enum Next {
    /// Reconnect after `backoff(attempt)`, then count the attempt.
    Backoff,
    /// Reconnect after `backoff(0)` and start counting again (a normal
    /// close).
    Normal,
    /// Retry the upgrade once, at once, with a renewed token.
    Retry(Zeroizing<String>),
    /// The platform refused the attempt: like [`Next::Backoff`] until the
    /// refusals are too many, then the runtime ends.
    Refused(PlatformRefusal),
    /// The runtime ends.
    End(RuntimeEnd),
}

/// The attempt counters of one runtime.
#[derive(Debug, Default)]
struct Tries {
    /// The backoff exponent (PROTOCOL.md §11.1).
    attempt: u32,
    /// Refused attempts since the last accepted `HELLO_ACK`.
    refusals: u32,
}

/// Runs the session until it ends.
pub fn run(session: &Session, pool: &WorkerThreads) -> RuntimeEnd {
    let mut tries = Tries::default();
    let mut renewed: Option<Zeroizing<String>> = None;
    loop {
        if session.stop.load(Ordering::SeqCst) {
            return RuntimeEnd::Stopped;
        }
        let next = match renewed.take() {
            Some(token) => attempt_once(session, pool, Some(token), true, &mut tries),
            None => match session.credentials.access_token() {
                Ok(token) => attempt_once(session, pool, token, false, &mut tries),
                Err(why) => {
                    session
                        .log
                        .warn(COMPONENT, format!("cannot read the access token: {why}"));
                    Next::Backoff
                }
            },
        };
        // The connection is gone, its buffers with it: the large blocks the
        // allocator kept for its next message go back now, not after the
        // wait before the next connection (or at the end).
        crate::sys::release_kept_blocks(Duration::ZERO);
        let delay = match next {
            Next::End(outcome) => return outcome,
            Next::Retry(token) => {
                renewed = Some(token);
                continue;
            }
            Next::Normal => {
                tries.attempt = 0;
                session.backoff.delay(0, unit_random())
            }
            Next::Refused(refusal) if tries.refusals >= REFUSAL_RETRIES => {
                return RuntimeEnd::Refused(refusal);
            }
            Next::Refused(refusal) => {
                tries.refusals += 1;
                session.log.warn(
                    COMPONENT,
                    format!(
                        "{refusal}; trying again ({} of {REFUSAL_RETRIES})",
                        tries.refusals
                    ),
                );
                tries.backoff(&session.backoff)
            }
            Next::Backoff => tries.backoff(&session.backoff),
        };
        session.log.info(
            COMPONENT,
            format!("reconnecting in {:.1} s", delay.as_secs_f64()),
        );
        if !pause(&session.stop, delay) {
            return RuntimeEnd::Stopped;
        }
    }
}

impl Tries {
    /// `backoff(attempt)`, then `attempt += 1`.
    fn backoff(&mut self, backoff: &Backoff) -> Duration {
        let delay = backoff.delay(self.attempt, unit_random());
        self.attempt = self.attempt.saturating_add(1);
        delay
    }
}

/// One connection attempt: upgrade, handshake, serve.
fn attempt_once(
    session: &Session,
    pool: &WorkerThreads,
    token: Option<Zeroizing<String>>,
    is_retry: bool,
    tries: &mut Tries,
) -> Next {
    session
        .log
        .info(COMPONENT, format!("connecting to {}", session.url));
    let started = Instant::now();
    let connection = match session.connector.connect(&session.url, token.as_ref()) {
        Ok(connection) => connection,
        Err(e) => return upgrade_failed(session, &e, token.as_ref(), is_retry, started),
    };
    drop(token);
    if !record(
        session,
        "WS_CONNECTED",
        Details::new().with("url", json!(session.url)),
    ) {
        return Next::End(RuntimeEnd::AuditFailed);
    }
    session.plane.on_connected();
    let (mut reader, writer) = match connection.split() {
        Ok(halves) => halves,
        Err(e) => return disconnect(session, &e.audit_reason(), Next::Backoff),
    };
    let (negotiated, found) = match handshake(session, &mut reader, &writer) {
        Ok(done) => done,
        Err(next) => return next,
    };
    let granted: Vec<String> = negotiated
        .granted_as_sent
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect();
    if !record(
        session,
        "CONFIG_RELOADED",
        Details::new().with("granted_capabilities", json!(granted)),
    ) {
        let _ = writer.close(1000, "shutdown");
        return Next::End(RuntimeEnd::AuditFailed);
    }
    // PROTOCOL.md §11.1: a successful handshake starts the count again,
    // and the refusals with it.
    *tries = Tries::default();
    session.log.info(
        COMPONENT,
        format!(
            "connected ({}): granted [{}], max_concurrent {}",
            describe(&session.plane.kind()),
            granted.join(", "),
            negotiated.limits.max_concurrent
        ),
    );
    session.plane.on_negotiated(&negotiated);
    let setup = Setup {
        serving: session.plane.serving(),
        audit: session.audit.clone(),
        granted,
        max_concurrent: negotiated.limits.max_concurrent.get(),
        command_timeout_seconds: negotiated.limits.command_timeout_seconds.get(),
        platform_wait_seconds: negotiated.platform_wait_seconds.get(),
        max_file_size_bytes: negotiated.limits.max_file_size_bytes.get(),
        audit_path: session.audit_path.clone(),
        activity: session.plane.activity(),
        machine_pool: session.plane.machine_pool(),
        machine_bytes: session.plane.machine_bytes(),
        found,
    };
    let inbound = LinkIn::new(reader, writer.clone());
    let end = session::serve(setup, pool, inbound, LinkOut(writer.clone()), &session.stop);
    connection_ended(session, end)
}

/// A connection's kind for log lines.
fn describe(kind: &ConnectionKind) -> String {
    match kind {
        ConnectionKind::Control => "machine control".into(),
        ConnectionKind::Data { session_id } => format!("session {session_id}"),
    }
}

/// The upgrade failed: decide between renewal, backoff and a terminal end.
/// `started` is when the attempt began.
fn upgrade_failed(
    session: &Session,
    error: &TransportError,
    token: Option<&Zeroizing<String>>,
    is_retry: bool,
    started: Instant,
) -> Next {
    session
        .log
        .warn(COMPONENT, format!("cannot connect: {error}"));
    match error.disposition() {
        Disposition::Config => Next::End(RuntimeEnd::Config(error.to_string())),
        Disposition::Refused => {
            let refusal = PlatformRefusal {
                kind: RefusalKind::Forbidden,
                connection: session.plane.kind(),
                reason: error.platform_reason().map(str::to_owned),
            };
            attempt_failed(session, error, started, Next::Refused(refusal))
        }
        Disposition::RefreshToken if is_retry => Next::End(RuntimeEnd::AuthFailed(format!(
            "the platform refused the renewed access token ({error}); run autogpt-shim auth"
        ))),
        Disposition::RefreshToken => match session.credentials.renew(token, &session.audit) {
            Renewal::Retry(token) => Next::Retry(token),
            Renewal::Transient(why) => {
                session.log.warn(COMPONENT, why);
                attempt_failed(session, error, started, Next::Backoff)
            }
            Renewal::Definitive(why) => Next::End(RuntimeEnd::CredentialsRefused(why)),
            Renewal::AuditFailed => Next::End(RuntimeEnd::AuditFailed),
        },
        Disposition::Transient => attempt_failed(session, error, started, Next::Backoff),
    }
}

/// Steps 5–6 of PROTOCOL.md §4.1 and the judgement of §4.4.
fn handshake(
    session: &Session,
    reader: &mut Reader,
    writer: &Writer,
) -> Result<(handshake::Negotiated, Found), Next> {
    let kind = session.plane.kind();
    let root = session.plane.hello_root();
    // CAPABILITIES.md §2: checked at each HELLO, kept for the connection.
    let (advertisement, found) = session.optional.probe(&kind, &session.log);
    let advertised = advertisement.capabilities;
    let hello = handshake::build_hello(
        &session.identity,
        &kind,
        root.as_deref(),
        &advertised,
        advertisement.probes,
    );
    let hello_id = session::fresh_id();
    let frame = Frame::new(hello_id.clone(), session::now_ts(), Message::Hello(hello));
    let text = match protocol::encode(&frame) {
        Ok(text) => text,
        // Our own HELLO cannot be encoded: a bug, never retried.
        _ => {
            let _ = writer.close(1000, "");
            return Err(disconnect(
                session,
                "loop_error: hello_encoding",
                Next::End(RuntimeEnd::Terminal("cannot encode HELLO".into())),
            ));
        }
    };
    if text.len() > MAX_WEBSOCKET_MESSAGE_BYTES {
        let close = ShimClose::HelloTooLarge;
        let _ = writer.close(close.code(), close.reason());
        return Err(disconnect(
            session,
            "loop_error: hello_too_large",
            Next::End(RuntimeEnd::Terminal(close.reason().into())),
        ));
    }
    if let Err(e) = writer.send_text(text) {
        return Err(disconnect(session, &e.audit_reason(), Next::Backoff));
    }
    let input = match wait_for_ack(reader, &session.stop) {
        Ok(Some(input)) => input,
        Ok(None) => {
            let _ = writer.close(1000, "shutdown");
            return Err(disconnect(
                session,
                "clean_exit",
                Next::End(RuntimeEnd::Stopped),
            ));
        }
        Err(e) => return Err(disconnect(session, &e.audit_reason(), Next::Backoff)),
    };
    let failure = match handshake::check_ack(&hello_id, &kind, &advertised, session.ceilings, input)
    {
        Ok(negotiated) => return Ok((negotiated, found)),
        Err(failure) => failure,
    };
    if let Some(close) = failure.close() {
        let _ = writer.close(close.code(), close.reason());
    }
    let reason = failure.audit_reason();
    let platform_reason = failure.platform_reason();
    match platform_reason {
        Some(text) => session.log.warn(
            COMPONENT,
            format!("handshake refused: {reason} (\"{text}\")"),
        ),
        None => session
            .log
            .warn(COMPONENT, format!("handshake refused: {reason}")),
    }
    if let Some(terminal) = failure.received_terminal() {
        if !revoked_by_close(session, terminal) {
            return Err(Next::End(RuntimeEnd::AuditFailed));
        }
    }
    let next = match failure.after() {
        AfterFailure::Reconnect => Next::Backoff,
        AfterFailure::Terminal => {
            Next::End(RuntimeEnd::Terminal(format!("handshake ended: {reason}")))
        }
        AfterFailure::TerminalAuthFailure => Next::End(RuntimeEnd::AuthFailed(
            "the platform bound the connection to a different session".into(),
        )),
        AfterFailure::Refused(refusal) => Next::Refused(PlatformRefusal {
            kind: refusal,
            connection: kind,
            reason: platform_reason.map(str::to_owned),
        }),
    };
    Err(disconnect_with(session, &reason, platform_reason, next))
}

/// Reads the first frame after HELLO, for at most [`HELLO_ACK_WAIT`].
/// `Ok(None)`: a local stop arrived first.
fn wait_for_ack(
    reader: &mut Reader,
    stop: &AtomicBool,
) -> Result<Option<AckInput>, TransportError> {
    let deadline = Instant::now() + HELLO_ACK_WAIT;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            return Ok(Some(AckInput::TimedOut));
        }
        match reader.read()? {
            Incoming::Message(payload) => {
                return Ok(Some(AckInput::received(session::decode(&payload))));
            }
            Incoming::Closed(info) => {
                let (code, reason) = close_parts(info);
                return Ok(Some(AckInput::Closed { code, reason }));
            }
            Incoming::Pong(_) | Incoming::Idle => {}
        }
    }
}

/// After `serve`: the records and the reconnect decision of §11.
fn connection_ended(session: &Session, end: End) -> Next {
    match end {
        End::Stopped => disconnect(session, "clean_exit", Next::End(RuntimeEnd::Stopped)),
        End::AuditFailed => Next::End(RuntimeEnd::AuditFailed),
        End::Revoked { reason } => {
            session.log.warn(
                COMPONENT,
                format!("the platform revoked the session: {reason}"),
            );
            disconnect(
                session,
                &handshake::disconnect_reason(Some(ShimClose::SessionRevoked.code())),
                Next::End(RuntimeEnd::Terminal(format!("session revoked: {reason}"))),
            )
        }
        End::Failed(reason) => {
            session
                .log
                .warn(COMPONENT, format!("connection lost: {reason}"));
            disconnect(session, &reason, Next::Backoff)
        }
        End::Closed(close) => {
            let (code, platform_reason) = close_parts(close);
            let reason = handshake::disconnect_reason(code);
            let platform_reason = (!platform_reason.is_empty()).then_some(platform_reason);
            match &platform_reason {
                Some(text) => session.log.info(
                    COMPONENT,
                    format!("the platform closed the connection ({reason}: \"{text}\")"),
                ),
                None => session.log.info(
                    COMPONENT,
                    format!("the platform closed the connection ({reason})"),
                ),
            }
            let next = match classify_close(code) {
                CloseAction::Terminal(terminal) => {
                    if !revoked_by_close(session, terminal) {
                        return Next::End(RuntimeEnd::AuditFailed);
                    }
                    Next::End(RuntimeEnd::Terminal(format!(
                        "the platform ended the session ({})",
                        terminal.label()
                    )))
                }
                CloseAction::ReconnectNormal => Next::Normal,
                CloseAction::ReconnectBackoff => Next::Backoff,
            };
            disconnect_with(session, &reason, platform_reason.as_deref(), next)
        }
    }
}

/// A received close's code, and its reason as an [`excerpt`] (empty when
/// there was none): the platform's text is untrusted.
fn close_parts(close: Option<CloseInfo>) -> (Option<u16>, String) {
    match close {
        Some(close) => (Some(close.code), excerpt(&close.reason)),
        None => (None, String::new()),
    }
}

/// Writes `WS_DISCONNECTED {reason}` (PROTOCOL.md §11.4 step 5), then goes
/// on with `next`; an unwritable record ends the runtime instead.
fn disconnect(session: &Session, reason: &str, next: Next) -> Next {
    disconnect_with(session, reason, None, next)
}

/// [`disconnect`], recording what the platform said about it, when it said
/// anything, as `platform_reason` (its close reason or the `detail` of a
/// refused upgrade, already escaped and bounded).
fn disconnect_with(
    session: &Session,
    reason: &str,
    platform_reason: Option<&str>,
    next: Next,
) -> Next {
    disconnected(session, reason, platform_reason, Outcome::default(), next)
}

/// `WS_DISCONNECTED` for an attempt that failed before there was a
/// connection — DNS, TCP, proxy, TLS (a pin mismatch too), an upgrade
/// refused or answered wrongly — then goes on with `next`.
///
/// PROTOCOL.md §1.2a wants such an attempt audited under this op (a pin
/// mismatch "is audited as `WS_DISCONNECTED`"), and the reason names the
/// failure; but with the default result the record would read like the
/// orderly end of a working connection. No `WS_CONNECTED` precedes it, and
/// its result says what happened: `ok: false`, with the attempt's duration
/// (a timeout shows as such). A connection that did open and then ended
/// keeps the default result.
fn attempt_failed(session: &Session, error: &TransportError, started: Instant, next: Next) -> Next {
    let failed = Outcome {
        ok: false,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        ..Outcome::default()
    };
    disconnected(
        session,
        &error.audit_reason(),
        error.platform_reason(),
        failed,
        next,
    )
}

/// Writes `WS_DISCONNECTED {reason, platform_reason?}` with `result`.
fn disconnected(
    session: &Session,
    reason: &str,
    platform_reason: Option<&str>,
    result: Outcome,
    next: Next,
) -> Next {
    let mut details = Details::new().with("reason", json!(reason));
    if let Some(text) = platform_reason {
        details = details.with("platform_reason", json!(text));
    }
    let entry = Entry {
        result,
        ..Entry::event("WS_DISCONNECTED", details)
    };
    if write(session, entry) {
        next
    } else {
        Next::End(RuntimeEnd::AuditFailed)
    }
}

/// `SESSION_REVOKED {reason, source: "ws_close_code", close_code}` (§3.3).
fn revoked_by_close(session: &Session, terminal: TerminalClose) -> bool {
    record(
        session,
        "SESSION_REVOKED",
        Details::new()
            .with("reason", json!(terminal.audit_reason()))
            .with("source", json!("ws_close_code"))
            .with("close_code", json!(terminal.code())),
    )
}

/// Writes an internal event and waits until it is durable.
fn record(session: &Session, op: &str, details: Details) -> bool {
    write(session, Entry::event(op, details))
}

/// Writes `entry` and waits until it is durable; false (and a log line)
/// when it could not be written.
fn write(session: &Session, entry: Entry) -> bool {
    let op = entry.op.clone();
    let ok = session.audit.write(entry);
    if !ok {
        session.log.error(
            COMPONENT,
            format!("the {op} audit record could not be written"),
        );
    }
    ok
}

/// Sleeps for `delay` unless a stop arrives first; false when stopped.
pub fn pause(stop: &AtomicBool, delay: Duration) -> bool {
    let until = Instant::now() + delay;
    loop {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// A uniform sample from `[0, 1)` for the backoff jitter. Without
/// randomness the jitter is 0, which only makes reconnects less spread out.
fn unit_random() -> f64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.0;
    }
    // 53 random bits: every value is exactly representable.
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}
