//! `EXECUTE_COMMAND` (EXEC.md): from a decoded request to a
//! `COMMAND_RESULT` or an error, in the specification's step order (steps
//! 5–12; the daemon's gates, the shell switch and the rate and concurrency
//! limits run before [`execute`] is called).
//!
//! [`execute`] returns a [`CommandOutcome`]: the reply plus what to audit. This
//! module never writes audit records or frames itself, never passes the
//! shim's own environment to a command beyond the safe baseline (tokens
//! and keys stay in the shim), and never starts a command anywhere but in
//! the directory the jail opened.

mod cancel;
mod env;
mod output;
pub mod policy;
pub(crate) mod run;
pub mod sandbox;
mod shell;
pub(crate) mod spawner;

/// The flag that cancels a running command.
pub use cancel::Cancel;
/// The output budget: the cap on a stream's text and the truncation marker.
pub use output::{MARKER, TEXT_CAP};
/// The local command rules.
pub use policy::{Approver, Policy};
/// Killing a command's process group, and whether it is gone.
pub use run::{group_gone, terminate_group};
/// The filesystem and network sandboxes of commands.
pub use sandbox::{
    CommandSandbox, FsSandbox, NetSandbox, NetworkMode, SandboxFallback, SandboxMode,
};
/// Finding a program on a `PATH`, as commands' shells are found.
pub use shell::which;
/// The handle to the spawner process that starts the commands.
pub use spawner::{Launching, Spawner};

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};
use rustix::process::Pid;
use serde_json::{Value, json};

use self::run::ResultBy;
use self::spawner::Confinement;
use crate::audit::Details;
use crate::files::{Audit, FileError, JailedError, Step, fd_mount_ok, jailed};
use crate::jail::{Decision, EnforceError, Jail};
use crate::protocol::{CommandResult, ExecuteCommand, MessageType};
use crate::sys::ConfinementFailure;

/// What a command needs besides its request.
#[derive(Debug, Clone, Copy)]
pub struct ExecContext<'a> {
    /// The connection's jail (only the working directory is jailed).
    pub jail: &'a Jail,
    /// Effective `command_timeout_seconds` `T` (min of config and
    /// `HELLO_ACK`).
    pub command_timeout_seconds: u64,
    /// Effective `max_file_size_bytes`; the output budget is derived from it.
    pub max_file_size_bytes: u64,
    /// The shim's environment, captured once at start: the source of the
    /// safe baseline and of the `PATH` shells are looked up on.
    pub host_env: &'a [(OsString, OsString)],
    /// Starts the command (the daemon's one spawner process).
    pub spawner: &'a Spawner,
    /// The session's cancellation token.
    pub cancel: &'a Cancel,
    /// How long the platform waits for this request's reply, when known.
    pub platform_deadline: Option<PlatformDeadline>,
    /// The sandboxes every command runs under, decided at start.
    pub sandbox: CommandSandbox,
    /// The local command rules, and who is asked when one says `ask`.
    pub rules: Rules<'a>,
}

/// The local command rules as one command meets them.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    /// The rules in force (empty: everything is allowed, nothing recorded).
    pub policy: &'a Policy,
    /// Asks the user; `None` when no rule can say `ask`.
    pub approver: Option<&'a dyn Approver>,
    /// `approval_timeout_seconds`.
    pub approval_timeout: Duration,
    /// The session the commands belong to, shown to the user.
    pub session_id: &'a str,
}

impl Rules<'static> {
    /// No rules: every command is allowed and nothing is recorded.
    pub fn none() -> Rules<'static> {
        Rules {
            policy: &policy::NO_RULES,
            approver: None,
            approval_timeout: Duration::from_secs(20),
            session_id: "",
        }
    }
}

impl std::fmt::Debug for Rules<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("active", &self.policy.is_active())
            .field("approver", &self.approver.is_some())
            .field("approval_timeout", &self.approval_timeout)
            .finish_non_exhaustive()
    }
}

/// The longest an `ask` waits, whatever the settings say.
const MAX_APPROVAL_WAIT: Duration = Duration::from_secs(86_400);

/// `details.reason` of a command the local rules refused.
pub const LOCAL_POLICY_DENIED: &str = "local_policy_denied";
/// `details.reason` of a command the user denied.
pub const LOCAL_CONFIRMATION_DENIED: &str = "local_confirmation_denied";
/// `details.reason` of a command nobody approved in time.
pub const LOCAL_CONFIRMATION_TIMEOUT: &str = "local_confirmation_timeout";

