//! The local command rules at the command line: `rules test -- ARGV…`
//! (which rule would decide a command, from the configuration alone) and
//! `approve`/`deny [ID]` (answering the commands the running daemon is
//! asking about, through its approval socket).
//!
//! Nothing here starts a command or writes an audit record: the daemon
//! records each decision with its command. `approve` and `deny` never
//! answer a question the person did not pick.

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::PathBuf;

use lexopt::Parser;

use super::args::{Arg, Halt, UsageError, next_arg, unexpected, unhandled};
use super::catalog::CommandSpec;
use super::load_config;
use crate::config::Overrides;
use crate::daemon::approvals::{self, ClientRequest, PendingView};
use crate::exec::policy::{self, Action, DEFAULT_RULE, Request, SHELL_SYNTAX_RULE};
use crate::exit;
use crate::text::one_line;

/// `rules test`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestOptions {
    /// The working directory the command would run in; the current one
    /// when not given.
    pub cwd: Option<PathBuf>,
    /// The command's words.
    pub argv: Vec<String>,
}

/// Parses `rules SUBCOMMAND …`.
pub(crate) fn parse(parser: &mut Parser, spec: &'static CommandSpec) -> Result<TestOptions, Halt> {
    let name = match next_arg(parser, spec)? {
        None => return Err(UsageError::MissingArgument("rules subcommand").into()),
        Some(Arg::Positional(name)) => name,
        Some(Arg::Option(option, _)) => return Err(unhandled(option)),
    };
    let sub = name
        .to_str()
        .and_then(|word| spec.subcommand(word))
        .ok_or_else(|| UsageError::UnknownCommand(format!("rules {}", name.to_string_lossy())))?;
    let mut options = TestOptions {
        cwd: None,
        argv: Vec::new(),
    };
    while let Some(arg) = next_arg(parser, sub)? {
        match arg {
            Arg::Option(option, Some(v)) if option.long == "--cwd" => {
                options.cwd = Some(PathBuf::from(v));
            }
            Arg::Option(option, _) => return Err(unhandled(option)),
            Arg::Positional(word) => options.argv.push(word_text(word)?),
        }
    }
    if options.argv.is_empty() {
        return Err(UsageError::MissingArgument("<ARGV>... (the command, after --)").into());
    }
    Ok(options)
}

/// Parses `approve [ID]` or `deny [ID]`.
pub(crate) fn parse_decision(
    parser: &mut Parser,
    spec: &'static CommandSpec,
) -> Result<Option<u64>, Halt> {
    let mut id = None;
    while let Some(arg) = next_arg(parser, spec)? {
        match arg {
            Arg::Option(option, _) => return Err(unhandled(option)),
            Arg::Positional(word) if id.is_none() => {
                let text = word_text(word)?;
                let parsed = text
                    .parse::<u64>()
                    .map_err(|_| UsageError::InvalidArgument {
                        what: "[ID] (the number the list shows)",
                        value: text.clone(),
                    })?;
                id = Some(parsed);
            }
            Arg::Positional(word) => return Err(unexpected(word)),
        }
    }
    Ok(id)
}

fn word_text(word: OsString) -> Result<String, Halt> {
    word.into_string().map_err(|word| {
        UsageError::InvalidArgument {
            what: "argument (not valid UTF-8)",
            value: word.to_string_lossy().into_owned(),
        }
        .into()
    })
}

