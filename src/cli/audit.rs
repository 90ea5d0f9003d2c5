//! `autogpt-shim audit …` (CLI.md §4.5, AUDIT.md §10–§11): the subcommands'
//! arguments and everything they print, with the exit codes of §11.6.
//!
//! The work itself lives in [`crate::audit`] (verification, file discovery,
//! following, the summary line and local time of a record, the export
//! bundle, the writer for `rotate`); this module turns its results into the
//! lines each subcommand prints and maps each failure to its exit code in
//! one place. Results go to stdout, errors and warnings to stderr, progress
//! only to a terminal. It never prints the audit key and never creates one:
//! every key is loaded read-only.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::RecvTimeoutError;
use lexopt::Parser;
use serde_json::Value as Json;

use super::args::{Arg, Halt, next_arg, text, unexpected, unhandled};
use super::catalog::CommandSpec;
use super::{PROGRAM, UsageError, VERSION, load_config};
use crate::audit::canonical::repr_f64;
use crate::audit::export::{ExportOptions, export, export_with_progress};
use crate::audit::files::{self, base_name, find_record, newest_ts};
use crate::audit::pretty::{indent, terminal_safe_line};
use crate::audit::tail::Follower;
use crate::audit::verify::{
    Violation, ViolationKind, check_file_link, read_current_with_anchor, verify_bytes,
    verify_bytes_with_progress,
};
use crate::audit::view::{self, Filter};
use crate::audit::{AuditError, AuditKey, AuditLog, RotateReason, WriterOptions};
use crate::config::{Config, Environment, Overrides};
use crate::exit;
use crate::secrets::{ErrorClass, SecretError, SecretStore};
use crate::timefmt::LocalZone;
use crate::{sys, timefmt};

/// How often `tail` looks for appended lines (AUDIT.md §11.1).
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Files at least this large show verification progress on a terminal.
const PROGRESS_MIN_BYTES: usize = 1024 * 1024;
/// `prune` without `--older-than`.
const DEFAULT_OLDER_THAN: &str = "90d";

/// An `audit` subcommand with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditCommand {
    /// `audit tail [--follow] [--session ID] [--op OP] [--json]`: print the
    /// records, and with `--follow` the ones appended later.
    Tail(TailOptions),
    /// `audit show <seq>`: the first record with that seq.
    Show {
        /// The seq to look for.
        seq: i128,
    },
    /// `audit verify`: the current file.
    Verify,
    /// `audit verify-all`: the current and every rotated file.
    VerifyAll,
    /// `audit export [--output PATH]`.
    Export {
        /// `--output`; default `./audit-export-<stamp>.zip`.
        output: Option<PathBuf>,
    },
    /// `audit rotate`.
    Rotate,
    /// `audit prune [--older-than DUR]`. The value is kept as given: an
    /// unparseable one has its own message and exit code (AUDIT.md §11.5),
    /// not a usage error's.
    Prune {
        /// `--older-than`, unparsed.
        older_than: Option<String>,
    },
}

/// The options of `audit tail`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TailOptions {
    /// `--follow`: after the existing records, keep printing appended ones
    /// (across rotations) until SIGINT or SIGTERM.
    pub follow: bool,
    /// `--json`: print the record lines themselves instead of summaries.
    pub json: bool,
    /// `--session ID` and `--op OP`.
    pub filter: Filter,
}

// ---- parsing ------------------------------------------------------------------

