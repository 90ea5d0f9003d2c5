//! The size cap of a record's free-text fields: a request's size never
//! becomes a record's size.
//!
//! A `details` field larger than [`FIELD_CAP_BYTES`] keeps its start and is
//! followed by `<field>_bytes` (its full size) and `<field>_sha256` (the
//! SHA-256 of its full text), so the record still identifies what was asked.
//! A string is measured and hashed as its UTF-8 bytes and cut on a character
//! boundary; a list (`argv`, `env_keys`, …) or object as its canonical JSON
//! text (AUDIT.md §5), keeping the leading items that fit, the first string
//! item that does not cut to fit. Every record enters the writer through
//! `AuditLog::submit`, which applies this once. It never changes a field
//! within the cap, never adds siblings to one, and never touches the
//! top-level fields (ids are bounded where they are parsed).

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::canonical::{canonical, escaped_len};
use super::record::{Details, hex};

/// Largest size of one free-text field, in bytes.
pub const FIELD_CAP_BYTES: usize = 4096;

/// `details` with every field within the cap (AUDIT.md §3 fields plus the
/// `_bytes`/`_sha256` siblings of those that were cut).
pub fn cap_details(details: Details) -> Details {
    if details
        .0
        .iter()
        .all(|(_, v)| size_within(v, FIELD_CAP_BYTES).is_some())
    {
        return details;
    }
    let mut out = Vec::with_capacity(details.0.len() + 2);
    for (key, value) in details.0 {
        if size_within(&value, FIELD_CAP_BYTES).is_some() {
            out.push((key, value));
            continue;
        }
        let (kept, full) = match value {
            Value::String(text) => (Value::String(cut(&text, FIELD_CAP_BYTES).to_owned()), text),
            other => match canonical(&other) {
                Ok(text) => (cut_container(other), text),
                // No canonical form: sealing refuses the record anyway.
                Err(_) => {
                    out.push((key, other));
                    continue;
                }
            },
        };
        let siblings = [
            (format!("{key}_bytes"), json!(full.len())),
            (format!("{key}_sha256"), json!(hex(&Sha256::digest(full)))),
        ];
        out.push((key, kept));
        out.extend(siblings);
    }
    Details(out)
}

/// How a field is measured: a string by its UTF-8 bytes, anything else by
/// its canonical text; `None` once that exceeds `budget` (measured without
/// building the text, so a huge value costs no copy).
fn size_within(value: &Value, budget: usize) -> Option<usize> {
    match value {
        Value::String(text) => (text.len() <= budget).then_some(text.len()),
        other => canonical_len_within(other, budget),
    }
}

/// The length of `canonical(value)`, or `None` once it exceeds `budget`.
fn canonical_len_within(value: &Value, budget: usize) -> Option<usize> {
    let len = match value {
        Value::Null | Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(_) => canonical(value).map_or(usize::MAX, |t| t.len()),
        Value::String(text) => string_len_within(text, budget)?,
        Value::Array(items) => {
            let mut used = 2 + items.len().saturating_sub(1);
            for item in items {
                used += canonical_len_within(item, budget.checked_sub(used)?)?;
            }
            used
        }
        Value::Object(members) => {
            let mut used = 2 + members.len().saturating_sub(1);
            for (key, item) in members {
                used += string_len_within(key, budget.checked_sub(used)?)? + 1;
                used += canonical_len_within(item, budget.checked_sub(used)?)?;
            }
            used
        }
    };
    (len <= budget).then_some(len)
}

/// The length of a string's canonical text (quotes and escapes included),
/// or `None` once it exceeds `budget`.
fn string_len_within(text: &str, budget: usize) -> Option<usize> {
    let mut used = 2;
    for c in text.chars() {
        used += escaped_len(c);
        if used > budget {
            return None;
        }
    }
    (used <= budget).then_some(used)
}

