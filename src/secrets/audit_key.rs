//! The stored form of the audit key (AUDIT.md §7): when a stored text is a
//! valid key, how a new key is made and written, and the types that tell the
//! caller where a key came from.
//!
//! Owns the validity rule of the §7.2 hardening note, the same for every
//! place a key is stored. It must never repair, replace or normalise a
//! stored value: a corrupt value is reported, and the store is left as it
//! is.

use std::fmt;
use std::path::PathBuf;

use zeroize::Zeroizing;

use super::error::SecretError;
use super::keychain::{Account, SERVICE};
use super::secret::SecretString;
use crate::audit::AuditKey;
use crate::audit::record::hex;

/// Length of a key this shim generates, in bytes.
pub const GENERATED_LEN: usize = 32;

/// Where the audit key was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrigin {
    /// Read from the store.
    Stored,
    /// None was stored: a new key was generated and stored. `start` rotates
    /// a non-empty current log first (AUDIT.md §7.2, reason `key_change`).
    Created,
    /// Imported from the reference's `audit-key.enc` into `tokens.enc`
    /// after it verified the log (AUDIT.md §7.4).
    ImportedLegacy,
}

/// What the caller's check of a recovered legacy key against the current
/// audit log found (AUDIT.md §7.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyCheck {
    /// The current log has no complete record: nothing to check against.
    NoRecords,
    /// The key verifies the HMAC of the last complete record.
    Verified,
    /// The key does not verify it (most likely a wrong passphrase).
    Mismatch,
    /// The log could not be read; one line saying why.
    Failed(String),
}

/// Where a stored audit key lives, for messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyLocation {
    /// The OS keychain entry (service `autogpt-local-executor`, account
    /// `audit_key`).
    Keychain,
    /// Member `audit_key` of this `tokens.enc`.
    TokensFile(PathBuf),
}

impl fmt::Display for KeyLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyLocation::Keychain => write!(
                f,
                "the OS keychain entry (service {SERVICE}, account {})",
                Account::AuditKey
            ),
            KeyLocation::TokensFile(path) => {
                write!(f, "member audit_key of {}", super::error::shown(path))
            }
        }
    }
}

/// Why a stored text is not a valid audit key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyProblem {
    /// A character other than a hex digit (after trimming).
    NotHex,
    /// An odd number of hex digits.
    OddLength,
    /// Decodes to fewer than 16 bytes (this many).
    TooShort(usize),
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyProblem::NotHex => f.write_str("it is not hexadecimal"),
            KeyProblem::OddLength => f.write_str("it has an odd number of hex digits"),
            KeyProblem::TooShort(len) => write!(
                f,
                "it decodes to {len} bytes, fewer than the {} required",
                AuditKey::MIN_LEN
            ),
        }
    }
}

/// Decodes a stored key text under the AUDIT.md §7.2 hardening note:
/// surrounding ASCII whitespace trimmed, an even number of hex digits of
/// either case, at least 16 bytes.
pub fn parse_stored(text: &SecretString) -> Result<AuditKey, KeyProblem> {
    let digits = text.expose().trim_ascii().as_bytes();
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(KeyProblem::NotHex);
    }
    if digits.len() % 2 != 0 {
        return Err(KeyProblem::OddLength);
    }
    let mut bytes = Zeroizing::new(Vec::with_capacity(digits.len() / 2));
    for pair in digits.chunks_exact(2) {
        bytes.push((nibble(pair[0]) << 4) | nibble(pair[1]));
    }
    if bytes.len() < AuditKey::MIN_LEN {
        // Checked here, while the bytes are still in the zeroizing wrapper
        // (`AuditKey::new` would drop a refused vector unzeroed).
        return Err(KeyProblem::TooShort(bytes.len()));
    }
    into_key(bytes).ok_or(KeyProblem::TooShort(0))
}

/// Moves checked key bytes (≥ 16) into an [`AuditKey`] without copying them.
pub(crate) fn into_key(mut bytes: Zeroizing<Vec<u8>>) -> Option<AuditKey> {
    AuditKey::new(std::mem::take(&mut *bytes)).ok()
}

fn nibble(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        b'A'..=b'F' => digit - b'A' + 10,
        _ => 0,
    }
}

/// A new key from the OS CSPRNG and its stored text (64 lowercase hex
/// digits, AUDIT.md §7.1).
pub fn generate() -> Result<(AuditKey, SecretString), SecretError> {
    let mut bytes = Zeroizing::new(vec![0u8; GENERATED_LEN]);
    getrandom::fill(&mut bytes).map_err(|_| SecretError::Randomness)?;
    let text = stored_text(&bytes);
    let key = into_key(bytes).ok_or(SecretError::Internal("a generated key is too short"))?;
    Ok((key, text))
}

/// The stored text of key bytes: lowercase hex.
pub fn stored_text(bytes: &[u8]) -> SecretString {
    SecretString::new(hex(bytes))
}
