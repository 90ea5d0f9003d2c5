//! The running daemon's account of itself, for `status`: a small JSON file
//! in the state directory, written once the daemon runs (atomically, mode
//! 0600) and removed when it stops.
//!
//! It holds settings only, never a token, a key, a passphrase or anything
//! the platform sent. A reader treats it as untrusted: it is read with a
//! size bound, parsed into fixed fields, and believed only while the
//! daemon it names still holds the audit log (the caller checks that), so a
//! file left behind by a crash is never reported as a running daemon.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{SmallFileError, read_small_file, replace_file};

/// The file's name in the state directory.
pub const FILE_NAME: &str = "daemon.json";

/// Far more than the fields need; a larger file is not ours.
const MAX_BYTES: u64 = 64 * 1024;

/// What the daemon runs with, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunningSettings {
    /// The daemon's process id.
    pub pid: u32,
    /// The shim's version.
    pub version: String,
    /// When it started, in seconds since the epoch.
    pub started_unix: i64,
    /// The legacy session id; `None` in machine-control mode.
    pub session_id: Option<String>,
    /// The legacy session's root; `None` in machine-control mode.
    pub allowed_root: Option<String>,
    /// The platform's base URL.
    pub platform_url: String,
    /// The machine id sent in `HELLO`.
    pub machine_id: String,
    /// Whether shell commands are allowed.
    pub enable_shell: bool,
    /// The capabilities the daemon may advertise.
    pub capabilities: Vec<String>,
    /// The configuration file it read (it may not exist).
    pub config_file: String,
    /// Its audit log.
    pub audit_log: String,
    /// What confines its commands, as one line (absent from the files of
    /// earlier versions).
    #[serde(default)]
    pub command_sandbox: String,
    /// The local command rules, as one line (absent from the files of
    /// earlier versions).
    #[serde(default)]
    pub command_rules: String,
}

/// The written file, removed when the value is dropped, so that no way out
/// of the daemon leaves it behind.
#[derive(Debug)]
pub struct RuntimeFile {
    path: PathBuf,
}

impl RuntimeFile {
    /// Writes `settings` to [`FILE_NAME`] in `state_dir` (created 0700 when
    /// missing), replacing what a daemon that died without cleaning up left
    /// there.
    pub fn write(state_dir: &Path, settings: &RunningSettings) -> std::io::Result<RuntimeFile> {
        let mut private = std::fs::DirBuilder::new();
        private.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut private, 0o700);
        private.create(state_dir)?;
        let path = state_dir.join(FILE_NAME);
        let mut bytes = serde_json::to_vec_pretty(settings).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        replace_file(&path, &bytes, 0o600)?;
        Ok(RuntimeFile { path })
    }
}

impl Drop for RuntimeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The settings in `state_dir`'s runtime file, or why they cannot be read.
pub fn read(state_dir: &Path) -> Result<RunningSettings, String> {
    let path = state_dir.join(FILE_NAME);
    let bytes = read_small_file(&path, MAX_BYTES).map_err(|e| match e {
        SmallFileError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("{} does not exist", path.display())
        }
        e => format!("{}: {e}", path.display()),
    })?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings() -> RunningSettings {
        RunningSettings {
            pid: 42,
            version: "0.1.0".into(),
            started_unix: 1_796_187_600,
            session_id: None,
            allowed_root: None,
            platform_url: "https://platform.example.com".into(),
            machine_id: "m-1".into(),
            enable_shell: true,
            capabilities: vec!["shell".into(), "files".into()],
            config_file: "/c/config.toml".into(),
            audit_log: "/s/audit.log".into(),
            command_sandbox: "files unconfined; network none (own namespace, loopback only)".into(),
            command_rules: "2 rule(s); no match: allow; shell syntax: ask".into(),
        }
    }

    #[test]
    fn written_settings_read_back_and_vanish_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let file = RuntimeFile::write(dir.path(), &settings()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), settings());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        drop(file);
        assert!(read(dir.path()).unwrap_err().contains("does not exist"));
    }

    #[test]
    fn a_file_with_other_fields_or_too_large_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let mut value = serde_json::to_value(settings()).unwrap();
        value["token"] = "x".into();
        std::fs::write(&path, value.to_string()).unwrap();
        assert!(read(dir.path()).is_err());
        std::fs::write(&path, vec![b' '; 70 * 1024]).unwrap();
        assert!(read(dir.path()).unwrap_err().contains("larger than"));
    }

    #[test]
    fn a_file_of_an_earlier_version_without_the_sandbox_line_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut value = serde_json::to_value(settings()).unwrap();
        value.as_object_mut().unwrap().remove("command_sandbox");
        std::fs::write(dir.path().join(FILE_NAME), value.to_string()).unwrap();
        assert_eq!(read(dir.path()).unwrap().command_sandbox, "");
    }
}
