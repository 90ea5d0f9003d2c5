//! The secret store (AUTH.md §8–§10, AUDIT.md §7): the OAuth tokens and the
//! audit key, kept in the OS keychain or, when the keychain cannot be used,
//! in the passphrase-encrypted file `tokens.enc`.
//!
//! * `secret` — zeroizing holders: [`SecretString`], [`Passphrase`].
//! * `passphrase` — where the passphrase comes from (file, systemd
//!   credential, environment) and taking it out of the environment.
//! * `keychain` — the OS keychain: the Secret Service on Linux, `keyring`
//!   elsewhere.
//! * [`container`] — the byte format of `tokens.enc` (sans-IO).
//! * `file` — `tokens.enc` on disk: permissions, lock, atomic rewrite.
//! * `legacy` — the reference's `audit-key.enc`, read for import only.
//! * `audit_key` — when a stored key text is valid; key generation.
//! * `error` — [`SecretError`] and its exit-code class.
//!
//! [`SecretStore::select`] probes the keychain once and picks the backend for
//! all three secrets. This module must never print (the fallback warning is
//! returned to the caller), never switch backends after selection, never
//! replace or delete a stored audit key, never overwrite a `tokens.enc` it
//! cannot decrypt, and never put a secret into a message or `Debug` output.

mod audit_key;
// Public as a module, not re-exported: `open` and `seal` read right only
// with `container::` in front.
pub mod container;
mod error;
mod file;
mod keychain;
mod legacy;
pub(crate) mod passphrase;
mod secret;
#[cfg(any(target_os = "linux", target_os = "freebsd", target_os = "openbsd"))]
mod secret_service;

use std::path::{Path, PathBuf};

/// Where the audit key is and whether a stored key text is valid.
pub use audit_key::{KeyCheck, KeyLocation, KeyOrigin, KeyProblem};
/// What went wrong with a secret, and its exit-code class.
pub use error::{ErrorClass, IoStep, KeychainOp, Node, PassphraseFileProblem, SecretError};
/// `tokens.enc` on disk.
pub use file::TokenFile;
/// The OS keychain.
pub use keychain::{Account, Keychain, KeychainError, KeychainErrorKind, KeychainUnusable};
/// The reference's `audit-key.enc`, read for import only.
pub use legacy::{LegacyKeyFile, LegacyProblem};
/// Zeroizing holders of secrets.
pub use secret::{Passphrase, PassphraseOrigin, SecretString};

use crate::audit::AuditKey;
use crate::config::{Environment, OsPaths};

/// The lock that serialises creating the audit key in the keychain (two
/// `start`s racing on a first run must not each store a different key).
const KEYCHAIN_CREATION_LOCK: &str = "audit-key.lock";

/// Which backend a store uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// The OS keychain.
    Keychain,
    /// The encrypted file `tokens.enc`.
    File,
}

#[derive(Debug)]
enum Backend {
    Keychain(Keychain),
    File(TokenFile),
}

/// The selected secret store. Build it once per process with
/// [`select`](Self::select) (AUTH.md §8).
#[derive(Debug)]
pub struct SecretStore {
    backend: Backend,
    /// The reference's `audit-key.enc` (file store only).
    legacy_key_file: PathBuf,
    /// Where the keychain's key-creation lock lives.
    lock_dir: PathBuf,
}

/// The result of store selection.
#[derive(Debug)]
pub struct Selected {
    /// The store to use for all three secrets.
    pub store: SecretStore,
    /// A one-line warning for stderr when the encrypted-file fallback is in
    /// use; `None` with the keychain.
    pub warning: Option<String>,
    /// Why the keychain was passed over, in the platform's own words, for a
    /// debug log line; `None` with the keychain.
    pub keychain_detail: Option<String>,
}

/// Asks the person at a terminal for the passphrase of `tokens.enc` (the
/// path given) when no other source has one; `new` says the file does not
/// exist yet, so the passphrase is being chosen. `Ok(None)`: nobody to ask.
pub type AskPassphrase<'a> = &'a dyn Fn(&Path, bool) -> Result<Option<Passphrase>, SecretError>;

/// Both tokens, read at once (one decryption with the file store).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    /// The access token, if stored.
    pub access: Option<SecretString>,
    /// The refresh token, if stored.
    pub refresh: Option<SecretString>,
}

impl SecretStore {
    /// Probes the keychain (one read of `access_token`) and selects the
    /// store: the keychain when it answers, else `tokens.enc` with the
    /// passphrase from its file, the systemd credential or
    /// `AUTOGPT_SHIM_KEYCHAIN_PASSPHRASE` (`passphrase`).
    pub fn select(paths: &OsPaths, env: &Environment) -> Result<Selected, SecretError> {
        SecretStore::select_with(Keychain::probe(), paths, env)
    }

