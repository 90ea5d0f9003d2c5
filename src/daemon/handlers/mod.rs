//! Operation handlers: one admitted request that passed the connection's
//! gates becomes its single terminal reply and the audit entry that must be
//! durable before the reply is sent (PROTOCOL.md §5.6, AUDIT.md §3).
//!
//! This module decides nothing about admission, capabilities, the
//! connection kind or the machine-wide command limits (the dispatcher did
//! that, the limits as the command was admitted, so that nothing waits for
//! a command slot) and never writes a frame or a record itself. It
//! re-checks the local shell switch, because no grant from the platform can
//! turn on what the user left off (CAPABILITIES.md §1), and it answers a
//! command in the order EXEC.md §3 fixes.
//!
//! It is also where an operation's failure gets its wire code: the jail,
//! the file operations and commands say what happened ([`RejectionKind`],
//! [`FileError`], [`ExecError`]), and [`OperationError`] maps each to the
//! `ERROR` code, message and `details` — and the audit record's error
//! code — here and nowhere else.

mod desktop;
mod llm;

use std::time::Instant;

use rustix::process::Pid;
use serde_json::{Map, Value, json};

use crate::audit::{Details, Entry, Outcome};
use crate::exec::{self, ExecContext, ExecError};
use crate::files::{self, FileContext, FileError};
use crate::jail::RejectionKind;
use crate::protocol::{CommandResult, ErrorCode, ErrorPayload, Message, MessageType};

pub use desktop::{DesktopContext, handle as handle_desktop};
pub use llm::handle as handle_completion;

/// The machine-wide command limits (EXEC.md §8.3–§8.4): the rate window
/// first, then the concurrency limit. A permit is held for the command's
/// whole run and released on drop. Also the machine-wide screenshot rate
/// (EXEC.md §8.5).
pub trait CommandGate: Sync {
    /// Takes a rate slot and a concurrency slot, or says which limit
    /// refused (the exact wire message). Never waits.
    fn enter(&self) -> CommandEntry;
    /// Takes a screenshot slot, or says (the exact wire message) why not.
    fn screenshot(&self) -> Result<(), String>;
}

/// What the command limits said when a command was admitted: the permit to
/// hold while it runs, or the refusal's wire message.
pub type CommandEntry = Result<Box<dyn Send>, String>;

/// What one request needs.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// File operations: the jail and the effective size limit.
    pub files: FileContext<'a>,
    /// Commands: spawner, cancellation, effective timeout and budget.
    pub exec: ExecContext<'a>,
    /// The local `enable_shell` switch.
    pub shell_enabled: bool,
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("shell_enabled", &self.shell_enabled)
            .finish_non_exhaustive()
    }
}

/// A handled request.
#[derive(Debug)]
pub struct Handled {
    /// The terminal reply; `None` when nothing is to be sent (a cancelled
    /// command, EXEC.md §12).
    pub reply: Option<Message>,
    /// The record to make durable before the reply goes out.
    pub audit: Option<Entry>,
    /// A command's process group that outlived it (background jobs): the
    /// session terminates it when it ends.
    pub leftover_group: Option<Pid>,
    /// The operation's last sync, run while its record is synced; the reply
    /// waits for both.
    pub settle: Option<files::Settle>,
}

/// An `ERROR` reply.
pub fn error(code: ErrorCode, message: impl Into<String>) -> Message {
    Message::Error(ErrorPayload::new(code, message))
}

/// `CAPABILITY_NOT_GRANTED` for a locally disabled switch (PROTOCOL.md
/// §5.3), with the same details the capability gate sends.
pub fn not_granted(capability: &str, granted: &[String]) -> Message {
    let mut sorted = granted.to_vec();
    sorted.sort();
    let mut details = Map::new();
    details.insert("required_capability".into(), json!(capability));
    details.insert("granted_capabilities".into(), json!(sorted));
    Message::Error(
        ErrorPayload::new(
            ErrorCode::CapabilityNotGranted,
            format!("The platform did not grant the '{capability}' capability."),
        )
        .with_details(details),
    )
}

/// EXEC.md §1 step 2: the local switch is off, whatever the platform
/// granted.
pub fn shell_disabled(granted: &[String]) -> Message {
    match not_granted("shell", granted) {
        Message::Error(mut payload) => {
            payload.message =
                "Shell execution is disabled. Restart the shim with --enable-shell to opt in."
                    .into();
            Message::Error(payload)
        }
        other => other,
    }
}

