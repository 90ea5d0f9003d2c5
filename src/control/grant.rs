//! The filesystem fingerprint and the root-grant token (CONTROL.md §6–§7),
//! byte for byte as the specification fixes them: the grant key derived
//! from the audit key, the claims JSON with sorted keys and ASCII-only
//! escaping, `v1.<claims>.<signature>` in unpadded base64url, and the
//! verification steps 1–9 that need no filesystem.
//!
//! This module is pure: the live folder's checks (steps 10–11a) are the
//! caller's, through [`super::folder`]. It never logs a token or a key, and
//! it compares signatures in constant time only.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::audit::AuditKey;
use crate::audit::canonical::repr_f64;

type HmacSha256 = Hmac<Sha256>;

/// The label the grant key is derived with (§7.1).
pub const GRANT_KEY_LABEL: &[u8] = b"autogpt-root-grant-v1";

/// A JSON string with Python's default `json.dumps` escaping: ASCII only,
/// lowercase `\uXXXX`, UTF-16 surrogate pairs above U+FFFF (§6 `jstr`).
pub fn jstr(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            other => {
                let mut units = [0u16; 2];
                for unit in other.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// `fingerprint(p)` of §6 from the folder's device, inode and canonical
/// path string (already `normcase`d by the caller where the OS needs it).
/// `device` is a decimal string because macOS prints a signed value.
pub fn fingerprint(device: &str, inode: u64, path: &str) -> String {
    let text = format!(
        "{{\"device\":{device},\"inode\":{inode},\"path\":{}}}",
        jstr(path)
    );
    crate::audit::record::hex(&Sha256::digest(text.as_bytes()))
}

/// The folder identity beyond the fingerprint (§6 hardening note): birth
/// time and inode generation, each absent where the filesystem lacks it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirIdentity {
    /// `"<seconds>.<nanoseconds, 9 digits>"`.
    pub btime: Option<String>,
    /// The inode generation number in decimal.
    pub generation: Option<String>,
}

impl DirIdentity {
    /// True when neither member is known.
    pub fn is_empty(&self) -> bool {
        self.btime.is_none() && self.generation.is_none()
    }

    /// Whether the live identity `live` matches this claimed one: every
    /// member the claim carries must be present and equal.
    pub fn matches(&self, live: &DirIdentity) -> bool {
        let member = |claimed: &Option<String>, live: &Option<String>| match claimed {
            None => true,
            Some(value) => live.as_ref() == Some(value),
        };
        member(&self.btime, &live.btime) && member(&self.generation, &live.generation)
    }

    fn to_json(&self) -> String {
        let mut members = Vec::new();
        if let Some(btime) = &self.btime {
            members.push(format!("\"btime\":{}", jstr(btime)));
        }
        if let Some(generation) = &self.generation {
            members.push(format!("\"generation\":{}", jstr(generation)));
        }
        format!("{{{}}}", members.join(","))
    }
}

/// The grant key `K = HMAC-SHA256(A, "autogpt-root-grant-v1")`.
pub struct GrantKey(Zeroizing<[u8; 32]>);

impl fmt::Debug for GrantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GrantKey(..)")
    }
}

impl GrantKey {
    /// Derives the key from the audit key (which is at least 16 bytes by
    /// construction).
    pub fn derive(audit_key: &AuditKey) -> GrantKey {
        GrantKey(Zeroizing::new(audit_key.hmac(GRANT_KEY_LABEL)))
    }

    /// The raw key, for the test vector.
    pub fn hex(&self) -> String {
        crate::audit::record::hex(&self.0[..])
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length; this cannot fail.
        match <HmacSha256 as Mac>::new_from_slice(&self.0[..]) {
            Ok(mac) => mac,
            Err(_) => <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default()),
        }
    }

    fn sign(&self, encoded_claims: &str) -> String {
        let mut mac = self.mac();
        mac.update(encoded_claims.as_bytes());
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    fn signature_matches(&self, encoded_claims: &str, signature: &str) -> bool {
        let Ok(bytes) = URL_SAFE_NO_PAD.decode(signature) else {
            return false;
        };
        // Only the canonical unpadded spelling of the 32 bytes counts.
        if URL_SAFE_NO_PAD.encode(&bytes) != signature {
            return false;
        }
        let mut mac = self.mac();
        mac.update(encoded_claims.as_bytes());
        mac.verify_slice(&bytes).is_ok()
    }
}

