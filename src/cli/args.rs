//! Command-line parsing (CLI.md §1): global options before the command,
//! then the command and its own options.
//!
//! Parsing turns arguments into typed values and nothing else: it never reads
//! the configuration, the environment or a file, and it never prints. Options
//! are matched by their full names only (no abbreviations), values come as the
//! next argument or after `=`.
//!
//! Every name is looked up in the command table (`catalog.rs`) before it is
//! interpreted: [`next_arg`] yields only options the table lists for the
//! command at hand, so the parser cannot accept what the help does not show,
//! and `-h`/`--help` anywhere asks for that command's help. Adding a command
//! means adding its [`CommandSpec`] to the table, a [`Command`] variant, one
//! arm in `parse_command` and one in the dispatcher; the unit test below
//! fails until every option in the table is handled. `--session-id` after
//! `start` overwrites the global value, so the later spelling wins as
//! CLI.md §1.3 requires.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use lexopt::Arg::{Long, Short, Value};
use lexopt::Parser;

use super::audit::{self, AuditCommand};
use super::auth::{self, AuthOptions};
use super::catalog::{self, CommandSpec, OptionSpec};
use super::completions::Shell;
use crate::config::{LogLevel, Overrides};

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    /// `-h`/`--help` before the command, or `help` alone: print the
    /// program's help, exit 0.
    Help,
    /// `-h`/`--help` among a command's arguments, or `help <command>`:
    /// print that command's help, exit 0.
    CommandHelp(&'static CommandSpec),
    /// `-V`/`--version`: print the version, exit 0.
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
    /// `install [--at-login]`: write the autostart entry (CLI.md §9). Logon
    /// is the only trigger, so the flag changes nothing.
    Install,
    /// `uninstall`: remove the autostart entry (CLI.md §9).
    Uninstall,
    /// `doctor`: check the setup and the connection (CLI.md §10). Its
    /// settings are the global options.
    Doctor,
    /// `completions <SHELL>`: print the completion script for that shell.
    Completions(Shell),
    /// `manpage`: print the manual page in roff.
    Manpage,
    /// `rules test [--cwd PATH] -- ARGV…`: which local rule decides.
    RulesTest(super::rules::TestOptions),
    /// `approve [ID]`: approve a command waiting for local approval.
    Approve(Option<u64>),
    /// `deny [ID]`: deny a command waiting for local approval.
    Deny(Option<u64>),
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
    /// A global option the command does not use: `install` and `uninstall`
    /// read only `--config` (CLI.md §9.1), and silently dropping a setting
    /// the user expects the service to run with would be a surprise.
    NotUsedBy {
        /// The option.
        option: &'static str,
        /// The command.
        command: &'static str,
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
            UsageError::NotUsedBy { option, command } => write!(
                f,
                "option {option} is not used by {command}: the autostart entry runs \
                 `start` with --config only, so put settings in the config file"
            ),
        }
    }
}

impl std::error::Error for UsageError {}

/// Quotes user input for a one-line message, escaping control characters.
fn quoted(text: &str) -> String {
    format!("'{}'", text.escape_debug())
}

