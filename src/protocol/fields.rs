//! The payload field reader: turns one JSON object into typed fields.
//!
//! Each payload decoder takes its fields out of the object one by one, stating
//! for each whether it is required, nullable or defaulted, then calls
//! [`Fields::finish`], which refuses whatever is left (the protocol rejects
//! unknown keys). Every failure names the field, with its path inside the
//! payload, so an `ERROR` reply can tell the platform exactly what was wrong.
//! Only natural JSON types are accepted: `5.0` is not an integer, `"5"` is not
//! a number.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU64;

use serde_json::{Map, Value};

use super::wire_enum::WireEnum;

/// What is wrong with one payload field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldProblem {
    /// A required field is absent.
    Missing,
    /// The field is not in the schema.
    Unknown,
    /// The JSON type is wrong (`null` included where it is not allowed).
    WrongType {
        /// What the schema wants, e.g. "a string".
        expected: &'static str,
    },
    /// A string outside the enum's set of values.
    UnknownValue {
        /// The value received (truncated for display).
        value: String,
        /// The accepted values.
        expected: String,
    },
    /// A stated constraint (range, length, pattern, cross-field rule) fails.
    Constraint(String),
}

/// A payload field that failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field inside the payload, e.g. `entries[2].name`.
    pub field: String,
    /// What is wrong with it.
    pub problem: FieldProblem,
}

impl FieldError {
    pub(crate) fn new(field: impl Into<String>, problem: FieldProblem) -> Self {
        Self {
            field: field.into(),
            problem,
        }
    }

    pub(crate) fn constraint(field: impl Into<String>, why: impl Into<String>) -> Self {
        Self::new(field, FieldProblem::Constraint(why.into()))
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = &self.field;
        match &self.problem {
            FieldProblem::Missing => write!(f, "payload field '{field}' is required"),
            FieldProblem::Unknown => write!(f, "payload field '{field}' is not allowed"),
            FieldProblem::WrongType { expected } => {
                write!(f, "payload field '{field}' must be {expected}")
            }
            FieldProblem::UnknownValue { value, expected } => write!(
                f,
                "payload field '{field}' has unknown value {value:?} (expected one of {expected})"
            ),
            FieldProblem::Constraint(why) => write!(f, "payload field '{field}' {why}"),
        }
    }
}

pub(crate) type FieldResult<T> = Result<T, FieldError>;

