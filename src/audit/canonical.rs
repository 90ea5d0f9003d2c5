//! The audit log's byte formats (AUDIT.md §2.5, §5): the canonical form the
//! HMAC covers, Python's `repr` of floats, and the on-disk line spelling of
//! `json.dumps(..., ensure_ascii=False)`.
//!
//! Logs must verify across implementations, so these functions reproduce the
//! reference profile exactly; they never round, reorder or normalise beyond
//! what the specification states. A value that cannot be represented
//! (non-finite float) is an error, never written approximately.

use std::fmt::{self, Write as _};

use serde_json::{Number, Value};

/// A value that has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CanonError {
    /// NaN or ±Infinity.
    NonFinite,
}

impl fmt::Display for CanonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CanonError::NonFinite => f.write_str("a float is not finite"),
        }
    }
}

impl std::error::Error for CanonError {}

/// Python's `repr(float)` (AUDIT.md §5.4): the shortest digits that round
/// trip (ties to even), fixed notation for decimal exponents −4 ≤ e < 16,
/// scientific notation otherwise, `.0` on integral values.
pub fn repr_f64(x: f64) -> Result<String, CanonError> {
    if !x.is_finite() {
        return Err(CanonError::NonFinite);
    }
    if x == 0.0 {
        return Ok(if x.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned());
    }
    let (digits, exponent) = shortest_digits(x.abs());
    let mut out = String::new();
    if x.is_sign_negative() {
        out.push('-');
    }
    let k = digits.len() as i64;
    if (-4..16).contains(&exponent) {
        if exponent >= 0 {
            let int_len = (exponent + 1) as usize;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exponent - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exponent < 0 { '-' } else { '+' });
        // Writing into a `String` cannot fail.
        let _ = write!(out, "{:02}", exponent.abs());
    }
    Ok(out)
}

/// The shortest round-trip digit string of a positive finite `x` (no
/// leading or trailing zeros) and its decimal exponent `e`, so that
/// `x = d1.d2… × 10^e`.
///
/// The digits come from serde_json's float formatter, which breaks exact
/// ties to even as Python does (Rust's own `{}` does not); only the layout is
/// done here.
fn shortest_digits(x: f64) -> (String, i64) {
    let text = Number::from_f64(x).map_or_else(|| "0".to_owned(), |n| n.to_string());
    let (mantissa, exp) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i64>().unwrap_or(0)),
        None => (text.as_str(), 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all: String = format!("{int_part}{frac_part}");
    let leading = all.len() - all.trim_start_matches('0').len();
    let digits = all[leading..].trim_end_matches('0').to_owned();
    // Position of the decimal point relative to the first significant digit.
    let point = int_part.len() as i64 - leading as i64 + exp;
    (digits, point - 1)
}

/// Appends `s` as a JSON string with the escapes of AUDIT.md §5.3 (which are
/// also Python's `ensure_ascii=False` escapes).
pub(crate) fn push_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    // Every character that is escaped is ASCII, and no byte of a longer
    // character is, so the text between two of them is copied as it is,
    // cut at character boundaries.
    let mut plain = 0;
    for (at, byte) in s.bytes().enumerate() {
        if byte == b'"' || byte == b'\\' || byte < 0x20 {
            out.push_str(&s[plain..at]);
            push_char(out, char::from(byte));
            plain = at + 1;
        }
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

/// Appends one character of a JSON string with the escapes of §5.3.
pub(crate) fn push_char(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\u{c}' => out.push_str("\\f"),
        '\r' => out.push_str("\\r"),
        // Writing into a `String` cannot fail.
        c if (c as u32) < 0x20 => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        c => out.push(c),
    }
}

/// How many bytes [`push_char`] appends for `c` (to measure a string's
/// canonical text without building it).
pub(crate) fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\t' | '\n' | '\u{c}' | '\r' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