/// Why parsing stops before there is a command to run.
#[derive(Debug)]
pub(crate) enum Halt {
    /// `-h`/`--help` among the arguments of this command.
    Help(&'static CommandSpec),
    /// The command line cannot be run.
    Usage(UsageError),
}

impl From<UsageError> for Halt {
    fn from(error: UsageError) -> Halt {
        Halt::Usage(error)
    }
}

/// One argument, checked against the command's table entry.
#[derive(Debug)]
pub(crate) enum Arg {
    /// An option the table lists for the command, with its value when it
    /// takes one.
    Option(&'static OptionSpec, Option<OsString>),
    /// A positional argument (a subcommand, a `<seq>`).
    Positional(OsString),
}

/// The next argument of the command `spec`. Options the table does not
/// list for it are usage errors; `-h`/`--help` stops with its help.
pub(crate) fn next_arg(
    parser: &mut Parser,
    spec: &'static CommandSpec,
) -> Result<Option<Arg>, Halt> {
    let option = match parser.next().map_err(from_lexopt)? {
        None => return Ok(None),
        Some(Value(value)) => return Ok(Some(Arg::Positional(value))),
        Some(Long("help")) | Some(Short('h')) => {
            refuse_attached_value(parser, catalog::HELP.long)?;
            return Err(Halt::Help(spec));
        }
        Some(Long(name)) => spec
            .long_option(name)
            .ok_or_else(|| UsageError::UnknownOption(format!("--{name}")))?,
        Some(Short(short)) => spec
            .short_option(short)
            .ok_or_else(|| UsageError::UnknownOption(format!("-{short}")))?,
    };
    let value = match option.value {
        Some(_) => Some(value(parser, option.long)?),
        None => {
            refuse_attached_value(parser, option.long)?;
            None
        }
    };
    Ok(Some(Arg::Option(option, value)))
}

/// An option the table lists but the command's parser does not handle: a
/// bug the unit test below catches; reported like an unknown option.
pub(crate) fn unhandled(option: &OptionSpec) -> Halt {
    Halt::Usage(UsageError::UnknownOption(option.long.to_owned()))
}

/// A positional argument where the command takes none.
pub(crate) fn unexpected(arg: OsString) -> Halt {
    Halt::Usage(UsageError::UnexpectedArgument(
        arg.to_string_lossy().into_owned(),
    ))
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
        } => match parse_command(&name, &mut parser, &mut overrides) {
            Ok(command) => Ok(Parsed::Run(Box::new(Invocation {
                overrides: *overrides,
                command,
            }))),
            Err(Halt::Help(spec)) if spec.name.is_empty() => Ok(Parsed::Help),
            Err(Halt::Help(spec)) => Ok(Parsed::CommandHelp(spec)),
            Err(Halt::Usage(error)) => Err(error),
        },
    }
}

/// What the part before the command asks for.
#[derive(Debug)]
pub enum Globals {
    /// `-h`/`--help`.
    Help,
    /// `-V`/`--version`.
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
        let arg = match next_arg(parser, &catalog::COMMAND_TABLE) {
            Ok(arg) => arg,
            Err(Halt::Help(_)) => return Ok(Globals::Help),
            Err(Halt::Usage(error)) => return Err(error),
        };
        let (option, value) = match arg {
            None => return Err(UsageError::MissingCommand),
            Some(Arg::Positional(name)) => {
                return Ok(Globals::Command {
                    overrides: Box::new(overrides),
                    name,
                });
            }
            Some(Arg::Option(option, value)) => (option, value),
        };
        match (option.long, value) {
            ("--version", None) => return Ok(Globals::Version),
            ("--allowed-root", Some(v)) => overrides.allowed_root = Some(PathBuf::from(v)),
            ("--config", Some(v)) => overrides.config_path = Some(PathBuf::from(v)),
            ("--platform-url", Some(v)) => overrides.platform_url = Some(text(option, v)?),
            ("--session-id", Some(v)) => overrides.session_id = Some(text(option, v)?),
            ("--ca-file", Some(v)) => overrides.ca_file = Some(PathBuf::from(v)),
            ("--tls-pin-sha256", Some(v)) => overrides.tls_pin_sha256 = Some(text(option, v)?),
            ("--log-level", Some(v)) => {
                let level = text(option, v)?;
                overrides.log_level =
                    Some(LogLevel::parse(&level).ok_or(UsageError::InvalidValue {
                        option: "--log-level",
                        reason: "expected DEBUG, INFO, WARNING, ERROR or CRITICAL",
                    })?);
            }
            _ => return Err(UsageError::UnknownOption(option.long.to_owned())),
        }
    }
}