/// The platform's wait for a reply: it drops a reply that arrives later
/// than `wait` (the `HELLO_ACK`'s own `command_timeout_seconds`) after it
/// sent the request, whatever timeout the request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlatformDeadline {
    /// When the request was read from the connection.
    pub received: Instant,
    /// The platform's wait.
    pub wait: Duration,
}

/// How long before the platform's deadline a result bounded by it is sent
/// at the latest: the time the frame may spend on the network and in the
/// platform before its clock is read.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(1);

/// What sending a result takes once the command's output is collected: its
/// audit record made durable, the encoding, the writer's queue.
pub const SEND_RESERVE: Duration = Duration::from_millis(500);

/// The least time a command must have before its result is due for it to
/// be started at all.
pub const MIN_RUN: Duration = Duration::from_millis(250);

/// The message of a command not started because its result could no
/// longer arrive in time.
const TOO_LATE: &str = "The command could not start early enough to answer before the platform's deadline; it was not started.";

impl PlatformDeadline {
    /// The instant a command's result must be ready by: the deadline less
    /// [`DEADLINE_MARGIN`] and [`SEND_RESERVE`]. `None`: a wait too long to
    /// represent, which bounds nothing.
    fn result_by(&self) -> Option<Instant> {
        let before = DEADLINE_MARGIN + SEND_RESERVE;
        let deadline = self.received.checked_add(self.wait)?;
        Some(deadline.checked_sub(before).unwrap_or(self.received))
    }
}

/// Why a command was refused or failed. Says what happened; the handler
/// layer chooses the wire code, message and `details` for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecError {
    /// The request cannot run as sent: both or neither of `command` and
    /// `argv`, an empty `argv`, an environment a child cannot be given.
    Invalid(String),
    /// The requested shell, or the program `argv` names, is not on this
    /// machine.
    NotAvailable(String),
    /// The machine-wide command limits refused it, or it came too late for
    /// its answer to reach the platform in time; it was not started.
    Overloaded(String),
    /// The working directory was refused by the jail or could not be opened.
    Cwd(FileError),
    /// The program exists but could not be started.
    StartFailed(String),
    /// The filesystem sandbox is configured but could not be set up for
    /// this command; it was not started (never unconfined instead).
    SandboxUnavailable(String),
    /// Commands have no network, but this one's isolation could not be set
    /// up; it was not started (never with the network instead).
    NetworkIsolationUnavailable(String),
    /// The local command rules, or the user asked about it, refused it;
    /// it never spawned. `reason` is one of [`LOCAL_POLICY_DENIED`],
    /// [`LOCAL_CONFIRMATION_DENIED`] or [`LOCAL_CONFIRMATION_TIMEOUT`];
    /// `rule` the deciding rule's name.
    Refused {
        /// `details.reason`.
        reason: &'static str,
        /// `details.rule`.
        rule: String,
        /// The message.
        message: String,
    },
    /// The command reached the handler without passing the command limits.
    NotAdmitted,
    /// The connection closed, the session stopped or the shim is shutting
    /// down; nothing is sent for it (EXEC.md §12).
    Cancelled,
}

impl ExecError {
    /// The one-line message; never contains environment values.
    pub fn message(&self) -> &str {
        match self {
            Self::Invalid(m)
            | Self::NotAvailable(m)
            | Self::Overloaded(m)
            | Self::StartFailed(m)
            | Self::SandboxUnavailable(m)
            | Self::NetworkIsolationUnavailable(m)
            | Self::Refused { message: m, .. } => m,
            Self::Cwd(e) => e.message(),
            Self::NotAdmitted => NOT_ADMITTED,
            Self::Cancelled => CANCELLED,
        }
    }
}

impl From<FileError> for ExecError {
    fn from(e: FileError) -> Self {
        Self::Cwd(e)
    }
}

/// The result of one `EXECUTE_COMMAND`.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandOutcome {
    /// The `COMMAND_RESULT` payload (also on timeout), or the error.
    pub reply: Result<CommandResult, ExecError>,
    /// What to audit: [`Audit::Command`] or [`Audit::JailViolation`].
    pub audit: Audit,
    /// The command's process group when members remain after it finished
    /// (see `run::Finished::leftover_group`); the owner terminates it
    /// with [`terminate_group`] when the session or the shim stops.
    pub leftover_group: Option<Pid>,
    /// The command was cancelled (connection closed, session stopped,
    /// shutdown): `reply` holds [`ExecError::Cancelled`] for the audit record,
    /// but nothing is to be sent (EXEC.md §12).
    pub cancelled: bool,
}

