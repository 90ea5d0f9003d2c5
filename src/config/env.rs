//! The environment as an injected value, and the `AUTOGPT_SHIM_*` layer of the
//! configuration (CLI.md §5.4).
//!
//! The loader never calls `std::env::var` itself: it receives an
//! [`Environment`] so tests are hermetic and the process environment is read
//! exactly once. This module must never print or format a variable's value:
//! the environment also carries the secret-store passphrase.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;

use super::error::{ConfigError, ConfigWarning};
use super::layers::{KEYS, key_named};

/// The prefix of every configuration variable.
const PREFIX: &str = "AUTOGPT_SHIM_";

/// `AUTOGPT_SHIM_*` variables that are read elsewhere and are not
/// configuration keys (upper-case suffixes), with what each is for. Not
/// warned about.
const NON_KEY_VARIABLES: &[(&str, &str)] = &[
    (
        "KEYCHAIN_PASSPHRASE_FILE",
        "a file holding the passphrase of the encrypted token file tokens.enc: \
         a regular file of yours that group and others cannot read",
    ),
    (
        "KEYCHAIN_PASSPHRASE",
        "the passphrase of tokens.enc itself, when neither the variable above nor \
         systemd's CREDENTIALS_DIRECTORY gives it; removed from the environment at start",
    ),
    (
        "FALLBACK_DIR",
        "the folder of tokens.enc, its locks and a legacy audit-key.enc: \
         an absolute path, ~ allowed",
    ),
];

/// One `AUTOGPT_SHIM_*` variable the shim reads, as the manual page lists
/// them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variable {
    /// The full name, e.g. `AUTOGPT_SHIM_PLATFORM_URL`.
    pub name: String,
    /// What it does.
    pub role: VariableRole,
}

/// What an `AUTOGPT_SHIM_*` variable does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariableRole {
    /// Sets this configuration key (below the flags and `config.toml`).
    Key(&'static str),
    /// Read outside the configuration keys; what it is for, one line.
    Other(&'static str),
}

/// Every `AUTOGPT_SHIM_*` variable the shim reads: one per configuration
/// key, in the key table's order, each followed by its other spellings,
/// then the variables that set no key. Taken from the same tables the
/// loader uses, so a list made from it cannot miss a variable.
pub fn variables() -> Vec<Variable> {
    let mut out = Vec::new();
    for key in KEYS {
        out.push(Variable {
            name: format!("{PREFIX}{}", key.to_ascii_uppercase()),
            role: VariableRole::Key(key),
        });
        for (alias, _) in ALIASES.iter().filter(|(_, k)| k == key) {
            out.push(Variable {
                name: format!("{PREFIX}{alias}"),
                role: VariableRole::Key(key),
            });
        }
    }
    for (suffix, help) in NON_KEY_VARIABLES {
        out.push(Variable {
            name: format!("{PREFIX}{suffix}"),
            role: VariableRole::Other(help),
        });
    }
    out
}

/// Alternative spellings of configuration keys (upper-case suffix → key).
/// `AUTOGPT_SHIM_CA_FILE` is the documented name of `tls_ca_file`
/// (PROTOCOL.md §1.2a); `AUTOGPT_SHIM_TLS_CA_FILE` works as for every key.
const ALIASES: &[(&str, &str)] = &[("CA_FILE", "tls_ca_file")];

/// A snapshot of environment variables.
///
/// Its `Debug` output lists names only, never values.
#[derive(Clone, Default)]
pub struct Environment {
    vars: Vec<(OsString, OsString)>,
}

impl Environment {
    /// Snapshot of the real process environment.
    pub fn from_process() -> Environment {
        Environment {
            vars: std::env::vars_os().collect(),
        }
    }

    /// An environment made of exactly these variables (tests, embedding).
    pub fn from_pairs<I, K, V>(pairs: I) -> Environment
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        Environment {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value of `name`, matched the way the OS matches variable names
    /// (exactly on Unix, ignoring ASCII case on Windows). The last occurrence
    /// wins, as with `setenv` semantics.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars
            .iter()
            .rev()
            .find(|(k, _)| names_equal(k, name))
            .map(|(_, v)| v.as_os_str())
    }

    /// Like [`get`](Self::get), but an empty value counts as unset.
    pub fn get_non_empty(&self, name: &str) -> Option<&OsStr> {
        self.get(name).filter(|v| !v.is_empty())
    }

    /// All variables, in their original order.
    pub fn iter(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.vars.iter().map(|(k, _)| k))
            .finish()
    }
}

#[cfg(windows)]
fn names_equal(a: &OsStr, b: &str) -> bool {
    a.to_str().is_some_and(|a| a.eq_ignore_ascii_case(b))
}

#[cfg(not(windows))]
fn names_equal(a: &OsStr, b: &str) -> bool {
    a == b
}

/// One configuration key set in the environment: the variable's name as
/// found, and its value.
pub(crate) type EnvSetting = (String, OsString);

/// Collects the configuration keys set through `AUTOGPT_SHIM_<KEY>`
/// variables. Names match case-insensitively (as in the reference); an empty
/// value counts as unset. Unknown `AUTOGPT_SHIM_*` names become warnings.
pub(crate) fn config_variables(
    env: &Environment,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<BTreeMap<&'static str, EnvSetting>, ConfigError> {
    let mut found: BTreeMap<&'static str, Vec<(String, &OsStr)>> = BTreeMap::new();
    for (name, value) in env.iter() {
        // A name that is not UTF-8 cannot spell a key.
        let Some(name) = name.to_str() else { continue };
        let upper = name.to_ascii_uppercase();
        let Some(suffix) = upper.strip_prefix(PREFIX) else {
            continue;
        };
        let key = key_named(&suffix.to_ascii_lowercase()).or_else(|| {
            ALIASES
                .iter()
                .find(|(alias, _)| *alias == suffix)
                .map(|(_, key)| *key)
        });
        match key {
            Some(key) if !value.is_empty() => {
                found.entry(key).or_default().push((name.to_owned(), value));
            }
            Some(_) => {}
            None if NON_KEY_VARIABLES.iter().any(|(name, _)| *name == suffix) => {}
            None => warnings.push(ConfigWarning::UnknownEnvVar {
                name: name.to_owned(),
            }),
        }
    }

    let mut settings = BTreeMap::new();
    for (key, candidates) in found {
        let Some((first_name, first_value)) = candidates.first() else {
            continue;
        };
        if candidates.iter().any(|(_, v)| v != first_value) {
            return Err(ConfigError::ConflictingEnv {
                key,
                names: candidates.into_iter().map(|(n, _)| n).collect(),
            });
        }
        settings.insert(key, (first_name.clone(), first_value.to_os_string()));
    }
    Ok(settings)
}