/// Parses what follows `audit`; `spec` is its entry in the command table.
pub(crate) fn parse(parser: &mut Parser, spec: &'static CommandSpec) -> Result<AuditCommand, Halt> {
    let name = match next_arg(parser, spec)? {
        None => return Err(UsageError::MissingArgument("audit subcommand").into()),
        Some(Arg::Positional(name)) => name,
        Some(Arg::Option(option, _)) => return Err(unhandled(option)),
    };
    let sub = name
        .to_str()
        .and_then(|word| spec.subcommand(word))
        .ok_or_else(|| UsageError::UnknownCommand(format!("audit {}", name.to_string_lossy())))?;
    let command = match sub.word() {
        "tail" => return parse_tail(parser, sub).map(AuditCommand::Tail),
        "show" => AuditCommand::Show {
            seq: parse_seq(parser, sub)?,
        },
        "verify" => AuditCommand::Verify,
        "verify-all" => AuditCommand::VerifyAll,
        "rotate" => AuditCommand::Rotate,
        "export" => {
            let mut output = None;
            while let Some(arg) = next_arg(parser, sub)? {
                match arg {
                    Arg::Option(option, Some(v)) if option.long == "--output" => {
                        output = Some(PathBuf::from(v));
                    }
                    Arg::Option(option, _) => return Err(unhandled(option)),
                    Arg::Positional(arg) => return Err(unexpected(arg)),
                }
            }
            return Ok(AuditCommand::Export { output });
        }
        "prune" => {
            let mut older_than = None;
            while let Some(arg) = next_arg(parser, sub)? {
                match arg {
                    Arg::Option(option, Some(v)) if option.long == "--older-than" => {
                        older_than = Some(text(option, v)?);
                    }
                    Arg::Option(option, _) => return Err(unhandled(option)),
                    Arg::Positional(arg) => return Err(unexpected(arg)),
                }
            }
            return Ok(AuditCommand::Prune { older_than });
        }
        _ => {
            return Err(
                UsageError::UnknownCommand(format!("audit {}", name.to_string_lossy())).into(),
            );
        }
    };
    // The other subcommands take nothing more.
    end_of_arguments(parser, sub)?;
    Ok(command)
}

/// Nothing may follow.
fn end_of_arguments(parser: &mut Parser, spec: &'static CommandSpec) -> Result<(), Halt> {
    match next_arg(parser, spec)? {
        None => Ok(()),
        Some(Arg::Option(option, _)) => Err(unhandled(option)),
        Some(Arg::Positional(arg)) => Err(unexpected(arg)),
    }
}

/// The options of `tail`:
///
/// | Option | Effect |
/// |---|---|
/// | `--follow` | keep printing appended records until Ctrl+C |
/// | `--session ID` | only records whose `session_id` is `ID` (`-`: no session) |
/// | `--op OP` | only records whose `op` is `OP`, a name of AUDIT.md §3 |
/// | `--json` | the record lines themselves, one per line |
fn parse_tail(parser: &mut Parser, spec: &'static CommandSpec) -> Result<TailOptions, Halt> {
    let mut options = TailOptions::default();
    while let Some(arg) = next_arg(parser, spec)? {
        let (option, value) = match arg {
            Arg::Option(option, value) => (option, value),
            Arg::Positional(arg) => return Err(unexpected(arg)),
        };
        match (option.long, value) {
            ("--follow", None) => options.follow = true,
            ("--json", None) => options.json = true,
            ("--session", Some(v)) => {
                let session = text(option, v)?;
                if session.is_empty() {
                    return Err(UsageError::InvalidValue {
                        option: "--session",
                        reason: "empty (use - for records of no session)",
                    }
                    .into());
                }
                options.filter.session = Some(session);
            }
            ("--op", Some(v)) => {
                let name = text(option, v)?;
                let op = view::known_op(&name).ok_or(UsageError::InvalidArgument {
                    what: "--op (expected an audit operation name such as FILE_READ, \
                           EXECUTE_COMMAND or JAIL_VIOLATION)",
                    value: name,
                })?;
                options.filter.op = Some(op);
            }
            _ => return Err(unhandled(option)),
        }
    }
    Ok(options)
}

/// `<seq>` of `show`: a decimal integer, optionally signed.
fn parse_seq(parser: &mut Parser, spec: &'static CommandSpec) -> Result<i128, Halt> {
    let raw = match next_arg(parser, spec)? {
        Some(Arg::Positional(raw)) => raw,
        None => return Err(UsageError::MissingArgument("<seq> for audit show").into()),
        Some(Arg::Option(option, _)) => return Err(unhandled(option)),
    };
    let text = raw.to_string_lossy();
    let digits = text.strip_prefix(['-', '+']).unwrap_or(&text);
    let seq = if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        text.parse::<i128>().ok()
    } else {
        None
    };
    let seq = seq.ok_or_else(|| UsageError::InvalidArgument {
        what: "<seq> (expected an integer)",
        value: text.clone().into_owned(),
    })?;
    end_of_arguments(parser, spec)?;
    Ok(seq)
}

