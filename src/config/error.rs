//! The configuration layer's error and warning types, and where a value came
//! from.
//!
//! Every message is one line that names the key and its source so the user can
//! find the offending setting. Messages never echo string values of settings
//! (a URL could carry credentials, an environment could hold a passphrase);
//! they say what is wrong instead. Names taken from input (unknown keys,
//! variable names) are escaped so they cannot inject terminal control
//! sequences.

use std::fmt;
use std::path::PathBuf;

/// Where an effective setting came from, highest precedence first
/// (CLI.md §5.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag, e.g. `--allowed-root`.
    Flag(&'static str),
    /// A programmatic override of a key without a flag of its own
    /// ([`Overrides::settings`](super::Overrides::settings)).
    Override,
    /// The configuration file at this path.
    File(PathBuf),
    /// This environment variable (spelled as found in the environment).
    Env(String),
    /// The built-in default.
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(flag) => write!(f, "flag {flag}"),
            Source::Override => f.write_str("override"),
            Source::File(path) => write!(f, "config file {}", shown(path)),
            Source::Env(name) => write!(f, "environment variable {}", escaped(name)),
            Source::Default => f.write_str("built-in default"),
        }
    }
}

/// A configuration that cannot be used. Every command maps it to exit 78
/// (`EX_CONFIG`, CLI.md §3).
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// The configuration file exists but could not be read (permissions, it
    /// is a directory, an I/O error, larger than the size limit, not UTF-8).
    ReadFile {
        /// The file that was read.
        path: PathBuf,
        /// What went wrong, one line.
        reason: String,
    },
    /// The configuration file is not valid TOML (including duplicate keys).
    Syntax {
        /// The file that was parsed.
        path: PathBuf,
        /// The parser's message, flattened to one line.
        message: String,
    },
    /// A value has the wrong type for its key, e.g. a string where an integer
    /// belongs, a table in the flat file, a non-numeric environment value.
    WrongType {
        /// The configuration key.
        key: &'static str,
        /// Where the value came from.
        source: Source,
        /// What the key accepts, e.g. "an integer".
        expected: &'static str,
    },
    /// A value has the right type but violates the key's constraint
    /// (CLI.md §5.2), e.g. `max_concurrent = 0` or a `ws://` URL to a
    /// non-loopback host.
    Invalid {
        /// The configuration key.
        key: &'static str,
        /// Where the value came from.
        source: Source,
        /// The violated rule, one line.
        reason: String,
    },
    /// The same key is set by several environment variables whose names
    /// differ only in case (or by a key's alias), with different values;
    /// which one wins would be an accident of the environment's order.
    ConflictingEnv {
        /// The configuration key.
        key: &'static str,
        /// The variable names involved, as found.
        names: Vec<String>,
    },
    /// A value that must be text is not valid UTF-8.
    NotUnicode {
        /// The configuration key or variable name.
        key: String,
        /// Where the value came from.
        source: Source,
    },
    /// A switch of a capability this build does not implement is on
    /// ([`unavailable_feature`](super::unavailable_feature)).
    Unavailable {
        /// The configuration key.
        key: &'static str,
        /// Where the value came from.
        source: Source,
        /// What it would turn on, e.g. "computer use".
        feature: &'static str,
    },
    /// A programmatic override names a key that does not exist.
    UnknownOverride {
        /// The unknown key.
        key: String,
    },
    /// The home directory is needed (`~` expansion, a default path) but
    /// `HOME` (`USERPROFILE` on Windows) is unset, empty or not absolute.
    NoHome,
    /// A relative path must be made absolute but the working directory is
    /// unknown (deleted, or not readable).
    NoWorkingDirectory {
        /// The configuration key whose path is relative.
        key: &'static str,
    },
    /// An environment variable that names a directory and is not a config
    /// key (e.g. `AUTOGPT_SHIM_FALLBACK_DIR`) holds an unusable value.
    InvalidVariable {
        /// The variable name.
        name: &'static str,
        /// The violated rule, one line.
        reason: &'static str,
    },
    /// The operating system is not one the platform supports
    /// (PROTOCOL.md §4.2.2).
    UnsupportedPlatform {
        /// The OS name as the build target knows it.
        os: String,
    },
    /// The CPU architecture is not one the platform supports
    /// (PROTOCOL.md §4.2.3).
    UnsupportedArch {
        /// The machine string reported by the OS.
        machine: String,
    },
    /// The operating system's random number generator failed while a fresh
    /// machine id had to be generated.
    Randomness,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ReadFile { path, reason } => {
                write!(f, "cannot read config file {}: {}", shown(path), reason)
            }
            ConfigError::Syntax { path, message } => {
                write!(
                    f,
                    "config file {} is not valid TOML: {}",
                    shown(path),
                    message
                )
            }
            ConfigError::WrongType {
                key,
                source,
                expected,
            } => write!(f, "{key} (from {source}) must be {expected}"),
            ConfigError::Invalid {
                key,
                source,
                reason,
            } => write!(f, "invalid {key} (from {source}): {reason}"),
            ConfigError::ConflictingEnv { key, names } => {
                let names: Vec<String> = names.iter().map(|n| escaped(n)).collect();
                write!(
                    f,
                    "{key} is set by several environment variables with different values: {}",
                    names.join(", ")
                )
            }
            ConfigError::NotUnicode { key, source } => {
                write!(f, "{} (from {source}) is not valid UTF-8", escaped(key))
            }
            ConfigError::Unavailable {
                key,
                source,
                feature,
            } => write!(
                f,
                "{feature} is not available in this build: {key} (from {source}) must not be switched on"
            ),
            ConfigError::UnknownOverride { key } => {
                write!(f, "unknown configuration key {}", escaped(key))
            }
            ConfigError::NoHome => f.write_str(if cfg!(windows) {
                "cannot determine the home directory: USERPROFILE is unset, empty or not absolute"
            } else {
                "cannot determine the home directory: HOME is unset, empty or not absolute"
            }),
            ConfigError::NoWorkingDirectory { key } => write!(
                f,
                "{key} is a relative path but the working directory cannot be determined"
            ),
            ConfigError::InvalidVariable { name, reason } => {
                write!(f, "invalid environment variable {name}: {reason}")
            }
            ConfigError::UnsupportedPlatform { os } => {
                write!(f, "unsupported operating system: {}", escaped(os))
            }
            ConfigError::UnsupportedArch { machine } => write!(
                f,
                "unsupported CPU architecture: {} (supported: x86_64, arm64)",
                escaped(machine)
            ),
            ConfigError::Randomness => {
                f.write_str("the operating system's random number generator failed")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// Something in the configuration that works but deserves the user's
/// attention. The library returns these; the caller prints them (stderr).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigWarning {
    /// The configuration file has a key that is not a configuration key; it is
    /// ignored (CLI.md §5.1).
    UnknownFileKey {
        /// The key as written in the file.
        key: String,
        /// The file.
        path: PathBuf,
    },
    /// An `AUTOGPT_SHIM_*` environment variable is neither a configuration
    /// key nor one of the known non-key variables; it is ignored.
    UnknownEnvVar {
        /// The variable name as found.
        name: String,
    },
    /// The file given with `--config` does not exist; defaults apply.
    ConfigFileMissing {
        /// The file.
        path: PathBuf,
    },
    /// `oauth_redirect_port` puts the callback range outside 41899–41910,
    /// which is all the platform registration accepts (AUTH.md §12).
    RedirectPortUnregistered {
        /// The configured first port.
        port: u16,
    },
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigWarning::UnknownFileKey { key, path } => write!(
                f,
                "warning: ignoring unknown key {} in config file {}",
                escaped(key),
                shown(path)
            ),
            ConfigWarning::UnknownEnvVar { name } => write!(
                f,
                "warning: ignoring unknown environment variable {}",
                escaped(name)
            ),
            ConfigWarning::ConfigFileMissing { path } => write!(
                f,
                "warning: config file {} does not exist; using defaults",
                shown(path)
            ),
            ConfigWarning::RedirectPortUnregistered { port } => write!(
                f,
                "warning: oauth_redirect_port {port} puts the callback ports outside \
                 41899-41910, the only range the platform accepts; authentication will \
                 probably fail"
            ),
        }
    }
}

/// Quotes a name taken from input and escapes control characters and quotes,
/// so it prints as exactly one harmless line.
pub(crate) fn escaped(text: &str) -> String {
    format!("\"{}\"", text.escape_debug())
}

pub(crate) use crate::text::shown;
