//! One audit record (AUDIT.md §2): its fields, its HMAC (§6) and its line
//! on disk (§2.5).
//!
//! A record's `details` keep the order the handler built them in, because
//! the on-disk line must list them that way; the HMAC does not depend on it
//! (the canonical form sorts keys). Nothing here touches a file or a clock.

use hmac::{Hmac, Mac};
use serde_json::{Map, Value};

use sha2::Sha256;
use zeroize::Zeroizing;

use super::canonical::{
    CanonError, push_bool, push_canonical_object, push_integer, push_object, push_optional_integer,
    push_optional_string, push_string, repr_f64,
};

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
    /// The canonical object (keys sorted).
    fn push_canonical(&self, out: &mut String) {
        out.push_str("{\"duration_ms\":");
        push_integer(out, self.duration_ms);
        out.push_str(",\"error_code\":");
        push_optional_string(out, self.error_code.as_deref());
        out.push_str(",\"exit_code\":");
        push_optional_integer(out, self.exit_code);
        out.push_str(",\"ok\":");
        push_bool(out, self.ok);
        out.push('}');
    }

    /// The object on disk, in its defined order.
    fn push_line(&self, out: &mut String) {
        out.push_str("{\"ok\": ");
        push_bool(out, self.ok);
        out.push_str(", \"exit_code\": ");
        push_optional_integer(out, self.exit_code);
        out.push_str(", \"duration_ms\": ");
        push_integer(out, self.duration_ms);
        out.push_str(", \"error_code\": ");
        push_optional_string(out, self.error_code.as_deref());
        out.push('}');
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

    /// Appends a field. A name must not repeat: the verifier refuses a line
    /// with a repeated key (AUDIT.md §5.2), so such a record never verifies.
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

    /// The canonical object, keys sorted. Of fields with the same name
    /// (which no operation writes, see [`Details::with`]) it keeps the last,
    /// as a JSON object built from them would.
    fn push_canonical(&self, out: &mut String) -> Result<(), CanonError> {
        push_canonical_object(out, self.0.iter().map(|(k, v)| (k, v)))
    }

    /// The object on disk: every field, in order.
    fn push_line(&self, out: &mut String) -> Result<(), CanonError> {
        push_object(out, self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl From<Map<String, Value>> for Details {
    fn from(map: Map<String, Value>) -> Self {
        Self(map.into_iter().collect())
    }
}

/// Room for a typical record's canonical text and line, so that neither
/// grows while it is written.
const TEXT_CAPACITY: usize = 768;

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
    /// The canonical bytes the HMAC covers (the record without `hmac`).
    pub fn canonical(&self) -> Result<String, CanonError> {
        let ts = repr_f64(self.ts)?;
        let mut text = String::with_capacity(TEXT_CAPACITY);
        self.push_canonical(&mut text, &ts)?;
        Ok(text)
    }

    /// The ten hashed fields with their keys sorted (the top-level keys
    /// are fixed, so their order is written out); `ts` already spelled.
    fn push_canonical(&self, out: &mut String, ts: &str) -> Result<(), CanonError> {
        out.push_str("{\"details\":");
        self.details.push_canonical(out)?;
        out.push_str(",\"machine_id\":");
        push_string(out, &self.machine_id);
        out.push_str(",\"op\":");
        push_string(out, &self.op);
        out.push_str(",\"prev_hmac\":");
        push_optional_string(out, self.prev_hmac.as_deref());
        out.push_str(",\"request_id\":");
        push_optional_string(out, self.request_id.as_deref());
        out.push_str(",\"result\":");
        self.result.push_canonical(out);
        out.push_str(",\"seq\":");
        push_integer(out, self.seq);
        out.push_str(",\"session_id\":");
        push_string(out, &self.session_id);
        out.push_str(",\"shim_version\":");
        push_string(out, &self.shim_version);
        out.push_str(",\"ts\":");
        out.push_str(ts);
        out.push('}');
        Ok(())
    }

    /// Computes the HMAC and the on-disk line (without the final LF).
    pub fn seal(&self, key: &AuditKey) -> Result<Sealed, CanonError> {
        let ts = repr_f64(self.ts)?;
        // One buffer: the canonical text, then (once hashed) the line.
        let mut text = String::with_capacity(TEXT_CAPACITY);
        self.push_canonical(&mut text, &ts)?;
        let hmac = key.hmac_hex(text.as_bytes());
        text.clear();
        text.push_str("{\"ts\": ");
        text.push_str(&ts);
        text.push_str(", \"session_id\": ");
        push_string(&mut text, &self.session_id);
        text.push_str(", \"machine_id\": ");
        push_string(&mut text, &self.machine_id);
        text.push_str(", \"shim_version\": ");
        push_string(&mut text, &self.shim_version);
        text.push_str(", \"request_id\": ");
        push_optional_string(&mut text, self.request_id.as_deref());
        text.push_str(", \"op\": ");
        push_string(&mut text, &self.op);
        text.push_str(", \"details\": ");
        self.details.push_line(&mut text)?;
        text.push_str(", \"result\": ");
        self.result.push_line(&mut text);
        text.push_str(", \"seq\": ");
        push_integer(&mut text, self.seq);
        text.push_str(", \"prev_hmac\": ");
        push_optional_string(&mut text, self.prev_hmac.as_deref());
        text.push_str(", \"hmac\": ");
        push_string(&mut text, &hmac);
        text.push('}');
        Ok(Sealed { hmac, line: text })
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::audit::canonical::{canonical, push_dumps, push_object};
    use crate::protocol::json::parse_strict_for_audit;
    use serde_json::json;

    /// The record as JSON values, the way a reader of the log sees it:
    /// the canonical text of the object, and the line written member by
    /// member in the defined order.
    fn through_values(record: &Record, hmac: &str) -> (String, String) {
        let ts = Value::Number(serde_json::Number::from_f64(record.ts).unwrap());
        let result: Vec<(String, Value)> = vec![
            ("ok".into(), json!(record.result.ok)),
            ("exit_code".into(), json!(record.result.exit_code)),
            ("duration_ms".into(), json!(record.result.duration_ms)),
            ("error_code".into(), json!(record.result.error_code)),
        ];
        let members: Vec<(String, Value)> = vec![
            ("ts".into(), ts),
            ("session_id".into(), json!(record.session_id)),
            ("machine_id".into(), json!(record.machine_id)),
            ("shim_version".into(), json!(record.shim_version)),
            ("request_id".into(), json!(record.request_id)),
            ("op".into(), json!(record.op)),
            ("details".into(), Value::Object(record.details.to_map())),
            (
                "result".into(),
                Value::Object(result.iter().cloned().collect()),
            ),
            ("seq".into(), json!(record.seq)),
            ("prev_hmac".into(), json!(record.prev_hmac)),
        ];
        let object: Map<String, Value> = members.iter().cloned().collect();
        let canonical_text = canonical(&Value::Object(object)).unwrap();
        let mut line = String::from("{");
        for (key, value) in members.iter().chain([&("hmac".into(), json!(hmac))]) {
            if line.len() > 1 {
                line.push_str(", ");
            }
            push_string(&mut line, key);
            line.push_str(": ");
            // The two nested objects keep their defined order on disk (a
            // `Value` object would sort its keys).
            match key.as_str() {
                "details" => {
                    push_object(&mut line, record.details.0.iter().map(|(k, v)| (k, v))).unwrap()
                }
                "result" => push_object(&mut line, result.iter().map(|(k, v)| (k, v))).unwrap(),
                _ => push_dumps(&mut line, value).unwrap(),
            }
        }
        line.push('}');
        (canonical_text, line)
    }

    fn records() -> Vec<Record> {
        let plain = Record {
            ts: 1_700_000_000.123456,
            session_id: "chat-1".into(),
            machine_id: "machine".into(),
            shim_version: "1.0.0".into(),
            request_id: Some("req-1".into()),
            op: "FILE_STAT".into(),
            details: Details::new().with("path", json!("/srv/work/a.txt")),
            result: Outcome::default(),
            seq: 1,
            prev_hmac: None,
        };
        let awkward = Record {
            ts: 0.000_01,
            session_id: "\u{1}\"quoted\"\\\u{7f}é😀".into(),
            machine_id: "-".into(),
            shim_version: "9.9.9-rc.1".into(),
            request_id: None,
            op: "EXECUTE_COMMAND".into(),
            details: Details::new()
                .with("zeta", json!([1, -2, 3.5, null, "x\ny"]))
                .with("alpha", json!({"b": true, "a": {"é": 1e300, "e": -0.0}}))
                .with("\u{e9}", json!(u64::MAX))
                .with("😀", json!(i64::MIN))
                .with("\u{ff61}", json!(""))
                .with("tab\there", json!(1.0)),
            result: Outcome {
                ok: false,
                exit_code: Some(-9),
                duration_ms: u64::MAX,
                error_code: Some("EXEC_TIMEOUT".into()),
            },
            seq: u64::MAX,
            prev_hmac: Some("ab".repeat(32)),
        };
        let empty = Record {
            ts: 1e16,
            session_id: String::new(),
            machine_id: String::new(),
            shim_version: String::new(),
            request_id: Some(String::new()),
            op: String::new(),
            details: Details::new(),
            result: Outcome {
                ok: true,
                exit_code: Some(0),
                duration_ms: 0,
                error_code: None,
            },
            seq: 0,
            prev_hmac: None,
        };
        vec![plain, awkward, empty]
    }

    #[test]
    fn a_sealed_record_is_what_its_json_values_give() {
        let key = AuditKey::new(vec![7; 32]).unwrap();
        for record in records() {
            let sealed = record.seal(&key).unwrap();
            let (canonical_text, line) = through_values(&record, &sealed.hmac);
            assert_eq!(record.canonical().unwrap(), canonical_text);
            assert_eq!(sealed.hmac, key.hmac_hex(canonical_text.as_bytes()));
            assert_eq!(sealed.line, line);
            // What the verifier reads back: the line without its hmac has
            // the canonical text the hmac covers.
            let Value::Object(mut parsed) = parse_strict_for_audit(&sealed.line).unwrap() else {
                panic!("a line that is not an object: {}", sealed.line);
            };
            assert_eq!(parsed.remove("hmac"), Some(json!(sealed.hmac)));
            assert_eq!(canonical(&Value::Object(parsed)).unwrap(), canonical_text);
        }
    }

    #[test]
    fn of_details_with_the_same_name_the_canonical_form_keeps_the_last_and_none_verifies() {
        let key = AuditKey::new(vec![7; 32]).unwrap();
        let mut record = records().remove(0);
        record.details = Details::new()
            .with("b", json!(1))
            .with("a", json!({"y": 2, "x": [3]}))
            .with("b", json!(3));
        let sealed = record.seal(&key).unwrap();
        let (canonical_text, line) = through_values(&record, &sealed.hmac);
        assert_eq!(record.canonical().unwrap(), canonical_text);
        assert!(
            canonical_text.starts_with("{\"details\":{\"a\":{\"x\":[3],\"y\":2},\"b\":3},"),
            "{canonical_text}"
        );
        // Both are on disk, which the verifier refuses as a repeated key.
        assert_eq!(sealed.line, line);
        assert!(
            sealed
                .line
                .contains("\"b\": 1, \"a\": {\"x\": [3], \"y\": 2}, \"b\": 3")
        );
        assert!(parse_strict_for_audit(&sealed.line).is_err());
    }

    #[test]
    fn a_record_with_a_non_finite_time_has_no_canonical_form() {
        let key = AuditKey::new(vec![7; 32]).unwrap();
        for ts in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut record = records().remove(0);
            record.ts = ts;
            assert_eq!(record.canonical(), Err(CanonError::NonFinite));
            assert!(record.seal(&key).is_err());
        }
    }
}
