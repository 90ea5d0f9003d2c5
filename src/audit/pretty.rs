//! The indented form of one record for `audit show` (AUDIT.md §11.2): Python's
//! `json.dumps(record, indent=2, ensure_ascii=False)` of the parsed line.
//!
//! It re-indents the line's own tokens instead of going through a parsed map,
//! so members stay in on-disk order (a map would sort them) and every number
//! keeps its exact text (`1712345680.0` stays a float). Strings are decoded
//! and written again with the escapes of §5.3, so non-ASCII characters are
//! shown raw whatever escape the line used. It formats; it never validates
//! (the caller has parsed the line already) and never panics on odd input.

use super::canonical::push_string;

/// Indentation per nesting level.
const INDENT: &str = "  ";

/// Re-indents the JSON text `line` (one value, already known to parse).
pub fn indent(line: &str) -> String {
    let bytes = line.as_bytes();
    let mut out = String::with_capacity(line.len() * 2);
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'{' | b'[' => {
                let close = if b == b'{' { b'}' } else { b']' };
                let next = skip_ws(bytes, i + 1);
                if bytes.get(next) == Some(&close) {
                    // Python writes empty containers as `{}` and `[]`.
                    out.push(char::from(b));
                    out.push(char::from(close));
                    i = next + 1;
                } else {
                    out.push(char::from(b));
                    depth += 1;
                    newline(&mut out, depth);
                    i += 1;
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(char::from(b));
                i += 1;
            }
            b',' => {
                out.push(',');
                newline(&mut out, depth);
                i += 1;
            }
            b':' => {
                out.push_str(": ");
                i += 1;
            }
            b'"' => {
                let end = string_end(bytes, i);
                let token = &line[i..end];
                match serde_json::from_str::<String>(token) {
                    Ok(text) => push_string(&mut out, &text),
                    // A lone surrogate escape has no UTF-8 form: keep it.
                    Err(_) => out.push_str(token),
                }
                i = end;
            }
            _ => {
                // A number, `true`, `false` or `null`: copied as written.
                let start = i;
                while i < bytes.len()
                    && !matches!(
                        bytes[i],
                        b' ' | b'\t'
                            | b'\n'
                            | b'\r'
                            | b','
                            | b':'
                            | b']'
                            | b'}'
                            | b'['
                            | b'{'
                            | b'"'
                    )
                {
                    i += 1;
                }
                out.push_str(&line[start..i]);
            }
        }
    }
    out
}

fn newline(out: &mut String, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str(INDENT);
    }
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// The index just past the string token starting at the quote `start`
/// (the end of the text for an unterminated string). Both quotes and
/// backslashes are ASCII, so the result is a char boundary.
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::indent;

    #[test]
    fn members_keep_their_order_and_numbers_their_text() {
        let line =
            r#"{"ts": 1712345680.0, "b": [1, 2], "a": {}, "e": [], "n": {"z": null, "y": true}}"#;
        assert_eq!(
            indent(line),
            "{\n  \"ts\": 1712345680.0,\n  \"b\": [\n    1,\n    2\n  ],\n  \"a\": {},\n  \"e\": [],\n  \"n\": {\n    \"z\": null,\n    \"y\": true\n  }\n}"
        );
    }

    #[test]
    fn strings_are_written_with_raw_non_ascii_and_short_escapes() {
        assert_eq!(
            indent(r#"{"c": "caf\u00e9 \"q\"\t\u0001 \ud83d\ude00"}"#),
            "{\n  \"c\": \"café \\\"q\\\"\\t\\u0001 😀\"\n}"
        );
    }
}
