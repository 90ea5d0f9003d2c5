//! Per-OS locations (CLI.md §6, AUDIT.md §1.1, AUTH.md §10.1) and the
//! expansion of configured paths (CLI.md §5.2 hardening note).
//!
//! Everything here is computed from an injected [`Environment`]; nothing is
//! created, probed or canonicalised (the owners of each file do that when they
//! need it). Base-directory variables that are unset, empty or relative are
//! ignored in favour of the documented fallback, never trusted: a relative
//! base would make the location depend on the working directory.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use super::env::Environment;
use super::error::ConfigError;

/// The directory name this shim shares with the reference implementation.
pub const APP_DIR: &str = "autogpt-local-executor";

/// Per-OS default locations. Configured keys may replace the defaults of the
/// audit log (`audit_log_path`) and the workspace (`allowed_root`); the
/// others are fixed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OsPaths {
    /// The user's home directory (`$HOME`; `%USERPROFILE%` on Windows).
    pub home: PathBuf,
    /// `config.toml` when `--config` is not given (CLI.md §5.1).
    pub default_config_file: PathBuf,
    /// The current audit log when `audit_log_path` is not set (AUDIT.md §1.1).
    pub default_audit_log: PathBuf,
    /// The legacy-mode workspace when `allowed_root` is not set (CLI.md §7.3).
    pub default_allowed_root: PathBuf,
    /// The directory of `tokens.enc`; `AUTOGPT_SHIM_FALLBACK_DIR` when set
    /// (AUTH.md §10.1).
    pub secret_store_dir: PathBuf,
    /// The reference's `audit-key.enc`, read for import only (AUDIT.md §7.4);
    /// in `AUTOGPT_SHIM_FALLBACK_DIR` when set.
    pub legacy_audit_key_file: PathBuf,
    /// This shim's small state files (CLI.md §6); not affected by
    /// `AUTOGPT_SHIM_FALLBACK_DIR`.
    pub state_dir: PathBuf,
    /// The directory of the autostart daemon's `shim.out.log`/`shim.err.log`.
    pub daemon_log_dir: PathBuf,
    /// The per-OS autostart file (CLI.md §9).
    pub autostart_file: PathBuf,
}

impl OsPaths {
    /// The locations for the current OS, from the given environment.
    pub fn from_env(env: &Environment) -> Result<OsPaths, ConfigError> {
        let home = home_dir(env).ok_or(ConfigError::NoHome)?;
        let fallback_dir = fallback_dir(env, &home)?;
        Ok(os_layout(env, home, fallback_dir))
    }

    /// `tokens.enc`.
    pub fn tokens_file(&self) -> PathBuf {
        self.secret_store_dir.join("tokens.enc")
    }

    /// The autostart daemon's stdout log.
    pub fn daemon_stdout_log(&self) -> PathBuf {
        self.daemon_log_dir.join("shim.out.log")
    }

    /// The autostart daemon's stderr log.
    pub fn daemon_stderr_log(&self) -> PathBuf {
        self.daemon_log_dir.join("shim.err.log")
    }

    /// The machine-id fallback file of PROTOCOL.md §4.2.1 step 5.
    pub fn machine_id_file(&self) -> PathBuf {
        self.home.join(".autogpt-local-executor-machine-id")
    }
}

/// The home directory, if the environment names an absolute one.
fn home_dir(env: &Environment) -> Option<PathBuf> {
    let name = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    absolute_var(env, name)
}

