//! The binary's frame: parse the arguments, print help, version and the
//! warning banner, dispatch the command, and turn every failure into one
//! stderr line and an exit code (CLI.md §1–§3).
//!
//! This module owns the mapping from error types to exit codes and is the
//! only place that writes usage errors or configuration errors to stderr. It
//! must never print a secret, and it never does a command's work itself: each
//! command lives in its own module and is reached through [`dispatch`].

/// One line to a stream; a closed stream (`… | head`) is not worth a
/// failure.
macro_rules! say {
    ($out:expr) => {{
        let _ = writeln!($out);
    }};
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

mod args;
mod audit;
mod auth;
mod catalog;
mod completions;
mod doctor;
mod help;
mod install;
mod manpage;
mod prompt;
mod revoke;
mod rules;
mod start;
mod status;

use std::ffi::OsString;
use std::io::{self, Write};
use std::process::ExitCode;

/// The parsed command line and the parsers that produce it.
pub use args::{Command, Globals, Parsed, UsageError, parse, parse_globals};
/// The `audit` subcommands and the options of `audit tail`.
pub use audit::{AuditCommand, TailOptions};
/// The options of `auth`.
pub use auth::AuthOptions;
/// The command table that the parser, the help and its tests share.
pub use catalog::{COMMAND_TABLE, CommandSpec};
/// The shells `completions` writes scripts for.
pub use completions::Shell;

use args::Invocation;

use crate::config::{self, Config, ConfigError, Overrides};
use crate::exit;

/// The program name used in messages.
pub(crate) const PROGRAM: &str = "autogpt-shim";

/// The version printed by `--version` and sent as `shim_version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The process entry point: real arguments, real stdout and stderr.
pub fn main() -> ExitCode {
    protect_process();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    // The hidden spawner mode (CLI.md §1.2) needs the socket its parent
    // passes on descriptor 3; without it the argument is just an unknown
    // command.
    if let Some(code) = crate::exec::spawner::run_if_requested(&args) {
        return ExitCode::from(code);
    }
    // Unlocked handles: each write takes the stream's lock only for itself.
    // Holding the locks for the whole command would block every other
    // thread that logs (the daemon's signal and worker threads) for good.
    let code = run(args, &mut io::stdout(), &mut io::stderr());
    ExitCode::from(code)
}

/// Done first, while the process has one thread and holds no secret: no
/// process of the same user may read this one's memory or environment
/// through `/proc` or attach to it with ptrace (core dumps are off too),
/// and the passphrase leaves the environment. Every mode is covered —
/// the daemon, its spawner (the same binary) and the commands that hold
/// tokens or the audit key. The setting does not survive `exec`, so the
/// commands the spawner starts are ordinary processes again.
fn protect_process() {
    // Cannot fail on Linux for this argument.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    crate::secrets::passphrase::take_from_process();
}

/// Runs the command line `args` (without the program name) and returns the
/// exit code. Output goes to the given streams, so the whole frame is
/// testable in-process.
pub fn run<I>(args: I, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8
where
    I: IntoIterator<Item = OsString>,
{
    match parse(args) {
        Ok(Parsed::Help) => {
            // A closed stdout (`--help | head -0`) is not worth a failure.
            let _ = stdout.write_all(help::render(&catalog::COMMAND_TABLE).as_bytes());
            exit::SUCCESS
        }
        Ok(Parsed::CommandHelp(spec)) => {
            let _ = stdout.write_all(help::render(spec).as_bytes());
            exit::SUCCESS
        }
        Ok(Parsed::Version) => {
            let _ = writeln!(stdout, "{PROGRAM} {VERSION}");
            exit::SUCCESS
        }
        Ok(Parsed::Run(invocation)) => {
            // Only the commands that give the platform access warn; the
            // others (status, audit, install, …) stay quiet and scriptable.
            if matches!(invocation.command, Command::Start | Command::Auth(_)) {
                print_banner(stderr);
            }
            dispatch(*invocation, stdout, stderr)
        }
        Err(error) => usage_error(&error, stderr),
    }
}

/// Runs a parsed command. One arm per command.
fn dispatch(invocation: Invocation, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    match invocation.command {
        Command::Audit(command) => audit::run(command, &invocation.overrides, stdout, stderr),
        Command::Start => start::run(&invocation.overrides, stdout, stderr),
        Command::Auth(options) => auth::run(&options, &invocation.overrides, stdout, stderr),
        Command::Revoke => revoke::run(&invocation.overrides, stdout, stderr),
        Command::Status => status::run(&invocation.overrides, stdout, stderr),
        Command::Install => install::install(&invocation.overrides, stdout, stderr),
        Command::Uninstall => install::uninstall(stdout, stderr),
        Command::Doctor => doctor::run(&invocation.overrides, stdout, stderr),
        Command::Completions(shell) => {
            let _ = stdout.write_all(completions::script(shell).as_bytes());
            exit::SUCCESS
        }
        Command::Manpage => print_manpage(stdout, stderr),
        Command::RulesTest(options) => rules::test(&invocation.overrides, &options, stdout, stderr),
        Command::Approve(id) => rules::decide(&invocation.overrides, true, id, stdout, stderr),
        Command::Deny(id) => rules::decide(&invocation.overrides, false, id, stdout, stderr),
    }
}

/// `manpage`: the page dated by `SOURCE_DATE_EPOCH` when that is set (the
/// reproducible-builds convention), undated otherwise.
fn print_manpage(stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let env = config::Environment::from_process();
    let date = match env.get("SOURCE_DATE_EPOCH").map(manpage::date_from_epoch) {
        None => None,
        Some(Ok(date)) => Some(date),
        Some(Err(error)) => {
            say!(stderr, "{PROGRAM}: {error}");
            return exit::EX_CONFIG;
        }
    };
    let _ = stdout.write_all(manpage::render(date.as_deref()).as_bytes());
    exit::SUCCESS
}

/// Loads the configuration for a command: warnings are printed on stderr,
/// and an invalid configuration is reported there as one line and becomes
/// exit 78 (`EX_CONFIG`). The only place that maps [`ConfigError`] to an
/// exit code.
pub fn load_config(overrides: &Overrides, stderr: &mut dyn Write) -> Result<Config, u8> {
    match config::load_from_process(overrides) {
        Ok(loaded) => {
            for warning in &loaded.warnings {
                let _ = writeln!(stderr, "{PROGRAM}: {warning}");
            }
            Ok(loaded.config)
        }
        Err(error) => Err(config_error(&error, stderr)),
    }
}

/// How a key recovered from the reference's legacy file is judged: it must
/// verify the newest record of the audit log at `log` (AUDIT.md §7.4).
pub(crate) fn legacy_key_check(
    log: &std::path::Path,
) -> impl FnMut(&crate::audit::AuditKey) -> crate::secrets::KeyCheck + '_ {
    use crate::secrets::KeyCheck;
    move |key| match crate::audit::verify::last_record_verifies(log, key) {
        Ok(None) => KeyCheck::NoRecords,
        Ok(Some(true)) => KeyCheck::Verified,
        Ok(Some(false)) => KeyCheck::Mismatch,
        Err(why) => KeyCheck::Failed(why),
    }
}

/// The process environment as pairs, for the connector's proxy settings.
pub(crate) fn env_pairs(env: &crate::config::Environment) -> Vec<(OsString, OsString)> {
    env.iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The connector of a command that talks to the platform; an unusable CA
/// file or proxy setting is a configuration error (exit 78).
/// The secret store of `auth` and `start`: on a terminal the file store's
/// passphrase may be typed when nothing else gives it. The fallback warning
/// goes to `stderr`; the keychain's own error text (often a D-Bus message)
/// only to a debug log line.
pub(crate) fn select_store_asking(
    config: &Config,
    env: &crate::config::Environment,
    log: &crate::log::Log,
    stderr: &mut dyn Write,
) -> Result<crate::secrets::SecretStore, crate::secrets::SecretError> {
    use crate::secrets::{Keychain, SecretStore};
    let selected = SecretStore::select_asking(
        Keychain::probe(),
        &config.paths,
        env,
        Some(&prompt::ask_passphrase),
    )?;
    if let Some(detail) = &selected.keychain_detail {
        log.debug("secrets", format!("keychain probe: {detail}"));
    }
    if let Some(warning) = &selected.warning {
        say!(stderr, "{PROGRAM}: {warning}");
    }
    Ok(selected.store)
}

pub(crate) fn connector(
    config: &Config,
    env: &crate::config::Environment,
    stderr: &mut dyn Write,
) -> Result<crate::transport::Connector, u8> {
    crate::transport::Connector::from_config(config, &env_pairs(env)).map_err(|e| {
        say!(stderr, "{PROGRAM}: configuration error: {e}");
        exit::EX_CONFIG
    })
}

/// Reports an invalid configuration and returns its exit code.
pub fn config_error(error: &ConfigError, stderr: &mut dyn Write) -> u8 {
    let _ = writeln!(stderr, "{PROGRAM}: configuration error: {error}");
    exit::EX_CONFIG
}

/// Reports a usage error and returns its exit code.
pub fn usage_error(error: &UsageError, stderr: &mut dyn Write) -> u8 {
    let _ = writeln!(stderr, "{PROGRAM}: {error}");
    let _ = writeln!(stderr, "{}", help::USAGE_LINE);
    let _ = writeln!(stderr, "Try '{PROGRAM} --help' for more information.");
    exit::USAGE
}

/// The warning banner of CLI.md §2, printed on stderr by `start` and `auth`.
pub const BANNER: &str = "\
WARNING: autogpt-shim is experimental software.
WARNING: While it runs, the AutoGPT platform can reach files on this machine and any capability you enable.
WARNING: With shell access enabled, commands run with all the rights of your user account, outside any folder restriction.
WARNING: Read SECURITY.md before using it.
";

fn print_banner(stderr: &mut dyn Write) {
    let _ = stderr.write_all(BANNER.as_bytes());
}
