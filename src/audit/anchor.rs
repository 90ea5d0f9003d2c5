//! The sealed tail anchor (AUDIT.md §4 hardening note): a small MAC'd file
//! next to the log naming its last durable record, so that records cut from
//! the end of a log are detected.
//!
//! The anchor vouches only for what was durable when it was written; it is
//! replaced atomically and never trusted unless its MAC verifies.

use serde_json::{Map, Value, json};

use super::canonical::canonical;
use super::record::AuditKey;

/// Domain separation for the anchor MAC.
const ANCHOR_CONTEXT: &str = "autogpt-audit-anchor-v1\n";

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
    fn body(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("file".into(), json!(self.file));
        m.insert("seq".into(), json!(self.seq));
        m.insert("hmac".into(), json!(self.hmac));
        m
    }

    fn mac(&self, key: &AuditKey) -> String {
        // The body holds only strings and an integer: canonicalisation
        // cannot fail.
        let text = canonical(&Value::Object(self.body())).unwrap_or_default();
        key.hmac_hex(format!("{ANCHOR_CONTEXT}{text}").as_bytes())
    }

    /// The one JSON line written to the anchor file (with LF).
    pub fn to_line(&self, key: &AuditKey) -> String {
        let mut m = self.body();
        m.insert("mac".into(), json!(self.mac(key)));
        format!("{}\n", Value::Object(m))
    }

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
        let anchor = Anchor { file, seq, hmac };
        let text = canonical(&Value::Object(anchor.body())).map_err(|_| AnchorError::Invalid)?;
        if !key.verify_hex(format!("{ANCHOR_CONTEXT}{text}").as_bytes(), &mac) {
            return Err(AnchorError::Invalid);
        }
        Ok(anchor)
    }
}

/// An anchor file that cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnchorError {
    /// Unparseable, or its MAC does not verify (`anchor_invalid`).
    Invalid,
}