/// The message of a command that skipped the command limits.
pub const NOT_ADMITTED: &str = "The command was not admitted by the command limits.";

/// The message of a cancelled command's error (audit only; never sent).
pub const CANCELLED: &str = "The command was cancelled.";

/// The exception message for a request with both or neither of
/// `command` and `argv` (reference wording).
pub const EXACTLY_ONE: &str = "Exactly one of `command` or `argv` must be set.";

/// The effective timeout in seconds (EXEC.md §3 step 7): the request can
/// only shorten `T`.
pub fn effective_timeout(requested: Option<u64>, command_timeout_seconds: u64) -> u64 {
    requested.map_or(command_timeout_seconds, |r| r.min(command_timeout_seconds))
}

/// Runs one `EXECUTE_COMMAND` from step 5 on; the duration clock (step 4)
/// starts on entry. Blocks until the command is done (at most the
/// effective timeout + 6 s, or the cancellation sequence). The command is
/// started by the spawner process, which is its parent: any thread may
/// call this.
pub fn execute(ctx: &ExecContext<'_>, req: &ExecuteCommand) -> CommandOutcome {
    let started = Instant::now();
    let cwd_wire = match req.cwd.as_deref() {
        Some(cwd) if !cwd.is_empty() => cwd.to_owned(),
        _ => ctx.jail.root().to_owned(),
    };
    let mut record = Record {
        req,
        sandbox: ctx.sandbox,
        policy: None,
        started,
        cwd: cwd_wire.clone(),
        env_keys: env::keys(req.env.keys().map(OsStr::new)),
        timeout_seconds: effective_timeout(
            req.timeout_seconds.map(|t| t.get()),
            ctx.command_timeout_seconds,
        ),
    };

    // Step 5.
    let program = match (&req.command, &req.argv) {
        (Some(command), None) => Program::Shell(command),
        (None, Some(argv)) => Program::Argv(argv),
        _ => return record.fail(ExecError::Invalid(EXACTLY_ONE.into())),
    };

    // Steps 6 and 6a.
    let mut resolved = None;
    let cwd_fd = match jailed(ctx.jail, &cwd_wire, |d| {
        resolved = Some(d.resolved.clone());
        open_cwd(ctx.jail, d)
    }) {
        Ok(fd) => fd,
        Err(JailedError::Rejected(r)) => {
            return CommandOutcome {
                audit: Audit::JailViolation {
                    rejection: r.kind,
                    path: cwd_wire,
                    attempted_op: MessageType::ExecuteCommand,
                },
                reply: Err(ExecError::Cwd(FileError::Refused(r))),
                leftover_group: None,
                cancelled: false,
            };
        }
        Err(JailedError::Failed(e)) => {
            if let Some(resolved) = resolved {
                record.cwd = resolved;
            }
            return record.fail(e.into());
        }
    };
    if let Some(resolved) = resolved {
        record.cwd = resolved;
    }

    // Step 8.
    if let Err(e) = env::validate(&req.env) {
        return record.fail(ExecError::Invalid(e.message()));
    }

    // The local rules, before anything is prepared for the command. An
    // `ask` waits here, holding the command's slot, and the wait comes off
    // the command's own time.
    let (waited, words) = match apply_rules(ctx, req, &program, &mut record) {
        Ok(applied) => applied,
        Err(outcome) => return *outcome,
    };
    let host = ctx
        .host_env
        .iter()
        .map(|(n, v)| (n.as_os_str(), v.as_os_str()));
    let mut child_env = env::build(host, &req.env);
    // The sandbox's own temporary directory is the command's TMPDIR.
    let confinement = match ctx.sandbox.fs {
        FsSandbox::Landlock(abi) => {
            let host_var = |name: &str| {
                ctx.host_env
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.as_os_str())
            };
            let tmp_base = host_var("TMPDIR")
                .map(Path::new)
                .filter(|p| p.is_absolute())
                .unwrap_or(Path::new("/tmp"));
            let root = Path::new(ctx.jail.root());
            match sandbox::prepare(abi, root, host_var("PATH"), tmp_base, ctx.jail.protected()) {
                Ok(prepared) => {
                    child_env.insert("TMPDIR".into(), prepared.tmpdir.clone().into_os_string());
                    Some(prepared)
                }
                Err(why) => {
                    record.env_keys = env::keys(child_env.keys().map(OsString::as_os_str));
                    return record.fail(ExecError::SandboxUnavailable(format!(
                        "The command sandbox could not be set up, so the command was not started: {why}"
                    )));
                }
            }
        }
        FsSandbox::Off | FsSandbox::Unavailable => None,
    };
    record.env_keys = env::keys(child_env.keys().map(OsString::as_os_str));

    // Steps 9 and 9a. With rules in force, a shell string that is only
    // words runs as those words, without a shell: what the rules matched
    // is exactly what runs.
    let argv: Vec<OsString> = match program {
        Program::Shell(_) if words.is_some() => words
            .unwrap_or_default()
            .into_iter()
            .map(OsString::from)
            .collect(),
        Program::Shell(command) => {
            let path = ctx
                .host_env
                .iter()
                .find(|(n, _)| n == "PATH")
                .map(|(_, v)| v.as_os_str());
            match shell::shell_argv(req.shell, command, path) {
                Some(argv) => argv,
                None => {
                    return record.fail(ExecError::NotAvailable(format!(
                        "Shell '{}' is not available on this OS.",
                        req.shell
                    )));
                }
            }
        }
        Program::Argv([]) => {
            return record.fail(ExecError::Invalid("argv must not be empty".into()));
        }
        Program::Argv(argv) => argv.iter().map(OsString::from).collect(),
    };

    // Cancelled while the request was being prepared: nothing starts.
    if ctx.cancel.is_cancelled() {
        let mut outcome = record.fail(ExecError::Cancelled);
        outcome.cancelled = true;
        return outcome;
    }

    // Steps 11 and 12, planned before the start. A timeout that is the
    // platform's own deadline ends the command early enough for its result
    // to arrive in time; a shorter requested one keeps its instant, and
    // only its grace is cut when that would end past the deadline.
    let timeout = Duration::from_secs(record.timeout_seconds);
    let result_by = ctx.platform_deadline.and_then(|d| {
        d.result_by().map(|instant| ResultBy {
            instant,
            timeout_is_the_wait: timeout >= d.wait,
        })
    });
    // A request that reached this point too late for its answer to arrive
    // in time (the platform has given up on it): nothing starts, so no
    // side effect happens that nobody will hear of.
    if result_by.is_some_and(|by| by.instant < Instant::now() + MIN_RUN) {
        return record.fail(ExecError::Overloaded(TOO_LATE.into()));
    }

    // Step 10. The directory descriptor stays open until the spawner has
    // received it.
    let spawned = run::spawn(
        ctx.spawner,
        &argv,
        &child_env,
        cwd_fd.as_fd(),
        Confinement {
            landlock: confinement.as_ref().map(|c| c.ruleset.as_fd()),
            isolate_network: ctx.sandbox.net == NetSandbox::Namespace,
        },
    );
    drop(cwd_fd);
    let (child, output) = match spawned {
        Ok(child) => child,
        Err(e) => return record.fail(spawn_error(&argv, &e)),
    };

    let finished = run::supervise(
        child,
        output,
        // An approval's wait came off the command's own time.
        timeout.saturating_sub(waited),
        result_by,
        ctx.max_file_size_bytes,
        ctx.cancel,
    );
    // The private temporary directory goes with the command.
    drop(confinement);
    let duration_ms = record.elapsed_ms();
    if finished.cancelled {
        return CommandOutcome {
            audit: Audit::Command {
                details: record.details(),
                exit_code: Some(finished.exit_code),
                duration_ms,
            },
            reply: Err(ExecError::Cancelled),
            leftover_group: finished.leftover_group,
            cancelled: true,
        };
    }
    CommandOutcome {
        reply: Ok(CommandResult {
            stdout: finished.output.stdout,
            stderr: finished.output.stderr,
            exit_code: finished.exit_code,
            timed_out: finished.timed_out,
            // Whole milliseconds, so at most three decimals (EXEC.md §10).
            duration_seconds: duration_ms as f64 / 1000.0,
            output_truncated: finished.output.truncated,
        }),
        audit: Audit::Command {
            details: record.details(),
            exit_code: Some(finished.exit_code),
            duration_ms,
        },
        leftover_group: finished.leftover_group,
        cancelled: false,
    }
}

