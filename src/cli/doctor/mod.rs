//! `doctor` (CLI.md §10): every check of this machine's setup, one line
//! each (`[OK  ]`, `[WARN]`, `[FAIL]` or `[INFO]`, the label, what was
//! found and what to do), then exit 78 when a blocking check failed and 0
//! otherwise.
//!
//! The checks run in a fixed order: the session root or folder browsing,
//! the values `HELLO` would carry, the keychain and the secret store, the
//! audit log and its chain, the platform's display checks, the command
//! containment, the autostart entry ([`local`]), then a live proof of the
//! connection: the endpoint, name resolution, TCP, TLS and the WebSocket
//! upgrade with the stored access token ([`network`]).
//!
//! Doctor is read only. It never prompts (the passphrase comes from its
//! file, the systemd credential or the variable, or not at all), never
//! creates a file, folder, audit key or `tokens.enc`, never writes an audit
//! record, never refreshes a token, and after the upgrade sends nothing but
//! the close frame: no `HELLO`, no operation. It never prints a token or
//! the passphrase, and every detail is shown escaped to one line.

mod local;
mod network;

use std::io::Write;

use super::load_config;
use crate::config::{Environment, Overrides};
use crate::exit;
use crate::text::one_line;

/// The marker of a check's line (CLI.md §10.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// The check passed.
    Ok,
    /// Something is missing or degraded; blocking only where §10.2 says.
    Warn,
    /// The check failed.
    Fail,
    /// Nothing to judge: not requested, not applicable, or skipped.
    Info,
}

impl Marker {
    fn as_str(self) -> &'static str {
        match self {
            Marker::Ok => "OK",
            Marker::Warn => "WARN",
            Marker::Fail => "FAIL",
            Marker::Info => "INFO",
        }
    }
}

/// One check's result: one line of output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// The check's name.
    pub label: &'static str,
    /// How it went.
    pub marker: Marker,
    /// What was found and, when something is wrong, what to do.
    pub detail: String,
    /// Whether it makes `doctor` exit 78.
    pub blocking: bool,
}

impl Check {
    fn new(
        label: &'static str,
        marker: Marker,
        detail: impl Into<String>,
        blocking: bool,
    ) -> Check {
        Check {
            label,
            marker,
            detail: detail.into(),
            blocking,
        }
    }

    /// Passed.
    pub fn ok(label: &'static str, detail: impl Into<String>) -> Check {
        Check::new(label, Marker::Ok, detail, false)
    }

    /// A warning that does not block.
    pub fn warn(label: &'static str, detail: impl Into<String>) -> Check {
        Check::new(label, Marker::Warn, detail, false)
    }

    /// A blocking failure.
    pub fn fail(label: &'static str, detail: impl Into<String>) -> Check {
        Check::new(label, Marker::Fail, detail, true)
    }

    /// Information only.
    pub fn info(label: &'static str, detail: impl Into<String>) -> Check {
        Check::new(label, Marker::Info, detail, false)
    }

    /// The same result, blocking or not as `blocking` says (the checks
    /// whose failure blocks only when computer use is requested).
    pub fn blocking(mut self, blocking: bool) -> Check {
        self.blocking = blocking;
        self
    }
}

/// The lines of CLI.md §10.1: `[<marker>] <label>  <detail>`, the marker
/// padded to 4 characters, the label to the longest label of the run.
/// Details are escaped to one line here once more, whatever their source.
pub fn render(checks: &[Check]) -> String {
    let width = checks.iter().map(|c| c.label.len()).max().unwrap_or(0);
    let mut out = String::new();
    for check in checks {
        let line = format!(
            "[{:<4}] {:<width$}  {}",
            check.marker.as_str(),
            check.label,
            one_line(&check.detail)
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// 78 when a blocking check failed, else 0 (CLI.md §10).
pub fn exit_code(checks: &[Check]) -> u8 {
    if checks.iter().any(|c| c.blocking) {
        exit::EX_CONFIG
    } else {
        exit::SUCCESS
    }
}

/// Runs `doctor` and returns its exit status.
pub fn run(overrides: &Overrides, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let config = match load_config(overrides, stderr) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let env = Environment::from_process();
    let local = local::checks(&config, &env);
    let mut checks = local.checks;
    checks.extend(network::checks(
        &config,
        &super::env_pairs(&env),
        local.access_token.as_ref(),
    ));
    let _ = stdout.write_all(render(&checks).as_bytes());
    let _ = stdout.flush();
    exit_code(&checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_pad_the_marker_and_the_label_to_the_longest_label() {
        let checks = [
            Check::ok("folder_browser", "2 accessible host root(s)"),
            Check::warn("keychain", "unavailable"),
            Check::info("computer_use", "not requested in config"),
        ];
        assert_eq!(
            render(&checks),
            "[OK  ] folder_browser  2 accessible host root(s)\n\
             [WARN] keychain        unavailable\n\
             [INFO] computer_use    not requested in config\n"
        );
    }

    #[test]
    fn a_detail_cannot_start_a_second_line() {
        let text = render(&[Check::fail("upgrade", "refused\n[OK  ] forged\u{1b}[2J")]);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("refused\\n[OK  ] forged\\u{1b}[2J"), "{text}");
    }

    #[test]
    fn only_a_blocking_check_makes_the_exit_78() {
        let warn = Check::warn("display", "computer use not built in");
        let failed = Check::fail("tls", "pin mismatch");
        let not_blocking = Check::fail("Accessibility", "not granted").blocking(false);
        assert_eq!(exit_code(&[warn.clone(), not_blocking.clone()]), 0);
        assert_eq!(exit_code(&[warn, failed, not_blocking]), 78);
        assert_eq!(
            exit_code(&[Check::warn("display_server", "wayland").blocking(true)]),
            78
        );
    }
}