fn push_number(out: &mut String, n: &Number) -> Result<(), CanonError> {
    if let Some(i) = n.as_i64() {
        push_integer(out, i);
    } else if let Some(u) = n.as_u64() {
        push_integer(out, u);
    } else {
        out.push_str(&repr_f64(n.as_f64().unwrap_or(f64::NAN))?);
    }
    Ok(())
}

/// Appends an integer's decimal digits, as JSON and Python write them.
pub(crate) fn push_integer(out: &mut String, n: impl Into<i128>) {
    // Writing into a `String` cannot fail.
    let _ = write!(out, "{}", n.into());
}

/// Appends `null` or the integer.
pub(crate) fn push_optional_integer(out: &mut String, n: Option<i64>) {
    match n {
        Some(n) => push_integer(out, n),
        None => out.push_str("null"),
    }
}

/// Appends `true` or `false`.
pub(crate) fn push_bool(out: &mut String, b: bool) {
    out.push_str(if b { "true" } else { "false" });
}

/// Appends `null` or the string.
pub(crate) fn push_optional_string(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_string(out, s),
        None => out.push_str("null"),
    }
}

/// The order of keys in the canonical form: UTF-16 code units (RFC 8785),
/// which the verifier uses; for the ASCII keys writers produce it is plain
/// byte order.
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Writes an object's members in canonical form, keys sorted. Of members
/// with the same key (a JSON object has none; a record's details might)
/// the last is kept, as an object built from them would keep it.
pub(crate) fn push_canonical_object<'a>(
    out: &mut String,
    members: impl Iterator<Item = (&'a String, &'a Value)>,
) -> Result<(), CanonError> {
    let mut members: Vec<_> = members.collect();
    // Stable: members with the same key keep their order.
    members.sort_by(|a, b| key_order(a.0, b.0));
    out.push('{');
    let mut first = true;
    for (n, (key, value)) in members.iter().enumerate() {
        if members.get(n + 1).is_some_and(|next| next.0 == *key) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        push_string(out, key);
        out.push(':');
        push_canonical(out, value)?;
    }
    out.push('}');
    Ok(())
}

/// The canonical form of a value (AUDIT.md §5.1): sorted keys, no
/// whitespace, reference-profile numbers.
pub fn canonical(value: &Value) -> Result<String, CanonError> {
    let mut out = String::new();
    push_canonical(&mut out, value)?;
    Ok(out)
}

fn push_canonical(out: &mut String, value: &Value) -> Result<(), CanonError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => push_bool(out, *b),
        Value::Number(n) => push_number(out, n)?,
        Value::String(s) => push_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_canonical(out, item)?;
            }
            out.push(']');
        }
        Value::Object(map) => push_canonical_object(out, map.iter())?,
    }
    Ok(())
}

/// Python's `json.dumps(value, ensure_ascii=False)`, objects in their
/// map's order (the on-disk line format, AUDIT.md §2.5): `": "` after keys,
/// `", "` between members.
#[cfg(test)]
pub(crate) fn dumps(value: &Value) -> Result<String, CanonError> {
    let mut out = String::new();
    push_dumps(&mut out, value)?;
    Ok(out)
}

pub(crate) fn push_dumps(out: &mut String, value: &Value) -> Result<(), CanonError> {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_dumps(out, item)?;
            }
            out.push(']');
        }
        Value::Object(map) => push_object(out, map.iter())?,
        other => push_canonical(out, other)?,
    }
    Ok(())
}