/// The outcome of a command refused by the daemon's rate or concurrency
/// limit (EXEC.md §3 steps 2–3): the error and an `EXECUTE_COMMAND` record
/// with the raw `cwd` (or the root), the wire env keys and `duration_ms` 0.
pub fn refuse(ctx: &ExecContext<'_>, req: &ExecuteCommand, error: ExecError) -> CommandOutcome {
    let record = Record {
        req,
        sandbox: ctx.sandbox,
        policy: None,
        started: Instant::now(),
        cwd: match req.cwd.as_deref() {
            Some(cwd) if !cwd.is_empty() => cwd.to_owned(),
            _ => ctx.jail.root().to_owned(),
        },
        env_keys: env::keys(req.env.keys().map(OsStr::new)),
        timeout_seconds: effective_timeout(
            req.timeout_seconds.map(|t| t.get()),
            ctx.command_timeout_seconds,
        ),
    };
    let mut outcome = record.fail(error);
    if let Audit::Command { duration_ms, .. } = &mut outcome.audit {
        *duration_ms = 0;
    }
    outcome
}

/// The two ways to name what to run.
enum Program<'a> {
    Shell(&'a str),
    Argv(&'a [String]),
}

/// The audit fields as far as the request got.
struct Record<'a> {
    req: &'a ExecuteCommand,
    /// Added to the record only when a sandbox was configured.
    sandbox: CommandSandbox,
    /// The local rules' decision, when rules are configured.
    policy: Option<Value>,
    started: Instant,
    /// Raw (or root) until the jail accepted, then the resolved path.
    cwd: String,
    /// Wire keys until the child environment was built, then its keys.
    env_keys: Vec<String>,
    timeout_seconds: u64,
}