/// Runs one data-plane request. `granted` is the connection's granted set
/// (for the details of a local refusal); `command` is what the command
/// limits said when an `EXECUTE_COMMAND` was admitted (`None` when it never
/// reached them, as with the shell off).
pub fn handle(
    ctx: &Context<'_>,
    request_id: &str,
    message: &mut Message,
    granted: &[String],
    command: Option<CommandEntry>,
) -> Handled {
    let started = Instant::now();
    let mut settle = None;
    if let Message::ExecuteCommand(req) = &*message {
        return execute_command(ctx, request_id, message, req, granted, command);
    }
    let outcome = match &mut *message {
        Message::FileRead(req) => files::read(&ctx.files, req),
        Message::FileWrite(req) => {
            let (outcome, last_sync) = files::write_settling(&ctx.files, req);
            settle = last_sync;
            outcome
        }
        Message::FileStat(req) => files::stat(&ctx.files, req),
        Message::FileList(req) => files::list(&ctx.files, req),
        Message::FileDelete(req) => files::delete(&ctx.files, req),
        Message::FileMove(req) => files::move_entry(&ctx.files, req),
        other => {
            // The dispatcher routes only the types above here; anything
            // else is a routing defect, answered rather than ignored.
            return Handled {
                reply: Some(error(
                    ErrorCode::FeatureNotSupported,
                    format!("{} is not supported.", other.message_type().as_str()),
                )),
                audit: None,
                leftover_group: None,
                settle: None,
            };
        }
    };
    let op = message.message_type();
    let duration_ms = millis(started);
    let error_code = outcome.reply.as_ref().err().map(OperationError::code);
    let audit = match outcome.audit {
        files::Audit::Operation(details) => operation_entry(
            op,
            request_id,
            details,
            audit_result(error_code, None, duration_ms),
        ),
        // Only a command's outcome carries these; a file operation that did
        // would still be recorded as itself.
        files::Audit::Command {
            details,
            exit_code,
            duration_ms,
        } => operation_entry(
            op,
            request_id,
            details,
            audit_result(error_code, exit_code, duration_ms),
        ),
        files::Audit::JailViolation {
            rejection,
            path,
            attempted_op,
        } => jail_violation(rejection_code(rejection), path, attempted_op),
    };
    let reply = match outcome.reply {
        Ok(reply) => reply,
        Err(e) => Message::Error(e.into_payload(message)),
    };
    Handled {
        reply: Some(reply),
        audit: Some(audit),
        leftover_group: None,
        settle,
    }
}

/// `EXECUTE_COMMAND`, EXEC.md §3 steps 1–12.
fn execute_command(
    ctx: &Context<'_>,
    request_id: &str,
    request: &Message,
    req: &crate::protocol::ExecuteCommand,
    granted: &[String],
    entry: Option<CommandEntry>,
) -> Handled {
    // Step 1: no record.
    if !ctx.shell_enabled {
        return Handled {
            reply: Some(shell_disabled(granted)),
            audit: None,
            leftover_group: None,
            settle: None,
        };
    }
    // Steps 2–3 ran at admission; refused commands are recorded with
    // duration 0.
    let refusal = match entry {
        Some(Ok(permit)) => {
            let outcome = exec::execute(&ctx.exec, req);
            drop(permit);
            return command_handled(request_id, request, outcome);
        }
        Some(Err(message)) => ExecError::Overloaded(message),
        // The dispatcher enters the limits for every command it routes here
        // with the shell on; one that skipped them is never run.
        None => ExecError::NotAdmitted,
    };
    command_handled(request_id, request, exec::refuse(&ctx.exec, req, refusal))
}

fn command_handled(request_id: &str, request: &Message, outcome: exec::CommandOutcome) -> Handled {
    let error_code = command_error_code(&outcome.reply);
    let audit = match outcome.audit {
        files::Audit::Command {
            details,
            exit_code,
            duration_ms,
        } => operation_entry(
            MessageType::ExecuteCommand,
            request_id,
            details,
            audit_result(error_code, exit_code, duration_ms),
        ),
        // `exec` builds only the two other kinds; a bare operation record
        // would still carry the reply's code.
        files::Audit::Operation(details) => operation_entry(
            MessageType::ExecuteCommand,
            request_id,
            details,
            audit_result(error_code, None, 0),
        ),
        files::Audit::JailViolation {
            rejection,
            path,
            attempted_op,
        } => jail_violation(rejection_code(rejection), path, attempted_op),
    };
    let reply = if outcome.cancelled {
        None
    } else {
        Some(match outcome.reply {
            Ok(result) => Message::CommandResult(result),
            Err(e) => Message::Error(e.into_payload(request)),
        })
    };
    Handled {
        reply,
        audit: Some(audit),
        leftover_group: outcome.leftover_group,
        settle: None,
    }
}