/// A `--older-than` value in seconds: ASCII digits and one unit letter
/// `d`, `h`, `m` or `s` (either case). No sign, no spaces, no underscores
/// (AUDIT.md §11.5 hardening note). A number too large for the counter
/// saturates: the cutoff is then before every record.
pub fn parse_duration(text: &str) -> Option<u64> {
    let unit = text.chars().next_back()?;
    let digits = &text[..text.len() - unit.len_utf8()];
    let unit_seconds: u64 = match unit {
        'd' | 'D' => 86_400,
        'h' | 'H' => 3_600,
        'm' | 'M' => 60,
        's' | 'S' => 1,
        _ => return None,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let count = digits.parse::<u64>().unwrap_or(u64::MAX);
    Some(count.saturating_mul(unit_seconds))
}

// ---- running ------------------------------------------------------------------

/// Runs an `audit` subcommand and returns the exit code.
pub(crate) fn run(
    command: AuditCommand,
    overrides: &Overrides,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> u8 {
    let config = match load_config(overrides, stderr) {
        Ok(config) => config,
        Err(code) => return code,
    };
    match command {
        AuditCommand::Tail(options) => tail(&config.audit_log_path, &options, stdout, stderr),
        AuditCommand::Show { seq } => show(&config.audit_log_path, seq, stdout, stderr),
        AuditCommand::Verify => verify(&config, stdout, stderr),
        AuditCommand::VerifyAll => verify_all(&config, stdout, stderr),
        AuditCommand::Export { output } => export_bundle(&config, output, stdout, stderr),
        AuditCommand::Rotate => rotate(&config, stdout, stderr),
        AuditCommand::Prune { older_than } => prune(
            &config.audit_log_path,
            older_than.as_deref().unwrap_or(DEFAULT_OLDER_THAN),
            stdout,
            stderr,
        ),
    }
}

/// Writes one line; a closed stream is not worth a failure here (the exit
/// code still tells the result).
fn not_found(path: &Path, stderr: &mut dyn Write) -> u8 {
    say!(stderr, "Audit log not found: {}", path.display());
    exit::NEGATIVE_RESULT
}

/// Whether the current file exists; reports the failure to find out.
fn check_current(path: &Path, stderr: &mut dyn Write) -> Result<(), u8> {
    match files::current_exists(path) {
        Ok(true) => Ok(()),
        Ok(false) => Err(not_found(path, stderr)),
        Err(e) => {
            say!(stderr, "Could not read {}: {e}", path.display());
            Err(exit::NEGATIVE_RESULT)
        }
    }
}

fn list_files(path: &Path, current: bool, stderr: &mut dyn Write) -> Result<Vec<PathBuf>, u8> {
    let listed = if current {
        files::all_files(path)
    } else {
        files::rotated_files(path)
    };
    listed.map_err(|e| {
        let dir = path.parent().unwrap_or(Path::new("."));
        say!(
            stderr,
            "Could not list the audit log directory {}: {e}",
            dir.display()
        );
        exit::NEGATIVE_RESULT
    })
}

/// Loads the audit key read-only through the secret store (AUTH.md §8):
/// never creates one. The file-store warning goes to stderr; a failure is
/// `Could not load audit key: <reason>` and exit 2 (70 for a bug).
fn load_key(config: &Config, stderr: &mut dyn Write) -> Result<AuditKey, u8> {
    let env = Environment::from_process();
    let selected = SecretStore::select(&config.paths, &env).map_err(|e| key_failure(&e, stderr))?;
    if let Some(warning) = &selected.warning {
        say!(stderr, "{PROGRAM}: {warning}");
    }
    // Only consulted for a key recovered from the reference's legacy file.
    let mut check = super::legacy_key_check(&config.audit_log_path);
    selected
        .store
        .audit_key_read_only(&mut check)
        .map_err(|e| key_failure(&e, stderr))
}

fn key_failure(error: &SecretError, stderr: &mut dyn Write) -> u8 {
    say!(stderr, "Could not load audit key: {error}");
    match error.class() {
        ErrorClass::Internal => exit::EX_SOFTWARE,
        ErrorClass::Config | ErrorClass::Unavailable => exit::USAGE,
    }
}

// ---- tail (§11.1) ---------------------------------------------------------------

fn tail(path: &Path, options: &TailOptions, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    if let Err(code) = check_current(path, stderr) {
        return code;
    }
    let zone = timefmt::local_zone();
    if !options.follow {
        let mut follower = match open_follower(path, stderr) {
            Ok(follower) => follower,
            Err(code) => return code,
        };
        let lines = match follower.poll() {
            Ok(lines) => lines,
            Err(e) => {
                say!(stderr, "Could not read {}: {e}", path.display());
                return exit::NEGATIVE_RESULT;
            }
        };
        print_tail_lines(&lines, options, zone, stdout, stderr);
        // A line without its LF yet is being written (or was cut off): it
        // is not a record until it ends, so it is left out, but not
        // silently.
        if follower.pending() > 0 {
            say!(
                stderr,
                "{}: the last line is incomplete (still being written, or cut off) and is not shown",
                base_name(path)
            );
        }
        return exit::SUCCESS;
    }
    // Blocked before any other thread exists, so every thread inherits the
    // mask and only the waiting thread below ever accepts the signal.
    let signals = match sys::block_termination_signals() {
        Ok(signals) => signals,
        Err(e) => {
            say!(stderr, "{PROGRAM}: cannot block termination signals: {e}");
            return exit::EX_SOFTWARE;
        }
    };
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<i32>(1);
    let waiter = std::thread::Builder::new()
        .name("audit-tail-signals".into())
        .spawn(move || {
            if let Ok(signal) = sys::wait_for_termination_signal(&signals) {
                let _ = stop_tx.send(signal);
            }
        });
    if let Err(e) = waiter {
        say!(stderr, "{PROGRAM}: cannot start the signal thread: {e}");
        return exit::EX_SOFTWARE;
    }
    let mut follower = match open_follower(path, stderr) {
        Ok(follower) => follower,
        Err(code) => return code,
    };
    loop {
        let lines = match follower.poll() {
            Ok(lines) => lines,
            Err(e) => {
                say!(stderr, "Could not read {}: {e}", path.display());
                return exit::NEGATIVE_RESULT;
            }
        };
        // A reader that went away (`tail --follow | head`) ends the command.
        if !print_tail_lines(&lines, options, zone, stdout, stderr) {
            return exit::SUCCESS;
        }
        match stop_rx.recv_timeout(POLL_INTERVAL) {
            Ok(_) => return exit::SUCCESS,
            Err(RecvTimeoutError::Timeout) => {}
            // The signal thread failed; keep the polling interval anyway.
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(POLL_INTERVAL),
        }
    }
}

fn open_follower(path: &Path, stderr: &mut dyn Write) -> Result<Follower, u8> {
    Follower::open(path).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            return not_found(path, stderr);
        }
        say!(stderr, "Could not read {}: {e}", path.display());
        exit::NEGATIVE_RESULT
    })
}

