//! A small client of the freedesktop.org Secret Service API over the
//! synchronous libdbus binding: one connection, one encrypted session
//! (`dh-ietf1024-sha256-aes128-cbc-pkcs7`), and the calls the keychain
//! makes (search, unlock, read, write, delete, create in the default
//! collection).
//!
//! Our own rather than a crate's because the one crate over libdbus drew
//! its Diffie-Hellman key from a non-cryptographic generator and spent
//! about 5 ms of every start in a bit-by-bit modular exponentiation. Here
//! the key comes from the OS generator and the exponentiation is
//! `num-bigint`'s.
//!
//! It must never open a session without encryption, pass a decrypted
//! secret through a buffer it does not wipe, or wait on the bus without a
//! deadline; a prompt, which waits for a person, waits only while the
//! Secret Service that showed it is still on the bus.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aes::Aes128;
use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use dbus::Path;
use dbus::arg::{PropMap, RefArg, Variant};
use dbus::blocking::stdintf::org_freedesktop_dbus::Properties;
use dbus::blocking::{Connection, Proxy};
use dbus::message::MatchRule;
use num_bigint::BigUint;
use sha2::Sha256;
use zeroize::Zeroizing;

const BUS_NAME: &str = "org.freedesktop.secrets";
const SERVICE_PATH: &str = "/org/freedesktop/secrets";
const SERVICE: &str = "org.freedesktop.Secret.Service";
const COLLECTION: &str = "org.freedesktop.Secret.Collection";
const ITEM: &str = "org.freedesktop.Secret.Item";
const PROMPT: &str = "org.freedesktop.Secret.Prompt";
const ALGORITHM: &str = "dh-ietf1024-sha256-aes128-cbc-pkcs7";

/// How long one call may take. A Secret Service started on demand by the
/// bus answers its first call only once it runs.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The Second Oakley Group of RFC 2409 (§6.2), which the algorithm names:
/// a 1024-bit safe prime; the generator is 2.
const PRIME_HEX: &[u8] = b"FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD1\
29024E088A67CC74020BBEA63B139B22514A08798E3404DD\
EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245\
E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED\
EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381\
FFFFFFFFFFFFFFFF";
const GROUP_BYTES: usize = 128;
/// The private exponent's length: 256 bits, more than twice the group's
/// 80-bit strength (the rule NIST SP 800-56A gives for the exponents of
/// safe-prime groups, whose own list starts at larger groups than this
/// one, which the algorithm fixes), and a quarter of the cost of a
/// full-length exponent.
const EXPONENT_BYTES: usize = 32;
const KEY_BYTES: usize = 16;
const IV_BYTES: usize = 16;

/// What went wrong talking to the Secret Service.
#[derive(Debug)]
pub enum SsError {
    /// The bus or the service failed the call: no bus, no service, a
    /// closed session, a refused call. `name: message` as D-Bus gave them.
    Bus(String),
    /// The session's cryptography failed: an unusable public key from the
    /// service, or a secret that does not decrypt.
    Crypto(&'static str),
    /// A locked item or collection stayed locked.
    Locked,
    /// The person dismissed the prompt.
    Dismissed,
    /// The service has no default collection to create an item in.
    NoDefaultCollection,
}

impl SsError {
    /// Whether the failure may lie with the connection or the session (the
    /// service restarted since they were opened) rather than with the
    /// service's answer: then a new connection may succeed.
    pub fn may_be_stale(&self) -> bool {
        matches!(self, SsError::Bus(_) | SsError::Crypto(_))
    }
}

impl fmt::Display for SsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SsError::Bus(message) => f.write_str(message),
            SsError::Crypto(what) => write!(f, "Secret Service session: {what}"),
            SsError::Locked => f.write_str("the keychain item or collection is locked"),
            SsError::Dismissed => f.write_str("the keychain's unlock prompt was dismissed"),
            SsError::NoDefaultCollection => f.write_str("the keychain has no default collection"),
        }
    }
}

impl From<dbus::Error> for SsError {
    fn from(e: dbus::Error) -> SsError {
        SsError::Bus(match (e.name(), e.message()) {
            (Some(name), Some(message)) => format!("{name}: {message}"),
            (Some(text), None) | (None, Some(text)) => text.to_owned(),
            (None, None) => "D-Bus call failed".to_owned(),
        })
    }
}

/// An item's or collection's object path.
pub type Object = Path<'static>;