/// The value of `name` as a path, when it is set, non-empty and absolute.
fn absolute_var(env: &Environment, name: &str) -> Option<PathBuf> {
    env.get_non_empty(name)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// `AUTOGPT_SHIM_FALLBACK_DIR`, `~`-expanded. The user asked for this
/// directory explicitly, so a relative value is an error rather than
/// silently replaced by the default.
fn fallback_dir(env: &Environment, home: &Path) -> Result<Option<PathBuf>, ConfigError> {
    const NAME: &str = "AUTOGPT_SHIM_FALLBACK_DIR";
    let Some(raw) = env.get_non_empty(NAME) else {
        return Ok(None);
    };
    match expand_tilde(Path::new(raw), home) {
        Ok(path) if path.is_absolute() => Ok(Some(path)),
        Ok(_) => Err(ConfigError::InvalidVariable {
            name: NAME,
            reason: "must be an absolute path",
        }),
        Err(_) => Err(ConfigError::InvalidVariable {
            name: NAME,
            reason: "only a leading ~ or ~/ can be expanded",
        }),
    }
}

#[cfg(target_os = "macos")]
fn os_layout(_env: &Environment, home: PathBuf, fallback_dir: Option<PathBuf>) -> OsPaths {
    let support = home
        .join("Library")
        .join("Application Support")
        .join(APP_DIR);
    let logs = home.join("Library").join("Logs").join(APP_DIR);
    OsPaths {
        default_config_file: support.join("config.toml"),
        default_audit_log: logs.join("audit.log"),
        default_allowed_root: home.join("Documents").join("autogpt-workspace"),
        secret_store_dir: fallback_dir.clone().unwrap_or_else(|| support.clone()),
        legacy_audit_key_file: legacy_key_dir(&home, fallback_dir).join("audit-key.enc"),
        state_dir: support,
        daemon_log_dir: logs,
        autostart_file: home
            .join("Library")
            .join("LaunchAgents")
            .join("net.autogpt.shim.plist"),
        home,
    }
}

#[cfg(windows)]
fn os_layout(env: &Environment, home: PathBuf, fallback_dir: Option<PathBuf>) -> OsPaths {
    let roaming = absolute_var(env, "APPDATA")
        .unwrap_or_else(|| home.join("AppData").join("Roaming"))
        .join(APP_DIR);
    let local = absolute_var(env, "LOCALAPPDATA")
        .unwrap_or_else(|| home.join("AppData").join("Local"))
        .join(APP_DIR);
    OsPaths {
        default_config_file: roaming.join("config.toml"),
        default_audit_log: local.join("logs").join("audit.log"),
        default_allowed_root: home.join("autogpt-workspace"),
        secret_store_dir: fallback_dir.clone().unwrap_or_else(|| local.clone()),
        legacy_audit_key_file: legacy_key_dir(&home, fallback_dir).join("audit-key.enc"),
        state_dir: local.clone(),
        daemon_log_dir: local.join("logs"),
        autostart_file: local.join("autogpt-shim.xml"),
        home,
    }
}

/// Linux and WSL2 (and, so that the tools still work, any other Unix; `start`
/// refuses an unsupported OS separately).
#[cfg(not(any(target_os = "macos", windows)))]
fn os_layout(env: &Environment, home: PathBuf, fallback_dir: Option<PathBuf>) -> OsPaths {
    let config_home = absolute_var(env, "XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
    let state_home =
        absolute_var(env, "XDG_STATE_HOME").unwrap_or_else(|| home.join(".local").join("state"));
    let state = state_home.join(APP_DIR);
    OsPaths {
        default_config_file: config_home.join(APP_DIR).join("config.toml"),
        default_audit_log: state.join("audit.log"),
        default_allowed_root: home.join("autogpt-workspace"),
        secret_store_dir: fallback_dir.clone().unwrap_or_else(|| state.clone()),
        legacy_audit_key_file: legacy_key_dir(&home, fallback_dir).join("audit-key.enc"),
        state_dir: state.clone(),
        daemon_log_dir: state,
        autostart_file: config_home
            .join("systemd")
            .join("user")
            .join("autogpt-shim.service"),
        home,
    }
}

/// `~/.autogpt-local-executor` unless `AUTOGPT_SHIM_FALLBACK_DIR` is set.
fn legacy_key_dir(home: &Path, fallback_dir: Option<PathBuf>) -> PathBuf {
    fallback_dir.unwrap_or_else(|| home.join(".autogpt-local-executor"))
}

/// Why a configured path cannot be made absolute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PathProblem {
    /// The value is empty.
    Empty,
    /// `~user` form: another user's home is never looked up.
    OtherUsersHome,
    /// Relative, and the working directory is unknown.
    NoWorkingDirectory,
}

/// Expands a leading `~` and makes a relative path absolute against `cwd`,
/// once (CLI.md §5.2 hardening note). No other normalisation happens: the
/// owners canonicalise where the spec says so.
pub(crate) fn absolute(
    raw: &Path,
    home: &Path,
    cwd: Option<&Path>,
) -> Result<PathBuf, PathProblem> {
    if raw.as_os_str().is_empty() {
        return Err(PathProblem::Empty);
    }
    let expanded = expand_tilde(raw, home)?;
    if expanded.is_absolute() {
        return Ok(expanded);
    }
    match cwd {
        Some(cwd) => Ok(cwd.join(expanded)),
        None => Err(PathProblem::NoWorkingDirectory),
    }
}

/// `~` and `~/rest` → home-relative; `~user/…` is refused; anything else is
/// returned unchanged.
fn expand_tilde(raw: &Path, home: &Path) -> Result<PathBuf, PathProblem> {
    let Some(Component::Normal(first)) = raw.components().next() else {
        return Ok(raw.to_path_buf());
    };
    if first == OsStr::new("~") {
        let rest = raw.strip_prefix("~").unwrap_or(Path::new(""));
        if rest.as_os_str().is_empty() {
            return Ok(home.to_path_buf());
        }
        return Ok(home.join(rest));
    }
    if first.as_encoded_bytes().starts_with(b"~") {
        return Err(PathProblem::OtherUsersHome);
    }
    Ok(raw.to_path_buf())
}

#[cfg(all(test, not(any(target_os = "macos", windows))))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tilde_alone_is_home() {
        assert_eq!(
            absolute(Path::new("~"), Path::new("/h"), None).unwrap(),
            PathBuf::from("/h")
        );
    }

    #[test]
    fn tilde_slash_is_below_home() {
        assert_eq!(
            absolute(Path::new("~/a/b"), Path::new("/h"), None).unwrap(),
            PathBuf::from("/h/a/b")
        );
    }

    #[test]
    fn other_users_home_is_refused() {
        assert_eq!(
            absolute(Path::new("~bob/x"), Path::new("/h"), Some(Path::new("/w"))),
            Err(PathProblem::OtherUsersHome)
        );
    }

    #[test]
    fn tilde_in_the_middle_is_literal() {
        assert_eq!(
            absolute(Path::new("a/~/b"), Path::new("/h"), Some(Path::new("/w"))).unwrap(),
            PathBuf::from("/w/a/~/b")
        );
    }

    #[test]
    fn relative_path_needs_a_working_directory() {
        assert_eq!(
            absolute(Path::new("ws"), Path::new("/h"), None),
            Err(PathProblem::NoWorkingDirectory)
        );
        assert_eq!(
            absolute(Path::new("ws"), Path::new("/h"), Some(Path::new("/w"))).unwrap(),
            PathBuf::from("/w/ws")
        );
    }

    #[test]
    fn empty_path_is_refused() {
        assert_eq!(
            absolute(Path::new(""), Path::new("/h"), None),
            Err(PathProblem::Empty)
        );
    }
}