/// Shortens untrusted text before it is echoed in an error message.
fn excerpt(text: &str) -> String {
    const MAX: usize = 64;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// One JSON object being taken apart field by field.
pub(crate) struct Fields {
    map: Map<String, Value>,
    prefix: String,
}

impl Fields {
    pub(crate) fn new(map: Map<String, Value>) -> Self {
        Self {
            map,
            prefix: String::new(),
        }
    }

    fn nested(map: Map<String, Value>, prefix: String) -> Self {
        Self { map, prefix }
    }

    fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    fn wrong(&self, key: &str, expected: &'static str) -> FieldError {
        FieldError::new(self.path(key), FieldProblem::WrongType { expected })
    }

    /// Absent → `None`; present (even `null`) → `Some`.
    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    /// Absent or `null` → `None`.
    fn take_nullable(&mut self, key: &str) -> Option<Value> {
        self.take(key).filter(|v| !v.is_null())
    }

    fn required(&mut self, key: &str) -> FieldResult<Value> {
        self.take(key)
            .ok_or_else(|| FieldError::new(self.path(key), FieldProblem::Missing))
    }

    /// Gives the object back untouched (for payloads kept as raw JSON).
    pub(crate) fn into_map(self) -> Map<String, Value> {
        self.map
    }

    /// Refuses every key that no decoder asked for.
    pub(crate) fn finish(self) -> FieldResult<()> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(key) => Err(FieldError::new(self.path(key), FieldProblem::Unknown)),
        }
    }

    // ---- conversions of one value -------------------------------------

    fn to_string(&self, key: &str, v: Value) -> FieldResult<String> {
        match v {
            Value::String(s) => Ok(s),
            _ => Err(self.wrong(key, "a string")),
        }
    }

    fn to_bool(&self, key: &str, v: Value) -> FieldResult<bool> {
        v.as_bool().ok_or_else(|| self.wrong(key, "a boolean"))
    }

    fn to_int(&self, key: &str, v: &Value) -> FieldResult<i64> {
        v.as_i64().ok_or_else(|| self.wrong(key, "an integer"))
    }

    fn to_number(&self, key: &str, v: &Value) -> FieldResult<f64> {
        match v {
            Value::Number(n) => n.as_f64().ok_or_else(|| self.wrong(key, "a number")),
            _ => Err(self.wrong(key, "a number")),
        }
    }

    fn to_enum<E: WireEnum>(&self, key: &str, v: Value) -> FieldResult<E> {
        let text = self.to_string(key, v)?;
        E::from_wire(&text).ok_or_else(|| {
            FieldError::new(
                self.path(key),
                FieldProblem::UnknownValue {
                    value: excerpt(&text),
                    expected: E::expected(),
                },
            )
        })
    }

    fn to_list(&self, key: &str, v: Value) -> FieldResult<Vec<Value>> {
        match v {
            Value::Array(items) => Ok(items),
            _ => Err(self.wrong(key, "a list")),
        }
    }

    fn to_object(&self, key: &str, v: Value) -> FieldResult<Map<String, Value>> {
        match v {
            Value::Object(m) => Ok(m),
            _ => Err(self.wrong(key, "an object")),
        }
    }

    // ---- strings --------------------------------------------------------

    pub(crate) fn string(&mut self, key: &str) -> FieldResult<String> {
        let v = self.required(key)?;
        self.to_string(key, v)
    }

    pub(crate) fn string_or(&mut self, key: &str, default: &str) -> FieldResult<String> {
        match self.take(key) {
            None => Ok(default.to_owned()),
            Some(v) => self.to_string(key, v),
        }
    }

    pub(crate) fn opt_string(&mut self, key: &str) -> FieldResult<Option<String>> {
        self.take_nullable(key)
            .map(|v| self.to_string(key, v))
            .transpose()
    }

    /// A required string of `min..=max` Unicode scalar values.
    pub(crate) fn string_len(&mut self, key: &str, min: usize, max: usize) -> FieldResult<String> {
        let s = self.string(key)?;
        self.check_len(key, &s, min, max)?;
        Ok(s)
    }

    /// A nullable string that has `min..=max` chars when present.
    pub(crate) fn opt_string_len(
        &mut self,
        key: &str,
        min: usize,
        max: usize,
    ) -> FieldResult<Option<String>> {
        let s = self.opt_string(key)?;
        if let Some(s) = &s {
            self.check_len(key, s, min, max)?;
        }
        Ok(s)
    }

    fn check_len(&self, key: &str, s: &str, min: usize, max: usize) -> FieldResult<()> {
        // Count at most max+1 chars: a 16 MiB string must not cost a full scan.
        let n = s.chars().take(max.saturating_add(1)).count();
        if n < min || n > max {
            return Err(FieldError::constraint(
                self.path(key),
                format!("must be {min} to {max} characters long"),
            ));
        }
        Ok(())
    }

    // ---- booleans and numbers ------------------------------------------

    pub(crate) fn bool(&mut self, key: &str) -> FieldResult<bool> {
        let v = self.required(key)?;
        self.to_bool(key, v)
    }

    pub(crate) fn bool_or(&mut self, key: &str, default: bool) -> FieldResult<bool> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => self.to_bool(key, v),
        }
    }

    pub(crate) fn opt_bool(&mut self, key: &str) -> FieldResult<Option<bool>> {
        self.take_nullable(key)
            .map(|v| self.to_bool(key, v))
            .transpose()
    }

    pub(crate) fn int(&mut self, key: &str) -> FieldResult<i64> {
        let v = self.required(key)?;
        self.to_int(key, &v)
    }

    pub(crate) fn int_or(&mut self, key: &str, default: i64) -> FieldResult<i64> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => self.to_int(key, &v),
        }
    }

    pub(crate) fn opt_int(&mut self, key: &str) -> FieldResult<Option<i64>> {
        self.take_nullable(key)
            .map(|v| self.to_int(key, &v))
            .transpose()
    }

    fn to_nonneg(&self, key: &str, v: &Value) -> FieldResult<u64> {
        match v.as_u64() {
            Some(n) => Ok(n),
            None if v.is_i64() => Err(FieldError::constraint(self.path(key), "must be at least 0")),
            None => Err(self.wrong(key, "an integer")),
        }
    }

    fn to_positive(&self, key: &str, v: &Value) -> FieldResult<NonZeroU64> {
        let n = self.to_nonneg(key, v).map_err(|e| match e.problem {
            FieldProblem::Constraint(_) => {
                FieldError::constraint(self.path(key), "must be greater than 0")
            }
            _ => e,
        })?;
        NonZeroU64::new(n)
            .ok_or_else(|| FieldError::constraint(self.path(key), "must be greater than 0"))
    }

    /// An integer ≥ 0 with a default when absent.
    pub(crate) fn nonneg_or(&mut self, key: &str, default: u64) -> FieldResult<u64> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => self.to_nonneg(key, &v),
        }
    }

    /// A required integer ≥ 0.
    pub(crate) fn nonneg(&mut self, key: &str) -> FieldResult<u64> {
        let v = self.required(key)?;
        self.to_nonneg(key, &v)
    }

    /// A nullable integer ≥ 0.
    pub(crate) fn opt_nonneg(&mut self, key: &str) -> FieldResult<Option<u64>> {
        self.take_nullable(key)
            .map(|v| self.to_nonneg(key, &v))
            .transpose()
    }

    /// A nullable number.
    pub(crate) fn opt_number(&mut self, key: &str) -> FieldResult<Option<f64>> {
        self.take_nullable(key)
            .map(|v| self.to_number(key, &v))
            .transpose()
    }

    /// A required integer > 0.
    pub(crate) fn positive(&mut self, key: &str) -> FieldResult<NonZeroU64> {
        let v = self.required(key)?;
        self.to_positive(key, &v)
    }

    /// An integer > 0 with a default when absent (`null` is refused).
    pub(crate) fn positive_or(
        &mut self,
        key: &str,
        default: NonZeroU64,
    ) -> FieldResult<NonZeroU64> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => self.to_positive(key, &v),
        }
    }

    /// A nullable integer that is > 0 when present.
    pub(crate) fn opt_positive(&mut self, key: &str) -> FieldResult<Option<NonZeroU64>> {
        self.take_nullable(key)
            .map(|v| self.to_positive(key, &v))
            .transpose()
    }

    pub(crate) fn number(&mut self, key: &str) -> FieldResult<f64> {
        let v = self.required(key)?;
        self.to_number(key, &v)
    }

    pub(crate) fn number_or(&mut self, key: &str, default: f64) -> FieldResult<f64> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => self.to_number(key, &v),
        }
    }

    // ---- enums ------------------------------------------------------------

    pub(crate) fn enumeration<E: WireEnum>(&mut self, key: &str) -> FieldResult<E> {
        let v = self.required(key)?;
        self.to_enum(key, v)
    }

    pub(crate) fn enum_or<E: WireEnum>(&mut self, key: &str, default: E) -> FieldResult<E> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => self.to_enum(key, v),
        }
    }

    pub(crate) fn opt_enum<E: WireEnum>(&mut self, key: &str) -> FieldResult<Option<E>> {
        self.take_nullable(key)
            .map(|v| self.to_enum(key, v))
            .transpose()
    }

    // ---- lists ------------------------------------------------------------

    /// Converts every element of a list with `each(fields_of_parent, element_path, value)`.
    fn map_list<T>(
        &self,
        key: &str,
        v: Value,
        mut each: impl FnMut(&Self, String, Value) -> FieldResult<T>,
    ) -> FieldResult<Vec<T>> {
        let items = self.to_list(key, v)?;
        let base = self.path(key);
        items
            .into_iter()
            .enumerate()
            .map(|(i, item)| each(self, format!("{base}[{i}]"), item))
            .collect()
    }

    fn element_string(path: String, v: Value) -> FieldResult<String> {
        match v {
            Value::String(s) => Ok(s),
            _ => Err(FieldError::new(
                path,
                FieldProblem::WrongType {
                    expected: "a string",
                },
            )),
        }
    }

    pub(crate) fn strings(&mut self, key: &str) -> FieldResult<Vec<String>> {
        let v = self.required(key)?;
        self.map_list(key, v, |_, p, item| Self::element_string(p, item))
    }

    pub(crate) fn strings_or_empty(&mut self, key: &str) -> FieldResult<Vec<String>> {
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(v) => self.map_list(key, v, |_, p, item| Self::element_string(p, item)),
        }
    }

    pub(crate) fn opt_strings(&mut self, key: &str) -> FieldResult<Option<Vec<String>>> {
        match self.take_nullable(key) {
            None => Ok(None),
            Some(v) => self
                .map_list(key, v, |_, p, item| Self::element_string(p, item))
                .map(Some),
        }
    }

    fn element_enum<E: WireEnum>(path: String, v: Value) -> FieldResult<E> {
        let text = Self::element_string(path.clone(), v)?;
        E::from_wire(&text).ok_or_else(|| {
            FieldError::new(
                path,
                FieldProblem::UnknownValue {
                    value: excerpt(&text),
                    expected: E::expected(),
                },
            )
        })
    }

    pub(crate) fn enums_or_empty<E: WireEnum>(&mut self, key: &str) -> FieldResult<Vec<E>> {
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(v) => self.map_list(key, v, |_, p, item| Self::element_enum(p, item)),
        }
    }

    pub(crate) fn opt_enums<E: WireEnum>(&mut self, key: &str) -> FieldResult<Option<Vec<E>>> {
        match self.take_nullable(key) {
            None => Ok(None),
            Some(v) => self
                .map_list(key, v, |_, p, item| Self::element_enum(p, item))
                .map(Some),
        }
    }

    /// A required list of objects, each decoded by `decode` from its own reader.
    pub(crate) fn objects<T>(
        &mut self,
        key: &str,
        decode: impl FnMut(Fields) -> FieldResult<T>,
    ) -> FieldResult<Vec<T>> {
        let v = self.required(key)?;
        self.objects_from(key, v, decode)
    }

    fn objects_from<T>(
        &self,
        key: &str,
        v: Value,
        mut decode: impl FnMut(Fields) -> FieldResult<T>,
    ) -> FieldResult<Vec<T>> {
        self.map_list(key, v, |_, path, item| match item {
            Value::Object(m) => decode(Fields::nested(m, path)),
            _ => Err(FieldError::new(
                path,
                FieldProblem::WrongType {
                    expected: "an object",
                },
            )),
        })
    }

    /// A list of arbitrary JSON objects kept as they are (schema: "list of objects").
    pub(crate) fn raw_objects_or_empty(
        &mut self,
        key: &str,
    ) -> FieldResult<Vec<Map<String, Value>>> {
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(v) => self.map_list(key, v, |_, path, item| match item {
                Value::Object(m) => Ok(m),
                _ => Err(FieldError::new(
                    path,
                    FieldProblem::WrongType {
                        expected: "an object",
                    },
                )),
            }),
        }
    }

    /// A list of exactly `N` integers, e.g. `[x, y]`.
    pub(crate) fn int_array<const N: usize>(&mut self, key: &str) -> FieldResult<[i64; N]> {
        let v = self.required(key)?;
        self.to_int_array(key, v)
    }

    pub(crate) fn int_array_or<const N: usize>(
        &mut self,
        key: &str,
        default: [i64; N],
    ) -> FieldResult<[i64; N]> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => self.to_int_array(key, v),
        }
    }

    pub(crate) fn opt_int_array<const N: usize>(
        &mut self,
        key: &str,
    ) -> FieldResult<Option<[i64; N]>> {
        self.take_nullable(key)
            .map(|v| self.to_int_array(key, v))
            .transpose()
    }

    pub(crate) fn opt_int_arrays<const N: usize>(
        &mut self,
        key: &str,
    ) -> FieldResult<Option<Vec<[i64; N]>>> {
        match self.take_nullable(key) {
            None => Ok(None),
            Some(v) => self
                .map_list(key, v, |_, path, item| int_array_at::<N>(path, item))
                .map(Some),
        }
    }

    fn to_int_array<const N: usize>(&self, key: &str, v: Value) -> FieldResult<[i64; N]> {
        int_array_at::<N>(self.path(key), v)
    }

    // ---- objects ----------------------------------------------------------

    /// A required nested object, decoded by `decode` from its own reader.
    pub(crate) fn object<T>(
        &mut self,
        key: &str,
        decode: impl FnOnce(Fields) -> FieldResult<T>,
    ) -> FieldResult<T> {
        let v = self.required(key)?;
        let map = self.to_object(key, v)?;
        decode(Fields::nested(map, self.path(key)))
    }

    /// A nested object with a default when absent (`null` is refused).
    pub(crate) fn object_or<T>(
        &mut self,
        key: &str,
        default: T,
        decode: impl FnOnce(Fields) -> FieldResult<T>,
    ) -> FieldResult<T> {
        match self.take(key) {
            None => Ok(default),
            Some(v) => {
                let map = self.to_object(key, v)?;
                decode(Fields::nested(map, self.path(key)))
            }
        }
    }

    /// A nullable nested object, decoded when present.
    pub(crate) fn opt_object<T>(
        &mut self,
        key: &str,
        decode: impl FnOnce(Fields) -> FieldResult<T>,
    ) -> FieldResult<Option<T>> {
        match self.take_nullable(key) {
            None => Ok(None),
            Some(v) => {
                let map = self.to_object(key, v)?;
                decode(Fields::nested(map, self.path(key))).map(Some)
            }
        }
    }

    /// A nullable object kept as raw JSON (e.g. `ERROR.details`).
    pub(crate) fn opt_raw_object(&mut self, key: &str) -> FieldResult<Option<Map<String, Value>>> {
        self.take_nullable(key)
            .map(|v| self.to_object(key, v))
            .transpose()
    }

    /// An object of string values (`EXECUTE_COMMAND.env`), absent → empty.
    pub(crate) fn string_map_or_empty(
        &mut self,
        key: &str,
    ) -> FieldResult<BTreeMap<String, String>> {
        let Some(v) = self.take(key) else {
            return Ok(BTreeMap::new());
        };
        let map = self.to_object(key, v)?;
        let base = self.path(key);
        map.into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k, s)),
                _ => Err(FieldError::new(
                    format!("{base}.{k}"),
                    FieldProblem::WrongType {
                        expected: "a string",
                    },
                )),
            })
            .collect()
    }

    /// An object whose values are one enum (`PERMISSIONS_CHECK_RESPONSE`).
    pub(crate) fn enum_map<E: WireEnum>(&mut self, key: &str) -> FieldResult<BTreeMap<String, E>> {
        let v = self.required(key)?;
        let map = self.to_object(key, v)?;
        let base = self.path(key);
        map.into_iter()
            .map(|(k, v)| {
                let e = Self::element_enum::<E>(format!("{base}.{k}"), v)?;
                Ok((k, e))
            })
            .collect()
    }

    /// The path a constraint error on `key` should name.
    pub(crate) fn field_path(&self, key: &str) -> String {
        self.path(key)
    }
}

fn int_array_at<const N: usize>(path: String, v: Value) -> FieldResult<[i64; N]> {
    let wrong = |path: String| {
        FieldError::new(
            path,
            FieldProblem::Constraint(format!("must be a list of exactly {N} integers")),
        )
    };
    let Value::Array(items) = v else {
        return Err(wrong(path));
    };
    if items.len() != N {
        return Err(wrong(path));
    }
    let mut out = [0i64; N];
    for (slot, item) in out.iter_mut().zip(items.iter()) {
        *slot = item.as_i64().ok_or_else(|| wrong(path.clone()))?;
    }
    Ok(out)
}
