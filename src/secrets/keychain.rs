//! The OS keychain backend (AUTH.md §9): three entries under service `autogpt-local-executor`, laid out so that items the
//! reference (Python `keyring`) created are found and items created here are
//! found by it.
//!
//! * Linux (and the BSDs): the Secret Service over D-Bus, through our own
//!   client on the synchronous libdbus binding (`secret_service`, no async
//!   runtime), with a Diffie-Hellman session and pure-Rust crypto, one
//!   connection per process. Items are looked up by the attributes `service`
//!   and `username` only.
//! * macOS (through the `keyring` crate): generic passwords (service,
//!   account) in the login keychain.
//! * Windows (through the `keyring` crate): generic credentials at target `autogpt-local-executor`, with
//!   the reference's `<account>@autogpt-local-executor` overflow targets and
//!   UTF-16LE blobs.
//!
//! This module owns only the keychain I/O. It must never print, never put a
//! secret into an error (errors carry the platform's message about the
//! *operation*), never delete `audit_key` on its own account, and never fall
//! back to another store: choosing the store is the caller's job (§8).

use std::fmt;

use super::secret::SecretString;
use crate::text::one_line;

/// The keychain service of all three entries.
pub const SERVICE: &str = "autogpt-local-executor";

/// The `application` attribute of Secret Service items created here (the
/// reference sets `Python keyring library`; lookups ignore it).
pub const APPLICATION: &str = "autogpt-shim";

/// The three entries (AUTH.md §9.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Account {
    /// `access_token`.
    AccessToken,
    /// `refresh_token`.
    RefreshToken,
    /// `audit_key`.
    AuditKey,
}

impl Account {
    /// The account (user name) of the entry.
    pub fn as_str(self) -> &'static str {
        match self {
            Account::AccessToken => "access_token",
            Account::RefreshToken => "refresh_token",
            Account::AuditKey => "audit_key",
        }
    }

    /// The label the reference gives its items (Secret Service).
    pub fn label(self) -> String {
        format!("Password for '{}' on '{SERVICE}'", self.as_str())
    }
}

impl fmt::Display for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What went wrong in a keychain operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeychainErrorKind {
    /// The platform store failed: no D-Bus session bus, no Secret Service on
    /// it, a D-Bus or OS error.
    Platform,
    /// The store refused access: a locked collection that could not be
    /// unlocked (prompt dismissed or impossible), access denied.
    NoAccess,
    /// Several items match the entry and hold different values, so none can
    /// be trusted to be the right one.
    Ambiguous,
    /// The stored bytes are not text (not UTF-8; on Windows neither UTF-16LE
    /// nor UTF-8).
    NotText,
    /// The `keyring` crate refused the entry's attributes (too long,
    /// invalid). Cannot happen with the fixed names used here.
    Invalid,
    /// No keychain backend is built for this platform.
    Unsupported,
}

/// A failed keychain operation. The detail is the platform's message about
/// the operation; it never contains a stored value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeychainError {
    kind: KeychainErrorKind,
    detail: String,
}

impl KeychainError {
    fn new(kind: KeychainErrorKind, detail: impl Into<String>) -> KeychainError {
        KeychainError {
            kind,
            detail: one_line(&detail.into()),
        }
    }

    /// The class of failure.
    pub fn kind(&self) -> KeychainErrorKind {
        self.kind
    }

    /// Whether the failure shows that the entry exists (the keychain works;
    /// its content is the problem). The probe of AUTH.md §8 counts these as
    /// usable.
    pub fn entry_exists(&self) -> bool {
        matches!(
            self.kind,
            KeychainErrorKind::Ambiguous | KeychainErrorKind::NotText
        )
    }
}

impl fmt::Display for KeychainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            KeychainErrorKind::Platform | KeychainErrorKind::Unsupported => {
                f.write_str(&self.detail)
            }
            KeychainErrorKind::NoAccess => write!(f, "access refused: {}", self.detail),
            KeychainErrorKind::Ambiguous => write!(
                f,
                "{} (remove the duplicates, e.g. with a keychain manager)",
                self.detail
            ),
            KeychainErrorKind::NotText => f.write_str(&self.detail),
            KeychainErrorKind::Invalid => write!(f, "invalid entry: {}", self.detail),
        }
    }
}

