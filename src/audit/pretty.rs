//! Records shown as JSON on a terminal: the indented form of one record for
//! `audit show` (AUDIT.md §11.2), Python's
//! `json.dumps(record, indent=2, ensure_ascii=False)` of the parsed line, and
//! the record line itself for `audit tail --json` ([`terminal_safe_line`]).
//!
//! It re-indents the line's own tokens instead of going through a parsed map,
//! so members stay in on-disk order (a map would sort them) and every number
//! keeps its exact text (`1712345680.0` stays a float). Strings are decoded
//! and written again with the escapes of §5.3, so non-ASCII characters are
//! shown raw whatever escape the line used — except the characters that
//! would drive or deceive the terminal (C1 controls, DEL, bidi overrides,
//! zero-width characters, …, see [`is_non_printing`]), which are written as
//! JSON `\uXXXX` escapes: the output is still JSON meaning the same record.
//! It formats; it never validates (the caller has parsed the line already),
//! never panics on odd input, and never writes to the log.

use super::canonical::push_char;
use crate::text::is_non_printing;

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
                    Ok(text) => {
                        out.push('"');
                        for c in text.chars() {
                            push_shown_char(&mut out, c);
                        }
                        out.push('"');
                    }
                    // A lone surrogate escape has no UTF-8 form: keep the
                    // token's own escapes, still hiding nothing raw.
                    Err(_) => {
                        for c in token.chars() {
                            if is_non_printing(c) {
                                push_shown_char(&mut out, c);
                            } else {
                                out.push(c);
                            }
                        }
                    }
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

/// The record line `line` (one JSON value, already known to parse) as
/// `audit tail --json` prints it: unchanged, except that every non-printing
/// character (see [`is_non_printing`]) inside a string becomes a JSON
/// escape and one between tokens (a tab or CR, the only ones JSON allows
/// there) a space. The result is still one line of JSON meaning the same
/// record; a line with nothing to hide comes back borrowed, byte for byte.
pub fn terminal_safe_line(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.chars().any(is_non_printing) {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 16);
    let mut in_string = false;
    let mut after_backslash = false;
    for c in line.chars() {
        if !in_string {
            in_string = c == '"';
            out.push(if is_non_printing(c) { ' ' } else { c });
        } else if after_backslash {
            // In valid JSON the escaped character is printable ASCII
            // (`"`, `\\`, `/`, `b`, `f`, `n`, `r`, `t` or `u`).
            after_backslash = false;
            out.push(c);
        } else {
            match c {
                '\\' => {
                    after_backslash = true;
                    out.push(c);
                }
                '"' => {
                    in_string = false;
                    out.push(c);
                }
                c if is_non_printing(c) => push_shown_char(&mut out, c),
                c => out.push(c),
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One character of a shown string: the escapes of §5.3, and a `\uXXXX`
/// escape (a surrogate pair above U+FFFF) for the other non-printing ones.
fn push_shown_char(out: &mut String, c: char) {
    if u32::from(c) < 0x20 || !is_non_printing(c) {
        push_char(out, c);
        return;
    }
    let mut units = [0u16; 2];
    for unit in c.encode_utf16(&mut units) {
        out.push_str(&format!("\\u{unit:04x}"));
    }
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
    use super::{indent, terminal_safe_line};

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

    #[test]
    fn terminal_controls_and_bidi_characters_are_shown_as_json_escapes() {
        let line = "{\"p\": \"\u{9b}2J\u{7f}\u{85}\u{202e}x\u{2066}\u{200b}\u{e0041}\\u001b é\"}";
        let shown = indent(line);
        assert_eq!(
            shown,
            "{\n  \"p\": \"\\u009b2J\\u007f\\u0085\\u202ex\\u2066\\u200b\\udb40\\udc41\\u001b é\"\n}"
        );
        // Still JSON, and the same value.
        let parsed: serde_json::Value = serde_json::from_str(&shown).unwrap();
        let original: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(parsed, original);
    }

    #[test]
    fn an_unparseable_string_token_hides_nothing_raw() {
        assert_eq!(
            indent("{\"p\": \"\\ud800\u{202e}\"}"),
            "{\n  \"p\": \"\\ud800\\u202e\"\n}"
        );
    }

    #[test]
    fn a_line_with_nothing_to_hide_is_kept_byte_for_byte() {
        let line =
            r#"{"ts": 1712345680.0, "op": "FILE_READ", "details": {"path": "/tmp/caf\u00e9 é\n"}}"#;
        assert!(matches!(
            terminal_safe_line(line),
            std::borrow::Cow::Borrowed(kept) if kept == line
        ));
    }

    #[test]
    fn a_json_line_hides_controls_bidi_and_separators_but_keeps_its_value() {
        let line = "{\"p\":\t\"a\u{9b}2J\u{202e}b\u{2028}c\u{2066}\u{200b}\u{e0041}\\\"\u{85}\", \"q\": [\"\u{7f}\"]}\r";
        let shown = terminal_safe_line(line);
        assert_eq!(
            shown,
            "{\"p\": \"a\\u009b2J\\u202eb\\u2028c\\u2066\\u200b\\udb40\\udc41\\\"\\u0085\", \"q\": [\"\\u007f\"]} "
        );
        assert!(!shown.chars().any(crate::text::is_non_printing));
        let parsed: serde_json::Value = serde_json::from_str(&shown).unwrap();
        let original: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(parsed, original);
    }
}