fn operation_entry(op: MessageType, request_id: &str, details: Details, result: Outcome) -> Entry {
    Entry {
        op: op.as_str().to_owned(),
        request_id: Some(request_id.to_owned()),
        details,
        result,
        session_id: None,
    }
}

/// AUDIT.md §3.3: no request id, duration 0, the code twice.
fn jail_violation(code: ErrorCode, path: String, attempted_op: MessageType) -> Entry {
    Entry {
        op: "JAIL_VIOLATION".to_owned(),
        request_id: None,
        details: Details::new()
            .with("code", Value::String(code.as_str().to_owned()))
            .with("path", Value::String(path))
            .with(
                "attempted_op",
                Value::String(attempted_op.as_str().to_owned()),
            ),
        result: Outcome {
            ok: false,
            exit_code: None,
            duration_ms: 0,
            error_code: Some(code.as_str().to_owned()),
        },
        session_id: None,
    }
}

/// The `result` of an `EXECUTE_COMMAND` record: failed with the reply's
/// error code, or with `COMMAND_TIMEOUT` when the command ran out of time.
/// `None` when the command is audited as a `JAIL_VIOLATION` instead.
pub fn command_audit_result(outcome: &exec::CommandOutcome) -> Option<Outcome> {
    let files::Audit::Command {
        exit_code,
        duration_ms,
        ..
    } = &outcome.audit
    else {
        return None;
    };
    Some(audit_result(
        command_error_code(&outcome.reply),
        *exit_code,
        *duration_ms,
    ))
}

/// A command's recorded error code: its error's, or `COMMAND_TIMEOUT` for a
/// result that ran out of time.
fn command_error_code(reply: &Result<CommandResult, ExecError>) -> Option<ErrorCode> {
    match reply {
        Err(e) => Some(e.code()),
        Ok(result) if result.timed_out => Some(ErrorCode::CommandTimeout),
        Ok(_) => None,
    }
}

/// An operation record's `result`: `ok` exactly when there is no error code.
fn audit_result(
    error_code: Option<ErrorCode>,
    exit_code: Option<i64>,
    duration_ms: u64,
) -> Outcome {
    Outcome {
        ok: error_code.is_none(),
        exit_code,
        duration_ms,
        error_code: error_code.map(|code| code.as_str().to_owned()),
    }
}

/// An operation's failure as the wire `ERROR` it is answered with. This is
/// the one place the data plane chooses codes: the jail, the file
/// operations and commands only say what happened.
pub trait OperationError {
    /// The wire code.
    fn code(&self) -> ErrorCode;
    /// The `ERROR` answering `request`: the code and the operation's
    /// message, with the `details` the platform words its answer from.
    fn into_payload(self, request: &Message) -> ErrorPayload;
}

/// The code of a jail refusal, in a `JAIL_VIOLATION` record and on the wire.
pub fn rejection_code(kind: RejectionKind) -> ErrorCode {
    match kind {
        RejectionKind::OutsideRoot => ErrorCode::PathOutsideAllowedRoot,
        RejectionKind::InvalidPath => ErrorCode::PathInvalidChars,
    }
}

/// `details` go beyond the reference, which sends `details: null`: path
/// errors carry the path as the request sent it, `FILE_TOO_LARGE` the
/// limit, the attempted size and the operation, and a text read that only
/// the text cap refused a hint to read it as base64.
impl OperationError for FileError {
    fn code(&self) -> ErrorCode {
        match self {
            FileError::NotFound(_) => ErrorCode::PathNotFound,
            FileError::Exists(_) => ErrorCode::PathExists,
            FileError::NotEmpty(_) => ErrorCode::PathNotEmpty,
            FileError::TooLarge { .. } => ErrorCode::FileTooLarge,
            FileError::Refused(r) => rejection_code(r.kind),
            FileError::Internal(_) => ErrorCode::InternalError,
        }
    }

    fn into_payload(self, request: &Message) -> ErrorPayload {
        let code = self.code();
        let mut details = path_details(code, request);
        if let FileError::TooLarge { excess, .. } = &self {
            details.insert(
                "max_file_size_bytes".into(),
                excess.max_file_size_bytes.into(),
            );
            details.insert("attempted_bytes".into(), excess.attempted_bytes.into());
            details.insert("op".into(), request.message_type().as_str().into());
            if excess.base64_would_fit {
                details.insert("hint".into(), BASE64_HINT.into());
            }
        }
        with_details(ErrorPayload::new(code, self.message()), details)
    }
}