/// A connection to the Secret Service with its encrypted session.
pub struct SecretService {
    connection: Connection,
    session: Object,
    key: Zeroizing<[u8; KEY_BYTES]>,
}

impl SecretService {
    /// Connects to the session bus and opens an encrypted session.
    pub fn connect() -> Result<SecretService, SsError> {
        let connection = Connection::new_session()?;
        let mut exponent = Zeroizing::new([0u8; EXPONENT_BYTES]);
        fill_random(exponent.as_mut_slice())?;
        let prime = BigUint::parse_bytes(PRIME_HEX, 16).ok_or(SsError::Crypto("group prime"))?;
        // The big numbers here (the exponent, the shared secret) cannot be
        // wiped, as num-bigint offers no way to, and its exponentiation
        // does not run in constant time. Both matter little for one
        // exchange per process with a local peer: they live only until the
        // session key is derived, and only that key is kept (wiped).
        let private = BigUint::from_bytes_be(exponent.as_slice());
        let public = BigUint::from(2u8).modpow(&private, &prime);
        let (output, session): (Variant<Vec<u8>>, Object) = service(&connection).method_call(
            SERVICE,
            "OpenSession",
            (ALGORITHM, Variant(padded(&public)?.to_vec())),
        )?;
        let theirs = BigUint::from_bytes_be(&output.0);
        // 0, 1 and p-1 would make the shared secret guessable.
        if theirs <= BigUint::from(1u8) || theirs >= &prime - 1u8 {
            return Err(SsError::Crypto("the service's public key is out of range"));
        }
        let shared = padded(&theirs.modpow(&private, &prime))?;
        let mut key = Zeroizing::new([0u8; KEY_BYTES]);
        hkdf::Hkdf::<Sha256>::new(None, shared.as_slice())
            .expand(&[], key.as_mut_slice())
            .map_err(|_| SsError::Crypto("key derivation"))?;
        Ok(SecretService {
            connection,
            session,
            key,
        })
    }

    /// Items whose attributes include all of `attributes`: those unlocked,
    /// then those locked.
    pub fn search(
        &self,
        attributes: &[(&str, &str)],
    ) -> Result<(Vec<Object>, Vec<Object>), SsError> {
        let attributes: HashMap<&str, &str> = attributes.iter().copied().collect();
        Ok(service(&self.connection).method_call(SERVICE, "SearchItems", (attributes,))?)
    }

    /// Unlocks `objects`, asking the person when the service prompts.
    pub fn unlock(&self, objects: &[Object]) -> Result<(), SsError> {
        let (unlocked, prompt): (Vec<Object>, Object) =
            service(&self.connection).method_call(SERVICE, "Unlock", (objects.to_vec(),))?;
        if !is_none(&prompt) {
            return self.prompt(prompt);
        }
        // Without a prompt, what is not unlocked now stays locked.
        if objects.iter().all(|object| unlocked.contains(object)) {
            Ok(())
        } else {
            Err(SsError::Locked)
        }
    }

    /// The secret an item holds, decrypted.
    pub fn secret(&self, item: &Object) -> Result<Zeroizing<Vec<u8>>, SsError> {
        let ((_, iv, value, _),): ((Object, Vec<u8>, Vec<u8>, String),) = self
            .proxy(item)
            .method_call(ITEM, "GetSecret", (self.session.clone(),))?;
        self.decrypt(&iv, &value)
    }

    /// Replaces an item's secret.
    pub fn set_secret(
        &self,
        item: &Object,
        value: &[u8],
        content_type: &str,
    ) -> Result<(), SsError> {
        let secret = self.encrypt(value, content_type)?;
        Ok(self.proxy(item).method_call(ITEM, "SetSecret", (secret,))?)
    }

    /// Deletes an item.
    pub fn delete(&self, item: &Object) -> Result<(), SsError> {
        let (prompt,): (Object,) = self.proxy(item).method_call(ITEM, "Delete", ())?;
        if !is_none(&prompt) {
            self.prompt(prompt)?;
        }
        Ok(())
    }

    /// The default collection, unlocked.
    pub fn default_collection(&self) -> Result<Object, SsError> {
        let (collection,): (Object,) =
            service(&self.connection).method_call(SERVICE, "ReadAlias", ("default",))?;
        if is_none(&collection) {
            return Err(SsError::NoDefaultCollection);
        }
        let locked: bool = self.proxy(&collection).get(COLLECTION, "Locked")?;
        if locked {
            self.unlock(std::slice::from_ref(&collection))?;
        }
        Ok(collection)
    }