/// Parses the command `name` and its options. Every command-specific option
/// lives in that command's arm; only names in the table get that far.
fn parse_command(
    name: &OsString,
    parser: &mut Parser,
    overrides: &mut Overrides,
) -> Result<Command, Halt> {
    let unknown = || UsageError::UnknownCommand(name.to_string_lossy().into_owned());
    let spec = name
        .to_str()
        .and_then(|word| catalog::COMMAND_TABLE.subcommand(word))
        .ok_or_else(unknown)?;
    match spec.name {
        "audit" => Ok(Command::Audit(audit::parse(parser, spec)?)),
        "start" => {
            parse_start(parser, spec, overrides)?;
            Ok(Command::Start)
        }
        "auth" => Ok(Command::Auth(auth::parse(parser, spec)?)),
        "revoke" => no_arguments(parser, spec).map(|()| Command::Revoke),
        "status" => no_arguments(parser, spec).map(|()| Command::Status),
        "install" => {
            only_config(overrides, "install")?;
            parse_install(parser, spec)?;
            Ok(Command::Install)
        }
        "uninstall" => {
            only_config(overrides, "uninstall")?;
            no_arguments(parser, spec).map(|()| Command::Uninstall)
        }
        "doctor" => no_arguments(parser, spec).map(|()| Command::Doctor),
        "completions" => parse_completions(parser, spec).map(Command::Completions),
        "manpage" => no_arguments(parser, spec).map(|()| Command::Manpage),
        "rules" => super::rules::parse(parser, spec).map(Command::RulesTest),
        "approve" => super::rules::parse_decision(parser, spec).map(Command::Approve),
        "deny" => super::rules::parse_decision(parser, spec).map(Command::Deny),
        "help" => Err(help_topic(parser, spec)),
        _ => Err(unknown().into()),
    }
}

/// `help [COMMAND [SUBCOMMAND]]`: the help asked for, as the halt that
/// prints it.
fn help_topic(parser: &mut Parser, spec: &'static CommandSpec) -> Halt {
    let mut topic: &'static CommandSpec = &catalog::COMMAND_TABLE;
    loop {
        match next_arg(parser, spec) {
            Ok(None) => return Halt::Help(topic),
            Ok(Some(Arg::Positional(word))) => {
                let found = word.to_str().and_then(|w| topic.subcommand(w));
                topic = match found {
                    Some(found) => found,
                    None => {
                        let typed = format!("{} {}", topic.name, word.to_string_lossy());
                        return UsageError::UnknownCommand(typed.trim_start().to_owned()).into();
                    }
                };
            }
            Ok(Some(Arg::Option(option, _))) => return unhandled(option),
            Err(halt) => return halt,
        }
    }
}

/// The `<SHELL>` of `completions`, named exactly as [`Shell::name`] spells
/// it.
fn parse_completions(parser: &mut Parser, spec: &'static CommandSpec) -> Result<Shell, Halt> {
    let name = match next_arg(parser, spec)? {
        Some(Arg::Positional(name)) => name,
        None => {
            return Err(
                UsageError::MissingArgument("<SHELL> for completions (bash, zsh or fish)").into(),
            );
        }
        Some(Arg::Option(option, _)) => return Err(unhandled(option)),
    };
    let shell =
        name.to_str()
            .and_then(Shell::named)
            .ok_or_else(|| UsageError::InvalidArgument {
                what: "<SHELL> (expected bash, zsh or fish)",
                value: name.to_string_lossy().into_owned(),
            })?;
    no_arguments(parser, spec)?;
    Ok(shell)
}

/// The options of `install` (CLI.md §9.1): `--at-login`, the default and
/// only trigger, accepted for the reference's command lines.
fn parse_install(parser: &mut Parser, spec: &'static CommandSpec) -> Result<(), Halt> {
    while let Some(arg) = next_arg(parser, spec)? {
        match arg {
            Arg::Option(option, _) if option.long == "--at-login" => {}
            Arg::Option(option, _) => return Err(unhandled(option)),
            Arg::Positional(arg) => return Err(unexpected(arg)),
        }
    }
    Ok(())
}

/// `install` and `uninstall` take `--config` and no other global option
/// (CLI.md §9.1): the first one given is refused.
fn only_config(overrides: &Overrides, command: &'static str) -> Result<(), UsageError> {
    let given = [
        (overrides.allowed_root.is_some(), "--allowed-root"),
        (overrides.platform_url.is_some(), "--platform-url"),
        (overrides.session_id.is_some(), "--session-id"),
        (overrides.ca_file.is_some(), "--ca-file"),
        (overrides.tls_pin_sha256.is_some(), "--tls-pin-sha256"),
        (overrides.log_level.is_some(), "--log-level"),
    ];
    match given.iter().find(|(set, _)| *set) {
        Some((_, option)) => Err(UsageError::NotUsedBy { option, command }),
        None => Ok(()),
    }
}