impl std::error::Error for KeychainError {}

/// Why the keychain cannot be used (the probe of AUTH.md §8 failed).
/// [`summary`](Self::summary) is what a person is told; `reason`, the
/// platform's own error text (often a D-Bus message), is for debug logs and
/// `doctor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeychainUnusable {
    /// What the probe found, e.g. `no Secret Service on the session bus`.
    pub reason: String,
}

impl KeychainUnusable {
    /// One plain line saying which keychain did not answer.
    pub fn summary(&self) -> &'static str {
        backend::UNAVAILABLE
    }
}

impl fmt::Display for KeychainUnusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A keychain that answered the probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keychain {
    backend: &'static str,
}

impl Keychain {
    /// Probes the keychain by reading `access_token` (AUTH.md §8): found and
    /// "no such entry" both mean usable, as do an ambiguous or non-text
    /// entry (the store answered); anything else means unusable.
    pub fn probe() -> Result<Keychain, KeychainUnusable> {
        match backend::get(Account::AccessToken) {
            Ok(_) => Ok(Keychain {
                backend: backend::NAME,
            }),
            Err(err) if err.entry_exists() => Ok(Keychain {
                backend: backend::NAME,
            }),
            Err(err) => Err(KeychainUnusable {
                reason: err.to_string(),
            }),
        }
    }

    /// The backend's name, e.g. `Secret Service (D-Bus)`, for `doctor`.
    pub fn backend_name(&self) -> &'static str {
        self.backend
    }

    /// Reads an entry; `None` when there is none or it is empty.
    pub fn get(&self, account: Account) -> Result<Option<SecretString>, KeychainError> {
        Ok(backend::get(account)?.filter(|secret| !secret.is_empty()))
    }

    /// Writes an entry, replacing what it held.
    pub fn set(&self, account: Account, value: &SecretString) -> Result<(), KeychainError> {
        backend::set(account, value)
    }

    /// Deletes an entry; a missing entry is not an error.
    pub fn delete(&self, account: Account) -> Result<(), KeychainError> {
        backend::delete(account)
    }
}

/// Maps a `keyring` error; `BadEncoding` and `Ambiguous` carry stored bytes
/// or items, so they are described here instead of formatted.
#[cfg(any(target_os = "macos", windows))]
fn from_keyring(account: Account, err: keyring::Error) -> KeychainError {
    use KeychainErrorKind as K;
    match err {
        keyring::Error::PlatformFailure(source) => {
            KeychainError::new(K::Platform, describe_platform_failure(&source.to_string()))
        }
        keyring::Error::NoStorageAccess(source) => {
            KeychainError::new(K::NoAccess, source.to_string())
        }
        keyring::Error::NoEntry => KeychainError::new(K::Platform, "no such entry"),
        keyring::Error::BadEncoding(_) => KeychainError::new(
            K::NotText,
            format!("the keychain entry {account} does not hold text"),
        ),
        keyring::Error::Ambiguous(items) => ambiguous(account, items.len()),
        keyring::Error::TooLong(name, limit) => KeychainError::new(
            K::Invalid,
            format!("attribute {name} is longer than the platform limit {limit}"),
        ),
        keyring::Error::Invalid(name, reason) => {
            KeychainError::new(K::Invalid, format!("attribute {name}: {reason}"))
        }
        other => KeychainError::new(K::Platform, other.to_string()),
    }
}

fn ambiguous(account: Account, count: usize) -> KeychainError {
    KeychainError::new(
        KeychainErrorKind::Ambiguous,
        format!(
            "{count} keychain items match service {SERVICE}, account {account}, and their values differ"
        ),
    )
}

/// Adds what a D-Bus failure usually means to the raw message.
fn describe_platform_failure(message: &str) -> String {
    if message.contains("org.freedesktop.DBus.Error.ServiceUnknown")
        || message.contains("org.freedesktop.secrets was not provided")
    {
        format!("no Secret Service on the session bus ({message})")
    } else if message.contains("DBUS_SESSION_BUS_ADDRESS")
        || message.contains("autolaunch")
        || message.contains("org.freedesktop.DBus.Error.NotSupported")
    {
        format!("no D-Bus session bus ({message})")
    } else {
        message.to_owned()
    }
}