    /// Creates an item in `collection`, replacing one with the same
    /// attributes.
    pub fn create_item(
        &self,
        collection: &Object,
        label: &str,
        attributes: &[(&str, &str)],
        value: &[u8],
        content_type: &str,
    ) -> Result<(), SsError> {
        let attributes: HashMap<String, String> = attributes
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut properties = PropMap::new();
        properties.insert(
            format!("{ITEM}.Label"),
            Variant(Box::new(label.to_owned()) as Box<dyn RefArg>),
        );
        properties.insert(
            format!("{ITEM}.Attributes"),
            Variant(Box::new(attributes) as Box<dyn RefArg>),
        );
        let secret = self.encrypt(value, content_type)?;
        let (_item, prompt): (Object, Object) = self.proxy(collection).method_call(
            COLLECTION,
            "CreateItem",
            (properties, secret, true),
        )?;
        if !is_none(&prompt) {
            self.prompt(prompt)?;
        }
        Ok(())
    }

    /// The unique bus name of the process that is the Secret Service now;
    /// `None` when there is none (or the bus cannot say).
    fn service_owner(&self) -> Option<String> {
        self.connection
            .with_proxy(
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                CALL_TIMEOUT,
            )
            .method_call("org.freedesktop.DBus", "GetNameOwner", (BUS_NAME,))
            .ok()
            .map(|(owner,): (String,)| owner)
    }

    fn proxy<'a>(&'a self, object: &'a Object) -> Proxy<'a, &'a Connection> {
        self.connection
            .with_proxy(BUS_NAME, object.clone(), CALL_TIMEOUT)
    }

    /// Shows a prompt and waits, without a deadline, for the person's
    /// answer (a prompt is a question to someone at the desktop), as long
    /// as the Secret Service that showed it stays on the bus.
    fn prompt(&self, prompt: Object) -> Result<(), SsError> {
        let answer: Arc<Mutex<Option<bool>>> = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&answer);
        // Listening first, so that the answer cannot come before it.
        let rule = MatchRule::new_signal(PROMPT, "Completed")
            .with_path(prompt.clone())
            .with_sender(BUS_NAME);
        let token =
            self.connection
                .add_match(rule, move |(): (), _, message: &dbus::Message| {
                    let dismissed = message.get1::<bool>().unwrap_or(true);
                    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(dismissed);
                    false
                })?;
        let owner = self.service_owner();
        let asked: Result<(), SsError> = self
            .proxy(&prompt)
            .method_call(PROMPT, "Prompt", ("",))
            .map_err(SsError::from);
        let outcome = asked.and_then(|()| {
            loop {
                if let Some(dismissed) = *answer.lock().unwrap_or_else(PoisonError::into_inner) {
                    break Ok(dismissed);
                }
                // A Secret Service that died (or was replaced) with its
                // prompt open would never answer, and this waits with the
                // keychain's lock held.
                if !self.connection.process(Duration::from_secs(1))?
                    && self.service_owner() != owner
                {
                    break Err(SsError::Bus(
                        "the Secret Service left the bus while its prompt was open".to_owned(),
                    ));
                }
            }
        });
        // The callback's `false` already removed a match that fired.
        let _ = self.connection.remove_match(token);
        match outcome? {
            true => Err(SsError::Dismissed),
            false => Ok(()),
        }
    }

    /// A secret as the session carries it: (session, IV, ciphertext,
    /// content type).
    fn encrypt(
        &self,
        value: &[u8],
        content_type: &str,
    ) -> Result<(Object, Vec<u8>, Vec<u8>, String), SsError> {
        let (iv, sealed) = seal(&self.key, value)?;
        Ok((
            self.session.clone(),
            iv.to_vec(),
            sealed,
            content_type.to_owned(),
        ))
    }

    fn decrypt(&self, iv: &[u8], sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, SsError> {
        open(&self.key, iv, sealed)
    }
}

