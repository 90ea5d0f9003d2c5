//! The child's environment (EXEC.md §5): a safe baseline copied from the
//! shim's own environment, the request's variables on top, and
//! `PYTHONIOENCODING=utf-8` forced last.
//!
//! This module never reads the process environment itself (the caller
//! hands over the snapshot it took at start), and it must never let a
//! variable outside the baseline list reach the child unless the request
//! named it: tokens and other `AUTOGPT_SHIM_*` secrets stay in the shim.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The variables copied from the shim's environment (besides every `LC_*`).
const BASELINE: [&str; 7] = ["HOME", "PATH", "LANG", "TZ", "TMPDIR", "USER", "SHELL"];

/// Why a request's `env` entry cannot be passed to a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvError {
    /// An empty name.
    EmptyName,
    /// A name containing `=` or NUL (`execve` could not represent it).
    InvalidName(String),
    /// A value containing NUL; the value itself is never repeated.
    InvalidValue(String),
}

impl EnvError {
    /// The one-line message for the `INTERNAL_ERROR` reply.
    pub fn message(&self) -> String {
        match self {
            EnvError::EmptyName => "Invalid environment variable: empty name".to_owned(),
            EnvError::InvalidName(name) => format!(
                "Invalid environment variable name '{}': it must not contain '=' or NUL",
                name.escape_debug()
            ),
            EnvError::InvalidValue(name) => format!(
                "Invalid environment variable '{}': its value must not contain NUL",
                name.escape_debug()
            ),
        }
    }
}

/// True when `name` is copied from the shim's environment.
fn in_baseline(name: &OsStr) -> bool {
    name.as_bytes().starts_with(b"LC_") || BASELINE.iter().any(|b| name.as_bytes() == b.as_bytes())
}

/// Checks every wire entry (EXEC.md §3 step 8), in name order so the first
/// invalid entry reported is deterministic.
pub fn validate(wire: &BTreeMap<String, String>) -> Result<(), EnvError> {
    for (name, value) in wire {
        if name.is_empty() {
            return Err(EnvError::EmptyName);
        }
        if name.contains(['=', '\0']) {
            return Err(EnvError::InvalidName(name.clone()));
        }
        if value.contains('\0') {
            return Err(EnvError::InvalidValue(name.clone()));
        }
    }
    Ok(())
}

/// The complete child environment: baseline from `host`, then `wire`, then
/// the forced encoding. The caller has validated `wire`.
pub fn build<'a>(
    host: impl IntoIterator<Item = (&'a OsStr, &'a OsStr)>,
    wire: &BTreeMap<String, String>,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = host
        .into_iter()
        .filter(|(name, _)| in_baseline(name))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    for (name, value) in wire {
        env.insert(name.into(), value.into());
    }
    env.insert("PYTHONIOENCODING".into(), "utf-8".into());
    env
}

/// The sorted names of an environment, for the audit record (values are
/// never logged). Non-UTF-8 names are shown with U+FFFD.
pub fn keys<'a>(names: impl IntoIterator<Item = &'a OsStr>) -> Vec<String> {
    let mut keys: Vec<String> = names
        .into_iter()
        .map(|n| String::from_utf8_lossy(n.as_bytes()).into_owned())
        .collect();
    keys.sort();
    keys
}