/// The longest start of `text` of at most `max` bytes that ends on a
/// character boundary.
pub(crate) fn cut(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The longest start of `text` whose canonical text fits in `budget` bytes.
fn cut_escaped(text: &str, budget: usize) -> &str {
    let mut used = 2;
    for (at, c) in text.char_indices() {
        used += escaped_len(c);
        if used > budget {
            return &text[..at];
        }
    }
    text
}

/// A list or object reduced to the leading entries whose canonical text
/// fits in the cap; the first string entry that does not fit is cut to fit.
fn cut_container(value: Value) -> Value {
    let mut used = 2;
    // Room left for the next entry after its separator.
    let room_after =
        |used: usize, first: bool| FIELD_CAP_BYTES.saturating_sub(used + usize::from(!first));
    match value {
        Value::Array(items) => {
            let mut kept = Vec::new();
            for item in items {
                let room = room_after(used, kept.is_empty());
                match canonical_len_within(&item, room) {
                    Some(len) => {
                        used += len + usize::from(!kept.is_empty());
                        kept.push(item);
                    }
                    None => {
                        if let Value::String(text) = &item {
                            let start = cut_escaped(text, room);
                            if !start.is_empty() {
                                kept.push(Value::String(start.to_owned()));
                            }
                        }
                        break;
                    }
                }
            }
            Value::Array(kept)
        }
        Value::Object(members) => {
            let mut kept = Map::new();
            for (key, item) in members {
                let Some(key_len) = string_len_within(&key, room_after(used, kept.is_empty()))
                else {
                    break;
                };
                let room = room_after(used + key_len + 1, kept.is_empty());
                match canonical_len_within(&item, room) {
                    Some(len) => {
                        used += key_len + 1 + len + usize::from(!kept.is_empty());
                        kept.insert(key, item);
                    }
                    None => {
                        if let Value::String(text) = &item {
                            let start = cut_escaped(text, room);
                            if !start.is_empty() {
                                kept.insert(key, Value::String(start.to_owned()));
                            }
                        }
                        break;
                    }
                }
            }
            Value::Object(kept)
        }
        // Scalars always fit.
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha256_hex(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    #[test]
    fn fields_within_the_cap_are_kept_as_they_are() {
        let details = Details::new()
            .with("path", json!("x".repeat(FIELD_CAP_BYTES)))
            .with("argv", json!(["a", "b"]))
            .with("offset", json!(7));
        assert_eq!(cap_details(details.clone()), details);
    }

    #[test]
    fn a_long_string_keeps_its_start_on_a_char_boundary_with_length_and_hash() {
        let path = format!("/{}", "é".repeat(3000));
        let details = cap_details(
            Details::new()
                .with("path", json!(path))
                .with("follow_symlinks", json!(false)),
        );
        let keys: Vec<&str> = details.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["path", "path_bytes", "path_sha256", "follow_symlinks"]
        );
        let kept = details.0[0].1.as_str().unwrap();
        assert_eq!(kept.len(), FIELD_CAP_BYTES - 1);
        assert!(path.starts_with(kept));
        assert_eq!(details.0[1].1, json!(path.len()));
        assert_eq!(details.0[2].1, json!(sha256_hex(path.as_bytes())));
    }

    #[test]
    fn a_long_list_keeps_the_items_that_fit_and_cuts_the_one_that_crosses() {
        let argv = json!(["sh", "-c", "\u{1}".repeat(FIELD_CAP_BYTES), "never"]);
        let full = canonical(&argv).unwrap();
        let details = cap_details(Details::new().with("argv", argv));
        let kept = &details.0[0].1;
        let text = canonical(kept).unwrap();
        // Escapes count: each U+0001 is six bytes of canonical text.
        assert!(text.len() <= FIELD_CAP_BYTES && text.len() > FIELD_CAP_BYTES - 6);
        assert_eq!(kept[0], "sh");
        assert_eq!(kept.as_array().unwrap().len(), 3);
        assert_eq!(details.0[1], ("argv_bytes".into(), json!(full.len())));
        assert_eq!(
            details.0[2],
            ("argv_sha256".into(), json!(sha256_hex(full.as_bytes())))
        );
    }

    #[test]
    fn a_flood_of_empty_items_is_capped_too() {
        let keys = json!(vec![""; 100_000]);
        let details = cap_details(Details::new().with("env_keys", keys));
        let text = canonical(&details.0[0].1).unwrap();
        assert!(text.len() <= FIELD_CAP_BYTES, "{}", text.len());
        assert_eq!(details.0[1].1, json!(2 + 100_000 * 3 - 1));
    }

    #[test]
    fn a_large_object_keeps_the_members_that_fit() {
        let mut map = Map::new();
        for i in 0..1000 {
            map.insert(format!("k{i:04}"), json!("v".repeat(10)));
        }
        let full = canonical(&Value::Object(map.clone())).unwrap();
        let details = cap_details(Details::new().with("permissions", Value::Object(map)));
        let text = canonical(&details.0[0].1).unwrap();
        assert!(text.len() <= FIELD_CAP_BYTES && text.len() > FIELD_CAP_BYTES - 30);
        assert_eq!(details.0[1].1, json!(full.len()));
    }
}