/// Secret Service (D-Bus): lookups by `service` + `username` only, over one
/// connection per process.
#[cfg(any(target_os = "linux", target_os = "freebsd", target_os = "openbsd"))]
mod backend {
    use std::sync::{Mutex, PoisonError};

    use zeroize::Zeroizing;

    use super::{
        APPLICATION, Account, KeychainError, KeychainErrorKind, SERVICE, ambiguous,
        describe_platform_failure,
    };
    use crate::secrets::secret::SecretString;
    use crate::secrets::secret_service::{Object, SecretService, SsError};

    pub(super) const NAME: &str = "Secret Service (D-Bus)";
    pub(super) const UNAVAILABLE: &str =
        "no Secret Service (GNOME Keyring, KWallet, ...) answers on the D-Bus session bus";

    /// The MIME type of every secret written here (the reference's too).
    const CONTENT_TYPE: &str = "text/plain";

    /// The process's connection to the Secret Service. Opening one is most of
    /// a lookup's cost (a D-Bus handshake, then a Diffie-Hellman exchange so
    /// that secrets never cross the bus in clear), and start-up alone makes
    /// four lookups. The lock also keeps one operation at a time on it.
    static CONNECTION: Mutex<Option<SecretService>> = Mutex::new(None);

    /// Runs `op` on the process's connection, opening one when there is
    /// none. A kept connection can have gone stale (the bus or the Secret
    /// Service restarted since, closing our session): when it fails with a
    /// D-Bus or crypto error, `op` runs once more on a new connection. Every
    /// `op` here searches before it acts, so running it again converges on the
    /// same result instead of repeating a change.
    fn with_service<T>(
        op: impl Fn(&SecretService) -> Result<T, SsError>,
    ) -> Result<T, KeychainError> {
        let mut slot = CONNECTION.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(service) = slot.take() {
            match op(&service) {
                Err(err) if err.may_be_stale() => {}
                answered => {
                    *slot = Some(service);
                    return answered.map_err(from_secret_service);
                }
            }
        }
        let service = SecretService::connect().map_err(from_secret_service)?;
        let result = op(&service);
        if !matches!(&result, Err(err) if err.may_be_stale()) {
            *slot = Some(service);
        }
        result.map_err(from_secret_service)
    }

    fn from_secret_service(err: SsError) -> KeychainError {
        match err {
            // A locked collection or item that stayed locked, a dismissed
            // prompt, no collection to write to.
            SsError::Locked | SsError::Dismissed | SsError::NoDefaultCollection => {
                KeychainError::new(KeychainErrorKind::NoAccess, err.to_string())
            }
            other => KeychainError::new(
                KeychainErrorKind::Platform,
                describe_platform_failure(&other.to_string()),
            ),
        }
    }

    /// Every item with our `service` and `username`, in any collection,
    /// unlocked (one unlock request for all that are locked, which may
    /// prompt). No `target` attribute in the search: the reference's items
    /// have none, ours have `target = default`.
    fn matching(service: &SecretService, account: Account) -> Result<Vec<Object>, SsError> {
        let (mut items, locked) =
            service.search(&[("service", SERVICE), ("username", account.as_str())])?;
        if !locked.is_empty() {
            service.unlock(&locked)?;
        }
        items.extend(locked);
        Ok(items)
    }

    /// What an item holds; `None` when it is not text. The decrypted bytes
    /// are wiped whichever way it goes.
    fn secret_of(service: &SecretService, item: &Object) -> Result<Option<SecretString>, SsError> {
        let bytes: Zeroizing<Vec<u8>> = service.secret(item)?;
        Ok(std::str::from_utf8(&bytes)
            .ok()
            .map(|text| SecretString::new(text.to_owned())))
    }

