//! Command-line parsing (CLI.md §1): global options before the command, then
//! the command and its own options.
//!
//! Parsing turns arguments into typed values and nothing else: it never reads
//! the configuration, the environment or a file, and it never prints. Options
//! are matched by their full names only (no abbreviations), values come as the
//! next argument or after `=`.
//!
//! [`parse_globals`] reads the global options up to the command name;
//! `parse_command` then hands the rest to the command. Adding a command means
//! adding a [`Command`] variant, one arm in `parse_command` that parses its
//! options, and one arm in the dispatcher. A `start` arm also accepts
//! `--session-id` through [`session_id_value`], which overwrites the global
//! value, so the later spelling wins as CLI.md §1.3 requires.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::PathBuf;

use lexopt::Arg::{Long, Short, Value};
use lexopt::Parser;

use super::audit::{self, AuditCommand};
use super::auth::{self, AuthOptions};
use crate::config::{LogLevel, Overrides};

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    /// `-h`/`--help`: print usage, exit 0.
    Help,
    /// `--version`: print the version, exit 0.
    Version,
    /// Run a command (boxed: far larger than the other variants).
    Run(Box<Invocation>),
}

/// A command with the settings the global options override.
#[derive(Debug)]
pub struct Invocation {
    /// Global options (and, later, `start` flags) as configuration overrides.
    pub overrides: Overrides,
    /// The command to run.
    pub command: Command,
}

/// The commands of CLI.md §1.2. Each arrives together with the feature that
/// implements it; until then its name is an unknown command.
#[derive(Debug)]
pub enum Command {
    /// `audit <subcommand>`: the audit log tools (CLI.md §4.5).
    Audit(AuditCommand),
    /// `start`: run the daemon in the foreground (CLI.md §4.2). Its options
    /// are configuration overrides, so it carries nothing of its own.
    Start,
    /// `auth [--no-browser]`: the OAuth flow (CLI.md §4.1).
    Auth(AuthOptions),
    /// `revoke`: revoke and delete the tokens (CLI.md §4.4).
    Revoke,
    /// `status`: configuration, tokens, daemon and autostart (CLI.md §4.3).
    Status,
}

/// A command line that cannot be run: exit 2 with a one-line message and a
/// usage hint on stderr (CLI.md §1.2).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UsageError {
    /// No command after the global options.
    MissingCommand,
    /// The command name is not a command of this build.
    UnknownCommand(String),
    /// An option that is not known at this position.
    UnknownOption(String),
    /// An option that needs a value got none (or what looks like another
    /// option).
    MissingValue(&'static str),
    /// An option that takes no value was given one with `=`.
    UnexpectedValue(String),
    /// An option's value is unusable, e.g. an unknown log level.
    InvalidValue {
        /// The option.
        option: &'static str,
        /// What is wrong, one line.
        reason: &'static str,
    },
    /// A positional argument where none is expected.
    UnexpectedArgument(String),
    /// A required positional argument (or subcommand) is missing; names it.
    MissingArgument(&'static str),
    /// A positional argument is unusable, e.g. a `<seq>` that is not an
    /// integer.
    InvalidArgument {
        /// What the argument should be.
        what: &'static str,
        /// What was given.
        value: String,
    },
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsageError::MissingCommand => f.write_str("missing command"),
            UsageError::UnknownCommand(name) => write!(f, "unknown command {}", quoted(name)),
            UsageError::UnknownOption(name) => write!(f, "unknown option {}", quoted(name)),
            UsageError::MissingValue(option) => write!(f, "option {option} needs a value"),
            UsageError::UnexpectedValue(option) => write!(f, "option {option} takes no value"),
            UsageError::InvalidValue { option, reason } => {
                write!(f, "invalid value for {option}: {reason}")
            }
            UsageError::UnexpectedArgument(arg) => {
                write!(f, "unexpected argument {}", quoted(arg))
            }
            UsageError::MissingArgument(what) => write!(f, "missing {what}"),
            UsageError::InvalidArgument { what, value } => {
                write!(f, "invalid {what}: {}", quoted(value))
            }
        }
    }
}

impl std::error::Error for UsageError {}