/// A command's path error names its `cwd` as the request sent it, as a file
/// operation's names its path.
impl OperationError for ExecError {
    fn code(&self) -> ErrorCode {
        match self {
            ExecError::Cwd(e) => e.code(),
            ExecError::NotAvailable(_) => ErrorCode::ShellNotAvailable,
            ExecError::Overloaded(_) => ErrorCode::ShimOverloaded,
            ExecError::SandboxUnavailable(_)
            | ExecError::NetworkIsolationUnavailable(_)
            | ExecError::Refused { .. } => ErrorCode::CapabilityNotGranted,
            // The reference answers a malformed request as an exception.
            ExecError::Invalid(_)
            | ExecError::StartFailed(_)
            | ExecError::NotAdmitted
            | ExecError::Cancelled => ErrorCode::InternalError,
        }
    }

    fn into_payload(self, request: &Message) -> ErrorPayload {
        let code = self.code();
        let mut details = path_details(code, request);
        match &self {
            ExecError::SandboxUnavailable(_) => {
                details.insert("reason".into(), "sandbox_unavailable".into());
            }
            ExecError::NetworkIsolationUnavailable(_) => {
                details.insert("reason".into(), "network_isolation_unavailable".into());
            }
            ExecError::Refused { reason, rule, .. } => {
                details.insert("reason".into(), (*reason).into());
                details.insert("rule".into(), rule.clone().into());
            }
            _ => {}
        }
        with_details(ErrorPayload::new(code, self.message()), details)
    }
}

/// The longest wire path quoted in `details`. A longer one is refused by the
/// jail anyway (`PATH_INVALID_CHARS`), and quoting it whole could push the
/// answer past the frame limit.
const MAX_DETAILS_PATH_BYTES: usize = 4096;

/// `details.hint` of a text read that base64 would serve.
const BASE64_HINT: &str = "The file is too large to return as text; read it with \
                           encoding: \"base64\" instead.";

/// `payload` with `details`, which stay `null` when there are none.
fn with_details(payload: ErrorPayload, details: Map<String, Value>) -> ErrorPayload {
    if details.is_empty() {
        payload
    } else {
        payload.with_details(details)
    }
}

/// The `details` of an error with `code` answering `request`: for a path
/// error, the path as the request sent it (a command's `cwd`, when it sent
/// one); nothing otherwise.
fn path_details(code: ErrorCode, request: &Message) -> Map<String, Value> {
    let mut details = Map::new();
    if !is_path_error(code) {
        return details;
    }
    let quoted =
        |path: &str| Value::String(crate::audit::cap::cut(path, MAX_DETAILS_PATH_BYTES).to_owned());
    match request {
        Message::FileRead(r) => details.insert("path".into(), quoted(&r.path)),
        Message::FileWrite(r) => details.insert("path".into(), quoted(&r.path)),
        Message::FileStat(r) => details.insert("path".into(), quoted(&r.path)),
        Message::FileList(r) => details.insert("path".into(), quoted(&r.path)),
        Message::FileDelete(r) => details.insert("path".into(), quoted(&r.path)),
        // Either end may be the one at fault; `path` names both as the
        // jail's audit record does.
        Message::FileMove(r) => {
            details.insert("src".into(), quoted(&r.src));
            details.insert("dst".into(), quoted(&r.dst));
            details.insert("path".into(), quoted(&format!("{} -> {}", r.src, r.dst)))
        }
        Message::ExecuteCommand(r) => match r.cwd.as_deref() {
            Some(cwd) if !cwd.is_empty() => details.insert("path".into(), quoted(cwd)),
            _ => None,
        },
        _ => None,
    };
    details
}

/// The codes that are about a path the request named.
fn is_path_error(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::PathOutsideAllowedRoot
            | ErrorCode::PathReservedName
            | ErrorCode::PathInvalidChars
            | ErrorCode::PathNotFound
            | ErrorCode::PathNotEmpty
            | ErrorCode::PathExists
    )
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl CommandGate for super::capacity::MachineLimits {
    fn enter(&self) -> CommandEntry {
        match self.start_command(Instant::now()) {
            Ok(slot) => Ok(Box::new(slot)),
            Err(refused) => Err(refused.message()),
        }
    }

    fn screenshot(&self) -> Result<(), String> {
        self.start_screenshot(Instant::now())
            .map_err(|refused| refused.message())
    }
}
