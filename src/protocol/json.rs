//! Strict JSON parsing for inbound frames.
//!
//! serde_json alone accepts duplicate object keys (the last one wins) and
//! nests up to its own recursion limit. A duplicate key is a classic parser
//! differential — two readers of the same frame can disagree on what it says —
//! and deep nesting only costs stack, so both are refused here, in the single
//! pass that builds the value. This module owns only the text → value step; it
//! never interprets what the value means.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Deepest nesting of arrays and objects accepted in one frame (the envelope
/// object itself is level 1). The deepest schema in the protocol needs 5.
pub const MAX_JSON_DEPTH: usize = 32;

/// Why a text is not acceptable JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StrictJsonError {
    /// Arrays/objects nested deeper than [`MAX_JSON_DEPTH`].
    TooDeep,
    /// The same key appears twice in one object.
    DuplicateKey(String),
    /// Anything serde_json refuses: syntax, trailing data, lone surrogate
    /// escapes, numbers out of range.
    Syntax(String),
}

/// Parses `text` as one JSON value, refusing duplicate keys and deep nesting.
pub(crate) fn parse_strict(text: &str) -> Result<Value, StrictJsonError> {
    let failure = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = StrictSeed {
        depth: 1,
        failure: &failure,
    }
    .deserialize(&mut de)
    .and_then(|value| de.end().map(|()| value));
    match parsed {
        Ok(value) => Ok(value),
        Err(e) => Err(failure
            .into_inner()
            .unwrap_or_else(|| StrictJsonError::Syntax(e.to_string()))),
    }
}

/// [`parse_strict`] for audit log lines, with the failure as text (the
/// verifier reports it in a `parse_error`).
pub(crate) fn parse_strict_for_audit(text: &str) -> Result<Value, String> {
    parse_strict(text).map_err(|e| match e {
        StrictJsonError::TooDeep => "nesting too deep".to_owned(),
        StrictJsonError::DuplicateKey(k) => format!("duplicate key {k:?}"),
        StrictJsonError::Syntax(s) => s,
    })
}

struct StrictSeed<'f> {
    depth: usize,
    failure: &'f RefCell<Option<StrictJsonError>>,
}

impl StrictSeed<'_> {
    fn fail<E: de::Error>(&self, why: StrictJsonError) -> E {
        let text = match &why {
            StrictJsonError::TooDeep => "nesting too deep".to_owned(),
            StrictJsonError::DuplicateKey(k) => format!("duplicate key {k:?}"),
            StrictJsonError::Syntax(s) => s.clone(),
        };
        self.failure.replace(Some(why));
        E::custom(text)
    }

    fn child(&self) -> StrictSeed<'_> {
        StrictSeed {
            depth: self.depth + 1,
            failure: self.failure,
        }
    }
}

impl<'de> DeserializeSeed<'de> for StrictSeed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| self.fail(StrictJsonError::Syntax("non-finite number".into())))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        if self.depth > MAX_JSON_DEPTH {
            return Err(self.fail(StrictJsonError::TooDeep));
        }
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.child())? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        if self.depth > MAX_JSON_DEPTH {
            return Err(self.fail(StrictJsonError::TooDeep));
        }
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if map.contains_key(&key) {
                return Err(self.fail(StrictJsonError::DuplicateKey(key)));
            }
            let value = access.next_value_seed(self.child())?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_key_is_refused_at_any_level() {
        assert_eq!(
            parse_strict(r#"{"a":1,"a":2}"#),
            Err(StrictJsonError::DuplicateKey("a".into()))
        );
        assert_eq!(
            parse_strict(r#"{"p":{"x":1,"y":[{"k":1,"k":1}]}}"#),
            Err(StrictJsonError::DuplicateKey("k".into()))
        );
    }

    #[test]
    fn nesting_is_limited_exactly_at_the_maximum_depth() {
        let ok = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH),
            "]".repeat(MAX_JSON_DEPTH)
        );
        assert!(parse_strict(&ok).is_ok());
        let deep = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH + 1),
            "]".repeat(MAX_JSON_DEPTH + 1)
        );
        assert_eq!(parse_strict(&deep), Err(StrictJsonError::TooDeep));
    }

    #[test]
    fn lone_surrogate_escape_is_a_syntax_error() {
        assert!(matches!(
            parse_strict(r#"{"a":"\ud800"}"#),
            Err(StrictJsonError::Syntax(_))
        ));
        assert!(matches!(
            parse_strict(r#"{"\udc00":1}"#),
            Err(StrictJsonError::Syntax(_))
        ));
        // A proper pair is fine.
        assert_eq!(
            parse_strict(r#""\ud83d\ude00""#),
            Ok(Value::String("\u{1F600}".into()))
        );
    }

    #[test]
    fn trailing_data_is_a_syntax_error() {
        assert!(matches!(
            parse_strict("{} {}"),
            Err(StrictJsonError::Syntax(_))
        ));
    }
}