/// Quotes user input for a one-line message, escaping control characters.
fn quoted(text: &str) -> String {
    format!("'{}'", text.escape_debug())
}

/// Parses the arguments after the program name.
pub fn parse<I>(args: I) -> Result<Parsed, UsageError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let mut parser = Parser::from_args(args);
    match parse_globals(&mut parser)? {
        Globals::Help => Ok(Parsed::Help),
        Globals::Version => Ok(Parsed::Version),
        Globals::Command {
            mut overrides,
            name,
        } => {
            let command = parse_command(&name, &mut parser, &mut overrides)?;
            Ok(Parsed::Run(Box::new(Invocation {
                overrides: *overrides,
                command,
            })))
        }
    }
}

/// What the part before the command asks for.
#[derive(Debug)]
pub enum Globals {
    /// `-h`/`--help`.
    Help,
    /// `--version`.
    Version,
    /// A command name, with the global options as overrides. The parser is
    /// left just after the name, at the command's own arguments.
    Command {
        /// The global options (boxed: far larger than the other variants).
        overrides: Box<Overrides>,
        /// The command name as given.
        name: OsString,
    },
}

/// Parses global options up to and including the command name.
pub fn parse_globals(parser: &mut Parser) -> Result<Globals, UsageError> {
    let mut overrides = Overrides::default();
    loop {
        let arg = parser.next().map_err(from_lexopt)?;
        match arg {
            None => return Err(UsageError::MissingCommand),
            Some(Short('h')) | Some(Long("help")) => {
                refuse_attached_value(parser, "--help")?;
                return Ok(Globals::Help);
            }
            Some(Long("version")) => {
                refuse_attached_value(parser, "--version")?;
                return Ok(Globals::Version);
            }
            Some(Long("allowed-root")) => {
                overrides.allowed_root = Some(PathBuf::from(value(parser, "--allowed-root")?));
            }
            Some(Long("config")) => {
                overrides.config_path = Some(PathBuf::from(value(parser, "--config")?));
            }
            Some(Long("platform-url")) => {
                overrides.platform_url = Some(text_value(parser, "--platform-url")?);
            }
            Some(Long("session-id")) => session_id_value(parser, &mut overrides)?,
            Some(Long("ca-file")) => {
                overrides.ca_file = Some(PathBuf::from(value(parser, "--ca-file")?));
            }
            Some(Long("tls-pin-sha256")) => {
                overrides.tls_pin_sha256 = Some(text_value(parser, "--tls-pin-sha256")?);
            }
            Some(Long("log-level")) => {
                let level = text_value(parser, "--log-level")?;
                overrides.log_level =
                    Some(LogLevel::parse(&level).ok_or(UsageError::InvalidValue {
                        option: "--log-level",
                        reason: "expected DEBUG, INFO, WARNING, ERROR or CRITICAL",
                    })?);
            }
            Some(Long(other)) => return Err(UsageError::UnknownOption(format!("--{other}"))),
            Some(Short(other)) => return Err(UsageError::UnknownOption(format!("-{other}"))),
            Some(Value(name)) => {
                return Ok(Globals::Command {
                    overrides: Box::new(overrides),
                    name,
                });
            }
        }
    }
}

/// Parses the command `name` and its options. Every command-specific option
/// lives in that command's arm.
fn parse_command(
    name: &OsStr,
    parser: &mut Parser,
    overrides: &mut Overrides,
) -> Result<Command, UsageError> {
    match name.to_str() {
        Some("audit") => Ok(Command::Audit(audit::parse(parser)?)),
        Some("start") => {
            parse_start(parser, overrides)?;
            Ok(Command::Start)
        }
        Some("auth") => Ok(Command::Auth(auth::parse(parser)?)),
        Some("revoke") => no_arguments(parser).map(|()| Command::Revoke),
        Some("status") => no_arguments(parser).map(|()| Command::Status),
        _ => Err(UsageError::UnknownCommand(
            name.to_string_lossy().into_owned(),
        )),
    }
}

