//! One audit record (AUDIT.md §2): its fields, its HMAC (§6) and its line
//! on disk (§2.5).
//!
//! A record's `details` keep the order the handler built them in, because
//! the on-disk line must list them that way; the HMAC does not depend on it
//! (the canonical form sorts keys). Nothing here touches a file or a clock.

use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};

use sha2::Sha256;
use zeroize::Zeroizing;

use super::canonical::{CanonError, canonical, push_member, push_object};

type HmacSha256 = Hmac<Sha256>;

/// The four-field `result` object (AUDIT.md §2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The operation succeeded.
    pub ok: bool,
    /// Process exit status (commands, preflight failures).
    pub exit_code: Option<i64>,
    /// Elapsed monotonic milliseconds, truncated.
    pub duration_ms: u64,
    /// The wire error code on failure.
    pub error_code: Option<String>,
}

impl Default for Outcome {
    fn default() -> Self {
        Self {
            ok: true,
            exit_code: None,
            duration_ms: 0,
            error_code: None,
        }
    }
}

impl Outcome {
    /// The four members in on-disk order.
    fn members(&self) -> [(String, Value); 4] {
        [
            ("ok".into(), json!(self.ok)),
            ("exit_code".into(), json!(self.exit_code)),
            ("duration_ms".into(), json!(self.duration_ms)),
            ("error_code".into(), json!(self.error_code)),
        ]
    }

    fn to_value(&self) -> Value {
        Value::Object(self.members().into_iter().collect())
    }
}

/// `details` in the order the operation defines (AUDIT.md §3).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details(pub Vec<(String, Value)>);

impl Details {
    /// An empty `{}`.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// Appends a field (later fields with the same name are not expected;
    /// the last one wins in the canonical form).
    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.0.push((key.to_owned(), value));
        self
    }

    /// Appends a field in place (the `with` of a builder held in a `let`).
    pub fn insert(&mut self, key: &str, value: Value) {
        self.0.push((key.to_owned(), value));
    }

    /// The fields as a JSON object (key order is lost: for inspection).
    pub fn to_map(&self) -> Map<String, Value> {
        self.0.iter().cloned().collect()
    }

    fn to_value(&self) -> Value {
        Value::Object(self.to_map())
    }
}

impl From<Map<String, Value>> for Details {
    fn from(map: Map<String, Value>) -> Self {
        Self(map.into_iter().collect())
    }
}

/// A record before its HMAC is computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Seconds since the epoch (whole microseconds, §2.4).
    pub ts: f64,
    /// The chat session, or `"-"`.
    pub session_id: String,
    /// This machine's id, or `"-"`.
    pub machine_id: String,
    /// The writing shim's version.
    pub shim_version: String,
    /// The request's envelope id, when a request caused the record.
    pub request_id: Option<String>,
    /// Operation or event name.
    pub op: String,
    /// Operation-specific fields, in on-disk order.
    pub details: Details,
    /// The outcome.
    pub result: Outcome,
    /// Position in the file's chain, from 1.
    pub seq: u64,
    /// The previous record's `hmac`, `None` for the first of a file.
    pub prev_hmac: Option<String>,
}

impl Record {
    /// The ten hashed fields, in on-disk order.
    fn members(&self) -> Result<Vec<(String, Value)>, CanonError> {
        let ts = serde_json::Number::from_f64(self.ts).ok_or(CanonError::NonFinite)?;
        Ok(vec![
            ("ts".into(), Value::Number(ts)),
            ("session_id".into(), json!(self.session_id)),
            ("machine_id".into(), json!(self.machine_id)),
            ("shim_version".into(), json!(self.shim_version)),
            ("request_id".into(), json!(self.request_id)),
            ("op".into(), json!(self.op)),
            ("details".into(), self.details.to_value()),
            ("result".into(), self.result.to_value()),
            ("seq".into(), json!(self.seq)),
            ("prev_hmac".into(), json!(self.prev_hmac)),
        ])
    }

    /// The canonical bytes the HMAC covers (the record without `hmac`).
    pub fn canonical(&self) -> Result<String, CanonError> {
        canonical(&Value::Object(self.members()?.into_iter().collect()))
    }

    /// Computes the HMAC and the on-disk line (without the final LF).
    pub fn seal(&self, key: &AuditKey) -> Result<Sealed, CanonError> {
        let hmac = key.hmac_hex(self.canonical()?.as_bytes());
        let mut line = String::with_capacity(512);
        line.push('{');
        let result = self.result.members();
        for (i, (k, v)) in self.members()?.iter().enumerate() {
            // The two nested objects keep their defined order on disk (a
            // `Value` object would sort its keys).
            let ordered: Option<Vec<(&String, &Value)>> = match k.as_str() {
                "details" => Some(self.details.0.iter().map(|(k, v)| (k, v)).collect()),
                "result" => Some(result.iter().map(|(k, v)| (k, v)).collect()),
                _ => None,
            };
            match ordered {
                Some(members) => {
                    line.push_str(", \"");
                    line.push_str(k);
                    line.push_str("\": ");
                    push_object(&mut line, members.into_iter())?;
                }
                None => push_member(&mut line, i == 0, k, v)?,
            }
        }
        push_member(&mut line, false, "hmac", &json!(hmac))?;
        line.push('}');
        Ok(Sealed { hmac, line })
    }
}

/// A record with its HMAC, ready to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// 64 lowercase hex characters.
    pub hmac: String,
    /// The on-disk line, without LF.
    pub line: String,
}

/// The audit key: at least 16 bytes (32 when generated here). Zeroed when
/// dropped; never printed (its `Debug` hides the bytes).
pub struct AuditKey(Zeroizing<Vec<u8>>);

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuditKey({} bytes)", self.0.len())
    }
}

/// Why bytes are not a usable audit key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTooShort;

impl AuditKey {
    /// Shortest accepted key, in bytes.
    pub const MIN_LEN: usize = 16;

    /// Wraps raw key bytes (at least 16).
    pub fn new(bytes: Vec<u8>) -> Result<Self, KeyTooShort> {
        if bytes.len() < Self::MIN_LEN {
            return Err(KeyTooShort);
        }
        Ok(Self(Zeroizing::new(bytes)))
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length; `new_from_slice` cannot fail.
        match HmacSha256::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => unreachable_mac(),
        }
    }

    /// HMAC-SHA256 of `message`.
    pub fn hmac(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = self.mac();
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    /// Lowercase hex HMAC-SHA256 of `message`.
    pub fn hmac_hex(&self, message: &[u8]) -> String {
        hex(&self.hmac(message))
    }

    /// Constant-time check of a stored lowercase-hex HMAC.
    pub fn verify_hex(&self, message: &[u8], stored: &str) -> bool {
        let Some(bytes) = unhex_lower(stored) else {
            return false;
        };
        let mut mac = self.mac();
        mac.update(message);
        mac.verify_slice(&bytes).is_ok()
    }
}

// `Hmac::new_from_slice` only fails for MACs with a fixed key size, which
// HMAC is not; this keeps the impossible branch out of the hot path without
// a panic.
#[cold]
fn unreachable_mac() -> HmacSha256 {
    <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default())
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Decodes exactly 64 lowercase hex digits (a stored uppercase HMAC does not
/// verify, AUDIT.md §6).
fn unhex_lower(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}