/// What a grant states (§7.2).
#[derive(Clone, PartialEq)]
pub struct Claims {
    /// The canonical folder path (OS notation, not normcased).
    pub allowed_root: String,
    /// §6.
    pub fingerprint: String,
    /// Issuing time, Unix seconds.
    pub issued_at: f64,
    /// The issuing machine.
    pub machine_id: String,
    /// ≥ 1.
    pub revision: u64,
    /// The chat session.
    pub session_id: String,
    /// Birth time and generation (this shim's grants only).
    pub identity: Option<DirIdentity>,
}

impl fmt::Debug for Claims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claims")
            .field("allowed_root", &self.allowed_root)
            .field("revision", &self.revision)
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

/// Why a token was refused (§7.4); each maps to `ROOT_GRANT_INVALID` with
/// [`GrantError::message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantError {
    /// Steps 1, 3 (non-ASCII), 4, 5.
    Malformed,
    /// Step 2.
    UnsupportedVersion,
    /// Step 3.
    BadSignature,
    /// Step 6.
    OtherSession,
    /// Step 7.
    OtherMachine,
    /// Step 8.
    BadRevision,
    /// Step 9.
    BadClaims,
    /// Step 10: the folder is a symbolic link.
    SymlinkRoot,
    /// Step 10: the folder is gone, unusable or a dangerous root.
    Unavailable,
    /// Steps 11–11a.
    Changed,
}

impl GrantError {
    /// The reference's error text.
    pub fn message(self) -> &'static str {
        match self {
            GrantError::Malformed => "Root grant is malformed",
            GrantError::UnsupportedVersion => "Unsupported root grant version",
            GrantError::BadSignature => "Root grant signature is invalid",
            GrantError::OtherSession => "Root grant belongs to another session",
            GrantError::OtherMachine => "Root grant belongs to another machine",
            GrantError::BadRevision => "Root grant revision is invalid",
            GrantError::BadClaims => "Root grant claims are invalid",
            GrantError::SymlinkRoot => "Selected root cannot be a symbolic link",
            GrantError::Unavailable => "Selected root is unavailable",
            GrantError::Changed => "The selected directory changed after the grant was issued",
        }
    }
}

impl fmt::Display for GrantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for GrantError {}

/// The claims JSON of §7.2: sorted keys, `,`/`:` separators, `jstr`
/// strings, Python's float form for `issued_at`.
pub fn claims_json(claims: &Claims) -> String {
    let issued_at = repr_f64(claims.issued_at).unwrap_or_else(|_| "0.0".into());
    let mut members = vec![
        format!("\"allowed_root\":{}", jstr(&claims.allowed_root)),
        format!("\"fingerprint\":{}", jstr(&claims.fingerprint)),
    ];
    if let Some(identity) = claims.identity.as_ref().filter(|i| !i.is_empty()) {
        members.push(format!("\"identity\":{}", identity.to_json()));
    }
    members.push(format!("\"issued_at\":{issued_at}"));
    members.push(format!("\"machine_id\":{}", jstr(&claims.machine_id)));
    members.push(format!("\"revision\":{}", claims.revision));
    members.push(format!("\"session_id\":{}", jstr(&claims.session_id)));
    format!("{{{}}}", members.join(","))
}

/// Issues the token `v1.E.S` for `claims`.
pub fn sign(key: &GrantKey, claims: &Claims) -> String {
    let encoded = URL_SAFE_NO_PAD.encode(claims_json(claims).as_bytes());
    let signature = key.sign(&encoded);
    format!("v1.{encoded}.{signature}")
}

/// What steps 1–9 accepted; the caller still checks the folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The claimed folder path.
    pub allowed_root: String,
    /// The claimed fingerprint.
    pub fingerprint: String,
    /// The claimed revision.
    pub revision: u64,
    /// The claimed identity, if the grant carries one.
    pub identity: Option<DirIdentity>,
}

