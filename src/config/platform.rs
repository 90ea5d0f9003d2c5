//! Platform facts sent in `HELLO` (CLI.md §7.1, PROTOCOL.md §4.2.2–§4.2.3):
//! the platform name, the normalised CPU architecture and the host name.
//!
//! The decisions are pure functions of the text the OS reports, so they are
//! testable on any machine; [`Host::detect`] is the only place that asks the
//! OS. An unsupported OS or architecture is recorded, not fatal here: `start`
//! refuses it (exit 78), while offline tools such as `audit verify` keep
//! working.

use super::error::ConfigError;

/// The platform and architecture names, as the wire spells them.
pub use crate::protocol::{Arch, Platform};

/// Linux or WSL2, decided from the text of `/proc/version`: WSL2 kernels
/// carry `microsoft` in their version string (any case).
pub fn linux_flavour(proc_version: &str) -> Platform {
    if proc_version.to_lowercase().contains("microsoft") {
        Platform::Wsl2
    } else {
        Platform::Linux
    }
}

/// Normalises the OS machine string; `None` for an unsupported architecture.
pub fn normalize_arch(machine: &str) -> Option<Arch> {
    match machine.to_ascii_lowercase().as_str() {
        "x86_64" | "amd64" => Some(Arch::X86_64),
        "arm64" | "aarch64" => Some(Arch::Arm64),
        _ => None,
    }
}

/// What the OS says about this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The platform, or `None` on an OS the platform does not support.
    pub platform: Option<Platform>,
    /// The OS name of the build target (for messages).
    pub os_name: String,
    /// The OS machine string (`uname -m`), unnormalised.
    pub machine: String,
    /// The host name (`uname -n`); may be empty.
    pub hostname: String,
}

impl Host {
    /// Asks the running OS.
    pub fn detect() -> Host {
        Host {
            platform: detect_platform(),
            os_name: std::env::consts::OS.to_owned(),
            machine: machine(),
            hostname: hostname(),
        }
    }

    /// The platform, or the error that makes `start` exit 78.
    pub fn platform(&self) -> Result<Platform, ConfigError> {
        self.platform
            .ok_or_else(|| ConfigError::UnsupportedPlatform {
                os: self.os_name.clone(),
            })
    }

    /// The normalised architecture, or the error that makes `start` exit 78.
    pub fn arch(&self) -> Result<Arch, ConfigError> {
        normalize_arch(&self.machine).ok_or_else(|| ConfigError::UnsupportedArch {
            machine: self.machine.clone(),
        })
    }
}

#[cfg(target_os = "linux")]
fn detect_platform() -> Option<Platform> {
    // Unreadable /proc/version means plain Linux (CLI.md §7.1).
    let text = std::fs::read("/proc/version").unwrap_or_default();
    Some(linux_flavour(&String::from_utf8_lossy(&text)))
}

#[cfg(target_os = "macos")]
fn detect_platform() -> Option<Platform> {
    Some(Platform::Darwin)
}

#[cfg(windows)]
fn detect_platform() -> Option<Platform> {
    Some(Platform::Windows)
}

#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
fn detect_platform() -> Option<Platform> {
    None
}

#[cfg(unix)]
fn machine() -> String {
    rustix::system::uname()
        .machine()
        .to_string_lossy()
        .into_owned()
}

#[cfg(unix)]
fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Windows has no `uname`; the build target's architecture is what the
/// process runs as, and `COMPUTERNAME` is what Python's `gethostname` reports.
#[cfg(not(unix))]
fn machine() -> String {
    std::env::consts::ARCH.to_owned()
}

#[cfg(not(unix))]
fn hostname() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_default()
}
