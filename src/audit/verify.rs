//! The verifier (AUDIT.md §10.1): checks one file's bytes against the key
//! and lists every violation in order, reproducing the reference's results
//! on every log either implementation writes.
//!
//! It reads untrusted bytes: malformed input becomes a `parse_error`, never a
//! panic, and nothing in it is ever executed or trusted beyond comparison.

use std::fmt;

use serde_json::Value;

use super::canonical::canonical;
use super::record::AuditKey;
use crate::protocol::json::parse_strict_for_audit;

/// What kind of problem a violation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViolationKind {
    /// The file is missing or does not end with LF.
    Truncated,
    /// A line is not a JSON object (or has duplicate keys, bad strings, …).
    ParseError,
    /// `seq` or `hmac` is absent or of the wrong type.
    MissingField,
    /// `seq` is not the expected next number.
    SequenceGap,
    /// `prev_hmac` is not the previous record's `hmac`.
    ChainBreak,
    /// The record's HMAC does not verify.
    HmacMismatch,
    /// An `AUDIT_ROTATED` record names a previous file that does not end as
    /// it says (AUDIT.md §9.4).
    FileLinkBreak,
}

impl ViolationKind {
    /// The name printed by `audit verify`.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::Truncated => "truncated",
            ViolationKind::ParseError => "parse_error",
            ViolationKind::MissingField => "missing_field",
            ViolationKind::SequenceGap => "sequence_gap",
            ViolationKind::ChainBreak => "chain_break",
            ViolationKind::HmacMismatch => "hmac_mismatch",
            ViolationKind::FileLinkBreak => "file_link_break",
        }
    }
}

/// One violation: kind, the record's `seq` when known, and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// What is wrong.
    pub kind: ViolationKind,
    /// The offending record's `seq` (as it claims), if any.
    pub seq: Option<i128>,
    /// Human-readable detail.
    pub message: String,
}

impl fmt::Display for Violation {
    /// `[<kind>] seq=<seq or ?>: <message>` (AUDIT.md §10.2).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seq = self.seq.map_or_else(|| "?".to_owned(), |s| s.to_string());
        write!(f, "[{}] seq={seq}: {}", self.kind.as_str(), self.message)
    }
}

fn violation(kind: ViolationKind, seq: Option<i128>, message: impl Into<String>) -> Violation {
    Violation {
        kind,
        seq,
        message: message.into(),
    }
}

/// Verifies one file's bytes (the file exists; a missing file is the
/// caller's `truncated`).
pub fn verify_bytes(bytes: &[u8], key: &AuditKey) -> Vec<Violation> {
    let mut out = Vec::new();
    if bytes.is_empty() {
        return out;
    }
    if bytes.last() != Some(&b'\n') {
        out.push(violation(
            ViolationKind::Truncated,
            None,
            "audit log does not end with newline — last record truncated",
        ));
    }
    let mut prev: Option<String> = None;
    let mut expected: i128 = 1;
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    for raw in body.split(|&b| b == b'\n') {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record = match parse_line(line) {
            Ok(record) => record,
            Err(detail) => {
                out.push(violation(
                    ViolationKind::ParseError,
                    None,
                    format!("unparseable line: {detail}"),
                ));
                return out;
            }
        };
        let Some(seq) = record.get("seq").and_then(integer) else {
            out.push(violation(
                ViolationKind::MissingField,
                None,
                "record missing seq",
            ));
            return out;
        };
        if seq != expected {
            out.push(violation(
                ViolationKind::SequenceGap,
                Some(seq),
                format!("expected seq={expected}, got seq={seq}"),
            ));
        }
        let stored_prev = record.get("prev_hmac").cloned().unwrap_or(Value::Null);
        let chained = match (&prev, &stored_prev) {
            (None, Value::Null) => true,
            (Some(p), Value::String(s)) => p == s,
            _ => false,
        };
        if !chained {
            out.push(violation(
                ViolationKind::ChainBreak,
                Some(seq),
                format!("prev_hmac mismatch at seq={seq}"),
            ));
        }
        let Some(Value::String(stored)) = record.get("hmac").cloned() else {
            out.push(violation(
                ViolationKind::MissingField,
                Some(seq),
                "record missing hmac",
            ));
            return out;
        };
        let mut unsigned = record;
        unsigned.remove("hmac");
        let verified = match canonical(&Value::Object(unsigned)) {
            Ok(text) => key.verify_hex(text.as_bytes(), &stored),
            Err(_) => false,
        };
        if !verified {
            out.push(violation(
                ViolationKind::HmacMismatch,
                Some(seq),
                format!("hmac mismatch at seq={seq}"),
            ));
        }
        prev = Some(stored);
        expected = seq + 1;
    }
    out
}

fn parse_line(line: &[u8]) -> Result<serde_json::Map<String, Value>, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8: {e}"))?;
    match parse_strict_for_audit(text)? {
        Value::Object(map) => Ok(map),
        _ => Err("not a JSON object".to_owned()),
    }
}

/// A JSON integer (a number token without `.`, `e` or `E`); booleans are not.
fn integer(v: &Value) -> Option<i128> {
    match v {
        Value::Number(n) if !n.is_f64() => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    }
}
