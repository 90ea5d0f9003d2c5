//! [`SecretError`]: every way the secret store can fail, each with one
//! precise name, and the exit-code class the CLI maps it to.
//!
//! Messages are one line, name the file or keychain entry involved and say
//! what the user can do. They must never contain a secret: no token, key,
//! passphrase or decrypted byte is ever formatted here (the variants do not
//! even hold one), and paths are shown with control characters escaped.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::audit_key::{KeyLocation, KeyProblem};
use super::container::{FormatProblem, PlaintextProblem};
use super::keychain::{Account, KeychainError, KeychainErrorKind, KeychainUnusable};
use super::legacy::LegacyProblem;
use super::secret::{Passphrase, PassphraseOrigin};

/// How the CLI turns a [`SecretError`] into an exit code (CLI.md §3, AUTH.md
/// §8, AUDIT.md §11.6). This is data; the mapping lives in the CLI:
///
/// | class | `start`, `auth` | `audit …` | `revoke` |
/// |---|---|---|---|
/// | [`Config`](Self::Config) | 78 | 2 | 1 |
/// | [`Unavailable`](Self::Unavailable) | 78 | 2 | 1 |
/// | [`Internal`](Self::Internal) | 70 | 70 | 70 |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// The store cannot be used as it is set up, or what it holds is
    /// unusable; the user has to act (set the passphrase, fix permissions,
    /// repair or remove a stored value). Retrying does not help.
    Config,
    /// The operating system or the keychain failed (I/O, lock, D-Bus,
    /// randomness); trying again later may succeed.
    Unavailable,
    /// A bug in this program.
    Internal,
}

/// Why a passphrase file cannot be used.
#[derive(Debug)]
pub enum PassphraseFileProblem {
    /// It does not exist.
    Missing,
    /// It is a directory, FIFO, device or socket.
    NotRegular,
    /// Another user owns it.
    NotOwned {
        /// Its owner.
        uid: u32,
    },
    /// It grants access to group or others.
    Accessible {
        /// Its permission bits.
        mode: u32,
    },
    /// It is larger than any passphrase.
    TooLarge,
    /// It holds nothing (after the one trailing line break).
    Empty,
    /// Opening or reading it failed.
    Io(io::Error),
}

/// A file-system object the store checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    /// The store's directory.
    Directory,
    /// `tokens.enc`.
    File,
}

/// The step of a file operation that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoStep {
    /// Creating the store's directory.
    CreateDirectory,
    /// Opening the directory.
    OpenDirectory,
    /// Opening `tokens.enc` (or the legacy key file).
    Open,
    /// Reading it.
    Read,
    /// Creating, writing or syncing the temporary file.
    WriteTemporary,
    /// Renaming the temporary file over `tokens.enc`.
    Rename,
    /// Syncing the directory after the rename.
    SyncDirectory,
}

impl fmt::Display for IoStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoStep::CreateDirectory => "create the directory",
            IoStep::OpenDirectory => "open the directory",
            IoStep::Open => "open",
            IoStep::Read => "read",
            IoStep::WriteTemporary => "write the temporary file for",
            IoStep::Rename => "rename the new file into",
            IoStep::SyncDirectory => "sync the directory of",
        })
    }
}

/// The keychain operation that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeychainOp {
    /// Reading an entry.
    Read,
    /// Writing an entry.
    Write,
    /// Deleting an entry.
    Delete,
}

impl fmt::Display for KeychainOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeychainOp::Read => "read",
            KeychainOp::Write => "write",
            KeychainOp::Delete => "delete",
        })
    }
}