    pub(super) fn get(account: Account) -> Result<Option<SecretString>, KeychainError> {
        let values = with_service(|service| {
            matching(service, account)?
                .iter()
                .map(|item| secret_of(service, item))
                .collect::<Result<Vec<_>, SsError>>()
        })?;
        let Some(values) = values.into_iter().collect::<Option<Vec<_>>>() else {
            return Err(KeychainError::new(
                KeychainErrorKind::NotText,
                format!("the keychain entry {account} does not hold text"),
            ));
        };
        match values.split_first() {
            None => Ok(None),
            // Duplicates happen when two programs each created an item
            // (e.g. the reference after this shim). Identical values are
            // harmless; differing ones cannot be resolved safely.
            Some((first, rest)) if rest.iter().all(|value| value == first) => {
                Ok(Some(first.clone()))
            }
            Some(_) => Err(ambiguous(account, values.len())),
        }
    }

    pub(super) fn set(account: Account, value: &SecretString) -> Result<(), KeychainError> {
        with_service(|service| {
            let items = matching(service, account)?;
            if let [only] = items.as_slice() {
                // Update the existing item in place (also one the reference
                // made), so no duplicate appears.
                return service.set_secret(only, value.expose().as_bytes(), CONTENT_TYPE);
            }
            // A write replaces the value; leaving several items behind
            // would make every later read ambiguous.
            for item in &items {
                service.delete(item)?;
            }
            create(service, account, value)
        })
    }

    /// Creates an item in the default collection with `service`,
    /// `username` and `target = default` (the attributes of the `keyring`
    /// libraries), our `application`, and the reference's label.
    fn create(
        service: &SecretService,
        account: Account,
        value: &SecretString,
    ) -> Result<(), SsError> {
        let collection = service.default_collection()?;
        service.create_item(
            &collection,
            &account.label(),
            &[
                ("service", SERVICE),
                ("username", account.as_str()),
                ("target", "default"),
                ("application", APPLICATION),
            ],
            value.expose().as_bytes(),
            CONTENT_TYPE,
        )
    }

    pub(super) fn delete(account: Account) -> Result<(), KeychainError> {
        // Every match: a duplicate left behind would resurrect the value.
        with_service(|service| {
            for item in matching(service, account)? {
                service.delete(&item)?;
            }
            Ok(())
        })
    }
}

/// macOS Keychain Services: generic password (service, account) in the
/// user's default keychain.
#[cfg(target_os = "macos")]
mod backend {
    use keyring::credential::CredentialApi;
    use keyring::macos::MacCredential;

    use super::{Account, KeychainError, SERVICE, from_keyring};
    use crate::secrets::secret::SecretString;

    pub(super) const NAME: &str = "macOS Keychain";
    pub(super) const UNAVAILABLE: &str = "the macOS login keychain does not answer";

    fn entry(account: Account) -> Result<MacCredential, KeychainError> {
        // No target: the user (login) keychain, where the reference writes.
        MacCredential::new_with_target(None, SERVICE, account.as_str())
            .map_err(|err| from_keyring(account, err))
    }

    pub(super) fn get(account: Account) -> Result<Option<SecretString>, KeychainError> {
        match entry(account)?.get_password() {
            Ok(value) => Ok(Some(SecretString::new(value))),
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(err) => Err(from_keyring(account, err)),
        }
    }

    pub(super) fn set(account: Account, value: &SecretString) -> Result<(), KeychainError> {
        entry(account)?
            .set_password(value.expose())
            .map_err(|err| from_keyring(account, err))
    }

    pub(super) fn delete(account: Account) -> Result<(), KeychainError> {
        match entry(account)?.delete_credential() {
            Ok(()) | Err(keyring::Error::NoEntry) => Ok(()),
            Err(err) => Err(from_keyring(account, err)),
        }
    }
}

/// Windows Credential Manager with the reference's layout (AUTH.md §9.2):
/// the service name as target, `<account>@<service>` for accounts displaced
/// from it, UTF-16LE blobs, enterprise persistence.
#[cfg(windows)]
mod backend {
    use keyring::credential::CredentialApi;
    use keyring::windows::WinCredential;
    use zeroize::Zeroizing;

    use super::{Account, KeychainError, KeychainErrorKind, SERVICE, from_keyring};
    use crate::secrets::secret::SecretString;

    pub(super) const NAME: &str = "Windows Credential Manager";
    pub(super) const UNAVAILABLE: &str = "the Windows Credential Manager does not answer";

