//! The in-memory forms of secrets: [`SecretString`] (tokens, the stored
//! text of the audit key) and [`Passphrase`] (the file store's passphrase,
//! with the [`PassphraseOrigin`] it was read from).
//!
//! Both zero their heap buffer when dropped. Neither implements `Display`,
//! and their `Debug` output shows only a length, so a secret cannot reach a
//! log line, an error message or a panic message through formatting. This
//! module must never add a conversion that copies a secret into an ordinary
//! `String` or `Vec`.

use std::ffi::OsStr;
use std::fmt;
use std::path::PathBuf;

use zeroize::Zeroizing;

/// A secret text: an OAuth token, or the hex text of the audit key.
///
/// The buffer is zeroed on drop (also the spare capacity). Read it with
/// [`expose`](Self::expose) at the one place that needs the characters.
#[derive(Clone, Default)]
pub struct SecretString(Zeroizing<String>);

impl SecretString {
    /// Takes ownership of `text` without copying it, so the only copy of the
    /// characters is the one that will be zeroed.
    pub fn new(text: String) -> SecretString {
        SecretString(Zeroizing::new(text))
    }

    /// The secret characters.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string (which every store treats as
    /// "not stored", AUTH.md §9.1).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl From<String> for SecretString {
    fn from(text: String) -> SecretString {
        SecretString::new(text)
    }
}

impl From<&str> for SecretString {
    fn from(text: &str) -> SecretString {
        SecretString::new(text.to_owned())
    }
}

impl PartialEq for SecretString {
    fn eq(&self, other: &SecretString) -> bool {
        // Tokens are compared only to see whether another connection already
        // refreshed (AUTH.md §7.3); both sides are local, so timing does not
        // leak anything to a remote party.
        self.expose() == other.expose()
    }
}

impl Eq for SecretString {}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretString(<{} bytes redacted>)", self.0.len())
    }
}

/// The passphrase of the encrypted-file store: the exact bytes it was given
/// as (AUTH.md §10.2), no trimming, no Unicode normalisation.
///
/// Every key derivation works on a borrowed view; the bytes are zeroed when
/// the value is dropped. A store that rewrites `tokens.enc` (a token refresh
/// draws a fresh salt every time) must keep it for as long as it may write.
pub struct Passphrase {
    bytes: Zeroizing<Vec<u8>>,
    origin: PassphraseOrigin,
}

/// Where a [`Passphrase`] was read from, for messages that tell the user
/// which one is wrong. Never holds the passphrase itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassphraseOrigin {
    /// The environment variable [`Passphrase::VARIABLE`].
    Variable,
    /// The file named by [`Passphrase::FILE_VARIABLE`].
    File(PathBuf),
    /// The systemd credential [`Passphrase::CREDENTIAL`] in
    /// `$CREDENTIALS_DIRECTORY`.
    Credential(PathBuf),
    /// Typed by the user at a terminal prompt.
    Prompt,
}

impl fmt::Display for PassphraseOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PassphraseOrigin::Variable => f.write_str(Passphrase::VARIABLE),
            PassphraseOrigin::File(path) => write!(
                f,
                "the passphrase file {} ({})",
                super::error::shown(path),
                Passphrase::FILE_VARIABLE
            ),
            PassphraseOrigin::Credential(path) => {
                write!(f, "the systemd credential {}", super::error::shown(path))
            }
            PassphraseOrigin::Prompt => f.write_str("the passphrase typed at the prompt"),
        }
    }
}

impl Passphrase {
    /// The environment variable that carries the passphrase.
    pub const VARIABLE: &'static str = "AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE";

    /// The environment variable that names a file holding the passphrase.
    pub const FILE_VARIABLE: &'static str = "AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE";

    /// The name of the systemd credential holding the passphrase.
    pub const CREDENTIAL: &'static str = "autogpt-shim-passphrase";

    /// Wraps passphrase bytes from the environment variable; `None` when
    /// empty (an empty passphrase counts as absent, AUTH.md §10.2).
    pub fn new(bytes: Vec<u8>) -> Option<Passphrase> {
        Passphrase::from_secret(Zeroizing::new(bytes), PassphraseOrigin::Variable)
    }

    /// Wraps bytes that are already in a zeroizing buffer, read from
    /// `origin`; `None` when empty.
    pub fn from_secret(bytes: Zeroizing<Vec<u8>>, origin: PassphraseOrigin) -> Option<Passphrase> {
        if bytes.is_empty() {
            return None;
        }
        Some(Passphrase { bytes, origin })
    }

    /// The passphrase from an environment variable's value: its exact bytes
    /// (UTF-8 as the OS holds it); `None` when unset or empty.
    pub fn from_os_str(value: Option<&OsStr>) -> Option<Passphrase> {
        value.and_then(|v| Passphrase::new(v.as_encoded_bytes().to_vec()))
    }

    /// Where it was read from.
    pub fn origin(&self) -> &PassphraseOrigin {
        &self.origin
    }

    /// The bytes, for a key derivation.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Debug for Passphrase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Passphrase(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let token = SecretString::from("at-example-secret");
        let shown = format!("{token:?}");
        assert!(!shown.contains("at-example"), "{shown}");
        let pass = Passphrase::new(b"hunter2".to_vec()).unwrap();
        assert!(!format!("{pass:?}").contains("hunter2"));
    }

    #[test]
    fn empty_passphrase_is_absent() {
        assert!(Passphrase::new(Vec::new()).is_none());
        assert!(Passphrase::from_os_str(Some(OsStr::new(""))).is_none());
        assert!(Passphrase::from_os_str(None).is_none());
    }

    #[test]
    fn passphrase_keeps_exact_bytes() {
        let pass = Passphrase::from_os_str(Some(OsStr::new(" pässword \n"))).unwrap();
        assert_eq!(pass.bytes(), " pässword \n".as_bytes());
    }
}