/// A command that takes no options or arguments.
fn no_arguments(parser: &mut Parser, spec: &'static CommandSpec) -> Result<(), Halt> {
    match next_arg(parser, spec)? {
        None => Ok(()),
        Some(Arg::Option(option, _)) => Err(unhandled(option)),
        Some(Arg::Positional(arg)) => Err(unexpected(arg)),
    }
}

/// The options of `start` (CLI.md §4.2). Flags can only switch a setting
/// on: a setting enabled in the file or the environment stays enabled.
/// The switches of capabilities this build lacks are taken here and refused
/// by the configuration, whichever source sets them.
fn parse_start(
    parser: &mut Parser,
    spec: &'static CommandSpec,
    overrides: &mut Overrides,
) -> Result<(), Halt> {
    while let Some(arg) = next_arg(parser, spec)? {
        let (option, value) = match arg {
            Arg::Option(option, value) => (option, value),
            Arg::Positional(arg) => return Err(unexpected(arg)),
        };
        let flag = match (option.long, value) {
            ("--session-id", Some(v)) => {
                overrides.session_id = Some(text(option, v)?);
                continue;
            }
            ("--command-sandbox", Some(v)) => {
                let mode = text(option, v)?;
                if crate::exec::SandboxMode::parse(&mode).is_none() {
                    return Err(UsageError::InvalidValue {
                        option: option.long,
                        reason: "must be off or workspace",
                    }
                    .into());
                }
                overrides.command_sandbox = Some(mode);
                continue;
            }
            ("--command-network", Some(v)) => {
                let mode = text(option, v)?;
                if crate::exec::NetworkMode::parse(&mode).is_none() {
                    return Err(UsageError::InvalidValue {
                        option: option.long,
                        reason: "must be allow or none",
                    }
                    .into());
                }
                overrides.command_network = Some(mode);
                continue;
            }
            ("--enable-shell", None) => &mut overrides.enable_shell,
            ("--enable-computer-use", None) => &mut overrides.enable_computer_use,
            ("--enable-clipboard", None) => &mut overrides.enable_clipboard,
            ("--enable-clipboard-read-foreign", None) => {
                &mut overrides.enable_clipboard_read_foreign
            }
            ("--enable-recording", None) => &mut overrides.enable_recording,
            _ => return Err(unhandled(option)),
        };
        *flag = true;
    }
    Ok(())
}

/// An option's value as UTF-8 text.
pub(crate) fn text(option: &'static OptionSpec, value: OsString) -> Result<String, UsageError> {
    value.into_string().map_err(|_| UsageError::InvalidValue {
        option: option.long,
        reason: "not valid UTF-8",
    })
}