    /// [`select`](Self::select) with the probe's result supplied (the probe
    /// is [`Keychain::probe`]; `doctor` runs it itself, tests inject it).
    pub fn select_with(
        probe: Result<Keychain, KeychainUnusable>,
        paths: &OsPaths,
        env: &Environment,
    ) -> Result<Selected, SecretError> {
        SecretStore::select_asking(probe, paths, env, None)
    }

    /// [`select_with`](Self::select_with), asking with `ask` for the
    /// passphrase when the file store is needed and no file, credential or
    /// variable gives one (`auth` and `start` on a terminal).
    pub fn select_asking(
        probe: Result<Keychain, KeychainUnusable>,
        paths: &OsPaths,
        env: &Environment,
        ask: Option<AskPassphrase<'_>>,
    ) -> Result<Selected, SecretError> {
        let unusable = match probe {
            Ok(keychain) => {
                return Ok(Selected {
                    store: SecretStore::with_keychain(keychain, paths),
                    warning: None,
                    keychain_detail: None,
                });
            }
            Err(unusable) => unusable,
        };
        let dir = &paths.secret_store_dir;
        let passphrase = match (passphrase::resolve(env)?, ask) {
            (Some(passphrase), _) => Some(passphrase),
            (None, Some(ask)) => ask(&dir.join(file::FILE_NAME), !TokenFile::present(dir))?,
            (None, None) => None,
        };
        let Some(passphrase) = passphrase else {
            return Err(SecretError::NoPassphrase { keychain: unusable });
        };
        let file = TokenFile::new(paths.secret_store_dir.clone(), passphrase);
        let warning = format!(
            "warning: the OS keychain is unavailable ({}); using the encrypted file store {}",
            unusable.summary(),
            error::shown(&file.path())
        );
        Ok(Selected {
            store: SecretStore::with_file(file, paths.legacy_audit_key_file.clone()),
            warning: Some(warning),
            keychain_detail: Some(error::one_line(&unusable.reason)),
        })
    }

    /// A store on the keychain (no probe).
    pub fn with_keychain(keychain: Keychain, paths: &OsPaths) -> SecretStore {
        SecretStore {
            backend: Backend::Keychain(keychain),
            legacy_key_file: paths.legacy_audit_key_file.clone(),
            lock_dir: paths.secret_store_dir.clone(),
        }
    }

    /// A store on `tokens.enc`, importing the audit key from
    /// `legacy_key_file` when it has none (AUDIT.md §7.4).
    pub fn with_file(file: TokenFile, legacy_key_file: PathBuf) -> SecretStore {
        let lock_dir = file.dir().to_path_buf();
        SecretStore {
            backend: Backend::File(file),
            legacy_key_file,
            lock_dir,
        }
    }

    /// The backend in use.
    pub fn kind(&self) -> StoreKind {
        match self.backend {
            Backend::Keychain(_) => StoreKind::Keychain,
            Backend::File(_) => StoreKind::File,
        }
    }

    /// Where secrets are stored, for messages (`auth` reports it): `the OS
    /// keychain (<backend>)` or `the encrypted file <path>`.
    pub fn location(&self) -> String {
        match &self.backend {
            Backend::Keychain(keychain) => {
                format!("the OS keychain ({})", keychain.backend_name())
            }
            Backend::File(file) => {
                format!("the encrypted file {}", error::shown(&file.path()))
            }
        }
    }

    /// The stored access token.
    pub fn access_token(&self) -> Result<Option<SecretString>, SecretError> {
        match &self.backend {
            Backend::Keychain(keychain) => keychain_get(keychain, Account::AccessToken),
            Backend::File(file) => Ok(file.read()?.access_token),
        }
    }

    /// The stored refresh token.
    pub fn refresh_token(&self) -> Result<Option<SecretString>, SecretError> {
        match &self.backend {
            Backend::Keychain(keychain) => keychain_get(keychain, Account::RefreshToken),
            Backend::File(file) => Ok(file.read()?.refresh_token),
        }
    }

    /// Both tokens (`revoke` needs both; one decryption with the file
    /// store).
    pub fn tokens(&self) -> Result<Tokens, SecretError> {
        match &self.backend {
            Backend::Keychain(keychain) => Ok(Tokens {
                access: keychain_get(keychain, Account::AccessToken)?,
                refresh: keychain_get(keychain, Account::RefreshToken)?,
            }),
            Backend::File(file) => {
                let contents = file.read()?;
                Ok(Tokens {
                    access: contents.access_token,
                    refresh: contents.refresh_token,
                })
            }
        }
    }