/// Verification steps 1–9 of §7.4 for `token` presented for `session_id`
/// on the machine `machine_id`.
pub fn verify(
    key: &GrantKey,
    token: &str,
    session_id: &str,
    machine_id: &str,
) -> Result<Accepted, GrantError> {
    // Step 1: the first two dots split; the signature may hold more dots.
    let mut parts = token.splitn(3, '.');
    let (Some(version), Some(encoded), Some(signature)) =
        (parts.next(), parts.next(), parts.next())
    else {
        return Err(GrantError::Malformed);
    };
    // Step 2.
    if version != "v1" {
        return Err(GrantError::UnsupportedVersion);
    }
    // Step 3.
    if !encoded.is_ascii() {
        return Err(GrantError::Malformed);
    }
    if !key.signature_matches(encoded, signature) {
        return Err(GrantError::BadSignature);
    }
    // Step 4: padding is tolerated as the reference re-pads before decoding.
    let trimmed = encoded.trim_end_matches('=');
    let bytes = URL_SAFE_NO_PAD
        .decode(trimmed)
        .map_err(|_| GrantError::Malformed)?;
    let text = String::from_utf8(bytes).map_err(|_| GrantError::Malformed)?;
    let value: Value = serde_json::from_str(&text).map_err(|_| GrantError::Malformed)?;
    let Value::Object(claims) = value else {
        return Err(GrantError::Malformed);
    };
    // Step 5.
    for required in [
        "session_id",
        "machine_id",
        "revision",
        "allowed_root",
        "fingerprint",
    ] {
        if !claims.contains_key(required) {
            return Err(GrantError::Malformed);
        }
    }
    // Steps 6–7.
    if claims.get("session_id").and_then(Value::as_str) != Some(session_id) {
        return Err(GrantError::OtherSession);
    }
    if claims.get("machine_id").and_then(Value::as_str) != Some(machine_id) {
        return Err(GrantError::OtherMachine);
    }
    // Step 8 (booleans are not integers here, unlike in the reference).
    let revision = claims
        .get("revision")
        .and_then(Value::as_u64)
        .filter(|r| *r >= 1)
        .ok_or(GrantError::BadRevision)?;
    // Step 9.
    let (Some(allowed_root), Some(fingerprint)) = (
        claims.get("allowed_root").and_then(Value::as_str),
        claims.get("fingerprint").and_then(Value::as_str),
    ) else {
        return Err(GrantError::BadClaims);
    };
    Ok(Accepted {
        allowed_root: allowed_root.to_owned(),
        fingerprint: fingerprint.to_owned(),
        revision,
        identity: identity_claim(&claims)?,
    })
}

/// The optional `identity` member: an object of strings, or absent.
fn identity_claim(claims: &Map<String, Value>) -> Result<Option<DirIdentity>, GrantError> {
    let Some(value) = claims.get("identity") else {
        return Ok(None);
    };
    let Value::Object(members) = value else {
        return Err(GrantError::BadClaims);
    };
    let member = |name: &str| match members.get(name) {
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(GrantError::BadClaims),
    };
    Ok(Some(DirIdentity {
        btime: member("btime")?,
        generation: member("generation")?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> GrantKey {
        GrantKey::derive(&AuditKey::new(vec![0x61; 32]).unwrap())
    }

    #[test]
    fn jstr_escapes_like_python_json_dumps() {
        assert_eq!(jstr("a/b"), "\"a/b\"");
        assert_eq!(jstr("Über"), "\"\\u00dcber\"");
        assert_eq!(jstr("\u{7f}\u{1}"), "\"\\u007f\\u0001\"");
        assert_eq!(jstr("😀"), "\"\\ud83d\\ude00\"");
        assert_eq!(jstr("c:\\x\"y"), "\"c:\\\\x\\\"y\"");
    }

    #[test]
    fn tampered_claims_fail_the_signature() {
        let claims = Claims {
            allowed_root: "/srv/x".into(),
            fingerprint: "0".repeat(64),
            issued_at: 1.5,
            machine_id: "m".into(),
            revision: 2,
            session_id: "s".into(),
            identity: None,
        };
        let token = sign(&key(), &claims);
        assert!(verify(&key(), &token, "s", "m").is_ok());
        let mut bytes = token.clone().into_bytes();
        bytes[5] ^= 1;
        let tampered = String::from_utf8(bytes).unwrap();
        assert_eq!(
            verify(&key(), &tampered, "s", "m"),
            Err(GrantError::BadSignature)
        );
    }
}