    /// A credential at an explicit target name (the crate's default naming
    /// is `<user>.<service>`, which the reference never reads).
    fn at(target: &str, user: &str) -> WinCredential {
        WinCredential {
            username: user.to_owned(),
            target_name: target.to_owned(),
            target_alias: String::new(),
            comment: String::new(),
        }
    }

    fn overflow_target(user: &str) -> String {
        format!("{user}@{SERVICE}")
    }

    /// The user name stored at `target`, `None` when there is no credential.
    fn owner(account: Account, target: &str) -> Result<Option<WinCredential>, KeychainError> {
        match at(target, account.as_str()).get_credential() {
            Ok(found) => Ok(Some(found)),
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(err) => Err(from_keyring(account, err)),
        }
    }

    fn secret_at(account: Account, target: &str) -> Result<Zeroizing<Vec<u8>>, KeychainError> {
        at(target, account.as_str())
            .get_secret()
            .map(Zeroizing::new)
            .map_err(|err| from_keyring(account, err))
    }

    /// UTF-16LE as the reference writes; UTF-8 when that fails.
    fn decode(account: Account, blob: &[u8]) -> Result<SecretString, KeychainError> {
        if blob.len() % 2 == 0 {
            let units: Zeroizing<Vec<u16>> = Zeroizing::new(
                blob.chunks_exact(2)
                    .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
                    .collect(),
            );
            if let Ok(text) = String::from_utf16(&units) {
                return Ok(SecretString::new(text));
            }
        }
        match std::str::from_utf8(blob) {
            Ok(text) => Ok(SecretString::from(text)),
            Err(_) => Err(KeychainError::new(
                KeychainErrorKind::NotText,
                format!("the credential for {account} does not hold text"),
            )),
        }
    }

    pub(super) fn get(account: Account) -> Result<Option<SecretString>, KeychainError> {
        for target in [SERVICE.to_owned(), overflow_target(account.as_str())] {
            if let Some(found) = owner(account, &target)? {
                if found.username == account.as_str() {
                    let blob = secret_at(account, &target)?;
                    return decode(account, &blob).map(Some);
                }
            }
        }
        Ok(None)
    }

    pub(super) fn set(account: Account, value: &SecretString) -> Result<(), KeychainError> {
        if let Some(found) = owner(account, SERVICE)? {
            if found.username != account.as_str() {
                // Move the other account's credential out of the way, as
                // the reference does, so that it can still find it.
                let blob = secret_at(account, SERVICE)?;
                let moved = WinCredential {
                    target_name: overflow_target(&found.username),
                    ..found
                };
                moved
                    .set_secret(&blob)
                    .map_err(|err| from_keyring(account, err))?;
            }
        }
        at(SERVICE, account.as_str())
            .set_password(value.expose())
            .map_err(|err| from_keyring(account, err))
    }

    pub(super) fn delete(account: Account) -> Result<(), KeychainError> {
        for target in [SERVICE.to_owned(), overflow_target(account.as_str())] {
            if let Some(found) = owner(account, &target)? {
                if found.username == account.as_str() {
                    match at(&target, account.as_str()).delete_credential() {
                        Ok(()) | Err(keyring::Error::NoEntry) => {}
                        Err(err) => return Err(from_keyring(account, err)),
                    }
                }
            }
        }
        Ok(())
    }
}

/// No keychain backend on this platform: the probe reports it unusable.
#[cfg(not(any(
    target_os = "linux",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "macos",
    windows
)))]
mod backend {
    use super::{Account, KeychainError, KeychainErrorKind};
    use crate::secrets::secret::SecretString;

    pub(super) const NAME: &str = "none";
    pub(super) const UNAVAILABLE: &str = "this system has no keychain the shim supports";

    fn unsupported() -> KeychainError {
        KeychainError::new(
            KeychainErrorKind::Unsupported,
            "no OS keychain backend is built for this platform",
        )
    }

    pub(super) fn get(_account: Account) -> Result<Option<SecretString>, KeychainError> {
        Err(unsupported())
    }

    pub(super) fn set(_account: Account, _value: &SecretString) -> Result<(), KeychainError> {
        Err(unsupported())
    }

    pub(super) fn delete(_account: Account) -> Result<(), KeychainError> {
        Err(unsupported())
    }
}
