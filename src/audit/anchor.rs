//! The sealed tail anchor (AUDIT.md §4 hardening note): a small MAC'd file
//! next to the log naming its last durable record, so that records cut from
//! the end of a log are detected.
//!
//! The anchor vouches only for what was durable when it was written; it is
//! replaced atomically and never trusted unless its MAC verifies.

use serde_json::Value;

use super::canonical::{push_integer, push_string};
use super::record::AuditKey;

/// Domain separation for the anchor MAC.
const ANCHOR_CONTEXT: &str = "autogpt-audit-anchor-v1\n";

/// Room for an anchor's text (context, a long log name, a 64-digit hmac and
/// its mac) without growing.
const LINE_CAPACITY: usize = 256;

/// What an anchor says: the log's base name and its last durable record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    /// Base name of the log file the anchor belongs to.
    pub file: String,
    /// `seq` of the last durable record.
    pub seq: u64,
    /// `hmac` of the last durable record.
    pub hmac: String,
}

impl Anchor {
    /// Parses and authenticates an anchor file's content.
    pub fn parse(text: &str, key: &AuditKey) -> Result<Anchor, AnchorError> {
        let value: Value =
            serde_json::from_str(text.trim_end()).map_err(|_| AnchorError::Invalid)?;
        let field = |k: &str| value.get(k).cloned();
        let (
            Some(Value::String(file)),
            Some(seq),
            Some(Value::String(hmac)),
            Some(Value::String(mac)),
        ) = (
            field("file"),
            field("seq").and_then(|v| v.as_u64()),
            field("hmac"),
            field("mac"),
        )
        else {
            return Err(AnchorError::Invalid);
        };
        if !key.verify_hex(signed(&file, seq, &hmac).as_bytes(), &mac) {
            return Err(AnchorError::Invalid);
        }
        Ok(Anchor { file, seq, hmac })
    }
}

/// What the anchor's MAC covers: the context, then the canonical form of
/// the body without `mac`.
fn signed(file: &str, seq: u64, hmac: &str) -> String {
    let mut text = String::with_capacity(LINE_CAPACITY);
    text.push_str(ANCHOR_CONTEXT);
    push_body(&mut text, file, seq, hmac, None);
    text
}

/// The one JSON line of an anchor file (with LF) for the record `seq` with
/// `hmac` of the log named `file`: the body and its `mac`.
pub(crate) fn line(key: &AuditKey, file: &str, seq: u64, hmac: &str) -> String {
    let mut text = signed(file, seq, hmac);
    let mac = key.hmac_hex(text.as_bytes());
    text.clear();
    push_body(&mut text, file, seq, hmac, Some(&mac));
    text.push('\n');
    text
}

/// The body as one canonical object: keys sorted (`file`, `hmac`, `mac`,
/// `seq`), no whitespace.
fn push_body(out: &mut String, file: &str, seq: u64, hmac: &str, mac: Option<&str>) {
    out.push_str("{\"file\":");
    push_string(out, file);
    out.push_str(",\"hmac\":");
    push_string(out, hmac);
    if let Some(mac) = mac {
        out.push_str(",\"mac\":");
        push_string(out, mac);
    }
    out.push_str(",\"seq\":");
    push_integer(out, seq);
    out.push('}');
}

/// An anchor file that cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnchorError {
    /// Unparseable, or its MAC does not verify (`anchor_invalid`).
    Invalid,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::audit::canonical::canonical;
    use serde_json::{Map, json};

    fn key() -> AuditKey {
        AuditKey::new(vec![3; 32]).unwrap()
    }

    /// The line as a JSON object of the same members would give it.
    fn through_values(key: &AuditKey, file: &str, seq: u64, hmac: &str) -> String {
        let mut body = Map::new();
        body.insert("file".into(), json!(file));
        body.insert("seq".into(), json!(seq));
        body.insert("hmac".into(), json!(hmac));
        let text = canonical(&Value::Object(body.clone())).unwrap();
        let mac = key.hmac_hex(format!("{ANCHOR_CONTEXT}{text}").as_bytes());
        body.insert("mac".into(), json!(mac));
        format!("{}\n", Value::Object(body))
    }

    #[test]
    fn an_anchor_line_is_what_its_json_values_give_and_reads_back() {
        let key = key();
        for (file, seq, hmac) in [
            ("audit.log", 1, "ab".repeat(32)),
            ("a \"log\"\\\u{1}\u{7f}é😀\n", u64::MAX, "0".repeat(64)),
            ("\u{8}\t\u{c}\r\u{1f}\u{2028}/", 12, "\u{0}".into()),
            ("", 0, String::new()),
        ] {
            let anchor = Anchor {
                file: file.to_owned(),
                seq,
                hmac: hmac.clone(),
            };
            let line = line(&key, file, seq, &hmac);
            assert_eq!(line, through_values(&key, file, seq, &hmac));
            assert_eq!(Anchor::parse(&line, &key), Ok(anchor));
        }
    }

    #[test]
    fn an_anchor_of_another_key_or_with_a_changed_field_is_invalid() {
        let key = key();
        let line = line(&key, "audit.log", 41, &"cd".repeat(32));
        let other = AuditKey::new(vec![4; 32]).unwrap();
        assert_eq!(Anchor::parse(&line, &other), Err(AnchorError::Invalid));
        let changed = line.replace("\"seq\":41", "\"seq\":42");
        assert_ne!(changed, line);
        assert_eq!(Anchor::parse(&changed, &key), Err(AnchorError::Invalid));
    }
}
