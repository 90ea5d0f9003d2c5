//! `status` (CLI.md §4.3): whether a daemon runs and, from the runtime file
//! it wrote, the settings it runs with; what is configured, where the
//! tokens are kept and whether they are there, how commands would be
//! contained, where the configuration, state and audit log are, and the
//! autostart entry (on Linux and WSL2 with what the systemd user manager
//! says of it). Always exit 0 once the configuration loads.
//!
//! It reports presence only: it never prints a token, the audit key or the
//! passphrase, and it never creates a key, a token or a file.

use std::io::Write;

use super::load_config;
use crate::audit::view;
use crate::audit::writer::writer_running;
use crate::config::autostart::Autostart;
use crate::config::autostart::manager::{self, UserManager};
use crate::config::{Config, Environment, Mode, Overrides, Platform};
use crate::daemon::runtime_file;
use crate::exit;
use crate::secrets::SecretStore;
use crate::text::{one_line, shown};
use crate::timefmt;

/// Runs `status` and returns its exit status.
pub fn run(overrides: &Overrides, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    let config = match load_config(overrides, stderr) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if writer_running(&config.audit_log_path) {
        say!(stdout, "Daemon: running");
        running_daemon(&config, stdout);
    } else {
        say!(stdout, "Daemon: not running");
    }
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
    say!(stdout, "Configuration file: {}", shown(&config.config_file));
    say!(
        stdout,
        "State directory: {}",
        shown(&config.paths.state_dir)
    );
    say!(stdout, "Audit log: {}", shown(&config.audit_log_path));

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

/// The running daemon's own settings, from the file it wrote when it
/// started, believed only while the process it names is alive. Every value
/// is escaped: the file is read like any other untrusted input.
fn running_daemon(config: &Config, stdout: &mut dyn Write) {
    let settings = match runtime_file::read(&config.paths.state_dir) {
        Ok(settings) if process_alive(settings.pid) => settings,
        Ok(settings) => {
            say!(
                stdout,
                "  (its settings are unknown: the runtime file names process {}, which has ended)",
                settings.pid
            );
            return;
        }
        Err(why) => {
            say!(stdout, "  (its settings are unknown: {})", one_line(&why));
            return;
        }
    };
    let since = view::local_iso(settings.started_unix as f64, timefmt::local_zone(), false)
        .unwrap_or_else(|| settings.started_unix.to_string());
    say!(
        stdout,
        "  pid {}, version {}, running since {since}",
        settings.pid,
        one_line(&settings.version)
    );
    match (&settings.session_id, &settings.allowed_root) {
        (Some(session), Some(root)) => say!(
            stdout,
            "  mode: legacy session {}, allowed_root {}",
            one_line(session),
            one_line(root)
        ),
        _ => say!(stdout, "  mode: persistent machine control"),
    }
    say!(stdout, "  platform: {}", one_line(&settings.platform_url));
    say!(stdout, "  machine_id: {}", one_line(&settings.machine_id));
    let shell = if settings.enable_shell {
        "enabled"
    } else {
        "disabled"
    };
    say!(stdout, "  shell commands: {shell}");
    if !settings.command_sandbox.is_empty() {
        say!(
            stdout,
            "  command sandbox: {}",
            one_line(&settings.command_sandbox)
        );
    }
    if !settings.command_rules.is_empty() {
        say!(
            stdout,
            "  command rules: {}",
            one_line(&settings.command_rules)
        );
    }
    say!(
        stdout,
        "  capabilities: {}",
        one_line(&settings.capabilities.join(", "))
    );
    say!(
        stdout,
        "  configuration file: {}",
        one_line(&settings.config_file)
    );
    say!(stdout, "  audit log: {}", one_line(&settings.audit_log));
}

/// Whether a process with this id exists (a signal 0 reaches it, or it
/// belongs to someone else).
fn process_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
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