/// Writes `{"k": v, ...}` with members in the iterator's order.
pub(crate) fn push_object<'a>(
    out: &mut String,
    members: impl Iterator<Item = (&'a String, &'a Value)>,
) -> Result<(), CanonError> {
    out.push('{');
    for (i, (k, v)) in members.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_string(out, k);
        out.push_str(": ");
        push_dumps(out, v)?;
    }
    out.push('}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    #[test]
    fn float_repr_matches_the_specification_table() {
        let table: &[(f64, &str)] = &[
            (1712345678.123, "1712345678.123"),
            (1712345678.1234567, "1712345678.1234567"),
            (1712345680.0, "1712345680.0"),
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1.2345678901234568e20, "1.2345678901234568e+20"),
            (1e21, "1e+21"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e-7, "1e-07"),
            (2.5e-7, "2.5e-07"),
            (1e300, "1e+300"),
            (f64::from_bits(0x41d9ea00febf4000), "1739064314.9882812"),
            (9999999999999998.0, "9999999999999998.0"),
            (123.0, "123.0"),
            (-2.5, "-2.5"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
        ];
        for (x, want) in table {
            assert_eq!(repr_f64(*x).unwrap(), *want, "{x:e}");
        }
        assert_eq!(repr_f64(f64::NAN), Err(CanonError::NonFinite));
        assert_eq!(repr_f64(f64::INFINITY), Err(CanonError::NonFinite));
    }

    #[test]
    fn strings_escape_exactly_the_specified_characters() {
        let s = "\"\\\u{8}\t\n\u{c}\r\u{1}\u{1f}/\u{7f}\u{2028}é😀";
        let mut out = String::new();
        push_string(&mut out, s);
        assert_eq!(
            out,
            "\"\\\"\\\\\\b\\t\\n\\f\\r\\u0001\\u001f/\u{7f}\u{2028}é😀\""
        );
    }

    /// Runs of plain text are copied whole: the result must be the text of
    /// escaping one character at a time, wherever the escapes fall.
    #[test]
    fn strings_are_escaped_as_character_by_character() {
        let pieces = [
            "",
            "a",
            "é",
            "😀",
            "\"",
            "\\",
            "\n",
            "\u{1}",
            "\u{1f}",
            "\u{7f}",
            "\u{2028}",
            "plain text",
        ];
        let mut texts = vec![String::new()];
        for first in pieces {
            for second in pieces {
                for third in pieces {
                    texts.push(format!("{first}{second}{third}"));
                }
            }
        }
        texts.push((0u32..0x80).filter_map(char::from_u32).collect());
        for text in texts {
            let mut expected = String::from("\"");
            text.chars().for_each(|c| push_char(&mut expected, c));
            expected.push('"');
            let mut out = String::from("prefix");
            push_string(&mut out, &text);
            assert_eq!(out, format!("prefix{expected}"), "{text:?}");
        }
    }

    #[test]
    fn escaped_len_is_the_length_push_char_appends() {
        for c in (0u32..0x800)
            .chain([0x2028, 0xffff, 0x1f600])
            .filter_map(char::from_u32)
        {
            let mut out = String::new();
            push_char(&mut out, c);
            assert_eq!(escaped_len(c), out.len(), "{c:?}");
        }
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        let mut map = Map::new();
        for k in ["\u{e000}", "\u{1f600}", "é", "aa", "a", "_", "B"] {
            map.insert(k.to_owned(), Value::Null);
        }
        let text = canonical(&Value::Object(map)).unwrap();
        assert_eq!(
            text,
            "{\"B\":null,\"_\":null,\"a\":null,\"aa\":null,\"é\":null,\"\u{1f600}\":null,\"\u{e000}\":null}"
        );
    }

    #[test]
    fn integers_and_floats_stay_distinct() {
        // (An integer token `-0` cannot be told from the float -0.0 once
        // serde_json has parsed it; neither implementation writes `-0`.)
        let v: Value =
            serde_json::from_str(r#"{"a":1712345680,"b":1712345680.0,"c":0,"d":-7,"e":-0.0}"#)
                .unwrap();
        assert_eq!(
            canonical(&v).unwrap(),
            r#"{"a":1712345680,"b":1712345680.0,"c":0,"d":-7,"e":-0.0}"#
        );
        assert_eq!(
            dumps(&v).unwrap(),
            r#"{"a": 1712345680, "b": 1712345680.0, "c": 0, "d": -7, "e": -0.0}"#
        );
    }
}
