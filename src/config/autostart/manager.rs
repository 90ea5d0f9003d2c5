//! The systemd user manager as `status` and `install` see it on Linux and
//! WSL2: whether one runs for this user, and what it knows of the autostart
//! unit (`systemctl --user show`).
//!
//! Read only: this module never starts, stops, enables or reloads anything;
//! CLI.md §9.1 leaves that to the user, who runs the printed commands. The
//! one child it starts, `systemctl`, gets no variable of the shim's own.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::{Environment, Platform};

/// The unit's name.
pub const UNIT: &str = "autogpt-shim.service";

/// How long `systemctl` may take to answer before `status` gives up on it.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// More than `systemctl show` prints for five properties.
const MAX_OUTPUT_BYTES: u64 = 64 * 1024;

/// Whether a systemd user manager can act on the unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserManager {
    /// The system was not booted with systemd (`/run/systemd/system` is
    /// missing), so there is no user manager either.
    NotBooted,
    /// systemd runs, but no manager for this user: its socket is missing
    /// (no login session, and lingering is off).
    NotRunning {
        /// The socket that is missing.
        socket: PathBuf,
    },
    /// A manager runs for this user.
    Running {
        /// Its runtime directory (`$XDG_RUNTIME_DIR`).
        runtime_dir: PathBuf,
    },
}

impl UserManager {
    /// The user manager of this process's user: the runtime directory is
    /// `$XDG_RUNTIME_DIR` when absolute, else `/run/user/<uid>`.
    pub fn detect(env: &Environment) -> UserManager {
        let runtime_dir = env
            .get_non_empty("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(default_runtime_dir);
        UserManager::detect_at(Path::new("/run/systemd/system"), runtime_dir)
    }

    /// [`detect`](Self::detect) with the boot marker and the runtime
    /// directory given.
    pub fn detect_at(booted_marker: &Path, runtime_dir: Option<PathBuf>) -> UserManager {
        if !booted_marker.is_dir() {
            return UserManager::NotBooted;
        }
        let Some(runtime_dir) = runtime_dir else {
            return UserManager::NotRunning {
                socket: PathBuf::from("/run/user/<uid>/systemd/private"),
            };
        };
        let socket = runtime_dir.join("systemd").join("private");
        if socket.symlink_metadata().is_ok() {
            UserManager::Running { runtime_dir }
        } else {
            UserManager::NotRunning { socket }
        }
    }

    /// Why the printed `systemctl --user` commands cannot work here, and
    /// what to do about it; `None` when a manager runs.
    pub fn problem(&self, platform: Platform) -> Option<String> {
        match self {
            UserManager::Running { .. } => None,
            UserManager::NotBooted if platform == Platform::Wsl2 => Some(
                "this WSL2 system does not run systemd (no /run/systemd/system), so the \
                 systemctl commands cannot work yet: add `[boot]` and `systemd=true` to \
                 /etc/wsl.conf, run `wsl --shutdown` in Windows, and open WSL again"
                    .into(),
            ),
            UserManager::NotBooted => Some(
                "this system does not run systemd (no /run/systemd/system), so the \
                 systemctl commands cannot work here: start `autogpt-shim start` with \
                 this system's own service manager instead"
                    .into(),
            ),
            UserManager::NotRunning { socket } => Some(format!(
                "no systemd user manager runs for this user (no {}), so the systemctl \
                 commands cannot work yet: run `loginctl enable-linger $USER` (as root: \
                 `loginctl enable-linger <user>`), which starts one now and at every boot, \
                 then run the commands from a login of that user",
                crate::text::one_line(&socket.to_string_lossy())
            )),
        }
    }
}

#[cfg(unix)]
fn default_runtime_dir() -> Option<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    Some(PathBuf::from(format!("/run/user/{uid}")))
}

#[cfg(not(unix))]
fn default_runtime_dir() -> Option<PathBuf> {
    None
}

/// What the user manager knows of the unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitState {
    /// `LoadState`: `loaded`, `not-found`, `bad-setting`, ….
    pub load: String,
    /// `UnitFileState`: `enabled`, `disabled`, … (empty when unknown).
    pub file: String,
    /// `ActiveState`: `active`, `inactive`, `failed`, `activating`, ….
    pub active: String,
    /// `SubState`: `running`, `dead`, `auto-restart`, ….
    pub sub: String,
    /// `NeedDaemonReload`: the file changed since the manager read it.
    pub needs_reload: bool,
}

impl UnitState {
    /// The properties `status` asks for.
    pub const PROPERTIES: &'static str =
        "LoadState,UnitFileState,ActiveState,SubState,NeedDaemonReload";

    /// Parses `systemctl show --property=…` output (`Name=value` lines);
    /// `None` when a property is missing.
    pub fn parse(text: &str) -> Option<UnitState> {
        let get = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_owned)
        };
        Some(UnitState {
            load: get("LoadState")?,
            file: get("UnitFileState")?,
            active: get("ActiveState")?,
            sub: get("SubState")?,
            needs_reload: get("NeedDaemonReload")? == "yes",
        })
    }

    /// One line for `status`: e.g. `enabled, active (running)`, or what
    /// to run when the manager has not read the file yet.
    pub fn describe(&self) -> String {
        let running = format!("{} ({})", self.active, self.sub);
        let mut line = match (self.load.as_str(), self.file.as_str()) {
            ("not-found", _) => format!("not known to the service manager, {running}"),
            (_, "") => format!("enablement unknown, {running}"),
            (_, file) => format!("{file}, {running}"),
        };
        if self.load == "not-found" || self.needs_reload {
            line.push_str("; run `systemctl --user daemon-reload` to load the current file");
        }
        crate::text::one_line(&line)
    }
}