    /// Stores both tokens, replacing what was stored: refresh token first,
    /// then access token (AUTH.md §9.3), so a crash in between leaves a
    /// usable refresh token. The file store writes both in one atomic
    /// rewrite.
    pub fn store_tokens(
        &self,
        refresh: &SecretString,
        access: &SecretString,
    ) -> Result<(), SecretError> {
        match &self.backend {
            Backend::Keychain(keychain) => {
                keychain_set(keychain, Account::RefreshToken, refresh)?;
                keychain_set(keychain, Account::AccessToken, access)
            }
            Backend::File(file) => file.update(|contents| {
                contents.refresh_token = Some(refresh.clone());
                contents.access_token = Some(access.clone());
                Ok(((), true))
            }),
        }
    }

    /// Deletes both tokens (`revoke`); nothing stored is not an error. The
    /// audit key is kept, and so is `tokens.enc`.
    pub fn clear_tokens(&self) -> Result<(), SecretError> {
        match &self.backend {
            Backend::Keychain(keychain) => {
                keychain_delete(keychain, Account::AccessToken)?;
                keychain_delete(keychain, Account::RefreshToken)
            }
            Backend::File(file) => {
                // Read first, so that clearing an empty store creates neither
                // the directory nor the file.
                let current = file.read()?;
                if current.access_token.is_none() && current.refresh_token.is_none() {
                    return Ok(());
                }
                file.update(|contents| {
                    let changed =
                        contents.access_token.is_some() || contents.refresh_token.is_some();
                    contents.access_token = None;
                    contents.refresh_token = None;
                    Ok(((), changed))
                })
            }
        }
    }

    /// The audit key for `start`: the stored key; when none is stored, with
    /// the file store the reference's legacy key if `check` accepts it
    /// (imported into `tokens.enc`), else a new 32-byte key, stored as
    /// lowercase hex. A stored value that is not a valid key is an error
    /// naming where it is stored; it is never replaced (AUDIT.md §7.2).
    ///
    /// `check` verifies a recovered legacy key against the last complete
    /// record of the current audit log; it is called only for that import.
    pub fn audit_key_for_start(
        &self,
        check: &mut dyn FnMut(&AuditKey) -> KeyCheck,
    ) -> Result<(AuditKey, KeyOrigin), SecretError> {
        self.secrets_for_start(check)
            .map(|(key, origin, _)| (key, origin))
    }

    /// [`audit_key_for_start`](Self::audit_key_for_start) and the stored
    /// tokens together: with the file store one decryption serves both,
    /// which is most of the daemon's start-up time.
    pub fn secrets_for_start(
        &self,
        check: &mut dyn FnMut(&AuditKey) -> KeyCheck,
    ) -> Result<(AuditKey, KeyOrigin, Tokens), SecretError> {
        match &self.backend {
            Backend::Keychain(keychain) => {
                let (key, origin) = self.keychain_key_for_start(keychain)?;
                Ok((key, origin, self.tokens()?))
            }
            Backend::File(file) => self.file_key_for_start(file, check),
        }
    }

    /// The audit key for the read-only commands (`audit verify`,
    /// `verify-all`, `export`, `rotate`): never creates or stores one. With
    /// the file store and no key in `tokens.enc`, the legacy file's key is
    /// used (not imported) when `check` accepts it.
    pub fn audit_key_read_only(
        &self,
        check: &mut dyn FnMut(&AuditKey) -> KeyCheck,
    ) -> Result<AuditKey, SecretError> {
        match &self.backend {
            Backend::Keychain(keychain) => match keychain_get(keychain, Account::AuditKey)? {
                Some(text) => parse_key(&text, KeyLocation::Keychain),
                None => Err(SecretError::NoAuditKey {
                    store: KeyLocation::Keychain.to_string(),
                }),
            },
            Backend::File(file) => {
                let location = KeyLocation::TokensFile(file.path());
                if let Some(text) = file.read()?.audit_key {
                    return parse_key(&text, location);
                }
                match self.legacy_key(file.passphrase(), check)? {
                    Some((key, _text)) => Ok(key),
                    None => Err(SecretError::NoAuditKey {
                        store: error::shown(&file.path()),
                    }),
                }
            }
        }
    }