/// Prints what `tail` shows of `lines` (see [`tail_item`]): records on
/// stdout, through one buffer flushed at the end; a line that is not a
/// record on stdout too, or on stderr with `--json` so that stdout stays
/// JSON Lines. False when stdout is closed.
fn print_tail_lines(
    lines: &[Vec<u8>],
    options: &TailOptions,
    zone: &LocalZone,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> bool {
    let mut out = io::BufWriter::new(stdout);
    for line in lines {
        let written = match tail_item(line, options, zone) {
            None => Ok(()),
            Some(TailItem::Record(text)) => writeln!(out, "{text}"),
            Some(TailItem::NotARecord(text)) if options.json => {
                say!(stderr, "{text}");
                Ok(())
            }
            Some(TailItem::NotARecord(text)) => writeln!(out, "{text}"),
        };
        if written.is_err() {
            return false;
        }
    }
    out.flush().is_ok()
}

/// What `tail` shows of one log line.
#[derive(Debug, PartialEq, Eq)]
pub enum TailItem {
    /// A record that passed the filters: its summary line, or with
    /// `--json` the line itself made safe for a terminal.
    Record(String),
    /// `[unparseable] <the line, escaped and cut>`: a line that is not a
    /// JSON object (not UTF-8 either, with `--json`). Shown whatever the
    /// filters, since nothing says it does not match them.
    NotARecord(String),
}

/// What `tail` shows of the log line `line` (without its LF): `None` for a
/// blank line or a record the filters leave out.
pub fn tail_item(line: &[u8], options: &TailOptions, zone: &LocalZone) -> Option<TailItem> {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let record = match serde_json::from_str::<Json>(text) {
        // `--json` promises the line as written: one that is not UTF-8 is
        // not a JSON text, and its lossy copy would be a different record.
        Ok(Json::Object(record)) if !options.json || std::str::from_utf8(line).is_ok() => record,
        _ => return Some(TailItem::NotARecord(view::unparseable(text))),
    };
    if !options.filter.matches(&record) {
        return None;
    }
    Some(TailItem::Record(if options.json {
        terminal_safe_line(text).into_owned()
    } else {
        view::summary(&record, zone)
    }))
}

// ---- show (§11.2) ---------------------------------------------------------------

fn show(path: &Path, seq: i128, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let logs = match list_files(path, true, stderr) {
        Ok(logs) => logs,
        Err(code) => return code,
    };
    for log in &logs {
        match find_record(log, seq) {
            Ok(Some(line)) => {
                say!(stdout, "# from {}", base_name(log));
                if let Some(note) = local_time_note(&line, timefmt::local_zone()) {
                    say!(stdout, "{note}");
                }
                say!(stdout, "{}", indent(&line));
                return exit::SUCCESS;
            }
            Ok(None) => {}
            Err(e) => say!(stderr, "Could not read {}: {e}", log.display()),
        }
    }
    say!(
        stdout,
        "No record with seq={seq} in {} or rotated files.",
        path.display()
    );
    exit::NEGATIVE_RESULT
}

/// `# ts <raw value> is <local ISO 8601 time>`, the comment line `show`
/// prints before the record when its `ts` is a number (the record itself
/// stays JSON).
fn local_time_note(line: &str, zone: &LocalZone) -> Option<String> {
    let Ok(Json::Object(record)) = serde_json::from_str::<Json>(line) else {
        return None;
    };
    let ts = record.get("ts").filter(|ts| ts.is_number())?;
    // The number as written in the log (`1712345680.0` stays a float).
    let raw = match ts.as_f64() {
        Some(f) if ts.is_f64() => repr_f64(f).ok()?,
        _ => ts.to_string(),
    };
    let local = view::local_iso(ts.as_f64()?, zone, true)?;
    Some(format!("# ts {raw} is {local} local time"))
}

// ---- verify (§10.2) and verify-all (§10.3) ---------------------------------------

fn verify(config: &Config, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let path = &config.audit_log_path;
    if let Err(code) = check_current(path, stderr) {
        return code;
    }
    let key = match load_key(config, stderr) {
        Ok(key) => key,
        Err(code) => return code,
    };
    let violations = match verify_current(path, &key, stderr) {
        Ok((_, violations)) => violations,
        Err(e) => {
            say!(stderr, "Could not read {}: {e}", path.display());
            return exit::NEGATIVE_RESULT;
        }
    };
    print_block(stdout, &base_name(path), &violations);
    if violations.is_empty() {
        exit::SUCCESS
    } else {
        exit::NEGATIVE_RESULT
    }
}

fn verify_all(config: &Config, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let key = match load_key(config, stderr) {
        Ok(key) => key,
        Err(code) => return code,
    };
    let path = &config.audit_log_path;
    let logs = match list_files(path, true, stderr) {
        Ok(logs) => logs,
        Err(code) => return code,
    };
    if logs.is_empty() {
        say!(stdout, "No audit logs found.");
        return exit::SUCCESS;
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut failed = 0usize;
    for log in &logs {
        let name = base_name(log);
        let checked = if log == path {
            verify_current(path, &key, stderr)
        } else {
            std::fs::read(log).map(|bytes| {
                let violations = verify_with_progress(&name, &bytes, &key, stderr);
                (bytes, violations)
            })
        };
        let violations = match checked {
            Ok((bytes, mut violations)) => {
                violations.extend(check_file_link(&bytes, dir));
                violations
            }
            // Gone since it was listed: what §10.1 says of a missing file.
            Err(e) if e.kind() == io::ErrorKind::NotFound => vec![Violation {
                kind: ViolationKind::Truncated,
                seq: None,
                message: format!("audit log not found: {}", log.display()),
            }],
            Err(e) => {
                say!(stdout, "{name}: cannot be read: {e}");
                failed += 1;
                continue;
            }
        };
        print_block(stdout, &name, &violations);
        if !violations.is_empty() {
            failed += 1;
        }
    }
    say!(stdout);
    if failed == 0 {
        say!(stdout, "All {} files verified clean.", logs.len());
        exit::SUCCESS
    } else {
        say!(stdout, "{failed} of {} files have violations.", logs.len());
        exit::NEGATIVE_RESULT
    }
}

/// §10.1 on the current file plus its tail anchor (AUDIT.md §4); returns
/// the bytes verified and the violations.
fn verify_current(
    path: &Path,
    key: &AuditKey,
    stderr: &mut dyn Write,
) -> io::Result<(Vec<u8>, Vec<Violation>)> {
    let read = read_current_with_anchor(path, key, VERSION)?;
    let mut violations = verify_with_progress(&base_name(path), &read.bytes, key, stderr);
    violations.extend(read.anchor_violations);
    Ok((read.bytes, violations))
}

/// Verifies with a percentage on stderr when stderr is a terminal and the
/// file is large; otherwise silently.
fn verify_with_progress(
    name: &str,
    bytes: &[u8],
    key: &AuditKey,
    stderr: &mut dyn Write,
) -> Vec<Violation> {
    if bytes.len() < PROGRESS_MIN_BYTES || !rustix::termios::isatty(io::stderr()) {
        return verify_bytes(bytes, key);
    }
    let total = bytes.len() as u128;
    let mut shown = None;
    let violations = verify_bytes_with_progress(bytes, key, &mut |done| {
        let percent = (done as u128 * 100 / total).min(100);
        if shown != Some(percent) {
            shown = Some(percent);
            let _ = write!(stderr, "\rverifying {name}: {percent:>3}%");
            let _ = stderr.flush();
        }
    });
    // Erase the progress line so that only results remain.
    let _ = write!(stderr, "\r\x1b[2K");
    let _ = stderr.flush();
    violations
}

/// `<name>: OK` or `<name>: <n> violation(s)` and one indented line each.
fn print_block(stdout: &mut dyn Write, name: &str, violations: &[Violation]) {
    if violations.is_empty() {
        say!(stdout, "{name}: OK");
        return;
    }
    say!(stdout, "{name}: {} violation(s)", violations.len());
    for violation in violations {
        say!(stdout, "  {violation}");
    }
}

// ---- export (§11.4) ---------------------------------------------------------------

fn export_bundle(
    config: &Config,
    output: Option<PathBuf>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> u8 {
    let key = match load_key(config, stderr) {
        Ok(key) => key,
        Err(code) => return code,
    };
    let logs = match list_files(&config.audit_log_path, true, stderr) {
        Ok(logs) => logs,
        Err(code) => return code,
    };
    if logs.is_empty() {
        say!(stdout, "Nothing to export — no audit logs present.");
        return exit::NEGATIVE_RESULT;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let micros = i64::try_from(now.as_micros()).unwrap_or(i64::MAX);
    let output = output.unwrap_or_else(|| {
        Path::new(".").join(format!(
            "audit-export-{}.zip",
            timefmt::local_stamp(seconds)
        ))
    });
    let options = ExportOptions {
        exported_at: timefmt::utc_iso_micros(micros),
        modified: timefmt::local_zone().civil(seconds),
        force_zip64: false,
    };
    let exported = if rustix::termios::isatty(io::stderr()) {
        let mut shown = None;
        let done = export_with_progress(&logs, &output, &key, &options, &mut |read, total| {
            if total < PROGRESS_MIN_BYTES as u64 {
                return;
            }
            let percent = (u128::from(read) * 100 / u128::from(total)).min(100);
            if shown != Some(percent) {
                shown = Some(percent);
                let _ = write!(stderr, "\rexporting: {percent:>3}%");
                let _ = stderr.flush();
            }
        });
        if shown.is_some() {
            // Erase the progress line so that only results remain.
            let _ = write!(stderr, "\r\x1b[2K");
            let _ = stderr.flush();
        }
        done
    } else {
        export(&logs, &output, &key, &options)
    };
    match exported {
        Ok(done) => {
            say!(stdout, "Wrote {}", output.display());
            say!(stdout, "  files: {}", done.files.len());
            say!(stdout, "  signature (HMAC-SHA256): {}", done.signature);
            exit::SUCCESS
        }
        Err(AuditError::OutputExists(path)) => {
            say!(
                stderr,
                "Could not write {}: it already exists; refusing to replace it",
                path.display()
            );
            exit::EX_CANTCREAT
        }
        Err(AuditError::Output(why)) => {
            say!(stderr, "Could not write the export: {why}");
            exit::EX_CANTCREAT
        }
        Err(AuditError::Read(why)) => {
            say!(stderr, "Could not read {why}");
            exit::NEGATIVE_RESULT
        }
        Err(other) => {
            say!(stderr, "{PROGRAM}: internal error during export: {other}");
            exit::EX_SOFTWARE
        }
    }
}

// ---- rotate (§11.3) ----------------------------------------------------------------

fn rotate(config: &Config, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let path = &config.audit_log_path;
    if let Err(code) = check_current(path, stderr) {
        return code;
    }
    let key = match load_key(config, stderr) {
        Ok(key) => key,
        Err(code) => return code,
    };
    let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut options = WriterOptions::new(path.clone(), VERSION);
    // `AUDIT_ROTATED` carries the machine id like every record; a machine
    // whose id cannot be determined writes "-" rather than not rotating.
    options.machine_id = config.machine_id().ok().map(str::to_owned);
    options.own_directory = config.audit_log_is_default();
    let sink = warnings.clone();
    options.warn = Arc::new(move |warning: &str| {
        if let Ok(mut list) = sink.lock() {
            list.push(warning.to_owned());
        }
    });
    let result = match AuditLog::open(options, key) {
        Ok((log, thread)) => {
            // A torn or unverifiable file is already rotated away while
            // opening; that is the rotation the user asked for.
            let result = match log.rotated_at_open() {
                Some(rotated) => Ok(Some(rotated.to_owned())),
                None => log.rotate(RotateReason::Explicit),
            };
            drop(log);
            thread.join();
            result
        }
        Err(e) => Err(e),
    };
    if let Ok(list) = warnings.lock() {
        for warning in list.iter() {
            say!(stderr, "{PROGRAM}: warning: {warning}");
        }
    }
    match result {
        Ok(None) => {
            say!(stdout, "Audit log was empty; nothing to rotate.");
            exit::SUCCESS
        }
        Ok(Some(rotated)) => {
            say!(stdout, "Rotated to {}", rotated.display());
            exit::SUCCESS
        }
        Err(error @ AuditError::Locked(_)) => {
            say!(
                stderr,
                "Could not rotate: {error}; a running daemon owns the audit log, \
                 stop it or try again later"
            );
            exit::EX_TEMPFAIL
        }
        Err(error) => {
            say!(stderr, "Could not rotate {}: {error}", path.display());
            exit::NEGATIVE_RESULT
        }
    }
}

// ---- prune (§11.5) -------------------------------------------------------------------

fn prune(path: &Path, older_than: &str, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let Some(seconds) = parse_duration(older_than) else {
        say!(
            stderr,
            "Could not parse duration: '{older_than}'. Use e.g. 90d, 12h, 30m."
        );
        return exit::USAGE;
    };
    let rotated = match list_files(path, false, stderr) {
        Ok(rotated) => rotated,
        Err(code) => return code,
    };
    if rotated.is_empty() {
        say!(stdout, "No rotated audit files to prune.");
        return exit::SUCCESS;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let cutoff = now - seconds as f64;
    let mut deleted = 0usize;
    for log in &rotated {
        let name = base_name(log);
        let Some(newest) = newest_ts(log) else {
            say!(stderr, "Skipped {name}: cannot read newest record");
            continue;
        };
        if newest >= cutoff {
            continue;
        }
        match std::fs::remove_file(log) {
            Ok(()) => {
                deleted += 1;
                say!(stdout, "Deleted {name} (newest_ts={})", round_ts(newest));
            }
            Err(e) => say!(stderr, "Could not delete {name}: {e}"),
        }
    }
    say!(stdout);
    say!(
        stdout,
        "Pruned {deleted} of {} rotated files.",
        rotated.len()
    );
    exit::SUCCESS
}

/// Python's `round()` of a float, shown as an integer (ties to even).
fn round_ts(ts: f64) -> String {
    let rounded = ts.round_ties_even();
    // `-0.3` rounds to `-0.0`, which Python's integer prints as `0`.
    let rounded = if rounded == 0.0 { 0.0 } else { rounded };
    format!("{rounded:.0}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_digits_and_one_unit_only() {
        assert_eq!(parse_duration("90d"), Some(90 * 86_400));
        assert_eq!(parse_duration("12H"), Some(12 * 3_600));
        assert_eq!(parse_duration("30m"), Some(1_800));
        assert_eq!(parse_duration("0s"), Some(0));
        for bad in [
            "", "d", "-5d", "+5d", " 5d", "5 d", "1_0d", "5", "5w", "5dd", "٣d",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
        assert_eq!(parse_duration("99999999999999999999999d"), Some(u64::MAX));
    }

    fn utc() -> LocalZone {
        LocalZone::from_tz_var(Some(std::ffi::OsStr::new("UTC")))
    }

    #[test]
    fn tail_shows_summaries_skips_blank_lines_and_marks_what_is_not_a_record() {
        let plain = TailOptions::default();
        let line = br#"{"ts": 1712345680.0, "seq": 3, "op": "JAIL_VIOLATION", "session_id": "s", "details": {"path": "/x", "attempted_op": "FILE_READ"}, "result": {"ok": false, "duration_ms": 0, "error_code": "PATH_OUTSIDE_ALLOWED_ROOT"}}"#;
        assert_eq!(
            tail_item(line, &plain, &utc()),
            Some(TailItem::Record(
                "2024-04-05T19:34:40+00:00      3  s             JAIL_VIOLATION              0ms  err:PATH_OUTSIDE_ALLOWED_ROOT  FILE_READ /x".into()
            ))
        );
        assert_eq!(tail_item(b"  \r", &plain, &utc()), None);
        assert_eq!(
            tail_item(b"{\"seq\": 4, \"op\xff", &plain, &utc()),
            Some(TailItem::NotARecord(
                "[unparseable] {\"seq\": 4, \"op\u{fffd}".into()
            ))
        );
        assert_eq!(
            tail_item(b"[1, 2]", &plain, &utc()),
            Some(TailItem::NotARecord("[unparseable] [1, 2]".into()))
        );
    }

    #[test]
    fn tail_json_keeps_the_line_and_refuses_what_is_not_utf8() {
        let json = TailOptions {
            json: true,
            ..TailOptions::default()
        };
        let line = "{\"seq\": 1, \"op\": \"SHIM_START\", \"details\": {\"p\": \"é\\n\"}}";
        assert_eq!(
            tail_item(format!("  {line}\r").as_bytes(), &json, &utc()),
            Some(TailItem::Record(line.into()))
        );
        // Valid JSON once the bad byte is replaced, but not the line written.
        assert!(matches!(
            tail_item(b"{\"seq\": 1, \"op\": \"A\xff\"}", &json, &utc()),
            Some(TailItem::NotARecord(_))
        ));
        // The default view shows such a line with a replacement character.
        assert!(matches!(
            tail_item(b"{\"seq\": 1, \"op\": \"A\xff\"}", &TailOptions::default(), &utc()),
            Some(TailItem::Record(text)) if text.contains("A\u{fffd}")
        ));
    }

    #[test]
    fn tail_filters_leave_out_other_records_but_never_unparseable_lines() {
        let options = TailOptions {
            filter: Filter {
                session: Some("s1".into()),
                op: Some("FILE_READ"),
            },
            ..TailOptions::default()
        };
        let show = |line: &str| tail_item(line.as_bytes(), &options, &utc());
        assert!(matches!(
            show(r#"{"session_id": "s1", "op": "FILE_READ"}"#),
            Some(TailItem::Record(_))
        ));
        assert_eq!(show(r#"{"session_id": "s2", "op": "FILE_READ"}"#), None);
        assert_eq!(show(r#"{"session_id": "s1", "op": "FILE_WRITE"}"#), None);
        assert!(matches!(show("garbage"), Some(TailItem::NotARecord(_))));
    }

    #[test]
    fn show_notes_the_local_time_of_a_numeric_ts_only() {
        assert_eq!(
            local_time_note(r#"{"ts": 1712345680.0, "seq": 1}"#, &utc()).as_deref(),
            Some("# ts 1712345680.0 is 2024-04-05T19:34:40+00:00 local time")
        );
        assert_eq!(
            local_time_note(r#"{"ts": 1712345680, "seq": 1}"#, &utc()).as_deref(),
            Some("# ts 1712345680 is 2024-04-05T19:34:40+00:00 local time")
        );
        assert_eq!(
            local_time_note(r#"{"ts": 1712345678.123}"#, &utc()).as_deref(),
            Some("# ts 1712345678.123 is 2024-04-05T19:34:38.123000+00:00 local time")
        );
        assert_eq!(local_time_note(r#"{"ts": "noon"}"#, &utc()), None);
        assert_eq!(local_time_note(r#"{"seq": 1}"#, &utc()), None);
    }

    #[test]
    fn rounding_is_python_round() {
        assert_eq!(round_ts(1712345678.5), "1712345678");
        assert_eq!(round_ts(1712345679.5), "1712345680");
        assert_eq!(round_ts(0.0), "0");
        assert_eq!(round_ts(-0.3), "0");
    }
}