/// `rules test`: prints which rule would decide `argv` and what it says.
pub fn test(
    overrides: &Overrides,
    options: &TestOptions,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> u8 {
    let config = match load_config(overrides, stderr) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let policy = &config.command_policy;
    if !policy.is_active() {
        say!(
            stdout,
            "No command rules are configured: every command is allowed."
        );
        return exit::SUCCESS;
    }
    let cwd = match options.cwd.clone().map_or_else(std::env::current_dir, Ok) {
        Ok(cwd) => std::path::absolute(&cwd).unwrap_or(cwd),
        Err(e) => {
            say!(stderr, "Error: the current directory is unknown: {e}");
            return exit::NEGATIVE_RESULT;
        }
    };
    let verdict = policy.decide(
        Request::Argv(&options.argv),
        &Default::default(),
        &cwd.to_string_lossy(),
    );
    say!(
        stdout,
        "command: {}",
        one_line(&policy::quote_argv(&options.argv))
    );
    say!(stdout, "cwd: {}", one_line(&cwd.to_string_lossy()));
    let deciding = match verdict.rule.as_str() {
        DEFAULT_RULE => "no rule matches; command_default_action decides".to_owned(),
        SHELL_SYNTAX_RULE => "command_shell_syntax_action decides".to_owned(),
        rule => format!("rule \"{}\" decides", one_line(rule)),
    };
    let action = match verdict.action {
        Action::Allow => "allow",
        Action::Deny => "deny (refused with local_policy_denied)",
        Action::Ask => "ask (waits for `autogpt-shim approve` or `deny`)",
    };
    say!(stdout, "{deciding}: {action}");
    exit::SUCCESS
}

/// `approve [ID]` (`approve` true) or `deny [ID]`: answers question `id`,
/// or lists the waiting questions and answers the one picked on standard
/// input.
pub fn decide(
    overrides: &Overrides,
    approve: bool,
    id: Option<u64>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> u8 {
    let config = match load_config(overrides, stderr) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let state_dir = &config.paths.state_dir;
    let verb = if approve { "approve" } else { "deny" };
    let id = match id {
        Some(id) => id,
        None => {
            let list = ClientRequest {
                list: true,
                decide: None,
                approve: None,
            };
            let pending = match approvals::request(state_dir, &list) {
                Ok(reply) => reply.pending.unwrap_or_default(),
                Err(why) => {
                    say!(stderr, "Error: {}", one_line(&why));
                    return exit::EX_UNAVAILABLE;
                }
            };
            if pending.is_empty() {
                say!(stdout, "No command is waiting for approval.");
                return exit::SUCCESS;
            }
            for view in &pending {
                show(stdout, view);
            }
            let prompt = match pending.as_slice() {
                [only] => format!("Number to {verb} [{}] (empty: none): ", only.id),
                _ => format!("Number to {verb} (empty: none): "),
            };
            let _ = write!(stdout, "{prompt}");
            let _ = stdout.flush();
            let mut line = String::new();
            if std::io::stdin().lock().read_line(&mut line).is_err() || line.trim().is_empty() {
                say!(stdout, "\nNothing was decided.");
                return exit::SUCCESS;
            }
            match line.trim().parse::<u64>() {
                Ok(id) if pending.iter().any(|v| v.id == id) => id,
                _ => {
                    say!(
                        stderr,
                        "Error: {} is not one of the numbers listed; nothing was decided",
                        one_line(line.trim())
                    );
                    return exit::NEGATIVE_RESULT;
                }
            }
        }
    };
    let request = ClientRequest {
        list: false,
        decide: Some(id),
        approve: Some(approve),
    };
    match approvals::request(state_dir, &request) {
        Ok(reply) if reply.decided == Some(id) => {
            let done = if approve { "Approved" } else { "Denied" };
            say!(stdout, "{done}: command {id}.");
            exit::SUCCESS
        }
        Ok(reply) => {
            let why = reply.error.unwrap_or_else(|| "no answer".into());
            say!(stderr, "Error: {}", one_line(&why));
            exit::NEGATIVE_RESULT
        }
        Err(why) => {
            say!(stderr, "Error: {}", one_line(&why));
            exit::EX_UNAVAILABLE
        }
    }
}

/// One waiting command, as the list shows it.
fn show(stdout: &mut dyn Write, view: &PendingView) {
    say!(
        stdout,
        "[{}] session {}, rule \"{}\", {} s left",
        view.id,
        one_line(&view.session_id),
        one_line(&view.rule),
        view.seconds_left
    );
    say!(stdout, "    cwd: {}", one_line(&view.cwd));
    say!(stdout, "    command: {}", one_line(&view.command));
}