/// Asks the running user manager about the unit. `Err` holds one line
/// saying why there is no answer.
pub fn query(env: &Environment, runtime_dir: &Path) -> Result<UnitState, String> {
    let mut command = Command::new("systemctl");
    command.args([
        "--user",
        "--no-pager",
        "show",
        UNIT,
        &format!("--property={}", UnitState::PROPERTIES),
    ]);
    // systemctl finds the manager through XDG_RUNTIME_DIR; set it when the
    // caller's environment lacks it (`su`, `sudo -u`).
    if env.get_non_empty("XDG_RUNTIME_DIR").is_none() {
        command.env("XDG_RUNTIME_DIR", runtime_dir);
    }
    for (name, _) in env.iter() {
        if name
            .to_str()
            .is_some_and(|n| n.to_ascii_uppercase().starts_with("AUTOGPT_SHIM_"))
        {
            command.env_remove(name);
        }
    }
    let (code, stdout, stderr) = run_within(command, QUERY_TIMEOUT)
        .map_err(|e| format!("systemctl could not be run: {e}"))?;
    if code != Some(0) {
        let first = stderr
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no message");
        return Err(format!(
            "systemctl --user failed: {}",
            crate::text::one_line(first)
        ));
    }
    UnitState::parse(&stdout).ok_or_else(|| "systemctl --user gave no unit state".to_owned())
}

/// Runs `command` with no input; its exit code, stdout and stderr (lossy),
/// or an error when it cannot start or does not end within `timeout` (then
/// it is killed).
fn run_within(
    mut command: Command,
    timeout: Duration,
) -> std::io::Result<(Option<i32>, String, String)> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Each pipe is read on its own thread so a chatty child cannot block
    // on a full pipe while this thread watches the clock.
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(pipe) = pipe {
                let _ = pipe.take(MAX_OUTPUT_BYTES).read_to_end(&mut out);
            }
            String::from_utf8_lossy(&out).into_owned()
        })
    };
    let stdout = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {} s", timeout.as_secs()),
                ));
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    Ok((status.code(), stdout, stderr))
}

#[cfg(all(test, unix))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn show_output_is_parsed_into_the_unit_state() {
        let text = "LoadState=loaded\nUnitFileState=enabled\nActiveState=active\n\
                    SubState=running\nNeedDaemonReload=no\n";
        let state = UnitState::parse(text).unwrap();
        assert_eq!(state.describe(), "enabled, active (running)");
        assert!(!state.needs_reload);
    }

    #[test]
    fn a_unit_the_manager_has_not_read_asks_for_a_reload() {
        let text = "LoadState=not-found\nUnitFileState=\nActiveState=inactive\n\
                    SubState=dead\nNeedDaemonReload=no\n";
        let line = UnitState::parse(text).unwrap().describe();
        assert!(line.starts_with("not known to the service manager, inactive (dead)"));
        assert!(line.contains("daemon-reload"), "{line}");
    }

    #[test]
    fn a_changed_file_asks_for_a_reload() {
        let text = "LoadState=loaded\nUnitFileState=enabled\nActiveState=failed\n\
                    SubState=failed\nNeedDaemonReload=yes\n";
        let line = UnitState::parse(text).unwrap().describe();
        assert!(line.starts_with("enabled, failed (failed);"), "{line}");
        assert!(line.contains("daemon-reload"), "{line}");
    }

    #[test]
    fn output_missing_a_property_is_not_a_state() {
        assert_eq!(UnitState::parse("LoadState=loaded\n"), None);
        assert_eq!(UnitState::parse(""), None);
    }

    #[test]
    fn no_systemd_boot_means_no_user_manager() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("run-systemd-system");
        assert_eq!(
            UserManager::detect_at(&missing, Some(dir.path().to_path_buf())),
            UserManager::NotBooted
        );
        let problem = UserManager::NotBooted.problem(Platform::Wsl2).unwrap();
        assert!(problem.contains("systemd=true"), "{problem}");
    }

    #[test]
    fn a_missing_manager_socket_means_no_user_manager() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("runtime");
        std::fs::create_dir_all(runtime.join("systemd")).unwrap();
        let manager = UserManager::detect_at(dir.path(), Some(runtime.clone()));
        assert_eq!(
            manager,
            UserManager::NotRunning {
                socket: runtime.join("systemd/private")
            }
        );
        let problem = manager.problem(Platform::Linux).unwrap();
        assert!(problem.contains("loginctl enable-linger"), "{problem}");

        std::os::unix::net::UnixListener::bind(runtime.join("systemd/private")).unwrap();
        assert_eq!(
            UserManager::detect_at(dir.path(), Some(runtime.clone())),
            UserManager::Running {
                runtime_dir: runtime
            }
        );
    }

    #[test]
    fn a_query_that_outlives_its_deadline_is_killed() {
        let started = Instant::now();
        let mut command = Command::new("/bin/sh");
        command.args(["-c", "exec sleep 5"]);
        let result = run_within(command, Duration::from_millis(100));
        assert_eq!(result.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(4));
    }
}
