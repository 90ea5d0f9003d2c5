//! Strict JSON parsing for inbound frames.
//!
//! serde_json alone accepts duplicate object keys (the last one wins) and
//! nests up to its own recursion limit. A duplicate key is a classic parser
//! differential — two readers of the same frame can disagree on what it says —
//! and deep nesting only costs stack, so both are refused here, in the single
//! pass that builds the value. So is a frame of more than
//! [`MAX_FRAME_JSON_VALUES`] values: every value of the tree costs tens of
//! bytes however short its text (`0,` is two), so a 16 MiB frame of tiny
//! values would cost twenty times its size; the count stops the parse long
//! before that. This module owns only the text → value step; it never
//! interprets what the value means.

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Deepest nesting of arrays and objects accepted in one frame (the envelope
/// object itself is level 1). The deepest schema in the protocol needs 5.
pub const MAX_JSON_DEPTH: usize = 32;

/// Most JSON values (objects, arrays, scalars and object keys, each counted
/// once) accepted in one frame. The tree of that many costs at most about
/// 16 MiB, a frame's size; no request of the protocol comes near it (a
/// command's `argv` is bounded by the system's own argument limit long
/// before).
pub const MAX_FRAME_JSON_VALUES: usize = 262_144;

/// Why a text is not acceptable JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StrictJsonError {
    /// Arrays/objects nested deeper than [`MAX_JSON_DEPTH`].
    TooDeep,
    /// The same key appears twice in one object.
    DuplicateKey(String),
    /// More values than the parse allows.
    TooManyValues,
    /// Anything serde_json refuses: syntax, trailing data, lone surrogate
    /// escapes, numbers out of range.
    Syntax(String),
}

impl StrictJsonError {
    fn describe(&self) -> String {
        match self {
            StrictJsonError::TooDeep => "nesting too deep".to_owned(),
            StrictJsonError::DuplicateKey(k) => format!("duplicate key {k:?}"),
            StrictJsonError::TooManyValues => "too many values".to_owned(),
            StrictJsonError::Syntax(s) => s.clone(),
        }
    }
}

/// Parses one inbound frame's text as one JSON value, refusing duplicate
/// keys, deep nesting and more than [`MAX_FRAME_JSON_VALUES`] values.
pub(crate) fn parse_strict(text: &str) -> Result<Value, StrictJsonError> {
    parse_counted(text, MAX_FRAME_JSON_VALUES)
}

/// [`parse_strict`] for audit log lines, with the failure as text (the
/// verifier reports it in a `parse_error`). A line is the shim's own
/// writing, so it has no value limit.
pub(crate) fn parse_strict_for_audit(text: &str) -> Result<Value, String> {
    parse_counted(text, usize::MAX).map_err(|e| match e {
        StrictJsonError::Syntax(s) => s,
        other => other.describe(),
    })
}

fn parse_counted(text: &str, max_values: usize) -> Result<Value, StrictJsonError> {
    let state = ParseState {
        failure: RefCell::new(None),
        values_left: Cell::new(max_values),
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = StrictSeed {
        depth: 1,
        state: &state,
    }
    .deserialize(&mut de)
    .and_then(|value| de.end().map(|()| value));
    match parsed {
        Ok(value) => Ok(value),
        Err(e) => Err(state
            .failure
            .into_inner()
            .unwrap_or_else(|| StrictJsonError::Syntax(e.to_string()))),
    }
}

/// What one parse has found wrong and how many more values it may build.
struct ParseState {
    failure: RefCell<Option<StrictJsonError>>,
    values_left: Cell<usize>,
}

struct StrictSeed<'f> {
    depth: usize,
    state: &'f ParseState,
}

impl StrictSeed<'_> {
    fn fail<E: de::Error>(&self, why: StrictJsonError) -> E {
        let text = why.describe();
        self.state.failure.replace(Some(why));
        E::custom(text)
    }

    /// Counts one more value (or key) against the limit.
    fn count<E: de::Error>(&self) -> Result<(), E> {
        match self.state.values_left.get().checked_sub(1) {
            Some(left) => {
                self.state.values_left.set(left);
                Ok(())
            }
            None => Err(self.fail(StrictJsonError::TooManyValues)),
        }
    }

    fn child(&self) -> StrictSeed<'_> {
        StrictSeed {
            depth: self.depth + 1,
            state: self.state,
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

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.count()?;
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| self.fail(StrictJsonError::Syntax("non-finite number".into())))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        if self.depth > MAX_JSON_DEPTH {
            return Err(self.fail(StrictJsonError::TooDeep));
        }
        self.count()?;
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
        self.count()?;
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            self.count()?;
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
    fn values_are_limited_exactly_at_the_maximum_count() {
        // The array itself is one value, each element one more.
        let list = |n: usize| format!("[{}]", vec!["0"; n].join(","));
        assert!(parse_strict(&list(MAX_FRAME_JSON_VALUES - 1)).is_ok());
        assert_eq!(
            parse_strict(&list(MAX_FRAME_JSON_VALUES)),
            Err(StrictJsonError::TooManyValues)
        );
        // An object's keys count too.
        let object = |n: usize| {
            let members: Vec<String> = (0..n).map(|i| format!("\"{i}\":0")).collect();
            format!("{{{}}}", members.join(","))
        };
        let half = (MAX_FRAME_JSON_VALUES - 1) / 2;
        assert!(parse_strict(&object(half)).is_ok());
        assert_eq!(
            parse_strict(&object(half + 1)),
            Err(StrictJsonError::TooManyValues)
        );
        // Audit lines are the shim's own and are not counted.
        assert!(parse_strict_for_audit(&list(MAX_FRAME_JSON_VALUES)).is_ok());
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