/// A command that takes no options or arguments.
fn no_arguments(parser: &mut Parser) -> Result<(), UsageError> {
    match parser.next().map_err(from_lexopt)? {
        None => Ok(()),
        Some(Long(other)) => Err(UsageError::UnknownOption(format!("--{other}"))),
        Some(Short(other)) => Err(UsageError::UnknownOption(format!("-{other}"))),
        Some(Value(arg)) => Err(UsageError::UnexpectedArgument(
            arg.to_string_lossy().into_owned(),
        )),
    }
}

/// The options of `start` (CLI.md §4.2). Flags can only switch a setting
/// on: a setting enabled in the file or the environment stays enabled.
fn parse_start(parser: &mut Parser, overrides: &mut Overrides) -> Result<(), UsageError> {
    while let Some(arg) = parser.next().map_err(from_lexopt)? {
        let (flag, option): (&mut bool, &'static str) = match arg {
            Long("session-id") => {
                session_id_value(parser, overrides)?;
                continue;
            }
            Long("enable-shell") => (&mut overrides.enable_shell, "--enable-shell"),
            Long("enable-computer-use") => {
                (&mut overrides.enable_computer_use, "--enable-computer-use")
            }
            Long("enable-clipboard") => (&mut overrides.enable_clipboard, "--enable-clipboard"),
            Long("enable-clipboard-read-foreign") => (
                &mut overrides.enable_clipboard_read_foreign,
                "--enable-clipboard-read-foreign",
            ),
            Long("enable-recording") => (&mut overrides.enable_recording, "--enable-recording"),
            Long(other) => return Err(UsageError::UnknownOption(format!("--{other}"))),
            Short(other) => return Err(UsageError::UnknownOption(format!("-{other}"))),
            Value(arg) => {
                return Err(UsageError::UnexpectedArgument(
                    arg.to_string_lossy().into_owned(),
                ));
            }
        };
        *flag = true;
        refuse_attached_value(parser, option)?;
    }
    Ok(())
}

/// `--session-id ID`, valid before the command and after `start`. Each
/// occurrence overwrites the previous one, so the spelling after `start`
/// wins (CLI.md §1.3).
pub fn session_id_value(parser: &mut Parser, overrides: &mut Overrides) -> Result<(), UsageError> {
    overrides.session_id = Some(text_value(parser, "--session-id")?);
    Ok(())
}

/// The value of `option`: attached with `=`, or the next argument unless that
/// looks like another option (a value starting with `-` must be attached).
pub(crate) fn value(parser: &mut Parser, option: &'static str) -> Result<OsString, UsageError> {
    if let Some(attached) = parser.optional_value() {
        return Ok(attached);
    }
    let next = parser
        .value()
        .map_err(|_| UsageError::MissingValue(option))?;
    let bytes = next.as_encoded_bytes();
    if bytes.len() > 1 && bytes.starts_with(b"-") {
        return Err(UsageError::MissingValue(option));
    }
    Ok(next)
}

/// Like [`value`], for options whose value must be UTF-8 text.
pub(crate) fn text_value(parser: &mut Parser, option: &'static str) -> Result<String, UsageError> {
    value(parser, option)?
        .into_string()
        .map_err(|_| UsageError::InvalidValue {
            option,
            reason: "not valid UTF-8",
        })
}

/// `--flag=value` for a flag that takes no value is a usage error.
fn refuse_attached_value(parser: &mut Parser, option: &'static str) -> Result<(), UsageError> {
    match parser.optional_value() {
        Some(_) => Err(UsageError::UnexpectedValue(option.to_owned())),
        None => Ok(()),
    }
}

/// Translates the errors lexopt itself reports while stepping through the
/// arguments (values are fetched through [`value`], which maps its own).
pub(crate) fn from_lexopt(error: lexopt::Error) -> UsageError {
    match error {
        lexopt::Error::UnexpectedValue { option, .. } => UsageError::UnexpectedValue(option),
        lexopt::Error::UnexpectedOption(option) => UsageError::UnknownOption(option),
        lexopt::Error::UnexpectedArgument(arg) => {
            UsageError::UnexpectedArgument(arg.to_string_lossy().into_owned())
        }
        other => UsageError::UnexpectedArgument(other.to_string()),
    }
}
