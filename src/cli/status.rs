//! `status` (CLI.md §4.3): what is configured, where the tokens are kept
//! and whether they are there, whether a daemon runs, how its commands
//! would be contained, and the autostart entry (on Linux and WSL2 with what
//! the systemd user manager says of it). Always exit 0 once the
//! configuration loads.
//!
//! It reports presence only: it never prints a token, the audit key or the
//! passphrase, and it never creates a key, a token or a file.

use std::io::Write;

use super::load_config;
use crate::audit::writer::writer_running;
use crate::config::autostart::Autostart;
use crate::config::autostart::manager::{self, UserManager};
use crate::config::{Environment, Mode, Overrides, Platform};
use crate::exit;
use crate::secrets::SecretStore;

/// Runs `status` and returns its exit status.
pub fn run(overrides: &Overrides, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let config = match load_config(overrides, stderr) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let daemon = if writer_running(&config.audit_log_path) {
        "running"
    } else {
        "not running"
    };
    say!(stdout, "Daemon: {daemon}");
    say!(stdout, "Configured platform: {}", config.platform_url);
    match &config.mode {
        Mode::Legacy { session_id } => {
            say!(stdout, "Legacy session: {session_id}");
            say!(
                stdout,
                "Configured allowed_root: {}",
                config.allowed_root.display()
            );
        }
        Mode::Control => say!(
            stdout,
            "Mode: persistent machine control; allowed roots are selected per chat"
        ),
    }
    say!(stdout, "{}", tokens_line(&config));
    say!(
        stdout,
        "Command containment: {}",
        crate::exec::spawner::Containment::probe()
    );

    say!(stdout, "");
    match config.host.platform {
        Some(platform) => {
            let entry = Autostart::of(platform, &config.paths);
            let state = if entry.is_installed() {
                "installed"
            } else {
                "not installed"
            };
            say!(stdout, "Autostart entry ({}): {state}", entry.platform);
            say!(stdout, "  path: {}", entry.target.display());
            if matches!(platform, Platform::Linux | Platform::Wsl2) {
                say!(stdout, "  service: {}", systemd_service(platform));
            }
            say!(stdout, "  enable: {}", entry.enable);
            say!(stdout, "  disable: {}", entry.disable);
            for note in &entry.notes {
                say!(stdout, "  note: {note}");
            }
        }
        None => say!(
            stdout,
            "Autostart entry: not available on {}",
            config.host.os_name
        ),
    }
    exit::SUCCESS
}

/// What the systemd user manager says of the unit (enabled? active?), or
/// why it cannot say and what to do about it. Asks only; changes nothing.
fn systemd_service(platform: Platform) -> String {
    let env = Environment::from_process();
    let user_manager = UserManager::detect(&env);
    match &user_manager {
        UserManager::Running { runtime_dir } => match manager::query(&env, runtime_dir) {
            Ok(state) => state.describe(),
            Err(why) => format!("unknown: {why}"),
        },
        other => format!("unknown: {}", other.problem(platform).unwrap_or_default()),
    }
}

/// Where the tokens are kept and which are present.
fn tokens_line(config: &crate::config::Config) -> String {
    let env = Environment::from_process();
    let selected = match SecretStore::select(&config.paths, &env) {
        Ok(selected) => selected,
        Err(e) => return format!("Tokens: the secret store is unavailable: {e}"),
    };
    let location = selected.store.location();
    match selected.store.tokens() {
        Ok(tokens) => {
            let present = |t: &Option<_>| if t.is_some() { "present" } else { "absent" };
            format!(
                "Tokens: {location} (access token {}, refresh token {})",
                present(&tokens.access),
                present(&tokens.refresh)
            )
        }
        Err(e) => format!("Tokens: {location} cannot be read: {e}"),
    }
}