/// AES-128-CBC with PKCS#7 padding under `key` and a fresh IV.
fn seal(key: &[u8; KEY_BYTES], value: &[u8]) -> Result<([u8; IV_BYTES], Vec<u8>), SsError> {
    let mut iv = [0u8; IV_BYTES];
    fill_random(&mut iv)?;
    let mut buffer = Zeroizing::new(vec![0u8; (value.len() / 16 + 1) * 16]);
    buffer[..value.len()].copy_from_slice(value);
    let sealed = cbc::Encryptor::<Aes128>::new(key.into(), (&iv).into())
        .encrypt_padded_mut::<Pkcs7>(&mut buffer, value.len())
        .map_err(|_| SsError::Crypto("encryption"))?
        .to_vec();
    Ok((iv, sealed))
}

/// The clear text of what [`seal`] made.
fn open(key: &[u8; KEY_BYTES], iv: &[u8], sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, SsError> {
    let iv: &[u8; IV_BYTES] = iv
        .try_into()
        .map_err(|_| SsError::Crypto("a secret's IV is not 16 bytes"))?;
    let mut buffer = Zeroizing::new(sealed.to_vec());
    let clear = cbc::Decryptor::<Aes128>::new(key.into(), iv.into())
        .decrypt_padded_mut::<Pkcs7>(&mut buffer)
        .map_err(|_| SsError::Crypto("a secret does not decrypt"))?
        .len();
    buffer.truncate(clear);
    Ok(buffer)
}

fn service(connection: &Connection) -> Proxy<'_, &Connection> {
    connection.with_proxy(BUS_NAME, SERVICE_PATH, CALL_TIMEOUT)
}

/// `/`: the API's "no object" (no prompt needed, no such alias).
fn is_none(object: &Object) -> bool {
    &**object == "/"
}

/// Fills `bytes` from the OS generator.
fn fill_random(bytes: &mut [u8]) -> Result<(), SsError> {
    getrandom::fill(bytes).map_err(|_| SsError::Crypto("no randomness from the OS"))
}

/// A group element as the algorithm writes it: big-endian, left-padded to
/// the group's 128 bytes.
fn padded(value: &BigUint) -> Result<Zeroizing<[u8; GROUP_BYTES]>, SsError> {
    let bytes = Zeroizing::new(value.to_bytes_be());
    let start = GROUP_BYTES
        .checked_sub(bytes.len())
        .ok_or(SsError::Crypto("a group element is longer than the group"))?;
    let mut out = Zeroizing::new([0u8; GROUP_BYTES]);
    out[start..].copy_from_slice(&bytes);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prime() -> BigUint {
        BigUint::parse_bytes(PRIME_HEX, 16).unwrap()
    }

    #[test]
    fn the_group_prime_is_the_1024_bit_oakley_prime() {
        let p = prime();
        assert_eq!(p.bits(), 1024);
        // A mistyped digit would fail these Fermat tests, for p and for
        // the Sophie Germain prime (p-1)/2 of a safe prime.
        let q = (&p - 1u8) >> 1;
        for base in [2u8, 3, 5, 7] {
            let base = BigUint::from(base);
            assert_eq!(base.modpow(&(&p - 1u8), &p), BigUint::from(1u8));
            assert_eq!(base.modpow(&(&q - 1u8), &q), BigUint::from(1u8));
        }
    }

    #[test]
    fn a_sealed_secret_opens_with_its_key_and_iv_only() {
        let key = [7u8; KEY_BYTES];
        for value in [&b""[..], b"sixteen bytes!!!", b"access-token-value"] {
            let (iv, sealed) = seal(&key, value).unwrap();
            assert_eq!(sealed.len() % 16, 0);
            if !value.is_empty() {
                assert_ne!(&sealed[..value.len()], value);
            }
            assert_eq!(open(&key, &iv, &sealed).unwrap().as_slice(), value);
        }
        let (iv, sealed) = seal(&key, b"secret").unwrap();
        assert!(open(&key, &iv[..8], &sealed).is_err());
        assert!(open(&key, &iv, &sealed[..8]).is_err());
        // Under another key the padding no longer checks out (or, rarely,
        // the text differs): never the secret.
        assert!(
            open(&[8u8; KEY_BYTES], &iv, &sealed)
                .map_or(true, |clear| clear.as_slice() != b"secret")
        );
    }

    #[test]
    fn group_elements_are_left_padded_to_128_bytes() {
        let small = padded(&BigUint::from(0x0102u16)).unwrap();
        assert_eq!(&small[..126], &[0u8; 126][..]);
        assert_eq!(&small[126..], &[1, 2]);
        assert!(padded(&(prime() << 8)).is_err());
    }
}