impl Record<'_> {
    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn details(&self) -> Details {
        let details = Details::new()
            .with("command", json!(self.req.command))
            .with("argv", json!(self.req.argv))
            .with("shell", Value::String(self.req.shell.as_str().to_owned()))
            .with("cwd", Value::String(self.cwd.clone()))
            .with("env_keys", json!(self.env_keys))
            .with("timeout_seconds", json!(self.timeout_seconds));
        let details = match self.sandbox.audit_value() {
            Some(sandbox) => details.with("sandbox", sandbox),
            None => details,
        };
        match &self.policy {
            Some(policy) => details.with("policy", policy.clone()),
            None => details,
        }
    }

    /// A failure before the command ran: the error and its audit record.
    fn fail(&self, error: ExecError) -> CommandOutcome {
        CommandOutcome {
            audit: Audit::Command {
                details: self.details(),
                exit_code: None,
                duration_ms: self.elapsed_ms(),
            },
            reply: Err(error),
            leftover_group: None,
            cancelled: false,
        }
    }
}

/// Decides the command by the local rules (none configured: allowed
/// without a record). Returns how long an `ask` waited for the user and,
/// for a shell string that is only words, the words to run without a
/// shell; a refusal, a denial, a timeout or a cancellation while waiting
/// is the command's finished outcome, and it never spawns.
fn apply_rules(
    ctx: &ExecContext<'_>,
    req: &ExecuteCommand,
    program: &Program<'_>,
    record: &mut Record<'_>,
) -> Result<(Duration, Option<Vec<String>>), Box<CommandOutcome>> {
    let policy = ctx.rules.policy;
    if !policy.is_active() {
        return Ok((Duration::ZERO, None));
    }
    let request = match program {
        Program::Shell(command) => policy::Request::Shell {
            shell: req.shell,
            command,
        },
        Program::Argv(argv) => policy::Request::Argv(argv),
    };
    let verdict = policy.decide(request, &req.env, &record.cwd);
    let words = verdict.words;
    let rule = verdict.rule;
    let mut decision = json!({"rule": rule, "action": verdict.action.as_str()});
    if words.is_some() {
        // The record keeps the string as sent; this says no shell read it.
        decision["without_shell"] = json!(true);
    }
    let refused = |record: &mut Record<'_>, decision: Value, reason, message: String| {
        record.policy = Some(decision);
        Box::new(record.fail(ExecError::Refused {
            reason,
            rule: rule.clone(),
            message,
        }))
    };
    match verdict.action {
        policy::Action::Allow => {
            record.policy = Some(decision);
            Ok((Duration::ZERO, words))
        }
        policy::Action::Deny => Err(refused(
            record,
            decision,
            LOCAL_POLICY_DENIED,
            format!("The local command rules refuse this command (rule \"{rule}\")."),
        )),
        policy::Action::Ask => {
            let asked = Instant::now();
            // The answer must leave the command time to run and its result
            // time to reach the platform before its deadline.
            let own_time = Duration::from_secs(record.timeout_seconds).saturating_sub(MIN_RUN);
            let mut wait = ctx.rules.approval_timeout.min(own_time);
            // Twice the least run: an approval at the last moment still
            // leaves the command its least run after it is prepared.
            if let Some(by) = ctx.platform_deadline.and_then(|d| d.result_by()) {
                wait = wait.min(by.saturating_duration_since(asked + 2 * MIN_RUN));
            }
            // Nobody waits a day at a terminal; and an `Instant` cannot be
            // pushed past what it can represent.
            wait = wait.min(MAX_APPROVAL_WAIT);
            let question = policy::Question {
                session_id: ctx.rules.session_id.to_owned(),
                command: match program {
                    Program::Shell(command) => (*command).to_owned(),
                    Program::Argv(argv) => policy::quote_argv(argv),
                },
                cwd: record.cwd.clone(),
                rule: rule.clone(),
            };
            let answer = match ctx.rules.approver {
                Some(approver) if !wait.is_zero() => approver.ask(&question, wait, ctx.cancel),
                _ => policy::Answer::TimedOut,
            };
            let waited = asked.elapsed();
            decision["approval"] = json!(answer.as_str());
            decision["waited_ms"] = json!(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX));
            match answer {
                policy::Answer::Approved => {
                    record.policy = Some(decision);
                    Ok((waited, words))
                }
                policy::Answer::Denied => Err(refused(
                    record,
                    decision,
                    LOCAL_CONFIRMATION_DENIED,
                    format!("The command was denied at this machine (rule \"{rule}\")."),
                )),
                policy::Answer::TimedOut => Err(refused(
                    record,
                    decision,
                    LOCAL_CONFIRMATION_TIMEOUT,
                    format!(
                        "No one approved the command at this machine within {} s (rule \"{rule}\").",
                        wait.as_secs()
                    ),
                )),
                policy::Answer::Cancelled => {
                    record.policy = Some(decision);
                    let mut outcome = record.fail(ExecError::Cancelled);
                    outcome.cancelled = true;
                    Err(Box::new(outcome))
                }
            }
        }
    }
}