/// The value of `option`: attached with `=`, or the next argument unless that
/// looks like another option (a value starting with `-` must be attached).
fn value(parser: &mut Parser, option: &'static str) -> Result<OsString, UsageError> {
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

/// `--flag=value` for a flag that takes no value is a usage error.
pub(crate) fn refuse_attached_value(
    parser: &mut Parser,
    option: &'static str,
) -> Result<(), UsageError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A value the option's placeholder stands for.
    fn sample(placeholder: &str) -> &'static str {
        match placeholder {
            "PATH" => "/x",
            "URL" => "https://platform.example.com",
            "HEX,..." => "ab",
            "LEVEL" => "info",
            "ID" => "session-1",
            "DUR" => "1d",
            "OP" => "FILE_READ",
            "MODE" => "workspace",
            "NETWORK" => "none",
            other => panic!("no sample value for the placeholder {other}: add one here"),
        }
    }

    /// A valid value for a required positional argument.
    fn sample_argument(name: &str) -> Option<&'static str> {
        match name {
            "<seq>" => Some("1"),
            "<SHELL>" => Some("fish"),
            "<ARGV>..." => Some("true"),
            optional if optional.starts_with('[') => None,
            other => panic!("no sample value for the argument {other}: add one here"),
        }
    }

    /// Every command of the table with the words that select it.
    fn commands() -> Vec<(Vec<&'static str>, &'static CommandSpec)> {
        fn walk(
            spec: &'static CommandSpec,
            words: Vec<&'static str>,
            out: &mut Vec<(Vec<&'static str>, &'static CommandSpec)>,
        ) {
            for sub in spec.subcommands {
                let mut path = words.clone();
                path.push(sub.word());
                out.push((path.clone(), sub));
                walk(sub, path, out);
            }
        }
        let mut out = Vec::new();
        walk(&catalog::COMMAND_TABLE, Vec::new(), &mut out);
        out
    }

    /// The words of a runnable command line for `spec` with `extra` where
    /// its options go.
    fn line(path: &[&'static str], spec: &CommandSpec, extra: &[&'static str]) -> Vec<String> {
        let mut line: Vec<&str> = path.to_vec();
        line.extend(extra);
        line.extend(spec.args.iter().filter_map(|a| sample_argument(a.name)));
        line.into_iter().map(str::to_owned).collect()
    }

    fn option_words(option: &OptionSpec) -> Vec<&'static str> {
        let mut words = vec![option.long];
        words.extend(option.value.map(sample));
        words
    }

    #[test]
    fn every_command_and_option_in_the_table_is_accepted_by_the_parser() {
        for (path, spec) in commands() {
            if !spec.subcommands.is_empty() || spec.name == "help" {
                continue;
            }
            let parsed = parse(line(&path, spec, &[]));
            assert!(matches!(parsed, Ok(Parsed::Run(_))), "{path:?}: {parsed:?}");
            for option in spec.options {
                let words = line(&path, spec, &option_words(option));
                let parsed = parse(words.clone());
                assert!(
                    matches!(parsed, Ok(Parsed::Run(_))),
                    "{words:?}: {parsed:?}"
                );
            }
        }
        for option in catalog::COMMAND_TABLE.options {
            let mut words = option_words(option);
            words.push("status");
            let parsed = parse(words.clone());
            let expected = match option.long {
                "--version" => matches!(parsed, Ok(Parsed::Version)),
                _ => matches!(parsed, Ok(Parsed::Run(_))),
            };
            assert!(expected, "{words:?}: {parsed:?}");
            if let Some(short) = option.short {
                let spelled = format!("-{short}");
                assert!(
                    matches!(parse([spelled.as_str(), "status"]), Ok(Parsed::Version)),
                    "{spelled}"
                );
            }
        }
    }

    #[test]
    fn help_anywhere_in_a_command_asks_for_that_commands_help() {
        for (path, spec) in commands() {
            for flag in ["--help", "-h"] {
                let mut words: Vec<&str> = path.clone();
                words.push(flag);
                match parse(words.clone()) {
                    Ok(Parsed::CommandHelp(found)) => assert_eq!(found.name, spec.name),
                    other => panic!("{words:?}: {other:?}"),
                }
                let mut words: Vec<&str> = vec!["help"];
                words.extend(&path);
                match parse(words.clone()) {
                    Ok(Parsed::CommandHelp(found)) => assert_eq!(found.name, spec.name),
                    other => panic!("{words:?}: {other:?}"),
                }
            }
        }
        assert!(matches!(parse(["help"]), Ok(Parsed::Help)));
        assert!(matches!(
            parse(["audit", "show", "7", "--help"]),
            Ok(Parsed::CommandHelp(CommandSpec {
                name: "audit show",
                ..
            }))
        ));
    }

    #[test]
    fn help_for_a_command_that_does_not_exist_is_a_usage_error() {
        assert_eq!(
            parse(["help", "frobnicate"]).unwrap_err(),
            UsageError::UnknownCommand("frobnicate".into())
        );
        assert_eq!(
            parse(["help", "audit", "frobnicate"]).unwrap_err(),
            UsageError::UnknownCommand("audit frobnicate".into())
        );
        assert_eq!(
            parse(["help", "--enable-shell"]).unwrap_err(),
            UsageError::UnknownOption("--enable-shell".into())
        );
    }

    #[test]
    fn an_option_of_another_command_is_unknown_here() {
        assert_eq!(
            parse(["status", "--enable-shell"]).unwrap_err(),
            UsageError::UnknownOption("--enable-shell".into())
        );
        assert_eq!(
            parse(["audit", "export", "--older-than", "1d"]).unwrap_err(),
            UsageError::UnknownOption("--older-than".into())
        );
        assert_eq!(
            parse(["start", "--help=yes"]).unwrap_err(),
            UsageError::UnexpectedValue("--help".into())
        );
    }
}