/// A secret-store failure.
#[derive(Debug)]
#[non_exhaustive]
pub enum SecretError {
    /// Store selection (AUTH.md §8): the keychain is unusable and
    /// `AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE` is unset or empty, so no store can
    /// be used ("no passphrase, no start").
    NoPassphrase {
        /// Why the keychain probe failed.
        keychain: KeychainUnusable,
    },
    /// The passphrase was to be typed at a terminal, and was not: the
    /// prompt was cancelled, ended, or could not be shown. Says which.
    PassphrasePrompt(String),
    /// The passphrase file (`AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE_FILE`) or the
    /// systemd credential cannot be used. Nothing was read from it.
    PassphraseFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: PassphraseFileProblem,
    },
    /// A keychain operation failed after the keychain had been selected
    /// (the store is never switched mid-process).
    Keychain {
        /// The entry.
        account: Account,
        /// What was attempted.
        op: KeychainOp,
        /// The keychain's failure.
        error: KeychainError,
    },
    /// A newly created audit key read back from the keychain differs from
    /// what was written (another process wrote one at the same moment, or
    /// the keychain did not store it).
    KeychainReadBack,
    /// `tokens.enc` or its directory grants access to group or others
    /// (AUTH.md §10.1). Nothing was read or written.
    InsecurePermissions {
        /// The object that is too open.
        node: Node,
        /// Its path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// `tokens.enc` (or the legacy key file) is not a regular file, or the
    /// store's directory is not a directory, or a symbolic link stands where
    /// the file should be.
    NotRegular {
        /// The object.
        node: Node,
        /// Its path.
        path: PathBuf,
    },
    /// A file-system call failed.
    Io {
        /// The step that failed.
        step: IoStep,
        /// The file or directory it concerned.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The exclusive lock on `tokens.enc.lock` could not be taken.
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `tokens.enc` is malformed before decryption (AUTH.md §10.3: size,
    /// magic, version, KDF id, parameter bounds). It is left untouched.
    CorruptFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: FormatProblem,
    },
    /// `tokens.enc` fails AES-GCM authentication: the passphrase is wrong or
    /// the file was changed. It is never overwritten or deleted (§10.4).
    Undecryptable {
        /// The file.
        path: PathBuf,
        /// Where the passphrase came from.
        passphrase: PassphraseOrigin,
    },
    /// `tokens.enc` decrypts, but the plaintext is not the expected JSON
    /// object (or has another version). It is left untouched.
    BadPlaintext {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: PlaintextProblem,
    },
    /// A stored audit key is not valid under the AUDIT.md §7.2 hardening
    /// note. The stored value is left untouched; `start` refuses to run.
    CorruptAuditKey {
        /// Where it is stored.
        location: KeyLocation,
        /// What is wrong with it.
        problem: KeyProblem,
    },
    /// The legacy `audit-key.enc` cannot be parsed (AUDIT.md §7.4): a
    /// corrupt stored key, never regenerated.
    CorruptLegacyKeyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: LegacyProblem,
    },
    /// The key recovered from the legacy file does not verify the last
    /// record of the current audit log (most likely a wrong passphrase:
    /// that format decrypts any passphrase to *some* key).
    LegacyKeyMismatch {
        /// The legacy file.
        path: PathBuf,
    },
    /// The audit log could not be read to check the legacy key.
    LegacyKeyCheckFailed {
        /// The legacy file.
        path: PathBuf,
        /// Why the check failed, from the caller.
        reason: String,
    },
    /// A read-only command needs the audit key and none is stored; read-only
    /// commands never create one (AUDIT.md §7.2).
    NoAuditKey {
        /// Where it was looked for.
        store: String,
    },
    /// The OS random number generator failed.
    Randomness,
    /// The encrypted-file store is not implemented on this platform (it
    /// needs an owner-only DACL on Windows).
    FileStoreUnsupported,
    /// An invariant of this module was violated (a bug).
    Internal(&'static str),
}

impl SecretError {
    /// The exit-code class (see [`ErrorClass`]).
    pub fn class(&self) -> ErrorClass {
        match self {
            SecretError::Keychain { error, .. } => match error.kind() {
                KeychainErrorKind::Ambiguous | KeychainErrorKind::NotText => ErrorClass::Config,
                KeychainErrorKind::Invalid => ErrorClass::Internal,
                KeychainErrorKind::Platform
                | KeychainErrorKind::NoAccess
                | KeychainErrorKind::Unsupported => ErrorClass::Unavailable,
            },
            SecretError::KeychainReadBack
            | SecretError::Io { .. }
            | SecretError::Lock { .. }
            | SecretError::LegacyKeyCheckFailed { .. }
            | SecretError::Randomness => ErrorClass::Unavailable,
            SecretError::NoPassphrase { .. }
            | SecretError::PassphrasePrompt(_)
            | SecretError::PassphraseFile { .. }
            | SecretError::InsecurePermissions { .. }
            | SecretError::NotRegular { .. }
            | SecretError::CorruptFile { .. }
            | SecretError::Undecryptable { .. }
            | SecretError::BadPlaintext { .. }
            | SecretError::CorruptAuditKey { .. }
            | SecretError::CorruptLegacyKeyFile { .. }
            | SecretError::LegacyKeyMismatch { .. }
            | SecretError::NoAuditKey { .. }
            | SecretError::FileStoreUnsupported => ErrorClass::Config,
            SecretError::Internal(_) => ErrorClass::Internal,
        }
    }
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretError::NoPassphrase { keychain } => write!(
                f,
                "no usable secret store: the OS keychain is unavailable ({}) and no passphrase \
                 is given; set {} to a private file holding the passphrase of the encrypted file store \
                 (or pass it as the systemd credential {}, or set {}, or run the command on a terminal \
                 to type it), or make the keychain available",
                keychain.summary(),
                Passphrase::FILE_VARIABLE,
                Passphrase::CREDENTIAL,
                Passphrase::VARIABLE
            ),
            SecretError::PassphrasePrompt(why) => write!(f, "no passphrase was typed: {why}"),
            SecretError::PassphraseFile { path, problem } => {
                write!(f, "cannot use the passphrase file {}: ", shown(path))?;
                match problem {
                    PassphraseFileProblem::Missing => f.write_str("it does not exist"),
                    PassphraseFileProblem::NotRegular => f.write_str("it is not a regular file"),
                    PassphraseFileProblem::NotOwned { uid } => write!(
                        f,
                        "it is owned by uid {uid}, not by the user running the shim"
                    ),
                    PassphraseFileProblem::Accessible { mode } => write!(
                        f,
                        "it is accessible by group or others (mode {mode:04o}); fix it with: chmod 600 {}",
                        shown(path)
                    ),
                    PassphraseFileProblem::TooLarge => f.write_str("it is larger than 64 KiB"),
                    PassphraseFileProblem::Empty => f.write_str("it is empty"),
                    PassphraseFileProblem::Io(e) => write!(f, "{e}"),
                }
            }
            SecretError::Keychain { account, op, error } => {
                write!(f, "could not {op} the keychain entry {account}: {error}")
            }
            SecretError::KeychainReadBack => f.write_str(
                "the audit key just stored in the OS keychain reads back differently \
                 (another process may have created one at the same time); run the command again",
            ),
            SecretError::InsecurePermissions { node, path, mode } => {
                let (what, fix) = match node {
                    Node::Directory => ("directory", "700"),
                    Node::File => ("file", "600"),
                };
                write!(
                    f,
                    "the secret store {what} {} is accessible by group or others (mode {:04o}); \
                     refusing to use it; fix it with: chmod {fix} {}",
                    shown(path),
                    mode & 0o7777,
                    shown(path)
                )
            }
            SecretError::NotRegular { node, path } => match node {
                Node::Directory => write!(
                    f,
                    "the secret store path {} is not a directory",
                    shown(path)
                ),
                Node::File => write!(
                    f,
                    "{} is not a regular file (symbolic links are refused)",
                    shown(path)
                ),
            },
            SecretError::Io { step, path, source } => {
                write!(f, "could not {step} {}: {source}", shown(path))
            }
            SecretError::Lock { path, source } => {
                write!(f, "could not lock {}: {source}", shown(path))
            }
            SecretError::CorruptFile { path, problem } => write!(
                f,
                "{} is damaged ({problem}); it was left untouched",
                shown(path)
            ),
            SecretError::Undecryptable { path, passphrase } => write!(
                f,
                "cannot decrypt {}: the passphrase from {passphrase} is wrong or the file is damaged; \
                 the file was left untouched",
                shown(path),
            ),
            SecretError::BadPlaintext { path, problem } => write!(
                f,
                "{} decrypts, but {problem}; it was left untouched",
                shown(path)
            ),
            SecretError::CorruptAuditKey { location, problem } => {
                write!(
                    f,
                    "the stored audit key in {location} is corrupt ({problem}); it was left untouched. "
                )?;
                let removal = match location {
                    KeyLocation::Keychain => "Deleting that keychain entry".to_owned(),
                    KeyLocation::TokensFile(path) => format!(
                        "Deleting {} (which also drops the stored tokens)",
                        shown(path)
                    ),
                };
                write!(
                    f,
                    "{removal} makes the shim create a new key, {AFTER_NEW_KEY}"
                )
            }
            SecretError::CorruptLegacyKeyFile { path, problem } => write!(
                f,
                "the legacy audit key file {} cannot be read as a key ({problem}); it was left untouched. \
                 Moving it away makes the shim create a new key, {AFTER_NEW_KEY}",
                shown(path)
            ),
            SecretError::LegacyKeyMismatch { path } => write!(
                f,
                "the audit key recovered from the legacy file {} does not match the last record of \
                 the audit log (most likely the passphrase is not the one it was written with); nothing was imported",
                shown(path),
            ),
            SecretError::LegacyKeyCheckFailed { path, reason } => write!(
                f,
                "could not check the legacy audit key {} against the audit log: {}",
                shown(path),
                one_line(reason)
            ),
            SecretError::NoAuditKey { store } => write!(
                f,
                "no audit key is stored in {store}; it is created by `autogpt-shim start`"
            ),
            SecretError::Randomness => {
                f.write_str("the operating system's random number generator failed")
            }
            SecretError::FileStoreUnsupported => {
                f.write_str("the encrypted-file secret store is not available on this platform")
            }
            SecretError::Internal(what) => write!(f, "internal error in the secret store: {what}"),
        }
    }
}

impl std::error::Error for SecretError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SecretError::Io { source, .. } | SecretError::Lock { source, .. } => Some(source),
            SecretError::Keychain { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// The consequence of a new audit key, for the corrupt-key messages.
const AFTER_NEW_KEY: &str = "after which existing audit logs and root grants no longer verify";

pub(crate) use crate::text::shown;

pub(crate) use crate::text::one_line;