/// Step 6a: the accepted `cwd` opened as a directory descriptor.
fn open_cwd(jail: &Jail, d: &Decision) -> Result<OwnedFd, Step> {
    if d.looped {
        return Err(Step::Fail(FileError::internal(format!(
            "{}: Too many levels of symbolic links",
            d.resolved
        ))));
    }
    match jail.open(
        &d.remainder,
        OFlags::PATH | OFlags::DIRECTORY,
        Mode::empty(),
    ) {
        Ok(fd) => {
            // With `jail_no_xdev`, a mount at the final component is a
            // crossing too (the walker only checks what it walks through).
            fd_mount_ok(jail, fd.as_fd(), &d.resolved)?;
            Ok(fd)
        }
        // The jail reports ENOTDIR as "missing"; opening without
        // O_DIRECTORY tells an existing non-directory apart.
        Err(EnforceError::NotFound) => match jail.open(&d.remainder, OFlags::PATH, Mode::empty()) {
            Ok(_) => Err(Step::Fail(FileError::internal(format!(
                "{}: Not a directory",
                d.resolved
            )))),
            Err(_) => Err(Step::Enforce(EnforceError::NotFound)),
        },
        Err(e) => Err(Step::Enforce(e)),
    }
}

/// Step 10's failure: a sandbox step that failed in the child refuses
/// the command; a missing program is not available (answered as a missing
/// shell, as the reference reports it); anything else failed to start.
fn spawn_error(argv: &[OsString], e: &std::io::Error) -> ExecError {
    let program = argv
        .first()
        .map(|p| String::from_utf8_lossy(p.as_bytes()).into_owned())
        .unwrap_or_default();
    if let Some(failure) = e.raw_os_error().and_then(ConfinementFailure::decode) {
        let message = format!(
            "The command sandbox could not be set up, so the command was not started: {}",
            failure.message()
        );
        return if failure.part.is_network() {
            ExecError::NetworkIsolationUnavailable(message)
        } else {
            ExecError::SandboxUnavailable(message)
        };
    }
    if e.kind() == std::io::ErrorKind::NotFound {
        ExecError::NotAvailable(format!("Executable not found: {program}"))
    } else {
        ExecError::StartFailed(format!("Failed to start {program}: {e}"))
    }
}