    fn keychain_key_for_start(
        &self,
        keychain: &Keychain,
    ) -> Result<(AuditKey, KeyOrigin), SecretError> {
        if let Some(text) = keychain_get(keychain, Account::AuditKey)? {
            return Ok((parse_key(&text, KeyLocation::Keychain)?, KeyOrigin::Stored));
        }
        let _lock = file::creation_lock(&self.lock_dir, KEYCHAIN_CREATION_LOCK)?;
        // Another process may have created it while this one waited.
        if let Some(text) = keychain_get(keychain, Account::AuditKey)? {
            return Ok((parse_key(&text, KeyLocation::Keychain)?, KeyOrigin::Stored));
        }
        let (key, text) = audit_key::generate()?;
        keychain_set(keychain, Account::AuditKey, &text)?;
        // Read back: a keychain that silently dropped the write, or a writer
        // that does not honour the lock (another program), must not leave
        // this process logging under a key that is not the stored one.
        match keychain_get(keychain, Account::AuditKey)? {
            Some(stored) if stored == text => Ok((key, KeyOrigin::Created)),
            _ => Err(SecretError::KeychainReadBack),
        }
    }

    fn file_key_for_start(
        &self,
        file: &TokenFile,
        check: &mut dyn FnMut(&AuditKey) -> KeyCheck,
    ) -> Result<(AuditKey, KeyOrigin, Tokens), SecretError> {
        let location = KeyLocation::TokensFile(file.path());
        // The common case needs no lock: the key is there.
        let contents = file.read()?;
        if let Some(text) = &contents.audit_key {
            let tokens = Tokens {
                access: contents.access_token,
                refresh: contents.refresh_token,
            };
            return Ok((parse_key(text, location)?, KeyOrigin::Stored, tokens));
        }
        file.update(|contents| {
            let tokens = Tokens {
                access: contents.access_token.clone(),
                refresh: contents.refresh_token.clone(),
            };
            // Re-checked under the lock: another process may have stored one.
            if let Some(text) = &contents.audit_key {
                return Ok((
                    (parse_key(text, location)?, KeyOrigin::Stored, tokens),
                    false,
                ));
            }
            let (key, text, origin) = match self.legacy_key(file.passphrase(), check)? {
                Some((key, text)) => (key, text, KeyOrigin::ImportedLegacy),
                None => {
                    let (key, text) = audit_key::generate()?;
                    (key, text, KeyOrigin::Created)
                }
            };
            contents.audit_key = Some(text);
            Ok(((key, origin, tokens), true))
        })
    }

    /// The reference's legacy key, when its file exists and `check` accepts
    /// the key it decrypts to (AUDIT.md §7.4). Returns the key and its
    /// stored text (lowercase hex).
    fn legacy_key(
        &self,
        passphrase: &Passphrase,
        check: &mut dyn FnMut(&AuditKey) -> KeyCheck,
    ) -> Result<Option<(AuditKey, SecretString)>, SecretError> {
        let path = &self.legacy_key_file;
        let Some(content) = file::read_foreign(path, legacy::MAX_LEN)? else {
            return Ok(None);
        };
        let parsed = LegacyKeyFile::parse(&content).map_err(|problem| {
            SecretError::CorruptLegacyKeyFile {
                path: path.clone(),
                problem,
            }
        })?;
        let bytes = parsed.decrypt(passphrase);
        let text = audit_key::stored_text(&bytes);
        // Always 32 bytes, so always a valid key.
        let key = audit_key::into_key(bytes).ok_or(SecretError::Internal(
            "a legacy key decrypted to fewer than 16 bytes",
        ))?;
        match check(&key) {
            KeyCheck::NoRecords | KeyCheck::Verified => Ok(Some((key, text))),
            KeyCheck::Mismatch => Err(SecretError::LegacyKeyMismatch { path: path.clone() }),
            KeyCheck::Failed(reason) => Err(SecretError::LegacyKeyCheckFailed {
                path: path.clone(),
                reason,
            }),
        }
    }
}

/// Whether a `tokens.enc` exists in the store directory of `paths` (for
/// `doctor`'s warning next to a usable keychain).
pub fn file_store_present(paths: &OsPaths) -> bool {
    TokenFile::present(&paths.secret_store_dir)
}

fn parse_key(text: &SecretString, location: KeyLocation) -> Result<AuditKey, SecretError> {
    audit_key::parse_stored(text)
        .map_err(|problem| SecretError::CorruptAuditKey { location, problem })
}

fn keychain_get(
    keychain: &Keychain,
    account: Account,
) -> Result<Option<SecretString>, SecretError> {
    keychain
        .get(account)
        .map_err(|error| SecretError::Keychain {
            account,
            op: KeychainOp::Read,
            error,
        })
}

fn keychain_set(
    keychain: &Keychain,
    account: Account,
    value: &SecretString,
) -> Result<(), SecretError> {
    keychain
        .set(account, value)
        .map_err(|error| SecretError::Keychain {
            account,
            op: KeychainOp::Write,
            error,
        })
}

fn keychain_delete(keychain: &Keychain, account: Account) -> Result<(), SecretError> {
    keychain
        .delete(account)
        .map_err(|error| SecretError::Keychain {
            account,
            op: KeychainOp::Delete,
            error,
        })
}
